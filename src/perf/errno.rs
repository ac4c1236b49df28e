//! Translating `perf_event_open` errno values into reasons a person can act on.

use std::fmt;

/// An errno value returned by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The errno left by the last failed libc call on this thread.
    pub fn last() -> Self {
        Self(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl Errno {
    /// Whether the failure is for want of something that comes back
    /// (descriptors, memory, a busy PMU, a signal), so that trying again
    /// later may succeed; any other is the request's own and lasting.
    pub fn passes(self) -> bool {
        matches!(
            self.0,
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOMEM
                | libc::ENOBUFS
                | libc::EAGAIN
                | libc::EINTR
                | libc::EBUSY
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            libc::ENOENT => "ENOENT",
            libc::EOPNOTSUPP => "EOPNOTSUPP",
            libc::ENODEV => "ENODEV",
            libc::EACCES => "EACCES",
            libc::EPERM => "EPERM",
            libc::EINVAL => "EINVAL",
            libc::EMFILE => "EMFILE",
            libc::ENFILE => "ENFILE",
            libc::EBADF => "EBADF",
            libc::ESRCH => "ESRCH",
            libc::ENOSPC => "ENOSPC",
            libc::EBUSY => "EBUSY",
            libc::E2BIG => "E2BIG",
            libc::EINTR => "EINTR",
            libc::EAGAIN => "EAGAIN",
            _ => return write!(f, "errno {}", self.0),
        };
        f.write_str(name)
    }
}

/// Why an event could not be opened, classified for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpenFailure {
    /// The machine has no counter for this event (e.g. no hardware PMU in a VM).
    NotSupported,
    /// The PMU exists but cannot count per cgroup (system-wide PMUs such as `power/`).
    NoCgroupMode,
    /// Missing privileges.
    Permission,
    /// The attributes are invalid for this PMU.
    Invalid,
    /// The process ran out of file descriptors.
    TooManyOpenFiles,
    /// The PMU is busy or the group has more events than the PMU has counters.
    Busy,
    /// The CPU is offline or the cgroup went away.
    Gone,
    /// Anything else.
    Other,
}

impl OpenFailure {
    /// Every failure, so that error counters can be shown at 0 before the
    /// first one (an alert on their rate then sees the first error).
    pub const ALL: [Self; 8] = [
        Self::NotSupported,
        Self::NoCgroupMode,
        Self::Permission,
        Self::Invalid,
        Self::TooManyOpenFiles,
        Self::Busy,
        Self::Gone,
        Self::Other,
    ];

    /// Classifies an errno from `perf_event_open`.
    pub fn from_errno(errno: Errno) -> Self {
        match errno.0 {
            libc::ENOENT => Self::NotSupported,
            libc::EOPNOTSUPP => Self::NoCgroupMode,
            libc::EACCES | libc::EPERM => Self::Permission,
            libc::EINVAL | libc::E2BIG => Self::Invalid,
            libc::EMFILE | libc::ENFILE => Self::TooManyOpenFiles,
            libc::EBUSY | libc::ENOSPC => Self::Busy,
            libc::ENODEV | libc::ESRCH | libc::EBADF => Self::Gone,
            _ => Self::Other,
        }
    }

    /// A short stable token used as the `reason` label of error metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::NotSupported => "not_supported",
            Self::NoCgroupMode => "no_cgroup_mode",
            Self::Permission => "permission",
            Self::Invalid => "invalid",
            Self::TooManyOpenFiles => "too_many_open_files",
            Self::Busy => "busy",
            Self::Gone => "gone",
            Self::Other => "other",
        }
    }
}

/// A sentence explaining why `perf_event_open` failed with `errno`, naming
/// the fix where there is one.
pub fn open_failure_reason(errno: Errno) -> String {
    let what = match OpenFailure::from_errno(errno) {
        OpenFailure::NotSupported => {
            "this machine has no counter for the event (a VM without a hardware PMU, or a PMU \
             that lacks this event)"
                .to_string()
        }
        OpenFailure::NoCgroupMode => {
            "the PMU cannot count per cgroup (system-wide PMUs such as power/ or uncore refuse \
             cgroup mode)"
                .to_string()
        }
        OpenFailure::Permission => format!(
            "permission denied: counting per cgroup needs root or CAP_PERFMON (plus \
             CAP_DAC_READ_SEARCH for cgroupfs); kernel.perf_event_paranoid is {}; fix: run as \
             root, grant the capabilities, or lower the sysctl",
            paranoid_level()
        ),
        OpenFailure::Invalid => {
            "the PMU rejected the event's attributes (wrong config bits or modifiers for this \
             PMU)"
                .to_string()
        }
        OpenFailure::TooManyOpenFiles => {
            "out of file descriptors: raise the open-files limit (ulimit -n / LimitNOFILE) or \
             monitor fewer cgroups"
                .to_string()
        }
        OpenFailure::Busy => {
            "the PMU is busy or the group has more events than the PMU has counters; split the \
             group"
                .to_string()
        }
        OpenFailure::Gone => "the CPU is offline or the cgroup was removed".to_string(),
        OpenFailure::Other => "perf_event_open failed".to_string(),
    };
    format!("{what} ({errno})")
}

/// The value of `kernel.perf_event_paranoid`, or `unknown`.
pub fn paranoid_level() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_name_the_cause() {
        assert!(open_failure_reason(Errno(libc::ENOENT)).contains("no counter"));
        assert!(open_failure_reason(Errno(libc::ENOENT)).ends_with("(ENOENT)"));
        let perm = open_failure_reason(Errno(libc::EACCES));
        assert!(perm.contains("CAP_PERFMON") && perm.contains("perf_event_paranoid"));
        assert!(open_failure_reason(Errno(libc::EOPNOTSUPP)).contains("cgroup mode"));
        assert!(open_failure_reason(Errno(libc::EMFILE)).contains("ulimit"));
        assert_eq!(Errno(12345).to_string(), "errno 12345");
    }

    #[test]
    fn labels_are_distinct() {
        let all = [
            OpenFailure::NotSupported,
            OpenFailure::NoCgroupMode,
            OpenFailure::Permission,
            OpenFailure::Invalid,
            OpenFailure::TooManyOpenFiles,
            OpenFailure::Busy,
            OpenFailure::Gone,
            OpenFailure::Other,
        ];
        let labels: std::collections::HashSet<_> = all.iter().map(|f| f.label()).collect();
        assert_eq!(labels.len(), all.len());
    }
}
