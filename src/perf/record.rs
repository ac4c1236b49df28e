//! Decoding perf records: the binary format the kernel writes into an mmap
//! ring buffer and `perf record` stores in `perf.data`.
//!
//! A record is an 8-byte `perf_event_header` (type `u32`, misc `u16`, size
//! `u16`, in the byte order of the machine that wrote it) followed by a body
//! whose layout depends on the type and, for samples, on the event's
//! `sample_type`. Every read is bounds-checked: a short or lying record is an
//! error, never a panic.

use perf_event_open_sys::bindings;

/// `PERF_RECORD_LOST`: the kernel dropped records because the ring was full.
pub const PERF_RECORD_LOST: u32 = bindings::PERF_RECORD_LOST;
/// `PERF_RECORD_SAMPLE`: one sample of an event.
pub const PERF_RECORD_SAMPLE: u32 = bindings::PERF_RECORD_SAMPLE;

/// Size of `perf_event_header`.
const HEADER_LEN: usize = 8;

/// One record, borrowed from the buffer it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    /// `PERF_RECORD_SAMPLE`, decoded up to and including `PERF_SAMPLE_RAW`.
    Sample(Sample<'a>),
    /// `PERF_RECORD_LOST`: `lost` records of the event with kernel id `id`
    /// were dropped.
    Lost {
        /// Kernel id of the event whose records were dropped.
        id: u64,
        /// How many records were dropped.
        lost: u64,
    },
    /// Any other record type, left undecoded.
    Other {
        /// The header's `type`.
        type_: u32,
    },
}

/// The fields of a sample; each is `Some` exactly when its `PERF_SAMPLE_*`
/// bit is set in the `sample_type` the record was decoded with.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Sample<'a> {
    /// `PERF_SAMPLE_IDENTIFIER`: the kernel id of the event, first in the body
    /// so a ring shared by several events can be demultiplexed.
    pub identifier: Option<u64>,
    /// `PERF_SAMPLE_IP`.
    pub ip: Option<u64>,
    /// `PERF_SAMPLE_TID`: process id.
    pub pid: Option<u32>,
    /// `PERF_SAMPLE_TID`: thread id.
    pub tid: Option<u32>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ADDR`.
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_STREAM_ID`.
    pub stream_id: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<u32>,
    /// `PERF_SAMPLE_PERIOD`.
    pub period: Option<u64>,
    /// `PERF_SAMPLE_CALLCHAIN`: the number of frames (the frames are skipped).
    pub callchain_len: Option<u64>,
    /// `PERF_SAMPLE_RAW`: the raw data, including the kernel's alignment
    /// padding (for a tracepoint: its entry as described by its `format` file).
    pub raw: Option<&'a [u8]>,
}

/// Why a record could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The record is shorter than its header or its fields say.
    #[error(
        "perf record is truncated: it is shorter than its header or its sample fields say \
         (a corrupt ring buffer or perf.data file)"
    )]
    Truncated,
    /// The `sample_type` has a bit laid out before `PERF_SAMPLE_RAW` that
    /// this decoder does not know, so the position of the later fields is
    /// unknown.
    #[error(
        "sample_type bit {0:#x} is not supported by cgperf's record decoder; open the event \
         without it"
    )]
    Unsupported(u64),
}

/// The `size` field of the record header at the start of `header`: the
/// length of the whole record. `None` if fewer than 8 bytes are given or the
/// size is smaller than the header itself (which would never advance a walk).
pub fn record_len(header: &[u8]) -> Option<usize> {
    let size = usize::from(u16::from_ne_bytes([*header.get(6)?, *header.get(7)?]));
    (size >= HEADER_LEN).then_some(size)
}

/// Decodes one whole record that starts at its header; `sample_type` is the
/// `perf_event_attr.sample_type` of the event(s) that wrote it.
///
/// Bytes after the header's size are ignored, so a buffer holding more than
/// one record decodes its first.
pub fn parse_record(sample_type: u64, record: &[u8]) -> Result<Record<'_>, RecordError> {
    let len = record_len(record).ok_or(RecordError::Truncated)?;
    let record = record.get(..len).ok_or(RecordError::Truncated)?;
    let mut body = Cursor(record);
    let type_ = body.u32()?;
    body.array::<4>()?; // misc and size

    match type_ {
        PERF_RECORD_SAMPLE => parse_sample(sample_type, &mut body).map(Record::Sample),
        PERF_RECORD_LOST => Ok(Record::Lost {
            id: body.u64()?,
            lost: body.u64()?,
        }),
        _ => Ok(Record::Other { type_ }),
    }
}

