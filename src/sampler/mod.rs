//! The sampler: decides what to open for the cgroups discovery finds, reads
//! every group once per interval, scales per interval and publishes one
//! immutable [`Snapshot`] for the exporters.

mod scale;

pub use scale::{Accumulator, GroupTotals, Interval};

use crate::discovery::{CgroupFs, Found};
use crate::perf::{CounterGroup, OpenFailure, ReadError, open_failure_reason};
use crate::plan::{GroupSpec, Plan};
use crate::snapshot::{CounterSample, GroupTimeSample, Latest, Snapshot};
use std::collections::{BTreeMap, HashSet};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Instant, SystemTime};

/// A group on one CPU: its descriptors while open, and its totals forever.
#[derive(Debug)]
struct CpuCounter {
    cpu: u32,
    group: Option<CounterGroup>,
    acc: Accumulator,
}

/// A group in one cgroup.
#[derive(Debug)]
struct GroupState {
    spec: Arc<GroupSpec>,
    cpus: Vec<CpuCounter>,
}

/// A monitored cgroup. Its directory stays open for as long as it is
/// monitored: perf needs the fd to open events in cgroup mode.
#[derive(Debug)]
struct CgroupState {
    path: Arc<str>,
    ino: u64,
    groups: Vec<GroupState>,
}

/// Owns every open counter and every running total.
#[derive(Debug)]
pub struct Sampler {
    plan: Plan,
    cgroupfs: CgroupFs,
    cpus: Vec<u32>,
    cgroups: BTreeMap<String, CgroupState>,
    errors: BTreeMap<(&'static str, &'static str), u64>,
    logged: HashSet<(Arc<str>, OpenFailure)>,
    latest: Latest,
    collections: u64,
}

impl Sampler {
    /// A sampler for `plan` on the CPUs `cpus`, publishing into `latest`.
    pub fn new(plan: Plan, cgroupfs: CgroupFs, cpus: Vec<u32>, latest: Latest) -> Self {
        Self {
            plan,
            cgroupfs,
            cpus,
            cgroups: BTreeMap::new(),
            errors: BTreeMap::new(),
            logged: HashSet::new(),
            latest,
            collections: 0,
        }
    }

    /// Runs one interval: picks up new and removed cgroups, reads every
    /// group, and publishes the snapshot.
    pub fn collect(&mut self) {
        let started = Instant::now();
        let found = self.cgroupfs.expand(&self.plan.selectors);
        self.sync_cgroups(found);
        self.read_all();
        self.collections += 1;
        let snapshot = self.snapshot(started.elapsed().as_secs_f64());
        self.latest.publish(snapshot);
    }

