//! Hosts that change under cgperf: cgroups removed and recreated, configs
//! reloaded by SIGHUP and by file replacement, an open-files limit too small
//! for everything, `max_cgroups`.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// Replaces `path` by rename, as editors and ConfigMap updates do.
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, common::with_test_backend(text)).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

#[test]
fn a_recreated_cgroup_is_a_new_series_and_a_removed_one_vanishes() {
    let parent = TestCgroup::create("cgperf-recreate");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - match: {}/*\n",
        parent.rel
    )));
    let cg = TestCgroup::create_under(&parent.rel, "job");
    exporter.wait_for("the new cgroup", |b| getppid_of(b, &cg.rel).is_some());
    getppid_workload(Some(&cg.dir), 3000);
    let body = exporter.wait_collections(2);
    assert_eq!(getppid_of(&body, &cg.rel), Some(3000.0));

    cg.remove();
    // Gone within two intervals.
    let body = exporter.wait_collections(2);
    assert_eq!(getppid_of(&body, &cg.rel), None, "{body}");

    let again = TestCgroup::create_under(&parent.rel, "job");
    exporter.wait_for("the recreated cgroup", |b| {
        getppid_of(b, &again.rel).is_some()
    });
    getppid_workload(Some(&again.dir), 500);
    let body = exporter.wait_collections(2);
    assert_eq!(
        getppid_of(&body, &again.rel),
        Some(500.0),
        "a new cgroup starts from zero"
    );
}

#[test]
fn sighup_reload_keeps_unchanged_counters_and_applies_changes() {
    let cg = TestCgroup::create("cgperf-sighup");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cgperf.yaml");
    let first = format!(
        "interval: 200ms\ngroups:\n  sched: [context-switches]\n  gone: [page-faults]\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {}\n",
        cg.rel
    );
    std::fs::write(&path, common::with_test_backend(&first)).expect("write config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", path.display()));
    let exporter = Exporter::spawn(cmd);
    exporter.wait_for("the cgroup", |b| getppid_of(b, &cg.rel).is_some());
    getppid_workload(Some(&cg.dir), 4000);
    let before = exporter.wait_collections(2);
    assert_eq!(getppid_of(&before, &cg.rel), Some(4000.0));
    let switches = value(
        &before,
        "cgperf_events_total",
        &[("cgroup", &cg.rel), ("event", "context-switches")],
    )
    .expect("context switches");

    // Add a tracepoint (the tracepoint group changes), drop a group, keep one.
    // Written in place (no rename), so only the SIGHUP triggers the reload.
    let second = first
        .replace("  gone: [page-faults]\n", "  new: [cpu-migrations]\n")
        .replace(
            "tracepoints: [syscalls:sys_enter_getppid]",
            "tracepoints: [syscalls:sys_enter_getppid, sched:sched_process_exit]",
        );
    std::fs::write(&path, common::with_test_backend(&second)).expect("rewrite config");
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGHUP) }, 0);
    let after = exporter.wait_for("the reload", |b| {
        value(
            b,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("group", "new")],
        )
        .is_some()
    });
    assert_eq!(
        value(&after, "cgperf_config_last_reload_successful", &[]),
        Some(1.0)
    );
    assert_eq!(
        getppid_of(&after, &cg.rel),
        Some(4000.0),
        "kept event continues, not reset:\n{after}"
    );
    assert!(
        value(
            &after,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("event", "context-switches")]
        )
        .expect("kept")
            >= switches
    );
    assert_eq!(
        value(
            &after,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("group", "gone")]
        ),
        None
    );
    assert!(
        value(
            &after,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("event", "sched:sched_process_exit")]
        )
        .is_some()
    );

    getppid_workload(Some(&cg.dir), 1000);
    let body = exporter.wait_collections(2);
    assert_eq!(
        getppid_of(&body, &cg.rel),
        Some(5000.0),
        "exact across the reload"
    );
    // The getppid child's exit is counted by the new tracepoint.
    assert_eq!(
        value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &cg.rel), ("event", "sched:sched_process_exit")]
        ),
        Some(1.0)
    );
}

#[test]
fn a_replaced_config_file_is_reloaded_and_a_bad_one_rejected() {
    let cg = TestCgroup::create("cgperf-filewatch");
    let other = TestCgroup::create("cgperf-filewatch-other");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cgperf.yaml");
    let config = |cgroup: &str| {
        format!(
            "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {cgroup}\n"
        )
    };
    std::fs::write(&path, common::with_test_backend(&config(&cg.rel))).expect("write config");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", path.display()));
    let exporter = Exporter::spawn(cmd);
    exporter.wait_for("the cgroup", |b| getppid_of(b, &cg.rel).is_some());
    getppid_workload(Some(&cg.dir), 100);
    let started = reload_time(&exporter.wait_collections(1));

    // A broken config is rejected; the running one keeps counting.
    replace_file(&path, "interval: 200ms\ngroups:\n  a: [no-such-event]\n");
    let body = exporter.wait_for("the failed reload", |b| {
        value(b, "cgperf_config_last_reload_successful", &[]) == Some(0.0)
    });
    assert_eq!(reload_time(&body), started);
    getppid_workload(Some(&cg.dir), 200);
    let body = exporter.wait_collections(2);
    assert_eq!(getppid_of(&body, &cg.rel), Some(300.0));

    // A valid replacement moves counting to the other cgroup.
    replace_file(&path, &config(&other.rel));
    let body = exporter.wait_for("the reload", |b| getppid_of(b, &other.rel).is_some());
    assert_eq!(getppid_of(&body, &cg.rel), None, "no longer selected");
    assert_eq!(
        value(&body, "cgperf_config_last_reload_successful", &[]),
        Some(1.0)
    );
    assert!(reload_time(&body) > started);
}

fn parent_with_children(name: &str, n: usize) -> (TestCgroup, Vec<TestCgroup>) {
    let parent = TestCgroup::create(name);
    let children = (0..n)
        .map(|i| TestCgroup::create_under(&parent.rel, &format!("c{i}")))
        .collect();
    (parent, children)
}

#[test]
fn max_cgroups_counts_the_first_in_priority_order() {
    let (parent, children) = parent_with_children("cgperf-max", 5);
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\nmax_cgroups: 3\ngroups:\n  sched: [context-switches]\ncgroups:\n  - match: {}/*\n",
        parent.rel
    )));
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_monitored_cgroups", &[]),
        Some(3.0),
        "{body}"
    );
    assert_eq!(
        value(
            &body,
            "cgperf_cgroups_skipped",
            &[("reason", "max_cgroups")]
        ),
        Some(2.0)
    );
    for (i, c) in children.iter().enumerate() {
        let counted = value(&body, "cgperf_events_total", &[("cgroup", &c.rel)]).is_some();
        assert_eq!(
            counted,
            i < 3,
            "{} (sorted by path, the first three are counted)",
            c.rel
        );
    }
}

#[test]
fn a_small_open_files_limit_opens_what_fits_and_says_so() {
    let (parent, children) = parent_with_children("cgperf-fds", 10);
    let cpus = cgperf::cpus::online().expect("online CPUs").len() as u64;
    let config = config_file(&format!(
        // The cgroup backend's budget: the bpf backend's descriptors do not grow
        // with cgroups (tests/bpf.rs tests its capacity instead).
        "backend: cgroup\ninterval: 200ms\ngroups:\n  sched: [task-clock, context-switches, cpu-migrations, page-faults]\ncgroups:\n  - match: {}/*\n",
        parent.rel
    ));
    // 256 descriptors are kept in reserve; room for exactly 3 cgroups.
    let per_cgroup = 4 * cpus;
    let limit = 256 + 3 * per_cgroup + per_cgroup / 2;
    let exporter = spawn_with_nofile(config.path(), limit, &[]);
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_monitored_cgroups", &[]),
        Some(3.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "cgperf_cgroups_skipped", &[("reason", "fd_budget")]),
        Some(7.0)
    );
    assert_eq!(
        value(&body, "cgperf_open_fds", &[]),
        // Plus one hotplug canary per CPU.
        Some((3 * per_cgroup + cpus) as f64)
    );
    for (i, c) in children.iter().enumerate() {
        assert_eq!(
            value(&body, "cgperf_events_total", &[("cgroup", &c.rel)]).is_some(),
            i < 3,
            "{}",
            c.rel
        );
    }
    // When counted cgroups go away, skipped ones take their place.
    children[0].remove();
    children[1].remove();
    let body = exporter.wait_for("skipped cgroups to be counted", |b| {
        value(b, "cgperf_cgroups_skipped", &[("reason", "fd_budget")]) == Some(5.0)
    });
    assert_eq!(value(&body, "cgperf_monitored_cgroups", &[]), Some(3.0));
    assert!(
        value(
            &body,
            "cgperf_events_total",
            &[("cgroup", &children[3].rel)]
        )
        .is_some()
    );
}

#[test]
fn labels_are_extracted_from_real_kubernetes_systemd_and_container_cgroups() {
    let root = TestCgroup::create("cgperf-labels");
    let id = "0123456789abcdef".repeat(4);
    let uid = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    let systemd_uid = uid.replace('-', "_");
    let make = |rel: &str| TestCgroup::create_under(&root.rel, rel);
    // Created parents first; dropped (removed) children first.
    let k8s_qos = make("kubepods.slice");
    let k8s_burst = make("kubepods.slice/kubepods-burstable.slice");
    let k8s_pod = make(&format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice"
    ));
    let k8s_ctr = make(&format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd_uid}.slice/cri-containerd-{id}.scope"
    ));
    let cgfs = make("kubepods");
    let cgfs_be = make("kubepods/besteffort");
    let cgfs_pod = make(&format!("kubepods/besteffort/pod{uid}"));
    let cgfs_ctr = make(&format!("kubepods/besteffort/pod{uid}/{id}"));
    let system = make("system.slice");
    let unit = make("system.slice/nginx.service");
    let docker = make(&format!("system.slice/docker-{id}.scope"));
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\nlabels: [kubernetes, systemd, containers]\ngroups:\n  sched: [context-switches]\ncgroups:\n  - match: {}/**\n",
        root.rel
    )));
    let body = exporter.wait_for("the containers", |b| {
        value(b, "cgperf_events_total", &[("cgroup", &k8s_ctr.rel)]).is_some()
            && value(b, "cgperf_events_total", &[("cgroup", &docker.rel)]).is_some()
    });
    let series = |cg: &TestCgroup| {
        body.lines()
            .find(|l| l.starts_with(&format!("cgperf_events_total{{cgroup=\"{}\"", cg.rel)))
            .unwrap_or_else(|| panic!("no series for {}:\n{body}", cg.rel))
            .to_string()
    };
    let has = |cg: &TestCgroup, labels: &[(&str, &str)]| {
        let line = series(cg);
        for (k, v) in labels {
            assert!(
                line.contains(&format!("{k}=\"{v}\"")),
                "{k}={v} missing in {line}"
            );
        }
    };
    has(&k8s_pod, &[("pod_uid", uid), ("qos_class", "burstable")]);
    has(
        &k8s_ctr,
        &[
            ("pod_uid", uid),
            ("qos_class", "burstable"),
            ("container_id", &id),
            ("container_runtime", "containerd"),
        ],
    );
    has(&cgfs_pod, &[("pod_uid", uid), ("qos_class", "besteffort")]);
    has(&cgfs_ctr, &[("pod_uid", uid), ("container_id", &id)]);
    has(
        &unit,
        &[("unit", "nginx.service"), ("slice", "system.slice")],
    );
    has(
        &docker,
        &[
            ("container_id", &id),
            ("container_runtime", "docker"),
            ("slice", "system.slice"),
        ],
    );
    // The pod's slice and the container's scope would say again what
    // pod_uid and container_id say.
    for (cg, copy) in [
        (&k8s_pod, "slice="),
        (&k8s_ctr, "slice="),
        (&k8s_ctr, "unit="),
        (&docker, "unit="),
    ] {
        assert!(!series(cg).contains(copy), "{}", series(cg));
    }
    assert!(
        !series(&k8s_qos).contains("pod_uid="),
        "{}",
        series(&k8s_qos)
    );
    drop((
        docker, unit, system, cgfs_ctr, cgfs_pod, cgfs_be, cgfs, k8s_ctr, k8s_pod, k8s_burst,
        k8s_qos,
    ));
}

/// How many descriptors process `pid` has open.
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .count()
}

#[test]
fn a_moment_without_descriptors_loses_no_cgroup() {
    require_root("creates cgroups and counts their syscalls");
    let parent = TestCgroup::create("cgperf-nofds");
    let job = TestCgroup::create_under(&parent.rel, "job");
    let config = config_file(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - match: {}/*\n",
        parent.rel
    ));
    // Connections may take every descriptor the limit leaves.
    const LIMIT: u64 = 300;
    let exporter = spawn_with_nofile(config.path(), LIMIT, &["--web.max-connections=1000"]);
    exporter.wait_for("the job's series", |b| getppid_of(b, &job.rel).is_some());
    getppid_workload(Some(&job.dir), 1000);
    let body = exporter.wait_collections(2);
    assert_eq!(getppid_of(&body, &job.rel), Some(1000.0));

    // Idle connections until cgperf has no descriptor left: seen at the
    // limit, or made to close idle connections to accept new ones (more
    // connections than the limit), which it does only when out of them
    // (a sample can fall between that close and the accept, at one short).
    let mut held = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while open_fds(exporter.pid()) < LIMIT as usize && held.len() <= 2 * LIMIT as usize {
        assert!(
            std::time::Instant::now() < deadline,
            "cgperf still has {} descriptors open",
            open_fds(exporter.pid())
        );
        held.push(std::net::TcpStream::connect(&exporter.addr).expect("connect"));
    }
    // A new cgroup makes cgperf list the hierarchy and open its events,
    // with no descriptor to spare; several collections pass.
    let sibling = TestCgroup::create_under(&parent.rel, "sibling");
    std::thread::sleep(std::time::Duration::from_secs(1));
    drop(held);

    exporter.wait_for("the sibling, found once descriptors are back", |b| {
        getppid_of(b, &sibling.rel).is_some()
    });
    // Whether cgperf met the moment without descriptors at all, and where
    // (the listing of the hierarchy, the sibling's perf events), depends on
    // timing: an accept out of descriptors closes the oldest idle
    // connection, which frees one. A failure is counted where it happens
    // (cgperf_read_errors_total, cgperf_open_errors_total); what must hold
    // whatever happened is that nothing is lost.
    getppid_workload(Some(&job.dir), 1000);
    getppid_workload(Some(&sibling.dir), 1000);
    let body = exporter.wait_collections(2);
    assert_eq!(
        getppid_of(&body, &job.rel),
        Some(2000.0),
        "the job's series survived the moment without descriptors"
    );
    assert_eq!(
        getppid_of(&body, &sibling.rel),
        Some(1000.0),
        "the sibling counts once descriptors are back"
    );
}

#[test]
fn a_mount_whose_name_is_not_utf8_does_not_stop_cgperf() {
    require_root("mounts a tmpfs in a private mount namespace");
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let odd = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9 stick"));
    std::fs::create_dir(&odd).expect("mkdir");
    let target = std::ffi::CString::new(odd.as_os_str().as_bytes()).expect("no NUL");
    let config = config_file("groups:\n  sched: [context-switches]\ncgroups:\n  - path: /\n");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.args([
        "check",
        &format!("--config.file={}", config.path().display()),
    ]);
    // SAFETY: unshare and mount are async-signal-safe; the strings were
    // made before the fork. The mount lives in the child's own namespace.
    unsafe {
        cmd.pre_exec(move || {
            let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    c"none".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                ) == 0;
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let out = cmd.output().expect("cgperf check runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("CGROUPS NOW"),
        "cgperf check with a mount at {}:\n{stdout}\n{stderr}",
        odd.display()
    );
}

/// A chain of `levels` cgroups under `parent`, each named `name`: made and
/// removed relative to each level's descriptor, as no single path reaches
/// the deepest when the chain is longer than PATH_MAX. Removed when
/// dropped.
struct DeepChain {
    /// Descriptors of the parent and of every level but the deepest.
    dirs: Vec<std::os::fd::OwnedFd>,
    name: std::ffi::CString,
}

impl DeepChain {
    fn new(parent: &Path, levels: usize, name: &str) -> Self {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let name = std::ffi::CString::new(name).expect("no NUL");
        let open = |at: i32, path: &std::ffi::CStr| {
            // SAFETY: a valid directory descriptor and NUL-terminated name.
            let fd =
                unsafe { libc::openat(at, path.as_ptr(), libc::O_DIRECTORY | libc::O_CLOEXEC) };
            assert!(fd >= 0, "open: {}", std::io::Error::last_os_error());
            // SAFETY: a descriptor we just opened and own.
            unsafe { OwnedFd::from_raw_fd(fd) }
        };
        let top = std::ffi::CString::new(parent.as_os_str().as_encoded_bytes()).expect("no NUL");
        let mut dirs = vec![open(libc::AT_FDCWD, &top)];
        for level in 0..levels {
            let at = dirs.last().expect("a level").as_raw_fd();
            // SAFETY: as above.
            let made = unsafe { libc::mkdirat(at, name.as_ptr(), 0o755) };
            assert_eq!(
                made,
                0,
                "mkdir level {level}: {}",
                std::io::Error::last_os_error()
            );
            if level + 1 < levels {
                dirs.push(open(at, &name));
            }
        }
        Self { dirs, name }
    }
}

impl Drop for DeepChain {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        while let Some(dir) = self.dirs.pop() {
            // SAFETY: a valid directory descriptor and NUL-terminated name.
            unsafe { libc::unlinkat(dir.as_raw_fd(), self.name.as_ptr(), libc::AT_REMOVEDIR) };
        }
    }
}

#[test]
fn a_cgroup_path_longer_than_path_max_does_not_stop_discovery() {
    require_root("creates cgroups");
    let parent = TestCgroup::create("cgperf-deep");
    // 18 levels of 251 bytes: past PATH_MAX (4096, its NUL included)
    // from the sixteenth or seventeenth level on, as the mount point is
    // long.
    let _chain = DeepChain::new(&parent.dir, 18, &"d".repeat(250));
    let fit = (1..=18)
        .filter(|level| parent.dir.as_os_str().len() + 251 * level < 4096)
        .count();
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - match: {}/**\n",
        parent.rel
    )));
    let body = exporter.wait_collections(2);
    // The levels that fit are counted; the next is found but cannot be
    // opened, and is said to be skipped, in the metric and in the log.
    assert_eq!(
        value(&body, "cgperf_monitored_cgroups", &[]),
        Some(fit as f64)
    );
    assert_eq!(
        value(
            &body,
            "cgperf_cgroups_skipped",
            &[("reason", "path_too_long")]
        ),
        Some(1.0),
        "{body}"
    );
    let log = exporter.log();
    assert!(
        log.contains("path_too_long") && log.contains("PATH_MAX"),
        "{log}"
    );
    let late = TestCgroup::create_under(&parent.rel, "late");
    exporter.wait_for("a cgroup made after cgperf met the deep one", |b| {
        getppid_of(b, &late.rel).is_some()
    });
}

/// The `match:` glob of the cgroups of `chain` (under `parent`) exactly
/// `levels` deep.
fn at_depth(parent: &TestCgroup, levels: usize) -> String {
    format!("{}{}", parent.rel, "/*".repeat(levels))
}

#[test]
fn with_every_selected_cgroup_skipped_cgperf_is_not_ready_and_says_why() {
    require_root("creates cgroups");
    let parent = TestCgroup::create("cgperf-unready");
    let _chain = DeepChain::new(&parent.dir, 18, &"d".repeat(250));
    // The first level past PATH_MAX (its NUL included).
    let deep = (1..=18)
        .find(|level| parent.dir.as_os_str().len() + 251 * level >= 4096)
        .expect("a level past PATH_MAX");
    let ready = |exporter: &Exporter| {
        let (status, said) = get_within(
            &exporter.addr,
            "/-/ready",
            std::time::Duration::from_secs(5),
        );
        assert!(status.contains(" 503 "), "{status}\n{said}");
        said
    };
    // Only a cgroup whose path is too long to open is selected.
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ngroups:\n  sw: [context-switches]\ncgroups:\n  - match: {}\n",
        at_depth(&parent, deep)
    )));
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_monitored_cgroups", &[]),
        Some(0.0),
        "{body}"
    );
    let said = ready(&exporter);
    assert!(
        said.contains("no cgroup is counted: the 1 selected are skipped (path_too_long)")
            && said.contains("PATH_MAX"),
        "{said}"
    );
    drop(exporter);
    // Two reasons at once: `/` and the parent past the open-files limit,
    // the deep one too long. (`max_cgroups` is at least 1: one within it
    // is skipped for another reason, or counted.)
    let config = config_file(&format!(
        "interval: 200ms\ngroups:\n  sw: [context-switches]\ncgroups:\n  \
         - path: /\n  - path: {}\n  - match: {}\n",
        parent.rel,
        at_depth(&parent, deep)
    ));
    let exporter = spawn_with_nofile(config.path(), 60, &[]);
    let body = exporter.wait_collections(2);
    for (reason, n) in [
        ("max_cgroups", 0.0),
        ("fd_budget", 2.0),
        ("path_too_long", 1.0),
    ] {
        assert_eq!(
            value(&body, "cgperf_cgroups_skipped", &[("reason", reason)]),
            Some(n),
            "{reason}:\n{body}"
        );
    }
    let said = ready(&exporter);
    assert!(
        said.contains(
            "no cgroup is counted: the 3 selected are skipped \
             (2 fd_budget, 1 path_too_long)"
        ) && said.contains("ulimit -n")
            && said.contains("PATH_MAX"),
        "{said}"
    );
}

/// A directory made by a test under the cgroup2 root by its raw name, and
/// removed when dropped (drop those below it first).
struct RawCgroup(std::path::PathBuf);

impl RawCgroup {
    fn create(parent: &Path, name: &[u8]) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let dir = parent.join(std::ffi::OsStr::from_bytes(name));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {dir:?}: {e}"));
        Self(dir)
    }
}

impl Drop for RawCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A cgroup whose name is not UTF-8 is counted under its escaped path
/// (`\xHH` for each invalid byte; `\` doubled in the exposition), and so
/// is everything below it; a valid name with a backslash (systemd's
/// `\x2d`) keeps its path as it is.
#[test]
fn a_cgroup_whose_name_is_not_utf8_is_counted_under_an_escaped_path() {
    require_root("creates cgroups");
    let parent = TestCgroup::create("cgperf-bytes");
    let odd = RawCgroup::create(&parent.dir, b"caf\xe9");
    let below = RawCgroup::create(&odd.0, b"job");
    let systemd = RawCgroup::create(&parent.dir, b"run-u1\\x2d2.scope");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - match: {}/**\n",
        parent.rel
    )));
    // As the exposition writes them: a backslash is `\\` there.
    let odd_rel = format!("{}/caf\\\\xE9", parent.rel);
    let below_rel = format!("{odd_rel}/job");
    let systemd_rel = format!("{}/run-u1\\\\x2d2.scope", parent.rel);
    exporter.wait_for("the cgroups' series", |b| {
        getppid_of(b, &below_rel).is_some() && getppid_of(b, &systemd_rel).is_some()
    });
    getppid_workload(Some(&odd.0), 3000);
    getppid_workload(Some(&below.0), 2000);
    getppid_workload(Some(&systemd.0), 700);
    let body = exporter.wait_collections(2);
    assert_eq!(getppid_of(&body, &odd_rel), Some(5000.0), "{body}");
    assert_eq!(getppid_of(&body, &below_rel), Some(2000.0), "{body}");
    assert_eq!(getppid_of(&body, &systemd_rel), Some(700.0), "{body}");
    assert_eq!(value(&body, "cgperf_monitored_cgroups", &[]), Some(3.0));
    assert_eq!(total(&body, "cgperf_cgroups_skipped"), 0.0, "{body}");
}

/// `**` has no depth limit: a chain of 130 nested cgroups is counted at
/// every level, the deepest work in each.
#[test]
fn a_chain_of_130_nested_cgroups_is_counted_at_every_level() {
    require_root("creates cgroups");
    const LEVELS: usize = 130;
    let parent = TestCgroup::create("cgperf-nested");
    let _chain = DeepChain::new(&parent.dir, LEVELS, "n");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - match: {}/**\n",
        parent.rel
    )));
    let deepest = format!("{}{}", parent.rel, "/n".repeat(LEVELS));
    exporter.wait_for("the deepest cgroup's series", |b| {
        getppid_of(b, &deepest).is_some()
    });
    getppid_workload(Some(&cgroup2_root().join(&deepest[1..])), 4000);
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_monitored_cgroups", &[]),
        Some(LEVELS as f64)
    );
    for level in [1, 64, 65, LEVELS] {
        let path = format!("{}{}", parent.rel, "/n".repeat(level));
        assert_eq!(getppid_of(&body, &path), Some(4000.0), "level {level}");
    }
}

/// `GET path` on a fresh connection, answered within `within`: (status
/// line, body).
fn get_within(addr: &str, path: &str, within: std::time::Duration) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(within)).expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("GET {path} not answered within {within:?}: {e}"));
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[test]
fn with_every_cgroup_over_the_descriptor_budget_cgperf_is_not_ready_and_says_why() {
    let config = config_file("interval: 200ms\ngroups:\n  sw: [context-switches]\n");
    // Below the descriptors cgperf keeps for itself: `/` does not fit.
    let exporter = spawn_with_nofile(config.path(), 60, &[]);
    let body = exporter.wait_collections(1);
    assert_eq!(
        value(&body, "cgperf_cgroups_skipped", &[("reason", "fd_budget")]),
        Some(1.0),
        "{body}"
    );
    let (status, said) = get_within(
        &exporter.addr,
        "/-/ready",
        std::time::Duration::from_secs(5),
    );
    assert!(status.contains(" 503 "), "{status}\n{said}");
    assert!(
        said.contains("no cgroup is counted: the 1 selected are skipped (fd_budget)")
            && said.contains("ulimit -n"),
        "{said}"
    );
}

#[test]
fn idle_connections_beyond_the_open_files_limit_do_not_hold_a_scrape_back() {
    let config = config_file("interval: 200ms\ngroups:\n  sw: [context-switches]\n");
    let exporter = spawn_with_nofile(config.path(), 60, &["--web.max-connections=1000"]);
    exporter.wait_collections(1);
    // More idle connections than cgperf has descriptors: the kernel queues
    // those it cannot accept.
    let held: Vec<std::net::TcpStream> = (0..70)
        .map(|_| std::net::TcpStream::connect(&exporter.addr).expect("connect"))
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    // Idle connections close after 10 s unasked; a scrape waiting for that
    // (or for a pause per accept failure) misses this bound.
    let (status, body) = get_within(
        &exporter.addr,
        "/metrics",
        std::time::Duration::from_secs(4),
    );
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("cgperf_collections_total"), "{body}");
    drop(held);
}
