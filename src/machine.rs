//! This machine as cgperf sees it: where the cgroup2 tree, the PMUs and
//! tracefs are, and which CPUs are online. Found once by [`Machine::discover`]
//! at start (of the daemon, `cgperf check`, `list` and `stat`); plans are
//! built against the [`Machine`] it gives.

use crate::discovery::CgroupFs;
use crate::metrics::{Catalog, Literals};
use crate::tracefs::Tracefs;
use crate::{cpus, events};
use anyhow::Context;
use std::path::{Path, PathBuf};

/// Where the kernel describes each CPU (the MIDR of Arm cores).
const CPU_SYSFS: &str = "/sys/devices/system/cpu";
use std::sync::Arc;

/// Where the machine-dependent inputs of a plan come from.
#[derive(Debug, Clone)]
pub struct Machine {
    /// `/sys/bus/event_source/devices`.
    pub pmu_root: PathBuf,
    /// tracefs, or why it is unavailable.
    pub tracefs: Result<Tracefs, String>,
    /// The directory of the root cgroup, used to probe groups.
    pub probe_cgroup: PathBuf,
    /// A CPU that is online, used to probe groups.
    pub probe_cpu: u32,
    /// The core PMUs of a hybrid CPU (none otherwise): where each event of
    /// the CPU is opened.
    pub cores: Arc<events::CorePmus>,
    /// The event tables of this CPU's model: the vendor's event names.
    pub tables: Arc<events::EventTables>,
    /// The metrics of those tables, with this machine's literals.
    pub metrics: Arc<Catalog>,
}

/// What [`Machine::discover`] finds.
#[derive(Debug)]
pub struct Discovered {
    /// The cgroup2 mount.
    pub cgroupfs: CgroupFs,
    /// The CPUs online now, ascending.
    pub cpus: Vec<u32>,
    /// The inputs of plans: PMUs, tracefs, and where to probe.
    pub machine: Machine,
}

/// The event tables of this machine's CPU and their metrics, read once at
/// start: before the config (whose `metrics:` may name the tables'), and
/// handed to [`Machine::discover`].
#[derive(Debug, Clone)]
pub struct CpuTables {
    /// The vendor's event names.
    pub events: Arc<events::EventTables>,
    /// Their metrics, with this machine's literals.
    pub metrics: Arc<Catalog>,
}

impl CpuTables {
    /// Reads the tables of this machine's CPU: from `dir`
    /// (`--event-tables`) where it has them, else the embedded ones. A
    /// table there that cannot be read is an error naming the file.
    pub fn read(dir: Option<&Path>) -> anyhow::Result<Self> {
        let ident = events::CpuIdent::read(Path::new("/proc/cpuinfo"), Path::new(CPU_SYSFS));
        let events = events::EventTables::load(Path::new(events::PMU_ROOT), &ident, dir)
            .context("reading the event tables (--event-tables)")?;
        let online = cpus::online().unwrap_or_default();
        let metrics = Catalog::of(&events, follow_literals(&online));
        Ok(Self {
            events: Arc::new(events),
            metrics: Arc::new(metrics),
        })
    }
}

impl Machine {
    /// Finds the cgroup2 mount, the online CPUs, the PMUs and tracefs; the
    /// CPU's `tables` were read already ([`CpuTables::read`]).
    ///
    /// Fails without a cgroup2 mount or without an online CPU: nothing can
    /// be counted then. tracefs may be missing (its reason is kept).
    pub fn discover(tables: CpuTables) -> anyhow::Result<Discovered> {
        let cgroupfs = CgroupFs::locate().map_err(anyhow::Error::msg)?;
        let cpus = cpus::online().map_err(anyhow::Error::msg)?;
        let probe_cpu = *cpus.first().context("no CPU is online")?;
        let pmu_root = PathBuf::from(events::PMU_ROOT);
        let cores = events::CorePmus::discover(&pmu_root).unwrap_or_else(|e| {
            tracing::warn!(
                "cannot tell the core types of this hybrid CPU apart ({e}): events of the CPU \
                 are opened as on a CPU with one core type, and the kernel may refuse them on \
                 some CPUs"
            );
            events::CorePmus::default()
        });
        let machine = Machine {
            tables: tables.events,
            metrics: tables.metrics,
            pmu_root,
            tracefs: Tracefs::locate(),
            probe_cgroup: cgroupfs.root().to_path_buf(),
            probe_cpu,
            cores: Arc::new(cores),
        };
        Ok(Discovered {
            cgroupfs,
            cpus,
            machine,
        })
    }
}

