//! Tracing depth on the real kernel: filtered tracepoints, counts by field
//! value through ring buffers (and what happens when a ring overflows),
//! uprobes and kprobes, each on deterministic workloads in fresh cgroups.

mod common;

use common::*;
use std::path::Path;

const TP: &str = "syscalls:sys_enter_getpriority";

/// `n` calls of `getpriority(PRIO_PROCESS, 0)` (`which` = 0) and `m` of
/// `getpriority(PRIO_PGRP, 0)` (`which` = 1) in `cgroup`.
fn getpriority_workload(cgroup: &Path, n: u64, m: u64) {
    in_child(Some(cgroup), || {
        for _ in 0..n {
            // SAFETY: raw syscalls with integer arguments.
            unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, 0) };
        }
        for _ in 0..m {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PGRP, 0) };
        }
    });
}

/// `n` calls of `getpriority(PRIO_PROCESS, 0)` and `m` of
/// `getpriority(PRIO_PGRP, 0)` in `cgroup`, all on CPU 0.
fn getpriority_on_cpu0(cgroup: &Path, n: u64, m: u64) {
    in_child(Some(cgroup), || {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes into it; the
        // rest are raw syscalls with integer arguments.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                libc::_exit(4);
            }
            for _ in 0..n {
                libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, 0);
            }
            for _ in 0..m {
                libc::syscall(libc::SYS_getpriority, libc::PRIO_PGRP, 0);
            }
        }
    });
}

/// `getpriority(PRIO_PROCESS, who)` for `who` = 1..=5, `who` times each.
fn getpriority_who_workload(cgroup: &Path) {
    in_child(Some(cgroup), || {
        for who in 1..=5 {
            for _ in 0..who {
                // SAFETY: a raw syscall with integer arguments.
                unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, who) };
            }
        }
    });
}

/// A config counting getpriority plainly and by `which` (as `by_which`)
/// in `cgroup`, with `extra` top-level settings.
fn by_which_config(cgroup: &str, extra: &str) -> String {
    format!(
        "interval: 200ms
{extra}tracepoints:
  - {TP}
  - name: {TP}
    by: [which]
    as: by_which
cgroups:
  - path: {cgroup}
"
    )
}

/// Every `cgperf_events_total` series of `event` in `cgroup`: its labels
/// line and value.
fn series<'a>(body: &'a str, cgroup: &str, event: &str) -> Vec<(&'a str, f64)> {
    let cgroup = format!("cgroup=\"{cgroup}\"");
    let event = format!("event=\"{event}\"");
    body.lines()
        .filter(|l| l.starts_with("cgperf_events_total{"))
        .filter(|l| l.contains(&cgroup) && l.contains(&event))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once(' ')?;
            Some((labels, value.parse().ok()?))
        })
        .collect()
}

#[test]
fn plain_filtered_and_by_field_counts_are_exact() {
    const N: u64 = 1000;
    const M: u64 = 300;
    let cg = TestCgroup::create("cgperf-tracing-exact");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms
tracepoints:
  - {TP}
  - name: {TP}
    filter: \"which == 1\"
    as: pgrp_lookups
  - name: {TP}
    by: [which]
    as: getpriority_by_which
cgroups:
  - path: {}
",
        cg.rel
    )));
    let plain = [("cgroup", cg.rel.as_str()), ("event", TP)];
    exporter.wait_for("the test cgroup's series", |b| {
        value(b, "cgperf_events_total", &plain).is_some()
    });
    getpriority_workload(&cg.dir, N, M);
    let body = exporter.wait_collections(3);
    assert_eq!(
        value(&body, "cgperf_events_total", &plain),
        Some((N + M) as f64),
        "{body}"
    );
    let filtered = [
        ("cgroup", cg.rel.as_str()),
        ("group", "tracepoints"),
        ("event", "pgrp_lookups"),
    ];
    assert_eq!(
        value(&body, "cgperf_events_total", &filtered),
        Some(M as f64)
    );
    let by = |which: &str| {
        value(
            &body,
            "cgperf_events_total",
            &[
                ("cgroup", cg.rel.as_str()),
                ("group", "tracepoints"),
                ("event", "getpriority_by_which"),
                ("which", which),
            ],
        )
    };
    assert_eq!(by("0"), Some(N as f64), "{body}");
    assert_eq!(by("1"), Some(M as f64), "{body}");
    assert_eq!(
        series(&body, &cg.rel, "getpriority_by_which").len(),
        2,
        "{body}"
    );
    assert_eq!(value(&body, "cgperf_samples_lost_total", &[]), Some(0.0));
    assert_eq!(
        value(&body, "cgperf_samples_undecodable_total", &[]),
        Some(0.0)
    );
}

