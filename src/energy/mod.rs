//! Energy per cgroup that adds up to the meter. Each interval, each
//! meter channel's energy (a socket's domain) is split into idle (the
//! model's idle power, by the `idle:` policy) and active; the active part
//! is shared among the counted cgroups by what they did on that socket's
//! CPUs in the interval (`cycles`, else `task-clock`: the snapshot's
//! activity), what no counted cgroup did going to `system`. Shares are
//! whole micro-Joules ([`split`]): per interval and channel, the top-level
//! cgroups, idle and system add up to the meter exactly, and a parent to
//! its children and its own tasks.
//!
//! The engine reads the meter right after the counters ([`Account::read`])
//! and hands the snapshot to [`Account::show`], which adds the energy
//! series; the exporters only present them.

mod ledger;
pub mod meter;
pub mod split;

use crate::config::IdlePolicy;
use crate::plan::EnergyPlan;
use crate::snapshot::{EnergySample, EnergyScope, HostEnergy, Snapshot};
use ledger::Ledger;
use meter::{Busy, Meter, model::Sockets};
use split::split;
use std::collections::BTreeMap;

/// Energy attribution across intervals.
#[derive(Debug)]
pub struct Account {
    plan: EnergyPlan,
    meter: Result<Box<dyn Meter>, String>,
    sockets: Sockets,
    /// `/proc/stat` at the last read.
    last_times: Option<meter::procstat::Times>,
    /// What the meter and the CPUs did since the last read, for `show`.
    pending: Option<(Vec<u64>, Busy)>,
    /// Each cgroup's weight totals at the last `show` and its
    /// micro-Joules per channel since it was first counted.
    ledger: Ledger,
    /// Per channel: meter, idle and system micro-Joules so far.
    host: Vec<[u64; 3]>,
}

impl Account {
    /// Attribution as `plan` asks, with the meter it names; where there is
    /// none, the account shows nothing and the log says why.
    pub fn new(plan: EnergyPlan) -> Self {
        let (meter, passed) = meter::open(&plan.def);
        match &meter {
            Ok(m) => tracing::info!(
                source = m.source(),
                passed_over = passed.join("; "),
                "energy: reading {} channels",
                m.channels().len()
            ),
            Err(why) => tracing::warn!("energy: no meter, no energy series: {why}"),
        }
        Self::with_meter(plan, meter, crate::host::CPU_ROOT)
    }

    /// Attribution with `meter`, CPUs' sockets from `cpu_root`.
    fn with_meter(plan: EnergyPlan, meter: Result<Box<dyn Meter>, String>, cpu_root: &str) -> Self {
        let channels = meter.as_ref().map_or(0, |m| m.channels().len());
        Self {
            plan,
            meter,
            sockets: Sockets::new(std::path::Path::new(cpu_root)),
            last_times: None,
            pending: None,
            ledger: Ledger::default(),
            host: vec![[0; 3]; channels],
        }
    }

    /// What `cgperf check` says of `plan`: the source of each socket's
    /// domains and why not the meters passed over, what shares are
    /// weighed by, and what is idle.
    pub fn describe(plan: &EnergyPlan) -> Vec<String> {
        let (meter, passed) = meter::open(&plan.def);
        let mut lines = Vec::new();
        match &meter {
            Ok(m) => {
                for c in m.channels() {
                    lines.push(format!(
                        "energy: socket {} {}: {}",
                        c.socket,
                        c.domain,
                        m.source()
                    ));
                }
                for why in passed {
                    lines.push(format!("energy: not {why}"));
                }
            }
            Err(why) => lines.push(format!("energy: no meter, no energy series: {why}")),
        }
        lines.push(match plan.weight {
            Some("task-clock") => "energy: shares weighed by task-clock \
                                   (no group counting cycles can be counted here)"
                .to_owned(),
            Some(w) => format!("energy: shares weighed by {w}"),
            None => "energy: no group counting cycles or task-clock can be counted here: \
                     no cgroup gets a share"
                .to_owned(),
        });
        lines.push(match (plan.def.idle, plan.def.model) {
            (IdlePolicy::Model, Some(m)) => format!(
                "energy: idle: the model's {} W per {}",
                m.idle_milliwatts as f64 / 1000.0,
                match m.per {
                    crate::config::ModelScope::Socket => "socket",
                    crate::config::ModelScope::Cpu => "CPU",
                }
            ),
            _ => "energy: idle: none (all of it is shared by activity)".to_owned(),
        });
        lines
    }

