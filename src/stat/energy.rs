//! The joules `cgperf stat` prints for each cgroup it counts (the
//! command's): its share of each domain's energy, summed over the sockets,
//! as the exporter's `cgperf_energy_joules_total` has it (the same account
//! over the run), with the meter's source and the weight named, since a
//! model's joules are an estimate.

use super::table::{Line, Shown};
use crate::snapshot::Snapshot;

/// The energy lines of `cgroups` in `snapshot`: one per domain each, in
/// the meter's order; `<not supported>` with the reason for a cgroup that
/// got none (no meter, or no group counting the weight event).
pub fn lines(snapshot: &Snapshot, cgroups: &[String]) -> Vec<Line> {
    let mut out = Vec::new();
    for cgroup in cgroups {
        let mut domains: Vec<(&str, &str, &str, f64)> = Vec::new();
        for e in snapshot.energy.iter().filter(|e| e.cgroup == cgroup) {
            match domains.iter_mut().find(|d| d.0 == e.scope.domain) {
                Some(d) => d.3 += e.joules,
                None => domains.push((e.scope.domain, e.scope.source, e.weight, e.joules)),
            }
        }
        for (domain, source, weight, joules) in &domains {
            let estimate = if *source == "model" {
                " (an estimate)"
            } else {
                ""
            };
            out.push(Line {
                cpu: None,
                shown: Shown::Joules(*joules),
                event: format!("energy-{domain}"),
                cgroup: cgroup.clone(),
                note: format!("# source={source}{estimate}, weight={weight}"),
                share: None,
            });
        }
        if domains.is_empty() {
            let why = match snapshot.host_energy.is_empty() {
                true => "no meter here and no model declared: see cgperf check",
                false => "no group counting cycles or task-clock counts here",
            };
            out.push(Line {
                cpu: None,
                shown: Shown::NotSupported,
                event: "energy".into(),
                cgroup: cgroup.clone(),
                note: format!("# {why}"),
                share: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{CgroupEnergy, EnergyScope, HostEnergy, Weighed};
    use std::sync::Arc;
    use std::time::SystemTime;

    fn pkg(socket: u32) -> EnergyScope {
        EnergyScope {
            socket,
            domain: "pkg",
            source: "model",
        }
    }

    #[test]
    fn a_cgroups_joules_are_summed_over_sockets_per_domain_with_the_source_named() {
        let mut snap = Snapshot::empty();
        let who = |cgroup: &str| Weighed {
            cgroup: cgroup.into(),
            labels: Arc::from(Vec::new()),
            start_time: SystemTime::UNIX_EPOCH,
        };
        let cgroups = Arc::from([who("/cmd"), who("/other")]);
        let scopes = vec![pkg(0), pkg(1)];
        snap.energy = CgroupEnergy::new(cgroups, "task-clock", scopes, SystemTime::UNIX_EPOCH);
        snap.energy.push(0, [1.25, 0.5]);
        snap.energy.push(1, [9.0]);
        let got = lines(&snap, &["/cmd".into()]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].shown, Shown::Joules(1.75));
        assert_eq!(got[0].event, "energy-pkg");
        assert_eq!(
            got[0].note,
            "# source=model (an estimate), weight=task-clock"
        );
    }

    #[test]
    fn a_cgroup_without_energy_says_why() {
        let mut snap = Snapshot::empty();
        let got = lines(&snap, &["/cmd".into()]);
        assert_eq!(got[0].shown, Shown::NotSupported);
        assert!(got[0].note.starts_with("# no meter"), "{:?}", got[0]);
        snap.host_energy = vec![HostEnergy {
            scope: EnergyScope {
                socket: 0,
                domain: "pkg",
                source: "perf",
            },
            meter_joules: 1.0,
            idle_joules: 0.0,
            system_joules: 1.0,
            since: SystemTime::UNIX_EPOCH,
        }];
        let got = lines(&snap, &["/cmd".into()]);
        assert!(got[0].note.contains("cycles or task-clock"), "{:?}", got[0]);
    }
}
