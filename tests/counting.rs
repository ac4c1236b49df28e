//! Exact counting on the real kernel: deterministic workloads in fresh
//! cgroups, compared with the known count and with `perf stat -G`.

mod common;

use common::*;

const N: u64 = 123_457;

fn config_for(cgroup: &str) -> String {
    format!(
        "interval: 250ms
groups:
  sched: [task-clock, context-switches, cpu-migrations, page-faults]
  hw: [cycles, instructions]
tracepoints:
  - syscalls:sys_enter_getppid
  - sched:sched_switch
  - nosuch:tracepoint_here
cgroups:
  - path: {cgroup}
"
    )
}

#[test]
fn getppid_in_a_fresh_cgroup_is_counted_exactly() {
    let cg = TestCgroup::create("cgperf-exact");
    let outside = TestCgroup::create("cgperf-exact-outside");
    let exporter = Exporter::start(Some(&config_for(&cg.rel)));
    let tp = [
        ("cgroup", cg.rel.as_str()),
        ("group", "tracepoints"),
        ("event", "syscalls:sys_enter_getppid"),
    ];
    let before = exporter.wait_for("the test cgroup's series", |b| {
        value(b, "cgperf_events_total", &tp).is_some()
    });
    assert_eq!(value(&before, "cgperf_events_total", &tp), Some(0.0));

    getppid_workload(Some(&cg.dir), N);
    // The same work outside the monitored cgroup must add nothing.
    getppid_workload(Some(&outside.dir), N);
    getppid_workload(None, 1000);

    let after = exporter.wait_collections(2);
    assert_eq!(
        value(&after, "cgperf_events_total", &tp),
        Some(N as f64),
        "{after}"
    );

    // The hardware group cannot be opened on a machine without a PMU; it is
    // reported, and everything else keeps counting.
    let hw_supported = value(&after, "cgperf_group_supported", &[("group", "hw")]);
    let pmu = has_hardware_pmu();
    assert_eq!(hw_supported, Some(if pmu { 1.0 } else { 0.0 }), "{after}");
    assert_eq!(
        value(&after, "cgperf_group_supported", &[("group", "sched")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &after,
            "cgperf_event_supported",
            &[("event", "nosuch:tracepoint_here")]
        ),
        Some(0.0)
    );
    assert!(
        value(
            &after,
            "cgperf_clock_seconds_total",
            &[("cgroup", &cg.rel), ("event", "task-clock")]
        )
        .unwrap_or(0.0)
            > 0.0
    );
    // The child may take no page fault once inside the cgroup; the series
    // must exist all the same.
    assert!(
        value(
            &after,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("event", "page-faults")]
        )
        .is_some()
    );
}

/// Parses `perf stat -x,` output: value per event name.
fn perf_stat_values(stderr: &str) -> std::collections::HashMap<String, f64> {
    stderr
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let v = f.first()?.parse::<f64>().ok()?;
            Some((f.get(2)?.to_string(), v))
        })
        .collect()
}

#[test]
fn software_events_and_tracepoints_agree_with_perf_stat() {
    let cg = TestCgroup::create("cgperf-vs-perf");
    let exporter = Exporter::start(Some(&config_for(&cg.rel)));
    let labels = |event: &'static str| [("cgroup", cg.rel.clone()), ("event", event.to_string())];
    let read = |body: &str, metric: &str, event: &'static str| {
        let l = labels(event);
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        value(body, metric, &l).unwrap_or_else(|| panic!("{metric} {event} missing:\n{body}"))
    };
    let before = exporter.wait_for("series", |b| {
        value(b, "cgperf_events_total", &[("cgroup", &cg.rel)]).is_some()
    });

    // perf stat counts the same cgroup system-wide while the workload runs.
    let perf = std::process::Command::new("perf")
        .args([
            "stat",
            "-x,",
            "-a",
            "-e",
            "task-clock,context-switches,page-faults,syscalls:sys_enter_getppid",
            "-G",
        ])
        .arg(format!(
            "{},{},{},{}",
            cg.rel.trim_start_matches('/'),
            cg.rel.trim_start_matches('/'),
            cg.rel.trim_start_matches('/'),
            cg.rel.trim_start_matches('/')
        ))
        .args(["--", "sleep", "3"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("perf is installed (the test script installs linux-perf)");
    std::thread::sleep(std::time::Duration::from_millis(700));
    getppid_workload(Some(&cg.dir), N);
    for _ in 0..5 {
        getppid_workload(Some(&cg.dir), 20_000);
    }
    let out = perf.wait_with_output().expect("perf stat finishes");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf stat failed:\n{stderr}");
    let after = exporter.wait_collections(2);
    let perf = perf_stat_values(&stderr);
    let delta = |metric: &str, event: &'static str| {
        read(&after, metric, event) - read(&before, metric, event)
    };

    let getppid = delta("cgperf_events_total", "syscalls:sys_enter_getppid");
    assert_eq!(getppid, (N + 100_000) as f64);
    assert_eq!(
        perf.get("syscalls:sys_enter_getppid"),
        Some(&getppid),
        "perf stat:\n{stderr}"
    );

    // Page faults of the six short processes: the same faults, counted twice.
    let faults = delta("cgperf_events_total", "page-faults");
    let perf_faults = perf.get("page-faults").copied().unwrap_or(f64::NAN);
    let margin = 0.02 * perf_faults + 5.0;
    assert!(
        (faults - perf_faults).abs() <= margin,
        "cgperf {faults} vs perf {perf_faults}"
    );
    let cs = delta("cgperf_events_total", "context-switches");
    let perf_cs = perf.get("context-switches").copied().unwrap_or(f64::NAN);
    assert!(
        (cs - perf_cs).abs() <= 0.1 * perf_cs + 5.0,
        "cgperf {cs} vs perf {perf_cs}"
    );
    // task-clock: perf prints milliseconds, cgperf exports seconds.
    let clock = delta("cgperf_clock_seconds_total", "task-clock") * 1e3;
    let perf_clock = perf.get("task-clock").copied().unwrap_or(f64::NAN);
    assert!(
        (clock - perf_clock).abs() <= 0.05 * perf_clock + 2.0,
        "cgperf {clock} ms vs perf {perf_clock} ms"
    );
}

