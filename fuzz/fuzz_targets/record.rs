//! `cgperf::perf::parse_record` on arbitrary bytes with an arbitrary
//! `sample_type`, and `cgperf::perf::walk_records` (the ring-buffer walk of
//! `Ring::drain`) on arbitrary ring contents and positions, whatever a broken
//! kernel or a corrupt perf.data file holds.
//!
//! Asserts, besides "never panics":
//! - a record shorter than its header's size, or whose size is below 8, is
//!   `Truncated`; a sample whose `sample_type` has `PERF_SAMPLE_READ` (the one
//!   bit laid out before RAW that is not decoded) is `Unsupported(READ)`;
//! - a decoded sample has exactly the fields its `sample_type` names, and its
//!   raw data lies inside the record;
//! - the walk refuses pending data in a ring that is not a power of two
//!   long or holds less than is pending; every record it hands out is whole (as long as its header's size)
//!   and equal, byte for byte, to the ring's bytes at its position, even when
//!   split by the end of the ring; a walk that reports no corruption consumed
//!   exactly `head - tail` bytes; the reassembly buffer never grows.

#![no_main]

use arbitrary::Arbitrary;
use cgperf::perf::{
    PERF_RECORD_LOST, PERF_RECORD_SAMPLE, Record, RecordError, Sample, parse_record, record_len,
    walk_records,
};
use libfuzzer_sys::fuzz_target;

const IDENTIFIER: u64 = 1 << 16;
const IP: u64 = 1 << 0;
const TID: u64 = 1 << 1;
const CPU: u64 = 1 << 7;
const READ: u64 = 1 << 4;
const CALLCHAIN: u64 = 1 << 5;
const RAW: u64 = 1 << 10;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    sample_type: u64,
    record: &'a [u8],
    ring: &'a [u8],
    /// Keep the ring's length as is; otherwise cut it to a power of two, the
    /// only lengths the kernel makes (and the only ones walked).
    any_ring_len: bool,
    tail: u64,
    /// `head - tail`, small so that most walks stay within the ring.
    advance: u16,
    /// When set, an arbitrary head instead (behind the tail, far ahead).
    head: Option<u64>,
}

fuzz_target!(|input: Input<'_>| {
    check_record(input.sample_type, input.record);
    let head = input
        .head
        .unwrap_or(input.tail.wrapping_add(u64::from(input.advance)));
    let ring = if input.any_ring_len || input.ring.is_empty() {
        input.ring
    } else {
        &input.ring[..1 << input.ring.len().ilog2()]
    };
    check_walk(input.sample_type, ring, input.tail, head);
});

fn check_record(sample_type: u64, record: &[u8]) {
    let parsed = parse_record(sample_type, record);
    let Some(len) = record_len(record).filter(|&len| len <= record.len()) else {
        assert_eq!(parsed, Err(RecordError::Truncated));
        return;
    };
    let type_ = u32::from_ne_bytes(record[..4].try_into().unwrap());
    match parsed {
        Ok(Record::Sample(sample)) => {
            assert_eq!(type_, PERF_RECORD_SAMPLE);
            check_sample(sample_type, &sample, &record[..len]);
        }
        Ok(Record::Lost { .. }) => {
            assert_eq!(type_, PERF_RECORD_LOST);
            assert!(len >= 24);
        }
        Ok(Record::Other { type_: other }) => {
            assert_eq!(other, type_);
            assert!(type_ != PERF_RECORD_SAMPLE && type_ != PERF_RECORD_LOST);
        }
        Err(RecordError::Unsupported(bit)) => {
            assert_eq!(type_, PERF_RECORD_SAMPLE);
            assert_eq!(bit, READ);
            assert!(sample_type & READ != 0);
        }
        Err(RecordError::Truncated) => {
            assert!(type_ == PERF_RECORD_SAMPLE || (type_ == PERF_RECORD_LOST && len < 24));
        }
    }
}

fn check_sample(sample_type: u64, sample: &Sample<'_>, record: &[u8]) {
    assert_eq!(sample_type & READ, 0);
    let has = |bit: u64| sample_type & bit != 0;
    assert_eq!(sample.identifier.is_some(), has(IDENTIFIER));
    assert_eq!(sample.ip.is_some(), has(IP));
    assert_eq!(sample.pid.is_some(), has(TID));
    assert_eq!(sample.tid.is_some(), has(TID));
    assert_eq!(sample.cpu.is_some(), has(CPU));
    assert_eq!(sample.callchain_len.is_some(), has(CALLCHAIN));
    assert_eq!(sample.raw.is_some(), has(RAW));
    if let Some(raw) = sample.raw {
        let inside = record.as_ptr_range();
        let raw = raw.as_ptr_range();
        assert!(inside.start <= raw.start && raw.end <= inside.end);
    }
}

fn check_walk(sample_type: u64, ring: &[u8], tail: u64, head: u64) {
    let mut scratch = Vec::with_capacity(ring.len());
    let capacity = scratch.capacity();
    let mut position = tail;
    let stats = walk_records(ring, tail, head, &mut scratch, |record| {
        assert_eq!(record_len(record), Some(record.len()), "a whole record");
        let size = ring.len() as u64;
        for (i, byte) in record.iter().enumerate() {
            let at = (position.wrapping_add(i as u64) % size) as usize;
            assert_eq!(*byte, ring[at], "byte {i} of the record at {position}");
        }
        position = position.wrapping_add(record.len() as u64);
        check_record(sample_type, record);
    });
    assert_eq!(
        scratch.capacity(),
        capacity,
        "the scratch buffer never grows"
    );
    let consumed = position.wrapping_sub(tail);
    let pending = head.wrapping_sub(tail);
    assert!(consumed <= pending);
    if !stats.corrupt {
        assert_eq!(consumed, pending);
    }
    if pending > ring.len() as u64 || (pending > 0 && !ring.len().is_power_of_two()) {
        assert!(stats.corrupt && stats.records == 0);
    }
}
