//! The program's `totals`: what each slot was charged, per counter
//! position and CPU, in chunks that cgperf adds as cgroups are counted and
//! counters placed, so that the kernel memory follows what is counted
//! rather than `max_cgroups` × every position a counter might take.
//!
//! Chunk `k` of a position holds the slots `(2^k - 1) × FIRST` up to twice
//! as many (capped at the capacity): a chunk is added when a slot there is
//! first taken, for every position in use, and a position placed for the
//! first time gets every chunk the others have, before the program may
//! charge there. A chunk, once added, stays where it is for the program's
//! life: growing moves nothing, so nothing is lost or counted twice, and
//! no run of the program can hold a chunk that goes away.

use super::kernel::{MAX_EVENTS, Reading};
use super::sys::{failed, map_update};
use aya::maps::{Array, IterableMap, MapData};
use memmap2::{MmapOptions, MmapRaw};
use std::os::fd::{AsFd, AsRawFd};

/// Slots in the first chunk, as a shift (`CHUNK0_SHIFT` in `count.bpf.c`).
const CHUNK0_SHIFT: u32 = 6;
/// Chunks per position at most (`CHUNKS` in `count.bpf.c`): enough for
/// 2^32 slots.
const CHUNKS: usize = 32;
/// `BPF_F_MMAPABLE | BPF_F_INNER_MAP`, as the program's `struct chunk`
/// has them: a chunk's size varies, the rest must be as declared.
const CHUNK_FLAGS: u32 = (1 << 10) | (1 << 12);

/// The chunk holding `slot`, and the slot's offset there.
fn chunk_of(slot: u32) -> (usize, u32) {
    let q = (slot >> CHUNK0_SHIFT) + 1;
    let k = q.ilog2();
    (k as usize, slot - (((1 << k) - 1) << CHUNK0_SHIFT))
}

/// The first slot of chunk `k`.
fn first_slot(k: usize) -> u64 {
    ((1u64 << k) - 1) << CHUNK0_SHIFT
}

/// A chunk, mapped read-only; the outer map and the mapping keep it.
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
    /// Per position, chunks 0, 1, ...
    chunks: [Vec<Chunk>; MAX_EVENTS],
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
            chunks: Default::default(),
            wanted: 0,
        }
    }

    /// Makes room for `slot` at each position of `positions` (a bit
    /// each), before the program may charge it.
    pub fn room(&mut self, slot: u32, positions: u64) -> Result<(), String> {
        if slot >= self.capacity {
            return Err(format!("slot {slot} is past the capacity"));
        }
        let need = self.wanted.max(chunk_of(slot).0 + 1);
        self.spread(positions, need)?;
        if need > self.wanted {
            self.wanted = need;
            tracing::debug!(
                slots = first_slot(need).min(self.capacity as u64),
                bytes = self.bytes(),
                "grew the BPF totals"
            );
        }
        Ok(())
    }

    /// Gives each position of `positions` every chunk the positions in use
    /// have, before the program may charge there.
    pub fn cover(&mut self, positions: u64) -> Result<(), String> {
        self.spread(positions, self.wanted)
    }

    /// Adds the chunks up to `need` that `positions` lack.
    fn spread(&mut self, positions: u64, need: usize) -> Result<(), String> {
        for e in (0..MAX_EVENTS).filter(|e| positions & 1 << e != 0) {
            while self.chunks[e].len() < need {
                let k = self.chunks[e].len();
                let chunk = self.add(e, k)?;
                self.chunks[e].push(chunk);
            }
        }
        Ok(())
    }

    /// Creates chunk `k` of position `e`, maps it, and hands it to the
    /// program.
    fn add(&self, e: usize, k: usize) -> Result<Chunk, String> {
        let first = first_slot(k);
        let left = (self.capacity as u64).saturating_sub(first).max(1);
        let slots = (1u64 << k << CHUNK0_SHIFT).min(left);
        let len = slots * self.cpus as u64;
        let entries = u32::try_from(len).map_err(|_| format!("{len} readings in one chunk"))?;
        let too_big = |e: &(dyn std::error::Error + 'static)| failed("a chunk of totals", e).0;
        let array =
            Array::<MapData, Reading>::create(entries, CHUNK_FLAGS).map_err(|e| too_big(&e))?;
        let fd = IterableMap::map(&array).fd().as_fd();
        let cells = MmapOptions::new()
            .len(len as usize * size_of::<Reading>())
            .map_raw_read_only(fd.as_raw_fd())
            .map_err(|e| too_big(&e))?;
        let at = (e * CHUNKS + k) as u32;
        let inner = u32::try_from(fd.as_raw_fd()).map_err(|_| "a negative descriptor")?;
        map_update(self.outer.fd().as_fd(), at, inner)
            .map_err(|errno| format!("handing a chunk of totals to the program: {errno}"))?;
        Ok(Chunk {
            cells,
            len: len as usize,
        })
    }

    /// What `slot` was charged on `cpu` for the counter at `position` so
    /// far (nothing where no chunk is).
    pub fn reading(&self, cpu: u32, slot: u32, position: usize) -> Reading {
        let (k, offset) = chunk_of(slot);
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
        let mut next = 0u64;
        for k in 0..20 {
            assert_eq!(first_slot(k), next);
            let len = 1u64 << k << CHUNK0_SHIFT;
            for slot in [next, next + len / 2, next + len - 1] {
                assert_eq!(chunk_of(slot as u32), (k, (slot - next) as u32));
            }
            next += len;
        }
        assert!(chunk_of(u32::MAX).0 < CHUNKS);
    }
}
