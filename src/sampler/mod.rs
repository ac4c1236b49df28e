//! The sampler: decides what to open for the cgroups discovery finds and the
//! CPUs that are online, reads every group once per interval, scales per
//! interval and publishes one immutable [`Snapshot`] for the exporters.
//!
//! Totals live in accumulators that outlive the descriptors they read, so
//! reopening (a CPU back online, a reload that changes a group) never resets
//! or double-counts a series; only a cgroup that disappears loses its series.

mod budget;
mod hotplug;
mod sampled;
mod scale;

pub use budget::{FdBudget, Tally, raise_nofile_limit};
pub use hotplug::{CpuChanges, CpuTracker};
pub use scale::{Accumulator, GroupTotals, Interval};

use crate::config::Config;
use crate::cri::Names;
use crate::discovery::{Discovery, Found};
use crate::labels::{Extractor, extract};
use crate::perf::{
    CounterGroup, Errno, OpenFailure, ReadError, SampledEvent, Target, open_failure_reason,
};
use crate::plan::{GroupSpec, Plan, SampledSpec};
use crate::snapshot::{CounterSample, GroupTimeSample, Labels, Latest, Snapshot};
use sampled::{Rings, SampledState};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

/// Messages to a running sampler.
#[derive(Debug)]
pub enum Control {
    /// Apply a new config, or record that loading one failed (the running
    /// config stays).
    Reload(Result<Box<NewConfig>, String>),
    /// Stop after the current interval.
    Stop,
}

/// A config and its plan, built off the sampling thread (see
/// [`crate::reload`]): building resolves uprobe binaries and probes every
/// group, which must never stall collections.
#[derive(Debug)]
pub struct NewConfig {
    /// The config.
    pub config: Config,
    /// Its plan on this machine.
    pub plan: Plan,
}

/// How often the rings of `by:` tracepoints are drained between
/// collections, besides whenever a ring is half full. A sample takes about
/// 40 bytes, so a default ring (256 KiB) holds about 6,500 between two
/// drains: some 650,000 hits a second per CPU. A drain of an empty ring is
/// one atomic load per CPU.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Why a cgroup that a selector chose is not counted.
pub const SKIP_REASONS: [&str; 2] = ["max_cgroups", "fd_budget"];

/// An open group whose descriptors are counted in the tally while it lives.
#[derive(Debug)]
struct Held {
    group: CounterGroup,
    _fds: Tally,
}

impl Held {
    /// Counts `group`'s descriptors in `tally` for as long as it lives.
    fn new(group: CounterGroup, tally: &Arc<AtomicU64>) -> Self {
        let fds = Tally::new(tally, group.fd_count() as u64);
        Self { group, _fds: fds }
    }
}

/// A group on one CPU: its descriptors while open, its totals forever.
#[derive(Debug)]
struct CpuCounter {
    cpu: u32,
    open: Option<Held>,
    acc: Accumulator,
}

/// A group in one cgroup.
#[derive(Debug)]
struct GroupState {
    spec: Arc<GroupSpec>,
    cpus: Vec<CpuCounter>,
    /// CPUs it failed to open on for a reason that passes: tried again at
    /// each collection (see [`Sampler::open_unopened`]).
    unopened: BTreeSet<u32>,
}

/// A monitored cgroup.
#[derive(Debug)]
struct CgroupState {
    path: Arc<str>,
    ino: u64,
    selectors: Vec<usize>,
    generation: u64,
    labels: Labels,
    /// Its labels name a pod or container whose names the runtime has not
    /// given yet (see [`Sampler::set_names`]).
    unnamed: bool,
    groups: Vec<GroupState>,
    /// Its `by:` tracepoints.
    sampled: Vec<SampledState>,
    /// When counting this cgroup began: the start of all its series.
    created: SystemTime,
}

/// Open and read failures by (operation, reason), for self-metrics.
type Errors = BTreeMap<(&'static str, &'static str), u64>;

/// Opens groups within the descriptor budget, and counts and logs failures.
#[derive(Debug)]
struct Opener {
    budget: FdBudget,
    tally: Arc<AtomicU64>,
    errors: Errors,
    logged: HashSet<(Arc<str>, OpenFailure)>,
    /// The per-CPU rings of `by:` tracepoints.
    rings: Rings,
    /// Data pages of a new ring.
    ring_pages: usize,
    /// Sample ids of `by:` events closed by a reload whose series carry on:
    /// forgotten only after the rings are drained, so that the samples they
    /// wrote before closing are counted.
    retired: Vec<u64>,
}

/// The budget ran out: the cgroup being opened must be given up.
#[derive(Debug)]
struct OutOfFds;

/// Why a group or `by:` tracepoint was not opened on a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NotOpened {
    /// Descriptors ran out: the budget's or the process's.
    OutOfFds,
    /// Another failure that passes (memory, a busy PMU, a signal).
    ForNow,
    /// A lasting failure: no such event, no permission, the CPU or the
    /// cgroup gone. Counted and logged; trying again would fail the same.
    ForGood,
}

/// The opened `T`, or `None`; then `cpu` joins `unopened`, the CPUs to try
/// again on, if the failure passes (running out of descriptors included).
/// An open that succeeds leaves it.
fn or_later<T>(opened: Result<T, NotOpened>, unopened: &mut BTreeSet<u32>, cpu: u32) -> Option<T> {
    match opened {
        Ok(opened) => {
            unopened.remove(&cpu);
            Some(opened)
        }
        Err(NotOpened::ForGood) => {
            unopened.remove(&cpu);
            None
        }
        Err(NotOpened::OutOfFds | NotOpened::ForNow) => {
            unopened.insert(cpu);
            None
        }
    }
}

