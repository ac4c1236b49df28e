//! Asking the kernel, through the mechanism that will count, whether this
//! machine can count something: the only question planning cannot answer
//! from sysfs and tracefs. Backends implement [`Probe`]; planning and
//! `cgperf check` / `cgperf list` ask it.

use crate::events::EventAttr;
use crate::perf::{Errno, OpenFailure};
use crate::snapshot::NotCountable;
use std::ffi::CStr;

/// One event of a group to try: what the kernel is given, and the label a
/// refusal names it by.
#[derive(Debug, Clone, Copy)]
pub struct Trial<'a> {
    /// The `event` label, for the reason of a refusal.
    pub label: &'a str,
    /// What to pass to the kernel.
    pub attr: EventAttr,
    /// A tracepoint filter, set before the event would be enabled.
    pub filter: Option<&'a CStr>,
}

/// Asks the kernel, through the mechanism that will count, whether this
/// machine can count something.
///
/// Planning resolves names against sysfs and tracefs without asking the
/// kernel anything; whatever only the kernel can judge (a PMU that is not
/// there, a counter it refuses in this mode, a filter it does not parse,
/// missing privileges) is asked here, so that a backend answers for what it
/// will open and planning can be tested without root.
pub trait Probe: Send + Sync + std::fmt::Debug {
    /// Opens `group` (leader first, each event with its filter) once, the
    /// way this mechanism would count it, and closes it again: `Ok` when
    /// the kernel accepts all of it, else which event it refused and why.
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal>;

    /// The most counters this mechanism holds per CPU for all groups
    /// together, if it has such a bound: groups past it are planned as
    /// not countable, with the reason, rather than left uncounted behind
    /// a verdict that says they are.
    fn counters_per_cpu(&self) -> Option<usize> {
        None
    }
}

/// Why the kernel would not count an event, or a group of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why, for people, naming the event refused.
    pub reason: String,
    /// The `reason` label: the kernel's refusal, or why it was not asked.
    pub token: &'static str,
    /// The kernel refused for want of privileges (EACCES, EPERM): it did
    /// not say whether the machine could count the event.
    pub permission: bool,
    /// The event the kernel refused, by its index in the group, and the
    /// errno it gave; `None` when the mechanism could not ask the kernel
    /// about any event (e.g. its probe cgroup could not be opened).
    pub refused: Option<(usize, Errno)>,
}

impl Refusal {
    /// The kernel refused event `index` of `group` with `errno`.
    pub fn kernel(group: &[Trial<'_>], index: usize, errno: Errno) -> Self {
        let event = group.get(index).map_or("?", |t| t.label);
        Self {
            reason: format!(
                "event `{event}`: {}",
                crate::perf::open_failure_reason(errno)
            ),
            token: OpenFailure::from_errno(errno).label(),
            permission: matches!(errno.0, libc::EACCES | libc::EPERM),
            refused: Some((index, errno)),
        }
    }

    /// The kernel was not asked, for `reason` (`token` says which kind):
    /// the event did not resolve, or the mechanism could not open what it
    /// probes on.
    pub fn not_asked(token: &'static str, reason: String) -> Self {
        Self {
            reason,
            token,
            permission: false,
            refused: None,
        }
    }
}

impl From<Refusal> for NotCountable {
    fn from(refusal: Refusal) -> Self {
        Self::new(refusal.token, refusal.reason)
    }
}
