//! Metrics on the real kernel: formulas over tracepoint counts of
//! deterministic workloads in fresh cgroups, per interval, under the
//! backend `scripts/test` asks for.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

/// `getppid` `per` times, then `getpid` once, over and over, in `cgroup`,
/// for `millis` milliseconds.
fn calls_in_ratio(cgroup: &Path, per: u64, millis: i64) {
    in_child(Some(cgroup), || {
        let end = monotonic_millis() + millis;
        while monotonic_millis() < end {
            for _ in 0..1000 {
                for _ in 0..per {
                    // SAFETY: raw syscalls without arguments.
                    unsafe { libc::syscall(libc::SYS_getppid) };
                }
                unsafe { libc::syscall(libc::SYS_getpid) };
            }
        }
    });
}

fn config(cgroup: &str, ratio_expr: &str) -> String {
    format!(
        "interval: 200ms
groups:
  sched: [task-clock, context-switches]
tracepoints:
  - syscalls:sys_enter_getppid
  - {{name: syscalls:sys_enter_getpid, as: getpid}}
metrics:
  - name: getppid_per_getpid
    expr: {ratio_expr}
    description: getppid calls per getpid call
    unit: ratio
  - name: cpu_busy
    expr: task-clock / 0.2
  - name: negated
    expr: task-clock * -1
cgroups:
  - path: {cgroup}
"
    )
}

/// Whether `body` describes `metric` with `description` and `unit`.
fn defines(body: &str, metric: &str, description: &str, unit: &str) -> bool {
    let labels = [
        ("metric", metric),
        ("description", description),
        ("unit", unit),
    ];
    value(body, "cgperf_metric_definition_info", &labels) == Some(1.0)
}

