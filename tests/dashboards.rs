//! The Grafana dashboard against a real Prometheus: the Debian `prometheus`
//! server scrapes cgperf while workloads run, and every panel expression,
//! with its template variables substituted, goes to Prometheus' query API.

mod common;
// Only this test needs a runtime's names: not compiled into every test.
#[path = "common/cri.rs"]
mod cri;

use common::prometheus::{Prometheus, encode};
use common::*;
use cri::{FakeCri, FakePod};
use serde::Deserialize;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dashboard {
    title: String,
    schema_version: u32,
    templating: Templating,
    panels: Vec<Panel>,
}

#[derive(Deserialize)]
struct Templating {
    list: Vec<Variable>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Variable {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    multi: bool,
    #[serde(default)]
    definition: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Panel {
    title: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    description: String,
    datasource: Option<Datasource>,
    field_config: Option<FieldConfig>,
    #[serde(default)]
    targets: Vec<Target>,
    #[serde(default)]
    transformations: Vec<Transformation>,
}

#[derive(Deserialize)]
struct Transformation {
    id: String,
}

#[derive(Deserialize)]
struct Datasource {
    uid: String,
}

#[derive(Deserialize)]
struct FieldConfig {
    defaults: Defaults,
}

#[derive(Deserialize)]
struct Defaults {
    unit: Option<String>,
    custom: Option<Custom>,
}

#[derive(Deserialize)]
struct Custom {
    stacking: Option<Stacking>,
}

#[derive(Deserialize)]
struct Stacking {
    mode: String,
}

/// Families with one series per cgroup.
const PER_CGROUP: [&str; 7] = [
    "cgperf_events_total",
    "cgperf_metric{",
    "cgperf_events_lost_total",
    "cgperf_clock_seconds_total",
    "cgperf_group_running_seconds_total",
    "cgperf_group_enabled_seconds_total",
    "cgperf_energy_joules_total",
];

/// What the aggregation whose label list starts at `at` (after `by (`)
/// aggregates: its parenthesised argument.
fn aggregated(expr: &str, at: usize) -> &str {
    let rest = &expr[at..];
    let Some(open) = rest.find(") (").map(|i| i + 2) else {
        return "";
    };
    let mut depth = 0;
    for (i, c) in rest[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &rest[open..=open + i];
                }
            }
            _ => {}
        }
    }
    &rest[open..]
}

/// Whether `selection` takes pods' own cgroups only (a `pod_uid`, no
/// `container_id`): pods never nest, so their sum counts nothing twice.
fn pods_only(selection: &str) -> bool {
    selection.contains("pod_uid!=\"\"") && selection.contains("container_id=\"\"")
}

#[derive(Deserialize)]
struct Target {
    expr: String,
    #[serde(rename = "legendFormat")]
    legend_format: Option<String>,
    format: Option<String>,
    instant: Option<bool>,
}

/// The `topdown:` group (under `groups:`) and the four `tma_*` metrics
/// (under `metrics:`) of config/topdown-intel.yaml, as its text writes
/// them: the group is the lines from `  topdown:` to the next group, the
/// metrics every entry of `metrics:` but IPC.
fn topdown_config() -> (String, String) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/topdown-intel.yaml");
    let text = std::fs::read_to_string(path).expect("config/topdown-intel.yaml");
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| *l == "  topdown:")
        .expect("a `topdown:` group");
    let group: Vec<&str> = lines[start..]
        .iter()
        .take_while(|l| *l == &"  topdown:" || l.starts_with("    - "))
        .copied()
        .collect();
    let metrics_at = lines
        .iter()
        .position(|l| *l == "metrics:")
        .expect("a `metrics:` section, last");
    let mut metrics = String::new();
    for entry in lines[metrics_at + 1..].split_inclusive(|l| l.starts_with("    unit:")) {
        if entry.iter().any(|l| l.contains("name: tma_")) {
            for line in entry {
                metrics.push_str(line);
                metrics.push('\n');
            }
        }
    }
    assert_eq!(metrics.matches("name: tma_").count(), 4, "{metrics}");
    (group.join("\n") + "\n", metrics)
}

