//! The core PMUs of hybrid CPUs: Intel's `cpu_core` and `cpu_atom`, Arm's
//! big.LITTLE clusters (`armv8_cortex_a76`, `armv8_cortex_a55`, ...). Each
//! counts only on its own CPUs, so an event of the CPU is opened on each
//! CPU with the type of the PMU that CPU belongs to.
//!
//! A core PMU is, as perf decides it, one whose sysfs directory has a `cpus`
//! file (uncore PMUs have `cpumask` instead), or the usual `cpu`. With one
//! core PMU nothing changes: the generalized events (`cycles`, cache events)
//! and raw events (`r003c`) go to it as they always have.
//!
//! With two or more, cgperf opens every generalized event with the PMU's
//! type in the upper 32 bits of `config` (the kernel's "extended type",
//! `PERF_PMU_TYPE_SHIFT`), as `perf stat` does: on each CPU, the PMU of
//! that CPU. An event of one core PMU (`cpu_atom/event=0xc0/`) is opened
//! only on that PMU's CPUs. So is a raw event (`r00c0`): its type is the
//! one the kernel gives its first core PMU (Intel's `cpu_core` is
//! PERF_TYPE_RAW), and raw encodings differ between core types anyway.
//! The counts of all CPUs add up into one series, as for any event: an
//! interval's `cycles` of a cgroup are its cycles on every core type; the
//! `cpu` label (`per_cpu: true`) tells the core types apart where a user
//! needs them per type.

use std::path::Path;

use crate::cpus::parse_list;
use crate::events::{EventAttr, PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE};

/// Whether `name` under `root` is a PMU of the CPU's cores, by perf's rule:
/// the usual `cpu`, or a PMU with a `cpus` file (uncore PMUs have a
/// `cpumask` instead).
pub(crate) fn is_core_pmu(root: &Path, name: &str) -> bool {
    name == "cpu" || root.join(name).join("cpus").exists()
}

/// The core PMUs under `root` by [`is_core_pmu`], `cpu_core` first (where a
/// name both core types know resolves), then by name; none on a machine
/// without a hardware PMU.
pub(crate) fn core_pmu_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| is_core_pmu(root, name))
        .collect();
    names.sort_by(|a, b| (a != "cpu_core", a).cmp(&(b != "cpu_core", b)));
    names
}

/// Where the PMU's type goes in the `config` of a generalized event
/// (`PERF_PMU_TYPE_SHIFT` in the kernel's uapi).
const PMU_TYPE_SHIFT: u32 = 32;

/// One core PMU: its sysfs name, its `perf_event_attr.type` and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorePmu {
    /// The PMU's directory name, e.g. `cpu_atom`.
    pub name: String,
    /// Its `type` file.
    pub type_: u32,
    /// Its `cpus` file, ascending.
    pub cpus: Vec<u32>,
}

/// The core PMUs of a hybrid CPU; none on a CPU with one kind of core
/// (then [`CorePmus::on_cpu`] changes nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CorePmus {
    pmus: Vec<CorePmu>,
}

