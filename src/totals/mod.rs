//! The totals of every series, apart from the descriptors that feed them.
//!
//! A counting backend opens, reads and closes; what it reads it adds here,
//! under typed keys (cgroup slot, group, CPU; cgroup slot and `by:`
//! tracepoint). The engine decides which totals live: a reload that keeps
//! a group keeps its totals whatever the backend reopened underneath, a
//! group or cgroup that goes away takes its totals with it.
//!
//! Backends hold [`Handle`]s, so that a read adds in constant time; a
//! handle to totals the engine dropped adds nothing (its slot may hold
//! other totals by then: handles carry a generation).
//!
//! The totals also know which cgroups' totals changed since the engine
//! last asked ([`Totals::take_changed`]): the series of the others are
//! those of the last snapshot, which the next one shares.

mod counts;
mod scale;

pub use counts::{Counts, KEY_SEPARATOR, OTHER};
pub use scale::{
    Baseline, Delta, GroupTimes, GroupTotals, Interval, exported, exported_sum, exported_total,
};

use scale::Layouts;

use crate::ids::{CgroupSlot, EventId, GroupId, SampledId};
use std::collections::{HashMap, HashSet};

/// The totals of one group in one cgroup on one CPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupKey {
    /// The cgroup.
    pub cgroup: CgroupSlot,
    /// The group.
    pub group: GroupId,
    /// The CPU.
    pub cpu: u32,
}

/// The counts of one `by:` tracepoint in one cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SampledKey {
    /// The cgroup.
    pub cgroup: CgroupSlot,
    /// The tracepoint.
    pub id: SampledId,
}

/// Where totals are kept, for adding to them in constant time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

/// One slot of a [`Slab`].
#[derive(Debug)]
struct Slot<V> {
    /// Bumped each time the slot is taken again.
    generation: u32,
    /// The cgroup whose totals it holds (held last, once freed).
    cgroup: CgroupSlot,
    /// Changed since [`Slab::take_changed`] (and listed in `changed`).
    dirty: bool,
    value: Option<V>,
}

impl<V> Slot<V> {
    /// Notes that its totals changed, listing it (at `index`) in `changed`
    /// the first time since [`Slab::take_changed`].
    fn mark(&mut self, index: u32, changed: &mut Vec<u32>) {
        if !self.dirty {
            self.dirty = true;
            changed.push(index);
        }
    }
}

/// Totals by cgroup and key within it, each in a slot that a [`Handle`]
/// names. Indexed per cgroup (a cgroup has a few keys: its groups times its
/// CPUs, kept sorted), so that what a cgroup has is found, and dropped with
/// it, without looking at the others.
#[derive(Debug)]
struct Slab<K, V> {
    slots: Vec<Slot<V>>,
    free: Vec<u32>,
    index: HashMap<CgroupSlot, Vec<(K, u32)>>,
    /// The slots changed since the last [`Slab::take_changed`], each once:
    /// marking one is a flag test on the path of every read.
    changed: Vec<u32>,
    /// cgroups whose totals were added or dropped since then (a slot
    /// dropped may be taken by another cgroup before it is asked).
    reshaped: HashSet<CgroupSlot>,
}

