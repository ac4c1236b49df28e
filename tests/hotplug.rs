//! CPU hotplug: counting stays exact and monotonic while a CPU goes offline
//! and comes back, including within a single interval, and when it comes
//! back while cgperf has no descriptor to spare.
//!
//! This binary holds these tests only: taking a CPU offline would break
//! the exact counts of tests running beside it, and cargo runs test
//! binaries one after another. Its tests take turns ([`cpu1_turn`]).

mod common;

use common::*;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// This test's turn to move cpu1, which is put in state `online` now and
/// back online when the turn ends, whatever happens to the test.
/// (cpu1 comes back first: fields drop in order.)
fn cpu1_turn(online: bool) -> (Cpu1Back, MutexGuard<'static, ()>) {
    static TURN: Mutex<()> = Mutex::new(());
    assert!(
        Path::new(CPU1).exists(),
        "this test needs a hot-pluggable cpu1 ({CPU1})"
    );
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    set_cpu1(online);
    (Cpu1Back, turn)
}

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
    let _turn = cpu1_turn(true);
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

#[test]
fn what_a_cpu_counted_before_going_offline_between_two_reads_is_kept() {
    // Summed series: under the bpf backend a CPU a cgroup had not run on
    // keeps no baseline there, and is read one last time after it goes
    // offline all the same.
    let _turn = cpu1_turn(true);
    let cg = TestCgroup::create("cgperf-hotplug-summed");
    let exporter = Exporter::start(Some(&format!(
        "interval: 1s\ntracepoints:\n  - syscalls:sys_enter_getppid\n\
         cgroups:\n  - path: {}\n",
        cg.rel
    )));
    let getppid = |body: &str| {
        let labels = [
            ("cgroup", cg.rel.as_str()),
            ("event", "syscalls:sys_enter_getppid"),
        ];
        value(body, "cgperf_events_total", &labels)
            .unwrap_or_else(|| panic!("no getppid series:\n{body}"))
    };
    let body = exporter.wait_collections(1);
    assert_eq!(getppid(&body), 0.0);
    // Right after a collection: the calls and the CPU going away fall
    // between two reads (they take under 0.15 s of the 1 s interval; so
    // does the CPU's going and coming back below).
    getppid_on(&cg.dir, 1, 1000);
    set_cpu1(false);
    let body = exporter.wait_collections(2);
    assert_eq!(getppid(&body), 1000.0, "{body}");
    set_cpu1(true);
    let body = exporter.wait_collections(2);
    getppid_on(&cg.dir, 1, 50);
    set_cpu1(false);
    set_cpu1(true);
    let body2 = exporter.wait_collections(2);
    assert_eq!(getppid(&body), 1000.0, "{body}");
    assert_eq!(getppid(&body2), 1050.0, "{body2}");
}

/// Descriptors cgperf keeps for everything but perf events: its perf
/// budget is the open-files limit minus these.
const RESERVED_FDS: u64 = 256;

#[test]
fn a_cpu_back_while_descriptors_are_short_is_counted_once_they_are_free() {
    require_root("takes cpu1 offline and creates cgroups");
    let _turn = cpu1_turn(false);
    let parent = TestCgroup::create("cgperf-hotplug-fds");
    let job = TestCgroup::create_under(&parent.rel, "job");
    let other = TestCgroup::create_under(&parent.rel, "other");
    let config = config_file(&format!(
        // The cgroup backend's descriptor budget (the bpf backend's
        // descriptors do not grow with cgroups).
        "backend: cgroup\ninterval: 200ms\nper_cpu: true\ntracepoints: [syscalls:sys_enter_getppid]\n\
         cgroups:\n  - match: {}/*\n",
        parent.rel
    ));
    // Four perf descriptors: cpu0's canary and one event per cgroup there,
    // and one more: cpu1's canary, when it comes back. Neither cgroup's
    // event then fits on cpu1.
    let exporter = spawn_with_nofile(config.path(), RESERVED_FDS + 4, &[]);
    exporter.wait_for("both cgroups' series", |b| {
        getppid_of(b, &job.rel).is_some() && getppid_of(b, &other.rel).is_some()
    });
    getppid_on(&job.dir, 0, 100);
    let body = exporter.wait_collections(2);
    assert_eq!(on_cpu(&body, &job.rel, "0"), 100.0);
    assert_eq!(value(&body, "cgperf_open_fds", &[]), Some(3.0), "{body}");

    set_cpu1(true);
    let body = exporter.wait_for("cpu1 noticed", |b| {
        value(b, "cgperf_open_fds", &[]) == Some(4.0)
    });
    assert!(
        value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &job.rel), ("cpu", "1")]
        )
        .is_none_or(|n| n == 0.0),
        "no descriptor for the job on cpu1 yet:\n{body}"
    );

    // The other cgroup goes: its descriptor frees room for the job's on
    // cpu1, which must be opened without waiting for a reload.
    drop(other);
    exporter.wait_for("the job opened on cpu1", |b| {
        value(b, "cgperf_open_fds", &[]) == Some(4.0)
            && value(b, "cgperf_monitored_cgroups", &[]) == Some(1.0)
    });
    let body = exporter.wait_collections(2);
    assert_eq!(value(&body, "cgperf_open_fds", &[]), Some(4.0), "{body}");
    getppid_on(&job.dir, 1, 1000);
    getppid_on(&job.dir, 0, 10);
    let body = exporter.wait_collections(2);
    assert_eq!(
        (on_cpu(&body, &job.rel, "0"), on_cpu(&body, &job.rel, "1")),
        (110.0, 1000.0),
        "{body}"
    );
}

