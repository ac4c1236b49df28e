//! The kernel interface: `perf_event_attr` construction, `perf_event_open`
//! in cgroup mode, group reads and their binary layout.
//!
//! This layer holds no policy: it opens what it is asked to open, reads what
//! it is asked to read and reports the kernel's answers (errno values, raw
//! counter words). What to open, how to scale and what to export is decided by
//! the sampler.

mod attr;
mod errno;
mod group;
mod group_read;

pub use errno::{Errno, OpenFailure, open_failure_reason, paranoid_level};
pub use group::{CounterGroup, OpenError, ReadError, Target};
pub use group_read::{GroupRead, GroupReadError, read_buffer_words};
