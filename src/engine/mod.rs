//! The engine: decides what to count for the cgroups discovery finds and the
//! CPUs that are online, has a counting [`Backend`] count it, reads once per
//! interval and publishes one immutable [`Snapshot`] for the exporters.
//!
//! Totals live apart from what counts them ([`crate::totals`]), so
//! reopening (a CPU back online, a reload that changes a group) never resets
//! or double-counts a series; only a cgroup that disappears loses its
//! series.

mod counting;
mod hotplug;
mod keys;
mod series;
#[cfg(test)]
mod tests;

pub use crate::backend::budget::{FdBudget, raise_nofile_limit};
pub use hotplug::CpuTracker;

use crate::backend::Backend;
use crate::backend::choose::Opened;
use crate::config::Config;
use crate::cri::Names;
use crate::discovery::Discovery;
use crate::host::Host;
use crate::plan::Plan;
use crate::process::Processes;
use crate::snapshot::{BackendInfo, ErrorReason, Errors, Latest, Operation, Snapshot};
use counting::{Counting, nameable};
use series::AllSeries;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

/// Messages to a running engine.
#[derive(Debug)]
pub enum Control {
    /// Apply a new config, or record that loading one failed (the running
    /// config stays).
    Reload(Result<Box<NewConfig>, String>),
    /// Stop after the current interval.
    Stop,
}

/// A config and its plan, built off the engine's thread (see
/// [`crate::reload`]): building resolves uprobe binaries and probes every
/// group, which must never stall collections.
#[derive(Debug)]
pub struct NewConfig {
    /// The config.
    pub config: Config,
    /// Its plan on this machine.
    pub plan: Plan,
}

/// How often a backend that hands counts over between reads (the rings of
/// `by:` tracepoints) is drained between collections, besides whenever it
/// asks. A sample takes about 40 bytes, so a default ring (256 KiB) holds
/// about 6,500 between two drains: some 650,000 hits a second per CPU. A
/// drain of an empty ring is one atomic load per CPU.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Owns what is counted, the totals, and the loop that reads them.
#[derive(Debug)]
pub struct Engine<B = Box<dyn Backend + Send>> {
    plan: Plan,
    discovery: Discovery,
    cpus: CpuTracker,
    counting: Counting<B>,
    /// What `host:` counts for the whole machine.
    host: Host,
    /// What `processes:` counts.
    processes: Processes,
    /// Failures of the engine's own reads (CPU list, cgroup hierarchy).
    errors: Errors,
    reload_ok: bool,
    reload_success_time: SystemTime,
    latest: Latest,
    collections: u64,
    /// Pod and container names from the container runtime, if asked for.
    names: Option<Names>,
    /// Which backend counts, and why `auto` fell back.
    backend: BackendInfo,
}

impl Engine {
    /// An engine counting with an `opened` backend.
    pub fn new(
        config: &Config,
        plan: Plan,
        discovery: Discovery,
        opened: Opened,
        latest: Latest,
    ) -> Self {
        let cpus = CpuTracker::new(opened.tally);
        let mut engine = Self::with_backend(config, plan, discovery, opened.backend, cpus, latest);
        engine.backend = opened.info;
        engine
    }
}

impl<B: Backend> Engine<B> {
    /// An engine counting with `backend`, following CPUs with `cpus`.
    pub fn with_backend(
        config: &Config,
        plan: Plan,
        discovery: Discovery,
        mut backend: B,
        cpus: CpuTracker,
        latest: Latest,
    ) -> Self {
        log_support(&plan);
        backend.configure(&plan);
        let host = Host::new(cpus.tally());
        let processes = Processes::new(cpus.tally());
        Self {
            plan,
            discovery,
            cpus,
            counting: Counting::new(backend, config.max_cgroups, config.labels.clone()),
            host,
            processes,
            errors: Errors::default(),
            reload_ok: true,
            reload_success_time: SystemTime::now(),
            latest,
            collections: 0,
            names: None,
            backend: BackendInfo::default(),
        }
    }

    /// Adds the runtime's names (`pod`, `namespace`, `container`, `image`)
    /// to the labels of pod and container cgroups, once `names` knows them.
    /// Looking them up never waits on the runtime.
    pub fn set_names(&mut self, names: Names) {
        self.names = Some(names);
        for entry in self.counting.entries.values_mut() {
            entry.unnamed = nameable(entry.labels());
        }
    }

