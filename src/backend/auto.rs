//! `backend: auto` where it chose BPF: the program's counters, until the
//! program finds the kernel switching out of a task without the
//! `sched_switch` tracepoint it counts by. Such a kernel gives no sign
//! before it hides a switch, and one that hides few can pass the watch at
//! start (`bpf::hidden_switches`); from then on the program's counts are
//! not the cgroup backend's (`docs/backends.md`). So at the collection
//! that finds the first such switch, every counted group moves to
//! cgroup-mode counters, handed over on each CPU as a reload hands over a
//! changed group: nothing counted twice, nothing lost. `by:` tracepoints
//! stay where they are counted: their program does not count by context
//! switches.

use super::bpf::{BpfBackend, BpfCounters, ByInKernel, Unavailable};
use super::budget::Fds;
use super::cgroup::CgroupCounters;
use super::compose::Composed;
use super::{Backend, Cgroup, Outcome, Outgoing, Stats, Wanted};
use crate::cpus::CpuChanges;
use crate::ids::CgroupSlot;
use crate::plan::Plan;
use crate::snapshot::SkipReason;
use crate::totals::Totals;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Why `backend: auto` left BPF for the cgroup backend while it ran, once
/// it did: shared by the counters that left and whoever reports the
/// backend in use (`backend::choose`).
pub type Left = Arc<OnceLock<Arc<str>>>;

/// The backend `auto` opens where it chose BPF: [`AutoCounters`] beside
/// the bpf backend's `by:` mechanism.
pub type AutoBackend = Composed<AutoCounters, ByInKernel>;

impl AutoBackend {
    /// As [`BpfBackend::new`], the counters moving to cgroup mode where
    /// the kernel hides a switch, saying why in `left`.
    pub fn new(
        capacity: usize,
        fds: Fds,
        ring_pages: usize,
        left: Left,
    ) -> Result<Self, Unavailable> {
        let bpf = BpfCounters::on_this_machine(capacity, fds.tally.clone())?;
        let counters = AutoCounters {
            now: Counting::Bpf(Box::new(bpf)),
            cgroups: BTreeMap::new(),
            online: Vec::new(),
            fds: fds.clone(),
            left,
            before: Stats::default(),
            pending: Vec::new(),
            said_no_room: false,
        };
        Ok(Composed::of(
            counters,
            BpfBackend::by(capacity, &fds, ring_pages),
            fds,
        ))
    }
}

/// Which counters count now.
#[derive(Debug)]
enum Counting {
    Bpf(Box<BpfCounters>),
    Cgroup(CgroupCounters),
}

impl Counting {
    fn backend(&self) -> &dyn Backend {
        match self {
            Self::Bpf(b) => &**b,
            Self::Cgroup(c) => c,
        }
    }

    fn backend_mut(&mut self) -> &mut dyn Backend {
        match self {
            Self::Bpf(b) => &mut **b,
            Self::Cgroup(c) => c,
        }
    }
}

/// The program's counters until the kernel hides a switch from it, then
/// cgroup-mode counters.
#[derive(Debug)]
pub struct AutoCounters {
    now: Counting,
    /// Each counted cgroup and the groups it wants: what the cgroup-mode
    /// counters open when they take over.
    cgroups: BTreeMap<CgroupSlot, (Cgroup, Wanted)>,
    /// The CPUs counted on.
    online: Vec<u32>,
    /// Every perf descriptor of the process, and how many cgperf may hold:
    /// the cgroup-mode counters need one per event, cgroup and CPU.
    fds: Fds,
    left: Left,
    /// What the program's counters said of themselves when they were
    /// dropped: the self-metrics they feed are counters, which never go
    /// backwards.
    before: Stats,
    /// Cgroups the cgroup-mode counters could not take over (out of
    /// descriptors, say): opened again at each collection, from then on.
    pending: Vec<CgroupSlot>,
    /// Whether the log said the cgroup-mode counters do not fit.
    said_no_room: bool,
}