    /// Reads the CPUs' times and the meter: call right after reading the
    /// counters, so that both cover the same interval.
    pub fn read(&mut self) {
        let Ok(meter) = &mut self.meter else { return };
        let now = match meter::read_busy() {
            Ok(now) => now,
            Err(e) => {
                tracing::debug!("energy: {e}");
                return;
            }
        };
        let busy = self
            .last_times
            .as_ref()
            .map(|before| meter::procstat::between(before, &now))
            .unwrap_or_default();
        self.last_times = Some(now);
        let (deltas, error) = meter.read(&busy);
        if let Some(e) = error {
            tracing::debug!("energy: {e}");
        }
        self.pending = Some((deltas, busy));
    }

    /// Adds the energy series to `snapshot`, from its activity and what
    /// [`Account::read`] read.
    pub fn show(&mut self, snapshot: &mut Snapshot) {
        let Ok(meter) = &self.meter else { return };
        let channels = meter.channels().to_vec();
        let source = meter.source();
        let weight = snapshot.activity_weight;
        let activity = &snapshot.activity;
        let mut sockets: Vec<u32> = channels.iter().map(|c| c.socket).collect();
        sockets.sort_unstable();
        sockets.dedup();
        let known = &mut self.sockets;
        self.ledger.update(activity, &sockets, |cpu| known.of(cpu));
        if let Some((deltas, busy)) = self.pending.take() {
            let mut busy_of: BTreeMap<u32, (Vec<(u64, u64)>, f64)> = BTreeMap::new();
            for (cpu, times) in &busy.cpus {
                let entry = busy_of.entry(self.sockets.of(*cpu)).or_default();
                entry.0.push(*times);
                entry.1 += times.0 as f64 / 1e9;
            }
            for (c, (channel, energy)) in channels.iter().zip(deltas).enumerate() {
                let socket = busy_of.get(&channel.socket);
                let idle = match (self.plan.def.idle, self.plan.def.model) {
                    (IdlePolicy::Model, Some(model)) if channel.domain == "pkg" => socket
                        .map_or(0, |(times, _)| meter::model::model_energy(&model, times).0)
                        .min(energy),
                    _ => 0,
                };
                let weights = self.ledger.weights(channel.socket);
                // Busy time tells the system's share only against time.
                let busy = match weight {
                    "task-clock" => socket.map(|(_, seconds)| *seconds),
                    _ => None,
                };
                let shared = split(energy - idle, self.ledger.tree(), &weights, busy);
                self.ledger.add(c, channels.len(), &shared.cgroups);
                let host = &mut self.host[c];
                host[0] += energy;
                host[1] += idle;
                host[2] += shared.system;
            }
        }
        snapshot.energy.reserve(activity.len() * channels.len());
        for (at, totals) in self.ledger.totals() {
            let a = &activity[at];
            for (channel, uj) in channels.iter().zip(totals) {
                snapshot.energy.push(EnergySample {
                    cgroup: a.cgroup.clone(),
                    labels: a.labels.clone(),
                    scope: EnergyScope {
                        socket: channel.socket,
                        domain: channel.domain,
                        source,
                    },
                    weight,
                    joules: *uj as f64 / 1e6,
                    start_time: a.start_time,
                });
            }
        }
        snapshot.host_energy = channels
            .iter()
            .zip(&self.host)
            .map(|(channel, [meter, idle, system])| HostEnergy {
                scope: EnergyScope {
                    socket: channel.socket,
                    domain: channel.domain,
                    source,
                },
                meter_joules: *meter as f64 / 1e6,
                idle_joules: *idle as f64 / 1e6,
                system_joules: *system as f64 / 1e6,
            })
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EnergyDef, MeterChoice};
    use crate::snapshot::CgroupActivity;
    use meter::Channel;
    use std::sync::Arc;
    use std::time::SystemTime;

