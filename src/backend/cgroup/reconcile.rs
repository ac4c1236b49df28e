//! Making a cgroup's open groups those it wants, without losing or
//! double-counting anything a kept series counted.

use super::Counted;
use super::counter::GroupState;
use super::open::Opener;
use crate::backend::opening::{NotOpened, OutOfFds, or_give_up};
use crate::backend::{Outgoing, Wanted};
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

/// A group after a reconcile, and what counted it before: kept as it was
/// (nothing is opened), or opened anew.
struct Planned {
    group: GroupState,
    previous: Previous,
    kept: bool,
}

/// What counted a group opened anew until it starts.
enum Previous {
    /// Nothing: it starts from nothing (a new group, a new cgroup).
    Nothing,
    /// The cgroup's group of the same name it replaces (its events or
    /// filter changed).
    Group(GroupState),
    /// Another mechanism, which hands the group over ([`Outgoing`]).
    Outgoing,
}

impl Previous {
    fn is_some(&self) -> bool {
        !matches!(self, Self::Nothing)
    }
}

/// Makes each cgroup's groups those wanted: identical ones are kept as
/// they are; a group whose events changed is opened anew, the old one read
/// one last time (see [`hand_over`]); what is no longer wanted is closed.
/// A group new to the cgroup that `outgoing` counted until now is handed
/// over from it the same way. Returns, per cgroup, whether it ran out of
/// descriptors: then it must be given up (its descriptors are closed
/// already).
pub(super) fn reconcile(
    cgroups: &mut [Reconciling<'_>],
    online: &[u32],
    opener: &mut Opener,
    outgoing: Option<&mut dyn Outgoing>,
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
                    previous: Previous::Nothing,
                    kept: true,
                });
                continue;
            }
            let previous = match old.iter().position(|g| g.spec.name == spec.name) {
                Some(i) => Previous::Group(old.swap_remove(i)),
                None if outgoing.is_some() => Previous::Outgoing,
                None => Previous::Nothing,
            };
            plan.push(Planned {
                group: GroupState::new(spec),
                previous,
                kept: false,
            });
        }
        plans.push(plan);
    }
    let mut handing = Handing {
        opener,
        outgoing: outgoing.map(|o| o as &mut dyn Outgoing),
        totals,
    };
    hand_over(cgroups, &mut plans, &mut evicted, online, &mut handing);
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

/// What a hand-over works with: the opener of the new groups, the
/// mechanism handing groups over (if any), and the totals both add to.
struct Handing<'a> {
    opener: &'a mut Opener,
    outgoing: Option<&'a mut dyn Outgoing>,
    totals: &'a mut Totals,
}

/// Opens each new group on every online CPU, and reads what counted it
/// until then there one last time (the group it replaces, or the
/// mechanism handing it over), so that what that counted since the last
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
    handing: &mut Handing<'_>,
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
        if let Some(outgoing) = handing.outgoing.as_deref_mut() {
            outgoing.arrived(cpu);
        }
        for ((c, plan), evicted) in cgroups.iter().zip(&mut *plans).zip(&mut *evicted) {
            if *evicted || plan.iter().all(|p| p.kept) {
                continue;
            }
            // A cgroup removed meanwhile opens nothing and its old groups
            // are not read: the next scan drops it with its series.
            let done = c.in_dir(|dir| {
                for p in plan.iter_mut().filter(|p| !p.kept) {
                    hand_over_group(p, c, dir, (cpu, pinned), handing)?;
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

/// Reads what counted `p` until now on `cpu` once more, into the totals:
/// the group it replaces there, or the mechanism handing it over.
fn read_previous(p: &mut Planned, slot: CgroupSlot, cpu: u32, handing: &mut Handing<'_>) {
    match &mut p.previous {
        Previous::Nothing => {}
        Previous::Group(old) => {
            let errors = &mut handing.opener.failures.errors;
            for o in old.cpus.iter_mut().filter(|o| o.cpu == cpu) {
                o.read(errors, handing.totals);
            }
        }
        Previous::Outgoing => {
            if let Some(outgoing) = handing.outgoing.as_deref_mut() {
                outgoing.read(slot, &p.group.spec, cpu, handing.totals);
            }
        }
    }
}

/// Whether anything counted `p` on `cpu` until now.
fn counted_before(p: &Planned, cpu: u32) -> bool {
    match &p.previous {
        Previous::Nothing => false,
        Previous::Group(old) => old.cpus.iter().any(|o| o.cpu == cpu),
        Previous::Outgoing => true,
    }
}

/// Stops what counted `p` until now on `cpu`, reading it a last time
/// first if `read` (the new group did not start there), else not again
/// (read by [`read_previous`] after the new group started): the group it
/// replaces is closed there; the mechanism handing it over is no longer
/// read there.
fn end_previous(
    p: &mut Planned,
    (slot, cpu): (CgroupSlot, u32),
    read: bool,
    handing: &mut Handing<'_>,
) {
    match &mut p.previous {
        Previous::Group(old) => {
            let errors = &mut handing.opener.failures.errors;
            for o in old.cpus.iter_mut().filter(|o| o.cpu == cpu) {
                match read {
                    true => o.close(errors, handing.totals),
                    false => o.close_read(),
                }
            }
        }
        Previous::Outgoing if read => read_previous(p, slot, cpu, handing),
        Previous::Outgoing | Previous::Nothing => {}
    }
}

/// Opens `p`'s new group on `cpu` and hands what counted it there until
/// now over to it, as [`hand_over`] says: tried again while this thread,
/// `pinned` there, was switched out in between.
fn hand_over_group(
    p: &mut Planned,
    c: &Reconciling<'_>,
    dir: &std::fs::File,
    (cpu, pinned): (u32, bool),
    handing: &mut Handing<'_>,
) -> Result<(), OutOfFds> {
    for tries in 1.. {
        let before = crate::cpus::switches_of_this_thread();
        let opened = handing.opener.open(&p.group.spec, &c.state.path, dir, cpu);
        // Another core type's CPU: no counter, no series there.
        if matches!(opened, Err(NotOpened::NotHere)) {
            break;
        }
        let opened = or_give_up(opened, &mut p.group.unopened, cpu)?;
        if opened.is_none() {
            // Not opened here this time: what counted it until now is
            // read a last time, and the new one is tried again at the
            // next collection.
            end_previous(p, (c.slot, cpu), true, handing);
            p.group.counter(c.slot, cpu, handing.totals).opened(None);
            break;
        }
        read_previous(p, c.slot, cpu, handing);
        let alone = before.is_some() && crate::cpus::switches_of_this_thread() == before;
        if alone || !pinned || !counted_before(p, cpu) || tries == HAND_OVER_TRIES {
            end_previous(p, (c.slot, cpu), false, handing);
            p.group.counter(c.slot, cpu, handing.totals).opened(opened);
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
