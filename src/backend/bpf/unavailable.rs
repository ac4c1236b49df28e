//! Why cgperf cannot count through BPF here, and how to get it: the
//! error every step of loading the program ([`super::kernel`]) and asking
//! whether it loads ([`super::available`]) gives.

/// Why cgperf cannot count through BPF here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot count through BPF: {missing}; {fix}")]
pub struct Unavailable {
    /// What is missing, with the kernel's answer.
    pub missing: String,
    /// How to get it.
    pub fix: String,
}

/// What grants the privileges, said wherever they are missing.
const GRANT: &str = "CAP_BPF and CAP_PERFMON (systemd: AmbientCapabilities=CAP_BPF \
                     CAP_PERFMON; Kubernetes: securityContext.capabilities.add [BPF, PERFMON])";

/// The fix for a refusal for want of privilege, fitting the process as it
/// is: root is not told to run as root, and where the paranoid level asks
/// for `CAP_SYS_ADMIN` (Debian's and Ubuntu's kernels), that is said.
fn grant() -> String {
    let held = crate::perf::Held::now();
    let level = crate::perf::paranoid();
    let base = if held.uid == 0 {
        format!("give cgperf {GRANT}")
    } else {
        format!("run cgperf as root or with {GRANT}")
    };
    match level {
        Some(level) if crate::perf::sys_admin_only(Some(level)) && !held.sys_admin => format!(
            "{base}; and {}: give it CAP_SYS_ADMIN too, or set kernel.perf_event_paranoid=2",
            crate::perf::sys_admin_only_why(level)
        ),
        _ => base,
    }
}

impl Unavailable {
    /// Sorts a failed step by the errno the kernel gave.
    pub(super) fn from_kernel((what, errno): (String, Option<i32>)) -> Self {
        let (missing, fix) = match errno {
            Some(libc::EPERM | libc::EACCES) => (format!("permission ({what})"), grant()),
            Some(libc::ENOSYS) => (
                format!("the bpf() system call ({what})"),
                "use a kernel built with CONFIG_BPF_SYSCALL (or the cgroup backend)".into(),
            ),
            Some(libc::EINVAL | libc::ENOENT | libc::E2BIG | libc::EOPNOTSUPP) => (
                format!("kernel support ({what})"),
                "the program needs Linux 5.17 or later (bpf_loop, test runs on a chosen CPU, \
                 raw and typed tracepoints) built with BTF (CONFIG_DEBUG_INFO_BTF: \
                 /sys/kernel/btf/vmlinux); use the cgroup backend elsewhere"
                    .into(),
            ),
            _ => (what, "see the kernel's answer above".into()),
        };
        Self { missing, fix }
    }

    /// cgperf's own object is not what the loader expects.
    pub(super) fn broken(what: &str) -> Self {
        Self {
            missing: format!("a usable BPF object ({what})"),
            fix: "this build of cgperf is broken: rebuild it from a clean checkout".into(),
        }
    }
}
