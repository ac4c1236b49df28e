//! cgperf never looks healthy while it counts nothing: without privileges,
//! or under a seccomp profile that blocks `perf_event_open` and `bpf`,
//! `cgperf check` exits 3 and says why with the fix, `/-/ready` answers 503
//! with the reason, `cgperf_group_supported` carries each group's `reason`,
//! and the daemon logs one error line. Where something can be counted
//! (software events on a machine without a PMU), it is healthy.
//!
//! A refusal for want of privilege names the rule that applies
//! (`kernel.perf_event_paranoid` and the capability missing) and never
//! tells a process that is root to run as root; where the level is 3 or
//! more (Debian's and Ubuntu's kernels then want `CAP_SYS_ADMIN`), cgperf
//! keeps `CAP_SYS_ADMIN` after start-up and says why.
//!
//! Also: a listen address already taken fails the start at once, with one
//! message, before the BPF program is loaded.
//!
//! Needs root (to drop to `nobody` with `setpriv`, to count at all, and to
//! set `kernel.perf_event_paranoid`).
mod common;

use common::sysctl::{self, Paranoid};
use common::{Exporter, has_hardware_pmu, require_root, run_cgperf, status_caps, value};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;

const WHY: &str = "run cgperf as nobody and under a seccomp filter";

/// Software events and a tracepoint, which every machine counts given the
/// privileges; `backend: auto` as the default config has it.
const SOFTWARE: &str = "\
interval: 200ms
backend: auto
groups:
  sw: [task-clock, context-switches]
tracepoints:
  - sched:sched_switch
cgroups:
  - path: /
";

/// A config file that `nobody` can read.
fn readable_config(yaml: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    file.write_all(yaml.as_bytes()).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o644)).expect("chmod");
    file
}

/// cgperf as `nobody`, without any capability.
fn as_nobody(args: &[String]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
        env!("CARGO_BIN_EXE_cgperf"),
    ])
    .args(args);
    cmd
}

/// cgperf as root without `CAP_PERFMON`, `CAP_SYS_ADMIN` and `CAP_BPF`
/// (taken from the bounding set, so that exec does not give them back).
fn as_root_without_perf_capabilities(args: &[String]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--inh-caps=-all",
        "--bounding-set=-perfmon,-sys_admin,-bpf",
        "--",
        env!("CARGO_BIN_EXE_cgperf"),
    ])
    .args(args);
    cmd
}

/// cgperf as `nobody` with exactly `caps` (setpriv's spelling, e.g.
/// `+perfmon,+dac_read_search`), as a systemd unit's ambient capabilities
/// give them.
fn as_nobody_with(caps: &str, args: &[String]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_cgperf"))
        .args(args);
    cmd
}

