//! From config to what to open: events resolved against this machine's PMUs
//! and tracefs, each group probed once (through the counting backend's
//! [`Probe`]) so that one that cannot be counted is disabled (with its
//! reason) instead of failing for every cgroup.
//!
//! Resolving makes no perf syscall: everything only the kernel can judge is
//! asked of the [`Probe`] a plan is built with.

use crate::config::{CgroupSelector, Config, ConfigError, MetricDef};
use crate::deadline;
use crate::events::{CorePmus, EventAttr, Field, HeldBinary};
use crate::ids::{EventId, GroupId, SampledId};
use crate::machine::Machine;
use crate::snapshot::{NotCountable, Spelling, Support};
use std::collections::HashSet;
use std::ffi::CStr;
use std::sync::Arc;
use std::time::Duration;

pub use crate::config::{PROBE_GROUP, TRACEPOINT_GROUP};

mod budget;
mod energy;
mod fields;
mod host;
mod probe;
mod resolve;
mod split;

pub use host::{HostGroup, HostPlan};
pub use probe::{Probe, Refusal, Trial, placed};
use resolve::{plan_probe, plan_tracepoint};
pub use resolve::{probe_event, resolve_event, resolve_group};
#[cfg(test)]
mod host_tests;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

pub use energy::EnergyPlan;

/// One event ready to open.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedEvent {
    /// The `event` label: [`Event::label`](crate::events::Event::label)
    /// (one name for perf's aliases), a tracepoint's name, or its `as:`.
    pub label: Arc<str>,
    /// What to pass to the kernel.
    pub attr: EventAttr,
    /// Counts nanoseconds (`task-clock`, `cpu-clock`), exported as seconds.
    pub clock: bool,
    /// A tracepoint filter, applied before the event is enabled.
    pub filter: Option<Arc<CStr>>,
    /// A uprobe's binary, which `attr` names through `/proc/self/fd`: held
    /// for as long as the event may be opened (by any group keeping this).
    pub binary: Option<Arc<HeldBinary>>,
}

impl PlannedEvent {
    /// The series it feeds.
    pub fn id(&self) -> EventId {
        EventId {
            label: self.label.clone(),
            clock: self.clock,
        }
    }

    /// How the backend's probe tries it.
    fn trial(&self) -> Trial<'_> {
        Trial {
            label: &self.label,
            attr: self.attr,
            filter: self.filter.as_deref(),
        }
    }
}

/// A group ready to open for any cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// The group (its `group` label: [`GroupId::label`]).
    pub name: GroupId,
    /// Leader first.
    pub events: Vec<PlannedEvent>,
    /// The core PMUs of a hybrid CPU, which decide how the events of the
    /// CPU are opened on each CPU (none for tracepoints and probes).
    pub cores: Arc<CorePmus>,
}

impl GroupSpec {
    /// The attrs in group order as opened on `cpu`, or `None` where the
    /// group does not count: on a hybrid CPU, the CPUs of another core type
    /// than its events' (see [`CorePmus::on_cpu`]).
    pub fn attrs_on(&self, cpu: u32) -> Option<Vec<EventAttr>> {
        self.events
            .iter()
            .map(|e| self.cores.on_cpu(&e.attr, cpu))
            .collect()
    }

    /// Whether the group counts on `cpu`: see [`GroupSpec::attrs_on`].
    pub fn counts_on(&self, cpu: u32) -> bool {
        self.events
            .iter()
            .all(|e| self.cores.on_cpu(&e.attr, cpu).is_some())
    }

    /// The filters in group order.
    pub fn filters(&self) -> Vec<Option<&CStr>> {
        self.events.iter().map(|e| e.filter.as_deref()).collect()
    }

    /// The group's id.
    pub fn id(&self) -> GroupId {
        self.name.clone()
    }

    /// Its events' ids, in group order.
    pub fn event_ids(&self) -> Vec<EventId> {
        self.events.iter().map(PlannedEvent::id).collect()
    }

