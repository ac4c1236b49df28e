//! `bpf(2)` commands the `by:` program's loader needs and aya does not
//! offer: reading a whole hash in batches, a program's recursion misses,
//! and a perf event link with a cookie.

use super::super::sys::{BatchAttr, bpf};
use crate::perf::Errno;
use aya::Pod;
use aya::maps::{HashMap as BpfHashMap, IterableMap, MapData};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

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