#[test]
fn syscalls_split_by_number_carry_their_names() {
    const N: u64 = 777;
    let cg = TestCgroup::create("cgperf-tracing-syscall-names");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms
tracepoints:
  - {{name: raw_syscalls:sys_enter, by: [id], syscall_name: id, as: calls}}
cgroups:
  - path: {}
",
        cg.rel
    )));
    // Its loss counter appears when the cgroup is counted.
    exporter.wait_for("the test cgroup counted", |b| {
        let labels = [("cgroup", cg.rel.as_str()), ("event", "calls")];
        value(b, "cgperf_events_lost_total", &labels).is_some()
    });
    getppid_workload(Some(&cg.dir), N);
    let getppid = libc::SYS_getppid.to_string();
    let labels = [
        ("cgroup", cg.rel.as_str()),
        ("event", "calls"),
        ("id", getppid.as_str()),
        ("syscall", "getppid"),
    ];
    let body = exporter.wait_for("getppid by name", |b| {
        value(b, "cgperf_events_total", &labels) == Some(N as f64)
    });
    // Every number the workload used (exit_group, ...) has its name.
    let all = series(&body, &cg.rel, "calls");
    assert!(all.len() > 1, "{body}");
    for (labels, _) in &all {
        assert!(labels.contains("syscall=\""), "{labels}");
        assert!(!labels.contains("syscall=\"syscall_"), "{labels}");
    }
}

#[test]
fn values_beyond_max_series_fold_into_other() {
    let cg = TestCgroup::create("cgperf-tracing-other");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms
tracepoints:
  - name: {TP}
    by: [which, who]
    as: by_who
    max_series: 2
cgroups:
  - path: {}
",
        cg.rel
    )));
    exporter.wait_collections(1);
    // who = 1..=5, `who` calls each: 15 hits over 5 value combinations.
    getpriority_who_workload(&cg.dir);
    let body = exporter.wait_collections(3);
    let all = series(&body, &cg.rel, "by_who");
    assert_eq!(all.len(), 3, "two series and `other`:\n{body}");
    let total: f64 = all.iter().map(|(_, v)| v).sum();
    assert_eq!(total, 15.0, "{body}");
    let other: Vec<_> = all
        .iter()
        .filter(|(l, _)| l.contains("which=\"other\",who=\"other\""))
        .collect();
    assert_eq!(other.len(), 1, "{body}");
    for (labels, value) in &all {
        if labels.contains("other") {
            continue;
        }
        // A series kept by its own values counts exactly that `who`.
        let who: f64 = labels
            .split("who=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no who label in {labels}"));
        assert!(labels.contains("which=\"0\""), "{labels}");
        assert_eq!(*value, who, "{labels}");
    }
}

