//! Sampled events: every occurrence of an event (typically a tracepoint) in
//! the target writes one sample, with the tracepoint's raw entry, into a
//! per-CPU ring buffer, so occurrences can be told apart by field values.
//!
//! All sampled events of one CPU share one ring: it belongs to a
//! [`RingOwner`] (a system-wide dummy software event on that CPU) and each
//! [`SampledEvent`] redirects its output there with
//! `PERF_EVENT_IOC_SET_OUTPUT`. One ring per CPU instead of one per event and
//! cgroup keeps memory bounded; samples carry the event's kernel id first
//! (`PERF_SAMPLE_IDENTIFIER`) so the reader knows whose each one is.

use super::attr::sampling_attr;
use super::errno::Errno;
use super::group::{Target, event_id, open_event, set_filter};
use super::ring::Ring;
use crate::events::{EventAttr, PERF_TYPE_SOFTWARE};
use perf_event_open_sys::bindings::{PERF_COUNT_SW_DUMMY, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_RAW};
use perf_event_open_sys::ioctls;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The `sample_type` of every sampled event and of the ring owner: the
/// event's kernel id, then the raw tracepoint entry. Decode the ring's
/// records with it ([`parse_record`](super::parse_record)).
pub const SAMPLE_TYPE: u64 = (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_RAW) as u64;

/// The ring buffer of one CPU, owned by a dummy event that records nothing
/// itself.
///
/// Keep it open as long as the [`SampledEvent`]s that write into it; dropping
/// it unmaps the ring and closes the dummy event.
#[derive(Debug)]
pub struct RingOwner {
    fd: OwnedFd,
    ring: Ring,
    cpu: u32,
}

impl RingOwner {
    /// Opens the dummy event system-wide on `cpu` (needs CAP_PERFMON or
    /// root) and maps its ring of `data_pages` pages (a power of two).
    ///
    /// The dummy stays disabled: it exists only to own the ring, and a
    /// disabled owner still receives what other events redirect to it.
    pub fn open(cpu: u32, data_pages: usize) -> Result<Self, Errno> {
        let dummy = EventAttr {
            type_: PERF_TYPE_SOFTWARE,
            config: u64::from(PERF_COUNT_SW_DUMMY),
            config1: 0,
            config2: 0,
            exclude_user: false,
            exclude_kernel: false,
            exclude_hv: false,
        };
        let fd = open_event(
            &mut sampling_attr(&dummy, SAMPLE_TYPE),
            Target::AllTasks,
            cpu,
            None,
        )?;
        let ring = Ring::map(fd.as_fd(), data_pages)?;
        Ok(Self { fd, ring, cpu })
    }

    /// The CPU whose samples this ring receives.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// The ring, to drain.
    pub fn ring_mut(&mut self) -> &mut Ring {
        &mut self.ring
    }
}

/// An event sampled on every occurrence into the ring of a [`RingOwner`] of
/// the same CPU. Dropping it closes the event.
#[derive(Debug)]
pub struct SampledEvent {
    /// Held only to keep the event open: closing it stops the sampling.
    _event: OwnedFd,
    id: u64,
}

impl SampledEvent {
    /// Opens `attr` sampling `target` on `cpu` into the ring of `output`
    /// (which must be on the same CPU: the kernel refuses others with
    /// `EINVAL`).
    ///
    /// `filter`, a tracepoint filter expression such as `which == 1`, is set
    /// before the event is enabled, so no unfiltered sample is ever written;
    /// the kernel rejects a malformed one, or one naming a field the
    /// tracepoint does not have, with `EINVAL`.
    pub fn open(
        attr: &EventAttr,
        filter: Option<&CStr>,
        target: Target<'_>,
        cpu: u32,
        output: &RingOwner,
    ) -> Result<Self, Errno> {
        let fd = open_event(&mut sampling_attr(attr, SAMPLE_TYPE), target, cpu, None)?;
        if let Some(filter) = filter {
            set_filter(&fd, filter)?;
        }
        // SAFETY: both descriptors are perf event fds owned by us; the
        // ioctl takes the output fd by value.
        if unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), output.fd.as_raw_fd()) } < 0 {
            return Err(Errno::last());
        }
        let id = event_id(&fd)?;
        // SAFETY: `fd` is a perf event fd owned by us; 0 means this event only.
        if unsafe { ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
            return Err(Errno::last());
        }
        Ok(Self { _event: fd, id })
    }

    /// The kernel id of the event: the `identifier` of its samples and the
    /// `id` of its lost records.
    pub fn id(&self) -> u64 {
        self.id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page_size() -> usize {
        // SAFETY: sysconf only reads a system constant.
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap()
    }

    #[test]
    fn a_ring_owner_maps_an_empty_ring() {
        let mut owner = RingOwner::open(0, 2)
            .expect("a system-wide dummy event opens (needs root or CAP_PERFMON)");
        assert_eq!(owner.cpu(), 0);
        assert_eq!(owner.ring_mut().data_size(), 2 * page_size());
        let stats = owner
            .ring_mut()
            .drain(|_| panic!("the dummy records nothing"));
        assert_eq!((stats.records, stats.corrupt), (0, false));
    }

    #[test]
    fn ring_pages_must_be_a_power_of_two() {
        for pages in [0, 3, 6] {
            assert_eq!(
                RingOwner::open(0, pages).map(drop),
                Err(Errno(libc::EINVAL)),
                "{pages} pages"
            );
        }
    }
}
