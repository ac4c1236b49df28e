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

/// The entries of the first hash for `capacity` cgroups.
fn first_size(capacity: u32) -> u32 {
    FIRST.min(capacity.max(1))
}

/// The entries a hash of `size` entries, `len` of them taken, grows to
/// to make room for `more` (at least twice as many, a power of two, at
/// most `capacity`); `None` if it has room, or cannot grow.
fn grown(size: u32, len: u32, more: u32, capacity: u32) -> Option<u32> {
    let want = len.saturating_add(more);
    if want <= size || size >= capacity {
        return None;
    }
    let size = want.max(size.saturating_mul(2)).checked_next_power_of_two();
    Some(size.unwrap_or(u32::MAX).min(capacity))
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
        let size = first_size(capacity);
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
        match grown(self.size, self.len, more, self.capacity) {
            Some(size) => self.grow(size, wait),
            None => Ok(()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The sizes a hash takes as cgroups come one by one up to `n`, each
    /// growth with the entries held when it grew.
    fn one_by_one(n: u32, capacity: u32) -> Vec<(u32, u32)> {
        let mut size = first_size(capacity);
        let mut sizes = vec![(size, 0)];
        for len in 0..n {
            if let Some(next) = grown(size, len, 1, capacity) {
                assert!(next > size, "a growth grows");
                size = next;
                sizes.push((size, len));
            }
        }
        sizes
    }

    #[test]
    fn the_first_hash_holds_1024_cgroups_or_the_capacity_if_fewer() {
        assert_eq!(first_size(4096), 1024);
        assert_eq!(first_size(u32::MAX), 1024);
        assert_eq!(first_size(1024), 1024);
        assert_eq!(first_size(10), 10);
        assert_eq!(first_size(1), 1);
        assert_eq!(first_size(0), 1, "at least one cgroup");
    }

    #[test]
    fn a_hash_with_room_does_not_grow() {
        assert_eq!(grown(1024, 0, 1024, 4096), None, "exactly full after");
        assert_eq!(grown(1024, 1023, 1, 4096), None);
        assert_eq!(grown(1024, 500, 0, 4096), None, "nothing more");
    }

    #[test]
    fn a_full_hash_doubles_one_cgroup_at_a_time() {
        assert_eq!(grown(1024, 1024, 1, 1 << 20), Some(2048));
        assert_eq!(
            one_by_one(10_000, 1 << 20),
            [
                (1024, 0),
                (2048, 1024),
                (4096, 2048),
                (8192, 4096),
                (16384, 8192)
            ]
        );
    }

    #[test]
    fn a_batch_grows_the_hash_once_to_hold_all_of_it() {
        assert_eq!(grown(1024, 1000, 50_000, 1 << 20), Some(65536));
        assert_eq!(grown(1024, 0, 1025, 1 << 20), Some(2048), "at least double");
        assert_eq!(
            grown(1024, 1024, 1 << 19, 1 << 20),
            Some(1 << 20),
            "a power of two"
        );
    }

    #[test]
    fn a_hash_never_grows_past_the_capacity() {
        assert_eq!(grown(1024, 1024, 1, 1500), Some(1500));
        assert_eq!(grown(1024, 1024, 1_000_000, 3000), Some(3000));
        assert_eq!(grown(1500, 1500, 1, 1500), None, "at the capacity");
        assert_eq!(
            one_by_one(5000, 3000),
            [(1024, 0), (2048, 1024), (3000, 2048)]
        );
        assert_eq!(one_by_one(1, 1), [(1, 0)], "one cgroup: never grows");
        assert_eq!(grown(1, 1, 1, 1), None);
    }

    #[test]
    fn a_hash_near_u32_max_cgroups_grows_without_overflowing() {
        let max = u32::MAX;
        assert_eq!(
            grown(1 << 31, 1 << 31, 1, max),
            Some(max),
            "no power of two left"
        );
        assert_eq!(
            grown(1 << 30, max, max, max),
            Some(max),
            "the count saturates"
        );
        assert_eq!(grown(1 << 31, 1 << 31, 1, 1 << 31), None);
        assert_eq!(grown(max, max, 1, max), None);
    }
}
