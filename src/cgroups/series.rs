//! From the counted cgroups and their totals to the series of a snapshot,
//! and to what each did on each socket (`activity.rs`), in the same pass.

use super::activity::{self, Weight};
use super::counting::Entry;
use super::keys::{CgroupNames, GroupKeys, Shown};
use crate::events::{SYSCALL_LABEL, syscall_name};
use crate::host::SocketSums;
use crate::ids::GroupId;
use crate::plan::{GroupSpec, SampledSpec};
use crate::snapshot::{Activity, CounterSample, GroupTimeSample, MetricSample, Parts, SeriesKey};
use crate::totals::{Counts, GroupTimes, GroupTotals, SampledKey, Totals, exported_total};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Every series of the counted cgroups.
#[derive(Debug, Default)]
pub(super) struct AllSeries {
    pub counters: Parts<CounterSample>,
    pub group_times: Parts<GroupTimeSample>,
    pub events_lost: Parts<CounterSample>,
    pub metrics: Vec<MetricSample>,
    /// What each entry that counts the weight event did on each socket.
    pub activity: Activity,
}

/// The series of one cgroup being made; reused from one cgroup to the
/// next, so that making them allocates only the parts they end in.
#[derive(Debug, Default)]
struct Making {
    counters: Vec<CounterSample>,
    group_times: Vec<GroupTimeSample>,
    events_lost: Vec<CounterSample>,
}

impl AllSeries {
    /// The series of every entry, per CPU or summed over CPUs, at `now`.
    /// With a `weight`, also what each entry that counts it did on each
    /// socket. An entry whose totals did not change since the last call
    /// (`totals` knows) and that still has the series it showed then (it
    /// loses them when what names them changes) shows them again, and its
    /// sums per socket: a collection reads only the totals of cgroups that
    /// counted something. Each entry keeps its keys, series and sums for
    /// the next time.
    pub fn of(
        entries: &mut BTreeMap<String, Entry>,
        totals: &mut Totals,
        per_cpu: bool,
        mut weight: Option<Weight<'_>>,
        now: Instant,
    ) -> Self {
        let changed = totals.take_changed();
        let totals: &Totals = totals;
        let label = weight.as_ref().map(|w| w.label);
        // Reused for every group: summing over CPUs allocates nothing.
        let mut parts = Vec::new();
        let mut all = Self {
            counters: Parts::with_capacity(entries.len()),
            group_times: Parts::with_capacity(entries.len()),
            events_lost: Parts::default(),
            metrics: Vec::new(),
            activity: Activity::default(),
        };
        let mut activity = weight.as_ref().map(|w| Activity::after(w.last));
        let mut making = Making::default();
        for entry in entries.values_mut() {
            let shown = match entry.shown.take() {
                Some(shown)
                    if shown.per_cpu == per_cpu
                        && shown.weight == label
                        && !changed.contains(&entry.slot) =>
                {
                    shown
                }
                _ => making.shown(entry, totals, &mut parts, per_cpu, weight.as_mut()),
            };
            all.counters.push_part(shown.counters.clone());
            all.group_times.push_part(shown.group_times.clone());
            all.events_lost.push_part(shown.events_lost.clone());
            all.push_metrics(entry, &shown.counters, now);
            if let (Some(activity), Some(sockets)) = (&mut activity, &shown.activity) {
                activity.push(&entry.path, entry.labels(), entry.created, sockets);
            }
            entry.shown = Some(shown);
        }
        if let (Some(activity), Some(weight)) = (activity, weight) {
            all.activity = activity.finish();
            weight.last.clone_from(all.activity.cgroups());
        }
        all
    }

    /// Adds the values of `entry`'s metrics over the interval that ends
    /// `now`, from its `counted` series, summed over CPUs.
    fn push_metrics(&mut self, entry: &mut Entry, counted: &[CounterSample], now: Instant) {
        if entry.metrics.is_empty() {
            return;
        }
        let series = || counted.iter().map(|c| (&*c.group, &*c.event, c.value));
        let values = entry
            .last
            .next_over(&entry.metrics, (entry.began, now), series);
        for (metric, value) in values {
            self.metrics.push(MetricSample {
                cgroup: entry.path.clone(),
                labels: entry.labels().clone(),
                metric,
                value,
            });
        }
    }
}