/// cgperf as root, with a seccomp filter that fails `perf_event_open` and
/// `bpf` with EPERM, as a container runtime's profile that predates them
/// does.
fn under_seccomp(args: &[String]) -> Command {
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JEQ_K: u16 = 0x15;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    // The syscall number is at offset 0 of `struct seccomp_data`; a native
    // binary makes native syscalls only, so the arch is not checked.
    let filter = [
        op(BPF_LD_W_ABS, 0, 0, 0),
        op(BPF_JEQ_K, 2, 0, libc::SYS_perf_event_open as u32),
        op(BPF_JEQ_K, 1, 0, libc::SYS_bpf as u32),
        op(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        op(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.args(args);
    // SAFETY: prctl is async-signal-safe; the filter lives in the closure.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const _) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn output(mut cmd: Command) -> (i32, String, String) {
    let out = cmd.output().expect("cgperf runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cgperf check` on a config of which nothing can be counted: exit 3, and
/// the last line says why, with the fix. Returns what it printed.
fn assert_check_counts_nothing(cmd: Command, token: &str, fix: &str) -> String {
    let (code, out, err) = output(cmd);
    assert_eq!(
        code, 3,
        "check must exit 3 when nothing counts:\n{out}\n{err}"
    );
    assert!(out.starts_with("config:      valid"), "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "nothing can be counted: every group is refused ({token})"
        )) && last.contains(fix),
        "last line: {last}\n{out}"
    );
    out
}

/// The daemon on a config of which nothing can be counted: it serves, but
/// is not ready, says why in `/-/ready` and in one error line, and labels
/// each group's reason, which says `said`. Returns its log.
fn assert_daemon_counts_nothing(cmd: Command, token: &str, said: &str) -> String {
    let exporter = Exporter::spawn(cmd);
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(
            &body,
            "cgperf_group_supported",
            &[("group", "sw"), ("reason", token)]
        ),
        Some(0.0),
        "{body}"
    );
    let (head, ready) = exporter.get("/-/ready", None);
    assert!(head.starts_with("HTTP/1.1 503"), "{head}\n{ready}");
    assert!(
        ready.contains(&format!(
            "nothing can be counted: every group is refused ({token})"
        )) && ready.contains(said),
        "{ready}"
    );
    let (head, _) = exporter.get("/-/healthy", None);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "the process serves: {head}"
    );
    let log = exporter.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "one error line, not {errors:?}:\n{log}");
    assert!(
        errors[0].contains("nothing can be counted")
            && errors[0].contains("fix: ")
            && errors[0].contains(said),
        "{}",
        errors[0]
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("disabled")),
        "no wall of per-group warnings besides the error line:\n{log}"
    );
    log
}

/// The level of `kernel.perf_event_paranoid` the tests without privileges
/// were written for: 1 or 2 refuse CPU-wide counting to a process without
/// `CAP_PERFMON` (at 3 and more the message blames the missing
/// `CAP_SYS_ADMIN`, which the test of that level checks).
fn paranoid_below_3() -> i32 {
    let level = sysctl::paranoid();
    assert!(
        (1..=2).contains(&level),
        "this test needs kernel.perf_event_paranoid 1 or 2 (it is {level})"
    );
    level
}

#[test]
fn without_privileges_nothing_counts_and_check_ready_and_the_log_say_so() {
    require_root(WHY);
    let config = readable_config(SOFTWARE);
    let file = format!("--config.file={}", config.path().display());
    let _unchanged = sysctl::unchanged();
    let level = paranoid_below_3();
    // The kernel's rule at this level, and what cgperf lacks of it.
    let said = format!(
        "permission denied: counting per cgroup (CPU-wide) needs CAP_PERFMON or CAP_SYS_ADMIN \
         at kernel.perf_event_paranoid {level}, and cgperf runs as uid 65534 with neither in \
         effect; fix: give cgperf CAP_PERFMON"
    );
    assert_check_counts_nothing(
        as_nobody(&["check".into(), file.clone()]),
        "permission",
        &said,
    );
    assert_daemon_counts_nothing(as_nobody(&[file]), "permission", &said);
}

/// Root without the capabilities perf asks for (a container runtime's
/// bounding set, a unit's `CapabilityBoundingSet=`): told which are
/// missing, never to run as root.
#[test]
fn root_without_the_capabilities_is_told_which_are_missing_not_to_run_as_root() {
    require_root(WHY);
    let config = readable_config(SOFTWARE);
    let file = format!("--config.file={}", config.path().display());
    let _unchanged = sysctl::unchanged();
    let level = paranoid_below_3();
    let said = format!(
        "needs CAP_PERFMON or CAP_SYS_ADMIN at kernel.perf_event_paranoid {level}, and cgperf \
         runs as root with neither in effect"
    );
    let out = assert_check_counts_nothing(
        as_root_without_perf_capabilities(&["check".into(), file.clone()]),
        "permission",
        &said,
    );
    let log = assert_daemon_counts_nothing(
        as_root_without_perf_capabilities(&[file]),
        "permission",
        &said,
    );
    for text in [&out, &log] {
        assert!(
            !text.contains("run it as root") && !text.contains("as root or"),
            "told root to run as root:\n{text}"
        );
    }
    // `auto` fell back to the cgroup backend for want of CAP_BPF: said so,
    // to root as to root.
    assert!(out.contains("give cgperf CAP_BPF and CAP_PERFMON"), "{out}");
}

