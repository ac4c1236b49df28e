//! The cgroup backend: one perf event per (cgroup, event, CPU), opened in
//! cgroup mode, so that the kernel counts only while a task of that cgroup
//! (or of a descendant) runs on the CPU. Counter groups are read once per
//! interval; `by:` tracepoints write samples into one ring per CPU (see
//! [`rings`]).

mod counter;
mod open;
mod probe;
mod reconcile;
mod rings;

pub use probe::CgroupProbe;

use super::budget::FdBudget;
use super::{Backend, Cgroup, Outcome, Stats, Wanted};
use crate::cpus::CpuChanges;
use crate::ids::{CgroupSlot, SampledId};
use crate::perf::OpenFailure;
use crate::plan::{Plan, SampledSpec};
use crate::snapshot::{ErrorReason, Operation, SkipReason};
use crate::totals::Totals;
use counter::GroupState;
use open::{NotOpened, Opener, or_later};
use reconcile::{Reconciling, reconcile};
use rings::SampledState;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// What is open for one counted cgroup.
#[derive(Debug)]
struct Counted {
    path: Arc<str>,
    dir: PathBuf,
    groups: Vec<GroupState>,
    /// Its `by:` tracepoints.
    sampled: Vec<SampledState>,
}

/// Counts per cgroup with cgroup-mode perf events.
#[derive(Debug)]
pub struct CgroupBackend {
    opener: Opener,
    cgroups: BTreeMap<CgroupSlot, Counted>,
}

impl CgroupBackend {
    /// A backend that holds at most `budget` perf descriptors, all of the
    /// process's counted in `tally` (the engine's own included), with
    /// `ring_pages` data pages per `by:` ring.
    pub fn new(budget: FdBudget, tally: Arc<AtomicU64>, ring_pages: usize) -> Self {
        Self {
            opener: Opener::new(budget, tally, ring_pages),
            cgroups: BTreeMap::new(),
        }
    }

    /// Whether it counts the cgroup in `slot` (with nothing, maybe).
    pub fn counts(&self, slot: CgroupSlot) -> bool {
        self.cgroups.contains_key(&slot)
    }

    /// Reads the count of every `by:` tracepoint, then drains the rings,
    /// and takes what is still owed as lost, having waited for samples in
    /// flight if that would change anything: the order the argument in
    /// [`rings`]' module doc rests on.
    fn settle_sampled(&mut self, totals: &mut Totals) {
        let errors = &mut self.opener.errors;
        for state in self.cgroups.values_mut() {
            for sampled in &mut state.sampled {
                sampled.read_counts(totals, |errno| {
                    let reason = ErrorReason::Kernel(OpenFailure::from_errno(errno));
                    errors.count(Operation::Read, reason);
                });
            }
        }
        self.opener.rings.drain(totals);
        if totals.owe_more() {
            rings::wait_for_writers();
            self.opener.rings.drain(totals);
        }
        totals.settle_counts();
    }

    /// Forgets the sample ids of `by:` events a reload closed, once their
    /// last samples are counted, and closes rings nothing writes into.
    fn forget_retired(&mut self, totals: &mut Totals) {
        if !self.opener.retired.is_empty() {
            // Their last samples may still be being written.
            rings::wait_for_writers();
        }
        self.opener.rings.drain(totals);
        let retired = std::mem::take(&mut self.opener.retired);
        self.opener.rings.unregister(retired.into_iter());
        self.opener.rings.close_if_idle();
    }
}

/// Handing `by:` entries between these rings and another counter (the bpf
/// backend's program) at one cut per CPU (see [`rings`]' module doc).
impl CgroupBackend {
    /// Events of the entries `arriving` opened from now on count nothing
    /// until [`CgroupBackend::cut`] says from when.
    pub fn hold(&mut self, arriving: HashSet<SampledId>) {
        self.opener.rings.held = arriving;
    }

    /// The entries of `ids` that the cgroup `slot` counts here now.
    pub fn counting(&self, slot: CgroupSlot, ids: &HashSet<SampledId>) -> Vec<Arc<SampledSpec>> {
        let Some(state) = self.cgroups.get(&slot) else {
            return Vec::new();
        };
        let ours = state.sampled.iter().map(|s| &s.spec);
        ours.filter(|s| ids.contains(&s.id())).cloned().collect()
    }

