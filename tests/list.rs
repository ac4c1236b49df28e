//! `cgperf list`, run as the real binary on this machine: what it lists, the
//! filter, the JSON form, and that every name it lists is one cgperf accepts.
//!
//! Listing tracepoints reads tracefs, which needs root: these tests fail,
//! saying so, without it.

mod common;

use common::{has_hardware_pmu, require_root, run_cgperf};
use std::path::Path;
use std::process::Command;

/// Runs `cgperf list ARGS` as root; returns stdout.
fn list(args: &[&str]) -> String {
    require_root("list tracepoints, which reads tracefs");
    let out = Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .arg("list")
        .args(args)
        .output()
        .expect("run cgperf list");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cgperf list {args:?} failed: {stderr}"
    );
    // The one note that may come: what this machine cannot count was left out.
    assert!(
        stderr.lines().all(|l| l.starts_with("cgperf list: ")
            && l.contains("this machine cannot count are left out")),
        "cgperf list {args:?} complained: {stderr}"
    );
    String::from_utf8(out.stdout).expect("UTF-8 listing")
}

/// `(name, kind)` of every event line of the table: the lines before the
/// first blank line (the PMU format terms and probes come after it).
fn entries(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .take_while(|line| !line.is_empty())
        .map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next().expect("a name").to_string();
            let kind = words.next().expect("a kind").to_string();
            (name, kind)
        })
        .collect()
}

#[test]
fn lists_every_kind_of_event() {
    let table = list(&[]);
    let entries = entries(&table);
    let has = |name: &str, kind: &str| {
        assert!(
            entries.iter().any(|(n, k)| n == name && k == kind),
            "`{name}` ({kind}) is not listed"
        );
    };
    has("task-clock", "software");
    has("sched:sched_switch", "tracepoint");
    // Hardware and cache events are listed when this machine counts them;
    // `--all` lists every one (see the next test).
    let all = self::entries(&list(&["--all"]));
    for (name, kind) in [
        ("cycles", "hardware"),
        ("instructions", "hardware"),
        ("L1-dcache-load-misses", "cache"),
        ("LLC-loads", "cache"),
    ] {
        assert!(
            all.iter().any(|(n, k)| n == name && k == kind),
            "`{name}` ({kind}) is not listed with --all"
        );
    }
    assert!(
        Path::new("/sys/bus/event_source/devices/msr/events/tsc").exists(),
        "this machine has the msr PMU's tsc event, which the next check needs"
    );
    has("msr/tsc/", "pmu");
    assert!(table.contains("\n  msr/ "), "msr's format terms: {table}");
    assert!(
        table.contains("\n  uprobe: available"),
        "uprobe support: {table}"
    );
    assert!(
        table.contains("\n  kprobe: unavailable"),
        "kprobe support: {table}"
    );
}

#[test]
fn filter_is_a_case_insensitive_substring() {
    let table = list(&["GetPriority"]);
    let names: Vec<String> = entries(&table).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "syscalls:sys_enter_getpriority",
            "syscalls:sys_exit_getpriority"
        ]
    );
    assert_eq!(
        table.lines().count(),
        2,
        "nothing but the two tracepoints: {table}"
    );
}

#[test]
fn json_is_the_table_as_objects() {
    let table = entries(&list(&[]));
    let json = list(&["--json"]);
    let objects = parse_json_array(&json);
    let from_json: Vec<(String, String)> = objects
        .iter()
        .map(|[name, kind, ..]| (name.clone(), kind.clone()))
        .collect();
    assert_eq!(from_json.len(), table.len());
    assert_eq!(from_json, table);
    let tsc = objects
        .iter()
        .find(|[name, ..]| name == "msr/tsc/")
        .expect("msr/tsc/ in the JSON");
    assert_eq!(tsc[2], "msr PMU: event=0x00");
}

#[test]
fn every_listed_event_is_accepted_by_cgperf() {
    let table = entries(&list(&[]));
    assert!(table.len() > 100, "only {} events listed", table.len());
    for (name, kind) in &table {
        let parsed = match kind.as_str() {
            "tracepoint" => cgperf::events::parse_tracepoint(name).map(drop),
            "hardware" | "software" | "cache" | "pmu" => {
                cgperf::events::parse_event(name).map(drop)
            }
            other => panic!("`{name}` has an unknown kind `{other}`"),
        };
        assert!(parsed.is_ok(), "`{name}` ({kind}): {parsed:?}");
    }
}

