//! Vendor event names (`ex_ret_instr`, `BR_INST_RETIRED.NEAR_TAKEN`) through
//! the real binary on this machine: `cgperf list` and `cgperf check` with a
//! table tree given by `--event-tables`, the daemon counting the rest when a
//! name is unknown, and a broken or hostile table directory.
//!
//! The tree is written for this machine's own CPU id (read from
//! /proc/cpuinfo as perf forms it), in perf's pmu-events layout, so that
//! these tests run the same way on every x86 machine. Whether the events
//! count depends on the machine having a hardware PMU, which the tests ask
//! `perf stat` and assert either way.

mod common;

use common::{Exporter, config_file, has_hardware_pmu, require_root, run_cgperf, table_tree};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A perf pmu-events tree (`DIR/x86/mapfile.csv`, `DIR/x86/cgperftest/*.json`)
/// whose table is this machine's: `ex_ret_instr` and `INST_RETIRED.ANY`
/// both encode retired instructions (event 0xc0 on AMD and Intel alike).
fn tree() -> tempfile::TempDir {
    table_tree(
        &["NoSuchVendor-1-1,v1,nothing,core"],
        &[(
            "pipeline.json",
            r#"[
  {"EventName": "ex_ret_instr", "EventCode": "0xc0", "BriefDescription": "Retired Instructions."},
  {"EventName": "INST_RETIRED.ANY", "EventCode": "0x00", "UMask": "0x01", "BriefDescription": "Instructions retired (fixed counter)."}
]"#,
        )],
    )
}

fn arg(dir: &Path) -> String {
    format!("--event-tables={}", dir.display())
}

#[test]
fn list_shows_the_tables_events_with_their_encodings() {
    require_root("ask the kernel which events count here");
    let tree = tree();
    let (code, out, err) = run_cgperf(&["list", &arg(tree.path()), "--all", "--json", "ret"]);
    assert_eq!(code, 0, "{err}");
    let countable = if has_hardware_pmu() { "true" } else { "false" };
    for (name, description) in [
        ("ex_ret_instr", "Retired Instructions. [cpu/event=0xc0/]"),
        (
            "INST_RETIRED.ANY",
            "Instructions retired (fixed counter). [cpu/event=0xc0/]",
        ),
    ] {
        let line = format!(
            r#"{{"name":"{name}","kind":"vendor","description":"{description}","countable":{countable}}}"#
        );
        assert!(out.contains(&line), "no {line} in:\n{out}");
    }
    // Without --all, listed only where they count.
    let (_, table, _) = run_cgperf(&["list", &arg(tree.path()), "ex_ret"]);
    assert_eq!(
        table.contains("ex_ret_instr"),
        has_hardware_pmu(),
        "{table}"
    );
}

#[test]
fn check_resolves_vendor_names_and_suggests_for_a_misspelt_one() {
    require_root("probe events");
    let tree = tree();
    let config = config_file(
        "groups:\n  named: [ex_ret_instr]\n  typo: [ex_ret_instrs]\n  sw: [task-clock]\ncgroups:\n  - path: /\n    groups: [named, typo, sw]\n",
    );
    let config_arg = format!("--config.file={}", config.path().display());
    let (code, out, err) = run_cgperf(&[&config_arg, &arg(tree.path()), "check"]);
    assert_eq!(code, 0, "the software group counts:\n{out}{err}");
    let typo = reason(&out, "ex_ret_instrs");
    assert!(
        typo.contains("no event `ex_ret_instrs` in the event tables of this CPU (")
            && typo.contains("did you mean `ex_ret_instr`?"),
        "{typo}"
    );
    let named = reason(&out, "ex_ret_instr");
    if has_hardware_pmu() {
        assert_eq!(named, "ok", "resolved and counted");
    } else {
        // Resolved from the table; this VM has no `cpu` PMU to open it on.
        assert!(
            named.contains("no PMU `cpu` on this machine")
                && named.contains("this machine has no hardware PMU"),
            "{named}"
        );
    }
    // Without the tree, this machine's CPU has no embedded table (or one
    // without the AMD name): the message says where to get one.
    let (_, out, _) = run_cgperf(&[&config_arg, "check"]);
    let line = reason(&out, "ex_ret_instrs");
    assert!(line.starts_with("no event `ex_ret_instrs` in "), "{line}");
}

/// The status `cgperf check` gives `event` alone: `ok`, or the reason its
/// footnote (`NOT COUNTED [N]`, then `[N] reason`) says.
fn reason(out: &str, event: &str) -> String {
    let row = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(event))
        .unwrap_or_else(|| panic!("no row for {event}:\n{out}"));
    let status = row.split_whitespace().skip(2).collect::<Vec<_>>().join(" ");
    let Some(note) = status.strip_prefix("NOT COUNTED ") else {
        return status;
    };
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{note} ")))
        .unwrap_or_else(|| panic!("no footnote {note}:\n{out}"))
        .to_string()
}

#[test]
fn the_daemon_counts_the_rest_when_a_vendor_name_is_unknown() {
    require_root("count per cgroup");
    let tree = tree();
    let config = config_file(
        "interval: 200ms\ngroups:\n  typo: [ex_ret_instrs]\n  sw: [task-clock]\ncgroups:\n  - path: /\n    groups: [typo, sw]\n",
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()))
        .arg(arg(tree.path()));
    let exporter = Exporter::spawn(cmd);
    let body = exporter.wait_for("the software group's counts", |b| {
        b.contains("cgperf_clock_seconds_total{cgroup=\"/\",group=\"sw\"")
    });
    assert!(
        body.contains("cgperf_group_supported{group=\"typo\",reason=\"unknown_event\"} 0"),
        "{body}"
    );
    assert!(
        exporter.log().contains("did you mean `ex_ret_instr`?"),
        "{}",
        exporter.log()
    );
}

/// Runs `cgperf check --event-tables DIR` with the default config; it must
/// end within `limit` (a FIFO must not be waited on).
fn check_with(dir: &Path, limit: Duration) -> (i32, String) {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .arg(arg(dir))
        .arg("check")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cgperf runs");
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .expect("stderr")
                .read_to_string(&mut err)
                .expect("read");
            return (status.code().unwrap_or(-1), err);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!(
                "cgperf check --event-tables {} did not end within {limit:?}",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_broken_or_hostile_table_directory_stops_start_naming_the_file() {
    require_root("read the machine's PMUs");
    let tree = tree();
    let json = tree.path().join("x86/cgperftest/pipeline.json");
    std::fs::write(&json, "[\n  {\"EventName\": oops}\n]").expect("write");
    let (code, err) = check_with(tree.path(), Duration::from_secs(30));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}:2:", json.display())) && err.contains("not an event table"),
        "{err}"
    );
    // A directory without a mapfile, and one whose mapfile is a FIFO.
    let empty = tempfile::tempdir().expect("temp dir");
    let (code, err) = check_with(empty.path(), Duration::from_secs(30));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no x86/mapfile.csv (perf's tools/perf/pmu-events/arch)"),
        "{err}"
    );
    let fifo_dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(fifo_dir.path().join("x86")).expect("mkdir");
    let fifo: PathBuf = fifo_dir.path().join("x86/mapfile.csv");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let (code, err) = check_with(fifo_dir.path(), Duration::from_secs(30));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no x86/mapfile.csv"), "{err}");
}
