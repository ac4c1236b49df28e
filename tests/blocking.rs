//! Nothing a user names may block cgperf: a config, web config or probe
//! binary that is a FIFO (or a directory, or too large) is refused promptly
//! with its path and what it is; a reload that cannot finish never stops
//! collections; a sampler that stops collecting is visible on `/-/ready`
//! and in `cgperf_last_collection_timestamp_seconds`; SIGTERM ends the
//! daemon in bounded time whatever it is waiting for.
//!
//! Every wait here has a deadline, so that a hang fails the test instead of
//! hanging the suite.

mod common;

use common::*;
use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a command that must not block may take.
const PROMPT: Duration = Duration::from_secs(15);

/// How long cgperf waits for the files a user names and the plan built
/// from them before giving up (not configurable).
const FILES_DEADLINE: Duration = Duration::from_secs(30);

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: a valid C string.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(r, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

/// Waits at most `limit` for `child` to exit; kills it and fails if it
/// does not. Returns (exit code, stdout, stderr).
fn finish(mut child: Child, limit: Duration, what: &str) -> (i32, String, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut out = String::new();
            let mut err = String::new();
            if let Some(mut s) = child.stdout.take() {
                s.read_to_string(&mut out).expect("stdout");
            }
            if let Some(mut s) = child.stderr.take() {
                s.read_to_string(&mut err).expect("stderr");
            }
            return (status.code().unwrap_or(-1), out, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hung: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs cgperf with `args`, which must exit within [`PROMPT`].
fn run_promptly(args: &[&str]) -> (i32, String, String) {
    finish(
        spawn_cgperf(args),
        PROMPT,
        &format!("cgperf {}", args.join(" ")),
    )
}

/// Starts cgperf with `args`, its output piped.
fn spawn_cgperf(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cgperf starts")
}

fn last_collection(body: &str) -> f64 {
    value(body, "cgperf_last_collection_timestamp_seconds", &[])
        .unwrap_or_else(|| panic!("no cgperf_last_collection_timestamp_seconds in\n{body}"))
}

fn getppid_config(cgroup: &str) -> String {
    format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {cgroup}\n"
    )
}

/// Asserts that `said` names `path` and says it is `what`.
fn names(said: &str, path: &Path, what: &str) {
    assert!(
        said.contains(&path.display().to_string()) && said.contains(what),
        "the message names {} and says it is {what}: {said}",
        path.display()
    );
}

/// Status line and body of `GET path`.
fn get_status(addr: &str, path: &str) -> (u16, String) {
    let (head, body) = http_get(addr, path, None);
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head}"));
    (status, body)
}

/// A directory holding a config file that can be swapped for a FIFO.
struct ConfigDir {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl ConfigDir {
    fn new(yaml: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cgperf.yaml");
        std::fs::write(&path, yaml).expect("write config");
        Self { _dir: dir, path }
    }

    fn exporter(&self) -> Exporter {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
        cmd.arg(format!("--config.file={}", self.path.display()));
        Exporter::spawn(cmd)
    }

    /// Replaces the config by `yaml`, by rename as editors do.
    fn replace(&self, yaml: &str) {
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, yaml).expect("write");
        std::fs::rename(&tmp, &self.path).expect("rename");
    }
}

/// cgperf counting getppid in a new cgroup `name`, from a config in a
/// directory of its own, with the cgroup's series present.
fn start_counting(name: &str) -> (TestCgroup, ConfigDir, Exporter) {
    require_root("count a workload in a cgroup");
    let cg = TestCgroup::create(name);
    let config = ConfigDir::new(&getppid_config(&cg.rel));
    let exporter = config.exporter();
    exporter.wait_for("the cgroup", |b| getppid_of(b, &cg.rel).is_some());
    (cg, config, exporter)
}

fn sighup(exporter: &Exporter) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGHUP) }, 0);
}

#[test]
fn check_refuses_a_fifo_or_a_directory_as_config_promptly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("config.yaml");
    mkfifo(&fifo);
    let arg = format!("--config.file={}", fifo.display());
    let (code, _, err) = run_promptly(&["check", &arg]);
    assert_eq!(code, 1, "{err}");
    names(&err, &fifo, "FIFO");

    let arg = format!("--config.file={}", dir.path().display());
    let (code, _, err) = run_promptly(&["check", &arg]);
    assert_eq!(code, 1, "{err}");
    names(&err, dir.path(), "directory");
}

