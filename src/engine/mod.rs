//! The engine: drives the targets (cgroups, processes, the host; see
//! [`crate::target`]) through the CPUs that are online, reads them once per
//! interval, swaps reloaded plans in, and publishes one immutable
//! [`Snapshot`] for the exporters.

mod hotplug;
#[cfg(test)]
mod tests;

pub use crate::backend::budget::{FdBudget, Fds, raise_nofile_limit};
pub use hotplug::CpuTracker;

use crate::backend::Backend;
use crate::backend::auto::Left;
use crate::backend::choose::{Kind, Opened};
use crate::cgroups::Cgroups;
use crate::config::MetricDef;
use crate::cri::Names;
use crate::discovery::Discovery;
use crate::energy::Account;
use crate::host::Host;
use crate::plan::Plan;
use crate::process::Processes;
use crate::snapshot::{BackendInfo, ErrorReason, Errors, Latest, Operation, Snapshot};
use crate::target::Target;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

/// Messages to a running engine.
#[derive(Debug)]
pub enum Control {
    /// Apply a new plan, or record that loading a config failed (the
    /// running one stays).
    Reload(Result<Box<Plan>, String>),
    /// A CPU went offline or came online ([`crate::cpus::watch`]): follow
    /// it now, not at the next collection, so that what a CPU back online
    /// counts is counted from then on.
    Cpus,
    /// Stop after the current interval.
    Stop,
}

/// How often a target that hands counts over between reads (the rings of
/// `by:` tracepoints) is drained between collections, besides whenever it
/// asks. A sample takes about 40 bytes, so a default ring (256 KiB) holds
/// about 6,500 between two drains: some 650,000 hits a second per CPU. A
/// drain of an empty ring is one atomic load per CPU.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Owns the targets, and the loop that reads them.
#[derive(Debug)]
pub struct Engine {
    plan: Plan,
    /// The plan's metrics as described in each snapshot, made once per
    /// plan ([`Plan::described_metrics`]).
    metric_defs: Vec<Arc<MetricDef>>,
    cpus: CpuTracker,
    /// What is counted for: see [`targets`].
    targets: Vec<Box<dyn Target>>,
    /// Whether the targets were given a plan yet (at the first collection,
    /// once the CPUs are known).
    applied: bool,
    /// Failures of the engine's and the targets' own reads and opens (CPU
    /// list, cgroup hierarchy, `/proc`, the host's and processes' groups).
    errors: Errors,
    reload_ok: bool,
    reload_success_time: SystemTime,
    latest: Latest,
    collections: u64,
    /// Which backend counts, and why `auto` fell back.
    backend: BackendInfo,
    /// Why `auto` left BPF for the cgroup backend while it ran, once it
    /// did: then that is the backend that counts.
    left: Left,
    /// Energy per cgroup, when the plan asks for it.
    energy: Option<Account>,
    /// Where energy's perf descriptors are counted, with the targets', and
    /// their budget.
    fds: Fds,
}

/// The table of targets: the cgroups, counted by the backend chosen for
/// them (`backend::choose`); the host and processes, counted by perf
/// events of their own whatever that backend is. A new target is one
/// module implementing [`Target`] and one row here.
fn targets<B: Backend + Send + 'static>(
    backend: B,
    discovery: Discovery,
    names: Option<Names>,
    fds: &Fds,
) -> Vec<Box<dyn Target>> {
    vec![
        Box::new(Cgroups::new(backend, discovery, names)),
        Box::new(Host::new(fds.clone())),
        Box::new(Processes::new(fds.clone())),
    ]
}

impl Engine {
    /// An engine counting with an `opened` backend; `names` gives pod and
    /// container cgroups the container runtime's names.
    pub fn new(
        plan: Plan,
        discovery: Discovery,
        opened: Opened,
        latest: Latest,
        names: Option<Names>,
    ) -> Self {
        let cpus = CpuTracker::new(opened.fds.tally);
        let fds = Fds {
            tally: cpus.tally(),
            budget: opened.fds.budget,
        };
        let targets = targets(opened.backend, discovery, names, &fds);
        let mut engine = Self::of(plan, targets, cpus, latest, fds);
        engine.backend = opened.info;
        engine.left = opened.left;
        engine
    }