    /// Asks `probe` whether the kernel counts the whole group.
    ///
    /// A PMU that cannot schedule the events together (more than its
    /// counters: Arm's driver and x86's check that at open) refuses the
    /// first member that does not fit, with an errno that reads as if that
    /// event were wrong. When that member opens alone, the reason says
    /// what is really the matter.
    fn probe(&self, probe: &dyn Probe) -> Result<(), Refusal> {
        let trials: Vec<Trial<'_>> = self.events.iter().map(PlannedEvent::trial).collect();
        probe
            .try_group(&trials)
            .map_err(|refusal| match refusal.refused {
                Some((i, errno)) if i > 0 && !refusal.permission => match trials.get(i) {
                    Some(member) if probe.try_group(&[*member]).is_ok() => Refusal {
                        reason: format!(
                            "event `{}`: the PMU cannot count the group's {} events together: it \
                         took the first {i} and refused this one, which it counts alone ({errno}); \
                         more events than the PMU has counters, or a combination it cannot \
                         schedule at once: split the group",
                            member.label,
                            trials.len()
                        ),
                        ..refusal
                    },
                    _ => refusal,
                },
                _ => refusal,
            })
    }
}

/// A tracepoint counted by the values of some of its fields: every hit is a
/// sample in a ring buffer, decoded into label values.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledSpec {
    /// The `event` label.
    pub label: Arc<str>,
    /// The tracepoint.
    pub attr: EventAttr,
    /// A tracepoint filter, applied before the event is enabled.
    pub filter: Option<Arc<CStr>>,
    /// The `by:` fields in the order written: label name and layout.
    pub fields: Vec<(Arc<str>, Field)>,
    /// Distinct value combinations per cgroup before the rest goes to
    /// `other`.
    pub max_series: usize,
    /// The position in `fields` of a syscall number whose name its series
    /// also carry (as the `syscall` label).
    pub syscall_name: Option<usize>,
    /// The fields its filter compares, as the format lays them out: what a
    /// backend that evaluates the filter itself reads.
    pub filter_fields: Vec<Field>,
}

impl SampledSpec {
    /// The series it feeds.
    pub fn id(&self) -> SampledId {
        SampledId {
            label: self.label.clone(),
            fields: self.fields.iter().map(|(name, _)| name.clone()).collect(),
        }
    }

    /// The count key of a hit whose raw record is `raw` (its field values
    /// joined by [`KEY_SEPARATOR`](crate::totals::KEY_SEPARATOR)), into
    /// `key`; `value` is scratch. A field the record is too short for
    /// goes under `other` rather than a made-up value.
    pub fn key_of(&self, raw: &[u8], key: &mut String, value: &mut String) {
        key.clear();
        for (i, (_, field)) in self.fields.iter().enumerate() {
            if i > 0 {
                key.push(crate::totals::KEY_SEPARATOR);
            }
            match field.format_value(raw, value) {
                Ok(()) => key.push_str(value),
                Err(_) => key.push_str(crate::totals::OTHER),
            }
        }
    }
}

/// What the sampler opens, derived from a config on this machine.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sampling interval.
    pub interval: Duration,
    /// Export a `cpu` label.
    pub per_cpu: bool,
    /// Data pages of each CPU's ring buffer for sampled tracepoints.
    pub ring_pages: usize,
    /// The config's cgroup selectors.
    pub selectors: Vec<CgroupSelector>,
    /// One per config group, `None` when this machine cannot count it.
    groups: Vec<(GroupId, Option<Arc<GroupSpec>>)>,
    /// One per counted (not `by:`) tracepoint; `None` when it cannot be
    /// counted.
    tracepoints: Vec<(EventId, Option<PlannedEvent>)>,
    /// One per probe; `None` when it cannot be counted.
    probes: Vec<(EventId, Option<PlannedEvent>)>,
    /// One per `by:` tracepoint; `None` when it cannot be counted.
    sampled: Vec<(SampledId, Option<Arc<SampledSpec>>)>,
    /// The verdict on every group, tracepoint and probe.
    pub support: Vec<Support>,
    /// The config's metrics.
    pub metrics: Vec<Arc<MetricDef>>,
    /// Counters per CPU that the groups some selector counts need, before
    /// any was left out for want of room (see
    /// [`Probe::counters_per_cpu`]).
    pub counters: usize,
    /// What `host:` counts for the whole machine.
    pub host: HostPlan,
    /// The config's `processes:` entries.
    pub processes: Vec<crate::config::ProcessSelector>,
    /// At most this many processes are counted at once.
    pub max_processes: usize,
    /// At most this many cgroups are counted at once, if any limit.
    pub max_cgroups: Option<usize>,
    /// What labels the series of each cgroup gets from its path.
    pub labels: Vec<crate::labels::Extractor>,
    /// The config's events written under another of perf's names than
    /// their `event` label.
    pub spellings: Arc<[Spelling]>,
    /// `energy:` on this machine, if the config has it.
    pub energy: Option<EnergyPlan>,
}

