//! Why something is not counted, or failed: a group or tracepoint this
//! machine cannot count, an open or a read that failed, a cgroup skipped.
//! Each reason is a stable token for a label and a sentence for people.

use crate::ids::GroupId;
use crate::perf::OpenFailure;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Whether a group (or a single tracepoint) can be counted on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// The group (its `group` label only where it is shown).
    pub group: GroupId,
    /// `Some(event)` for a per-event verdict (tracepoints), `None` for the group.
    pub event: Option<Arc<str>>,
    /// `Ok` or why it cannot be counted.
    pub status: Result<(), NotCountable>,
}

/// Why a group or an event cannot be counted on this machine: a stable
/// token for the `reason` label of `cgperf_group_supported` (alerts and
/// dashboards select on it) and the sentence for people (log, `check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotCountable {
    /// The token: a kernel refusal's [`OpenFailure::label`], or one of the
    /// `NotCountable::*` reasons found before the kernel was asked.
    pub token: &'static str,
    /// What happened and the fix, naming the event.
    pub reason: String,
}

impl NotCountable {
    /// An event that does not resolve on this machine (no such PMU or
    /// event in sysfs, a probe's binary or symbol missing).
    pub const UNKNOWN_EVENT: &'static str = "unknown_event";
    /// A tracepoint this kernel does not have.
    pub const UNKNOWN_TRACEPOINT: &'static str = "unknown_tracepoint";
    /// tracefs is not mounted or not readable.
    pub const NO_TRACEFS: &'static str = "no_tracefs";
    /// The counting backend holds no more counters per CPU.
    pub const COUNTER_BUDGET: &'static str = "counter_budget";
    /// The backend could not ask the kernel (its probe cgroup would not
    /// open).
    pub const NOT_PROBED: &'static str = "not_probed";
    /// A group whose events no CPU counts together: on a hybrid CPU, events
    /// of two core types' PMUs (`cpu_core/.../` and `cpu_atom/.../`).
    pub const MIXED_CORE_TYPES: &'static str = "mixed_core_types";
    /// A group of `host:` whose events' PMUs count on different CPUs (one
    /// per socket for one, one per die for the other).
    pub const MIXED_SCOPES: &'static str = "mixed_scopes";
    /// A group with an event that only the whole machine can count (its
    /// PMU has a `cpumask`), asked for per cgroup: it belongs in `host:`.
    pub const HOST_ONLY: &'static str = "host_only";

    /// A reason with `token`.
    pub fn new(token: &'static str, reason: impl Into<String>) -> Self {
        Self {
            token,
            reason: reason.into(),
        }
    }
}

/// When this config can count nothing at all on this machine (every group
/// refused), why, with the fix: what `cgperf check` ends with (and exits
/// 3), what `/-/ready` answers 503 with and what the daemon logs once.
/// `None` when some group counts, or the config names none. `support` is
/// every verdict: the cgroups' groups and the host's.
pub fn nothing_countable<'a>(support: impl Iterator<Item = &'a Support>) -> Option<String> {
    let mut groups = support.filter(|s| s.event.is_none()).peekable();
    groups.peek()?;
    let mut first = None;
    for s in groups {
        match &s.status {
            Ok(()) => return None,
            Err(why) => {
                first.get_or_insert((s, why));
            }
        }
    }
    let (s, why) = first?;
    let hint = match why.token {
        // The kernel's refusal already names the privileges and the sysctl.
        t if t == OpenFailure::Permission.label() => "; where cgperf has these privileges, \
             a seccomp profile blocks perf_event_open or bpf: allow both"
            .to_owned(),
        t if t == OpenFailure::NotSupported.label() => "; fix: count software events or \
             tracepoints too (see `cgperf list`)"
            .to_owned(),
        NotCountable::NO_TRACEFS => "; fix: mount tracefs (`mount -t tracefs nodev \
             /sys/kernel/tracing`) and let cgperf read it (root or CAP_DAC_READ_SEARCH)"
            .to_owned(),
        _ => "; `cgperf check` gives each group's reason".to_owned(),
    };
    Some(format!(
        "nothing can be counted: every group is refused ({}), e.g. group `{}`: {why}{hint}",
        why.token, s.group
    ))
}

