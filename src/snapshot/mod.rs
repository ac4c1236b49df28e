//! The immutable result of one sampling interval. The sampler builds it; the
//! exporters only present it.

mod energy;
mod reasons;

pub use energy::{
    Activity, ActivityBuilder, CgroupActivity, CgroupEnergy, EnergySample, EnergyScope, HostEnergy,
    ProcessEnergy, Unattributed, Weighed,
};
pub use reasons::{
    ErrorReason, Errors, NotCountable, Operation, SkipReason, Support, nothing_countable,
};

use crate::config::MetricDef;
use crate::totals::GroupTimes;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// Extra labels of a cgroup (`pod_uid`, `unit`, ...), shared by all its series.
pub type Labels = Arc<[(&'static str, Box<str>)]>;

/// The field labels of a count split `by:` tracepoint fields (`which="1"`);
/// empty for every other series.
pub type FieldLabels = Box<[(Arc<str>, Box<str>)]>;

/// What names one counter series: everything but its value. The sampler
/// makes it once and shares it with every snapshot while the series and
/// its cgroup's labels last: a snapshot of thousands of series copies one
/// pointer per series each interval, not its names.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesKey {
    /// cgroup path relative to the cgroup2 root.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// Group name from the config, or `tracepoints`.
    pub group: Arc<str>,
    /// The `event` label: perf's main name of an event the config wrote
    /// under an alias, else as written (`subsys:name` for tracepoints).
    pub event: Arc<str>,
    /// Field values, for tracepoints counted `by:` fields.
    pub fields: FieldLabels,
    /// The CPU, when per-CPU output is on.
    pub cpu: Option<u32>,
    /// True for `task-clock`/`cpu-clock`, exported in seconds.
    pub clock: bool,
    /// When this series began counting from zero: when the sampler started
    /// counting its cgroup. A cgroup that appears later, or is removed and
    /// created again, starts a new series with a later start (OTLP sends it
    /// as the start of the cumulative sum, so receivers see the reset).
    pub start_time: SystemTime,
}

/// One counter series: its names (read through it as through a
/// [`SeriesKey`]) and its value. The keys of a group's series are made
/// together and shared as one: a snapshot holds one reference per series
/// into them.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterSample {
    /// The keys of its group, one per event.
    keys: Arc<[SeriesKey]>,
    /// Its own among them (always one of them).
    at: usize,
    /// Scaled count; for clock events, seconds.
    pub value: f64,
}

impl CounterSample {
    /// The series `key` with `value`.
    pub fn new(key: SeriesKey, value: f64) -> Self {
        Self {
            keys: Arc::from([key]),
            at: 0,
            value,
        }
    }

    /// The series named by the `at`th of `keys`, with `value`; `None` past
    /// them.
    pub fn of(keys: &Arc<[SeriesKey]>, at: usize, value: f64) -> Option<Self> {
        (at < keys.len()).then(|| Self {
            keys: keys.clone(),
            at,
            value,
        })
    }

    /// Whether both are named by the same key, not just equal ones.
    pub fn shares_key_with(&self, other: &CounterSample) -> bool {
        Arc::ptr_eq(&self.keys, &other.keys) && self.at == other.at
    }
}

impl std::ops::Deref for CounterSample {
    type Target = SeriesKey;

    fn deref(&self) -> &SeriesKey {
        // `at` is within `keys`: both constructors make sure of it.
        &self.keys[self.at]
    }
}

/// The value of one metric in one cgroup over the last interval.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    /// cgroup path.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// Which metric.
    pub metric: Arc<MetricDef>,
    /// Its value over the interval.
    pub value: f64,
}

/// What a series of `host:` covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every CPU, summed.
    Machine,
    /// One CPU (`per_cpu: true`, or a PMU whose CPUs have no topology).
    Cpu(u32),
    /// One socket, where the group's PMU counts once per socket.
    Socket(u32),
    /// One die of a socket, where the group's PMU counts once per die.
    Die {
        /// The socket.
        socket: u32,
        /// The die within it.
        die: u32,
    },
}

/// What one unit of a host series is: which family it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostUnit {
    /// A number of events.
    Count,
    /// Seconds (`cpu-clock`, `task-clock`).
    Seconds,
    /// Joules (`power/energy-*`, from their `.scale` files).
    Joules,
    /// Bytes (events whose `.unit` is `MiB`, such as memory controller
    /// reads and writes).
    Bytes,
}

/// The group times of one group of `host:`, for what one of its series
/// covers.
#[derive(Debug, Clone, PartialEq)]
pub struct HostGroupTime {
    /// The group's name, or `tracepoints`.
    pub group: Arc<str>,
    /// What it covers.
    pub scope: Scope,
    /// Its times, summed over the CPUs of the scope.
    pub times: GroupTimes,
    /// When the group began counting.
    pub start_time: SystemTime,
}