#[test]
fn a_full_ring_loses_samples_counted_and_never_mislabels() {
    const BURST: u64 = 200_000;
    let cg = TestCgroup::create("cgperf-tracing-lost");
    // One 4 KiB page per CPU holds about a hundred samples: the burst
    // overflows it between two drains.
    let exporter = Exporter::start(Some(&by_which_config(&cg.rel, "ring_pages: 1\n")));
    exporter.wait_collections(1);
    // On one CPU, so that one ring holds all the samples and the losses.
    getpriority_on_cpu0(&cg.dir, BURST, 0);
    exporter.wait_collections(2);
    // The kernel reports losses with the next sample it manages to write
    // into the same ring: one more hit, with `which` = 1, flushes the report.
    getpriority_on_cpu0(&cg.dir, 0, 1);
    let body = exporter.wait_collections(3);
    let lost = value(&body, "cgperf_samples_lost_total", &[]).expect("lost metric");
    // The backend that counts (the one the tests ask for, else what
    // `auto` chose here).
    if backend_info(&body).0 == "bpf" {
        // Counted in the kernel (tests/bpf_by.rs): no ring to overflow.
        assert_eq!(lost, 0.0, "{body}");
    } else {
        assert!(
            lost > 0.0,
            "a burst of {BURST} must overflow one page:\n{body}"
        );
    }
    let labels = [("cgroup", cg.rel.as_str()), ("event", "by_which")];
    let zero = value(
        &body,
        "cgperf_events_total",
        &[labels[0], labels[1], ("which", "0")],
    )
    .unwrap_or(0.0);
    let one = value(
        &body,
        "cgperf_events_total",
        &[labels[0], labels[1], ("which", "1")],
    );
    assert_eq!(one, Some(1.0), "{body}");
    // Every hit is either counted under its true value or reported lost.
    assert_eq!(zero + lost, BURST as f64, "{body}");
    assert_eq!(series(&body, &cg.rel, "by_which").len(), 2, "{body}");
    assert_eq!(
        value(&body, "cgperf_samples_undecodable_total", &[]),
        Some(0.0)
    );
}

/// The function the uprobe test counts; `no_mangle` keeps its symbol name.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn cgperf_tracing_uprobe_target(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(3)
}

#[test]
fn uprobe_on_a_function_counts_its_calls() {
    const K: u64 = 777;
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .expect("test binary path");
    let cg = TestCgroup::create("cgperf-tracing-uprobe");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms
probes:
  - uprobe: {}:cgperf_tracing_uprobe_target
    as: target_calls
cgroups:
  - path: {}
",
        exe.display(),
        cg.rel
    )));
    let labels = [
        ("cgroup", cg.rel.as_str()),
        ("group", "probes"),
        ("event", "target_calls"),
    ];
    exporter.wait_for("the probe's series", |b| {
        value(b, "cgperf_events_total", &labels).is_some()
    });
    in_child(Some(&cg.dir), || {
        for i in 0..K {
            cgperf_tracing_uprobe_target(i);
        }
    });
    // Calls outside the cgroup are not counted.
    for i in 0..10 {
        cgperf_tracing_uprobe_target(i);
    }
    let body = exporter.wait_collections(3);
    assert_eq!(
        value(&body, "cgperf_events_total", &labels),
        Some(K as f64),
        "{body}"
    );
}

#[test]
fn kprobes_are_reported_missing_from_this_kernel() {
    let config = config_file("probes:\n  - kprobe: do_sys_openat2\n    as: openat2_calls\n");
    let path = config.path().to_str().expect("utf-8 path");
    let (code, out, err) = run_cgperf(&["check", "--config.file", path]);
    // Not a config error (1): a valid config of which nothing can be
    // counted here (3).
    assert_eq!(
        code, 3,
        "an unsupported probe is not a config error:\n{out}{err}"
    );
    assert!(out.contains("openat2_calls"), "{out}");
    assert!(
        out.contains(
            "this kernel has no kprobe PMU (built without CONFIG_KPROBE_EVENTS): kprobe \
             `do_sys_openat2` cannot be counted"
        ),
        "{out}"
    );
}