#[test]
fn the_topdown_panel_shows_the_metrics_of_the_topdown_config() {
    let config = cgperf::config::parse(
        "config/topdown-intel.yaml",
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/topdown-intel.yaml"
        ))
        .expect("config/topdown-intel.yaml"),
    )
    .unwrap_or_else(|e| panic!("config/topdown-intel.yaml: {e}"));
    let mut names: Vec<&str> = config
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .filter(|n| n.starts_with("tma_"))
        .collect();
    names.sort_unstable();
    let d = dashboard();
    let panel = d
        .panels
        .iter()
        .find(|p| p.title.starts_with("Top-down level 1"))
        .expect("a top-down panel");
    let expr = &panel.targets[0].expr;
    let selected = expr
        .split("metric=~\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a metric selector");
    let mut shown: Vec<&str> = selected.split('|').collect();
    shown.sort_unstable();
    assert_eq!(shown, names);
    // The group is led by slots, as the kernel requires of top-down events.
    let topdown = config
        .groups
        .iter()
        .find(|g| g.name == "topdown")
        .expect("a topdown group");
    assert_eq!(
        topdown.events.first().map(|e| e.text.as_str()),
        Some("cpu/slots/")
    );
}

fn dashboard() -> Dashboard {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboards/cgperf.json");
    let text = std::fs::read_to_string(path).expect("dashboard file");
    serde_saphyr::from_str(&text).expect("the dashboard is valid JSON")
}

#[test]
fn dashboard_is_well_formed_for_grafana() {
    let d = dashboard();
    assert!(!d.title.is_empty() && d.schema_version >= 36);
    let var = |name: &str| {
        d.templating
            .list
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("no ${name}"))
    };
    assert_eq!(var("datasource").kind, "datasource");
    for name in ["instance", "namespace", "pod", "cgroup"] {
        assert!(var(name).multi, "${name} is multi-select");
    }
    for p in d.panels.iter().filter(|p| p.kind != "row") {
        assert!(!p.description.is_empty(), "{}: no description", p.title);
        let unit = p
            .field_config
            .as_ref()
            .and_then(|f| f.defaults.unit.as_deref());
        assert!(unit.is_some_and(|u| !u.is_empty()), "{}: no unit", p.title);
        assert_eq!(
            p.datasource.as_ref().map(|d| d.uid.as_str()),
            Some("${datasource}"),
            "{}",
            p.title
        );
        assert!(!p.targets.is_empty(), "{}: no query", p.title);
        let per_cgroup = p
            .targets
            .iter()
            .any(|t| PER_CGROUP.iter().any(|f| t.expr.contains(f)));
        // A cgroup's counts include its descendants': stacking a parent on
        // its children would count them twice.
        if per_cgroup {
            let stacking = p
                .field_config
                .as_ref()
                .and_then(|f| f.defaults.custom.as_ref())
                .and_then(|c| c.stacking.as_ref())
                .map(|s| s.mode.as_str());
            assert_eq!(stacking, Some("none"), "{}: stacks cgroups", p.title);
        }
        if p.kind == "table" {
            for t in &p.targets {
                assert!(
                    t.format.as_deref() == Some("table") && t.instant == Some(true),
                    "{}: a table of instant values",
                    p.title
                );
            }
            assert!(
                p.transformations.iter().any(|t| t.id == "merge"),
                "{}: its queries merged into one table",
                p.title
            );
        }
        for t in &p.targets {
            // Legends name a cgroup namespace/pod/container, its path only
            // where it has none (the query makes the `name` label).
            let legend = t.legend_format.as_deref().unwrap_or_default();
            assert!(!legend.contains("{{cgroup}}"), "{}: {legend}", p.title);
            if per_cgroup && legend.contains("{{name}}") {
                assert!(t.expr.contains("label_join("), "{}", p.title);
            }
            // On a fleet, the same cgroup on two hosts is two series: every
            // aggregation keeps `instance`, and one of a per-cgroup family
            // never sums over `cgroup` (a panel may show machine-wide
            // series beside per-cgroup ones), but for pods' own cgroups.
            for (i, _) in t.expr.match_indices(" by (") {
                let labels = &t.expr[i + 5..];
                let labels = &labels[..labels.find(')').expect("closed by")];
                assert!(
                    labels.contains("instance"),
                    "{}: by ({labels}) drops instance",
                    p.title
                );
                let argument = aggregated(&t.expr, i + 5);
                let per_cgroup = PER_CGROUP.iter().any(|f| argument.contains(f));
                if per_cgroup && !pods_only(argument) {
                    assert!(
                        labels.contains("cgroup"),
                        "{}: by ({labels}) adds cgroups together",
                        p.title
                    );
                }
            }
            assert!(
                !t.expr.contains("without"),
                "{}: say what is kept, with by",
                p.title
            );
            // Multi-select variables must be matched with =~.
            for v in ["$instance", "$namespace", "$pod", "$cgroup"] {
                assert!(
                    !t.expr.contains(&format!("=\"{v}\"")),
                    "{}: use =~ for {v}",
                    p.title
                );
            }
        }
    }
}