impl std::fmt::Display for NotCountable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// What failed: opening an event, or reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// `perf_event_open` and what a new event needs (its cgroup's
    /// directory, a ring).
    Open,
    /// Reading counts, the online CPUs or the cgroup hierarchy.
    Read,
}

impl Operation {
    /// Which of `cgperf_open_errors_total` and `cgperf_read_errors_total`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Read => "read",
        }
    }
}

/// Why an open or a read failed: the `reason` label of the error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorReason {
    /// The kernel refused.
    Kernel(OpenFailure),
    /// A group read that did not parse.
    Format,
    /// The list of online CPUs could not be read.
    CpuList,
    /// The cgroup hierarchy could not be listed.
    CgroupList,
    /// `/proc` could not be listed (for `processes:`).
    ProcessList,
}

impl ErrorReason {
    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Kernel(failure) => failure.label(),
            Self::Format => "format",
            Self::CpuList => "cpu_list",
            Self::CgroupList => "cgroup_list",
            Self::ProcessList => "process_list",
        }
    }
}

/// Open and read failures so far. Starts with every reason an open or a
/// read can have at 0: Prometheus' `rate()` and `increase()` only see the
/// first error of a series that existed before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Errors(BTreeMap<(Operation, ErrorReason), u64>);

impl Default for Errors {
    fn default() -> Self {
        let kernel = OpenFailure::ALL.map(ErrorReason::Kernel);
        let opens = kernel.map(|r| (Operation::Open, r));
        let reads = kernel.map(|r| (Operation::Read, r));
        let more = [
            ErrorReason::Format,
            ErrorReason::CpuList,
            ErrorReason::CgroupList,
            ErrorReason::ProcessList,
        ]
        .map(|r| (Operation::Read, r));
        Self(
            opens
                .into_iter()
                .chain(reads)
                .chain(more)
                .map(|k| (k, 0))
                .collect(),
        )
    }
}

impl Errors {
    /// Counts one failure.
    pub fn count(&mut self, op: Operation, reason: ErrorReason) {
        *self.0.entry((op, reason)).or_default() += 1;
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Errors) {
        for (key, n) in &other.0 {
            *self.0.entry(*key).or_default() += n;
        }
    }

    /// The count of every reason of `op`.
    pub fn of(&self, op: Operation) -> impl Iterator<Item = (ErrorReason, u64)> + '_ {
        self.0
            .iter()
            .filter(move |((o, _), _)| *o == op)
            .map(|((_, reason), n)| (*reason, *n))
    }
}

/// Why a cgroup that a selector chose is not counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// More cgroups match than `max_cgroups` allows.
    MaxCgroups,
    /// Its descriptors would not fit in the open-files limit.
    FdBudget,
    /// Its directory's path is longer than the kernel takes (`PATH_MAX`).
    PathTooLong,
}

impl SkipReason {
    /// Every reason, so that each is shown at 0 before the first skip.
    pub const ALL: [Self; 3] = [Self::MaxCgroups, Self::FdBudget, Self::PathTooLong];

    /// The `reason` label of `cgperf_cgroups_skipped`.
    pub fn label(self) -> &'static str {
        match self {
            Self::MaxCgroups => "max_cgroups",
            Self::FdBudget => "fd_budget",
            Self::PathTooLong => "path_too_long",
        }
    }

    /// What it means, for the log.
    pub fn explain(self) -> &'static str {
        match self {
            Self::MaxCgroups => "more cgroups match than `max_cgroups` allows",
            Self::FdBudget => {
                "their perf descriptors would exceed the open-files limit (raise LimitNOFILE / \
                 ulimit -n)"
            }
            Self::PathTooLong => {
                "their directory's path is longer than PATH_MAX (4096 bytes), so it cannot be \
                 opened, nor what is below it listed; their work is counted in their counted \
                 ancestors"
            }
        }
    }
}
