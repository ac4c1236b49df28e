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
//! or dropped. Per entry, [`Counts`] (in the totals) keeps `counted` (the kernel's counts,
//! summed over CPUs and over the events it had, each read one last time
//! when closed) and `decoded` (samples counted under a value or `other`);
//! `lost` is the part of `counted − decoded` known to be lost.
//!
//! A collection (`ByRings::settle`) reads every count
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
//!
//! # Cuts: an entry handed between the rings and another counter
//!
//! The bpf backend moves a `by:` entry between its BPF program and these
//! rings when a reload changes whether the program can evaluate it. Both
//! sides then count from one cut per CPU: an event may count only the
//! samples whose time (`CLOCK_MONOTONIC`, as the program's) is at or past
//! its cut (an entry arriving here), or before it (one leaving), the others
//! being skipped, and not counted in `counted` either
//! ([`SampledState::end_window`]).
//!
//! A sample the ring drops (full) on the other side of the cut is of a hit
//! the other counter counted, yet it is in this event's count, so the
//! entry would report it lost. No time comes with a drop, but the kernel
//! counts each event's drops (`PERF_FORMAT_LOST`), and the hand-over reads
//! that count twice: right after every ring is drained, just before the cut
//! ([`super::ByRings::start_held`]), and right after the cut is set
//! ([`DropMark`]). What an event dropped by the first read is of hits
//! before the cut, and what it dropped after the second of hits past it:
//! an arriving event takes the first out of its count (the other side
//! counted them) and reports the rest lost, rightly; a leaving event keeps
//! the first as lost and takes the rest out.
//!
//! Drops between the two reads could be of hits on either side. A ring
//! drops there only if it fills in those few microseconds (cgperf
//! preempted right then, or rings far too small for the rate): they are
//! taken out, so that `lost` stays never above the truth, and a warning
//! says how many (values + `other` + `lost` may then fall short of the
//! hits by that much). Where the kernel cannot count drops (before Linux
//! 6.0), every drop of an arriving event is reported lost, and none of a
//! leaving event's.

use crate::backend::budget::Tally;
use crate::ids::SampledId;
use crate::perf::{
    Errno, Readiness, Record, RingOwner, SAMPLE_TYPE, SampledEvent, page_size, parse_record,
    wait_for_samples_in_flight, wait_readable,
};
use crate::plan::SampledSpec;
use crate::totals::{Counts, Handle, Totals};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

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
    /// Sample id → the counts it goes to, and how to decode it.
    owners: HashMap<u64, Owner>,
    /// Entries whose events, as they open, count nothing until their cut
    /// is known ([`SampledState::window`]).
    pub held: HashSet<SampledId>,
    /// What the last wait found, per polled ring (reused).
    ready: Vec<Readiness>,
    /// Samples the kernel could not write because a ring was full.
    pub lost: u64,
    /// Records that could not be decoded, or rings found corrupt.
    pub undecodable: u64,
}

/// Where the samples of one open event go.
#[derive(Debug)]
struct Owner {
    counts: Handle,
    spec: Arc<SampledSpec>,
    /// It counts samples of times in `from..until` (see the module doc on
    /// cuts).
    from: u64,
    until: u64,
    /// Samples outside that window.
    skipped: u64,
}

/// A `by:` tracepoint in one cgroup: its descriptors while open, its counts
/// forever.
#[derive(Debug)]
pub(super) struct SampledState {
    pub spec: Arc<SampledSpec>,
    open: Vec<OpenSampled>,
    /// Its counts in the totals.
    pub counts: Handle,
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
    /// Of an event moving at a cut: its samples dropped as of each
    /// [`DropMark`] (indexed by it), where the kernel says
    /// ([`SampledState::note_drops`]).
    drops: [Option<u64>; 2],
    _fd: Tally,
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

    /// Notes that the samples of id `id` decode as `spec` says and count
    /// into `counts`.
    /// An event of an entry [`Rings::held`] counts nothing until its
    /// window is set.
    pub fn register(&mut self, id: u64, counts: Handle, spec: &Arc<SampledSpec>) {
        let from = match self.held.contains(&spec.id()) {
            true => u64::MAX,
            false => 0,
        };
        let owner = Owner {
            counts,
            spec: spec.clone(),
            from,
            until: u64::MAX,
            skipped: 0,
        };
        self.owners.insert(id, owner);
    }

    /// Counts, of the samples of event `id` drained from now on, those of
    /// times in `from..until`.
    fn set_window(&mut self, id: u64, from: u64, until: u64) {
        if let Some(owner) = self.owners.get_mut(&id) {
            (owner.from, owner.until) = (from, until);
        }
    }

    /// Samples of event `id` skipped as outside its window since the last
    /// call.
    fn take_skipped(&mut self, id: u64) -> u64 {
        self.owners
            .get_mut(&id)
            .map_or(0, |o| std::mem::take(&mut o.skipped))
    }

    /// Forgets sample ids whose events were closed.
    pub fn unregister(&mut self, ids: impl Iterator<Item = u64>) {
        for id in ids {
            self.owners.remove(&id);
        }
    }

