//! `kernel.perf_event_paranoid` for tests that change it, and for those
//! whose outcome depends on it.
//!
//! The sysctl is the whole machine's: every test process on it (this
//! suite's binaries, run one after another, and whatever else runs tests
//! beside them) reads the same value. A test that changes it holds
//! [`LOCK`] exclusively for as long as the value differs and puts the old
//! value back when it is done, panics included; a test whose assertions
//! hold only at the machine's own value holds it shared. An `flock` is
//! released by the kernel when its holder dies, so a killed test never
//! leaves it held (though it may leave the sysctl changed: the guard's
//! drop is what restores it).

use std::io::Write;
use std::os::fd::AsRawFd;

/// The lock file, the same for every checkout on the machine.
pub const LOCK: &str = "/run/cgperf-tests-sysctl.lock";

/// The sysctl.
const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

/// Its value now.
pub fn paranoid() -> i32 {
    std::fs::read_to_string(PARANOID)
        .expect("kernel.perf_event_paranoid")
        .trim()
        .parse()
        .expect("kernel.perf_event_paranoid is a number")
}

/// The lock, held (shared or exclusive) until dropped.
pub struct Held {
    file: std::fs::File,
}

fn lock(operation: libc::c_int) -> Held {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(LOCK)
        .unwrap_or_else(|e| panic!("{LOCK}: {e}"));
    loop {
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Held { file };
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::Interrupted,
            "flock {LOCK}: {e}"
        );
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: as above; closing the file would release it as well.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Holds the sysctl at the machine's own value (no test changes it) until
/// dropped.
pub fn unchanged() -> Held {
    lock(libc::LOCK_SH)
}

/// `kernel.perf_event_paranoid` set to a value for a test; the old value
/// is written back, and the lock released, when this is dropped.
pub struct Paranoid {
    before: String,
    // Dropped after the value is restored (fields drop after `drop`).
    _lock: Held,
}

impl Paranoid {
    /// Sets the sysctl to `level`, waiting for every test that holds it
    /// (shared or exclusive) to finish first.
    pub fn set(level: i32) -> Self {
        let lock = lock(libc::LOCK_EX);
        let before = std::fs::read_to_string(PARANOID).expect("kernel.perf_event_paranoid");
        let set = Self {
            before,
            _lock: lock,
        };
        // On a failure here, `set` is dropped: the old value is written back.
        write(&level.to_string()).unwrap_or_else(|e| panic!("writing {level} to {PARANOID}: {e}"));
        assert_eq!(paranoid(), level, "the kernel took {PARANOID} = {level}");
        set
    }
}

fn write(value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(PARANOID)
        .and_then(|mut f| f.write_all(value.as_bytes()))
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let before = self.before.trim();
        // Never a panic here (it may run while unwinding): say it instead.
        if let Err(e) = write(before) {
            eprintln!("NOTE: could not restore {PARANOID} to {before}: {e}; restore it by hand");
        }
    }
}