impl<K: Ord + Clone, V: Default> Slab<K, V> {
    fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            changed: Vec::new(),
            reshaped: HashSet::new(),
        }
    }

    /// Notes that the totals in slot `index` changed.
    fn mark(&mut self, index: u32) {
        if let Some(slot) = self.slots.get_mut(index as usize) {
            slot.mark(index, &mut self.changed);
        }
    }

    /// Adds to `into` every cgroup whose totals changed since the last
    /// call.
    fn take_changed(&mut self, into: &mut HashSet<CgroupSlot>) {
        for index in self.changed.drain(..) {
            if let Some(slot) = self.slots.get_mut(index as usize) {
                slot.dirty = false;
                into.insert(slot.cgroup);
            }
        }
        into.extend(self.reshaped.drain());
    }

    fn handle(&mut self, cgroup: CgroupSlot, key: &K) -> Handle {
        let keys = self.index.entry(cgroup).or_default();
        let at = match keys.binary_search_by(|(k, _)| k.cmp(key)) {
            Ok(at) => {
                let index = keys[at].1;
                let generation = self.slots[index as usize].generation;
                return Handle { index, generation };
            }
            Err(at) => at,
        };
        let index = match self.free.pop() {
            Some(index) => {
                let slot = &mut self.slots[index as usize];
                slot.generation = slot.generation.wrapping_add(1);
                slot.cgroup = cgroup;
                slot.value = Some(V::default());
                index
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    cgroup,
                    dirty: false,
                    value: Some(V::default()),
                });
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        // A cgroup has a few keys, added one by one: no spare room.
        keys.reserve_exact(1);
        keys.insert(at, (key.clone(), index));
        self.reshaped.insert(cgroup);
        Handle {
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    /// The totals `handle` names, to change (they are marked changed).
    fn get_mut(&mut self, handle: Handle) -> Option<&mut V> {
        let Self { slots, changed, .. } = self;
        let slot = slots.get_mut(handle.index as usize)?;
        if slot.generation != handle.generation {
            return None;
        }
        slot.value.as_ref()?;
        slot.mark(handle.index, changed);
        slot.value.as_mut()
    }

    /// The totals `handle` names, not marked changed: for a caller that
    /// marks them only if it changes them.
    fn peek_mut(&mut self, handle: Handle) -> Option<&mut V> {
        match self.slots.get_mut(handle.index as usize) {
            Some(slot) if slot.generation == handle.generation => slot.value.as_mut(),
            _ => None,
        }
    }

    fn get(&self, cgroup: CgroupSlot, key: &K) -> Option<&V> {
        let keys = self.index.get(&cgroup)?;
        let at = keys.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
        self.slots.get(keys[at].1 as usize)?.value.as_ref()
    }

    /// A cgroup's totals whose key `pick` accepts, in key order.
    fn of(
        &self,
        cgroup: CgroupSlot,
        mut pick: impl FnMut(&K) -> bool,
    ) -> impl Iterator<Item = (&K, &V)> {
        self.index
            .get(&cgroup)
            .into_iter()
            .flatten()
            .filter(move |(k, _)| pick(k))
            .filter_map(|(k, i)| Some((k, self.slots.get(*i as usize)?.value.as_ref()?)))
    }

    /// Calls `f` on each of a cgroup's totals whose key `pick` accepts
    /// (they are marked changed).
    fn each_mut(
        &mut self,
        cgroup: CgroupSlot,
        mut pick: impl FnMut(&K) -> bool,
        mut f: impl FnMut(&mut V),
    ) {
        let Some(keys) = self.index.get(&cgroup) else {
            return;
        };
        for (key, index) in keys {
            if pick(key)
                && let Some(Slot {
                    value: Some(value), ..
                }) = self.slots.get_mut(*index as usize)
            {
                f(value);
                self.reshaped.insert(cgroup);
            }
        }
    }

    /// Keeps, of a cgroup's totals, those whose key `keep` accepts.
    fn retain(&mut self, cgroup: CgroupSlot, mut keep: impl FnMut(&K) -> bool) {
        let Some(keys) = self.index.get_mut(&cgroup) else {
            return;
        };
        let (slots, free) = (&mut self.slots, &mut self.free);
        let before = keys.len();
        keys.retain(|(key, index)| {
            let kept = keep(key);
            if !kept && let Some(slot) = slots.get_mut(*index as usize) {
                slot.value = None;
                free.push(*index);
            }
            kept
        });
        if keys.len() != before {
            self.reshaped.insert(cgroup);
        }
        if keys.is_empty() {
            self.index.remove(&cgroup);
        }
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|slot| slot.value.as_ref())
    }

    /// Calls `f` on every total; those it says it changed are marked so.
    fn update_all(&mut self, mut f: impl FnMut(&mut V) -> bool) {
        for index in 0..self.slots.len() {
            let changed = match &mut self.slots[index].value {
                Some(value) => f(value),
                None => false,
            };
            if changed {
                self.mark(index as u32);
            }
        }
    }
}

/// The totals of every counted series.
#[derive(Debug)]
pub struct Totals {
    /// Per cgroup, by group and CPU.
    groups: Slab<(GroupId, u32), GroupTotals>,
    /// Per cgroup, by `by:` tracepoint.
    sampled: Slab<SampledId, Counts>,
    /// The columns the groups' totals share.
    layouts: Layouts,
    /// Reused by [`Totals::add`]: a read allocates nothing.
    scratch: Delta,
}