impl Plan {
    /// Resolves everything `config` asks for on `machine`, and asks `probe`
    /// (the counting backend's) whether the kernel counts it.
    ///
    /// What this machine cannot count is disabled with its reason in
    /// [`Plan::support`]. A filter the kernel rejects, or a `by:` field the
    /// tracepoint does not have, is a mistake in the config: that is the
    /// error, positioned at the entry.
    pub fn build(
        config: &Config,
        machine: &Machine,
        probe: &dyn Probe,
    ) -> Result<Self, ConfigError> {
        let mut support = Vec::new();
        let mut groups = Vec::with_capacity(config.groups.len());
        let mut splits = Vec::new();
        for def in &config.groups {
            let id = GroupId::Named(def.name.as_str().into());
            let resolved = match host::cgroup_mistake(def, machine) {
                Some(Err(mistake)) => return Err(mistake),
                Some(Ok(host_only)) => Err(host_only),
                None => resolve_group(def, machine),
            };
            let status = match resolved {
                Err(e) => Err(e),
                Ok(spec) => match spec.probe(probe) {
                    Ok(()) => Ok(spec),
                    Err(refusal) if split::worth_splitting(def, &refusal) => {
                        let (done, parts) = split::parts(&spec, probe);
                        splits.push(done);
                        for (id, status) in parts {
                            support.push(verdict(&id, None, &status));
                            groups.push((id, status.ok().map(Arc::new)));
                        }
                        continue;
                    }
                    Err(refusal) => Err(refusal.into()),
                },
            };
            support.push(verdict(&id, None, &status));
            groups.push((id, status.ok().map(Arc::new)));
        }
        let mut tracepoints = Vec::new();
        let mut sampled = Vec::new();
        for def in &config.tracepoints {
            let status = plan_tracepoint(def, machine, probe)?;
            support.push(verdict(&GroupId::Tracepoints, Some(&def.label), &status));
            let label: Arc<str> = def.label.as_str().into();
            match status {
                Ok(Planned::Counted(event)) => tracepoints.push((event.id(), Some(event))),
                Ok(Planned::Sampled(spec)) => sampled.push((spec.id(), Some(Arc::new(spec)))),
                Err(_) if def.by.is_empty() => {
                    tracepoints.push((
                        EventId {
                            label,
                            clock: false,
                        },
                        None,
                    ));
                }
                Err(_) => {
                    let fields = def.by.iter().map(|f| fields::field_label(f)).collect();
                    sampled.push((SampledId { label, fields }, None));
                }
            }
        }
        group_verdict(
            &mut support,
            &GroupId::Tracepoints,
            config.tracepoints.len(),
            "none of the configured tracepoints can be counted",
        );
        let probes = config
            .probes
            .iter()
            .map(|def| {
                let status = plan_probe(def, machine, probe);
                support.push(verdict(&GroupId::Probes, Some(&def.label), &status));
                let id = EventId {
                    label: def.label.as_str().into(),
                    clock: false,
                };
                (id, status.ok())
            })
            .collect();
        group_verdict(
            &mut support,
            &GroupId::Probes,
            config.probes.len(),
            "none of the configured probes can be counted",
        );
        let mut selectors = config.cgroups.clone();
        let mut metrics: Vec<Arc<MetricDef>> =
            config.metrics.iter().cloned().map(Arc::new).collect();
        let mut processes = config.processes.clone();
        split::rewire_selectors(&splits, &mut selectors);
        split::rewire_selectors(&splits, &mut processes);
        split::rewire_metrics(&splits, &mut metrics);
        let mut plan = Self {
            interval: config.interval,
            per_cpu: config.per_cpu,
            ring_pages: config.ring_pages,
            selectors,
            groups,
            tracepoints,
            probes,
            sampled,
            support,
            metrics,
            counters: 0,
            host: HostPlan::build(&config.host, machine, probe)?,
            processes,
            max_processes: config.max_processes,
            max_cgroups: config.max_cgroups,
            labels: config.labels.clone(),
            spellings: spellings(config),
            energy: None,
        };
        let every: Vec<usize> = (0..plan.selectors.len()).collect();
        plan.counters = plan.groups_for(&every).iter().map(|g| g.events.len()).sum();
        if let Some(max) = probe.counters_per_cpu() {
            plan.fit(max);
        }
        plan.energy = EnergyPlan::of(config.energy, &plan.groups);
        Ok(plan)
    }

