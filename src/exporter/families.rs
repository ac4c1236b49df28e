//! Every metric family cgperf exports, described once: name, help, unit,
//! kind, and the points a snapshot gives it (cAdvisor's families, shown
//! with `--compat=cadvisor`, are described in [`super::cadvisor`]). The Prometheus exposition and
//! the OTLP push both walk this description, so the two can never disagree
//! on a name, a label or a value.
//!
//! Figures kept outside the snapshot (the process's own, the OTLP
//! exporter's counters) reach the walk through [`SelfMetrics`]: their
//! families are described here, their values come from whoever keeps them,
//! so the catalogue imports no exporter.

use crate::snapshot::{
    CounterSample, GroupTimeSample, HostGroupTime, HostSample, HostUnit, Operation,
    ProcessGroupTime, ProcessSample, Scope, Snapshot, Support,
};
use crate::totals::GroupTimes;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// How a family's values behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic total (a cumulative OTLP Sum).
    Counter,
    /// A value that may go up and down.
    Gauge,
    /// Constant 1 carrying information in its labels (`cgperf_build_info`).
    Info,
}

/// What a family's values measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds: Prometheus names end in `_seconds`; OTLP unit `s`.
    Seconds,
    /// Bytes (named `..._bytes` already); OTLP unit `By`.
    Bytes,
    /// Joules: Prometheus names end in `_joules`; OTLP unit `J`.
    Joules,
    /// A number of things, as OTLP writes its unit: an annotation such as
    /// `{event}`, or `1` for ratios and 0/1 states.
    Count(&'static str),
}

impl Unit {
    /// The UCUM unit OTLP metrics carry.
    pub fn ucum(self) -> &'static str {
        match self {
            Self::Seconds => "s",
            Self::Bytes => "By",
            Self::Joules => "J",
            Self::Count(annotation) => annotation,
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// The family's name as OpenMetrics writes it: without the `_seconds`
    /// unit suffix, `_total` or `_info`.
    pub name: &'static str,
    /// One sentence for humans.
    pub help: &'static str,
    /// What one unit of a value is.
    pub unit: Unit,
    /// Counter, gauge or info.
    pub kind: Kind,
}

impl Family {
    /// The name Prometheus shows for the samples of this family, e.g.
    /// `cgperf_clock_seconds_total`.
    pub fn sample_name(&self) -> String {
        let unit = match self.unit {
            Unit::Seconds => "_seconds",
            Unit::Joules => "_joules",
            Unit::Bytes | Unit::Count(_) => "",
        };
        let suffix = match self.kind {
            Kind::Counter => "_total",
            Kind::Gauge => "",
            Kind::Info => "_info",
        };
        format!("{}{unit}{suffix}", self.name)
    }
}

/// A label value: text, or a number (a CPU, socket or die).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Text.
    Str(&'a str),
    /// A number: the `cpu`, `socket` and `die` labels.
    Number(u32),
}

/// The labels of one point, borrowed from the snapshot.
#[derive(Debug, Clone, Copy)]
pub enum Labels<'a> {
    /// A per-cgroup series: `cgroup`, the labels from its path, `group`,
    /// `event` (counters only), the fields of `by:` tracepoint counts, and
    /// `cpu` (per-CPU output only).
    Series {
        /// cgroup path.
        cgroup: &'a str,
        /// Labels derived from the path.
        extra: &'a [(&'static str, Box<str>)],
        /// Group name.
        group: &'a str,
        /// Event, for counters.
        event: Option<&'a str>,
        /// Field values of a `by:` tracepoint count.
        fields: &'a [(Arc<str>, Box<str>)],
        /// CPU, for per-CPU output.
        cpu: Option<u32>,
    },
    /// A metric's value in a cgroup: `cgroup`, the labels from its path,
    /// `metric`.
    Metric {
        /// cgroup path.
        cgroup: &'a str,
        /// Labels derived from the path.
        extra: &'a [(&'static str, Box<str>)],
        /// The metric's name.
        metric: &'a str,
    },
    /// A series of cAdvisor's perf families (`--compat=cadvisor`), its
    /// labels in the order cAdvisor writes them.
    Cadvisor {
        /// The cgroup path.
        id: &'a str,
        /// The container ID, else empty.
        name: &'a str,
        /// The container's image, else empty.
        image: &'a str,
        /// The container's name in its pod, else empty.
        container: &'a str,
        /// The pod's name, else empty.
        pod: &'a str,
        /// The pod's namespace, else empty.
        namespace: &'a str,
        /// The CPU with per-CPU output; empty without.
        cpu: Option<u32>,
        /// The event.
        event: &'a str,
    },
    /// A series of `host:`: `group`, `event`, then what it covers
    /// (`cpu`, `socket`, or `socket` and `die`; nothing for the machine).
    Host {
        /// Group name.
        group: &'a str,
        /// Event, for counters (not group times).
        event: Option<&'a str>,
        /// What it covers.
        scope: Scope,
    },
    /// A series of `processes:`: its processes' labels, `group`, `event`
    /// (counters only).
    Process {
        /// Whose.
        of: ProcessLabels<'a>,
        /// Group name.
        group: &'a str,
        /// Event, for counters (not group times).
        event: Option<&'a str>,
    },
    /// A metric of a series of `processes:`: its processes' labels,
    /// `metric`.
    ProcessMetric {
        /// Whose.
        of: ProcessLabels<'a>,
        /// The metric's name.
        metric: &'a str,
    },
    /// Up to three fixed labels (`group`, `event`, `reason`, and
    /// `cgperf_build_info`'s `version`, `revision`, `rustversion`).
    Fixed([Option<(&'static str, &'a str)>; 3]),
}

