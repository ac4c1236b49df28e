//! Tracepoints counted by field value (`by:`): every hit is a sample that the
//! kernel writes into one ring buffer per CPU; draining a ring decodes each
//! sample's raw record into label values and counts it for the cgroup whose
//! event produced it.
//!
//! All sampled events of a CPU share that CPU's ring (the kernel's
//! `PERF_EVENT_IOC_SET_OUTPUT`), so the memory cost is one ring per CPU, not
//! one per cgroup and event. Samples carry the id of the event that wrote
//! them, which says which cgroup and which tracepoint they count for.

use super::budget::Tally;
use crate::perf::{Record, RingOwner, SAMPLE_TYPE, SampledEvent, parse_record};
use crate::plan::SampledSpec;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

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
    _fd: Tally,
}

/// Every CPU's ring, and which open event each sample id belongs to.
#[derive(Debug, Default)]
pub(super) struct Rings {
    rings: BTreeMap<u32, CpuRing>,
    /// Sample id → (cgroup path, event label).
    owners: HashMap<u64, (Arc<str>, Arc<str>)>,
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
    open: Vec<(u32, SampledEvent, Tally)>,
    pub counts: Counts,
}

/// Hits by value combination, bounded by `max_series`.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Counts {
    /// Key: the field values joined by [`KEY_SEPARATOR`]; ordered, so that
    /// every scrape lists the series in the same order.
    by_value: BTreeMap<Box<str>, u64>,
    /// Hits whose values were not among the first `max_series`.
    other: u64,
}

impl Counts {
    fn add(&mut self, key: &str, max_series: usize) {
        if let Some(n) = self.by_value.get_mut(key) {
            *n += 1;
        } else if self.by_value.len() < max_series {
            self.by_value.insert(key.into(), 1);
        } else {
            self.other += 1;
        }
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
    pub fn ensure(
        &mut self,
        cpu: u32,
        pages: usize,
        tally: &Arc<std::sync::atomic::AtomicU64>,
    ) -> Result<&RingOwner, crate::perf::Errno> {
        let ring = match self.rings.entry(cpu) {
            std::collections::btree_map::Entry::Occupied(ring) => ring.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => slot.insert(CpuRing {
                owner: RingOwner::open(cpu, pages, 0)?,
                _fd: Tally::new(tally, 1),
            }),
        };
        Ok(&ring.owner)
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
        self.open.push((cpu, event, tally));
    }

    /// Closes the event on `cpu` (or on every CPU); returns the sample ids
    /// that no longer belong to anything.
    pub fn close(&mut self, cpu: Option<u32>) -> Vec<u64> {
        let mut ids = Vec::new();
        self.open.retain(|(c, event, _)| {
            let keep = cpu.is_some_and(|cpu| cpu != *c);
            if !keep {
                ids.push(event.id());
            }
            keep
        });
        ids
    }

    /// The ids of the open events.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.open.iter().map(|(_, e, _)| e.id())
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
}