/// The group times of one group of a series of `processes:`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessGroupTime {
    /// The entry's name.
    pub process: Arc<str>,
    /// The comm, where the entry asks for it.
    pub comm: Option<Arc<str>>,
    /// The pid, where the entry asks for it.
    pub pid: Option<u32>,
    /// The group's name.
    pub group: Arc<str>,
    /// Its times, summed over the threads counted.
    pub times: GroupTimes,
    /// When the series began.
    pub start_time: SystemTime,
}

/// The value of one metric of `host:` over the last interval, for the
/// whole machine.
#[derive(Debug, Clone, PartialEq)]
pub struct HostMetricSample {
    /// Which metric.
    pub metric: Arc<MetricDef>,
    /// Its value over the interval.
    pub value: f64,
}

/// One series of `host:`: an event counted for the whole machine, or for
/// one of its CPUs, sockets or dies.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSample {
    /// The group's name, or `tracepoints`.
    pub group: Arc<str>,
    /// The event as written.
    pub event: Arc<str>,
    /// What it covers.
    pub scope: Scope,
    /// What one unit of `value` is.
    pub unit: HostUnit,
    /// The total, scaled as [`CounterSample::value`] is, then by the
    /// event's sysfs `.scale` (Joules, bytes).
    pub value: f64,
    /// When the group began counting.
    pub start_time: SystemTime,
}

/// One series of `processes:`: an event counted for the processes an
/// entry matched (and their children and threads), or for those of one
/// comm, or one process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSample {
    /// The entry's name (the `process` label).
    pub process: Arc<str>,
    /// The comm, where the entry asks for it.
    pub comm: Option<Arc<str>>,
    /// The pid, where the entry asks for it.
    pub pid: Option<u32>,
    /// The group's name, `tracepoints` or `probes`.
    pub group: Arc<str>,
    /// The event as written.
    pub event: Arc<str>,
    /// True for `task-clock`/`cpu-clock`, exported in seconds.
    pub clock: bool,
    /// Scaled count; for clock events, seconds.
    pub value: f64,
    /// When the series began.
    pub start_time: SystemTime,
}

/// The value of one metric of one series of `processes:` over the last
/// interval.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessMetricSample {
    /// The entry's name.
    pub process: Arc<str>,
    /// The comm, where the entry asks for it.
    pub comm: Option<Arc<str>>,
    /// The pid, where the entry asks for it.
    pub pid: Option<u32>,
    /// Which metric.
    pub metric: Arc<MetricDef>,
    /// Its value over the interval.
    pub value: f64,
}

/// Matching processes a scan did not count, by reason
/// (`cgperf_processes_skipped{reason}`); each is counted once there is
/// room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessesSkipped {
    /// More match than `max_processes` allows.
    pub max_processes: u64,
    /// Their perf descriptors would exceed the open-files limit.
    pub fd_budget: u64,
}

/// How many processes an entry of `processes:` counts now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessCount {
    /// The entry's name.
    pub process: Arc<str>,
    /// Processes counted (their children and threads not included).
    pub counted: u64,
    /// Children and threads that appeared while one of its processes had
    /// its groups opened without a moment of rest, so far: each may not
    /// be counted.
    pub possibly_uncounted: u64,
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
    /// [`SeriesKey::start_time`]).
    pub start_time: SystemTime,
}

/// An event the config wrote under another of perf's names than its
/// `event` label (`cs` for `context-switches`). cAdvisor's families show it
/// as written, as cAdvisor labels the events of its perf config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spelling {
    /// Its group.
    pub group: Arc<str>,
    /// Its `event` label.
    pub event: Arc<str>,
    /// As the config wrote it.
    pub written: Arc<str>,
}

/// Series kept in shared parts, one per counted cgroup: the next snapshot
/// shares the part of every cgroup whose totals did not change instead of
/// making its series again, so that an interval costs what changed in it,
/// not what is counted (most of thousands of cgroups are idle in any
/// interval). Read as one list, in order.
#[derive(Debug, Clone)]
pub struct Parts<T> {
    parts: Vec<Arc<[T]>>,
    len: usize,
}

impl<T> Parts<T> {
    /// No series, with room for `parts` parts.
    pub fn with_capacity(parts: usize) -> Self {
        Self {
            parts: Vec::with_capacity(parts),
            len: 0,
        }
    }

    /// Adds a part (nothing if it is empty).
    pub fn push_part(&mut self, part: Arc<[T]>) {
        if !part.is_empty() {
            self.len += part.len();
            self.parts.push(part);
        }
    }

    /// Adds one series, as a part of its own.
    pub fn push(&mut self, item: T) {
        self.push_part(Arc::from([item]));
    }

