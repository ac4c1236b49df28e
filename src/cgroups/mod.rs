//! cgroups as a target: those discovery finds for the config's selectors,
//! counted by the backend chosen for them (cgroup-mode perf events or the
//! BPF program, `by:` tracepoints through rings or in the kernel), admitted
//! in priority order within the limits and reconciled on reloads
//! (`counting.rs`), named by the container runtime when asked, and shown as
//! series keyed by cgroup (`series.rs`, with each cgroup's series keys kept
//! across snapshots in `keys.rs`).
//!
//! Totals live apart from what counts them ([`crate::totals`]), so
//! reopening (a CPU back online, a reload that changes a group) never
//! resets or double-counts a series; only a cgroup that disappears loses
//! its series.

mod activity;
mod counting;
mod keys;
mod series;
#[cfg(test)]
mod tests;

use crate::backend::Backend;
use crate::cpus::CpuChanges;
use crate::cri::Names;
use crate::discovery::Discovery;
use crate::host::Sockets;
use crate::plan::Plan;
use crate::snapshot::{ErrorReason, Errors, Operation, SkipReason, Snapshot, Weighed};
use crate::target::Target;
use activity::Weight;
use counting::Counting;
use series::AllSeries;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The cgroups counted, what finds them, and what names them.
pub struct Cgroups<B> {
    discovery: Discovery,
    counting: Counting<B>,
    /// Pod and container names from the container runtime, if asked for.
    names: Option<Names>,
    /// Each CPU's socket, which the cgroups' energy weights are summed by.
    sockets: Sockets,
    /// The cgroups of the last snapshot's activity: the next one shares
    /// the list while they stay the same.
    weighed: Arc<[Weighed]>,
}

/// Without the backend, which need not say what it holds.
impl<B> std::fmt::Debug for Cgroups<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cgroups")
            .field("discovery", &self.discovery)
            .field("counted", &self.counting.entries.len())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Cgroups<B> {
    /// Counts with `backend` the cgroups `discovery` finds, once a plan is
    /// applied; `names` gives pod and container cgroups the runtime's
    /// names (`pod`, `namespace`, `container`, `image`), never waiting on
    /// it.
    pub fn new(backend: B, discovery: Discovery, names: Option<Names>) -> Self {
        Self {
            discovery,
            counting: Counting::new(backend, None, Vec::new()),
            names,
            sockets: Sockets::new(std::path::Path::new(crate::host::CPU_ROOT)),
            weighed: Arc::from([]),
        }
    }

    /// Follows the cgroups discovery finds, when they may have changed (or
    /// `force`). A scan that could not list the hierarchy changes nothing
    /// and is counted as a `cgroup_list` read error; discovery scans again
    /// at the next collection.
    fn rediscover(&mut self, plan: &Plan, online: &[u32], errors: &mut Errors, force: bool) {
        match self.discovery.poll(&plan.selectors, force) {
            Some(Ok(found)) => {
                let fs = self.discovery.fs();
                self.counting
                    .sync(found, plan, fs, online, self.names.as_ref());
            }
            Some(Err(_)) => errors.count(Operation::Read, ErrorReason::CgroupList),
            None => {}
        }
    }

    /// Gives the cgroups still waiting for them the names the runtime knows
    /// by now.
    fn name_cgroups(&mut self) {
        let Some(names) = &self.names else { return };
        for entry in self.counting.entries.values_mut().filter(|e| e.unnamed) {
            if let Some(named) = names.lookup(entry.labels()) {
                let labels = entry.labels().iter().cloned().chain(named).collect();
                entry.set_labels(labels);
                entry.unnamed = false;
            }
        }
    }
}

impl<B: Backend + Send> Target for Cgroups<B> {
    /// Every cgroup is reconciled with `plan` at once: what did not change
    /// keeps what counts it and its totals.
    fn apply(&mut self, plan: &Plan, online: &[u32], errors: &mut Errors) {
        self.counting.reloaded(
            plan,
            plan.max_cgroups,
            plan.labels.clone(),
            self.names.is_some(),
        );
        self.rediscover(plan, online, errors, true);
        self.name_cgroups();
    }

    fn read(&mut self, _errors: &mut Errors) {
        self.counting.read();
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, _online: &[u32], _errors: &mut Errors) {
        self.counting.cpus_changed(changes);
    }

    /// Cgroups skipped for the descriptor budget are tried again at every
    /// collection until they fit (descriptors come back without any
    /// change in the hierarchy that would make discovery scan again).
    fn follow(&mut self, plan: &Plan, online: &[u32], errors: &mut Errors) {
        let counting = &mut self.counting;
        counting.backend.retry(online, &mut counting.totals);
        let waiting = counting
            .skipped
            .get(&SkipReason::FdBudget)
            .is_some_and(|n| *n > 0);
        self.rediscover(plan, online, errors, waiting);
        self.name_cgroups();
    }

    fn show(&mut self, plan: &Plan, now: Instant, snapshot: &mut Snapshot) {
        let counting = &mut self.counting;
        let weight = plan.energy.and_then(|e| e.weight);
        let series = AllSeries::of(
            &mut counting.entries,
            &mut counting.totals,
            plan.per_cpu,
            weight.map(|label| Weight {
                label,
                sockets: &mut self.sockets,
                last: &mut self.weighed,
            }),
            now,
        );
        snapshot.counters = series.counters;
        snapshot.group_times = series.group_times;
        snapshot.events_lost = series.events_lost;
        snapshot.metrics = series.metrics;
        match weight {
            Some(weight) => {
                snapshot.activity = series.activity;
                snapshot.activity_weight = weight;
            }
            // Without `energy:`, no list of cgroups kept for the next one.
            None if !self.weighed.is_empty() => self.weighed = Arc::from([]),
            None => {}
        }
        snapshot.skipped = counting.skipped.clone();
        snapshot.monitored_cgroups = counting.entries.len() as u64;
        snapshot.cri_failures = self.names.as_ref().map_or(0, Names::failures);
        let stats = counting.backend.stats();
        snapshot.errors.add(&stats.errors);
        snapshot.open_fds = stats.open_fds;
        snapshot.samples_lost = stats.samples_lost;
        snapshot.samples_undecodable = stats.samples_undecodable;
        snapshot.bpf_run_seconds = stats.bpf_run_ns as f64 / 1e9;
        snapshot.bpf_runs = stats.bpf_runs;
        snapshot.bpf_unseen_switches = stats.bpf_unseen_switches;
    }

    fn drains(&self) -> bool {
        self.counting.backend.drains()
    }

    fn wait(&mut self, timeout: Duration) {
        self.counting.backend.wait(timeout);
    }

    fn drain(&mut self) {
        let counting = &mut self.counting;
        counting.backend.drain(&mut counting.totals);
    }
}
