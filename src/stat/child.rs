//! The command `cgperf stat` counts: its own cgroup (named, locked, cleaned
//! up after runs that were killed), starting it inside that cgroup, ending
//! it when cgperf stat is told to stop, and waiting for it (or for a signal)
//! between intervals.

use super::StatError;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// The name of every cgroup `cgperf stat` makes, before `<pid>[-<n>]`.
const PREFIX: &str = "cgperf-stat-";

/// How many names (`<pid>`, `<pid>-2`, ...) a run tries before giving up:
/// only directories someone else made can take them.
const NAMES: u32 = 100;

/// A cgroup made for one run of `cgperf stat`, removed when dropped.
///
/// The run holds an exclusive `flock` on the cgroup's directory for as long
/// as it lives. The kernel drops the lock when the process dies, however it
/// dies (`kill -9` included), so a later run can tell a cgroup whose run is
/// gone from one in use (see [`remove_stale`]).
#[derive(Debug)]
pub struct FreshCgroup {
    /// Path relative to the cgroup2 root, e.g. `/cgperf-stat-1234`.
    pub rel: String,
    dir: PathBuf,
    /// The open directory holding the lock; closed after the cgroup is gone.
    _lock: File,
}

impl FreshCgroup {
    /// Removes what killed runs left behind, then creates
    /// `/cgperf-stat-<pid>` under the cgroup2 root `root`, or, when that
    /// name is taken (a directory someone made, a stale cgroup that still
    /// has processes), `/cgperf-stat-<pid>-2`, `-3`, ...
    pub fn create(root: &Path) -> Result<Self, StatError> {
        for removed in remove_stale(root) {
            tracing::info!(
                cgroup = %removed.display(),
                "removed an empty cgroup left behind by a cgperf stat that is no longer running"
            );
        }
        let pid = std::process::id();
        for n in 1..=NAMES {
            let name = match n {
                1 => format!("{PREFIX}{pid}"),
                n => format!("{PREFIX}{pid}-{n}"),
            };
            let dir = root.join(&name);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(StatError::CreateCgroup { dir, source }),
            }
            match lock(&dir) {
                Ok(Some(lock)) => {
                    let rel = format!("/{name}");
                    return Ok(Self {
                        rel,
                        dir,
                        _lock: lock,
                    });
                }
                // Another run took it for stale between our mkdir and our
                // lock, and removes it: take the next name.
                Ok(None) => continue,
                Err(source) => return Err(StatError::CreateCgroup { dir, source }),
            }
        }
        Err(StatError::CreateCgroup {
            dir: root.join(format!("{PREFIX}{pid}-{NAMES}")),
            source: io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("all {NAMES} names {PREFIX}{pid}[-N] are taken"),
            ),
        })
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends `signal` to every process in the cgroup: the command and
    /// whatever it started that is still there. SIGKILL goes through
    /// `cgroup.kill` where the kernel has it (5.14), which also catches
    /// processes forked meanwhile.
    pub fn signal_all(&self, signal: libc::c_int) -> io::Result<()> {
        if signal == libc::SIGKILL && std::fs::write(self.dir.join("cgroup.kill"), "1").is_ok() {
            return Ok(());
        }
        for pid in procs(&self.dir)? {
            send(pid, signal);
        }
        Ok(())
    }
}

impl Drop for FreshCgroup {
    /// Removes the cgroup; it is empty once the command has been waited for,
    /// unless the command left processes behind, which keep it alive.
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "cgperf stat: cannot remove cgroup {}: {e}; processes the command left behind \
                 are still in it (see {}/cgroup.procs); the next cgperf stat removes it once \
                 they have exited, or remove it with rmdir",
                self.dir.display(),
                self.dir.display()
            );
        }
    }
}

