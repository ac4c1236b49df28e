//! End-to-end tests of `parse`/`load`: happy paths, and every error with
//! its position, message and hint.

use std::time::Duration;

use super::*;
use crate::events::{parse_event, parse_tracepoint};
use crate::labels::Extractor;

const SOURCE: &str = "test.yaml";

/// A group definition to prepend where a test needs one.
const GROUPS: &str = "groups:\n  ipc: [cycles, instructions]\n  sched: [task-clock]\n";

fn ok(text: &str) -> Config {
    match parse(SOURCE, text) {
        Ok(config) => config,
        Err(e) => panic!("unexpected error for {text:?}:\n{e}"),
    }
}

/// Asserts the error's position, that its message contains every needle,
/// and that its hint contains `hint`.
#[track_caller]
fn check(text: &str, at: Option<(u32, u32)>, message: &[&str], hint: &str) -> ConfigError {
    let err = match parse(SOURCE, text) {
        Ok(config) => panic!("accepted {text:?}: {config:?}"),
        Err(e) => e,
    };
    assert_eq!(err.source_name, SOURCE);
    assert_eq!(err.line.zip(err.column), at, "position of {text:?}:\n{err}");
    for needle in message {
        assert!(
            err.message.contains(needle),
            "message of {text:?} lacks {needle:?}:\n{err}"
        );
    }
    let got = err.hint.as_deref().unwrap_or_default();
    assert!(
        got.contains(hint),
        "hint of {text:?} lacks {hint:?}:\n{err}"
    );
    err
}

fn names(config: &Config) -> Vec<&str> {
    config.groups.iter().map(|g| g.name.as_str()).collect()
}

/// A tracepoint's label as a selector lists it (its name, without `as:`).
fn tp(text: &str) -> String {
    parse_tracepoint(text)
        .expect("valid tracepoint")
        .to_string()
}

/// The labels of the top-level tracepoints.
fn tp_labels(config: &Config) -> Vec<String> {
    config.tracepoints.iter().map(|t| t.label.clone()).collect()
}

// ---- happy paths -------------------------------------------------------

#[test]
fn defaults_apply() {
    let config = ok("groups:\n  ipc: [cycles, instructions]\n");
    assert_eq!(config.interval, Duration::from_secs(1));
    assert!(!config.per_cpu);
    assert!(config.tracepoints.is_empty());
    assert_eq!(config.max_cgroups, None);
    assert!(config.labels.is_empty());
    assert_eq!(
        config.cgroups,
        vec![CgroupSelector {
            pattern: CgroupPattern::Path("/".to_owned()),
            groups: vec!["ipc".to_owned()],
            tracepoints: vec![],
            probes: vec![],
            metrics: vec![],
        }]
    );
    let events: Vec<_> = config.groups[0]
        .events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(events, ["cycles", "instructions"]);
    // `null` means "use the default".
    assert_eq!(
        ok(&format!("{GROUPS}interval: ~\n")).interval,
        Duration::from_secs(1)
    );
    let config = ok(&format!("{GROUPS}max_cgroups: ~\nlabels: ~\n"));
    assert_eq!(config.max_cgroups, None);
    assert!(config.labels.is_empty());
}

#[test]
fn spec_example_parses_and_resolves_in_config_order() {
    let config = ok(r#"
interval: 250ms
per_cpu: true
groups:
  ipc:   [cycles, instructions]
  sched: [task-clock, context-switches, cpu-migrations, page-faults]
  msr:   ["msr/tsc/"]
tracepoints:
  - sched:sched_switch
  - syscalls:sys_enter_openat
cgroups:
  - path: /
  - match: /system.slice/*.service
    groups: [sched, ipc]
    tracepoints: [syscalls:sys_enter_openat, sched:sched_switch]
  - match: /user.slice/**
    groups: [msr]
    tracepoints: []
"#);
    assert_eq!(config.interval, Duration::from_millis(250));
    assert!(config.per_cpu);
    assert_eq!(names(&config), ["ipc", "sched", "msr"]);
    let all_tp = vec![tp("sched:sched_switch"), tp("syscalls:sys_enter_openat")];
    assert_eq!(tp_labels(&config), all_tp);
    assert_eq!(config.cgroups.len(), 3);
    assert_eq!(config.cgroups[0].groups, ["ipc", "sched", "msr"]);
    assert_eq!(config.cgroups[0].tracepoints, all_tp);
    // Written as [sched, ipc] and in reverse tracepoint order; resolved in config order.
    assert_eq!(
        config.cgroups[1].pattern.as_str(),
        "/system.slice/*.service"
    );
    assert_eq!(config.cgroups[1].groups, ["ipc", "sched"]);
    assert_eq!(config.cgroups[1].tracepoints, all_tp);
    assert_eq!(config.cgroups[2].groups, ["msr"]);
    assert!(config.cgroups[2].tracepoints.is_empty());
    assert!(
        config.cgroups[1]
            .pattern
            .matches("/system.slice/cron.service")
    );
    assert!(
        !config.cgroups[1]
            .pattern
            .matches("/system.slice/a/b.service")
    );
    assert!(
        config.cgroups[2]
            .pattern
            .matches("/user.slice/user-0.slice/session-1.scope")
    );
}

#[test]
fn tracepoints_alone_are_enough() {
    let config = ok("tracepoints: [sched:sched_switch]\n");
    assert!(config.groups.is_empty());
    assert_eq!(config.cgroups[0].tracepoints, [tp("sched:sched_switch")]);
    let config = ok("groups: {}\ntracepoints: [sched:sched_switch]\n");
    assert!(config.groups.is_empty());
}

#[test]
fn selector_with_only_tracepoints_or_only_groups() {
    let config = ok(&format!(
        "{GROUPS}tracepoints: [sched:sched_switch]\ncgroups:\n  - path: /a\n    groups: []\n  - path: /b\n    tracepoints: []\n"
    ));
    assert!(config.cgroups[0].groups.is_empty());
    assert_eq!(config.cgroups[0].tracepoints, [tp("sched:sched_switch")]);
    assert_eq!(config.cgroups[1].groups, ["ipc", "sched"]);
    assert!(config.cgroups[1].tracepoints.is_empty());
}

#[test]
fn paths_and_globs_are_normalized() {
    let config = ok(&format!(
        "{GROUPS}cgroups:\n  - path: //system.slice//cron.service/\n  - match: /kubepods.slice//**/\n"
    ));
    assert_eq!(
        config.cgroups[0].pattern,
        CgroupPattern::Path("/system.slice/cron.service".to_owned())
    );
    assert_eq!(config.cgroups[1].pattern.as_str(), "/kubepods.slice/**");
    assert!(config.cgroups[1].pattern.matches("/kubepods.slice/a/b"));
}

#[test]
fn interval_table() {
    let table = [
        ("100ms", Duration::from_millis(100)),
        ("0.1s", Duration::from_millis(100)),
        ("250ms", Duration::from_millis(250)),
        ("1s", Duration::from_secs(1)),
        ("1.5s", Duration::from_millis(1500)),
        ("2m", Duration::from_secs(120)),
        ("60m", Duration::from_secs(3600)),
        ("1h", Duration::from_secs(3600)),
    ];
    for (text, want) in table {
        assert_eq!(
            ok(&format!("{GROUPS}interval: {text}\n")).interval,
            want,
            "{text}"
        );
    }
}

#[test]
fn embedded_default_config_parses() {
    let config = default_config().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.interval, Duration::from_secs(1));
    assert!(!config.per_cpu);
    assert_eq!(names(&config), ["sched", "ipc", "cache", "branch"]);
    let tracepoints = tp_labels(&config);
    assert_eq!(
        tracepoints,
        [
            "sched:sched_switch",
            "sched:sched_wakeup",
            "sched:sched_process_exec",
            "sched:sched_process_fork"
        ]
    );
    let patterns: Vec<&str> = config.cgroups.iter().map(|c| c.pattern.as_str()).collect();
    assert_eq!(patterns, ["/", "/*"]);
    // The two selectors do not overlap: root only, then top-level cgroups only.
    assert!(config.cgroups[0].pattern.matches("/"));
    assert!(!config.cgroups[1].pattern.matches("/"));
    assert!(config.cgroups[1].pattern.matches("/system.slice"));
    assert!(
        !config.cgroups[1]
            .pattern
            .matches("/system.slice/cron.service")
    );
    for selector in &config.cgroups {
        assert_eq!(selector.groups.len(), 4);
        assert_eq!(selector.tracepoints, tracepoints);
    }
    // Every label extractor: they cost nothing where names do not match.
    assert_eq!(config.labels, Extractor::ALL);
    assert_eq!(config.max_cgroups, None);
}

#[test]
fn example_config_parses() {
    let config = ok(include_str!("../../config/example.yaml"));
    assert_eq!(config.interval, Duration::from_secs(5));
    assert_eq!(names(&config), ["sched", "ipc", "cache", "branch", "tsc"]);
    let pods = config
        .cgroups
        .iter()
        .find(|c| c.pattern.as_str().contains("besteffort"))
        .expect("pod selector");
    assert!(
        pods.pattern
            .matches("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice")
    );
    assert!(
        !pods
            .pattern
            .matches("/kubepods.slice/kubepods-burstable.slice")
    );
    let containers = config.cgroups.last().expect("container selector");
    assert!(containers.groups.is_empty());
    assert_eq!(containers.tracepoints, [tp("sched:sched_process_exec")]);
    assert_eq!(config.max_cgroups, Some(5000));
    assert_eq!(config.labels, Extractor::ALL);
    // Nothing the shipped unit cannot give: no probes, no push.
    assert!(config.probes.is_empty());
    assert!(config.otlp.is_none());
}

