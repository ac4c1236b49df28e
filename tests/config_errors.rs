//! Every kind of bad config gives its own error, naming the file, line and
//! column and the fix, and a non-zero exit from both `cgperf check` and the
//! exporter. No counting is started on a bad config.

mod common;

use common::*;

/// (what, config, expected `line:column: message` fragment, hint fragment)
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "unknown key",
        "interval: 1s\ngroupz:\n  a: [task-clock]\n",
        ":2:1: unknown key \"groupz\"",
        "did you mean `groups`",
    ),
    (
        "unknown nested key",
        "groups:\n  a: [task-clock]\ncgroups:\n  - path: /\n    grups: [a]\n",
        ":5:5: unknown key \"grups\"",
        "groups",
    ),
    (
        "wrong type",
        "groups: 3\n",
        ":1:9: `groups` must be a mapping",
        "ipc: [cycles, instructions]",
    ),
    (
        "bad duration",
        "interval: 1 sec\ngroups:\n  a: [task-clock]\n",
        ":1:11: invalid interval",
        "250ms",
    ),
    (
        "interval too short",
        "interval: 10ms\ngroups:\n  a: [task-clock]\n",
        ":1:11:",
        "100ms",
    ),
    (
        "empty group",
        "groups:\n  a: []\n",
        ":2:6: group `a` has no events",
        "list at least one event",
    ),
    (
        "undefined group",
        "groups:\n  a: [task-clock]\ncgroups:\n  - path: /\n    groups: [b]\n",
        ":5:14: `cgroups[0]` refers to undefined group \"b\"",
        "defined groups: a",
    ),
    (
        "malformed event",
        "groups:\n  a: [task-clokc]\n",
        ":2:7: in group `a`: unknown event `task-clokc`; did you mean `task-clock`?",
        "perf list",
    ),
    (
        "malformed tracepoint",
        "groups:\n  a: [task-clock]\ntracepoints: [sched-switch]\n",
        ":3:15: invalid tracepoint `sched-switch`",
        "sched:sched_switch",
    ),
    (
        "relative cgroup path",
        "groups:\n  a: [task-clock]\ncgroups:\n  - path: system.slice\n",
        ":4:11: the path \"system.slice\" is relative",
        "/system.slice",
    ),
    (
        "invalid glob",
        "groups:\n  a: [task-clock]\ncgroups:\n  - match: /a/[b\n",
        ":4:12: invalid glob \"/a/[b\"",
        "[abc]",
    ),
    (
        "duplicate key",
        "groups:\n  a: [task-clock]\n  a: [cycles]\n",
        ":3:3: duplicate key \"a\"",
        "only once",
    ),
    (
        "reserved group name",
        "groups:\n  tracepoints: [task-clock]\n",
        ":2:3:",
        "tracepoints",
    ),
    (
        "reserved group name of probes",
        "groups: {probes: [context-switches]}\n",
        ":1:10: the group name \"probes\" is reserved",
        "pick another group name",
    ),
    (
        "reserved group name beside the probes list",
        "groups: {probes: [page-faults]}\nprobes: [{kprobe: do_sys_openat2, as: opens}]\n",
        ":1:10: the group name \"probes\" is reserved",
        "pick another group name",
    ),
    (
        "reserved group name beside the tracepoints list",
        "groups:\n  tracepoints: [page-faults]\ntracepoints: [sched:sched_switch]\n",
        ":2:3: the group name \"tracepoints\" is reserved",
        "list tracepoints and probes there",
    ),
    (
        "NUL in a cgroup path",
        "groups:\n  a: [task-clock]\ncgroups:\n  - path: \"/a\\0b\"\n",
        ":4:11: the path \"/a\\0b\" contains the control character \\0",
        "without control characters",
    ),
    (
        "escape sequence in a cgroup glob",
        "groups:\n  a: [task-clock]\ncgroups:\n  - match: \"/a\\e[2J*\"\n",
        ":4:12: the match pattern \"/a\\u{1b}[2J*\" contains the control character",
        "without control characters",
    ),
    (
        "max_series beyond 64 bits",
        "tracepoints:\n  - {name: sched:sched_switch, by: [prev_pid], max_series: 99999999999999999999}\n",
        ":2:60: `tracepoints[0].max_series` is 99999999999999999999, too large: it must be from 1 to 10000",
        "max_series: 100",
    ),
    (
        "interval without a unit",
        "interval: 0\ngroups:\n  a: [task-clock]\n",
        ":1:11: invalid interval: duration \"0\" has no unit",
        "from 100ms to 1h with its unit (ms, s, m or h), e.g. `1s`",
    ),
    (
        "metric dividing by a constant 0",
        "groups:\n  a: [cs]\nmetrics:\n  - {name: m, expr: cs / (1 - 1)}\n",
        ":4:21: metric \"m\": `expr` \"cs / (1 - 1)\": `/` by 0: the metric would never have a value",
        "d_ratio(a, b)",
    ),
    (
        "metric's remainder by a constant below 1",
        "groups:\n  a: [cs]\nmetrics:\n  - {name: m, expr: \"cs % 0.5\"}\n",
        ":4:21: metric \"m\": `expr` \"cs % 0.5\": `%` by 0 (0.5 is 0 as a whole number",
        "(at character 6)",
    ),
    (
        "metric's number beyond a float",
        "groups:\n  a: [cs]\nmetrics:\n  - {name: m, expr: cs * 1e999}\n",
        ":4:21: metric \"m\": `expr` \"cs * 1e999\": `1e999` is too large to be a number",
        "(at character 6)",
    ),
    ("nothing to count", "interval: 1s\n", "", "groups"),
];