    /// An engine counting cgroups with `backend`, following CPUs with
    /// `cpus`; every target keeps within `budget` perf descriptors.
    pub fn with_backend<B: Backend + Send + 'static>(
        plan: Plan,
        discovery: Discovery,
        (backend, budget): (B, FdBudget),
        cpus: CpuTracker,
        latest: Latest,
    ) -> Self {
        let fds = Fds {
            tally: cpus.tally(),
            budget,
        };
        let targets = targets(backend, discovery, None, &fds);
        Self::of(plan, targets, cpus, latest, fds)
    }

    /// An engine of `targets`; energy's descriptors are counted in `fds`.
    fn of(
        plan: Plan,
        targets: Vec<Box<dyn Target>>,
        cpus: CpuTracker,
        latest: Latest,
        fds: Fds,
    ) -> Self {
        log_support(&plan);
        let energy = plan
            .energy
            .map(|e| Account::new(e, plan.cores(), fds.clone()));
        Self {
            metric_defs: plan.described_metrics(),
            plan,
            cpus,
            targets,
            applied: false,
            errors: Errors::default(),
            reload_ok: true,
            reload_success_time: SystemTime::now(),
            latest,
            collections: 0,
            backend: BackendInfo::default(),
            left: Left::default(),
            energy,
            fds,
        }
    }

    /// Runs one interval: reads everything, follows CPUs going offline and
    /// online, follows what each target counts (new and removed cgroups,
    /// processes started and exited), and publishes the snapshot.
    pub fn collect(&mut self) {
        let started = Instant::now();
        for target in &mut self.targets {
            target.read(&mut self.errors);
        }
        if let Some(energy) = &mut self.energy {
            energy.read();
        }
        self.follow_cpus();
        let online = self.cpus.online();
        for target in &mut self.targets {
            match self.applied {
                true => target.follow(&self.plan, &online, &mut self.errors),
                false => target.apply(&self.plan, &online, &mut self.errors),
            }
        }
        self.applied = true;
        self.collections += 1;
        let snapshot = self.snapshot(started);
        self.latest.publish(snapshot);
    }

    /// Collects every interval until told to stop; applies reloads as they
    /// arrive.
    pub fn run(mut self, control: Receiver<Control>) {
        let mut next = Instant::now();
        loop {
            self.collect();
            next += self.plan.interval;
            let now = Instant::now();
            if next < now {
                // Collection overran the interval: skip ahead rather than
                // bursting; the per-interval deltas stay correct either way.
                next = now + self.plan.interval;
            }
            loop {
                let drains = self.targets.iter().any(|t| t.drains());
                let wake = match drains {
                    true => next.min(Instant::now() + DRAIN_EVERY),
                    false => next,
                };
                let timeout = wake.saturating_duration_since(Instant::now());
                let message = match self.targets.iter_mut().find(|t| t.drains()) {
                    Some(target) => {
                        // Also woken when the target asks to be drained.
                        target.wait(timeout);
                        control.try_recv().map_err(|e| match e {
                            TryRecvError::Empty => RecvTimeoutError::Timeout,
                            TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                        })
                    }
                    None => control.recv_timeout(timeout),
                };
                match message {
                    Err(RecvTimeoutError::Timeout) if Instant::now() < next => {
                        for target in self.targets.iter_mut().filter(|t| t.drains()) {
                            target.drain();
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Ok(Control::Reload(Ok(plan))) => self.reload(*plan),
                    Ok(Control::Cpus) => self.follow_cpus(),
                    Ok(Control::Reload(Err(reason))) => {
                        self.reload_ok = false;
                        tracing::error!(
                            "config reload failed, keeping the running config: {reason}"
                        );
                    }
                    Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        }
    }

    /// Applies a new config's `plan` (built by the caller off this thread:
    /// building resolves uprobe binaries and probes every group, which
    /// must never stall collections): what did not change keeps what
    /// counts it and its totals, changed groups are counted anew keeping
    /// the totals of the events they still have, what is gone vanishes.
    pub fn reload(&mut self, plan: Plan) {
        // An account that stays keeps its totals: no energy counter goes
        // back at a reload.
        self.energy = match (self.energy.take(), plan.energy) {
            (Some(account), Some(energy)) => Some(account.reload(energy)),
            (account, energy) => {
                // The old account's descriptors close before the new one's
                // open.
                drop(account);
                energy.map(|e| Account::new(e, plan.cores(), self.fds.clone()))
            }
        };
        self.plan = plan;
        self.metric_defs = self.plan.described_metrics();
        log_support(&self.plan);
        let online = self.cpus.online();
        for target in &mut self.targets {
            target.apply(&self.plan, &online, &mut self.errors);
        }
        self.applied = true;
        self.reload_ok = true;
        self.reload_success_time = SystemTime::now();
        tracing::info!("config reloaded");
    }

    /// Tells every target of CPUs that went offline (what counted there is
    /// read a last time and closed) and came (back) online.
    fn follow_cpus(&mut self) {
        let online = match crate::cpus::online() {
            Ok(online) => online,
            Err(e) => {
                self.errors.count(Operation::Read, ErrorReason::CpuList);
                tracing::debug!("keeping the known CPUs: {e}");
                return;
            }
        };
        let changes = self.cpus.update(&online);
        if changes == Default::default() {
            return;
        }
        if self.collections > 0 {
            tracing::info!(online = ?changes.open, offline = ?changes.closed, "CPUs changed");
        }
        crate::machine::follow_literals(&online);
        for target in &mut self.targets {
            target.cpus_changed(&changes, &online, &mut self.errors);
        }
    }

    /// The snapshot of the collection `started` began, timed from then to
    /// its end: the engine's own
    /// figures, then every target's series.
    fn snapshot(&mut self, started: Instant) -> Snapshot {
        let mut snapshot = Snapshot::empty();
        snapshot.interval = self.plan.interval;
        snapshot.metric_defs = self.metric_defs.clone();
        snapshot.spellings = self.plan.spellings.clone();
        snapshot.support = self.plan.support.clone();
        snapshot.host_support = self.plan.host.support.clone();
        snapshot.errors = self.errors.clone();
        snapshot.collections = self.collections;
        snapshot.reload_ok = self.reload_ok;
        snapshot.reload_success_time = self.reload_success_time;
        if let Some(why) = self.left.get() {
            self.backend = BackendInfo {
                name: Kind::Cgroup.name(),
                fallback: Some(why.clone()),
            };
        }
        snapshot.backend = self.backend.clone();
        let now = Instant::now();
        for target in &mut self.targets {
            target.show(&self.plan, now, &mut snapshot);
        }
        if let Some(energy) = &mut self.energy {
            energy.show(&mut snapshot);
        }
        snapshot.taken_at = SystemTime::now();
        let finished = Instant::now();
        snapshot.finished = Some(finished);
        // Showing computes every metric of every target: part of the
        // collection, and with thousands of metrics most of it.
        snapshot.collection_seconds = finished.duration_since(started).as_secs_f64();
        snapshot
    }
}

/// Logs every group or tracepoint this machine cannot count; when it can
/// count none, one error line with the fix instead (each reason then at
/// debug level: `cgperf check` shows them all).
fn log_support(plan: &Plan) {
    let every = || plan.support.iter().chain(&plan.host.support);
    let nothing = crate::snapshot::nothing_countable(every());
    if let Some(why) = &nothing {
        tracing::error!("{why}");
    }
    for (i, s) in every().enumerate() {
        if let Err(reason) = &s.status {
            let whose = if i < plan.support.len() { "" } else { "host " };
            let what = s.event.as_ref().map_or_else(
                || format!("{whose}group `{}`", s.group),
                |e| format!("{whose}{} `{e}`", s.group.entry_kind()),
            );
            if nothing.is_some() {
                tracing::debug!("{what} disabled: {reason}");
            } else {
                tracing::warn!("{what} disabled: {reason}");
            }
        }
    }
}
