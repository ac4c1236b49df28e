//! A perf mmap ring buffer: one metadata page (`perf_event_mmap_page`)
//! followed by a power-of-two number of data pages that the kernel fills with
//! records and cgperf consumes.
//!
//! The protocol: the kernel publishes `data_head` (free-running byte
//! position, written with release semantics after the records); the reader
//! loads it with acquire semantics, consumes the records from `data_tail` to
//! `data_head`, and stores the new `data_tail` with release semantics so the
//! kernel may reuse that space. Because the mapping is writable the kernel
//! never overwrites unread data: when the ring is full it drops records and
//! later writes a `PERF_RECORD_LOST` saying how many.

use super::errno::Errno;
use super::record::record_len;
use memmap2::{MmapOptions, MmapRaw};
use perf_event_open_sys::bindings::perf_event_mmap_page;
use std::mem::offset_of;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// Size of `perf_event_header`, the least a record can be.
const HEADER_LEN: usize = 8;

/// A mapped perf ring buffer. Unmapped when dropped.
#[derive(Debug)]
pub struct Ring {
    map: MmapRaw,
    data_offset: usize,
    data_size: usize,
    /// Where a record split by the end of the data area is reassembled;
    /// allocated once with the capacity of the whole data area.
    scratch: Vec<u8>,
}

/// What one [`Ring::drain`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Records handed to the callback.
    pub records: u64,
    /// The pending data was not a sequence of whole records (a header of size
    /// less than 8 or larger than what is pending, or more pending than the
    /// ring holds); the rest of it was dropped.
    pub corrupt: bool,
}

impl Ring {
    /// Maps the ring of the perf event `fd`: one metadata page and
    /// `data_pages` data pages (a power of two, as the kernel requires).
    ///
    /// The mapping is made with `map_raw` (shared, read-write) rather than
    /// `map_mut`: the kernel writes into it concurrently, so no `&mut [u8]`
    /// over it may exist; the raw mapping hands out pointers only and every
    /// access below is explicit. It must be writable: that is how the kernel
    /// learns `data_tail` and keeps unread records instead of overwriting them.
    pub fn map(fd: BorrowedFd<'_>, data_pages: usize) -> Result<Self, Errno> {
        if !data_pages.is_power_of_two() {
            return Err(Errno(libc::EINVAL));
        }
        let page = page_size()?;
        let len = data_pages
            .checked_add(1)
            .and_then(|pages| pages.checked_mul(page))
            .ok_or(Errno(libc::EINVAL))?;
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&fd)
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EINVAL)))?;
        let (data_offset, data_size) = data_area(&map, page)?;
        Ok(Self {
            map,
            data_offset,
            data_size,
            scratch: Vec::with_capacity(data_size),
        })
    }

    /// Bytes of record data the ring holds.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Hands every whole record published since the last drain to `f`, in
    /// order, then releases their space to the kernel.
    ///
    /// A record split by the end of the data area is passed reassembled.
    /// Corrupt pending data is dropped (see [`DrainStats::corrupt`]) so a
    /// broken ring can never make this loop or fail forever.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) -> DrainStats {
        let head =
            control(&self.map, offset_of!(perf_event_mmap_page, data_head)).load(Ordering::Acquire);
        let tail_word = control(&self.map, offset_of!(perf_event_mmap_page, data_tail));
        // Only this reader writes data_tail.
        let tail = tail_word.load(Ordering::Relaxed);
        // SAFETY: `data_area` checked that the data area lies inside the
        // mapping, which lives as long as `self`. The kernel only writes the
        // bytes outside [tail, head) until the tail moves past them, and the
        // walk reads only bytes inside it, so every byte read is stable.
        let data = unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.data_offset), self.data_size)
        };
        let stats = walk_records(data, tail, head, &mut self.scratch, f);
        tail_word.store(head, Ordering::Release);
        stats
    }
}

