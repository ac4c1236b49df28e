//! A panic in any thread ends the whole cgperf process with a message and a
//! failure status, so that systemd or Kubernetes restarts it instead of
//! leaving a daemon whose `/metrics` answers 200 with frozen numbers.
//!
//! The test runs itself again as a child process that installs the hook
//! `cgperf` installs first thing, then panics in a spawned thread.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;

/// Set in the child: it is the process that panics.
const CHILD: &str = "CGPERF_TEST_PANICKING_CHILD";

#[test]
fn a_panic_in_a_spawned_thread_ends_the_process_with_a_message() {
    if std::env::var_os(CHILD).is_some() {
        cgperf::cli::install_panic_hook();
        let worker = std::thread::Builder::new()
            .name("cgperf-worker".into())
            .spawn(|| panic!("a worker gave up"))
            .expect("spawn");
        // Without the hook, join() reports the panic and the process goes
        // on, exiting 0: the parent's assertions fail.
        let _ = worker.join();
        std::thread::sleep(Duration::from_millis(100));
        return;
    }
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_panic_in_a_spawned_thread_ends_the_process_with_a_message",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the child runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the process survived:\n{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{:?}:\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("thread 'cgperf-worker'") && stderr.contains("a worker gave up"),
        "the panic itself is shown:\n{stderr}"
    );
    assert!(
        stderr.contains("cgperf: thread `cgperf-worker` panicked; cgperf aborts"),
        "and what happens next:\n{stderr}"
    );
}
