//! The exporter as users meet it: the embedded default config, `/metrics` in
//! both formats checked by `promtool`, cgroups appearing and disappearing,
//! the landing page and the command line.

mod common;

use common::prometheus::{promtool_check, promtool_check_metrics};
use common::*;
use std::process::Command;

#[test]
fn the_conventions_of_prometheus_exporters() {
    require_root("count a cgroup");
    let cg = TestCgroup::create("cgperf-conventions");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ngroups:\n  sched: [context-switches, task-clock]\ncgroups:\n  - path: {}\n",
        cg.rel
    )));
    exporter.wait_collections(1);

    // gzip when the scraper accepts it, as Prometheus does.
    let (head, packed) = http_request(
        &exporter.addr,
        "/metrics",
        &[("Accept", "text/plain"), ("Accept-Encoding", "gzip")],
    );
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("content-encoding: gzip") && lower.contains("vary: accept, accept-encoding"),
        "{head}"
    );
    let mut body = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&packed[..]), &mut body)
        .expect("a gzip body");
    assert!(
        body.contains("# TYPE cgperf_events_total counter"),
        "{body}"
    );
    // At least halved: really compressed (a small body of many distinct
    // label values compresses about 3 times, so no tighter bound holds).
    assert!(
        packed.len() * 2 < body.len(),
        "{} -> {}",
        body.len(),
        packed.len()
    );

    // process_* self-metrics, read from /proc for cgperf's own pid.
    let pid = exporter.pid();
    let open_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .count() as f64;
    let shown = value(&body, "process_open_fds", &[]).expect("process_open_fds");
    // cgperf holds its descriptors steadily between collections; one
    // accepted connection may come or go.
    assert!((shown - open_fds).abs() <= 2.0, "{shown} vs {open_fds}");
    assert!(value(&body, "process_max_fds", &[]).expect("max fds") >= shown);
    assert!(value(&body, "process_resident_memory_bytes", &[]).expect("rss") > 1e6);
    assert!(value(&body, "process_virtual_memory_bytes", &[]).expect("vsz") > 1e6);
    assert!(value(&body, "process_cpu_seconds_total", &[]).expect("cpu") >= 0.0);
    let start = value(&body, "process_start_time_seconds", &[]).expect("start time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(
        start > now - 120.0 && start <= now + 1.0,
        "{start} vs {now}"
    );

    // Build info: the revision of this checkout and the toolchain.
    let git = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .expect("git runs");
    let revision = String::from_utf8_lossy(&git.stdout).trim().to_string();
    assert!(
        git.status.success() && revision.len() == 12,
        "this checkout has a git revision"
    );
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("--version")
        .output()
        .expect("rustc runs");
    let rustc = String::from_utf8_lossy(&rustc.stdout)
        .split_whitespace()
        .nth(1)
        .expect("version")
        .to_string();
    assert_eq!(
        value(
            &body,
            "cgperf_build_info",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", &revision),
                ("rustversion", &rustc)
            ]
        ),
        Some(1.0),
        "{body}"
    );

    // Error counters exist at 0 before the first error, for every reason.
    for reason in [
        "not_supported",
        "permission",
        "too_many_open_files",
        "busy",
        "gone",
        "other",
    ] {
        for family in ["cgperf_open_errors_total", "cgperf_read_errors_total"] {
            assert_eq!(
                value(&body, family, &[("reason", reason)]),
                Some(0.0),
                "{family} {reason}"
            );
        }
    }
    assert_eq!(
        value(&body, "cgperf_read_errors_total", &[("reason", "format")]),
        Some(0.0)
    );

    // promtool accepts the classic text; Debian's promtool (2.42) reads
    // only that format and refuses OpenMetrics' `info` type, as docs/metrics.md
    // says; a newer one may accept it.
    promtool_check(&body);
    let (_, openmetrics) = http_get(
        &exporter.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0"),
    );
    let (ok, said) = promtool_check_metrics(&openmetrics);
    assert!(
        ok || said.contains("unknown metric type \"info\""),
        "{said}"
    );
}

