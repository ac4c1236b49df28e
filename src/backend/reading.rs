//! Reading an open group into the totals, as every mechanism that opens
//! perf groups does at each collection, and counting what fails.

use crate::backend::budget::Held;
use crate::ids::EventId;
use crate::perf::{CounterGroup, Errno, OpenFailure, ReadError};
use crate::snapshot::{ErrorReason, Errors, Operation};
use crate::totals::{Baseline, GroupKey, Handle, Totals};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Adds what `held` counted since `baseline` to the totals `handle` names
/// (its events at `columns`); a failed read is counted in `errors` and
/// adds nothing.
pub fn read_into(
    held: &mut Held,
    baseline: &mut Baseline,
    totals: &mut Totals,
    (handle, columns): (Handle, &[usize]),
    errors: &mut Errors,
) {
    match held.group.read() {
        Ok((read, ids)) => {
            totals.add(handle, columns, |delta| baseline.delta(&read, ids, delta));
        }
        Err(e) => {
            let reason = match e {
                ReadError::Syscall(errno) => ErrorReason::Kernel(OpenFailure::from_errno(errno)),
                ReadError::Format(_) => ErrorReason::Format,
            };
            errors.count(Operation::Read, reason);
        }
    }
}

/// A group open for a target that keeps totals of its own (the host on a
/// CPU, a process on a thread): its descriptors, counted in a tally while
/// it lives, the baseline of its last read, and where reads are added.
#[derive(Debug)]
pub struct Reader {
    held: Held,
    baseline: Baseline,
    handle: Handle,
    columns: Vec<usize>,
}

impl Reader {
    /// `group`, just opened with `events` in its order, adding to the
    /// totals of `key` (made at zero, or those the series has already).
    pub fn new(
        group: CounterGroup,
        tally: &Arc<AtomicU64>,
        totals: &mut Totals,
        key: &GroupKey,
        events: &[EventId],
    ) -> Self {
        let handle = totals.group(key);
        let columns = totals.columns(handle, events);
        Self {
            held: Held::new(group, tally),
            baseline: Baseline::new(events.len()),
            handle,
            columns,
        }
    }

    /// Starts a group opened paused ([`CounterGroup::open_paused`]).
    pub fn enable(&self) -> Result<(), Errno> {
        self.held.group.enable()
    }

    /// Adds what it counted since its last read.
    pub fn read(&mut self, totals: &mut Totals, errors: &mut Errors) {
        read_into(
            &mut self.held,
            &mut self.baseline,
            totals,
            (self.handle, &self.columns),
            errors,
        );
    }
}
