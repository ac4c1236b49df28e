//! Work on the files a user names, under a deadline.
//!
//! [`crate::userfile`] never blocks on a FIFO or a device, but a path on a
//! hung network or FUSE file system blocks `open` (or a read) itself, in the
//! kernel, where no thread can be cancelled. Start-up, `cgperf check` and
//! reloads therefore read the config, the web config and the files they
//! name, and build the plan (which reads tracefs and uprobe binaries), on a
//! worker thread waited for at most [`FILES`]: a file system that does not
//! answer fails them with a message naming the file instead of hanging
//! them. The worker stays blocked until the file system answers, and its
//! result is then dropped.

use crate::config::ConfigError;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// How long reading a config (with the files it names) and building its
/// plan may take. Real ones take milliseconds to a few seconds (probing
/// thousands of tracepoints); longer means a path that does not answer.
pub const FILES: Duration = Duration::from_secs(30);

/// Workers given up on (still blocked) beyond which no new one is started:
/// each is a thread stuck in the kernel, and a file system that hangs one
/// reload would hang the next too.
const MAX_ABANDONED: usize = 4;

/// Workers given up on that have not returned yet.
static ABANDONED: AtomicUsize = AtomicUsize::new(0);

/// Reads `path` (and whatever follows from it) with `work`, given [`FILES`]:
/// work that does not finish is an error about `path`.
pub fn load<T: Send + 'static>(
    path: &Path,
    work: impl FnOnce() -> Result<T, ConfigError> + Send + 'static,
) -> Result<T, ConfigError> {
    with_deadline(FILES, work).unwrap_or_else(|stuck| {
        Err(ConfigError::new(
            &path.display().to_string(),
            format!("cannot read the file: {stuck}"),
        ))
    })
}

/// Why work run with [`with_deadline`] has no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stuck {
    /// It did not finish in time.
    #[error("did not finish within {0:?} (a file on a file system that does not answer?)")]
    TimedOut(Duration),
    /// Earlier work is still stuck: none is started.
    #[error(
        "{0} earlier reads are still waiting for a file system that does not answer; \
         not starting another"
    )]
    TooMany(usize),
    /// No thread could be started for it.
    #[error("cannot start a thread: {0}")]
    NoThread(String),
}

/// How many workers [`with_deadline`] gave up on are still running.
pub fn abandoned() -> usize {
    ABANDONED.load(Ordering::Relaxed)
}

/// Runs `work` on a new thread and waits at most `limit` for its result.
///
/// A thread cannot be cancelled: one that does not finish in time is left
/// to finish on its own (counted in [`abandoned`] until it does) and its
/// result is dropped. While [`MAX_ABANDONED`] are left, no new one starts.
pub fn with_deadline<T: Send + 'static>(
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Stuck> {
    const RUNNING: u8 = 0;
    const DONE: u8 = 1;
    const GIVEN_UP: u8 = 2;
    let left = ABANDONED.load(Ordering::Acquire);
    if left >= MAX_ABANDONED {
        return Err(Stuck::TooMany(left));
    }
    let state = Arc::new(AtomicU8::new(RUNNING));
    let (tx, rx) = mpsc::sync_channel(1);
    let worker_state = state.clone();
    let spawned = std::thread::Builder::new()
        .name("cgperf-file-worker".into())
        .spawn(move || {
            let result = work();
            let _ = tx.send(result);
            // Whoever moves the state first decides: the waiter giving up,
            // or this thread finishing; a thread finishing after it was
            // given up on is no longer left.
            if worker_state
                .compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                ABANDONED.fetch_sub(1, Ordering::AcqRel);
            }
        });
    if let Err(e) = spawned {
        return Err(Stuck::NoThread(e.to_string()));
    }
    match rx.recv_timeout(limit) {
        Ok(result) => Ok(result),
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
            if state
                .compare_exchange(RUNNING, GIVEN_UP, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                ABANDONED.fetch_add(1, Ordering::AcqRel);
                return Err(Stuck::TimedOut(limit));
            }
            // It finished just now: its result is in the channel.
            rx.try_recv().map_err(|_| Stuck::TimedOut(limit))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_that_blocks_is_given_up_on_and_counted_until_it_returns() {
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = crate::userfile::test_fifo(dir.path());
        let before = abandoned();
        // A blocking open of a FIFO waits for a writer: a real hang.
        let reader = fifo.clone();
        let stuck = with_deadline(Duration::from_millis(200), move || {
            std::fs::read(&reader).map(|b| b.len()).ok()
        });
        assert_eq!(stuck, Err(Stuck::TimedOut(Duration::from_millis(200))));
        assert_eq!(abandoned(), before + 1);
        // A writer comes: the worker finishes and is no longer counted.
        std::fs::write(&fifo, b"late").expect("write to the FIFO");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while abandoned() != before {
            assert!(std::time::Instant::now() < deadline, "worker never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(with_deadline(Duration::from_secs(10), || 7), Ok(7));
    }
}