#[test]
fn default_config_serves_root_and_top_level_cgroups() {
    let top = TestCgroup::create("cgperf-default-top");
    let exporter = Exporter::start(None);
    exporter.wait_for("root and top-level cgroup series", |b| {
        value(
            b,
            "cgperf_events_total",
            &[("cgroup", "/"), ("event", "sched:sched_switch")],
        )
        .is_some()
            && value(
                b,
                "cgperf_events_total",
                &[("cgroup", &top.rel), ("event", "context-switches")],
            )
            .is_some()
    });
    let body = exporter.wait_for("root cgroup context switches", |b| {
        value(
            b,
            "cgperf_events_total",
            &[("cgroup", "/"), ("event", "context-switches")],
        )
        .unwrap_or(0.0)
            > 0.0
    });
    assert!(
        value(
            &body,
            "cgperf_clock_seconds_total",
            &[("cgroup", "/"), ("event", "task-clock")]
        )
        .is_some()
    );
    assert!(value(&body, "cgperf_group_supported", &[("group", "sched")]) == Some(1.0));
    assert!(value(&body, "cgperf_monitored_cgroups", &[]).unwrap_or(0.0) >= 2.0);
    assert!(value(&body, "cgperf_open_fds", &[]).unwrap_or(0.0) > 0.0);
    promtool_check(&body);
}

#[test]
fn openmetrics_when_asked_text_otherwise() {
    let cg = TestCgroup::create("cgperf-negotiate");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ngroups:\n  sched: [context-switches, task-clock]\ncgroups:\n  - path: {}\n",
        cg.rel
    )));
    exporter.wait_collections(1);
    let (head, body) = http_get(
        &exporter.addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"));
    assert!(body.contains("# TYPE cgperf_events counter"));
    let (head, text) = http_get(&exporter.addr, "/metrics", None);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(text.contains("# TYPE cgperf_events_total counter"));
    promtool_check(&text);
    let (_, landing) = http_get(&exporter.addr, "/", None);
    assert!(landing.contains("href=\"/metrics\""), "{landing}");
    let (head, _) = http_get(&exporter.addr, "/nope", None);
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}

