//! The program's `monitored` cgroups (cgroup id → slot): a hash the
//! program finds through a one-entry array of maps, sized for the cgroups
//! counted rather than for `max_cgroups` (a hash's entries are allocated
//! at its creation, about 80 bytes each). When it is full, cgperf copies it
//! into one twice as big (at most `max_cgroups`), puts that one in its
//! place, and drops the old one only once every CPU has ended the runs that
//! may still look it up (the kernel waits for them too when an array of
//! maps changes; cgperf does not rely on it). Both hold the same cgroups,
//! so a run that reads either charges the same slots.

use super::sys::{failed, map_update};
use aya::maps::{HashMap, IterableMap, MapData};
use std::os::fd::{AsFd, AsRawFd};

/// Entries of the first hash (about 80 KiB).
const FIRST: u32 = 1024;

type Hash = HashMap<MapData, u64, u32>;

/// The monitored cgroups' hash in use.
#[derive(Debug)]
pub(super) struct Ids {
    outer: MapData,
    hash: Hash,
    /// Its entries at most.
    size: u32,
    /// Its entries.
    len: u32,
    capacity: u32,
    /// Hashes replaced that a run may still have read (a CPU could not be
    /// waited for): kept until cgperf exits.
    kept: Vec<Hash>,
}

/// An empty hash for `size` cgroups.
fn create(size: u32) -> Result<Hash, String> {
    Hash::create(size, 0).map_err(|e| failed(&format!("a hash of {size} cgroups"), &e).0)
}

/// Makes `hash` the one the program looks cgroups up in.
fn hand_over(outer: &MapData, hash: &Hash) -> Result<(), String> {
    let fd = IterableMap::map(hash).fd().as_fd().as_raw_fd();
    let fd = u32::try_from(fd).map_err(|_| "a negative descriptor")?;
    map_update(outer.fd().as_fd(), 0, fd)
        .map_err(|errno| format!("handing the hash of cgroups to the program: {errno}"))
}

impl Ids {
    /// An empty hash for up to `capacity` cgroups, in `outer`.
    pub fn new(outer: MapData, capacity: u32) -> Result<Self, String> {
        let size = FIRST.min(capacity.max(1));
        let hash = create(size)?;
        hand_over(&outer, &hash)?;
        Ok(Self {
            outer,
            hash,
            size,
            len: 0,
            capacity: capacity.max(1),
            kept: Vec::new(),
        })
    }

    /// Monitors `id` in `slot`, growing the hash first if it is full;
    /// `wait` ends the runs in progress on every CPU and says whether it
    /// could.
    pub fn insert(&mut self, id: u64, slot: u32, wait: impl Fn() -> bool) -> Result<(), String> {
        self.reserve(1, wait)?;
        self.hash.insert(id, slot, 0).map_err(|e| e.to_string())?;
        self.len += 1;
        Ok(())
    }

    /// Stops monitoring `id`.
    pub fn remove(&mut self, id: u64) {
        if self.hash.remove(&id).is_ok() {
            self.len = self.len.saturating_sub(1);
        }
    }

    /// Makes room for `more` cgroups, at least doubling the hash if it
    /// must grow (one copy for a whole batch of cgroups).
    pub fn reserve(&mut self, more: u32, wait: impl Fn() -> bool) -> Result<(), String> {
        let want = self.len.saturating_add(more);
        if want <= self.size || self.size >= self.capacity {
            return Ok(());
        }
        let size = want
            .max(self.size.saturating_mul(2))
            .checked_next_power_of_two();
        self.grow(size.unwrap_or(u32::MAX).min(self.capacity), wait)
    }

    /// Replaces the hash by a copy of `size` entries.
    fn grow(&mut self, size: u32, wait: impl Fn() -> bool) -> Result<(), String> {
        let mut bigger = create(size)?;
        for entry in self.hash.iter() {
            let (id, slot) = entry.map_err(|e| e.to_string())?;
            bigger.insert(id, slot, 0).map_err(|e| e.to_string())?;
        }
        hand_over(&self.outer, &bigger)?;
        let old = std::mem::replace(&mut self.hash, bigger);
        self.size = size;
        if !wait() {
            self.kept.push(old);
        }
        tracing::debug!(size, "grew the BPF hash of monitored cgroups");
        Ok(())
    }
}
