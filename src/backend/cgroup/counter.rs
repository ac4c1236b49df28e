//! One counter group of one cgroup, on every CPU it is open on: its
//! descriptors and the baseline of their last read, and where the reads
//! go in the totals.

use crate::backend::budget::Held;
use crate::ids::CgroupSlot;
use crate::plan::GroupSpec;
use crate::snapshot::Errors;
use crate::totals::{Baseline, GroupKey, Handle, Totals};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A group in one cgroup.
#[derive(Debug)]
pub(super) struct GroupState {
    pub spec: Arc<GroupSpec>,
    pub cpus: Vec<CpuCounter>,
    /// CPUs it failed to open on for a reason that passes: tried again at
    /// each collection.
    pub unopened: BTreeSet<u32>,
}

/// A group on one CPU: its descriptors while open, and where their reads
/// are added.
#[derive(Debug)]
pub(super) struct CpuCounter {
    pub cpu: u32,
    open: Option<(Held, Baseline)>,
    totals: Handle,
    /// The position of each event's total (see [`Totals::columns`]).
    columns: Vec<usize>,
}

impl GroupState {
    pub fn new(spec: Arc<GroupSpec>) -> Self {
        Self {
            spec,
            cpus: Vec::new(),
            unopened: BTreeSet::new(),
        }
    }

    /// The counter of `cpu`, created (its totals at zero, or those the
    /// series has already) if this group has never been open there.
    pub fn counter(
        &mut self,
        cgroup: CgroupSlot,
        cpu: u32,
        totals: &mut Totals,
    ) -> &mut CpuCounter {
        let i = match self.cpus.iter().position(|c| c.cpu == cpu) {
            Some(i) => i,
            None => {
                let handle = totals.group(&GroupKey {
                    cgroup,
                    group: self.spec.id(),
                    cpu,
                });
                let columns = totals.columns(handle, &self.spec.event_ids());
                // One CPU at a time: no spare room in the many small
                // vectors of a host with thousands of cgroups.
                self.cpus.reserve_exact(1);
                self.cpus.push(CpuCounter {
                    cpu,
                    open: None,
                    totals: handle,
                    columns,
                });
                self.cpus.len() - 1
            }
        };
        &mut self.cpus[i]
    }
}

impl CpuCounter {
    /// Adds what the open group counted since its last read.
    pub fn read(&mut self, errors: &mut Errors, totals: &mut Totals) {
        let Some((held, baseline)) = self.open.as_mut() else {
            return;
        };
        crate::backend::reading::read_into(
            held,
            baseline,
            totals,
            (self.totals, &self.columns),
            errors,
        );
    }

    /// Reads the group one last time and closes it: what it counted since
    /// the last collection stays in the totals.
    pub fn close(&mut self, errors: &mut Errors, totals: &mut Totals) {
        self.read(errors, totals);
        self.open = None;
    }

    /// Closes the group without reading it again: read at a hand-over
    /// after the group replacing it had started, it counted nothing since
    /// that the new one did not.
    pub fn close_read(&mut self) {
        self.open = None;
    }

    /// New descriptors (counting from zero) replace the old ones, which
    /// must have been read last already; the totals carry on.
    pub fn opened(&mut self, held: Option<Held>) {
        let events = self.columns.len();
        self.open = held.map(|held| (held, Baseline::new(events)));
    }
}
