//! cgperf's own figures: its errors, collections, reloads, descriptors,
//! backend and build, then the families of figures kept outside the
//! snapshot (the process's, the OTLP push's), whose values reach the walk
//! through [`super::SelfMetrics`].

use super::{Family, Kind, Labels, Point, Unit, Visitor};
use crate::snapshot::{Operation, Snapshot};
use std::time::{SystemTime, UNIX_EPOCH};

pub(super) const READ_ERRORS: Family = Family {
    name: "cgperf_read_errors",
    help: "Failed reads, by reason: of groups (the kernel's refusal, or `format`), of the CPU list (`cpu_list`), of the cgroup hierarchy (`cgroup_list`), of /proc for `processes:` (`process_list`).",
    unit: Unit::Count("{error}"),
    kind: Kind::Counter,
};
pub(super) const OPEN_ERRORS: Family = Family {
    name: "cgperf_open_errors",
    help: "Failed group opens, by reason.",
    unit: Unit::Count("{error}"),
    kind: Kind::Counter,
};
pub(super) const COLLECTION_DURATION: Family = Family {
    name: "cgperf_collection_duration",
    help: "Time the last collection (read, discover, compute every metric, publish) took.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
pub(super) const COLLECTIONS: Family = Family {
    name: "cgperf_collections",
    help: "Collections done since start.",
    unit: Unit::Count("{collection}"),
    kind: Kind::Counter,
};
pub(super) const LAST_COLLECTION: Family = Family {
    name: "cgperf_last_collection_timestamp",
    help: "When the last collection finished, in seconds since the epoch (0 before the first); a value that stops advancing is a stalled sampler.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
pub(super) const CGROUPS_SKIPPED: Family = Family {
    name: "cgperf_cgroups_skipped",
    help: "cgroups a selector chose but cgperf does not count: more than max_cgroups, their perf descriptors would exceed the open-files limit, or their path is longer than PATH_MAX.",
    unit: Unit::Count("{cgroup}"),
    kind: Kind::Gauge,
};
pub(super) const RELOAD_OK: Family = Family {
    name: "cgperf_config_last_reload_successful",
    help: "1 if the last config (re)load succeeded, 0 if it failed and the previous config is still running.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};
pub(super) const RELOAD_TIME: Family = Family {
    name: "cgperf_config_last_reload_success_timestamp",
    help: "When a config was last loaded successfully, in seconds since the epoch.",
    unit: Unit::Seconds,
    kind: Kind::Gauge,
};
pub(super) const OPEN_FDS: Family = Family {
    name: "cgperf_open_fds",
    help: "perf event file descriptors held now, and under the bpf backend its BPF maps, programs and links.",
    unit: Unit::Count("{file_descriptor}"),
    kind: Kind::Gauge,
};
pub(super) const MONITORED: Family = Family {
    name: "cgperf_monitored_cgroups",
    help: "cgroups monitored now.",
    unit: Unit::Count("{cgroup}"),
    kind: Kind::Gauge,
};
pub(super) const SAMPLES_LOST: Family = Family {
    name: "cgperf_samples_lost",
    help: "Samples of tracepoints counted by field value that the kernel dropped because a CPU's ring buffer was full, as its lost records report them (late: with the next sample that fits), over all cgroups; cgperf_events_lost_total says which entries they were missing from.",
    unit: Unit::Count("{sample}"),
    kind: Kind::Counter,
};
pub(super) const SAMPLES_UNDECODABLE: Family = Family {
    name: "cgperf_samples_undecodable",
    help: "Ring buffer records of tracepoints counted by field value that could not be decoded, and are not counted.",
    unit: Unit::Count("{sample}"),
    kind: Kind::Counter,
};
pub(super) const CRI_FAILURES: Family = Family {
    name: "cgperf_cri_failures",
    help: "Refreshes of pod and container names from the container runtime's CRI socket that failed (unreachable, no answer within 2 s, error); cgroups that appear meanwhile keep their ID labels.",
    unit: Unit::Count("{request}"),
    kind: Kind::Counter,
};
pub(super) const BACKEND: Family = Family {
    name: "cgperf_backend",
    help: "The counting backend in use (`cgroup` or `bpf`), and why `backend: auto` did not count through BPF (`fallback`, empty when it did or was not asked to).",
    unit: Unit::Count("1"),
    kind: Kind::Info,
};
pub(super) const BPF_RUN_TIME: Family = Family {
    name: "cgperf_bpf_program_run",
    help: "Time cgperf's BPF programs ran in the kernel (at context switches, at moves between cgroups and the flush before each read), while the kernel keeps BPF statistics, which are off unless cgperf runs with --bpf.run-statistics (and CAP_SYS_ADMIN) or kernel.bpf_stats_enabled=1; otherwise 0, and 0 with the cgroup backend.",
    unit: Unit::Seconds,
    kind: Kind::Counter,
};
pub(super) const BPF_RUNS: Family = Family {
    name: "cgperf_bpf_program_runs",
    help: "Times cgperf's BPF programs ran, while the kernel keeps BPF statistics (off unless --bpf.run-statistics or kernel.bpf_stats_enabled=1); 0 with the cgroup backend.",
    unit: Unit::Count("{run}"),
    kind: Kind::Counter,
};
pub(super) const BPF_UNSEEN_SWITCHES: Family = Family {
    name: "cgperf_bpf_unseen_switches",
    help: "Times the bpf backend found, since cgperf started, that the kernel had switched out of a task without the sched_switch tracepoint it counts by (some VM guest kernels hide their own threads' switches; a run of such switches on a CPU is found once). Where it grows, what perf counters count while such a task runs is charged to the cgroup of the task that runs next (docs/backends.md); the cgroup backend counts it exactly. 0 with the cgroup backend.",
    unit: Unit::Count("{switch}"),
    kind: Kind::Counter,
};
pub(super) const BUILD: Family = Family {
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

fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The engine's own figures, from errors to the build.
pub(super) fn figures<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
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
        &BPF_UNSEEN_SWITCHES,
        scalar(snap.bpf_unseen_switches as f64),
    )?;
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
    )
}
