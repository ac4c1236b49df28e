//! RAPL through perf's `power/` PMU: `energy-pkg`, `energy-cores`,
//! `energy-ram` and `energy-psys` (AMD has `energy-pkg`), each counted
//! system-wide on the CPUs of the PMU's `cpumask` (one per socket), in
//! units of the event's `.scale` Joules (`.unit` is `Joules`). The kernel
//! keeps the 64-bit total, so a reading never wraps. `energy-psys` counts
//! the whole platform's energy, whichever CPU reads it: it is read once,
//! on the first CPU of the `cpumask`, not once per socket (which would
//! count the platform as many times as it has sockets).

use super::{Busy, Carry, Channel, Meter};
use crate::backend::budget::{Fds, Held};
use crate::events::{EventAttr, EventTables, cpumask, parse_event, scale_unit};
use crate::perf::{CounterGroup, Target};
use crate::snapshot::Scope;
use std::path::Path;

/// Where the kernel describes the `power/` PMU.
pub const POWER_PMU: &str = "/sys/bus/event_source/devices/power";

/// The `power/` events cgperf reads, and their domains.
const EVENTS: [(&str, &str); 4] = [
    ("energy-pkg", "pkg"),
    ("energy-cores", "cores"),
    ("energy-ram", "ram"),
    ("energy-psys", "psys"),
];

/// One `power/` event on one CPU of its `cpumask`, as sysfs describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Described {
    pub channel: Channel,
    pub attr: EventAttr,
    pub cpu: u32,
    /// Joules per unit of count.
    pub scale: f64,
}

/// Every `power/` event of the PMU under `pmu_root` (named `power`), on
/// each CPU of its `cpumask`, the socket of each from `cpu_root`'s
/// topology.
pub(crate) fn describe(pmu_root: &Path, cpu_root: &Path) -> Result<Vec<Described>, String> {
    let power = pmu_root.join("power");
    if !power.is_dir() {
        return Err(format!(
            "{} is absent: this kernel or machine has no RAPL PMU (most virtual machines)",
            power.display()
        ));
    }
    let tables = EventTables::default();
    let mut out = Vec::new();
    for (name, domain) in EVENTS {
        if !power.join("events").join(name).is_file() {
            continue;
        }
        let event = parse_event(&format!("power/{name}/")).map_err(|e| e.to_string())?;
        let attr = event
            .resolve(pmu_root, &tables)
            .map_err(|e| e.to_string())?;
        let cpus = cpumask(pmu_root, &event)
            .map_err(|e| e.to_string())?
            .unwrap_or_else(|| vec![0]);
        let scale = scale_unit(pmu_root, &event)
            .map_err(|e| e.to_string())?
            .filter(|s| s.unit.eq_ignore_ascii_case("joules"))
            .ok_or_else(|| format!("power/{name}/ has no `.unit` of Joules"))?
            .scale;
        // A scale that is no positive number would make every reading
        // nothing, or infinite.
        if !(scale.is_finite() && scale > 0.0) {
            return Err(format!(
                "power/{name}/ has a `.scale` of {scale}, not a positive number of Joules"
            ));
        }
        let scopes = crate::host::scope_of_cpumask(cpu_root, &cpus);
        let once = if domain == "psys" { 1 } else { cpus.len() };
        for (cpu, scope) in cpus.into_iter().zip(scopes).take(once) {
            let socket = match scope {
                Scope::Socket(s) | Scope::Die { socket: s, .. } => s,
                Scope::Cpu(_) | Scope::Machine => 0,
            };
            out.push(Described {
                channel: Channel { domain, socket },
                attr,
                cpu,
                scale,
            });
        }
    }
    if out.is_empty() {
        return Err(format!("{} has no energy-* event", power.display()));
    }
    Ok(out)
}

/// A counter's readings turned into micro-Joules.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    last: Option<u64>,
    carry: Carry,
}

