//! Exporters present the latest [`crate::snapshot::Snapshot`]; they never
//! touch perf or cgroupfs. [`families`] describes what they present, once
//! for all of them; [`process`] adds the process's own figures, read from
//! `/proc/self` at scrape and push time as client libraries do.

pub mod families;
pub mod http;
pub mod otlp;
pub mod process;
pub mod prometheus;
pub mod web;
