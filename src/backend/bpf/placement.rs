//! Where each counted group's events sit among a CPU's counters: stable
//! positions, so that a reload changes only the groups that change.

use super::abi::{MAX_COUNTED, MAX_EVENTS, Source};
use super::epochs::Described;
use crate::backend::budget::Held;
use crate::events::{
    PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK,
    PERF_TYPE_SOFTWARE,
};
use crate::plan::GroupSpec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The groups wanted, in plan order, as many as fit in [`MAX_COUNTED`]
/// counters per CPU.
#[derive(Debug, Clone, Default)]
pub(super) struct Layout {
    groups: Vec<Arc<GroupSpec>>,
}

impl Layout {
    /// The groups in this order, as many as fit in [`MAX_COUNTED`]; the
    /// others, returned second, cannot be counted through BPF.
    pub fn of(groups: Vec<Arc<GroupSpec>>) -> (Self, Vec<Arc<GroupSpec>>) {
        let mut layout = Self::default();
        let mut left = Vec::new();
        let mut events = 0;
        for spec in groups {
            let n = spec.events.len();
            if events + n > MAX_COUNTED {
                left.push(spec);
                continue;
            }
            events += n;
            layout.groups.push(spec);
        }
        (layout, left)
    }

    /// The groups, in order.
    pub fn groups(&self) -> impl Iterator<Item = &Arc<GroupSpec>> {
        self.groups.iter()
    }
}

/// Where a placed group stands in a change of the counted groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Counted.
    Live,
    /// Placed, counted on each CPU from its [`Kernel::cut`] on.
    New,
    /// Counted on each CPU until its [`Kernel::cut`].
    Retiring,
}

/// A group placed at counter indices, and its counters per CPU.
#[derive(Debug)]
pub(super) struct Placed {
    pub spec: Arc<GroupSpec>,
    /// The indices of its events, leader first.
    pub at: Vec<usize>,
    /// Where the program reads each event, in group order ([`sources`]).
    pub sources: Vec<Source>,
    pub phase: Phase,
    /// The CPUs it counts on, with the perf counters opened there for
    /// those of its events read from one (none if the program counts
    /// them all itself).
    pub held: BTreeMap<u32, Option<Held>>,
}

impl Placed {
    /// Its counters as a change makes them live.
    pub fn described(&self) -> impl Iterator<Item = Described> + '_ {
        self.at
            .iter()
            .zip(&self.sources)
            .enumerate()
            .map(|(i, (&at, &source))| Described {
                at,
                leads: i == 0,
                source,
            })
    }

    /// Whether its event `i` is read from a perf counter.
    pub fn opened(&self, i: usize) -> bool {
        self.sources.get(i) == Some(&Source::Counter)
    }
}

/// Where the program reads each event of `spec`: context switches and the
/// clocks (`task-clock`, `cpu-clock`) it counts itself, in a group of
/// software events only, with no modifier; every other event from a perf
/// counter. The kernel never multiplexes software events, so an event the
/// program counts exactly beside the group's counters keeps the group's
/// scaling (none); an event of a group with hardware events is scheduled
/// with them, and must be counted as they are. A modifier (`:u`, `:k`)
/// excludes what the kernel's counter would exclude, which the program
/// cannot tell at a switch.
pub(super) fn sources(spec: &GroupSpec) -> Vec<Source> {
    let software = spec
        .events
        .iter()
        .all(|e| e.attr.type_ == PERF_TYPE_SOFTWARE && e.attr.other_core.is_none());
    spec.events
        .iter()
        .map(|e| {
            let a = &e.attr;
            let plain = software && !a.exclude_user && !a.exclude_kernel && e.filter.is_none();
            match a.config {
                PERF_COUNT_SW_CONTEXT_SWITCHES if plain => Source::Switches,
                PERF_COUNT_SW_CPU_CLOCK | PERF_COUNT_SW_TASK_CLOCK if plain => Source::Clock,
                _ => Source::Counter,
            }
        })
        .collect()
}

/// How the bpf backend counts an event of a group (`cgperf check` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountedBy {
    /// The program itself ([`sources`]): no perf counter.
    Program,
    /// A perf counter.
    Counter,
    /// A perf counter because of the group it is in (a hardware event
    /// beside it): in a group of its own, the program would count it.
    CounterInThisGroup,
}