/// Reads the sample fields in the order the kernel writes them
/// (`perf_output_sample`), stopping after `PERF_SAMPLE_RAW`.
fn parse_sample<'a>(sample_type: u64, body: &mut Cursor<'a>) -> Result<Sample<'a>, RecordError> {
    if let Some(bit) = first_unsupported_bit(sample_type) {
        return Err(RecordError::Unsupported(bit));
    }
    let has = |bit: u32| sample_type & u64::from(bit) != 0;
    let mut sample = Sample::default();
    if has(bindings::PERF_SAMPLE_IDENTIFIER) {
        sample.identifier = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_IP) {
        sample.ip = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_TID) {
        sample.pid = Some(body.u32()?);
        sample.tid = Some(body.u32()?);
    }
    if has(bindings::PERF_SAMPLE_TIME) {
        sample.time = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_ADDR) {
        sample.addr = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_ID) {
        sample.id = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_STREAM_ID) {
        sample.stream_id = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_CPU) {
        sample.cpu = Some(body.u32()?);
        body.u32()?; // reserved
    }
    if has(bindings::PERF_SAMPLE_PERIOD) {
        sample.period = Some(body.u64()?);
    }
    if has(bindings::PERF_SAMPLE_CALLCHAIN) {
        let frames = body.u64()?;
        body.skip_u64s(frames)?;
        sample.callchain_len = Some(frames);
    }
    if has(bindings::PERF_SAMPLE_RAW) {
        let size = body.u32()?;
        sample.raw = Some(body.bytes(usize::try_from(size).map_err(|_| RecordError::Truncated)?)?);
    }
    Ok(sample)
}

/// The lowest `sample_type` bit that precedes `PERF_SAMPLE_RAW` in the
/// layout and is not decoded here. Every bit numbered above RAW is written
/// after it, so those are ignored rather than refused.
fn first_unsupported_bit(sample_type: u64) -> Option<u64> {
    const DECODED: u32 = bindings::PERF_SAMPLE_IDENTIFIER
        | bindings::PERF_SAMPLE_IP
        | bindings::PERF_SAMPLE_TID
        | bindings::PERF_SAMPLE_TIME
        | bindings::PERF_SAMPLE_ADDR
        | bindings::PERF_SAMPLE_ID
        | bindings::PERF_SAMPLE_STREAM_ID
        | bindings::PERF_SAMPLE_CPU
        | bindings::PERF_SAMPLE_PERIOD
        | bindings::PERF_SAMPLE_CALLCHAIN
        | bindings::PERF_SAMPLE_RAW;
    let before_raw = u64::from(bindings::PERF_SAMPLE_RAW) - 1;
    let unknown = sample_type & before_raw & !u64::from(DECODED);
    (unknown != 0).then(|| 1 << unknown.trailing_zeros())
}

