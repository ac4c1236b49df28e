//! Each CPU's epoch and the descriptions of its counters, which cgperf
//! shares with the counting program through mmap: how a change of the
//! counted groups reaches every CPU whole (see `count.bpf.c`).
//!
//! A change on a CPU is its next epoch. Each counter's description says
//! the epoch it is live from (its first reading a baseline) and the one it
//! is no longer read in, in one word, written before the epoch moves: a
//! run of the program sees either all of a change or none of it, and makes
//! it at once. cgperf alone writes these words; the program only reads
//! them.

use super::abi::{MAX_EVENTS, Reading};
use memmap2::MmapRaw;
use std::sync::atomic::{AtomicU64, Ordering};

/// The epochs a description holds (`desc` in `count.bpf.c`): the one the
/// counter is live from in the low word (0: never), and the one it is no
/// longer read in in the next 31 bits, FOREVER while it stays.
const FOREVER: u64 = 0x7fff_ffff;
/// The bit of a description that says the counter leads its group.
const LEADS: u64 = 1 << 63;
/// The bytes of a `struct last` of `count.bpf.c`: a description and two
/// readings.
pub(super) const LAST_BYTES: usize = 8 + 2 * size_of::<Reading>();

/// The program's `state` (an epoch per CPU) and `last` (a description and
/// two readings per counter), mapped read-write.
#[derive(Debug)]
pub(super) struct Epochs {
    state: MmapRaw,
    last: MmapRaw,
    cpus: u32,
}

impl Epochs {
    /// `state` maps `cpus` words, `last` `cpus × MAX_EVENTS` entries of
    /// [`LAST_BYTES`].
    pub fn new(state: MmapRaw, last: MmapRaw, cpus: u32) -> Self {
        Self { state, last, cpus }
    }

    /// `cpu`'s epoch.
    fn epoch(&self, cpu: u32) -> Option<&AtomicU64> {
        if cpu >= self.cpus {
            return None;
        }
        // SAFETY: the mapping holds `cpus` aligned u64 words (page-aligned
        // start), which live as long as `self`; the program only reads them.
        Some(unsafe {
            &*self
                .state
                .as_mut_ptr()
                .cast::<AtomicU64>()
                .add(cpu as usize)
        })
    }

    /// The description of counter `e` of `cpu`.
    fn desc(&self, cpu: u32, e: usize) -> Option<&AtomicU64> {
        if cpu >= self.cpus || e >= MAX_EVENTS {
            return None;
        }
        let at = (cpu as usize * MAX_EVENTS + e) * LAST_BYTES;
        // SAFETY: the mapping holds `cpus × MAX_EVENTS` entries of
        // LAST_BYTES (a multiple of 8) from a page-aligned start, each
        // starting with the description, and lives as long as `self`; the
        // program writes the rest of each entry, and only reads this word.
        Some(unsafe { &*self.last.as_mut_ptr().add(at).cast::<AtomicU64>() })
    }

    /// Moves `cpu` to its next epoch: each of `news` (a counter position
    /// and whether it leads its group) is live from it, with a baseline
    /// first, and each of `gone` is read for the last time in it; the
    /// program's next run there makes the change at once. (Epochs count
    /// changes on one CPU: 2^31 of them are out of reach.)
    pub fn next(&self, cpu: u32, news: &[(usize, bool)], gone: &[usize]) {
        let Some(epoch) = self.epoch(cpu) else {
            return;
        };
        let next = epoch.load(Ordering::SeqCst) + 1;
        for &(e, leads) in news {
            if let Some(desc) = self.desc(cpu, e) {
                let leads = if leads { LEADS } else { 0 };
                desc.store(next | FOREVER << 32 | leads, Ordering::SeqCst);
            }
        }
        for &e in gone {
            if let Some(desc) = self.desc(cpu, e) {
                let d = desc.load(Ordering::SeqCst);
                desc.store(d & !(FOREVER << 32) | next << 32, Ordering::SeqCst);
            }
        }
        epoch.store(next, Ordering::SeqCst);
    }

    /// Makes every counter of `cpu` below `top` never live: its counters
    /// are being closed.
    pub fn forget(&self, cpu: u32, top: usize) {
        for e in 0..top {
            if let Some(desc) = self.desc(cpu, e) {
                desc.store(0, Ordering::SeqCst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count.bpf.c`'s `live_at`, on a description.
    fn live_at(d: u64, epoch: u64) -> bool {
        let (from, until) = (d & 0xffff_ffff, (d >> 32) & FOREVER);
        from != 0 && from <= epoch && epoch < until
    }

    fn mapped(bytes: usize) -> MmapRaw {
        memmap2::MmapOptions::new()
            .len(bytes)
            .map_anon()
            .expect("an anonymous mapping")
            .into()
    }

    #[test]
    fn a_change_makes_new_counters_live_from_the_next_epoch_and_gone_ones_read_in_it_last() {
        let cpus = 2;
        let epochs = Epochs::new(mapped(8 * 2), mapped(2 * MAX_EVENTS * LAST_BYTES), cpus);
        let desc = |cpu, e| {
            epochs
                .desc(cpu, e)
                .expect("a counter")
                .load(Ordering::SeqCst)
        };
        let epoch = |cpu| epochs.epoch(cpu).expect("a CPU").load(Ordering::SeqCst);
        epochs.next(1, &[(0, true), (MAX_EVENTS - 1, false)], &[]);
        assert_eq!((epoch(0), epoch(1)), (0, 1), "only CPU 1 moved");
        let (leader, member) = (desc(1, 0), desc(1, MAX_EVENTS - 1));
        assert_eq!(leader >> 63, 1);
        assert_eq!(member >> 63, 0);
        for d in [leader, member] {
            assert!(!live_at(d, 0) && live_at(d, 1) && live_at(d, 1_000_000));
        }
        assert_eq!(desc(0, 0), 0, "CPU 0 untouched");
        // Retiring the leader while a new counter takes position 1.
        epochs.next(1, &[(1, true)], &[0]);
        assert_eq!(epoch(1), 2);
        let (gone, new) = (desc(1, 0), desc(1, 1));
        assert!(
            live_at(gone, 1) && !live_at(gone, 2),
            "read in epoch 2 for the last time"
        );
        assert_eq!(gone >> 63, 1, "still leads while read");
        assert!(!live_at(new, 1) && live_at(new, 2), "a baseline in epoch 2");
        assert!(live_at(desc(1, MAX_EVENTS - 1), 2), "the other stays");
        epochs.forget(1, MAX_EVENTS);
        assert!((0..MAX_EVENTS).all(|e| desc(1, e) == 0));
        assert!(epochs.desc(2, 0).is_none() && epochs.desc(0, MAX_EVENTS).is_none());
    }
}
