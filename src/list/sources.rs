//! Where `cgperf list` finds its events: perf's generalized names, the
//! CPU's event tables and metrics, the dynamic PMUs of sysfs and the
//! tracepoints of tracefs, each as [`Entry`]s with their descriptions.

use super::{Countable, Entry, Kind, PmuFormat};
use crate::events::{self, EventKind, EventTables, ResolveError, parse_event};
use crate::metrics::Catalog;
use crate::tracefs::Tracefs;
use perf_event_open_sys::bindings as sys;
use std::io;
use std::path::{Path, PathBuf};

/// The generalized hardware, software and cache events, each described, with
/// the other names of the same event.
pub(super) fn symbolic_entries() -> Vec<Entry> {
    let parsed: Vec<(String, EventKind)> = events::known_names()
        .into_iter()
        .filter_map(|name| parse_event(&name).ok().map(|e| (name, e.kind)))
        .collect();
    parsed
        .iter()
        .filter_map(|(name, kind)| {
            let (kind_of, text) = describe(kind)?;
            let others: Vec<&str> = parsed
                .iter()
                .filter(|(other, k)| k == kind && other != name)
                .map(|(other, _)| other.as_str())
                .collect();
            let description = if others.is_empty() {
                text
            } else {
                format!("{text} (also: {})", others.join(", "))
            };
            Some(Entry {
                name: name.clone(),
                kind: kind_of,
                description,
                countable: Countable::Unknown,
            })
        })
        .collect()
}

/// The events of the CPU's tables, each with its description and encoding:
/// by its bare name on the PMU a bare name resolves to, as `pmu/NAME/` on
/// another core type of a hybrid CPU that defines it too.
pub(super) fn vendor_entries(tables: &EventTables) -> Vec<Entry> {
    let mut entries = Vec::new();
    for table in tables.tables() {
        for event in &table.events {
            let bare = tables
                .find(&event.name)
                .is_some_and(|(pmu, _)| pmu == table.pmu);
            let name = if bare {
                event.name.clone()
            } else {
                format!("{}/{}/", table.pmu, event.name)
            };
            let encoding = format!("[{}/{}/]", table.pmu, event.encoding());
            let description = match event.description.as_str() {
                "" => encoding,
                text => format!("{text} {encoding}"),
            };
            entries.push(Entry {
                name,
                kind: Kind::Vendor,
                description,
                countable: Countable::Unknown,
            });
        }
    }
    entries
}

/// The metrics and metric groups of the CPU's tables, each with its
/// description and formula (a group: its metrics). They are computed where
/// their events count, which `cgperf check` says per metric of a config:
/// they are listed as countable.
pub(super) fn metric_entries(catalog: &Catalog) -> Vec<Entry> {
    let metrics = catalog.metrics();
    let mut entries: Vec<Entry> = metrics
        .iter()
        .map(|(name, m)| {
            let description = match m.description.as_str() {
                "" => format!("[{}]", m.expr),
                text => format!("{text} [{}]", m.expr),
            };
            Entry {
                name: name.clone(),
                kind: Kind::Metric,
                description,
                countable: Countable::Yes,
            }
        })
        .collect();
    for group in catalog.groups() {
        let members: Vec<&str> = metrics
            .iter()
            .filter(|(_, m)| m.groups.iter().any(|g| g == group))
            .map(|(name, _)| name.as_str())
            .collect();
        entries.push(Entry {
            name: group.to_owned(),
            kind: Kind::MetricGroup,
            description: format!("metric group: {}", members.join(", ")),
            countable: Countable::Yes,
        });
    }
    entries.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    entries
}

/// The kind and perf-like description of a generalized event; `None` for
/// kinds that are not generalized (raw, PMU, vendor).
fn describe(kind: &EventKind) -> Option<(Kind, String)> {
    let id = |v: u64| u32::try_from(v).ok();
    match kind {
        EventKind::Hardware(v) => Some((Kind::Hardware, hardware_text(id(*v)?).into())),
        EventKind::Software(v) => Some((Kind::Software, software_text(id(*v)?).into())),
        EventKind::HardwareCache { cache, op, result } => {
            Some((Kind::Cache, cache_text(id(*cache)?, id(*op)?, id(*result)?)))
        }
        EventKind::Raw(_) | EventKind::Pmu { .. } | EventKind::Named(_) => None,
    }
}

