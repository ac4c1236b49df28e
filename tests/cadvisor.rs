//! `--compat=cadvisor`: cAdvisor's perf families, as cAdvisor's users query
//! them, from a real kernel through a real Prometheus.

mod common;

use common::prometheus::Prometheus;
use common::*;
use std::process::Command;

const TP: &str = "syscalls:sys_enter_getppid";

/// The labels cAdvisor gives its perf series (kubelet's `/metrics/cadvisor`),
/// in the order it writes them.
const LABELS: [&str; 8] = [
    "container",
    "cpu",
    "event",
    "id",
    "image",
    "name",
    "namespace",
    "pod",
];

/// The label names of a sample line.
fn label_names(line: &str) -> Vec<&str> {
    let inside = line
        .split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map_or("", |(labels, _)| labels);
    inside
        .split("\",")
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .collect()
}

#[test]
fn cadvisors_perf_families_count_exactly_and_answer_its_users_queries() {
    require_root("count a cgroup's events");
    const N: u64 = 4321;
    let cg = TestCgroup::create("cgperf-cadvisor");
    let config = config_file(&format!(
        "interval: 200ms\ngroups:\n  sched: [task-clock, cs]\n  ipc: [cycles, instructions]\n\
         tracepoints: [{TP}]\ncgroups:\n  - path: /\n  - path: {}\n",
        cg.rel
    ));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()))
        .arg("--compat=cadvisor");
    let exporter = Exporter::spawn(cmd);
    let getppid = [("id", cg.rel.as_str()), ("event", TP), ("cpu", "")];
    exporter.wait_for("the test cgroup's cAdvisor series", |b| {
        value(b, "container_perf_events_total", &getppid) == Some(0.0)
    });
    getppid_workload(Some(&cg.dir), N);
    let body = exporter.wait_for("the workload's calls", |b| {
        value(b, "container_perf_events_total", &getppid) == Some(N as f64)
    });

    // Every family cAdvisor exports for core perf events, with its type,
    // help and exactly its labels.
    for (family, kind, help) in [
        (
            "container_perf_events_total",
            "counter",
            "Perf event metric.",
        ),
        (
            "container_perf_events_scaling_ratio",
            "gauge",
            "Perf event metric scaling ratio.",
        ),
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} {kind}\n")),
            "{body}"
        );
        assert!(
            body.contains(&format!("# HELP {family} {help}\n")),
            "{body}"
        );
        let lines: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .collect();
        // task-clock, cs and the tracepoint in both cgroups;
        // cycles and instructions where the machine has a PMU.
        let events = if has_hardware_pmu() { 5 } else { 3 };
        assert_eq!(lines.len(), 2 * events, "{body}");
        for line in lines {
            assert_eq!(label_names(line), LABELS, "{line}");
        }
    }
    // `cs` as the config wrote it, as cAdvisor labels its perf config's
    // events; cgperf's own families say perf's main name.
    let written = [("id", cg.rel.as_str()), ("event", "cs")];
    assert!(
        value(&body, "container_perf_events_total", &written).is_some(),
        "{body}"
    );
    assert!(!body.contains("event=\"context-switches\",id="), "{body}");
    let main = [("cgroup", cg.rel.as_str()), ("event", "context-switches")];
    assert!(
        value(&body, "cgperf_events_total", &main).is_some(),
        "{body}"
    );
    assert!(!body.contains("event=\"cs\"}"), "{body}");
    let ratio = [("id", cg.rel.as_str()), ("event", "task-clock")];
    assert_eq!(
        value(&body, "container_perf_events_scaling_ratio", &ratio),
        Some(1.0),
        "software events are never multiplexed:\n{body}"
    );
    // The clock in nanoseconds, as perf counts it: cgperf's seconds × 1e9.
    let seconds = value(
        &body,
        "cgperf_clock_seconds_total",
        &[("cgroup", cg.rel.as_str()), ("event", "task-clock")],
    )
    .expect("task-clock");
    let nanoseconds = value(&body, "container_perf_events_total", &ratio).expect("task-clock");
    assert!(
        (nanoseconds - seconds * 1e9).abs() <= 1.0,
        "{nanoseconds} ns for {seconds} s"
    );

    // Queries as cAdvisor's perf users write them, unchanged.
    let prometheus = Prometheus::start(&[&exporter.addr]);
    let id = &cg.rel;
    let queries = [
        // Instructions per cycle per container.
        (
            "sum by (namespace, pod, container) (rate(container_perf_events_total{event=\"instructions\"}[1m])) \
             / sum by (namespace, pod, container) (rate(container_perf_events_total{event=\"cycles\"}[1m]))",
            has_hardware_pmu(),
        ),
        // Multiplexed counters (alert on scaling below 1).
        ("container_perf_events_scaling_ratio < 1", false),
        (
            "min by (id, event) (container_perf_events_scaling_ratio)",
            true,
        ),
        // Events per second of one cgroup, summed over CPUs.
        (
            &*format!("sum by (id, event) (rate(container_perf_events_total{{id=\"{id}\"}}[1m]))"),
            true,
        ),
        // cAdvisor without per-CPU metrics writes cpu="".
        (
            "sum by (event) (increase(container_perf_events_total{cpu=\"\"}[1m]))",
            true,
        ),
    ];
    for (query, has_data) in queries {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (ok, series, body) = prometheus.query(query);
            assert!(ok, "{query}: {body}");
            if (series > 0) == has_data {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{query}: expected {} data, last answer {body}",
                if has_data { "some" } else { "no" }
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    let (_, _, answer) = prometheus.query(&format!(
        "container_perf_events_total{{id=\"{id}\", event=\"{TP}\", cpu=\"\"}}"
    ));
    assert!(answer.contains(&format!("\"{N}\"]")), "{answer}");
}

/// The fenced blocks of `lang` in docs/migrating.md.
fn migration_blocks(lang: &str) -> Vec<String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/migrating.md"))
        .expect("docs/migrating.md");
    page.split(&format!("```{lang}\n"))
        .skip(1)
        .filter_map(|b| b.split("```").next().map(str::to_owned))
        .collect()
}