impl CorePmus {
    /// Reads the core PMUs under `root` (normally [`super::PMU_ROOT`]).
    /// Fails, naming the file, when a core PMU's `type` or `cpus` cannot be
    /// read or parsed.
    pub fn discover(root: &Path) -> Result<Self, String> {
        let mut names: Vec<String> = std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name != "cpu" && is_core_pmu(root, name))
            .collect();
        names.sort();
        if names.len() < 2 {
            return Ok(Self::default());
        }
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
        };
        let mut pmus = Vec::with_capacity(names.len());
        for name in names {
            let dir = root.join(&name);
            let type_path = dir.join("type");
            let type_ = read(&type_path)?
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("{}: expected a decimal PMU type", type_path.display()))?;
            let cpus_path = dir.join("cpus");
            let cpus = parse_list(&read(&cpus_path)?)
                .map_err(|e| format!("{}: {e}", cpus_path.display()))?;
            pmus.push(CorePmu { name, type_, cpus });
        }
        Ok(Self { pmus })
    }

    /// The core PMUs, by name; empty unless the CPU is hybrid.
    pub fn pmus(&self) -> &[CorePmu] {
        &self.pmus
    }

    /// `attr` as it is opened on `cpu`, or `None` where it cannot count:
    /// on a hybrid CPU, a generalized event gets the extended type of the
    /// PMU of `cpu` (none where no core PMU lists `cpu`), and an event of
    /// one core PMU counts only on that PMU's CPUs. Everything else
    /// (software events, tracepoints, probes, uncore PMUs) is unchanged.
    pub fn on_cpu(&self, attr: &EventAttr, cpu: u32) -> Option<EventAttr> {
        if self.pmus.is_empty() {
            return Some(*attr);
        }
        let owner = || {
            self.pmus
                .iter()
                .find(|p| p.cpus.binary_search(&cpu).is_ok())
        };
        match attr.type_ {
            PERF_TYPE_HARDWARE | PERF_TYPE_HW_CACHE => owner().map(|pmu| EventAttr {
                config: attr.config | (u64::from(pmu.type_) << PMU_TYPE_SHIFT),
                ..*attr
            }),
            type_ => match self.pmus.iter().find(|p| p.type_ == type_) {
                // Another core type's CPU: the event's encoding there, if
                // that type's table has the event too.
                Some(pmu) if pmu.cpus.binary_search(&cpu).is_err() => {
                    let other = attr.other_core?;
                    let there = self.pmus.iter().find(|p| p.type_ == other.type_)?;
                    there.cpus.binary_search(&cpu).ok()?;
                    Some(EventAttr {
                        type_: other.type_,
                        config: other.config[0],
                        config1: other.config[1],
                        config2: other.config[2],
                        ..*attr
                    })
                }
                _ => Some(*attr),
            },
        }
    }

    /// The attrs of a group as opened on `cpu`, or `None` where one of
    /// them cannot count.
    pub fn group_on_cpu(&self, attrs: &[EventAttr], cpu: u32) -> Option<Vec<EventAttr>> {
        attrs.iter().map(|a| self.on_cpu(a, cpu)).collect()
    }

    /// The first of `cpus` where every one of `attrs` counts, with the
    /// attrs as opened there: where a group is probed.
    pub fn first_cpu_for(
        &self,
        attrs: &[EventAttr],
        cpus: impl IntoIterator<Item = u32>,
    ) -> Option<(u32, Vec<EventAttr>)> {
        cpus.into_iter()
            .find_map(|cpu| Some((cpu, self.group_on_cpu(attrs, cpu)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT, parse_event};
    use std::path::PathBuf;

    /// Writes a PMU sysfs tree: (directory name, type, `cpus` or None).
    fn tree(pmus: &[(&str, u32, Option<&str>)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (name, type_, cpus) in pmus {
            let dir = root.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("type"), format!("{type_}\n")).unwrap();
            if let Some(cpus) = cpus {
                std::fs::write(dir.join("cpus"), format!("{cpus}\n")).unwrap();
            }
        }
        root
    }

    /// An Intel hybrid (Alder Lake, 8 P-cores with SMT and 8 E-cores): the
    /// kernel registers `cpu_core` as PERF_TYPE_RAW and `cpu_atom` with a
    /// dynamic type; uncore PMUs have a `cpumask`, not `cpus`.
    fn alder_lake() -> tempfile::TempDir {
        let root = tree(&[
            ("cpu_core", 4, Some("0-15")),
            ("cpu_atom", 10, Some("16-23")),
            ("software", 1, None),
            ("tracepoint", 2, None),
            ("uncore_imc_free_running_0", 15, None),
            ("msr", 11, None),
        ]);
        std::fs::write(root.path().join("uncore_imc_free_running_0/cpumask"), "0\n").unwrap();
        root
    }

    fn attr(text: &str) -> EventAttr {
        parse_event(text)
            .unwrap()
            .resolve(
                Path::new("/nonexistent"),
                &crate::events::EventTables::none(),
            )
            .unwrap()
    }

    #[test]
    fn finds_the_core_pmus_of_a_hybrid_cpu_and_none_elsewhere() {
        let root = alder_lake();
        let cores = CorePmus::discover(root.path()).unwrap();
        let names: Vec<&str> = cores.pmus().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["cpu_atom", "cpu_core"]);
        assert_eq!(cores.pmus()[0].cpus, (16..=23).collect::<Vec<_>>());
        assert_eq!(cores.pmus()[1].type_, 4);
        // One core PMU, `cpu` (x86 without hybrid) or one Arm PMU with
        // `cpus`: nothing to place.
        for single in [
            tree(&[("cpu", 4, None), ("software", 1, None)]),
            tree(&[("armv8_pmuv3_0", 8, Some("0-63")), ("software", 1, None)]),
        ] {
            assert_eq!(
                CorePmus::discover(single.path()).unwrap(),
                CorePmus::default()
            );
        }
        // No PMU directory at all (a container without sysfs).
        let nowhere = PathBuf::from("/nonexistent");
        assert_eq!(CorePmus::discover(&nowhere).unwrap(), CorePmus::default());
    }

    #[test]
    fn a_broken_core_pmu_is_named_in_the_error() {
        let root = tree(&[("cpu_core", 4, Some("0-3")), ("cpu_atom", 10, Some("4-x"))]);
        let e = CorePmus::discover(root.path()).unwrap_err();
        assert!(e.contains("cpu_atom/cpus") && e.contains("4-x"), "{e}");
        let root = tree(&[("cpu_core", 4, Some("0-3")), ("cpu_atom", 10, Some("4-7"))]);
        std::fs::write(root.path().join("cpu_atom/type"), "ten\n").unwrap();
        let e = CorePmus::discover(root.path()).unwrap_err();
        assert!(e.contains("cpu_atom/type"), "{e}");
    }

    #[test]
    fn generalized_and_raw_events_go_to_the_pmu_of_each_cpu() {
        let root = alder_lake();
        let cores = CorePmus::discover(root.path()).unwrap();
        let cycles = attr("cycles:u");
        let on_p = cores.on_cpu(&cycles, 3).unwrap();
        let on_e = cores.on_cpu(&cycles, 20).unwrap();
        assert_eq!((on_p.type_, on_p.config), (0, 4 << 32));
        assert_eq!((on_e.type_, on_e.config), (0, (10 << 32)));
        assert!(on_e.exclude_kernel && on_e.exclude_guest, "modifiers kept");
        // A cache event keeps its cache, op and result bits.
        let misses = attr("LLC-load-misses");
        assert_eq!(
            cores.on_cpu(&misses, 17).unwrap().config,
            misses.config | (10 << 32)
        );
        // A raw event is one of the PMU registered as PERF_TYPE_RAW,
        // `cpu_core`: it counts on the P-cores only.
        let raw = attr("r00c0");
        assert_eq!(cores.on_cpu(&raw, 0), Some(raw));
        assert_eq!(cores.on_cpu(&raw, 16), None);
        // A CPU that no core PMU lists counts no event of the CPU.
        assert_eq!(cores.on_cpu(&cycles, 24), None);
    }

    #[test]
    fn an_event_of_one_core_pmu_counts_only_on_its_cpus() {
        let root = alder_lake();
        let cores = CorePmus::discover(root.path()).unwrap();
        let atom = EventAttr::new(10, 0xc0);
        assert_eq!(cores.on_cpu(&atom, 16), Some(atom));
        assert_eq!(cores.on_cpu(&atom, 0), None);
        let core = EventAttr::new(4, 0xc0);
        assert_eq!(cores.on_cpu(&core, 0), Some(core));
        assert_eq!(cores.on_cpu(&core, 16), None);
        // Software events, tracepoints and uncore PMUs count everywhere,
        // unchanged.
        for other in [
            EventAttr::new(PERF_TYPE_SOFTWARE, 1),
            EventAttr::new(PERF_TYPE_TRACEPOINT, 321),
            EventAttr::new(15, 0xff),
        ] {
            assert_eq!(cores.on_cpu(&other, 0), Some(other));
            assert_eq!(cores.on_cpu(&other, 23), Some(other));
        }
    }

    #[test]
    fn a_group_counts_where_all_its_events_do() {
        let root = alder_lake();
        let cores = CorePmus::discover(root.path()).unwrap();
        let group = [attr("cycles"), attr("instructions"), attr("task-clock")];
        let on_e = cores.group_on_cpu(&group, 16).unwrap();
        assert_eq!(on_e[1].config, 1 | (10 << 32));
        assert_eq!(on_e[2], group[2]);
        // Events of both core PMUs in one group count nowhere.
        let mixed = [EventAttr::new(4, 0x3c), EventAttr::new(10, 0x3c)];
        assert_eq!(cores.first_cpu_for(&mixed, 0..24), None);
        // An E-core group is probed on the first E-core.
        let atom = [EventAttr::new(10, 0x3c), attr("cycles")];
        let (cpu, attrs) = cores.first_cpu_for(&atom, 0..24).unwrap();
        assert_eq!(cpu, 16);
        assert_eq!(attrs[1].config, 10 << 32);
        // Without a hybrid CPU, everything counts on the first CPU as is.
        let plain = CorePmus::default();
        assert_eq!(
            plain.first_cpu_for(&mixed, [5, 6]),
            Some((5, mixed.to_vec()))
        );
    }

    #[test]
    fn guests_are_left_out_on_core_pmus_only() {
        let root = tree(&[
            ("cpu", 4, None),
            ("cpu_atom", 10, Some("4-7")),
            ("msr", 11, None),
            ("power", 12, None),
        ]);
        for pmu in ["cpu", "cpu_atom", "msr", "power"] {
            std::fs::create_dir(root.path().join(pmu).join("format")).unwrap();
            std::fs::write(root.path().join(pmu).join("format/event"), "config:0-7\n").unwrap();
        }
        let of = |text: &str| {
            let attr = parse_event(text)
                .unwrap()
                .resolve(root.path(), &crate::events::EventTables::none())
                .unwrap();
            (attr.exclude_guest, attr.exclude_host)
        };
        assert_eq!(of("cpu/event=0x3c/"), (true, false));
        assert_eq!(of("cpu_atom/event=0x3c/"), (true, false));
        assert_eq!(of("cycles"), (true, false));
        // msr, power and uncore PMUs refuse any exclude bit.
        assert_eq!(of("msr/event=0x1/"), (false, false));
        assert_eq!(of("power/event=0x2/"), (false, false));
        // Asked for, it is passed on (and the kernel's refusal reported).
        assert_eq!(of("msr/event=0x1/G"), (false, true));
    }

    #[test]
    fn arm_big_little_clusters_are_placed_the_same_way() {
        let root = tree(&[
            ("armv8_cortex_a55", 8, Some("0-3")),
            ("armv8_cortex_a76", 9, Some("4-7")),
            ("software", 1, None),
        ]);
        let cores = CorePmus::discover(root.path()).unwrap();
        let cycles = attr("cycles");
        assert_eq!(cores.on_cpu(&cycles, 0).unwrap().config, 8 << 32);
        assert_eq!(cores.on_cpu(&cycles, 7).unwrap().config, 9 << 32);
        let stall = EventAttr::new(9, 0x24);
        assert_eq!(cores.on_cpu(&stall, 2), None);
        assert_eq!(cores.on_cpu(&stall, 5), Some(stall));
    }
}
