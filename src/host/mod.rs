//! The host as a target: the groups of `host:` opened system-wide (as
//! `perf stat -a` opens them), on every online CPU or on the CPUs of their
//! PMU's `cpumask`, and read at every collection into totals of their own.
//! Whatever the backend counts cgroups with, the host is counted so: it is
//! one target, and system-wide perf events are the only mechanism that
//! counts the PMUs outside the cores.
//!
//! The rules are the cgroups': counts are scaled per interval, a reload
//! that keeps a group keeps its descriptors and totals (and a changed group
//! keeps the totals of the events it still has), everything is read before
//! it is closed, and a CPU that goes offline is read one last time.

mod scope;

use scope::of_cpumask;
pub use scope::{CPU_ROOT, SocketSums, Sockets, of_cpumask as scope_of_cpumask, socket_of};

use crate::backend::budget::Fds;
use crate::backend::reading::Reader;
use crate::config::MetricDef;
use crate::cpus::CpuChanges;
use crate::events::ScaleUnit;
use crate::ids::{CgroupSlot, EventId, GroupId};
use crate::metrics::LastTotals;
use crate::perf::{self, CounterGroup, OpenFailure};
use crate::plan::{HostGroup, HostPlan, Plan};
use crate::snapshot::{
    ErrorReason, Errors, HostGroupTime, HostMetricSample, HostSample, HostUnit, Operation, Scope,
    Snapshot,
};
use crate::target::Target;
use crate::totals::{GroupKey, GroupTimes, GroupTotals, Totals, exported_total};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// The key of the host's totals: the host is the only target they hold.
const HOST: CgroupSlot = CgroupSlot(0);

/// Bytes in a MiB, the unit the kernel gives memory controller counts in.
const MIB: f64 = 1024.0 * 1024.0;

/// Counts `host:` for the whole machine.
#[derive(Debug)]
pub struct Host {
    groups: Vec<Counted>,
    totals: Totals,
    /// The metrics of `host:`.
    metrics: Vec<Arc<MetricDef>>,
    /// Their inputs' totals at the last snapshot.
    last: LastTotals,
    /// When counting began (the first plan applied), from which the
    /// metrics' `duration_time` is measured.
    began: Option<Instant>,
    /// Where every descriptor is counted (`cgperf_open_fds`), and how
    /// many cgperf may hold, with everything else's.
    fds: Fds,
}

/// One group of `host:` and what counts it.
#[derive(Debug)]
struct Counted {
    group: Arc<HostGroup>,
    /// Open on each CPU.
    open: BTreeMap<u32, Reader>,
    /// Each CPU's scope, for a group whose PMU has a `cpumask`.
    scopes: BTreeMap<u32, Scope>,
    /// When its series began.
    start_time: SystemTime,
}

impl Host {
    /// Counts nothing yet; descriptors are counted in `fds`, and a group
    /// that would take more than its budget leaves is not opened.
    pub fn new(fds: Fds) -> Self {
        Self {
            groups: Vec::new(),
            totals: Totals::default(),
            metrics: Vec::new(),
            last: LastTotals::default(),
            began: None,
            fds,
        }
    }

    /// Counts what `plan` asks on the `online` CPUs: what did not change
    /// keeps counting, changed groups are read and opened anew keeping the
    /// totals of the events they still have, groups gone are read, closed
    /// and forgotten.
    fn apply_host(&mut self, plan: &HostPlan, online: &[u32], errors: &mut Errors) {
        self.read_all(errors);
        self.began.get_or_insert_with(Instant::now);
        self.metrics = plan.metrics.clone();
        let mut before = std::mem::take(&mut self.groups);
        for group in &plan.groups {
            let kept = before.iter().position(|c| c.group == *group);
            let counted = match kept {
                Some(at) => before.swap_remove(at),
                None => {
                    let earlier = before.iter().find(|c| c.group.spec.name == group.spec.name);
                    Counted {
                        group: group.clone(),
                        open: BTreeMap::new(),
                        scopes: match &group.cpumask {
                            Some(cpus) => {
                                let scopes = of_cpumask(Path::new(CPU_ROOT), cpus);
                                cpus.iter().copied().zip(scopes).collect()
                            }
                            None => BTreeMap::new(),
                        },
                        start_time: earlier.map_or_else(SystemTime::now, |c| c.start_time),
                    }
                }
            };
            self.groups.push(counted);
        }
        drop(before);
        let keep: Vec<(GroupId, Vec<EventId>)> = self
            .groups
            .iter()
            .map(|c| (c.group.spec.name.clone(), c.group.spec.event_ids()))
            .collect();
        self.totals.keep_only(HOST, &keep, &[]);
        self.open_missing(online, errors);
    }