impl Default for Totals {
    fn default() -> Self {
        Self {
            groups: Slab::new(),
            sampled: Slab::new(),
            layouts: Layouts::default(),
            scratch: Delta::default(),
        }
    }
}

impl Totals {
    /// The handle of a group's totals on a CPU, made (at zero) if they do
    /// not exist.
    pub fn group(&mut self, key: &GroupKey) -> Handle {
        self.groups
            .handle(key.cgroup, &(key.group.clone(), key.cpu))
    }

    /// The totals a handle names; `None` once they were dropped.
    pub fn group_mut(&mut self, handle: Handle) -> Option<&mut GroupTotals> {
        self.groups.get_mut(handle)
    }

    /// The positions of `events` (a group's events in its order) in the
    /// totals `handle` names, what [`Totals::add`] takes: an event the
    /// totals had keeps its total, a new one starts at zero. Empty once
    /// those totals were dropped.
    pub fn columns(&mut self, handle: Handle, events: &[EventId]) -> Vec<usize> {
        match self.groups.get_mut(handle) {
            Some(totals) => totals.columns(events, &mut self.layouts),
            None => Vec::new(),
        }
    }

    /// Adds one interval, which `fill` writes into a reused [`Delta`], to
    /// the totals `handle` names, its events at `columns` (see
    /// [`Totals::columns`]); `None` once those totals were dropped. An
    /// interval in which nothing was enabled, ran or counted changes
    /// nothing, and the totals are not marked changed.
    pub fn add(
        &mut self,
        handle: Handle,
        columns: &[usize],
        fill: impl FnOnce(&mut Delta),
    ) -> Option<Interval> {
        let totals = self.groups.peek_mut(handle)?;
        fill(&mut self.scratch);
        if self.scratch.is_nothing() {
            return Some(Interval::Idle);
        }
        let interval = totals.add(columns, &self.scratch);
        self.groups.mark(handle.index);
        Some(interval)
    }

    /// A group's totals in a cgroup, per CPU, in CPU order.
    pub fn per_cpu(
        &self,
        cgroup: CgroupSlot,
        group: &GroupId,
    ) -> impl Iterator<Item = (u32, &GroupTotals)> {
        self.groups
            .of(cgroup, move |(g, _)| g == group)
            .map(|((_, cpu), v)| (*cpu, v))
    }

    /// The handle of a `by:` tracepoint's counts, made (empty) if they do
    /// not exist.
    pub fn sampled(&mut self, key: &SampledKey) -> Handle {
        self.sampled.handle(key.cgroup, &key.id)
    }

    /// The counts a handle names; `None` once they were dropped.
    pub fn sampled_mut(&mut self, handle: Handle) -> Option<&mut Counts> {
        self.sampled.get_mut(handle)
    }

    /// The counts of a `by:` tracepoint in a cgroup, if it has any.
    pub fn counts(&self, key: &SampledKey) -> Option<&Counts> {
        self.sampled.get(key.cgroup, &key.id)
    }

    /// Whether any `by:` tracepoint is owed more hits than are known lost
    /// (see [`Counts::owes_more`]).
    pub fn owe_more(&self) -> bool {
        self.sampled.values().any(Counts::owes_more)
    }

    /// Takes what every `by:` tracepoint is owed as lost (see
    /// [`Counts::settle`]).
    pub fn settle_counts(&mut self) {
        self.sampled.update_all(|counts| {
            let before = counts.lost();
            counts.settle();
            counts.lost() != before
        });
    }

    /// The cgroups whose totals changed (were added to, made, dropped or
    /// reshaped) since the last call.
    pub fn take_changed(&mut self) -> HashSet<CgroupSlot> {
        let mut changed = HashSet::new();
        self.groups.take_changed(&mut changed);
        self.sampled.take_changed(&mut changed);
        changed
    }