impl<'a> Labels<'a> {
    /// No labels: a process-wide figure.
    pub const NONE: Labels<'static> = Labels::Fixed([None, None, None]);

    /// One fixed label, e.g. `reason`.
    pub fn one(name: &'static str, value: &'a str) -> Self {
        Self::Fixed([Some((name, value)), None, None])
    }

    fn two(a: (&'static str, &'a str), b: (&'static str, &'a str)) -> Self {
        Self::Fixed([Some(a), Some(b), None])
    }

    /// True for a point without labels (a process-wide self-metric).
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Fixed([None, None, None]))
    }

    /// Calls `f` with every label, in exposition order.
    pub fn for_each<E>(
        &self,
        mut f: impl FnMut(&'a str, Value<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        match *self {
            Self::Series {
                cgroup,
                extra,
                group,
                event,
                fields,
                cpu,
            } => {
                f("cgroup", Value::Str(cgroup))?;
                for (name, value) in extra {
                    f(name, Value::Str(value))?;
                }
                f("group", Value::Str(group))?;
                if let Some(event) = event {
                    f("event", Value::Str(event))?;
                }
                for (name, value) in fields {
                    f(name, Value::Str(value))?;
                }
                if let Some(cpu) = cpu {
                    f("cpu", Value::Number(cpu))?;
                }
            }
            Self::Metric {
                cgroup,
                extra,
                metric,
            } => {
                f("cgroup", Value::Str(cgroup))?;
                for (name, value) in extra {
                    f(name, Value::Str(value))?;
                }
                f("metric", Value::Str(metric))?;
            }
            Self::Cadvisor {
                id,
                name,
                image,
                container,
                pod,
                namespace,
                cpu,
                event,
            } => {
                f("container", Value::Str(container))?;
                match cpu {
                    Some(cpu) => f("cpu", Value::Number(cpu))?,
                    None => f("cpu", Value::Str(""))?,
                }
                f("event", Value::Str(event))?;
                f("id", Value::Str(id))?;
                f("image", Value::Str(image))?;
                f("name", Value::Str(name))?;
                f("namespace", Value::Str(namespace))?;
                f("pod", Value::Str(pod))?;
            }
            Self::Host {
                group,
                event,
                scope,
            } => {
                f("group", Value::Str(group))?;
                if let Some(event) = event {
                    f("event", Value::Str(event))?;
                }
                match scope {
                    Scope::Machine => {}
                    Scope::Cpu(cpu) => f("cpu", Value::Number(cpu))?,
                    Scope::Socket(socket) => f("socket", Value::Number(socket))?,
                    Scope::Die { socket, die } => {
                        f("socket", Value::Number(socket))?;
                        f("die", Value::Number(die))?;
                    }
                }
            }
            Self::Process { of, group, event } => {
                of.for_each(&mut f)?;
                f("group", Value::Str(group))?;
                if let Some(event) = event {
                    f("event", Value::Str(event))?;
                }
            }
            Self::ProcessMetric { of, metric } => {
                of.for_each(&mut f)?;
                f("metric", Value::Str(metric))?;
            }
            Self::Fixed(pairs) => {
                for (name, value) in pairs.into_iter().flatten() {
                    f(name, Value::Str(value))?;
                }
            }
        }
        Ok(())
    }
}

/// Which processes a series of `processes:` counts: the entry (`process`),
/// and the `comm` and `pid` where the entry splits its series by them.
#[derive(Debug, Clone, Copy)]
pub struct ProcessLabels<'a> {
    /// The entry's name.
    pub process: &'a str,
    /// The comm, on request.
    pub comm: Option<&'a str>,
    /// The pid, on request.
    pub pid: Option<u32>,
}

impl<'a> ProcessLabels<'a> {
    /// Calls `f` with each of them, in exposition order.
    fn for_each<E>(
        &self,
        f: &mut impl FnMut(&'a str, Value<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        f("process", Value::Str(self.process))?;
        if let Some(comm) = self.comm {
            f("comm", Value::Str(comm))?;
        }
        if let Some(pid) = self.pid {
            f("pid", Value::Number(pid))?;
        }
        Ok(())
    }
}

/// One value of a family.
#[derive(Debug, Clone, Copy)]
pub struct Point<'a> {
    /// Its labels.
    pub labels: Labels<'a>,
    /// The value (seconds for families in seconds).
    pub value: f64,
    /// For per-cgroup counters: when the series began. Other counters began
    /// with the process.
    pub start: Option<SystemTime>,
}