/// As [`or_later`], except that running out of descriptors gives up the
/// cgroup being reconciled (`Err`).
fn or_give_up<T>(
    opened: Result<T, NotOpened>,
    unopened: &mut BTreeSet<u32>,
    cpu: u32,
) -> Result<Option<T>, OutOfFds> {
    if matches!(opened, Err(NotOpened::OutOfFds)) {
        return Err(OutOfFds);
    }
    Ok(or_later(opened, unopened, cpu))
}

impl Opener {
    fn used(&self) -> u64 {
        self.tally.load(Ordering::Relaxed)
    }

    /// Opens `spec` for the cgroup whose directory is `dir` on `cpu`.
    /// A failure leaves the group unopened on this CPU; those of the kernel
    /// are counted and logged once.
    fn open(
        &mut self,
        spec: &GroupSpec,
        cgroup: &str,
        dir: &std::fs::File,
        cpu: u32,
    ) -> Result<Held, NotOpened> {
        let n = spec.events.len() as u64;
        if !self.budget.fits(self.used(), n) {
            return Err(NotOpened::OutOfFds);
        }
        let target = Target::Cgroup(dir.as_fd());
        CounterGroup::open_filtered(&spec.attrs(), &spec.filters(), target, cpu)
            .map(|group| Held::new(group, &self.tally))
            .map_err(|e| self.failed(&spec.name.shared_label(), cgroup, cpu, e.errno))
    }

    /// Opens a `by:` tracepoint for the cgroup whose directory is `dir` on
    /// `cpu`, writing into that CPU's ring (opened if needed). Same results
    /// as [`Opener::open`].
    fn open_sampled(
        &mut self,
        spec: &SampledSpec,
        cgroup: &Arc<str>,
        dir: &std::fs::File,
        cpu: u32,
    ) -> Result<(SampledEvent, Tally), NotOpened> {
        // One for the event, one for the ring if this CPU has none yet.
        if !self.budget.fits(self.used(), 2) {
            return Err(NotOpened::OutOfFds);
        }
        let opened = self
            .rings
            .ensure(cpu, self.ring_pages, &self.tally)
            .and_then(|ring| {
                let target = Target::Cgroup(dir.as_fd());
                SampledEvent::open(&spec.attr, spec.filter.as_deref(), target, cpu, ring)
            });
        match opened {
            Ok(event) => {
                self.rings.register(event.id(), cgroup, &spec.label);
                Ok((event, Tally::new(&self.tally, 1)))
            }
            Err(errno) => Err(self.failed(&spec.label, cgroup, cpu, errno)),
        }
    }

    /// Counts and logs a failed open, and says whether it passes.
    fn failed(&mut self, name: &Arc<str>, cgroup: &str, cpu: u32, errno: Errno) -> NotOpened {
        let failure = OpenFailure::from_errno(errno);
        *self.errors.entry(("open", failure.label())).or_default() += 1;
        if failure != OpenFailure::Gone && self.logged.insert((name.clone(), failure)) {
            tracing::warn!(
                group = %name, cgroup, cpu,
                "cannot open group: {} (logged once per group and reason)",
                open_failure_reason(errno)
            );
        }
        match failure {
            OpenFailure::TooManyOpenFiles => NotOpened::OutOfFds,
            _ if errno.passes() => NotOpened::ForNow,
            _ => NotOpened::ForGood,
        }
    }
}

/// Owns every open counter and every running total.
#[derive(Debug)]
pub struct Sampler {
    plan: Plan,
    generation: u64,
    extractors: Vec<Extractor>,
    max_cgroups: Option<usize>,
    discovery: Discovery,
    cpus: CpuTracker,
    opener: Opener,
    cgroups: BTreeMap<String, CgroupState>,
    skipped: BTreeMap<&'static str, u64>,
    reload_ok: bool,
    reload_success_time: SystemTime,
    latest: Latest,
    collections: u64,
    /// Pod and container names from the container runtime, if asked for.
    names: Option<Names>,
}

impl Sampler {
    /// A sampler for `config`, planned as `plan`, finding cgroups with
    /// `discovery` and publishing into `latest`.
    pub fn new(
        config: &Config,
        plan: Plan,
        discovery: Discovery,
        budget: FdBudget,
        latest: Latest,
    ) -> Self {
        // Every perf descriptor, the hotplug canaries' and rings' included.
        let tally = Arc::new(AtomicU64::new(0));
        let ring_pages = plan.ring_pages;
        log_support(&plan);
        Self {
            plan,
            generation: 0,
            extractors: config.labels.clone(),
            max_cgroups: config.max_cgroups,
            discovery,
            cpus: CpuTracker::new(tally.clone()),
            opener: Opener {
                budget,
                tally,
                errors: no_errors_yet(),
                logged: HashSet::new(),
                rings: Rings::default(),
                ring_pages,
                retired: Vec::new(),
            },
            cgroups: BTreeMap::new(),
            skipped: SKIP_REASONS.iter().map(|r| (*r, 0)).collect(),
            reload_ok: true,
            reload_success_time: SystemTime::now(),
            latest,
            collections: 0,
            names: None,
        }
    }

