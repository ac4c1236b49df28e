//! The metrics reference (the README's "Metrics" table) against a live
//! `/metrics`: every family cgperf serves is documented with its type and
//! labels, and every documented family is served.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// One documented family: its type and labels.
#[derive(Debug)]
struct Documented {
    kind: String,
    labels: BTreeSet<String>,
}

/// The backquoted words of a table cell.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The README's metrics table: family → its documented type and labels.
fn documented() -> BTreeMap<String, Documented> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a Metrics section");
    let mut out = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').skip(1).map(str::trim).collect();
        assert!(cells.len() >= 4, "{row}");
        let names = quoted(cells[0]);
        let kinds: Vec<&str> = cells[1].split(", ").collect();
        for (i, name) in names.iter().enumerate() {
            let kind = kinds.get(i).or(kinds.last()).expect("a type");
            let kind = if kind.contains("info") { "gauge" } else { kind };
            out.insert(
                name.clone(),
                Documented {
                    kind: kind.to_owned(),
                    labels: quoted(cells[2]).into_iter().collect(),
                },
            );
        }
    }
    out
}

/// The families of a scrape in the classic text format: name → (type,
/// every label name its samples have).
fn served(body: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("name and type");
            out.insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
        } else if !line.starts_with('#') {
            let (name, labels) = line.split_once('{').unwrap_or((line, ""));
            let name = name.split(' ').next().unwrap_or(name);
            let Some((_, names)) = out.get_mut(name) else {
                continue;
            };
            for pair in labels.split("\",") {
                if let Some((label, _)) = pair.split_once("=\"") {
                    names.insert(label.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn every_served_family_is_documented_with_its_type_and_labels_and_nothing_else_is() {
    require_root("count cgroups' events");
    // Something of every kind: a group, a tracepoint counted by field, a
    // tracepoint this kernel lacks (a `reason`), the OTLP push (to nowhere)
    // and cAdvisor's families.
    let config = config_file(
        "interval: 200ms\ngroups:\n  sched: [task-clock, context-switches]\n\
         tracepoints:\n  - {name: raw_syscalls:sys_enter, by: [id], syscall_name: id, as: calls}\n\
         \x20 - sched:no_such_tracepoint\nprobes:\n  - {uprobe: /no/such/binary:main, as: nothing}\n\
         cgroups:\n  - path: /\n",
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()))
        .arg("--compat=cadvisor")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1");
    let exporter = Exporter::spawn(cmd);
    let body = exporter.wait_for("every kind of series", |b| {
        b.contains("cgperf_events_lost_total{") && b.contains("container_perf_events_total{")
    });
    let served = served(&body);
    let documented = documented();
    // The table and the scrape were both read (a parser that finds
    // nothing would pass the comparisons below).
    assert!(documented.len() >= 35, "{documented:?}");
    assert!(served.len() >= 35, "{served:?}");
    // Labels that are values of the config or the machine, not of the
    // family: `by:` fields and the syscall name, and the cgroup's own.
    let variable: BTreeSet<&str> = ["id", "syscall", "cpu"].into();
    for (name, (kind, labels)) in &served {
        let doc = documented
            .get(name)
            .unwrap_or_else(|| panic!("{name} is served but not in the metrics table"));
        assert_eq!(&doc.kind, kind, "{name}'s type");
        for label in labels {
            assert!(
                doc.labels.contains(label)
                    || (name.starts_with("cgperf_events") && variable.contains(label.as_str())),
                "{name}'s label `{label}` is not documented ({:?})",
                doc.labels
            );
        }
    }
    for name in documented.keys() {
        assert!(
            served.contains_key(name),
            "{name} is documented but not served:\n{body}"
        );
    }
}