    /// Reads every open group into the totals.
    fn read_all(&mut self, errors: &mut Errors) {
        for reader in self.groups.iter_mut().flat_map(|c| c.open.values_mut()) {
            reader.read(&mut self.totals, errors);
        }
    }

    /// Opens every group where it counts and is not open yet. A refusal is
    /// counted and logged; the next change of CPUs or config tries again.
    fn open_missing(&mut self, online: &[u32], errors: &mut Errors) {
        for counted in &mut self.groups {
            let spec = &counted.group.spec;
            let events = spec.event_ids();
            let cpus: Vec<u32> = match &counted.group.cpumask {
                Some(cpus) => cpus.to_vec(),
                None => online
                    .iter()
                    .copied()
                    .filter(|&cpu| spec.counts_on(cpu))
                    .collect(),
            };
            let missing: Vec<u32> = cpus
                .into_iter()
                .filter(|cpu| !counted.open.contains_key(cpu))
                .collect();
            // All of its CPUs or none: a sum over some would pass for the
            // whole machine's.
            let cost = (spec.events.len() * missing.len()) as u64;
            if !self.fds.fit(cost) {
                errors.count(
                    Operation::Open,
                    ErrorReason::Kernel(OpenFailure::TooManyOpenFiles),
                );
                tracing::warn!(
                    "host group `{}` is not opened on CPUs {missing:?}: its perf descriptors \
                     would exceed the open-files limit (raise LimitNOFILE / ulimit -n); the \
                     next change of CPUs or config tries again",
                    spec.name
                );
                continue;
            }
            for cpu in missing {
                let Some(attrs) = spec.attrs_on(cpu) else {
                    continue;
                };
                match CounterGroup::open_filtered(
                    &attrs,
                    &spec.filters(),
                    perf::Target::AllTasks,
                    cpu,
                ) {
                    Ok(group) => {
                        let key = GroupKey {
                            cgroup: HOST,
                            group: spec.name.clone(),
                            cpu,
                        };
                        let reader =
                            Reader::new(group, &self.fds.tally, &mut self.totals, &key, &events);
                        counted.open.insert(cpu, reader);
                    }
                    Err(e) => {
                        let failure = OpenFailure::from_errno(e.errno);
                        errors.count(Operation::Open, ErrorReason::Kernel(failure));
                        tracing::warn!(
                            "host group `{}` on CPU {cpu} could not be opened: {e}",
                            spec.name
                        );
                    }
                }
            }
        }
    }

    /// The host's series now, and its groups' times: per socket or die for
    /// a PMU that counts so, else summed over CPUs (per CPU when
    /// `per_cpu`).
    fn samples(&self, per_cpu: bool) -> (Vec<HostSample>, Vec<HostGroupTime>) {
        let mut out = Vec::new();
        let mut times = Vec::new();
        for counted in &self.groups {
            let spec = &counted.group.spec;
            let group: Arc<str> = spec.name.label().into();
            let mut parts: BTreeMap<Scope, Vec<&GroupTotals>> = BTreeMap::new();
            for (cpu, totals) in self.totals.per_cpu(HOST, &spec.name) {
                let scope = match counted.scopes.get(&cpu) {
                    Some(scope) => *scope,
                    None if counted.group.cpumask.is_some() => Scope::Cpu(cpu),
                    None if per_cpu => Scope::Cpu(cpu),
                    None => Scope::Machine,
                };
                parts.entry(scope).or_default().push(totals);
            }
            for (position, event) in spec.events.iter().enumerate() {
                let scale = counted.group.units.get(position).and_then(Option::as_ref);
                let (unit, factor) = unit_of(scale, event.clock);
                out.extend(parts.iter().map(|(scope, parts)| HostSample {
                    group: group.clone(),
                    event: event.label.clone(),
                    scope: *scope,
                    unit,
                    value: exported_total(
                        parts.iter().copied(),
                        position,
                        &event.label,
                        event.clock,
                    ) * factor,
                    start_time: counted.start_time,
                }));
            }
            times.extend(parts.iter().map(|(scope, parts)| HostGroupTime {
                group: group.clone(),
                scope: *scope,
                times: GroupTimes::of(parts.iter().copied()),
                start_time: counted.start_time,
            }));
        }
        (out, times)
    }
}

