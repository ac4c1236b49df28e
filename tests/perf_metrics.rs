//! cgperf's metrics of perf's own tables, checked against two oracles:
//!
//! - an independent evaluator of perf's formulas
//!   (`tests/reference/perf_metrics.py`, Python written apart from cgperf's
//!   parser), over every metric of every CPU in the tables the installed
//!   `perf` was built from, and in the tables cgperf embeds, on the same
//!   recorded inputs;
//! - `perf list --details metric` on this machine: every metric perf lists
//!   for this CPU is known to cgperf by the same name, in `cgperf list`
//!   too, and its value is what the reference gives for the formula perf
//!   prints.
//!
//! The tables are perf's `tools/perf/pmu-events/arch` from the Debian
//! source package of the installed perf, written by `scripts/perf-tables`
//! (which `scripts/test` runs) to `target/perf-tables`, or where
//! `CGPERF_PERF_TABLES` says.
//!
//! The recorded inputs: every event `N` counted `1 + fnv1a64(N) % 1000003`
//! (the reference computes the same), every literal a fixed value.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cgperf::events::{TableMetric, read_metrics};
use cgperf::metrics::{Catalog, Literals, NamedMetric};
use serde_json::{Map, Value, json};

fn tables_dir() -> PathBuf {
    let dir = std::env::var_os("CGPERF_PERF_TABLES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("target/perf-tables"),
        PathBuf::from,
    );
    assert!(
        dir.join("x86/mapfile.csv").is_file(),
        "no perf tables in {}: run `scripts/perf-tables {}` (scripts/test does), or set \
         CGPERF_PERF_TABLES to perf's tools/perf/pmu-events/arch",
        dir.display(),
        dir.display()
    );
    dir
}

fn reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/perf_metrics.py")
}

/// The recorded count of event `name`.
fn count(name: &str) -> f64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (1 + hash % 1_000_003) as f64
}

/// What cgperf computes for `metric`: its value, `None` (no value), or
/// the error. A literal (`#num_cores`) is an input the formula names, whose
/// value is the machine's when the metric is computed: `literals`' here.
fn evaluate(
    metric: Result<Vec<NamedMetric>, String>,
    literals: &Literals,
) -> Result<Option<f64>, String> {
    let metric = metric?;
    let [metric] = metric.as_slice() else {
        return Err(format!("{} metrics, not one", metric.len()));
    };
    let values: Vec<f64> = metric
        .expr
        .names()
        .iter()
        .map(|n| literals.get(n).unwrap_or_else(|| count(n)))
        .collect();
    Ok(metric.expr.eval(&values))
}

/// Whether cgperf's `ours` is the reference's `theirs`: the same number
/// (to rounding), both no value, or both an error.
fn agrees(ours: &Result<Option<f64>, String>, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Ok(Some(a)), Value::Number(b)) => {
            let b = b.as_f64().unwrap_or(f64::NAN);
            (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
        }
        (Ok(None), Value::Null) => true,
        (Err(_), Value::String(s)) => s.starts_with("error"),
        _ => false,
    }
}

fn run_reference(args: &[&str], literals: &Value, input: Option<&Value>) -> Map<String, Value> {
    let mut child = Command::new("python3")
        .arg(reference())
        .args(args)
        .arg("--literals")
        .arg(literals.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the reference evaluator");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(input) = input {
        stdin
            .write_all(input.to_string().as_bytes())
            .expect("writes to the reference");
    }
    drop(stdin);
    let out = child.wait_with_output().expect("the reference runs");
    assert!(
        out.status.success(),
        "the reference failed: {:?}",
        out.status
    );
    match serde_json::from_slice(&out.stdout) {
        Ok(Value::Object(map)) => map,
        other => panic!("the reference printed no JSON object: {other:?}"),
    }
}

fn literals() -> Literals {
    Literals {
        smt_on: true,
        num_cpus_online: 32.0,
        num_cores: 16.0,
        num_dies: 4.0,
        num_packages: 2.0,
        system_tsc_freq: Some(2.1e9),
        nmi_watchdog: false,
    }
}

fn literals_json(l: &Literals) -> Value {
    let mut map = Map::new();
    for name in [
        "#smt_on",
        "#core_wide",
        "#num_cpus_online",
        "#num_cores",
        "#num_dies",
        "#num_packages",
        "#system_tsc_freq",
    ] {
        if let Some(value) = l.get(name) {
            map.insert(name.into(), json!(value));
        }
    }
    Value::Object(map)
}

