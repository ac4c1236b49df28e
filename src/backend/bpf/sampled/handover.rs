//! Changing where `by:` entries are counted: a new table of entries put
//! in force, entries moving between the kernel and the rings at one cut
//! per CPU (each hit counted once), and retired entries read one last
//! time.

use super::rules::Window;
use super::{Entry, InKernel, settle_runs};
use crate::backend::rings::{ByRings, DropMark};
use crate::backend::{Backend, Cgroup, Outcome, Wanted};
use crate::ids::SampledId;
use crate::perf::monotonic_ns;
use crate::totals::Totals;
use std::collections::{BTreeSet, HashSet};

impl InKernel {
    /// Puts `next` in force, then reads the entries it retires one last
    /// time and forgets them. An entry whose series another entry of
    /// `next` carries on is switched with one store; one that leaves the
    /// kernel (for the rings, or for good) counts the hits before the cut
    /// of [`InKernel::with_rings`], and one that arrives from the rings
    /// those past it.
    pub(super) fn switch(&mut self, mut next: Vec<Entry>, totals: &mut Totals) {
        let (mut retired, mut leaving) = (BTreeSet::new(), Vec::new());
        for entry in &mut next {
            let new = !self.entries.iter().any(|e| e.index == entry.index);
            if new && self.on_rings.contains(&entry.spec.id()) {
                entry.window = Window::FromCut;
            }
        }
        for old in &self.entries {
            if next.iter().any(|e| e.index == old.index) {
                continue;
            }
            match next.iter().any(|e| e.spec.id() == old.spec.id()) {
                true => retired.insert(old.home),
                false => {
                    leaving.push(Entry {
                        window: Window::UntilCut,
                        ..old.clone()
                    });
                    true
                }
            };
        }
        self.on_rings = self.planned.clone();
        for entry in &next {
            self.on_rings.remove(&entry.spec.id());
        }
        let published: Vec<Entry> = next.iter().chain(&leaving).cloned().collect();
        self.entries = next;
        self.leaving = leaving;
        self.publish(&published);
        self.retire(retired, totals);
    }

    /// Has `rings` count the `sampled` entries of each cgroup that are
    /// not counted here: as [`ByRings`]'s `apply` does, with its
    /// outcomes, but when an entry moves between the kernel and the rings,
    /// the side it leaves counts the hits before a cut and the side it
    /// joins those past it, on each CPU, so that no hit is counted twice
    /// or not at all:
    ///
    /// 1. The new side is made ready: the rings open the events of the
    ///    entries joining them, stopped, and keep those of the entries
    ///    leaving them; in the kernel, the entries joining it count hits
    ///    past the cut, and those leaving it hits before it (all hits while
    ///    no cut is set, [`InKernel::switch`]).
    /// 2. The rings' new events start and the rings are drained; the cut is
    ///    set to now, and every run of the program that might not have seen
    ///    it ends ([`InKernel::cut`]); on each CPU, the first hit past it
    ///    records when it came. The moving events' drops, read right before
    ///    and right after the cut is set, tell the samples the rings drop
    ///    of hits this program counts from those they lose (the rings'
    ///    module on cuts); starting and draining here, not at step 1, keeps
    ///    a ring from filling up in between.
    /// 3. The rings count the samples on their side of that time on each
    ///    CPU, and close the events of the entries leaving them.
    /// 4. The entries leaving the kernel are read one last time and go;
    ///    those that joined it count every hit again, and the cut goes
    ///    ([`InKernel::handed_over`]).
    pub fn with_rings(
        &mut self,
        rings: &mut ByRings,
        sampled: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        let to_rings: HashSet<SampledId> = self
            .leaving
            .iter()
            .map(|e| e.spec.id())
            .filter(|id| self.on_rings.contains(id))
            .collect();
        let from_rings: HashSet<SampledId> = self
            .entries
            .iter()
            .filter(|e| e.window == Window::FromCut)
            .map(|e| e.spec.id())
            .collect();
        if to_rings.is_empty() && from_rings.is_empty() {
            let outcomes = rings.apply(sampled, online, totals);
            self.handed_over(totals);
            return outcomes;
        }
        rings.hold(to_rings.clone());
        let kept: Vec<(Cgroup, Wanted)> = sampled
            .iter()
            .map(|(cgroup, wanted)| {
                let mut wanted = wanted.clone();
                let leaving = rings.counting(cgroup.slot, &from_rings);
                wanted.sampled.extend(leaving);
                (cgroup.clone(), wanted)
            })
            .collect();
        rings.apply(&kept, online, totals);
        self.cut(rings, &to_rings, &from_rings, totals);
        let outcomes = rings.apply(sampled, online, totals);
        self.handed_over(totals);
        outcomes
    }