    /// Keeps, of a cgroup's totals, those of the groups and `by:`
    /// tracepoints it still counts, and of each group's events those it
    /// still has: what goes is gone, and starts from zero if it comes back.
    pub fn keep_only(
        &mut self,
        cgroup: CgroupSlot,
        groups: &[(GroupId, Vec<EventId>)],
        sampled: &[SampledId],
    ) {
        self.groups
            .retain(cgroup, |(group, _)| groups.iter().any(|(g, _)| g == group));
        for (group, events) in groups {
            self.groups.each_mut(
                cgroup,
                |(g, _)| g == group,
                |totals| totals.keep_only(events, &mut self.layouts),
            );
        }
        self.sampled.retain(cgroup, |id| sampled.contains(id));
        self.layouts.prune();
    }

    /// Drops every total of a cgroup that is no longer counted.
    pub fn remove(&mut self, cgroup: CgroupSlot) {
        self.groups.retain(cgroup, |_| false);
        self.sampled.retain(cgroup, |_| false);
        self.layouts.prune();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn key(cgroup: u64, group: GroupId, cpu: u32) -> GroupKey {
        GroupKey {
            cgroup: CgroupSlot(cgroup),
            group,
            cpu,
        }
    }

    fn sid(label: &str) -> SampledId {
        SampledId {
            label: label.into(),
            fields: Arc::from([Arc::from("which")]),
        }
    }

    fn event(label: &str) -> EventId {
        EventId {
            label: label.into(),
            clock: false,
        }
    }

    #[test]
    fn a_handle_to_dropped_totals_adds_nothing_even_when_its_slot_is_reused() {
        let mut totals = Totals::default();
        let old = totals.group(&key(1, GroupId::Tracepoints, 0));
        totals.remove(CgroupSlot(1));
        let new = totals.group(&key(2, GroupId::Tracepoints, 0));
        assert_eq!(old.index, new.index, "premise: the slot is reused");
        assert!(totals.group_mut(old).is_none());
        assert!(totals.group_mut(new).is_some());
    }

    #[test]
    fn per_cpu_lists_one_group_of_one_cgroup() {
        let mut totals = Totals::default();
        for (cgroup, group, cpu) in [
            (1, GroupId::Probes, 1),
            (1, GroupId::Tracepoints, 0),
            (1, GroupId::Probes, 0),
            (2, GroupId::Probes, 0),
        ] {
            totals.group(&key(cgroup, group, cpu));
        }
        let cpus: Vec<u32> = totals
            .per_cpu(CgroupSlot(1), &GroupId::Probes)
            .map(|(cpu, _)| cpu)
            .collect();
        assert_eq!(cpus, vec![0, 1]);
    }

    #[test]
    fn keep_only_drops_groups_events_and_sampled_of_that_cgroup_only() {
        let mut totals = Totals::default();
        let named = GroupId::Named("sw".into());
        for cgroup in [1, 2] {
            for group in [named.clone(), GroupId::Tracepoints] {
                let h = totals.group(&key(cgroup, group, 0));
                let columns = totals.columns(h, &[event("a"), event("b")]);
                totals.group_mut(h).expect("live").add(
                    &columns,
                    &Delta {
                        enabled_ns: 1,
                        running_ns: 1,
                        values: vec![Some(1), Some(2)],
                    },
                );
            }
            for id in ["x", "y"] {
                let key = SampledKey {
                    cgroup: CgroupSlot(cgroup),
                    id: sid(id),
                };
                totals.sampled(&key);
            }
        }
        totals.keep_only(
            CgroupSlot(1),
            &[(named.clone(), vec![event("b")])],
            &[sid("y")],
        );
        let sum = |cgroup, group: &GroupId, e: &str| -> f64 {
            totals
                .per_cpu(CgroupSlot(cgroup), group)
                .map(|(_, t)| t.value(&event(e)))
                .sum()
        };
        assert_eq!(sum(1, &named, "a"), 0.0);
        assert_eq!(sum(1, &named, "b"), 2.0);
        assert_eq!(
            totals.per_cpu(CgroupSlot(1), &GroupId::Tracepoints).count(),
            0
        );
        assert_eq!(sum(2, &named, "a"), 1.0);
        assert_eq!(sum(2, &GroupId::Tracepoints, "b"), 2.0);
        let has = |cgroup, id: &str| {
            totals
                .counts(&SampledKey {
                    cgroup: CgroupSlot(cgroup),
                    id: sid(id),
                })
                .is_some()
        };
        assert!(!has(1, "x") && has(1, "y") && has(2, "x") && has(2, "y"));
    }
}