    /// A meter that counts 1,000,003 µJ per interval on socket 0's `pkg`.
    #[derive(Debug)]
    struct Fixed([Channel; 1]);

    impl Meter for Fixed {
        fn source(&self) -> &'static str {
            "model"
        }
        fn channels(&self) -> &[Channel] {
            &self.0
        }
        fn read(&mut self, _busy: &Busy) -> (Vec<u64>, Option<String>) {
            (vec![1_000_003], None)
        }
    }

    fn account() -> Account {
        let plan = EnergyPlan {
            def: EnergyDef {
                meter: MeterChoice::Model,
                model: None,
                idle: IdlePolicy::None,
            },
            weight: Some("cycles"),
        };
        let meter = Fixed([Channel {
            domain: "pkg",
            socket: 0,
        }]);
        // CPUs without topology are on socket 0.
        let root = std::env::temp_dir().join("cgperf-no-such-cpu-root");
        Account::with_meter(plan, Ok(Box::new(meter)), &root.to_string_lossy())
    }

    fn activity(cgroup: &str, start: u64, cpus: &[(u32, f64)]) -> CgroupActivity {
        CgroupActivity {
            cgroup: cgroup.into(),
            labels: Arc::from(Vec::new()),
            start_time: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(start),
            cpus: cpus.into(),
        }
    }

    /// Reads the meter and shows `activity`: each cgroup's micro-Joules,
    /// and whether the top-level ones and what no cgroup got add up to
    /// the meter (they do while no counted cgroup went away: one that
    /// does takes its counter with it).
    fn interval(
        account: &mut Account,
        activity: Vec<CgroupActivity>,
    ) -> (Vec<(String, u64)>, bool) {
        account.pending = Some((vec![1_000_003], Busy::default()));
        let mut snap = Snapshot::empty();
        snap.activity = activity;
        snap.activity_weight = "cycles";
        account.show(&mut snap);
        let whole = |j: f64| (j * 1e6).round() as u64;
        let host = &snap.host_energy[0];
        let top: u64 = snap
            .energy
            .iter()
            .filter(|e| e.cgroup.matches('/').count() == 1)
            .map(|e| whole(e.joules))
            .sum();
        let conserved =
            top + whole(host.idle_joules) + whole(host.system_joules) == whole(host.meter_joules);
        let cgroups = snap
            .energy
            .iter()
            .map(|e| (e.cgroup.to_string(), whole(e.joules)))
            .collect();
        (cgroups, conserved)
    }

    #[test]
    fn shares_follow_each_intervals_growth_and_a_new_cgroup_starts_from_zero() {
        let mut account = account();
        // First interval: a did 1, b 3 (their totals so far).
        let (got, conserved) = interval(
            &mut account,
            vec![
                activity("/a", 1, &[(0, 1.0)]),
                activity("/b", 1, &[(1, 3.0)]),
            ],
        );
        assert_eq!(got, [("/a".into(), 250_001), ("/b".into(), 750_002)]);
        assert!(conserved);
        // Second: a grew by 3 on CPU 1 only, b not at all; a child of a
        // appears having done 1.
        let (got, conserved) = interval(
            &mut account,
            vec![
                activity("/a", 1, &[(0, 1.0), (1, 3.0)]),
                activity("/a/c", 5, &[(1, 1.0)]),
                activity("/b", 1, &[(1, 3.0)]),
            ],
        );
        assert!(conserved);
        assert_eq!(got[0], ("/a".into(), 250_001 + 1_000_003));
        assert_eq!(got[2], ("/b".into(), 750_002));
        assert_eq!(got[1].1.abs_diff(333_334), 0, "a third of a's share");
        // b is made again (a later start): it starts from 0, its total
        // smaller than before counts whole; a is gone.
        let (got, conserved) = interval(&mut account, vec![activity("/b", 9, &[(1, 2.0)])]);
        assert_eq!(got, [("/b".into(), 1_000_003)]);
        assert!(!conserved, "a's and the first b's energy went with them");
    }
}