    /// Sets the cut (step 2 of [`InKernel::with_rings`]) and has `rings`
    /// count on their side of it (step 3).
    fn cut(
        &mut self,
        rings: &mut ByRings,
        to_rings: &HashSet<SampledId>,
        from_rings: &HashSet<SampledId>,
        totals: &mut Totals,
    ) {
        let Some(loaded) = self.loaded.as_ref() else {
            // Nothing counts here: the rings count every hit.
            rings.start_held(totals);
            rings.cut(to_rings, from_rings, |_, _| 0, totals);
            return;
        };
        // Every run that may have read the tables before the windows of
        // step 1 were published has ended: none counts past the cut an
        // entry leaving.
        settle_runs();
        rings.start_held(totals);
        let moving: HashSet<SampledId> = to_rings.union(from_rings).cloned().collect();
        rings.note_drops(&moving, DropMark::Drain);
        let at = monotonic_ns().unwrap_or_else(|e| {
            tracing::error!("cannot read CLOCK_MONOTONIC ({e:?}): the hand-over may count twice");
            1
        });
        loaded.set_cut(at);
        rings.note_drops(&moving, DropMark::Cut);
        // Every hit the program counted before the cut has ended, its
        // sample written: on a CPU where no hit came past the cut yet, the
        // next one comes after now.
        settle_runs();
        let now = monotonic_ns().unwrap_or(0);
        let firsts = loaded.firsts(at);
        let cut = |tp: u64, cpu: u32| {
            let first = firsts.get(&tp).and_then(|f| f.get(cpu as usize).copied());
            first.flatten().unwrap_or(now)
        };
        rings.cut(to_rings, from_rings, cut, totals);
    }

    /// Ends a hand-over (step 4 of [`InKernel::with_rings`]): stops
    /// counting the entries that left the kernel and reads them one last
    /// time; those that joined it count every hit.
    fn handed_over(&mut self, totals: &mut Totals) {
        let windows = self.entries.iter().any(|e| e.window != Window::Always);
        if self.leaving.is_empty() && !windows {
            return;
        }
        let leaving: BTreeSet<u32> = self.leaving.drain(..).map(|e| e.home).collect();
        for entry in &mut self.entries {
            entry.window = Window::Always;
        }
        let entries = self.entries.clone();
        self.publish(&entries);
        // No run reads a window any more: the cut can go.
        settle_runs();
        if let Some(loaded) = &self.loaded {
            loaded.set_cut(0);
        }
        self.retire(leaving, totals);
    }

    fn publish(&mut self, entries: &[Entry]) {
        if let Some(loaded) = self.loaded.as_mut()
            && let Err(e) = loaded.publish(entries, &self.tally)
        {
            tracing::error!("cannot attach the `by:` BPF program: {e}");
        }
    }