impl Reading {
    /// The micro-Joules since the last count; the first starts counting.
    /// A count below the last (the counter was opened again) counts from 0.
    pub(crate) fn next(&mut self, count: u64, scale: f64) -> u64 {
        let delta = match self.last {
            None => 0,
            Some(last) => count.checked_sub(last).unwrap_or(count),
        };
        self.last = Some(count);
        self.carry.micro_joules(delta, scale)
    }
}

/// The `power/` PMU's counters.
#[derive(Debug)]
pub struct PowerPmu {
    channels: Vec<Channel>,
    counters: Vec<(Held, f64, Reading)>,
}

impl PowerPmu {
    /// Opens every `power/` event of `pmu` (normally [`POWER_PMU`]), its
    /// descriptors counted in `fds`; refused where they would not fit in
    /// its budget.
    pub fn open(pmu: &Path, fds: &Fds) -> Result<Self, String> {
        let root = pmu.parent().unwrap_or(Path::new("/"));
        let described = describe(root, Path::new(crate::host::CPU_ROOT))?;
        if !fds.fit(described.len() as u64) {
            return Err(format!(
                "its {} descriptors do not fit in the descriptor budget",
                described.len()
            ));
        }
        let mut channels = Vec::new();
        let mut counters = Vec::new();
        for d in described {
            let group = CounterGroup::open(std::slice::from_ref(&d.attr), Target::AllTasks, d.cpu)
                .map_err(|e| {
                    format!("power/{}/ on CPU {}: {}", d.channel.domain, d.cpu, e.errno)
                })?;
            channels.push(d.channel);
            counters.push((fds.hold(group), d.scale, Reading::default()));
        }
        Ok(Self { channels, counters })
    }
}