#[test]
fn filters_the_kernel_rejects_are_config_errors() {
    let cases = [
        (
            "which === 1",
            "the kernel rejected the filter \"which === 1\"",
        ),
        ("which = 1", "the kernel rejected the filter \"which = 1\""),
        (
            "which == \\\"abc\\\"",
            "EINVAL: a comparison does not parse",
        ),
        ("(which == 1", "ENOENT: the expression is incomplete"),
        ("nosuchfield == 1", "has no field `nosuchfield`"),
        ("whihc == 1", "has no field `whihc`"),
    ];
    for (filter, needle) in cases {
        let config = config_file(&format!(
            "tracepoints:\n  - name: {TP}\n    filter: \"{filter}\"\n"
        ));
        let path = config.path().to_str().expect("utf-8 path");
        let (code, out, err) = run_cgperf(&["check", "--config.file", path]);
        assert_eq!(code, 1, "filter {filter:?}:\n{out}{err}");
        assert!(err.contains(needle), "filter {filter:?}:\n{err}");
        assert!(err.contains(&format!("{path}:2:5:")), "position:\n{err}");
        assert!(err.contains("fields of this tracepoint: "), "hint:\n{err}");
    }
    // The suggestion for a near miss.
    let config = config_file(&format!(
        "tracepoints:\n  - {{name: {TP}, filter: \"whihc == 1\"}}\n"
    ));
    let path = config.path().to_str().expect("utf-8 path");
    let (_, _, err) = run_cgperf(&["check", "--config.file", path]);
    assert!(err.contains("did you mean `which`?"), "{err}");
    // A `by:` field the tracepoint lacks.
    let config = config_file(&format!("tracepoints:\n  - {{name: {TP}, by: [whom]}}\n"));
    let path = config.path().to_str().expect("utf-8 path");
    let (code, _, err) = run_cgperf(&["check", "--config.file", path]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no field `whom`"), "{err}");
    // The exporter refuses to start on it, too.
    let (code, _, err) =
        run_cgperf(&["--config.file", path, "--web.listen-address", "127.0.0.1:0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid config"), "{err}");
}

/// Rewrites `config` (now `first`) with the filter `which == 1` on
/// `by_which` (same label and fields: reopened, counts carried on), sends
/// SIGHUP and waits until a reload later than `loaded` succeeded.
fn filter_which_1(exporter: &Exporter, config: &tempfile::NamedTempFile, first: &str, loaded: f64) {
    let second = first.replace(
        "    by: [which]\n",
        "    by: [which]\n    filter: \"which == 1\"\n",
    );
    std::fs::write(config.path(), common::with_test_backend(&second)).expect("rewrite config");
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGHUP) }, 0);
    exporter.wait_for("the reload", |b| reload_time(b) > loaded);
}

#[test]
fn a_reload_that_changes_a_by_filter_keeps_the_counts() {
    let cg = TestCgroup::create("cgperf-tracing-reload");
    let first = by_which_config(&cg.rel, "");
    let config = config_file(&first);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()));
    let exporter = Exporter::spawn(cmd);
    exporter.wait_collections(1);
    getpriority_workload(&cg.dir, 20, 100);
    let which = |body: &str, v: &str| {
        value(
            body,
            "cgperf_events_total",
            &[
                ("cgroup", cg.rel.as_str()),
                ("event", "by_which"),
                ("which", v),
            ],
        )
    };
    let body = exporter.wait_collections(2);
    assert_eq!(
        (which(&body, "0"), which(&body, "1")),
        (Some(20.0), Some(100.0))
    );

    let loaded = reload_time(&body);
    filter_which_1(&exporter, &config, &first, loaded);
    exporter.wait_collections(2);
    getpriority_workload(&cg.dir, 30, 50);
    let body = exporter.wait_collections(3);
    assert_eq!(
        (which(&body, "0"), which(&body, "1")),
        (Some(20.0), Some(150.0)),
        "{body}"
    );
    assert_eq!(
        value(&body, "cgperf_config_last_reload_successful", &[]),
        Some(1.0)
    );
}

/// The `by_which` series of `which` = `v` in `cgroup`.
fn by_which(body: &str, cgroup: &str, v: &str) -> Option<f64> {
    value(
        body,
        "cgperf_events_total",
        &[("cgroup", cgroup), ("event", "by_which"), ("which", v)],
    )
}

