//! Reloads lose nothing: a workload that runs inside one (long) interval and
//! a reload that changes the groups counting it, in every way a config can
//! change; then a storm of reloads while a workload runs. The counts of
//! `getppid` (a tracepoint, exact) must be exact afterwards, and page faults
//! (not exact: the kernel adds its own) at least the pages touched.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const GETPPID: &str = "syscalls:sys_enter_getppid";
const GETPRIORITY: &str = "syscalls:sys_enter_getpriority";

/// `calls` getppid, `pages` fresh pages touched and `prio` calls of
/// `getpriority(PRIO_PGRP, 0)` (`which` = 1), in `cgroup`.
fn workload(cgroup: &Path, calls: u64, pages: usize, prio: u64) {
    in_child(Some(cgroup), move || {
        // SAFETY: raw syscalls without memory arguments.
        unsafe {
            for _ in 0..calls {
                libc::syscall(libc::SYS_getppid);
            }
            for _ in 0..prio {
                libc::syscall(libc::SYS_getpriority, libc::PRIO_PGRP, 0);
            }
        }
        touch_pages(pages);
    });
}

/// A cgperf on a config file that the test rewrites, and its cgroup.
struct Running {
    cg: TestCgroup,
    path: PathBuf,
    exporter: Exporter,
    _dir: tempfile::TempDir,
}

impl Running {
    /// Starts cgperf on `yaml` (`{cg}` stands for the cgroup) and waits for
    /// its first collection to show the cgroup.
    fn start(name: &str, yaml: &str) -> Self {
        let cg = TestCgroup::create(name);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cgperf.yaml");
        std::fs::write(
            &path,
            common::with_test_backend(&yaml.replace("{cg}", &cg.rel)),
        )
        .expect("write config");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
        cmd.arg(format!("--config.file={}", path.display()));
        let exporter = Exporter::spawn(cmd);
        let running = Self {
            cg,
            path,
            exporter,
            _dir: dir,
        };
        running
            .exporter
            .wait_for("the cgroup", |b| running.get(b, GETPPID).is_some());
        running
    }

    /// The value of `event` in the test cgroup (with `more` labels).
    fn get_with(&self, body: &str, event: &str, more: &[(&str, &str)]) -> Option<f64> {
        let mut want = vec![("cgroup", self.cg.rel.as_str()), ("event", event)];
        want.extend_from_slice(more);
        value(body, "cgperf_events_total", &want)
    }

    fn get(&self, body: &str, event: &str) -> Option<f64> {
        self.get_with(body, event, &[])
    }

    /// Rewrites the config in place, sends SIGHUP and returns the first
    /// scrape taken after the reload (the collection that follows it).
    fn reload(&self, yaml: &str) -> String {
        let yaml = common::with_test_backend(&yaml.replace("{cg}", &self.cg.rel));
        common::reload_to(&self.exporter, &self.path, &yaml)
    }
}

/// An interval long enough that the workload and the reload (well under
/// half a second, started right after a collection) fall within one
/// interval, and short enough that the reads after them come soon.
const BASE: &str = "interval: 3s
groups:
  sw: [page-faults, context-switches]
tracepoints:
  - syscalls:sys_enter_getppid
  - name: syscalls:sys_enter_getpriority
    filter: \"which == 1\"
    as: pgrp
cgroups:
  - path: \"{cg}\"
";

const CALLS: u64 = 10_007;
const PAGES: usize = 2_000;
const PRIO: u64 = 333;

/// Runs the workload, reloads from `BASE` to `changed`, checks the counts,
/// runs the workload again and checks again: exact getppid, page faults at
/// least the pages touched and never less than before.
fn workload_then_reload(name: &str, changed: &str) -> (Running, String) {
    let run = Running::start(name, BASE);
    workload(&run.cg.dir, CALLS, PAGES, PRIO);
    let body = run.reload(changed);
    assert_eq!(
        run.get(&body, GETPPID),
        Some(CALLS as f64),
        "getppid counted before the reload, read in the collection after it:\n{body}"
    );
    let faults = run.get(&body, "page-faults");
    if let Some(faults) = faults {
        assert!(
            faults >= PAGES as f64,
            "page-faults {faults} < {PAGES} pages touched before the reload:\n{body}"
        );
    }
    workload(&run.cg.dir, CALLS, PAGES, PRIO);
    let after = run.exporter.wait_collections(1);
    assert_eq!(
        run.get(&after, GETPPID),
        Some(2.0 * CALLS as f64),
        "exact across the reload:\n{after}"
    );
    if let Some(faults) = faults {
        let now = run.get(&after, "page-faults").expect("page-faults kept");
        assert!(
            now >= faults + PAGES as f64,
            "page-faults {now} after a second workload of {PAGES} pages, {faults} before:\n{after}"
        );
    }
    (run, after)
}