    /// [`Plan::build`] on a worker given [`deadline::FILES`]: the plan reads
    /// uprobe binaries (files a user names) and tracefs, which a file system
    /// that does not answer would block for good. Start-up and `cgperf
    /// check` build their plan so; reloads build theirs on such a worker.
    pub fn build_in_time(
        config: &Config,
        machine: &Machine,
        probe: Arc<dyn Probe>,
    ) -> anyhow::Result<Self> {
        let binaries: Vec<String> = config
            .probes
            .iter()
            .filter_map(|p| p.spec.binary())
            .map(|b| b.display().to_string())
            .collect();
        let (config, machine) = (config.clone(), machine.clone());
        let build = move || Self::build(&config, &machine, &*probe);
        match deadline::with_deadline(deadline::FILES, build) {
            Ok(built) => Ok(built?),
            Err(stuck) if binaries.is_empty() => Err(anyhow::anyhow!(
                "building the plan (tracefs formats, a trial open of every group): {stuck}"
            )),
            Err(stuck) => Err(anyhow::anyhow!(
                "building the plan (tracefs formats, the uprobe binaries {}, a trial open of \
                 every group): {stuck}",
                binaries.join(", ")
            )),
        }
    }

    /// The groups to open for a cgroup chosen by `selectors` (indices into
    /// [`Plan::selectors`]): the union of what they ask for, supported groups
    /// only, then counted tracepoints as one group and probes as another.
    pub fn groups_for(&self, selectors: &[usize]) -> Vec<Arc<GroupSpec>> {
        let chosen = self.chosen(selectors);
        self.groups_where(
            |group| chosen.iter().any(|s| s.groups.iter().any(|g| g == group)),
            |label| {
                chosen
                    .iter()
                    .any(|s| s.tracepoints.iter().any(|l| **l == *label))
            },
            |label| {
                chosen
                    .iter()
                    .any(|s| s.probes.iter().any(|l| **l == *label))
            },
        )
    }

    /// The groups to open for a process of `selector`, as
    /// [`Plan::groups_for`] gives a cgroup's.
    pub fn groups_of_process(
        &self,
        selector: &crate::config::ProcessSelector,
    ) -> Vec<Arc<GroupSpec>> {
        self.groups_where(
            |group| selector.groups.iter().any(|g| g == group),
            |label| selector.tracepoints.iter().any(|l| **l == *label),
            |label| selector.probes.iter().any(|l| **l == *label),
        )
    }

