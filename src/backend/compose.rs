//! Two mechanisms as one backend: one counts a cgroup's groups, the other
//! its `by:` tracepoints. Each sees only its part of what a cgroup wants;
//! together they admit a cgroup against one descriptor budget, and a cgroup
//! one of them cannot count is counted by neither, as the [`Backend`]
//! contract asks.

use super::budget::Fds;
use super::{Backend, Cgroup, Outcome, Stats, Wanted, refused};
use crate::cpus::CpuChanges;
use crate::ids::CgroupSlot;
use crate::plan::Plan;
use crate::snapshot::SkipReason;
use crate::totals::Totals;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A mechanism counting groups (`C`) beside one counting `by:`
/// tracepoints (`B`).
#[derive(Debug)]
pub struct Composed<C, B> {
    counters: C,
    by: B,
    /// Every perf descriptor of the process, both mechanisms' included,
    /// and how many cgperf may hold.
    fds: Fds,
}

impl<C, B> Composed<C, B> {
    /// `counters` and `by` within the budget of `fds`, all of the
    /// process's descriptors counted in its tally.
    pub fn of(counters: C, by: B, fds: Fds) -> Self {
        Self { counters, by, fds }
    }
}

/// The groups of `wanted`.
fn groups(wanted: &Wanted) -> Wanted {
    Wanted {
        groups: wanted.groups.clone(),
        sampled: Vec::new(),
    }
}

/// The `by:` tracepoints of `wanted`.
fn sampled(wanted: &Wanted) -> Wanted {
    Wanted {
        groups: Vec::new(),
        sampled: wanted.sampled.clone(),
    }
}

impl<C: Backend, B: Backend> Backend for Composed<C, B> {
    fn configure(&mut self, plan: &Plan) {
        self.counters.configure(plan);
        self.by.configure(plan);
    }