#[test]
fn a_group_that_gains_an_event_keeps_what_was_counted() {
    require_root("create cgroups and count them");
    let changed = BASE.replace(
        "sw: [page-faults, context-switches]",
        "sw: [page-faults, context-switches, cpu-migrations]",
    );
    let (run, body) = workload_then_reload("cgperf-reload-gain", &changed);
    assert!(run.get(&body, "cpu-migrations").is_some(), "{body}");
}

#[test]
fn a_group_that_loses_an_event_keeps_what_was_counted() {
    require_root("create cgroups and count them");
    let changed = BASE.replace("sw: [page-faults, context-switches]", "sw: [page-faults]");
    let (run, body) = workload_then_reload("cgperf-reload-lose", &changed);
    assert_eq!(run.get(&body, "context-switches"), None, "{body}");
}

#[test]
fn a_tracepoint_added_keeps_what_the_others_counted() {
    require_root("create cgroups and count them");
    let changed = BASE.replace(
        "  - syscalls:sys_enter_getppid\n",
        "  - syscalls:sys_enter_getppid\n  - syscalls:sys_enter_getpid\n",
    );
    let (run, body) = workload_then_reload("cgperf-reload-add", &changed);
    assert_eq!(
        run.get(&body, "pgrp"),
        Some(2.0 * PRIO as f64),
        "a filtered tracepoint kept: exact:\n{body}"
    );
    assert_eq!(run.get(&body, "syscalls:sys_enter_getpid"), Some(0.0));
}

#[test]
fn a_filter_changed_continues_its_series_and_keeps_the_others() {
    require_root("create cgroups and count them");
    // The filter now lets everything through but `which == 0`: the same
    // label continues its series (it must never go down).
    let changed = BASE.replace("which == 1", "which != 0");
    let (run, body) = workload_then_reload("cgperf-reload-filter", &changed);
    assert_eq!(
        run.get(&body, "pgrp"),
        Some(2.0 * PRIO as f64),
        "the series of a tracepoint whose filter changed continues:\n{body}"
    );
}

#[test]
fn by_fields_changed_keep_the_counting_groups() {
    require_root("create cgroups and count them");
    let with_by = BASE.replace(
        "cgroups:",
        &format!("  - name: {GETPRIORITY}\n    by: [which]\n    as: by_which\ncgroups:"),
    );
    let run = Running::start("cgperf-reload-by", &with_by);
    workload(&run.cg.dir, CALLS, PAGES, PRIO);
    // A filter added (same label, same fields: the series carries on) and
    // the kept counting groups untouched.
    let filtered = with_by.replace(
        "    by: [which]\n",
        "    by: [which]\n    filter: \"which == 1\"\n",
    );
    let body = run.reload(&filtered);
    assert_eq!(run.get(&body, GETPPID), Some(CALLS as f64), "{body}");
    assert_eq!(
        run.get_with(&body, "by_which", &[("which", "1")]),
        Some(PRIO as f64),
        "{body}"
    );
    // Fields changed: a new set of series, from zero; the rest exact.
    let more_fields = filtered.replace("by: [which]", "by: [which, who]");
    workload(&run.cg.dir, CALLS, PAGES, PRIO);
    let body = run.reload(&more_fields);
    assert_eq!(run.get(&body, GETPPID), Some(2.0 * CALLS as f64), "{body}");
    assert_eq!(run.get(&body, "pgrp"), Some(2.0 * PRIO as f64), "{body}");
    assert_eq!(
        run.get_with(&body, "by_which", &[("which", "1"), ("who", "0")]),
        None,
        "the old fields' series are gone, the new ones have seen nothing yet:\n{body}"
    );
    workload(&run.cg.dir, CALLS, PAGES, PRIO);
    let body = run.exporter.wait_collections(1);
    assert_eq!(run.get(&body, GETPPID), Some(3.0 * CALLS as f64), "{body}");
    assert_eq!(
        run.get_with(&body, "by_which", &[("which", "1"), ("who", "0")]),
        Some(PRIO as f64),
        "{body}"
    );
}