    /// Reads the hashes at the homes of `retired` entries one last time,
    /// once no run uses them (they are out of the table in force), and
    /// forgets them; but not a home an entry in force still counts in.
    fn retire(&mut self, mut retired: BTreeSet<u32>, totals: &mut Totals) {
        let live = || self.entries.iter().chain(&self.leaving);
        retired.retain(|home| !live().any(|e| e.home == *home));
        if retired.is_empty() {
            return;
        }
        settle_runs();
        self.collect(totals, &retired);
        for watched in self.cgroups.values_mut() {
            for home in &retired {
                watched.cells.remove(home);
            }
        }
        self.last.retain(|k, _| !retired.contains(&k.entry));
        // Their hashes go with every key and cell in them: the index is
        // free for an entry with hashes of its own.
        if let Some(loaded) = self.loaded.as_mut() {
            for home in retired {
                loaded.drop_room(home);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::budget::{FdBudget, Fds};
    use crate::events::{EventAttr, Field, FieldKind, PERF_TYPE_TRACEPOINT};
    use crate::plan::SampledSpec;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;

    /// An entry `label` by one integer field; `max_series` tells two
    /// versions of one series apart.
    fn spec(label: &str, max_series: usize) -> Arc<SampledSpec> {
        let field = Field {
            name: "which".into(),
            type_text: "int".into(),
            offset: 8,
            size: 4,
            signed: true,
            kind: FieldKind::Int,
        };
        Arc::new(SampledSpec {
            label: label.into(),
            attr: EventAttr::new(PERF_TYPE_TRACEPOINT, 7),
            filter: None,
            fields: vec![("which".into(), field)],
            max_series,
            syscall_name: None,
            filter_fields: Vec::new(),
        })
    }

    fn entry(spec: &Arc<SampledSpec>, index: u32, home: u32) -> Entry {
        Entry {
            spec: spec.clone(),
            index,
            home,
            window: Window::Always,
        }
    }

    /// Entries in force with nothing loaded (so nothing of the kernel is
    /// touched), of a plan of `planned`.
    fn in_kernel(entries: Vec<Entry>, planned: &[&Arc<SampledSpec>]) -> InKernel {
        let mut by = InKernel::new(16, Arc::new(AtomicU64::new(0)));
        by.entries = entries;
        by.planned = planned.iter().map(|s| s.id()).collect();
        by
    }

    fn rings() -> ByRings {
        let fds = Fds {
            tally: Arc::new(AtomicU64::new(0)),
            budget: FdBudget::from_limit(1 << 20),
        };
        ByRings::new(fds, 1)
    }

    /// (label, index, home, window) of each entry.
    fn shown(entries: &[Entry]) -> Vec<(String, u32, u32, Window)> {
        let show = |e: &Entry| (e.spec.label.to_string(), e.index, e.home, e.window);
        entries.iter().map(show).collect()
    }

    fn ids(specs: &[&Arc<SampledSpec>]) -> HashSet<SampledId> {
        specs.iter().map(|s| s.id()).collect()
    }

    /// Ends the hand-over, as the backend does right after the switch.
    fn hand_over(by: &mut InKernel, totals: &mut Totals) {
        let outcomes = by.with_rings(&mut rings(), &[], &[0], totals);
        assert!(outcomes.is_empty());
    }

    #[test]
    fn an_entry_kept_keeps_its_place_and_counts_every_hit() {
        let a = spec("a", 10);
        let mut by = in_kernel(vec![entry(&a, 3, 3)], &[&a]);
        let mut totals = Totals::default();
        by.switch(vec![entry(&a, 3, 3)], &mut totals);
        assert_eq!(shown(&by.entries), [("a".into(), 3, 3, Window::Always)]);
        assert!(by.leaving.is_empty());
        assert!(by.on_rings.is_empty());
    }

    #[test]
    fn an_entry_dropped_counts_until_the_cut_and_then_goes() {
        let (a, b) = (spec("a", 10), spec("b", 10));
        let mut by = in_kernel(vec![entry(&a, 0, 0), entry(&b, 1, 1)], &[&a]);
        let mut totals = Totals::default();
        by.switch(vec![entry(&a, 0, 0)], &mut totals);
        assert_eq!(shown(&by.leaving), [("b".into(), 1, 1, Window::UntilCut)]);
        assert_eq!(shown(&by.entries), [("a".into(), 0, 0, Window::Always)]);
        assert!(
            by.on_rings.is_empty(),
            "b is in no plan: the rings do not take it"
        );
        hand_over(&mut by, &mut totals);
        assert!(by.leaving.is_empty());
        assert_eq!(shown(&by.entries), [("a".into(), 0, 0, Window::Always)]);
    }

    #[test]
    fn an_entry_leaving_for_the_rings_is_theirs_past_the_cut() {
        let (a, b) = (spec("a", 10), spec("b", 10));
        let mut by = in_kernel(vec![entry(&a, 0, 0), entry(&b, 1, 1)], &[&a, &b]);
        let mut totals = Totals::default();
        by.switch(vec![entry(&a, 0, 0)], &mut totals);
        assert_eq!(by.on_rings, ids(&[&b]));
        assert_eq!(shown(&by.leaving), [("b".into(), 1, 1, Window::UntilCut)]);
        hand_over(&mut by, &mut totals);
        assert!(by.leaving.is_empty());
        assert_eq!(by.on_rings, ids(&[&b]), "the rings keep it");
    }

    #[test]
    fn an_entry_arriving_from_the_rings_counts_only_past_the_cut() {
        let (a, b) = (spec("a", 10), spec("b", 10));
        let mut by = in_kernel(vec![entry(&a, 0, 0)], &[&a, &b]);
        by.on_rings = ids(&[&b]);
        let mut totals = Totals::default();
        by.switch(vec![entry(&a, 0, 0), entry(&b, 1, 1)], &mut totals);
        assert_eq!(
            shown(&by.entries),
            [
                ("a".into(), 0, 0, Window::Always),
                ("b".into(), 1, 1, Window::FromCut),
            ]
        );
        assert!(by.on_rings.is_empty());
        assert!(by.leaving.is_empty());
        hand_over(&mut by, &mut totals);
        assert_eq!(
            shown(&by.entries),
            [
                ("a".into(), 0, 0, Window::Always),
                ("b".into(), 1, 1, Window::Always),
            ],
            "once handed over, every hit"
        );
    }

    #[test]
    fn a_new_entry_no_ring_counted_counts_every_hit_at_once() {
        let (a, c) = (spec("a", 10), spec("c", 10));
        let mut by = in_kernel(vec![entry(&a, 0, 0)], &[&a, &c]);
        let mut totals = Totals::default();
        by.switch(vec![entry(&a, 0, 0), entry(&c, 1, 1)], &mut totals);
        assert_eq!(by.entries[1].window, Window::Always);
    }

    #[test]
    fn an_entry_changed_under_the_same_series_switches_without_a_cut() {
        let (old, new) = (spec("a", 10), spec("a", 20));
        assert_eq!(old.id(), new.id());
        let mut by = in_kernel(vec![entry(&old, 0, 0)], &[&new]);
        // As placed: another index, the same hashes.
        let mut totals = Totals::default();
        by.switch(vec![entry(&new, 1, 0)], &mut totals);
        assert!(by.leaving.is_empty(), "no window: one store switches it");
        assert_eq!(shown(&by.entries), [("a".into(), 1, 0, Window::Always)]);
        assert_eq!(by.entries[0].spec.max_series, 20);
        assert!(by.on_rings.is_empty());
    }

    #[test]
    fn the_rings_count_the_planned_entries_the_kernel_does_not() {
        let (a, b, c) = (spec("a", 10), spec("b", 10), spec("c", 10));
        let mut by = in_kernel(Vec::new(), &[&a, &b, &c]);
        let mut totals = Totals::default();
        by.switch(vec![entry(&b, 0, 0)], &mut totals);
        assert_eq!(by.on_rings, ids(&[&a, &c]));
        by.planned = ids(&[&b]);
        by.switch(vec![entry(&b, 0, 0)], &mut totals);
        assert!(by.on_rings.is_empty(), "a and c left the plan");
    }

    #[test]
    fn with_nothing_moving_a_hand_over_only_ends_the_windows_left() {
        let a = spec("a", 10);
        let mut by = in_kernel(vec![entry(&a, 0, 0)], &[&a]);
        by.entries[0].window = Window::FromCut;
        let mut totals = Totals::default();
        // Nothing on the rings arrives: the window ends all the same.
        by.on_rings.clear();
        let mut rings = rings();
        let outcomes = by.with_rings(&mut rings, &[], &[0, 1], &mut totals);
        assert!(outcomes.is_empty());
        assert_eq!(by.entries[0].window, Window::Always);
    }

    #[test]
    fn an_entry_the_rings_counted_before_the_program_loaded_arrives_at_the_cut() {
        let b = spec("b", 10);
        // A plan whose only entry the kernel cannot count: nothing loads,
        // the rings count b.
        let mut by = in_kernel(Vec::new(), &[&b]);
        by.pending = Some(Vec::new());
        let mut totals = Totals::default();
        by.apply(std::iter::empty(), &mut totals);
        assert!(by.loaded.is_none());
        assert_eq!(by.on_rings, ids(&[&b]), "the rings count b");
        // A reload makes b one the kernel counts; once the program loaded,
        // b moves in, and the rings stop at the cut.
        by.switch(vec![entry(&b, 0, 0)], &mut totals);
        assert_eq!(shown(&by.entries), [("b".into(), 0, 0, Window::FromCut)]);
    }
}