impl Point<'_> {
    /// A point of a process-wide family: no series start of its own.
    pub fn fixed(labels: Labels<'_>, value: f64) -> Point<'_> {
        Point {
            labels,
            value,
            start: None,
        }
    }
}

/// A source of figures kept outside the snapshot: the process's own, an
/// exporter's counters. [`visit`] shows them after the snapshot's families,
/// in the order the sources are given.
pub trait SelfMetrics: std::fmt::Debug + Send + Sync {
    /// The source's families now, each with its points, in a stable order.
    /// A figure the source does not have is left out, never shown as 0.
    fn families(&self) -> Vec<(&'static Family, Vec<Point<'static>>)>;
}

/// Receives the families of a snapshot, one after the other.
pub trait Visitor {
    /// What stops the walk.
    type Error;

    /// One family and all its points.
    fn family<'a>(
        &mut self,
        family: &Family,
        points: impl Iterator<Item = Point<'a>>,
    ) -> Result<(), Self::Error>;
}

const EVENTS: Family = Family {
    name: "cgperf_events",
    help: "Event counts per cgroup, scaled per interval by enabled/running time when the kernel multiplexes counters.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
const CLOCK: Family = Family {
    name: "cgperf_clock",
    help: "CPU time counted by the task-clock and cpu-clock software events, per cgroup.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const METRIC: Family = Family {
    name: "cgperf_metric",
    help: "The value of each metric of the config's `metrics:` per cgroup, over the last interval's counts; none for an interval in which its formula divides by zero (the cgroup did not run). cgperf_metric_definition_info gives each metric's description and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const METRIC_INFO: Family = Family {
    name: "cgperf_metric_definition",
    help: "One per metric of the config's `metrics:`, always 1: its description (the formula, unless the config gives one) and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Info,
};
const EVENTS_LOST: Family = Family {
    name: "cgperf_events_lost",
    help: "Hits of a tracepoint counted by field value that are in no value series of cgperf_events_total (nor `other`): the ring buffer was full when they happened. Values + other + lost = every hit.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
const GROUP_ENABLED: Family = Family {
    name: "cgperf_group_enabled",
    help: "Time the group was enabled (its cgroup was scheduled), summed over CPUs.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const GROUP_RUNNING: Family = Family {
    name: "cgperf_group_running",
    help: "Time the group was actually counting on the PMU; running/enabled is the multiplexing ratio.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const GROUP_NEVER_RAN: Family = Family {
    name: "cgperf_group_never_ran_intervals",
    help: "Intervals in which the group was enabled but never got a counter; they add nothing to cgperf_events_total.",
    unit: Unit::Count("{interval}"),
    kind: Kind::Counter,
};
const GROUP_SUPPORTED: Family = Family {
    name: "cgperf_group_supported",
    help: "1 when this machine can count the group, 0 when it cannot; `reason` says why (not_supported: no such counter here, e.g. no hardware PMU; permission; unknown_event; ...), the log and `cgperf check` say it in full.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const EVENT_SUPPORTED: Family = Family {
    name: "cgperf_event_supported",
    help: "1 when this machine can count the tracepoint, 0 when it cannot.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const HOST_EVENTS: Family = Family {
    name: "cgperf_host_events",
    help: "Event counts of the config's `host:` groups and tracepoints, for the whole machine (or per socket or die where the PMU counts so), scaled per interval as cgperf_events_total is.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
const HOST_CLOCK: Family = Family {
    name: "cgperf_host_clock",
    help: "CPU time counted by the cpu-clock and task-clock events of the config's `host:` groups, summed over CPUs.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const HOST_ENERGY: Family = Family {
    name: "cgperf_host_energy",
    help: "Energy counted by the `host:` groups' events that the kernel gives in Joules (power/energy-*), per socket or die as the PMU counts it.",
    unit: Unit::Joules,
    kind: Kind::Counter,
};
const HOST_BYTES: Family = Family {
    name: "cgperf_host_bytes",
    help: "Bytes counted by the `host:` groups' events that the kernel gives in MiB (memory controller reads and writes), per socket or die as the PMU counts it.",
    unit: Unit::Bytes,
    kind: Kind::Counter,
};
const HOST_GROUP_ENABLED: Family = Family {
    name: "cgperf_host_group_enabled",
    help: "Time each `host:` group was enabled, summed over the CPUs it counts on (per socket or die where the PMU counts so).",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const HOST_GROUP_RUNNING: Family = Family {
    name: "cgperf_host_group_running",
    help: "Time each `host:` group was counting on the PMU; running/enabled is its multiplexing ratio.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const HOST_GROUP_NEVER_RAN: Family = Family {
    name: "cgperf_host_group_never_ran_intervals",
    help: "Intervals in which a `host:` group was enabled but never got a counter (summed over its CPUs); they add nothing to its counts.",
    unit: Unit::Count("{interval}"),
    kind: Kind::Counter,
};
const HOST_METRIC: Family = Family {
    name: "cgperf_host_metric",
    help: "The value of each metric of `host:` over the last interval's counts of the whole machine (each input summed over the CPUs, sockets and dies it counts on); none for an interval in which its formula divides by zero. cgperf_metric_definition_info gives each metric's description and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const HOST_GROUP_SUPPORTED: Family = Family {
    name: "cgperf_host_group_supported",
    help: "1 when this machine can count the `host:` group system-wide, 0 when it cannot; `reason` says why, as for cgperf_group_supported.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const HOST_EVENT_SUPPORTED: Family = Family {
    name: "cgperf_host_event_supported",
    help: "1 when this machine can count the `host:` tracepoint system-wide, 0 when it cannot.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const PROCESS_EVENTS: Family = Family {
    name: "cgperf_process_events",
    help: "Event counts of the processes each entry of the config's `processes:` matched, their children and threads included, scaled per interval as cgperf_events_total is; a process that exited keeps what it counted here.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};
const PROCESS_CLOCK: Family = Family {
    name: "cgperf_process_clock",
    help: "CPU time counted by the task-clock and cpu-clock events of the processes of each entry of `processes:`.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const PROCESS_GROUP_ENABLED: Family = Family {
    name: "cgperf_process_group_enabled",
    help: "Time each group of a `processes:` entry was enabled, summed over its processes' threads (the time they ran).",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const PROCESS_GROUP_RUNNING: Family = Family {
    name: "cgperf_process_group_running",
    help: "Time each group of a `processes:` entry was counting on the PMU; running/enabled is its multiplexing ratio.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const PROCESS_GROUP_NEVER_RAN: Family = Family {
    name: "cgperf_process_group_never_ran_intervals",
    help: "Intervals in which a group of a `processes:` entry was enabled on a thread but never got a counter (summed over threads); they add nothing to its counts.",
    unit: Unit::Count("{interval}"),
    kind: Kind::Counter,
};
const PROCESS_METRIC: Family = Family {
    name: "cgperf_process_metric",
    help: "The value of each metric an entry of `processes:` computes, over the last interval's counts of its processes; none for an interval in which its formula divides by zero. cgperf_metric_definition_info gives each metric's description and unit.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const PROCESSES_COUNTED: Family = Family {
    name: "cgperf_processes_counted",
    help: "Processes each entry of `processes:` holds groups on now: those it matched, and the running children a reload that changed its groups opened one by one (children and threads counting through what they inherited not included).",
    unit: Unit::Count("{process}"),
    kind: Kind::Gauge,
};
const PROCESSES_SKIPPED: Family = Family {
    name: "cgperf_processes_skipped",
    help: "Processes an entry of `processes:` matched at the last scan but cgperf does not count, by reason: more than max_processes (max_processes), or their perf descriptors would exceed the open-files limit (fd_budget).",
    unit: Unit::Count("{process}"),
    kind: Kind::Gauge,
};
const READ_ERRORS: Family = Family {
    name: "cgperf_read_errors",
    help: "Failed group reads, by reason.",
    unit: Unit::Count("{error}"),
    kind: Kind::Counter,
};
const OPEN_ERRORS: Family = Family {
    name: "cgperf_open_errors",
    help: "Failed group opens, by reason.",
    unit: Unit::Count("{error}"),
    kind: Kind::Counter,
};
const COLLECTION_DURATION: Family = Family {
    name: "cgperf_collection_duration",
    help: "Time the last collection (read, discover, compute every metric, publish) took.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
const COLLECTIONS: Family = Family {
    name: "cgperf_collections",
    help: "Collections done since start.",
    unit: Unit::Count("{collection}"),
    kind: Kind::Counter,
};
const LAST_COLLECTION: Family = Family {
    name: "cgperf_last_collection_timestamp",
    help: "When the last collection finished, in seconds since the epoch (0 before the first); a value that stops advancing is a stalled sampler.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
const CGROUPS_SKIPPED: Family = Family {
    name: "cgperf_cgroups_skipped",
    help: "cgroups a selector chose but cgperf does not count: more than max_cgroups, or their perf descriptors would exceed the open-files limit.",
    unit: Unit::Count("{cgroup}"),
    kind: Kind::Gauge,
};
const RELOAD_OK: Family = Family {
    name: "cgperf_config_last_reload_successful",
    help: "1 if the last config (re)load succeeded, 0 if it failed and the previous config is still running.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
const RELOAD_TIME: Family = Family {
    name: "cgperf_config_last_reload_success_timestamp",
    help: "When a config was last loaded successfully, in seconds since the epoch.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
const OPEN_FDS: Family = Family {
    name: "cgperf_open_fds",
    help: "perf event file descriptors held now.",
    unit: Unit::Count("{file_descriptor}"),
    kind: Kind::Gauge,
};
const MONITORED: Family = Family {
    name: "cgperf_monitored_cgroups",
    help: "cgroups monitored now.",
    unit: Unit::Count("{cgroup}"),
    kind: Kind::Gauge,
};
const SAMPLES_LOST: Family = Family {
    name: "cgperf_samples_lost",
    help: "Samples of tracepoints counted by field value that the kernel dropped because a CPU's ring buffer was full, as its lost records report them (late: with the next sample that fits), over all cgroups; cgperf_events_lost_total says which entries they were missing from.",
    unit: Unit::Count("{sample}"),
    kind: Kind::Counter,
};
const SAMPLES_UNDECODABLE: Family = Family {
    name: "cgperf_samples_undecodable",
    help: "Ring buffer records of tracepoints counted by field value that could not be decoded, and are not counted.",
    unit: Unit::Count("{sample}"),
    kind: Kind::Counter,
};
const CRI_FAILURES: Family = Family {
    name: "cgperf_cri_failures",
    help: "Refreshes of pod and container names from the container runtime's CRI socket that failed (unreachable, no answer within 2 s, error); cgroups that appear meanwhile keep their ID labels.",
    unit: Unit::Count("{request}"),
    kind: Kind::Counter,
};
const BACKEND: Family = Family {
    name: "cgperf_backend",
    help: "The counting backend in use (`cgroup` or `bpf`), and why `backend: auto` did not count through BPF (`fallback`, empty when it did or was not asked to).",
    unit: Unit::Count("1"),
    kind: Kind::Info,
};
const BPF_RUN_TIME: Family = Family {
    name: "cgperf_bpf_program_run",
    help: "Time cgperf's BPF programs ran in the kernel (at context switches, at moves between cgroups and the flush before each read), while the kernel keeps BPF statistics, which are off unless cgperf runs with --bpf.run-statistics (and CAP_SYS_ADMIN) or kernel.bpf_stats_enabled=1; otherwise 0, and 0 with the cgroup backend.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
const BPF_RUNS: Family = Family {
    name: "cgperf_bpf_program_runs",
    help: "Times cgperf's BPF programs ran, while the kernel keeps BPF statistics (off unless --bpf.run-statistics or kernel.bpf_stats_enabled=1); 0 with the cgroup backend.",
    unit: Unit::Count("{run}"),
    kind: Kind::Counter,
};
const BUILD: Family = Family {
    name: "cgperf_build",
    help: "cgperf build information: version, git revision and Rust toolchain.",
    unit: Unit::Count("1"),
    kind: Kind::Info,
};

// The process's own figures, under the names every Prometheus client
// library gives them (see `super::process`).
/// `process_cpu_seconds_total`.
pub const PROCESS_CPU: Family = Family {
    name: "process_cpu",
    help: "Total user and system CPU time spent in seconds.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
/// `process_resident_memory_bytes`.
pub const PROCESS_RESIDENT: Family = Family {
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes.",
    unit: Unit::Bytes,
    kind: Kind::Gauge,
};
/// `process_virtual_memory_bytes`.
pub const PROCESS_VIRTUAL: Family = Family {
    name: "process_virtual_memory_bytes",
    help: "Virtual memory size in bytes.",
    unit: Unit::Bytes,
    kind: Kind::Gauge,
};
/// `process_open_fds`.
pub const PROCESS_OPEN_FDS: Family = Family {
    name: "process_open_fds",
    help: "Number of open file descriptors.",
    unit: Unit::Count("{file_descriptor}"),
    kind: Kind::Gauge,
};
/// `process_max_fds`.
pub const PROCESS_MAX_FDS: Family = Family {
    name: "process_max_fds",
    help: "Maximum number of open file descriptors.",
    unit: Unit::Count("{file_descriptor}"),
    kind: Kind::Gauge,
};
/// `process_start_time_seconds`.
pub const PROCESS_START: Family = Family {
    name: "process_start_time",
    help: "Start time of the process since unix epoch in seconds.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
/// `cgperf_otlp_exports_total`.
pub const OTLP_EXPORTS: Family = Family {
    name: "cgperf_otlp_exports",
    help: "OTLP export requests the collector accepted.",
    unit: Unit::Count("{request}"),
    kind: Kind::Counter,
};
/// `cgperf_otlp_exported_points_total`.
pub const OTLP_POINTS: Family = Family {
    name: "cgperf_otlp_exported_points",
    help: "Data points in OTLP export requests the collector accepted, less those it rejected.",
    unit: Unit::Count("{data_point}"),
    kind: Kind::Counter,
};
/// `cgperf_otlp_rejected_points_total`.
pub const OTLP_REJECTED: Family = Family {
    name: "cgperf_otlp_rejected_points",
    help: "Data points the collector rejected in partially successful OTLP exports.",
    unit: Unit::Count("{data_point}"),
    kind: Kind::Counter,
};
/// `cgperf_otlp_export_failures_total{reason}`.
pub const OTLP_FAILURES: Family = Family {
    name: "cgperf_otlp_export_failures",
    help: "OTLP export requests dropped after bounded retries, by reason; the next push sends the cumulative values again.",
    unit: Unit::Count("{request}"),
    kind: Kind::Counter,
};

/// `cgperf_otlp_pushes_deferred_total`.
pub const OTLP_DEFERRED: Family = Family {
    name: "cgperf_otlp_pushes_deferred",
    help: "OTLP pushes whose retries ended because the collector asked (Retry-After, RetryInfo) to wait past the next push; the next push, on schedule, sends the cumulative values again.",
    unit: Unit::Count("{push}"),
    kind: Kind::Counter,
};

fn counter_point(c: &CounterSample) -> Point<'_> {
    Point {
        labels: Labels::Series {
            cgroup: &c.cgroup,
            extra: &c.labels,
            group: &c.group,
            event: Some(&c.event),
            fields: &c.fields,
            cpu: c.cpu,
        },
        value: c.value,
        start: Some(c.start_time),
    }
}

/// The three families of group times of one kind of target, `[enabled,
/// running, never ran]`: a point per item, made by `point` from
/// the item and the value `times` gives it.
fn group_times<'a, T: 'a, V: Visitor>(
    v: &mut V,
    families: [&Family; 3],
    items: impl Iterator<Item = &'a T> + Clone,
    times: impl Fn(&T) -> GroupTimes,
    point: impl Fn(&'a T, f64) -> Point<'a>,
) -> Result<(), V::Error> {
    let values: [fn(GroupTimes) -> f64; 3] = [
        |t| t.enabled_seconds,
        |t| t.running_seconds,
        |t| t.never_ran_intervals as f64,
    ];
    for (family, value) in families.into_iter().zip(values) {
        v.family(family, items.clone().map(|t| point(t, value(times(t)))))?;
    }
    Ok(())
}

fn time_point(t: &GroupTimeSample, value: f64) -> Point<'_> {
    Point {
        labels: Labels::Series {
            cgroup: &t.cgroup,
            extra: &t.labels,
            group: &t.group,
            event: None,
            fields: &[],
            cpu: t.cpu,
        },
        value,
        start: Some(t.start_time),
    }
}

fn process_point(p: &ProcessSample) -> Point<'_> {
    Point {
        labels: Labels::Process {
            of: ProcessLabels {
                process: &p.process,
                comm: p.comm.as_deref(),
                pid: p.pid,
            },
            group: &p.group,
            event: Some(&p.event),
        },
        value: p.value,
        start: Some(p.start_time),
    }
}

/// A point of one of a process series' group times.
fn process_time_point(t: &ProcessGroupTime, value: f64) -> Point<'_> {
    Point {
        labels: Labels::Process {
            of: ProcessLabels {
                process: &t.process,
                comm: t.comm.as_deref(),
                pid: t.pid,
            },
            group: &t.group,
            event: None,
        },
        value,
        start: Some(t.start_time),
    }
}

fn host_point(h: &HostSample) -> Point<'_> {
    Point {
        labels: Labels::Host {
            group: &h.group,
            event: Some(&h.event),
            scope: h.scope,
        },
        value: h.value,
        start: Some(h.start_time),
    }
}

/// A point of one of the host's group times.
fn host_time_point(t: &HostGroupTime, value: f64) -> Point<'_> {
    Point {
        labels: Labels::Host {
            group: &t.group,
            event: None,
            scope: t.scope,
        },
        value,
        start: Some(t.start_time),
    }
}

/// The points of `cgperf_group_supported` (or the host's) for `support`.
fn group_support(support: &[Support]) -> impl Iterator<Item = Point<'_>> {
    support.iter().filter(|s| s.event.is_none()).map(|s| {
        let group = ("group", s.group.label());
        let labels = match &s.status {
            Ok(()) => Labels::Fixed([Some(group), None, None]),
            Err(why) => Labels::two(group, ("reason", why.token)),
        };
        Point::fixed(labels, supported(s))
    })
}

/// The points of `cgperf_event_supported` (or the host's) for `support`.
fn event_support(support: &[Support]) -> impl Iterator<Item = Point<'_>> {
    support.iter().filter_map(|s| {
        let event = s.event.as_deref()?;
        let labels = Labels::two(("group", s.group.label()), ("event", event));
        Some(Point::fixed(labels, supported(s)))
    })
}

fn supported(s: &Support) -> f64 {
    f64::from(u8::from(s.status.is_ok()))
}

fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Walks every family of `snap` in a stable order, then those of `others`
/// (the process's own figures, the OTLP exporter's counters when it runs).
pub fn visit<V: Visitor>(
    snap: &Snapshot,
    others: &[&dyn SelfMetrics],
    v: &mut V,
) -> Result<(), V::Error> {
    let counters = || snap.counters.iter();
    v.family(&EVENTS, counters().filter(|c| !c.clock).map(counter_point))?;
    v.family(&CLOCK, counters().filter(|c| c.clock).map(counter_point))?;
    v.family(&EVENTS_LOST, snap.events_lost.iter().map(counter_point))?;
    v.family(
        &METRIC,
        snap.metrics.iter().map(|m| Point {
            labels: Labels::Metric {
                cgroup: &m.cgroup,
                extra: &m.labels,
                metric: &m.metric.name,
            },
            value: m.value,
            start: None,
        }),
    )?;
    v.family(
        &METRIC_INFO,
        snap.metric_defs.iter().map(|m| {
            let labels = Labels::Fixed([
                Some(("metric", m.name.as_str())),
                Some(("description", m.description.as_str())),
                Some(("unit", m.unit.as_str())),
            ]);
            Point::fixed(labels, 1.0)
        }),
    )?;
    group_times(
        v,
        [&GROUP_ENABLED, &GROUP_RUNNING, &GROUP_NEVER_RAN],
        snap.group_times.iter(),
        |t| GroupTimes {
            enabled_seconds: t.enabled_seconds,
            running_seconds: t.running_seconds,
            never_ran_intervals: t.never_ran_intervals,
        },
        time_point,
    )?;
    v.family(&GROUP_SUPPORTED, group_support(&snap.support))?;
    v.family(&EVENT_SUPPORTED, event_support(&snap.support))?;
    let host = |unit: HostUnit| {
        snap.host
            .iter()
            .filter(move |h| h.unit == unit)
            .map(host_point)
    };
    v.family(&HOST_EVENTS, host(HostUnit::Count))?;
    v.family(&HOST_CLOCK, host(HostUnit::Seconds))?;
    v.family(&HOST_ENERGY, host(HostUnit::Joules))?;
    v.family(&HOST_BYTES, host(HostUnit::Bytes))?;
    group_times(
        v,
        [
            &HOST_GROUP_ENABLED,
            &HOST_GROUP_RUNNING,
            &HOST_GROUP_NEVER_RAN,
        ],
        snap.host_group_times.iter(),
        |t| t.times,
        host_time_point,
    )?;
    v.family(
        &HOST_METRIC,
        snap.host_metrics.iter().map(|m| Point {
            labels: Labels::one("metric", &m.metric.name),
            value: m.value,
            start: None,
        }),
    )?;
    v.family(&HOST_GROUP_SUPPORTED, group_support(&snap.host_support))?;
    let processes = || snap.processes.iter();
    v.family(
        &PROCESS_EVENTS,
        processes().filter(|p| !p.clock).map(process_point),
    )?;
    v.family(
        &PROCESS_CLOCK,
        processes().filter(|p| p.clock).map(process_point),
    )?;
    group_times(
        v,
        [
            &PROCESS_GROUP_ENABLED,
            &PROCESS_GROUP_RUNNING,
            &PROCESS_GROUP_NEVER_RAN,
        ],
        snap.process_group_times.iter(),
        |t| t.times,
        process_time_point,
    )?;
    v.family(
        &PROCESS_METRIC,
        snap.process_metrics.iter().map(|m| Point {
            labels: Labels::ProcessMetric {
                of: ProcessLabels {
                    process: &m.process,
                    comm: m.comm.as_deref(),
                    pid: m.pid,
                },
                metric: &m.metric.name,
            },
            value: m.value,
            start: None,
        }),
    )?;
    v.family(
        &PROCESSES_COUNTED,
        snap.process_counts
            .iter()
            .map(|c| Point::fixed(Labels::one("process", &c.process), c.counted as f64)),
    )?;
    let skipped = &snap.processes_skipped;
    v.family(
        &PROCESSES_SKIPPED,
        [
            ("max_processes", skipped.max_processes),
            ("fd_budget", skipped.fd_budget),
        ]
        .into_iter()
        .map(|(reason, n)| Point::fixed(Labels::one("reason", reason), n as f64)),
    )?;
    v.family(&HOST_EVENT_SUPPORTED, event_support(&snap.host_support))?;
    for (family, op) in [
        (&READ_ERRORS, Operation::Read),
        (&OPEN_ERRORS, Operation::Open),
    ] {
        v.family(
            family,
            snap.errors
                .of(op)
                .map(|(reason, n)| Point::fixed(Labels::one("reason", reason.label()), n as f64)),
        )?;
    }
    let scalar = |value: f64| std::iter::once(Point::fixed(Labels::NONE, value));
    v.family(&COLLECTION_DURATION, scalar(snap.collection_seconds))?;
    v.family(&COLLECTIONS, scalar(snap.collections as f64))?;
    let last_collection = match snap.finished {
        Some(_) => epoch_seconds(snap.taken_at),
        None => 0.0,
    };
    v.family(&LAST_COLLECTION, scalar(last_collection))?;
    v.family(
        &CGROUPS_SKIPPED,
        snap.skipped
            .iter()
            .map(|(reason, n)| Point::fixed(Labels::one("reason", reason.label()), *n as f64)),
    )?;
    v.family(&RELOAD_OK, scalar(f64::from(u8::from(snap.reload_ok))))?;
    v.family(
        &RELOAD_TIME,
        scalar(epoch_seconds(snap.reload_success_time)),
    )?;
    v.family(&OPEN_FDS, scalar(snap.open_fds as f64))?;
    v.family(&MONITORED, scalar(snap.monitored_cgroups as f64))?;
    v.family(&SAMPLES_LOST, scalar(snap.samples_lost as f64))?;
    v.family(
        &SAMPLES_UNDECODABLE,
        scalar(snap.samples_undecodable as f64),
    )?;
    v.family(&CRI_FAILURES, scalar(snap.cri_failures as f64))?;
    if !snap.backend.name.is_empty() {
        let fallback = snap.backend.fallback.as_deref().unwrap_or("");
        let labels = Labels::two(("backend", snap.backend.name), ("fallback", fallback));
        v.family(&BACKEND, std::iter::once(Point::fixed(labels, 1.0)))?;
    }
    v.family(&BPF_RUN_TIME, scalar(snap.bpf_run_seconds))?;
    v.family(&BPF_RUNS, scalar(snap.bpf_runs as f64))?;
    v.family(
        &BUILD,
        std::iter::once(Point::fixed(
            Labels::Fixed([
                Some(("version", env!("CARGO_PKG_VERSION"))),
                Some(("revision", env!("CGPERF_REVISION"))),
                Some(("rustversion", env!("CGPERF_RUSTC_VERSION"))),
            ]),
            1.0,
        )),
    )?;
    for source in others {
        for (family, points) in source.families() {
            v.family(family, points.into_iter())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects family names and their points' values.
    struct Names(Vec<(String, Vec<f64>)>);

    impl Visitor for Names {
        type Error = std::convert::Infallible;

        fn family<'a>(
            &mut self,
            family: &Family,
            points: impl Iterator<Item = Point<'a>>,
        ) -> Result<(), Self::Error> {
            let values = points.map(|p| p.value).collect();
            self.0.push((family.sample_name(), values));
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Source(&'static Family, f64);

    impl SelfMetrics for Source {
        fn families(&self) -> Vec<(&'static Family, Vec<Point<'static>>)> {
            vec![(self.0, vec![Point::fixed(Labels::NONE, self.1)])]
        }
    }

    #[test]
    fn self_metrics_follow_the_snapshot_in_the_order_given() {
        let (a, b) = (Source(&OTLP_EXPORTS, 2.0), Source(&PROCESS_CPU, 3.0));
        let mut names = Names(Vec::new());
        let Ok(()) = visit(&Snapshot::empty(), &[&a, &b], &mut names);
        let tail: Vec<_> = names.0.iter().rev().take(3).rev().cloned().collect();
        assert_eq!(
            tail,
            [
                ("cgperf_build_info".to_owned(), vec![1.0]),
                ("cgperf_otlp_exports_total".to_owned(), vec![2.0]),
                ("process_cpu_seconds_total".to_owned(), vec![3.0]),
            ]
        );
    }

    /// Family names, whatever their kind: an info family `x` and a gauge
    /// `x` would write two HELP lines for `x`, which Prometheus' text
    /// parser rejects (it happened: `cgperf_metric` and its descriptions).
    #[test]
    fn no_two_families_share_a_name() {
        struct Families(Vec<&'static str>);
        impl Visitor for Families {
            type Error = std::convert::Infallible;
            fn family<'a>(
                &mut self,
                family: &Family,
                _: impl Iterator<Item = Point<'a>>,
            ) -> Result<(), Self::Error> {
                self.0.push(family.name);
                Ok(())
            }
        }
        let (a, b) = (Source(&OTLP_EXPORTS, 2.0), Source(&PROCESS_CPU, 3.0));
        let mut seen = Families(Vec::new());
        let Ok(()) = visit(&Snapshot::empty(), &[&a, &b], &mut seen);
        assert!(seen.0.len() > 15, "{:?}", seen.0);
        let mut names = seen.0.clone();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), seen.0.len(), "{:?}", seen.0);
    }

    #[test]
    fn sample_names_are_what_prometheus_shows() {
        assert_eq!(EVENTS.sample_name(), "cgperf_events_total");
        assert_eq!(CLOCK.sample_name(), "cgperf_clock_seconds_total");
        assert_eq!(EVENTS_LOST.sample_name(), "cgperf_events_lost_total");
        assert_eq!(
            COLLECTION_DURATION.sample_name(),
            "cgperf_collection_duration_seconds"
        );
        assert_eq!(BUILD.sample_name(), "cgperf_build_info");
        assert_eq!(OPEN_FDS.sample_name(), "cgperf_open_fds");
        assert_eq!(PROCESS_CPU.sample_name(), "process_cpu_seconds_total");
        assert_eq!(
            OTLP_FAILURES.sample_name(),
            "cgperf_otlp_export_failures_total"
        );
        assert_eq!(PROCESS_START.sample_name(), "process_start_time_seconds");
        assert_eq!(
            PROCESS_RESIDENT.sample_name(),
            "process_resident_memory_bytes"
        );
    }
}
