//! Energy per cgroup. [`meter`] reads each socket's energy: perf's
//! `power/` PMU, powercap, or the declared model where the machine has no
//! meter.

pub mod meter;
