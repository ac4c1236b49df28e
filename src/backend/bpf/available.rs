//! Whether this machine and process can count through BPF, and if not,
//! what is missing and how to get it: asked by loading the real program,
//! since only the kernel knows (its version, config, privileges, lockdown).

use super::kernel::Kernel;
use super::unavailable::Unavailable;
use crate::events::{EventAttr, PERF_TYPE_SOFTWARE};
use crate::perf::{CounterGroup, Target};
use std::sync::Mutex;

/// The program [`available`] loaded, and for how many cgroups: the
/// backend that follows takes it ([`loaded`]) rather than load it again
/// (a load costs the verifier and the BTF relocations some 30 ms of CPU).
static LOADED: Mutex<Option<(usize, Kernel)>> = Mutex::new(None);

/// Unloads the program [`available`] loaded, if no backend took it: it
/// would charge every context switch for nothing.
pub fn unload() {
    if let Ok(mut slot) = LOADED.lock() {
        slot.take();
    }
}

/// The program [`available`] loaded for `capacity` cgroups, if any and
/// if its maps are laid out for `cpus` possible CPUs.
pub(super) fn loaded(capacity: usize, cpus: u32) -> Option<Kernel> {
    let mut slot = LOADED.lock().ok()?;
    match slot.take() {
        Some((c, kernel)) if c == capacity && kernel.possible_cpus() == cpus => Some(kernel),
        _ => None,
    }
}

/// Whether cgperf can count through BPF here, counting at most `capacity`
/// cgroups: it loads and attaches its program (privileges, kernel version
/// and features; kept for the backend, see [`loaded`]) and opens one
/// system-wide counter (CAP_PERFMON or `perf_event_paranoid`). `Ok` holds
/// where its counts at a move would differ from cgroup mode's on this
/// kernel, and how ([`Kernel::inexact`]).
pub fn available(capacity: usize) -> Result<Option<String>, Unavailable> {
    let cpus = possible_cpus()?;
    let kernel = Kernel::load(capacity_u32(capacity), cpus)?;
    let inexact = kernel.inexact().map(str::to_string);
    let cpu = crate::cpus::online()
        .ok()
        .and_then(|online| online.first().copied())
        .unwrap_or(0);
    let clock = EventAttr::new(PERF_TYPE_SOFTWARE, 0);
    CounterGroup::open(&[clock], Target::AllTasks, cpu)
        .map(drop)
        .map_err(|e| {
            Unavailable::from_kernel((
                format!("opening a system-wide counter: {}", e.errno),
                Some(e.errno.0),
            ))
        })?;
    if let Ok(mut slot) = LOADED.lock() {
        *slot = Some((capacity, kernel));
    }
    Ok(inexact)
}

/// `capacity` as the program's maps take it: at least one.
pub(super) fn capacity_u32(capacity: usize) -> u32 {
    u32::try_from(capacity.max(1)).unwrap_or(u32::MAX)
}

/// The number of CPUs the kernel may ever bring online: the program's
/// maps are indexed by CPU number.
pub(super) fn possible_cpus() -> Result<u32, Unavailable> {
    aya::util::nr_cpus()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| Unavailable {
            missing: "the list of possible CPUs (/sys/devices/system/cpu/possible)".into(),
            fix: "mount sysfs at /sys".into(),
        })
}