    /// Adds the runtime's names (`pod`, `namespace`, `container`, `image`)
    /// to the labels of pod and container cgroups, once `names` knows them.
    /// Looking them up never waits on the runtime.
    pub fn set_names(&mut self, names: Names) {
        self.names = Some(names);
        for state in self.cgroups.values_mut() {
            state.unnamed = nameable(&state.labels);
        }
    }

    /// Runs one interval: reads every group, follows CPUs going offline and
    /// online, picks up new and removed cgroups, and publishes the snapshot.
    pub fn collect(&mut self) {
        let started = Instant::now();
        self.settle_sampled();
        self.read_all();
        self.open_unopened();
        self.follow_cpus();
        self.rediscover(false);
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
                // Rings are drained between collections too, so that a
                // burst fits in them.
                let wake = match self.opener.rings.is_empty() {
                    true => next,
                    false => next.min(Instant::now() + DRAIN_EVERY),
                };
                let timeout = wake.saturating_duration_since(Instant::now());
                let message = if self.opener.rings.is_empty() {
                    control.recv_timeout(timeout)
                } else {
                    // Also woken by a ring half full.
                    self.opener.rings.wait(timeout);
                    control.try_recv().map_err(|e| match e {
                        TryRecvError::Empty => RecvTimeoutError::Timeout,
                        TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                    })
                };
                match message {
                    Err(RecvTimeoutError::Timeout) if Instant::now() < next => self.drain(None),
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

    /// Applies a new config: what did not change keeps its descriptors and
    /// totals, changed groups are reopened keeping the totals of the events
    /// they still have, what is gone vanishes. `plan` is `config`'s, built
    /// by the caller off this thread.
    pub fn reload(&mut self, config: &Config, plan: Plan) {
        self.plan = plan;
        log_support(&self.plan);
        self.opener.ring_pages = self.plan.ring_pages;
        self.generation += 1;
        self.extractors = config.labels.clone();
        self.max_cgroups = config.max_cgroups;
        for state in self.cgroups.values_mut() {
            state.labels = labels_for(&state.path, &self.extractors);
            state.unnamed = self.names.is_some() && nameable(&state.labels);
        }
        self.rediscover(true);
        self.reload_ok = true;
        self.reload_success_time = SystemTime::now();
        tracing::info!("config reloaded");
    }

    /// Reads the count of every `by:` tracepoint, then drains the rings,
    /// and takes what is still owed as lost, having waited for samples in
    /// flight if that would change anything: the order the argument in
    /// `sampled`'s module doc rests on.
    fn settle_sampled(&mut self) {
        let errors = &mut self.opener.errors;
        for state in self.cgroups.values_mut() {
            for sampled in &mut state.sampled {
                sampled.read_counts(|errno| {
                    let reason = OpenFailure::from_errno(errno).label();
                    *errors.entry(("read", reason)).or_default() += 1;
                });
            }
        }
        self.drain(None);
        let entries = || self.cgroups.values().flat_map(|c| &c.sampled);
        if entries().any(|s| s.counts.owes_more()) {
            sampled::wait_for_writers();
            self.drain(None);
        }
        for state in self.cgroups.values_mut() {
            for sampled in &mut state.sampled {
                sampled.counts.settle();
            }
        }
    }

    /// Follows the cgroups discovery finds, when they may have changed (or
    /// `force`). A scan that could not list the hierarchy changes nothing
    /// and is counted as a `cgroup_list` read error; discovery scans again
    /// at the next collection.
    fn rediscover(&mut self, force: bool) {
        match self.discovery.poll(&self.plan.selectors, force) {
            Some(Ok(found)) => self.sync_cgroups(found),
            Some(Err(_)) => {
                *self
                    .opener
                    .errors
                    .entry(("read", "cgroup_list"))
                    .or_default() += 1;
            }
            None => {}
        }
    }

    /// Counts the pending samples of every ring (or of one CPU's).
    fn drain(&mut self, only: Option<u32>) {
        let cgroups = &mut self.cgroups;
        let (mut key, mut value) = (String::new(), String::new());
        self.opener.rings.drain(only, |cgroup, label, raw| {
            let state = cgroups
                .get_mut(cgroup)
                .and_then(|c| c.sampled.iter_mut().find(|s| *s.spec.label == *label));
            if let Some(state) = state {
                state.count(raw, &mut key, &mut value);
            }
        });
    }

    fn read_all(&mut self) {
        for cgroup in self.cgroups.values_mut() {
            for group in &mut cgroup.groups {
                for counter in &mut group.cpus {
                    counter.read(&mut self.opener.errors);
                }
            }
        }
    }

    /// Closes the events of CPUs that went offline (after their final read)
    /// and opens every group on CPUs that came (back) online.
    fn follow_cpus(&mut self) {
        let online = match crate::cpus::online() {
            Ok(online) => online,
            Err(e) => {
                *self
                    .opener
                    .errors
                    .entry(("read", READ_CPU_LIST))
                    .or_default() += 1;
                tracing::debug!("keeping the known CPUs: {e}");
                return;
            }
        };
        let changes = self.cpus.update(&online);
        if changes == CpuChanges::default() {
            return;
        }
        if self.collections > 0 {
            tracing::info!(online = ?changes.open, offline = ?changes.closed, "CPUs changed");
        }
        let fs = self.discovery.fs().clone();
        let gone = |cpu: u32| changes.closed.contains(&cpu) || changes.open.contains(&cpu);
        // What the rings hold is counted before their events close.
        self.drain(None);
        for state in self.cgroups.values_mut() {
            for group in &mut state.groups {
                for counter in &mut group.cpus {
                    if gone(counter.cpu) {
                        // Dead since the CPU went offline: the final read
                        // gets what it counted until then.
                        counter.close(&mut self.opener.errors);
                    }
                }
            }
            for sampled in &mut state.sampled {
                for &cpu in changes.closed.iter().chain(&changes.open) {
                    self.opener
                        .rings
                        .unregister(sampled.close(Some(cpu)).into_iter());
                }
            }
        }
        for &cpu in changes.closed.iter().chain(&changes.open) {
            self.opener.rings.close(cpu);
        }
        if changes.open.is_empty() {
            return;
        }
        for state in self.cgroups.values_mut() {
            let Ok(dir) = std::fs::File::open(fs.dir(&state.path)) else {
                // Out of descriptors, or removed (then the next scan drops
                // it): tried again at the next collection.
                for group in &mut state.groups {
                    group.unopened.extend(&changes.open);
                }
                for sampled in &mut state.sampled {
                    sampled.unopened.extend(&changes.open);
                }
                continue;
            };
            for group in &mut state.groups {
                for &cpu in &changes.open {
                    let opened = self.opener.open(&group.spec, &state.path, &dir, cpu);
                    let opened = or_later(opened, &mut group.unopened, cpu);
                    group.counter(cpu).reopened(opened);
                }
            }
            for sampled in &mut state.sampled {
                for &cpu in &changes.open {
                    let opened = self
                        .opener
                        .open_sampled(&sampled.spec, &state.path, &dir, cpu);
                    if let Some((event, fds)) = or_later(opened, &mut sampled.unopened, cpu) {
                        sampled.opened(cpu, event, fds);
                    }
                }
            }
        }
    }

    /// Opens what a failure that passes (descriptors, memory, a busy PMU)
    /// left unopened on a CPU, at each collection until it opens, fails
    /// for good, or its CPU goes offline (it is opened again when the CPU
    /// comes back) or its cgroup goes away. Without this, a cgroup would
    /// count nothing on that CPU until a reload.
    fn open_unopened(&mut self) {
        let online = self.cpus.online();
        let fs = self.discovery.fs();
        for state in self.cgroups.values_mut() {
            let pending = state.groups.iter().any(|g| !g.unopened.is_empty())
                || state.sampled.iter().any(|s| !s.unopened.is_empty());
            if !pending {
                continue;
            }
            let Ok(dir) = std::fs::File::open(fs.dir(&state.path)) else {
                continue; // The next collection tries again.
            };
            for group in &mut state.groups {
                for cpu in std::mem::take(&mut group.unopened) {
                    if online.contains(&cpu) {
                        let opened = self.opener.open(&group.spec, &state.path, &dir, cpu);
                        if let Some(held) = or_later(opened, &mut group.unopened, cpu) {
                            group.counter(cpu).reopened(Some(held));
                        }
                    }
                }
            }
            for sampled in &mut state.sampled {
                for cpu in std::mem::take(&mut sampled.unopened) {
                    if online.contains(&cpu) {
                        let opened =
                            self.opener
                                .open_sampled(&sampled.spec, &state.path, &dir, cpu);
                        if let Some((event, fds)) = or_later(opened, &mut sampled.unopened, cpu) {
                            sampled.opened(cpu, event, fds);
                        }
                    }
                }
            }
        }
    }

    /// Drops cgroups that are gone (or were recreated), reconciles the
    /// groups of the others with the plan, and opens new ones within the
    /// limits, in priority order: the config's selector order, then
    /// shallower paths, then by name.
    fn sync_cgroups(&mut self, mut found: Vec<Found>) {
        let alive: HashSet<(&str, u64)> = found.iter().map(|f| (f.path.as_str(), f.ino)).collect();
        let rings = &mut self.opener.rings;
        self.cgroups.retain(|path, state| {
            // A cgroup that is gone loses its series: its groups are closed
            // without a final read, which nothing would show.
            let keep = alive.contains(&(path.as_str(), state.ino));
            if !keep {
                for sampled in &state.sampled {
                    rings.unregister(sampled.ids());
                }
            }
            keep
        });
        found.sort_by(|a, b| {
            let key = |f: &Found| (f.selectors.first().copied(), f.path.matches('/').count());
            key(a).cmp(&key(b)).then_with(|| a.path.cmp(&b.path))
        });
        let mut skipped: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        let online = self.cpus.online();
        // Cgroups already counted keep their place: those whose plan or
        // selectors changed are reconciled first, all together (see
        // `hand_over`). Those unchanged need nothing: no specs are built.
        let mut changed = BTreeMap::new();
        let mut new = Vec::new();
        for f in found {
            let Some(state) = self.cgroups.get_mut(&f.path) else {
                new.push(f);
                continue;
            };
            if state.generation != self.generation || state.selectors != f.selectors {
                let wanted = Wanted::of(&self.plan, &f.selectors);
                state.selectors = f.selectors;
                state.generation = self.generation;
                let dir = self.discovery.fs().dir(&f.path);
                changed.insert(f.path, (wanted, dir));
            }
        }
        let mut batch: Vec<Reconciling<'_>> = self
            .cgroups
            .iter_mut()
            .filter_map(|(path, state)| {
                let (wanted, dir) = changed.remove(path)?;
                Some(Reconciling {
                    state,
                    wanted,
                    dir,
                    open: None,
                })
            })
            .collect();
        let evicted = reconcile(&mut batch, &online, &mut self.opener);
        drop(batch);
        for path in evicted {
            // Its series vanish: what they counted since the last
            // collection would be read for nothing.
            if let Some(gone) = self.cgroups.remove(&*path) {
                for sampled in &gone.sampled {
                    self.opener.rings.unregister(sampled.ids());
                }
            }
            skipped
                .entry("fd_budget")
                .or_default()
                .push(path.to_string());
        }
        for f in new {
            if self
                .max_cgroups
                .is_some_and(|max| self.cgroups.len() >= max)
            {
                skipped.entry("max_cgroups").or_default().push(f.path);
                continue;
            }
            let specs = Wanted::of(&self.plan, &f.selectors);
            let cost = specs.fds_per_cpu() * online.len() as u64;
            if !self.opener.budget.fits(self.opener.used(), cost) {
                skipped.entry("fd_budget").or_default().push(f.path);
                continue;
            }
            let dir = match std::fs::File::open(self.discovery.fs().dir(&f.path)) {
                Ok(dir) => dir,
                Err(e)
                    if e.raw_os_error() == Some(libc::EMFILE)
                        || e.raw_os_error() == Some(libc::ENFILE) =>
                {
                    skipped.entry("fd_budget").or_default().push(f.path);
                    continue;
                }
                Err(_) => continue, // Removed since the scan.
            };
            let mut state = CgroupState {
                path: f.path.as_str().into(),
                ino: f.ino,
                selectors: f.selectors,
                generation: self.generation,
                unnamed: false,
                labels: labels_for(&f.path, &self.extractors),
                groups: Vec::new(),
                sampled: Vec::new(),
                created: SystemTime::now(),
            };
            let mut one = [Reconciling {
                state: &mut state,
                wanted: specs,
                dir: self.discovery.fs().dir(&f.path),
                open: Some(dir),
            }];
            if reconcile(&mut one, &online, &mut self.opener).is_empty() {
                state.unnamed = self.names.is_some() && nameable(&state.labels);
                if state.unnamed
                    && let Some(names) = &self.names
                {
                    names.refresh();
                }
                self.cgroups.insert(f.path, state);
            } else {
                skipped.entry("fd_budget").or_default().push(f.path);
            }
        }
        if !self.opener.retired.is_empty() {
            // Their last samples may still be being written.
            sampled::wait_for_writers();
        }
        self.drain(None);
        let retired = std::mem::take(&mut self.opener.retired);
        self.opener.rings.unregister(retired.into_iter());
        self.opener.rings.close_if_idle();
        for reason in SKIP_REASONS {
            let paths = skipped.remove(reason).unwrap_or_default();
            let before = self.skipped.insert(reason, paths.len() as u64).unwrap_or(0);
            if paths.len() as u64 > before {
                tracing::warn!(
                    reason,
                    skipped = paths.len(),
                    first = ?paths.iter().take(5).collect::<Vec<_>>(),
                    "cgroups not counted: {}",
                    match reason {
                        "max_cgroups" => "more cgroups match than `max_cgroups` allows",
                        _ => "their perf descriptors would exceed the open-files limit (raise LimitNOFILE / ulimit -n)",
                    }
                );
            }
        }
    }

    fn snapshot(&self, collection_seconds: f64) -> Snapshot {
        let per_cpu = self.plan.per_cpu;
        let mut counters = Vec::new();
        let mut group_times = Vec::new();
        let mut events_lost = Vec::new();
        for cgroup in self.cgroups.values() {
            let series = Series {
                cgroup: &cgroup.path,
                labels: &cgroup.labels,
                created: cgroup.created,
            };
            for group in &cgroup.groups {
                if per_cpu {
                    for counter in &group.cpus {
                        series.push(
                            &mut counters,
                            &mut group_times,
                            &group.spec,
                            Some(counter.cpu),
                            counter.acc.totals(),
                        );
                    }
                } else {
                    let mut sum = GroupTotals::default();
                    for counter in &group.cpus {
                        sum.add(counter.acc.totals());
                    }
                    series.push(&mut counters, &mut group_times, &group.spec, None, &sum);
                }
            }
            for sampled in &cgroup.sampled {
                series.push_sampled(&mut counters, sampled);
                events_lost.push(series.sampled_lost(sampled));
            }
        }
        Snapshot {
            taken_at: SystemTime::now(),
            finished: Some(Instant::now()),
            interval: self.plan.interval,
            counters,
            group_times,
            events_lost,
            support: self.plan.support.clone(),
            errors: self.opener.errors.clone(),
            skipped: self.skipped.clone(),
            open_fds: self.opener.used(),
            monitored_cgroups: self.cgroups.len() as u64,
            collection_seconds,
            samples_lost: self.opener.rings.lost,
            samples_undecodable: self.opener.rings.undecodable,
            collections: self.collections,
            reload_ok: self.reload_ok,
            cri_failures: self.names.as_ref().map_or(0, Names::failures),
            reload_success_time: self.reload_success_time,
        }
    }
}

impl GroupState {
    /// The counter of `cpu`, created (with zero totals) if this group has
    /// never been open there.
    fn counter(&mut self, cpu: u32) -> &mut CpuCounter {
        let i = match self.cpus.iter().position(|c| c.cpu == cpu) {
            Some(i) => i,
            None => {
                self.cpus.push(CpuCounter {
                    cpu,
                    open: None,
                    acc: Accumulator::new(self.spec.events.len()),
                });
                self.cpus.len() - 1
            }
        };
        &mut self.cpus[i]
    }
}

impl CpuCounter {
    /// Adds what the open group counted since its last read.
    fn read(&mut self, errors: &mut Errors) {
        let Some(held) = self.open.as_mut() else {
            return;
        };
        match held.group.read() {
            Ok((read, ids)) => {
                self.acc.update(&read, ids);
            }
            Err(e) => {
                let reason = match e {
                    ReadError::Syscall(errno) => OpenFailure::from_errno(errno).label(),
                    ReadError::Format(_) => READ_FORMAT,
                };
                *errors.entry(("read", reason)).or_default() += 1;
            }
        }
    }

    /// Reads the group one last time and closes it: what it counted since
    /// the last collection stays in the totals.
    fn close(&mut self, errors: &mut Errors) {
        self.read(errors);
        self.open = None;
    }

    /// New descriptors (counting from zero) replace the old ones; the totals
    /// carry on.
    fn reopened(&mut self, open: Option<Held>) {
        self.open = open;
        self.acc.rebase();
    }
}

/// What a cgroup's selectors ask the sampler to open there.
struct Wanted {
    groups: Vec<Arc<GroupSpec>>,
    sampled: Vec<Arc<SampledSpec>>,
}

impl Wanted {
    fn of(plan: &Plan, selectors: &[usize]) -> Self {
        Self {
            groups: plan.groups_for(selectors),
            sampled: plan.sampled_for(selectors),
        }
    }

    /// Descriptors per CPU (the shared rings aside).
    fn fds_per_cpu(&self) -> u64 {
        let events: usize = self.groups.iter().map(|s| s.events.len()).sum();
        (events + self.sampled.len()) as u64
    }
}

/// A cgroup whose groups and `by:` tracepoints are to become those wanted.
struct Reconciling<'a> {
    state: &'a mut CgroupState,
    wanted: Wanted,
    /// Its directory, to open events in: opened when needed and closed
    /// after, so that a reload of many cgroups holds one at a time...
    dir: std::path::PathBuf,
    /// ...unless it is open already.
    open: Option<std::fs::File>,
}

/// Runs `f` with a cgroup's directory: `open` if it is, else `dir` opened
/// for the call; `None` if it cannot be opened (removed since the scan: the
/// next one drops it).
fn in_dir<R>(
    open: &Option<std::fs::File>,
    dir: &std::path::Path,
    f: impl FnOnce(&std::fs::File) -> R,
) -> Option<R> {
    match open {
        Some(dir) => Some(f(dir)),
        None => std::fs::File::open(dir).ok().map(|dir| f(&dir)),
    }
}

/// A group after a reconcile, and what it replaces: `kept` as it was, or
/// opened anew, taking over the totals of `previous`'s events that it kept.
struct Planned {
    group: GroupState,
    previous: Option<GroupState>,
    kept: bool,
}

/// Makes each cgroup's groups and `by:` tracepoints those wanted:
/// identical ones are kept as they are; a group whose events changed is
/// opened anew and takes over the totals of the events it kept (see
/// [`hand_over`]); a `by:` tracepoint whose filter or bound changed keeps
/// its counts if its label and fields did not; what is no longer wanted is
/// closed. Returns the paths of the cgroups that ran out of descriptors:
/// they must be given up (their descriptors are closed already).
fn reconcile(
    cgroups: &mut [Reconciling<'_>],
    online: &[u32],
    opener: &mut Opener,
) -> Vec<Arc<str>> {
    let mut plans = Vec::with_capacity(cgroups.len());
    let mut evicted = vec![false; cgroups.len()];
    for (c, evicted) in cgroups.iter_mut().zip(&mut evicted) {
        let sampled = std::mem::take(&mut c.wanted.sampled);
        let Some(result) = in_dir(&c.open, &c.dir, |dir| {
            reconcile_sampled(c.state, sampled, dir, online, opener)
        }) else {
            // Left as it is: the next scan drops it.
            plans.push(Vec::new());
            continue;
        };
        *evicted = result.is_err();
        let mut old = std::mem::take(&mut c.state.groups);
        if *evicted {
            // Closed now, to leave room for the others.
            plans.push(Vec::new());
            continue;
        }
        let mut plan = Vec::new();
        for spec in std::mem::take(&mut c.wanted.groups) {
            if let Some(i) = old.iter().position(|g| *g.spec == *spec) {
                plan.push(Planned {
                    group: old.swap_remove(i),
                    previous: None,
                    kept: true,
                });
                continue;
            }
            let previous = old
                .iter()
                .position(|g| g.spec.name == spec.name)
                .map(|i| old.swap_remove(i));
            let group = GroupState {
                spec,
                cpus: Vec::with_capacity(online.len()),
                unopened: BTreeSet::new(),
            };
            plan.push(Planned {
                group,
                previous,
                kept: false,
            });
        }
        plans.push(plan);
    }
    hand_over(cgroups, &mut plans, &mut evicted, online, opener);
    let mut gone = Vec::new();
    for ((c, plan), evicted) in cgroups.iter_mut().zip(plans).zip(evicted) {
        if evicted {
            gone.push(c.state.path.clone());
            continue;
        }
        for Planned {
            mut group,
            previous,
            ..
        } in plan
        {
            if let Some(previous) = previous {
                let mapping = carried_over(&group.spec, &previous.spec);
                for old_counter in &previous.cpus {
                    group
                        .counter(old_counter.cpu)
                        .acc
                        .inherit(old_counter.acc.totals(), &mapping);
                }
            }
            c.state.groups.push(group);
        }
    }
    gone
}

/// Opens each new group on every online CPU, and reads the group it
/// replaces there one last time, so that what it counted since the last
/// collection is not lost.
///
/// The order is what makes the hand-over exact. Reading the old group first
/// and opening the new one after would lose what happens between the two;
/// opening the new one first counts what happens between its start and the
/// old one's final read twice. Neither happens when nothing of the cgroup
/// runs on that CPU in between, and cgperf makes sure of that by doing both
/// on that CPU: while this thread runs there, no other task does. The new
/// group starts counting from zero when it is enabled, before the old one's
/// final read; the old one's totals, final read included, are carried over
/// by [`Accumulator::inherit`], and the new one's accumulator counts from
/// its own start: each occurrence lands in exactly one of them. What remains
/// is this thread being preempted between the two calls (a few
/// microseconds), and cgperf's own events if it runs inside a cgroup it
/// counts. A CPU the thread may not move to (a cpuset) gets the same order
/// without that guarantee.
///
/// The loop runs CPU by CPU over every cgroup of a reload, so the thread
/// moves once per CPU (a move costs some 100 µs), not once per cgroup.
/// A cgroup that runs out of descriptors is marked `evicted` and its groups
/// closed at once, so that it leaves room for the others.
fn hand_over(
    cgroups: &[Reconciling<'_>],
    plans: &mut [Vec<Planned>],
    evicted: &mut [bool],
    online: &[u32],
    opener: &mut Opener,
) {
    if plans.iter().flatten().all(|p| p.kept) {
        return;
    }
    // Only a hand-over needs the thread on the CPU it opens on.
    let mut pin = plans
        .iter()
        .flatten()
        .any(|p| p.previous.is_some())
        .then(crate::cpus::Pin::new);
    for &cpu in online {
        if let Some(pin) = pin.as_mut() {
            pin.to(cpu);
        }
        for ((c, plan), evicted) in cgroups.iter().zip(&mut *plans).zip(&mut *evicted) {
            if *evicted || plan.iter().all(|p| p.kept) {
                continue;
            }
            // A cgroup removed meanwhile opens nothing and its old groups
            // are not read: the next scan drops it with its series.
            let done = in_dir(&c.open, &c.dir, |dir| {
                for p in plan.iter_mut().filter(|p| !p.kept) {
                    let opened = opener.open(&p.group.spec, &c.state.path, dir, cpu);
                    let opened = or_give_up(opened, &mut p.group.unopened, cpu)?;
                    p.group.counter(cpu).open = opened;
                    if let Some(previous) = p.previous.as_mut() {
                        for old in previous.cpus.iter_mut().filter(|c| c.cpu == cpu) {
                            old.close(&mut opener.errors);
                        }
                    }
                }
                Ok(())
            });
            *evicted = matches!(done, Some(Err(OutOfFds)));
            if *evicted {
                plan.clear();
            }
        }
    }
}

/// For each event of `new`, the position in `old` of the event whose series
/// it continues: the one with the same label. A filter or an attribute that
/// changed under the same label continues the series, which must never go
/// down while it exists.
fn carried_over(new: &GroupSpec, old: &GroupSpec) -> Vec<Option<usize>> {
    new.events
        .iter()
        .map(|e| {
            old.events
                .iter()
                .position(|o| o.label == e.label && o.clock == e.clock)
        })
        .collect()
}

fn reconcile_sampled(
    state: &mut CgroupState,
    wanted: Vec<Arc<SampledSpec>>,
    dir: &std::fs::File,
    online: &[u32],
    opener: &mut Opener,
) -> Result<(), OutOfFds> {
    let mut old = std::mem::take(&mut state.sampled);
    for spec in wanted {
        if let Some(i) = old.iter().position(|s| *s.spec == *spec) {
            state.sampled.push(old.swap_remove(i));
            continue;
        }
        let mut new = SampledState::new(spec.clone());
        let same_series = |s: &SampledState| {
            s.spec.label == spec.label
                && s.spec
                    .fields
                    .iter()
                    .map(|(name, _)| name)
                    .eq(spec.fields.iter().map(|(name, _)| name))
        };
        for &cpu in online {
            let opened = opener.open_sampled(&spec, &state.path, dir, cpu);
            if let Some((event, fds)) = or_give_up(opened, &mut new.unopened, cpu)? {
                new.opened(cpu, event, fds);
            }
        }
        if let Some(i) = old.iter().position(same_series) {
            // Closed once the new events count, its last samples still
            // counted: the series carries on without a gap.
            let mut previous = old.swap_remove(i);
            opener.retired.extend(previous.close(None));
            new.counts = previous.counts;
        }
        state.sampled.push(new);
    }
    for mut gone in old {
        opener.rings.unregister(gone.close(None).into_iter());
    }
    Ok(())
}

impl Sampler {
    /// Gives the cgroups still waiting for them the names the runtime knows
    /// by now.
    fn name_cgroups(&mut self) {
        let Some(names) = &self.names else { return };
        for state in self.cgroups.values_mut().filter(|s| s.unnamed) {
            if let Some(named) = names.lookup(&state.labels) {
                state.labels = state.labels.iter().cloned().chain(named).collect();
                state.unnamed = false;
            }
        }
    }
}

/// Whether the runtime may know names for a cgroup with these labels.
fn nameable(labels: &Labels) -> bool {
    labels
        .iter()
        .any(|(k, _)| *k == crate::labels::CONTAINER_ID || *k == crate::labels::POD_UID)
}

/// The extra labels of a cgroup, from the enabled extractors.
fn labels_for(path: &str, extractors: &[Extractor]) -> Labels {
    extract(path, extractors)
        .into_iter()
        .map(|(k, v)| (k, Box::from(v)))
        .collect()
}

/// Logs every group or tracepoint this machine cannot count.
fn log_support(plan: &Plan) {
    for s in &plan.support {
        if let Err(reason) = &s.status {
            let what = s.event.as_ref().map_or_else(
                || format!("group `{}`", s.group),
                |e| format!("{} `{e}`", s.group.entry_kind()),
            );
            tracing::warn!("{what} disabled: {reason}");
        }
    }
}

/// The labels shared by every series of one cgroup.
struct Series<'a> {
    cgroup: &'a Arc<str>,
    labels: &'a Labels,
    created: SystemTime,
}

impl Series<'_> {
    /// Adds one group's series (one CPU, or the sum over CPUs).
    fn push(
        &self,
        counters: &mut Vec<CounterSample>,
        group_times: &mut Vec<GroupTimeSample>,
        spec: &GroupSpec,
        cpu: Option<u32>,
        totals: &GroupTotals,
    ) {
        for (event, value) in spec.events.iter().zip(&totals.values) {
            counters.push(CounterSample {
                cgroup: self.cgroup.clone(),
                labels: self.labels.clone(),
                group: spec.name.shared_label(),
                event: event.label.clone(),
                fields: Box::new([]),
                cpu,
                value: if event.clock { value / 1e9 } else { *value },
                clock: event.clock,
                start_time: self.created,
            });
        }
        group_times.push(GroupTimeSample {
            cgroup: self.cgroup.clone(),
            labels: self.labels.clone(),
            group: spec.name.shared_label(),
            cpu,
            enabled_seconds: totals.enabled_ns as f64 / 1e9,
            running_seconds: totals.running_ns as f64 / 1e9,
            never_ran_intervals: totals.never_ran_intervals,
            start_time: self.created,
        });
    }

    /// The hits of one `by:` tracepoint known to be lost (see `sampled`).
    fn sampled_lost(&self, sampled: &SampledState) -> CounterSample {
        CounterSample {
            cgroup: self.cgroup.clone(),
            labels: self.labels.clone(),
            group: crate::plan::TRACEPOINT_GROUP.into(),
            event: sampled.spec.label.clone(),
            fields: Box::new([]),
            cpu: None,
            value: sampled.counts.lost() as f64,
            clock: false,
            start_time: self.created,
        }
    }

    /// Adds the series of one `by:` tracepoint: one per value combination
    /// (summed over CPUs: samples are counted where they are decoded).
    fn push_sampled(&self, counters: &mut Vec<CounterSample>, sampled: &SampledState) {
        let spec = &sampled.spec;
        for (values, n) in sampled.counts.series(spec.fields.len()) {
            let fields = spec
                .fields
                .iter()
                .zip(values)
                .map(|((name, _), value)| (name.clone(), Box::from(value)))
                .collect();
            counters.push(CounterSample {
                cgroup: self.cgroup.clone(),
                labels: self.labels.clone(),
                group: crate::plan::TRACEPOINT_GROUP.into(),
                event: spec.label.clone(),
                fields,
                cpu: None,
                value: n as f64,
                clock: false,
                start_time: self.created,
            });
        }
    }
}

/// Read-error reason: a group read that did not parse.
const READ_FORMAT: &str = "format";
/// Read-error reason: the list of online CPUs could not be read.
const READ_CPU_LIST: &str = "cpu_list";

/// Every read and open error reason at 0: Prometheus' `rate()` and
/// `increase()` only see the first error of a series that existed before it.
fn no_errors_yet() -> BTreeMap<(&'static str, &'static str), u64> {
    let opens = OpenFailure::ALL.map(|f| ("open", f.label()));
    let reads = OpenFailure::ALL.map(|f| ("read", f.label()));
    opens
        .into_iter()
        .chain(reads)
        .chain([("read", READ_FORMAT), ("read", READ_CPU_LIST)])
        .map(|key| (key, 0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventAttr;
    use crate::plan::PlannedEvent;

    fn event(label: &str, config: u64, filter: Option<&std::ffi::CStr>) -> PlannedEvent {
        PlannedEvent {
            label: label.into(),
            attr: EventAttr {
                type_: 2,
                config,
                config1: 0,
                config2: 0,
                exclude_user: false,
                exclude_kernel: false,
                exclude_hv: false,
            },
            clock: false,
            filter: filter.map(Arc::from),
            binary: None,
        }
    }

    fn group(events: Vec<PlannedEvent>) -> GroupSpec {
        GroupSpec {
            name: crate::ids::GroupId::Tracepoints,
            events,
        }
    }

    #[test]
    fn a_reopened_group_continues_the_series_of_each_label() {
        let old = group(vec![
            event("getppid", 1, None),
            event("pgrp", 2, Some(c"which == 1")),
            event("gone", 3, None),
        ]);
        // An event added first, one dropped, a filter changed.
        let new = group(vec![
            event("getpid", 4, None),
            event("getppid", 1, None),
            event("pgrp", 2, Some(c"which != 0")),
        ]);
        assert_eq!(carried_over(&new, &old), vec![None, Some(0), Some(1)]);
    }
}
