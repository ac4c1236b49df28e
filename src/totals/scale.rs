//! Per-interval scaling, as `perf stat -I` does it.
//!
//! For every interval, `scaled = raw_delta × enabled_delta / running_delta`
//! is added to a total that never decreases. Scaling lifetime totals instead
//! (`raw_total × enabled_total / running_total`) can make a counter go down
//! when the running ratio changes, which breaks `rate()`.
//!
//! Two halves, because they live apart: a [`Baseline`] belongs to the
//! descriptors a backend reads (it turns their cumulative reads into
//! [`Delta`]s and is new with every new descriptor), a [`GroupTotals`] to the
//! series (it outlives any descriptor, so reopening never resets or
//! double-counts a series).

use crate::ids::EventId;
use crate::perf::GroupRead;
use std::collections::HashSet;
use std::sync::Arc;

/// What one group counted over one interval: raw, unscaled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Nanoseconds the group was enabled.
    pub enabled_ns: u64,
    /// Nanoseconds the group was on the PMU.
    pub running_ns: u64,
    /// Per event in group order; `None` for an event missing from the read
    /// (it adds nothing this time).
    pub values: Vec<Option<u64>>,
}

impl Delta {
    /// Whether the interval had the group neither enabled nor running and
    /// counted nothing: adding it changes no total.
    pub fn is_nothing(&self) -> bool {
        self.enabled_ns == 0
            && self.running_ns == 0
            && self.values.iter().all(|v| v.is_none_or(|v| v == 0))
    }

    /// Event `i`'s count over the interval, scaled by enabled / running
    /// where the kernel multiplexed the group; `None` when nothing was
    /// measured (enabled but never running) or the event was missing.
    pub fn scaled(&self, i: usize) -> Option<f64> {
        let raw = (*self.values.get(i)?)? as f64;
        match Interval::of(self.enabled_ns, self.running_ns) {
            Interval::Full | Interval::Idle => Some(raw),
            Interval::Scaled => Some(raw * (self.enabled_ns as f64 / self.running_ns as f64)),
            Interval::NeverRan => None,
        }
    }
}

/// The last read of one open group: what its next read is a delta from.
/// A group opened anew starts from zero, and so does its baseline.
#[derive(Debug, Clone)]
pub struct Baseline {
    values: Vec<u64>,
    enabled: u64,
    running: u64,
}

impl Baseline {
    /// The baseline of a group of `events` events that was just opened.
    pub fn new(events: usize) -> Self {
        Self {
            values: vec![0; events],
            enabled: 0,
            running: 0,
        }
    }

    /// The interval ending with `read`, into `out` (reused across calls).
    /// `ids[i]` is the kernel id of event `i`. Counters wrap like the
    /// kernel's.
    pub fn delta(&mut self, read: &GroupRead<'_>, ids: &[u64], out: &mut Delta) {
        let values = ids.iter().enumerate().map(|(i, &id)| read.value_of(id, i));
        self.advance(read.time_enabled, read.time_running, values, out);
    }

    /// Whether these cumulative times and values (one per event in group
    /// order) are those of the last reading: the interval ending with them
    /// is empty.
    pub fn is_at(&self, enabled: u64, running: u64, values: impl Iterator<Item = u64>) -> bool {
        let mut last = self.values.iter();
        enabled == self.enabled
            && running == self.running
            && values.into_iter().all(|now| last.next() == Some(&now))
            && last.next().is_none()
    }

    /// The interval ending with these cumulative times and values (one per
    /// event in group order, `None` for one missing from this reading),
    /// into `out`: what [`Baseline::delta`] does for a group read, for a
    /// backend whose readings are not group reads.
    pub fn advance(
        &mut self,
        enabled: u64,
        running: u64,
        values: impl Iterator<Item = Option<u64>>,
        out: &mut Delta,
    ) {
        out.enabled_ns = enabled.wrapping_sub(self.enabled);
        out.running_ns = running.wrapping_sub(self.running);
        self.enabled = enabled;
        self.running = running;
        out.values.clear();
        for (i, now) in values.enumerate() {
            let raw = match (now, self.values.get_mut(i)) {
                (Some(value), Some(prev)) => {
                    let raw = value.wrapping_sub(*prev);
                    *prev = value;
                    Some(raw)
                }
                _ => None,
            };
            out.values.push(raw);
        }
    }
}

