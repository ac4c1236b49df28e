//! Shared helpers of the integration tests: real cgroups, a deterministic
//! workload, the real `cgperf` binary and scrapes of its `/metrics`.
//!
//! These tests need root (creating cgroups, perf in cgroup mode). Without it
//! they fail, saying so; they never pass vacuously.
#![allow(dead_code)]

pub mod manifest;
pub mod perf_data;
pub mod prometheus;
pub mod release;
pub mod sysctl;

use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cgroup2 mount of this machine, found the way cgperf finds it.
pub fn cgroup2_root() -> PathBuf {
    cgperf::discovery::CgroupFs::locate()
        .expect("these tests need a cgroup2 mount")
        .root()
        .to_path_buf()
}

/// A cgroup created for one test and removed when dropped.
pub struct TestCgroup {
    /// Path relative to the cgroup2 root, e.g. `/cgperf-test-x-123`.
    pub rel: String,
    /// Absolute directory.
    pub dir: PathBuf,
}

impl TestCgroup {
    /// Creates `/<name>-<pid>` under the cgroup2 root: unique per test run.
    pub fn create(name: &str) -> Self {
        Self::create_under("", &format!("{name}-{}", std::process::id()))
    }

    /// Creates `<parent>/<name>` (the parent is a unique test cgroup).
    pub fn create_under(parent: &str, name: &str) -> Self {
        let rel = format!("{parent}/{name}");
        let dir = cgroup2_root().join(rel.trim_start_matches('/'));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!(
                "cannot create cgroup {}: {e} (these tests must run as root on a machine with cgroup v2)",
                dir.display()
            );
        }
        Self { rel, dir }
    }

    /// Removes the cgroup now (its processes have exited).
    pub fn remove(&self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Pins the calling process to `cpu`, or exits with status 4: for the
/// work of [`in_child`] (only async-signal-safe calls).
pub fn pin_or_exit(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes into it;
    // sched_setaffinity and _exit are raw system calls.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            libc::_exit(4);
        }
    }
}

/// A zeroed word of memory the test shares with the processes it forks (a
/// page mapped `MAP_SHARED`), unmapped when dropped: flags and barriers
/// that children can use with plain atomics, no syscall.
pub struct SharedWord(*mut std::sync::atomic::AtomicU64);

impl SharedWord {
    pub fn new() -> Self {
        // SAFETY: a fresh anonymous shared mapping of one page; checked.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(page, libc::MAP_FAILED, "mmap a shared page");
        Self(page.cast())
    }

    pub fn get(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: page-aligned memory, zeroed by the kernel, mapped until
        // drop.
        unsafe { &*self.0 }
    }
}

impl Drop for SharedWord {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `new`, no longer borrowed.
        unsafe { libc::munmap(self.0.cast(), 4096) };
    }
}

