//! `host:` on the real kernel: counted once for the whole machine, against
//! `perf stat -a` over the same workload, per CPU on request, across
//! reloads, and in `cgperf check`.
//!
//! The exact figure comes from a marker no other process makes:
//! `getpriority(7, 0)` (no such `which`; the kernel refuses it after the
//! tracepoint fired), counted by `syscalls:sys_enter_getpriority` filtered
//! on `which == 7`. Everything else a whole machine counts is compared as
//! a rate: CPU time per second of wall time, TSC ticks per CPU second.

mod common;

use common::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The marker's `which`.
const MARKER_WHICH: i32 = 7;

/// The marker counts for the whole machine: tests that make it take turns.
fn alone() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `n` `getpriority(7, 0)` calls in a child.
fn markers(n: u64) {
    getpriority_calls(&[(MARKER_WHICH, n)]);
}

/// `getpriority(which, 0)` calls in a child: `n` for each `(which, n)`.
fn getpriority_calls(calls: &[(i32, u64)]) {
    in_child(None, || {
        for &(which, n) in calls {
            for _ in 0..n {
                // SAFETY: a raw syscall without memory arguments.
                unsafe { libc::syscall(libc::SYS_getpriority, which, 0) };
            }
        }
    });
}

/// `trips` round trips through two pipes between this process and a child:
/// at least two context switches each.
fn ping_pong(trips: u32) {
    let mut there = [0; 2];
    let mut back = [0; 2];
    // SAFETY: pipe writes two descriptors into the arrays we own.
    unsafe {
        assert_eq!(libc::pipe(there.as_mut_ptr()), 0);
        assert_eq!(libc::pipe(back.as_mut_ptr()), 0);
    }
    // SAFETY: the child makes raw syscalls only, then _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    let mut byte = 0u8;
    let one = (&mut byte as *mut u8).cast();
    if pid == 0 {
        unsafe {
            for _ in 0..trips {
                if libc::read(there[0], one, 1) != 1 || libc::write(back[1], one, 1) != 1 {
                    libc::_exit(2);
                }
            }
            libc::_exit(0);
        }
    }
    for _ in 0..trips {
        // SAFETY: one byte through the pipes we made.
        unsafe {
            assert_eq!(libc::write(there[1], one, 1), 1);
            assert_eq!(libc::read(back[0], one, 1), 1);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our child, closing our descriptors.
    unsafe {
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        for fd in there.into_iter().chain(back) {
            libc::close(fd);
        }
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
}

const CONFIG: &str = "interval: 200ms
host:
  groups:
    machine: [cpu-clock, context-switches]
    tsc: [msr/tsc/]
  tracepoints:
    - name: syscalls:sys_enter_getpriority
      filter: \"which == 7\"
      as: marker
";

fn host(body: &str, group: &str, event: &str) -> f64 {
    let family = match event {
        "cpu-clock" => "cgperf_host_clock_seconds_total",
        _ => "cgperf_host_events_total",
    };
    value(body, family, &[("group", group), ("event", event)])
        .unwrap_or_else(|| panic!("no host series {group}/{event}:\n{body}"))
}

fn collected_at(body: &str) -> f64 {
    value(body, "cgperf_last_collection_timestamp_seconds", &[]).expect("a collection time")
}

/// One figure of `perf stat -x,` output: the value of the line for `event`.
fn perf_figure(out: &str, event: &str) -> f64 {
    out.lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            (fields.get(2) == Some(&event)).then(|| fields[0].parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {event} in perf stat's output:\n{out}"))
}

#[test]
fn the_host_counts_what_perf_stat_a_counts() {
    require_root("count system-wide");
    let _turn = alone();
    let exporter = Exporter::start(Some(CONFIG));
    let before = exporter.wait_collections(2);
    // perf stat -a over a window inside cgperf's; the workload runs
    // inside perf's window.
    let perf = Command::new("perf")
        .args(["stat", "-a", "-x,", "-e", "syscalls:sys_enter_getpriority"])
        .args([
            "--filter",
            "which == 7",
            "-e",
            "msr/tsc/,cpu-clock,context-switches",
        ])
        .args(["--", "sleep", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perf runs (the tests install linux-perf)");
    std::thread::sleep(Duration::from_millis(500));
    markers(12_345);
    ping_pong(2_000);
    let out = perf.wait_with_output().expect("perf stat ends");
    let perf_out = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{perf_out}");
    let after = exporter.wait_collections(2);
    let delta = |group: &str, event: &str| host(&after, group, event) - host(&before, group, event);
    let wall = collected_at(&after) - collected_at(&before);

    // The marker: exact, in both.
    assert_eq!(delta("tracepoints", "marker"), 12_345.0, "{after}");
    assert_eq!(
        perf_figure(&perf_out, "syscalls:sys_enter_getpriority"),
        12_345.0
    );

    // cpu-clock system-wide runs on every CPU all the time: one CPU second
    // per CPU per second, in both.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let ours = delta("machine", "cpu-clock") / wall;
    assert!(
        (ours / cpus - 1.0).abs() < 0.05,
        "cgperf: {ours} CPUs busy of {cpus}"
    );
    let perf_cpu_seconds = perf_figure(&perf_out, "cpu-clock") / 1e3;
    let theirs = perf_cpu_seconds / 2.0;
    assert!(
        (theirs / cpus - 1.0).abs() < 0.05,
        "perf: {theirs} of {cpus}\n{perf_out}"
    );

    // TSC ticks per CPU second: the TSC's rate, the same in both.
    let ours = delta("tsc", "msr/tsc/") / delta("machine", "cpu-clock");
    let theirs = perf_figure(&perf_out, "msr/tsc/") / perf_cpu_seconds;
    assert!(
        (ours / theirs - 1.0).abs() < 0.02,
        "TSC per CPU second: cgperf {ours}, perf {theirs}"
    );

    eprintln!(
        "busy CPUs by cpu-clock: cgperf {:.4}, perf {:.4} (of {cpus}); TSC per CPU second: \
         cgperf {ours:.0}, perf {theirs:.0} (cgperf/perf {:.5}); context switches: cgperf {}, \
         perf {} (cgperf's window is the wider)",
        delta("machine", "cpu-clock") / wall,
        perf_cpu_seconds / 2.0,
        ours / theirs,
        delta("machine", "context-switches"),
        perf_figure(&perf_out, "context-switches"),
    );
    // The group's times: enabled on every CPU all along, always on its
    // counters (software events), per group without an event label.
    let time = |body: &str, family: &str| {
        value(body, family, &[("group", "machine")])
            .unwrap_or_else(|| panic!("no {family} of machine:\n{body}"))
    };
    let enabled = |b: &str| time(b, "cgperf_host_group_enabled_seconds_total");
    let running = |b: &str| time(b, "cgperf_host_group_running_seconds_total");
    let enabled_per_second = (enabled(&after) - enabled(&before)) / wall;
    assert!(
        (enabled_per_second / cpus - 1.0).abs() < 0.05,
        "enabled {enabled_per_second} CPU seconds a second, of {cpus}"
    );
    assert_eq!(running(&after), enabled(&after));
    assert_eq!(
        time(&after, "cgperf_host_group_never_ran_intervals_total"),
        0.0
    );

    // The ping-pong switched at least twice a round trip, in both.
    assert!(delta("machine", "context-switches") >= 4_000.0, "{after}");
    assert!(
        perf_figure(&perf_out, "context-switches") >= 4_000.0,
        "{perf_out}"
    );

    // What Prometheus reads: valid, and no cgroup label anywhere in the
    // host's families.
    common::prometheus::promtool_check(&after);
    for line in after.lines().filter(|l| l.starts_with("cgperf_host_")) {
        assert!(!line.contains("cgroup="), "{line}");
    }
}

/// Metrics of `host:`: a ratio of two markers (`which` 7 and 8), CPUs busy
/// by system-wide cpu-clock, and a rate of an event only the metric asks
/// for.
const METRICS: &str = "interval: 1s
host:
  groups:
    machine: [cpu-clock]
  tracepoints:
    - {name: syscalls:sys_enter_getpriority, filter: \"which == 7\", as: marker}
    - {name: syscalls:sys_enter_getpriority, filter: \"which == 8\", as: other}
  metrics:
    - name: markers_per_other
      expr: marker / other
    - name: busy_cpus
      expr: cpu-clock / duration_time * 1e9
      description: CPUs busy
    - name: switches_per_second
      expr: context-switches / duration_time * 1e9
";

#[test]
fn host_metrics_are_computed_per_interval_for_the_whole_machine() {
    require_root("count system-wide");
    let _turn = alone();
    let exporter = Exporter::start(Some(METRICS));
    let metric = |body: &str, name: &str| value(body, "cgperf_host_metric", &[("metric", name)]);
    let collections = |body: &str| value(body, "cgperf_collections_total", &[]);
    // 3,000 markers and 1,000 others, all within one interval (tried again
    // when a collection fell among them): the metric is the ratio of that
    // interval's counts, exactly.
    let mut ratio = None;
    for _ in 0..5 {
        let before = exporter.wait_collections(1);
        getpriority_calls(&[(MARKER_WHICH, 3_000), (8, 1_000)]);
        let after = exporter.wait_collections(1);
        let grew =
            |event: &str| host(&after, "tracepoints", event) - host(&before, "tracepoints", event);
        assert_eq!((grew("marker"), grew("other")), (3_000.0, 1_000.0));
        if collections(&after) == collections(&before).map(|n| n + 1.0) {
            ratio = Some(metric(&after, "markers_per_other"));
            common::prometheus::promtool_check(&after);
            break;
        }
    }
    assert_eq!(ratio, Some(Some(3.0)), "no interval held all the calls");
    // An interval without either marker divides by zero: no value, not 0
    // or NaN.
    let quiet = exporter.wait_collections(1);
    assert_eq!(metric(&quiet, "markers_per_other"), None, "{quiet}");
    // Clocks are in seconds and duration_time in nanoseconds, as for
    // cgroups: system-wide cpu-clock keeps every CPU busy.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let busy = metric(&quiet, "busy_cpus").expect("busy_cpus has a value");
    assert!(
        (busy / cpus - 1.0).abs() < 0.05,
        "{busy} CPUs busy of {cpus}"
    );
    // An event only the metric names is scheduled in a host group of its
    // own, counted for the whole machine like the others.
    host(&quiet, "metric:switches_per_second", "context-switches");
    assert!(metric(&quiet, "switches_per_second").is_some_and(|r| r > 0.0));
    // The definitions are described once each, with the cgroups' metrics.
    let info = |name: &str| {
        quiet
            .lines()
            .filter(|l| {
                l.starts_with("cgperf_metric_definition_info{")
                    && l.contains(&format!("metric=\"{name}\""))
            })
            .count()
    };
    assert_eq!(info("busy_cpus"), 1, "{quiet}");
    assert!(quiet.contains("description=\"CPUs busy\""), "{quiet}");
    for line in quiet
        .lines()
        .filter(|l| l.starts_with("cgperf_host_metric{"))
    {
        assert!(!line.contains("cgroup="), "{line}");
    }
}

#[test]
fn per_cpu_host_series_split_the_whole_machine_by_cpu() {
    require_root("count system-wide");
    let _turn = alone();
    let yaml = format!("per_cpu: true\n{CONFIG}");
    let exporter = Exporter::start(Some(&yaml));
    let before = exporter.wait_collections(1);
    let on = |body: &str, cpu: &str| {
        let labels = [("event", "marker"), ("cpu", cpu)];
        value(body, "cgperf_host_events_total", &labels)
            .unwrap_or_else(|| panic!("no marker series on cpu {cpu}:\n{body}"))
    };
    pin_and(0, || markers(300));
    pin_and(1, || markers(200));
    let after = exporter.wait_collections(2);
    assert_eq!(on(&after, "0") - on(&before, "0"), 300.0, "{after}");
    assert_eq!(on(&after, "1") - on(&before, "1"), 200.0, "{after}");
    let cpus = after
        .lines()
        .filter(|l| l.starts_with("cgperf_host_clock_seconds_total{"))
        .count();
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(cpus, online, "{after}");
    common::prometheus::promtool_check(&after);
}

/// Runs `work` with this thread pinned to `cpu`, then unpins it.
fn pin_and(cpu: usize, work: impl FnOnce()) {
    // SAFETY: cpu_set_t is plain data; sched_{get,set}affinity write and
    // read the sets we own.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of_val(&old), &mut old),
            0
        );
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0,
            "pinning to CPU {cpu} (the tests need two CPUs)"
        );
        work();
        libc::sched_setaffinity(0, std::mem::size_of_val(&old), &old);
    }
}

/// A config whose host counts the marker in the group `machine`'s company,
/// changed by `more`.
fn reloadable(more: &str) -> String {
    format!(
        "interval: 1s
groups:
  sw: [context-switches]
host:
  groups:
    machine: [context-switches{more}]
  tracepoints:
    - name: syscalls:sys_enter_getpriority
      filter: \"which == 7\"
      as: marker
{extra}",
        extra = if more.is_empty() {
            ""
        } else {
            "    - irq:irq_handler_entry\n"
        }
    )
}

#[test]
fn a_reload_keeps_what_the_host_counted_and_opens_nothing_twice() {
    require_root("count system-wide");
    let _turn = alone();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cgperf.yaml");
    let write = |yaml: &str| {
        let mut f = std::fs::File::create(&path).expect("config");
        f.write_all(with_test_backend(yaml).as_bytes())
            .expect("write");
    };
    write(&reloadable(""));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", path.display()));
    let exporter = Exporter::spawn(cmd);
    let first = exporter.wait_collections(1);
    let fds = value(&first, "cgperf_open_fds", &[]).expect("open fds");
    let switches = host(&first, "machine", "context-switches");
    let reload = |yaml: &str| {
        let loaded = reload_time(&exporter.scrape());
        write(yaml);
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGHUP) }, 0);
        exporter.wait_for("the reload", |b| reload_time(b) > loaded)
    };
    // Counted between two reads, then a reload that changes both the
    // group and the tracepoints' group (a tracepoint more): nothing lost.
    markers(1_001);
    let body = reload(&reloadable(", cpu-migrations"));
    markers(2_002);
    let body2 = exporter.wait_collections(1);
    assert_eq!(host(&body, "tracepoints", "marker"), 1_001.0, "{body}");
    assert_eq!(host(&body2, "tracepoints", "marker"), 3_003.0, "{body2}");
    // The changed group kept the total of the event it still has.
    assert!(
        host(&body2, "machine", "context-switches") >= switches,
        "{body2}"
    );
    host(&body2, "machine", "cpu-migrations");
    host(&body2, "tracepoints", "irq:irq_handler_entry");
    // Back, and back again: the same descriptors as at first.
    reload(&reloadable(""));
    markers(3);
    let body = reload(&reloadable(""));
    assert_eq!(host(&body, "tracepoints", "marker"), 3_006.0, "{body}");
    assert_eq!(value(&body, "cgperf_open_fds", &[]), Some(fds), "{body}");
    assert!(
        value(
            &body,
            "cgperf_host_events_total",
            &[("event", "cpu-migrations")]
        )
        .is_none(),
        "a group's event that went is gone:\n{body}"
    );
    // Without `host:`, its series go; with it again, they start anew.
    let body = reload("groups:\n  sw: [context-switches]\n");
    assert!(!body.contains("cgperf_host_events_total{"), "{body}");
    let body = reload(&reloadable(""));
    assert_eq!(host(&body, "tracepoints", "marker"), 0.0, "{body}");
    assert_eq!(value(&body, "cgperf_open_fds", &[]), Some(fds), "{body}");
}

#[test]
fn check_lists_the_host_and_where_each_group_counts() {
    require_root("probe system-wide");
    let file = config_file(
        "host:\n  groups:\n    tsc: [msr/tsc/]\n    hw: [cycles]\n  \
         tracepoints: [syscalls:sys_enter_getppid, nosuch:thing]\n",
    );
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("host: counted once for the whole machine"),
        "{out}"
    );
    let line = |what: &str| {
        out.lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no line {what}:\n{out}"))
            .to_owned()
    };
    assert!(line("tsc ").contains("ok (on every CPU)"), "{out}");
    assert!(
        line("tracepoints  syscalls:sys_enter_getppid").contains("ok"),
        "{out}"
    );
    assert!(
        line("tracepoints  nosuch:thing").contains("NOT COUNTED"),
        "{out}"
    );
    // Nothing is counted per cgroup: no cgroup table, no selector.
    let host_at = out.find("host: counted once").expect("the host table");
    assert!(!out[..host_at].contains("GROUP"), "{out}");
    assert!(!out.contains("SELECTOR") && !out.contains("path "), "{out}");
    // The last line says the tracepoint is not counted, never "All".
    let last = out.lines().last().expect("a summary");
    assert!(
        !last.starts_with("All ") && last.contains("1 tracepoint or probe is not counted"),
        "{out}"
    );
    // A host with nothing countable is what check exits 3 for.
    let file = config_file("host:\n  tracepoints: [nosuch:thing]\n");
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("nothing can be counted"), "{out}");
}

