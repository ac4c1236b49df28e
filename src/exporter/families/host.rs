//! The families of `host:`: the machine's counts (in events, seconds,
//! Joules or bytes), group times, metrics and support.

use super::shared::{event_support, group_support, group_times};
use super::{Family, Kind, Labels, Point, Unit, Visitor};
use crate::snapshot::{HostGroupTime, HostSample, HostUnit, Snapshot};

pub(super) const HOST_EVENTS: Family = Family {
    name: "cgperf_host_events",
    help: "Event counts of the config's `host:` groups and tracepoints, for the whole machine (or per socket or die where the PMU counts so), scaled per interval as cgperf_events_total is.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
pub(super) const HOST_CLOCK: Family = Family {
    name: "cgperf_host_clock",
    help: "CPU time counted by the cpu-clock and task-clock events of the config's `host:` groups, summed over CPUs.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const HOST_ENERGY: Family = Family {
    name: "cgperf_host_energy",
    help: "Energy counted by the `host:` groups' events that the kernel gives in Joules (power/energy-*), per socket or die as the PMU counts it.",
    unit: Unit::Joules,
    kind: Kind::Counter,
};
pub(super) const HOST_BYTES: Family = Family {
    name: "cgperf_host_bytes",
    help: "Bytes counted by the `host:` groups' events that the kernel gives in MiB (memory controller reads and writes), per socket or die as the PMU counts it.",
    unit: Unit::Bytes,
    kind: Kind::Counter,
};
pub(super) const HOST_GROUP_ENABLED: Family = Family {
    name: "cgperf_host_group_enabled",
    help: "Time each `host:` group was enabled, summed over the CPUs it counts on (per socket or die where the PMU counts so).",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const HOST_GROUP_RUNNING: Family = Family {
    name: "cgperf_host_group_running",
    help: "Time each `host:` group was counting on the PMU; running/enabled is its multiplexing ratio.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const HOST_GROUP_NEVER_RAN: Family = Family {
    name: "cgperf_host_group_never_ran_intervals",
    help: "Intervals in which a `host:` group was enabled but never got a counter (summed over its CPUs); they add nothing to its counts.",
    unit: Unit::Count("{interval}"),
    kind: Kind::Counter,
};
pub(super) const HOST_METRIC: Family = Family {
    name: "cgperf_host_metric",
    help: "The value of each metric of `host:` over the last interval's counts of the whole machine (each input summed over the CPUs, sockets and dies it counts on); none for an interval in which its formula divides by zero. cgperf_metric_definition_info gives each metric's description and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
pub(super) const HOST_GROUP_SUPPORTED: Family = Family {
    name: "cgperf_host_group_supported",
    help: "1 when this machine can count the `host:` group system-wide, 0 when it cannot; `reason` says why, as for cgperf_group_supported.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
pub(super) const HOST_EVENT_SUPPORTED: Family = Family {
    name: "cgperf_host_event_supported",
    help: "1 when this machine can count the `host:` tracepoint system-wide, 0 when it cannot.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};

fn host_point(h: &HostSample) -> Point<'_> {
    Point {
        labels: Labels::Host {
            group: &h.group,
            event: Some(&h.event),
            scope: h.scope,
        },
        value: h.value,
        start: Some(h.start_time),
    }
}

/// A point of one of the host's group times.
fn host_time_point(t: &HostGroupTime, value: f64) -> Point<'_> {
    Point {
        labels: Labels::Host {
            group: &t.group,
            event: None,
            scope: t.scope,
        },
        value,
        start: Some(t.start_time),
    }
}

/// The host's series, group times, metrics and group support.
pub(super) fn series<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    let host = |unit: HostUnit| {
        snap.host
            .iter()
            .filter(move |h| h.unit == unit)
            .map(host_point)
    };
    v.family(&HOST_EVENTS, host(HostUnit::Count))?;
    v.family(&HOST_CLOCK, host(HostUnit::Seconds))?;
    v.family(&HOST_ENERGY, host(HostUnit::Joules))?;
    v.family(&HOST_BYTES, host(HostUnit::Bytes))?;
    group_times(
        v,
        [
            &HOST_GROUP_ENABLED,
            &HOST_GROUP_RUNNING,
            &HOST_GROUP_NEVER_RAN,
        ],
        snap.host_group_times.iter(),
        |t| t.times,
        host_time_point,
    )?;
    v.family(
        &HOST_METRIC,
        snap.host_metrics.iter().map(|m| Point {
            labels: Labels::one("metric", &m.metric.name),
            value: m.value,
            start: None,
        }),
    )?;
    v.family(&HOST_GROUP_SUPPORTED, group_support(&snap.host_support))
}

/// Whether each tracepoint of `host:` can be counted here (shown after the
/// processes' families, where it has always been).
pub(super) fn event_supported<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    v.family(&HOST_EVENT_SUPPORTED, event_support(&snap.host_support))
}
