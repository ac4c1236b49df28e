//! What each socket's CPUs did in all, in the weight event's unit, when
//! shares are weighed by `cycles`: one system-wide counter of the weight
//! event per online CPU (the event exactly as the cgroups' groups count
//! it, modifiers included, and on a hybrid CPU with the extended type of
//! that CPU's core PMU, as theirs: [`CorePmus::on_cpu`]), so that cycles
//! no counted top-level cgroup ran (kernel threads, interrupts, cgroups
//! not counted) go to the `system` share instead of being spread over the
//! cgroups.
//!
//! Each reading is scaled per interval as every count is
//! (`raw × enabled / running`, [`Delta::scaled`]); an interval in which a
//! CPU's counter never ran, could not be read, or had just been opened
//! (a CPU come online) tells nothing of that CPU, and its socket's total
//! is then unknown for that interval: its top-level cgroups share all of
//! its active energy, as without a total.
//!
//! The counters' descriptors are counted with every other perf descriptor
//! of the process (`cgperf_open_fds`) and kept within the same budget: a
//! CPU whose counter would not fit gets none, and its socket's total is
//! unknown, as where the kernel refuses one.

use crate::backend::budget::{Fds, Held};
use crate::events::{CorePmus, EventAttr};
use crate::perf::{CounterGroup, Target};
use crate::totals::{Baseline, Delta};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One CPU's counter and its last reading.
#[derive(Debug)]
struct Counter {
    held: Held,
    baseline: Baseline,
    /// Opened since the last read: its first delta covers part of an
    /// interval only.
    fresh: bool,
}

/// The weight event counted system-wide on every online CPU.
#[derive(Debug)]
pub struct SystemCount {
    attr: EventAttr,
    cpus: BTreeMap<u32, Counter>,
    /// Where the counters' descriptors are counted, and their budget.
    fds: Fds,
    /// The core PMUs, which a hybrid CPU's counters are opened on.
    cores: Arc<CorePmus>,
    /// Whether a refusal to open was said (once).
    said: bool,
    delta: Delta,
}

impl SystemCount {
    /// Counts `attr` on every CPU from the first [`SystemCount::read`],
    /// on each as `cores` opens it there, its descriptors counted in and
    /// kept within `fds`.
    pub fn new(attr: EventAttr, cores: Arc<CorePmus>, fds: Fds) -> Self {
        Self {
            attr,
            cpus: BTreeMap::new(),
            fds,
            cores,
            said: false,
            delta: Delta::default(),
        }
    }

    /// Follows the `online` CPUs (opens a counter on each new one, closes
    /// those of CPUs gone) and reads: each online CPU's count since the
    /// last read, scaled, or `None` where it is unknown (see the module).
    pub fn read(&mut self, online: &[u32]) -> Vec<(u32, Option<f64>)> {
        self.cpus.retain(|cpu, _| online.contains(cpu));
        let mut out = Vec::with_capacity(online.len());
        for &cpu in online {
            if !self.cpus.contains_key(&cpu) {
                let opened = match self.cores.on_cpu(&self.attr, cpu) {
                    None => Err("no core PMU of this CPU counts it".to_owned()),
                    Some(_) if !self.fds.fit(1) => Err("over the descriptor budget".to_owned()),
                    Some(attr) => {
                        CounterGroup::open(std::slice::from_ref(&attr), Target::AllTasks, cpu)
                            .map_err(|e| e.errno.to_string())
                    }
                };
                match opened {
                    Ok(group) => {
                        let counter = Counter {
                            held: self.fds.hold(group),
                            baseline: Baseline::new(1),
                            fresh: true,
                        };
                        self.cpus.insert(cpu, counter);
                    }
                    Err(why) => {
                        if !std::mem::replace(&mut self.said, true) {
                            tracing::warn!(
                                "energy: the weight event cannot be counted system-wide on CPU \
                                 {cpu} ({why}): no `system` share where it is not"
                            );
                        }
                        out.push((cpu, None));
                        continue;
                    }
                }
            }
            let Some(counter) = self.cpus.get_mut(&cpu) else {
                continue;
            };
            let value = match counter.held.group.read() {
                Ok((read, ids)) => {
                    counter.baseline.delta(&read, ids, &mut self.delta);
                    let fresh = std::mem::replace(&mut counter.fresh, false);
                    (!fresh).then(|| self.delta.scaled(0)).flatten()
                }
                Err(e) => {
                    tracing::debug!("energy: reading the weight event on CPU {cpu}: {e}");
                    None
                }
            };
            out.push((cpu, value));
        }
        out
    }
}