/// What one interval was, for the never-ran rule and self-metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// The group ran for the whole time it was enabled.
    Full,
    /// The kernel multiplexed the group; deltas were scaled.
    Scaled,
    /// Enabled but never ran: nothing added.
    NeverRan,
    /// Not enabled at all (e.g. the cgroup had no task on this CPU).
    Idle,
}

impl Interval {
    /// The interval with these times.
    pub fn of(enabled_ns: u64, running_ns: u64) -> Self {
        match (enabled_ns, running_ns) {
            (0, 0) => Self::Idle,
            (_, 0) => Self::NeverRan,
            (e, r) if r >= e => Self::Full,
            _ => Self::Scaled,
        }
    }
}

/// What one column of a group's totals counts: its event, and whether the
/// event is still in the group (false once it left: its series is gone; a
/// column is never removed, so that the positions backends hold stay
/// valid).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Column {
    id: EventId,
    live: bool,
}

/// The columns of group totals, shared: every total of a group made for the
/// same events (the group on each CPU of each cgroup) points at one copy,
/// so a total holds its values and nothing per event besides.
pub(super) type Columns = Arc<[Column]>;

/// The distinct [`Columns`] in use: a total whose columns change takes the
/// shared copy of its new ones from here.
#[derive(Debug, Default)]
pub(super) struct Layouts(HashSet<Columns>);

impl Layouts {
    /// The shared copy of `columns`.
    fn intern(&mut self, columns: Vec<Column>) -> Columns {
        if let Some(shared) = self.0.get(columns.as_slice()) {
            return shared.clone();
        }
        let shared: Columns = columns.into();
        self.0.insert(shared.clone());
        shared
    }

    /// Forgets the columns no total holds any more.
    pub(super) fn prune(&mut self) {
        self.0.retain(|c| Arc::strong_count(c) > 1);
    }
}

/// The running totals of one group in one cgroup on one CPU (or summed
/// over CPUs): scaled counts per event, and the group's times.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupTotals {
    columns: Columns,
    /// The scaled count of each column.
    values: Box<[f64]>,
    /// Nanoseconds the group was enabled.
    pub enabled_ns: u64,
    /// Nanoseconds the group was on the PMU.
    pub running_ns: u64,
    /// Intervals in which the group was enabled but never ran: they added
    /// nothing, because nothing was measured.
    pub never_ran_intervals: u64,
}

impl GroupTotals {
    /// The positions of `events` (a group's events in its order), adding a
    /// zero total for each event that has none: what [`GroupTotals::add`]
    /// takes. An event that was in the group before keeps its total.
    pub(super) fn columns(&mut self, events: &[EventId], layouts: &mut Layouts) -> Vec<usize> {
        let mut columns = self.columns.to_vec();
        let positions = events
            .iter()
            .map(|id| match columns.iter().position(|c| c.id == *id) {
                Some(i) => {
                    columns[i].live = true;
                    i
                }
                None => {
                    columns.push(Column {
                        id: id.clone(),
                        live: true,
                    });
                    columns.len() - 1
                }
            })
            .collect();
        self.relayout(columns, layouts);
        positions
    }

    /// Drops the totals of events not in `events`: their series are gone
    /// (an event that comes back later starts from zero).
    pub(super) fn keep_only(&mut self, events: &[EventId], layouts: &mut Layouts) {
        let mut columns = self.columns.to_vec();
        for (column, value) in columns.iter_mut().zip(self.values.iter_mut()) {
            if !events.contains(&column.id) {
                column.live = false;
                *value = 0.0;
            }
        }
        self.relayout(columns, layouts);
    }

    /// Takes `columns` (the present ones, changed or not), with a zero
    /// value for each new one.
    fn relayout(&mut self, columns: Vec<Column>, layouts: &mut Layouts) {
        if *self.columns == *columns {
            return;
        }
        if columns.len() != self.values.len() {
            let mut values = std::mem::take(&mut self.values).into_vec();
            values.resize(columns.len(), 0.0);
            self.values = values.into_boxed_slice();
        }
        self.columns = layouts.intern(columns);
    }

    /// Adds one interval, scaled: `delta.values[i]` goes to the total at
    /// `columns[i]` (from [`GroupTotals::columns`]).
    pub fn add(&mut self, columns: &[usize], delta: &Delta) -> Interval {
        self.enabled_ns = self.enabled_ns.saturating_add(delta.enabled_ns);
        self.running_ns = self.running_ns.saturating_add(delta.running_ns);
        let outcome = Interval::of(delta.enabled_ns, delta.running_ns);
        if outcome == Interval::NeverRan {
            self.never_ran_intervals += 1;
        }
        for (i, &column) in columns.iter().enumerate() {
            let (Some(scaled), Some(total)) = (delta.scaled(i), self.values.get_mut(column)) else {
                continue;
            };
            *total += scaled;
        }
        outcome
    }

