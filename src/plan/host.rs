//! The host's part of a plan: the groups and tracepoints of `host:`,
//! resolved and probed system-wide, each with the CPUs it counts on and
//! what one count of each event is.
//!
//! A PMU outside the cores (uncore, `power`, `cstate_*`) counts on the CPUs
//! of its `cpumask`, one per socket or die; everything else counts on every
//! online CPU. The same PMUs are what a cgroup cannot count: a group of the
//! top-level `groups:` with one of their events is a config error that says
//! to move it here ([`cgroup_mistake`]).

use super::{
    GroupSpec, Planned, PlannedEvent, Probe, Refusal, Trial, group_verdict, placed,
    plan_tracepoint, resolve_group, verdict,
};
use crate::config::{ConfigError, GroupDef, HostDef, MetricDef};
use crate::events::{Event, ScaleUnit, cpumask, scale_unit};
use crate::ids::GroupId;
use crate::machine::Machine;
use crate::snapshot::{NotCountable, Support};
use std::sync::Arc;

/// One group of `host:`, ready to open.
#[derive(Debug, Clone, PartialEq)]
pub struct HostGroup {
    /// Its events, leader first.
    pub spec: Arc<GroupSpec>,
    /// The CPUs it counts on when its PMU says (`cpumask`: one per socket
    /// or die); `None` for every online CPU.
    pub cpumask: Option<Arc<[u32]>>,
    /// Per event in group order: what one count is, where sysfs says
    /// (`power/energy-pkg/` in Joules).
    pub units: Vec<Option<ScaleUnit>>,
}

/// What `host:` counts on this machine.
#[derive(Debug, Clone, Default)]
pub struct HostPlan {
    /// The groups this machine can count, in the order written, then its
    /// counted tracepoints as one group (`tracepoints`).
    pub groups: Vec<Arc<HostGroup>>,
    /// The verdict on every group and tracepoint of `host:`.
    pub support: Vec<Support>,
    /// Its metrics, computed for the whole machine.
    pub metrics: Vec<Arc<MetricDef>>,
}

impl HostPlan {
    /// Resolves `def` on `machine` and asks `probe` whether the kernel
    /// counts each group system-wide. A filter the kernel rejects is the
    /// config's error, as for cgroups.
    pub(super) fn build(
        def: &HostDef,
        machine: &Machine,
        probe: &dyn Probe,
    ) -> Result<Self, ConfigError> {
        let mut plan = Self {
            metrics: def.metrics.iter().cloned().map(Arc::new).collect(),
            ..Self::default()
        };
        for group in &def.groups {
            let id = GroupId::Named(group.name.as_str().into());
            let status = host_group(group, machine, probe);
            plan.support.push(verdict(&id, None, &status));
            if let Ok(group) = status {
                plan.groups.push(Arc::new(group));
            }
        }
        let system_wide = SystemWide {
            probe,
            cpu: machine.probe_cpu,
        };
        let mut events = Vec::new();
        for t in &def.tracepoints {
            let status = match plan_tracepoint(t, machine, &system_wide)? {
                Ok(Planned::Counted(event)) => Ok(event),
                // `by:` is a config error under `host:`; never planned.
                Ok(Planned::Sampled(_)) => Err(NotCountable::new(
                    NotCountable::UNKNOWN_TRACEPOINT,
                    format!("{}: `by:` is not counted for the host", t.label),
                )),
                Err(why) => Err(why),
            };
            plan.support
                .push(verdict(&GroupId::Tracepoints, Some(&t.label), &status));
            events.extend(status.ok());
        }
        group_verdict(
            &mut plan.support,
            &GroupId::Tracepoints,
            def.tracepoints.len(),
            "none of the host's tracepoints can be counted",
        );
        if !events.is_empty() {
            plan.groups.push(Arc::new(HostGroup {
                units: vec![None; events.len()],
                spec: Arc::new(GroupSpec {
                    name: GroupId::Tracepoints,
                    events,
                    cores: Arc::default(),
                }),
                cpumask: None,
            }));
        }
        Ok(plan)
    }

