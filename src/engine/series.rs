//! From the counted cgroups and their totals to the series of a snapshot.

use super::counting::Entry;
use crate::ids::GroupId;
use crate::plan::{GroupSpec, SampledSpec};
use crate::snapshot::{CounterSample, GroupTimeSample, Labels, SeriesKey};
use crate::totals::{Counts, GroupTotals, SampledKey, Totals};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every series of the counted cgroups.
#[derive(Debug, Default)]
pub(super) struct AllSeries {
    pub counters: Vec<CounterSample>,
    pub group_times: Vec<GroupTimeSample>,
    pub events_lost: Vec<CounterSample>,
}

/// The keys of a counted cgroup's group series and of its `by:` entries'
/// lost-hits series, kept from one snapshot to the next and made again
/// only when what names them changes (a reload, a CPU coming or going with
/// per-CPU output, names from the container runtime): with thousands of
/// cgroups, making and dropping every key each interval was the larger
/// part of a collection.
#[derive(Debug, Default)]
pub(super) struct SeriesKeys {
    /// The labels they were made with.
    labels: Option<Labels>,
    groups: Vec<GroupKeys>,
    lost: Vec<(Arc<SampledSpec>, Arc<[SeriesKey]>)>,
}

/// The keys of one group's series on one CPU (or summed over CPUs).
#[derive(Debug)]
struct GroupKeys {
    spec: Arc<GroupSpec>,
    cpu: Option<u32>,
    /// One per event, in the group's order.
    events: Arc<[SeriesKey]>,
}

impl SeriesKeys {
    /// Forgets every key if the cgroup's labels are not those they were
    /// made with.
    fn check_labels(&mut self, labels: &Labels) {
        if !self.labels.as_ref().is_some_and(|l| Arc::ptr_eq(l, labels)) {
            *self = Self {
                labels: Some(labels.clone()),
                ..Self::default()
            };
        }
    }

    /// The keys of the `n`th group series of the cgroup, `spec` on `cpu`:
    /// those made before if they were made for the same, else new ones
    /// (and those after them are made again too).
    fn group(
        &mut self,
        n: usize,
        entry: &Entry,
        spec: &Arc<GroupSpec>,
        cpu: Option<u32>,
    ) -> &GroupKeys {
        let same = self
            .groups
            .get(n)
            .is_some_and(|k| k.cpu == cpu && Arc::ptr_eq(&k.spec, spec));
        if !same {
            self.groups.truncate(n);
            let group = spec.id().shared_label();
            let events = spec
                .events
                .iter()
                .map(|event| SeriesKey {
                    cpu,
                    clock: event.clock,
                    ..key(entry, &group, &event.label)
                })
                .collect();
            self.groups.push(GroupKeys {
                spec: spec.clone(),
                cpu,
                events,
            });
        }
        &self.groups[n]
    }

    /// The key of the lost-hits series of the cgroup's `n`th `by:` entry.
    fn lost(&mut self, n: usize, entry: &Entry, spec: &Arc<SampledSpec>) -> Arc<[SeriesKey]> {
        let same = self.lost.get(n).is_some_and(|(s, _)| Arc::ptr_eq(s, spec));
        if !same {
            self.lost.truncate(n);
            let group = GroupId::Tracepoints.shared_label();
            let key = Arc::from([key(entry, &group, &spec.label)]);
            self.lost.push((spec.clone(), key));
        }
        self.lost[n].1.clone()
    }
}

/// The key of a series of `entry`, summed over CPUs, with no field labels.
fn key(entry: &Entry, group: &Arc<str>, event: &Arc<str>) -> SeriesKey {
    SeriesKey {
        cgroup: entry.path.clone(),
        labels: entry.labels.clone(),
        group: group.clone(),
        event: event.clone(),
        fields: Box::new([]),
        cpu: None,
        clock: false,
        start_time: entry.created,
    }
}

