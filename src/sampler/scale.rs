//! Per-interval scaling, as `perf stat -I` does it.
//!
//! For every interval, `scaled = raw_delta × enabled_delta / running_delta`
//! is added to a total that never decreases. Scaling lifetime totals instead
//! (`raw_total × enabled_total / running_total`) can make a counter go down
//! when the running ratio changes, which breaks `rate()`.

use crate::perf::GroupRead;

/// The running totals of one group on one CPU (or summed over CPUs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupTotals {
    /// Scaled event counts, in the order the events were opened.
    pub values: Vec<f64>,
    /// Nanoseconds the group was enabled.
    pub enabled_ns: u64,
    /// Nanoseconds the group was on the PMU.
    pub running_ns: u64,
    /// Intervals in which the group was enabled but never ran: they added
    /// nothing, because nothing was measured.
    pub never_ran_intervals: u64,
}

impl GroupTotals {
    /// Adds `other` (the same group on another CPU) into `self`.
    pub fn add(&mut self, other: &GroupTotals) {
        if self.values.len() < other.values.len() {
            self.values.resize(other.values.len(), 0.0);
        }
        for (sum, v) in self.values.iter_mut().zip(&other.values) {
            *sum += v;
        }
        self.enabled_ns = self.enabled_ns.saturating_add(other.enabled_ns);
        self.running_ns = self.running_ns.saturating_add(other.running_ns);
        self.never_ran_intervals = self
            .never_ran_intervals
            .saturating_add(other.never_ran_intervals);
    }
}

/// Turns successive group reads into monotonic scaled totals.
///
/// The accumulator outlives the descriptors it reads: when a group is
/// reopened (CPU back online, reload), [`Accumulator::rebase`] makes the next
/// read count from zero again, so nothing is lost or counted twice.
#[derive(Debug, Clone)]
pub struct Accumulator {
    totals: GroupTotals,
    prev_values: Vec<u64>,
    prev_enabled: u64,
    prev_running: u64,
}

/// What one update did, for self-metrics.
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

impl Accumulator {
    /// An accumulator for a group of `events` events that was just opened
    /// (its counters start at zero).
    pub fn new(events: usize) -> Self {
        Self {
            totals: GroupTotals {
                values: vec![0.0; events],
                enabled_ns: 0,
                running_ns: 0,
                never_ran_intervals: 0,
            },
            prev_values: vec![0; events],
            prev_enabled: 0,
            prev_running: 0,
        }
    }

    /// The group was reopened: its counters start from zero again.
    pub fn rebase(&mut self) {
        self.prev_values.fill(0);
        self.prev_enabled = 0;
        self.prev_running = 0;
    }

    /// Takes over the totals of a group this one replaces: event `i` of this
    /// group continues the series of event `mapping[i]` of the old one, and
    /// the group's times continue too. Used when a reload changes a group's
    /// events, so the events it kept never go back to zero.
    pub fn inherit(&mut self, old: &GroupTotals, mapping: &[Option<usize>]) {
        for (total, from) in self.totals.values.iter_mut().zip(mapping) {
            if let Some(v) = from.and_then(|j| old.values.get(j)) {
                *total += v;
            }
        }
        self.totals.enabled_ns = self.totals.enabled_ns.saturating_add(old.enabled_ns);
        self.totals.running_ns = self.totals.running_ns.saturating_add(old.running_ns);
        self.totals.never_ran_intervals = self
            .totals
            .never_ran_intervals
            .saturating_add(old.never_ran_intervals);
    }

    /// The totals so far.
    pub fn totals(&self) -> &GroupTotals {
        &self.totals
    }