/// Walks the records between the free-running positions `tail` and `head`
/// of the ring data area `data`, handing each whole record to `f`; a record
/// that wraps around the end of `data` is reassembled in `scratch`.
///
/// `data` is a power of two long, as the kernel makes it: only then does a
/// position keep its place in the ring when the `u64` counters wrap. Any
/// other length with data pending is reported as corrupt.
///
/// Pure (no kernel access), so [`Ring::drain`], tests and the fuzzer share it.
/// Every record passed to `f` is exactly as long as its header's size. Stops
/// at the first corrupt header and reports it; the caller then drops the rest.
pub fn walk_records(
    data: &[u8],
    tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]),
) -> DrainStats {
    let mut stats = DrainStats::default();
    let size = data.len() as u64;
    let pending = head.wrapping_sub(tail);
    if pending > size || (pending > 0 && !size.is_power_of_two()) {
        stats.corrupt = true;
        return stats;
    }
    let mask = size.wrapping_sub(1);
    let mut pos = tail;
    while pos != head {
        let left = head.wrapping_sub(pos);
        let start = (pos & mask) as usize;
        let header = contiguous(data, start, HEADER_LEN.min(left as usize), scratch);
        let Some(len) = record_len(header).filter(|&len| len as u64 <= left) else {
            stats.corrupt = true;
            break;
        };
        f(contiguous(data, start, len, scratch));
        stats.records += 1;
        pos = pos.wrapping_add(len as u64);
    }
    stats
}

/// The `len` bytes of the ring starting at `start`: a slice of `data` when
/// they do not cross its end, otherwise both parts copied into `scratch`.
/// `len` is at most `data.len()` (the caller checked it against the pending
/// bytes), so the copy never grows `scratch` past the ring's size.
fn contiguous<'a>(data: &'a [u8], start: usize, len: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    let to_end = data.get(start..).unwrap_or_default();
    if let Some(record) = to_end.get(..len) {
        return record;
    }
    let from_start = data.get(..len - to_end.len()).unwrap_or_default();
    scratch.clear();
    scratch.extend_from_slice(to_end);
    scratch.extend_from_slice(from_start);
    scratch
}

/// The `u64` field of the metadata page at byte `offset`.
fn control(map: &MmapRaw, offset: usize) -> &AtomicU64 {
    debug_assert!(offset + 8 <= std::mem::size_of::<perf_event_mmap_page>());
    // SAFETY: the mapping starts with a whole metadata page (at least
    // `size_of::<perf_event_mmap_page>()` bytes), is page-aligned, and every
    // offset passed here is that of an 8-byte-aligned u64 field; the kernel
    // accesses these fields only with single-copy-atomic loads and stores.
    // The reference lives no longer than the mapping.
    unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(offset).cast()) }
}

/// Where the data area is: the kernel says so in `data_offset`/`data_size`
/// (since Linux 4.1); older kernels leave them zero and put it right after
/// the metadata page. An area that does not fit the mapping, or is not a
/// power of two long, is refused.
fn data_area(map: &MmapRaw, page: usize) -> Result<(usize, usize), Errno> {
    let load = |offset| control(map, offset).load(Ordering::Relaxed);
    let offset = load(offset_of!(perf_event_mmap_page, data_offset));
    let size = load(offset_of!(perf_event_mmap_page, data_size));
    let (offset, size) = if size == 0 {
        (page, map.len() - page)
    } else {
        let fit = |v: u64| usize::try_from(v).map_err(|_| Errno(libc::EINVAL));
        (fit(offset)?, fit(size)?)
    };
    let fits = offset
        .checked_add(size)
        .is_some_and(|end| offset >= page && end <= map.len());
    if !fits || !size.is_power_of_two() {
        return Err(Errno(libc::EINVAL));
    }
    Ok((offset, size))
}