#[test]
fn the_migration_pages_configs_are_valid_here() {
    let configs = migration_blocks("yaml");
    assert_eq!(configs.len(), 2, "the cAdvisor and node_exporter configs");
    for yaml in configs {
        let file = config_file(&yaml);
        let (code, out, err) =
            run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
        // 3: valid, but this machine can count none of it (hardware events
        // without a PMU).
        assert!(
            code == 0 || (code == 3 && !has_hardware_pmu()),
            "exit {code} for\n{yaml}\n{out}{err}"
        );
    }
}

#[test]
fn the_migration_pages_commands_run_as_written() {
    require_root("count cgroups");
    let commands: Vec<String> = migration_blocks("sh")
        .iter()
        .flat_map(|b| b.lines().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    for command in commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        assert_eq!(words[0], "cgperf", "{command}");
        let binary = env!("CARGO_BIN_EXE_cgperf");
        if words[1] == "stat" {
            let out = run(Command::new(binary).args(&words[1..]));
            assert!(out.contains("task-clock"), "{command}: {out}");
            continue;
        }
        // The daemon, on its default address, in a network namespace of
        // its own.
        let mut cmd = Command::new("unshare");
        cmd.args(["--net", "sh", "-ec", "ip link set lo up\nexec \"$@\"", "sh"])
            .arg(binary)
            .args(&words[1..]);
        let exporter = Exporter::spawn_as_given(cmd, true);
        exporter.wait_for("the root cgroup's cAdvisor series", |body| {
            value(
                body,
                "container_perf_events_total",
                &[("id", "/"), ("event", "context-switches"), ("cpu", "")],
            )
            .is_some_and(|n| n > 0.0)
        });
    }
}

/// The rows of the docs/migrating.md table whose header row starts with
/// `header`: each row's cells.
fn migration_table(header: &str) -> Vec<Vec<String>> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/migrating.md"))
        .expect("docs/migrating.md");
    let rows: Vec<Vec<String>> = page
        .lines()
        .skip_while(|l| !l.starts_with(header))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect();
    assert!(rows.len() >= 3, "no table `{header}` in docs/migrating.md");
    rows
}