/// Removes the cgroups `/cgperf-stat-<pid>[-<n>]` under `root` that runs of
/// `cgperf stat` which are no longer running left behind (they were killed
/// before they could clean up); returns their directories.
///
/// A run is known to be gone when its lock on the directory can be taken
/// (every run holds one while it lives, and the kernel releases it when the
/// process dies) and no process has the PID in the name (which also
/// protects runs of older versions, which held no lock, and a run between
/// its mkdir and its lock). Only empty cgroups go: `rmdir` removes a cgroup
/// only when it has no processes and no child cgroups, so a cgroup whose
/// command still runs is never touched. Other names are never touched.
pub fn remove_stale(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(stat_cgroup_pid) else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let dir = entry.path();
        // Held until the cgroup is gone, so no other run removes it too.
        if let Ok(Some(_lock)) = lock(&dir)
            && std::fs::remove_dir(&dir).is_ok()
        {
            removed.push(dir);
        }
    }
    removed
}

/// The PID in a name `cgperf-stat-<pid>` or `cgperf-stat-<pid>-<n>`; `None`
/// for any other name.
fn stat_cgroup_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, n) = match rest.split_once('-') {
        Some((pid, n)) => (pid, Some(n)),
        None => (rest, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !n.is_none_or(digits) {
        return None;
    }
    pid.parse().ok()
}

/// Takes the exclusive lock on directory `dir` without waiting: `Ok(None)`
/// when another process holds it, or when `dir` was removed (and perhaps
/// made again) meanwhile, so that the lock is not on `dir` any more.
fn lock(dir: &Path) -> io::Result<Option<File>> {
    let file = match File::open(dir) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ => Err(e),
        };
    }
    let still_there = match std::fs::metadata(dir) {
        Ok(now) => now.ino() == file.metadata()?.ino(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    Ok(still_there.then_some(file))
}

/// The PIDs in a cgroup's `cgroup.procs`.
fn procs(dir: &Path) -> io::Result<Vec<libc::pid_t>> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs"))?;
    Ok(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
}

/// Sends `signal` to `pid`; one that has exited meanwhile is no error.
fn send(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, signal) };
}

/// Sends `signal` to the command (and nothing it started): for `-G` and
/// `-a`, where the cgroups are not the command's own.
pub fn signal_command(child: &Child, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        send(pid, signal);
    }
}

/// Starts `command`, moving it first into the cgroup whose directory is
/// `cgroup` (if any): the child joins the cgroup between fork and exec, so
/// every instruction of the command is counted there.
///
/// The command gets SIGKILL when cgperf stat dies (`PR_SET_PDEATHSIG`), so
/// that `kill -9` of cgperf stat does not leave it running, uncounted, in a
/// cgroup nobody removes. The kernel sends it when the thread that started
/// the command exits: this must be called on the main thread, which lives
/// as long as the process. It reaches the command only, not what the command
/// started, and a set-user-ID command loses it at exec.
///
/// Returns the command and when it was about to exec, in its cgroup: the
/// start of its own time elapsed (the move into a cgroup can take tens of
/// milliseconds, and spawn may return well after the exec).
pub fn spawn(command: &[OsString], cgroup: Option<&Path>) -> io::Result<(Child, Instant)> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    let procs = cgroup
        .map(|dir| {
            CString::new(
                dir.join("cgroup.procs")
                    .into_os_string()
                    .into_encoded_bytes(),
            )
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cgroup path has a NUL byte"))
        })
        .transpose()?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let stamp = SharedStamp::new()?;
    // An address, not a pointer: the closure must be Send and Sync.
    let stamp_at = stamp.0 as usize;
    // SAFETY: the closure runs in the forked child before exec and only
    // calls open, write, close, prctl, getppid, sigemptyset,
    // pthread_sigmask and clock_gettime, which are async-signal-safe;
    // `procs` was allocated and `stamp_at` mapped before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Joining comes last: what the child does after it is counted,
            // and the command is to be counted exactly (clock_gettime makes
            // no system call).
            die_with_parent(parent)?;
            unblock_signals()?;
            if let Some(procs) = &procs {
                join_cgroup(procs)?;
            }
            libc::clock_gettime(libc::CLOCK_MONOTONIC, stamp_at as *mut libc::timespec);
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let started = stamp.instant().unwrap_or_else(Instant::now);
    Ok((child, started))
}

/// A `timespec` in memory shared with a child across fork, for the child
/// to stamp the time into without a system call.
struct SharedStamp(*mut libc::timespec);