#[test]
fn each_bad_config_has_its_own_located_error_from_check_and_exporter() {
    for (what, yaml, message, hint) in CASES {
        let file = config_file(yaml);
        let path = file.path().display().to_string();
        let config = format!("--config.file={path}");
        // The exporter gets an address that would fail if it got as far as serving.
        for args in [
            vec!["check".to_string(), config.clone()],
            vec![config.clone(), "--web.listen-address=127.0.0.1:1".into()],
        ] {
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, _, err) = run_cgperf(&argv);
            assert_eq!(code, 1, "{what} ({argv:?}) must exit 1, stderr:\n{err}");
            assert!(
                err.contains(&format!("{path}{message}")),
                "{what}: expected `{path}{message}` in:\n{err}"
            );
            assert!(
                err.contains("hint:") && err.contains(hint),
                "{what}: expected hint `{hint}` in:\n{err}"
            );
            assert!(
                !err.contains(|c: char| c.is_control() && c != '\n'),
                "{what}: a control character printed raw:\n{err:?}"
            );
        }
    }
}

#[test]
fn unreadable_config_names_the_path() {
    let (code, _, err) = run_cgperf(&["check", "--config.file=/nonexistent/cgperf.yaml"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("/nonexistent/cgperf.yaml") && err.contains("No such file"),
        "{err}"
    );
}

#[test]
fn alias_expansion_is_bounded() {
    // Few aliases, each replaying a long list: type-correct, but the
    // expansion would be huge; the YAML budget rejects it.
    let events = vec!["task-clock"; 200].join(", ");
    let mut yaml = format!("groups:\n  g0: &e [{events}]\n");
    for i in 1..600 {
        yaml.push_str(&format!("  g{i}: *e\n"));
    }
    let file = config_file(&yaml);
    let (code, _, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&file.path().display().to_string()), "{err}");
    assert!(err.contains("too complex"), "{err}");
}

/// `cgperf check` on `yaml`: exit 1, and the error.
fn rejected(yaml: &str) -> String {
    let file = config_file(yaml);
    let (code, _, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 1, "{}", &err[..err.len().min(2_000)]);
    assert!(err.contains(&file.path().display().to_string()), "{err}");
    err
}

#[test]
fn a_document_nested_10000_deep_is_refused_for_its_depth() {
    let deep = format!(
        "groups:\n  a: [task-clock]\ncgroups: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let err = rejected(&deep);
    assert!(
        err.contains(":3:") && err.contains("nests lists and mappings more than 32 levels deep"),
        "{err}"
    );
    assert!(!err.contains("tabs") && !err.contains("recursion"), "{err}");
}

#[test]
fn a_100000_character_event_name_is_not_echoed_whole() {
    let name = "x".repeat(100_000);
    let err = rejected(&format!("groups:\n  a: [{name}]\n"));
    assert!(
        err.contains(&format!(
            ":2:7: in group `a`: unknown event `{}…`",
            "x".repeat(80)
        )),
        "{}",
        &err[..err.len().min(2_000)]
    );
    assert!(err.len() < 1_000, "{} bytes of error", err.len());
}

#[test]
fn a_metric_of_900_kb_is_refused_not_copied_into_its_description_label() {
    let long = format!("cs{}", " + cs".repeat(180_000));
    let err = rejected(&format!(
        "groups:\n  a: [cs]\nmetrics:\n  - name: m\n    expr: {long}\n"
    ));
    assert!(
        err.contains(":5:11: metric \"m\": `expr`")
            && err.contains("900002 bytes long, more than the 4096 a metric may have"),
        "{}",
        &err[..err.len().min(2_000)]
    );
    let err = rejected(&format!(
        "groups:\n  a: [cs]\nmetrics:\n  - name: m\n    expr: cs\n    description: {}\n",
        "x".repeat(900_000)
    ));
    assert!(
        err.contains(":6:18: metric \"m\": `description` is 900000 bytes long, more than the 4096"),
        "{}",
        &err[..err.len().min(2_000)]
    );
}

#[test]
fn every_mistake_is_reported_in_one_pass_in_file_order() {
    // Seven independent mistakes, in sections checked in another order;
    // the selector names the broken group `a` too, and is not blamed for
    // `a`'s own mistake.
    let err = rejected(
        "interval: 1 sec\n\
         groups:\n  a: [task-clokc]\n  b: [cycles, cycles]\n\
         tracepoints:\n  - sched\n  - {name: x:y, as: \"bad label\"}\n\
         cgroups:\n  - {path: /, groups: [a, c]}\n\
         backend: bfp\n",
    );
    let positions: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("  hint: "))
        .filter_map(|l| l.split_once(".yaml:")?.1.split_once(": ").map(|(at, _)| at))
        .collect();
    assert_eq!(
        positions,
        ["1:11", "3:7", "4:15", "6:5", "7:21", "9:27", "10:10"],
        "{err}"
    );
    assert_eq!(err.matches("  hint: ").count(), 7, "{err}");
    assert!(err.contains("undefined group \"c\""), "{err}");
    assert!(!err.contains("undefined group \"a\""), "{err}");
}

#[test]
fn a_thousand_mistakes_show_the_first_twenty_and_a_count() {
    let events = vec!["nosuchevent"; 1000].join(", ");
    let err = rejected(&format!("groups:\n  a: [{events}]\n"));
    assert_eq!(
        err.matches("unknown event `nosuchevent`").count(),
        20,
        "{err}"
    );
    assert!(
        err.ends_with("and 980 more mistakes after these\n"),
        "{err}"
    );
}
