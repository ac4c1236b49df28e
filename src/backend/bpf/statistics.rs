//! The kernel's BPF run-time statistics, which `--bpf.run-statistics`
//! turns on for cgperf's life: they are what
//! `cgperf_bpf_program_run_seconds_total` reads. They are the whole
//! kernel's, not cgperf's: while they are on, every run of every BPF
//! program on the host reads the clock twice (on our VM, 3 % of a pipe
//! ping-pong between two tasks of one cgroup under the bpf backend, as much
//! as the program's own work there), so they stay off unless asked for.

use std::os::fd::OwnedFd;

/// Turns the statistics on for as long as the returned descriptor lives;
/// `None`, said at warn level, if the kernel refuses (they need
/// `CAP_SYS_ADMIN`).
pub fn run_statistics() -> Option<OwnedFd> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map_err(|e| {
            tracing::warn!(
                "--bpf.run-statistics: BPF run-time statistics stay off unless \
                 kernel.bpf_stats_enabled=1 (enabling them needs CAP_SYS_ADMIN): {e}"
            );
        })
        .ok()
}