/// `cgroup`'s `cgroup.procs`, made before a fork for the child to write to
/// ([`join_or_exit`]): a forked child must not allocate.
pub fn procs_of(cgroup: &Path) -> CString {
    CString::new(
        cgroup
            .join("cgroup.procs")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .expect("path has no NUL")
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs` (writing "0" moves the writer), or exits with `status`: raw
/// syscalls only.
///
/// # Safety
///
/// Only in a forked child, which it may end.
pub unsafe fn join_or_exit(procs: &CString, status: i32) {
    // SAFETY: raw syscalls on a valid C string and our own buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
        if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
            libc::_exit(status);
        }
        libc::close(fd);
    }
}

/// Runs `work` in a child process that first moves itself into `cgroup`
/// (stays where it is if `None`), and waits for it.
///
/// `work` runs between `fork` and `_exit` in a child of a multi-threaded
/// process: it must only make raw syscalls (no allocation, no locks).
pub fn in_child(cgroup: Option<&Path>, work: impl FnOnce()) {
    let procs = cgroup.map(procs_of);
    // SAFETY: the child calls only async-signal-safe functions and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        unsafe {
            if let Some(procs) = &procs {
                join_or_exit(procs, 3);
            }
            work();
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child we just forked.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "workload failed (status {status}); moving into the cgroup needs root"
    );
}

/// Exactly `n` `getppid` syscalls in `cgroup`.
pub fn getppid_workload(cgroup: Option<&Path>, n: u64) {
    in_child(cgroup, || {
        for _ in 0..n {
            // SAFETY: a raw syscall without arguments.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
    });
}

/// Touches `pages` fresh anonymous pages, one write each: exactly that many
/// page faults at least, wherever the caller's stack sits. For [`in_child`]'s
/// work after the move: a forked child otherwise faults only where its
/// stack crosses into a page it has not written since the fork, which
/// depends on the address layout.
pub fn touch_pages(pages: usize) {
    // SAFETY: sysconf has no preconditions; the mapping is written only
    // within its length and unmapped after.
    unsafe {
        let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
        let len = pages * page;
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            libc::_exit(5);
        }
        for i in 0..pages {
            std::ptr::write_volatile(p.cast::<u8>().add(i * page), 1);
        }
        libc::munmap(p, len);
    }
}

/// The monotonic clock in milliseconds, by a raw `clock_gettime` (which
/// [`in_child`]'s work may call).
pub fn monotonic_millis() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into the local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// Keeps a CPU busy for `millis` milliseconds in `cgroup`.
pub fn spin_workload(cgroup: &Path, millis: i64) {
    in_child(Some(cgroup), || {
        let now = monotonic_millis;
        let end = now() + millis;
        let mut x = 0u64;
        while now() < end {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    });
}

/// Whether this machine has a hardware PMU, asked of `perf stat` (the oracle
/// the tests install): PMU-less VMs print `<not supported>` for `cycles`.
/// (`<not counted>` only means the event did not get a counter, e.g. while
/// cgperf itself holds them.)
pub fn has_hardware_pmu() -> bool {
    static PMU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PMU.get_or_init(|| {
        let out = Command::new("perf")
            .args(["stat", "-x,", "-e", "cycles", "true"])
            .output()
            .expect("perf is installed (the test script installs linux-perf)");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("cycles"),
            "unexpected perf stat output:\n{said}"
        );
        !said.contains("<not supported>")
    })
}

/// Runs cgperf on `config` with an open-files limit of `limit`, soft and
/// hard (cgperf cannot raise it), and `extra` arguments.
pub fn spawn_with_nofile(config: &Path, limit: u64, extra: &[&str]) -> Exporter {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.display()))
        .args(extra);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Exporter::spawn(cmd)
}

/// A running `cgperf` exporter, killed when dropped.
pub struct Exporter {
    child: Child,
    /// `127.0.0.1:PORT` it serves on.
    pub addr: String,
    _config: Option<tempfile::NamedTempFile>,
    /// The network namespace it serves in, when not the tests' own.
    netns: Option<std::fs::File>,
    /// Every line it has logged so far.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Exporter {
    /// Starts cgperf on `yaml` (or the embedded default config when `None`)
    /// on a free loopback port and waits until it serves.
    pub fn start(yaml: Option<&str>) -> Self {
        Self::start_binary(Path::new(env!("CARGO_BIN_EXE_cgperf")), yaml)
    }

    /// [`Exporter::start`] with the cgperf at `binary`: [`shipped_binary`]
    /// where what is measured is how fast the shipped build reacts.
    pub fn start_binary(binary: &Path, yaml: Option<&str>) -> Self {
        // The embedded default config, written out when the tests choose
        // the backend.
        let yaml = yaml.or_else(|| backend_asked().map(|_| cgperf::config::DEFAULT_YAML));
        let config = yaml.map(|yaml| {
            let mut file = tempfile::NamedTempFile::new().expect("temp file");
            file.write_all(with_test_backend(yaml).as_bytes())
                .expect("write config");
            file
        });
        let mut cmd = Command::new(binary);
        if let Some(file) = &config {
            cmd.arg(format!("--config.file={}", file.path().display()));
        }
        let mut exporter = Self::spawn(cmd);
        exporter._config = config;
        exporter
    }

    /// Starts cgperf as `cmd` (which may already name a config file and set
    /// limits) on a free loopback port and waits until it serves.
    pub fn spawn(mut cmd: Command) -> Self {
        cmd.arg("--web.listen-address=127.0.0.1:0")
            .arg("--log.level=info");
        Self::spawn_as_given(cmd, false)
    }

    /// Starts `cmd` with exactly the arguments it has (its own listen
    /// address) and waits until it serves. With `own_netns`, `cmd` puts
    /// cgperf in a network namespace of its own (`unshare --net`, as a pod
    /// has), and every request of the test is made from inside it.
    pub fn spawn_as_given(mut cmd: Command, own_netns: bool) -> Self {
        let mut child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .expect("cgperf binary starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let lines = log.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[cgperf] {line}");
                lines.lock().expect("log lock").push(line.clone());
                if !sent && let Some(addr) = served_address(&line) {
                    sent = tx.send(addr).is_ok();
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("cgperf did not start serving within 30 s (see its log above)");
        // cgperf serves: whatever wrapped it has exec'd into it, in its
        // final namespaces.
        let netns = own_netns.then(|| {
            std::fs::File::open(format!("/proc/{}/ns/net", child.id()))
                .expect("cgperf's network namespace")
        });
        Self {
            child,
            addr,
            _config: None,
            netns,
            log,
        }
    }

    /// What cgperf has logged so far, one line per line.
    pub fn log(&self) -> String {
        self.log.lock().expect("log lock").join("\n")
    }

    /// `GET path` with `accept`, from cgperf's network namespace:
    /// (head, body).
    pub fn get(&self, path: &str, accept: Option<&str>) -> (String, String) {
        let Some(netns) = &self.netns else {
            return http_get(&self.addr, path, accept);
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                use std::os::fd::AsRawFd;
                // SAFETY: moves this (scoped, short-lived) thread only.
                let entered = unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
                http_get(&self.addr, path, accept)
            })
            .join()
            .expect("request thread")
        })
    }

    /// Starts cgperf on `yaml` with the environment variables `env` set and
    /// every other `OTEL_*` variable of the test process removed, so that
    /// only what the test says configures the OTLP push.
    pub fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Self {
        Self::start_otel(yaml, env, Stdio::inherit()).0
    }

    /// [`Exporter::start_with_env`], with cgperf's standard output piped to
    /// the test.
    pub fn start_with_env_and_stdout(
        yaml: &str,
        env: &[(&str, &str)],
    ) -> (Self, std::process::ChildStdout) {
        let (exporter, stdout) = Self::start_otel(yaml, env, Stdio::piped());
        (exporter, stdout.expect("piped stdout"))
    }

    fn start_otel(
        yaml: &str,
        env: &[(&str, &str)],
        stdout: Stdio,
    ) -> (Self, Option<std::process::ChildStdout>) {
        let config = config_file(yaml);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
        cmd.arg(format!("--config.file={}", config.path().display()));
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("OTEL_") {
                cmd.env_remove(name);
            }
        }
        cmd.envs(env.iter().copied()).stdout(stdout);
        let mut exporter = Self::spawn(cmd);
        exporter._config = Some(config);
        let stdout = exporter.child.stdout.take();
        (exporter, stdout)
    }

    /// Sends SIGTERM and waits (at most 20 s) for cgperf to exit; returns
    /// whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for cgperf") {
                return status.success();
            }
            assert!(
                Instant::now() < deadline,
                "cgperf did not exit within 20 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id, to send signals to.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The body of `GET /metrics` in the classic text format.
    pub fn scrape(&self) -> String {
        self.get("/metrics", None).1
    }

    /// Waits until cgperf has finished `n` more collections than now, so that
    /// everything that happened before this call is in the snapshot.
    pub fn wait_collections(&self, n: u64) -> String {
        let start = collections(&self.scrape());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let body = self.scrape();
            if collections(&body) >= start + n {
                return body;
            }
            assert!(Instant::now() < deadline, "cgperf stopped collecting");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `pred` holds for a scrape, returning that scrape.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let body = self.scrape();
            if pred(&body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last scrape:\n{body}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `HOST:PORT` from cgperf's "serving http://HOST:PORT/metrics" log line
/// (or `https://` when its web config turns TLS on).
fn served_address(line: &str) -> Option<String> {
    let (_, rest) = line
        .split_once("serving http://")
        .or_else(|| line.split_once("serving https://"))?;
    Some(rest.split('/').next().unwrap_or_default().to_string())
}

/// Parses a raw HTTP/1.1 response: (status, head, body, de-chunked).
/// `None` when it is not a complete HTTP response head.
pub fn parse_response(raw: &[u8]) -> Option<(u16, String, String)> {
    let raw = String::from_utf8_lossy(raw);
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, head.to_string(), dechunk(head, body)))
}

