//! The file-descriptor budget: perf needs one descriptor per event, per CPU,
//! per cgroup, so a busy host can exhaust `RLIMIT_NOFILE`. cgperf raises the
//! soft limit to the hard limit at start and never opens a cgroup whose
//! descriptors would not fit, rather than failing half-way at `EMFILE`.

use crate::perf::CounterGroup;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Descriptors kept free for everything that is not a perf event: the HTTP
/// listener and its connections, config and cgroupfs reads, inotify, logs.
const RESERVE: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft
/// limit in force afterwards.
pub fn raise_nofile_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        } else {
            tracing::warn!(
                "could not raise the open-files limit from {} to {}: {}",
                limit.rlim_cur,
                limit.rlim_max,
                std::io::Error::last_os_error()
            );
        }
    }
    limit.rlim_cur
}

/// How many perf descriptors cgperf may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdBudget {
    /// Most perf descriptors at once.
    pub max_perf_fds: u64,
}

impl FdBudget {
    /// The budget under a soft open-files limit of `nofile`.
    pub fn from_limit(nofile: u64) -> Self {
        Self {
            max_perf_fds: nofile.saturating_sub(RESERVE),
        }
    }

    /// Whether `more` descriptors fit next to the `used` ones.
    pub fn fits(&self, used: u64, more: u64) -> bool {
        used.saturating_add(more) <= self.max_perf_fds
    }
}

/// Where perf descriptors are counted and how many may be open: what an
/// owner of descriptors beside the targets (energy's system-wide counters
/// and meter) opens against, so that `cgperf_open_fds` and the budget
/// count every descriptor of the process.
#[derive(Debug, Clone)]
pub struct Fds {
    /// Every perf descriptor of the process.
    pub tally: Arc<AtomicU64>,
    /// How many of them cgperf may hold.
    pub budget: FdBudget,
}

impl Fds {
    /// A tally of its own and no budget: for descriptors opened only to be
    /// looked at and closed (`cgperf check`).
    pub fn unbounded() -> Self {
        Self {
            tally: Arc::default(),
            budget: FdBudget {
                max_perf_fds: u64::MAX,
            },
        }
    }

    /// Whether `more` descriptors fit next to those open.
    pub fn fit(&self, more: u64) -> bool {
        self.budget.fits(self.tally.load(Ordering::Relaxed), more)
    }

    /// `group`, its descriptors counted for as long as it lives.
    pub fn hold(&self, group: CounterGroup) -> Held {
        Held::new(group, &self.tally)
    }
}

/// Keeps the count of open perf descriptors honest: adds `n` to the tally
/// when created and takes it away when dropped, whatever path drops the
/// owner of the descriptors.
#[derive(Debug)]
pub struct Tally {
    n: u64,
    tally: Arc<AtomicU64>,
}

impl Tally {
    /// Counts `n` descriptors in `tally` for as long as this lives.
    pub fn new(tally: &Arc<AtomicU64>, n: u64) -> Self {
        tally.fetch_add(n, Ordering::Relaxed);
        Self {
            n,
            tally: tally.clone(),
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.tally.fetch_sub(self.n, Ordering::Relaxed);
    }
}

/// An open group whose descriptors are counted in a tally while it lives.
#[derive(Debug)]
pub struct Held {
    /// The group.
    pub group: CounterGroup,
    _fds: Tally,
}

impl Held {
    /// Counts `group`'s descriptors in `tally` for as long as it lives.
    pub fn new(group: CounterGroup, tally: &Arc<AtomicU64>) -> Self {
        let fds = Tally::new(tally, group.fd_count() as u64);
        Self { group, _fds: fds }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_reserve() {
        let b = FdBudget::from_limit(1024);
        assert_eq!(b.max_perf_fds, 768);
        assert!(b.fits(700, 68));
        assert!(!b.fits(700, 69));
        assert_eq!(FdBudget::from_limit(10).max_perf_fds, 0);
    }

    #[test]
    fn raising_reaches_the_hard_limit() {
        let soft = raise_nofile_limit();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(soft, limit.rlim_cur);
        assert_eq!(limit.rlim_cur, limit.rlim_max);
    }
}