#[test]
fn a_host_group_that_would_not_fit_the_open_files_limit_is_not_opened_anywhere() {
    require_root("count system-wide");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    // Beside the CPU canaries (one per CPU), room for `big` (8 per CPU) on
    // all CPUs but one, and for `small`: 256 descriptors are kept in
    // reserve.
    let limit = 256 + cpus + 8 * cpus - 1;
    let yaml = "interval: 200ms
host:
  groups:
    big: [cpu-clock, cs, faults, cpu-migrations, minor-faults, major-faults, alignment-faults, emulation-faults]
    small: [cs]
";
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), with_test_backend(yaml)).expect("config");
    let exporter = spawn_with_nofile(file.path(), limit, &[]);
    let body = exporter.wait_collections(2);
    // Not on some CPUs and not others: a sum over some would pass for the
    // whole machine's.
    assert!(
        !body.contains("cgperf_host_events_total{group=\"big\""),
        "{body}"
    );
    host(&body, "small", "context-switches");
    let refused = value(
        &body,
        "cgperf_open_errors_total",
        &[("reason", "too_many_open_files")],
    );
    assert!(refused.is_some_and(|n| n >= 1.0), "{body}");
    assert!(
        exporter
            .log()
            .contains("host group `big` is not opened on CPUs"),
        "{}",
        exporter.log()
    );
}