impl SharedStamp {
    /// Maps a zeroed shared page.
    fn new() -> io::Result<Self> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                std::mem::size_of::<libc::timespec>(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(at.cast()))
    }

    /// The stamped time as an [`Instant`] (both are CLOCK_MONOTONIC);
    /// `None` if the child wrote none.
    fn instant(&self) -> Option<Instant> {
        // SAFETY: the page is mapped until drop; the child has exec'd (or
        // failed), so nobody writes it any more.
        let stamped = unsafe { std::ptr::read_volatile(self.0) };
        if stamped.tv_sec == 0 && stamped.tv_nsec == 0 {
            return None;
        }
        // SAFETY: timespec is plain data, filled in by clock_gettime.
        let mut now_ts: libc::timespec = unsafe { std::mem::zeroed() };
        let now = Instant::now();
        // SAFETY: writes the current time into a live local.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now_ts) };
        let nanos =
            |t: libc::timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
        let ago = u64::try_from(nanos(now_ts) - nanos(stamped)).ok()?;
        now.checked_sub(Duration::from_nanos(ago))
    }
}

impl Drop for SharedStamp {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `new`, once.
        unsafe { libc::munmap(self.0.cast(), std::mem::size_of::<libc::timespec>()) };
    }
}

/// Asks the kernel to SIGKILL the calling process when its parent `parent`
/// dies; fails if it has died already (the request would come too late).
/// Only async-signal-safe calls.
fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and has no pointers.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "cgperf stat ended before the command started",
        ));
    }
    Ok(())
}

