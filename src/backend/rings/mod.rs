//! `by:` tracepoints counted through rings: one sampled event per (cgroup,
//! entry, CPU), opened in cgroup mode, each CPU's writing into that CPU's
//! ring (see [`ring`]). This mechanism counts the `by:` part of what a
//! cgroup wants, beside a mechanism that counts its groups.

mod ring;

use super::budget::{Fds, Tally};
use super::opening::{Failures, NotOpened, OutOfFds, or_give_up, or_later};
use super::{Backend, Cgroup, Outcome, Stats, Wanted};
use crate::cpus::CpuChanges;
use crate::ids::{CgroupSlot, SampledId};
use crate::perf::{OpenFailure, SampledEvent, Target};
use crate::plan::{Plan, SampledSpec};
use crate::snapshot::{ErrorReason, Operation, SkipReason};
use crate::totals::{Handle, SampledKey, Totals};
pub use ring::DropMark;
use ring::{Rings, SampledState, wait_for_writers};
use std::collections::{BTreeMap, HashSet};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The `by:` tracepoints of one cgroup.
#[derive(Debug)]
struct Watched {
    path: Arc<str>,
    dir: PathBuf,
    sampled: Vec<SampledState>,
}

/// Counts `by:` tracepoints per cgroup through per-CPU rings.
#[derive(Debug)]
pub struct ByRings {
    /// Every perf descriptor of the process, and how many cgperf may hold.
    fds: Fds,
    failures: Failures,
    rings: Rings,
    /// Data pages of a new ring.
    ring_pages: usize,
    /// Sample ids of events closed by a reload whose series carry on:
    /// forgotten only after the rings are drained, so that the samples they
    /// wrote before closing are counted.
    retired: Vec<u64>,
    cgroups: BTreeMap<CgroupSlot, Watched>,
}

impl ByRings {
    /// Rings within the budget of `fds`, all of the process's descriptors
    /// counted in its tally, with `ring_pages` data pages each.
    pub fn new(fds: Fds, ring_pages: usize) -> Self {
        Self {
            fds,
            failures: Failures::default(),
            rings: Rings::default(),
            ring_pages,
            retired: Vec::new(),
            cgroups: BTreeMap::new(),
        }
    }

    /// Opens a `by:` tracepoint for the cgroup whose directory is `dir` on
    /// `cpu`, writing into that CPU's ring (opened if needed), its samples
    /// counted into `counts`. A failure leaves it unopened on this CPU;
    /// those of the kernel are counted and logged once.
    fn open(
        &mut self,
        spec: &Arc<SampledSpec>,
        counts: Handle,
        cgroup: &str,
        dir: &std::fs::File,
        cpu: u32,
    ) -> Result<(SampledEvent, Tally), NotOpened> {
        // One for the event, one for the ring if this CPU has none yet.
        if !self.fds.fit(2) {
            return Err(NotOpened::OutOfFds);
        }
        // The events of an entry handed over to the rings stay stopped
        // until just before the cut (`ByRings::start_held`).
        let held = self.rings.held.contains(&spec.id());
        let opened = self
            .rings
            .ensure(cpu, self.ring_pages, &self.fds.tally)
            .and_then(|ring| {
                let target = Target::Cgroup(dir.as_fd());
                SampledEvent::open(&spec.attr, spec.filter.as_deref(), target, cpu, ring)
            })
            .and_then(|event| match held {
                true => Ok(event),
                false => event.enable().map(|()| event),
            });
        match opened {
            Ok(event) => {
                self.rings.register(event.id(), counts, spec);
                Ok((event, Tally::new(&self.fds.tally, 1)))
            }
            Err(errno) => Err(self.failures.failed(&spec.label, cgroup, cpu, errno)),
        }
    }