    /// The total of event `id` (0 for one it has never counted).
    pub fn value(&self, id: &EventId) -> f64 {
        self.value_at(usize::MAX, &id.label, id.clock)
    }

    /// The total of the event labelled `label` (counting nanoseconds if
    /// `clock`), looked up at `position` first: where an event of a group
    /// that never changed is, by the very label the group was made with.
    /// Inlined where it is called per CPU in a sum, and the search for a
    /// label elsewhere (or another string of it) kept out of line, so that
    /// the sum stays in a register.
    #[inline]
    pub fn value_at(&self, position: usize, label: &Arc<str>, clock: bool) -> f64 {
        match (self.columns.get(position), self.values.get(position)) {
            (Some(c), Some(value))
                if c.live && c.id.clock == clock && Arc::ptr_eq(&c.id.label, label) =>
            {
                *value
            }
            _ => self.value_found(position, label, clock),
        }
    }

    /// [`GroupTotals::value_at`] where the event is not at `position` by
    /// the very same label: there by another string of it, else at the
    /// first live column of that label and clock.
    #[cold]
    #[inline(never)]
    fn value_found(&self, position: usize, label: &Arc<str>, clock: bool) -> f64 {
        let is = |c: &Column| c.live && c.id.clock == clock && *c.id.label == **label;
        let at = self
            .columns
            .get(position)
            .filter(|c| is(c))
            .map(|_| position);
        at.or_else(|| self.columns.iter().position(is))
            .and_then(|i| self.values.get(i).copied())
            .unwrap_or(0.0)
    }
}

/// The total of the event labelled `label` (at `position` in its group,
/// counting nanoseconds if `clock`) over `parts` (one CPU's totals, every
/// CPU's, every thread's), as exported: seconds for clocks. Folded from +0,
/// not `sum()`: an empty sum of floats is -0, which would be exported as
/// such for a group not read yet.
pub fn exported_total<'a>(
    parts: impl IntoIterator<Item = &'a GroupTotals>,
    position: usize,
    label: &Arc<str>,
    clock: bool,
) -> f64 {
    let values = parts
        .into_iter()
        .map(|t| t.value_at(position, label, clock));
    exported_sum(values, clock)
}

/// [`exported_total`] of the totals `values` (each [`GroupTotals::value_at`]
/// of one part), for a caller that reads them once for several sums.
pub fn exported_sum(values: impl IntoIterator<Item = f64>, clock: bool) -> f64 {
    exported(values.into_iter().fold(0.0, |sum, v| sum + v), clock)
}

/// A total (or a sum of totals) as exported: seconds for a clock, which
/// counts nanoseconds.
pub fn exported(total: f64, clock: bool) -> f64 {
    if clock { total / 1e9 } else { total }
}

/// How long a group was enabled and on the PMU, and in how many intervals
/// it never ran, over some of its totals (one CPU's, every CPU's, every
/// thread's): what its series of group times show.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GroupTimes {
    /// Seconds enabled.
    pub enabled_seconds: f64,
    /// Seconds on the PMU.
    pub running_seconds: f64,
    /// Intervals enabled but never on the PMU.
    pub never_ran_intervals: u64,
}