/// A bounds-checked reader over a record body, in native byte order.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if n > self.0.len() {
            return Err(RecordError::Truncated);
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let (taken, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(RecordError::Truncated)?;
        self.0 = rest;
        Ok(*taken)
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        self.array().map(u32::from_ne_bytes)
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        self.array().map(u64::from_ne_bytes)
    }

    /// Skips `count` u64 words; a count that cannot fit the body is truncation.
    fn skip_u64s(&mut self, count: u64) -> Result<(), RecordError> {
        let len = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(8))
            .ok_or(RecordError::Truncated)?;
        self.bytes(len).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bindings::{
        PERF_SAMPLE_ADDR, PERF_SAMPLE_BRANCH_STACK, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU,
        PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD,
        PERF_SAMPLE_RAW, PERF_SAMPLE_READ, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME,
    };
    use proptest::prelude::*;

    /// Builds a record: header with the final size, then `body`.
    fn record(type_: u32, body: &[u8]) -> Vec<u8> {
        let size = u16::try_from(HEADER_LEN + body.len()).unwrap();
        let mut out = type_.to_ne_bytes().to_vec();
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&size.to_ne_bytes());
        out.extend_from_slice(body);
        out
    }

    fn words(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    const ALL: u32 = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ADDR
        | PERF_SAMPLE_ID
        | PERF_SAMPLE_STREAM_ID
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD
        | PERF_SAMPLE_CALLCHAIN
        | PERF_SAMPLE_RAW;

    /// A sample with every supported field, raw data of 4 bytes (4 + 4 = 8:
    /// no padding needed).
    fn full_sample() -> Vec<u8> {
        record(
            PERF_RECORD_SAMPLE,
            &words(&[
                &11u64.to_ne_bytes(),                    // identifier
                &0xffff_8000_0000_1234u64.to_ne_bytes(), // ip
                &42u32.to_ne_bytes(),                    // pid
                &43u32.to_ne_bytes(),                    // tid
                &1_000_000u64.to_ne_bytes(),             // time
                &0xdead_beefu64.to_ne_bytes(),           // addr
                &12u64.to_ne_bytes(),                    // id
                &13u64.to_ne_bytes(),                    // stream_id
                &1u32.to_ne_bytes(),                     // cpu
                &0u32.to_ne_bytes(),                     // res
                &7u64.to_ne_bytes(),                     // period
                &2u64.to_ne_bytes(),                     // callchain nr
                &0x100u64.to_ne_bytes(),
                &0x200u64.to_ne_bytes(),
                &4u32.to_ne_bytes(), // raw size
                &[1, 2, 3, 4],
            ]),
        )
    }

    #[test]
    fn decodes_every_field_in_kernel_order() {
        let bytes = full_sample();
        let Record::Sample(sample) = parse_record(u64::from(ALL), &bytes).unwrap() else {
            panic!("a sample");
        };
        assert_eq!(
            sample,
            Sample {
                identifier: Some(11),
                ip: Some(0xffff_8000_0000_1234),
                pid: Some(42),
                tid: Some(43),
                time: Some(1_000_000),
                addr: Some(0xdead_beef),
                id: Some(12),
                stream_id: Some(13),
                cpu: Some(1),
                period: Some(7),
                callchain_len: Some(2),
                raw: Some(&[1, 2, 3, 4]),
            }
        );
    }

    #[test]
    fn fields_not_in_sample_type_are_none() {
        let body = words(&[&5u64.to_ne_bytes(), &9u64.to_ne_bytes()]);
        let sample_type = u64::from(PERF_SAMPLE_TIME | PERF_SAMPLE_PERIOD);
        let bytes = record(PERF_RECORD_SAMPLE, &body);
        let got = parse_record(sample_type, &bytes).unwrap();
        assert_eq!(
            got,
            Record::Sample(Sample {
                time: Some(5),
                period: Some(9),
                ..Sample::default()
            })
        );
    }

    #[test]
    fn raw_keeps_the_kernels_padding_and_ignores_what_follows() {
        // A 20-byte tracepoint entry: the kernel pads u32 + 20 to 24 + 4 = 28
        // → 32 bytes, so the raw size says 28.
        let mut raw = vec![0xab; 20];
        raw.extend_from_slice(&[0; 8]);
        let body = words(&[&3u64.to_ne_bytes(), &28u32.to_ne_bytes(), &raw]);
        let mut bytes = record(PERF_RECORD_SAMPLE, &body);
        assert_eq!(bytes.len() % 8, 0);
        let sample_type = u64::from(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_RAW);
        // Bits laid out after RAW are not decoded and do not stop the decode.
        let with_later_bits = sample_type | u64::from(PERF_SAMPLE_BRANCH_STACK) | (1 << 40);
        // Bytes after the record (the next record in a buffer) are not read.
        bytes.extend_from_slice(&[0xff; 16]);
        for st in [sample_type, with_later_bits] {
            let Record::Sample(sample) = parse_record(st, &bytes).unwrap() else {
                panic!("a sample");
            };
            assert_eq!(sample.identifier, Some(3));
            assert_eq!(sample.raw, Some(raw.as_slice()));
        }
    }

    #[test]
    fn raw_larger_than_the_record_is_truncated() {
        let body = words(&[&100u32.to_ne_bytes(), &[0; 4]]);
        let bytes = record(PERF_RECORD_SAMPLE, &body);
        let got = parse_record(u64::from(PERF_SAMPLE_RAW), &bytes);
        assert_eq!(got, Err(RecordError::Truncated));
    }

    #[test]
    fn a_callchain_longer_than_the_record_is_truncated() {
        for nr in [1, u64::MAX / 8 + 1, u64::MAX] {
            let bytes = record(PERF_RECORD_SAMPLE, &nr.to_ne_bytes());
            let got = parse_record(u64::from(PERF_SAMPLE_CALLCHAIN), &bytes);
            assert_eq!(got, Err(RecordError::Truncated), "nr {nr}");
        }
    }

    #[test]
    fn every_truncation_of_a_sample_is_an_error() {
        let bytes = full_sample();
        for len in 0..bytes.len() {
            // The header still claims the full size: the buffer ends early.
            assert_eq!(
                parse_record(u64::from(ALL), &bytes[..len]),
                Err(RecordError::Truncated),
                "cut at {len}"
            );
            // The header's size itself is short: the fields overrun it.
            if len >= HEADER_LEN {
                let mut short = bytes[..len].to_vec();
                short[6..8].copy_from_slice(&u16::try_from(len).unwrap().to_ne_bytes());
                assert_eq!(
                    parse_record(u64::from(ALL), &short),
                    Err(RecordError::Truncated),
                    "size {len}"
                );
            }
        }
    }

    #[test]
    fn read_before_raw_is_unsupported() {
        let bytes = full_sample();
        let st = u64::from(ALL | PERF_SAMPLE_READ);
        assert_eq!(
            parse_record(st, &bytes),
            Err(RecordError::Unsupported(u64::from(PERF_SAMPLE_READ)))
        );
        assert!(RecordError::Unsupported(16).to_string().contains("0x10"));
    }

    #[test]
    fn lost_records() {
        let body = words(&[&77u64.to_ne_bytes(), &5u64.to_ne_bytes(), &[9; 8]]);
        let bytes = record(PERF_RECORD_LOST, &body);
        assert_eq!(
            parse_record(0, &bytes),
            Ok(Record::Lost { id: 77, lost: 5 })
        );
        for len in 0..HEADER_LEN + 16 {
            let mut short = bytes[..len].to_vec();
            if len >= HEADER_LEN {
                short[6..8].copy_from_slice(&u16::try_from(len).unwrap().to_ne_bytes());
            }
            assert_eq!(
                parse_record(0, &short),
                Err(RecordError::Truncated),
                "{len}"
            );
        }
    }

    #[test]
    fn other_records_are_not_decoded() {
        let bytes = record(bindings::PERF_RECORD_COMM, &[0; 16]);
        assert_eq!(
            parse_record(u64::MAX, &bytes),
            Ok(Record::Other {
                type_: bindings::PERF_RECORD_COMM
            })
        );
    }

    #[test]
    fn record_len_reads_the_header_size() {
        assert_eq!(record_len(&record(PERF_RECORD_LOST, &[0; 16])), Some(24));
        assert_eq!(record_len(&[0; 7]), None);
        // A size smaller than the header would never advance a walk.
        let mut tiny = record(PERF_RECORD_LOST, &[]);
        tiny[6..8].copy_from_slice(&7u16.to_ne_bytes());
        assert_eq!(record_len(&tiny), None);
        assert_eq!(record_len(&record(PERF_RECORD_LOST, &[])), Some(8));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(sample_type: u64, bytes: Vec<u8>) {
            if let Ok(Record::Sample(Sample { raw: Some(raw), .. })) =
                parse_record(sample_type, &bytes)
            {
                prop_assert!(raw.len() <= bytes.len());
            }
            // Bytes shaped like a sample header, to get past the type check.
            let mut shaped = record(PERF_RECORD_SAMPLE, &[]);
            shaped.extend_from_slice(&bytes);
            let size = u16::try_from(shaped.len().min(usize::from(u16::MAX))).unwrap();
            shaped[6..8].copy_from_slice(&size.to_ne_bytes());
            let _ = parse_record(sample_type, &shaped);
        }
    }
}
