//! A counter group opened on one CPU for one cgroup: RAII file descriptors,
//! a preallocated read buffer and one `read()` per group.

use super::attr::counting_attr;
use super::errno::Errno;
use super::group_read::{GroupRead, GroupReadError, read_buffer_words};
use super::ring::Ring;
use crate::events::EventAttr;
use perf_event_open_sys::bindings::{
    PERF_FLAG_FD_CLOEXEC, PERF_FLAG_PID_CGROUP, PERF_SAMPLE_IDENTIFIER, perf_event_attr,
};
use perf_event_open_sys::{ioctls, perf_event_open};
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `PERF_IOC_FLAG_GROUP`: apply an ioctl to the whole group.
const IOC_FLAG_GROUP: u32 = 1;

/// A group of counting events sharing one leader on one CPU.
///
/// Dropping it closes every descriptor.
#[derive(Debug)]
pub struct CounterGroup {
    leader: OwnedFd,
    members: Vec<OwnedFd>,
    ids: Vec<u64>,
    buf: Vec<u64>,
}

/// Whose tasks a group counts.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// The tasks of the cgroup whose directory this is (cgroup mode).
    Cgroup(BorrowedFd<'a>),
    /// Everything on the CPU (system-wide); needs CAP_PERFMON.
    AllTasks,
    /// One thread, on whichever CPU it runs (the CPU given is ignored), and
    /// the threads and processes it creates after the open (`inherit`):
    /// their counts are added to its own, and a group read sums them all.
    Thread(u32),
    /// One thread only, on whichever CPU it runs: nothing it creates
    /// counts with it.
    ThreadAlone(u32),
}

/// Event `index` of the group could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("opening event #{index} of the group failed: {errno}")]
pub struct OpenError {
    /// Position of the failing event in the group (0 is the leader).
    pub index: usize,
    /// What the kernel said.
    pub errno: Errno,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The `read()` syscall failed.
    #[error("read failed: {0}")]
    Syscall(Errno),
    /// The kernel returned a buffer that is not a valid group read.
    #[error(transparent)]
    Format(#[from] GroupReadError),
}

impl CounterGroup {
    /// Opens `events` as one group counting `target` on `cpu`, and enables it.
    ///
    /// On failure everything opened so far is closed (by ownership) and the
    /// index of the failing event is returned.
    pub fn open(events: &[EventAttr], target: Target<'_>, cpu: u32) -> Result<Self, OpenError> {
        Self::open_filtered(events, &[], target, cpu)
    }

    /// Like [`open`](Self::open), with `filters[i]` (a tracepoint filter
    /// expression such as `which == 1`) set on `events[i]` before the group
    /// is enabled, so no occurrence is counted unfiltered. Missing entries and
    /// `None` mean no filter. A filter the kernel rejects (bad syntax, a field
    /// the tracepoint does not have, an event that is not a tracepoint) fails
    /// with that event's index, usually with `EINVAL`.
    pub fn open_filtered(
        events: &[EventAttr],
        filters: &[Option<&CStr>],
        target: Target<'_>,
        cpu: u32,
    ) -> Result<Self, OpenError> {
        let group = Self::open_paused(events, filters, target, cpu)?;
        group
            .enable()
            .map_err(|errno| OpenError { index: 0, errno })?;
        Ok(group)
    }

    /// Like [`open_filtered`](Self::open_filtered), but counting nothing
    /// until [`enable`](Self::enable): a group that replaces another opens
    /// first and starts right after the last read of the one it replaces,
    /// so that what happens between is neither lost to the open's length
    /// nor counted twice.
    pub fn open_paused(
        events: &[EventAttr],
        filters: &[Option<&CStr>],
        target: Target<'_>,
        cpu: u32,
    ) -> Result<Self, OpenError> {
        Self::open_paused_as(events, filters, (target, cpu), |_, attr| attr)
    }