/// What a `perf_hw_id` counts (after perf_event_open(2)).
fn hardware_text(id: sys::perf_hw_id) -> &'static str {
    match id {
        sys::PERF_COUNT_HW_CPU_CYCLES => "CPU cycles (vary with frequency scaling)",
        sys::PERF_COUNT_HW_INSTRUCTIONS => "Retired instructions",
        sys::PERF_COUNT_HW_CACHE_REFERENCES => "Cache accesses, usually of the last-level cache",
        sys::PERF_COUNT_HW_CACHE_MISSES => "Cache misses, usually of the last-level cache",
        sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS => "Retired branch instructions",
        sys::PERF_COUNT_HW_BRANCH_MISSES => "Mispredicted branch instructions",
        sys::PERF_COUNT_HW_BUS_CYCLES => "Bus cycles",
        sys::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND => "Cycles stalled during instruction issue",
        sys::PERF_COUNT_HW_STALLED_CYCLES_BACKEND => "Cycles stalled during retirement",
        sys::PERF_COUNT_HW_REF_CPU_CYCLES => "Reference cycles, not affected by frequency scaling",
        _ => "Hardware event",
    }
}

/// What a `perf_sw_ids` counts (after perf_event_open(2)).
fn software_text(id: sys::perf_sw_ids) -> &'static str {
    match id {
        sys::PERF_COUNT_SW_CPU_CLOCK => "CPU clock, a per-CPU timer (msec)",
        sys::PERF_COUNT_SW_TASK_CLOCK => "Time the counted tasks ran on a CPU (msec)",
        sys::PERF_COUNT_SW_PAGE_FAULTS => "Page faults",
        sys::PERF_COUNT_SW_CONTEXT_SWITCHES => "Context switches",
        sys::PERF_COUNT_SW_CPU_MIGRATIONS => "Moves of a task to another CPU",
        sys::PERF_COUNT_SW_PAGE_FAULTS_MIN => "Minor page faults (no disk I/O)",
        sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ => "Major page faults (disk I/O)",
        sys::PERF_COUNT_SW_ALIGNMENT_FAULTS => "Unaligned accesses fixed up by the kernel",
        sys::PERF_COUNT_SW_EMULATION_FAULTS => "Instructions emulated by the kernel",
        sys::PERF_COUNT_SW_DUMMY => "Placeholder that counts nothing",
        sys::PERF_COUNT_SW_BPF_OUTPUT => "Output of BPF programs",
        sys::PERF_COUNT_SW_CGROUP_SWITCHES => "Context switches to a task of another cgroup",
        _ => "Software event",
    }
}

/// Describes a generalized cache event, e.g. "L1 data cache load misses".
fn cache_text(
    cache: sys::perf_hw_cache_id,
    op: sys::perf_hw_cache_op_id,
    result: sys::perf_hw_cache_op_result_id,
) -> String {
    let cache = match cache {
        sys::PERF_COUNT_HW_CACHE_L1D => "L1 data cache",
        sys::PERF_COUNT_HW_CACHE_L1I => "L1 instruction cache",
        sys::PERF_COUNT_HW_CACHE_LL => "Last-level cache",
        sys::PERF_COUNT_HW_CACHE_DTLB => "Data TLB",
        sys::PERF_COUNT_HW_CACHE_ITLB => "Instruction TLB",
        sys::PERF_COUNT_HW_CACHE_BPU => "Branch prediction unit",
        sys::PERF_COUNT_HW_CACHE_NODE => "Local memory (NUMA node)",
        _ => "Cache",
    };
    let (op, ops) = match op {
        sys::PERF_COUNT_HW_CACHE_OP_WRITE => ("store", "stores"),
        sys::PERF_COUNT_HW_CACHE_OP_PREFETCH => ("prefetch", "prefetches"),
        _ => ("load", "loads"),
    };
    if result == sys::PERF_COUNT_HW_CACHE_RESULT_MISS {
        format!("{cache} {op} misses")
    } else {
        format!("{cache} {ops}")
    }
}