#[test]
fn cgroups_matching_a_glob_appear_and_disappear() {
    let parent = TestCgroup::create("cgperf-glob");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ngroups:\n  sched: [context-switches]\ncgroups:\n  - match: {}/*.service\n",
        parent.rel
    )));
    exporter.wait_collections(1);
    let svc = TestCgroup::create_under(&parent.rel, "web.service");
    let other = TestCgroup::create_under(&parent.rel, "web.scope");
    let has = |b: &str, rel: &str| value(b, "cgperf_events_total", &[("cgroup", rel)]).is_some();
    let body = exporter.wait_for("the new service cgroup", |b| has(b, &svc.rel));
    assert!(!has(&body, &other.rel), "a .scope must not match *.service");
    svc.remove();
    exporter.wait_for("the removed cgroup to vanish", |b| !has(b, &svc.rel));
}

#[test]
fn help_and_version_explain() {
    let (code, out, _) = run_cgperf(&["--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--config.file",
        "--web.listen-address",
        "--web.telemetry-path",
        "--log.level",
        "check",
    ] {
        assert!(out.contains(flag), "--help lacks {flag}:\n{out}");
    }
    let (code, out, _) = run_cgperf(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn listen_addresses_in_node_exporters_forms() {
    require_root("count cgroups while serving");
    // [::1]:PORT serves on IPv6 loopback wherever the kernel has given the
    // loopback device ::1 (every machine of ours does): that is decided from
    // the machine, not from whether cgperf's own way of binding works.
    let if_inet6 = std::fs::read_to_string("/proc/net/if_inet6").unwrap_or_default();
    let has_ipv6_loopback = if_inet6
        .lines()
        .any(|l| l.starts_with("00000000000000000000000000000001"));
    if has_ipv6_loopback {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
        cmd.arg("--web.listen-address=[::1]:0");
        let exporter = Exporter::spawn_as_given(cmd, false);
        assert!(exporter.addr.starts_with("[::1]:"), "{}", exporter.addr);
        assert!(exporter.scrape().contains("cgperf_build_info"));
    } else {
        eprintln!("NOTE: the loopback device has no ::1 here: [::1] not tried");
    }
    // localhost:PORT resolves.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg("--web.listen-address=localhost:0");
    let exporter = Exporter::spawn_as_given(cmd, false);
    assert!(exporter.scrape().contains("cgperf_build_info"));
    // Mistakes are usage errors saying what to write.
    for (given, says) in [
        ("9810", "no port"),
        ("::1:9810", "must be written in brackets"),
        (":99999", "number from 0 to 65535"),
    ] {
        let (code, _, err) = run_cgperf(&[&format!("--web.listen-address={given}")]);
        assert_eq!(code, 2, "{given}: {err}");
        assert!(
            err.contains(says) && err.contains(":PORT"),
            "{given}: {err}"
        );
    }
    // A port in use is named.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("addr");
    let (code, _, err) = run_cgperf(&[&format!("--web.listen-address={addr}")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

#[test]
fn check_reports_each_event() {
    let cfg = config_file(
        "groups:\n  sched: [task-clock, context-switches]\n  hw: [cycles, instructions]\n  msr: [\"msr/tsc/\"]\ntracepoints: [sched:sched_switch, nosuch:thing]\n",
    );
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", cfg.path().display())]);
    assert_eq!(
        code, 0,
        "a valid config exits 0 even when events are unsupported:\n{out}{err}"
    );
    let line = |group: &str, event: &str| {
        out.lines()
            .find(|l| l.split_whitespace().take(2).eq([group, event]))
            .unwrap_or_else(|| panic!("no row {group} {event}:\n{out}"))
            .to_string()
    };
    // Under the bpf backend, the status may carry a note on how it counts.
    let status = |row: String| row.split_whitespace().nth(2).map(str::to_owned);
    assert_eq!(status(line("sched", "task-clock")).as_deref(), Some("ok"));
    assert!(line("msr", "msr/tsc/").ends_with(" ok"), "{out}");
    assert!(line("tracepoints", "sched:sched_switch").ends_with(" ok"));
    let footnote = |row: String| {
        let n = row
            .rsplit_once('[')
            .map(|(_, n)| n.trim_end_matches(']').to_string())
            .expect("a NOT COUNTED row has a footnote");
        out.lines()
            .find(|l| l.starts_with(&format!("[{n}] ")))
            .unwrap_or_else(|| panic!("no footnote {n}:\n{out}"))
            .to_string()
    };
    assert!(
        footnote(line("tracepoints", "nosuch:thing")).contains("unknown tracepoint"),
        "{out}"
    );
    if has_hardware_pmu() {
        assert!(line("hw", "cycles").ends_with(" ok"), "{out}");
    } else {
        assert!(
            footnote(line("hw", "cycles")).contains("no counter"),
            "{out}"
        );
        assert!(line("hw", "(whole").contains("NOT COUNTED"), "{out}");
    }
}

#[test]
fn check_aligns_its_tables_whatever_the_length_of_names() {
    // Column widths come from what the config names: a width past 65,535
    // made the formatting panic.
    let label = "a".repeat(70_000);
    let path = format!("/{}", vec!["y".repeat(200); 350].join("/"));
    let cfg = config_file(&format!(
        "groups:\n  sched: [task-clock]\ntracepoints: [{{name: sched:sched_switch, as: {label}}}]\n\
         cgroups: [{{path: /}}, {{path: {path}}}]\n"
    ));
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", cfg.path().display())]);
    assert_eq!(code, 0, "{err}");
    // Short names stay aligned; the long ones overflow their column.
    assert!(
        out.lines()
            .any(|l| l == "GROUP        EVENT          STATUS"),
        "{}",
        &out[..out.len().min(2000)]
    );
    // (Under the bpf backend, a note on how it counts may follow `ok`.)
    assert!(
        out.lines()
            .any(|l| l.starts_with("sched        task-clock     ok"))
    );
    assert!(
        out.lines()
            .any(|l| l == format!("tracepoints  {label}  ok"))
    );
    assert!(out.lines().any(|l| l == "path  /          1"));
    assert!(out.lines().any(|l| l == format!("path  {path}  0")));
}

#[test]
fn check_without_privileges_names_the_fix() {
    // perf_event_paranoid >= 1 forbids cgroup-mode counting to an
    // unprivileged user: cgperf must say so and how to fix it.
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .expect("perf_event_paranoid")
        .trim()
        .parse()
        .expect("a number");
    assert!(
        paranoid >= 1,
        "this test needs kernel.perf_event_paranoid >= 1 (it is {paranoid})"
    );
    let out = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_cgperf"))
        .arg("check")
        .output()
        .expect("setpriv (util-linux) runs");
    let said = String::from_utf8_lossy(&out.stdout);
    // Nothing of the default config counts without privileges: exit 3.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("sched        task-clock") && said.contains("NOT COUNTED [1]"),
        "{said}"
    );
    assert!(
        said.contains("[1] permission denied")
            && said.contains("CAP_PERFMON")
            && said.contains("perf_event_paranoid"),
        "{said}"
    );
}
