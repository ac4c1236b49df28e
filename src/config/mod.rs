//! The YAML config file: which counter groups and tracepoints to count, for
//! which cgroups, and how often.
//!
//! This module only parses and validates; it touches nothing but the config
//! file itself (no cgroupfs, no perf). Whether an event is *supported* on
//! this machine is the daemon's question; here we only check that it is
//! well-formed, so that a config is either accepted whole or rejected with an
//! error naming file, line, column, the offending value and the fix.
//!
//! ```yaml
//! interval: 1s            # 100ms ..= 1h; default 1s
//! per_cpu: false          # add a `cpu` label; default false
//! groups:                 # name -> events opened as one perf group
//!   ipc: [cycles, instructions]
//! tracepoints: [sched:sched_switch]
//! cgroups:                # default: [{path: /}]
//!   - path: /
//!   - match: /system.slice/*.service
//!     groups: [ipc]       # default: all groups
//!     tracepoints: []     # default: all tracepoints
//! max_cgroups: 1000       # 1 ..= 1_000_000; default: no limit
//! labels: [kubernetes, systemd, containers]   # default: none
//! backend: cgroup         # cgroup, bpf or auto; default cgroup
//! otlp:                   # push to an OpenTelemetry collector; default: off
//!   endpoint: http://127.0.0.1:4317
//! metrics:                # formulas over the counts, per cgroup per interval
//!   - name: ipc
//!     expr: instructions / cycles
//! processes:              # processes by name, executable, command line or pid
//!   - {name: postgres, comm: postgres, groups: [ipc]}
//! host:                   # counted once for the whole machine, not per cgroup
//!   groups: {energy: [power/energy-pkg/]}
//!   tracepoints: [irq:irq_handler_entry]
//! energy:                 # each socket's energy shared among cgroups
//!   meter: auto
//! ```
//!
//! Keys that are absent or `null` take their defaults; unknown keys,
//! duplicate keys and values of the wrong type are errors.
//!
//! Parsing goes through private `Spanned` raw structs (`schema`) so that
//! semantic errors keep positions, then `validate` builds the public types.

mod cgroup;
mod duration;
mod energy;
mod error;
mod host;
mod metrics;
mod node_count;
mod otlp;
mod process;
mod schema;
mod selector;
mod tracing;
mod validate;
mod written;
mod yaml;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use crate::events::{Event, ProbeSpec, TracepointName};
use crate::labels::Extractor;
pub use crate::metrics::{Catalog, MetricDef, MetricInput};

pub use cgroup::CgroupPattern;
pub(crate) use duration::parse_duration;
pub use duration::{MAX_INTERVAL, MIN_INTERVAL};
pub use energy::{
    EnergyDef, IdlePolicy, MAX_MODEL_WATTS, MeterChoice, ModelScope, PowerModel, WEIGHT_EVENTS,
};
pub use error::ConfigError;
pub use host::HostDef;
pub use metrics::SCHEDULED_PREFIX;
pub use otlp::{
    DEFAULT_OTLP_INTERVAL, DEFAULT_OTLP_TIMEOUT, OtlpConfig, OtlpProtocol, OtlpSection,
    resolve as resolve_otlp,
};
pub use process::{
    COMM_LEN, DEFAULT_MAX_PROCESSES, MAX_PROCESSES_LIMIT, Pattern, ProcessLabel, ProcessMatch,
    ProcessSelector,
};

/// Largest config file we read: the cap of every text file a user names
/// ([`crate::userfile::MAX_TEXT_BYTES`]).
pub const MAX_CONFIG_BYTES: usize = crate::userfile::MAX_TEXT_BYTES as usize;

/// The `source` name used in errors about the embedded default config.
pub const DEFAULT_SOURCE: &str = "<embedded default config>";

/// The config used when none is given: useful on any host (whole machine
/// plus top-level cgroups, software events, common tracepoints, hardware
/// groups that the daemon disables where unsupported).
pub const DEFAULT_YAML: &str = include_str!("../../config/default.yaml");

/// The `group` label of the counts of the top-level `tracepoints:` list.
pub const TRACEPOINT_GROUP: &str = "tracepoints";