    /// Adds the interval ending with `read`. `ids[i]` is the kernel id of
    /// event `i`; an event missing from the read adds nothing this time.
    pub fn update(&mut self, read: &GroupRead<'_>, ids: &[u64]) -> Interval {
        let enabled = read.time_enabled.wrapping_sub(self.prev_enabled);
        let running = read.time_running.wrapping_sub(self.prev_running);
        self.prev_enabled = read.time_enabled;
        self.prev_running = read.time_running;
        self.totals.enabled_ns = self.totals.enabled_ns.saturating_add(enabled);
        self.totals.running_ns = self.totals.running_ns.saturating_add(running);

        let outcome = match (enabled, running) {
            (0, 0) => Interval::Idle,
            (_, 0) => Interval::NeverRan,
            (e, r) if r >= e => Interval::Full,
            _ => Interval::Scaled,
        };
        if outcome == Interval::NeverRan {
            self.totals.never_ran_intervals += 1;
        }
        let ratio = enabled as f64 / running as f64;
        for (i, &id) in ids.iter().enumerate() {
            let (Some(value), Some(prev)) = (read.value_of(id, i), self.prev_values.get_mut(i))
            else {
                continue;
            };
            let raw = value.wrapping_sub(*prev);
            *prev = value;
            let add = match outcome {
                Interval::Full | Interval::Idle => raw as f64,
                Interval::Scaled => raw as f64 * ratio,
                Interval::NeverRan => 0.0,
            };
            if let Some(total) = self.totals.values.get_mut(i) {
                *total += add;
            }
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A recorded group read: `[nr, enabled, running, (value, id)...]`.
    fn buf(enabled: u64, running: u64, values: &[(u64, u64)]) -> Vec<u64> {
        let mut w = vec![values.len() as u64, enabled, running];
        for &(id, v) in values {
            w.extend([v, id]);
        }
        w
    }

    fn feed(acc: &mut Accumulator, ids: &[u64], words: &[u64]) -> Interval {
        let read = GroupRead::parse(words).expect("recorded buffer is valid");
        acc.update(&read, ids)
    }

    #[test]
    fn unmultiplexed_counts_are_exact() {
        let mut acc = Accumulator::new(2);
        let ids = [10, 11];
        assert_eq!(
            feed(&mut acc, &ids, &buf(100, 100, &[(10, 5), (11, 7)])),
            Interval::Full
        );
        assert_eq!(
            feed(&mut acc, &ids, &buf(200, 200, &[(10, 9), (11, 20)])),
            Interval::Full
        );
        assert_eq!(acc.totals().values, vec![9.0, 20.0]);
        assert_eq!(
            (acc.totals().enabled_ns, acc.totals().running_ns),
            (200, 200)
        );
    }

    #[test]
    fn multiplexed_interval_scales_its_delta_only() {
        let mut acc = Accumulator::new(1);
        let ids = [1];
        // First interval: ran the whole time, 1000 events.
        feed(&mut acc, &ids, &buf(1000, 1000, &[(1, 1000)]));
        // Second interval: enabled 1000 more, ran 250 of them, counted 100 more.
        assert_eq!(
            feed(&mut acc, &ids, &buf(2000, 1250, &[(1, 1100)])),
            Interval::Scaled
        );
        assert_eq!(acc.totals().values, vec![1400.0]);
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
        let mut acc = Accumulator::new(1);
        let mut last = 0.0;
        for w in &reads {
            feed(&mut acc, &[1], w);
            assert!(acc.totals().values[0] >= last);
            last = acc.totals().values[0];
        }
        assert_eq!(last, 1000.0 + 100.0);
    }

    #[test]
    fn never_ran_adds_nothing_and_is_counted() {
        let mut acc = Accumulator::new(1);
        feed(&mut acc, &[1], &buf(100, 100, &[(1, 50)]));
        assert_eq!(
            feed(&mut acc, &[1], &buf(300, 100, &[(1, 50)])),
            Interval::NeverRan
        );
        assert_eq!(acc.totals().values, vec![50.0]);
        assert_eq!(acc.totals().never_ran_intervals, 1);
        assert_eq!(
            feed(&mut acc, &[1], &buf(300, 100, &[(1, 50)])),
            Interval::Idle
        );
        assert_eq!(acc.totals().never_ran_intervals, 1);
    }

    #[test]
    fn values_near_u64_max_wrap_like_the_kernel_counter() {
        let mut acc = Accumulator::new(1);
        feed(&mut acc, &[1], &buf(10, 10, &[(1, u64::MAX - 5)]));
        feed(&mut acc, &[1], &buf(20, 20, &[(1, 4)]));
        assert_eq!(acc.totals().values, vec![(u64::MAX - 5) as f64 + 10.0]);
    }

    #[test]
    fn missing_member_adds_nothing_then_resumes() {
        let mut acc = Accumulator::new(2);
        let ids = [1, 2];
        feed(&mut acc, &ids, &buf(10, 10, &[(1, 5), (2, 5)]));
        feed(&mut acc, &ids, &buf(20, 20, &[(1, 8)]));
        assert_eq!(acc.totals().values, vec![8.0, 5.0]);
        feed(&mut acc, &ids, &buf(30, 30, &[(1, 9), (2, 12)]));
        assert_eq!(acc.totals().values, vec![9.0, 12.0]);
    }

    #[test]
    fn rebase_after_reopen_neither_resets_nor_double_counts() {
        let mut acc = Accumulator::new(1);
        feed(&mut acc, &[1], &buf(10, 10, &[(1, 100)]));
        acc.rebase();
        // The reopened counter (new id) starts from zero.
        feed(&mut acc, &[7], &buf(5, 5, &[(7, 30)]));
        assert_eq!(acc.totals().values, vec![130.0]);
        assert_eq!(acc.totals().enabled_ns, 15);
    }

    #[test]
    fn inherit_continues_kept_events_only() {
        let mut old = Accumulator::new(2);
        feed(&mut old, &[1, 2], &buf(10, 10, &[(1, 5), (2, 7)]));
        // The new group keeps event 2 (now first) and adds a new one.
        let mut new = Accumulator::new(2);
        new.inherit(old.totals(), &[Some(1), None]);
        feed(&mut new, &[8, 9], &buf(4, 4, &[(8, 3), (9, 100)]));
        assert_eq!(new.totals().values, vec![10.0, 100.0]);
        assert_eq!(new.totals().enabled_ns, 14);
    }

    proptest! {
        /// Whatever the kernel reports — multiplexed, never running, members
        /// vanishing, reopened groups — the exported totals never decrease.
        #[test]
        fn totals_never_decrease(steps in proptest::collection::vec(
            (0u64..1_000_000, 0u64..1_000_000, proptest::collection::vec(0u64..u64::MAX, 2), any::<bool>(), any::<bool>()),
            1..60,
        )) {
            let mut acc = Accumulator::new(2);
            let (mut en, mut run, mut vals) = (0u64, 0u64, [0u64; 2]);
            let mut last = acc.totals().clone();
            for (de, dr, dv, drop_member, reopen) in steps {
                if reopen {
                    acc.rebase();
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
                feed(&mut acc, &[1, 2], &buf(en, run, &members));
                let now = acc.totals();
                for (a, b) in now.values.iter().zip(&last.values) {
                    prop_assert!(a >= b, "{a} < {b}");
                    prop_assert!(a.is_finite());
                }
                prop_assert!(now.enabled_ns >= last.enabled_ns);
                prop_assert!(now.running_ns >= last.running_ns);
                last = now.clone();
            }
        }
    }
}