    /// Reads the count of every `by:` tracepoint, then drains the rings,
    /// and takes what is still owed as lost, having waited for samples in
    /// flight if that would change anything: the order the argument in
    /// [`ring`]'s module doc rests on.
    fn settle(&mut self, totals: &mut Totals) {
        let errors = &mut self.failures.errors;
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                sampled.read_counts(totals, |errno| {
                    let reason = ErrorReason::Kernel(OpenFailure::from_errno(errno));
                    errors.count(Operation::Read, reason);
                });
            }
        }
        self.rings.drain(totals);
        if totals.owe_more() {
            wait_for_writers();
            self.rings.drain(totals);
        }
        totals.settle_counts();
    }

    /// Forgets the sample ids of events a reload closed, once their last
    /// samples are counted, and closes rings nothing writes into.
    fn forget_retired(&mut self, totals: &mut Totals) {
        if !self.retired.is_empty() {
            // Their last samples may still be being written.
            wait_for_writers();
        }
        self.rings.drain(totals);
        let retired = std::mem::take(&mut self.retired);
        self.rings.unregister(retired.into_iter());
        self.rings.close_if_idle();
    }

    /// Makes the `by:` tracepoints of the cgroup in `slot` those wanted:
    /// identical ones are kept as they are; one whose filter or bound
    /// changed is opened anew and its old events' last samples still
    /// counted; what is no longer wanted is closed. `Err` when descriptors
    /// ran out: everything of the cgroup is closed then.
    fn reconcile(
        &mut self,
        slot: CgroupSlot,
        wanted: &[Arc<SampledSpec>],
        dir: &std::fs::File,
        online: &[u32],
        totals: &mut Totals,
    ) -> Result<(), OutOfFds> {
        let Some(watched) = self.cgroups.get_mut(&slot) else {
            return Ok(());
        };
        let path = watched.path.clone();
        let mut old = std::mem::take(&mut watched.sampled);
        let mut now = Vec::with_capacity(wanted.len());
        for spec in wanted {
            if let Some(i) = old.iter().position(|s| *s.spec == **spec) {
                now.push(old.swap_remove(i));
                continue;
            }
            let id = spec.id();
            let counts = totals.sampled(&SampledKey {
                cgroup: slot,
                id: id.clone(),
            });
            let mut new = SampledState::new(spec.clone(), counts);
            for &cpu in online {
                let opened = self.open(spec, counts, &path, dir, cpu);
                match or_give_up(opened, &mut new.unopened, cpu) {
                    Ok(Some((event, fds))) => new.opened(cpu, event, fds),
                    Ok(None) => {}
                    Err(OutOfFds) => {
                        now.push(new);
                        for mut gone in now.into_iter().chain(old) {
                            let ids = gone.close(None, totals);
                            self.rings.unregister(ids.into_iter());
                        }
                        return Err(OutOfFds);
                    }
                }
            }
            if let Some(i) = old.iter().position(|s| s.spec.id() == id) {
                // Closed once the new events count, its last samples still
                // counted (into the same counts): the series carries on
                // without a gap.
                let mut previous = old.swap_remove(i);
                self.retired.extend(previous.close(None, totals));
            }
            now.push(new);
        }
        for mut gone in old {
            let ids = gone.close(None, totals);
            self.rings.unregister(ids.into_iter());
        }
        if let Some(watched) = self.cgroups.get_mut(&slot) {
            watched.sampled = now;
        }
        Ok(())
    }

    /// Opens what a failure that passes or a CPU coming (back) online left
    /// unopened on one of the `online` CPUs, until it opens, fails for
    /// good, or its CPU goes offline or its cgroup goes away.
    fn open_pending(&mut self, online: &[u32]) {
        let pending: Vec<CgroupSlot> = self
            .cgroups
            .iter()
            .filter(|(_, w)| w.sampled.iter().any(|s| !s.unopened.is_empty()))
            .map(|(&slot, _)| slot)
            .collect();
        for slot in pending {
            let Some(watched) = self.cgroups.get_mut(&slot) else {
                continue;
            };
            let Ok(dir) = std::fs::File::open(&watched.dir) else {
                continue; // Out of descriptors, or removed: tried again later.
            };
            let path = watched.path.clone();
            let mut sampled = std::mem::take(&mut watched.sampled);
            for state in &mut sampled {
                for cpu in std::mem::take(&mut state.unopened) {
                    if !online.contains(&cpu) {
                        continue;
                    }
                    let opened = self.open(&state.spec, state.counts, &path, &dir, cpu);
                    if let Some((event, fds)) = or_later(opened, &mut state.unopened, cpu) {
                        state.opened(cpu, event, fds);
                    }
                }
            }
            if let Some(watched) = self.cgroups.get_mut(&slot) {
                watched.sampled = sampled;
            }
        }
    }
}

/// Handing `by:` entries between these rings and another counter (the bpf
/// backend's program) at one cut per CPU (see [`ring`]'s module doc).
impl ByRings {
    /// Events of the entries `arriving` opened from now on count nothing
    /// until [`ByRings::cut`] says from when.
    pub fn hold(&mut self, arriving: HashSet<SampledId>) {
        self.rings.held = arriving;
    }