/// The system page size.
pub fn page_size() -> Result<usize, Errno> {
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).map_err(|_| Errno::last())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A record of `len` bytes: header (type 9, size `len`), then bytes all
    /// equal to `fill`.
    fn rec(len: u16, fill: u8) -> Vec<u8> {
        let mut out = 9u32.to_ne_bytes().to_vec();
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&len.to_ne_bytes());
        out.resize(usize::from(len), fill);
        out
    }

    /// Writes `bytes` into the ring `data` at free-running position `pos`.
    fn put(data: &mut [u8], pos: u64, bytes: &[u8]) {
        let size = data.len() as u64;
        for (i, b) in bytes.iter().enumerate() {
            data[(pos.wrapping_add(i as u64) % size) as usize] = *b;
        }
    }

    fn walk(data: &[u8], tail: u64, head: u64) -> (Vec<Vec<u8>>, DrainStats) {
        let mut scratch = Vec::with_capacity(data.len());
        let capacity = scratch.capacity();
        let mut out = Vec::new();
        let stats = walk_records(data, tail, head, &mut scratch, |r| out.push(r.to_vec()));
        assert_eq!(
            scratch.capacity(),
            capacity,
            "the scratch buffer never grows"
        );
        (out, stats)
    }

    #[test]
    fn records_in_order_without_wrap() {
        let mut data = vec![0u8; 64];
        let records = [rec(16, 1), rec(24, 2), rec(8, 3)];
        let mut pos = 0;
        for r in &records {
            put(&mut data, pos, r);
            pos += r.len() as u64;
        }
        let (got, stats) = walk(&data, 0, pos);
        assert_eq!(got, records);
        assert_eq!(
            stats,
            DrainStats {
                records: 3,
                corrupt: false
            }
        );
    }

    #[test]
    fn a_record_split_by_the_end_is_reassembled() {
        let mut data = vec![0u8; 64];
        // Free-running positions near u64::MAX also wrap the counter itself.
        for base in [0u64, 64 * 1000, u64::MAX - 63] {
            let tail = base.wrapping_add(40);
            let first = rec(16, 0xa1); // 40..56
            let split = rec(40, 0xb2); // 56..64 then 0..32
            put(&mut data, tail, &first);
            put(&mut data, tail.wrapping_add(16), &split);
            let head = tail.wrapping_add(56);
            let (got, stats) = walk(&data, tail, head);
            assert_eq!(got, [first, split], "base {base}");
            assert!(!stats.corrupt);
        }
    }

    #[test]
    fn a_header_split_by_the_end_is_reassembled() {
        let mut data = vec![0u8; 32];
        let split = rec(16, 7); // header bytes 28..32 and 0..4
        put(&mut data, 28, &split);
        assert_eq!(walk(&data, 28, 44).0, [split]);
    }

    #[test]
    fn nothing_pending_is_nothing() {
        assert_eq!(walk(&[0; 64], 128, 128), (vec![], DrainStats::default()));
        assert_eq!(walk(&[], 5, 5), (vec![], DrainStats::default()));
    }

    #[test]
    fn corrupt_data_stops_the_walk_after_the_good_records() {
        let mut data = vec![0u8; 64];
        put(&mut data, 0, &rec(16, 1));
        // Size 0 at 16: would never advance.
        let (got, stats) = walk(&data, 0, 32);
        assert_eq!((got.len(), stats.records, stats.corrupt), (1, 1, true));
        // Size larger than what is pending.
        put(&mut data, 16, &rec(48, 2));
        let (got, stats) = walk(&data, 0, 40);
        assert_eq!((got.len(), stats.corrupt), (1, true));
        // A partial header at the end.
        let (got, stats) = walk(&data, 0, 20);
        assert_eq!((got.len(), stats.corrupt), (1, true));
        // More pending than the ring holds, or head behind tail.
        assert!(walk(&data, 0, 65).1.corrupt);
        assert!(walk(&data, 16, 8).1.corrupt);
        assert!(walk(&[], 0, 8).1.corrupt);
    }

    #[test]
    fn a_ring_that_is_not_a_power_of_two_long_is_corrupt() {
        // Positions modulo 48 would jump when the u64 counters wrap.
        let mut data = vec![0u8; 48];
        put(&mut data, 0, &rec(16, 1));
        assert_eq!(
            walk(&data, 0, 16),
            (
                vec![],
                DrainStats {
                    records: 0,
                    corrupt: true
                }
            )
        );
        assert_eq!(walk(&data, 16, 16), (vec![], DrainStats::default()));
    }

    proptest! {
        #[test]
        fn arbitrary_rings_yield_whole_records(
            data in (0u32..9).prop_flat_map(|shift| {
                proptest::collection::vec(any::<u8>(), 1usize << shift)
            }),
            tail: u64,
            advance in 0u64..300,
        ) {
            let head = tail.wrapping_add(advance);
            let mut total = 0u64;
            let mut scratch = Vec::with_capacity(data.len());
            let stats = walk_records(&data, tail, head, &mut scratch, |r| {
                assert_eq!(record_len(r), Some(r.len()));
                total += r.len() as u64;
            });
            prop_assert!(scratch.len() <= data.len());
            if !stats.corrupt {
                prop_assert_eq!(total, advance);
            }
        }
    }
}
