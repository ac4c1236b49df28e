//! Probing in cgroup mode: a group opened once on one cgroup and one CPU, as
//! the cgroup backend opens it for every counted cgroup.

use crate::events::CorePmus;
use crate::machine::Machine;
use crate::perf::{CounterGroup, OpenFailure, Target};
use crate::plan::{Probe, Refusal, Trial, placed};
use crate::snapshot::NotCountable;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

/// Opens trial groups in cgroup mode on the root cgroup and an online CPU:
/// what this machine refuses there it refuses for every cgroup.
#[derive(Debug, Clone)]
pub struct CgroupProbe {
    /// The cgroup directory events are opened on.
    cgroup_dir: PathBuf,
    /// The CPU they are opened on.
    cpu: u32,
    /// On a hybrid CPU, where a group of one core type is opened instead.
    cores: Arc<CorePmus>,
}

impl CgroupProbe {
    /// Probes on `machine`'s probe cgroup and CPU.
    pub fn new(machine: &Machine) -> Self {
        Self {
            cgroup_dir: machine.probe_cgroup.clone(),
            cpu: machine.probe_cpu,
            cores: machine.cores.clone(),
        }
    }
}

impl Probe for CgroupProbe {
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal> {
        let dir = std::fs::File::open(&self.cgroup_dir).map_err(|e| {
            let token = match e.kind() {
                std::io::ErrorKind::PermissionDenied => OpenFailure::Permission.label(),
                _ => NotCountable::NOT_PROBED,
            };
            let reason = format!("opening cgroup {}: {e}", self.cgroup_dir.display());
            Refusal::not_asked(token, reason)
        })?;
        let (cpu, trials) = placed(group, &self.cores, self.cpu)?;
        let attrs: Vec<_> = trials.iter().map(|t| t.attr).collect();
        let filters: Vec<_> = trials.iter().map(|t| t.filter).collect();
        CounterGroup::open_filtered(&attrs, &filters, Target::Cgroup(dir.as_fd()), cpu)
            .map(drop)
            .map_err(|e| Refusal::kernel(group, e.index, e.errno))
    }
}
