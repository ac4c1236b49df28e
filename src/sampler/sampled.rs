//! Tracepoints counted by field value (`by:`): every hit is a sample that the
//! kernel writes into one ring buffer per CPU; draining a ring decodes each
//! sample's raw record into label values and counts it for the cgroup whose
//! event produced it.
//!
//! All sampled events of a CPU share that CPU's ring (the kernel's
//! `PERF_EVENT_IOC_SET_OUTPUT`), so the memory cost is one ring per CPU, not
//! one per cgroup and event. Samples carry the id of the event that wrote
//! them, which says which cgroup and which tracepoint they count for.
//!
//! # Losses, per entry and at every scrape
//!
//! A full ring drops samples, and the kernel says so only in a lost record
//! it writes with the next sample that fits, which may never come; and that
//! record names the ring, not the entry whose samples it dropped. So each
//! sampled event is read as a counter too: its count is every hit, written
//! or dropped. Per entry, [`Counts`] keeps `counted` (the kernel's counts,
//! summed over CPUs and over the events it had, each read one last time
//! when closed) and `decoded` (samples counted under a value or `other`);
//! `lost` is the part of `counted − decoded` known to be lost.
//!
//! A collection (`Sampler::settle_sampled`) reads every count
//! FIRST, THEN drains the rings. A hit's count goes up just before its
//! sample is written, so when the drain starts each hit counted by the read
//! has its sample in the ring (drained now), dropped, or still being
//! written on another CPU. The last is what would make `counted − decoded`
//! claim too much, so when it exceeds `lost`, the sampler waits for every
//! sample in flight ([`wait_for_samples_in_flight`]) and drains again.
//! Now every counted hit is decoded or dropped; samples of hits after the
//! read may be decoded too, which only makes `counted − decoded` smaller.
//! So it never exceeds the true losses, and `lost = max(lost, counted −
//! decoded)` is monotonic, never above the truth, and exact as soon as no
//! hit comes between the read and the drain: values + `other` + `lost` =
//! the hits counted, at the first collection after a burst.
//!
//! Closing an event (a reload, a CPU going offline) disables it first, so
//! nothing is counted after its last read, and adds that read to `counted`.
//! Its samples may still sit in the ring, or be in flight. When the entry
//! carries on (a reload that keeps its series), the sampler opens the new
//! events first, closes the old ones, waits for samples in flight, drains,
//! and only then forgets the old ids, so every sample they wrote is
//! counted under its value. Otherwise (the entry or its CPU's ring is gone)
//! they are never decoded and stay in `counted − decoded`: lost, exactly as
//! many as were not attributed.

use super::budget::Tally;
use crate::perf::{
    Errno, Readiness, Record, RingOwner, SAMPLE_TYPE, SampledEvent, page_size, parse_record,
    wait_for_samples_in_flight, wait_readable,
};
use crate::plan::SampledSpec;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Label value of the bucket that counts value combinations beyond
/// `max_series`.
pub const OTHER: &str = "other";

/// Separates field values in a count key; label values never contain it
/// (the field decoder escapes control characters).
const KEY_SEPARATOR: char = '\0';

/// One CPU's ring and the counts it feeds.
#[derive(Debug)]
pub(super) struct CpuRing {
    owner: RingOwner,
    /// Its descriptor reported hang-up or error: no longer polled.
    broken: bool,
    _fd: Tally,
}

/// Every CPU's ring, and which open event each sample id belongs to.
#[derive(Debug, Default)]
pub(super) struct Rings {
    rings: BTreeMap<u32, CpuRing>,
    /// Sample id → (cgroup path, event label).
    owners: HashMap<u64, (Arc<str>, Arc<str>)>,
    /// What the last wait found, per polled ring (reused).
    ready: Vec<Readiness>,
    /// Samples the kernel could not write because a ring was full.
    pub lost: u64,
    /// Records that could not be decoded, or rings found corrupt.
    pub undecodable: u64,
}