/// The `group` label of the counts of the top-level `probes:` list.
pub const PROBE_GROUP: &str = "probes";

/// Every `group` label cgperf gives series itself. A group under `groups:`
/// may take none of them: its series would be indistinguishable from
/// cgperf's own (two identical `cgperf_events_total` series).
pub const RESERVED_GROUPS: [&str; 2] = [TRACEPOINT_GROUP, PROBE_GROUP];

/// `interval` when the file does not set it.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// Largest `max_cgroups`: far beyond what one machine can count (each
/// cgroup costs a perf file descriptor per group per CPU), so a larger value
/// is a typo, not a plan.
pub const MAX_CGROUPS_LIMIT: usize = 1_000_000;

/// `max_series` of a `by:` tracepoint when the entry does not set it.
pub const DEFAULT_MAX_SERIES: usize = 100;

/// Largest `max_series`: each value combination is a series in every
/// scrape, per cgroup; more than this is a cardinality accident.
pub const MAX_SERIES_LIMIT: usize = 10_000;

/// `ring_pages` when the file does not set it: 256 KiB per CPU with 4 KiB
/// pages, drained when half full and every 10 ms.
pub const DEFAULT_RING_PAGES: usize = 64;

/// Largest `ring_pages` (4 MiB per CPU with 4 KiB pages).
pub const MAX_RING_PAGES: usize = 1024;

/// How cgperf counts (`backend:`).
///
/// The default is `auto`: the bpf backend's descriptors and kernel memory
/// do not grow with the number of cgroups, and it counts what the cgroup
/// backend counts (docs/backends.md says where they still differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Through BPF where the kernel and cgperf's privileges allow it, else
    /// with the cgroup backend, saying why.
    #[default]
    Auto,
    /// One perf event per cgroup, event and CPU.
    Cgroup,
    /// One counter per event and CPU, charged to cgroups by a BPF program
    /// at context switches; a machine that cannot is a start-up error.
    Bpf,
}

impl BackendChoice {
    /// Every choice, in the order the docs list them.
    pub const ALL: [Self; 3] = [Self::Auto, Self::Cgroup, Self::Bpf];

    /// As written in the config.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cgroup => "cgroup",
            Self::Bpf => "bpf",
        }
    }
}

/// The hint of a bad `backend:`.
pub(crate) const BACKEND_HINT: &str =
    "write `backend: cgroup`, `backend: bpf` or `backend: auto` (BPF where possible)";

/// A validated config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How often counters are read; within [`MIN_INTERVAL`]`..=`[`MAX_INTERVAL`].
    pub interval: Duration,
    /// Export per-CPU series (with a `cpu` label) instead of summing CPUs.
    pub per_cpu: bool,
    /// Counter groups in the order written; names are unique.
    pub groups: Vec<GroupDef>,
    /// Tracepoints counted per cgroup, in the order written; their labels
    /// are unique.
    pub tracepoints: Vec<TracepointDef>,
    /// uprobes and kprobes counted per cgroup, in the order written; their
    /// labels are unique.
    pub probes: Vec<ProbeDef>,
    /// Data pages of each CPU's ring buffer for sampled (`by:`) tracepoints:
    /// a power of two within `1..=`[`MAX_RING_PAGES`].
    pub ring_pages: usize,
    /// Which cgroups to count, and what; never empty.
    pub cgroups: Vec<CgroupSelector>,
    /// At most this many cgroups are counted at once, within
    /// `1..=`[`MAX_CGROUPS_LIMIT`]; `None` (key absent) is no limit.
    pub max_cgroups: Option<usize>,
    /// Label extractors to apply to every cgroup (see [`crate::labels`]),
    /// unique, in [`Extractor::ALL`] order whatever the order written;
    /// empty (key absent) adds no labels. The embedded default config
    /// enables all of them.
    pub labels: Vec<Extractor>,
    /// How to count; [`BackendChoice::Auto`] when absent.
    pub backend: BackendChoice,
    /// The `otlp:` section as written; `None` when absent. The push it
    /// describes also depends on `OTEL_*` variables: see [`resolve_otlp`].
    pub otlp: Option<OtlpSection>,
    /// Metrics computed from the counts, in the order written; names are
    /// unique.
    pub metrics: Vec<MetricDef>,
    /// What is counted once for the whole machine (`host:`); empty when
    /// absent.
    pub host: HostDef,
    /// Processes counted by name (`processes:`), in the order written;
    /// names unique.
    pub processes: Vec<ProcessSelector>,
    /// At most this many processes are counted at once.
    pub max_processes: usize,
    /// Energy per cgroup (`energy:`); `None` when absent.
    pub energy: Option<EnergyDef>,
}

