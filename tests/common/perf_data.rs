//! A minimal reader of the `perf.data` files `perf record -o FILE` writes,
//! enough to run cgperf's sample decoder on the samples `perf script`
//! prints: the file header, the event attributes (for `sample_type` and the
//! kernel ids) and the `PERF_RECORD_SAMPLE` records of the data section.
//!
//! Layout (tools/perf/util/header.h): a `perf_file_header` of
//! `magic "PERFILE2"`, `size`, `attr_size` and three `{offset, size}`
//! sections (attrs, data, event_types); the attrs section is a run of
//! `attr_size`-byte entries, each a `perf_event_attr` followed by the
//! `{offset, size}` section of its ids. Everything is in the byte order of
//! the machine that wrote it, which for these tests is this one.

use std::path::Path;

use cgperf::perf::{PERF_RECORD_SAMPLE, Record, Sample, parse_record, record_len};

/// `PERF_SAMPLE_IDENTIFIER`: the sample starts with the event's id, which is
/// how perf tells the events of one file apart.
const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;
/// `perf_event_attr` offsets of the fields the reader needs.
const ATTR_SIZE_OFFSET: usize = 4;
const ATTR_SAMPLE_TYPE_OFFSET: usize = 24;

/// One event of the file.
#[derive(Debug)]
pub struct Attr {
    /// `perf_event_attr.sample_type`.
    pub sample_type: u64,
    /// The kernel ids of the event (one per CPU or task it was opened on).
    pub ids: Vec<u64>,
}

/// A whole `perf.data` file in memory.
pub struct PerfData {
    bytes: Vec<u8>,
    /// The events, in file order.
    pub attrs: Vec<Attr>,
    data: std::ops::Range<usize>,
}

impl PerfData {
    /// Reads and checks the header and attributes of `path`; panics, saying
    /// what is wrong, on anything else than a perf.data file of this machine.
    pub fn read(path: &Path) -> Self {
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert_eq!(
            bytes.get(..8),
            Some(&b"PERFILE2"[..]),
            "{} is not a perf.data file written on this machine (magic PERFILE2)",
            path.display()
        );
        let attr_size = usize_at(&bytes, 16);
        let attrs_section = section_at(&bytes, 24);
        let data = section_at(&bytes, 40);
        assert!(
            data.end <= bytes.len(),
            "the data section of {} ends past the file (was perf record interrupted?)",
            path.display()
        );
        let attrs = bytes[attrs_section]
            .chunks(attr_size)
            .map(|entry| read_attr(&bytes, entry, attr_size))
            .collect();
        Self { bytes, attrs, data }
    }

    /// The kernel's sample records of the data section in file order (perf
    /// writes each CPU's ring in turn, so this is not time order), decoded
    /// by cgperf with the `sample_type` of the event that wrote each.
    pub fn samples(&self) -> Vec<Sample<'_>> {
        let mut samples = Vec::new();
        let mut rest = &self.bytes[self.data.clone()];
        while !rest.is_empty() {
            let len = record_len(rest).expect("a perf record header with a size of 8 or more");
            let (record, next) = rest.split_at(len);
            rest = next;
            // Everything else is skipped: the kernel's other records (mmap,
            // comm, exit, ...) and perf's own (types 64 and up).
            if u32::from_ne_bytes(record[..4].try_into().unwrap()) != PERF_RECORD_SAMPLE {
                continue;
            }
            match parse_record(self.sample_type_of(record), record) {
                Ok(Record::Sample(sample)) => samples.push(sample),
                other => panic!("a sample record decoded as {other:?}"),
            }
        }
        samples
    }

    /// The `sample_type` of the event that wrote `record`: the only event's,
    /// or found by the leading `PERF_SAMPLE_IDENTIFIER`.
    fn sample_type_of(&self, record: &[u8]) -> u64 {
        if let [attr] = self.attrs.as_slice() {
            return attr.sample_type;
        }
        assert!(
            self.attrs
                .iter()
                .all(|a| a.sample_type & PERF_SAMPLE_IDENTIFIER != 0),
            "several events without PERF_SAMPLE_IDENTIFIER: samples cannot be attributed"
        );
        let id = u64_at(record, 8);
        self.attrs
            .iter()
            .find(|a| a.ids.contains(&id))
            .unwrap_or_else(|| panic!("a sample of unknown event id {id}"))
            .sample_type
    }
}

/// One entry of the attrs section: the attr, then the section of its ids.
fn read_attr(file: &[u8], entry: &[u8], attr_size: usize) -> Attr {
    let size = u32::from_ne_bytes(
        entry[ATTR_SIZE_OFFSET..ATTR_SIZE_OFFSET + 4]
            .try_into()
            .unwrap(),
    ) as usize;
    assert_eq!(
        size + 16,
        attr_size,
        "an attrs entry is a perf_event_attr of attr.size bytes and an ids section"
    );
    let ids = file[section_at(entry, size)]
        .chunks_exact(8)
        .map(|id| u64::from_ne_bytes(id.try_into().unwrap()))
        .collect();
    Attr {
        sample_type: u64_at(entry, ATTR_SAMPLE_TYPE_OFFSET),
        ids,
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn usize_at(bytes: &[u8], at: usize) -> usize {
    usize::try_from(u64_at(bytes, at)).unwrap()
}

/// A `perf_file_section` (`u64 offset, u64 size`) at `at`, as a byte range.
fn section_at(bytes: &[u8], at: usize) -> std::ops::Range<usize> {
    let offset = usize_at(bytes, at);
    offset..offset + usize_at(bytes, at + 8)
}
