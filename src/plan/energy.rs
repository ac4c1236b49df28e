//! What `energy:` needs of the plan: the config's section, and the event
//! the cgroups' shares are weighed by on this machine.

use super::{GroupSpec, Plan};
use crate::config::{EnergyDef, MetricDef, WEIGHT_EVENTS};
use crate::events::{CorePmus, EventAttr};
use crate::ids::GroupId;
use std::sync::Arc;

/// `energy:` as planned on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnergyPlan {
    /// The config's section.
    pub def: EnergyDef,
    /// The event the cgroups' shares are weighed by: `cycles` where a
    /// group counting it can be counted here, else `task-clock`; `None`
    /// when neither can (no cgroup gets a share; `cgperf check` says so).
    pub weight: Option<&'static str>,
    /// The weight event as the first group counting it opens it: what
    /// counts each CPU's total of it system-wide (`cycles`: the `system`
    /// share, see `crate::energy::cycles`).
    pub weight_attr: Option<EventAttr>,
}

impl EnergyPlan {
    /// `def` planned over the `groups` this machine can count.
    pub(super) fn of(
        def: Option<EnergyDef>,
        groups: &[(GroupId, Option<Arc<GroupSpec>>)],
    ) -> Option<Self> {
        let countable = || groups.iter().filter_map(|(_, spec)| spec.as_deref());
        let found = WEIGHT_EVENTS.into_iter().find_map(|w| {
            let event = countable().find_map(|spec| spec.events.iter().find(|e| &*e.label == w))?;
            Some((w, event.attr))
        });
        Some(Self {
            def: def?,
            weight: found.map(|(w, _)| w),
            weight_attr: found.map(|(_, attr)| attr),
        })
    }
}

impl Plan {
    /// The core PMUs the groups were planned over (the machine's; none
    /// where no group can be counted): on a hybrid CPU, how the weight
    /// event is opened on each CPU, as the groups open it.
    pub fn cores(&self) -> Arc<CorePmus> {
        self.groups
            .iter()
            .find_map(|(_, spec)| Some(spec.as_ref()?.cores.clone()))
            .unwrap_or_default()
    }

    /// Every metric the snapshot describes (`cgperf_metric_definition_info`):
    /// the top level's, then the host's, one per (name, description, unit),
    /// as the host may define a metric the cgroups do.
    pub fn described_metrics(&self) -> Vec<Arc<MetricDef>> {
        let mut defs = self.metrics.clone();
        let same = |a: &MetricDef, b: &MetricDef| {
            (&a.name, &a.description, &a.unit) == (&b.name, &b.description, &b.unit)
        };
        for def in &self.host.metrics {
            if !defs.iter().any(|d| same(d, def)) {
                defs.push(def.clone());
            }
        }
        defs
    }
}