/// Values of `cgperf_metric{metric}` for `cgroup` seen in scrapes while
/// `work` runs on another thread.
fn values_while(
    exporter: &Exporter,
    cgroup: &str,
    metric: &str,
    work: impl FnOnce() + Send,
) -> Vec<f64> {
    let mut seen = Vec::new();
    std::thread::scope(|s| {
        let worker = s.spawn(work);
        while !worker.is_finished() {
            let body = exporter.scrape();
            if let Some(v) = value(
                &body,
                "cgperf_metric",
                &[("cgroup", cgroup), ("metric", metric)],
            ) {
                seen.push(v);
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        worker.join().expect("the workload ran");
    });
    seen
}

#[test]
fn each_interval_has_its_own_ratio_and_an_idle_cgroup_none() {
    require_root("count a workload's syscalls in a fresh cgroup");
    let cg = TestCgroup::create("cgperf-metric-ratio");
    let exporter = Exporter::start(Some(&config(
        &cg.rel,
        "syscalls:sys_enter_getppid / getpid",
    )));
    let body = exporter.wait_collections(2);
    // Described once, with its unit, whatever runs.
    assert!(
        defines(
            &body,
            "getppid_per_getpid",
            "getppid calls per getpid call",
            "ratio"
        ),
        "{body}"
    );
    // Nothing ran in the cgroup yet: 0 / 0 is no value, not 0 or NaN.
    let quiet = [
        ("cgroup", cg.rel.as_str()),
        ("metric", "getppid_per_getpid"),
    ];
    assert_eq!(value(&body, "cgperf_metric", &quiet), None, "{body}");
    assert!(!body.contains("NaN"), "{body}");

    // One getppid per getpid first, so that the lifetime ratio of the
    // totals is far from the next phase's 3.
    let one = values_while(&exporter, &cg.rel, "getppid_per_getpid", || {
        calls_in_ratio(&cg.dir, 1, 1200)
    });
    let three = values_while(&exporter, &cg.rel, "getppid_per_getpid", || {
        calls_in_ratio(&cg.dir, 3, 1500)
    });
    // An interval split between the two phases lies between them; every
    // other one is its phase's ratio, to the call at each end of it.
    let near = |v: f64, want: f64| (v - want).abs() < 0.01;
    assert!(
        one.iter().filter(|v| near(**v, 1.0)).count() >= 3,
        "{one:?}"
    );
    assert!(
        three.iter().filter(|v| near(**v, 3.0)).count() >= 4,
        "each interval of the second phase is 3, never the totals' ratio: {three:?}"
    );
    assert!(
        three.iter().rev().take(3).all(|v| near(*v, 3.0)),
        "{three:?}"
    );
    assert!(
        one.iter()
            .chain(&three)
            .all(|v| *v >= 1.0 - 0.01 && *v <= 3.0 + 0.01),
        "{one:?} {three:?}"
    );
    // Once the cgroup is idle its metric goes away, and its counts stay.
    let idle = exporter.wait_for("the idle cgroup's metric to go", |b| {
        value(b, "cgperf_metric", &quiet).is_none()
    });
    let getppid = getppid_of(&idle, &cg.rel).expect("counted");
    assert!(getppid > 1000.0, "{idle}");
    let busy = [("cgroup", cg.rel.as_str()), ("metric", "cpu_busy")];
    assert_eq!(value(&idle, "cgperf_metric", &busy), Some(0.0), "{idle}");
    // 0 × -1 is exported as 0, never -0.
    let negated = "metric=\"negated\"";
    let line = idle
        .lines()
        .find(|l| l.starts_with("cgperf_metric{") && l.contains(&cg.rel) && l.contains(negated))
        .unwrap_or_else(|| panic!("no negated metric:\n{idle}"));
    let text = line.rsplit(' ').next().unwrap_or_default();
    assert!(text == "0" || text == "0.0", "{line}");
}

#[test]
fn a_reload_between_two_reads_keeps_each_intervals_ratio() {
    require_root("count a workload's syscalls in a fresh cgroup");
    let cg = TestCgroup::create("cgperf-metric-reload");
    let yaml = config(&cg.rel, "syscalls:sys_enter_getppid / getpid");
    let file = config_file(&yaml);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", file.path().display()));
    let exporter = Exporter::spawn(cmd);
    exporter.wait_collections(2);
    calls_in_ratio(&cg.dir, 1, 600);
    // The same metric by another formula, and a group more: the cgroup is
    // reconciled, its totals and its metrics' last totals kept.
    let changed = config(&cg.rel, "d_ratio(syscalls:sys_enter_getppid, getpid)").replace(
        "  sched: [task-clock, context-switches]\n",
        "  sched: [task-clock, context-switches]\n  more: [page-faults]\n",
    );
    std::fs::write(file.path(), changed).expect("rewrite the config");
    let reloaded = reload_time(&exporter.scrape());
    exporter.wait_for("the reload", |b| reload_time(b) > reloaded);
    // Idle since: d_ratio makes that 0 (where `/` has no value).
    let metric = [
        ("cgroup", cg.rel.as_str()),
        ("metric", "getppid_per_getpid"),
    ];
    exporter.wait_for("an idle interval", |b| {
        value(b, "cgperf_metric", &metric) == Some(0.0)
    });
    let three = values_while(&exporter, &cg.rel, "getppid_per_getpid", || {
        calls_in_ratio(&cg.dir, 3, 1500)
    });
    let three: Vec<f64> = three.into_iter().filter(|v| *v != 0.0).collect();
    assert!(three.len() >= 4, "{three:?}");
    assert!(
        three.iter().all(|v| (v - 3.0).abs() < 0.01),
        "after the reload, each interval's own ratio (the first straddles the idle gap, \
         which adds nothing): {three:?}"
    );
}

#[test]
fn cgperf_check_lists_the_metrics_and_what_they_use() {
    let cfg = config_file(&config("/", "syscalls:sys_enter_getppid / getpid"));
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", cfg.path().display())]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().any(|l| l.contains("metric getppid_per_getpid")
            && l.contains("syscalls:sys_enter_getppid / getpid")),
        "{out}"
    );
    // A typo is a config error naming the place and the fix.
    let bad = config_file(&config("/", "syscalls:sys_enter_getppid / getpdi"));
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", bad.path().display())]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(":9:11:"), "{err}");
    assert!(err.contains("did you mean `getpid`?"), "{err}");
}

