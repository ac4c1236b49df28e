//! The `bpf()` calls aya does not make for cgperf, and the errors of
//! aya's calls with the errno they carry.

use crate::perf::Errno;
use std::os::fd::{AsRawFd, BorrowedFd};

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
    let attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: std::ptr::from_ref(key) as u64,
        value: value.map_or(0, |v| std::ptr::from_ref(v) as u64),
        flags: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for this command; the
    // kernel reads the key and value it points at, which outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<ElemAttr>(),
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(Errno::last()),
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