/// Grafana's template variables as Grafana would expand "All".
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "10s")
        .replace("$instance", ".*")
        .replace("$namespace", ".*")
        .replace("$pod", ".*")
        .replace("$cgroup", ".*")
}

#[test]
fn every_panel_query_is_valid_promql_and_returns_data_where_the_machine_counts() {
    require_root("count cgroups' events for Prometheus to scrape");
    let cg = TestCgroup::create("cgperf-dash");
    // A pod with one container under the test cgroup, as kubelet's
    // cgroupfs driver lays them out, and a runtime that names them: for
    // the energy row's per-pod and per-namespace panels.
    let pid = std::process::id();
    let uid = format!("{pid:08x}-0000-4000-8000-000000000042");
    let id = format!("{pid:064x}");
    let kubepods = TestCgroup::create_under(&cg.rel, "kubepods");
    let qos = TestCgroup::create_under(&kubepods.rel, "besteffort");
    let pod = TestCgroup::create_under(&qos.rel, &format!("pod{uid}"));
    let container = TestCgroup::create_under(&pod.rel, &id);
    let cri = FakeCri::serve(vec![FakePod {
        sandbox: format!("sandbox-{pid}"),
        uid: uid.clone(),
        namespace: "shop".into(),
        name: "web".into(),
        containers: vec![(id.clone(), "app".into())],
    }]);
    // The `by:` entry's filter matches nothing: its lost series exists (0)
    // for the losses panel, and no sample can overflow a ring and fire the
    // samples-lost alert while the machine's other workloads run.
    // With the top-down group and metrics of config/topdown-intel.yaml, as
    // shipped, for the top-down panel; with energy from the model, the
    // meter of machines without one (every machine here).
    let (topdown_group, topdown_metrics) = topdown_config();
    let config = format!(
        "interval: 500ms\ngroups:\n  sched: [task-clock, cs, cpu-migrations, faults]\n  ipc: [cpu-cycles, instructions]\n  cache: [cache-references, cache-misses]\n  branch: [branch-instructions, branch-misses]\n{topdown_group}tracepoints: [sched:sched_switch, syscalls:sys_enter_getppid, {{name: syscalls:sys_enter_getpriority, by: [which], filter: \"which == 99\", as: getpriority_by_which}}]\nmetrics:\n  - {{name: switches_per_cpu_second, expr: cs / task-clock}}\n{topdown_metrics}cgroups:\n  - path: /\n  - path: {}\n  - match: {}/*\n  - match: {}/*/*\nlabels: [kubernetes, containers]\nenergy:\n  meter: model\n  model: {{per: socket, idle_watts: 10, max_watts: 110}}\nhost:\n  groups:\n    energy: [power/energy-pkg/]\n    machine: [cs]\n  metrics:\n    - {{name: host_switches_per_second, expr: cs / duration_time * 1e9}}\nprocesses:\n  - {{name: tests, pid: {}}}\n",
        cg.rel,
        qos.rel,
        qos.rel,
        std::process::id()
    );
    // Two hosts of a fleet: the same cgroup path on each. The config
    // writes perf's aliases: the dashboard finds the events all the same.
    let file = config_file(&config);
    let start = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
        cmd.arg(format!("--config.file={}", file.path().display()))
            .arg(cri.flag());
        Exporter::spawn(cmd)
    };
    let exporter = start();
    let mut second = start();
    let prometheus = Prometheus::start(&[&exporter.addr, &second.addr]);
    // Workloads while Prometheus scrapes, so rates have two points and more.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        spin_workload(&cg.dir, 300);
        spin_workload(&container.dir, 300);
        getppid_workload(Some(&cg.dir), 10_000);
    }
    let pmu = has_hardware_pmu();
    // Intel's top-down events, where the kernel publishes them.
    let topdown = Path::new("/sys/bus/event_source/devices/cpu/events/topdown-retiring").exists();
    // Package energy, where the machine has RAPL.
    let rapl = Path::new("/sys/bus/event_source/devices/power/events/energy-pkg").exists();
    let d = dashboard();
    let mut checked = 0;
    for p in d.panels.iter().filter(|p| p.kind != "row") {
        for t in &p.targets {
            let expr = substitute(&t.expr);
            let (ok, series, body) = prometheus.query(&expr);
            assert!(ok, "{}: invalid query {expr}:\n{body}", p.title);
            let hardware = ["instructions", "cycles", "cache-", "branch"]
                .iter()
                .any(|e| expr.contains(&format!("event=\"{e}")));
            if expr.contains("cgperf_host_energy") {
                assert_eq!(series > 0, rapl, "{}: {expr}:\n{body}", p.title);
                checked += 1;
                continue;
            }
            if expr.contains("metric=~\"tma_") {
                assert_eq!(series > 0, topdown, "{}: {expr}:\n{body}", p.title);
                checked += 1;
                continue;
            }
            // Panels that may be empty here: errors that did not happen, OTLP
            // that is not configured, unsupported groups where all are
            // supported.
            let may_be_empty = ["errors", "otlp", "_supported"]
                .iter()
                .any(|m| expr.contains(m));
            if !may_be_empty && (!hardware || pmu) {
                assert!(series > 0, "{}: no data for {expr}:\n{body}", p.title);
            }
            if hardware && !pmu {
                assert_eq!(
                    series, 0,
                    "{}: hardware data on a machine without PMU?",
                    p.title
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} queries");
    // Unsupported groups show up exactly when the machine has no PMU.
    let (_, unsupported, _) = prometheus.query("cgperf_group_supported == 0");
    assert_eq!(unsupported > 0, !pmu);
    // The template variables' queries find the cgroup.
    for v in d.templating.list.iter().filter(|v| v.kind == "query") {
        let expr = substitute(&v.definition);
        let (label, selector) = expr
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.rsplit_once(", "))
            .map(|(sel, label)| (label.to_string(), sel.to_string()))
            .expect("label_values(selector, label)");
        let (_, body) = prometheus.get(&format!(
            "/api/v1/label/{label}/values?match[]={}",
            encode(&selector)
        ));
        assert!(
            body.contains("\"status\":\"success\""),
            "{}: {body}",
            v.name
        );
        if label == "cgroup" {
            assert!(
                body.contains(&format!("\"{}\"", cg.rel)),
                "${} lacks the test cgroup: {body}",
                v.name
            );
        }
    }
    // The shipped recording rules produce series.
    let (_, usage, body) = prometheus.query(&format!(
        "cgroup:cgperf_cpu_usage:rate1m{{cgroup=\"{}\"}} > 0",
        cg.rel
    ));
    assert_eq!(usage, 2, "one series per host: {body}");
    let (_, ipc, _) = prometheus.query("cgroup:cgperf_ipc:rate1m");
    assert_eq!(ipc > 0, pmu);
    // Energy: the pod, named by the runtime, draws watts on each host, and
    // so does its namespace, by panel and by rule.
    for (what, expr) in [
        (
            "the pod's rule",
            format!(
                "cgroup:cgperf_energy_watts:rate1m{{pod=\"web\", container_id=\"\", cgroup=\"{}\"}} > 0",
                pod.rel
            ),
        ),
        (
            "the namespace's rule",
            "namespace:cgperf_energy_watts:rate1m{namespace=\"shop\"} > 0".to_owned(),
        ),
    ] {
        let (_, series, body) = prometheus.query(&expr);
        assert_eq!(series, 2, "{what}: one series per host: {body}");
    }
    let panel = |title: &str| {
        let p = d
            .panels
            .iter()
            .find(|p| p.title == title)
            .unwrap_or_else(|| panic!("a panel {title}"));
        p.targets
            .iter()
            .map(|t| substitute(&t.expr))
            .collect::<Vec<_>>()
    };
    // The pod's own cgroup, not its container's.
    let (_, _, body) = prometheus.query(&panel("Power per pod")[0]);
    assert_eq!(body.matches("\"name\":\"shop/web\"").count(), 2, "{body}");
    assert!(!body.contains("shop/web/app"), "{body}");
    let (_, _, body) = prometheus.query(&panel("Power per namespace")[0]);
    assert_eq!(body.matches("\"namespace\":\"shop\"").count(), 2, "{body}");
    // The namespace's watts are its one pod's, its container not added.
    let (_, same, body) = prometheus.query(
        "abs(namespace:cgperf_energy_watts:rate1m{namespace=\"shop\"} - on (instance, domain) \
         sum by (instance, domain) (cgroup:cgperf_energy_watts:rate1m{pod=\"web\", container_id=\"\"})) < 1e-9",
    );
    assert_eq!(same, 2, "{body}");
    // The node's meter, and its parts: the pod and the counted cgroups
    // outside pods (the test cgroup's own work, `/`'s) drew power.
    let node = panel("Node power: meter vs pods, the rest and unattributed");
    for part in &node[..3] {
        let (_, series, body) = prometheus.query(&format!("{part} > 0"));
        assert_eq!(series, 2, "{part}: {body}");
    }

    // `/`'s task-clock includes the idle task (it is the number of CPUs on
    // an idle machine): neither the rule nor the panel shows it as usage.
    let (_, root, body) = prometheus.query("cgroup:cgperf_cpu_usage:rate1m{cgroup=\"/\"}");
    assert_eq!(root, 0, "{body}");
    let (_, root_clock, body) =
        prometheus.query("cgperf_clock_seconds_total{cgroup=\"/\", event=\"task-clock\"}");
    assert_eq!(
        root_clock, 2,
        "`/` is counted, only not shown as usage: {body}"
    );
    let cpu_panel = d
        .panels
        .iter()
        .find(|p| p.title == "CPU usage")
        .expect("a CPU usage panel");
    let (_, _, body) = prometheus.query(&substitute(&cpu_panel.targets[0].expr));
    assert!(!body.contains("\"cgroup\":\"/\""), "{body}");
    // A cgroup of no pod is named by its path.
    assert!(body.contains(&format!("\"name\":\"{}\"", cg.rel)), "{body}");
    // A pod's and a container's are named namespace/pod[/container]: the
    // panel's naming around series made up with those labels.
    let expr = &cpu_panel.targets[0].expr;
    let (head, rest) = expr.split_once("label_join(").expect("named by label_join");
    let (_, tail) = rest
        .rsplit_once(", \"name\", \"|\"")
        .expect("label_join's arguments");
    let labelled = |labels: &[(&str, &str)]| {
        labels.iter().fold("vector(1)".to_owned(), |v, (k, val)| {
            format!("label_replace({v}, \"{k}\", \"{val}\", \"\", \"\")")
        })
    };
    for (labels, name) in [
        (
            &[
                ("cgroup", "/kubepods/pod1/c1"),
                ("namespace", "ns"),
                ("pod", "web"),
                ("container", "app"),
            ][..],
            "ns/web/app",
        ),
        (
            &[
                ("cgroup", "/kubepods/pod1"),
                ("namespace", "ns"),
                ("pod", "web"),
            ][..],
            "ns/web",
        ),
        (
            &[("cgroup", "/system.slice/a.service")][..],
            "/system.slice/a.service",
        ),
    ] {
        let named = format!(
            "{head}label_join({}, \"name\", \"|\"{tail}",
            labelled(labels)
        );
        let (ok, series, body) = prometheus.query(&named);
        assert!(ok && series == 1, "{named}: {body}");
        assert!(
            body.contains(&format!("\"name\":\"{name}\"")),
            "{labels:?}: {body}"
        );
    }
    assert_eq!(
        body.matches(&format!("\"cgroup\":\"{}\"", cg.rel)).count(),
        2,
        "{body}"
    );

    // The alerting rules evaluate without error, and fire (pending, as
    // their `for:` has not passed) exactly when their condition holds.
    let (_, rules) = prometheus.get("/api/v1/rules");
    assert_eq!(
        rules.matches("\"type\":\"alerting\"").count(),
        10,
        "{rules}"
    );
    assert_eq!(
        rules.matches("\"type\":\"recording\"").count(),
        6,
        "{rules}"
    );
    assert!(!rules.contains("\"health\":\"err\""), "{rules}");
    let alerts = |name: &str| {
        prometheus
            .query(&format!("ALERTS{{alertname=\"{name}\"}}"))
            .1
    };
    // Hardware groups a machine without a PMU refuses (`not_supported`)
    // are nothing to fix: no alert, whatever the machine.
    for quiet in [
        "CgperfDown",
        "CgperfCountsNothing",
        "CgperfSamplerStalled",
        "CgperfConfigReloadFailed",
        "CgperfGroupUnsupported",
        "CgperfCgroupsSkipped",
        "CgperfSamplesLost",
        "CgperfReadErrors",
        "CgperfCriUnreachable",
        "CgperfOtlpExportFailing",
    ] {
        assert_eq!(alerts(quiet), 0, "{quiet} is active");
    }
    // A host whose exporter stops.
    assert!(second.terminate());
    let deadline = Instant::now() + Duration::from_secs(30);
    while alerts("CgperfDown") != 1 {
        assert!(
            Instant::now() < deadline,
            "CgperfDown did not become active"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The HTTP status of `POST path` with an empty body.
fn post_status(addr: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to prometheus");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in: {response}"))
}

#[test]
fn the_collector_path_names_the_flag_prometheus_needs_to_receive_it() {
    let section = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/otlp.md"))
        .expect("docs/otlp.md");
    let flag = "--web.enable-remote-write-receiver";
    assert!(section.contains(flag), "docs/otlp.md names {flag}");
    let collector = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/otel-collector/config.yaml"
    ))
    .expect("the shipped Collector config");
    assert!(
        collector.contains(":9090/api/v1/write"),
        "the Collector writes to Prometheus' remote-write endpoint"
    );
    // Debian's Prometheus has the flag, and the endpoint answers only with
    // it: 404 without, 400 (an empty write is no valid request) with it.
    let without = Prometheus::start(&["127.0.0.1:1"]);
    assert_eq!(post_status(&without.addr, "/api/v1/write"), 404);
    let with = Prometheus::start_with(&["127.0.0.1:1"], &[flag]);
    assert_eq!(post_status(&with.addr, "/api/v1/write"), 400);
}