    /// Like [`open_filtered`](Self::open_filtered), and each member from
    /// `recorded` on also writes a record of its kernel id
    /// (`PERF_SAMPLE_IDENTIFIER`) at each occurrence into a ring of one
    /// data page on the leader, returned: the order of occurrences, which
    /// counts do not keep. Once the ring is full, later records are lost;
    /// the first stay. `target` must be one thread, not inherited (the
    /// kernel maps no ring for an inherited task event).
    pub fn open_recording(
        events: &[EventAttr],
        filters: &[Option<&CStr>],
        (target, cpu): (Target<'_>, u32),
        recorded: usize,
    ) -> Result<(Self, Ring), OpenError> {
        let group = Self::open_paused_as(events, filters, (target, cpu), |i, mut attr| {
            if i >= recorded {
                attr.__bindgen_anon_1.sample_period = 1;
                attr.sample_type = u64::from(PERF_SAMPLE_IDENTIFIER);
            }
            attr
        })?;
        let ring =
            Ring::map(group.leader.as_fd(), 1).map_err(|errno| OpenError { index: 0, errno })?;
        for (i, member) in group
            .members
            .iter()
            .enumerate()
            .skip(recorded.saturating_sub(1))
        {
            // SAFETY: both descriptors are perf event fds owned by the
            // group; the ioctl takes the output fd by value.
            if unsafe { ioctls::SET_OUTPUT(member.as_raw_fd(), group.leader.as_raw_fd()) } < 0 {
                return Err(OpenError {
                    index: i + 1,
                    errno: Errno::last(),
                });
            }
        }
        group
            .enable()
            .map_err(|errno| OpenError { index: 0, errno })?;
        Ok((group, ring))
    }

    /// Opens `events` paused, the attr of event `i` made by `attr(i, its
    /// counting attr)`, with `filters` as [`open_filtered`](Self::open_filtered)
    /// says.
    fn open_paused_as(
        events: &[EventAttr],
        filters: &[Option<&CStr>],
        (target, cpu): (Target<'_>, u32),
        attr: impl Fn(usize, perf_event_attr) -> perf_event_attr,
    ) -> Result<Self, OpenError> {
        let (first, rest) = events.split_first().ok_or(OpenError {
            index: 0,
            errno: Errno(libc::EINVAL),
        })?;
        let mut leader_attr = attr(0, counting_attr(first, true));
        let leader = open_event(&mut leader_attr, target, cpu, None)
            .map_err(|errno| OpenError { index: 0, errno })?;
        let mut members = Vec::with_capacity(rest.len());
        for (i, event) in rest.iter().enumerate() {
            let mut member_attr = attr(i + 1, counting_attr(event, false));
            let fd = open_event(&mut member_attr, target, cpu, Some(leader.as_fd())).map_err(
                |errno| OpenError {
                    index: i + 1,
                    errno,
                },
            )?;
            members.push(fd);
        }
        let mut ids = Vec::with_capacity(events.len());
        for (index, fd) in std::iter::once(&leader).chain(&members).enumerate() {
            if let Some(filter) = filters.get(index).copied().flatten() {
                set_filter(fd, filter).map_err(|errno| OpenError { index, errno })?;
            }
            ids.push(event_id(fd).map_err(|errno| OpenError { index, errno })?);
        }
        Ok(Self {
            leader,
            members,
            ids,
            buf: vec![0; read_buffer_words(events.len())],
        })
    }

    /// Starts counting: the whole group, and the copies `inherit` made of
    /// it in threads and processes created meanwhile.
    pub fn enable(&self) -> Result<(), Errno> {
        // SAFETY: `leader` is a valid perf event fd owned by us.
        if unsafe { ioctls::ENABLE(self.leader.as_raw_fd(), IOC_FLAG_GROUP) } < 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// The kernel id of each event, in the order the events were given.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// The descriptor of each event, in the order the events were given:
    /// for handing the counters to a BPF program (a perf event array).
    pub fn fds(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        std::iter::once(&self.leader)
            .chain(&self.members)
            .map(AsFd::as_fd)
    }

    /// Number of file descriptors this group holds.
    pub fn fd_count(&self) -> usize {
        1 + self.members.len()
    }

    /// Reads the whole group with one `read()` into the preallocated buffer.
    /// Returns the read and the kernel id of each event in group order.
    pub fn read(&mut self) -> Result<(GroupRead<'_>, &[u64]), ReadError> {
        let bytes = std::mem::size_of_val(self.buf.as_slice());
        // SAFETY: the buffer is valid for `bytes` bytes and outlives the call.
        let n = unsafe { libc::read(self.leader.as_raw_fd(), self.buf.as_mut_ptr().cast(), bytes) };
        let n = usize::try_from(n).map_err(|_| ReadError::Syscall(Errno::last()))?;
        let words = &self.buf[..n / 8];
        Ok((GroupRead::parse(words)?, &self.ids))
    }

    /// The raw leader fd, for benchmarks that compare against a bare `read()`.
    pub fn leader_fd(&self) -> BorrowedFd<'_> {
        self.leader.as_fd()
    }
}

/// The event of `event` (a tracepoint) for all tasks on `cpu`, opened
/// disabled and never enabled: what a BPF program is attached through. The
/// program runs at the tracepoint's every hit on every CPU; the event itself
/// is never scheduled in, so it counts and writes nothing and costs the hits
/// nothing.
pub fn open_attach_point(event: &EventAttr, cpu: u32) -> Result<OwnedFd, Errno> {
    open_event(&mut counting_attr(event, true), Target::AllTasks, cpu, None)
}

/// One `perf_event_open` call for `target` on `cpu`, in the group of `group`
/// (or as a leader).
pub(crate) fn open_event(
    attr: &mut perf_event_attr,
    target: Target<'_>,
    cpu: u32,
    group: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd, Errno> {
    let group_fd = group.map_or(-1, |fd| fd.as_raw_fd());
    let cpu = i32::try_from(cpu).map_err(|_| Errno(libc::EINVAL))?;
    let (pid, cpu, flags) = match target {
        Target::Cgroup(dir) => (
            dir.as_raw_fd(),
            cpu,
            PERF_FLAG_PID_CGROUP | PERF_FLAG_FD_CLOEXEC,
        ),
        Target::AllTasks => (-1, cpu, PERF_FLAG_FD_CLOEXEC),
        Target::Thread(tid) => {
            attr.set_inherit(1);
            let tid = i32::try_from(tid).map_err(|_| Errno(libc::ESRCH))?;
            (tid, -1, PERF_FLAG_FD_CLOEXEC)
        }
        Target::ThreadAlone(tid) => {
            let tid = i32::try_from(tid).map_err(|_| Errno(libc::ESRCH))?;
            (tid, -1, PERF_FLAG_FD_CLOEXEC)
        }
    };
    // SAFETY: `attr` is a fully initialised perf_event_attr whose `size`
    // matches its type; the other arguments are plain integers.
    let fd = unsafe { perf_event_open(attr, pid, cpu, group_fd, flags as libc::c_ulong) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `PERF_EVENT_IOC_SET_FILTER`: only occurrences of the tracepoint that
/// match `filter` are counted or sampled.
pub(crate) fn set_filter(fd: &OwnedFd, filter: &CStr) -> Result<(), Errno> {
    // SAFETY: `fd` is a perf event fd; the kernel only reads the
    // NUL-terminated string (it copies it), so the cast to `*mut` is sound.
    if unsafe { ioctls::SET_FILTER(fd.as_raw_fd(), filter.as_ptr().cast_mut()) } < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `PERF_EVENT_IOC_ID`: the id the kernel uses for this event in group reads
/// and samples.
pub(crate) fn event_id(fd: &OwnedFd) -> Result<u64, Errno> {
    let mut id = 0u64;
    // SAFETY: `fd` is a perf event fd and `id` is a valid u64 to write to.
    if unsafe { ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
        return Err(Errno::last());
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{PMU_ROOT, parse_event};
    use std::path::Path;
    use std::sync::Mutex;

    /// Serializes the tests that count this process's perf fds.
    static PERF_FDS: Mutex<()> = Mutex::new(());

    fn attr(event: &str) -> EventAttr {
        parse_event(event)
            .map(|e| e.resolve(Path::new(PMU_ROOT), &crate::events::EventTables::none()))
            .expect("parses")
            .expect("resolves")
    }

    fn root_cgroup() -> std::fs::File {
        let root = crate::discovery::CgroupFs::locate().expect("cgroup2 mounted");
        std::fs::File::open(root.root()).expect("root cgroup opens")
    }

    /// perf event descriptors this process holds now.
    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("procfs")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.as_os_str() == "anon_inode:[perf_event]")
            .count()
    }

    #[test]
    fn opens_reads_and_closes_a_software_group() {
        let _serial = PERF_FDS.lock().unwrap_or_else(|p| p.into_inner());
        let dir = root_cgroup();
        let before = open_fds();
        let mut group = CounterGroup::open(
            &[attr("task-clock"), attr("context-switches")],
            Target::Cgroup(dir.as_fd()),
            0,
        )
        .expect("software events open in cgroup mode (needs root or CAP_PERFMON)");
        assert_eq!(group.fd_count(), 2);
        assert_eq!(open_fds(), before + 2);
        let ids = group.ids().to_vec();
        assert_ne!(ids[0], ids[1]);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (read, read_ids) = group.read().expect("group read");
        assert_eq!(read_ids, ids.as_slice());
        assert_eq!(read.len(), 2);
        assert!(read.time_enabled >= read.time_running);
        assert!(read.value_of(ids[0], 0).is_some() && read.value_of(ids[1], 1).is_some());
        drop(group);
        assert_eq!(open_fds(), before);
    }

    #[test]
    fn a_failure_half_way_releases_what_was_opened() {
        let _serial = PERF_FDS.lock().unwrap_or_else(|p| p.into_inner());
        let dir = root_cgroup();
        let before = open_fds();
        // Software event id 0x7fff does not exist: the kernel says ENOENT.
        let err = CounterGroup::open(
            &[
                attr("task-clock"),
                attr("context-switches"),
                attr("software/config=0x7fff/"),
            ],
            Target::Cgroup(dir.as_fd()),
            0,
        )
        .expect_err("the third event cannot be opened");
        assert_eq!(err.index, 2);
        assert_eq!(err.errno, Errno(libc::ENOENT));
        assert_eq!(
            open_fds(),
            before,
            "the leader and first member were closed"
        );
    }

    #[test]
    fn an_empty_group_is_rejected() {
        let dir = root_cgroup();
        assert_eq!(
            CounterGroup::open(&[], Target::Cgroup(dir.as_fd()), 0)
                .map(drop)
                .unwrap_err()
                .index,
            0
        );
    }

    #[test]
    fn a_rejected_filter_names_its_event() {
        let _serial = PERF_FDS.lock().unwrap_or_else(|p| p.into_inner());
        let dir = root_cgroup();
        let before = open_fds();
        // Filters apply to tracepoints only; a software event refuses one.
        let err = CounterGroup::open_filtered(
            &[attr("task-clock"), attr("context-switches")],
            &[None, Some(c"which == 1")],
            Target::Cgroup(dir.as_fd()),
            0,
        )
        .expect_err("a software event takes no filter");
        assert_eq!(
            err,
            OpenError {
                index: 1,
                errno: Errno(libc::EINVAL)
            }
        );
        assert_eq!(open_fds(), before, "the group was closed");
    }
}
