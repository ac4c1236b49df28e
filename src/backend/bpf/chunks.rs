//! The program's `totals`: what each slot was charged, per counter
//! position and CPU, in chunks that cgperf adds as cgroups are counted and
//! counters placed, so that the kernel memory follows what is counted
//! rather than `max_cgroups` × every position a counter might take.
//!
//! Chunk 0 of a position holds the first slots, as many as take 64 KiB (a
//! small machine's first thousand cgroups, at least 64), and each next
//! chunk twice as many as the one before (capped at the capacity): a chunk
//! is added when a slot there is
//! first taken, for every position in use, and a position placed for the
//! first time gets every chunk the others have, before the program may
//! charge there. A chunk, once added, stays where it is for the program's
//! life: growing moves nothing, so nothing is lost or counted twice, and
//! no run of the program can hold a chunk that goes away.

use super::abi::{MAX_EVENTS, Reading};
use super::sys::{failed, map_update_all};
use aya::maps::{Array, IterableMap, MapData};
use memmap2::{MmapOptions, MmapRaw};
use std::os::fd::{AsFd, AsRawFd};

/// Bytes of readings per position a first chunk holds at most, unless it
/// is of the fewest slots.
const FIRST_BYTES: u64 = 64 << 10;
/// Slots of a first chunk at least and at most, as shifts.
const FIRST_SHIFTS: (u32, u32) = (6, 16);
/// Chunks per position at most (`CHUNKS` in `count.bpf.c`): enough for
/// 2^32 slots.
const CHUNKS: usize = 32;
/// `BPF_F_MMAPABLE | BPF_F_INNER_MAP`, as the program's `struct chunk`
/// has them: a chunk's size varies, the rest must be as declared.
const CHUNK_FLAGS: u32 = (1 << 10) | (1 << 12);

/// The slots of a first chunk on `cpus` possible CPUs, as a shift
/// (`chunk0` of the program's config).
pub(super) fn first_chunk(cpus: u32) -> u32 {
    let per_slot = (cpus.max(1) as u64) * size_of::<Reading>() as u64;
    let slots = (FIRST_BYTES / per_slot).max(1);
    slots.ilog2().clamp(FIRST_SHIFTS.0, FIRST_SHIFTS.1)
}

/// The chunk holding `slot` when the first holds `1 << shift`, and the
/// slot's offset there (`chunk_of` in `count.bpf.c`).
fn chunk_of(slot: u32, shift: u32) -> (usize, u32) {
    let q = (slot >> shift) + 1;
    let k = q.ilog2();
    (k as usize, slot - (((1 << k) - 1) << shift))
}

/// The first slot of chunk `k` when the first holds `1 << shift`.
fn first_slot(k: usize, shift: u32) -> u64 {
    ((1u64 << k) - 1) << shift
}

/// A chunk, mapped; the outer map and the mapping keep it. cgperf only
/// reads it, except to clear a slot no run of the program charges
/// ([`Cells::clear`]).
#[derive(Debug)]
struct Chunk {
    cells: MmapRaw,
    /// Readings it holds: its slots × CPUs.
    len: usize,
}

/// The chunks of every position, and the outer map the program finds them
/// in.
#[derive(Debug)]
pub(super) struct Cells {
    outer: MapData,
    cpus: u32,
    capacity: u32,
    /// The first chunk's slots, as a shift.
    shift: u32,
    /// Per position, chunks 0, 1, ... (positions up to the highest used).
    chunks: Vec<Vec<Chunk>>,
    /// Chunks every position in use has.
    wanted: usize,
}

impl Cells {
    /// No chunk yet, for `capacity` slots on `cpus` possible CPUs.
    pub fn new(outer: MapData, cpus: u32, capacity: u32) -> Self {
        Self {
            outer,
            cpus,
            capacity,
            shift: first_chunk(cpus),
            chunks: Vec::new(),
            wanted: 0,
        }
    }

    /// Makes room for `slot` at each of `positions`, before the program
    /// may charge it.
    pub fn room(&mut self, slot: u32, positions: &[usize]) -> Result<(), String> {
        if slot >= self.capacity {
            return Err(format!("slot {slot} is past the capacity"));
        }
        let need = self.wanted.max(chunk_of(slot, self.shift).0 + 1);
        self.spread(positions, need)?;
        if need > self.wanted {
            self.wanted = need;
            tracing::debug!(
                slots = first_slot(need, self.shift).min(self.capacity as u64),
                bytes = self.bytes(),
                "grew the BPF totals"
            );
        }
        Ok(())
    }

    /// Gives each position of `positions` every chunk the positions in use
    /// have, before the program may charge there.
    pub fn cover(&mut self, positions: &[usize]) -> Result<(), String> {
        self.spread(positions, self.wanted)
    }

