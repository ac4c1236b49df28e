//! `cgperf stat`, run as the real binary on the real kernel: exact counts of
//! a deterministic command in its own cgroup, exit statuses, -G, -I, flag
//! errors, and the command's cgroup going away afterwards.
//!
//! These tests need root (cgroups, perf in cgroup mode, tracefs); without it
//! they fail, saying so.

mod common;

use common::{TestCgroup, cgroup2_root, getppid_workload, require_root};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

/// `perl -e '<N getppid syscalls>'`: perl makes no getppid of its own, so
/// the command makes exactly `n`.
fn getppid_command(n: u64) -> Vec<String> {
    let script = format!("syscall({}) for 1..{n}", libc::SYS_getppid);
    vec!["perl".into(), "-e".into(), script]
}

fn cgperf() -> Command {
    require_root("create cgroups and count in them");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.args(["--log.level", "warn", "stat"]);
    cmd
}

/// Runs `cgperf stat ARGS` to completion.
fn stat(args: &[&str]) -> Output {
    cgperf().args(args).output().expect("run cgperf stat")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// The summary line of `event` in `cgroup` (after the
/// "Performance counter stats" header), split into words.
fn summary_line(text: &str, event: &str, cgroup: &str) -> Vec<String> {
    let summary = text
        .split_once(" Performance counter stats for ")
        .unwrap_or_else(|| panic!("no summary in:\n{text}"))
        .1;
    let matching: Vec<Vec<String>> = summary
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|w| w.iter().any(|x| x == event) && w.iter().any(|x| x == cgroup))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "one `{event}` line for {cgroup} in:\n{text}"
    );
    matching.into_iter().next().expect("one line")
}

#[test]
fn counts_a_commands_getppid_exactly_in_its_own_cgroup() {
    let mut args = vec!["-e", "syscalls:sys_enter_getppid", "--"];
    let command = getppid_command(4321);
    args.extend(command.iter().map(String::as_str));
    let child = cgperf()
        .args(&args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cgperf stat");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for cgperf stat");
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    let cgroup = format!("/cgperf-stat-{pid}");
    assert!(
        text.contains(" Performance counter stats for 'perl -e syscall("),
        "{text}"
    );
    assert!(text.contains(&format!("(cgroup {cgroup}):")), "{text}");
    let line = summary_line(&text, "syscalls:sys_enter_getppid", &cgroup);
    assert_eq!(line[0], "4,321", "{text}");
    assert!(text.contains(" seconds time elapsed"), "{text}");
    let dir = cgroup2_root().join(cgroup.trim_start_matches('/'));
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[test]
fn exits_with_the_commands_status() {
    let out = stat(&["-e", "task-clock", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let killed = stat(&["-e", "task-clock", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(killed.status.code(), Some(128 + 9), "{killed:?}");
    // The counts are printed either way.
    assert!(stdout(&killed).contains(" Performance counter stats for 'sh -c kill -9 $$'"));
}

#[test]
fn counts_a_given_cgroup_until_ctrl_c() {
    let cg = TestCgroup::create("cgperf-stat-g");
    let mut child = cgperf()
        .args([
            "-e",
            "syscalls:sys_enter_getppid",
            "-G",
            &cg.rel,
            "-I",
            "100",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cgperf stat");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    // The first interval line: the counters are open, so the workload is
    // counted from its first syscall.
    let mut line = String::new();
    while !line.contains("syscalls:sys_enter_getppid") {
        line.clear();
        assert_ne!(
            stdout.read_line(&mut line).expect("read"),
            0,
            "cgperf stat ended early"
        );
    }
    getppid_workload(Some(&cg.dir), 1234);
    // SAFETY: sends SIGINT to the child we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("read");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "Ctrl-C ends counting with status 0");
    assert!(
        rest.contains(&format!(
            " Performance counter stats for cgroup {}:",
            cg.rel
        )),
        "{rest}"
    );
    let line = summary_line(&rest, "syscalls:sys_enter_getppid", &cg.rel);
    assert_eq!(line[0], "1,234", "{rest}");
    assert!(cg.dir.exists(), "a -G cgroup is not removed");
}

#[test]
fn counts_given_cgroups_while_a_command_runs() {
    let cg = TestCgroup::create("cgperf-stat-gc");
    // The command moves itself into the -G cgroup, then makes the syscalls.
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec perl -e 'syscall({}) for 1..777'",
        cg.dir.display(),
        libc::SYS_getppid
    );
    let out = stat(&[
        "-e",
        "syscalls:sys_enter_getppid",
        "-G",
        &cg.rel,
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        summary_line(&text, "syscalls:sys_enter_getppid", &cg.rel)[0],
        "777",
        "{text}"
    );
}

#[test]
fn interval_mode_prints_timestamped_deltas() {
    let out = stat(&[
        "-I",
        "200",
        "-e",
        "task-clock",
        "-e",
        "sched:sched_switch",
        "--",
        "sleep",
        "1",
    ]);
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    let (intervals, _) = text
        .split_once(" Performance counter stats")
        .expect("summary");
    assert!(intervals.starts_with("#           time "), "{text}");
    let stamps: Vec<f64> = intervals
        .lines()
        .filter(|l| l.contains("task-clock"))
        .map(|l| {
            l.split_whitespace()
                .next()
                .expect("a timestamp")
                .parse()
                .expect("seconds")
        })
        .collect();
    // sleep 1 at 200 ms intervals: four full intervals and the last part.
    assert!(stamps.len() >= 2, "several intervals: {text}");
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{stamps:?}");
}

#[test]
fn bad_flags_exit_1_with_what_to_fix() {
    let out = stat(&["-e", "cycels", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-e cycels: unknown event `cycels`; did you mean `cycles`?"),
        "{err}"
    );

    let out = stat(&["-e", "sched:no_such_tracepoint", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown tracepoint `sched:no_such_tracepoint`"),
        "{err}"
    );

    let out = stat(&["-G", "/cgperf-no-such-cgroup", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-G /cgperf-no-such-cgroup: no such cgroup"),
        "{err}"
    );

    let config = tempfile::NamedTempFile::new().expect("temp file");
    let path = config.path().to_str().expect("UTF-8 path");
    let out = stat(&["--config.file", path, "-e", "cycles", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-e and --config.file cannot be combined"),
        "{err}"
    );
}

#[test]
fn a_config_file_gives_the_events() {
    let mut config = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(
        &mut config,
        b"groups:\n  sched: [task-clock]\ntracepoints: [syscalls:sys_enter_getppid]\n",
    )
    .expect("write config");
    let path = config.path().to_str().expect("UTF-8 path");
    let mut args = vec!["--config.file", path, "--"];
    let command = getppid_command(321);
    args.extend(command.iter().map(String::as_str));
    let child = cgperf()
        .args(&args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start");
    let cgroup = format!("/cgperf-stat-{}", child.id());
    let out = child.wait_with_output().expect("wait");
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        summary_line(&text, "syscalls:sys_enter_getppid", &cgroup)[0],
        "321",
        "{text}"
    );
    assert_eq!(
        summary_line(&text, "task-clock", &cgroup)[1],
        "msec",
        "{text}"
    );
}