/// The `cgperf_events_lost_total` of `event` in `cgroup` (0 when absent, as
/// before the metric existed, so that a test fails on its sum, not on a
/// missing line).
fn events_lost(body: &str, cgroup: &str, event: &str) -> f64 {
    value(
        body,
        "cgperf_events_lost_total",
        &[
            ("cgroup", cgroup),
            ("group", "tracepoints"),
            ("event", event),
        ],
    )
    .unwrap_or(0.0)
}

/// The sum of every `cgperf_events_total` series of a `by:` entry (its
/// values and `other`) plus its `cgperf_events_lost_total`.
fn accounted(body: &str, cgroup: &str, event: &str) -> f64 {
    let counted: f64 = series(body, cgroup, event).iter().map(|(_, v)| v).sum();
    counted + events_lost(body, cgroup, event)
}

#[test]
fn a_burst_into_the_default_ring_is_accounted_for_without_another_hit() {
    const N: u64 = 4_000;
    const M: u64 = 1_234;
    let cg = TestCgroup::create("cgperf-tracing-burst");
    let exporter = Exporter::start(Some(&by_which_config(&cg.rel, "")));
    let plain = [("cgroup", cg.rel.as_str()), ("event", TP)];
    exporter.wait_for("the test cgroup's series", |b| {
        value(b, "cgperf_events_total", &plain).is_some()
    });
    // One CPU, one ring: the burst is more than the default ring holds.
    getpriority_on_cpu0(&cg.dir, N, M);
    // No hit after the burst: what is owed must show without one.
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_events_total", &plain),
        Some((N + M) as f64),
        "{body}"
    );
    let which = |v: &str| by_which(&body, &cg.rel, v).unwrap_or(0.0);
    eprintln!(
        "which=0 {} which=1 {} lost {} samples_lost {:?}",
        which("0"),
        which("1"),
        events_lost(&body, &cg.rel, "by_which"),
        value(&body, "cgperf_samples_lost_total", &[])
    );
    assert!(which("0") <= N as f64 && which("1") <= M as f64, "{body}");
    assert_eq!(
        accounted(&body, &cg.rel, "by_which"),
        (N + M) as f64,
        "values + other + lost:\n{body}"
    );
    // And it stays so.
    let later = exporter.wait_collections(2);
    assert_eq!(accounted(&later, &cg.rel, "by_which"), (N + M) as f64);
}

/// `HALF` hits of each `which` on CPU 0 into rings of `ring_pages`, in a
/// fresh cgroup named `name`: the cgroup, the exporter, and its scrape once
/// a whole collection ran after the burst.
fn burst(name: &str, ring_pages: u32) -> (TestCgroup, Exporter, String) {
    let cg = TestCgroup::create(name);
    let extra = format!("ring_pages: {ring_pages}\n");
    let exporter = Exporter::start(Some(&by_which_config(&cg.rel, &extra)));
    exporter.wait_collections(1);
    getpriority_on_cpu0(&cg.dir, HALF, HALF);
    let body = exporter.wait_collections(2);
    (cg, exporter, body)
}

/// Hits of each `which` value in [`burst`].
const HALF: u64 = 25_000;

#[test]
fn a_burst_into_a_one_page_ring_is_accounted_for_exactly() {
    let (cg, exporter, body) = burst("cgperf-tracing-one-page", 1);
    let lost = events_lost(&body, &cg.rel, "by_which");
    eprintln!("lost {lost} of {}", 2 * HALF);
    assert_eq!(
        accounted(&body, &cg.rel, "by_which"),
        (2 * HALF) as f64,
        "values + other + lost:\n{body}"
    );
    for (labels, v) in series(&body, &cg.rel, "by_which") {
        assert!(v <= HALF as f64, "never more than the truth: {labels} {v}");
    }
    let later = exporter.wait_collections(2);
    assert_eq!(events_lost(&later, &cg.rel, "by_which"), lost, "{later}");
}

