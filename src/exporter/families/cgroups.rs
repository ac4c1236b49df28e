//! The families of the cgroups: their counts, metrics, group times and
//! support.

use super::shared::{event_support, group_support, group_times};
use super::{Family, Kind, Labels, Point, Unit, Visitor};
use crate::snapshot::{CounterSample, GroupTimeSample, Snapshot};
use crate::totals::GroupTimes;

pub(super) const EVENTS: Family = Family {
    name: "cgperf_events",
    help: "Event counts per cgroup, scaled per interval by enabled/running time when the kernel multiplexes counters.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
pub(super) const CLOCK: Family = Family {
    name: "cgperf_clock",
    help: "CPU time counted by the task-clock and cpu-clock software events, per cgroup.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const METRIC: Family = Family {
    name: "cgperf_metric",
    help: "The value of each metric of the config's `metrics:` per cgroup, over the last interval's counts; none for an interval in which its formula divides by zero (the cgroup did not run). cgperf_metric_definition_info gives each metric's description and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
pub(super) const METRIC_INFO: Family = Family {
    name: "cgperf_metric_definition",
    help: "One per metric of the config's `metrics:` and of `host:`'s `metrics:`, always 1: its description (the formula, unless the config gives one) and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Info,
};
pub(super) const EVENTS_LOST: Family = Family {
    name: "cgperf_events_lost",
    help: "Hits of a tracepoint counted by field value that are in no value series of cgperf_events_total (nor `other`): the ring buffer was full when they happened. Values + other + lost = every hit.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
pub(super) const GROUP_ENABLED: Family = Family {
    name: "cgperf_group_enabled",
    help: "Time the group was enabled (its cgroup was scheduled), summed over CPUs.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const GROUP_RUNNING: Family = Family {
    name: "cgperf_group_running",
    help: "Time the group was actually counting on the PMU; running/enabled is the multiplexing ratio.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const GROUP_NEVER_RAN: Family = Family {
    name: "cgperf_group_never_ran_intervals",
    help: "Intervals in which the group was enabled but never got a counter; they add nothing to cgperf_events_total.",
    unit: Unit::Count("{interval}"),
    kind: Kind::Counter,
};
pub(super) const GROUP_SUPPORTED: Family = Family {
    name: "cgperf_group_supported",
    help: "1 when this machine can count the group, 0 when it cannot; `reason` says why (not_supported: no such counter here, e.g. no hardware PMU; permission; unknown_event; ...), the log and `cgperf check` say it in full.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
pub(super) const EVENT_SUPPORTED: Family = Family {
    name: "cgperf_event_supported",
    help: "1 when this machine can count the tracepoint, 0 when it cannot.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};

fn counter_point(c: &CounterSample) -> Point<'_> {
    Point {
        labels: Labels::Series {
            cgroup: &c.cgroup,
            extra: &c.labels,
            group: &c.group,
            event: Some(&c.event),
            fields: &c.fields,
            cpu: c.cpu,
        },
        value: c.value,
        start: Some(c.start_time),
    }
}

fn time_point(t: &GroupTimeSample, value: f64) -> Point<'_> {
    Point {
        labels: Labels::Series {
            cgroup: &t.cgroup,
            extra: &t.labels,
            group: &t.group,
            event: None,
            fields: &[],
            cpu: t.cpu,
        },
        value,
        start: Some(t.start_time),
    }
}

/// The cgroups' counts and metrics: `cgperf_events_total`,
/// `cgperf_clock_seconds_total`, what `by:` lost, `cgperf_metric` and the
/// metrics' descriptions.
pub(super) fn counts<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    let counters = || snap.counters.iter();
    v.family(&EVENTS, counters().filter(|c| !c.clock).map(counter_point))?;
    v.family(&CLOCK, counters().filter(|c| c.clock).map(counter_point))?;
    v.family(&EVENTS_LOST, snap.events_lost.iter().map(counter_point))?;
    v.family(
        &METRIC,
        snap.metrics.iter().map(|m| Point {
            labels: Labels::Metric {
                cgroup: &m.cgroup,
                extra: &m.labels,
                metric: &m.metric.name,
            },
            value: m.value,
            start: None,
        }),
    )?;
    v.family(
        &METRIC_INFO,
        snap.metric_defs.iter().map(|m| {
            let labels = Labels::Fixed([
                Some(("metric", m.name.as_str())),
                Some(("description", m.description.as_str())),
                Some(("unit", m.unit.as_str())),
            ]);
            Point::fixed(labels, 1.0)
        }),
    )
}

/// The cgroups' group times, then whether each group and tracepoint can be
/// counted here.
pub(super) fn times_and_support<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    group_times(
        v,
        [&GROUP_ENABLED, &GROUP_RUNNING, &GROUP_NEVER_RAN],
        snap.group_times.iter(),
        |t| GroupTimes {
            enabled_seconds: t.enabled_seconds,
            running_seconds: t.running_seconds,
            never_ran_intervals: t.never_ran_intervals,
        },
        time_point,
    )?;
    v.family(&GROUP_SUPPORTED, group_support(&snap.support))?;
    v.family(&EVENT_SUPPORTED, event_support(&snap.support))
}