    /// Every series, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + Clone {
        self.parts.iter().flat_map(|part| part.iter())
    }

    /// How many series.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> Default for Parts<T> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<T> FromIterator<T> for Parts<T> {
    /// One part of all of them.
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut parts = Self::default();
        parts.push_part(items.into_iter().collect());
        parts
    }
}

impl<'a, T> IntoIterator for &'a Parts<T> {
    type Item = &'a T;
    type IntoIter = std::iter::FlatMap<
        std::slice::Iter<'a, Arc<[T]>>,
        std::slice::Iter<'a, T>,
        fn(&'a Arc<[T]>) -> std::slice::Iter<'a, T>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.parts.iter().flat_map(|part| part.iter())
    }
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
    pub counters: Parts<CounterSample>,
    /// Group times.
    pub group_times: Parts<GroupTimeSample>,
    /// Per cgroup and `by:` tracepoint, hits not counted under any value
    /// (their samples were dropped by a full ring): the labels of the
    /// entry's counters without the field labels.
    pub events_lost: Parts<CounterSample>,
    /// The value of each metric in each cgroup over the last interval,
    /// where it has one.
    pub metrics: Vec<MetricSample>,
    /// Every metric of the config.
    pub metric_defs: Vec<Arc<MetricDef>>,
    /// The config's events written under another name than their label.
    pub spellings: Arc<[Spelling]>,
    /// Support of every configured group.
    pub support: Vec<Support>,
    /// The series of `host:`.
    pub host: Vec<HostSample>,
    /// The verdict on every group and tracepoint of `host:`.
    pub host_support: Vec<Support>,
    /// The group times of `host:`.
    pub host_group_times: Vec<HostGroupTime>,
    /// The metrics of `host:` over the last interval.
    pub host_metrics: Vec<HostMetricSample>,
    /// The series of `processes:`.
    pub processes: Vec<ProcessSample>,
    /// Processes counted per entry of `processes:`.
    pub process_counts: Vec<ProcessCount>,
    /// The group times of the series of `processes:`.
    pub process_group_times: Vec<ProcessGroupTime>,
    /// The metrics of the series of `processes:` over the last interval.
    pub process_metrics: Vec<ProcessMetricSample>,
    /// Matching processes not counted at the last scan, by reason.
    pub processes_skipped: ProcessesSkipped,
    /// Read and open errors so far.
    pub errors: Errors,
    /// cgroups selected but not counted now, by reason.
    pub skipped: BTreeMap<SkipReason, u64>,
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
    /// Which backend counts.
    pub backend: BackendInfo,
    /// Seconds cgperf's BPF programs ran in the kernel, while the kernel
    /// keeps BPF statistics.
    pub bpf_run_seconds: f64,
    /// Times cgperf's BPF programs ran.
    pub bpf_runs: u64,
    /// Switches the kernel made without the tracepoint the bpf backend
    /// counts by, since cgperf started.
    pub bpf_unseen_switches: u64,
    /// What each counted cgroup did on each socket, for `energy:`; empty
    /// without.
    pub activity: Activity,
    /// The name of the event `activity` totals (`cycles`, `task-clock`).
    pub activity_weight: &'static str,
    /// Each counted cgroup's energy per socket and domain.
    pub energy: CgroupEnergy,
    /// Each `processes:` series' energy per socket and domain (a view of
    /// the cgroups' shares, not added to them).
    pub process_energy: Vec<ProcessEnergy>,
    /// The meters, and what of them no cgroup got.
    pub host_energy: Vec<HostEnergy>,
}

/// Which backend counts, for `cgperf_backend_info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendInfo {
    /// `cgroup` or `bpf`; empty before the engine starts.
    pub name: &'static str,
    /// Why `backend: auto` did not count through BPF.
    pub fallback: Option<Arc<str>>,
}

impl Snapshot {
    /// The snapshot before the first interval.
    pub fn empty() -> Self {
        Self {
            taken_at: SystemTime::now(),
            finished: None,
            interval: crate::config::DEFAULT_INTERVAL,
            counters: Parts::default(),
            group_times: Parts::default(),
            events_lost: Parts::default(),
            metrics: Vec::new(),
            metric_defs: Vec::new(),
            spellings: Arc::new([]),
            support: Vec::new(),
            host: Vec::new(),
            host_support: Vec::new(),
            host_group_times: Vec::new(),
            host_metrics: Vec::new(),
            processes: Vec::new(),
            process_counts: Vec::new(),
            process_group_times: Vec::new(),
            process_metrics: Vec::new(),
            processes_skipped: ProcessesSkipped::default(),
            errors: Errors::default(),
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
            backend: BackendInfo::default(),
            bpf_run_seconds: 0.0,
            bpf_runs: 0,
            bpf_unseen_switches: 0,
            activity: Activity::default(),
            activity_weight: "",
            energy: CgroupEnergy::default(),
            process_energy: Vec::new(),
            host_energy: Vec::new(),
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