    fn admits(&self, wanted: &Wanted, cpus: usize) -> Result<(), SkipReason> {
        let (groups, sampled) = (groups(wanted), sampled(wanted));
        self.counters.admits(&groups, cpus)?;
        self.by.admits(&sampled, cpus)?;
        let per_cpu = self.counters.fds_per_cpu(&groups) + self.by.fds_per_cpu(&sampled);
        let cost = per_cpu.saturating_mul(cpus as u64);
        match self.fds.fit(cost) {
            true => Ok(()),
            false => Err(SkipReason::FdBudget),
        }
    }

    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        self.counters.fds_per_cpu(&groups(wanted)) + self.by.fds_per_cpu(&sampled(wanted))
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        self.counters.counts(slot) || self.by.counts(slot)
    }

    /// The counters see every cgroup; the `by:` mechanism, of those they
    /// count, the ones with `by:` tracepoints wanted or held (a cgroup with
    /// none costs it nothing). Either one's refusal is the cgroup's
    /// outcome, and the other lets it go too.
    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        let parts: Vec<(Cgroup, Wanted)> = cgroups
            .iter()
            .map(|(c, w)| (c.clone(), groups(w)))
            .collect();
        let mut outcomes = self.counters.apply(&parts, online, totals);
        let mut batch = Vec::new();
        for ((cgroup, wanted), outcome) in cgroups.iter().zip(&outcomes) {
            if *outcome != Outcome::Counted {
                self.by.remove(cgroup.slot);
            } else if !wanted.sampled.is_empty() || self.by.counts(cgroup.slot) {
                batch.push((cgroup.clone(), sampled(wanted)));
            }
        }
        // Called with no cgroup too: a reload puts its entries in force.
        let by = self.by.apply(&batch, online, totals);
        for (i, outcome) in refused(cgroups, &batch, by) {
            self.counters.remove(cgroups[i].0.slot);
            outcomes[i] = outcome;
        }
        outcomes
    }

    fn expect(&mut self, more: usize) {
        self.counters.expect(more);
        self.by.expect(more);
    }

    fn remove(&mut self, slot: CgroupSlot) {
        self.by.remove(slot);
        self.counters.remove(slot);
    }

    /// The `by:` mechanism first: what its rings hold is counted before
    /// their events close.
    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        self.by.cpus_changed(changes, totals);
        self.counters.cpus_changed(changes, totals);
    }

    fn retry(&mut self, online: &[u32], totals: &mut Totals) {
        self.by.retry(online, totals);
        self.counters.retry(online, totals);
    }

    fn read(&mut self, totals: &mut Totals) {
        self.by.read(totals);
        self.counters.read(totals);
    }

    fn drains(&self) -> bool {
        self.by.drains() || self.counters.drains()
    }

    /// Waits on the `by:` mechanism: counters read at collections have
    /// nothing to wait for.
    fn wait(&mut self, timeout: Duration) {
        self.by.wait(timeout);
    }

    fn drain(&mut self, totals: &mut Totals) {
        self.by.drain(totals);
        self.counters.drain(totals);
    }

    fn stats(&self) -> Stats {
        let mut stats = self.counters.stats();
        stats.add(&self.by.stats());
        stats.open_fds += self.fds.tally.load(Ordering::Relaxed);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::budget::FdBudget;
    use crate::events::EventAttr;
    use crate::plan::SampledSpec;
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// A mechanism in memory: what it was asked, and the outcomes it gives.
    #[derive(Default)]
    struct Fake {
        /// Cgroups it holds.
        held: BTreeSet<u64>,
        /// Cgroups it refuses, and how.
        refuses: BTreeMap<u64, Outcome>,
        /// Cgroups of each apply, in order.
        applied: Vec<Vec<u64>>,
        /// What it was asked to count of each cgroup at its last apply:
        /// (groups, `by:` tracepoints).
        parts: BTreeMap<u64, (usize, usize)>,
        removed: Vec<u64>,
        /// Descriptors per CPU per thing wanted.
        fds_each: u64,
        read: usize,
    }

    impl Backend for Fake {
        fn configure(&mut self, _plan: &Plan) {}

        fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
            self.fds_each * (wanted.groups.len() + wanted.sampled.len()) as u64
        }

        fn counts(&self, slot: CgroupSlot) -> bool {
            self.held.contains(&slot.0)
        }

        fn apply(
            &mut self,
            cgroups: &[(Cgroup, Wanted)],
            _online: &[u32],
            _totals: &mut Totals,
        ) -> Vec<Outcome> {
            self.applied
                .push(cgroups.iter().map(|(c, _)| c.slot.0).collect());
            cgroups
                .iter()
                .map(|(c, w)| {
                    let outcome = self.refuses.get(&c.slot.0).copied();
                    let outcome = outcome.unwrap_or(Outcome::Counted);
                    if outcome == Outcome::Counted {
                        self.held.insert(c.slot.0);
                        self.parts
                            .insert(c.slot.0, (w.groups.len(), w.sampled.len()));
                    }
                    outcome
                })
                .collect()
        }

        fn remove(&mut self, slot: CgroupSlot) {
            self.held.remove(&slot.0);
            self.removed.push(slot.0);
        }

        fn cpus_changed(&mut self, _changes: &CpuChanges, _totals: &mut Totals) {}

        fn retry(&mut self, _online: &[u32], _totals: &mut Totals) {}

        fn read(&mut self, _totals: &mut Totals) {
            self.read += 1;
        }

        fn stats(&self) -> Stats {
            Stats {
                open_fds: 1,
                samples_lost: 2,
                ..Stats::default()
            }
        }
    }

    fn cgroup(slot: u64) -> Cgroup {
        Cgroup {
            slot: CgroupSlot(slot),
            path: format!("/c{slot}").into(),
            dir: format!("/sys/fs/cgroup/c{slot}").into(),
            ino: slot,
        }
    }

    fn entry() -> Arc<SampledSpec> {
        Arc::new(SampledSpec {
            label: "by_which".into(),
            attr: EventAttr {
                type_: 2,
                config: 1,
                config1: 0,
                config2: 0,
                exclude_user: false,
                exclude_kernel: false,
                exclude_hv: false,
                exclude_guest: false,
                exclude_host: false,
                other_core: None,
            },
            filter: None,
            fields: Vec::new(),
            max_series: 10,
            syscall_name: None,
            filter_fields: Vec::new(),
        })
    }

    /// `n` `by:` entries and no group.
    fn with_entries(n: usize) -> Wanted {
        Wanted {
            groups: Vec::new(),
            sampled: vec![entry(); n],
        }
    }

    fn composed(max_perf_fds: u64) -> (Composed<Fake, Fake>, Arc<AtomicU64>) {
        let tally = Arc::new(AtomicU64::new(0));
        let fds = Fds {
            tally: tally.clone(),
            budget: FdBudget { max_perf_fds },
        };
        (Composed::of(Fake::default(), Fake::default(), fds), tally)
    }

    #[test]
    fn the_by_mechanism_sees_only_cgroups_with_entries_wanted_or_held() {
        let (mut c, _) = composed(1000);
        let mut totals = Totals::default();
        let batch = [
            (cgroup(1), with_entries(1)),
            (cgroup(2), with_entries(0)),
            (cgroup(3), with_entries(2)),
        ];
        let outcomes = c.apply(&batch, &[0], &mut totals);
        assert_eq!(outcomes, vec![Outcome::Counted; 3]);
        assert_eq!(c.counters.applied, vec![vec![1, 2, 3]]);
        assert_eq!(c.by.applied, vec![vec![1, 3]]);
        // Each saw its part only.
        assert_eq!(c.counters.parts[&1], (0, 0));
        assert_eq!(c.by.parts[&3], (0, 2));
        // A reload that takes cgroup 1's entries away still reaches it
        // there (to close them); cgroup 2 still costs it nothing.
        let again = [(cgroup(1), with_entries(0)), (cgroup(2), with_entries(0))];
        c.apply(&again, &[0], &mut totals);
        assert_eq!(c.by.applied[1], vec![1]);
        // A batch without entries still reaches it: a reload puts its
        // entries in force then.
        c.apply(&[(cgroup(2), with_entries(0))], &[0], &mut totals);
        assert_eq!(c.by.applied[2], Vec::<u64>::new());
    }

    #[test]
    fn a_cgroup_either_mechanism_refuses_is_held_by_neither() {
        let (mut c, _) = composed(1000);
        let mut totals = Totals::default();
        c.by.refuses
            .insert(1, Outcome::Skipped(SkipReason::FdBudget));
        c.counters.refuses.insert(2, Outcome::Gone);
        let batch = [
            (cgroup(1), with_entries(1)),
            (cgroup(2), with_entries(1)),
            (cgroup(3), with_entries(1)),
        ];
        let outcomes = c.apply(&batch, &[0], &mut totals);
        assert_eq!(
            outcomes,
            vec![
                Outcome::Skipped(SkipReason::FdBudget),
                Outcome::Gone,
                Outcome::Counted
            ]
        );
        // The counters let 1 go; the by: mechanism never saw 2, and was
        // told to let it go in case it held it.
        assert_eq!(c.counters.removed, vec![1]);
        assert_eq!(c.by.applied, vec![vec![1, 3]]);
        assert_eq!(c.by.removed, vec![2]);
        assert!(!c.counts(CgroupSlot(1)) && !c.counts(CgroupSlot(2)));
        assert!(c.counts(CgroupSlot(3)));
    }

    #[test]
    fn admission_checks_both_mechanisms_descriptors_against_one_budget() {
        // 3 entries on 2 CPUs: 6 descriptors for the by: mechanism.
        let (mut c, tally) = composed(10);
        c.by.fds_each = 1;
        c.counters.fds_each = 1;
        assert_eq!(c.admits(&with_entries(3), 2), Ok(()));
        tally.store(4, Ordering::Relaxed);
        assert_eq!(c.admits(&with_entries(3), 2), Ok(()));
        // One descriptor too many: refused.
        tally.store(5, Ordering::Relaxed);
        assert_eq!(c.admits(&with_entries(3), 2), Err(SkipReason::FdBudget));
        assert_eq!(c.fds_per_cpu(&with_entries(3)), 3);
    }

    #[test]
    fn stats_add_both_and_the_tally_once() {
        let (c, tally) = composed(10);
        tally.store(7, Ordering::Relaxed);
        let stats = c.stats();
        assert_eq!(stats.open_fds, 7 + 1 + 1);
        assert_eq!(stats.samples_lost, 4);
    }
}
