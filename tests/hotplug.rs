//! CPU hotplug: counting stays exact and monotonic while a CPU goes offline
//! and comes back, including within a single interval.
//!
//! This binary holds this one test only: taking a CPU offline would break
//! the exact counts of tests running beside it, and cargo runs test
//! binaries one after another.

mod common;

use common::*;
use std::path::Path;

const CPU1: &str = "/sys/devices/system/cpu/cpu1/online";

fn set_cpu1(online: bool) {
    std::fs::write(CPU1, if online { "1" } else { "0" }).unwrap_or_else(|e| {
        panic!("writing {CPU1}: {e} (this test needs root and a hot-pluggable cpu1)")
    });
}

/// Brings cpu1 back whatever happens to the test.
struct Cpu1Back;

impl Drop for Cpu1Back {
    fn drop(&mut self) {
        let _ = std::fs::write(CPU1, "1");
    }
}

/// `n` getppid calls and `n` getpriority(PRIO_PGRP) calls on `cpu`, in
/// `cgroup`.
fn getppid_on(cgroup: &Path, cpu: usize, n: u64) {
    in_child(Some(cgroup), || {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes into it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                libc::_exit(4);
            }
            for _ in 0..n {
                libc::syscall(libc::SYS_getppid);
                libc::syscall(libc::SYS_getpriority, libc::PRIO_PGRP, 0);
            }
        }
    });
}

fn on_cpu(body: &str, cgroup: &str, cpu: &str) -> f64 {
    value(
        body,
        "cgperf_events_total",
        &[
            ("cgroup", cgroup),
            ("event", "syscalls:sys_enter_getppid"),
            ("cpu", cpu),
        ],
    )
    .unwrap_or_else(|| panic!("no series for cpu {cpu}:\n{body}"))
}

/// The sampled (`by:`) count of getpriority(PRIO_PGRP), over all CPUs.
fn sampled(body: &str, cgroup: &str) -> f64 {
    value(
        body,
        "cgperf_events_total",
        &[("cgroup", cgroup), ("event", "by_which"), ("which", "1")],
    )
    .unwrap_or_else(|| panic!("no sampled series:\n{body}"))
}

#[test]
fn counts_stay_exact_and_monotonic_across_cpu_hotplug() {
    assert!(
        Path::new(CPU1).exists(),
        "this test needs a hot-pluggable cpu1 ({CPU1})"
    );
    let _back = Cpu1Back;
    set_cpu1(true);
    let cg = TestCgroup::create("cgperf-hotplug");
    let exporter = Exporter::start(Some(&format!(
        "interval: 1s\nper_cpu: true\ntracepoints:\n  - syscalls:sys_enter_getppid\n  \
         - {{name: syscalls:sys_enter_getpriority, by: [which], as: by_which}}\n\
         cgroups:\n  - path: {}\n",
        cg.rel
    )));
    exporter.wait_collections(1);

    getppid_on(&cg.dir, 1, 1000);
    let body = exporter.wait_collections(2);
    assert_eq!(
        (on_cpu(&body, &cg.rel, "0"), on_cpu(&body, &cg.rel, "1")),
        (0.0, 1000.0)
    );
    assert_eq!(sampled(&body, &cg.rel), 1000.0, "{body}");

    // cpu1 goes away: its series stays (monotonic), the other CPU counts on.
    set_cpu1(false);
    exporter.wait_collections(2);
    getppid_on(&cg.dir, 0, 200);
    let body = exporter.wait_collections(2);
    assert_eq!(
        (on_cpu(&body, &cg.rel, "0"), on_cpu(&body, &cg.rel, "1")),
        (200.0, 1000.0)
    );
    assert_eq!(sampled(&body, &cg.rel), 1200.0, "{body}");
    assert_eq!(
        total(&body, "cgperf_read_errors_total"),
        0.0,
        "no read errors:\n{body}"
    );

    // cpu1 comes back: its groups are opened again and count from there.
    set_cpu1(true);
    exporter.wait_collections(2);
    getppid_on(&cg.dir, 1, 30);
    let body = exporter.wait_collections(2);
    assert_eq!(
        (on_cpu(&body, &cg.rel, "0"), on_cpu(&body, &cg.rel, "1")),
        (200.0, 1030.0)
    );
    assert_eq!(sampled(&body, &cg.rel), 1230.0, "{body}");

    // Offline and back within one interval: the kernel's list looks the
    // same before and after, the canary notices.
    exporter.wait_collections(1);
    set_cpu1(false);
    set_cpu1(true);
    exporter.wait_collections(2);
    getppid_on(&cg.dir, 1, 7);
    let body = exporter.wait_collections(2);
    assert_eq!(
        (on_cpu(&body, &cg.rel, "0"), on_cpu(&body, &cg.rel, "1")),
        (200.0, 1037.0)
    );
    assert_eq!(sampled(&body, &cg.rel), 1237.0, "{body}");
}
