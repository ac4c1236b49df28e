//! Making a cgroup's open groups those it wants, without losing or
//! double-counting anything a kept series counted.

use super::Counted;
use super::counter::GroupState;
use super::open::Opener;
use crate::backend::Wanted;
use crate::backend::opening::{NotOpened, OutOfFds, or_give_up};
use crate::ids::CgroupSlot;
use crate::totals::Totals;

/// A cgroup whose groups are to become those wanted.
pub(super) struct Reconciling<'a> {
    pub slot: CgroupSlot,
    pub state: &'a mut Counted,
    pub wanted: Wanted,
    /// Its directory, if open already (a new cgroup); otherwise opened
    /// when needed and closed after, so that a reload of many cgroups holds
    /// one at a time.
    pub open: Option<std::fs::File>,
}

impl Reconciling<'_> {
    /// Runs `f` with the cgroup's directory; `None` if it cannot be opened
    /// (removed since the scan: the next one drops it).
    fn in_dir<R>(&self, f: impl FnOnce(&std::fs::File) -> R) -> Option<R> {
        match &self.open {
            Some(dir) => Some(f(dir)),
            None => std::fs::File::open(&self.state.dir).ok().map(|dir| f(&dir)),
        }
    }
}

/// A group after a reconcile, and the one it replaces: kept as it was
/// (`previous` is `None` and nothing is opened), or opened anew.
struct Planned {
    group: GroupState,
    previous: Option<GroupState>,
    kept: bool,
}