/// The calls `getppid` counted in `cgroup`.
fn getppid_in(body: &str, cgroup: &str) -> Option<f64> {
    value(
        body,
        "cgperf_events_total",
        &[("cgroup", cgroup), ("event", GETPPID)],
    )
}

#[test]
fn a_storm_of_reloads_during_a_workload_loses_nothing() {
    require_root("create cgroups and count them");
    const CHUNK: u64 = 50_000;
    // A parent and its children, all reloaded together; two of the
    // children run workloads.
    let first = "interval: 1s
groups:
  sw: [page-faults, context-switches]
tracepoints: [syscalls:sys_enter_getppid]
cgroups:
  - path: \"{cg}\"
  - match: \"{cg}/*\"
";
    let configs = [
        first.to_string(),
        first
            .replace(
                "[syscalls:sys_enter_getppid]",
                "[syscalls:sys_enter_getppid, syscalls:sys_enter_getpid]",
            )
            .replace("[page-faults, context-switches]", "[page-faults]"),
        "interval: 1s\ngroups:\n  sw: [no-such-event]\n".to_string(),
    ];
    let run = Running::start("cgperf-reload-storm", &configs[0]);
    let children: Vec<TestCgroup> = (0..12)
        .map(|i| TestCgroup::create_under(&run.cg.rel, &format!("job{i}")))
        .collect();
    let busy = [&children[2], &children[9]];
    run.exporter.wait_for("the children", |b| {
        children.iter().all(|c| getppid_in(b, &c.rel).is_some())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = busy
        .iter()
        .map(|cg| {
            let (stop, dir) = (stop.clone(), cg.dir.clone());
            std::thread::spawn(move || {
                let mut chunks = 0;
                while !stop.load(Ordering::Relaxed) {
                    getppid_workload(Some(&dir), CHUNK);
                    chunks += 1;
                }
                chunks * CHUNK
            })
        })
        .collect();
    for i in 0..100 {
        let yaml = configs[i % 3].replace("{cg}", &run.cg.rel);
        std::fs::write(&run.path, common::with_test_backend(&yaml)).expect("rewrite config");
        // SAFETY: sending a signal to our own child.
        assert_eq!(unsafe { libc::kill(run.exporter.pid(), libc::SIGHUP) }, 0);
        std::thread::sleep(Duration::from_millis(15));
    }
    // Ends on a valid config.
    std::fs::write(
        &run.path,
        common::with_test_backend(&configs[0].replace("{cg}", &run.cg.rel)),
    )
    .expect("rewrite config");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(run.exporter.pid(), libc::SIGHUP) }, 0);
    stop.store(true, Ordering::Relaxed);
    let calls: Vec<u64> = workers
        .into_iter()
        .map(|w| w.join().expect("workload thread"))
        .collect();
    assert!(
        calls.iter().all(|&n| n >= 2 * CHUNK),
        "the workloads ran during the storm ({calls:?} calls)"
    );
    std::thread::sleep(Duration::from_millis(500));
    let body = run.exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_config_last_reload_successful", &[]),
        Some(1.0)
    );
    let mut off = Vec::new();
    for (cg, &n) in busy.iter().zip(&calls) {
        let counted = getppid_in(&body, &cg.rel).expect("getppid series");
        off.push((cg.rel.as_str(), n, counted));
    }
    let total: u64 = calls.iter().sum();
    let counted = run.get(&body, GETPPID).expect("getppid series");
    off.push((run.cg.rel.as_str(), total, counted));
    assert!(
        off.iter().all(|&(_, n, counted)| counted == n as f64),
        "(cgroup, calls during 100 reloads, counted): {off:?}"
    );
    for idle in children
        .iter()
        .filter(|c| busy.iter().all(|b| b.rel != c.rel))
    {
        assert_eq!(getppid_in(&body, &idle.rel), Some(0.0), "{}", idle.rel);
    }
}