impl Making {
    /// Makes the series of `entry` from `totals`, and keeps their keys in
    /// it for the next time; with a `weight`, sums the weight event per
    /// socket from the same totals, as they are read for its series.
    /// `parts` is scratch room for the totals of a group on every CPU.
    fn shown<'t>(
        &mut self,
        entry: &mut Entry,
        totals: &'t Totals,
        parts: &mut Vec<(u32, &'t GroupTotals)>,
        per_cpu: bool,
        mut weight: Option<&mut Weight<'_>>,
    ) -> Shown {
        let weighed = weight
            .as_ref()
            .and_then(|w| activity::weighed(&entry.wanted().groups, w.label));
        // A cgroup none of whose groups counts the weight shows no
        // activity; one that does and has no totals yet, none on any socket.
        let mut sockets = weighed.map(|_| SocketSums::new());
        let mut keys = std::mem::take(&mut entry.keys);
        keys.check_labels(entry.labels());
        let names = CgroupNames {
            path: &entry.path,
            labels: entry.labels(),
            created: entry.created,
        };
        let mut n = 0;
        for (g, spec) in entry.wanted().groups.iter().enumerate() {
            let id = spec.id();
            parts.clear();
            parts.extend(totals.per_cpu(entry.slot, &id));
            // The weight event's totals summed per socket and in all, in
            // the pass that reads them, and that total shown as its series.
            let at = weighed.filter(|&(w, _)| w == g).map(|(_, at)| at);
            let mut total = None;
            if let Some(at) = at
                && let Some(event) = spec.events.get(at)
                && let Some(weight) = weight.as_mut()
                && let Some(sums) = sockets.as_mut()
            {
                let value = |t: &&GroupTotals| t.value_at(at, &event.label, event.clock);
                let sum = weight.sockets.weigh(parts, value, event.clock, sums);
                total = Some((at, sum));
            }
            if per_cpu {
                for part in parts.chunks(1) {
                    let cpu = part.first().map(|&(cpu, _)| cpu);
                    let group = keys.group(n, &names, spec, cpu);
                    self.push_group(entry, spec, group, part, None);
                    n += 1;
                }
            } else {
                let group = keys.group(n, &names, spec, None);
                self.push_group(entry, spec, group, parts, total);
                n += 1;
            }
        }
        let groups = n;
        for (n, spec) in entry.wanted().sampled.iter().enumerate() {
            let key = SampledKey {
                cgroup: entry.slot,
                id: spec.id(),
            };
            let empty = Counts::default();
            let counts = totals.counts(&key).unwrap_or(&empty);
            let lost = keys.lost(n, &names, spec);
            self.push_sampled(&names, spec, counts, lost);
        }
        keys.keep(groups, entry.wanted().sampled.len());
        entry.keys = keys;
        Shown {
            counters: self.counters.drain(..).collect(),
            group_times: self.group_times.drain(..).collect(),
            events_lost: self.events_lost.drain(..).collect(),
            per_cpu,
            weight: weight.map(|w| w.label),
            activity: sockets,
        }
    }

    /// Adds one group's series (named by `names`): the sum of `parts` (one
    /// CPU's totals, or every CPU's). `weight` is the position of the
    /// weight event and its total over `parts` as exported, where it was
    /// summed already.
    fn push_group(
        &mut self,
        entry: &Entry,
        spec: &GroupSpec,
        names: &GroupKeys,
        parts: &[(u32, &GroupTotals)],
        weight: Option<(usize, f64)>,
    ) {
        let parts = || parts.iter().map(|&(_, t)| t);
        for (i, event) in spec.events.iter().enumerate() {
            let value = match weight {
                Some((at, value)) if at == i => value,
                _ => exported_total(parts(), i, &event.label, event.clock),
            };
            self.counters
                .extend(CounterSample::of(&names.events, i, value));
        }
        let group = names
            .events
            .first()
            .map_or_else(|| spec.id().shared_label(), |k| k.group.clone());
        let times = GroupTimes::of(parts());
        self.group_times.push(GroupTimeSample {
            cgroup: entry.path.clone(),
            labels: entry.labels().clone(),
            group,
            cpu: names.cpu,
            enabled_seconds: times.enabled_seconds,
            running_seconds: times.running_seconds,
            never_ran_intervals: times.never_ran_intervals,
            start_time: entry.created,
        });
    }

    /// Adds the series of one `by:` tracepoint: one per value combination
    /// (summed over CPUs: samples are counted where they are decoded), and
    /// the hits known to be lost.
    fn push_sampled(
        &mut self,
        names: &CgroupNames<'_>,
        spec: &SampledSpec,
        counts: &Counts,
        lost: Arc<[SeriesKey]>,
    ) {
        let group = GroupId::Tracepoints.shared_label();
        let syscall = spec
            .syscall_name
            .map(|at| (at, Arc::<str>::from(SYSCALL_LABEL)));
        for (values, n) in counts.series(spec.fields.len()) {
            let syscall = syscall.as_ref().and_then(|(at, label)| {
                let number = values.get(*at)?;
                Some((label.clone(), Box::from(syscall_name(number))))
            });
            let fields = spec
                .fields
                .iter()
                .zip(values)
                .map(|((name, _), value)| (name.clone(), Box::from(value)))
                .chain(syscall)
                .collect();
            let key = SeriesKey {
                fields,
                ..names.key(&group, &spec.label)
            };
            self.counters.push(CounterSample::new(key, n as f64));
        }
        self.events_lost
            .extend(CounterSample::of(&lost, 0, counts.lost() as f64));
    }
}
