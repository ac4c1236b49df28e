//! The CPU's own events by name (`BR_INST_RETIRED.NEAR_TAKEN`,
//! `ex_ret_instr`, `STALL_BACKEND`), from the event tables of its model.
//!
//! A table tree is a `mapfile.csv` whose rows match CPU ids to JSON files of
//! events, in the format that perf's pmu-events and Intel's perfmon project
//! publish (the same keys; perfmon wraps the list in `{"Events": [...]}`).
//! cgperf embeds Intel's core events of every model, from perfmon
//! (BSD-3-Clause), and Arm's events of every CPU, from ARM-software/data
//! (Apache-2.0), both written by `scripts/gen-event-tables`; it reads such
//! a tree at run time from `--event-tables` (perf's
//! `tools/perf/pmu-events/arch`, or a perfmon checkout): that is how AMD
//! CPUs, whose tables are only the kernel's (GPL), and CPUs newer than the
//! build get their events. A directory given wins over the embedded tables.
//!
//! Each core PMU gets the table of its own core type: `cpu` the model's, and
//! on hybrid CPUs `cpu_core` and `cpu_atom` each their own (perfmon's core
//! role, perf's `Unit`); on Arm each core PMU the table of its CPUs' MIDR.
//! A table event is the `term=value` list of its PMU, resolved through the
//! PMU's sysfs `format/` files like any `pmu/terms/` event.

mod encode;
mod ident;
mod mapfile;
mod metric;
mod source;

use std::path::Path;

use serde_json::{Map, Value};

pub use ident::CpuIdent;
use mapfile::RowKind;
pub use metric::TableMetric;
use source::Source;

/// One event of a CPU's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEvent {
    /// Its name as the table writes it, e.g. `BR_INST_RETIRED.NEAR_TAKEN`.
    pub name: String,
    /// Its encoding: format terms of its PMU and their values.
    pub terms: Vec<(String, u64)>,
    /// The table's one-line description.
    pub description: String,
}

impl TableEvent {
    /// The encoding as `pmu/terms/` would write it: `event=0xc4,umask=0x20`.
    pub fn encoding(&self) -> String {
        let terms: Vec<String> = self
            .terms
            .iter()
            .map(|(t, v)| format!("{t}={v:#x}"))
            .collect();
        terms.join(",")
    }
}

/// The events of one core PMU.
#[derive(Debug, Clone)]
pub struct PmuTable {
    /// The PMU's sysfs name: `cpu`, `cpu_core`, `armv8_pmuv3_0`, ...
    pub pmu: String,
    /// The files its events and metrics come from, as messages name them.
    pub files: Vec<String>,
    /// The events, sorted by name ignoring case.
    pub events: Vec<TableEvent>,
    /// The metrics of this core type, sorted by name ignoring case.
    pub metrics: Vec<TableMetric>,
}

/// A table that cannot be read or understood, with where and what.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{place}: {problem}")]
pub struct TableError {
    place: String,
    problem: String,
}

impl TableError {
    fn new(place: String, problem: String) -> Self {
        Self { place, problem }
    }
}

/// The event tables of this machine's core PMUs.
#[derive(Debug, Clone)]
pub struct EventTables {
    cpu: String,
    tables: Vec<PmuTable>,
}

impl Default for EventTables {
    fn default() -> Self {
        Self::none()
    }
}

impl EventTables {
    /// No tables: only generic and sysfs events resolve.
    pub fn none() -> Self {
        Self {
            cpu: CpuIdent::Unknown.to_string(),
            tables: Vec::new(),
        }
    }

    /// Finds the tables of the core PMUs under `pmu_root` for the CPU
    /// `ident`, in `dir` first (when given), then among the embedded ones.
    /// A PMU no table matches has none; a table that cannot be read or
    /// parsed is an error naming the file.
    pub fn load(pmu_root: &Path, ident: &CpuIdent, dir: Option<&Path>) -> Result<Self, TableError> {
        let mut sources = Vec::new();
        if let Some(dir) = dir {
            sources.push(Source::Dir(dir));
        }
        sources.push(Source::Embedded);
        let mut tables = Vec::new();
        if let Some(arch) = ident.arch() {
            for (pmu, first_cpu) in core_pmus(pmu_root, ident) {
                for source in &sources {
                    if let Some(table) = table_for(*source, arch, ident, &pmu, first_cpu)? {
                        tables.push(table);
                        break;
                    }
                }
            }
        }
        Ok(Self {
            cpu: ident.to_string(),
            tables,
        })
    }

