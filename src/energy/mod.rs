//! Energy per cgroup that adds up to the meter. Each interval, each
//! meter channel's energy (a socket's domain) is split into idle (the
//! model's idle power, by the `idle:` policy) and active; the active part
//! is shared among the counted cgroups by what they did on that socket's
//! CPUs in the interval (`cycles`, else `task-clock`: the snapshot's
//! activity), what no counted cgroup did going to `system` (against the
//! CPUs' busy time, or their own count of `cycles`: [`cycles`]). Shares
//! are whole micro-Joules ([`split`]): per interval and channel, the
//! top-level cgroups, idle and system add up to the meter exactly, and a
//! parent to its children and its own tasks. `processes:` series get a
//! view of the same shares, never added to them ([`process`]).
//!
//! The engine reads the meter right after the counters ([`Account::read`])
//! and hands the snapshot to [`Account::show`], which adds the energy
//! series; the exporters only present them.

pub mod cycles;
mod ledger;
pub mod meter;
mod process;
pub mod split;

use crate::backend::budget::Fds;
use crate::config::IdlePolicy;
use crate::events::CorePmus;
use crate::host::Sockets;
use crate::plan::EnergyPlan;
use crate::snapshot::{CgroupEnergy, EnergyScope, HostEnergy, Snapshot};
use cycles::SystemCount;
use ledger::Ledger;
use meter::{Busy, Channel, Meter, Over};
use split::split;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// What [`Account::read`] read, for [`Account::show`].
#[derive(Debug, Default)]
struct Pending {
    /// Per channel, the meter's micro-Joules.
    deltas: Vec<u64>,
    /// The CPUs' times.
    busy: Busy,
    /// Per socket, the weight event's total counted system-wide (`None`
    /// where unknown), when shares are weighed by `cycles`.
    counted: Option<BTreeMap<u32, Option<f64>>>,
}

/// Energy attribution across intervals.
#[derive(Debug)]
pub struct Account {
    plan: EnergyPlan,
    meter: Result<Box<dyn Meter>, String>,
    sockets: Sockets,
    /// With `cycles` as the weight, each CPU's own count of it.
    system: Option<SystemCount>,
    /// Where the meter's and the CPUs' counters' descriptors are counted,
    /// with every other of the process, and their budget.
    fds: Fds,
    /// The core PMUs, which the CPUs' counters are opened on.
    cores: Arc<CorePmus>,
    /// `/proc/stat` at the last read.
    last_times: Option<meter::procstat::Times>,
    /// What the meter and the CPUs did since the last read, for `show`.
    pending: Option<Pending>,
    /// Whether the cgroups' weights of the next interval are unknown (the
    /// weight event changed at a reload): all of its active energy is
    /// then the system's.
    rebase: bool,
    /// Every meter scope (socket, domain, source) shown since cgperf
    /// started: totals are kept by scope, so that a series whose meter
    /// went and came back at reloads resumes where it was, never lower.
    scopes: Vec<EnergyScope>,
    /// The scope of each channel of the meter.
    current: Vec<usize>,
    /// Each cgroup's weight totals at the last `show` and its
    /// micro-Joules per scope since it was first counted.
    ledger: Ledger,
    /// Per scope: meter, idle and system micro-Joules so far.
    host: Vec<[u64; 3]>,
    /// The `processes:` series' energy.
    processes: process::Views,
    /// When this account began: its series count from 0 there.
    since: SystemTime,
}

impl Account {
    /// Attribution as `plan` asks, with the meter it names; where there is
    /// none, the account shows nothing and the log says why. Its perf
    /// descriptors are counted in, and kept within, `fds`; `cores` are the
    /// plan's core PMUs.
    pub fn new(plan: EnergyPlan, cores: Arc<CorePmus>, fds: Fds) -> Self {
        let meter = open_logged(&plan, &fds);
        Self::with_meter(plan, meter, crate::host::CPU_ROOT, (cores, fds))
    }