impl GroupTimes {
    /// Summed over `parts`; each sum saturates (a counter the kernel reset
    /// cannot make it wrap).
    pub fn of<'a>(parts: impl IntoIterator<Item = &'a GroupTotals>) -> Self {
        let (mut enabled, mut running, mut never_ran) = (0u64, 0u64, 0u64);
        for t in parts {
            enabled = enabled.saturating_add(t.enabled_ns);
            running = running.saturating_add(t.running_ns);
            never_ran = never_ran.saturating_add(t.never_ran_intervals);
        }
        Self {
            enabled_seconds: enabled as f64 / 1e9,
            running_seconds: running as f64 / 1e9,
            never_ran_intervals: never_ran,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_baseline_is_at_a_reading_only_with_every_value_of_it() {
        let mut baseline = Baseline::new(2);
        let mut delta = Delta::default();
        baseline.advance(10, 10, [Some(3), Some(4)].into_iter(), &mut delta);
        assert!(baseline.is_at(10, 10, [3, 4].into_iter()));
        assert!(!baseline.is_at(10, 10, [3, 5].into_iter()));
        assert!(!baseline.is_at(11, 10, [3, 4].into_iter()));
        // A reading with fewer or more values is another reading.
        assert!(!baseline.is_at(10, 10, [3].into_iter()));
        assert!(!baseline.is_at(10, 10, [3, 4, 0].into_iter()));
    }

    /// A recorded group read: `[nr, enabled, running, (value, id)...]`.
    fn buf(enabled: u64, running: u64, values: &[(u64, u64)]) -> Vec<u64> {
        let mut w = vec![values.len() as u64, enabled, running];
        for &(id, v) in values {
            w.extend([v, id]);
        }
        w
    }

    fn ids(labels: &[&str]) -> Vec<EventId> {
        labels
            .iter()
            .map(|l| EventId {
                label: (*l).into(),
                clock: false,
            })
            .collect()
    }

    /// One open group feeding one series' totals, as a backend does it.
    struct Fed {
        baseline: Baseline,
        kernel_ids: Vec<u64>,
        columns: Vec<usize>,
        totals: GroupTotals,
        layouts: Layouts,
        events: Vec<EventId>,
    }

    impl Fed {
        fn new(labels: &[&str], kernel_ids: &[u64]) -> Self {
            let events = ids(labels);
            let mut totals = GroupTotals::default();
            let mut layouts = Layouts::default();
            let columns = totals.columns(&events, &mut layouts);
            Self {
                baseline: Baseline::new(events.len()),
                kernel_ids: kernel_ids.to_vec(),
                columns,
                totals,
                layouts,
                events,
            }
        }

        fn feed(&mut self, words: &[u64]) -> Interval {
            let read = GroupRead::parse(words).expect("recorded buffer is valid");
            let mut delta = Delta::default();
            self.baseline.delta(&read, &self.kernel_ids, &mut delta);
            self.totals.add(&self.columns, &delta)
        }

        /// The group opened anew (new kernel ids), maybe with other events.
        fn reopen(&mut self, labels: &[&str], kernel_ids: &[u64]) {
            self.events = ids(labels);
            self.totals.keep_only(&self.events, &mut self.layouts);
            self.columns = self.totals.columns(&self.events, &mut self.layouts);
            self.baseline = Baseline::new(labels.len());
            self.kernel_ids = kernel_ids.to_vec();
        }

        fn values(&self) -> Vec<f64> {
            self.events.iter().map(|e| self.totals.value(e)).collect()
        }
    }

    #[test]
    fn unmultiplexed_counts_are_exact() {
        let mut g = Fed::new(&["a", "b"], &[10, 11]);
        assert_eq!(g.feed(&buf(100, 100, &[(10, 5), (11, 7)])), Interval::Full);
        assert_eq!(g.feed(&buf(200, 200, &[(10, 9), (11, 20)])), Interval::Full);
        assert_eq!(g.values(), vec![9.0, 20.0]);
        assert_eq!((g.totals.enabled_ns, g.totals.running_ns), (200, 200));
    }

    #[test]
    fn multiplexed_interval_scales_its_delta_only() {
        let mut g = Fed::new(&["a"], &[1]);
        // First interval: ran the whole time, 1000 events.
        g.feed(&buf(1000, 1000, &[(1, 1000)]));
        // Second interval: enabled 1000 more, ran 250 of them, counted 100 more.
        assert_eq!(g.feed(&buf(2000, 1250, &[(1, 1100)])), Interval::Scaled);
        assert_eq!(g.values(), vec![1400.0]);
        // Lifetime scaling would say 1100 × 2000/1250 = 1760: not what happened.
    }

    #[test]
    fn lifetime_scaling_would_go_down_per_interval_does_not() {
        // Multiplexed 10% of the time first, then fully running at a lower rate.
        let reads = [buf(1000, 100, &[(1, 100)]), buf(2000, 1100, &[(1, 200)])];
        let lifetime: Vec<f64> = reads
            .iter()
            .map(|w| w[3] as f64 * w[1] as f64 / w[2] as f64)
            .collect();
        assert!(
            lifetime[1] < lifetime[0],
            "premise: lifetime scaling goes down"
        );
        let mut g = Fed::new(&["a"], &[1]);
        let mut last = 0.0;
        for w in &reads {
            g.feed(w);
            assert!(g.values()[0] >= last);
            last = g.values()[0];
        }
        assert_eq!(last, 1000.0 + 100.0);
    }

    #[test]
    fn never_ran_adds_nothing_and_is_counted() {
        let mut g = Fed::new(&["a"], &[1]);
        g.feed(&buf(100, 100, &[(1, 50)]));
        assert_eq!(g.feed(&buf(300, 100, &[(1, 50)])), Interval::NeverRan);
        assert_eq!(g.values(), vec![50.0]);
        assert_eq!(g.totals.never_ran_intervals, 1);
        assert_eq!(g.feed(&buf(300, 100, &[(1, 50)])), Interval::Idle);
        assert_eq!(g.totals.never_ran_intervals, 1);
    }

    #[test]
    fn values_near_u64_max_wrap_like_the_kernel_counter() {
        let mut g = Fed::new(&["a"], &[1]);
        g.feed(&buf(10, 10, &[(1, u64::MAX - 5)]));
        g.feed(&buf(20, 20, &[(1, 4)]));
        assert_eq!(g.values(), vec![(u64::MAX - 5) as f64 + 10.0]);
    }

    #[test]
    fn missing_member_adds_nothing_then_resumes() {
        let mut g = Fed::new(&["a", "b"], &[1, 2]);
        g.feed(&buf(10, 10, &[(1, 5), (2, 5)]));
        g.feed(&buf(20, 20, &[(1, 8)]));
        assert_eq!(g.values(), vec![8.0, 5.0]);
        g.feed(&buf(30, 30, &[(1, 9), (2, 12)]));
        assert_eq!(g.values(), vec![9.0, 12.0]);
    }

    #[test]
    fn a_reopened_group_neither_resets_nor_double_counts() {
        let mut g = Fed::new(&["a"], &[1]);
        g.feed(&buf(10, 10, &[(1, 100)]));
        // The reopened counter (new id) starts from zero.
        g.reopen(&["a"], &[7]);
        g.feed(&buf(5, 5, &[(7, 30)]));
        assert_eq!(g.values(), vec![130.0]);
        assert_eq!(g.totals.enabled_ns, 15);
    }

    #[test]
    fn a_changed_group_continues_kept_events_only() {
        let mut g = Fed::new(&["a", "b"], &[1, 2]);
        g.feed(&buf(10, 10, &[(1, 5), (2, 7)]));
        // The new group keeps `b` (now first) and adds `c`; `a` is gone.
        g.reopen(&["b", "c"], &[8, 9]);
        g.feed(&buf(4, 4, &[(8, 3), (9, 100)]));
        assert_eq!(g.values(), vec![10.0, 100.0]);
        assert_eq!(g.totals.value(&ids(&["a"])[0]), 0.0);
        assert_eq!(g.totals.enabled_ns, 14);
        // `a` comes back: a new series, from zero.
        g.reopen(&["a", "b"], &[11, 12]);
        g.feed(&buf(1, 1, &[(11, 1), (12, 1)]));
        assert_eq!(g.values(), vec![1.0, 11.0]);
    }

    proptest! {
        /// Whatever the kernel reports — multiplexed, never running, members
        /// vanishing, reopened groups — the exported totals never decrease.
        #[test]
        fn totals_never_decrease(steps in proptest::collection::vec(
            (0u64..1_000_000, 0u64..1_000_000, proptest::collection::vec(0u64..u64::MAX, 2), any::<bool>(), any::<bool>()),
            1..60,
        )) {
            let mut g = Fed::new(&["a", "b"], &[1, 2]);
            let (mut en, mut run, mut vals) = (0u64, 0u64, [0u64; 2]);
            let mut last = g.values();
            let mut last_times = (0, 0);
            for (de, dr, dv, drop_member, reopen) in steps {
                if reopen {
                    g.reopen(&["a", "b"], &[1, 2]);
                    (en, run, vals) = (0, 0, [0, 0]);
                }
                let dr = dr.min(de);
                en += de;
                run += dr;
                vals[0] = vals[0].wrapping_add(dv[0] % 1_000_000_000);
                vals[1] = vals[1].wrapping_add(dv[1] % 1_000_000_000);
                let members: Vec<(u64, u64)> = if drop_member {
                    vec![(1, vals[0])]
                } else {
                    vec![(1, vals[0]), (2, vals[1])]
                };
                g.feed(&buf(en, run, &members));
                let now = g.values();
                for (a, b) in now.iter().zip(&last) {
                    prop_assert!(a >= b, "{a} < {b}");
                    prop_assert!(a.is_finite());
                }
                let times = (g.totals.enabled_ns, g.totals.running_ns);
                prop_assert!(times.0 >= last_times.0 && times.1 >= last_times.1);
                last = now;
                last_times = times;
            }
        }
    }
}
