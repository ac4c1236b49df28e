//! cgperf never looks healthy while it counts nothing: without privileges,
//! or under a seccomp profile that blocks `perf_event_open` and `bpf`,
//! `cgperf check` exits 3 and says why with the fix, `/-/ready` answers 503
//! with the reason, `cgperf_group_supported` carries each group's `reason`,
//! and the daemon logs one error line. Where something can be counted
//! (software events on a machine without a PMU), it is healthy.
//!
//! Also: a listen address already taken fails the start at once, with one
//! message, before the BPF program is loaded.
//!
//! Needs root (to drop to `nobody` with `setpriv`, and to count at all).
mod common;

use common::{Exporter, has_hardware_pmu, require_root, run_cgperf, value};
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
/// the last line says why, with the fix.
fn assert_check_counts_nothing(cmd: Command, token: &str, fix: &str) {
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
}

/// The daemon on a config of which nothing can be counted: it serves, but
/// is not ready, says why in `/-/ready` and in one error line, and labels
/// each group's reason.
fn assert_daemon_counts_nothing(cmd: Command, token: &str) {
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
        )),
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
    assert!(errors[0].contains("nothing can be counted") && errors[0].contains("fix: "));
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") && l.contains("disabled")),
        "no wall of per-group warnings besides the error line:\n{log}"
    );
}

#[test]
fn without_privileges_nothing_counts_and_check_ready_and_the_log_say_so() {
    require_root(WHY);
    let config = readable_config(SOFTWARE);
    let file = format!("--config.file={}", config.path().display());
    assert_check_counts_nothing(
        as_nobody(&["check".into(), file.clone()]),
        "permission",
        "CAP_PERFMON",
    );
    assert_daemon_counts_nothing(as_nobody(&[file]), "permission");
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
    assert_daemon_counts_nothing(under_seccomp(&[file]), "permission");
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
