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
use perf_event_open_sys::bindings::{
    PERF_COUNT_SW_DUMMY, PERF_FORMAT_LOST, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_RAW,
    PERF_SAMPLE_TIME,
};
use perf_event_open_sys::ioctls;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The `sample_type` of every sampled event and of the ring owner: the
/// event's kernel id, the time of the hit on `CLOCK_MONOTONIC` (see
/// [`sampling_attr`]), then the raw tracepoint entry. Decode the ring's
/// records with it ([`parse_record`](super::parse_record)).
pub const SAMPLE_TYPE: u64 = (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW) as u64;

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
    /// The kernel wakes whoever polls it (see [`wait_readable`]) each time
    /// another `wakeup_bytes` of records were written (at most the ring's
    /// size; 0 leaves the kernel's default, half the ring).
    ///
    /// The dummy stays disabled: it exists only to own the ring, and a
    /// disabled owner still receives what other events redirect to it.
    pub fn open(cpu: u32, data_pages: usize, wakeup_bytes: u32) -> Result<Self, Errno> {
        let dummy = EventAttr::new(PERF_TYPE_SOFTWARE, u64::from(PERF_COUNT_SW_DUMMY));
        let mut attr = sampling_attr(&dummy, SAMPLE_TYPE);
        // The watermark is the ring's: the kernel takes it from the event
        // that maps the ring, whoever writes into it.
        attr.set_watermark(1);
        attr.__bindgen_anon_2.wakeup_watermark = wakeup_bytes;
        let fd = open_event(&mut attr, Target::AllTasks, cpu, None)?;
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

/// What [`wait_readable`] found for one ring owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Nothing since the last wait.
    Idle,
    /// The kernel crossed the ring's wakeup watermark since the last wait.
    Data,
    /// The event reports hang-up or error: waiting on it would return at
    /// once, forever.
    Broken,
}

/// Waits until the kernel wakes one of `owners` (its ring crossed its
/// wakeup watermark) or `timeout` passes; fills `ready` with what each
/// reported, in the order of `owners`. `EINTR` is a wake-up like a timeout.
///
/// The kernel reports a crossing once: the next wait blocks until the next
/// one, however much is still unread.
pub fn wait_readable(
    owners: &[&RingOwner],
    timeout: Duration,
    ready: &mut Vec<Readiness>,
) -> Result<(), Errno> {
    let mut fds: Vec<libc::pollfd> = owners
        .iter()
        .map(|o| libc::pollfd {
            fd: o.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let nfds = libc::nfds_t::try_from(fds.len()).map_err(|_| Errno(libc::EINVAL))?;
    // SAFETY: `fds` is a valid array of `nfds` pollfd structs that outlives
    // the call; the kernel writes only their `revents`.
    if unsafe { libc::poll(fds.as_mut_ptr(), nfds, millis) } < 0 {
        let errno = Errno::last();
        if errno != Errno(libc::EINTR) {
            return Err(errno);
        }
    }
    ready.clear();
    ready.extend(fds.iter().map(|fd| {
        if fd.revents & libc::POLLIN != 0 {
            Readiness::Data
        } else if fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            Readiness::Broken
        } else {
            Readiness::Idle
        }
    }));
    Ok(())
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds: the clock of sample times
/// and of BPF's `bpf_ktime_get_ns()`.
pub fn monotonic_ns() -> Result<u64, Errno> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(Errno::last());
    }
    let secs = u64::try_from(ts.tv_sec).map_err(|_| Errno(libc::EINVAL))?;
    let nanos = u64::try_from(ts.tv_nsec).map_err(|_| Errno(libc::EINVAL))?;
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL)` (linux/membarrier.h).
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;

/// Returns once every sample the kernel had begun to write on any CPU when
/// called is written (published in its ring's `data_head`) or dropped.
///
/// A hit is counted (the event's count, [`SampledEvent::read_count`]) an
/// instant before its sample is written; both happen in one section with
/// preemption disabled (tracepoint, uprobe and syscall probes all disable
/// it around the perf output), which is a read-side critical section of
/// RCU. `MEMBARRIER_CMD_GLOBAL` waits for an RCU grace period, hence for
/// every such section that was running. It blocks for that grace period
/// (milliseconds); the kernel refuses it with `EINVAL` under `nohz_full`.
pub fn wait_for_samples_in_flight() -> Result<(), Errno> {
    // SAFETY: a raw syscall with integer arguments (cmd, flags, cpu_id).
    if unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// An event sampled on every occurrence into the ring of a [`RingOwner`] of
/// the same CPU. Dropping it closes the event.
///
/// It is a counter too: its count is every occurrence it saw, whether the
/// sample was written or dropped because the ring was full.
#[derive(Debug)]
pub struct SampledEvent {
    /// Closing it stops the sampling.
    fd: OwnedFd,
    id: u64,
    /// Whether a read gives its lost samples too (`PERF_FORMAT_LOST`,
    /// Linux 6.0 on).
    reads_lost: bool,
}

/// One read of a [`SampledEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampledCount {
    /// Occurrences since it opened, written or dropped.
    pub count: u64,
    /// Of them, samples the kernel dropped because the ring was full; `None`
    /// where the kernel cannot say (before 6.0).
    pub lost: Option<u64>,
}