    /// Collects every interval until `stop` receives a message or is closed.
    pub fn run(mut self, stop: Receiver<()>) {
        let mut next = Instant::now();
        loop {
            self.collect();
            next += self.plan.interval;
            let now = Instant::now();
            if next < now {
                // Collection overran the interval: skip ahead rather than
                // bursting, the per-interval deltas stay correct either way.
                next = now + self.plan.interval;
            }
            match stop.recv_timeout(next - now) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Drops cgroups that are gone (or were recreated) and opens new ones.
    fn sync_cgroups(&mut self, found: Vec<Found>) {
        let alive: HashSet<(&str, u64)> = found.iter().map(|f| (f.path.as_str(), f.ino)).collect();
        self.cgroups
            .retain(|path, state| alive.contains(&(path.as_str(), state.ino)));
        for f in found {
            if self.cgroups.contains_key(&f.path) {
                continue;
            }
            let state = self.open_cgroup(&f);
            self.cgroups.insert(f.path, state);
        }
    }

    fn open_cgroup(&mut self, found: &Found) -> CgroupState {
        let path: Arc<str> = found.path.as_str().into();
        let specs = self.plan.groups_for(&found.selectors);
        let dir = match std::fs::File::open(self.cgroupfs.dir(&found.path)) {
            Ok(dir) => Some(dir),
            Err(e) => {
                tracing::debug!(cgroup = %path, error = %e, "cgroup vanished before it could be opened");
                None
            }
        };
        let online = self.cpus.clone();
        let mut groups = Vec::with_capacity(specs.len());
        for spec in specs {
            let attrs = spec.attrs();
            let mut cpus = Vec::with_capacity(self.cpus.len());
            for &cpu in &online {
                let group = dir.as_ref().and_then(|dir| {
                    CounterGroup::open(&attrs, dir.as_fd(), cpu)
                        .map_err(|e| self.open_failed(&spec, &path, cpu, e.errno))
                        .ok()
                });
                cpus.push(CpuCounter {
                    cpu,
                    group,
                    acc: Accumulator::new(attrs.len()),
                });
            }
            groups.push(GroupState { spec, cpus });
        }
        CgroupState {
            path,
            ino: found.ino,
            groups,
        }
    }

    fn open_failed(&mut self, spec: &GroupSpec, cgroup: &str, cpu: u32, errno: crate::perf::Errno) {
        let failure = OpenFailure::from_errno(errno);
        *self.errors.entry(("open", failure.label())).or_default() += 1;
        if failure != OpenFailure::Gone && self.logged.insert((spec.name.clone(), failure)) {
            tracing::warn!(
                group = %spec.name, cgroup, cpu,
                "cannot open group: {} (logged once per group and reason)",
                open_failure_reason(errno)
            );
        }
    }

    fn read_all(&mut self) {
        for cgroup in self.cgroups.values_mut() {
            for group in &mut cgroup.groups {
                for counter in &mut group.cpus {
                    let Some(open) = counter.group.as_mut() else {
                        continue;
                    };
                    match open.read() {
                        Ok((read, ids)) => {
                            counter.acc.update(&read, ids);
                        }
                        Err(e) => {
                            let reason = match e {
                                ReadError::Syscall(errno) => OpenFailure::from_errno(errno).label(),
                                ReadError::Format(_) => "format",
                            };
                            *self.errors.entry(("read", reason)).or_default() += 1;
                        }
                    }
                }
            }
        }
    }

    fn snapshot(&self, collection_seconds: f64) -> Snapshot {
        let per_cpu = self.plan.per_cpu;
        let mut counters = Vec::new();
        let mut group_times = Vec::new();
        let mut open_fds = 0u64;
        for cgroup in self.cgroups.values() {
            for group in &cgroup.groups {
                let spec = &group.spec;
                let mut sum = GroupTotals::default();
                for counter in &group.cpus {
                    open_fds += counter.group.as_ref().map_or(0, |g| g.fd_count() as u64);
                    let totals = counter.acc.totals();
                    if per_cpu {
                        push_group(
                            &mut counters,
                            &mut group_times,
                            &cgroup.path,
                            spec,
                            Some(counter.cpu),
                            totals,
                        );
                    } else {
                        sum.add(totals);
                    }
                }
                if !per_cpu {
                    push_group(
                        &mut counters,
                        &mut group_times,
                        &cgroup.path,
                        spec,
                        None,
                        &sum,
                    );
                }
            }
        }
        Snapshot {
            taken_at: SystemTime::now(),
            counters,
            group_times,
            support: self.plan.support.clone(),
            errors: self.errors.clone(),
            open_fds,
            monitored_cgroups: self.cgroups.len() as u64,
            collection_seconds,
            collections: self.collections,
        }
    }
}

/// Adds one group's series (one CPU, or the sum over CPUs) to a snapshot.
fn push_group(
    counters: &mut Vec<CounterSample>,
    group_times: &mut Vec<GroupTimeSample>,
    cgroup: &Arc<str>,
    spec: &GroupSpec,
    cpu: Option<u32>,
    totals: &GroupTotals,
) {
    for (event, value) in spec.events.iter().zip(&totals.values) {
        counters.push(CounterSample {
            cgroup: cgroup.clone(),
            group: spec.name.clone(),
            event: event.label.clone(),
            cpu,
            value: if event.clock { value / 1e9 } else { *value },
            clock: event.clock,
        });
    }
    group_times.push(GroupTimeSample {
        cgroup: cgroup.clone(),
        group: spec.name.clone(),
        cpu,
        enabled_seconds: totals.enabled_ns as f64 / 1e9,
        running_seconds: totals.running_ns as f64 / 1e9,
        never_ran_intervals: totals.never_ran_intervals,
    });
}