/// At `kernel.perf_event_paranoid` 3 (Debian's default; Ubuntu's 4 follows
/// the same rule), Debian's and Ubuntu's kernels refuse `perf_event_open`
/// to any process without `CAP_SYS_ADMIN`: cgperf keeps it after start-up
/// and says why; given only `CAP_PERFMON` it warns at start; and a refusal
/// names the level and `CAP_SYS_ADMIN`. (This kernel treats 3 as 2, so
/// counts go on here: the refusal itself is only seen on those kernels.)
#[test]
fn at_paranoid_3_cgperf_keeps_cap_sys_admin_and_says_why() {
    require_root(WHY);
    let config = readable_config(SOFTWARE);
    let file = format!("--config.file={}", config.path().display());
    let why = "kernel.perf_event_paranoid is 3: at 3 and above, the kernels of Debian and Ubuntu \
               refuse perf_event_open to any process without CAP_SYS_ADMIN (CAP_PERFMON is not \
               enough)";
    // Put back when this ends, failed or not.
    let _level = Paranoid::set(3);

    let mut root = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    root.arg(&file);
    let exporter = Exporter::spawn(root);
    let log = exporter.log();
    let line = |about: &str| {
        log.lines()
            .find(|l| l.contains(about))
            .unwrap_or_else(|| panic!("nothing says {about:?}:\n{log}"))
            .to_owned()
    };
    let kept = line("so cgperf keeps CAP_SYS_ADMIN");
    assert!(
        kept.contains(" INFO ") && kept.contains(why) && kept.contains("reloads, new cgroups"),
        "{kept}"
    );
    assert!(line("keeps CAP_").contains("CAP_SYS_ADMIN"), "{log}");
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    for key in ["CapPrm:", "CapEff:"] {
        assert_ne!(
            status_caps(exporter.pid(), key) & CAP_SYS_ADMIN,
            0,
            "{key}: CAP_SYS_ADMIN kept"
        );
    }
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_group_supported", &[("group", "sw")]),
        Some(1.0),
        "{body}"
    );
    drop(exporter);

    // With the shipped unit's capabilities, of which the bpf backend keeps
    // every one: nothing else is dropped, and the reason is said all the
    // same.
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/systemd/cgperf.service"
    ))
    .expect("the systemd unit");
    let caps: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("AmbientCapabilities=")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect();
    let exporter = Exporter::spawn(as_nobody_with(&caps.join(","), std::slice::from_ref(&file)));
    let log = exporter.log();
    assert!(
        log.lines()
            .any(|l| l.contains(" INFO ") && l.contains(why) && l.contains("keeps CAP_SYS_ADMIN")),
        "{log}"
    );
    assert_ne!(
        status_caps(exporter.pid(), "CapEff:") & CAP_SYS_ADMIN,
        0,
        "CAP_SYS_ADMIN kept under the unit's capabilities"
    );
    drop(exporter);

    // Given CAP_PERFMON but not CAP_SYS_ADMIN: a warning at start.
    let exporter = Exporter::spawn(as_nobody_with(
        "+perfmon,+dac_read_search",
        std::slice::from_ref(&file),
    ));
    let log = exporter.log();
    let warned = log
        .lines()
        .find(|l| l.contains("was not given CAP_SYS_ADMIN"))
        .unwrap_or_else(|| panic!("no warning of the missing CAP_SYS_ADMIN:\n{log}"));
    assert!(
        warned.contains(" WARN ")
            && warned.contains(why)
            && warned.contains("kernel.perf_event_paranoid=2"),
        "{warned}"
    );
    drop(exporter);

    // A refusal at this level blames the missing CAP_SYS_ADMIN.
    let out = assert_check_counts_nothing(
        as_nobody(&["check".into(), file.clone()]),
        "permission",
        "cgperf runs as uid 65534 without CAP_SYS_ADMIN in effect",
    );
    assert!(out.contains(why), "{out}");
    assert!(
        out.contains(
            "kernel.perf_event_paranoid: 3 (Debian's and Ubuntu's kernels then refuse \
             perf_event_open without CAP_SYS_ADMIN, which this check does not have)"
        ),
        "{out}"
    );
}