    /// Runs one interval: reads everything, follows CPUs going offline and
    /// online, picks up new and removed cgroups, and publishes the snapshot.
    pub fn collect(&mut self) {
        let started = Instant::now();
        self.counting.read();
        self.host.read(&mut self.errors);
        self.processes.read(&mut self.errors);
        let online = self.cpus.online();
        self.counting
            .backend
            .retry(&online, &mut self.counting.totals);
        self.follow_cpus();
        self.rediscover(false);
        match self.processes.applied() {
            true => self.processes.rescan(&mut self.errors),
            false => self.processes.apply(&self.plan, &mut self.errors),
        }
        self.name_cgroups();
        self.collections += 1;
        let snapshot = self.snapshot(started.elapsed().as_secs_f64());
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
                let drains = self.counting.backend.drains();
                let wake = match drains {
                    true => next.min(Instant::now() + DRAIN_EVERY),
                    false => next,
                };
                let timeout = wake.saturating_duration_since(Instant::now());
                let message = if drains {
                    // Also woken when the backend asks to be drained.
                    self.counting.backend.wait(timeout);
                    control.try_recv().map_err(|e| match e {
                        TryRecvError::Empty => RecvTimeoutError::Timeout,
                        TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    })
                } else {
                    control.recv_timeout(timeout)
                };
                match message {
                    Err(RecvTimeoutError::Timeout) if Instant::now() < next => {
                        let counting = &mut self.counting;
                        counting.backend.drain(&mut counting.totals);
                    }
                    Err(RecvTimeoutError::Timeout) => break,
                    Ok(Control::Reload(Ok(new))) => self.reload(&new.config, new.plan),
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

    /// Applies a new config: what did not change keeps what counts it and
    /// its totals, changed groups are counted anew keeping the totals of
    /// the events they still have, what is gone vanishes. `plan` is
    /// `config`'s, built by the caller off this thread.
    pub fn reload(&mut self, config: &Config, plan: Plan) {
        self.plan = plan;
        log_support(&self.plan);
        let online = self.cpus.online();
        self.host.apply(&self.plan.host, &online, &mut self.errors);
        self.processes.apply(&self.plan, &mut self.errors);
        self.counting.reloaded(
            &self.plan,
            config.max_cgroups,
            config.labels.clone(),
            self.names.is_some(),
        );
        self.rediscover(true);
        self.reload_ok = true;
        self.reload_success_time = SystemTime::now();
        tracing::info!("config reloaded");
    }

    /// Follows the cgroups discovery finds, when they may have changed (or
    /// `force`). A scan that could not list the hierarchy changes nothing
    /// and is counted as a `cgroup_list` read error; discovery scans again
    /// at the next collection.
    fn rediscover(&mut self, force: bool) {
        match self.discovery.poll(&self.plan.selectors, force) {
            Some(Ok(found)) => {
                let online = self.cpus.online();
                let fs = self.discovery.fs();
                self.counting
                    .sync(found, &self.plan, fs, &online, self.names.as_ref());
            }
            Some(Err(_)) => self.errors.count(Operation::Read, ErrorReason::CgroupList),
            None => {}
        }
    }

    /// Closes what counted on CPUs that went offline (after a final read)
    /// and counts on CPUs that came (back) online.
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
        self.counting.cpus_changed(&changes);
        if !self.host.applied() {
            // The CPUs are known now.
            self.host.apply(&self.plan.host, &online, &mut self.errors);
        } else {
            self.host.cpus_changed(&changes, &online, &mut self.errors);
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

    fn snapshot(&mut self, collection_seconds: f64) -> Snapshot {
        let counting = &mut self.counting;
        let series = AllSeries::of(
            &mut counting.entries,
            &mut counting.totals,
            self.plan.per_cpu,
            Instant::now(),
        );
        let stats = counting.backend.stats();
        let processes = self.processes.samples(Instant::now());
        let mut errors = stats.errors;
        errors.add(&self.errors);
        Snapshot {
            taken_at: SystemTime::now(),
            finished: Some(Instant::now()),
            interval: self.plan.interval,
            counters: series.counters,
            group_times: series.group_times,
            events_lost: series.events_lost,
            metrics: series.metrics,
            metric_defs: self.plan.metrics.clone(),
            support: self.plan.support.clone(),
            host: self.host.samples(self.plan.per_cpu),
            host_support: self.plan.host.support.clone(),
            processes: processes.counters,
            process_counts: processes.counts,
            process_metrics: processes.metrics,
            processes_skipped: self.processes.skipped(),
            errors,
            skipped: counting.skipped.clone(),
            open_fds: stats.open_fds,
            monitored_cgroups: counting.entries.len() as u64,
            collection_seconds,
            samples_lost: stats.samples_lost,
            samples_undecodable: stats.samples_undecodable,
            collections: self.collections,
            reload_ok: self.reload_ok,
            cri_failures: self.names.as_ref().map_or(0, Names::failures),
            reload_success_time: self.reload_success_time,
            backend: self.backend.clone(),
            bpf_run_seconds: stats.bpf_run_ns as f64 / 1e9,
            bpf_runs: stats.bpf_runs,
        }
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
