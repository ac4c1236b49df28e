//! Exporters present the latest [`crate::snapshot::Snapshot`]; they never
//! touch perf or cgroupfs. [`families`] describes what they present, once
//! for all of them.

pub mod families;
pub mod http;
pub mod otlp;
pub mod prometheus;
pub mod web;