    /// Attribution with `meter`, CPUs' sockets from `cpu_root`.
    fn with_meter(
        plan: EnergyPlan,
        meter: Result<Box<dyn Meter>, String>,
        cpu_root: &str,
        (cores, fds): (Arc<CorePmus>, Fds),
    ) -> Self {
        let mut account = Self {
            system: system_count(&plan, &cores, &fds),
            fds,
            cores,
            plan,
            meter: Err(String::new()),
            sockets: Sockets::new(std::path::Path::new(cpu_root)),
            last_times: None,
            pending: None,
            rebase: false,
            ledger: Ledger::default(),
            scopes: Vec::new(),
            current: Vec::new(),
            host: Vec::new(),
            processes: process::Views::default(),
            since: SystemTime::now(),
        };
        account.take_meter(meter);
        account
    }

    /// The account for a reloaded config's `plan`, between two
    /// collections: every series that keeps its labels keeps its total,
    /// so that no counter goes back. The same meter (`meter:` and `model:`
    /// unchanged) keeps reading as before; another starts counting now,
    /// and the series of the old one's source end. A new weight event
    /// ends the cgroups' and processes' series (their `weight` label
    /// changes), and the interval that follows, whose weights started
    /// before it, goes to `system`.
    pub fn reload(mut self, plan: EnergyPlan) -> Self {
        if plan == self.plan {
            return self;
        }
        if (plan.def.meter, plan.def.model) != (self.plan.def.meter, self.plan.def.model) {
            let mut meter = open_logged(&plan, &self.fds);
            if let Ok(m) = &mut meter {
                // Starts counting now: the new meter counted nothing
                // before.
                m.read(&Busy::default());
            }
            self.take_meter(meter);
        }
        if (plan.weight, plan.weight_attr) != (self.plan.weight, self.plan.weight_attr) {
            self.ledger = Ledger::default();
            self.processes = process::Views::default();
            // The old counters close before the new ones open: both never
            // count against the budget at once.
            self.system = None;
            self.system = system_count(&plan, &self.cores, &self.fds);
            self.rebase = true;
        }
        self.plan = plan;
        self
    }

    /// Reads from `meter` from now on: each of its channels' series goes
    /// on from the totals of its scope, if it was shown before.
    fn take_meter(&mut self, meter: Result<Box<dyn Meter>, String>) {
        self.current.clear();
        if let Ok(m) = &meter {
            for c in m.channels() {
                let scope = EnergyScope {
                    socket: c.socket,
                    domain: c.domain,
                    source: m.source(),
                };
                let at = match self.scopes.iter().position(|s| *s == scope) {
                    Some(at) => at,
                    None => {
                        self.scopes.push(scope);
                        self.scopes.len() - 1
                    }
                };
                self.current.push(at);
            }
        }
        self.host.resize(self.scopes.len(), [0; 3]);
        self.meter = meter;
        self.pending = None;
    }