    /// Adds the chunks up to `need` that `positions` lack, handed to the
    /// program all at once.
    fn spread(&mut self, positions: &[usize], need: usize) -> Result<(), String> {
        let mut made = Vec::new();
        for &e in positions.iter().filter(|&&e| e < MAX_EVENTS) {
            let have = self.chunks.get(e).map_or(0, Vec::len);
            for k in have..need {
                let (array, chunk) = self.make(k)?;
                made.push((e, k, array, chunk));
            }
        }
        let keys: Vec<u32> = made.iter().map(|m| (m.0 * CHUNKS + m.1) as u32).collect();
        let fds = made
            .iter()
            .map(|m| IterableMap::map(&m.2).fd().as_fd().as_raw_fd());
        let fds: Vec<u32> = fds.filter_map(|fd| u32::try_from(fd).ok()).collect();
        map_update_all(self.outer.fd().as_fd(), &keys, &fds)
            .map_err(|errno| format!("handing chunks of totals to the program: {errno}"))?;
        // The outer map and the mappings keep the chunks: their
        // descriptors close here.
        for (e, _, _, chunk) in made {
            if self.chunks.len() <= e {
                self.chunks.resize_with(e + 1, Vec::new);
            }
            self.chunks[e].push(chunk);
        }
        Ok(())
    }