#[test]
fn a_ring_big_enough_for_the_burst_counts_every_value_exactly() {
    // 4 MiB per CPU: room for the whole burst even if no drain ran during it.
    let (cg, _exporter, body) = burst("cgperf-tracing-big-ring", 1024);
    let which = |v: &str| by_which(&body, &cg.rel, v);
    assert_eq!(
        (which("0"), which("1")),
        (Some(HALF as f64), Some(HALF as f64)),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            "cgperf_events_lost_total",
            &[("cgroup", cg.rel.as_str()), ("event", "by_which")]
        ),
        Some(0.0),
        "{body}"
    );
    assert_eq!(value(&body, "cgperf_samples_lost_total", &[]), Some(0.0));
}

#[test]
fn losses_before_a_reload_that_keeps_the_series_stay_accounted_for() {
    const HALF: u64 = 10_000;
    const MORE: u64 = 500;
    let cg = TestCgroup::create("cgperf-tracing-reload-lost");
    // Long intervals: the reload comes before the next collection, so the
    // closed events' last read is all that counts the burst's losses.
    let first = by_which_config(&cg.rel, "ring_pages: 1\n").replace("200ms", "3s");
    let config = config_file(&first);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()));
    let exporter = Exporter::spawn(cmd);
    let body = exporter.wait_collections(1);
    let loaded = reload_time(&body);
    getpriority_on_cpu0(&cg.dir, HALF, HALF);
    filter_which_1(&exporter, &config, &first, loaded);
    let body = exporter.wait_collections(2);
    assert_eq!(
        accounted(&body, &cg.rel, "by_which"),
        (2 * HALF) as f64,
        "values + other + lost before the reload:\n{body}"
    );
    let lost = events_lost(&body, &cg.rel, "by_which");
    // Filtered out now: `which` = 0 hits are not counted.
    getpriority_on_cpu0(&cg.dir, MORE, MORE);
    let body = exporter.wait_collections(2);
    assert_eq!(
        accounted(&body, &cg.rel, "by_which"),
        (2 * HALF + MORE) as f64,
        "{body}"
    );
    assert!(events_lost(&body, &cg.rel, "by_which") >= lost, "{body}");
}

#[test]
fn a_misspelt_tracepoint_is_located_with_the_closest_name_in_check_and_the_log() {
    require_root("read tracefs and count tracepoints");
    let yaml = "groups:\n  sw: [task-clock]\ntracepoints:\n  - sched:sched_switch\n  - sched:sched_swtich\ncgroups:\n  - path: /\n";
    let config = config_file(yaml);
    let path = config.path().display().to_string();
    let expected = format!("{path}:5:5: unknown tracepoint `sched:sched_swtich`: ");
    let (code, out, err) = run_cgperf(&["check", &format!("--config.file={path}")]);
    assert_eq!(
        code, 0,
        "a tracepoint this kernel lacks is no config error:\n{out}{err}"
    );
    let row = out
        .lines()
        .find(|l| {
            l.split_whitespace()
                .take(2)
                .eq(["tracepoints", "sched:sched_swtich"])
        })
        .unwrap_or_else(|| panic!("no row for the typo:\n{out}"));
    assert!(row.contains("NOT COUNTED"), "{out}");
    let footnote = out
        .lines()
        .find(|l| l.contains(&expected))
        .unwrap_or_else(|| panic!("no located footnote `{expected}`:\n{out}"));
    assert!(
        footnote.contains("did you mean `sched:sched_switch`?"),
        "{footnote}"
    );

    // The daemon says the same in its log when it starts.
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .args([
            &format!("--config.file={path}"),
            "--web.listen-address=127.0.0.1:0",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start cgperf");
    let stderr = daemon.stderr.take().expect("stderr");
    let mut logged = None;
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
        let line = line.expect("a log line");
        if line.contains("sched:sched_swtich") {
            logged = Some(line);
            break;
        }
        if line.contains("serving http") {
            break;
        }
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    let logged = logged.expect("the daemon logs the misspelt tracepoint before it serves");
    assert!(logged.contains(&expected), "{logged}");
    assert!(
        logged.contains("did you mean `sched:sched_switch`?"),
        "{logged}"
    );
}