fn collections(body: &str) -> u64 {
    value(body, "cgperf_collections_total", &[]).map_or(0, |v| v as u64)
}

/// A minimal HTTP/1.1 GET; returns (head, body).
pub fn http_get(addr: &str, path: &str, accept: Option<&str>) -> (String, String) {
    let accept: Vec<(&str, &str)> = accept.map(|a| ("Accept", a)).into_iter().collect();
    let (head, body) = http_request(addr, path, &accept);
    let body = String::from_utf8(body).expect("utf-8 response");
    let body = dechunk(&head, &body);
    (head, body)
}

/// A GET with `headers`; returns the head and the body's bytes as sent
/// (neither decoded nor de-chunked).
pub fn http_request(addr: &str, path: &str, headers: &[(&str, &str)]) -> (String, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).expect("connect to cgperf");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let headers: String = headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}\r\n"))
        .collect();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"
    )
    .expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("HTTP response");
    let head = String::from_utf8(raw[..split].to_vec()).expect("utf-8 head");
    (head, raw[split + 4..].to_vec())
}

fn dechunk(head: &str, body: &str) -> String {
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_string();
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
    out
}

/// The value of the sample `name{labels}` whose labels include all of
/// `want` (in any order), if present.
pub fn value(body: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, labels) = match series.split_once('{') {
                Some((m, l)) => (m, l.trim_end_matches('}')),
                None => (series, ""),
            };
            if metric != name {
                return None;
            }
            let ok = want
                .iter()
                .all(|(k, v)| labels.split(',').any(|kv| kv == format!("{k}=\"{v}\"")));
            ok.then(|| value.parse().ok()).flatten()
        })
}

