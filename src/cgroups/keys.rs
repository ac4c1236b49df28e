//! What a counted cgroup keeps of its series from one snapshot to the
//! next: their keys, and the series themselves while nothing that names
//! them changes.

use crate::host::SocketSums;
use crate::ids::GroupId;
use crate::plan::{GroupSpec, SampledSpec};
use crate::snapshot::{CounterSample, GroupTimeSample, Labels, SeriesKey};
use std::sync::Arc;
use std::time::SystemTime;

/// The series of one counted cgroup as the last snapshot showed them:
/// shared with the next one while its totals and what names them do not
/// change.
#[derive(Debug, Clone)]
pub(super) struct Shown {
    pub counters: Arc<[CounterSample]>,
    pub group_times: Arc<[GroupTimeSample]>,
    pub events_lost: Arc<[CounterSample]>,
    /// Whether they are per CPU.
    pub per_cpu: bool,
    /// The event its activity was summed of, if any was asked for.
    pub weight: Option<&'static str>,
    /// What it did on each socket, summed of that event's totals; `None`
    /// where none of its groups counts it.
    pub activity: Option<SocketSums>,
}

/// What names every series of a counted cgroup.
#[derive(Debug, Clone, Copy)]
pub(super) struct CgroupNames<'a> {
    pub path: &'a Arc<str>,
    pub labels: &'a Labels,
    /// When counting it began.
    pub created: SystemTime,
}

impl CgroupNames<'_> {
    /// The key of a series of the cgroup, summed over CPUs, with no field
    /// labels.
    pub fn key(&self, group: &Arc<str>, event: &Arc<str>) -> SeriesKey {
        SeriesKey {
            cgroup: self.path.clone(),
            labels: self.labels.clone(),
            group: group.clone(),
            event: event.clone(),
            fields: Box::new([]),
            cpu: None,
            clock: false,
            start_time: self.created,
        }
    }
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
pub(super) struct GroupKeys {
    spec: Arc<GroupSpec>,
    pub cpu: Option<u32>,
    /// One per event, in the group's order.
    pub events: Arc<[SeriesKey]>,
}

impl SeriesKeys {
    /// Forgets every key if the cgroup's labels are not those they were
    /// made with.
    pub fn check_labels(&mut self, labels: &Labels) {
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
    pub fn group(
        &mut self,
        n: usize,
        names: &CgroupNames<'_>,
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
                    ..names.key(&group, &event.label)
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
    pub fn lost(
        &mut self,
        n: usize,
        names: &CgroupNames<'_>,
        spec: &Arc<SampledSpec>,
    ) -> Arc<[SeriesKey]> {
        let same = self.lost.get(n).is_some_and(|(s, _)| Arc::ptr_eq(s, spec));
        if !same {
            self.lost.truncate(n);
            let group = GroupId::Tracepoints.shared_label();
            let key = Arc::from([names.key(&group, &spec.label)]);
            self.lost.push((spec.clone(), key));
        }
        self.lost[n].1.clone()
    }

    /// Forgets the keys past the cgroup's first `groups` group series and
    /// `lost` lost-hits series: those it no longer has.
    pub fn keep(&mut self, groups: usize, lost: usize) {
        self.groups.truncate(groups);
        self.lost.truncate(lost);
    }
}