/// The literals of this machine with the CPUs `online` (that is, now),
/// made the ones every metric is computed with from now on.
pub fn follow_literals(online: &[u32]) -> Literals {
    let now = literals(online);
    crate::metrics::set_literals(now.clone());
    now
}

/// The values of perf's metric literals on this machine, whose online CPUs
/// are `online`: its topology from sysfs, the TSC's frequency from the
/// CPU's model name (`... @ 2.10GHz`) where it gives one, as perf reads it.
fn literals(online: &[u32]) -> Literals {
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let topology = |cpu: u32, file: &str| {
        read(&Path::new(CPU_SYSFS).join(format!("cpu{cpu}/topology/{file}")))
            .and_then(|t| t.trim().parse::<i64>().ok())
            .unwrap_or(0)
    };
    let mut packages = Vec::new();
    let mut dies = Vec::new();
    let mut cores = Vec::new();
    for &cpu in online {
        let package = topology(cpu, "physical_package_id");
        let die = (package, topology(cpu, "die_id"));
        let core = (die, topology(cpu, "core_id"));
        packages.push(package);
        dies.push(die);
        cores.push(core);
    }
    let count = |n: usize| n.max(1) as f64;
    packages.sort_unstable();
    packages.dedup();
    dies.sort_unstable();
    dies.dedup();
    cores.sort_unstable();
    cores.dedup();
    let flag = |path: &str| read(Path::new(path)).is_some_and(|t| t.trim() == "1");
    Literals {
        smt_on: flag("/sys/devices/system/cpu/smt/active"),
        num_cpus_online: count(online.len()),
        num_cores: count(cores.len()),
        num_dies: count(dies.len()),
        num_packages: count(packages.len()),
        system_tsc_freq: read(Path::new("/proc/cpuinfo")).and_then(|c| tsc_from_model_name(&c)),
        nmi_watchdog: flag("/proc/sys/kernel/nmi_watchdog"),
    }
}

/// The frequency in Hz that an x86 model name states (`Intel(R) Xeon(R)
/// Gold 6130 CPU @ 2.10GHz`), which is the TSC's.
fn tsc_from_model_name(cpuinfo: &str) -> Option<f64> {
    let name = cpuinfo.lines().find_map(|l| {
        l.strip_prefix("model name")?
            .split_once(':')
            .map(|(_, v)| v)
    })?;
    let (_, after) = name.rsplit_once('@')?;
    let ghz: f64 = after.trim().strip_suffix("GHz")?.trim().parse().ok()?;
    (ghz > 0.0).then_some(ghz * 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tsc_frequency_is_the_one_the_model_name_states() {
        let intel = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz\n";
        assert_eq!(tsc_from_model_name(intel), Some(2.1e9));
        let amd = "model name\t: AMD EPYC 9B14\n";
        assert_eq!(tsc_from_model_name(amd), None);
        assert_eq!(tsc_from_model_name("model name : x @ GHz"), None);
        assert_eq!(tsc_from_model_name(""), None);
    }

    #[test]
    fn this_machines_literals_count_what_it_has() {
        let online = cpus::online().expect("online CPUs");
        let l = literals(&online);
        assert_eq!(l.num_cpus_online, online.len() as f64);
        assert!(
            l.num_cores >= 1.0 && l.num_cores <= l.num_cpus_online,
            "{l:?}"
        );
        assert!(
            l.num_packages >= 1.0 && l.num_packages <= l.num_dies,
            "{l:?}"
        );
        let smt = std::fs::read_to_string("/sys/devices/system/cpu/smt/active")
            .is_ok_and(|t| t.trim() == "1");
        assert_eq!(l.smt_on, smt);
    }
}