#[test]
fn an_event_the_kernel_refuses_disables_its_group_only() {
    let cg = TestCgroup::create("cgperf-refused");
    // Software event id 0x7fff does not exist on any kernel: ENOENT.
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ngroups:\n  broken: [\"software/config=0x7fff/\", context-switches]\n  sched: [context-switches]\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {}\n",
        cg.rel
    )));
    exporter.wait_collections(1);
    getppid_workload(Some(&cg.dir), 777);
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_group_supported", &[("group", "broken")]),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "cgperf_group_supported", &[("group", "sched")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("group", "broken")]
        ),
        None
    );
    assert!(
        value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("group", "sched")]
        )
        .is_some()
    );
    assert_eq!(
        value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("event", "syscalls:sys_enter_getppid")]
        ),
        Some(777.0)
    );
}

#[test]
fn per_cpu_output_adds_a_cpu_label_and_sums_to_the_exact_count() {
    let cg = TestCgroup::create("cgperf-per-cpu");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\nper_cpu: true\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {}\n",
        cg.rel
    )));
    exporter.wait_collections(1);
    getppid_workload(Some(&cg.dir), 5000);
    getppid_workload(Some(&cg.dir), 5000);
    let body = exporter.wait_collections(2);
    let cpus = cgperf::cpus::online().expect("online CPUs");
    let mut total = 0.0;
    for cpu in &cpus {
        let cpu = cpu.to_string();
        let labels = [
            ("cgroup", cg.rel.as_str()),
            ("event", "syscalls:sys_enter_getppid"),
            ("cpu", cpu.as_str()),
        ];
        total += value(&body, "cgperf_events_total", &labels)
            .unwrap_or_else(|| panic!("no series for cpu {cpu}:\n{body}"));
    }
    assert_eq!(total, 10_000.0);
}

#[test]
fn hardware_groups_multiplex_and_scale_or_are_reported_unsupported() {
    let cg = TestCgroup::create("cgperf-multiplex");
    // Four groups of four hardware events: more than any x86 PMU has
    // counters, so the kernel must rotate them.
    let hw = "[cycles, instructions, branches, branch-misses]";
    let exporter = Exporter::start(Some(&format!(
        "interval: 250ms\ngroups:\n  a: {hw}\n  b: {hw}\n  c: {hw}\n  d: {hw}\n  sched: [task-clock]\ncgroups:\n  - path: {}\n",
        cg.rel
    )));
    exporter.wait_collections(1);
    spin_workload(&cg.dir, 1500);
    let body = exporter.wait_collections(2);
    assert!(
        // Other tests share the CPUs: the spinner gets a part of 1.5 s.
        value(&body, "cgperf_clock_seconds_total", &[("cgroup", &cg.rel)]).unwrap_or(0.0) > 0.2,
        "{body}"
    );
    if !has_hardware_pmu() {
        for g in ["a", "b", "c", "d"] {
            assert_eq!(
                value(&body, "cgperf_group_supported", &[("group", g)]),
                Some(0.0),
                "{body}"
            );
        }
        return;
    }
    let mut multiplexed = 0;
    for g in ["a", "b", "c", "d"] {
        let labels = [("cgroup", cg.rel.as_str()), ("group", g)];
        let enabled =
            value(&body, "cgperf_group_enabled_seconds_total", &labels).expect("enabled time");
        let running =
            value(&body, "cgperf_group_running_seconds_total", &labels).expect("running time");
        assert!(
            enabled > 0.2 && running > 0.0 && running <= enabled,
            "{g}: {running}/{enabled}"
        );
        if running < 0.9 * enabled {
            multiplexed += 1;
        }
        let cycles = value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("group", g), ("event", "cycles")],
        )
        .expect("cycles");
        // Scaled to the time the cgroup was on a CPU, the count must look
        // like a clock of some MHz at least, however little CPU the
        // spinner got next to the other tests.
        assert!(
            cycles / enabled > 1e7,
            "{g}: {cycles} cycles in {enabled} s on a CPU"
        );
    }
    assert!(
        multiplexed > 0,
        "16 hardware events were never multiplexed:\n{body}"
    );
}