/// The PMU directories under `root`, sorted by name.
pub(super) fn pmu_dirs(root: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut pmus: Vec<(String, PathBuf)> = std::fs::read_dir(root)?
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(_, path)| path.is_dir())
        .collect();
    pmus.sort();
    Ok(pmus)
}

/// The sorted file names in `dir`; none if it cannot be read (most PMUs have
/// no `events/` or no `format/`).
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// `pmu/alias/` for each event alias in the PMU's `events/` that cgperf
/// accepts and resolves; the description is the PMU and the alias's terms.
/// Side files (`.scale`, `.unit`, ...) do not resolve and so are left out.
/// An alias that needs a value (`term=?`) is listed with what to add.
pub(super) fn pmu_entries(root: &Path, pmu: &str, dir: &Path) -> Vec<Entry> {
    let events = dir.join("events");
    file_names(&events)
        .into_iter()
        .filter_map(|alias| {
            let name = format!("{pmu}/{alias}/");
            let terms = std::fs::read_to_string(events.join(&alias)).ok()?;
            let terms = terms.trim();
            let event = parse_event(&name).ok()?;
            let mut description = match event.resolve(root, &EventTables::none()) {
                Ok(_) => format!("{pmu} PMU: {terms}"),
                Err(ResolveError::MissingValue { term, .. }) => {
                    format!("{pmu} PMU: {terms} (write {pmu}/{alias},{term}=N/)")
                }
                Err(_) => return None,
            };
            if let Ok(Some(unit)) = events::scale_unit(root, &event)
                && !unit.unit.is_empty()
            {
                description.push_str(&format!(", in {}", unit.unit));
            }
            if let Ok(Some(cpus)) = events::cpumask(root, &event) {
                description.push_str(&format!(
                    "; host only: the whole machine counts it (on CPUs {cpus:?}), under `host:`"
                ));
            }
            Some(Entry {
                name,
                kind: Kind::Pmu,
                description,
                countable: Countable::Unknown,
            })
        })
        .collect()
}

/// The PMU's format terms, if it has any.
pub(super) fn pmu_format(pmu: &str, dir: &Path) -> Option<PmuFormat> {
    let format = dir.join("format");
    let terms: Vec<(String, String)> = file_names(&format)
        .into_iter()
        .filter_map(|term| {
            let bits = std::fs::read_to_string(format.join(&term)).ok()?;
            Some((term, bits.trim().to_string()))
        })
        .collect();
    (!terms.is_empty()).then(|| PmuFormat {
        pmu: pmu.to_string(),
        terms,
    })
}

/// Whether `probes:` can place uprobes and kprobes here: each needs its
/// dynamic PMU.
pub(super) fn probe_support(root: &Path, pmus: &[(String, PathBuf)]) -> Vec<String> {
    [("uprobe", "user-space functions"), ("kprobe", "kernel functions")]
        .iter()
        .map(|(pmu, what)| {
            if pmus.iter().any(|(name, _)| name == pmu) {
                format!("{pmu}: available: `probes:` on {what} can be counted here")
            } else {
                format!(
                    "{pmu}: unavailable: no {pmu} PMU in {}, `probes:` on {what} cannot be counted here",
                    root.display()
                )
            }
        })
        .collect()
}

/// `subsystem:name` for every tracepoint under `<tracefs>/events`.
pub(super) fn tracepoint_entries(tracefs: &Tracefs) -> Result<Vec<Entry>, String> {
    Ok(tracefs
        .tracepoints()?
        .into_iter()
        .map(|tp| Entry {
            name: tp.to_string(),
            kind: Kind::Tracepoint,
            description: String::new(),
            countable: Countable::Yes,
        })
        .collect())
}