// ---- errors: types, keys, YAML ------------------------------------------

#[test]
fn wrong_types() {
    check(
        "interval: [1]\n",
        Some((1, 11)),
        &["`interval` must be a duration", "found a list"],
        "interval: 1s",
    );
    check(
        "groups: 3\n",
        Some((1, 9)),
        &["`groups` must be a mapping", "found \"3\""],
        "groups: {ipc:",
    );
    check(
        "per_cpu: maybe\n",
        Some((1, 10)),
        &["`per_cpu` must be `true` or `false`", "\"maybe\""],
        "per_cpu: true",
    );
    // YAML 1.1 booleans are not accepted.
    check(
        "per_cpu: yes\n",
        Some((1, 10)),
        &["\"yes\""],
        "per_cpu: false",
    );
    check(
        "groups:\n  ipc: cycles\n",
        Some((2, 8)),
        &["`groups.ipc` must be a list of events"],
        "even for a single event",
    );
    check(
        "groups:\n  ipc:\n",
        Some((2, 6)),
        &["`groups.ipc`", "found an empty value"],
        "ipc: [cycles",
    );
    check(
        "groups:\n  ipc: [cycles, {a: b}]\n",
        Some((2, 17)),
        &["`groups.ipc[1]` must be an event name", "found a mapping"],
        "perf's syntax",
    );
    check(
        "tracepoints: sched:sched_switch\n",
        Some((1, 14)),
        &["`tracepoints` must be a list"],
        "tracepoints: [sched:sched_switch]",
    );
    check(
        "tracepoints: [[a]]\n",
        Some((1, 15)),
        &["`tracepoints[0]` must be a tracepoint name"],
        "subsystem:name",
    );
    check(
        &format!("{GROUPS}cgroups: /\n"),
        Some((4, 10)),
        &["`cgroups` must be a list"],
        "{path: /}",
    );
    check(
        &format!("{GROUPS}cgroups:\n  - /system.slice\n"),
        Some((5, 5)),
        &[
            "`cgroups[0]` must be a mapping with `path:` or `match:`",
            "\"/system.slice\"",
        ],
        "- path: /system.slice",
    );
    check(
        &format!("{GROUPS}cgroups:\n  - path: [/]\n"),
        Some((5, 11)),
        &["`cgroups[0].path` must be a cgroup path"],
        "/system.slice",
    );
    check(
        &format!("{GROUPS}cgroups:\n  - path: /\n    groups: ipc\n"),
        Some((6, 13)),
        &["`cgroups[0].groups` must be a list of group names"],
        "groups: [sched, ipc]",
    );
    check(
        &format!("{GROUPS}cgroups:\n  - path: /\n    tracepoints: sched:sched_switch\n"),
        Some((6, 18)),
        &["`cgroups[0].tracepoints` must be a list"],
        "tracepoints: [",
    );
    check(
        "- groups\n",
        Some((1, 1)),
        &["the config must be a mapping", "found a list"],
        "interval, per_cpu, groups, tracepoints, probes, ring_pages, cgroups, max_cgroups, labels \
         and otlp",
    );
    check(
        "groups: {[a]: [cycles]}\n",
        Some((1, 10)),
        &["`groups` has a key that is not a name", "found a list"],
        "plain names",
    );
}

#[test]
fn unknown_keys() {
    check(
        "intervall: 1s\n",
        Some((1, 1)),
        &["unknown key \"intervall\" in the top level"],
        "did you mean `interval`? valid keys here: interval, per_cpu, groups, tracepoints, probes, \
         ring_pages, cgroups, max_cgroups, labels",
    );
    check(
        &format!("{GROUPS}max_cgroup: 10\n"),
        Some((4, 1)),
        &["unknown key \"max_cgroup\""],
        "did you mean `max_cgroups`?",
    );
    check(
        &format!("{GROUPS}label: [systemd]\n"),
        Some((4, 1)),
        &["unknown key \"label\""],
        "did you mean `labels`?",
    );
    check(
        &format!("{GROUPS}cgroup:\n  - path: /\n"),
        Some((4, 1)),
        &["unknown key \"cgroup\""],
        "did you mean `cgroups`?",
    );
    check(
        "colour: blue\n",
        Some((1, 1)),
        &["unknown key \"colour\""],
        "valid keys here: interval",
    );
    let err = check(
        &format!("{GROUPS}cgroups:\n  - path: /\n    mach: /x\n"),
        Some((6, 5)),
        &["unknown key \"mach\" in `cgroups[0]`"],
        "valid keys here: path, match, groups, tracepoints",
    );
    assert!(
        err.hint
            .as_deref()
            .unwrap_or_default()
            .starts_with("did you mean `match`?")
    );
}

#[test]
fn duplicate_keys() {
    check(
        &format!("{GROUPS}interval: 1s\ninterval: 2s\n"),
        Some((5, 1)),
        &["duplicate key \"interval\" in the top level"],
        "only once",
    );
    check(
        "groups:\n  ipc: [cycles]\n  ipc: [instructions]\n",
        Some((3, 3)),
        &["duplicate key \"ipc\" in `groups`"],
        "only once",
    );
    check(
        &format!("{GROUPS}cgroups:\n  - path: /a\n    path: /b\n"),
        Some((6, 5)),
        &["duplicate key \"path\" in `cgroups[0]`"],
        "only once",
    );
}

#[test]
fn yaml_syntax_errors_keep_position() {
    check(
        "groups: {ipc: [cycles]\n",
        Some((1, 9)),
        &["invalid YAML"],
        "brackets",
    );
    check(
        "groups:\n  ipc: [cycles]\n   x: 1\n",
        Some((3, 4)),
        &["invalid YAML"],
        "indentation",
    );
    check(
        "groups:\n\tipc: [cycles]\n",
        Some((2, 2)),
        &["invalid YAML", "tabs"],
        "spaces, not tabs",
    );
    check(
        &format!("{GROUPS}cgroups: [{{path: *nowhere}}]\n"),
        Some((4, 18)),
        &["invalid YAML", "unknown anchor"],
        "",
    );
    check(
        &format!("{GROUPS}---\n{GROUPS}"),
        Some((5, 1)),
        &["a single YAML document"],
        "`---`",
    );
}

#[test]
fn aliases_are_reported_where_used() {
    check(
        "groups:\n  ipc: &events [cycles]\ncgroups:\n  - path: *events\n",
        Some((4, 11)),
        &["`cgroups[0].path` must be a cgroup path", "found an alias"],
        "/system.slice",
    );
    // Plain, type-correct aliases work.
    let config = ok("groups:\n  a: &e [cycles, instructions]\n  b: *e\n");
    assert_eq!(config.groups[1].events.len(), 2);
}