/// How each event of `spec` is counted.
pub fn counted_by(spec: &GroupSpec) -> Vec<CountedBy> {
    let alone = |i: usize| GroupSpec {
        name: spec.name.clone(),
        events: vec![spec.events[i].clone()],
        cores: spec.cores.clone(),
    };
    sources(spec)
        .into_iter()
        .enumerate()
        .map(|(i, source)| match source {
            Source::Counter if sources(&alone(i)) != [Source::Counter] => {
                CountedBy::CounterInThisGroup
            }
            Source::Counter => CountedBy::Counter,
            _ => CountedBy::Program,
        })
        .collect()
}

/// Starts changing `placed` to `wanted`: groups identical stay
/// where they are, the others become [`Phase::Retiring`], and each new
/// one (or changed one) is placed at free indices ([`Phase::New`]), as
/// many as fit beside those retiring. Then, per CPU,
/// [`Kernel::open_new`], [`Kernel::cut`] and [`Kernel::close_retiring`],
/// and [`Kernel::settle`] at the end. Returns whether anything changes.
pub(super) fn place(placed: &mut Vec<Placed>, wanted: &Layout) -> bool {
    let mut kept = vec![false; placed.len()];
    let mut new = Vec::new();
    for spec in wanted.groups() {
        match placed.iter().position(|p| p.spec == *spec) {
            Some(i) => kept[i] = true,
            None => new.push(spec.clone()),
        }
    }
    let mut changed = false;
    for (p, kept) in placed.iter_mut().zip(kept) {
        if !kept {
            p.phase = Phase::Retiring;
            changed = true;
        }
    }
    let mut used = [false; MAX_EVENTS];
    for &e in placed.iter().flat_map(|p| &p.at) {
        used[e] = true;
    }
    for spec in new {
        let free: Vec<usize> = (0..MAX_EVENTS).filter(|&i| !used[i]).collect();
        if free.len() < spec.events.len() {
            // Not while layouts hold at most MAX_COUNTED (half the
            // positions): kept + old and kept + new fit side by side.
            continue;
        }
        let at = free[..spec.events.len()].to_vec();
        for &e in &at {
            used[e] = true;
        }
        placed.push(Placed {
            sources: sources(&spec),
            spec,
            at,
            phase: Phase::New,
            held: BTreeMap::new(),
        });
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventAttr, PERF_TYPE_SOFTWARE};
    use crate::ids::GroupId;
    use crate::plan::PlannedEvent;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A group `name` of `events` software events (their configs from
    /// `first` on, so that two versions of a group can differ).
    fn group_from(name: &str, events: usize, first: u64) -> Arc<GroupSpec> {
        let events = (0..events as u64)
            .map(|i| PlannedEvent {
                label: format!("{name}-{}", first + i).into(),
                attr: EventAttr::new(PERF_TYPE_SOFTWARE, first + i),
                clock: false,
                filter: None,
                binary: None,
            })
            .collect();
        Arc::new(GroupSpec {
            name: GroupId::Named(name.into()),
            events,
            cores: Arc::default(),
        })
    }

    fn group(name: &str, events: usize) -> Arc<GroupSpec> {
        group_from(name, events, 0)
    }

    /// The layout of `groups`, all of which must fit.
    fn layout(groups: &[&Arc<GroupSpec>]) -> Layout {
        let (layout, left) = Layout::of(groups.iter().map(|&g| g.clone()).collect());
        assert!(left.is_empty(), "every group fits");
        layout
    }

    /// What `Kernel::settle` does at the end of a change.
    fn settle(placed: &mut Vec<Placed>) {
        placed.retain(|p| p.phase != Phase::Retiring);
        for p in placed.iter_mut() {
            p.phase = Phase::Live;
        }
    }

    fn find<'a>(placed: &'a [Placed], spec: &Arc<GroupSpec>) -> &'a Placed {
        let mut found = placed.iter().filter(|p| p.spec == *spec);
        let p = found.next().expect("the group is placed");
        assert!(found.next().is_none(), "placed once");
        p
    }

    fn names(groups: &[Arc<GroupSpec>]) -> Vec<String> {
        groups.iter().map(|g| g.name.to_string()).collect()
    }

    /// No two placed groups (whatever their phase) share a position, and
    /// every position is one of the program's.
    fn assert_disjoint(placed: &[Placed]) {
        let mut seen = BTreeSet::new();
        for p in placed {
            for &e in &p.at {
                assert!(e < MAX_EVENTS, "{e} is past the program's positions");
                assert!(seen.insert(e), "position {e} placed twice");
            }
        }
    }

    /// A group `name` of these events.
    fn group_of(name: &str, events: Vec<PlannedEvent>) -> GroupSpec {
        GroupSpec {
            name: GroupId::Named(name.into()),
            events,
            cores: Arc::default(),
        }
    }

    fn event(type_: u32, config: u64) -> PlannedEvent {
        PlannedEvent {
            label: format!("{type_}:{config}").into(),
            attr: EventAttr::new(type_, config),
            clock: false,
            filter: None,
            binary: None,
        }
    }

    #[test]
    fn the_program_counts_switches_and_clocks_of_groups_of_software_events_itself() {
        use Source::{Clock, Counter, Switches};
        let sw = |config| event(PERF_TYPE_SOFTWARE, config);
        let (cpu_clock, task_clock, faults, switches, migrations) = (0, 1, 2, 3, 4);
        let spec = group_of(
            "sw",
            [task_clock, switches, migrations, cpu_clock, faults]
                .map(sw)
                .into(),
        );
        assert_eq!(
            sources(&spec),
            [Clock, Switches, Counter, Clock, Counter],
            "the leader included"
        );
        // A hardware event in the group: all are scheduled together, so
        // all are counted by the kernel.
        let mixed = group_of("mixed", vec![event(0, 0), sw(switches), sw(task_clock)]);
        assert_eq!(sources(&mixed), [Counter; 3]);
        // A tracepoint is not a software event either.
        let tp = group_of("tp", vec![sw(switches), event(2, 316)]);
        assert_eq!(sources(&tp), [Counter; 2]);
        // A modifier: what the kernel's counter excludes, the program
        // cannot tell at a switch.
        for user_only in [true, false] {
            let mut only = sw(switches);
            only.attr.exclude_kernel = user_only;
            only.attr.exclude_user = !user_only;
            let spec = group_of("modified", vec![only, sw(task_clock)]);
            assert_eq!(sources(&spec), [Counter, Clock]);
        }
        // An event of the group of another core type's PMU: a hardware one.
        let mut other = sw(task_clock);
        other.attr.other_core = Some(crate::events::OtherCore {
            type_: 8,
            config: [0; 3],
        });
        assert_eq!(
            sources(&group_of("other", vec![other, sw(switches)])),
            [Counter; 2]
        );
    }

    #[test]
    fn an_event_is_said_to_be_counted_by_a_perf_counter_because_of_its_group_only_if_it_is() {
        use CountedBy::{Counter, CounterInThisGroup, Program};
        let (switches, faults, task_clock) = (3, 2, 1);
        let software = group_of("sw", vec![event(1, switches), event(1, faults)]);
        assert_eq!(counted_by(&software), [Program, Counter]);
        let mixed = group_of(
            "hw",
            vec![
                event(0, 0),
                event(1, switches),
                event(1, faults),
                event(1, task_clock),
            ],
        );
        assert_eq!(
            counted_by(&mixed),
            [Counter, CounterInThisGroup, Counter, CounterInThisGroup]
        );
        let mut user = event(1, switches);
        user.attr.exclude_kernel = true;
        assert_eq!(
            counted_by(&group_of("hw", vec![event(0, 0), user])),
            [Counter, Counter],
            "alone, `:u` is a counter too"
        );
    }

    #[test]
    fn a_placed_group_describes_each_event_with_its_source_and_opens_only_counters() {
        let spec = Arc::new(group_of("sw", vec![event(1, 2), event(1, 3), event(1, 1)]));
        let mut placed = Vec::new();
        let (layout, _) = Layout::of(vec![spec.clone()]);
        place(&mut placed, &layout);
        let p = find(&placed, &spec);
        let described: Vec<_> = p.described().collect();
        assert_eq!(
            described,
            [
                Described {
                    at: 0,
                    leads: true,
                    source: Source::Counter
                },
                Described {
                    at: 1,
                    leads: false,
                    source: Source::Switches
                },
                Described {
                    at: 2,
                    leads: false,
                    source: Source::Clock
                },
            ]
        );
        assert_eq!(
            (0..4).map(|i| p.opened(i)).collect::<Vec<_>>(),
            [true, false, false, false]
        );
    }

    #[test]
    fn a_layout_takes_the_groups_in_plan_order_up_to_max_counted_events() {
        let (a, b, c) = (group("a", 100), group("b", 28), group("c", 1));
        let (layout, left) = Layout::of(vec![a.clone(), b.clone(), c.clone()]);
        let kept: Vec<_> = layout.groups().cloned().collect();
        assert_eq!(names(&kept), ["a", "b"], "exactly MAX_COUNTED events");
        assert_eq!(names(&left), ["c"]);
        let (layout, left) = Layout::of(vec![c, b, a]);
        let kept: Vec<_> = layout.groups().cloned().collect();
        assert_eq!(names(&kept), ["c", "b"], "the order given, not by size");
        assert_eq!(names(&left), ["a"]);
    }

    #[test]
    fn a_group_that_does_not_fit_leaves_room_for_smaller_ones_after_it() {
        let groups = vec![group("a", 100), group("big", 29), group("small", 28)];
        let (layout, left) = Layout::of(groups);
        let kept: Vec<_> = layout.groups().cloned().collect();
        assert_eq!(names(&kept), ["a", "small"]);
        assert_eq!(names(&left), ["big"]);
        let events: usize = kept.iter().map(|g| g.events.len()).sum();
        assert_eq!(events, MAX_COUNTED);
    }

    #[test]
    fn a_group_of_more_than_max_counted_events_is_never_counted_through_bpf() {
        let (layout, left) = Layout::of(vec![group("huge", MAX_COUNTED + 1), group("one", 1)]);
        let kept: Vec<_> = layout.groups().cloned().collect();
        assert_eq!(names(&kept), ["one"]);
        assert_eq!(names(&left), ["huge"]);
        let (layout, left) = Layout::of(vec![group("whole", MAX_COUNTED)]);
        assert_eq!(layout.groups().count(), 1, "MAX_COUNTED events fit");
        assert!(left.is_empty());
        let (layout, left) = Layout::of(Vec::new());
        assert_eq!((layout.groups().count(), left.len()), (0, 0));
    }

    #[test]
    fn the_first_groups_placed_take_the_first_positions_leader_first() {
        let (a, b) = (group("a", 3), group("b", 2));
        let mut placed = Vec::new();
        assert!(place(&mut placed, &layout(&[&a, &b])));
        assert_eq!(find(&placed, &a).at, [0, 1, 2]);
        assert_eq!(find(&placed, &b).at, [3, 4]);
        assert!(placed.iter().all(|p| p.phase == Phase::New));
        assert!(
            placed.iter().all(|p| p.held.is_empty()),
            "opened per CPU later"
        );
        let described: Vec<_> = find(&placed, &b)
            .described()
            .map(|d| (d.at, d.leads))
            .collect();
        assert_eq!(described, [(3, true), (4, false)]);
    }

    #[test]
    fn placing_nothing_where_nothing_is_placed_changes_nothing() {
        let mut placed = Vec::new();
        assert!(!place(&mut placed, &Layout::default()));
        assert!(placed.is_empty());
    }

    #[test]
    fn a_reload_of_the_same_groups_changes_nothing_even_rebuilt_or_reordered() {
        let (a, b) = (group("a", 2), group("b", 3));
        let mut placed = Vec::new();
        place(&mut placed, &layout(&[&a, &b]));
        settle(&mut placed);
        assert!(!place(&mut placed, &layout(&[&a, &b])));
        // A reload builds its plan anew: equal groups, other allocations.
        let (a2, b2) = (group("a", 2), group("b", 3));
        assert!(!Arc::ptr_eq(&a, &a2));
        assert!(!place(&mut placed, &layout(&[&b2, &a2])));
        assert_eq!(placed.len(), 2);
        assert!(placed.iter().all(|p| p.phase == Phase::Live));
        assert_eq!(find(&placed, &a).at, [0, 1]);
        assert_eq!(find(&placed, &b).at, [2, 3, 4]);
    }

    #[test]
    fn a_group_kept_across_a_reload_keeps_its_counters() {
        let (a, b, c, d) = (group("a", 2), group("b", 3), group("c", 1), group("d", 4));
        let mut placed = Vec::new();
        place(&mut placed, &layout(&[&a, &b, &c]));
        settle(&mut placed);
        // b kept (now first), a and c dropped, d new.
        assert!(place(&mut placed, &layout(&[&b, &d])));
        assert_eq!(find(&placed, &b).at, [2, 3, 4]);
        assert_eq!(find(&placed, &b).phase, Phase::Live);
        assert_eq!(find(&placed, &a).phase, Phase::Retiring);
        assert_eq!(find(&placed, &c).phase, Phase::Retiring);
        assert_eq!(find(&placed, &a).at, [0, 1], "read there one last time");
        assert_eq!(find(&placed, &c).at, [5]);
        assert_eq!(find(&placed, &d).phase, Phase::New);
        assert_eq!(find(&placed, &d).at, [6, 7, 8, 9]);
        assert_disjoint(&placed);
        settle(&mut placed);
        let left: Vec<_> = placed.iter().map(|p| p.spec.clone()).collect();
        assert_eq!(names(&left), ["b", "d"]);
        assert_eq!(find(&placed, &b).at, [2, 3, 4]);
        assert_eq!(find(&placed, &d).at, [6, 7, 8, 9]);
    }

    #[test]
    fn a_retiring_groups_counters_are_not_reused_until_it_has_retired() {
        let (a, b, c) = (group("a", 2), group("b", 2), group("c", 2));
        let mut placed = Vec::new();
        place(&mut placed, &layout(&[&a]));
        settle(&mut placed);
        assert!(place(&mut placed, &layout(&[&b])));
        assert_eq!(find(&placed, &a).at, [0, 1]);
        assert_eq!(find(&placed, &b).at, [2, 3], "beside a, which still counts");
        settle(&mut placed);
        assert!(place(&mut placed, &layout(&[&c])));
        assert_eq!(find(&placed, &c).at, [0, 1], "a's positions, free again");
        assert_eq!(find(&placed, &b).phase, Phase::Retiring);
    }

    #[test]
    fn a_changed_group_retires_and_its_new_version_counts_beside_it() {
        let old = group_from("a", 2, 0);
        let new = group_from("a", 3, 10);
        assert_eq!(old.name, new.name);
        let mut placed = Vec::new();
        place(&mut placed, &layout(&[&old]));
        settle(&mut placed);
        assert!(place(&mut placed, &layout(&[&new])));
        assert_eq!(placed.len(), 2);
        assert_eq!(
            (placed[0].phase, &placed[0].at[..]),
            (Phase::Retiring, &[0, 1][..])
        );
        assert_eq!(
            (placed[1].phase, &placed[1].at[..]),
            (Phase::New, &[2, 3, 4][..])
        );
        assert!(placed[1].spec == new);
    }

    #[test]
    fn removing_every_group_retires_them_all() {
        let (a, b) = (group("a", 1), group("b", 1));
        let mut placed = Vec::new();
        place(&mut placed, &layout(&[&a, &b]));
        settle(&mut placed);
        assert!(place(&mut placed, &Layout::default()));
        assert!(placed.iter().all(|p| p.phase == Phase::Retiring));
        settle(&mut placed);
        assert!(placed.is_empty());
    }

    #[test]
    fn a_new_group_takes_the_lowest_free_positions_even_apart() {
        let (a, b, c, d) = (group("a", 1), group("b", 1), group("c", 1), group("d", 2));
        let mut placed = Vec::new();
        place(&mut placed, &layout(&[&a, &b, &c]));
        settle(&mut placed);
        place(&mut placed, &layout(&[&a, &c]));
        settle(&mut placed);
        assert!(place(&mut placed, &layout(&[&a, &c, &d])));
        assert_eq!(find(&placed, &d).at, [1, 3], "b's position, then past c");
        let described: Vec<_> = find(&placed, &d)
            .described()
            .map(|d| (d.at, d.leads))
            .collect();
        assert_eq!(described, [(1, true), (3, false)]);
    }

    #[test]
    fn max_counted_counters_replaced_at_once_fit_beside_those_they_replace() {
        let old: Vec<_> = (0..MAX_COUNTED)
            .map(|i| group(&format!("old{i}"), 1))
            .collect();
        let new = group("new", MAX_COUNTED);
        let mut placed = Vec::new();
        place(&mut placed, &layout(&old.iter().collect::<Vec<_>>()));
        settle(&mut placed);
        assert!(place(&mut placed, &layout(&[&new])));
        assert_eq!(
            find(&placed, &new).at,
            (MAX_COUNTED..MAX_EVENTS).collect::<Vec<_>>()
        );
        assert_eq!(
            placed.iter().filter(|p| p.phase == Phase::Retiring).count(),
            MAX_COUNTED
        );
        assert_disjoint(&placed);
        settle(&mut placed);
        // And back: the positions the old groups left.
        let again = group("again", MAX_COUNTED);
        assert!(place(&mut placed, &layout(&[&again])));
        assert_eq!(
            find(&placed, &again).at,
            (0..MAX_COUNTED).collect::<Vec<_>>()
        );
    }

    /// A pool of groups of various sizes, two versions of some (same
    /// name, other events).
    fn pool() -> Vec<Arc<GroupSpec>> {
        let sizes = [1, 2, 3, 5, 8, 13, 21, 34, 55, 64, 100, 128];
        let mut pool: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| group(&format!("g{i}"), n))
            .collect();
        pool.push(group_from("g0", 2, 50));
        pool.push(group_from("g3", 5, 50));
        pool
    }

    proptest! {
        #[test]
        fn any_sequence_of_reloads_keeps_kept_groups_still_and_positions_unshared(
            reloads in prop::collection::vec(prop::collection::vec(0usize..14, 0..8), 1..12)
        ) {
            let pool = pool();
            let mut placed: Vec<Placed> = Vec::new();
            for picks in reloads {
                // A plan names each group once, in any order.
                let mut chosen: Vec<Arc<GroupSpec>> = Vec::new();
                for &i in &picks {
                    if !chosen.iter().any(|g| g.name == pool[i].name) {
                        chosen.push(pool[i].clone());
                    }
                }
                let (wanted, _) = Layout::of(chosen);
                let wanted_set: Vec<_> = wanted.groups().cloned().collect();
                let events: usize = wanted_set.iter().map(|g| g.events.len()).sum();
                prop_assert!(events <= MAX_COUNTED);
                let before: Vec<(Arc<GroupSpec>, Vec<usize>)> =
                    placed.iter().map(|p| (p.spec.clone(), p.at.clone())).collect();
                let changed = place(&mut placed, &wanted);
                assert_disjoint(&placed);
                for (spec, at) in &before {
                    let p = find(&placed, spec);
                    prop_assert_eq!(&p.at, at, "a placed group never moves");
                    let kept = wanted_set.contains(spec);
                    let phase = if kept { Phase::Live } else { Phase::Retiring };
                    prop_assert_eq!(p.phase, phase);
                }
                for spec in &wanted_set {
                    let p = find(&placed, spec);
                    prop_assert_eq!(p.at.len(), spec.events.len());
                    let was = before.iter().any(|(s, _)| s == spec);
                    prop_assert_eq!(p.phase == Phase::New, !was);
                }
                let new = placed.iter().filter(|p| p.phase == Phase::New).count();
                prop_assert_eq!(placed.len(), before.len() + new, "nothing else goes");
                let same = before.len() == wanted_set.len()
                    && before.iter().all(|(s, _)| wanted_set.contains(s));
                prop_assert_eq!(changed, !same);
                settle(&mut placed);
                let live: usize = placed.iter().map(|p| p.at.len()).sum();
                prop_assert_eq!(live, events);
            }
        }
    }
}
