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
mod record;
mod ring;
mod sampling;

pub use errno::{
    Errno, Held, OpenFailure, PARANOID_SYS_ADMIN_ONLY, open_failure_reason, paranoid,
    paranoid_level, permission_denied, sys_admin_only, sys_admin_only_why,
};
pub use group::{CounterGroup, OpenError, ReadError, Target, open_attach_point};
pub use group_read::{GroupRead, GroupReadError, read_buffer_words};
pub use record::{
    PERF_RECORD_LOST, PERF_RECORD_SAMPLE, Record, RecordError, Sample, parse_record, record_len,
};
pub use ring::{DrainStats, Ring, page_size, walk_records};
pub use sampling::{
    Readiness, RingOwner, SAMPLE_TYPE, SampledCount, SampledEvent, monotonic_ns,
    wait_for_samples_in_flight, wait_readable,
};