/// Parses the JSON that `cgperf list --json` writes (an array of objects with
/// exactly the string members name, kind and description and the member
/// countable, true, false or null, in that order), failing on anything else.
fn parse_json_array(json: &str) -> Vec<[String; 4]> {
    let mut p = Parser { rest: json.trim() };
    p.expect('[');
    let mut objects = Vec::new();
    if p.eat(']') {
        return objects;
    }
    loop {
        p.expect('{');
        let mut object: [String; 4] = Default::default();
        for (i, key) in ["name", "kind", "description"].iter().enumerate() {
            if i > 0 {
                p.expect(',');
            }
            assert_eq!(p.string(), *key, "member {i}");
            p.expect(':');
            object[i] = p.string();
        }
        p.expect(',');
        assert_eq!(p.string(), "countable", "member 3");
        p.expect(':');
        object[3] = p.literal(&["true", "false", "null"]);
        p.expect('}');
        objects.push(object);
        if p.eat(']') {
            break;
        }
        p.expect(',');
    }
    assert!(p.rest.is_empty(), "trailing text: {}", p.rest);
    objects
}

struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    fn eat(&mut self, c: char) -> bool {
        self.rest = self.rest.trim_start();
        match self.rest.strip_prefix(c) {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn expect(&mut self, c: char) {
        let at: String = self.rest.chars().take(40).collect();
        assert!(self.eat(c), "expected `{c}` at: {at}");
    }

    /// One of `words`, as it stands.
    fn literal(&mut self, words: &[&str]) -> String {
        self.rest = self.rest.trim_start();
        let word = words
            .iter()
            .find(|w| self.rest.starts_with(**w))
            .unwrap_or_else(|| panic!("expected one of {words:?} at: {}", self.rest));
        self.rest = &self.rest[word.len()..];
        word.to_string()
    }

    fn string(&mut self) -> String {
        self.expect('"');
        let mut out = String::new();
        let mut chars = self.rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[i + 1..];
                    return out;
                }
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('/') => out.push('/'),
                    Some('n') => out.push('\n'),
                    Some('r') => out.push('\r'),
                    Some('t') => out.push('\t'),
                    Some('u') => {
                        let hex: String = (0..4)
                            .filter_map(|_| chars.next().map(|(_, c)| c))
                            .collect();
                        let code = u32::from_str_radix(&hex, 16).expect("\\u and 4 hex digits");
                        out.push(char::from_u32(code).expect("a scalar value"));
                    }
                    other => panic!("bad escape {other:?}"),
                },
                c if (c as u32) < 0x20 => panic!("unescaped control character {c:?}"),
                c => out.push(c),
            }
        }
        panic!("unterminated string");
    }
}

#[test]
fn leaves_out_what_this_machine_cannot_count_unless_asked() {
    let default = entries(&list(&[]));
    let all = list(&["--all"]);
    let listed = |entries: &[(String, String)], name: &str| entries.iter().any(|(n, _)| n == name);
    let cycles_line = all
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cycles"))
        .unwrap_or_else(|| panic!("--all lists cycles:\n{all}"))
        .to_string();
    // Software events count everywhere.
    assert!(listed(&default, "task-clock"));
    let json = parse_json_array(&list(&["--json", "--all", "cycles"]));
    let cycles_json = json
        .iter()
        .find(|[name, ..]| name == "cycles")
        .expect("cycles in the JSON");
    if has_hardware_pmu() {
        assert!(listed(&default, "cycles"), "this machine counts cycles");
        assert!(
            !cycles_line.contains("[not countable here]"),
            "{cycles_line}"
        );
        assert_eq!(cycles_json[3], "true");
    } else {
        assert!(
            !listed(&default, "cycles"),
            "this machine cannot count cycles (perf stat says so), yet it is listed"
        );
        assert!(
            cycles_line.contains("[not countable here]"),
            "{cycles_line}"
        );
        assert_eq!(cycles_json[3], "false");
        let (_, _, note) = run_cgperf(&["list", "cycles"]);
        assert!(
            note.contains("this machine cannot count are left out; `cgperf list --all`"),
            "{note}"
        );
    }
    let default_json = parse_json_array(&list(&["--json", "task-clock"]));
    assert_eq!(default_json[0][3], "true", "{default_json:?}");
}

#[test]
fn a_config_file_is_refused_since_list_reads_none() {
    // Whatever the path: list would not read it, and saying nothing would
    // let a user believe the listing followed the config.
    let (code, out, err) = run_cgperf(&["list", "--config.file=/nonexistent/cgperf.yaml"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("list reads no config"), "{err}");
    assert!(err.contains("cgperf check --config.file="), "{err}");
}
