//! The counts of one `by:` tracepoint in one cgroup: hits by value
//! combination, and how many hits the kernel counted, from which the hits
//! known to be lost follow (see the `by:` rings of the cgroup backend for
//! the order of reads and drains the argument rests on).

use std::collections::BTreeMap;

/// Label value of the bucket that counts value combinations beyond
/// `max_series`.
pub const OTHER: &str = "other";

/// Separates field values in a count key; label values never contain it
/// (the field decoder escapes control characters).
pub const KEY_SEPARATOR: char = '\0';

/// Hits by value combination, bounded by `max_series`, and how many hits
/// the kernel counted (see the module doc on losses).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counts {
    /// Key: the field values joined by [`KEY_SEPARATOR`]; ordered, so that
    /// every scrape lists the series in the same order.
    by_value: BTreeMap<Box<str>, u64>,
    /// Hits whose values were not among the first `max_series`.
    other: u64,
    /// Samples counted above (under a value or `other`).
    decoded: u64,
    /// Hits the kernel counted, as of the last read of each event.
    counted: u64,
    /// Hits known to be lost: monotonic, never above the truth.
    lost: u64,
}

impl Counts {
    /// Counts one hit under `key` (the field values joined by
    /// [`KEY_SEPARATOR`]), or under `other` past `max_series` keys.
    pub fn add(&mut self, key: &str, max_series: usize) {
        self.add_hits(Some(key), 1, max_series);
    }

    /// Counts `hits` hits under `key` as [`Counts::add`] does, or under
    /// `other` with no key (hits a kernel-side count folded already).
    pub fn add_hits(&mut self, key: Option<&str>, hits: u64, max_series: usize) {
        self.decoded = self.decoded.saturating_add(hits);
        let Some(key) = key else {
            self.other = self.other.saturating_add(hits);
            return;
        };
        if let Some(n) = self.by_value.get_mut(key) {
            *n = n.saturating_add(hits);
        } else if self.by_value.len() < max_series {
            self.by_value.insert(key.into(), hits);
        } else {
            self.other = self.other.saturating_add(hits);
        }
    }

    /// Adds `hits` the kernel counted since the previous read.
    pub fn counted(&mut self, hits: u64) {
        self.counted = self.counted.saturating_add(hits);
    }

    /// Hits counted but not decoded: lost, or (before the wait for samples
    /// in flight) maybe about to be decoded.
    fn owed(&self) -> u64 {
        self.counted.saturating_sub(self.decoded)
    }

    /// Whether more is owed than is known lost: only then can a sample in
    /// flight make a difference.
    pub fn owes_more(&self) -> bool {
        self.owed() > self.lost
    }

    /// Takes what is owed as lost; call only once every hit counted by the
    /// last read has been decoded or dropped (see the module doc).
    pub fn settle(&mut self) {
        self.lost = self.lost.max(self.owed());
    }

    /// Hits known to be lost.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Every series: the values of each field, and its count; the `other`
    /// bucket (every field `other`) once it has counted something.
    pub fn series(&self, fields: usize) -> impl Iterator<Item = (Vec<&str>, u64)> {
        let others = (self.other > 0).then(|| (vec![OTHER; fields], self.other));
        self.by_value
            .iter()
            .map(|(key, n)| (key.split(KEY_SEPARATOR).collect(), *n))
            .chain(others)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fold_into_other_beyond_max_series() {
        let mut counts = Counts::default();
        for key in ["0", "1", "0", "2", "3", "1"] {
            counts.add(key, 2);
        }
        let mut series: Vec<(Vec<&str>, u64)> = counts.series(1).collect();
        series.sort();
        assert_eq!(
            series,
            vec![(vec!["0"], 2), (vec!["1"], 2), (vec![OTHER], 2)]
        );
    }

    #[test]
    fn keys_split_into_one_value_per_field() {
        let mut counts = Counts::default();
        counts.add("a\0b", 10);
        let series: Vec<(Vec<&str>, u64)> = counts.series(2).collect();
        assert_eq!(series, vec![(vec!["a", "b"], 1)]);
    }

    #[test]
    fn no_other_series_until_something_overflows() {
        let mut counts = Counts::default();
        counts.add("x", 1);
        assert_eq!(counts.series(1).count(), 1);
        counts.add("y", 1);
        assert_eq!(counts.series(1).count(), 2);
    }

    /// One entry's kernel side, simulated: a hit is counted, then (maybe
    /// later, on another CPU) its sample is written into the ring or
    /// dropped when the ring is full.
    #[derive(Default)]
    struct Kernel {
        count: u64,
        /// Hits counted whose sample is not written yet.
        in_flight: Vec<u8>,
        ring: Vec<u8>,
        capacity: usize,
        dropped: u64,
    }

    impl Kernel {
        fn begin(&mut self, value: u8) {
            self.count += 1;
            self.in_flight.push(value);
        }

        fn finish(&mut self) {
            if self.in_flight.is_empty() {
                return;
            }
            let value = self.in_flight.remove(0);
            if self.ring.len() < self.capacity {
                self.ring.push(value);
            } else {
                self.dropped += 1;
            }
        }

        fn drain(&mut self, counts: &mut Counts) {
            for value in self.ring.drain(..) {
                counts.add(&value.to_string(), 2);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// A hit begins: counted now, its sample written at a `Finish`.
        Begin(u8),
        /// The oldest hit in flight writes (or drops) its sample.
        Finish,
        /// A drain between collections.
        Drain,
        /// A collection, during which `u8` hits happen between the read
        /// of the count and the drain.
        Collect(u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0u8..4).prop_map(Step::Begin),
            Just(Step::Finish),
            Just(Step::Drain),
            (0u8..3).prop_map(Step::Collect),
        ]
    }

    /// What a collection does (`Sampler::settle_sampled`): read, drain,
    /// and if more is owed than known lost, wait for the samples in flight
    /// and drain again; then settle.
    fn collect(kernel: &mut Kernel, counts: &mut Counts, hits_meanwhile: u8) {
        counts.counted(kernel.count - counts.counted);
        for _ in 0..hits_meanwhile {
            kernel.begin(9);
            kernel.finish();
        }
        kernel.drain(counts);
        if counts.owes_more() {
            while !kernel.in_flight.is_empty() {
                kernel.finish();
            }
            kernel.drain(counts);
        }
        counts.settle();
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn lost_is_monotonic_never_above_the_truth_and_exact_once_quiet(
            capacity in 1usize..6,
            steps in proptest::collection::vec(step(), 0..80),
        ) {
            let mut kernel = Kernel { capacity, ..Kernel::default() };
            let mut counts = Counts::default();
            let mut lost = 0;
            for step in steps {
                match step {
                    Step::Begin(value) => kernel.begin(value),
                    Step::Finish => kernel.finish(),
                    Step::Drain => kernel.drain(&mut counts),
                    Step::Collect(meanwhile) => {
                        collect(&mut kernel, &mut counts, meanwhile);
                        prop_assert!(counts.lost() >= lost, "monotonic");
                        prop_assert!(counts.lost() <= kernel.dropped, "never above the truth");
                        lost = counts.lost();
                    }
                }
            }
            // Quiet: every sample written or dropped, then one collection.
            while !kernel.in_flight.is_empty() {
                kernel.finish();
            }
            collect(&mut kernel, &mut counts, 0);
            prop_assert_eq!(counts.lost(), kernel.dropped);
            let series: u64 = counts.series(1).map(|(_, n)| n).sum();
            prop_assert_eq!(series + counts.lost(), kernel.count);
        }
    }
}
