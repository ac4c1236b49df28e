//! From the counted cgroups and their totals to the series of a snapshot.

use super::counting::Entry;
use crate::ids::GroupId;
use crate::plan::{GroupSpec, SampledSpec};
use crate::snapshot::{CounterSample, GroupTimeSample};
use crate::totals::{Counts, GroupTotals, SampledKey, Totals};
use std::sync::Arc;

/// Every series of the counted cgroups.
#[derive(Debug, Default)]
pub(super) struct AllSeries {
    pub counters: Vec<CounterSample>,
    pub group_times: Vec<GroupTimeSample>,
    pub events_lost: Vec<CounterSample>,
}

impl AllSeries {
    /// The series of every entry, per CPU or summed over CPUs.
    pub fn of<'a>(
        entries: impl Iterator<Item = &'a Entry> + Clone,
        totals: &Totals,
        per_cpu: bool,
    ) -> Self {
        let mut all = Self::default();
        // Sized up front: a snapshot of thousands of cgroups is the largest
        // thing cgperf holds, and growing it by doubling wastes up to half.
        let (mut counters, mut times) = (0, 0);
        for entry in entries.clone() {
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
        for entry in entries {
            for spec in &entry.wanted.groups {
                let id = spec.id();
                let cpus = totals.per_cpu(entry.slot, &id);
                if per_cpu {
                    for (cpu, t) in cpus {
                        all.push_group(entry, spec, Some(cpu), &[t]);
                    }
                } else {
                    parts.clear();
                    parts.extend(cpus.map(|(_, t)| t));
                    all.push_group(entry, spec, None, &parts);
                }
            }
            for spec in &entry.wanted.sampled {
                let key = SampledKey {
                    cgroup: entry.slot,
                    id: spec.id(),
                };
                let empty = Counts::default();
                let counts = totals.counts(&key).unwrap_or(&empty);
                all.push_sampled(entry, spec, counts);
            }
        }
        all
    }

    fn sample(entry: &Entry, group: &GroupId, event: &Arc<str>) -> CounterSample {
        CounterSample {
            cgroup: entry.path.clone(),
            labels: entry.labels.clone(),
            group: group.shared_label(),
            event: event.clone(),
            fields: Box::new([]),
            cpu: None,
            value: 0.0,
            clock: false,
            start_time: entry.created,
        }
    }

    /// Adds one group's series: the sum of `parts` (one CPU's totals, or
    /// every CPU's).
    fn push_group(
        &mut self,
        entry: &Entry,
        spec: &GroupSpec,
        cpu: Option<u32>,
        parts: &[&GroupTotals],
    ) {
        let group = spec.id();
        for (i, event) in spec.events.iter().enumerate() {
            let value: f64 = parts
                .iter()
                .map(|t| t.value_at(i, &event.label, event.clock))
                .sum();
            self.counters.push(CounterSample {
                cpu,
                value: if event.clock { value / 1e9 } else { value },
                clock: event.clock,
                ..Self::sample(entry, &group, &event.label)
            });
        }
        self.group_times.push(GroupTimeSample {
            cgroup: entry.path.clone(),
            labels: entry.labels.clone(),
            group: group.shared_label(),
            cpu,
            enabled_seconds: parts.iter().map(|t| t.enabled_ns).sum::<u64>() as f64 / 1e9,
            running_seconds: parts.iter().map(|t| t.running_ns).sum::<u64>() as f64 / 1e9,
            never_ran_intervals: parts.iter().map(|t| t.never_ran_intervals).sum(),
            start_time: entry.created,
        });
    }

    /// Adds the series of one `by:` tracepoint: one per value combination
    /// (summed over CPUs: samples are counted where they are decoded), and
    /// the hits known to be lost.
    fn push_sampled(&mut self, entry: &Entry, spec: &SampledSpec, counts: &Counts) {
        let group = GroupId::Tracepoints;
        for (values, n) in counts.series(spec.fields.len()) {
            let fields = spec
                .fields
                .iter()
                .zip(values)
                .map(|((name, _), value)| (name.clone(), Box::from(value)))
                .collect();
            self.counters.push(CounterSample {
                fields,
                value: n as f64,
                ..Self::sample(entry, &group, &spec.label)
            });
        }
        self.events_lost.push(CounterSample {
            value: counts.lost() as f64,
            ..Self::sample(entry, &group, &spec.label)
        });
    }
}