/// Compares cgperf's value of every metric of every CPU in the table tree
/// `dir` with the reference's; returns how many were compared and how many
/// had a value.
fn compare_with_reference(dir: &Path) -> (usize, usize) {
    let reference = run_reference(
        &["tables", &dir.display().to_string()],
        &literals_json(&literals()),
        None,
    );
    let mut compared = 0;
    let mut values = 0;
    let mut wrong = Vec::new();
    for (model, theirs) in &reference {
        let Value::Object(theirs) = theirs else {
            panic!("{model}: not an object");
        };
        let list = read_metrics(&dir.join(model)).unwrap_or_else(|e| panic!("{model}: {e}"));
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for metric in &list {
            let n = seen.entry(&metric.name).or_default();
            *n += 1;
            let key = if *n == 1 {
                metric.name.clone()
            } else {
                format!("{}@{}", metric.name, metric.unit.as_deref().unwrap_or(""))
            };
            // References go to the metric of the same core type first.
            let ordered: Vec<TableMetric> = list
                .iter()
                .filter(|o| o.unit == metric.unit)
                .chain(list.iter().filter(|o| o.unit != metric.unit))
                .cloned()
                .collect();
            let catalog = Catalog::new(ordered, literals(), model.clone());
            let ours = evaluate(
                catalog.resolve(&metric.name).map_err(|e| e.to_string()),
                &literals(),
            );
            let Some(expected) = theirs.get(&key) else {
                wrong.push(format!("{model} {key}: not in the reference's output"));
                continue;
            };
            compared += 1;
            if matches!(ours, Ok(Some(_))) {
                values += 1;
            }
            if !agrees(&ours, expected) {
                wrong.push(format!(
                    "{model} {key} = {:?}: cgperf {ours:?}, the reference {expected}",
                    metric.expr
                ));
            }
        }
        assert_eq!(
            theirs.len(),
            list.len(),
            "{model}: the reference and cgperf read different numbers of metrics"
        );
    }
    println!(
        "{}: {compared} metrics of {} CPUs compared, {values} with a value",
        dir.display(),
        reference.len()
    );
    assert!(
        wrong.is_empty(),
        "{} of {compared} metrics differ:\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    (compared, values)
}

#[test]
fn every_metric_of_perfs_tables_evaluates_as_the_reference_does() {
    let (compared, values) = compare_with_reference(&tables_dir());
    assert!(
        compared >= 1000 && values * 10 >= compared * 9,
        "only {compared} metrics compared, {values} with a value: the tables are not perf's"
    );
}

#[test]
fn every_embedded_metric_evaluates_as_the_reference_does() {
    let embedded = Path::new(env!("CARGO_MANIFEST_DIR")).join("event-tables");
    let (compared, values) = compare_with_reference(&embedded);
    assert!(
        compared >= 150 && values == compared,
        "{compared} embedded metrics compared, {values} with a value"
    );
}

/// The metrics `perf list --details metric` prints: (name, formula).
fn perf_list_metrics() -> Vec<(String, String)> {
    let out = Command::new("perf")
        .args(["list", "--details", "metric"])
        .output()
        .expect("perf runs (scripts/test installs linux-perf)");
    assert!(out.status.success(), "perf list failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut metrics: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Metric Groups") {
            break;
        }
        let trimmed = line.trim();
        if line.starts_with("  ") && !line.starts_with("   ") && !trimmed.is_empty() {
            metrics.push((trimmed.to_owned(), Vec::new()));
        } else if let Some(bracketed) = trimmed.strip_prefix('[').and_then(|t| t.strip_suffix(']'))
            && let Some((_, lines)) = metrics.last_mut()
        {
            lines.push(bracketed.to_owned());
        }
    }
    metrics
        .into_iter()
        .map(|(name, lines)| {
            let formula = lines
                .last()
                .unwrap_or_else(|| panic!("perf list printed no formula for {name}"))
                .clone();
            (name, formula)
        })
        .collect()
}