impl Meter for PowerPmu {
    fn source(&self) -> &'static str {
        "perf"
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    fn read(&mut self, _busy: &Busy) -> (Vec<u64>, Option<String>) {
        let mut error = None;
        let deltas = self
            .counters
            .iter_mut()
            .map(|(held, scale, reading)| {
                let count = match held.group.read() {
                    Ok((read, ids)) => ids.first().and_then(|id| read.value_of(*id, 0)),
                    Err(e) => {
                        error.get_or_insert(e.to_string());
                        None
                    }
                };
                count.map_or(0, |c| reading.next(c, *scale))
            })
            .collect();
        (deltas, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-socket machine's `power/` PMU as sysfs lays it out, with CPUs
    /// 0 and 4 in its `cpumask` on sockets 0 and 1.
    fn recorded() -> (tempfile::TempDir, tempfile::TempDir) {
        let pmus = tempfile::tempdir().unwrap();
        let power = pmus.path().join("power");
        std::fs::create_dir_all(power.join("events")).unwrap();
        std::fs::create_dir_all(power.join("format")).unwrap();
        std::fs::write(power.join("type"), "23\n").unwrap();
        std::fs::write(power.join("cpumask"), "0,4\n").unwrap();
        std::fs::write(power.join("format/event"), "config:0-7\n").unwrap();
        for (name, config) in [
            ("energy-pkg", "0x02"),
            ("energy-ram", "0x03"),
            ("energy-psys", "0x05"),
        ] {
            let events = power.join("events");
            std::fs::write(events.join(name), format!("event={config}\n")).unwrap();
            std::fs::write(
                events.join(format!("{name}.scale")),
                "2.3283064365386962890625e-10\n",
            )
            .unwrap();
            std::fs::write(events.join(format!("{name}.unit")), "Joules\n").unwrap();
        }
        let cpus = tempfile::tempdir().unwrap();
        for cpu in 0..8u32 {
            let dir = cpus.path().join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("physical_package_id"), format!("{}\n", cpu / 4)).unwrap();
        }
        (pmus, cpus)
    }

    /// Per socket, but `psys` once: the platform's counter, whichever
    /// socket's CPU reads it.
    #[test]
    fn each_energy_event_is_read_once_per_socket_in_joules() {
        let (pmus, cpus) = recorded();
        let found = describe(pmus.path(), cpus.path()).unwrap();
        let got: Vec<(&str, u32, u32, u32, u64)> = found
            .iter()
            .map(|d| {
                (
                    d.channel.domain,
                    d.channel.socket,
                    d.cpu,
                    d.attr.type_,
                    d.attr.config,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("pkg", 0, 0, 23, 2),
                ("pkg", 1, 4, 23, 2),
                ("ram", 0, 0, 23, 3),
                ("ram", 1, 4, 23, 3),
                ("psys", 0, 0, 23, 5)
            ]
        );
        assert_eq!(found[0].scale, 2f64.powi(-32));
    }

    #[test]
    fn an_event_without_joules_is_refused_and_no_pmu_says_why() {
        let (pmus, cpus) = recorded();
        let unit = pmus.path().join("power/events/energy-ram.unit");
        std::fs::write(unit, "MiB\n").unwrap();
        let e = describe(pmus.path(), cpus.path()).unwrap_err();
        assert!(e.contains("energy-ram") && e.contains("Joules"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        let e = describe(empty.path(), cpus.path()).unwrap_err();
        assert!(e.contains("no RAPL PMU"), "{e}");
    }

    /// A `.scale` that is no positive, finite number is refused, naming the
    /// event: none would give Joules.
    #[test]
    fn a_scale_that_is_no_positive_number_is_refused() {
        for scale in ["-1", "0", "inf", "NaN", "1e400"] {
            let (pmus, cpus) = recorded();
            let path = pmus.path().join("power/events/energy-pkg.scale");
            std::fs::write(path, format!("{scale}\n")).unwrap();
            let e = describe(pmus.path(), cpus.path()).expect_err(scale);
            assert!(e.contains("energy-pkg"), "{scale}: {e}");
        }
    }

    /// Recorded counts of a socket's `energy-pkg` (2^-32 J each): 1 J,
    /// then 0.5 J, then nothing (an idle socket), then 1 µJ in four steps.
    #[test]
    fn counts_become_micro_joules_without_losing_fractions() {
        let unit = 2f64.powi(-32);
        let mut reading = Reading::default();
        let joule = 1u64 << 32;
        let mut count = 5 * joule;
        assert_eq!(reading.next(count, unit), 0, "the first reading starts");
        count += joule;
        assert_eq!(reading.next(count, unit), 1_000_000);
        count += joule / 2;
        assert_eq!(reading.next(count, unit), 500_000);
        assert_eq!(reading.next(count, unit), 0);
        let quarter = (joule / 1_000_000) / 4 + 1;
        let mut total = 0;
        for _ in 0..4 {
            count += quarter;
            total += reading.next(count, unit);
        }
        assert_eq!(total, 1, "four quarters of a µJ make one");
    }

    /// Where the kernel has the PMU, it opens and counts; elsewhere the
    /// reason is one line.
    #[test]
    fn the_live_pmu_counts_where_it_exists() {
        let fds = Fds::unbounded();
        match PowerPmu::open(Path::new(POWER_PMU), &fds) {
            Ok(mut meter) => {
                let open = fds.tally.load(std::sync::atomic::Ordering::Relaxed);
                assert_eq!(open, meter.channels().len() as u64, "each counted");
                meter.read(&Busy::default());
                std::thread::sleep(std::time::Duration::from_millis(200));
                let (deltas, error) = meter.read(&Busy::default());
                assert_eq!(error, None);
                assert!(deltas.iter().any(|d| *d > 0), "{deltas:?}");
            }
            Err(why) => {
                assert!(!Path::new(POWER_PMU).join("events").is_dir(), "{why}");
                assert!(!why.contains('\n'), "{why}");
                println!("power/ PMU not counted here: {why}");
            }
        }
    }
}