/// A `by:` tracepoint in one cgroup: its descriptors while open, its counts
/// forever.
#[derive(Debug)]
pub(super) struct SampledState {
    pub spec: Arc<SampledSpec>,
    open: Vec<OpenSampled>,
    pub counts: Counts,
    /// CPUs it failed to open on for a reason that passes: tried again at
    /// each collection.
    pub unopened: BTreeSet<u32>,
}

/// The event of a `by:` tracepoint on one CPU.
#[derive(Debug)]
struct OpenSampled {
    cpu: u32,
    event: SampledEvent,
    /// Its count at the last read (a new event starts from 0).
    last: u64,
    _fd: Tally,
}

/// Hits by value combination, bounded by `max_series`, and how many hits
/// the kernel counted (see the module doc on losses).
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Counts {
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
    fn add(&mut self, key: &str, max_series: usize) {
        self.decoded += 1;
        if let Some(n) = self.by_value.get_mut(key) {
            *n += 1;
        } else if self.by_value.len() < max_series {
            self.by_value.insert(key.into(), 1);
        } else {
            self.other += 1;
        }
    }

    /// Adds `hits` the kernel counted since the previous read.
    fn counted(&mut self, hits: u64) {
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

impl Rings {
    /// Whether any ring is open (the sampler then drains more often than
    /// it reads counters).
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty()
    }

    /// The ring of `cpu`, opened with `pages` data pages if it is not yet.
    ///
    /// It wakes the sampler (see [`Rings::wait`]) when half full, so that a
    /// burst is drained while the other half fills, where a CPU is free to
    /// do it, rather than only at the next tick.
    pub fn ensure(
        &mut self,
        cpu: u32,
        pages: usize,
        tally: &Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<&RingOwner, Errno> {
        let ring = match self.rings.entry(cpu) {
            std::collections::btree_map::Entry::Occupied(ring) => ring.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let half = pages.saturating_mul(page_size()?) / 2;
                let wakeup = u32::try_from(half).unwrap_or(u32::MAX);
                slot.insert(CpuRing {
                    owner: RingOwner::open(cpu, pages, wakeup)?,
                    broken: false,
                    _fd: Tally::new(tally, 1),
                })
            }
        };
        Ok(&ring.owner)
    }

    /// Waits until a ring asks to be drained or `timeout` passes. A ring
    /// whose descriptor reports hang-up or error is not waited on again
    /// (it would end every wait at once); the timer still drains it.
    pub fn wait(&mut self, timeout: Duration) {
        let polled: Vec<u32> = self
            .rings
            .iter()
            .filter(|(_, r)| !r.broken)
            .map(|(&cpu, _)| cpu)
            .collect();
        let owners: Vec<&RingOwner> = polled
            .iter()
            .filter_map(|cpu| self.rings.get(cpu))
            .map(|r| &r.owner)
            .collect();
        if owners.is_empty() {
            std::thread::sleep(timeout);
            return;
        }
        if let Err(e) = wait_readable(&owners, timeout, &mut self.ready) {
            tracing::debug!("waiting on the rings failed: {e:?}");
            std::thread::sleep(timeout);
            return;
        }
        for (cpu, ready) in polled.iter().zip(&self.ready) {
            if *ready == Readiness::Broken
                && let Some(ring) = self.rings.get_mut(cpu)
            {
                ring.broken = true;
            }
        }
    }

    /// Closes the ring of a CPU that went offline (after a last drain).
    pub fn close(&mut self, cpu: u32) {
        self.rings.remove(&cpu);
    }

    /// Closes every ring once no event writes into them any more.
    pub fn close_if_idle(&mut self) {
        if self.owners.is_empty() {
            self.rings.clear();
        }
    }

    /// Notes that sample id `id` counts for `label` in `cgroup`.
    pub fn register(&mut self, id: u64, cgroup: &Arc<str>, label: &Arc<str>) {
        self.owners.insert(id, (cgroup.clone(), label.clone()));
    }

    /// Forgets sample ids whose events were closed.
    pub fn unregister(&mut self, ids: impl Iterator<Item = u64>) {
        for id in ids {
            self.owners.remove(&id);
        }
    }

    /// Decodes every pending sample of every ring (or of `only` one CPU)
    /// and counts it where its id says.
    pub fn drain(&mut self, only: Option<u32>, mut count: impl FnMut(&str, &str, &[u8])) {
        let mut lost = 0;
        let mut undecodable = 0;
        for (&cpu, ring) in &mut self.rings {
            if only.is_some_and(|c| c != cpu) {
                continue;
            }
            let owners = &self.owners;
            let stats =
                ring.owner
                    .ring_mut()
                    .drain(|bytes| match parse_record(SAMPLE_TYPE, bytes) {
                        Ok(Record::Sample(sample)) => {
                            let found = sample.identifier.and_then(|id| owners.get(&id));
                            match (found, sample.raw) {
                                (Some((cgroup, label)), Some(raw)) => count(cgroup, label, raw),
                                // A sample of an event closed since it was written.
                                (None, Some(_)) => {}
                                _ => undecodable += 1,
                            }
                        }
                        Ok(Record::Lost { lost: n, .. }) => lost += n,
                        Ok(Record::Other { .. }) => {}
                        Err(_) => undecodable += 1,
                    });
            if stats.corrupt {
                undecodable += 1;
            }
        }
        self.lost += lost;
        self.undecodable += undecodable;
    }
}

impl SampledState {
    /// A new, unopened state with zero counts.
    pub fn new(spec: Arc<SampledSpec>) -> Self {
        Self {
            spec,
            open: Vec::new(),
            counts: Counts::default(),
            unopened: BTreeSet::new(),
        }
    }

    /// Counts one sample's raw record; `scratch` is reused across calls.
    pub fn count(&mut self, raw: &[u8], scratch: &mut String, value: &mut String) {
        scratch.clear();
        for (i, (_, field)) in self.spec.fields.iter().enumerate() {
            if i > 0 {
                scratch.push(KEY_SEPARATOR);
            }
            match field.format_value(raw, value) {
                Ok(()) => scratch.push_str(value),
                // A record too short for its own format: count it, but
                // under no value rather than a made-up one.
                Err(_) => scratch.push_str(OTHER),
            }
        }
        self.counts.add(scratch, self.spec.max_series);
    }

    /// Adds the event opened on `cpu`.
    pub fn opened(&mut self, cpu: u32, event: SampledEvent, tally: Tally) {
        self.open.push(OpenSampled {
            cpu,
            event,
            last: 0,
            _fd: tally,
        });
    }

    /// Reads the count of every open event into `counted`; `failed` hears
    /// of each read the kernel refused (that event's hits are then counted
    /// at a later read).
    pub fn read_counts(&mut self, mut failed: impl FnMut(Errno)) {
        for open in &mut self.open {
            match open.event.read_count() {
                Ok(now) => {
                    self.counts.counted(now.saturating_sub(open.last));
                    open.last = now;
                }
                Err(errno) => failed(errno),
            }
        }
    }

    /// Closes the event on `cpu` (or on every CPU) after disabling it and
    /// reading its count one last time (see the module doc); returns the
    /// sample ids that no longer belong to an open event.
    pub fn close(&mut self, cpu: Option<u32>) -> Vec<u64> {
        let mut ids = Vec::new();
        let counts = &mut self.counts;
        self.open.retain(|open| {
            let keep = cpu.is_some_and(|cpu| cpu != open.cpu);
            if !keep {
                // A failed disable (the event is gone with its CPU) still
                // leaves the count to read.
                let _ = open.event.disable();
                if let Ok(now) = open.event.read_count() {
                    counts.counted(now.saturating_sub(open.last));
                }
                ids.push(open.event.id());
            }
            keep
        });
        ids
    }

    /// The ids of the open events.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.open.iter().map(|o| o.event.id())
    }
}

/// Waits for the samples in flight (see the module doc); where the kernel
/// cannot (`nohz_full`), gives them a millisecond, which is ample for a
/// section with preemption disabled, but not a proof.
pub(super) fn wait_for_writers() {
    if let Err(e) = wait_for_samples_in_flight() {
        tracing::debug!("membarrier refused ({e:?}); waiting 1 ms for samples in flight");
        std::thread::sleep(Duration::from_millis(1));
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