/// `cgperf_backend_info`'s (backend, fallback) in a scrape. Parsed by hand:
/// a fallback's reason has commas of its own.
pub fn backend_info(body: &str) -> (String, String) {
    let line = body
        .lines()
        .find_map(|l| l.strip_prefix("cgperf_backend_info{backend=\""))
        .unwrap_or_else(|| panic!("no cgperf_backend_info:\n{body}"));
    let (backend, rest) = line.split_once("\",fallback=\"").expect("fallback label");
    let (fallback, value) = rest.rsplit_once("\"} ").expect("a sample");
    assert_eq!(value.trim(), "1", "{line}");
    (backend.to_owned(), fallback.to_owned())
}

/// The backend a cgperf on `backend: auto` that may count through BPF says
/// it counts with in a scrape: bpf, or the cgroup backend where its
/// program found, in the second after it loaded, that this kernel switches
/// out of tasks without the `sched_switch` tracepoint (docs/backends.md;
/// this machine's VM guest kernel does so, in bursts). Any other fallback
/// fails.
pub fn auto_backend(body: &str) -> String {
    let (backend, fallback) = backend_info(body);
    if backend == "bpf" {
        assert_eq!(fallback, "", "{body}");
    } else {
        assert_eq!(backend, "cgroup", "{body}");
        assert!(
            fallback.contains("switched out of tasks without the sched_switch tracepoint"),
            "`auto` fell back for another reason: {fallback}"
        );
    }
    backend
}