/// Whether the kernel refused `PERF_FORMAT_LOST` once: it is not asked for
/// again.
static NO_LOST_FORMAT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl SampledEvent {
    /// Opens `attr` sampling `target` on `cpu` into the ring of `output`
    /// (which must be on the same CPU: the kernel refuses others with
    /// `EINVAL`), stopped: it counts nothing until [`SampledEvent::enable`],
    /// which the caller may hold back until the moment it must count from.
    ///
    /// `filter`, a tracepoint filter expression such as `which == 1`, is set
    /// before the event can be enabled, so no unfiltered sample is ever written;
    /// the kernel rejects a malformed one, or one naming a field the
    /// tracepoint does not have, with `EINVAL`.
    pub fn open(
        attr: &EventAttr,
        filter: Option<&CStr>,
        target: Target<'_>,
        cpu: u32,
        output: &RingOwner,
    ) -> Result<Self, Errno> {
        let mut sampling = sampling_attr(attr, SAMPLE_TYPE);
        let mut reads_lost = !NO_LOST_FORMAT.load(Ordering::Relaxed);
        if reads_lost {
            sampling.read_format = u64::from(PERF_FORMAT_LOST);
        }
        let fd = match open_event(&mut sampling.clone(), target, cpu, None) {
            // A kernel before 6.0 refuses the read format it does not know.
            Err(Errno(libc::EINVAL)) if reads_lost => {
                sampling.read_format = 0;
                let fd = open_event(&mut sampling, target, cpu, None)?;
                NO_LOST_FORMAT.store(true, Ordering::Relaxed);
                reads_lost = false;
                fd
            }
            opened => opened?,
        };
        if let Some(filter) = filter {
            set_filter(&fd, filter)?;
        }
        // SAFETY: both descriptors are perf event fds owned by us; the
        // ioctl takes the output fd by value.
        if unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), output.fd.as_raw_fd()) } < 0 {
            return Err(Errno::last());
        }
        let id = event_id(&fd)?;
        Ok(Self { fd, id, reads_lost })
    }

    /// Starts the event, opened stopped: from now on it counts and samples
    /// every occurrence.
    pub fn enable(&self) -> Result<(), Errno> {
        // SAFETY: `fd` is a perf event fd owned by us; 0 means this event only.
        if unsafe { ioctls::ENABLE(self.fd.as_raw_fd(), 0) } < 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// The kernel id of the event: the `identifier` of its samples and the
    /// `id` of its lost records.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The event's count: occurrences since it was opened, one `read()`
    /// (the event has no read format flags, so the kernel answers one u64).
    pub fn read_count(&self) -> Result<u64, Errno> {
        self.read().map(|read| read.count)
    }

    /// Its count and, where the kernel keeps it, how many of its samples
    /// were dropped: one `read()` of one or two u64s, as its read format.
    pub fn read(&self) -> Result<SampledCount, Errno> {
        let mut words = [0u64; 2];
        let len = if self.reads_lost { 16 } else { 8 };
        // SAFETY: `fd` is a perf event fd owned by us; the buffer is
        // valid and writable for `len` bytes.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), words.as_mut_ptr().cast(), len) };
        match usize::try_from(n) {
            Ok(got) if got == len => Ok(SampledCount {
                count: words[0],
                lost: self.reads_lost.then_some(words[1]),
            }),
            Ok(_) => Err(Errno(libc::EIO)),
            Err(_) => Err(Errno::last()),
        }
    }

    /// Stops the event: it counts and samples nothing more.
    pub fn disable(&self) -> Result<(), Errno> {
        // SAFETY: `fd` is a perf event fd owned by us; 0 means this event only.
        if unsafe { ioctls::DISABLE(self.fd.as_raw_fd(), 0) } < 0 {
            return Err(Errno::last());
        }
        Ok(())
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
        let mut owner = RingOwner::open(0, 2, 0)
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
                RingOwner::open(0, pages, 0).map(drop),
                Err(Errno(libc::EINVAL)),
                "{pages} pages"
            );
        }
    }
}