    /// Makes the events of the entries `arriving` count the hits at or
    /// past `cut(tracepoint, cpu)` on each CPU, and those of the entries
    /// `leaving` the hits before it (and stop: a later apply that no longer
    /// wants them closes them); counts what the rings hold accordingly.
    /// Every hit before the cut must have been written (or dropped) when
    /// this is called: its sample is then drained here.
    pub fn cut(
        &mut self,
        arriving: &HashSet<SampledId>,
        leaving: &HashSet<SampledId>,
        cut: impl Fn(u64, u32) -> u64,
        totals: &mut Totals,
    ) {
        let rings = &mut self.opener.rings;
        let moving = |s: &SampledState| {
            let id = s.spec.id();
            (arriving.contains(&id), leaving.contains(&id))
        };
        for state in self.cgroups.values_mut() {
            for sampled in &mut state.sampled {
                let config = sampled.spec.attr.config;
                match moving(sampled) {
                    (true, _) => sampled.window(rings, true, |cpu| cut(config, cpu)),
                    (_, true) => sampled.window(rings, false, |cpu| cut(config, cpu)),
                    _ => {}
                }
            }
        }
        // The last samples of the events leaving, now disabled.
        rings::wait_for_writers();
        rings.drain(totals);
        for state in self.cgroups.values_mut() {
            for sampled in &mut state.sampled {
                match moving(sampled) {
                    (true, _) => sampled.end_window(rings, true, totals),
                    (_, true) => sampled.end_window(rings, false, totals),
                    _ => {}
                }
            }
        }
        rings.held.clear();
    }
}

/// Descriptors a cgroup that wants `wanted` holds per CPU (the shared
/// rings aside).
fn fds_per_cpu(wanted: &Wanted) -> u64 {
    let events: usize = wanted.groups.iter().map(|s| s.events.len()).sum();
    (events + wanted.sampled.len()) as u64
}

impl Backend for CgroupBackend {
    fn configure(&mut self, plan: &Plan) {
        self.opener.ring_pages = plan.ring_pages;
    }

    fn admits(&self, wanted: &Wanted, cpus: usize) -> Result<(), SkipReason> {
        let cost = fds_per_cpu(wanted).saturating_mul(cpus as u64);
        match self.opener.budget.fits(self.opener.used(), cost) {
            true => Ok(()),
            false => Err(SkipReason::FdBudget),
        }
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        let mut outcomes = vec![Outcome::Counted; cgroups.len()];
        // New cgroups get an empty state and their directory now: a
        // directory that cannot be opened decides their outcome.
        let mut dirs = Vec::with_capacity(cgroups.len());
        for ((cgroup, _), outcome) in cgroups.iter().zip(&mut outcomes) {
            if self.cgroups.contains_key(&cgroup.slot) {
                dirs.push(None);
                continue;
            }
            match std::fs::File::open(&cgroup.dir) {
                Ok(dir) => {
                    dirs.push(Some(dir));
                    self.cgroups.insert(
                        cgroup.slot,
                        Counted {
                            path: cgroup.path.clone(),
                            dir: cgroup.dir.clone(),
                            groups: Vec::new(),
                            sampled: Vec::new(),
                        },
                    );
                }
                Err(e) => {
                    dirs.push(None);
                    *outcome = match e.raw_os_error() {
                        Some(libc::EMFILE | libc::ENFILE) => Outcome::Skipped(SkipReason::FdBudget),
                        _ => Outcome::Gone,
                    };
                }
            }
        }
        // The batch's states are taken out while they are reconciled (and
        // put back after): cgroups are admitted one at a time, and
        // borrowing each of thousands of states for every admission made
        // start-up quadratic.
        let mut taken: Vec<(CgroupSlot, Counted, Option<std::fs::File>, &Wanted)> = Vec::new();
        let mut dirs = dirs.into_iter();
        for ((cgroup, wanted), outcome) in cgroups.iter().zip(&outcomes) {
            let open = dirs.next().flatten();
            if *outcome != Outcome::Counted {
                continue;
            }
            if let Some(state) = self.cgroups.remove(&cgroup.slot) {
                taken.push((cgroup.slot, state, open, wanted));
            }
        }
        let slots: Vec<CgroupSlot> = taken.iter().map(|t| t.0).collect();
        let mut batch: Vec<Reconciling<'_>> = taken
            .iter_mut()
            .map(|(slot, state, open, wanted)| Reconciling {
                slot: *slot,
                state,
                wanted: (*wanted).clone(),
                open: open.take(),
            })
            .collect();
        let evicted = reconcile(&mut batch, online, &mut self.opener, totals);
        drop(batch);
        self.cgroups
            .extend(taken.into_iter().map(|(slot, state, _, _)| (slot, state)));
        for (slot, evicted) in slots.into_iter().zip(evicted) {
            if evicted {
                self.remove(slot);
                if let Some(i) = cgroups.iter().position(|(c, _)| c.slot == slot) {
                    outcomes[i] = Outcome::Skipped(SkipReason::FdBudget);
                }
            }
        }
        self.forget_retired(totals);
        outcomes
    }

