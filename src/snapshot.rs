//! The immutable result of one sampling interval. The sampler builds it; the
//! exporters only present it.

use crate::ids::GroupId;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// Extra labels of a cgroup (`pod_uid`, `unit`, ...), shared by all its series.
pub type Labels = Arc<[(&'static str, Box<str>)]>;

/// The field labels of a count split `by:` tracepoint fields (`which="1"`);
/// empty for every other series.
pub type FieldLabels = Box<[(Arc<str>, Box<str>)]>;

/// One counter series.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterSample {
    /// cgroup path relative to the cgroup2 root.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// Group name from the config, or `tracepoints`.
    pub group: Arc<str>,
    /// Event as written in the config (`subsys:name` for tracepoints).
    pub event: Arc<str>,
    /// Field values, for tracepoints counted `by:` fields.
    pub fields: FieldLabels,
    /// The CPU, when per-CPU output is on.
    pub cpu: Option<u32>,
    /// Scaled count; for clock events, seconds.
    pub value: f64,
    /// True for `task-clock`/`cpu-clock`, exported in seconds.
    pub clock: bool,
    /// When this series began counting from zero: when the sampler started
    /// counting its cgroup. A cgroup that appears later, or is removed and
    /// created again, starts a new series with a later start (OTLP sends it
    /// as the start of the cumulative sum, so receivers see the reset).
    pub start_time: SystemTime,
}

/// Enabled and running time of one group in one cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTimeSample {
    /// cgroup path.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// Group name.
    pub group: Arc<str>,
    /// The CPU, when per-CPU output is on.
    pub cpu: Option<u32>,
    /// Seconds the group was enabled.
    pub enabled_seconds: f64,
    /// Seconds the group was on the PMU.
    pub running_seconds: f64,
    /// Intervals in which it was enabled but never ran.
    pub never_ran_intervals: u64,
    /// When these series began counting from zero (see
    /// [`CounterSample::start_time`]).
    pub start_time: SystemTime,
}

/// Whether a group (or a single tracepoint) can be counted on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// The group (its `group` label only where it is shown).
    pub group: GroupId,
    /// `Some(event)` for a per-event verdict (tracepoints), `None` for the group.
    pub event: Option<Arc<str>>,
    /// `Ok` or the reason it cannot be counted.
    pub status: Result<(), String>,
}

/// Everything exporters show, as of the end of one interval.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When the interval ended.
    pub taken_at: SystemTime,
    /// When the collection that made it finished, on the monotonic clock
    /// (for telling a stalled sampler, whatever the wall clock does);
    /// `None` before the first.
    pub finished: Option<Instant>,
    /// The collection interval in force.
    pub interval: Duration,
    /// Event counters.
    pub counters: Vec<CounterSample>,
    /// Group times.
    pub group_times: Vec<GroupTimeSample>,
    /// Per cgroup and `by:` tracepoint, hits not counted under any value
    /// (their samples were dropped by a full ring): the labels of the
    /// entry's counters without the field labels.
    pub events_lost: Vec<CounterSample>,
    /// Support of every configured group.
    pub support: Vec<Support>,
    /// Read and open errors so far, by reason label.
    pub errors: BTreeMap<(&'static str, &'static str), u64>,
    /// cgroups selected but not counted, by reason.
    pub skipped: BTreeMap<&'static str, u64>,
    /// perf file descriptors held now.
    pub open_fds: u64,
    /// cgroups monitored now.
    pub monitored_cgroups: u64,
    /// Seconds the last collection took.
    pub collection_seconds: f64,
    /// Samples of `by:` tracepoints the kernel dropped because a ring was
    /// full.
    pub samples_lost: u64,
    /// Records of `by:` tracepoints that could not be decoded.
    pub samples_undecodable: u64,
    /// Collections done so far.
    pub collections: u64,
    /// Whether the last config (re)load succeeded.
    pub reload_ok: bool,
    /// Refreshes of pod and container names from the container runtime
    /// that failed (unreachable, slow, erring).
    pub cri_failures: u64,
    /// When a config was last loaded successfully.
    pub reload_success_time: SystemTime,
}

impl Snapshot {
    /// The snapshot before the first interval.
    pub fn empty() -> Self {
        Self {
            taken_at: SystemTime::now(),
            finished: None,
            interval: crate::config::DEFAULT_INTERVAL,
            counters: Vec::new(),
            group_times: Vec::new(),
            events_lost: Vec::new(),
            support: Vec::new(),
            errors: BTreeMap::new(),
            skipped: BTreeMap::new(),
            open_fds: 0,
            monitored_cgroups: 0,
            collection_seconds: 0.0,
            samples_lost: 0,
            samples_undecodable: 0,
            collections: 0,
            reload_ok: true,
            cri_failures: 0,
            reload_success_time: SystemTime::now(),
        }
    }
}

/// Where the sampler publishes and exporters pick up the latest snapshot.
///
/// Publishing swaps an `Arc`, so a scrape never waits for a collection and
/// always sees one whole interval.
#[derive(Debug, Clone)]
pub struct Latest(Arc<RwLock<Arc<Snapshot>>>);

impl Latest {
    /// A cell holding an empty snapshot.
    pub fn new() -> Self {
        Self(Arc::new(RwLock::new(Arc::new(Snapshot::empty()))))
    }

    /// Replaces the current snapshot.
    pub fn publish(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        match self.0.write() {
            Ok(mut guard) => *guard = snapshot,
            Err(poisoned) => *poisoned.into_inner() = snapshot,
        }
    }

    /// The current snapshot.
    pub fn get(&self) -> Arc<Snapshot> {
        match self.0.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl Default for Latest {
    fn default() -> Self {
        Self::new()
    }
}