#[test]
fn the_exporter_refuses_a_fifo_config_and_web_config_promptly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("config.yaml");
    mkfifo(&fifo);
    let arg = format!("--config.file={}", fifo.display());
    let (code, _, err) = run_promptly(&[&arg, "--web.listen-address=127.0.0.1:0"]);
    assert_eq!(code, 1, "{err}");
    names(&err, &fifo, "FIFO");

    let web = format!("--web.config.file={}", fifo.display());
    let (code, _, err) = run_promptly(&[&web, "--web.listen-address=127.0.0.1:0"]);
    assert_eq!(code, 1, "{err}");
    names(&err, &fifo, "FIFO");
}

#[test]
fn a_config_replaced_by_a_fifo_keeps_collecting_and_stops_on_sigterm() {
    let (cg, config, mut exporter) = start_counting("cgperf-block-fifo-config");
    getppid_workload(Some(&cg.dir), 1000);
    assert_eq!(
        getppid_of(&exporter.wait_collections(2), &cg.rel),
        Some(1000.0)
    );

    // The watcher sees the FIFO appear; SIGHUP asks again.
    std::fs::remove_file(&config.path).expect("remove config");
    mkfifo(&config.path);
    sighup(&exporter);
    let body = exporter.wait_for("the refused reload", |b| {
        value(b, "cgperf_config_last_reload_successful", &[]) == Some(0.0)
    });
    let before = last_collection(&body);
    getppid_workload(Some(&cg.dir), 500);
    let body = exporter.wait_collections(3);
    assert_eq!(getppid_of(&body, &cg.rel), Some(1500.0));
    assert!(last_collection(&body) > before);
    assert!(exporter.terminate(), "cgperf exits cleanly on SIGTERM");
}

#[test]
fn a_reload_naming_a_uprobe_on_a_fifo_keeps_collecting() {
    let (cg, config, exporter) = start_counting("cgperf-block-fifo-uprobe");
    let fifo = config.path.with_file_name("binary");
    mkfifo(&fifo);
    getppid_workload(Some(&cg.dir), 1000);
    exporter.wait_collections(2);

    let with_probe = format!(
        "{}probes:\n  - uprobe: {}:main\n    as: fifo_main\n",
        getppid_config(&cg.rel),
        fifo.display()
    );
    config.replace(&with_probe);
    sighup(&exporter);
    let probe = [("group", "probes"), ("event", "fifo_main")];
    let body = exporter.wait_for("the reload with the probe", |b| {
        value(b, "cgperf_event_supported", &probe).is_some()
    });
    assert_eq!(value(&body, "cgperf_event_supported", &probe), Some(0.0));
    let before = last_collection(&body);
    getppid_workload(Some(&cg.dir), 500);
    let body = exporter.wait_collections(3);
    assert_eq!(getppid_of(&body, &cg.rel), Some(1500.0));
    assert!(last_collection(&body) > before);

    // `cgperf check` on the same config answers, naming the FIFO.
    let arg = format!("--config.file={}", config.path.display());
    let (code, out, err) = run_promptly(&["check", &arg]);
    assert_eq!(code, 0, "{out}{err}");
    names(&out, &fifo, "FIFO");
}

/// A FUSE mount whose server never answers: every lookup under it blocks
/// (killably) in the kernel, as on a hung network file system. Unmounted,
/// and the blocked callers released, when dropped.
struct HungFuse {
    _dir: tempfile::TempDir,
    mnt: PathBuf,
    fd: std::os::fd::OwnedFd,
}

impl HungFuse {
    fn mount() -> Self {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let dir = tempfile::tempdir().expect("temp dir");
        // Inside a directory of its own, so that listing /tmp stays harmless.
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mount point");
        // SAFETY: opening a device with a valid C string.
        let raw = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        assert!(
            raw >= 0,
            "/dev/fuse: {}; this test needs FUSE (modprobe fuse)",
            std::io::Error::last_os_error()
        );
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let target = CString::new(mnt.as_os_str().as_bytes()).expect("no NUL");
        let options = CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fd.as_raw_fd()
        ))
        .expect("no NUL");
        // SAFETY: valid C strings; the server side is `fd`, never read.
        let r = unsafe {
            libc::mount(
                c"cgperf-hung".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                options.as_ptr().cast(),
            )
        };
        assert_eq!(r, 0, "mount fuse: {}", std::io::Error::last_os_error());
        Self { _dir: dir, mnt, fd }
    }
}