    /// Decodes every pending sample of every ring and counts it where its
    /// id says.
    pub fn drain(&mut self, totals: &mut Totals) {
        let mut lost = 0;
        let mut undecodable = 0;
        let (mut key, mut value) = (String::new(), String::new());
        for ring in self.rings.values_mut() {
            let owners = &mut self.owners;
            let stats =
                ring.owner
                    .ring_mut()
                    .drain(|bytes| match parse_record(SAMPLE_TYPE, bytes) {
                        Ok(Record::Sample(sample)) => {
                            let found = sample.identifier.and_then(|id| owners.get_mut(&id));
                            match (found, sample.raw) {
                                (Some(owner), Some(raw)) => {
                                    let time = sample.time.unwrap_or(0);
                                    if time < owner.from || time >= owner.until {
                                        owner.skipped += 1;
                                    } else if let Some(counts) = totals.sampled_mut(owner.counts) {
                                        count(&owner.spec, counts, raw, &mut key, &mut value);
                                    }
                                }
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

/// Counts one sample's raw record as `spec` decodes it; `key` and `value`
/// are reused across calls.
fn count(
    spec: &SampledSpec,
    counts: &mut Counts,
    raw: &[u8],
    key: &mut String,
    value: &mut String,
) {
    spec.key_of(raw, key, value);
    counts.add(key, spec.max_series);
}

impl SampledState {
    /// A new, unopened state counting into `counts`.
    pub fn new(spec: Arc<SampledSpec>, counts: Handle) -> Self {
        Self {
            spec,
            open: Vec::new(),
            counts,
            unopened: BTreeSet::new(),
        }
    }

    /// Adds the event opened on `cpu`.
    pub fn opened(&mut self, cpu: u32, event: SampledEvent, tally: Tally) {
        self.open.push(OpenSampled {
            cpu,
            event,
            last: 0,
            drops: [None; 2],
            _fd: tally,
        });
    }

    /// Starts every open event (each was opened stopped, held for a cut);
    /// `failed` hears of each the kernel refused to start, which then
    /// counts nothing.
    pub fn start(&mut self, mut failed: impl FnMut(Errno)) {
        for open in &self.open {
            if let Err(errno) = open.event.enable() {
                failed(errno);
            }
        }
    }

    /// Notes how many samples each open event dropped as of `mark`.
    pub fn note_drops(&mut self, mark: DropMark) {
        for open in &mut self.open {
            open.drops[mark as usize] = open.event.read().ok().and_then(|r| r.lost);
        }
    }

    /// Reads the count of every open event into `counted`; `failed` hears
    /// of each read the kernel refused (that event's hits are then counted
    /// at a later read).
    pub fn read_counts(&mut self, totals: &mut Totals, mut failed: impl FnMut(Errno)) {
        let Some(counts) = totals.sampled_mut(self.counts) else {
            return;
        };
        for open in &mut self.open {
            match open.event.read_count() {
                Ok(now) => {
                    counts.counted(now.saturating_sub(open.last));
                    open.last = now;
                }
                Err(errno) => failed(errno),
            }
        }
    }

    /// Closes the event on `cpu` (or on every CPU) after disabling it and
    /// reading its count one last time (see the module doc); returns the
    /// sample ids that no longer belong to an open event.
    pub fn close(&mut self, cpu: Option<u32>, totals: &mut Totals) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut counts = totals.sampled_mut(self.counts);
        self.open.retain(|open| {
            let keep = cpu.is_some_and(|cpu| cpu != open.cpu);
            if !keep {
                // A failed disable (the event is gone with its CPU) still
                // leaves the count to read.
                let _ = open.event.disable();
                if let (Ok(now), Some(counts)) = (open.event.read_count(), counts.as_mut()) {
                    counts.counted(now.saturating_sub(open.last));
                }
                ids.push(open.event.id());
            }
            keep
        });
        ids
    }

    /// Counts, on each CPU, only the samples at or past (`arriving`) or
    /// before (not `arriving`) the time `cut(cpu)`; an event leaving is
    /// disabled, so that it writes nothing more. Then wait for the samples
    /// in flight, drain, and [`SampledState::end_window`].
    pub fn window(&mut self, rings: &mut Rings, arriving: bool, cut: impl Fn(u32) -> u64) {
        for open in &self.open {
            let at = cut(open.cpu);
            match arriving {
                true => rings.set_window(open.event.id(), at, u64::MAX),
                false => {
                    // A failed disable (the event is gone with its CPU)
                    // leaves nothing more to count.
                    let _ = open.event.disable();
                    rings.set_window(open.event.id(), 0, at);
                }
            }
        }
    }

    /// Once every sample outside its window is drained (see
    /// [`SampledState::window`]), takes them out of what it counts: an
    /// event arriving counted since it opened (and was not read since)
    /// the hits before its cut, all drained now or dropped by the cut's
    /// [`DropMark`]; one leaving has its last count read, less the hits
    /// past its cut: those it sampled (skipped) and those it dropped since
    /// the drain before the cut. Returns how many of those drops came
    /// between the two marks, of hits that could be on either side (see
    /// the module doc on cuts).
    pub fn end_window(&mut self, rings: &mut Rings, arriving: bool, totals: &mut Totals) -> u64 {
        let mut counts = totals.sampled_mut(self.counts);
        let mut unsure = 0;
        for open in &mut self.open {
            let skipped = rings.take_skipped(open.event.id());
            let (drain, cut) = match std::mem::take(&mut open.drops) {
                [Some(drain), Some(cut)] => (drain, cut.max(drain)),
                _ => (0, 0),
            };
            unsure += cut - drain;
            if arriving {
                open.last = open.last.saturating_add(skipped).saturating_add(cut);
                continue;
            }
            if let Ok(now) = open.event.read() {
                let dropped_since = now.lost.map_or(0, |lost| lost.saturating_sub(drain));
                let before = now.count.saturating_sub(open.last);
                let before = before.saturating_sub(skipped).saturating_sub(dropped_since);
                if let Some(counts) = counts.as_mut() {
                    counts.counted(before);
                }
                open.last = now.count;
            }
        }
        unsure
    }

    /// The ids of the open events.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.open.iter().map(|o| o.event.id())
    }
}

/// When a hand-over reads how many samples each moving event dropped (see
/// the module doc on cuts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropMark {
    /// Every ring just drained, the cut not yet set.
    Drain = 0,
    /// The cut just set.
    Cut = 1,
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