    /// The CPU the tables were chosen for, as messages name it.
    pub fn cpu(&self) -> &str {
        &self.cpu
    }

    /// The table of each core PMU that has one; on a hybrid CPU `cpu_core`
    /// comes first.
    pub fn tables(&self) -> &[PmuTable] {
        &self.tables
    }

    /// The event `name` (any case) of the first PMU whose table has it,
    /// with that PMU: on a hybrid CPU, `cpu_core`'s (the resolution adds
    /// the other core type's encoding, see `EventAttr::other_core`).
    pub fn find(&self, name: &str) -> Option<(&str, &TableEvent)> {
        self.tables
            .iter()
            .find_map(|t| Some((t.pmu.as_str(), find_in(&t.events, name)?)))
    }

    /// The event `name` (any case) of `pmu`'s table.
    pub fn find_on(&self, pmu: &str, name: &str) -> Option<&TableEvent> {
        let table = self.tables.iter().find(|t| t.pmu == pmu)?;
        find_in(&table.events, name)
    }

    /// Every table event's name, for did-you-mean hints.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tables
            .iter()
            .flat_map(|t| t.events.iter().map(|e| e.name.as_str()))
    }

    /// Where the tables came from, for messages: `none` when no table
    /// matches this CPU.
    pub fn describe(&self) -> String {
        if self.tables.is_empty() {
            return format!("cgperf's event tables (none is for this CPU, {})", self.cpu);
        }
        let files: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{}: {}", t.pmu, t.files.join(", ")))
            .collect();
        format!(
            "the event tables of this CPU ({}; {})",
            self.cpu,
            files.join("; ")
        )
    }
}

/// Binary search of a sorted table, ignoring case.
fn find_in<'a>(events: &'a [TableEvent], name: &str) -> Option<&'a TableEvent> {
    events
        .binary_search_by(|e| cmp_ignore_case(&e.name, name))
        .ok()
        .and_then(|i| events.get(i))
}

fn cmp_ignore_case(a: &str, b: &str) -> std::cmp::Ordering {
    a.bytes()
        .map(|c| c.to_ascii_lowercase())
        .cmp(b.bytes().map(|c| c.to_ascii_lowercase()))
}

/// The core PMUs under `pmu_root` with the first CPU of each (Arm tables
/// are chosen by that CPU's MIDR); `cpu_core` first. On x86, `cpu` when
/// there is none (a VM without a PMU), so that the tables are still listed
/// and named events fail to open with the reason, as `cycles` does.
fn core_pmus(pmu_root: &Path, ident: &CpuIdent) -> Vec<(String, Option<u32>)> {
    let mut pmus: Vec<(String, Option<u32>)> = super::cores::core_pmu_names(pmu_root)
        .into_iter()
        .map(|name| {
            let cpus = std::fs::read_to_string(pmu_root.join(&name).join("cpus")).ok();
            let first = cpus
                .and_then(|c| crate::cpus::parse_list(&c).ok())
                .and_then(|list| list.first().copied());
            (name, first)
        })
        .collect();
    if pmus.is_empty() && matches!(ident, CpuIdent::X86(_)) {
        pmus.push(("cpu".into(), None));
    }
    pmus
}

/// The table `source` has for `pmu`, if a row of its mapfile matches.
fn table_for(
    source: Source<'_>,
    arch: &str,
    ident: &CpuIdent,
    pmu: &str,
    first_cpu: Option<u32>,
) -> Result<Option<PmuTable>, TableError> {
    let Some(base) = source.base(arch)? else {
        return Ok(None);
    };
    let join = |rel: &str| {
        if base.is_empty() {
            rel.to_string()
        } else {
            format!("{base}/{rel}")
        }
    };
    let mapfile = join("mapfile.csv");
    let Some(text) = source.read(&mapfile)? else {
        return Ok(None);
    };
    let rows = mapfile::parse(&source.name(&mapfile), &text)?;
    let mut matching = Vec::new();
    for row in &rows {
        let matches = match ident {
            CpuIdent::X86(id) => row.matches_x86(id)?,
            CpuIdent::Arm(midrs) => first_cpu
                .or_else(|| midrs.keys().next().copied())
                .and_then(|cpu| midrs.get(&cpu))
                .is_some_and(|midr| row.matches_midr(*midr)),
            CpuIdent::Unknown => false,
        };
        if matches {
            matching.push(row);
        }
    }
    let role = match pmu {
        "cpu_atom" => RowKind::Atom,
        "cpu_core" => RowKind::BigCore,
        _ => RowKind::Core,
    };
    let row = matching
        .iter()
        .find(|r| r.kind == role)
        .or_else(|| matching.iter().find(|r| r.kind == RowKind::Core));
    let Some(row) = row else {
        return Ok(None);
    };
    let files = if row.file.ends_with(".json") {
        // perfmon's layout: MODEL/events/FILE.json, and the model's metrics
        // in perf's format in MODEL/metrics/perf/, where it has them.
        let mut files = vec![join(&row.file)];
        if let Some((model, _)) = row.file.trim_start_matches('/').split_once('/') {
            let metrics = join(&format!("{model}/metrics/perf"));
            if source.has_dir(&metrics) {
                files.extend(source.json_files(&metrics)?);
            }
        }
        files
    } else {
        source.json_files(&join(&row.file))?
    };
    let standard = standard_events(source, &join)?;
    let (events, metrics) = read_files(source, &files, &standard, pmu)?;
    Ok(Some(PmuTable {
        pmu: pmu.to_string(),
        files: files.iter().map(|f| source.name(f)).collect(),
        events,
        metrics,
    }))
}