impl Host {
    /// The value of each metric over the interval that ends `now`, from the
    /// host's series `shown`: each input summed over every CPU, socket and
    /// die it counts on, in the unit it is exported in.
    fn metrics_over(&mut self, shown: &[HostSample], now: Instant) -> Vec<HostMetricSample> {
        if self.metrics.is_empty() {
            return Vec::new();
        }
        let began = self.began.unwrap_or(now);
        let series = || shown.iter().map(|h| (&*h.group, &*h.event, h.value));
        self.last
            .next_over(&self.metrics, (began, now), series)
            .into_iter()
            .map(|(metric, value)| HostMetricSample { metric, value })
            .collect()
    }
}

impl Target for Host {
    fn apply(&mut self, plan: &Plan, online: &[u32], errors: &mut Errors) {
        self.apply_host(&plan.host, online, errors);
    }

    fn read(&mut self, errors: &mut Errors) {
        self.read_all(errors);
    }

    /// Follows CPUs going offline (read a last time, closed) and coming
    /// (back) online (opened; closed first when they went offline and came
    /// back since the last look). Groups of a PMU with a `cpumask` keep their
    /// descriptors: the kernel moves them to another CPU of the socket or
    /// die when theirs goes offline.
    fn cpus_changed(&mut self, changes: &CpuChanges, online: &[u32], errors: &mut Errors) {
        if self.groups.is_empty() {
            return;
        }
        self.read_all(errors);
        // A CPU to open again went offline and came back since the last
        // look: its descriptors are dead although it is online.
        let dead = |cpu: &u32| changes.closed.contains(cpu) || changes.open.contains(cpu);
        for counted in self.groups.iter_mut().filter(|c| c.group.cpumask.is_none()) {
            counted.open.retain(|cpu, _| !dead(cpu));
        }
        self.open_missing(online, errors);
    }

    /// A group the kernel refused is tried again at the next change of
    /// CPUs or config, not at every collection.
    fn follow(&mut self, _plan: &Plan, _online: &[u32], _errors: &mut Errors) {}

    fn show(&mut self, plan: &Plan, now: Instant, snapshot: &mut Snapshot) {
        (snapshot.host, snapshot.host_group_times) = self.samples(plan.per_cpu);
        snapshot.host_metrics = self.metrics_over(&snapshot.host, now);
    }
}

/// The unit an event's exported totals are in, and what turns one into it:
/// seconds for clocks (exported so already), Joules and bytes for the units
/// sysfs gives energy and memory traffic in, a count (scaled by `.scale`
/// where sysfs gives one) otherwise.
fn unit_of(scale: Option<&ScaleUnit>, clock: bool) -> (HostUnit, f64) {
    match (scale, clock) {
        (_, true) => (HostUnit::Seconds, 1.0),
        (Some(s), false) if s.unit.eq_ignore_ascii_case("joules") => (HostUnit::Joules, s.scale),
        (Some(s), false) if s.unit == "MiB" => (HostUnit::Bytes, s.scale * MIB),
        (Some(s), false) => (HostUnit::Count, s.scale),
        (None, false) => (HostUnit::Count, 1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaled(scale: f64, unit: &str) -> ScaleUnit {
        ScaleUnit {
            scale,
            unit: unit.to_owned(),
        }
    }

    #[test]
    fn energy_is_in_joules_memory_traffic_in_bytes_and_clocks_in_seconds() {
        let rapl = scaled(2f64.powi(-32), "Joules");
        assert_eq!(
            unit_of(Some(&rapl), false),
            (HostUnit::Joules, 2f64.powi(-32))
        );
        // 64-byte cache lines, counted by the kernel in MiB.
        let cas = scaled(6.103515625e-5, "MiB");
        assert_eq!(unit_of(Some(&cas), false), (HostUnit::Bytes, 64.0));
        assert_eq!(unit_of(None, true), (HostUnit::Seconds, 1.0));
        assert_eq!(unit_of(None, false), (HostUnit::Count, 1.0));
        // A unit cgperf has no family for: the count, scaled.
        let other = scaled(0.5, "cycles");
        assert_eq!(unit_of(Some(&other), false), (HostUnit::Count, 0.5));
    }
}
