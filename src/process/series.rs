//! The series of processes: what names one (the entry, and the comm and
//! pid where it asks for them), and what each shows at a snapshot: its
//! events' totals and its metrics over the interval.

use super::Processes;
use crate::ids::CgroupSlot;
use crate::metrics::LastTotals;
use crate::snapshot::{ProcessCount, ProcessGroupTime, ProcessMetricSample, ProcessSample};
use crate::totals::{GroupTimes, exported_total};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// What names a process series: the entry, and the comm and pid where it
/// asks for them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SeriesId {
    pub(super) process: Arc<str>,
    pub(super) comm: Option<Arc<str>>,
    pub(super) pid: Option<u32>,
}

#[derive(Debug)]
pub(super) struct Series {
    /// Its totals' key.
    pub(super) slot: CgroupSlot,
    pub(super) start_time: SystemTime,
    /// When it began, for metrics of the time counted.
    pub(super) began: Instant,
    /// Its metrics' inputs at the last collection.
    pub(super) last: LastTotals,
}

/// What the processes counted now: their series, how many each entry
/// counts, and the entries' metrics over the last interval.
#[derive(Debug, Default)]
pub(super) struct Shown {
    /// Every series.
    pub(super) counters: Vec<ProcessSample>,
    /// Each series' group times.
    pub(super) group_times: Vec<ProcessGroupTime>,
    /// Processes counted per entry.
    pub(super) counts: Vec<ProcessCount>,
    /// The value of each metric of each series over the interval.
    pub(super) metrics: Vec<ProcessMetricSample>,
}

impl Processes {
    /// The totals' key of series `id`, made (starting now) if it is new.
    pub(super) fn series_slot(&mut self, id: SeriesId) -> CgroupSlot {
        let next_slot = &mut self.next_slot;
        self.series
            .entry(id)
            .or_insert_with(|| {
                *next_slot += 1;
                Series {
                    slot: CgroupSlot(*next_slot),
                    start_time: SystemTime::now(),
                    began: Instant::now(),
                    last: LastTotals::default(),
                }
            })
            .slot
    }

    /// The series of every entry now, how many processes each counts, and
    /// the metrics of each series over the interval that ends `now`.
    pub(super) fn samples(&mut self, now: Instant) -> Shown {
        let mut shown = Shown::default();
        for (id, series) in &mut self.series {
            let Some(selected) = self.selected.iter().find(|s| s.name == id.process) else {
                continue;
            };
            let first = shown.counters.len();
            for spec in &selected.groups {
                let group: Arc<str> = spec.name.label().into();
                for (position, event) in spec.events.iter().enumerate() {
                    let parts = self.totals.per_cpu(series.slot, &spec.name).map(|(_, t)| t);
                    let value = exported_total(parts, position, &event.label, event.clock);
                    shown.counters.push(ProcessSample {
                        process: id.process.clone(),
                        comm: id.comm.clone(),
                        pid: id.pid,
                        group: group.clone(),
                        event: event.label.clone(),
                        clock: event.clock,
                        value,
                        start_time: series.start_time,
                    });
                }
                let parts = self.totals.per_cpu(series.slot, &spec.name).map(|(_, t)| t);
                shown.group_times.push(ProcessGroupTime {
                    process: id.process.clone(),
                    comm: id.comm.clone(),
                    pid: id.pid,
                    group,
                    times: GroupTimes::of(parts),
                    start_time: series.start_time,
                });
            }
            if selected.metrics.is_empty() {
                continue;
            }
            let counted = &shown.counters[first..];
            let values = || counted.iter().map(|c| (&*c.group, &*c.event, c.value));
            let metrics = series
                .last
                .next_over(&selected.metrics, (series.began, now), values);
            for (metric, value) in metrics {
                shown.metrics.push(ProcessMetricSample {
                    process: id.process.clone(),
                    comm: id.comm.clone(),
                    pid: id.pid,
                    metric,
                    value,
                });
            }
        }
        shown.counts = self
            .selected
            .iter()
            .map(|s| ProcessCount {
                process: s.name.clone(),
                counted: self
                    .counted
                    .keys()
                    .filter(|(name, _, _)| *name == s.name)
                    .count() as u64,
                possibly_uncounted: self.unsure.get(&s.name).copied().unwrap_or(0),
            })
            .collect();
        shown
    }
}