/// Rewrites cgperf's config at `path` to `yaml` as given, sends SIGHUP and
/// returns the first scrape after the reload, which must have succeeded.
pub fn reload_to(exporter: &Exporter, path: &Path, yaml: &str) -> String {
    let loaded = reload_time(&exporter.scrape());
    std::fs::write(path, yaml).expect("rewrite config");
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGHUP) }, 0);
    let body = exporter.wait_for("the reload", |b| reload_time(b) > loaded);
    assert_eq!(
        value(&body, "cgperf_config_last_reload_successful", &[]),
        Some(1.0),
        "{body}"
    );
    body
}

/// When the config was last loaded successfully, from a scrape.
pub fn reload_time(body: &str) -> f64 {
    value(
        body,
        "cgperf_config_last_reload_success_timestamp_seconds",
        &[],
    )
    .expect("reload timestamp")
}

/// The sum of every sample of `name` (0 when there is none).
pub fn total(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| series.split('{').next() == Some(name))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}

/// The `syscalls:sys_enter_getppid` count of `cgroup` in a scrape.
pub fn getppid_of(body: &str, cgroup: &str) -> Option<f64> {
    value(
        body,
        "cgperf_events_total",
        &[("cgroup", cgroup), ("event", "syscalls:sys_enter_getppid")],
    )
}

/// Runs the cgperf binary with `args`; returns (exit code, stdout, stderr).
pub fn run_cgperf(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cgperf"))
        .args(args)
        .output()
        .expect("cgperf runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `yaml` to a temp file named `name` and returns it.
pub fn config_file(yaml: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    file.write_all(with_test_backend(yaml).as_bytes())
        .expect("write");
    file
}

/// The backend the tests are asked to count with: `CGPERF_TEST_BACKEND`
/// (`cgroup`, `bpf` or `auto`), which `scripts/test` sets to run the
/// counting tests under each backend; `None` leaves configs to the default.
pub fn backend_asked() -> Option<String> {
    std::env::var("CGPERF_TEST_BACKEND")
        .ok()
        .filter(|b| !b.is_empty())
}

/// `yaml` with `backend:` set to [`backend_asked`], unless the config sets
/// it itself. Appended, so that line and column numbers of errors stay.
pub fn with_test_backend(yaml: &str) -> String {
    match backend_asked() {
        Some(backend) if !yaml.lines().any(|l| l.starts_with("backend:")) => {
            let sep = if yaml.ends_with('\n') || yaml.is_empty() {
                ""
            } else {
                "\n"
            };
            format!("{yaml}{sep}backend: {backend}\n")
        }
        _ => yaml.to_owned(),
    }
}

/// A capability set from a `/proc/PID/status` line (`CapEff:\t...`).
pub fn status_caps(pid: i32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in status"))
        .trim();
    u64::from_str_radix(hex, 16).expect("hex capability set")
}

/// Fails, saying why (`why`: what the tests do that needs root), unless the
/// tests run as root: they must never pass without having run.
/// Runs `cmd`, failing the test with its output unless it succeeds;
/// returns its stdout.
#[track_caller]
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e} (scripts/test installs it)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `cmd` (a script that runs `cargo build`: scripts/build, scripts/run,
/// scripts/release) with the environment this `cargo test` was started
/// in: without what cargo sets for a test binary (its package's `CARGO_*`,
/// `OUT_DIR`) and what build.rs hands the crate (`CGPERF_REVISION`,
/// `CGPERF_RUSTC_VERSION`). Under those the build is not the one a shell's
/// scripts/build makes, and each rebuilds every crate after the other
/// (ring's build script watches `CARGO_MANIFEST_DIR`, cgperf's
/// `CGPERF_REVISION`): three minutes each time. The revision is then
/// git's, as in a shell's build.
pub fn as_from_a_shell(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo = matches!(
            &*name,
            "CARGO"
                | "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "OUT_DIR"
                | "CGPERF_REVISION"
                | "CGPERF_RUSTC_VERSION"
        ) || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_");
        if set_by_cargo {
            cmd.env_remove(&*name);
        }
    }
    cmd
}

/// The cgperf binary as it ships, built by scripts/build (release mode,
/// static) once per test binary: at once where scripts/release already
/// built it in this run, a few minutes from nothing.
pub fn shipped_binary() -> &'static Path {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let printed = run(as_from_a_shell(&mut Command::new(
            repo.join("scripts/build"),
        )));
        let binary = repo.join(printed.trim());
        assert!(binary.is_file(), "scripts/build printed {printed:?}");
        binary
    })
}