    /// The verdict on the group `group` of `host:`, if it has one.
    pub fn verdict(&self, group: &GroupId) -> Option<&Support> {
        self.support
            .iter()
            .find(|s| s.group == *group && s.event.is_none())
    }
}

/// Resolves one group of `host:`, finds where it counts and probes it
/// there.
fn host_group(
    def: &GroupDef,
    machine: &Machine,
    probe: &dyn Probe,
) -> Result<HostGroup, NotCountable> {
    let spec = resolve_group(def, machine)?;
    let unknown = |event: &Event, e: crate::events::ResolveError| {
        NotCountable::new(
            NotCountable::UNKNOWN_EVENT,
            format!("event `{}`: {e}", event.text),
        )
    };
    let mut scope: Option<(&Event, Vec<u32>)> = None;
    let mut units = Vec::with_capacity(def.events.len());
    for event in &def.events {
        units.push(scale_unit(&machine.pmu_root, event).map_err(|e| unknown(event, e))?);
        let Some(cpus) = cpumask(&machine.pmu_root, event).map_err(|e| unknown(event, e))? else {
            continue;
        };
        match &scope {
            Some((first, theirs)) if *theirs != cpus => {
                return Err(NotCountable::new(
                    NotCountable::MIXED_SCOPES,
                    format!(
                        "events `{}` (CPUs {theirs:?}) and `{}` (CPUs {cpus:?}) count on \
                         different CPUs, so no CPU counts them as one group: put each in a \
                         group of its own",
                        first.text, event.text
                    ),
                ));
            }
            Some(_) => {}
            None => scope = Some((event, cpus)),
        }
    }
    let cpumask = scope.map(|(_, cpus)| Arc::<[u32]>::from(cpus));
    let cpu = cpumask
        .as_deref()
        .and_then(|cpus| cpus.first().copied())
        .unwrap_or(machine.probe_cpu);
    let trials: Vec<Trial<'_>> = spec.events.iter().map(PlannedEvent::trial).collect();
    let (cpu, trials) = placed(&trials, &spec.cores, cpu)?;
    probe.try_system_wide(&trials, cpu)?;
    Ok(HostGroup {
        spec: Arc::new(spec),
        cpumask,
        units,
    })
}

/// What makes a group of the top-level `groups:` impossible to count per
/// cgroup: an event whose PMU counts only system-wide. For a group the
/// config wrote, the error (at its name) says to move it under `host:`;
/// a group cgperf made (for a metric) is not countable, with the reason.
pub(super) fn cgroup_mistake(
    def: &GroupDef,
    machine: &Machine,
) -> Option<Result<NotCountable, ConfigError>> {
    let (event, cpus) = def.events.iter().find_map(|e| {
        let cpus = cpumask(&machine.pmu_root, e).ok()??;
        Some((e, cpus))
    })?;
    let pmu = event.text.split('/').next().unwrap_or(&event.text);
    let message = format!(
        "event `{}` of group `{}` is counted only for the whole machine: its PMU `{pmu}` \
         counts system-wide, on CPUs {cpus:?} (its sysfs `cpumask`), never per cgroup",
        event.text, def.name
    );
    Some(match &def.origin {
        Some(origin) => Err(origin.error(message).hint(format!(
            "move the group under `host:`, e.g. `host: {{groups: {{{}: [{}]}}}}`; its series \
             are then cgperf_host_events_total, without a cgroup label",
            def.name, event.text
        ))),
        None => Ok(NotCountable::new(NotCountable::HOST_ONLY, message)),
    })
}

/// A probe that answers for system-wide opens on one CPU: what the
/// tracepoints of `host:` are asked through.
#[derive(Debug)]
struct SystemWide<'a> {
    probe: &'a dyn Probe,
    cpu: u32,
}

impl Probe for SystemWide<'_> {
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal> {
        self.probe.try_system_wide(group, self.cpu)
    }
}