/// Unblocks every signal: the command must not inherit the mask of
/// [`Signals`] (std passes the mask on), or Ctrl-C, SIGTERM and SIGHUP
/// would stay pending in it instead of ending it. Only async-signal-safe
/// calls.
fn unblock_signals() -> io::Result<()> {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset.
    let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `none` is a valid set; the old mask is not wanted.
    let rc = unsafe {
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut())
    };
    match rc {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`
/// (writing "0" means "the writer"). Only async-signal-safe calls.
fn join_cgroup(procs: &CString) -> io::Result<()> {
    // SAFETY: `procs` is a valid NUL-terminated path.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: writes one byte from a static buffer to the fd opened above.
    let written = unsafe { libc::write(fd, c"0".as_ptr().cast(), 1) };
    let result = if written == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: closes the fd opened above, once.
    unsafe { libc::close(fd) };
    result
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => signal_status(signal),
        (None, None) => 1,
    }
}

/// 128 + `signal`, the status of a process that `signal` ended.
pub fn signal_status(signal: libc::c_int) -> u8 {
    u8::try_from((128 + signal) & 0xff).unwrap_or(1)
}

/// Ends the process with `signal` (its default action), as a process that
/// `signal` ended should, so that a calling shell sees that (a script stops
/// on Ctrl-C); returns only if the signal did not end it.
pub fn die_of(signal: libc::c_int) {
    // SAFETY: sets the default action of a valid signal, unblocks it and
    // sends it to this process; no pointers besides the initialized set.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// Its status.
    pub status: ExitStatus,
    /// When it was reaped.
    pub at: Instant,
    /// CPU time it (and the children it waited for) spent in user mode.
    pub user: Duration,
    /// CPU time it (and the children it waited for) spent in the kernel.
    pub sys: Duration,
}

/// Reaps `child` if it has exited, with its CPU times (`wait4`).
fn reap(child: &Child) -> io::Result<Option<Ended>> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "PID out of range"))?;
    let mut status = 0;
    // SAFETY: rusage is plain data, filled in by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers point to live locals.
        let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if rc == 0 {
            return Ok(None);
        }
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        let time = |t: libc::timeval| {
            let secs = u64::try_from(t.tv_sec).unwrap_or(0);
            let micros = u32::try_from(t.tv_usec).unwrap_or(0).min(999_999);
            Duration::new(secs, micros * 1000)
        };
        return Ok(Some(Ended {
            status: ExitStatus::from_raw(status),
            at: Instant::now(),
            user: time(usage.ru_utime),
            sys: time(usage.ru_stime),
        }));
    }
}

/// What ended a wait.
#[derive(Debug)]
pub enum Wake {
    /// The deadline passed.
    Deadline,
    /// The command exited.
    Exited(Ended),
    /// SIGINT, SIGTERM or SIGHUP arrived.
    Stop {
        /// Which.
        signal: libc::c_int,
        /// A SIGINT the kernel sent, not a process: Ctrl-C, which the
        /// terminal sends to the whole foreground process group, the
        /// command included.
        from_terminal: bool,
    },
}

/// The signals that end `cgperf stat`.
const STOP: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// SIGINT, SIGTERM, SIGHUP and SIGCHLD, blocked so that they are only ever
/// taken by [`Signals::wait`]: no handler runs, no wake-up is lost between
/// checks.
pub struct Signals {
    set: libc::sigset_t,
}

impl Signals {
    /// Blocks the signals in the calling thread; do this before starting
    /// the command, so that its SIGCHLD cannot come too early, and before
    /// anything needs cleaning up. They stay blocked (a Ctrl-C after the
    /// last wait does not kill cgperf before it prints); the command starts
    /// with none blocked ([`spawn`] unblocks them).
    ///
    /// A stop signal that is ignored when cgperf stat starts (`nohup`, a
    /// background job of a script) stays ignored, for cgperf and the
    /// command alike.
    pub fn block() -> io::Result<Self> {
        // SAFETY: sigset_t is plain data, initialized by sigemptyset below.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGCHLD);
        }
        for signal in STOP {
            if !ignored(signal)? {
                // SAFETY: as above.
                unsafe { libc::sigaddset(&mut set, signal) };
            }
        }
        // SAFETY: `set` is initialized; the old mask is not wanted.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Self { set })
    }

    /// Waits until `deadline` (forever if `None`), `child` exits (it is then
    /// reaped), or a stop signal arrives.
    pub fn wait(&self, deadline: Option<Instant>, child: Option<&Child>) -> io::Result<Wake> {
        loop {
            if let Some(child) = child
                && let Some(ended) = reap(child)?
            {
                return Ok(Wake::Exited(ended));
            }
            let timeout = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Wake::Deadline);
                    }
                    Some(libc::timespec {
                        tv_sec: left.as_secs().try_into().unwrap_or(libc::time_t::MAX),
                        tv_nsec: left.subsec_nanos().into(),
                    })
                }
                None => None,
            };
            let timeout_ptr = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const _);
            // SAFETY: siginfo_t is plain data, filled in by sigtimedwait.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `self.set` is an initialized signal set, `info` a live
            // siginfo_t, and the timeout is null or points to a live timespec.
            let signal = unsafe { libc::sigtimedwait(&self.set, &mut info, timeout_ptr) };
            if signal < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(Wake::Deadline),
                    Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            if STOP.contains(&signal) {
                // Only Ctrl-C: on a hangup the kernel signals the session
                // leader alone, which may be cgperf, so SIGHUP is passed on
                // whoever sent it (a second one does no harm).
                let from_terminal = signal == libc::SIGINT && info.si_code == libc::SI_KERNEL;
                return Ok(Wake::Stop {
                    signal,
                    from_terminal,
                });
            }
            // SIGCHLD: check the child again.
        }
    }
}

/// Whether `signal`'s action is to be ignored.
fn ignored(signal: libc::c_int) -> io::Result<bool> {
    // SAFETY: sigaction is plain data, filled in by the call.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: queries (a null new action) the action of a valid signal.
    if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(old.sa_sigaction == libc::SIG_IGN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(signal_status(libc::SIGHUP), 129);
    }

    #[test]
    fn only_our_names_are_stale_candidates() {
        assert_eq!(stat_cgroup_pid("cgperf-stat-1234"), Some(1234));
        assert_eq!(stat_cgroup_pid("cgperf-stat-1234-2"), Some(1234));
        for other in [
            "cgperf-stat-",
            "cgperf-stat-g-1234",
            "cgperf-stat-1234-",
            "cgperf-stat-1234-2-3",
            "cgperf-stat-12a",
            "cgperf-stat-99999999999999999999",
            "system.slice",
            "xcgperf-stat-1",
        ] {
            assert_eq!(stat_cgroup_pid(other), None, "{other}");
        }
    }
}