#[test]
fn every_metric_perf_lists_for_this_cpu_is_cgperfs_with_the_same_value() {
    let dir = tables_dir();
    let perf = perf_list_metrics();
    let tables = cgperf::machine::CpuTables::read(Some(&dir)).expect("the tables read");
    let catalog = &tables.metrics;
    if perf.is_empty() {
        assert!(
            catalog.metrics().is_empty(),
            "perf lists no metrics for this CPU, cgperf {}",
            catalog.metrics().len()
        );
        println!("perf lists no metric for this CPU, nor does cgperf: nothing to compare");
        return;
    }
    // Known by name, in `cgperf list` too.
    let listed = Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .arg("--event-tables")
        .arg(&dir)
        .args(["list", "--json", "--all"])
        .output()
        .expect("cgperf list runs");
    assert!(listed.status.success(), "cgperf list: {listed:?}");
    let listed: Vec<Value> = serde_json::from_slice(&listed.stdout).expect("JSON");
    let listed: Vec<&str> = listed
        .iter()
        .filter(|e| e["kind"] == "metric")
        .filter_map(|e| e["name"].as_str())
        .collect();
    let mut input = Map::new();
    for (name, formula) in &perf {
        assert!(
            listed.contains(&name.as_str()),
            "`cgperf list` lacks {name}"
        );
        let metrics = catalog.metrics();
        let (_, table) = metrics
            .iter()
            .find(|(label, _)| label == name)
            .unwrap_or_else(|| panic!("perf lists {name}, which cgperf does not know"));
        // perf 6.1's list leaves the scale out; cgperf's table has it.
        input.insert(
            name.clone(),
            json!({"expr": formula, "scale_unit": table.scale_unit}),
        );
    }
    let theirs = run_reference(
        &["exprs"],
        &literals_json(catalog.literals()),
        Some(&Value::Object(input)),
    );
    let mut values = 0;
    for (name, _) in &perf {
        let ours = evaluate(
            catalog.resolve(name).map_err(|e| e.to_string()),
            catalog.literals(),
        );
        assert!(
            agrees(&ours, &theirs[name]),
            "{name}: cgperf {ours:?}, perf's formula {}",
            theirs[name]
        );
        // An error in both (a literal this machine does not know) agrees.
        values += usize::from(matches!(ours, Ok(Some(_))));
    }
    println!(
        "all {} metrics perf lists for this CPU are cgperf's, with the same values ({values} \
         with a value)",
        perf.len()
    );
    assert!(values * 2 >= perf.len(), "only {values} with a value");
}

/// docs/configuration.md's `named-metrics.yaml` example names metrics of
/// perf's tables by name, and says which CPUs' tables have them: in the
/// tables of the installed perf, every CPU whose tables have all of them
/// (matched in any case, each a metric or a metric group, as cgperf
/// matches a name) is an Intel one, and there are some; the page says
/// so before the example.
#[test]
fn the_named_metrics_example_is_in_intels_tables_as_its_page_says() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .expect("docs/configuration.md");
    let (before, example) = page
        .split_once("```yaml named-metrics.yaml\n")
        .expect("the named-metrics.yaml example");
    let example = example.split("```").next().expect("a block");
    let names: Vec<&str> = example
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.split(" #").next().expect("a name").trim())
        .filter(|l| !l.contains(':'))
        .collect();
    assert!(names.len() >= 2, "{example}");
    let said = before
        .trim_end()
        .rsplit("\n\n")
        .next()
        .expect("the paragraph before");
    assert!(
        said.contains("Intel") && said.contains("--event-tables"),
        "docs/configuration.md does not say before the example that it needs an Intel CPU's \
         tables:\n{said}"
    );
    let dir = tables_dir();
    let mut cpus = Vec::new();
    let mut models = 0;
    for arch in std::fs::read_dir(&dir).expect("the tables") {
        let arch = arch.expect("an entry").path();
        let Ok(mapfile) = std::fs::read_to_string(arch.join("mapfile.csv")) else {
            continue;
        };
        for row in mapfile
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("Family-model"))
        {
            let fields: Vec<&str> = row.split(',').collect();
            let [cpuid, _, model, "core", ..] = fields[..] else {
                continue;
            };
            let Ok(metrics) = read_metrics(&arch.join(model)) else {
                continue;
            };
            models += 1;
            let has = |name: &str| {
                metrics.iter().any(|m| {
                    m.name.eq_ignore_ascii_case(name)
                        || m.groups.iter().any(|g| g.eq_ignore_ascii_case(name))
                })
            };
            if names.iter().all(|n| has(n)) {
                cpus.push(format!("{cpuid} ({})", arch.join(model).display()));
            }
        }
    }
    assert!(models >= 50, "only {models} CPUs' tables read");
    assert!(!cpus.is_empty(), "no CPU's tables have all of {names:?}");
    println!("{} CPUs have {names:?}", cpus.len());
    for cpu in &cpus {
        assert!(
            cpu.starts_with("GenuineIntel-"),
            "{cpu} has all of {names:?}: the page says Intel's CPUs"
        );
    }
}
