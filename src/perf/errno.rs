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
        OpenFailure::Permission => permission_denied(paranoid(), &Held::now()),
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
    paranoid().map_or_else(|| "unknown".to_string(), |level| level.to_string())
}

/// The value of `kernel.perf_event_paranoid` now, if it can be read.
/// Read at each use, not once: an administrator may change it while cgperf
/// runs, and a message must name the level the kernel applied.
pub fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// The level of `kernel.perf_event_paranoid` from which the kernels of
/// Debian and Ubuntu (whose defaults are 3 and 4) refuse `perf_event_open`
/// to every process without `CAP_SYS_ADMIN`: their patch predates
/// `CAP_PERFMON` and was never taught it. Upstream kernels treat any value
/// above 2 as 2; cgperf cannot tell the two apart, so it takes the level at
/// its word.
pub const PARANOID_SYS_ADMIN_ONLY: i32 = 3;

/// Whether `level` of `kernel.perf_event_paranoid` is one at which the
/// kernel may refuse `perf_event_open` without `CAP_SYS_ADMIN`.
pub fn sys_admin_only(level: Option<i32>) -> bool {
    level.is_some_and(|l| l >= PARANOID_SYS_ADMIN_ONLY)
}

/// The sentence saying why `level` asks for `CAP_SYS_ADMIN`: the same
/// words in the start-up log, `cgperf check` and refusals.
pub fn sys_admin_only_why(level: i32) -> String {
    format!(
        "kernel.perf_event_paranoid is {level}: at {PARANOID_SYS_ADMIN_ONLY} and above, the \
         kernels of Debian and Ubuntu refuse perf_event_open to any process without \
         CAP_SYS_ADMIN (CAP_PERFMON is not enough)"
    )
}

/// What the calling thread holds that `perf_event_open` asks for, read
/// when a refusal is explained, so that the explanation fits the process
/// as it is (root or not, before or after its capability drop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The effective user id.
    pub uid: u32,
    /// `CAP_PERFMON` in the effective set.
    pub perfmon: bool,
    /// `CAP_SYS_ADMIN` in the effective set.
    pub sys_admin: bool,
}

impl Held {
    /// The calling thread's (a set that cannot be read counts as empty:
    /// then the message names the capabilities as missing, the safe side).
    pub fn now() -> Self {
        use caps::{CapSet, Capability};
        let effective = caps::read(None, CapSet::Effective).unwrap_or_default();
        Self {
            // SAFETY: geteuid has no preconditions and cannot fail.
            uid: unsafe { libc::geteuid() },
            perfmon: effective.contains(&Capability::CAP_PERFMON),
            sys_admin: effective.contains(&Capability::CAP_SYS_ADMIN),
        }
    }

    /// Who cgperf runs as, for messages: never advice to "run as root"
    /// given to a process that is root.
    fn who(&self) -> String {
        if self.uid == 0 {
            "cgperf runs as root".to_owned()
        } else {
            format!("cgperf runs as uid {}", self.uid)
        }
    }
}

/// Why `perf_event_open` refused for want of privilege (EACCES, EPERM), at
/// `level` of `kernel.perf_event_paranoid`, to a process holding `held`:
/// the rule of the kernel that applies, what cgperf lacks of it, and the
/// fix. Each case names the level and the capability missing, since
/// "permission denied" alone sends people to run as root a process that
/// already is root.
pub fn permission_denied(level: Option<i32>, held: &Held) -> String {
    let shown = level.map_or_else(|| "unknown".to_owned(), |l| l.to_string());
    let who = held.who();
    match level {
        Some(level) if sys_admin_only(Some(level)) && !held.sys_admin => format!(
            "permission denied: {}; {who} without CAP_SYS_ADMIN in effect{}; fix: give cgperf \
             CAP_SYS_ADMIN (the shipped systemd unit and DaemonSet do; cgperf keeps it after \
             start-up only where the level asks for it) and restart it, or set \
             kernel.perf_event_paranoid=2 (a file in /etc/sysctl.d)",
            sys_admin_only_why(level),
            if held.perfmon {
                " (it has CAP_PERFMON, which this level ignores)"
            } else {
                ""
            }
        ),
        _ if !held.perfmon && !held.sys_admin => format!(
            "permission denied: counting per cgroup (CPU-wide) needs CAP_PERFMON or \
             CAP_SYS_ADMIN at kernel.perf_event_paranoid {shown}, and {who} with neither in \
             effect; fix: give cgperf CAP_PERFMON (plus CAP_DAC_READ_SEARCH for tracefs and \
             cgroupfs), as the shipped systemd unit and DaemonSet do{}",
            if held.uid == 0 {
                ""
            } else {
                ", or run it as root"
            }
        ),
        _ => format!(
            "permission denied, though {who} with {} in effect (kernel.perf_event_paranoid is \
             {shown}): something else refuses perf_event_open, such as a seccomp profile, a \
             security module (SELinux, AppArmor) or a user namespace other than the host's \
             (capabilities held there do not count for perf); fix: allow perf_event_open to \
             cgperf",
            match (held.perfmon, held.sys_admin) {
                (true, true) => "CAP_PERFMON and CAP_SYS_ADMIN",
                (true, false) => "CAP_PERFMON",
                _ => "CAP_SYS_ADMIN",
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_name_the_cause() {
        assert!(open_failure_reason(Errno(libc::ENOENT)).contains("no counter"));
        assert!(open_failure_reason(Errno(libc::ENOENT)).ends_with("(ENOENT)"));
        let perm = open_failure_reason(Errno(libc::EACCES));
        assert!(perm.contains("perf_event_paranoid") && perm.ends_with("(EACCES)"));
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

    const ROOT_DROPPED: Held = Held {
        uid: 0,
        perfmon: true,
        sys_admin: false,
    };

    #[test]
    fn a_sys_admin_only_level_is_named_with_what_is_missing() {
        for level in [3, 4] {
            let said = permission_denied(Some(level), &ROOT_DROPPED);
            assert!(
                said.contains(&format!("kernel.perf_event_paranoid is {level}"))
                    && said.contains("without CAP_SYS_ADMIN")
                    && said.contains("CAP_PERFMON is not enough")
                    && said.contains("cgperf runs as root")
                    && said.contains("kernel.perf_event_paranoid=2"),
                "{said}"
            );
            assert!(!said.contains("run it as root"), "{said}");
        }
        // With CAP_SYS_ADMIN, the level is not what refused.
        let admin = Held {
            sys_admin: true,
            ..ROOT_DROPPED
        };
        let said = permission_denied(Some(3), &admin);
        assert!(said.contains("seccomp"), "{said}");
    }

    #[test]
    fn root_without_capabilities_is_not_told_to_run_as_root() {
        let bare_root = Held {
            uid: 0,
            perfmon: false,
            sys_admin: false,
        };
        let said = permission_denied(Some(2), &bare_root);
        assert!(
            said.contains("cgperf runs as root with neither in effect")
                && said.contains("perf_event_paranoid 2")
                && said.contains("CAP_PERFMON"),
            "{said}"
        );
        assert!(!said.contains("run it as root"), "{said}");
        let nobody = Held {
            uid: 65534,
            ..bare_root
        };
        let said = permission_denied(Some(2), &nobody);
        assert!(
            said.contains("cgperf runs as uid 65534") && said.contains("or run it as root"),
            "{said}"
        );
        // At level 2 with CAP_PERFMON, something other than the level refused.
        let said = permission_denied(Some(2), &ROOT_DROPPED);
        assert!(
            said.contains("seccomp") && said.contains("CAP_PERFMON"),
            "{said}"
        );
    }
}