/// Each socket's total of `per_cpu` (a CPU's count, `None` when unknown),
/// `socket_of` telling each CPU's socket: `None` for a socket with a CPU
/// whose count is unknown.
pub fn per_socket(
    per_cpu: &[(u32, Option<f64>)],
    mut socket_of: impl FnMut(u32) -> u32,
) -> BTreeMap<u32, Option<f64>> {
    let mut out: BTreeMap<u32, Option<f64>> = BTreeMap::new();
    for (cpu, count) in per_cpu {
        let total = out.entry(socket_of(*cpu)).or_insert(Some(0.0));
        *total = total.zip(*count).map(|(t, c)| t + c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded cumulative readings `(enabled, running, value)` of one CPU's
    /// counter, through its baseline: each interval's scaled count.
    fn intervals(readings: &[(u64, u64, u64)]) -> Vec<Option<f64>> {
        let mut baseline = Baseline::new(1);
        let mut delta = Delta::default();
        readings
            .iter()
            .map(|(enabled, running, value)| {
                baseline.advance(*enabled, *running, [Some(*value)].into_iter(), &mut delta);
                delta.scaled(0)
            })
            .collect()
    }

    #[test]
    fn multiplexed_counts_are_scaled_per_interval_and_one_that_never_ran_is_unknown() {
        let got = intervals(&[
            // On the PMU all the time: as counted.
            (1_000, 1_000, 5_000),
            // Half the time: doubled.
            (2_000, 1_500, 7_000),
            // Enabled, never on the PMU: nothing measured.
            (3_000, 1_500, 7_000),
            // A quarter of the time: four times.
            (4_000, 1_750, 7_100),
            // Not enabled (CPU idle with nothing to count): nothing.
            (4_000, 1_750, 7_100),
        ]);
        assert_eq!(
            got,
            [Some(5_000.0), Some(4_000.0), None, Some(400.0), Some(0.0)]
        );
    }

    #[test]
    fn a_socket_with_a_cpu_unknown_has_no_total() {
        let per_cpu = [
            (0, Some(10.0)),
            (1, Some(5.0)),
            (2, Some(1.0)),
            (3, None),
            (4, Some(2.0)),
        ];
        // CPUs 0, 1 on socket 0; 2, 3 on socket 1; 4 on socket 2.
        let got = per_socket(&per_cpu, |cpu| [0, 0, 1, 1, 2][cpu as usize]);
        assert_eq!(
            got,
            BTreeMap::from([(0, Some(15.0)), (1, None), (2, Some(2.0))])
        );
    }

    /// A tally of its own, and room for `max` descriptors.
    fn fds(max: u64) -> Fds {
        Fds {
            tally: Default::default(),
            budget: crate::backend::budget::FdBudget { max_perf_fds: max },
        }
    }

    fn attr(name: &str) -> EventAttr {
        let event = crate::events::parse_event(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let pmus = std::path::Path::new(crate::events::PMU_ROOT);
        event
            .resolve(pmus, &Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Live, with `cpu-clock` (a software event every machine counts
    /// system-wide, in nanoseconds): a CPU's first reading is unknown (it
    /// was just opened), the next one is the time since, on every CPU; a
    /// CPU gone is closed, one back is unknown once again.
    #[test]
    fn each_cpu_counts_from_its_second_reading_and_follows_the_online_cpus() {
        let online = crate::cpus::online().expect("online CPUs");
        let mut count = SystemCount::new(attr("cpu-clock"), Arc::default(), fds(u64::MAX));
        let first = count.read(&online);
        assert!(first.iter().all(|(_, c)| c.is_none()), "{first:?}");
        let started = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let got = count.read(&online);
        assert_eq!(got.len(), online.len());
        let elapsed = started.elapsed().as_nanos() as f64;
        for (cpu, ns) in &got {
            let ns = ns.unwrap_or_else(|| panic!("CPU {cpu} unknown: {got:?}"));
            assert!(ns > 0.9 * 50e6 && ns < 1.1 * elapsed, "CPU {cpu}: {ns} ns");
        }
        // The first CPU goes offline, then comes back.
        let (first, rest) = online.split_first().expect("a CPU");
        assert_eq!(count.read(rest).len(), rest.len());
        assert_eq!(count.read(&online)[0], (*first, None), "back: unknown once");
    }

    /// Live, where the PMU counts `cycles` system-wide; here without one,
    /// opening is refused and every reading stays unknown (no system
    /// share, as documented).
    #[test]
    fn cycles_count_where_the_pmu_does_and_are_unknown_where_not() {
        let cycles = attr("cycles");
        let mut count = SystemCount::new(cycles, Arc::default(), fds(u64::MAX));
        assert_eq!(count.read(&[0]), [(0, None)]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = count.read(&[0]);
        match CounterGroup::open(&[cycles], Target::AllTasks, 0) {
            Ok(_) => assert!(
                matches!(second[..], [(0, Some(c))] if c > 0.0),
                "{second:?}"
            ),
            Err(e) => {
                println!("no system-wide cycles here ({}): unknown", e.errno);
                assert_eq!(second, [(0, None)]);
            }
        }
    }

    /// Live, with `cpu-clock`: each CPU's counter is counted in the tally
    /// for as long as it is open, and one that would not fit in the budget
    /// is not opened (that CPU unknown, every interval, until room comes).
    #[test]
    fn each_counter_is_counted_while_open_and_kept_within_the_budget() {
        use std::sync::atomic::Ordering;
        let online = crate::cpus::online().expect("online CPUs");
        let room = online.len() as u64 - 1;
        let fds = fds(room);
        let mut count = SystemCount::new(attr("cpu-clock"), Arc::default(), fds.clone());
        count.read(&online);
        assert_eq!(fds.tally.load(Ordering::Relaxed), room);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let got = count.read(&online);
        let (last, first) = got.split_last().expect("a CPU");
        assert_eq!(last.1, None, "no room for the last CPU: {got:?}");
        assert!(first.iter().all(|(_, c)| c.is_some()), "{got:?}");
        assert_eq!(fds.tally.load(Ordering::Relaxed), room);
        // A CPU gone closes its counter: room for the last one.
        let (gone, rest) = online.split_first().expect("a CPU");
        count.read(rest);
        assert_eq!(fds.tally.load(Ordering::Relaxed), room);
        assert!(!count.cpus.contains_key(gone));
        drop(count);
        assert_eq!(fds.tally.load(Ordering::Relaxed), 0, "all closed");
    }
}
