//! What opening a perf event for a cgroup on a CPU came to, for every
//! mechanism that opens one (counter groups, `by:` rings): failures
//! counted, logged once, and sorted into those that pass and those that do
//! not.

use crate::perf::{Errno, OpenFailure, open_failure_reason};
use crate::snapshot::{ErrorReason, Errors, Operation};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// The budget ran out: the cgroup being opened must be given up.
#[derive(Debug)]
pub(super) struct OutOfFds;

/// Why a group or `by:` tracepoint was not opened on a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotOpened {
    /// Descriptors ran out: the budget's or the process's.
    OutOfFds,
    /// Another failure that passes (memory, a busy PMU, a signal).
    ForNow,
    /// A lasting failure: no such event, no permission, the CPU or the
    /// cgroup gone. Counted and logged; trying again would fail the same.
    ForGood,
    /// The group's events do not count on this CPU (a hybrid CPU's other
    /// core type): not a failure, nothing to try again.
    NotHere,
}

/// The opened `T`, or `None`; then `cpu` joins `unopened`, the CPUs to try
/// again on, if the failure passes (running out of descriptors included).
/// An open that succeeds leaves it.
pub(super) fn or_later<T>(
    opened: Result<T, NotOpened>,
    unopened: &mut BTreeSet<u32>,
    cpu: u32,
) -> Option<T> {
    match opened {
        Ok(opened) => {
            unopened.remove(&cpu);
            Some(opened)
        }
        Err(NotOpened::ForGood | NotOpened::NotHere) => {
            unopened.remove(&cpu);
            None
        }
        Err(NotOpened::OutOfFds | NotOpened::ForNow) => {
            unopened.insert(cpu);
            None
        }
    }
}

/// As [`or_later`], except that running out of descriptors gives up the
/// cgroup being reconciled (`Err`).
pub(super) fn or_give_up<T>(
    opened: Result<T, NotOpened>,
    unopened: &mut BTreeSet<u32>,
    cpu: u32,
) -> Result<Option<T>, OutOfFds> {
    if matches!(opened, Err(NotOpened::OutOfFds)) {
        return Err(OutOfFds);
    }
    Ok(or_later(opened, unopened, cpu))
}

/// The open failures of one mechanism: counted for self-metrics, logged
/// once per group (or entry) and reason.
#[derive(Debug, Default)]
pub(super) struct Failures {
    pub errors: Errors,
    logged: HashSet<(Arc<str>, OpenFailure)>,
}

impl Failures {
    /// Counts and logs a failed open of `name` for `cgroup` on `cpu`, and
    /// says whether it passes.
    pub fn failed(&mut self, name: &Arc<str>, cgroup: &str, cpu: u32, errno: Errno) -> NotOpened {
        let failure = OpenFailure::from_errno(errno);
        self.errors
            .count(Operation::Open, ErrorReason::Kernel(failure));
        if failure != OpenFailure::Gone && self.logged.insert((name.clone(), failure)) {
            tracing::warn!(
                group = %name, cgroup, cpu,
                "cannot open group: {} (logged once per group and reason)",
                open_failure_reason(errno)
            );
        }
        match failure {
            OpenFailure::TooManyOpenFiles => NotOpened::OutOfFds,
            _ if errno.passes() => NotOpened::ForNow,
            _ => NotOpened::ForGood,
        }
    }
}
