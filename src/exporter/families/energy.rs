//! The families of `energy:`: each counted cgroup's share of each meter,
//! each `processes:` series' view of them, the meters, and what of them
//! no cgroup got. Per socket and domain, the
//! top-level cgroups' shares and the unattributed ones add up to the
//! meter exactly (docs/energy.md).

use super::{Family, Kind, Labels, Point, ProcessLabels, Unit, Visitor};
use crate::snapshot::{HostEnergy, Snapshot, Unattributed};

const ENERGY: Family = Family {
    name: "cgperf_energy",
    help: "Energy of each counted cgroup (its descendants included) per socket and domain of the meter, shared by what the cgroups did on that socket's CPUs (`weight`: cycles, or task-clock where there is no PMU); `source=\"model\"` is an estimate from the declared model, not a measurement. See docs/energy.md.",
    unit: Unit::Joules,
    kind: Kind::Counter,
};
const PROCESS_ENERGY: Family = Family {
    name: "cgperf_process_energy",
    help: "Energy of each series of a `processes:` entry per socket and domain: what its processes' work (`weight`) cost at the rate the cgroups' shares were made at in each interval. A view, not a further share: the same joules are in the cgroups the processes ran in (or in the system share), so do not add it to cgperf_energy_joules_total. See docs/energy.md.",
    unit: Unit::Joules,
    kind: Kind::Counter,
};
const METER: Family = Family {
    name: "cgperf_energy_meter",
    help: "Energy the meter counted per socket and domain (`source`: perf's power/ PMU, powercap, or the declared model's estimate); the top-level cgroups' cgperf_energy_joules_total and cgperf_energy_unattributed_joules_total add up to it.",
    unit: Unit::Joules,
    kind: Kind::Counter,
};
const UNATTRIBUTED: Family = Family {
    name: "cgperf_energy_unattributed",
    help: "Energy of the meter no counted cgroup got, by `share`: idle (the model's idle power, by the `idle:` policy) or system (activity outside the counted top-level cgroups: kernel threads, interrupts, cgroups not counted).",
    unit: Unit::Joules,
    kind: Kind::Counter,
};

/// Every family of `energy:`.
pub(super) fn series<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    v.family(
        &ENERGY,
        snap.energy.iter().map(|e| Point {
            labels: Labels::Energy {
                cgroup: e.cgroup,
                extra: e.labels,
                scope: e.scope,
                weight: e.weight,
            },
            value: e.joules,
            start: Some(e.start_time),
        }),
    )?;
    v.family(
        &PROCESS_ENERGY,
        snap.process_energy.iter().map(|e| Point {
            labels: Labels::ProcessEnergy {
                of: ProcessLabels {
                    process: &e.process,
                    comm: e.comm.as_deref(),
                    pid: e.pid,
                },
                scope: e.scope,
                weight: e.weight,
            },
            value: e.joules,
            start: Some(e.start_time),
        }),
    )?;
    let meter = |h: &HostEnergy, share: Option<&'static str>, value: f64| Point {
        labels: Labels::Meter {
            scope: h.scope,
            share,
        },
        value,
        start: Some(h.since),
    };
    v.family(
        &METER,
        snap.host_energy
            .iter()
            .map(|h| meter(h, None, h.meter_joules)),
    )?;
    v.family(
        &UNATTRIBUTED,
        snap.host_energy.iter().flat_map(|h| {
            [
                (Unattributed::Idle, h.idle_joules),
                (Unattributed::System, h.system_joules),
            ]
            .map(|(share, value)| meter(h, Some(share.label()), value))
        }),
    )
}
