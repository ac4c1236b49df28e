//! The families of `processes:`: each entry's counts, group times and
//! metrics, and how many processes it counts or skipped.

use super::shared::group_times;
use super::{Family, Kind, Labels, Point, ProcessLabels, Unit, Visitor};
use crate::snapshot::{ProcessGroupTime, ProcessSample, Snapshot};

pub(super) const PROCESS_EVENTS: Family = Family {
    name: "cgperf_process_events",
    help: "Event counts of the processes each entry of the config's `processes:` matched, their children and threads included, scaled per interval as cgperf_events_total is; a process that exited keeps what it counted here.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
pub(super) const PROCESS_CLOCK: Family = Family {
    name: "cgperf_process_clock",
    help: "CPU time counted by the task-clock and cpu-clock events of the processes of each entry of `processes:`.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const PROCESS_GROUP_ENABLED: Family = Family {
    name: "cgperf_process_group_enabled",
    help: "Time each group of a `processes:` entry was enabled, summed over its processes' threads (the time they ran).",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const PROCESS_GROUP_RUNNING: Family = Family {
    name: "cgperf_process_group_running",
    help: "Time each group of a `processes:` entry was counting on the PMU; running/enabled is its multiplexing ratio.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const PROCESS_GROUP_NEVER_RAN: Family = Family {
    name: "cgperf_process_group_never_ran_intervals",
    help: "Intervals in which a group of a `processes:` entry was enabled on a thread but never got a counter (summed over threads); they add nothing to its counts.",
    unit: Unit::Count("{interval}"),
    kind: Kind::Counter,
};
pub(super) const PROCESS_METRIC: Family = Family {
    name: "cgperf_process_metric",
    help: "The value of each metric an entry of `processes:` computes, over the last interval's counts of its processes; none for an interval in which its formula divides by zero. cgperf_metric_definition_info gives each metric's description and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
pub(super) const PROCESSES_COUNTED: Family = Family {
    name: "cgperf_processes_counted",
    help: "Processes each entry of `processes:` holds groups on now: those it matched, and the running children a reload that changed its groups opened one by one (children and threads counting through what they inherited not included).",
    unit: Unit::Count("{process}"),
    kind: Kind::Gauge,
};
pub(super) const PROCESSES_POSSIBLY_UNCOUNTED: Family = Family {
    name: "cgperf_processes_possibly_uncounted",
    help: "Children and threads of the processes of each entry of `processes:` that appeared while cgperf opened groups on a process whose threads did not rest during the tries (up to 20 ms): each is taken to inherit them, and one whose creation began before the open is not counted; 0 where none may have been lost.",
    unit: Unit::Count("{task}"),
    kind: Kind::Counter,
};
pub(super) const PROCESSES_SKIPPED: Family = Family {
    name: "cgperf_processes_skipped",
    help: "Processes an entry of `processes:` matched at the last scan but cgperf does not count, by reason: more than max_processes (max_processes), or their perf descriptors would exceed the open-files limit (fd_budget).",
    unit: Unit::Count("{process}"),
    kind: Kind::Gauge,
};

fn process_point(p: &ProcessSample) -> Point<'_> {
    Point {
        labels: Labels::Process {
            of: ProcessLabels {
                process: &p.process,
                comm: p.comm.as_deref(),
                pid: p.pid,
            },
            group: &p.group,
            event: Some(&p.event),
        },
        value: p.value,
        start: Some(p.start_time),
    }
}

/// A point of one of a process series' group times.
fn process_time_point(t: &ProcessGroupTime, value: f64) -> Point<'_> {
    Point {
        labels: Labels::Process {
            of: ProcessLabels {
                process: &t.process,
                comm: t.comm.as_deref(),
                pid: t.pid,
            },
            group: &t.group,
            event: None,
        },
        value,
        start: Some(t.start_time),
    }
}

/// Every family of `processes:`.
pub(super) fn series<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    let processes = || snap.processes.iter();
    v.family(
        &PROCESS_EVENTS,
        processes().filter(|p| !p.clock).map(process_point),
    )?;
    v.family(
        &PROCESS_CLOCK,
        processes().filter(|p| p.clock).map(process_point),
    )?;
    group_times(
        v,
        [
            &PROCESS_GROUP_ENABLED,
            &PROCESS_GROUP_RUNNING,
            &PROCESS_GROUP_NEVER_RAN,
        ],
        snap.process_group_times.iter(),
        |t| t.times,
        process_time_point,
    )?;
    v.family(
        &PROCESS_METRIC,
        snap.process_metrics.iter().map(|m| Point {
            labels: Labels::ProcessMetric {
                of: ProcessLabels {
                    process: &m.process,
                    comm: m.comm.as_deref(),
                    pid: m.pid,
                },
                metric: &m.metric.name,
            },
            value: m.value,
            start: None,
        }),
    )?;
    v.family(
        &PROCESSES_COUNTED,
        snap.process_counts
            .iter()
            .map(|c| Point::fixed(Labels::one("process", &c.process), c.counted as f64)),
    )?;
    v.family(
        &PROCESSES_POSSIBLY_UNCOUNTED,
        snap.process_counts.iter().map(|c| {
            Point::fixed(
                Labels::one("process", &c.process),
                c.possibly_uncounted as f64,
            )
        }),
    )?;
    let skipped = &snap.processes_skipped;
    v.family(
        &PROCESSES_SKIPPED,
        [
            ("max_processes", skipped.max_processes),
            ("fd_budget", skipped.fd_budget),
        ]
        .into_iter()
        .map(|(reason, n)| Point::fixed(Labels::one("reason", reason), n as f64)),
    )
}