    /// Starts the events of the entries held since they opened
    /// ([`ByRings::hold`]) and drains the rings: what they hold from now on
    /// is only what comes after this call. Called right before the cut,
    /// so that a ring must fill within the cut itself, not the whole
    /// reload, before it drops a sample (see [`ring`]'s module doc on
    /// cuts).
    pub fn start_held(&mut self, totals: &mut Totals) {
        let held = &self.rings.held;
        let errors = &mut self.failures.errors;
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                if held.contains(&sampled.spec.id()) {
                    sampled.start(|errno| {
                        let reason = ErrorReason::Kernel(OpenFailure::from_errno(errno));
                        errors.count(Operation::Open, reason);
                    });
                }
            }
        }
        self.rings.drain(totals);
    }

    /// Notes how many samples the events of the entries `moving` dropped
    /// as of `mark`: the two reads of a cut that tell the drops of hits
    /// before it from those past it.
    pub fn note_drops(&mut self, moving: &HashSet<SampledId>, mark: DropMark) {
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                if moving.contains(&sampled.spec.id()) {
                    sampled.note_drops(mark);
                }
            }
        }
    }

    /// The entries of `ids` that the cgroup `slot` counts here now.
    pub fn counting(&self, slot: CgroupSlot, ids: &HashSet<SampledId>) -> Vec<Arc<SampledSpec>> {
        let Some(watched) = self.cgroups.get(&slot) else {
            return Vec::new();
        };
        let ours = watched.sampled.iter().map(|s| &s.spec);
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
        let rings = &mut self.rings;
        let moving = |s: &SampledState| {
            let id = s.spec.id();
            (arriving.contains(&id), leaving.contains(&id))
        };
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                let config = sampled.spec.attr.config;
                match moving(sampled) {
                    (true, _) => sampled.window(rings, true, |cpu| cut(config, cpu)),
                    (_, true) => sampled.window(rings, false, |cpu| cut(config, cpu)),
                    _ => {}
                }
            }
        }
        // The last samples of the events leaving, now disabled.
        wait_for_writers();
        rings.drain(totals);
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                let unsure = match moving(sampled) {
                    (true, _) => sampled.end_window(rings, true, totals),
                    (_, true) => sampled.end_window(rings, false, totals),
                    _ => 0,
                };
                if unsure > 0 {
                    tracing::warn!(
                        event = %sampled.spec.label,
                        cgroup = %watched.path,
                        samples = unsure,
                        "a full ring dropped samples of `by:` hits as the entry was handed over \
                         (cgperf was likely preempted right then): they could be of hits on \
                         either side of the cut, and are not reported lost"
                    );
                }
            }
        }
        rings.held.clear();
    }
}

impl Backend for ByRings {
    fn configure(&mut self, plan: &Plan) {
        self.ring_pages = plan.ring_pages;
    }

    /// One event per entry (the shared rings aside).
    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        wanted.sampled.len() as u64
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
        let mut outcomes = Vec::with_capacity(cgroups.len());
        for (cgroup, wanted) in cgroups {
            let unchanged = self.cgroups.get(&cgroup.slot).is_some_and(|w| {
                w.sampled.len() == wanted.sampled.len()
                    && wanted
                        .sampled
                        .iter()
                        .all(|s| w.sampled.iter().any(|o| *o.spec == **s))
            });
            if unchanged {
                outcomes.push(Outcome::Counted);
                continue;
            }
            // A directory that cannot be opened decides a new cgroup's
            // outcome; an old one's is left as it is (removed since the
            // scan: the next one drops it).
            let dir = match std::fs::File::open(&cgroup.dir) {
                Ok(dir) => dir,
                Err(e) if !self.cgroups.contains_key(&cgroup.slot) => {
                    outcomes.push(match e.raw_os_error() {
                        Some(libc::EMFILE | libc::ENFILE) => Outcome::Skipped(SkipReason::FdBudget),
                        _ => Outcome::Gone,
                    });
                    continue;
                }
                Err(_) => {
                    outcomes.push(Outcome::Counted);
                    continue;
                }
            };
            self.cgroups.entry(cgroup.slot).or_insert_with(|| Watched {
                path: cgroup.path.clone(),
                dir: cgroup.dir.clone(),
                sampled: Vec::new(),
            });
            match self.reconcile(cgroup.slot, &wanted.sampled, &dir, online, totals) {
                Ok(()) => outcomes.push(Outcome::Counted),
                Err(OutOfFds) => {
                    // Closed now, to leave room for the others.
                    self.remove(cgroup.slot);
                    outcomes.push(Outcome::Skipped(SkipReason::FdBudget));
                }
            }
        }
        self.forget_retired(totals);
        outcomes
    }

    fn remove(&mut self, slot: CgroupSlot) {
        if let Some(gone) = self.cgroups.remove(&slot) {
            // Its series vanish: what they counted since the last
            // collection would be read for nothing.
            for sampled in &gone.sampled {
                self.rings.unregister(sampled.ids());
            }
        }
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        // What the rings hold is counted before their events close.
        self.rings.drain(totals);
        let changed = || changes.closed.iter().chain(&changes.open);
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                for &cpu in changed() {
                    let ids = sampled.close(Some(cpu), totals);
                    self.rings.unregister(ids.into_iter());
                }
            }
        }
        for &cpu in changed() {
            self.rings.close(cpu);
        }
        if changes.open.is_empty() {
            return;
        }
        for watched in self.cgroups.values_mut() {
            for sampled in &mut watched.sampled {
                sampled.unopened.extend(&changes.open);
            }
        }
        self.open_pending(&changes.open);
    }

    fn retry(&mut self, online: &[u32], _totals: &mut Totals) {
        self.open_pending(online);
    }

    fn read(&mut self, totals: &mut Totals) {
        self.settle(totals);
    }

    fn drains(&self) -> bool {
        !self.rings.is_empty()
    }

    fn wait(&mut self, timeout: Duration) {
        self.rings.wait(timeout);
    }

    fn drain(&mut self, totals: &mut Totals) {
        self.rings.drain(totals);
    }

    /// Its descriptors are all in the tally.
    fn stats(&self) -> Stats {
        Stats {
            samples_lost: self.rings.lost,
            samples_undecodable: self.rings.undecodable,
            errors: self.failures.errors.clone(),
            ..Stats::default()
        }
    }
}