#[test]
fn cgperf_stat_prints_the_metrics_of_the_run_beside_the_counts() {
    require_root("count a workload's syscalls in a fresh cgroup");
    let cg = TestCgroup::create("cgperf-metric-stat");
    let cfg = config_file(&config("/", "syscalls:sys_enter_getppid / getpid"));
    // Its log goes to a file: a pipe nobody reads before the end would
    // fill and stop cgperf stat mid-run.
    let log = tempfile::NamedTempFile::new().expect("temp file");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg("stat")
        .arg(format!("--config.file={}", cfg.path().display()))
        .args(["-M", "getppid_per_getpid", "-G", &cg.rel, "-I", "100"])
        .stdout(std::process::Stdio::piped())
        .stderr(log.reopen().expect("reopen the log"));
    in_foreground(&mut cmd);
    let mut child = cmd.spawn().expect("cgperf stat starts");
    // The first interval's line: the counters are open, so the workload is
    // counted from its first syscall however long start-up took.
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    while !first.contains("getppid_per_getpid") {
        first.clear();
        let read = std::io::BufRead::read_line(&mut out, &mut first).expect("read");
        assert_ne!(read, 0, "cgperf stat ended early");
    }
    // Exactly 3 getppid per getpid over the run.
    getppid_workload(Some(&cg.dir), 30_000);
    in_child(Some(&cg.dir), || {
        for _ in 0..10_000 {
            // SAFETY: a raw syscall without arguments.
            unsafe { libc::syscall(libc::SYS_getpid) };
        }
    });
    // SAFETY: sends SIGINT to the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut out, &mut stdout).expect("read");
    let done = child.wait().expect("cgperf stat ends");
    let stderr = std::fs::read_to_string(log.path()).expect("the log");
    // Ctrl-C ends the run as it ends perf stat's, after the summary.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&done),
        Some(libc::SIGINT),
        "{stdout}{stderr}"
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line:\n{stdout}"))
            .to_owned()
    };
    assert!(
        line("syscalls:sys_enter_getppid")
            .trim_start()
            .starts_with("30,000 "),
        "{stdout}"
    );
    let metric = line("getppid_per_getpid");
    assert!(metric.trim_start().starts_with("3.00 "), "{stdout}");
    assert!(
        metric.ends_with("# getppid calls per getpid call"),
        "{stdout}"
    );
    // -M chose it: the other metric of the config is not printed.
    assert!(!stdout.contains("cpu_busy"), "{stdout}");
}

#[test]
fn a_metric_alone_counts_what_it_needs() {
    require_root("count a workload's syscalls in a fresh cgroup");
    let cg = TestCgroup::create("cgperf-metric-alone");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms
metrics:
  - name: getppid_per_getpid
    expr: syscalls:sys_enter_getppid / syscalls:sys_enter_getpid
  - name: cpu_seconds_per_switch
    expr: task-clock / context-switches
  - name: getppid_per_second
    expr: syscalls:sys_enter_getppid / (duration_time / 1e9)
  - name: getppid_in_interval
    expr: syscalls:sys_enter_getppid
cgroups:
  - path: {}
",
        cg.rel
    )));
    exporter.wait_collections(2);
    // Each scrape shows one interval: its calls per second, and its calls.
    let mut rates = Vec::new();
    let three = std::thread::scope(|s| {
        let worker = s.spawn(|| calls_in_ratio(&cg.dir, 3, 1200));
        let mut seen = Vec::new();
        while !worker.is_finished() {
            let body = exporter.scrape();
            let metric = |name| {
                value(
                    &body,
                    "cgperf_metric",
                    &[("cgroup", cg.rel.as_str()), ("metric", name)],
                )
            };
            if let Some(v) = metric("getppid_per_getpid") {
                seen.push(v);
            }
            if let (Some(rate), Some(calls)) =
                (metric("getppid_per_second"), metric("getppid_in_interval"))
                && calls > 0.0
            {
                rates.push(rate / calls);
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        worker.join().expect("the workload ran");
        seen
    });
    assert!(
        three.iter().filter(|v| (*v - 3.0).abs() < 0.01).count() >= 3,
        "{three:?}"
    );
    // duration_time is the interval's length: 200 ms, so the rate is five
    // times the interval's calls (to the collection's timing).
    assert!(
        rates.len() >= 3 && rates.iter().all(|r| (4.5..=5.5).contains(r)),
        "rate / calls per interval: {rates:?}"
    );
    let body = exporter.scrape();
    // What the metrics scheduled is counted, and shown, like any count.
    let getppid = getppid_of(&body, &cg.rel).expect("the tracepoint is counted");
    assert!(getppid >= 3000.0, "{body}");
    for event in ["task-clock", "context-switches"] {
        let family = if event == "task-clock" {
            "cgperf_clock_seconds_total"
        } else {
            "cgperf_events_total"
        };
        let want = [
            ("cgroup", cg.rel.as_str()),
            ("group", "metric:cpu_seconds_per_switch"),
            ("event", event),
        ];
        assert!(
            value(&body, family, &want).is_some_and(|v| v > 0.0),
            "{event}: {body}"
        );
    }
    assert_eq!(
        value(
            &body,
            "cgperf_group_supported",
            &[("group", "metric:cpu_seconds_per_switch")]
        ),
        Some(1.0),
        "{body}"
    );
}

/// A perf pmu-events tree for this machine's CPU whose metrics are over
/// tracepoints and software events, which count on every machine: a
/// group `CgperfTest` of two metrics, one of which refers to a third.
fn metric_tables() -> tempfile::TempDir {
    table_tree(
        &[],
        &[(
            "metrics.json",
            r#"[
  {"MetricName": "GETPPID", "MetricExpr": "syscalls:sys_enter_getppid",
   "BriefDescription": "getppid calls"},
  {"MetricName": "getppid_per_getpid", "MetricExpr": "GETPPID / syscalls:sys_enter_getpid",
   "ScaleUnit": "100%", "MetricGroup": "CgperfTest;Syscalls",
   "BriefDescription": "getppid calls per getpid call in percent"},
  {"MetricName": "switches_per_cpu_second", "MetricExpr": "context\\-switches / (task\\-clock / 1e9)",
   "MetricGroup": "CgperfTest", "BriefDescription": "Context switches per second on a CPU"}
]"#,
        )],
    )
}