pub fn require_root(why: &str) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests {why}, which needs root; run them as root"
    );
}

/// The C source of [`probe_program`].
const PROBE_PROGRAM: &str = r#"
#include <stdlib.h>
#include <unistd.h>
#ifdef DECOY
__attribute__((noinline)) unsigned long cgperf_decoy(unsigned long x) { __asm__ volatile(""); return x * 3 + 1; }
#endif
__attribute__((noinline)) unsigned long cgperf_work(unsigned long x) { __asm__ volatile(""); return x * 3 + 1; }
int main(int argc, char **argv) {
    char go;
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 0, s = 0;
    if (argc > 2 && (write(1, "r", 1) != 1 || read(0, &go, 1) != 1)) return 2;
    for (unsigned long i = 0; i < n; i++) {
        s += cgperf_work(i);
#ifdef DECOY
        s += cgperf_decoy(i) + cgperf_decoy(i + 1);
#endif
    }
    return s == 1;
}
"#;

/// Compiles the C `source` into `dir/name` with `cc` (which links Rust
/// binaries; the test script installs it) at `-O1` and with `flags`, and
/// returns the binary's path. Fails with the compiler's errors.
pub fn compile_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, source).expect("write the C source");
    let binary = dir.join(name);
    let out = Command::new("cc")
        .arg("-O1")
        .args(flags)
        .arg("-o")
        .arg(&binary)
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cc runs (apt-get install gcc): {e}"));
    assert!(
        out.status.success(),
        "cc failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// Compiles a program into `dir/name` ([`compile_c`]) that calls its
/// function `cgperf_work` as many times as its first argument says and
/// exits 0; given a second argument, it first writes a byte to stdout (it
/// runs) and waits for a byte on stdin. With `decoy`, it is another build
/// of the program: a function `cgperf_decoy`, called twice as often, sits
/// where `cgperf_work` is in the build without, which moves further on (an
/// upgraded binary whose offsets changed).
pub fn probe_program(dir: &Path, name: &str, decoy: bool) -> PathBuf {
    let flags: &[&str] = if decoy {
        &["-fno-inline", "-DDECOY"]
    } else {
        &["-fno-inline"]
    };
    compile_c(dir, name, PROBE_PROGRAM, flags)
}

/// `n` syscall tracepoints, `syscalls:sys_enter_getppid` last (the
/// highest counter position they take).
pub fn syscall_tracepoints(n: usize) -> Vec<String> {
    let tracefs = cgperf::tracefs::Tracefs::locate().expect("tracefs mounted");
    let dir = tracefs.root().join("events/syscalls");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the syscall tracepoints")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("sys_enter_") && name != "sys_enter_getppid")
        .map(|name| format!("syscalls:{name}"))
        .collect();
    names.sort();
    assert!(
        names.len() >= n,
        "{} syscall tracepoints, {n} wanted",
        names.len() + 1
    );
    names.truncate(n.saturating_sub(1));
    names.push("syscalls:sys_enter_getppid".to_string());
    names
}

/// Starts `cmd` as a terminal's shell starts a command in the foreground:
/// SIGINT, SIGQUIT and SIGHUP at their defaults. Tests run from a
/// background job (where a non-interactive shell ignores SIGINT and
/// SIGQUIT) or under `nohup` (SIGHUP ignored) would otherwise hand
/// `cgperf stat` ignored signals, which it leaves ignored as `perf stat`
/// does, and a test that ends it with one would wait forever.
pub fn in_foreground(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal() is async-signal-safe, and nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// This machine's CPU id as perf's x86 mapfiles match it.
pub fn cpu_id() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
    let field = |key: &str| {
        cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == key).then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| {
                panic!("no `{key}` in /proc/cpuinfo: these tests need an x86 machine")
            })
    };
    let num = |key: &str| field(key).parse::<u32>().expect("a number");
    format!(
        "{}-{}-{:X}",
        field("vendor_id"),
        num("cpu family"),
        num("model")
    )
}