#[test]
fn the_host_keeps_what_a_cpu_counted_before_going_offline() {
    // `host:` counts system-wide: a CPU going offline is read a last time
    // and closed, and opened again when it is back.
    let _turn = cpu1_turn(true);
    let exporter = Exporter::start(Some(
        "interval: 1s\nhost:\n  tracepoints:\n    - name: syscalls:sys_enter_getpriority\n      \
         filter: \"which == 7\"\n      as: marker\n",
    ));
    let marker = |body: &str| {
        value(body, "cgperf_host_events_total", &[("event", "marker")])
            .unwrap_or_else(|| panic!("no marker series:\n{body}"))
    };
    // `getpriority(7, 0)`: a `which` no other process asks for.
    let markers_on_cpu1 = |n: u64| {
        in_child(None, || {
            // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes into it.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(1, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    libc::_exit(4);
                }
                for _ in 0..n {
                    libc::syscall(libc::SYS_getpriority, 7, 0);
                }
            }
        })
    };
    let body = exporter.wait_collections(1);
    assert_eq!(marker(&body), 0.0, "{body}");
    markers_on_cpu1(1000);
    set_cpu1(false);
    let body = exporter.wait_collections(2);
    assert_eq!(marker(&body), 1000.0, "{body}");
    set_cpu1(true);
    exporter.wait_collections(2);
    markers_on_cpu1(50);
    // Down and up within one interval.
    set_cpu1(false);
    set_cpu1(true);
    let body = exporter.wait_collections(2);
    assert_eq!(marker(&body), 1050.0, "{body}");
    markers_on_cpu1(7);
    let body = exporter.wait_collections(2);
    assert_eq!(marker(&body), 1057.0, "{body}");
}

#[test]
fn a_cpu_back_online_counts_from_when_it_is_back_not_from_the_next_collection() {
    // cpu1 is offline for a whole collection, then comes back, and a
    // workload pinned to it starts at once, well before the next
    // collection (the interval is 5 s): cgperf opens cpu1's counters when
    // the kernel says it is back, so the cgroup and the host lose at most
    // what ran before that: 2 % of a million calls (some 12 ms here).
    // How fast cgperf reacts is measured on the build that ships: a debug
    // build takes about three times as long to open the CPU's counters,
    // and here, where the other CPU runs the test, lost up to 3 %.
    let _turn = cpu1_turn(true);
    let cg = TestCgroup::create("cgperf-hotplug-back");
    let exporter = Exporter::start_binary(
        shipped_binary(),
        Some(&format!(
            "interval: 5s\ntracepoints:\n  - syscalls:sys_enter_getppid\n\
         cgroups:\n  - path: {}\nhost:\n  tracepoints:\n    - syscalls:sys_enter_getppid\n",
            cg.rel
        )),
    );
    exporter.wait_collections(1);
    set_cpu1(false);
    exporter.wait_collections(1);
    set_cpu1(true);
    let calls = 1_000_000u64;
    getppid_on(&cg.dir, 1, calls);
    let body = exporter.wait_collections(1);
    let cgroup = value(
        &body,
        "cgperf_events_total",
        &[("cgroup", &cg.rel), ("event", "syscalls:sys_enter_getppid")],
    )
    .unwrap_or_else(|| panic!("no series for the cgroup:\n{body}"));
    let host = value(
        &body,
        "cgperf_host_events_total",
        &[("event", "syscalls:sys_enter_getppid")],
    )
    .unwrap_or_else(|| panic!("no host series:\n{body}"));
    eprintln!("of {calls} calls: the cgroup counted {cgroup}, the host {host}");
    let floor = calls as f64 * 0.98;
    assert!(
        cgroup >= floor && cgroup <= calls as f64,
        "the cgroup counted {cgroup} of {calls}"
    );
    assert!(host >= floor, "the host counted {host} of at least {calls}");
}

#[test]
fn num_cpus_online_follows_a_cpu_going_offline_and_coming_back() {
    let _turn = cpu1_turn(true);
    let online = || {
        std::fs::read_to_string("/sys/devices/system/cpu/online")
            .expect("online CPUs")
            .trim()
            .split(',')
            .map(|range| match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (u32, u32) = (a.parse().expect("cpu"), b.parse().expect("cpu"));
                    f64::from(b - a + 1)
                }
                None => 1.0,
            })
            .sum::<f64>()
    };
    let exporter = Exporter::start(Some(
        "interval: 200ms\ngroups:\n  sw: [context-switches]\nmetrics:\n  \
         - {name: cpus, expr: \"#num_cpus_online\"}\n  \
         - {name: per_cpu, expr: \"context-switches * 0 + 12 / #num_cpus_online\"}\n",
    ));
    let metric =
        |body: &str, name: &str| value(body, "cgperf_metric", &[("cgroup", "/"), ("metric", name)]);
    let all = online();
    let body = exporter.wait_for("the metric", |b| metric(b, "cpus") == Some(all));
    assert_eq!(metric(&body, "per_cpu"), Some(12.0 / all), "{body}");
    set_cpu1(false);
    let body = exporter.wait_for("one CPU fewer", |b| metric(b, "cpus") == Some(all - 1.0));
    assert_eq!(metric(&body, "per_cpu"), Some(12.0 / (all - 1.0)), "{body}");
    set_cpu1(true);
    exporter.wait_for("the CPU back", |b| metric(b, "cpus") == Some(all));
}
