//! From config to what to open: events resolved against this machine's PMUs
//! and tracefs, each group probed once so that one that cannot be counted is
//! disabled (with its reason) instead of failing for every cgroup.

use crate::config::{CgroupSelector, Config, GroupDef};
use crate::events::{Event, EventAttr, PERF_TYPE_TRACEPOINT, TracepointName};
use crate::perf::{CounterGroup, Target, open_failure_reason};
use crate::snapshot::Support;
use crate::tracefs::Tracefs;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The group name under which tracepoints are counted and exported.
pub const TRACEPOINT_GROUP: &str = "tracepoints";

/// One event ready to open.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedEvent {
    /// The `event` label: the event as written in the config.
    pub label: Arc<str>,
    /// What to pass to the kernel.
    pub attr: EventAttr,
    /// Counts nanoseconds (`task-clock`, `cpu-clock`), exported as seconds.
    pub clock: bool,
}

/// A group ready to open for any cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// The `group` label.
    pub name: Arc<str>,
    /// Leader first.
    pub events: Vec<PlannedEvent>,
}

impl GroupSpec {
    /// The attrs in group order.
    pub fn attrs(&self) -> Vec<EventAttr> {
        self.events.iter().map(|e| e.attr).collect()
    }
}

/// Where the machine-dependent inputs of a plan come from.
#[derive(Debug, Clone)]
pub struct Machine {
    /// `/sys/bus/event_source/devices`.
    pub pmu_root: PathBuf,
    /// tracefs, or why it is unavailable.
    pub tracefs: Result<Tracefs, String>,
    /// The directory of the root cgroup, used to probe groups.
    pub probe_cgroup: PathBuf,
    /// A CPU that is online, used to probe groups.
    pub probe_cpu: u32,
}

/// What the sampler opens, derived from a config on this machine.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sampling interval.
    pub interval: Duration,
    /// Export a `cpu` label.
    pub per_cpu: bool,
    /// The config's cgroup selectors.
    pub selectors: Vec<CgroupSelector>,
    /// One per config group, `None` when this machine cannot count it.
    groups: Vec<(String, Option<Arc<GroupSpec>>)>,
    /// One per config tracepoint, `None` when it cannot be counted.
    tracepoints: Vec<(TracepointName, Option<PlannedEvent>)>,
    /// The verdict on every group and tracepoint.
    pub support: Vec<Support>,
}

impl Plan {
    /// Resolves and probes everything `config` asks for.
    pub fn build(config: &Config, machine: &Machine) -> Self {
        let mut support = Vec::new();
        let groups = config
            .groups
            .iter()
            .map(|def| {
                let status = resolve_group(def, &machine.pmu_root).and_then(|spec| {
                    probe(&spec, &machine.probe_cgroup, machine.probe_cpu)?;
                    Ok(spec)
                });
                support.push(Support {
                    group: def.name.as_str().into(),
                    event: None,
                    status: status.as_ref().map(|_| ()).map_err(Clone::clone),
                });
                (def.name.clone(), status.ok().map(Arc::new))
            })
            .collect();
        let tracepoints: Vec<_> = config
            .tracepoints
            .iter()
            .map(|tp| {
                let status = resolve_tracepoint(tp, machine).and_then(|event| {
                    let spec = GroupSpec {
                        name: TRACEPOINT_GROUP.into(),
                        events: vec![event.clone()],
                    };
                    probe(&spec, &machine.probe_cgroup, machine.probe_cpu)?;
                    Ok(event)
                });
                support.push(Support {
                    group: TRACEPOINT_GROUP.into(),
                    event: Some(tp.to_string().into()),
                    status: status.as_ref().map(|_| ()).map_err(Clone::clone),
                });
                (tp.clone(), status.ok())
            })
            .collect();
        if !config.tracepoints.is_empty() {
            let any = tracepoints.iter().any(|(_, e)| e.is_some());
            support.push(Support {
                group: TRACEPOINT_GROUP.into(),
                event: None,
                status: if any {
                    Ok(())
                } else {
                    Err("none of the configured tracepoints can be counted".into())
                },
            });
        }
        Self {
            interval: config.interval,
            per_cpu: config.per_cpu,
            selectors: config.cgroups.clone(),
            groups,
            tracepoints,
            support,
        }
    }

    /// The groups to open for a cgroup chosen by `selectors` (indices into
    /// [`Plan::selectors`]): the union of what they ask for, supported groups
    /// only, tracepoints last as one group.
    pub fn groups_for(&self, selectors: &[usize]) -> Vec<Arc<GroupSpec>> {
        let chosen: Vec<&CgroupSelector> = selectors
            .iter()
            .filter_map(|&i| self.selectors.get(i))
            .collect();
        let mut out: Vec<Arc<GroupSpec>> = self
            .groups
            .iter()
            .filter(|(name, _)| chosen.iter().any(|s| s.groups.contains(name)))
            .filter_map(|(_, spec)| spec.clone())
            .collect();
        let events: Vec<PlannedEvent> = self
            .tracepoints
            .iter()
            .filter(|(tp, _)| chosen.iter().any(|s| s.tracepoints.contains(tp)))
            .filter_map(|(_, event)| event.clone())
            .collect();
        if !events.is_empty() {
            out.push(Arc::new(GroupSpec {
                name: TRACEPOINT_GROUP.into(),
                events,
            }));
        }
        out
    }
}

/// Resolves every event of a group, or says which one cannot be resolved.
pub fn resolve_group(def: &GroupDef, pmu_root: &Path) -> Result<GroupSpec, String> {
    let events = def
        .events
        .iter()
        .map(|e| resolve_event(e, pmu_root))
        .collect::<Result<_, _>>()?;
    Ok(GroupSpec {
        name: def.name.as_str().into(),
        events,
    })
}

/// Resolves one event against the PMUs of this machine.
pub fn resolve_event(event: &Event, pmu_root: &Path) -> Result<PlannedEvent, String> {
    let attr = event
        .resolve(pmu_root)
        .map_err(|e| format!("event `{}`: {e}", event.text))?;
    Ok(PlannedEvent {
        label: event.text.as_str().into(),
        attr,
        clock: event.is_clock(),
    })
}

/// Resolves a tracepoint to its id in tracefs.
pub fn resolve_tracepoint(tp: &TracepointName, machine: &Machine) -> Result<PlannedEvent, String> {
    let tracefs = machine.tracefs.as_ref().map_err(Clone::clone)?;
    let id = tracefs.tracepoint_id(tp)?;
    Ok(PlannedEvent {
        label: tp.to_string().into(),
        attr: EventAttr {
            type_: PERF_TYPE_TRACEPOINT,
            config: id,
            config1: 0,
            config2: 0,
            exclude_user: false,
            exclude_kernel: false,
            exclude_hv: false,
        },
        clock: false,
    })
}

/// Opens the group once in cgroup mode and closes it again: the kernel is the
/// only reliable judge of whether this machine can count it.
pub fn probe(spec: &GroupSpec, cgroup_dir: &Path, cpu: u32) -> Result<(), String> {
    let dir = std::fs::File::open(cgroup_dir)
        .map_err(|e| format!("opening cgroup {}: {e}", cgroup_dir.display()))?;
    CounterGroup::open(&spec.attrs(), Target::Cgroup(dir.as_fd()), cpu)
        .map(drop)
        .map_err(|e| {
            let event = spec.events.get(e.index).map_or("?", |ev| &*ev.label);
            format!("event `{event}`: {}", open_failure_reason(e.errno))
        })
}