/// The backquoted words of a cell.
fn quoted(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Every row of both migration tables against a live scrape, through a
/// real Prometheus: each `event="…"` the node_exporter table gives is a
/// series of the root cgroup under the page's own config (or, where this
/// machine cannot count its group, is perf's main name of the event, the
/// one label cgperf exports); each family and label the cAdvisor tables
/// name is served with `--compat=cadvisor`.
#[test]
fn every_row_of_the_migration_tables_is_a_series_cgperf_serves() {
    require_root("count the root cgroup");
    let node_rows = migration_table("| node_exporter | cgperf |");
    let mut events: Vec<String> = Vec::new();
    for row in &node_rows {
        let cell = &row[1];
        for part in cell.split("event=\"").skip(1) {
            events.push(part.split('"').next().expect("a quoted event").to_owned());
        }
    }
    assert!(events.len() >= 30, "{events:?}");
    // The page's config, with the tracepoint its last row adds.
    let yaml = migration_blocks("yaml")
        .into_iter()
        .find(|b| b.contains("per_cpu: true"))
        .expect("the node_exporter config");
    let tracepoints = node_rows
        .iter()
        .find_map(|row| {
            quoted(&row[1])
                .into_iter()
                .find(|q| q.starts_with("tracepoints: "))
        })
        .expect("the tracepoint row's config line");
    let config = config_file(&format!("interval: 200ms\n{yaml}{tracepoints}\n"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()))
        .arg("--compat=cadvisor");
    let exporter = Exporter::spawn(cmd);
    let body = exporter.wait_collections(2);
    let prometheus = Prometheus::start(&[&exporter.addr]);
    let series = |query: &str| {
        let (ok, n, answer) = prometheus.query(query);
        assert!(ok, "{query}: {answer}");
        n
    };
    // Once Prometheus has scraped the collections above, every series of
    // the scrape is there to query.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while series("cgperf_collections_total >= 2") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "Prometheus scraped nothing"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let mut live = 0;
    for event in &events {
        let query = format!("cgperf_events_total{{cgroup=\"/\",event=\"{event}\"}}");
        if series(&query) > 0 {
            live += 1;
            continue;
        }
        // Not served: only because this machine cannot count its group,
        // and then the page still names it as cgperf labels it.
        let parsed = cgperf::events::parse_event(event)
            .unwrap_or_else(|e| panic!("docs/migrating.md: event=\"{event}\": {e}"));
        assert_eq!(
            &parsed.label(),
            event,
            "docs/migrating.md's node_exporter table: cgperf labels `{event}` event=\"{}\"",
            parsed.label()
        );
        let group = yaml
            .lines()
            .find(|l| {
                l.split_once(": [").is_some_and(|(_, list)| {
                    list.trim_end_matches(']')
                        .split(", ")
                        .any(|e| cgperf::events::parse_event(e).is_ok_and(|p| p.label() == *event))
                })
            })
            .and_then(|l| l.trim().split(':').next())
            .unwrap_or_else(|| panic!("no group of the page's config counts {event}"));
        assert_eq!(
            value(&body, "cgperf_group_supported", &[("group", group)]),
            Some(0.0),
            "{event} (group {group}) is countable here but not served:\n{body}"
        );
    }
    // The five software events and the tracepoint count everywhere.
    assert!(live >= 6, "only {live} of {events:?} served");
    // The page's query, as it becomes in cgperf: it has an answer wherever
    // instructions and cycles count, and is a valid query everywhere.
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/migrating.md"))
        .expect("docs/migrating.md");
    let query = page
        .split("\nbecomes\n`")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("docs/migrating.md: the query as it becomes in cgperf");
    assert!(query.contains("cgperf_events_total"), "{query}");
    // Its events are rows of the table, checked above.
    for part in query.split("event=\"").skip(1) {
        let event = part.split('"').next().expect("a quoted event");
        assert!(events.iter().any(|e| e == event), "{query}: {event}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (ok, n, answer) = prometheus.query(query);
        assert!(ok, "{query}: {answer}");
        if (n > 0) == has_hardware_pmu() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{query}: {answer}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }

    // cAdvisor's families and labels, and cgperf's own they map to.
    let mut families = Vec::new();
    for row in migration_table("| cAdvisor | type | cgperf's own | notes |") {
        if row[2] == "not yet" {
            for family in quoted(&row[0]) {
                let name = family.split('{').next().expect("a name");
                assert!(
                    !body.contains(name),
                    "{name} is served, the page says not yet"
                );
            }
            continue;
        }
        for cell in [&row[0], &row[2]] {
            for family in quoted(cell) {
                families.extend(family.split(" / ").map(str::to_owned));
            }
        }
    }
    assert!(families.len() >= 5, "{families:?}");
    for family in &families {
        let (name, labels) = family.split_once('{').unwrap_or((family, ""));
        assert!(
            series(name) > 0,
            "docs/migrating.md names {family}: not served"
        );
        // Labels in brackets are there only with `per_cpu: true`.
        let required = labels.split('[').next().unwrap_or("").trim_end_matches('}');
        for label in required.split(',').filter(|l| !l.is_empty()) {
            has_label(&body, name, label);
        }
    }
    for row in migration_table("| label | cAdvisor | cgperf (`--compat=cadvisor`) |") {
        let names = quoted(&row[0]);
        assert!(!names.is_empty(), "{row:?}");
        for label in names {
            has_label(&body, "container_perf_events_total", label);
        }
    }
}

/// Asserts that `family` has samples in `body`, each with `label`.
fn has_label(body: &str, family: &str, label: &str) {
    let lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .collect();
    assert!(!lines.is_empty(), "no {family} in:\n{body}");
    for line in lines {
        assert!(
            label_names(line).contains(&label),
            "docs/migrating.md: {family} has no label {label}: {line}"
        );
    }
}