impl AutoCounters {
    /// Moves every counted group to cgroup-mode counters if the program
    /// found a switch the kernel hid from it, and the descriptors they
    /// need fit; called right after a read.
    fn leave_bpf_if_blind(&mut self, totals: &mut Totals) {
        let Counting::Bpf(bpf) = &mut self.now else {
            return;
        };
        // Read at every collection: the count the read just took, not
        // the whole statistics (which copy the error tallies).
        let unseen = bpf.unseen_switches();
        // A collection reads before it applies the plan: at the first one
        // no cgroup has been given yet, and whether their counters fit
        // would be judged on none of them.
        if unseen == 0 || self.cgroups.is_empty() {
            return;
        }
        let cgroup_mode = CgroupCounters::new(self.fds.clone());
        let per_cpu: u64 = self
            .cgroups
            .values()
            .map(|(_, wanted)| cgroup_mode.fds_per_cpu(wanted))
            .sum();
        let cpus = self.online.len() as u64;
        if !self.fds.fit(per_cpu.saturating_mul(cpus)) {
            if !self.said_no_room {
                self.said_no_room = true;
                tracing::warn!(
                    unseen,
                    needed = per_cpu.saturating_mul(cpus),
                    "this kernel switches out of tasks without the sched_switch tracepoint the \
                     bpf backend counts by, but the cgroup backend's counters do not fit the \
                     open-files limit: `backend: auto` keeps counting through BPF, and what \
                     perf counters count while such a task runs goes to the cgroup of the task \
                     that runs next (raise the limit, or set `backend: cgroup`)"
                );
            }
            return;
        }
        let why: Arc<str> = format!(
            "this kernel switched out of tasks without the sched_switch tracepoint the bpf \
             backend counts by ({unseen} such switches found while counting), and what perf \
             counters count while such a task runs would be charged to the cgroup of the task \
             that runs next"
        )
        .into();
        let mut cgroup_mode = cgroup_mode;
        let handed: Vec<(Cgroup, Wanted)> = self.cgroups.values().cloned().collect();
        let started = std::time::Instant::now();
        let outcomes = cgroup_mode.take_over(&handed, &self.online, &mut **bpf, totals);
        for ((cgroup, wanted), outcome) in handed.iter().zip(outcomes) {
            if outcome == Outcome::Counted {
                continue;
            }
            // What the program counted for it until now is kept; it
            // counts again once its groups open.
            for spec in &wanted.groups {
                for &cpu in &self.online {
                    Outgoing::read(&mut **bpf, cgroup.slot, spec, cpu, totals);
                }
            }
            self.pending.push(cgroup.slot);
        }
        self.before = bpf.stats();
        self.before.open_fds = 0;
        // The program's counters close and it unloads with them.
        self.now = Counting::Cgroup(cgroup_mode);
        let took = started.elapsed();
        match self.pending.len() {
            0 => tracing::warn!(
                cgroups = handed.len(),
                ?took,
                "counting with the cgroup backend from now on (`backend: auto`): {why}; every \
                 group was handed over on each CPU, nothing lost or counted twice \
                 (cgperf_backend_info says so; docs/backends.md)"
            ),
            not_yet => tracing::warn!(
                cgroups = handed.len(),
                not_yet,
                ?took,
                "counting with the cgroup backend from now on (`backend: auto`): {why}; every \
                 group was handed over on each CPU but those of {not_yet} cgroups, which could \
                 not open theirs: they count again once they do, and what they do until then \
                 is not counted (cgperf_backend_info says so; docs/backends.md)"
            ),
        }
        let _ = self.left.set(why);
    }

    /// Opens the groups of the cgroups the cgroup-mode counters could not
    /// take over.
    fn open_pending(&mut self, totals: &mut Totals) {
        let Counting::Cgroup(cgroup_mode) = &mut self.now else {
            return;
        };
        if self.pending.is_empty() {
            return;
        }
        let pending: Vec<(Cgroup, Wanted)> = self
            .pending
            .iter()
            .filter_map(|slot| self.cgroups.get(slot).cloned())
            .collect();
        let outcomes = cgroup_mode.apply(&pending, &self.online, totals);
        self.pending = pending
            .iter()
            .zip(outcomes)
            .filter(|(_, outcome)| *outcome != Outcome::Counted)
            .map(|((cgroup, _), _)| cgroup.slot)
            .collect();
    }
}

impl Backend for AutoCounters {
    fn configure(&mut self, plan: &Plan) {
        self.now.backend_mut().configure(plan);
    }

    fn admits(&self, wanted: &Wanted, cpus: usize) -> Result<(), SkipReason> {
        self.now.backend().admits(wanted, cpus)
    }

    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        self.now.backend().fds_per_cpu(wanted)
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        self.now.backend().counts(slot)
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        if self.online.is_empty() {
            self.online = online.to_vec();
        }
        let outcomes = self.now.backend_mut().apply(cgroups, online, totals);
        for ((cgroup, wanted), outcome) in cgroups.iter().zip(&outcomes) {
            self.pending.retain(|&slot| slot != cgroup.slot);
            match outcome {
                Outcome::Counted => {
                    let groups = Wanted {
                        groups: wanted.groups.clone(),
                        sampled: Vec::new(),
                    };
                    self.cgroups.insert(cgroup.slot, (cgroup.clone(), groups));
                }
                _ => {
                    self.cgroups.remove(&cgroup.slot);
                }
            }
        }
        outcomes
    }

    fn expect(&mut self, more: usize) {
        self.now.backend_mut().expect(more);
    }

    fn remove(&mut self, slot: CgroupSlot) {
        self.now.backend_mut().remove(slot);
        self.cgroups.remove(&slot);
        self.pending.retain(|&s| s != slot);
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        self.now.backend_mut().cpus_changed(changes, totals);
        changes.follow(&mut self.online);
    }

    fn retry(&mut self, online: &[u32], totals: &mut Totals) {
        self.now.backend_mut().retry(online, totals);
        self.open_pending(totals);
    }

    fn read(&mut self, totals: &mut Totals) {
        self.now.backend_mut().read(totals);
        self.leave_bpf_if_blind(totals);
    }

    fn drains(&self) -> bool {
        self.now.backend().drains()
    }

    fn wait(&mut self, timeout: Duration) {
        self.now.backend_mut().wait(timeout);
    }

    fn drain(&mut self, totals: &mut Totals) {
        self.now.backend_mut().drain(totals);
    }

    fn stats(&self) -> Stats {
        let mut stats = self.now.backend().stats();
        stats.add(&self.before);
        stats
    }
}
