//! The command `cgperf stat` counts: its own cgroup, starting it inside that
//! cgroup, and waiting for it (or for Ctrl-C) between intervals.

use super::StatError;
use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::Instant;

/// A cgroup made for one run of `cgperf stat`, removed when dropped.
#[derive(Debug)]
pub struct FreshCgroup {
    /// Path relative to the cgroup2 root, e.g. `/cgperf-stat-1234`.
    pub rel: String,
    dir: PathBuf,
}

impl FreshCgroup {
    /// Creates `/cgperf-stat-<pid>` under the cgroup2 root `root`.
    pub fn create(root: &Path) -> Result<Self, StatError> {
        let rel = format!("/cgperf-stat-{}", std::process::id());
        let dir = root.join(rel.trim_start_matches('/'));
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(Self { rel, dir }),
            Err(source) => Err(StatError::CreateCgroup { dir, source }),
        }
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FreshCgroup {
    /// Removes the cgroup; it is empty once the command has been waited for,
    /// unless the command left processes behind, which keep it alive.
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!(
                "cgperf stat: cannot remove cgroup {}: {e}; processes the command left behind \
                 are still in it (see {}/cgroup.procs); remove it with rmdir once they exit",
                self.dir.display(),
                self.dir.display()
            );
        }
    }
}

/// Starts `command`, moving it first into the cgroup whose directory is
/// `cgroup` (if any): the child joins the cgroup between fork and exec, so
/// every instruction of the command is counted there.
pub fn spawn(command: &[OsString], cgroup: Option<&Path>) -> io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(dir) = cgroup {
        let procs = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "cgroup path has a NUL byte"))?;
        // SAFETY: the closure runs in the forked child before exec and only
        // calls open, write and close, which are async-signal-safe; `procs`
        // was allocated before the fork.
        unsafe {
            cmd.pre_exec(move || join_cgroup(&procs));
        }
    }
    cmd.spawn()
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
        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
        (None, None) => 1,
    }
}

/// What ended a wait.
#[derive(Debug)]
pub enum Wake {
    /// The deadline passed.
    Deadline,
    /// The command exited.
    Exited(ExitStatus),
    /// SIGINT or SIGTERM, and there is no command to wait for.
    Interrupted,
}

/// SIGINT, SIGTERM and SIGCHLD, blocked so that they are only ever taken by
/// [`Signals::wait`]: no handler runs, no wake-up is lost between checks.
pub struct Signals {
    set: libc::sigset_t,
}

impl Signals {
    /// Blocks the signals in the calling thread; do this before starting
    /// the command, so that its SIGCHLD cannot come too early. They stay
    /// blocked (a Ctrl-C after the last wait does not kill cgperf before it
    /// prints); the command starts with none blocked (std resets its mask).
    pub fn block() -> io::Result<Self> {
        // SAFETY: sigset_t is plain data, initialized by sigemptyset below.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t; the signal numbers are valid.
        unsafe {
            libc::sigemptyset(&mut set);
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGCHLD] {
                libc::sigaddset(&mut set, signal);
            }
        }
        // SAFETY: `set` is initialized; the old mask is not wanted.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Self { set })
    }

    /// Waits until `deadline` (forever if `None`), `child` exits, or (when
    /// there is no child) SIGINT or SIGTERM arrives. With a child, those two
    /// are ignored: Ctrl-C reaches the command from the terminal, and cgperf
    /// prints when it exits, as `perf stat` does.
    pub fn wait(&self, deadline: Option<Instant>, child: Option<&mut Child>) -> io::Result<Wake> {
        let mut child = child;
        loop {
            if let Some(child) = child.as_deref_mut()
                && let Some(status) = child.try_wait()?
            {
                return Ok(Wake::Exited(status));
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
            // SAFETY: `self.set` is an initialized signal set, the info
            // pointer may be null, and the timeout is null or points to a
            // live timespec.
            let signal =
                unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), timeout_ptr) };
            if signal < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(Wake::Deadline),
                    Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            if (signal == libc::SIGINT || signal == libc::SIGTERM) && child.is_none() {
                return Ok(Wake::Interrupted);
            }
            // SIGCHLD (or an ignored signal): check the child again.
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