    /// What `cgperf check` says of `plan`: the source of each socket's
    /// domains and why not the meters passed over, what shares are
    /// weighed by, and what is idle.
    pub fn describe(plan: &EnergyPlan) -> Vec<String> {
        // Opened to be named, and closed at once: no budget to keep to.
        let fds = Fds::unbounded();
        let (meter, passed) = meter::open(&plan.def, &fds);
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
                                   (no group counting cycles can be counted here); \
                                   the system's share: the CPUs' busy time no top-level \
                                   cgroup counted"
                .to_owned(),
            Some(w) => format!(
                "energy: shares weighed by {w}; the system's share: the {w} each CPU \
                 counts system-wide that no top-level cgroup counted"
            ),
            None => "energy: no group counting cycles or task-clock can be counted here: \
                     no cgroup gets a share"
                .to_owned(),
        });
        lines.push(
            match plan
                .def
                .model
                .filter(|_| plan.def.idle == IdlePolicy::Model)
            {
                Some(m) => format!(
                    "energy: idle: the model's {} W per {}",
                    m.idle_milliwatts as f64 / 1000.0,
                    match m.per {
                        crate::config::ModelScope::Socket => "socket",
                        crate::config::ModelScope::Cpu => "CPU",
                    }
                ),
                None => "energy: idle: none (all of it is shared by activity)".to_owned(),
            },
        );
        lines
    }

    /// Reads the CPUs' times, the meter and, with `cycles` as the weight,
    /// each CPU's own count of it: call right after reading the counters,
    /// so that all cover the same interval.
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
        // The CPUs `/proc/stat` lists now are those online: each CPU's own
        // count starts at the first read, and follows them.
        let online: Vec<u32> = now.keys().copied().collect();
        self.last_times = Some(now);
        let (deltas, error) = meter.read(&busy);
        if let Some(e) = error {
            tracing::debug!("energy: {e}");
        }
        let counted = self.system.as_mut().map(|system| {
            let per_cpu = system.read(&online);
            cycles::per_socket(&per_cpu, |cpu| self.sockets.of(cpu))
        });
        self.pending = Some(Pending {
            deltas,
            busy,
            counted,
        });
    }

    /// Adds the energy series to `snapshot`, from its activity and what
    /// [`Account::read`] read.
    pub fn show(&mut self, snapshot: &mut Snapshot) {
        if self.meter.is_err() {
            return;
        }
        let shown_scopes: Vec<(usize, EnergyScope)> = self
            .current
            .iter()
            .map(|at| (*at, self.scopes[*at]))
            .collect();
        let weight = snapshot.activity_weight;
        let activity = &snapshot.activity;
        // The sockets the meter covers, whose weights are kept.
        let mut sockets: Vec<u32> = match &self.meter {
            Ok(m) => m.channels().iter().map(|c| c.socket).collect(),
            Err(_) => Vec::new(),
        };
        sockets.sort_unstable();
        sockets.dedup();
        self.ledger.update(activity, &sockets);
        self.processes.weigh(&snapshot.processes, weight);
        if let Some(pending) = self.pending.take() {
            let rebase = std::mem::replace(&mut self.rebase, false);
            self.attribute(pending, rebase);
        }
        let scopes = shown_scopes.iter().map(|(_, scope)| *scope).collect();
        let cgroups = self.ledger.cgroups().clone();
        let mut energy = CgroupEnergy::new(cgroups, weight, scopes, self.since);
        for i in 0..self.ledger.cgroups().len() {
            // None before its first share.
            if let Some(joules) = self.ledger.joules(i) {
                let on = |at: &usize| joules.get(*at).copied().unwrap_or(0) as f64 / 1e6;
                energy.push(i, shown_scopes.iter().map(|(at, _)| on(at)));
            }
        }
        snapshot.energy = energy;
        snapshot.process_energy = self.processes.show(&shown_scopes, weight, self.since);
        snapshot.host_energy = shown_scopes
            .iter()
            .map(|(at, scope)| {
                let [meter, idle, system] = self.host.get(*at).copied().unwrap_or([0; 3]);
                HostEnergy {
                    scope: *scope,
                    meter_joules: meter as f64 / 1e6,
                    idle_joules: idle as f64 / 1e6,
                    system_joules: system as f64 / 1e6,
                    since: self.since,
                }
            })
            .collect();
    }

    /// Shares one interval's energy (`pending`) among the counted cgroups
    /// by what the ledger says each did (what no top-level cgroup did
    /// going to `system`; all of it with `rebase`), and gives the process
    /// series their view of it.
    fn attribute(&mut self, pending: Pending, rebase: bool) {
        let Ok(meter) = &self.meter else { return };
        let channels = meter.channels().to_vec();
        let tree = self.ledger.tree();
        let mut busy_of: BTreeMap<u32, (Vec<(u64, u64)>, f64)> = BTreeMap::new();
        for (cpu, times) in &pending.busy.cpus {
            let entry = busy_of.entry(self.sockets.of(*cpu)).or_default();
            entry.0.push(*times);
            entry.1 += times.0 as f64 / 1e9;
        }
        // The CPUs' own total tells the system's share, in the weight's
        // unit: busy time against task-clock, the CPUs' own count against
        // cycles.
        let seconds = |(_, seconds): &(Vec<(u64, u64)>, f64)| *seconds;
        let total_of = |over: Over| match (rebase, &pending.counted, over) {
            (true, _, _) => Some(0.0),
            (false, Some(counted), Over::Socket(socket)) => counted.get(&socket).copied().flatten(),
            (false, Some(counted), Over::Machine) => counted.values().copied().sum(),
            (false, None, over) if self.plan.weight == Some("task-clock") => match over {
                Over::Socket(socket) => busy_of.get(&socket).map(seconds),
                Over::Machine => Some(busy_of.values().map(seconds).sum()),
            },
            (false, None, _) => None,
        };
        // What each channel's activity was shared over (a socket's, or
        // every CPU's): the top-level cgroups' weight there, and the
        // system's where it is known.
        let mut whole: BTreeMap<Over, (Vec<f64>, f64)> = BTreeMap::new();
        for over in channels.iter().map(Channel::over) {
            if whole.contains_key(&over) {
                continue;
            }
            let mut weights = self.ledger.weights(over);
            if rebase {
                weights.fill(0.0);
            }
            let top: f64 = tree.top.iter().map(|i| weights[*i].max(0.0)).sum();
            let all = total_of(over).map_or(top, |t| t.max(top));
            whole.insert(over, (weights, all));
        }
        // The machine's activity, for the processes' view: over the
        // metered sockets, or every CPU where the platform alone is.
        let sockets: Vec<f64> = whole
            .iter()
            .filter(|(over, _)| matches!(over, Over::Socket(_)))
            .map(|(_, (_, all))| *all)
            .collect();
        let machine: f64 = match whole.get(&Over::Machine) {
            Some((_, all)) if sockets.is_empty() => *all,
            _ => sockets.iter().sum(),
        };
        for (c, (channel, energy)) in channels.iter().zip(pending.deltas).enumerate() {
            let idle = match (self.plan.def.idle, self.plan.def.model) {
                (IdlePolicy::Model, Some(model)) if channel.domain == "pkg" => busy_of
                    .get(&channel.socket)
                    .map_or(0, |(times, _)| meter::model::model_energy(&model, times).0)
                    .min(energy),
                _ => 0,
            };
            let Some((weights, all)) = whole.get(&channel.over()) else {
                continue;
            };
            let shared = split(energy - idle, self.ledger.tree(), weights, Some(*all));
            let Some(&at) = self.current.get(c) else {
                continue;
            };
            let scopes = self.scopes.len();
            self.ledger.add(at, scopes, &shared.cgroups);
            if let Some(host) = self.host.get_mut(at) {
                for (total, part) in host.iter_mut().zip([energy, idle, shared.system]) {
                    *total = total.saturating_add(part);
                }
            }
            if !rebase {
                self.processes.add(at, scopes, energy - idle, machine);
            }
        }
    }
}

/// The meter `plan` names (its descriptors counted in `fds`), the reason
/// for each passed over logged.
fn open_logged(plan: &EnergyPlan, fds: &Fds) -> Result<Box<dyn Meter>, String> {
    let (meter, passed) = meter::open(&plan.def, fds);
    match &meter {
        Ok(m) => tracing::info!(
            source = m.source(),
            passed_over = passed.join("; "),
            "energy: reading {} channels",
            m.channels().len()
        ),
        Err(why) => tracing::warn!("energy: no meter, no energy series: {why}"),
    }
    meter
}

/// The system-wide count of the weight event, when it is `cycles`
/// (against `task-clock`, the CPUs' busy time is the total).
fn system_count(plan: &EnergyPlan, cores: &Arc<CorePmus>, fds: &Fds) -> Option<SystemCount> {
    match (plan.weight, plan.weight_attr) {
        (Some("cycles"), Some(attr)) => Some(SystemCount::new(attr, cores.clone(), fds.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
