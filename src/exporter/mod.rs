//! Exporters present the latest [`crate::snapshot::Snapshot`]; they never
//! touch perf or cgroupfs.

pub mod http;
pub mod prometheus;
