//! Exporters present the latest [`crate::snapshot::Snapshot`]; they never
//! touch perf or cgroupfs. [`families`] describes what they present, once
//! for all of them; [`process`] adds the process's own figures, read from
//! `/proc/self` at scrape and push time as client libraries do.

pub mod cadvisor;
pub mod families;
pub mod http;
pub mod otlp;
pub mod process;
pub mod prometheus;
pub mod web;

/// gzip at the fast level, for `/metrics` and OTLP/HTTP bodies alike:
/// exposition text and protobuf with long repeated label sets, which even
/// the fastest level shrinks several times over.
pub(crate) fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::fast(),
    );
    encoder.write_all(bytes)?;
    encoder.finish()
}
