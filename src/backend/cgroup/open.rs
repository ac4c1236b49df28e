//! Opening events within the descriptor budget; failures counted, logged
//! once, and sorted into those that pass and those that do not.

use super::rings::Rings;
use crate::backend::budget::{FdBudget, Held, Tally};
use crate::perf::{CounterGroup, Errno, OpenFailure, SampledEvent, Target, open_failure_reason};
use crate::plan::{GroupSpec, SampledSpec};
use crate::snapshot::{ErrorReason, Errors, Operation};
use crate::totals::Handle;
use std::collections::{BTreeSet, HashSet};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Opens groups within the descriptor budget, and counts and logs failures.
#[derive(Debug)]
pub(super) struct Opener {
    pub budget: FdBudget,
    /// Every perf descriptor of the process, the engine's own included.
    pub tally: Arc<AtomicU64>,
    pub errors: Errors,
    logged: HashSet<(Arc<str>, OpenFailure)>,
    /// The per-CPU rings of `by:` tracepoints.
    pub rings: Rings,
    /// Data pages of a new ring.
    pub ring_pages: usize,
    /// Sample ids of `by:` events closed by a reload whose series carry on:
    /// forgotten only after the rings are drained, so that the samples they
    /// wrote before closing are counted.
    pub retired: Vec<u64>,
}

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

impl Opener {
    pub fn new(budget: FdBudget, tally: Arc<AtomicU64>, ring_pages: usize) -> Self {
        Self {
            budget,
            tally,
            errors: Errors::default(),
            logged: HashSet::new(),
            rings: Rings::default(),
            ring_pages,
            retired: Vec::new(),
        }
    }

    pub fn used(&self) -> u64 {
        self.tally.load(Ordering::Relaxed)
    }

    /// Opens `spec` for the cgroup whose directory is `dir` on `cpu`.
    /// A failure leaves the group unopened on this CPU; those of the kernel
    /// are counted and logged once.
    pub fn open(
        &mut self,
        spec: &GroupSpec,
        cgroup: &str,
        dir: &std::fs::File,
        cpu: u32,
    ) -> Result<Held, NotOpened> {
        let Some(attrs) = spec.attrs_on(cpu) else {
            return Err(NotOpened::NotHere);
        };
        let n = spec.events.len() as u64;
        if !self.budget.fits(self.used(), n) {
            return Err(NotOpened::OutOfFds);
        }
        let target = Target::Cgroup(dir.as_fd());
        CounterGroup::open_filtered(&attrs, &spec.filters(), target, cpu)
            .map(|group| Held::new(group, &self.tally))
            .map_err(|e| self.failed(&spec.name.shared_label(), cgroup, cpu, e.errno))
    }

    /// Opens a `by:` tracepoint for the cgroup whose directory is `dir` on
    /// `cpu`, writing into that CPU's ring (opened if needed), its samples
    /// counted into `counts`. Same results as [`Opener::open`].
    pub fn open_sampled(
        &mut self,
        spec: &Arc<SampledSpec>,
        counts: Handle,
        cgroup: &str,
        dir: &std::fs::File,
        cpu: u32,
    ) -> Result<(SampledEvent, Tally), NotOpened> {
        // One for the event, one for the ring if this CPU has none yet.
        if !self.budget.fits(self.used(), 2) {
            return Err(NotOpened::OutOfFds);
        }
        let opened = self
            .rings
            .ensure(cpu, self.ring_pages, &self.tally)
            .and_then(|ring| {
                let target = Target::Cgroup(dir.as_fd());
                SampledEvent::open(&spec.attr, spec.filter.as_deref(), target, cpu, ring)
            });
        match opened {
            Ok(event) => {
                self.rings.register(event.id(), counts, spec);
                Ok((event, Tally::new(&self.tally, 1)))
            }
            Err(errno) => Err(self.failed(&spec.label, cgroup, cpu, errno)),
        }
    }

    /// Counts and logs a failed open, and says whether it passes.
    fn failed(&mut self, name: &Arc<str>, cgroup: &str, cpu: u32, errno: Errno) -> NotOpened {
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