impl AllSeries {
    /// The series of every entry, per CPU or summed over CPUs. Each entry
    /// keeps the keys of its series for the next time.
    pub fn of(entries: &mut BTreeMap<String, Entry>, totals: &Totals, per_cpu: bool) -> Self {
        let mut all = Self::default();
        // Sized up front: a snapshot of thousands of cgroups is the largest
        // thing cgperf holds, and growing it by doubling wastes up to half.
        let (mut counters, mut times) = (0, 0);
        for entry in entries.values() {
            for spec in &entry.wanted.groups {
                let n = if per_cpu {
                    totals.per_cpu(entry.slot, &spec.id()).count()
                } else {
                    1
                };
                counters += n * spec.events.len();
                times += n;
            }
        }
        all.counters.reserve_exact(counters);
        all.group_times.reserve_exact(times);
        // Reused for every group: summing over CPUs allocates nothing.
        let mut parts: Vec<&GroupTotals> = Vec::new();
        for entry in entries.values_mut() {
            let mut keys = std::mem::take(&mut entry.keys);
            keys.check_labels(&entry.labels);
            let mut n = 0;
            for spec in &entry.wanted.groups {
                let id = spec.id();
                let cpus = totals.per_cpu(entry.slot, &id);
                if per_cpu {
                    for (cpu, t) in cpus {
                        let names = keys.group(n, entry, spec, Some(cpu));
                        all.push_group(entry, spec, names, &[t]);
                        n += 1;
                    }
                } else {
                    parts.clear();
                    parts.extend(cpus.map(|(_, t)| t));
                    let names = keys.group(n, entry, spec, None);
                    all.push_group(entry, spec, names, &parts);
                    n += 1;
                }
            }
            keys.groups.truncate(n);
            for (n, spec) in entry.wanted.sampled.iter().enumerate() {
                let key = SampledKey {
                    cgroup: entry.slot,
                    id: spec.id(),
                };
                let empty = Counts::default();
                let counts = totals.counts(&key).unwrap_or(&empty);
                let lost = keys.lost(n, entry, spec);
                all.push_sampled(entry, spec, counts, lost);
            }
            keys.lost.truncate(entry.wanted.sampled.len());
            entry.keys = keys;
        }
        all
    }

    /// Adds one group's series (named by `names`): the sum of `parts` (one
    /// CPU's totals, or every CPU's).
    fn push_group(
        &mut self,
        entry: &Entry,
        spec: &GroupSpec,
        names: &GroupKeys,
        parts: &[&GroupTotals],
    ) {
        for (i, event) in spec.events.iter().enumerate() {
            // Not `sum()`: an empty sum of floats is -0.0, which would be
            // exported as such for a group not read yet.
            let value = parts
                .iter()
                .fold(0.0, |sum, t| sum + t.value_at(i, &event.label, event.clock));
            let value = if event.clock { value / 1e9 } else { value };
            self.counters
                .extend(CounterSample::of(&names.events, i, value));
        }
        let group = names
            .events
            .first()
            .map_or_else(|| spec.id().shared_label(), |k| k.group.clone());
        self.group_times.push(GroupTimeSample {
            cgroup: entry.path.clone(),
            labels: entry.labels.clone(),
            group,
            cpu: names.cpu,
            enabled_seconds: parts.iter().map(|t| t.enabled_ns).sum::<u64>() as f64 / 1e9,
            running_seconds: parts.iter().map(|t| t.running_ns).sum::<u64>() as f64 / 1e9,
            never_ran_intervals: parts.iter().map(|t| t.never_ran_intervals).sum(),
            start_time: entry.created,
        });
    }

    /// Adds the series of one `by:` tracepoint: one per value combination
    /// (summed over CPUs: samples are counted where they are decoded), and
    /// the hits known to be lost.
    fn push_sampled(
        &mut self,
        entry: &Entry,
        spec: &SampledSpec,
        counts: &Counts,
        lost: Arc<[SeriesKey]>,
    ) {
        let group = GroupId::Tracepoints.shared_label();
        for (values, n) in counts.series(spec.fields.len()) {
            let fields = spec
                .fields
                .iter()
                .zip(values)
                .map(|((name, _), value)| (name.clone(), Box::from(value)))
                .collect();
            let key = SeriesKey {
                fields,
                ..key(entry, &group, &spec.label)
            };
            self.counters.push(CounterSample::new(key, n as f64));
        }
        self.events_lost
            .extend(CounterSample::of(&lost, 0, counts.lost() as f64));
    }
}
