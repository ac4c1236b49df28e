//! `cgperf stat`, run as the real binary on the real kernel: exact counts of
//! a deterministic command in its own cgroup, exit statuses, -G, -I, flag
//! errors, and the command's cgroup going away afterwards.
//!
//! These tests need root (cgroups, perf in cgroup mode, tracefs); without it
//! they fail, saying so.

mod common;

use common::{TestCgroup, cgroup2_root, getppid_workload, in_foreground, require_root};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

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
    in_foreground(&mut cmd);
    cmd
}

/// Runs `cgperf stat ARGS` to completion.
fn stat(args: &[&str]) -> Output {
    cgperf().args(args).output().expect("run cgperf stat")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

/// Runs `cgperf stat ARGS -- COMMAND` to success; returns its stdout and
/// the cgroup it made for the command (named after its PID).
fn stat_command(args: &[&str], command: &[String]) -> (String, String) {
    let child = cgperf()
        .args(args)
        .arg("--")
        .args(command)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start cgperf stat");
    let cgroup = format!("/cgperf-stat-{}", child.id());
    let out = child.wait_with_output().expect("wait for cgperf stat");
    assert!(out.status.success(), "{out:?}");
    (stdout(&out), cgroup)
}

/// The summary line of `event` in `cgroup` (after the
/// "Performance counter stats" header: the event named right before the
/// cgroup, not in a comment), split into words.
fn summary_line(text: &str, event: &str, cgroup: &str) -> Vec<String> {
    let summary = text
        .split_once(" Performance counter stats for ")
        .unwrap_or_else(|| panic!("no summary in:\n{text}"))
        .1;
    let matching: Vec<Vec<String>> = summary
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|w| w.windows(2).any(|p| p[0] == event && p[1] == cgroup))
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
    let (text, cgroup) = stat_command(
        &["-e", "syscalls:sys_enter_getppid"],
        &getppid_command(4321),
    );
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
    assert_eq!(
        shell_status(status),
        128 + libc::SIGINT,
        "Ctrl-C ends counting as it ends perf stat: {status:?}"
    );
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

/// A `-G` cgroup whose name is not UTF-8, given raw, is counted and shown
/// under its escaped path.
#[test]
fn counts_a_given_cgroup_whose_name_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let parent = TestCgroup::create("cgperf-stat-bytes");
    let odd = TestCgroup {
        rel: format!("{}/caf\\xE9", parent.rel),
        dir: parent.dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9")),
    };
    std::fs::create_dir(&odd.dir).expect("mkdir a cgroup named with invalid UTF-8");
    let given = std::path::Path::new(&parent.rel).join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    let script = format!(
        "echo $$ > \"$1\"/cgroup.procs && exec perl -e 'syscall({}) for 1..555'",
        libc::SYS_getppid
    );
    let out = cgperf()
        .args(["-e", "syscalls:sys_enter_getppid", "-G"])
        .arg(&given)
        .args(["--", "sh", "-c", &script, "sh"])
        .arg(&odd.dir)
        .output()
        .expect("run cgperf stat");
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        summary_line(&text, "syscalls:sys_enter_getppid", &odd.rel)[0],
        "555",
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

    let out = stat(&["-e", "sched:sched_swtich", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did you mean `sched:sched_switch`?"), "{err}");

    let out = stat(&["-G", "/cgperf-no-such-cgroup", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-G /cgperf-no-such-cgroup: no such cgroup"),
        "{err}"
    );

    // A mistake of -M names its argument and the column there, not a
    // place in a file nobody wrote.
    let out = stat(&[
        "-M",
        "cgperf_none_a,cgperf_none_b",
        "-M",
        "cgperf_none_c",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for (argument, column, name) in [
        ("cgperf_none_a,cgperf_none_b", 1, "cgperf_none_a"),
        ("cgperf_none_a,cgperf_none_b", 15, "cgperf_none_b"),
        ("cgperf_none_c", 1, "cgperf_none_c"),
    ] {
        assert!(
            err.contains(&format!(
                "-M \"{argument}\", column {column}: no metric or metric group `{name}`"
            )),
            "{err}"
        );
    }
    assert!(!err.contains("-M:"), "{err}");

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

/// An option `cgperf stat` does not know is a bad flag, as perf's: exit 1
/// before anything is set up, naming it, with the option meant where one
/// is close; never a command to run. After `--`, or after the command's
/// name, options are the command's.
#[test]
fn unknown_options_are_bad_flags_and_dash_dash_still_ends_cgperfs() {
    let out = stat(&["--badflag"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unexpected argument '--badflag'"), "{err}");
    assert!(!err.contains("cannot start"), "{err}");
    assert!(out.stdout.is_empty(), "nothing counted");

    let out = stat(&["--evnt", "task-clock", "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.matches("a similar argument exists: '--event'").count(),
        1,
        "{err}"
    );
    let out = stat(&["-e", "task-clock", "-x", "true"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // `--` ends cgperf's options: what follows is the command, even when
    // it looks like an option.
    let out = stat(&["-e", "task-clock", "--", "--badflag"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot start `--badflag`"), "{err}");
    // The command's own options, with or without `--`.
    for args in [
        &["-e", "task-clock", "--", "sh", "-c", "exit 7"][..],
        &["-e", "task-clock", "sh", "-c", "exit 7"][..],
    ] {
        let out = stat(args);
        assert_eq!(out.status.code(), Some(7), "{args:?}: {out:?}");
        assert!(stdout(&out).contains("task-clock"), "{args:?}: {out:?}");
    }
}

#[test]
fn a_constant_metric_is_printed_as_every_other() {
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        "groups:\n  sw: [context-switches]\nmetrics:\n  - {name: two, expr: 2}\n\
         \x20 - {name: cs_twice, expr: context-switches * 2}\n",
    )
    .expect("written");
    let path = config.path().to_str().expect("UTF-8 path");
    let (out, err) = stat_command(&["--config.file", path, "-M", "two"], &getppid_command(10));
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().take(2).eq(["2.00", "two"])),
        "{out}{err}"
    );
    assert!(!out.contains("cs_twice"), "{out}");
}

#[test]
fn a_metric_whose_inputs_this_machine_cannot_count_says_so() {
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        config.path(),
        "groups:\n  hw: [cycles, instructions]\n  sw: [task-clock]\n\
         metrics:\n  - {name: ipc, expr: instructions / cycles}\n",
    )
    .expect("written");
    let path = config.path().to_str().expect("UTF-8 path");
    let (out, cgroup) = stat_command(
        &["--config.file", path, "-M", "ipc"],
        &getppid_command(1000),
    );
    let ipc = summary_line(&out, "ipc", &cgroup);
    match summary_line(&out, "cycles", &cgroup)[0].as_str() {
        // No PMU (a VM): the metric is printed, without a value, not left
        // out as if it were not asked for.
        "<not" => assert_eq!(ipc[..2], ["<no", "value>"], "{out}"),
        // A PMU: a value.
        _ => {
            let value: f64 = ipc[0].parse().unwrap_or_else(|_| panic!("{out}"));
            assert!(value > 0.0, "{out}");
        }
    }
    // What the machine can count is counted beside it.
    assert_eq!(
        summary_line(&out, "task-clock", &cgroup)[1],
        "msec",
        "{out}"
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
    let (text, cgroup) = stat_command(&["--config.file", path], &getppid_command(321));
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

#[test]
fn counts_split_by_a_field_are_shown_under_their_total_with_syscall_names() {
    let mut config = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(
        &mut config,
        b"tracepoints:\n  - {name: raw_syscalls:sys_enter, by: [id], syscall_name: id, as: calls}\n",
    )
    .expect("write config");
    let path = config.path().to_str().expect("UTF-8 path");
    let (text, cgroup) = stat_command(&["--config.file", path], &getppid_command(321));
    let getppid = format!("calls{{id={},syscall=getppid}}", libc::SYS_getppid);
    assert_eq!(summary_line(&text, &getppid, &cgroup)[0], "321", "{text}");
    // Every other line of the split is a named syscall, and they add up to
    // the total.
    let total: u64 = summary_line(&text, "calls", &cgroup)[0]
        .replace(',', "")
        .parse()
        .expect("a count");
    let parts: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let split = words.get(1)?.strip_prefix("calls{")?;
            Some((split.to_owned(), words[0].replace(',', "").parse().ok()?))
        })
        .collect();
    assert!(parts.len() > 1, "{text}");
    assert!(
        parts
            .iter()
            .all(|(split, _)| !split.contains("syscall=syscall_")),
        "a number without a name:\n{text}"
    );
    assert_eq!(parts.iter().map(|(_, n)| n).sum::<u64>(), total, "{text}");
}

/// The status as a shell shows it: the exit code, or 128 + the signal.
fn shell_status(status: ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .expect("an exit code or a signal")
}

/// The directory of the cgroup `cgperf stat` made for its command, if its
/// PID is `pid` and the name was free.
fn stat_cgroup(pid: u32) -> PathBuf {
    cgroup2_root().join(format!("cgperf-stat-{pid}"))
}

/// Waits (up to a minute, so that a broken build fails rather than hangs)
/// until `dir/cgroup.procs` lists a process; returns its PID.
fn first_process_in(dir: &Path, cgperf: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if let Some(pid) = procs.lines().next() {
            return pid.trim().parse().expect("a PID");
        }
        if let Some(status) = cgperf.try_wait().expect("try_wait") {
            panic!("cgperf stat ended before its command ran: {status:?}");
        }
        assert!(
            Instant::now() < deadline,
            "no process in {} after a minute",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (a zombie has ended).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            state != Some(Some('Z'))
        }
        Err(_) => false,
    }
}

fn send(pid: u32, signal: libc::c_int) {
    let pid = i32::try_from(pid).expect("PID");
    // SAFETY: sends a signal to a process this test started.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill {pid}");
}

/// Starts `cgperf stat -e EVENTS -- sleep 30` (output piped) and waits
/// until sleep runs in its cgroup; returns cgperf, that cgroup's directory
/// and sleep's PID.
fn stat_sleep_30(events: &str) -> (Child, PathBuf, i32) {
    let mut cgperf = cgperf()
        .args(["-e", events, "--", "sleep", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cgperf stat");
    let dir = stat_cgroup(cgperf.id());
    let sleep = first_process_in(&dir, &mut cgperf);
    (cgperf, dir, sleep)
}

#[test]
fn stop_signals_end_the_command_print_the_counts_and_remove_its_cgroup() {
    for signal in [libc::SIGHUP, libc::SIGTERM, libc::SIGINT] {
        let (cgperf, dir, sleep) = stat_sleep_30("task-clock,context-switches");
        send(cgperf.id(), signal);
        let out = cgperf.wait_with_output().expect("wait for cgperf stat");
        let text = stdout(&out);
        assert_eq!(
            shell_status(out.status),
            128 + signal,
            "signal {signal}: {out:?}"
        );
        assert!(
            text.contains(" Performance counter stats for 'sleep 30'"),
            "signal {signal}: {text}"
        );
        let cgroup = format!("/cgperf-stat-{}", dir_name(&dir));
        assert_eq!(summary_line(&text, "task-clock", &cgroup)[1], "msec");
        summary_line(&text, "context-switches", &cgroup);
        assert!(text.contains(" seconds time elapsed"), "{text}");
        assert!(
            !running(sleep),
            "signal {signal}: the command (PID {sleep}) still runs"
        );
        assert!(
            !dir.exists(),
            "signal {signal}: {} was not removed",
            dir.display()
        );
    }
}

/// The part of a cgroup directory's name after `cgperf-stat-`.
fn dir_name(dir: &Path) -> String {
    let name = dir.file_name().expect("a name").to_string_lossy();
    name.trim_start_matches("cgperf-stat-").to_string()
}

#[test]
fn a_killed_run_takes_its_command_along_and_the_next_run_removes_its_cgroup() {
    let (mut cgperf, dir, sleep) = stat_sleep_30("task-clock");
    cgperf.kill().expect("SIGKILL cgperf stat");
    cgperf.wait().expect("wait");
    // The kernel kills the command when cgperf stat dies; allow it a
    // moment to get there (the wait is a bound, not a measurement).
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(sleep) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !running(sleep),
        "the command (PID {sleep}) outlived the cgperf stat that ran it"
    );
    let out = stat(&["-e", "task-clock", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        !dir.exists(),
        "{} (its run was killed, it is empty) is still there after the next run",
        dir.display()
    );
}

#[test]
fn a_stale_cgroup_that_still_has_processes_is_left_alone() {
    // Named as a killed run's would be, with a process in it: the PID in
    // the name is one no process has (pid_max is far below).
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("start sleep");
    // Another test's `cgperf stat` removes such a cgroup while it is still
    // empty (as it should): made again until the process is in it.
    let cg = (0..20)
        .map(|_| TestCgroup::create_under("", "cgperf-stat-999999999"))
        .find(|cg| std::fs::write(cg.dir.join("cgroup.procs"), sleeper.id().to_string()).is_ok())
        .expect("move sleep into the cgroup");
    let out = stat(&["-e", "task-clock", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(cg.dir.exists(), "a cgroup with a process in it was removed");
    sleeper.kill().expect("kill sleep");
    sleeper.wait().expect("wait");
    let out = stat(&["-e", "task-clock", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!cg.dir.exists(), "the emptied stale cgroup is still there");
}

#[test]
fn a_name_that_is_taken_is_no_failure() {
    require_root("create cgroups and count in them");
    // sh stops itself, then becomes cgperf stat with the same PID: the
    // cgroup cgperf would name after its PID can be made before it runs.
    let cgperf = Command::new("sh")
        .args(["-c", "kill -STOP $$; exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_cgperf"))
        .args([
            "--log.level",
            "warn",
            "stat",
            "-e",
            "task-clock",
            "--",
            "true",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start sh");
    let pid = cgperf.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("its stat");
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
        {
            break;
        }
        assert!(Instant::now() < deadline, "sh did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let taken = TestCgroup::create_under("", &format!("cgperf-stat-{pid}"));
    send(pid, libc::SIGCONT);
    let out = cgperf.wait_with_output().expect("wait");
    let text = stdout(&out);
    assert!(out.status.success(), "{out:?}");
    let cgroup = format!("/cgperf-stat-{pid}-2");
    assert!(text.contains(&format!("(cgroup {cgroup}):")), "{text}");
    assert_eq!(summary_line(&text, "task-clock", &cgroup)[1], "msec");
    assert!(
        taken.dir.exists(),
        "the directory that was there (its PID runs) was removed"
    );
    let ours = cgroup2_root().join(cgroup.trim_start_matches('/'));
    assert!(!ours.exists(), "{} was not removed", ours.display());
}

#[test]
fn the_command_starts_with_no_signal_blocked() {
    let grep = ["grep", "SigBlk", "/proc/self/status"].map(String::from);
    let (text, _) = stat_command(&["-e", "task-clock"], &grep);
    assert!(text.contains("SigBlk:\t0000000000000000\n"), "{text}");
}

#[test]
fn system_wide_counts_the_root_cgroup_while_the_command_runs() {
    let (text, _) = stat_command(
        &["-a", "-e", "syscalls:sys_enter_getppid"],
        &getppid_command(4321),
    );
    assert!(
        text.contains(" Performance counter stats for 'system wide' (cgroup /):"),
        "{text}"
    );
    let line = summary_line(&text, "syscalls:sys_enter_getppid", "/");
    let counted: u64 = line[0].replace(',', "").parse().expect("a count");
    // Other processes of the machine may call getppid too.
    assert!(counted >= 4321, "{text}");
}

/// The number before `K/sec`, `M/sec`, ... in a line's words, in hits per
/// second.
fn rate(words: &[String]) -> Option<f64> {
    let at = words.iter().position(|w| w.ends_with("/sec"))?;
    let scale = match words[at].as_str() {
        "/sec" => 1.0,
        "K/sec" => 1e3,
        "M/sec" => 1e6,
        "G/sec" => 1e9,
        other => panic!("unknown unit {other}"),
    };
    Some(words[at - 1].parse::<f64>().expect("a rate") * scale)
}

#[test]
fn rates_are_per_task_clock_second_and_the_times_follow_as_perf_prints_them() {
    let (text, cgroup) = stat_command(
        &["-e", "task-clock,page-faults,syscalls:sys_enter_getppid"],
        &getppid_command(20_000),
    );
    let msec: f64 = summary_line(&text, "task-clock", &cgroup)[0]
        .replace(',', "")
        .parse()
        .expect("msec");
    for event in ["page-faults", "syscalls:sys_enter_getppid"] {
        let line = summary_line(&text, event, &cgroup);
        let count: f64 = line[0].replace(',', "").parse().expect("a count");
        let expected = count / (msec / 1e3);
        let shown = rate(&line).unwrap_or_else(|| panic!("no rate for {event}: {text}"));
        // Both are rounded for printing (msec to 2 decimals, the rate to 4
        // digits); per second of wall time would differ by the share of
        // the time the command was on a CPU.
        assert!(
            (shown - expected).abs() <= expected * 0.02,
            "{event}: {shown}/sec shown, {count} per {msec} msec is {expected}/sec: {text}"
        );
    }
    // The trailer, line by line as `perf stat` prints it for a command.
    let perf = Command::new("perf")
        .args(["stat", "-e", "task-clock", "--", "true"])
        .output()
        .expect("run perf stat (Debian's linux-perf)");
    let trailer = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().split_once(" seconds "))
            .map(|(_, what)| what.to_string())
            .collect()
    };
    let perfs = trailer(&String::from_utf8_lossy(&perf.stderr));
    assert_eq!(
        perfs,
        ["time elapsed", "user", "sys"],
        "perf stat's trailer"
    );
    assert_eq!(trailer(&text), perfs, "{text}");
}

/// With a config's `energy:` model (no meter here), the command's joules
/// are printed with the source named, and are what the model says of its
/// CPU time: 50 W per busy CPU (`per: cpu`, 5 W idle, 55 W at full load)
/// times the task-clock printed beside them. Without a meter or a model,
/// `--energy` says why there is none.
#[test]
fn prints_the_commands_joules_by_the_exporters_method() {
    let mut config = tempfile::NamedTempFile::new().expect("temp file");
    std::io::Write::write_all(
        &mut config,
        b"groups:\n  sched: [task-clock]\n\
          energy: {meter: model, model: {per: cpu, idle_watts: 5, max_watts: 55}}\n",
    )
    .expect("write config");
    let path = config.path().to_str().expect("UTF-8 path");
    let burn = ["perl", "-e", "1 while (times)[0] < 0.4"].map(String::from);
    let (text, cgroup) = stat_command(&["--config.file", path], &burn);
    let line = summary_line(&text, "energy-pkg", &cgroup);
    let joules: f64 = line[0].replace(',', "").parse().expect("joules");
    assert_eq!(line[1], "J", "{text}");
    assert!(
        text.contains("# source=model (an estimate), weight=task-clock"),
        "{text}"
    );
    let clock = summary_line(&text, "task-clock", &cgroup);
    let seconds: f64 = clock[0].replace(',', "").parse::<f64>().expect("msec") / 1e3;
    let ratio = joules / (50.0 * seconds);
    println!("{joules} J for {seconds:.4} s of task-clock: {ratio:.4} of 50 W");
    // /proc/stat's busy time is in ticks: a few percent over 0.4 s.
    assert!(seconds > 0.35, "{text}");
    assert!((0.9..=1.05).contains(&ratio), "{ratio}\n{text}");

    let out = stat(&["--energy", "-e", "task-clock", "--", "true"]);
    let text = stdout(&out);
    if !std::path::Path::new("/sys/bus/event_source/devices/power").is_dir()
        && !std::path::Path::new("/sys/class/powercap/intel-rapl:0").is_dir()
    {
        let line = text
            .lines()
            .find(|l| l.contains(" energy "))
            .unwrap_or_else(|| panic!("no energy line:\n{text}"));
        assert!(line.contains("<not supported>"), "{text}");
        assert!(
            line.contains("no meter here and no model declared"),
            "{text}"
        );
    } else {
        assert!(text.contains(" energy-pkg "), "{text}");
    }
}
