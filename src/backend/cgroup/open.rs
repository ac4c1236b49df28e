//! Opening counter groups within the descriptor budget.

use crate::backend::budget::{Fds, Held};
use crate::backend::opening::{Failures, NotOpened};
use crate::perf::{CounterGroup, Target};
use crate::plan::GroupSpec;
use std::os::fd::AsFd;

/// Opens groups within the descriptor budget, and counts and logs failures.
#[derive(Debug)]
pub(super) struct Opener {
    /// Every perf descriptor of the process, the engine's own included,
    /// and how many cgperf may hold.
    pub fds: Fds,
    pub failures: Failures,
}

impl Opener {
    pub fn new(fds: Fds) -> Self {
        Self {
            fds,
            failures: Failures::default(),
        }
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
        if !self.fds.fit(n) {
            return Err(NotOpened::OutOfFds);
        }
        let target = Target::Cgroup(dir.as_fd());
        CounterGroup::open_filtered(&attrs, &spec.filters(), target, cpu)
            .map(|group| self.fds.hold(group))
            .map_err(|e| {
                let name = spec.name.shared_label();
                self.failures.failed(&name, cgroup, cpu, e.errno)
            })
    }
}