/// Makes each cgroup's groups those wanted: identical ones are kept as
/// they are; a group whose events changed is opened anew, the old one read
/// one last time (see [`hand_over`]); what is no longer wanted is closed.
/// Returns, per cgroup, whether it ran out of descriptors: then it must be
/// given up (its descriptors are closed already).
pub(super) fn reconcile(
    cgroups: &mut [Reconciling<'_>],
    online: &[u32],
    opener: &mut Opener,
    totals: &mut Totals,
) -> Vec<bool> {
    let mut plans = Vec::with_capacity(cgroups.len());
    let mut evicted = vec![false; cgroups.len()];
    for c in cgroups.iter_mut() {
        let mut old = std::mem::take(&mut c.state.groups);
        let wanted = std::mem::take(&mut c.wanted.groups);
        let mut plan = Vec::with_capacity(wanted.len());
        for spec in wanted {
            if let Some(i) = old.iter().position(|g| *g.spec == *spec) {
                plan.push(Planned {
                    group: old.swap_remove(i),
                    previous: None,
                    kept: true,
                });
                continue;
            }
            let previous = old
                .iter()
                .position(|g| g.spec.name == spec.name)
                .map(|i| old.swap_remove(i));
            plan.push(Planned {
                group: GroupState::new(spec),
                previous,
                kept: false,
            });
        }
        plans.push(plan);
    }
    hand_over(cgroups, &mut plans, &mut evicted, online, opener, totals);
    for ((c, plan), evicted) in cgroups.iter_mut().zip(plans).zip(&evicted) {
        if !evicted {
            let mut groups: Vec<GroupState> = plan.into_iter().map(|p| p.group).collect();
            // Collected in the plan's larger allocation: a host has
            // thousands of these.
            groups.shrink_to_fit();
            c.state.groups = groups;
        }
    }
    evicted
}

/// Times a hand-over on a CPU is tried before it is taken as it is.
const HAND_OVER_TRIES: u32 = 8;

/// Opens each new group on every online CPU, and reads the group it
/// replaces there one last time, so that what it counted since the last
/// collection is not lost.
///
/// The order is what makes the hand-over exact. Reading the old group first
/// and opening the new one after would lose what happens between the two;
/// opening the new one first counts what happens between its start and the
/// old one's final read twice. Neither happens when nothing of the cgroup
/// runs on that CPU in between, and cgperf makes sure of that by doing both
/// on that CPU: while this thread runs there, no other task does. The new
/// group starts counting from zero when it is enabled, before the old one's
/// final read; both add to the same totals (the series of the events they
/// share), each occurrence in exactly one of them; the old one is closed
/// without another read. If this thread was switched out in between (its
/// context switches say so; preempted by a busy task of the CPU, for a few
/// milliseconds), the new group goes without a read, uncounted, and the
/// hand-over is tried again, up to [`HAND_OVER_TRIES`] times. What
/// remains is cgperf's own events if it runs inside a cgroup it counts. A
/// CPU the thread may not move to (a cpuset) gets the same order without
/// that guarantee.
///
/// The loop runs CPU by CPU over every cgroup of a reload, so the thread
/// moves once per CPU (a move costs some 100 µs), not once per cgroup.
/// A cgroup that runs out of descriptors is marked `evicted` and its groups
/// closed at once, so that it leaves room for the others.
fn hand_over(
    cgroups: &[Reconciling<'_>],
    plans: &mut [Vec<Planned>],
    evicted: &mut [bool],
    online: &[u32],
    opener: &mut Opener,
    totals: &mut Totals,
) {
    if plans.iter().flatten().all(|p| p.kept) {
        return;
    }
    // Only a hand-over needs the thread on the CPU it opens on.
    let mut pin = plans
        .iter()
        .flatten()
        .any(|p| p.previous.is_some())
        .then(crate::cpus::Pin::new);
    for &cpu in online {
        let pinned = pin.as_mut().is_some_and(|pin| pin.to(cpu));
        for ((c, plan), evicted) in cgroups.iter().zip(&mut *plans).zip(&mut *evicted) {
            if *evicted || plan.iter().all(|p| p.kept) {
                continue;
            }
            // A cgroup removed meanwhile opens nothing and its old groups
            // are not read: the next scan drops it with its series.
            let done = c.in_dir(|dir| {
                for p in plan.iter_mut().filter(|p| !p.kept) {
                    hand_over_group(p, c, dir, cpu, pinned, opener, totals)?;
                }
                Ok(())
            });
            *evicted = matches!(done, Some(Err(OutOfFds)));
            if *evicted {
                plan.clear();
            }
        }
    }
}

/// Opens `p`'s new group on `cpu` and hands its old one there over to it,
/// as [`hand_over`] says: tried again while this thread, `pinned` there,
/// was switched out in between.
fn hand_over_group(
    p: &mut Planned,
    c: &Reconciling<'_>,
    dir: &std::fs::File,
    cpu: u32,
    pinned: bool,
    opener: &mut Opener,
    totals: &mut Totals,
) -> Result<(), OutOfFds> {
    for tries in 1.. {
        let before = crate::cpus::switches_of_this_thread();
        let opened = opener.open(&p.group.spec, &c.state.path, dir, cpu);
        // Another core type's CPU: no counter, no series there.
        if matches!(opened, Err(NotOpened::NotHere)) {
            break;
        }
        let opened = or_give_up(opened, &mut p.group.unopened, cpu)?;
        let errors = &mut opener.failures.errors;
        let old = p.previous.iter_mut().flat_map(|g| &mut g.cpus);
        let mut old: Vec<_> = old.filter(|c| c.cpu == cpu).collect();
        if opened.is_none() {
            // Not opened here this time: the old group's counts stay, and
            // the new one is tried again at the next collection.
            old.into_iter().for_each(|o| o.close(errors, totals));
            p.group.counter(c.slot, cpu, totals).opened(None);
            break;
        }
        for o in &mut old {
            o.read(errors, totals);
        }
        let alone = before.is_some() && crate::cpus::switches_of_this_thread() == before;
        if alone || !pinned || old.is_empty() || tries == HAND_OVER_TRIES {
            old.into_iter().for_each(|o| o.close_read());
            p.group.counter(c.slot, cpu, totals).opened(opened);
            break;
        }
        tracing::debug!(
            cpu,
            tries,
            "hand-over tried again: switched out between the new group's start and the old \
             one's read"
        );
    }
    Ok(())
}