    /// The supported groups whose name `group` wants, then the counted
    /// tracepoints whose label `tracepoint` wants as one group, and the
    /// probes `probe` wants as another.
    fn groups_where(
        &self,
        group: impl Fn(&str) -> bool,
        tracepoint: impl Fn(&str) -> bool,
        probe: impl Fn(&str) -> bool,
    ) -> Vec<Arc<GroupSpec>> {
        let mut out: Vec<Arc<GroupSpec>> = self
            .groups
            .iter()
            .filter(|(id, _)| group(id.label()))
            .filter_map(|(_, spec)| spec.clone())
            .collect();
        let lists = [
            (
                GroupId::Tracepoints,
                &self.tracepoints,
                &tracepoint as &dyn Fn(&str) -> bool,
            ),
            (GroupId::Probes, &self.probes, &probe),
        ];
        for (name, events, wanted) in lists {
            let events: Vec<PlannedEvent> = events
                .iter()
                .filter(|(id, _)| wanted(&id.label))
                .filter_map(|(_, event)| event.clone())
                .collect();
            if !events.is_empty() {
                out.push(Arc::new(GroupSpec {
                    name,
                    events,
                    cores: Arc::default(),
                }));
            }
        }
        out
    }

    /// The `by:` tracepoints to sample for a cgroup chosen by `selectors`.
    pub fn sampled_for(&self, selectors: &[usize]) -> Vec<Arc<SampledSpec>> {
        let chosen = self.chosen(selectors);
        self.sampled
            .iter()
            .filter(|(id, _)| {
                chosen
                    .iter()
                    .any(|s| s.tracepoints.iter().any(|l| **l == *id.label))
            })
            .filter_map(|(_, spec)| spec.clone())
            .collect()
    }

    /// The metrics to compute for a cgroup chosen by `selectors`, in the
    /// config's order.
    pub fn metrics_for(&self, selectors: &[usize]) -> Vec<Arc<MetricDef>> {
        self.metrics_named(self.chosen(selectors).iter().flat_map(|s| &s.metrics))
    }

    /// The metrics to compute for the processes of `selector`, in the
    /// config's order.
    pub fn metrics_of_process(&self, s: &crate::config::ProcessSelector) -> Vec<Arc<MetricDef>> {
        self.metrics_named(s.metrics.iter())
    }

    /// The metrics of `names` in the config's order (a set: thousands of
    /// metrics, each against thousands of names, took seconds).
    fn metrics_named<'a>(&self, names: impl Iterator<Item = &'a String>) -> Vec<Arc<MetricDef>> {
        let names: HashSet<&str> = names.map(String::as_str).collect();
        let named = self.metrics.iter().filter(|m| names.contains(&*m.name));
        named.cloned().collect()
    }

    fn chosen(&self, selectors: &[usize]) -> Vec<&CgroupSelector> {
        selectors
            .iter()
            .filter_map(|&i| self.selectors.get(i))
            .collect()
    }
}

/// A tracepoint ready to open, counted or sampled.
enum Planned {
    Counted(PlannedEvent),
    Sampled(SampledSpec),
}

/// Every event of the config's groups written under another of perf's
/// names than its label (`cs` for `context-switches`).
fn spellings(config: &Config) -> Arc<[Spelling]> {
    config
        .groups
        .iter()
        .flat_map(|g| g.events.iter().map(move |e| (g, e)))
        .filter_map(|(g, e)| {
            let label = e.label();
            (label != e.text).then(|| Spelling {
                group: g.name.as_str().into(),
                event: label.into(),
                written: e.text.as_str().into(),
            })
        })
        .collect()
}

fn verdict<T>(group: &GroupId, event: Option<&str>, status: &Result<T, NotCountable>) -> Support {
    Support {
        group: group.clone(),
        event: event.map(Into::into),
        status: status.as_ref().map(|_| ()).map_err(Clone::clone),
    }
}

/// The verdict on the `tracepoints` or `probes` group as a whole: it counts
/// when any of its `n` events can; when none can, for its first event's
/// reason (one cause, such as no permission, usually refuses them all).
fn group_verdict(support: &mut Vec<Support>, group: &GroupId, n: usize, none: &str) {
    if n == 0 {
        return;
    }
    let mut events = support
        .iter()
        .filter(|s| s.group == *group && s.event.is_some());
    let status = match events.clone().find_map(|s| s.status.as_ref().err()) {
        Some(first) if events.all(|s| s.status.is_err()) => {
            Err(NotCountable::new(first.token, format!("{none}: {first}")))
        }
        _ => Ok(()),
    };
    support.push(Support {
        group: group.clone(),
        event: None,
        status,
    });
}