    fn remove(&mut self, slot: CgroupSlot) {
        if let Some(mut gone) = self.cgroups.remove(&slot) {
            // Its series vanish: what they counted since the last
            // collection would be read for nothing.
            for sampled in &gone.sampled {
                self.opener.rings.unregister(sampled.ids());
            }
            gone.sampled.clear();
        }
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        let gone = |cpu: u32| changes.closed.contains(&cpu) || changes.open.contains(&cpu);
        // What the rings hold is counted before their events close.
        self.opener.rings.drain(totals);
        for state in self.cgroups.values_mut() {
            for group in &mut state.groups {
                for counter in &mut group.cpus {
                    if gone(counter.cpu) {
                        // Dead since the CPU went offline: the final read
                        // gets what it counted until then.
                        counter.close(&mut self.opener.errors, totals);
                    }
                }
            }
            for sampled in &mut state.sampled {
                for &cpu in changes.closed.iter().chain(&changes.open) {
                    let ids = sampled.close(Some(cpu), totals);
                    self.opener.rings.unregister(ids.into_iter());
                }
            }
        }
        for &cpu in changes.closed.iter().chain(&changes.open) {
            self.opener.rings.close(cpu);
        }
        if changes.open.is_empty() {
            return;
        }
        for (&slot, state) in &mut self.cgroups {
            for group in &mut state.groups {
                group.unopened.extend(&changes.open);
            }
            for sampled in &mut state.sampled {
                sampled.unopened.extend(&changes.open);
            }
            open_pending(slot, state, &changes.open, &mut self.opener, totals);
        }
    }

    fn retry(&mut self, online: &[u32], totals: &mut Totals) {
        for (&slot, state) in &mut self.cgroups {
            open_pending(slot, state, online, &mut self.opener, totals);
        }
    }

    fn read(&mut self, totals: &mut Totals) {
        self.settle_sampled(totals);
        for cgroup in self.cgroups.values_mut() {
            for group in &mut cgroup.groups {
                for counter in &mut group.cpus {
                    counter.read(&mut self.opener.errors, totals);
                }
            }
        }
    }

    fn drains(&self) -> bool {
        !self.opener.rings.is_empty()
    }

    fn wait(&mut self, timeout: Duration) {
        self.opener.rings.wait(timeout);
    }

    fn drain(&mut self, totals: &mut Totals) {
        self.opener.rings.drain(totals);
    }

    fn stats(&self) -> Stats {
        Stats {
            open_fds: self.opener.used(),
            samples_lost: self.opener.rings.lost,
            samples_undecodable: self.opener.rings.undecodable,
            errors: self.opener.errors.clone(),
            ..Stats::default()
        }
    }
}

/// Opens what a failure that passes (descriptors, memory, a busy PMU) or
/// a CPU coming (back) online left unopened on one of the `online` CPUs,
/// until it opens, fails for good, or its CPU goes offline or its cgroup
/// goes away. Without this, a cgroup would count nothing on that CPU until
/// a reload.
fn open_pending(
    slot: CgroupSlot,
    state: &mut Counted,
    online: &[u32],
    opener: &mut Opener,
    totals: &mut Totals,
) {
    let pending = state.groups.iter().any(|g| !g.unopened.is_empty())
        || state.sampled.iter().any(|s| !s.unopened.is_empty());
    if !pending {
        return;
    }
    let Ok(dir) = std::fs::File::open(&state.dir) else {
        return; // Out of descriptors, or removed: tried again later.
    };
    for group in &mut state.groups {
        for cpu in std::mem::take(&mut group.unopened) {
            if !online.contains(&cpu) {
                continue;
            }
            let opened = opener.open(&group.spec, &state.path, &dir, cpu);
            // Another core type's CPU: no counter, no series there.
            if matches!(opened, Err(NotOpened::NotHere)) {
                continue;
            }
            let opened = or_later(opened, &mut group.unopened, cpu);
            if opened.is_some() || !group.cpus.iter().any(|c| c.cpu == cpu) {
                group.counter(slot, cpu, totals).opened(opened);
            }
        }
    }
    for sampled in &mut state.sampled {
        for cpu in std::mem::take(&mut sampled.unopened) {
            if !online.contains(&cpu) {
                continue;
            }
            let opened = opener.open_sampled(&sampled.spec, sampled.counts, &state.path, &dir, cpu);
            if let Some((event, fds)) = or_later(opened, &mut sampled.unopened, cpu) {
                sampled.opened(cpu, event, fds);
            }
        }
    }
}
