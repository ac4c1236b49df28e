//! Changing the counted groups while the program stays loaded: on each
//! CPU, in one run of the program there, new and changed groups start
//! counting and the groups they replace are read one last time.

use super::BpfCounters;
use super::fed::Charged;
use super::kernel::Kernel;
use super::placement::Phase;
use crate::backend::{Cgroup, Wanted};
use crate::perf::OpenFailure;
use crate::snapshot::{ErrorReason, Operation};
use crate::totals::Totals;

impl BpfCounters {
    /// Makes the program count the wanted layout, loading it the first
    /// time. It stays loaded: groups kept keep their counters, baselines
    /// and totals; on each CPU, in one run of the program there
    /// ([`Kernel::cut`]), new and changed groups start counting and those
    /// they replace are counted one last time, and read then. So a changed
    /// group's events that stay count every moment exactly once, whatever
    /// runs on that CPU meanwhile.
    pub(super) fn relayout(&mut self, cgroups: &[(Cgroup, Wanted)], totals: &mut Totals) {
        if self.kernel.is_none() {
            if self.wanted.groups().next().is_none() {
                return;
            }
            let mut kernel = match Kernel::load(self.capacity, self.cpus) {
                Ok(kernel) => kernel,
                Err(e) => {
                    // Loaded once already (choosing the backend): the kernel
                    // refused memory or descriptors; the next reload tries
                    // again.
                    tracing::error!("cannot load the BPF program, counting nothing: {e}");
                    self.errors
                        .count(Operation::Open, ErrorReason::Kernel(OpenFailure::Other));
                    return;
                }
            };
            let counted = u32::try_from(self.cgroups.len()).unwrap_or(u32::MAX);
            if let Err(e) = kernel.reserve(self.next_slot.saturating_sub(1), counted) {
                tracing::debug!("cannot make room for {counted} cgroups at once: {e}");
            }
            for counted in self.cgroups.values() {
                if let Err(e) = kernel.monitor(counted.id, counted.slot) {
                    tracing::warn!("cannot count cgroup id {}: {e}", counted.id);
                }
            }
            self.kernel = Some(kernel);
        }
        let Some(mut kernel) = self.kernel.take() else {
            return;
        };
        // The cut on each CPU runs there from this thread, not from an
        // interrupt: an interrupt may come while a tracepoint or software
        // event is counted, after the new counter counted it and before
        // the old one did, which would lose it. On its CPU, this thread
        // never runs inside such a count. (A CPU it may not move to gets
        // the cut by interrupt.)
        // Every new or changed group fits beside the ones it replaces
        // (see MAX_COUNTED): one cut per CPU.
        if kernel.place(&self.wanted) {
            let mut pin = crate::cpus::Pin::new();
            for cpu in self.online.clone() {
                pin.to(cpu);
                let failures = kernel.open_new(cpu, &self.tally);
                if failures.iter().any(|f| f.error.errno.passes()) {
                    self.unopened.insert(cpu);
                }
                self.note(failures);
                self.feed_new(&kernel, cpu, cgroups, totals);
                if let Err(errno) = kernel.cut(cpu) {
                    let reason = ErrorReason::Kernel(OpenFailure::from_errno(errno));
                    self.errors.count(Operation::Read, reason);
                }
                self.read_retiring(&kernel, cpu, totals);
                kernel.close_retiring(cpu);
            }
            kernel.settle();
            for counted in self.cgroups.values_mut() {
                counted
                    .groups
                    .retain(|c| kernel.placement(&c.spec).is_some());
            }
        }
        self.kernel = Some(kernel);
    }

    /// Gives each counted cgroup of `cgroups` the new groups it wants on
    /// `cpu`, before they count there: their baselines are what their
    /// slots hold then, which nothing charges until [`Kernel::cut`].
    fn feed_new(
        &mut self,
        kernel: &Kernel,
        cpu: u32,
        cgroups: &[(Cgroup, Wanted)],
        totals: &mut Totals,
    ) {
        for (cgroup, wanted) in cgroups {
            let Some(counted) = self.cgroups.get_mut(&cgroup.slot) else {
                continue;
            };
            for spec in &wanted.groups {
                let Some(placed) = kernel.placement(spec).filter(|p| p.phase == Phase::New) else {
                    continue;
                };
                let at = match counted.groups.iter().position(|c| c.spec == *spec) {
                    Some(at) => at,
                    None => {
                        counted
                            .groups
                            .push(Charged::new(spec.clone(), placed.at.clone()));
                        counted.groups.len() - 1
                    }
                };
                let slot = counted.slot;
                counted.groups[at].feed(kernel, (cgroup.slot, cpu, slot), self.per_cpu, totals);
            }
        }
    }

    /// Reads, one last time on `cpu`, every counted cgroup's groups that
    /// retire: after [`Kernel::cut`], nothing charges them there.
    fn read_retiring(&mut self, kernel: &Kernel, cpu: u32, totals: &mut Totals) {
        for (&key, counted) in &mut self.cgroups {
            for charged in &mut counted.groups {
                let retiring = kernel
                    .placement(&charged.spec)
                    .is_some_and(|p| p.phase == Phase::Retiring);
                if !retiring {
                    continue;
                }
                charged.last_read(kernel, (key, cpu, counted.slot), totals);
            }
        }
    }
}