#[test]
fn billion_laughs_is_rejected_quickly() {
    let mut bomb = String::from("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
    {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    // At the top level, and nested where the schema expects lists.
    let nested: String = bomb.lines().map(|l| format!("  {l}\n")).collect();
    for doc in [bomb.clone(), format!("groups:\n{nested}")] {
        let err = parse(SOURCE, &doc).expect_err("bomb rejected");
        assert!(err.line.is_some(), "{err}");
    }
}

#[test]
fn deep_nesting_is_refused_as_such() {
    for doc in [
        format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
        format!(
            "{GROUPS}cgroups: {}{}\n",
            "[".repeat(10_000),
            "]".repeat(10_000)
        ),
        format!("{GROUPS}cgroups: {}{}\n", "[".repeat(40), "]".repeat(40)),
    ] {
        let err = parse(SOURCE, &doc).expect_err("too deep");
        assert!(
            err.message
                .contains("nests lists and mappings more than 32 levels deep"),
            "{err}"
        );
        let hint = err.hint.as_deref().unwrap_or_default();
        assert!(
            hint.contains("a few levels") && !hint.contains("tabs"),
            "{err}"
        );
        assert!(err.line.is_some(), "{err}");
    }
    // Real configs are far from it.
    ok(&format!(
        "{GROUPS}tracepoints: [{{name: sched:sched_switch, by: [prev_pid]}}]\n"
    ));
}

#[test]
fn alias_budget_is_tight() {
    // More aliases than the budget allows, all type-correct.
    let refs = vec!["*t"; 1_001].join(", ");
    let doc = format!("tracepoints: [&t sched:sched_switch, {refs}]\n");
    let err = parse(SOURCE, &doc).expect_err("alias budget");
    assert!(
        err.message.contains("too complex: more than 1000 aliases"),
        "{err}"
    );
    assert!(
        err.hint
            .as_deref()
            .unwrap_or_default()
            .contains("billion laughs"),
        "{err}"
    );
    assert_eq!(err.line, Some(1), "{err}");

    // Few aliases, each replaying a long list: bounded by the replay budget.
    let events = vec!["cycles"; 200].join(", ");
    let mut doc = format!("groups:\n  g0: &e [{events}]\n");
    for i in 1..600 {
        doc.push_str(&format!("  g{i}: *e\n"));
    }
    let err = parse(SOURCE, &doc).expect_err("replay budget");
    assert!(err.message.contains("too complex"), "{err}");
    assert!(err.line.is_some(), "{err}");
}

#[test]
fn past_the_node_cap_the_error_names_the_settings_holding_most_nodes() {
    // 6,000 tracepoints and 5,000 metrics, written out: 5 nodes an item.
    let mut doc = String::from("cgroups: [{path: /}]\ntracepoints:\n");
    for i in 0..6000 {
        doc.push_str(&format!(
            "  - {{name: syscalls:sys_enter_getppid, as: t{i}}}\n"
        ));
    }
    doc.push_str("metrics:\n");
    for i in 0..5000 {
        doc.push_str(&format!("  - {{name: m{i}, expr: t{i}}}\n"));
    }
    let err = parse(SOURCE, &doc).expect_err("past the node cap");
    assert!(
        err.message.ends_with(
            "the YAML document is too complex: more than 50000 nodes (`tracepoints:` 30001, \
             `metrics:` 25001)"
        ),
        "{err}"
    );
}

#[test]
fn size_cap() {
    let big = format!("{GROUPS}#{}\n", "x".repeat(MAX_CONFIG_BYTES));
    check(&big, None, &["larger than 1024 KiB"], "a few KiB");
    // Exactly at the cap is fine.
    let padding = MAX_CONFIG_BYTES - GROUPS.len() - 2;
    let at_cap = format!("{GROUPS}#{}\n", "x".repeat(padding));
    assert_eq!(at_cap.len(), MAX_CONFIG_BYTES);
    ok(&at_cap);
}

// ---- errors: values ------------------------------------------------------

#[test]
fn bad_intervals() {
    let at = Some((4, 11));
    let line = |v: &str| format!("{GROUPS}interval: {v}\n");
    check(
        &line("1 sec"),
        at,
        &["invalid interval", "unknown unit \" sec\"", "\"1 sec\""],
        "ms, s, m or h",
    );
    check(&line("-1s"), at, &["\"-1s\" is negative"], "e.g. `250ms`");
    check(
        &line("5"),
        at,
        &["\"5\" has no unit"],
        "write `5s` for seconds",
    );
    check(
        &line("0s"),
        at,
        &["interval \"0s\" is shorter than 100ms"],
        "between 100ms and 1h",
    );
    check(
        &line("99ms"),
        at,
        &["interval \"99ms\" is shorter than 100ms"],
        "between 100ms and 1h",
    );
    check(
        &line("0.09s"),
        at,
        &["shorter than 100ms"],
        "between 100ms and 1h",
    );
    check(
        &line("61m"),
        at,
        &["interval \"61m\" is longer than 1h"],
        "between 100ms and 1h",
    );
    check(
        &line("1.001h"),
        at,
        &["longer than 1h"],
        "between 100ms and 1h",
    );
    check(
        &line("\"\""),
        at,
        &["the duration is empty"],
        "e.g. `250ms`",
    );
    // A number without a unit: only what the interval accepts is suggested.
    let err = check(
        &line("0"),
        at,
        &["\"0\" has no unit"],
        "from 100ms to 1h with its unit",
    );
    assert!(!err.to_string().contains("`0s`"), "{err}");
    check(
        &line("10"),
        at,
        &["\"10\" has no unit"],
        "write `10s` for seconds",
    );
    // What the hints suggest is accepted.
    assert_eq!(ok(&line("10s")).interval, Duration::from_secs(10));
    assert_eq!(ok(&line("1s")).interval, Duration::from_secs(1));
}

#[test]
fn bad_groups() {
    check(
        "groups:\n  ipc: []\n",
        Some((2, 8)),
        &["group `ipc` has no events"],
        "list at least one event",
    );
    for (name, col) in [
        ("1ipc", 3),
        ("\"my group\"", 3),
        ("\"ipc!\"", 3),
        ("\"-x\"", 3),
    ] {
        check(
            &format!("groups:\n  {name}: [cycles]\n"),
            Some((2, col)),
            &["invalid group name"],
            "[A-Za-z_][A-Za-z0-9_-]*",
        );
    }
    // Every group label cgperf gives its own series, from the one list.
    for reserved in RESERVED_GROUPS {
        check(
            &format!("groups:\n  ipc: [cycles]\n  {reserved}: [context-switches]\n"),
            Some((3, 3)),
            &[&format!("the group name \"{reserved}\" is reserved")],
            "top-level `tracepoints:` and `probes:`",
        );
    }
    assert_eq!(RESERVED_GROUPS, ["tracepoints", "probes"]);
    check(
        "groups: {probes: [context-switches]}\n\
         probes: [{kprobe: do_sys_openat2, as: context-switches}]\n",
        Some((1, 10)),
        &["the group name \"probes\" is reserved"],
        "pick another group name",
    );
    let config = ok("groups:\n  _a: [cycles]\n  l1d-Misses_2: [cycles]\n");
    assert_eq!(names(&config), ["_a", "l1d-Misses_2"]);
}

#[test]
fn duplicate_event_in_group() {
    check(
        "groups:\n  ipc: [cycles, instructions, cycles]\n",
        Some((2, 31)),
        &[
            "event \"cycles\" is listed twice in group `ipc`",
            "first at line 2, column 9",
        ],
        "remove the duplicate",
    );
    // The same event in two groups is fine.
    ok("groups:\n  a: [cycles]\n  b: [cycles]\n");
    // Two of perf's names of one event would be one series twice.
    check(
        "groups:\n  sched: [context-switches, cs]\n",
        Some((2, 29)),
        &[
            "event \"cs\" is \"context-switches\" again in group `sched` (line 2, column 11)",
            "exported as event=\"context-switches\"",
        ],
        "remove one of them",
    );
    // `:u` counts something else: not a duplicate.
    ok("groups:\n  sched: [context-switches, cs:u]\n");
}

#[test]
fn long_names_are_not_echoed_whole() {
    let long = "x".repeat(100_000);
    let too_much = "x".repeat(81);
    for (doc, at) in [
        (format!("groups:\n  ipc: [{long}]\n"), (2, 9)),
        (format!("tracepoints: [{long}]\n"), (1, 15)),
        (format!("tracepoints: [\"sched:{long}!\"]\n"), (1, 15)),
        (format!("tracepoints: [sched:{long}]\n"), (1, 15)),
        (format!("probes: [{{uprobe: {long}, as: a}}]\n"), (1, 19)),
        (format!("{GROUPS}interval: {long}\n"), (4, 11)),
        (format!("{GROUPS}cgroups: [{{path: {long}}}]\n"), (4, 18)),
    ] {
        let err = check(&doc, Some(at), &["x…"], "");
        let text = err.to_string();
        assert!(
            text.len() < 1_000 && !text.contains(&too_much),
            "{}…",
            &text[..1_000.min(text.len())]
        );
    }
}

#[test]
fn malformed_event() {
    const BAD: &str = "bad event!";
    let syntax = parse_event(BAD).expect_err("test premise: the event is malformed");
    check(
        &format!("groups:\n  ipc:\n    - cycles\n    - {BAD}\n"),
        Some((4, 7)),
        &["in group `ipc`: ", "bad event!", &syntax.to_string()],
        "perf's syntax",
    );
}

#[test]
fn bad_tracepoints() {
    const BAD: &str = "sched_switch";
    let syntax = parse_tracepoint(BAD).expect_err("test premise: the tracepoint is malformed");
    check(
        &format!("tracepoints:\n  - sched:sched_wakeup\n  - {BAD}\n"),
        Some((3, 5)),
        &["sched_switch", &syntax.to_string()],
        "subsystem:name",
    );
    check(
        "tracepoints: [sched:sched_switch, sched:sched_wakeup, sched:sched_switch]\n",
        Some((1, 55)),
        &[
            "tracepoint event label \"sched:sched_switch\" is used twice",
            "first at line 1, column 15",
        ],
        "give each entry its own `as:` name",
    );
}

#[test]
fn nothing_to_count() {
    let message = ["no groups, tracepoints or probes"];
    check("", None, &message, "tracepoints: [sched:sched_switch]");
    check(
        "# just a comment\ninterval: 1s\n",
        None,
        &message,
        "groups: {sched:",
    );
    check(
        "interval: 1s\ngroups: {}\n",
        Some((2, 9)),
        &message,
        "groups: {sched:",
    );
    check(
        "tracepoints: []\n",
        Some((1, 14)),
        &message,
        "groups: {sched:",
    );
}

// ---- max_cgroups --------------------------------------------------------

#[test]
fn max_cgroups_accepted() {
    let table = [
        ("1", 1),
        ("1000", 1000),
        ("1000000", MAX_CGROUPS_LIMIT),
        // YAML integer spellings; quoted integers pass through serde-saphyr.
        ("0x10", 16),
        ("1_000", 1000),
        ("\"250\"", 250),
    ];
    for (text, want) in table {
        assert_eq!(
            ok(&format!("{GROUPS}max_cgroups: {text}\n")).max_cgroups,
            Some(want),
            "{text}"
        );
    }
}

#[test]
fn bad_max_cgroups() {
    let at = Some((4, 14));
    let line = |v: &str| format!("{GROUPS}max_cgroups: {v}\n");
    let hint = "from 1 to 1000000, e.g. `max_cgroups: 1000`, or remove `max_cgroups:`";
    check(
        &line("0"),
        at,
        &["`max_cgroups` is 0, so no cgroup would be counted"],
        hint,
    );
    check(
        &line("-5"),
        at,
        &["`max_cgroups` is negative (-5); it must be at least 1"],
        hint,
    );
    check(
        &line("1000001"),
        at,
        &["`max_cgroups` is 1000001, more than the largest allowed, 1000000"],
        hint,
    );
    check(
        &line("9223372036854775807"),
        at,
        &["more than the largest allowed"],
        hint,
    );
    // Whole numbers beyond i64: out of range, not "not a whole number".
    for (value, said) in [
        (
            "9223372036854775808",
            "`max_cgroups` is 9223372036854775808, too large: it must be from 1 to 1000000",
        ),
        ("0x1_0000_0000_0000_0000", "too large: it must be from 1 to"),
        (
            "-99999999999999999999",
            "is -99999999999999999999, negative",
        ),
    ] {
        check(&line(value), at, &[said], hint);
    }
    // Everything that is not an integer: a type error at the same place
    // with the same hint.
    for (value, found) in [
        ("1.5", "found \"1.5\""),
        ("1e3", "found \"1e3\""),
        ("1000.0", "found \"1000.0\""),
        ("lots", "found \"lots\""),
        ("true", "found \"true\""),
        ("\"\"", "found \"\""),
        ("[1000]", "found a list"),
        ("{n: 1}", "found a mapping"),
    ] {
        check(
            &line(value),
            at,
            &["`max_cgroups` must be a whole number", found],
            hint,
        );
    }
    // The YAML layer and the validator give the same advice.
    assert!(
        validate::MAX_CGROUPS_HINT.contains(&MAX_CGROUPS_LIMIT.to_string()),
        "the hint names the limit"
    );
}

// ---- labels ----------------------------------------------------------------

#[test]
fn labels_accepted_in_canonical_order() {
    let labels = |text: &str| ok(&format!("{GROUPS}labels: {text}\n")).labels;
    assert_eq!(labels("[kubernetes, systemd, containers]"), Extractor::ALL);
    // Written order does not matter: extract() emits a fixed order anyway.
    assert_eq!(labels("[containers, systemd, kubernetes]"), Extractor::ALL);
    assert_eq!(labels("[systemd]"), [Extractor::Systemd]);
    assert_eq!(
        labels("\n  - containers\n  - kubernetes"),
        [Extractor::Kubernetes, Extractor::Containers]
    );
    assert!(labels("[]").is_empty());
}

#[test]
fn bad_labels() {
    let line = |v: &str| format!("{GROUPS}labels: {v}\n");
    let listing = "label extractors: kubernetes, systemd, containers";
    check(
        &line("[kubernetes, sytemd]"),
        Some((4, 22)),
        &["unknown label extractor \"sytemd\""],
        &format!("did you mean `systemd`? {listing}"),
    );
    check(
        &line("[Containers]"),
        Some((4, 10)),
        &["unknown label extractor \"Containers\""],
        "did you mean `containers`?",
    );
    let err = check(
        &line("[k8s]"),
        Some((4, 10)),
        &["unknown label extractor \"k8s\""],
        listing,
    );
    assert!(!err.hint.unwrap_or_default().contains("did you mean"));
    check(
        &line("[\"\"]"),
        Some((4, 10)),
        &["unknown label extractor \"\""],
        listing,
    );
    check(
        &line("[systemd, containers, systemd]"),
        Some((4, 31)),
        &[
            "label extractor \"systemd\" is listed twice in `labels`",
            "first at line 4, column 10",
        ],
        "remove the duplicate",
    );
    check(
        &line("kubernetes"),
        Some((4, 9)),
        &[
            "`labels` must be a list of label extractors",
            "found \"kubernetes\"",
        ],
        "labels: [kubernetes, systemd, containers]",
    );
    check(
        &line("{kubernetes: true}"),
        Some((4, 9)),
        &["`labels` must be a list", "found a mapping"],
        "even for a single one",
    );
    check(
        &line("[[systemd]]"),
        Some((4, 10)),
        &["`labels[0]` must be a label extractor name", "found a list"],
        listing,
    );
    // The YAML layer's hint lists the same extractors as the validator's.
    let names: Vec<&str> = Extractor::ALL.iter().map(|e| e.name()).collect();
    assert_eq!(listing, format!("label extractors: {}", names.join(", ")));
}

// ---- errors: cgroup selectors -------------------------------------------

/// `GROUPS` plus `tracepoints` plus a `cgroups:` list whose first entry is on line 6.
fn selectors(entries: &str) -> String {
    format!("{GROUPS}tracepoints: [sched:sched_switch]\ncgroups:\n{entries}")
}

#[test]
fn empty_cgroups_list() {
    check(
        &format!("{GROUPS}cgroups: []\n"),
        Some((4, 10)),
        &["`cgroups` is empty"],
        "remove `cgroups:`",
    );
}

#[test]
fn path_and_match() {
    check(
        &selectors("  - path: /a\n    match: /b/*\n"),
        Some((7, 12)),
        &["`cgroups[0]` has both `path` and `match`"],
        "two entries",
    );
    check(
        &selectors("  - path: /\n  - groups: [ipc]\n"),
        Some((7, 5)),
        &["`cgroups[1]` has neither `path` nor `match`"],
        "path: /system.slice",
    );
}

#[test]
fn bad_paths() {
    check(
        &selectors("  - path: system.slice\n"),
        Some((6, 11)),
        &["the path \"system.slice\" is relative"],
        "write `/system.slice`",
    );
    check(
        &selectors("  - path: /a/../b\n"),
        Some((6, 11)),
        &["contains a `..` component"],
        "without `.` or `..`",
    );
    check(
        &selectors("  - path: /a/./b\n"),
        Some((6, 11)),
        &["contains a `.` component"],
        "without `.` or `..`",
    );
    check(
        &selectors("  - path: \"\"\n"),
        Some((6, 11)),
        &["the path is empty"],
        "use `/` for the root",
    );
    check(
        &selectors("  - path: /system.slice/*.service\n"),
        Some((6, 11)),
        &["contains glob characters"],
        "use `match: /system.slice/*.service`",
    );
    check(
        &selectors("  - match: service/*\n"),
        Some((6, 12)),
        &["the match pattern \"service/*\" is relative"],
        "write `/service/*`",
    );
    check(
        &selectors("  - match: /a/../*\n"),
        Some((6, 12)),
        &["contains a `..` component"],
        "",
    );
    // Control characters: located, and shown escaped, never raw.
    for (written, shown) in [
        ("\"/a\\0b\"", "\\0"),
        ("\"/a\\e[2J\"", "\\u{1b}"),
        ("\"/a\\tb\"", "\\t"),
    ] {
        let err = check(
            &selectors(&format!("  - path: {written}\n")),
            Some((6, 11)),
            &[&format!("contains the control character {shown}")],
            "without control characters",
        );
        assert!(!err.to_string().contains(['\0', '\x1b', '\t']), "{err:?}");
        check(
            &selectors(&format!("  - match: {written}\n")),
            Some((6, 12)),
            &["control character"],
            "without control characters",
        );
    }
}

#[test]
fn invalid_glob() {
    check(
        &selectors("  - match: /a/[b\n"),
        Some((6, 12)),
        &["invalid glob \"/a/[b\"", "unclosed character class"],
        "`**` across levels",
    );
    check(
        &selectors("  - match: \"/{a,b\"\n"),
        Some((6, 12)),
        &["invalid glob", "unclosed alternate group"],
        "",
    );
}

#[test]
fn undefined_references() {
    check(
        &selectors("  - path: /\n    groups: [ipc, shed]\n"),
        Some((7, 19)),
        &["`cgroups[0]` refers to undefined group \"shed\""],
        "did you mean `sched`? defined groups: ipc, sched",
    );
    check(
        &selectors("  - path: /\n    groups: [nope]\n"),
        Some((7, 14)),
        &["undefined group \"nope\""],
        "defined groups: ipc, sched",
    );
    check(
        "tracepoints: [sched:sched_switch]\ncgroups:\n  - path: /\n    groups: [ipc]\n",
        Some((4, 14)),
        &["undefined group \"ipc\""],
        "no groups are defined",
    );
    check(
        &selectors("  - path: /\n    tracepoints: [sched:sched_wakeup]\n"),
        Some((7, 19)),
        &[
            "refers to tracepoint \"sched:sched_wakeup\", which is not in the top-level `tracepoints:` list",
        ],
        "defined tracepoints: sched:sched_switch",
    );
    check(
        &selectors("  - path: /\n    tracepoints: [sched_wakeup]\n"),
        Some((7, 19)),
        &["refers to tracepoint \"sched_wakeup\", which is not in the top-level"],
        "(or use its `as:` name)",
    );
    check(
        &selectors("  - path: /\n    groups: [ipc, ipc]\n"),
        Some((7, 19)),
        &[
            "group \"ipc\" is listed twice in `cgroups[0]`",
            "first at line 7, column 14",
        ],
        "remove the duplicate",
    );
    check(
        &selectors("  - path: /\n    tracepoints: [sched:sched_switch, sched:sched_switch]\n"),
        Some((7, 39)),
        &[
            "tracepoint \"sched:sched_switch\" is listed twice in `cgroups[0]`",
            "first at line 7, column 19",
        ],
        "remove the duplicate",
    );
}

#[test]
fn selector_that_counts_nothing() {
    // No tracepoints at all, and `groups: []`.
    check(
        &format!("{GROUPS}cgroups:\n  - path: /\n  - match: /*\n    groups: []\n"),
        Some((6, 5)),
        &["`cgroups[1]` selects no groups, tracepoints or probes"],
        "list at least one group, tracepoint or probe",
    );
    check(
        &selectors("  - path: /\n    groups: []\n    tracepoints: []\n"),
        Some((6, 5)),
        &["`cgroups[0]` selects no groups, tracepoints or probes"],
        "",
    );
}

// ---- load ---------------------------------------------------------------

/// A file under the temp dir, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, contents: &[u8]) -> Self {
        let path =
            std::env::temp_dir().join(format!("cgperf-config-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("write temp file");
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn load_reads_and_names_the_file() {
    let file = TempFile::new("ok.yaml", GROUPS.as_bytes());
    assert_eq!(
        load(&file.0, &Catalog::none()).map(|c| c.groups.len()),
        Ok(2)
    );

    let file = TempFile::new("bad.yaml", b"groups:\n  ipc: []\n");
    let err = load(&file.0, &Catalog::none()).expect_err("empty group");
    let name = file.0.display().to_string();
    assert_eq!(err.source_name, name);
    assert!(
        err.to_string()
            .starts_with(&format!("{name}:2:8: group `ipc` has no events\n  hint: ")),
        "{err}"
    );
}

#[test]
fn load_errors() {
    let missing = std::env::temp_dir().join("cgperf-config-does-not-exist.yaml");
    let err = load(&missing, &Catalog::none()).expect_err("missing");
    assert_eq!(err.source_name, missing.display().to_string());
    assert!(
        err.message.starts_with("cannot read the config file: "),
        "{err}"
    );
    assert_eq!(err.line, None);

    let err = load(&std::env::temp_dir(), &Catalog::none()).expect_err("a directory");
    assert!(
        err.message.starts_with("cannot read the config file: "),
        "{err}"
    );

    let file = TempFile::new("big.yaml", &vec![b'#'; MAX_CONFIG_BYTES + 1]);
    let err = load(&file.0, &Catalog::none()).expect_err("too large");
    assert!(err.message.contains("larger than 1024 KiB"), "{err}");

    let file = TempFile::new("latin1.yaml", b"groups:\n  caf\xe9: [cycles]\n");
    let err = load(&file.0, &Catalog::none()).expect_err("not UTF-8");
    assert!(
        err.message.contains("not valid UTF-8 (at byte 13)"),
        "{err}"
    );
}

#[test]
fn display_format() {
    let err = check("interval: [1]\n", Some((1, 11)), &[], "");
    assert_eq!(
        err.to_string(),
        "test.yaml:1:11: `interval` must be a duration, found a list\n  hint: write a number directly \
         followed by a unit (ms, s, m or h), e.g. `interval: 1s`"
    );
    let err = check("", None, &[], "");
    assert!(
        err.to_string()
            .starts_with("test.yaml: the config defines no groups"),
        "{err}"
    );
}

// ---- otlp ----------------------------------------------------------------

#[test]
fn otlp_section_as_written() {
    assert_eq!(ok(GROUPS).otlp, None);
    assert_eq!(
        ok(&format!("{GROUPS}otlp: {{}}\n")).otlp,
        Some(OtlpSection::default())
    );
    let config = ok(&format!(
        "{GROUPS}otlp:\n  endpoint: https://gw.example:4318/\n  protocol: http/protobuf\n  \
         interval: 30s\n  timeout: 2.5s\n  headers:\n    Authorization: Bearer abc\n    \
         x-n: 1\n  resource:\n    deployment.environment.name: prod\n"
    ));
    assert_eq!(
        config.otlp,
        Some(OtlpSection {
            endpoint: Some("https://gw.example:4318".to_owned()),
            protocol: Some(OtlpProtocol::HttpProtobuf),
            interval: Some(Duration::from_secs(30)),
            timeout: Some(Duration::from_millis(2500)),
            headers: vec![
                ("authorization".to_owned(), "Bearer abc".to_owned()),
                ("x-n".to_owned(), "1".to_owned()),
            ],
            resource: vec![("deployment.environment.name".to_owned(), "prod".to_owned())],
        })
    );
}

#[test]
fn bad_otlp_sections() {
    check(
        &format!("{GROUPS}otlp:\n  endpiont: http://x:1\n"),
        Some((5, 3)),
        &["unknown key \"endpiont\" in `otlp`"],
        "did you mean `endpoint`? valid keys here: endpoint, protocol, interval, timeout, \
         headers, resource",
    );
    check(
        &format!("{GROUPS}otlp:\n  endpoint: grpc://x:4317\n"),
        Some((5, 13)),
        &[
            "invalid OTLP endpoint \"grpc://x:4317\"",
            "only http:// and https://",
        ],
        "http://127.0.0.1:4317",
    );
    check(
        &format!("{GROUPS}otlp:\n  endpoint: collector:4317\n"),
        Some((5, 13)),
        &["invalid OTLP endpoint"],
        "http://127.0.0.1:4317",
    );
    check(
        &format!("{GROUPS}otlp:\n  protocol: http/protobuff\n"),
        Some((5, 13)),
        &["unknown OTLP protocol \"http/protobuff\""],
        "did you mean `http/protobuf`?",
    );
    check(
        &format!("{GROUPS}otlp:\n  interval: 10\n"),
        Some((5, 13)),
        &["invalid OTLP interval", "has no unit"],
        "`10s`",
    );
    check(
        &format!("{GROUPS}otlp:\n  timeout: 2h\n"),
        Some((5, 12)),
        &["OTLP timeout \"2h\" is outside 100ms to 1h"],
        "from 100ms to 1h",
    );
    check(
        &format!("{GROUPS}otlp:\n  headers:\n    content-type: text/plain\n"),
        Some((6, 5)),
        &["OTLP header \"content-type\" is set by cgperf itself"],
        "remove it",
    );
    check(
        &format!("{GROUPS}otlp:\n  headers:\n    \"a b\": x\n"),
        Some((6, 5)),
        &["invalid OTLP header name \"a b\""],
        "HTTP tokens",
    );
    check(
        &format!("{GROUPS}otlp:\n  headers:\n    X-A: 1\n    x-a: 2\n"),
        Some((7, 5)),
        &["\"x-a\" is listed twice (first at line 6, column 5)"],
        "case-insensitive",
    );
    check(
        &format!("{GROUPS}otlp:\n  headers: [a]\n"),
        Some((5, 12)),
        &["`otlp.headers` must be a mapping from header name to value"],
        "authorization",
    );
    check(
        &format!("{GROUPS}otlp:\n  resource:\n    team: [a]\n"),
        Some((6, 11)),
        &["`otlp.resource.team` must be a text value", "found a list"],
        "quote values",
    );
    check(
        &format!("{GROUPS}otlp: 5\n"),
        Some((4, 7)),
        &["`otlp` must be a mapping of OTLP settings"],
        "otlp: {endpoint:",
    );
}

// ---- tracepoint entries and probes ---------------------------------------

#[test]
fn tracepoint_entries_with_filter_label_and_fields() {
    let config = ok(r#"
tracepoints:
  - sched:sched_switch
  - name: syscalls:sys_enter_getpriority
    filter: "which == 1"
    as: pgrp_lookups
  - name: syscalls:sys_enter_getpriority
    by: [which]
    as: getpriority_by_which
    max_series: 7
probes:
  - uprobe: /usr/lib/x86_64-linux-gnu/libc.so.6:malloc
    as: malloc_calls
  - kprobe: do_sys_openat2
    as: openat2_calls
ring_pages: 16
cgroups:
  - path: /
  - match: /a/*
    tracepoints: [pgrp_lookups]
    probes: [malloc_calls]
"#);
    assert_eq!(
        tp_labels(&config),
        ["sched:sched_switch", "pgrp_lookups", "getpriority_by_which"]
    );
    let filtered = &config.tracepoints[1];
    assert_eq!(
        filtered.name,
        parse_tracepoint("syscalls:sys_enter_getpriority").expect("tp")
    );
    assert_eq!(filtered.filter.as_deref(), Some("which == 1"));
    assert!(filtered.by.is_empty());
    assert_eq!((filtered.origin.line, filtered.origin.column), (4, 5));
    let by = &config.tracepoints[2];
    assert_eq!(by.by, ["which"]);
    assert_eq!(by.max_series, 7);
    assert_eq!(by.syscall_name, None);
    let named =
        ok("tracepoints:\n  - {name: raw_syscalls:sys_enter, by: [cpu, id], syscall_name: id}\n");
    assert_eq!(named.tracepoints[0].syscall_name, Some(1));
    assert_eq!(config.tracepoints[0].max_series, DEFAULT_MAX_SERIES);
    let probes: Vec<&str> = config.probes.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(probes, ["malloc_calls", "openat2_calls"]);
    assert_eq!(config.ring_pages, 16);
    assert_eq!(config.cgroups[0].tracepoints.len(), 3);
    assert_eq!(config.cgroups[0].probes, ["malloc_calls", "openat2_calls"]);
    assert_eq!(config.cgroups[1].tracepoints, ["pgrp_lookups"]);
    assert_eq!(config.cgroups[1].probes, ["malloc_calls"]);
    assert_eq!(
        ok("tracepoints: [sched:sched_switch]\n").ring_pages,
        DEFAULT_RING_PAGES
    );
}

#[test]
fn probes_alone_are_enough() {
    let config = ok("probes: [{uprobe: /bin/true:main, as: true_main}]\n");
    assert_eq!(config.cgroups[0].probes, ["true_main"]);
}

#[test]
fn tracepoint_entry_errors() {
    check(
        "tracepoints:\n  - name: sched:sched_switch\n    fliter: x\n",
        Some((3, 5)),
        &["unknown key \"fliter\" in `tracepoints[0]`"],
        "did you mean `filter`?",
    );
    check(
        "tracepoints:\n  - sched:sched_switch\n  - name: sched:sched_switch\n    filter: \"prev_pid == 1\"\n",
        Some((3, 11)),
        &[
            "tracepoint event label \"sched:sched_switch\" is used twice (first at line 2, column 5)",
        ],
        "`as:`",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, as: \"9lives\"}\n",
        Some((2, 36)),
        &["\"9lives\" is not a valid event label"],
        "as: pgrp_lookups",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, filter: \"  \"}\n",
        Some((2, 40)),
        &["filter \"\" is empty"],
        "which == 1",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, by: []}\n",
        Some((2, 36)),
        &["`by` is empty"],
        "plain count",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, by: [prev-pid]}\n",
        Some((2, 37)),
        &["\"prev-pid\" is not a field name"],
        "by: [which]",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, by: [a, a]}\n",
        Some((2, 40)),
        &["field \"a\" is listed twice in `by`"],
        "remove the duplicate",
    );
    check(
        "tracepoints:\n  - {name: raw_syscalls:sys_enter, syscall_name: id}\n",
        Some((2, 50)),
        &["`syscall_name` applies only to counts split `by:` fields"],
        "by: [id], syscall_name: id",
    );
    check(
        "tracepoints:\n  - {name: raw_syscalls:sys_enter, by: [id], syscall_name: nr}\n",
        Some((2, 60)),
        &["`syscall_name` names \"nr\", which is not among the `by:` fields"],
        "holds the syscall number",
    );
    check(
        "tracepoints:\n  - {name: x:y, by: [nr, syscall], syscall_name: nr}\n",
        Some((2, 50)),
        &["already has a field of that name"],
        "remove `syscall_name:`",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, max_series: 5}\n",
        Some((2, 44)),
        &["`max_series` applies only to counts split `by:` fields"],
        "by: [field]",
    );
    check(
        "tracepoints:\n  - {name: sched:sched_switch, by: [prev_pid], max_series: 0}\n",
        Some((2, 60)),
        &["`max_series` is 0; it must be from 1 to 10000"],
        "other",
    );
    check(
        "tracepoints: [sched:sched_switch]\nring_pages: 3\n",
        Some((2, 13)),
        &["`ring_pages` is 3; it must be a power of two from 1 to 1024"],
        "ring_pages: 64",
    );
    // Beyond 64 bits: still out of range, with the range.
    check(
        "tracepoints:\n  - {name: sched:sched_switch, by: [prev_pid], max_series: 99999999999999999999}\n",
        Some((2, 60)),
        &[
            "`tracepoints[0].max_series` is 99999999999999999999, too large: it must be from 1 to 10000",
        ],
        "other",
    );
    check(
        "tracepoints: [sched:sched_switch]\nring_pages: 18446744073709551616\n",
        Some((2, 13)),
        &["`ring_pages` is 18446744073709551616, too large: it must be from 1 to 1024"],
        "ring_pages: 64",
    );
    let digits = "9".repeat(100_000);
    let err = check(
        &format!("tracepoints: [sched:sched_switch]\nring_pages: {digits}\n"),
        Some((2, 13)),
        &["too large: it must be from 1 to 1024"],
        "ring_pages: 64",
    );
    assert!(err.to_string().len() < 400, "{err}");
    check(
        "tracepoints:\n  - {name: sched:sched_switch, as: a}\ncgroups:\n  - path: /\n    tracepoints: [b]\n",
        Some((5, 19)),
        &[
            "`cgroups[0]` refers to tracepoint \"b\", which is not in the top-level `tracepoints:` list",
        ],
        "defined tracepoints: a",
    );
}

#[test]
fn probe_errors() {
    check(
        "probes:\n  - {uprobe: /bin/true:main}\n",
        Some((2, 5)),
        &["a probe has no `as:` name"],
        "as: malloc_calls",
    );
    check(
        "probes:\n  - {as: x}\n",
        Some((2, 5)),
        &["a probe has neither `uprobe:` nor `kprobe:`"],
        "uprobe:",
    );
    check(
        "probes:\n  - {uprobe: /bin/true:main, kprobe: f, as: x}\n",
        Some((2, 38)),
        &["a probe has both `uprobe:` and `kprobe:`"],
        "one entry per probe",
    );
    check(
        "probes:\n  - {uprobe: /bin/true:main, as: x}\n  - {uprobe: /bin/false:main, as: x}\n",
        Some((3, 35)),
        &["probe name \"x\" is listed twice (first at line 2, column 34)"],
        "remove the duplicate",
    );
    check(
        "probes:\n  - {uprobe: true:main, as: x}\n",
        Some((2, 14)),
        &["absolute path"],
        "/absolute/path/to/binary:symbol",
    );
    check(
        "probes:\n  - {uprobe: /bin/true:main, as: x}\ncgroups:\n  - path: /\n    probes: [y]\n",
        Some((5, 14)),
        &["refers to probe \"y\", which is not in the top-level `probes:` list"],
        "defined probes: x",
    );
}

#[test]
fn backend_defaults_to_auto_and_takes_each_name() {
    let backend = |v: Option<&str>| {
        let text = match v {
            Some(v) => format!("{GROUPS}backend: {v}\n"),
            None => GROUPS.to_owned(),
        };
        ok(&text).backend
    };
    assert_eq!(backend(None), BackendChoice::Auto);
    assert_eq!(backend(Some("null")), BackendChoice::Auto);
    for choice in BackendChoice::ALL {
        assert_eq!(backend(Some(choice.name())), choice);
    }
}

#[test]
fn bad_backend() {
    let line = |v: &str| format!("{GROUPS}backend: {v}\n");
    check(
        &line("bfp"),
        Some((4, 10)),
        &["unknown backend \"bfp\""],
        &format!("did you mean `bpf`? {BACKEND_HINT}"),
    );
    let err = check(
        &line("ebpf-ish"),
        Some((4, 10)),
        &["unknown backend \"ebpf-ish\""],
        BACKEND_HINT,
    );
    assert!(!err.hint.unwrap_or_default().contains("did you mean"));
    check(
        &line("[bpf]"),
        Some((4, 10)),
        &["`auto`, `cgroup` or `bpf`"],
        BACKEND_HINT,
    );
}

// ---- metrics -----------------------------------------------------------

const METRIC_BASE: &str = "groups:\n  ipc: [cycles, instructions]\n  sched: [task-clock, context-switches]\n\
tracepoints:\n  - sys:sys_enter_read\n  - {name: raw_syscalls:sys_enter, by: [id], as: calls}\n\
\x20 - {name: sched:sched_switch, as: switches}\n";

#[test]
fn metrics_find_their_inputs_where_they_are_counted() {
    let config = ok(&format!(
        "{METRIC_BASE}metrics:\n  - name: ipc\n    expr: instructions / cycles\n    unit: ratio\n\
         \x20 - name: reads_per_switch\n    expr: \"sys:sys_enter_read / context-switches\"\n\
         \x20   description: read() calls per context switch\n\
         \x20 - {{name: busy, expr: task-clock * 100 / switches}}\n"
    ));
    let m = &config.metrics;
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].name, "ipc");
    assert_eq!(m[0].unit, "ratio");
    assert_eq!(
        m[0].description, "instructions / cycles",
        "the formula by default"
    );
    let inputs = |i: usize| -> Vec<(&str, &str)> {
        m[i].inputs.iter().map(|x| (&*x.group, &*x.event)).collect()
    };
    assert_eq!(inputs(0), [("ipc", "instructions"), ("ipc", "cycles")]);
    assert_eq!(
        inputs(1),
        [
            ("tracepoints", "sys:sys_enter_read"),
            ("sched", "context-switches")
        ]
    );
    assert_eq!(m[1].description, "read() calls per context switch");
    assert_eq!(
        inputs(2),
        [("sched", "task-clock"), ("tracepoints", "switches")]
    );
    // The default selector computes them all.
    assert_eq!(
        config.cgroups[0].metrics,
        ["ipc", "reads_per_switch", "busy"]
    );
}

#[test]
fn a_selector_computes_what_it_counts_unless_it_names_its_metrics() {
    let metrics = "metrics:\n  - {name: ipc, expr: instructions / cycles}\n\
                   \x20 - {name: cs, expr: context-switches}\n";
    // Left to the default: each selector computes the metrics it counts
    // the inputs of.
    let config = ok(&format!(
        "{METRIC_BASE}{metrics}cgroups:\n  - {{path: /a, groups: [sched]}}\n  - {{path: /b}}\n"
    ));
    assert_eq!(config.cgroups[0].metrics, ["cs"]);
    assert_eq!(config.cgroups[1].metrics, ["ipc", "cs"]);
    // Named: what it does not count is a mistake, with the fix.
    check(
        &format!(
            "{METRIC_BASE}{metrics}cgroups:\n  - {{path: /a, groups: [sched], metrics: [ipc]}}\n"
        ),
        Some((12, 42)),
        &[
            "`cgroups[0]` computes metric \"ipc\"",
            "\"instructions\" of group `ipc`",
            "does not count",
        ],
        "add it to this entry's `groups:`",
    );
    check(
        &format!("{METRIC_BASE}{metrics}cgroups:\n  - {{path: /a, metrics: [icp]}}\n"),
        Some((12, 26)),
        &["`cgroups[0]` refers to metric \"icp\""],
        "did you mean `ipc`?",
    );
    let config = ok(&format!(
        "{METRIC_BASE}{metrics}cgroups:\n  - {{path: /a, metrics: []}}\n"
    ));
    assert!(config.cgroups[0].metrics.is_empty());
}

#[test]
fn a_misspelt_metric_input_is_given_one_did_you_mean() {
    let err = err_with(
        "groups:\n  sched: [task-clock, context-switches]\n\
         metrics:\n  - {name: x, expr: context-switchs / task-clock}\n",
    );
    let said = format!("{}\n{}", err.message, err.hint.unwrap_or_default());
    assert_eq!(
        said.matches("did you mean `context-switches`?").count(),
        1,
        "{said}"
    );
}

#[test]
fn metric_mistakes_name_the_place_and_the_fix() {
    let at = |expr: &str| format!("{METRIC_BASE}metrics:\n  - name: m\n    expr: {expr}\n");
    check(
        &at("instructions / cylces"),
        Some((10, 11)),
        &["metric \"m\" uses \"cylces\", which the config does not count"],
        "did you mean `cycles`?",
    );
    check(
        &at("nosuchevent / instructions"),
        Some((10, 11)),
        &["uses \"nosuchevent\", which the config does not count and is no event"],
        "or an event or tracepoint (see `cgperf list`)",
    );
    check(
        &at("calls / cycles"),
        Some((10, 11)),
        &["uses tracepoint \"calls\", which is counted `by:` fields"],
        "without `by:`",
    );
    check(
        &at("instructions cycles"),
        Some((10, 11)),
        &[
            "metric \"m\": `expr`",
            "unexpected `cycles`",
            "(at character 14)",
        ],
        "a subtraction with spaces",
    );
    check(
        &format!("{METRIC_BASE}metrics:\n  - {{name: 1ipc, expr: cycles}}\n"),
        Some((9, 12)),
        &["invalid metric name \"1ipc\""],
        "[A-Za-z_][A-Za-z0-9_]*",
    );
    check(
        &format!(
            "{METRIC_BASE}metrics:\n  - {{name: a, expr: cycles}}\n  - {{name: a, expr: cycles}}\n"
        ),
        Some((10, 12)),
        &["metric \"a\" is defined twice (first at line 9, column 12)"],
        "rename or remove",
    );
    check(
        &format!("{METRIC_BASE}metrics:\n  - {{name: a, expr: cycles, unit: Per Second}}\n"),
        Some((9, 35)),
        &["metric \"a\": invalid unit \"Per Second\""],
        "lowercase",
    );
    check(
        &format!("{METRIC_BASE}metrics:\n  - {{name: a, expr: cycles, scale: 2}}\n"),
        Some((9, 29)),
        &["unknown key \"scale\" in `metrics[0]`"],
        "valid keys here: name, expr, description, unit",
    );
    // Every mistake at once, in file order.
    let err = check(
        &format!(
            "{METRIC_BASE}metrics:\n  - {{name: a, expr: nope}}\n  - {{name: b, expr: \"(\"}}\n"
        ),
        Some((9, 21)),
        &["uses \"nope\""],
        "",
    );
    assert_eq!(err.others.len(), 1, "{err}");
}

#[test]
fn a_metric_schedules_the_events_and_tracepoints_the_config_does_not_count() {
    let config = ok("groups:\n  sched: [task-clock, cs]\nmetrics:\n\
         \x20 - {name: ipc, expr: instructions / cycles}\n\
         \x20 - {name: cpi, expr: cycles / instructions}\n\
         \x20 - {name: reads_per_switch, expr: syscalls:sys_enter_read / cs}\n\
         cgroups:\n  - {path: /a, groups: [sched]}\n  - {path: /b, groups: [sched], metrics: [cpi]}\n\
         \x20 - {path: /c, groups: [sched], metrics: []}\n");
    // The events of ipc in a group of its own, which cpi uses too: each
    // is counted once.
    assert_eq!(names(&config), ["sched", "metric:ipc"]);
    let events: Vec<&str> = config.groups[1]
        .events
        .iter()
        .map(|e| e.text.as_str())
        .collect();
    assert_eq!(events, ["instructions", "cycles"]);
    let inputs = |i: usize| -> Vec<(&str, &str)> {
        config.metrics[i]
            .inputs
            .iter()
            .map(|x| (&*x.group, &*x.event))
            .collect()
    };
    assert_eq!(
        inputs(1),
        [("metric:ipc", "cycles"), ("metric:ipc", "instructions")]
    );
    assert_eq!(
        inputs(2),
        [
            ("tracepoints", "syscalls:sys_enter_read"),
            ("sched", "context-switches")
        ]
    );
    assert_eq!(tp_labels(&config), ["syscalls:sys_enter_read"]);
    // Each entry counts what the metrics it computes scheduled, and no
    // more.
    let s = &config.cgroups;
    assert_eq!(s[0].metrics, ["ipc", "cpi", "reads_per_switch"]);
    assert_eq!(s[0].groups, ["sched", "metric:ipc"]);
    assert_eq!(s[0].tracepoints, ["syscalls:sys_enter_read"]);
    assert_eq!(s[1].metrics, ["cpi"]);
    assert_eq!(s[1].groups, ["sched", "metric:ipc"]);
    assert!(s[1].tracepoints.is_empty());
    assert!(s[2].metrics.is_empty());
    assert_eq!(s[2].groups, ["sched"]);
    // Metrics alone are enough to count something.
    let alone = ok("metrics:\n  - {name: ipc, expr: instructions / cycles}\n");
    assert_eq!(names(&alone), ["metric:ipc"]);
    assert_eq!(alone.cgroups[0].groups, ["metric:ipc"]);
}

#[test]
fn a_metrics_topdown_events_are_led_by_slots_as_the_kernel_requires() {
    let text = |config: &crate::config::Config, g: usize| -> Vec<String> {
        config.groups[g]
            .events
            .iter()
            .map(|e| e.text.clone())
            .collect()
    };
    // perf's bare names: `slots` of whichever core PMU has it, first.
    let bare = ok(
        "metrics:\n  - {name: retiring, expr: topdown-retiring / (topdown-retiring + topdown-be-bound)}\n",
    );
    assert_eq!(
        text(&bare, 0),
        ["slots", "topdown-retiring", "topdown-be-bound"]
    );
    // A PMU's events: that PMU's slots; written last, it still leads.
    let pmu = ok("metrics:\n  - {name: be, expr: cpu_core/topdown-be-bound/ / cpu_core/slots/}\n");
    assert_eq!(
        text(&pmu, 0),
        ["cpu_core/slots/", "cpu_core/topdown-be-bound/"]
    );
    // Other metrics' groups are left as written.
    let other = ok("metrics:\n  - {name: ipc, expr: instructions / cycles}\n");
    assert_eq!(text(&other, 0), ["instructions", "cycles"]);
}

/// A table with a group `TopdownL1` of two metrics (one over an Intel
/// top-down event), `IPC` referring to the metric `CLKS`, a metric whose
/// events may not share a group, one over perf's wall-clock time, and one
/// over a `@`-written event.
fn catalog() -> Catalog {
    let metric = |name: &str, expr: &str, groups: &[&str], constraint: Option<&str>| {
        crate::events::TableMetric {
            name: name.into(),
            expr: expr.into(),
            description: format!("{name} of the table"),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            scale_unit: Some("100%".into()),
            unit: None,
            constraint: constraint.map(String::from),
        }
    };
    Catalog::new(
        vec![
            metric("CLKS", "CPU_CLK_UNHALTED.THREAD", &[], None),
            metric("IPC", "INST_RETIRED.ANY / CLKS", &["Summary"], None),
            metric(
                "tma_retiring",
                "topdown\\-retiring / (topdown\\-fe\\-bound + topdown\\-retiring)",
                &["TopdownL1"],
                None,
            ),
            metric(
                "tma_frontend_bound",
                "topdown\\-fe\\-bound / (topdown\\-fe\\-bound + topdown\\-retiring) * #SMT_on",
                &["TopdownL1"],
                None,
            ),
            metric(
                "apart",
                "cycles / instructions",
                &["Apart"],
                Some("NO_GROUP_EVENTS"),
            ),
            metric(
                "gips",
                "INST_RETIRED.ANY / duration_time",
                &["Summary"],
                None,
            ),
            metric(
                "edges",
                "cpu@INST_RETIRED.ANY\\,cmask\\=1\\,edge@k / CLKS",
                &[],
                None,
            ),
        ],
        crate::metrics::Literals {
            smt_on: true,
            ..Default::default()
        },
        "the test tables".into(),
    )
}

fn ok_with(text: &str) -> Config {
    parse_for(SOURCE, text, &catalog()).unwrap_or_else(|e| panic!("{text}:\n{e}"))
}

fn err_with(text: &str) -> ConfigError {
    match parse_for(SOURCE, text, &catalog()) {
        Ok(config) => panic!("accepted {text:?}: {config:?}"),
        Err(e) => e,
    }
}

#[test]
fn metrics_are_named_from_the_cpus_tables_alone_or_by_group() {
    let c = ok_with("metrics:\n  - ipc\n  - name: TopdownL1\n  - tma_retiring\n");
    let metrics: Vec<(&str, &str)> = c
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.entry.as_str()))
        .collect();
    // In any case, as perf matches them; a group's metric named again is
    // computed once.
    assert_eq!(
        metrics,
        [
            ("IPC", "ipc"),
            ("tma_retiring", "TopdownL1"),
            ("tma_frontend_bound", "TopdownL1")
        ]
    );
    let ipc = &c.metrics[0];
    assert_eq!(ipc.formula, "INST_RETIRED.ANY / CLKS");
    assert_eq!(ipc.unit, "percent");
    assert_eq!(ipc.description, "IPC of the table");
    // Each metric's events in a group of its own; the top-down ones led by
    // `slots`, as the kernel requires.
    let events = |group: &str| -> Vec<String> {
        c.groups
            .iter()
            .find(|g| g.name == group)
            .unwrap_or_else(|| panic!("no group {group}: {:?}", names(&c)))
            .events
            .iter()
            .map(|e| e.label())
            .collect()
    };
    assert_eq!(
        events("metric:IPC"),
        ["INST_RETIRED.ANY", "CPU_CLK_UNHALTED.THREAD"]
    );
    assert_eq!(
        events("metric:tma_retiring"),
        ["slots", "topdown-retiring", "topdown-fe-bound"]
    );
    // The second top-down metric takes them from the first.
    assert!(!names(&c).contains(&"metric:tma_frontend_bound"));
    // #SMT_on is this machine's: 1 here; 100% scales.
    let fe = &c.metrics[2];
    let values: Vec<f64> = fe
        .inputs
        .iter()
        .map(|i| match &*i.event {
            "topdown-fe-bound" => 1.0,
            "#SMT_on" => 1.0,
            _ => 3.0,
        })
        .collect();
    assert_eq!(fe.expr.eval(&values), Some(25.0));
}

#[test]
fn a_selector_names_a_tables_metric_or_its_group() {
    let c = ok_with(
        "metrics:\n  - TopdownL1\n  - IPC\ncgroups:\n  - path: /a\n    metrics: [TopdownL1]\n  - path: /b\n    metrics: [IPC]\n",
    );
    assert_eq!(c.cgroups[0].metrics, ["tma_retiring", "tma_frontend_bound"]);
    assert_eq!(c.cgroups[0].groups, ["metric:tma_retiring"]);
    assert_eq!(c.cgroups[1].metrics, ["IPC"]);
    assert_eq!(c.cgroups[1].groups, ["metric:IPC"]);
}

#[test]
fn a_tables_metric_whose_events_may_not_share_a_group_gets_one_each() {
    let c = ok_with("metrics: [apart]\n");
    assert_eq!(names(&c), ["metric:apart:1", "metric:apart:2"]);
    let groups: Vec<&str> = c.metrics[0].inputs.iter().map(|i| &*i.group).collect();
    assert_eq!(groups, ["metric:apart:1", "metric:apart:2"]);
}

#[test]
fn perfs_event_syntax_in_a_tables_formula_is_an_event() {
    let c = ok_with("metrics: [edges]\n");
    let labels: Vec<String> = c.groups[0].events.iter().map(|e| e.label()).collect();
    assert_eq!(
        labels,
        [
            "cpu/INST_RETIRED.ANY,cmask=1,edge/k",
            "CPU_CLK_UNHALTED.THREAD"
        ]
    );
}

#[test]
fn duration_time_is_the_time_counted_not_an_event() {
    let c = ok_with(
        "metrics: [Summary]\ncgroups:\n  - path: /a\n    groups: []\n    metrics: [gips]\n",
    );
    let names: Vec<&str> = c.metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["IPC", "gips"]);
    let gips = &c.metrics[1];
    assert_eq!(gips.inputs[1], MetricInput::duration());
    assert!(gips.inputs[1].is_duration());
    // Nothing is counted for it, and a selector computes it with the
    // metric's events alone (taken from IPC's group, which counts them).
    assert!(
        c.groups
            .iter()
            .all(|g| g.events.iter().all(|e| e.label() != "duration_time"))
    );
    assert_eq!(c.cgroups[0].metrics, ["gips"]);
    assert_eq!(c.cgroups[0].groups, ["metric:IPC"]);
}

#[test]
fn named_metric_mistakes_name_the_place_and_the_fix() {
    let e = err_with("metrics:\n  - TopDownL1x\n");
    assert_eq!(e.line.zip(e.column), Some((2, 5)), "{e}");
    assert!(
        e.message
            .contains("no metric or metric group `TopDownL1x` in the test tables"),
        "{e}"
    );
    assert_eq!(e.hint.as_deref(), Some("did you mean `TopdownL1`?"));
    // Without tables, the same name says where metrics by name come from.
    let e = parse(SOURCE, "metrics: [IPC]\n").expect_err("no tables");
    assert!(
        e.hint.as_deref().unwrap_or("").contains("--event-tables"),
        "{e}"
    );
    let e = err_with("metrics:\n  - name: IPC\n    unit: ratio\n");
    assert!(
        e.message
            .contains("has `description` or `unit` but no `expr`"),
        "{e}"
    );
    let e = err_with("metrics:\n  - IPC\n  - name: IPC\n    expr: cycles\n");
    assert_eq!(e.line.zip(e.column), Some((3, 11)), "{e}");
    assert!(e.message.contains("defined twice"), "{e}");
    let e = err_with("metrics:\n  - name: tma_retiring\n    expr: cycles\n  - TopdownL1\n");
    assert_eq!(e.line.zip(e.column), Some((4, 5)), "{e}");
    assert!(
        e.message
            .contains("metric \"tma_retiring\" of \"TopdownL1\" is also defined at line 2"),
        "{e}"
    );
    let e = err_with("metrics:\n  - TopdownL1\n  - name: tma_retiring\n    expr: cycles\n");
    assert_eq!(e.line.zip(e.column), Some((3, 11)), "{e}");
    assert!(
        e.message
            .contains("defined twice (first at line 2, column 5)"),
        "{e}"
    );
    let e = err_with("metrics:\n  - name: ipc\n    expr: cycles\n  - IPC\n");
    assert_eq!(e.line.zip(e.column), Some((4, 5)), "{e}");
    assert!(e.message.contains("defined twice"), "{e}");
}

#[test]
fn a_duplicate_among_thousands_of_metrics_is_refused_where_it_is() {
    // `metrics:` is on line 8 of the text; metric i on line 9 + i.
    let mut text = format!("{METRIC_BASE}metrics:\n");
    for i in 0..5_000 {
        text.push_str(&format!("  - {{name: m{i}, expr: cycles}}\n"));
    }
    let config = ok(&text);
    assert_eq!(config.metrics.len(), 5_000);
    text.push_str("  - {name: m4321, expr: instructions}\n");
    check(
        &text,
        Some((5_009, 12)),
        &["metric \"m4321\" is defined twice (first at line 4330, column 12)"],
        "rename or remove one of them",
    );
}

#[test]
fn a_configs_own_formula_may_use_the_machines_literals() {
    let c = ok_with("metrics:\n  - name: per_thread\n    expr: \"cycles / (1 + #smt_on)\"\n");
    // Unquoted, ` #` starts a YAML comment: the hint says so.
    let e = err_with("metrics:\n  - name: per_thread\n    expr: cycles / (1 + #smt_on)\n");
    assert!(
        e.hint
            .as_deref()
            .unwrap_or("")
            .contains("starts a YAML comment"),
        "{e}"
    );
    // The literal stays an input, whose value is the machine's when the
    // metric is computed: CPUs go offline and come back.
    assert_eq!(c.metrics[0].expr.names(), ["cycles", "#smt_on"]);
    assert!(c.metrics[0].inputs[1].is_literal());
    assert!(!c.metrics[0].inputs[1].is_counted());
    assert_eq!(c.metrics[0].expr.eval(&[10.0, 1.0]), Some(5.0));
    let e = err_with("metrics:\n  - name: x\n    expr: \"cycles / #num_gpus\"\n");
    assert_eq!(e.line.zip(e.column), Some((3, 11)), "{e}");
    assert!(
        e.message
            .contains("uses \"#num_gpus\", which is no literal"),
        "{e}"
    );
    // The hint lists every literal a formula may use, each accepted.
    let hint = e.hint.unwrap_or_default();
    let listed: Vec<&str> = hint
        .split(|c: char| c != '#' && c != '_' && !c.is_ascii_alphanumeric())
        .filter(|w| w.starts_with('#'))
        .collect();
    assert!(listed.len() >= 8, "{hint}");
    for literal in listed {
        ok_with(&format!(
            "metrics:\n  - name: x\n    expr: \"cycles / {literal}\"\n"
        ));
    }
}

#[test]
fn a_literal_this_machine_does_not_know_the_value_of_is_valid_and_has_no_value() {
    // A DaemonSet's config is the same on every node; a node whose
    // /proc/cpuinfo gives no TSC frequency must not refuse it.
    let literals = crate::metrics::Literals {
        system_tsc_freq: None,
        ..crate::metrics::Literals::default()
    };
    assert_eq!(literals.get("#system_tsc_freq"), None);
    assert!(crate::metrics::Literals::knows("#SYSTEM_TSC_FREQ"));
    let catalog = Catalog::new(Vec::new(), literals, "no tables".into());
    let c = parse_for(
        SOURCE,
        "metrics:\n  - name: ghz\n    expr: \"cycles / #system_tsc_freq\"\n",
        &catalog,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(c.metrics[0].inputs[1].is_literal());
}

#[test]
fn a_hybrid_cpus_metric_is_one_per_core_type_each_over_its_own_events() {
    let metric = |name: &str, expr: &str| crate::events::TableMetric {
        name: name.into(),
        expr: expr.into(),
        description: String::new(),
        groups: vec!["Summary".into()],
        scale_unit: None,
        unit: None,
        constraint: None,
    };
    let catalog = Catalog::hybrid(
        vec![
            (
                "cpu_core".into(),
                vec![metric("IPC", "INST_RETIRED.ANY / CPU_CLK_UNHALTED.THREAD")],
            ),
            (
                "cpu_atom".into(),
                vec![metric("IPC", "INST_RETIRED.ANY / CPU_CLK_UNHALTED.CORE")],
            ),
        ],
        crate::metrics::Literals::default(),
        "hybrid tables".into(),
    );
    let c = parse_for(
        SOURCE,
        "metrics: [IPC]\ncgroups:\n  - path: /a\n    metrics: [cpu_atom/IPC]\n  - path: /b\n",
        &catalog,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = c.metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["IPC", "cpu_atom/IPC"]);
    let events = |group: &str| -> Vec<String> {
        let g = c.groups.iter().find(|g| g.name == group).expect(group);
        g.events.iter().map(|e| e.label()).collect()
    };
    assert_eq!(
        events("metric:IPC"),
        [
            "cpu_core/INST_RETIRED.ANY/",
            "cpu_core/CPU_CLK_UNHALTED.THREAD/"
        ]
    );
    assert_eq!(
        events("metric:cpu_atom/IPC"),
        [
            "cpu_atom/INST_RETIRED.ANY/",
            "cpu_atom/CPU_CLK_UNHALTED.CORE/"
        ]
    );
    // A selector names one type's metric by its name; the default selects
    // both, by the entry that defines them.
    assert_eq!(c.cgroups[0].metrics, ["cpu_atom/IPC"]);
    assert_eq!(c.cgroups[1].metrics, ["IPC", "cpu_atom/IPC"]);
}