/// A perf pmu-events tree whose table is this machine's CPU's
/// (`DIR/x86/mapfile.csv`, its row first after any of `other_rows`), with
/// `files` (name, JSON) in `DIR/x86/cgperftest/`.
pub fn table_tree(other_rows: &[&str], files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let cpu = dir.path().join("x86/cgperftest");
    std::fs::create_dir_all(&cpu).expect("mkdir");
    let mut mapfile = String::from("Family-model,Version,Filename,EventType\n");
    for row in other_rows {
        mapfile.push_str(row);
        mapfile.push('\n');
    }
    mapfile.push_str(&format!("{},v1,cgperftest,core\n", cpu_id()));
    std::fs::write(dir.path().join("x86/mapfile.csv"), mapfile).expect("mapfile");
    for (name, json) in files {
        std::fs::write(cpu.join(name), json).expect("a table file");
    }
    dir
}

/// This machine as the library sees it, with no event tables: the real
/// cgroup2 root to probe on, the first online CPU, sysfs PMUs and tracefs.
pub fn this_machine() -> cgperf::machine::Machine {
    let fs = cgperf::discovery::CgroupFs::locate().expect("cgroup2 is mounted");
    let cpus = cgperf::cpus::online().expect("online CPUs");
    cgperf::machine::Machine {
        pmu_root: cgperf::events::PMU_ROOT.into(),
        tracefs: cgperf::tracefs::Tracefs::locate(),
        probe_cgroup: fs.root().to_path_buf(),
        probe_cpu: cpus[0],
        cores: Default::default(),
        tables: Default::default(),
        metrics: Default::default(),
    }
}

/// `perf stat -a -x, -e context-switches,sched:sched_switch`, to which the
/// caller adds `-- COMMAND`: over the command's run, the kernel's own count
/// of switches on every CPU and its `sched_switch` tracepoint's hits, whose
/// difference is the switches that tracepoint did not show
/// ([`hidden_switches`]).
pub fn perf_counting_switches() -> Command {
    let mut perf = Command::new("perf");
    perf.args([
        "stat",
        "-a",
        "-x,",
        "-e",
        "context-switches,sched:sched_switch",
    ]);
    perf
}

/// From the CSV (`-x,`) `perf stat` printed, the count of `event`.
pub fn perf_csv_count(csv: &str, event: &str) -> u64 {
    csv.lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            (fields.get(2) == Some(&event)).then(|| fields[0].trim().parse::<u64>().ok())?
        })
        .unwrap_or_else(|| panic!("no {event} in perf's output:\n{csv}"))
}

/// The switches the kernel made without its `sched_switch` tracepoint, from
/// what [`perf_counting_switches`] printed.
pub fn hidden_switches(csv: &str) -> u64 {
    perf_csv_count(csv, "context-switches")
        .saturating_sub(perf_csv_count(csv, "sched:sched_switch"))
}