/// The events and metrics of `pmu` in `files`, each sorted by name ignoring
/// case, the first of a name kept. Metrics the table gives to another core
/// type (`Unit: cpu_atom` when `pmu` is `cpu_core`) are left out; those of
/// an uncore unit (`Unit: iMC`) are kept, as perf lists them: their events
/// say why they do not count per cgroup.
fn read_files(
    source: Source<'_>,
    files: &[String],
    standard: &[Map<String, Value>],
    pmu: &str,
) -> Result<(Vec<TableEvent>, Vec<TableMetric>), TableError> {
    let mut events = Vec::new();
    let mut metrics = Vec::new();
    for file in files {
        for entry in read_entries(source, file)? {
            if let Some(m) = metric::metric(&entry) {
                let other_core = |u: &str| u != pmu && (u == "cpu" || u.starts_with("cpu_"));
                if !m.unit.as_deref().is_some_and(other_core) {
                    metrics.push(m);
                }
                continue;
            }
            let entry = encode::with_standard(entry, standard);
            if let Some((_, event)) = encode::event(&entry, &[pmu]) {
                events.push(event);
            }
        }
    }
    events.sort_by(|a, b| cmp_ignore_case(&a.name, &b.name));
    events.dedup_by(|a, b| cmp_ignore_case(&a.name, &b.name).is_eq());
    metrics.sort_by(|a, b| cmp_ignore_case(&a.name, &b.name));
    metrics.dedup_by(|a, b| cmp_ignore_case(&a.name, &b.name).is_eq());
    Ok((events, metrics))
}

/// The metrics of every table file directly in `dir` (one CPU's directory
/// of perf's tree, e.g. `x86/skylake`), whatever PMU they name: how the
/// metrics of CPUs other than this one are read, e.g. to check cgperf's
/// formulas against another evaluator over every CPU's tables.
pub fn read_metrics(dir: &Path) -> Result<Vec<TableMetric>, TableError> {
    let source = Source::Dir(dir);
    let files = source.json_files("")?;
    let mut metrics = Vec::new();
    for file in &files {
        metrics.extend(
            read_entries(source, file)?
                .iter()
                .filter_map(metric::metric),
        );
    }
    Ok(metrics)
}

/// Arm's architecture standard events, which CPU tables name by
/// `ArchStdEvent` (perf's `arm64/common-and-microarch.json` and
/// `recommended.json`); none where the tree has no such files.
fn standard_events(
    source: Source<'_>,
    join: &dyn Fn(&str) -> String,
) -> Result<Vec<Map<String, Value>>, TableError> {
    let mut standard = Vec::new();
    for name in ["common-and-microarch.json", "recommended.json"] {
        let path = join(name);
        if source.read(&path)?.is_some() {
            standard.extend(read_entries(source, &path)?);
        }
    }
    Ok(standard)
}

/// The entries of one table file.
fn read_entries(source: Source<'_>, path: &str) -> Result<Vec<Map<String, Value>>, TableError> {
    let name = source.name(path);
    let text = source
        .read(path)?
        .ok_or_else(|| TableError::new(name.clone(), "no such file".into()))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| {
        TableError::new(
            format!("{name}:{}:{}", e.line(), e.column()),
            format!("not an event table: {e}"),
        )
    })?;
    encode::entries(json).ok_or_else(|| {
        TableError::new(
            name,
            "expected a JSON array of events (perf) or an object with `Events` (perfmon)".into(),
        )
    })
}

#[cfg(test)]
mod tests;
