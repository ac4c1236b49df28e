//! Plans for unit tests elsewhere, without a machine: configs of software
//! events resolve without sysfs or tracefs.

use super::{Plan, Probe, Refusal, Trial};
use crate::config::Config;

/// A probe that accepts everything.
#[derive(Debug)]
struct Accepting;

impl Probe for Accepting {
    fn try_group(&self, _group: &[Trial<'_>]) -> Result<(), Refusal> {
        Ok(())
    }
}

/// `config`'s plan, every group accepted; it must hold software events
/// only.
pub(crate) fn software_plan(config: &Config) -> Plan {
    let machine = crate::machine::Machine {
        pmu_root: "/nonexistent".into(),
        tracefs: Err("not used".into()),
        probe_cgroup: "/nonexistent".into(),
        probe_cpu: 0,
        cores: Default::default(),
        tables: Default::default(),
        metrics: Default::default(),
    };
    match Plan::build(config, &machine, &Accepting) {
        Ok(plan) => plan,
        Err(e) => panic!("plan: {e}"),
    }
}