/// A named set of events opened (and read) together as one perf group, so
/// that ratios between them (e.g. instructions per cycle) are consistent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDef {
    /// Matches `[A-Za-z_][A-Za-z0-9_-]*`; never one of
    /// [`RESERVED_GROUPS`].
    pub name: String,
    /// At least one event, no duplicates.
    pub events: Vec<Event>,
    /// Whether the plan may count its events apart, one group each, when
    /// the kernel cannot count them as one (more events than the PMU has
    /// counters), as perf does with a metric's group: true for the groups
    /// metrics schedule, never for a group the config writes, whose events
    /// are counted together or not at all.
    pub splittable: bool,
    /// Where the config wrote its name; `None` for the groups cgperf makes
    /// (for metrics, for `cgperf stat`).
    pub origin: Option<Origin>,
}

/// The name of part `index` (from 0) of group `group` counted apart, one
/// event each: `metric:ipc:1`, `metric:ipc:2`, ...
pub fn part_name(group: &str, index: usize) -> String {
    format!("{group}:{}", index + 1)
}

/// Where a value was written, for errors found after validation (a filter
/// the kernel rejects, a field the tracepoint does not have).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file name, or [`DEFAULT_SOURCE`].
    pub source: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Origin {
    /// A config error about the value written here.
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::new(&self.source, message).at_position(self.line, self.column)
    }
}

/// A tracepoint to count per cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointDef {
    /// Which tracepoint.
    pub name: TracepointName,
    /// The `event` label: `as:`, or the name as written.
    pub label: String,
    /// Kernel-side filter (ftrace syntax), applied with
    /// `PERF_EVENT_IOC_SET_FILTER`; only matching hits are counted.
    pub filter: Option<String>,
    /// Fields whose values split the count (sampling); empty for a plain
    /// count.
    pub by: Vec<String>,
    /// For `by:` counts: distinct value combinations per cgroup before the
    /// rest is counted under `other`.
    pub max_series: usize,
    /// The position in `by` of the field that holds a syscall number
    /// (`syscall_name:`): its series also get a `syscall` label with the
    /// name this architecture gives that number.
    pub syscall_name: Option<usize>,
    /// Where the entry was written.
    pub origin: Origin,
}

/// A uprobe or kprobe counted per cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeDef {
    /// Where the probe goes.
    pub spec: ProbeSpec,
    /// The `event` label (`as:`).
    pub label: String,
    /// Where the entry was written.
    pub origin: Origin,
}

/// Which cgroups to count, and which groups and tracepoints to count there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupSelector {
    /// The cgroups this selector applies to.
    pub pattern: CgroupPattern,
    /// Names of the groups to count, in the order of [`Config::groups`].
    pub groups: Vec<String>,
    /// Labels of the tracepoints to count, a subset of
    /// [`Config::tracepoints`] in its order.
    pub tracepoints: Vec<String>,
    /// Labels of the probes to count, a subset of [`Config::probes`] in its
    /// order. `groups`, `tracepoints` and `probes` are never all empty: a
    /// selector always counts something.
    pub probes: Vec<String>,
    /// Names of the metrics to compute, a subset of [`Config::metrics`] in
    /// its order, each counted by this selector's groups, tracepoints and
    /// probes.
    pub metrics: Vec<String>,
}

