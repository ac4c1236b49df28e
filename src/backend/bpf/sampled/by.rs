//! The `by:` mechanism of the bpf backend: entries counted in the kernel
//! ([`InKernel`]) where the program can evaluate them, the others through
//! rings ([`ByRings`]), and entries handed between the two when a reload
//! moves them.

use super::InKernel;
use crate::backend::rings::ByRings;
use crate::backend::{Backend, Cgroup, Outcome, Stats, Wanted, refused};
use crate::cpus::CpuChanges;
use crate::ids::CgroupSlot;
use crate::plan::Plan;
use crate::snapshot::SkipReason;
use crate::totals::Totals;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Counts `by:` tracepoints in the kernel where it can, else on rings.
#[derive(Debug)]
pub struct ByInKernel {
    kernel: InKernel,
    rings: ByRings,
}

impl ByInKernel {
    /// At most `capacity` cgroups counted in the kernel (the program loads
    /// when a plan has an entry it can count); the others' entries on
    /// `rings`.
    pub fn new(capacity: usize, tally: Arc<AtomicU64>, rings: ByRings) -> Self {
        Self {
            kernel: InKernel::new(capacity, tally),
            rings,
        }
    }
}

impl Backend for ByInKernel {
    fn configure(&mut self, plan: &Plan) {
        self.rings.configure(plan);
        self.kernel.configure(plan);
    }

    fn admits(&self, wanted: &Wanted, cpus: usize) -> Result<(), SkipReason> {
        self.rings.admits(&self.kernel.rings_part(wanted), cpus)
    }

    /// Those of the entries on rings.
    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        self.rings.fds_per_cpu(&self.kernel.rings_part(wanted))
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        self.kernel.counts(slot) || self.rings.counts(slot)
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        self.kernel
            .apply(cgroups.iter().map(|(c, w)| (c, w)), totals);
        // Only cgroups with entries on rings (now or until now) are the
        // rings' business: the others would cost a directory opened at
        // admission and a visit at every read.
        let sampled: Vec<(Cgroup, Wanted)> = cgroups
            .iter()
            .map(|(c, w)| (c.clone(), self.kernel.rings_part(w)))
            .filter(|(c, w)| !w.sampled.is_empty() || self.rings.counts(c.slot))
            .collect();
        let by = self
            .kernel
            .with_rings(&mut self.rings, &sampled, online, totals);
        let mut outcomes = vec![Outcome::Counted; cgroups.len()];
        for (i, outcome) in refused(cgroups, &sampled, by) {
            self.remove(cgroups[i].0.slot);
            outcomes[i] = outcome;
        }
        outcomes
    }

    fn remove(&mut self, slot: CgroupSlot) {
        self.rings.remove(slot);
        self.kernel.remove(slot);
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        self.rings.cpus_changed(changes, totals);
    }

    fn retry(&mut self, online: &[u32], totals: &mut Totals) {
        self.rings.retry(online, totals);
    }

    fn read(&mut self, totals: &mut Totals) {
        self.kernel.read(totals);
        self.rings.read(totals);
    }

    fn drains(&self) -> bool {
        self.rings.drains()
    }

    fn wait(&mut self, timeout: Duration) {
        self.rings.wait(timeout);
    }

    fn drain(&mut self, totals: &mut Totals) {
        self.rings.drain(totals);
    }

    /// The program's descriptors (the rings' are in the tally).
    fn stats(&self) -> Stats {
        let mut stats = self.rings.stats();
        self.kernel.add_stats(&mut stats);
        stats
    }
}
