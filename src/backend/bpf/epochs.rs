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

use super::abi::{MAX_EVENTS, Reading, Source};
use memmap2::MmapRaw;
use std::sync::atomic::{AtomicU64, Ordering};

/// The epochs a description holds (`desc` in `count.bpf.c`): the one the
/// counter is live from in the low word (0: never), and the one it is no
/// longer read in in the next 31 bits, FOREVER while it stays.
const FOREVER: u64 = 0x7fff_ffff;
/// The bit of a description that says the counter leads its group.
const LEADS: u64 = 1 << 63;
/// The bytes of a `struct last` of `count.bpf.c`: a description, a source
/// and two readings.
pub(super) const LAST_BYTES: usize = 8 + 8 + 2 * size_of::<Reading>();

/// A counter made live by a change: its position, whether it leads its
/// group, and where the program reads it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Described {
    pub at: usize,
    pub leads: bool,
    pub source: Source,
}

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

    /// Word `word` (0: the description, 1: the source) of counter `e` of
    /// `cpu`.
    fn word(&self, cpu: u32, e: usize, word: usize) -> Option<&AtomicU64> {
        if cpu >= self.cpus || e >= MAX_EVENTS || word > 1 {
            return None;
        }
        let at = (cpu as usize * MAX_EVENTS + e) * LAST_BYTES + word * 8;
        // SAFETY: the mapping holds `cpus × MAX_EVENTS` entries of
        // LAST_BYTES (a multiple of 8) from a page-aligned start, each
        // starting with the description and the source, and lives as long
        // as `self`; the program writes the rest of each entry, and only
        // reads these two words.
        Some(unsafe { &*self.last.as_mut_ptr().add(at).cast::<AtomicU64>() })
    }

    /// The description of counter `e` of `cpu`.
    fn desc(&self, cpu: u32, e: usize) -> Option<&AtomicU64> {
        self.word(cpu, e, 0)
    }

    /// Moves `cpu` to its next epoch: each of `news` is live from it, with
    /// a baseline first, and each of `gone` is read for the last time in
    /// it; the program's next run there makes the change at once. (Epochs
    /// count changes on one CPU: 2^31 of them are out of reach.) A new
    /// counter's source is written before its description: a position is
    /// only ever given a source while no epoch the program may do reads it.
    pub fn next(&self, cpu: u32, news: &[Described], gone: &[usize]) {
        let Some(epoch) = self.epoch(cpu) else {
            return;
        };
        let next = epoch.load(Ordering::SeqCst) + 1;
        for new in news {
            if let (Some(desc), Some(source)) = (self.desc(cpu, new.at), self.word(cpu, new.at, 1))
            {
                source.store(new.source as u64, Ordering::SeqCst);
                let leads = if new.leads { LEADS } else { 0 };
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

    /// A counter at `at` read from a perf counter.
    fn c(at: usize, leads: bool) -> Described {
        Described {
            at,
            leads,
            source: Source::Counter,
        }
    }

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
        epochs.next(1, &[c(0, true), c(MAX_EVENTS - 1, false)], &[]);
        assert_eq!((epoch(0), epoch(1)), (0, 1), "only CPU 1 moved");
        let (leader, member) = (desc(1, 0), desc(1, MAX_EVENTS - 1));
        assert_eq!(leader >> 63, 1);
        assert_eq!(member >> 63, 0);
        for d in [leader, member] {
            assert!(!live_at(d, 0) && live_at(d, 1) && live_at(d, 1_000_000));
        }
        assert_eq!(desc(0, 0), 0, "CPU 0 untouched");
        // Retiring the leader while a new counter takes position 1.
        epochs.next(1, &[c(1, true)], &[0]);
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

    /// Epochs for `cpus` CPUs, nothing described yet.
    fn epochs(cpus: u32) -> Epochs {
        let n = cpus as usize;
        Epochs::new(mapped(8 * n), mapped(n * MAX_EVENTS * LAST_BYTES), cpus)
    }

    fn desc(epochs: &Epochs, cpu: u32, e: usize) -> u64 {
        epochs
            .desc(cpu, e)
            .expect("a counter")
            .load(Ordering::SeqCst)
    }

    fn epoch(epochs: &Epochs, cpu: u32) -> u64 {
        epochs.epoch(cpu).expect("a CPU").load(Ordering::SeqCst)
    }

    /// Every description of every CPU.
    fn all(epochs: &Epochs, cpus: u32) -> Vec<u64> {
        (0..cpus)
            .flat_map(|cpu| (0..MAX_EVENTS).map(move |e| (cpu, e)))
            .map(|(cpu, e)| desc(epochs, cpu, e))
            .collect()
    }

    #[test]
    fn a_description_is_laid_out_as_count_bpf_c_reads_it() {
        use super::super::abi::tests::{defined, members};
        assert_eq!(defined("FOREVER"), FOREVER);
        assert_eq!(LEADS, 1 << 63, "LEADS(d) is d >> 63");
        assert_eq!(LAST_BYTES, 64);
        let last: Vec<_> = members("last")
            .into_iter()
            .map(|(t, n)| t + " " + &n)
            .collect();
        assert_eq!(
            last,
            [
                "__u64 desc",
                "__u64 source",
                "struct reading seen",
                "struct reading delta"
            ],
            "the description and the source first, where cgperf writes them"
        );
    }

    #[test]
    fn a_new_counter_gets_its_source_with_its_description_and_keeps_it_when_it_goes() {
        let epochs = epochs(2);
        let source = |cpu, e| {
            epochs
                .word(cpu, e, 1)
                .expect("a counter")
                .load(Ordering::SeqCst)
        };
        let new = |at, source| Described {
            at,
            leads: false,
            source,
        };
        epochs.next(
            1,
            &[
                new(0, Source::Switches),
                new(1, Source::Clock),
                new(2, Source::Counter),
            ],
            &[],
        );
        assert_eq!([source(1, 0), source(1, 1), source(1, 2)], [1, 2, 0]);
        assert_eq!(source(0, 0), 0, "CPU 0 untouched");
        epochs.next(1, &[], &[0]);
        assert_eq!(source(1, 0), 1, "read from the same source a last time");
        // The position taken again by a perf counter.
        epochs.next(1, &[new(0, Source::Counter)], &[]);
        assert_eq!(source(1, 0), 0);
        assert!(epochs.word(1, 0, 2).is_none(), "two words only");
    }

    #[test]
    fn a_change_on_a_cpu_past_the_possible_ones_moves_nothing() {
        let epochs = epochs(2);
        epochs.next(2, &[c(0, true)], &[0]);
        epochs.next(u32::MAX, &[c(0, true)], &[]);
        epochs.forget(2, MAX_EVENTS);
        assert_eq!((epoch(&epochs, 0), epoch(&epochs, 1)), (0, 0));
        assert!(all(&epochs, 2).iter().all(|&d| d == 0));
        assert!(epochs.epoch(2).is_none());
    }

    #[test]
    fn positions_past_the_last_are_skipped_and_the_rest_of_the_change_made() {
        let epochs = epochs(1);
        epochs.next(0, &[c(MAX_EVENTS, true), c(3, true)], &[MAX_EVENTS + 7]);
        assert_eq!(epoch(&epochs, 0), 1);
        let d = desc(&epochs, 0, 3);
        assert!(live_at(d, 1));
        let others = all(&epochs, 1).iter().filter(|&&d| d != 0).count();
        assert_eq!(others, 1, "only position 3 is described");
    }

    #[test]
    fn the_last_counter_of_a_cpu_and_the_first_of_the_next_are_apart() {
        let epochs = epochs(3);
        epochs.next(1, &[c(MAX_EVENTS - 1, true)], &[]);
        epochs.next(2, &[c(0, false)], &[]);
        let d = |cpu, e| desc(&epochs, cpu, e);
        assert_eq!(d(1, MAX_EVENTS - 1), 1 | FOREVER << 32 | LEADS);
        assert_eq!(d(2, 0), 1 | FOREVER << 32);
        assert_eq!(d(1, MAX_EVENTS - 2), 0);
        assert_eq!(d(0, MAX_EVENTS - 1), 0);
        assert_eq!(d(2, 1), 0);
        let set = all(&epochs, 3).iter().filter(|&&d| d != 0).count();
        assert_eq!(set, 2);
    }

    #[test]
    fn a_retired_counter_keeps_its_first_epoch_and_its_lead() {
        let epochs = epochs(1);
        epochs.next(0, &[c(5, true), c(6, false)], &[]);
        epochs.next(0, &[], &[]);
        epochs.next(0, &[], &[5, 6]);
        assert_eq!(epoch(&epochs, 0), 3, "an empty change is an epoch too");
        assert_eq!(desc(&epochs, 0, 5), 1 | 3 << 32 | LEADS);
        assert_eq!(desc(&epochs, 0, 6), 1 | 3 << 32);
        for e in [5, 6] {
            let d = desc(&epochs, 0, e);
            assert_eq!(
                (0..5).map(|n| live_at(d, n)).collect::<Vec<_>>(),
                [false, true, true, false, false]
            );
        }
    }

    #[test]
    fn a_counter_placed_where_another_retired_describes_only_itself() {
        let epochs = epochs(1);
        epochs.next(0, &[c(0, true)], &[]);
        epochs.next(0, &[], &[0]);
        // A member of another group takes the position once free.
        epochs.next(0, &[c(0, false)], &[]);
        let d = desc(&epochs, 0, 0);
        assert_eq!(
            d,
            3 | FOREVER << 32,
            "neither the lead nor the end of the one before"
        );
        assert!(!live_at(d, 2) && live_at(d, 3));
    }

    #[test]
    fn forgetting_a_cpu_clears_its_counters_below_top_and_keeps_its_epoch() {
        let epochs = epochs(2);
        epochs.next(0, &[c(0, true), c(1, false), c(2, true)], &[]);
        epochs.next(1, &[c(0, true), c(1, false), c(2, true)], &[]);
        epochs.forget(1, 2);
        assert_eq!((desc(&epochs, 1, 0), desc(&epochs, 1, 1)), (0, 0));
        assert_eq!(
            desc(&epochs, 1, 2),
            1 | FOREVER << 32 | LEADS,
            "at top: kept"
        );
        assert!((0..3).all(|e| desc(&epochs, 0, e) != 0), "CPU 0 untouched");
        assert_eq!(epoch(&epochs, 1), 1);
        // Counters opened there again are live from the next epoch on:
        // never in one the program may have done already.
        epochs.next(1, &[c(0, true)], &[]);
        let d = desc(&epochs, 1, 0);
        assert!(!live_at(d, 1) && live_at(d, 2));
        epochs.forget(1, 0);
        assert_ne!(desc(&epochs, 1, 0), 0, "nothing below 0");
    }

    #[test]
    fn counters_described_in_the_last_epochs_expressible_are_live_exactly_then() {
        let epochs = epochs(1);
        epochs
            .epoch(0)
            .expect("a CPU")
            .store(FOREVER - 3, Ordering::SeqCst);
        epochs.next(0, &[c(0, true)], &[]);
        epochs.next(0, &[c(1, false)], &[0]);
        assert_eq!(epoch(&epochs, 0), FOREVER - 1);
        let (gone, new) = (desc(&epochs, 0, 0), desc(&epochs, 0, 1));
        assert!(live_at(gone, FOREVER - 2) && !live_at(gone, FOREVER - 1));
        assert!(!live_at(new, FOREVER - 2) && live_at(new, FOREVER - 1));
        assert_eq!(new & LEADS, 0, "the epoch stays out of the lead bit");
        assert_eq!(gone & LEADS, LEADS);
    }
}