/// What an entry of `cgroups:` or `processes:` counts, by the names of the
/// top level's groups, tracepoints and probes, and the metrics it
/// computes: what choosing an entry's metrics (and counting what they
/// scheduled) and the plan's rewiring of split groups work on, for either.
pub trait Selection {
    /// Names of the groups it counts.
    fn groups_mut(&mut self) -> &mut Vec<String>;
    /// Labels of the tracepoints it counts.
    fn tracepoints_mut(&mut self) -> &mut Vec<String>;
    /// Labels of the probes it counts.
    fn probes_mut(&mut self) -> &mut Vec<String>;
    /// Names of the metrics it computes.
    fn metrics_mut(&mut self) -> &mut Vec<String>;
}

/// [`Selection`] for an entry type whose lists are fields of those names.
macro_rules! selection_of_fields {
    ($($entry:ty),*) => {$(
        impl Selection for $entry {
            fn groups_mut(&mut self) -> &mut Vec<String> {
                &mut self.groups
            }
            fn tracepoints_mut(&mut self) -> &mut Vec<String> {
                &mut self.tracepoints
            }
            fn probes_mut(&mut self) -> &mut Vec<String> {
                &mut self.probes
            }
            fn metrics_mut(&mut self) -> &mut Vec<String> {
                &mut self.metrics
            }
        }
    )*};
}

selection_of_fields!(CgroupSelector, ProcessSelector);

/// Reads and validates the config file at `path`.
///
/// Errors name the file: it cannot be read, is not a regular file, is
/// larger than [`MAX_CONFIG_BYTES`], is not UTF-8, or does not validate.
/// `catalog` holds the metrics of the CPU's tables that `metrics:` may
/// name.
pub fn load(path: &Path, catalog: &Catalog) -> Result<Config, ConfigError> {
    let source = path.display().to_string();
    from_bytes(&source, read(path)?, catalog)
}

/// The bytes of the config file at `path`, read as every file a user names
/// is (see [`crate::userfile`]): never blocking on a FIFO or a device, at
/// most [`MAX_CONFIG_BYTES`].
pub fn read(path: &Path) -> Result<Vec<u8>, ConfigError> {
    let source = path.display().to_string();
    crate::userfile::read(path, MAX_CONFIG_BYTES as u64).map_err(|e| {
        if crate::userfile::is_too_large(&e) {
            too_large(&source)
        } else {
            ConfigError::new(&source, format!("cannot read the config file: {e}"))
        }
    })
}

/// Validates the config file `bytes`; `source` names it in errors,
/// `catalog` holds the metrics of the CPU's tables.
pub fn from_bytes(source: &str, bytes: Vec<u8>, catalog: &Catalog) -> Result<Config, ConfigError> {
    let text = String::from_utf8(bytes).map_err(|e| {
        ConfigError::new(
            source,
            format!(
                "the config file is not valid UTF-8 (at byte {})",
                e.utf8_error().valid_up_to()
            ),
        )
        .hint("save the file as UTF-8")
    })?;
    parse_for(source, &text, catalog)
}

/// Parses and validates config `text` without the CPU's tables: its
/// `metrics:` entries must give their `expr`. `source` names it in errors.
pub fn parse(source: &str, text: &str) -> Result<Config, ConfigError> {
    parse_for(source, text, &Catalog::none())
}

/// Parses and validates config `text`, whose `metrics:` may name those of
/// `catalog`; `source` names it in errors.
pub fn parse_for(source: &str, text: &str, catalog: &Catalog) -> Result<Config, ConfigError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(too_large(source));
    }
    let raw = yaml::deserialize(source, text)?;
    validate::validate(source, raw, catalog)
}

/// The embedded default config ([`DEFAULT_YAML`]).
///
/// A unit test proves that it parses; it still returns a `Result` so that a
/// broken edit of `default.yaml` surfaces as an error, never as a panic.
pub fn default_config() -> Result<Config, ConfigError> {
    parse(DEFAULT_SOURCE, DEFAULT_YAML)
}

fn too_large(source: &str) -> ConfigError {
    ConfigError::new(
        source,
        format!("the config is larger than {} KiB", MAX_CONFIG_BYTES / 1024),
    )
    .hint("a cgperf config is a few KiB; check that this is the right file")
}