#[test]
fn a_seccomp_profile_blocking_perf_event_open_and_bpf_is_named_as_the_fix() {
    require_root(WHY);
    let config = readable_config(SOFTWARE);
    let file = format!("--config.file={}", config.path().display());
    assert_check_counts_nothing(
        under_seccomp(&["check".into(), file.clone()]),
        "permission",
        "seccomp profile blocks perf_event_open or bpf",
    );
    assert_daemon_counts_nothing(
        under_seccomp(&[file]),
        "permission",
        // (CAP_SYS_ADMIN too before the start-up drop, and in `check`.)
        "permission denied, though cgperf runs as root with CAP_PERFMON",
    );
}

/// The embedded default config always has software events to count: on a
/// machine without a PMU its hardware groups are refused (`not_supported`),
/// and cgperf is healthy, not "nothing counted".
#[test]
fn the_default_config_is_healthy_where_only_hardware_groups_are_refused() {
    require_root(WHY);
    let (code, out, err) = run_cgperf(&["check"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let last = out.lines().last().unwrap_or_default();
    let exporter = Exporter::start(None);
    let body = exporter.wait_collections(1);
    let (head, ready) = exporter.get("/-/ready", None);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{ready}");
    let ipc = |reason| {
        value(
            &body,
            "cgperf_group_supported",
            &[("group", "ipc"), ("reason", reason)],
        )
    };
    if has_hardware_pmu() {
        assert_eq!(
            value(&body, "cgperf_group_supported", &[("group", "ipc")]),
            Some(1.0)
        );
        assert!(last.starts_with("All "), "{last}");
    } else {
        assert_eq!(ipc("not_supported"), Some(0.0), "{body}");
        assert!(
            last.contains(" groups can be counted on this machine; ")
                && last.contains(" disabled (reasons above), the rest keeps counting."),
            "{last}"
        );
    }
}

/// Hardware events only: on a machine without a PMU nothing counts, and the
/// fix says to count software events too; with a PMU, all is well.
#[test]
fn hardware_only_config_counts_nothing_without_a_pmu() {
    require_root(WHY);
    let config = readable_config(
        "backend: cgroup\ngroups:\n  ipc: [cycles, instructions]\ncgroups:\n  - path: /\n",
    );
    let file = format!("--config.file={}", config.path().display());
    let (code, out, err) = run_cgperf(&["check", &file]);
    if has_hardware_pmu() {
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(
            out.ends_with("The group can be counted on this machine.\n"),
            "{out}"
        );
    } else {
        assert_eq!(code, 3, "{out}\n{err}");
        assert!(
            out.contains("every group is refused (not_supported)")
                && out.contains("count software events or tracepoints too"),
            "{out}"
        );
    }
}

/// A port already taken: one message, exit 2, and nothing costly (the BPF
/// program's load, probing every event: each logs a line) happens first.
#[test]
fn a_taken_listen_address_fails_at_once_with_one_message() {
    require_root(WHY);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let (code, out, err) = run_cgperf(&[&format!("--web.listen-address=127.0.0.1:{port}")]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert_eq!(
        err.matches("Address already in use").count(),
        1,
        "said once: {err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        !err.contains("starting cgperf") && !err.contains("counting with"),
        "nothing started before the bind: {err}"
    );
}