    /// Creates chunk `k` of a position and maps it.
    fn make(&self, k: usize) -> Result<(Array<MapData, Reading>, Chunk), String> {
        let first = first_slot(k, self.shift);
        let left = (self.capacity as u64).saturating_sub(first).max(1);
        let slots = (1u64 << k << self.shift).min(left);
        let len = slots * self.cpus as u64;
        let entries = u32::try_from(len).map_err(|_| format!("{len} readings in one chunk"))?;
        let too_big = |e: &(dyn std::error::Error + 'static)| failed("a chunk of totals", e).0;
        let array =
            Array::<MapData, Reading>::create(entries, CHUNK_FLAGS).map_err(|e| too_big(&e))?;
        let fd = IterableMap::map(&array).fd().as_fd().as_raw_fd();
        let cells = MmapOptions::new()
            .len(len as usize * size_of::<Reading>())
            .map_raw(fd)
            .map_err(|e| too_big(&e))?;
        let chunk = Chunk {
            cells,
            len: len as usize,
        };
        Ok((array, chunk))
    }

    /// Clears what `slot` was charged on every CPU at every position: a
    /// slot taken again for another cgroup starts from nothing, so that a
    /// CPU the new cgroup never runs on needs no baseline. Only for a slot
    /// no run of the program may charge (not monitored, and flushed since
    /// it was).
    pub fn clear(&self, slot: u32) {
        let (k, offset) = chunk_of(slot, self.shift);
        let cpus = self.cpus as usize;
        for chunk in self.chunks.iter().filter_map(|c| c.get(k)) {
            let from = offset as usize * cpus;
            if from + cpus > chunk.len {
                continue;
            }
            let cell = chunk.cells.as_mut_ptr().cast::<u64>();
            // SAFETY: the slot's readings (`cpus` of three u64s from
            // `from`) are within the mapping (checked above), which lives
            // as long as `self`; nothing else writes them now (see above).
            unsafe { std::ptr::write_bytes(cell.add(from * 3), 0, cpus * 3) };
        }
    }

    /// What `slot` was charged on `cpu` for the counter at `position` so
    /// far (nothing where no chunk is).
    pub fn reading(&self, cpu: u32, slot: u32, position: usize) -> Reading {
        let (k, offset) = chunk_of(slot, self.shift);
        let Some(chunk) = self.chunks.get(position).and_then(|c| c.get(k)) else {
            return Reading::default();
        };
        let at = offset as usize * self.cpus as usize + cpu as usize;
        if cpu >= self.cpus || at >= chunk.len {
            return Reading::default();
        }
        let cell = chunk.cells.as_ptr().cast::<u64>();
        // SAFETY: `at` is within the mapping (checked above), which holds
        // `len` readings of three u64s, page-aligned, and lives as long as
        // `self`; the program writes these words concurrently, so each is
        // read once, volatile: a word is never torn, and a reading whose
        // words come from two runs is only split differently between
        // intervals.
        unsafe {
            let at = cell.add(at * 3);
            Reading {
                value: at.read_volatile(),
                enabled: at.add(1).read_volatile(),
                running: at.add(2).read_volatile(),
            }
        }
    }

    /// The kernel memory the chunks take (each rounded up to pages).
    pub fn bytes(&self) -> u64 {
        let page = crate::perf::page_size().unwrap_or(4096) as u64;
        let chunks = self.chunks.iter().flatten();
        chunks
            .map(|c| (c.len * size_of::<Reading>()) as u64)
            .map(|b| b.div_ceil(page) * page)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_double_and_tile_the_slots() {
        for shift in FIRST_SHIFTS.0..=FIRST_SHIFTS.1 {
            let mut next = 0u64;
            for k in 0..(32 - shift as usize) {
                assert_eq!(first_slot(k, shift), next);
                let len = 1u64 << k << shift;
                for slot in [next, next + len / 2, next + len - 1] {
                    let slot = slot.min(u32::MAX as u64);
                    assert_eq!(chunk_of(slot as u32, shift), (k, (slot - next) as u32));
                }
                next += len;
            }
            assert!(chunk_of(u32::MAX, shift).0 < CHUNKS);
        }
    }

    #[test]
    fn a_first_chunk_takes_about_64_kib_per_position() {
        assert_eq!(first_chunk(2), 10, "1,024 slots × 2 CPUs × 24 bytes");
        assert_eq!(first_chunk(8), 8);
        assert_eq!(first_chunk(128), 6, "at least 64 slots");
        assert_eq!(first_chunk(1), 11);
    }

    /// `chunk_of` of `count.bpf.c`, step for step.
    fn chunk_of_in_c(slot: u32, shift: u32) -> (usize, u32) {
        let (mut q, mut k) = ((slot >> shift).wrapping_add(1), 0u32);
        for step in [16, 8, 4, 2] {
            if q >> step != 0 {
                q >>= step;
                k += step;
            }
        }
        if q >> 1 != 0 {
            k += 1;
        }
        (k as usize, slot.wrapping_sub(((1u32 << k) - 1) << shift))
    }

    #[test]
    fn the_chunks_per_position_are_those_of_count_bpf_c() {
        assert_eq!(super::super::abi::tests::defined("CHUNKS"), CHUNKS as u64);
    }

    #[test]
    fn a_slot_is_found_in_the_chunk_and_at_the_offset_the_program_charges() {
        for shift in FIRST_SHIFTS.0..=FIRST_SHIFTS.1 {
            let mut slots = vec![0, 1, u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1];
            for k in 0..CHUNKS {
                let first = first_slot(k, shift);
                for s in [first.wrapping_sub(1), first, first + 1] {
                    if let Ok(s) = u32::try_from(s) {
                        slots.push(s);
                    }
                }
            }
            slots.extend((0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761)));
            for slot in slots {
                assert_eq!(
                    chunk_of(slot, shift),
                    chunk_of_in_c(slot, shift),
                    "slot {slot}, shift {shift}"
                );
            }
        }
    }

    #[test]
    fn the_chunks_of_a_position_hold_every_slot() {
        for shift in FIRST_SHIFTS.0..=FIRST_SHIFTS.1 {
            assert!(first_slot(CHUNKS, shift) > u32::MAX as u64, "shift {shift}");
            let (k, offset) = chunk_of(u32::MAX, shift);
            assert!(k < CHUNKS);
            assert!((offset as u64) < 1u64 << k << shift, "within chunk {k}");
        }
        assert_eq!(chunk_of(0, 6), (0, 0));
        assert_eq!(chunk_of(63, 6), (0, 63));
        assert_eq!(
            chunk_of(64, 6),
            (1, 0),
            "the second chunk starts past the first"
        );
        assert_eq!(chunk_of(191, 6), (1, 127));
        assert_eq!(chunk_of(192, 6), (2, 0));
    }

    #[test]
    fn a_first_chunk_is_the_most_slots_that_take_64_kib_within_its_bounds() {
        for cpus in (1..=1024).chain([4095, 4096, 8192, 1 << 20]) {
            let shift = first_chunk(cpus);
            assert!((FIRST_SHIFTS.0..=FIRST_SHIFTS.1).contains(&shift));
            let bytes = (1u64 << shift) * cpus as u64 * size_of::<Reading>() as u64;
            if shift > FIRST_SHIFTS.0 {
                assert!(bytes <= FIRST_BYTES, "{cpus} CPUs: {bytes} bytes");
            }
            if shift < FIRST_SHIFTS.1 {
                assert!(2 * bytes > FIRST_BYTES, "{cpus} CPUs: twice as many fit");
            }
        }
    }

    #[test]
    fn a_first_chunk_for_no_cpu_or_the_most_cpus_does_not_overflow() {
        assert_eq!(first_chunk(0), first_chunk(1), "as if one CPU");
        assert_eq!(first_chunk(u32::MAX), FIRST_SHIFTS.0);
        assert_eq!(first_chunk(3), 9, "910 slots fit: 512 taken");
    }
}
