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

use super::kernel::{MAX_EVENTS, Reading};
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
