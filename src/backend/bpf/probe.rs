//! Probing for the BPF backend: a group opened once system-wide on one
//! CPU, as the backend opens it on every CPU (whatever the cgroups).

use crate::events::CorePmus;
use crate::machine::Machine;
use crate::perf::{CounterGroup, Target};
use crate::plan::{Probe, Refusal, Trial, placed};
use std::sync::Arc;

/// Opens trial groups system-wide on an online CPU: what this machine
/// refuses there, the BPF backend cannot count. (System-wide PMUs such as
/// RAPL's, which cgroup mode refuses, open here.)
#[derive(Debug, Clone)]
pub struct BpfProbe {
    cpu: u32,
    /// On a hybrid CPU, where a group of one core type is opened instead.
    cores: Arc<CorePmus>,
}

impl BpfProbe {
    /// Probes on `machine`'s probe CPU.
    pub fn new(machine: &Machine) -> Self {
        Self {
            cpu: machine.probe_cpu,
            cores: machine.cores.clone(),
        }
    }
}

impl Probe for BpfProbe {
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal> {
        let (cpu, trials) = placed(group, &self.cores, self.cpu)?;
        let attrs: Vec<_> = trials.iter().map(|t| t.attr).collect();
        let filters: Vec<_> = trials.iter().map(|t| t.filter).collect();
        CounterGroup::open_filtered(&attrs, &filters, Target::AllTasks, cpu)
            .map(drop)
            .map_err(|e| Refusal::kernel(group, e.index, e.errno))
    }

    fn counters_per_cpu(&self) -> Option<usize> {
        Some(super::abi::MAX_COUNTED)
    }
}
