//! The `bpf()` calls aya does not make for cgperf (element and batch
//! updates of maps it does not type, a perf event array of any size,
//! reading a whole hash in batches, a program's recursion misses, a perf
//! event link with a cookie), and the errors of aya's calls with the errno
//! they carry.

use crate::perf::Errno;
use aya::Pod;
use aya::maps::{HashMap as BpfHashMap, IterableMap, MapData};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

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

/// Every element of `map`: a few batched lookups (`BPF_MAP_LOOKUP_BATCH`,
/// Linux 5.6), where the kernel has them, rather than two system calls per
/// element.
pub(super) fn read_all<K: Pod + Default, V: Pod + Default>(
    map: &BpfHashMap<MapData, K, V>,
) -> Vec<(K, V)> {
    let mut out = Vec::new();
    if lookup_batch(map.map().fd().as_fd().as_raw_fd(), &mut out).is_ok() {
        return out;
    }
    out.clear();
    out.extend(map.iter().filter_map(Result::ok));
    out
}

/// Appends every element of the hash map `fd` to `out`, in batches.
fn lookup_batch<K: Pod + Default, V: Pod + Default>(
    fd: i32,
    out: &mut Vec<(K, V)>,
) -> Result<(), Errno> {
    const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
    let mut chunk = 1024;
    let mut keys = vec![K::default(); chunk];
    let mut values = vec![V::default(); chunk];
    // The position to go on from (a bucket, for a hash map).
    let (mut from, mut next) = (0u64, 0u64);
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                std::ptr::from_ref(&from) as u64
            },
            out_batch: std::ptr::from_mut(&mut next) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: fd as u32,
            elem_flags: 0,
            flags: 0,
        };
        // The kernel writes at most `count` keys and values into the
        // buffers, which hold `chunk` of each, a position into `next`, and
        // the count it wrote back into `attr`.
        // SAFETY: see above; `from` and `next` outlive the call.
        let errno = unsafe { bpf(BPF_MAP_LOOKUP_BATCH, &mut attr) }.err();
        let n = (attr.count as usize).min(chunk);
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        match errno {
            None => {
                from = next;
                first = false;
            }
            // Done.
            Some(Errno(libc::ENOENT)) => return Ok(()),
            // A bucket holds more than a batch: a bigger one, same place.
            Some(Errno(libc::ENOSPC)) if n == 0 && chunk < 1 << 20 => {
                chunk *= 2;
                keys.resize(chunk, K::default());
                values.resize(chunk, V::default());
            }
            Some(errno) => return Err(errno),
        }
    }
}

/// `recursion_misses` of a program's `struct bpf_prog_info` (Linux 5.12;
/// 0 before), which aya's program info does not expose.
pub(super) fn recursion_misses(prog_fd: i32) -> Result<u64, Errno> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    /// The offset of `recursion_misses` in `struct bpf_prog_info`.
    const AT: usize = 208;
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = [0u64; 32];
    let mut attr = InfoAttr {
        bpf_fd: prog_fd as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes into `info`.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info.get(AT / 8).copied().unwrap_or(0))
}

/// `BPF_LINK_CREATE` of a perf event link with a cookie, which aya's
/// tracepoint attachment does not pass.
pub(super) fn link_create(prog_fd: i32, perf_fd: i32, cookie: u64) -> Result<OwnedFd, Errno> {
    const BPF_LINK_CREATE: libc::c_long = 28;
    const BPF_PERF_EVENT: u32 = 41;
    #[repr(C)]
    struct LinkCreate {
        prog_fd: u32,
        target_fd: u32,
        attach_type: u32,
        flags: u32,
        bpf_cookie: u64,
        unused: [u64; 3],
    }
    let mut attr = LinkCreate {
        prog_fd: prog_fd as u32,
        target_fd: perf_fd as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: cookie,
        unused: [0; 3],
    };
    // SAFETY: `attr` holds descriptors and numbers only.
    let fd = unsafe { bpf(BPF_LINK_CREATE, &mut attr) }?;
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
