//! Whether this machine and process can count through BPF, and if not,
//! what is missing and how to get it: asked by loading the real program,
//! since only the kernel knows (its version, config, privileges, lockdown).

use super::kernel::Kernel;
use super::unavailable::Unavailable;
use crate::events::{EventAttr, PERF_TYPE_SOFTWARE};
use crate::perf::{CounterGroup, Target};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The program [`available`] loaded, for how many cgroups, and when: the
/// backend that follows takes it ([`loaded`]) rather than load it again
/// (a load costs the verifier and the BTF relocations some 30 ms of CPU).
static LOADED: Mutex<Option<(usize, Kernel, Instant)>> = Mutex::new(None);

/// How long after loading the program `backend: auto` watches it for
/// switches the kernel makes without the `sched_switch` tracepoint
/// ([`hidden_switches`]). Such a kernel shows them in bursts: on one that
/// hid some ten a second, 8 windows of 20 of 250 ms saw none, 6 of 20 of
/// 500 ms, none of 20 of 1 s.
pub const WATCH: Duration = Duration::from_secs(1);

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
        Some((c, kernel, _)) if c == capacity && kernel.possible_cpus() == cpus => Some(kernel),
        _ => None,
    }
}

/// Switches the kernel made without the `sched_switch` tracepoint, as the
/// program [`available`] loaded found them from its load until `watch`
/// after it (waiting for the rest of that window), if it is still loaded
/// and found any; none asked for a zero `watch`. On such a kernel the bpf backend cannot count what perf
/// counters count while such a task runs as the cgroup backend does
/// (`docs/backends.md`).
pub fn hidden_switches(watch: Duration) -> Option<u64> {
    if watch.is_zero() {
        return None;
    }
    let since = LOADED.lock().ok()?.as_ref().map(|(_, _, at)| *at)?;
    std::thread::sleep(watch.saturating_sub(since.elapsed()));
    let slot = LOADED.lock().ok()?;
    let found = slot.as_ref()?.1.unseen_switches();
    (found > 0).then_some(found)
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
        *slot = Some((capacity, kernel, Instant::now()));
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