impl Drop for HungFuse {
    fn drop(&mut self) {
        let target = CString::new(self.mnt.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: a valid C string; detaching needs no answer from the server.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        // Closing the server's descriptor (when `fd` drops) aborts the
        // connection: whatever still waits on it gets an error.
        let _ = &self.fd;
    }
}

#[test]
fn a_reload_blocked_on_a_hung_file_system_keeps_collecting_and_sigterm_ends_it() {
    let (cg, config, mut exporter) = start_counting("cgperf-block-hung-fuse");
    let fuse = HungFuse::mount();
    getppid_workload(Some(&cg.dir), 1000);
    exporter.wait_collections(2);

    let binary = fuse.mnt.join("binary");
    config.replace(&format!(
        "{}probes:\n  - uprobe: {}:main\n    as: hung_main\n",
        getppid_config(&cg.rel),
        binary.display()
    ));
    let loaded = reload_time(&exporter.scrape());
    sighup(&exporter);
    let before = last_collection(&exporter.wait_collections(1));
    getppid_workload(Some(&cg.dir), 500);
    let body = exporter.wait_collections(3);
    assert_eq!(getppid_of(&body, &cg.rel), Some(1500.0));
    assert!(last_collection(&body) > before);
    assert_eq!(get_status(&exporter.addr, "/-/ready").0, 200);
    // The reload is still waiting: neither applied nor failed.
    assert_eq!(reload_time(&body), loaded);
    assert_eq!(
        value(&body, "cgperf_config_last_reload_successful", &[]),
        Some(1.0)
    );
    let probe = [("group", "probes"), ("event", "hung_main")];
    assert_eq!(value(&body, "cgperf_event_supported", &probe), None);
    // The reload is still blocked (its deadline is 30 s): SIGTERM ends
    // cgperf anyway, cleanly.
    assert!(exporter.terminate(), "cgperf exits cleanly on SIGTERM");
    drop(fuse);
}

/// A FUSE mount (bindfs) of a directory that answers until [`hang`]
/// stops its server: from then on every request that reaches the server
/// blocks, as on a network file system whose server went away. Resumed,
/// stopped and unmounted when dropped.
///
/// [`hang`]: StoppableFuse::hang
struct StoppableFuse {
    _dir: tempfile::TempDir,
    /// The directory shown under `mnt`.
    src: PathBuf,
    mnt: PathBuf,
    server: Child,
}

impl StoppableFuse {
    fn mount() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (src, mnt) = (dir.path().join("src"), dir.path().join("mnt"));
        std::fs::create_dir(&src).expect("source directory");
        std::fs::create_dir(&mnt).expect("mount point");
        std::fs::write(src.join("mounted"), b"").expect("marker");
        let server = Command::new("bindfs")
            .arg("-f")
            .arg(&src)
            .arg(&mnt)
            .stdin(Stdio::null())
            .spawn()
            .expect("bindfs (Debian bindfs, which scripts/test installs) runs");
        let fuse = Self {
            _dir: dir,
            src,
            mnt,
            server,
        };
        let deadline = Instant::now() + PROMPT;
        while !fuse.mnt.join("mounted").exists() {
            assert!(Instant::now() < deadline, "bindfs did not mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        fuse
    }

    /// Stops the server: requests that reach it wait until it resumes.
    fn hang(&self) {
        // SAFETY: signalling our own child.
        assert_eq!(
            unsafe { libc::kill(self.server.id() as i32, libc::SIGSTOP) },
            0
        );
    }
}

impl Drop for StoppableFuse {
    fn drop(&mut self) {
        let pid = self.server.id() as i32;
        // SAFETY: signalling our own child, then a valid C string.
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let _ = self.server.kill();
        let _ = self.server.wait();
        let target = CString::new(self.mnt.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: a valid C string.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A uprobe's binary on a file system that hangs after the probe was
/// planned: a new cgroup still gets the probe (the kernel reaches the held
/// binary through `/proc/self/fd`, without a lookup on the hung mount),
/// collections go on, and the new cgroup's calls are counted exactly.
#[test]
fn a_new_cgroup_gets_a_probe_whose_file_system_hangs() {
    use std::io::Write;
    const CALLS: u64 = 4321;
    require_root("count uprobes in cgroups");
    let parent = TestCgroup::create("cgperf-block-probe-fuse");
    let fuse = StoppableFuse::mount();
    probe_program(&fuse.src, "app", false);
    let app = fuse.mnt.join("app");
    let config = ConfigDir::new(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\n\
         probes:\n  - uprobe: {}:cgperf_work\n    as: fuse_work\n\
         cgroups:\n  - match: {}/*\n",
        app.display(),
        parent.rel
    ));
    let exporter = config.exporter();
    let probe = [("group", "probes"), ("event", "fuse_work")];
    let body = exporter.wait_for("the probe's verdict", |b| {
        value(b, "cgperf_event_supported", &probe).is_some()
    });
    assert_eq!(value(&body, "cgperf_event_supported", &probe), Some(1.0));

    // The workload runs from the mount, then waits to be told to call.
    let mut workload = Command::new(&app)
        .args([CALLS.to_string().as_str(), "wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the workload starts from the mount");
    let mut running = [0u8];
    let mut stdout = workload.stdout.take().expect("piped stdout");
    stdout.read_exact(&mut running).expect("the workload runs");

    fuse.hang();
    // Whatever the kernel cached of the mount's names times out (bindfs
    // keeps them 1 s): a lookup of the path now waits for the server.
    std::thread::sleep(Duration::from_secs(2));
    let before = last_collection(&exporter.wait_collections(1));
    let cg = TestCgroup::create_under(&parent.rel, "new");
    let series = |b: &str| {
        value(
            b,
            "cgperf_events_total",
            &[
                ("cgroup", &cg.rel),
                ("group", "probes"),
                ("event", "fuse_work"),
            ],
        )
    };
    let body = exporter.wait_for("the new cgroup's probe", |b| series(b).is_some());
    assert_eq!(series(&body), Some(0.0));
    assert!(last_collection(&body) > before, "collections go on");

    std::fs::write(cg.dir.join("cgroup.procs"), workload.id().to_string())
        .expect("move the workload into the new cgroup");
    let mut stdin = workload.stdin.take().expect("piped stdin");
    stdin.write_all(b"g").expect("tell the workload to call");
    drop(stdin);
    let status = workload.wait().expect("the workload ends");
    assert!(status.success(), "the workload failed: {status}");
    let body = exporter.wait_collections(2);
    assert_eq!(series(&body), Some(CALLS as f64));
    assert_eq!(get_status(&exporter.addr, "/-/ready").0, 200);
    drop(exporter);
    drop(fuse);
}

/// A config, or a uprobe binary, on a hung file system fails `cgperf
/// check`, the exporter's start-up and `cgperf stat` after their deadline,
/// naming the path, instead of hanging them: exit 1 for a config that
/// cannot be read, 2 for a plan that cannot be built.
#[test]
fn check_start_up_and_stat_give_up_on_a_hung_file_system() {
    require_root("mount a FUSE file system");
    let fuse = HungFuse::mount();
    let hung_config = fuse.mnt.join("cgperf.yaml");
    let hung_binary = fuse.mnt.join("app");
    let config = ConfigDir::new(&format!(
        "{}probes:\n  - uprobe: {}:main\n    as: hung_main\n",
        getppid_config("/"),
        hung_binary.display()
    ));
    let config_arg = format!("--config.file={}", hung_config.display());
    let probe_arg = format!("--config.file={}", config.path.display());
    let listen = "--web.listen-address=127.0.0.1:0";
    // All at once: each waits out the same deadline.
    let runs = [
        ("check", vec!["check", config_arg.as_str()], 1, &hung_config),
        (
            "start-up",
            vec![config_arg.as_str(), listen],
            1,
            &hung_config,
        ),
        ("check", vec!["check", probe_arg.as_str()], 2, &hung_binary),
        (
            "start-up",
            vec![probe_arg.as_str(), listen],
            2,
            &hung_binary,
        ),
        (
            "stat",
            vec!["stat", config_arg.as_str(), "--", "true"],
            1,
            &hung_config,
        ),
        (
            "stat",
            vec!["stat", probe_arg.as_str(), "--", "true"],
            2,
            &hung_binary,
        ),
    ];
    let children: Vec<Child> = runs
        .iter()
        .map(|(_, args, ..)| spawn_cgperf(args))
        .collect();
    for ((what, _, code, path), child) in runs.iter().zip(children) {
        let (got, _, err) = finish(child, FILES_DEADLINE + PROMPT, what);
        assert_eq!(got, *code, "{what}: {err}");
        assert!(
            err.contains(&path.display().to_string()) && err.contains("did not finish within 30s"),
            "{what} names {} and the deadline: {err}",
            path.display()
        );
    }
    drop(fuse);
}

#[test]
fn an_oversized_config_via_the_watcher_is_refused() {
    let (cg, config, exporter) = start_counting("cgperf-block-oversized");
    exporter.wait_collections(1);

    // A sparse terabyte: reading it whole would exhaust memory.
    let tmp = config.path.with_extension("tmp");
    std::fs::File::create(&tmp)
        .and_then(|f| f.set_len(1 << 40))
        .expect("sparse file");
    std::fs::rename(&tmp, &config.path).expect("rename");
    exporter.wait_for("the refused reload", |b| {
        value(b, "cgperf_config_last_reload_successful", &[]) == Some(0.0)
    });
    getppid_workload(Some(&cg.dir), 300);
    let body = exporter.wait_collections(2);
    assert_eq!(getppid_of(&body, &cg.rel), Some(300.0));
}

#[test]
fn health_and_readiness_endpoints_answer() {
    require_root("count in a cgroup");
    let cg = TestCgroup::create("cgperf-block-ready");
    let exporter = Exporter::start(Some(&getppid_config(&cg.rel)));
    let body = exporter.wait_collections(1);
    let first = last_collection(&body);
    assert!(first > 0.0, "{body}");
    assert_eq!(get_status(&exporter.addr, "/-/healthy").0, 200);
    let (status, text) = get_status(&exporter.addr, "/-/ready");
    assert_eq!(status, 200, "{text}");
    assert!(last_collection(&exporter.wait_collections(2)) > first);
}

/// The thread id of cgperf's sampler thread.
fn sampler_tid(pid: i32) -> i32 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("task list");
    tasks
        .filter_map(|t| {
            let t = t.ok()?;
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            (comm.trim() == "cgperf-sampler")
                .then(|| t.file_name().to_string_lossy().parse().ok())
                .flatten()
        })
        .next()
        .expect("cgperf has a sampler thread")
}

/// Stops the thread `tid` (only it: ptrace stops one thread), as a sampler
/// stuck in the kernel would be.
fn freeze_thread(tid: i32) {
    // SAFETY: ptrace on a thread of our own child.
    let r = unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) };
    assert_eq!(r, 0, "PTRACE_SEIZE: {}", std::io::Error::last_os_error());
    let r = unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) };
    assert_eq!(
        r,
        0,
        "PTRACE_INTERRUPT: {}",
        std::io::Error::last_os_error()
    );
    let mut status = 0;
    // SAFETY: waiting for the stop of the thread we trace.
    let w = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
    assert_eq!(w, tid, "waitpid: {}", std::io::Error::last_os_error());
}

fn thaw_thread(tid: i32) {
    // SAFETY: detaching from the thread we trace, which is stopped.
    let r = unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0) };
    assert_eq!(r, 0, "PTRACE_DETACH: {}", std::io::Error::last_os_error());
}

#[test]
fn a_stalled_sampler_is_not_ready_and_sigterm_still_ends_cgperf() {
    require_root("count in a cgroup and trace cgperf's sampler thread");
    let cg = TestCgroup::create("cgperf-block-stall");
    let exporter = Exporter::start(Some(&getppid_config(&cg.rel)));
    exporter.wait_collections(1);
    assert_eq!(get_status(&exporter.addr, "/-/ready").0, 200);

    let tid = sampler_tid(exporter.pid());
    freeze_thread(tid);
    let stalled = last_collection(&exporter.scrape());
    let deadline = Instant::now() + Duration::from_secs(20);
    let reason = loop {
        let (status, body) = get_status(&exporter.addr, "/-/ready");
        if status == 503 {
            break body;
        }
        assert_eq!(status, 200, "{body}");
        assert!(
            Instant::now() < deadline,
            "/-/ready still answers 200 with the sampler stopped"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(reason.contains("last collection"), "{reason}");
    // /metrics still answers, with the frozen timestamp that shows the stall.
    assert_eq!(last_collection(&exporter.scrape()), stalled);

    thaw_thread(tid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while get_status(&exporter.addr, "/-/ready").0 != 200 {
        assert!(Instant::now() < deadline, "not ready again after the stall");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(last_collection(&exporter.scrape()) > stalled);

    // Stuck again, then SIGTERM: cgperf gives up on the sampler and exits.
    freeze_thread(tid);
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut status = 0;
        // SAFETY: reaping the traced thread once it is killed with the process.
        let w = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if w == tid && (libc::WIFEXITED(status) || libc::WIFSIGNALED(status)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "cgperf did not exit within 20 s of SIGTERM with its sampler stuck"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut exporter = exporter;
    assert!(
        !exporter.terminate(),
        "giving up on the sampler is a failure"
    );
}
