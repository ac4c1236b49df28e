//! The `bpf()` calls aya does not make for cgperf, and the errors of
//! aya's calls with the errno they carry.

use crate::perf::Errno;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The error of a failed step with the errno it carries, if any.
pub(super) fn failed(step: &str, e: &(dyn std::error::Error + 'static)) -> (String, Option<i32>) {
    let mut errno = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut text = format!("{step}: {e}");
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            errno = errno.or(io.raw_os_error());
        }
        if !text.contains(&s.to_string()) {
            text.push_str(&format!(": {s}"));
        }
        source = s.source();
    }
    (text, errno)
}

pub(super) fn failed_errno(e: &(dyn std::error::Error + 'static)) -> (String, Option<i32>) {
    failed("", e)
}

/// `union bpf_attr` for the element commands.
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn map_elem(
    cmd: libc::c_long,
    map: BorrowedFd<'_>,
    key: &u32,
    value: Option<&u32>,
) -> Result<(), Errno> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: std::ptr::from_ref(key) as u64,
        value: value.map_or(0, |v| std::ptr::from_ref(v) as u64),
        flags: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for this command; the
    // kernel reads the key and value it points at, which outlive the call.
    unsafe { bpf(cmd, &mut attr) }.map(drop)
}

/// `bpf(cmd, attr)`: what the kernel returns (a descriptor for the
/// commands that make one), or its errno. The one wrapper of the system
/// call for cgperf's BPF code.
///
/// # Safety
///
/// `attr` must be the `union bpf_attr` prefix `cmd` reads (and may write
/// back), and what its pointers name must be valid for what `cmd` does
/// with it.
pub(super) unsafe fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> Result<i64, Errno> {
    // SAFETY: as the caller promises; the kernel reads and writes within
    // the size given.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            std::mem::size_of::<T>(),
        )
    };
    match r {
        r if r < 0 => Err(Errno::last()),
        r => Ok(r),
    }
}

/// `BPF_MAP_UPDATE_ELEM` of a perf event array: aya's own type for it
/// only takes the perf buffers it opens itself.
pub(super) fn map_update(map: BorrowedFd<'_>, index: u32, fd: u32) -> Result<(), Errno> {
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    map_elem(BPF_MAP_UPDATE_ELEM, map, &index, Some(&fd))
}

/// `BPF_MAP_DELETE_ELEM` of a perf event array.
pub(super) fn map_delete(map: BorrowedFd<'_>, index: u32) -> Result<(), Errno> {
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
    map_elem(BPF_MAP_DELETE_ELEM, map, &index, None)
}

/// `union bpf_attr` for the batch commands.
#[repr(C)]
pub(super) struct BatchAttr {
    pub in_batch: u64,
    pub out_batch: u64,
    pub keys: u64,
    pub values: u64,
    pub count: u32,
    pub map_fd: u32,
    pub elem_flags: u64,
    pub flags: u64,
}

/// Puts `values[i]` (a map's descriptor) at `keys[i]` of an array of maps,
/// in one `BPF_MAP_UPDATE_BATCH` where the kernel has it for arrays of
/// maps (it waits once for the runs of programs in progress rather than
/// once per entry: some milliseconds each), else one by one.
pub(super) fn map_update_all(
    map: BorrowedFd<'_>,
    keys: &[u32],
    values: &[u32],
) -> Result<(), Errno> {
    const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
    const ENOTSUPP: i32 = 524;
    let count = keys.len().min(values.len());
    if count == 0 {
        return Ok(());
    }
    let mut attr = BatchAttr {
        in_batch: 0,
        out_batch: 0,
        keys: keys.as_ptr() as u64,
        values: values.as_ptr() as u64,
        count: u32::try_from(count).map_err(|_| Errno(libc::E2BIG))?,
        map_fd: map.as_raw_fd() as u32,
        elem_flags: 0,
        flags: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for this command; the
    // kernel reads `count` keys and values from the slices, which outlive
    // the call.
    match unsafe { bpf(BPF_MAP_UPDATE_BATCH, &mut attr) }.map(drop) {
        Err(Errno(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP)) => keys
            .iter()
            .zip(values)
            .try_for_each(|(&key, &value)| map_update(map, key, value)),
        done => done,
    }
}

/// The prefix of `union bpf_attr` for `BPF_MAP_CREATE` that cgperf sets.
#[repr(C)]
struct CreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

/// Creates a perf event array of `entries` entries, to be an inner map of
/// one that holds such arrays: aya creates maps only from an object's
/// declarations.
pub(super) fn perf_event_array(entries: u32) -> Result<OwnedFd, Errno> {
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
    let mut attr = CreateAttr {
        map_type: BPF_MAP_TYPE_PERF_EVENT_ARRAY,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_flags: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for this command, with no
    // pointer; the kernel returns a new descriptor, owned from here on.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut attr) }?;
    let fd = i32::try_from(fd).map_err(|_| Errno(libc::EBADF))?;
    // SAFETY: a descriptor the kernel just made for us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