#[test]
fn metrics_of_the_cpus_tables_are_named_and_computed() {
    require_root("count a workload's syscalls in a fresh cgroup");
    let cg = TestCgroup::create("cgperf-metric-named");
    let tables = metric_tables();
    let tables_arg = format!("--event-tables={}", tables.path().display());
    let cfg = config_file(&format!(
        "interval: 200ms\nmetrics:\n  - CgperfTest\ncgroups:\n  - path: {}\n",
        cg.rel
    ));
    let config_arg = format!("--config.file={}", cfg.path().display());
    // `cgperf check` says what each metric of the group uses.
    let (code, out, err) = run_cgperf(&["check", &tables_arg, &config_arg]);
    assert_eq!(code, 0, "{out}{err}");
    for name in ["getppid_per_getpid", "switches_per_cpu_second"] {
        assert!(
            out.lines().any(|l| l.contains(&format!("metric {name}"))),
            "{out}"
        );
    }
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(&tables_arg).arg(&config_arg);
    let exporter = Exporter::spawn(cmd);
    let body = exporter.wait_collections(2);
    assert!(
        defines(
            &body,
            "getppid_per_getpid",
            "getppid calls per getpid call in percent",
            "percent"
        ),
        "{body}"
    );
    // Three getppid per getpid: 300 %, the table's scale applied, each
    // interval from its own counts.
    let three = values_while(&exporter, &cg.rel, "getppid_per_getpid", || {
        calls_in_ratio(&cg.dir, 3, 1200)
    });
    assert!(
        three.iter().filter(|v| (*v - 300.0).abs() < 1.0).count() >= 3,
        "{three:?}"
    );
    let body = exporter.scrape();
    assert!(
        body.contains("metric=\"switches_per_cpu_second\""),
        "the group's other metric is defined: {body}"
    );
    // Its events are scheduled in a group of their own, as any metric's.
    assert_eq!(
        value(
            &body,
            "cgperf_group_supported",
            &[("group", "metric:switches_per_cpu_second")]
        ),
        Some(1.0),
        "{body}"
    );
    // `cgperf stat -M` takes them by name too, and counts what they use.
    let (code, out, err) = run_cgperf(&[
        &tables_arg,
        "stat",
        "-M",
        "getppid_per_getpid",
        "--",
        "sh",
        "-c",
        "exit 0",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("syscalls:sys_enter_getppid"), "{out}{err}");
    let (code, out, err) = run_cgperf(&[&tables_arg, "stat", "-M", "getppid_per_getpdi", "true"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("did you mean `getppid_per_getpid`?"), "{err}");
    // A misspelt group is a config error with the fix.
    let bad = config_file("metrics:\n  - CgperfTset\n");
    let bad_arg = format!("--config.file={}", bad.path().display());
    let (code, out, err) = run_cgperf(&["check", &tables_arg, &bad_arg]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(":2:5:"), "{err}");
    assert!(err.contains("did you mean `CgperfTest`?"), "{err}");
    // Without the tables, the name is no metric cgperf knows.
    let (code, out, err) = run_cgperf(&["check", &config_arg]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("no metric or metric group `CgperfTest`"),
        "{err}"
    );
}
