//! The cgroup backend's counters: one perf event per (cgroup, event, CPU),
//! opened in cgroup mode, so that the kernel counts only while a task of
//! that cgroup (or of a descendant) runs on the CPU. Counter groups are
//! read once per interval. The cgroup backend is these counters beside
//! [`ByRings`] for `by:` tracepoints.

mod counter;
mod open;
mod probe;
mod reconcile;

pub use probe::CgroupProbe;

use super::budget::Fds;
use super::compose::Composed;
use super::opening::{NotOpened, or_later};
use super::rings::ByRings;
use super::{Backend, Cgroup, Outcome, Outgoing, Stats, Wanted};
use crate::cpus::CpuChanges;
use crate::ids::CgroupSlot;
use crate::plan::Plan;
use crate::snapshot::SkipReason;
use crate::totals::Totals;
use counter::GroupState;
use open::Opener;
use reconcile::{Reconciling, reconcile};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The cgroup backend: cgroup-mode counters, `by:` tracepoints on rings.
pub type CgroupBackend = Composed<CgroupCounters, ByRings>;

impl CgroupBackend {
    /// A backend that holds at most the budget of `fds` perf descriptors,
    /// all of the process's counted in its tally (the engine's own
    /// included), with `ring_pages` data pages per `by:` ring.
    pub fn new(fds: Fds, ring_pages: usize) -> Self {
        let counters = CgroupCounters::new(fds.clone());
        let by = ByRings::new(fds.clone(), ring_pages);
        Composed::of(counters, by, fds)
    }
}

/// What is open for one counted cgroup.
#[derive(Debug)]
struct Counted {
    path: Arc<str>,
    dir: PathBuf,
    groups: Vec<GroupState>,
}

/// Counts groups per cgroup with cgroup-mode perf events.
#[derive(Debug)]
pub struct CgroupCounters {
    opener: Opener,
    cgroups: BTreeMap<CgroupSlot, Counted>,
}

impl CgroupCounters {
    /// Counters within the budget of `fds`, all of the process's
    /// descriptors counted in its tally (the engine's own included).
    pub fn new(fds: Fds) -> Self {
        Self {
            opener: Opener::new(fds),
            cgroups: BTreeMap::new(),
        }
    }

    /// Takes over counting `cgroups` (none of them counted here yet) from
    /// `outgoing`, which counted their groups until now: on each CPU,
    /// each group starts here and `outgoing` reads it a last time there
    /// right after, as a reload hands over a changed group
    /// ([`reconcile`]). One outcome per cgroup, as [`Backend::apply`].
    pub fn take_over(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        outgoing: &mut dyn Outgoing,
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        self.apply_from(cgroups, online, Some(outgoing), totals)
    }

    /// [`Backend::apply`], groups new to a cgroup handed over from
    /// `outgoing` if given.
    fn apply_from(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        outgoing: Option<&mut dyn Outgoing>,
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
        let evicted = reconcile(&mut batch, online, &mut self.opener, outgoing, totals);
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
        outcomes
    }
}

impl Backend for CgroupCounters {
    fn configure(&mut self, _plan: &Plan) {}

    /// One per event of its groups.
    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        wanted.groups.iter().map(|s| s.events.len() as u64).sum()
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        self.cgroups.contains_key(&slot)
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        self.apply_from(cgroups, online, None, totals)
    }

    fn remove(&mut self, slot: CgroupSlot) {
        // Its series vanish: what it counted since the last collection
        // would be read for nothing.
        self.cgroups.remove(&slot);
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        let gone = |cpu: u32| changes.closed.contains(&cpu) || changes.open.contains(&cpu);
        let errors = &mut self.opener.failures.errors;
        for state in self.cgroups.values_mut() {
            for group in &mut state.groups {
                for counter in &mut group.cpus {
                    if gone(counter.cpu) {
                        // Dead since the CPU went offline: the final read
                        // gets what it counted until then.
                        counter.close(errors, totals);
                    }
                }
            }
        }
        if changes.open.is_empty() {
            return;
        }
        for (&slot, state) in &mut self.cgroups {
            for group in &mut state.groups {
                group.unopened.extend(&changes.open);
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
        let errors = &mut self.opener.failures.errors;
        for cgroup in self.cgroups.values_mut() {
            for group in &mut cgroup.groups {
                for counter in &mut group.cpus {
                    counter.read(errors, totals);
                }
            }
        }
    }

    /// Its descriptors are all in the tally.
    fn stats(&self) -> Stats {
        Stats {
            errors: self.opener.failures.errors.clone(),
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
    let pending = state.groups.iter().any(|g| !g.unopened.is_empty());
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
}
