//! `cgperf list`: the events this machine offers, named as cgperf's config
//! (and `perf`) writes them: generalized hardware, software and cache events,
//! the CPU's own events from the event tables of its model, the dynamic PMU
//! events of sysfs, and the tracepoints of tracefs.
//!
//! Every name listed is one that [`parse_event`] or [`crate::events::parse_tracepoint`]
//! accepts, so any line can be copied into a config or `cgperf stat -e`.
//! Listing only reads sysfs and tracefs; tracefs usually needs root, and
//! without it the tracepoints are left out with a note on stderr.

use crate::backend::cgroup::CgroupProbe;
use crate::backend::choose::choose;
use crate::config::BackendChoice;
use crate::events::{self, EventKind, EventTables, ResolveError, parse_event};
use crate::metrics::Catalog;
use crate::tracefs::Tracefs;
use perf_event_open_sys::bindings as sys;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// `cgperf list [FILTER] [--json]`.
#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Only events whose name contains this text (case-insensitive).
    #[arg(value_name = "FILTER")]
    pub filter: Option<String>,

    /// Print one JSON array of `{"name", "kind", "description",
    /// "countable"}` objects instead of the table (PMU format terms and
    /// probe support are left out).
    #[arg(long)]
    pub json: bool,

    /// Also list the events this machine cannot count (left out by default,
    /// as `perf list` does), marked `[not countable here]`.
    #[arg(long)]
    pub all: bool,
}

/// What sort of event an [`Entry`] is, in `perf list`'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A generalized hardware event, e.g. `cycles`.
    Hardware,
    /// A kernel software event, e.g. `task-clock`.
    Software,
    /// A generalized hardware cache event, e.g. `L1-dcache-load-misses`.
    Cache,
    /// An event of the CPU's model from its event table, e.g.
    /// `BR_INST_RETIRED.NEAR_TAKEN`.
    Vendor,
    /// An event alias of a dynamic PMU, e.g. `msr/tsc/`.
    Pmu,
    /// A tracepoint, e.g. `sched:sched_switch`.
    Tracepoint,
    /// A metric of the CPU's tables (`IPC`), which a config's `metrics:`
    /// names.
    Metric,
    /// A metric group of the CPU's tables (`TopdownL1`): its metrics.
    MetricGroup,
}

impl Kind {
    /// The `kind` shown in the table and the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hardware => "hardware",
            Self::Software => "software",
            Self::Cache => "cache",
            Self::Vendor => "vendor",
            Self::Metric => "metric",
            Self::MetricGroup => "metricgroup",
            Self::Pmu => "pmu",
            Self::Tracepoint => "tracepoint",
        }
    }
}

/// One event that can be counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name to write in a config or `-e`.
    pub name: String,
    /// What sort of event it is.
    pub kind: Kind,
    /// A short description; empty where there is none (tracepoints).
    pub description: String,
    /// Whether this machine can count it.
    pub countable: Countable,
}

/// Whether this machine can count an [`Entry`], as the kernel answers when
/// the event is opened alone in cgroup mode (how cgperf counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Countable {
    /// It can (tracepoints that tracefs has are, without asking).
    Yes,
    /// The kernel refused it: no such counter here, not in cgroup mode, ...
    No,
    /// Not asked, or the kernel would not say (no permission).
    Unknown,
}

/// The `format/` terms of one PMU: what `pmu/term=value,.../` may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmuFormat {
    /// The PMU's directory name, e.g. `cpu`.
    pub pmu: String,
    /// `(term, bits)` sorted by term, e.g. `("event", "config:0-7,32-35")`.
    pub terms: Vec<(String, String)>,
}

/// Everything `cgperf list` shows.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Events, sorted by kind and then name.
    pub entries: Vec<Entry>,
    /// Format terms of every PMU that has them, sorted by PMU.
    pub formats: Vec<PmuFormat>,
    /// One line each for uprobes and kprobes: can `probes:` use them here.
    pub probes: Vec<String>,
    /// What could not be listed and why (shown on stderr).
    pub problems: Vec<String>,
}

/// Runs `cgperf list`: writes the listing to `out`, notes to stderr.
///
/// What this machine cannot count is left out unless `--all` asks for it
/// (marked then), as `perf list` leaves it out: a name that is listed is one
/// that counts here. The kernel is asked by opening each event once in
/// cgroup mode on the cgroup2 root; tracepoints that tracefs has are taken
/// as countable without asking (there are thousands).
pub fn run(args: &ListArgs, event_tables: Option<&Path>, out: &mut dyn Write) -> io::Result<()> {
    let tracefs = Tracefs::locate();
    let pmu_root = Path::new(events::PMU_ROOT);
    let tables = crate::machine::CpuTables::read(event_tables)
        .map_err(|e| io::Error::other(format!("{e:#}")))?;
    let (events, catalog) = (tables.events.clone(), tables.metrics.clone());
    let discovered = crate::machine::Machine::discover(tables);
    let mut listing = gather(pmu_root, &events, tracefs.as_ref());
    listing.entries.extend(metric_entries(&catalog));
    for problem in &listing.problems {
        eprintln!("cgperf list: {problem}");
    }
    let mut listing = listing.filtered(args.filter.as_deref().unwrap_or(""));
    match discovered {
        Ok(crate::machine::Discovered { machine, .. }) => {
            // The backend a config that does not name one counts with
            // (`auto`: BPF where this process may load its program).
            let probe = match choose(BackendChoice::default(), None) {
                Ok(chosen) => chosen.probe(&machine),
                Err(_) => std::sync::Arc::new(CgroupProbe::new(&machine)),
            };
            listing.judge(|name| match parse_event(name) {
                Ok(event) => match crate::plan::probe_event(&event, &machine, &*probe) {
                    Ok(()) => Countable::Yes,
                    Err(refusal) if refusal.permission => Countable::Unknown,
                    Err(_) => Countable::No,
                },
                Err(_) => Countable::Unknown,
            })
        }
        Err(e) => eprintln!("cgperf list: cannot ask the kernel what this machine counts: {e:#}"),
    }
    if listing
        .entries
        .iter()
        .any(|e| e.countable == Countable::Unknown)
    {
        eprintln!(
            "cgperf list: the kernel did not say whether some events can be counted here (they \
             are listed); {} to leave out what cannot",
            what_grants(crate::perf::paranoid(), &crate::perf::Held::now())
        );
    }
    if !args.all {
        let before = listing.entries.len();
        listing.entries.retain(|e| e.countable != Countable::No);
        let left_out = before - listing.entries.len();
        if left_out > 0 {
            eprintln!(
                "cgperf list: {left_out} events this machine cannot count are left out; \
                 `cgperf list --all` lists them too (`cgperf check` says why)"
            );
        }
    }
    if args.json {
        write_json(&listing.entries, out)
    } else {
        write_table(&listing, out)
    }
}

/// Lists the events of the machine whose PMUs are under `pmu_root` and whose
/// tracefs is `tracefs` (or why there is none).
pub fn gather(
    pmu_root: &Path,
    tables: &EventTables,
    tracefs: Result<&Tracefs, &String>,
) -> Listing {
    let mut listing = Listing {
        entries: symbolic_entries(),
        ..Listing::default()
    };
    listing.entries.extend(vendor_entries(tables));
    match pmu_dirs(pmu_root) {
        Ok(pmus) => {
            for (pmu, dir) in &pmus {
                listing.entries.extend(pmu_entries(pmu_root, pmu, dir));
                listing.formats.extend(pmu_format(pmu, dir));
            }
            listing.probes = probe_support(pmu_root, &pmus);
        }
        Err(e) => listing.problems.push(format!(
            "PMU events not listed: reading {}: {e}",
            pmu_root.display()
        )),
    }
    match tracefs.map_err(Clone::clone).and_then(tracepoint_entries) {
        Ok(tracepoints) => listing.entries.extend(tracepoints),
        Err(e) => listing
            .problems
            .push(format!("tracepoints not listed: {e}")),
    }
    listing
        .entries
        .sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    listing
}

impl Listing {
    /// Sets `countable` of every entry not yet judged to what `ask` says
    /// about its name.
    pub fn judge(&mut self, ask: impl Fn(&str) -> Countable) {
        for entry in &mut self.entries {
            if entry.countable == Countable::Unknown {
                entry.countable = ask(&entry.name);
            }
        }
    }

    /// Keeps the entries, PMU formats and probe lines whose name contains
    /// `filter`, ignoring case; an empty filter keeps everything.
    pub fn filtered(mut self, filter: &str) -> Self {
        let filter = filter.to_lowercase();
        let keep = |name: &str| name.to_lowercase().contains(&filter);
        self.entries.retain(|e| keep(&e.name));
        self.formats.retain(|f| keep(&format!("{}/", f.pmu)));
        self.probes.retain(|line| keep(line));
        self
    }
}

/// The generalized hardware, software and cache events, each described, with
/// the other names of the same event.
fn symbolic_entries() -> Vec<Entry> {
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
fn vendor_entries(tables: &EventTables) -> Vec<Entry> {
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
fn metric_entries(catalog: &Catalog) -> Vec<Entry> {
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
fn pmu_dirs(root: &Path) -> io::Result<Vec<(String, PathBuf)>> {
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
fn pmu_entries(root: &Path, pmu: &str, dir: &Path) -> Vec<Entry> {
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
fn pmu_format(pmu: &str, dir: &Path) -> Option<PmuFormat> {
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
fn probe_support(root: &Path, pmus: &[(String, PathBuf)]) -> Vec<String> {
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
fn tracepoint_entries(tracefs: &Tracefs) -> Result<Vec<Entry>, String> {
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

/// Longest name aligned in the tables of `cgperf check` and `cgperf stat`:
/// the longest file name Linux allows; longer ones overflow their column.
pub const NAME_MAX: usize = 255;

/// The width of a table column holding values of `lengths` under a
/// heading of `heading` characters: the longest value of at most `aligned`
/// characters. Longer values overflow their column rather than push every
/// row far right; and a width computed from a value a user wrote, unbounded,
/// would make the formatting panic past 65,535.
pub fn column_width(
    lengths: impl IntoIterator<Item = usize>,
    heading: usize,
    aligned: usize,
) -> usize {
    lengths
        .into_iter()
        .filter(|&n| n <= aligned)
        .max()
        .unwrap_or(0)
        .max(heading)
}

/// The table: `name  kind  description`, then the PMU format terms and probe
/// support.
fn write_table(listing: &Listing, out: &mut dyn Write) -> io::Result<()> {
    // Long tracepoint names would push every description far right.
    let width = column_width(listing.entries.iter().map(|e| e.name.len()), 0, 40);
    for e in &listing.entries {
        let mark = match e.countable {
            Countable::No => "[not countable here] ",
            Countable::Yes | Countable::Unknown => "",
        };
        let line = format!(
            "  {:width$}  {:11}  {mark}{}",
            e.name,
            e.kind.as_str(),
            e.description
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    if !listing.formats.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "PMU format terms (write pmu/term=value,.../, e.g. cpu/event=0x3c,umask=0x0/):"
        )?;
        let width = listing
            .formats
            .iter()
            .map(|f| f.pmu.len() + 1)
            .max()
            .unwrap_or(0);
        for f in &listing.formats {
            let terms: Vec<String> = f
                .terms
                .iter()
                .map(|(t, bits)| format!("{t}={bits}"))
                .collect();
            let pmu = format!("{}/", f.pmu);
            writeln!(out, "  {pmu:width$}  {}", terms.join("  "))?;
        }
    }
    if !listing.probes.is_empty() {
        writeln!(out)?;
        writeln!(out, "Probes:")?;
        for line in &listing.probes {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// One JSON array, one object per line.
fn write_json(entries: &[Entry], out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "[")?;
    for (i, e) in entries.iter().enumerate() {
        let comma = if i + 1 < entries.len() { "," } else { "" };
        let countable = match e.countable {
            Countable::Yes => "true",
            Countable::No => "false",
            Countable::Unknown => "null",
        };
        writeln!(
            out,
            "  {{\"name\":{},\"kind\":{},\"description\":{},\"countable\":{countable}}}{comma}",
            json_string(&e.name),
            json_string(e.kind.as_str()),
            json_string(&e.description)
        )?;
    }
    writeln!(out, "]")
}

/// `text` as a JSON string literal (RFC 8259: quote, backslash and control
/// characters escaped; everything else is valid UTF-8 as it is).
fn json_string(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if u32::from(c) < 0x20 => s.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// What lets the kernel answer for every event, for the process as it is:
/// the capability the paranoid `level` asks for (`CAP_SYS_ADMIN` from 3 on,
/// on Debian's and Ubuntu's kernels; else `CAP_PERFMON`); root is told
/// that capability, never to run as root; a process that holds it is told
/// that something else refuses.
fn what_grants(level: Option<i32>, held: &crate::perf::Held) -> String {
    let (cap, has) = match level {
        Some(l) if crate::perf::sys_admin_only(Some(l)) => (
            format!("CAP_SYS_ADMIN (kernel.perf_event_paranoid is {l})"),
            held.sys_admin,
        ),
        _ => ("CAP_PERFMON".to_owned(), held.perfmon || held.sys_admin),
    };
    if has {
        "allow perf_event_open to cgperf (it has the capabilities: a seccomp profile or a \
         security module refuses)"
            .to_owned()
    } else if held.uid == 0 {
        format!("give cgperf {cap}")
    } else {
        format!("run cgperf as root or with {cap}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::Held;

    #[test]
    fn the_fix_for_unanswered_events_fits_who_asks() {
        let none = Held {
            uid: 0,
            perfmon: false,
            sys_admin: false,
        };
        assert_eq!(what_grants(Some(2), &none), "give cgperf CAP_PERFMON");
        assert_eq!(
            what_grants(Some(3), &none),
            "give cgperf CAP_SYS_ADMIN (kernel.perf_event_paranoid is 3)"
        );
        let user = Held { uid: 1000, ..none };
        assert_eq!(
            what_grants(Some(2), &user),
            "run cgperf as root or with CAP_PERFMON"
        );
        let perfmon = Held {
            perfmon: true,
            ..none
        };
        assert!(what_grants(Some(2), &perfmon).contains("seccomp"));
        assert_eq!(
            what_grants(Some(4), &perfmon),
            "give cgperf CAP_SYS_ADMIN (kernel.perf_event_paranoid is 4)"
        );
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("plain"), "\"plain\"");
        assert_eq!(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(json_string("t\tn\n\u{1}"), "\"t\\tn\\n\\u0001\"");
        assert_eq!(json_string("é"), "\"é\"");
    }

    #[test]
    fn symbolic_events_have_kinds_and_descriptions() {
        let entries = symbolic_entries();
        let find = |name: &str| {
            entries
                .iter()
                .find(|e| e.name == name)
                .unwrap_or_else(|| panic!("{name} listed"))
        };
        assert_eq!(find("cycles").kind, Kind::Hardware);
        assert_eq!(
            find("cycles").description,
            "CPU cycles (vary with frequency scaling) (also: cpu-cycles)"
        );
        assert_eq!(find("task-clock").kind, Kind::Software);
        assert_eq!(find("L1-dcache-load-misses").kind, Kind::Cache);
        assert_eq!(
            find("L1-dcache-load-misses").description,
            "L1 data cache load misses"
        );
        assert_eq!(find("LLC-stores").description, "Last-level cache stores");
        assert!(entries.iter().all(|e| !e.description.is_empty()));
    }

    #[test]
    fn lists_a_fake_sysfs_and_tracefs() {
        let dir = tempfile::tempdir().unwrap();
        let pmus = dir.path().join("pmus");
        let msr = pmus.join("msr");
        std::fs::create_dir_all(msr.join("events")).unwrap();
        std::fs::create_dir_all(msr.join("format")).unwrap();
        std::fs::write(msr.join("type"), "11\n").unwrap();
        std::fs::write(msr.join("format/event"), "config:0-63\n").unwrap();
        std::fs::write(msr.join("events/tsc"), "event=0x00\n").unwrap();
        std::fs::write(msr.join("events/tsc.unit"), "cycles\n").unwrap();
        std::fs::write(msr.join("events/need"), "event=0x1,umask=?\n").unwrap();
        std::fs::create_dir_all(pmus.join("uprobe")).unwrap();
        let power = pmus.join("power");
        std::fs::create_dir_all(power.join("events")).unwrap();
        std::fs::create_dir_all(power.join("format")).unwrap();
        std::fs::write(power.join("format/event"), "config:0-7\n").unwrap();
        std::fs::write(power.join("type"), "21\n").unwrap();
        std::fs::write(power.join("cpumask"), "0,28\n").unwrap();
        std::fs::write(power.join("events/energy-pkg"), "event=0x02\n").unwrap();
        std::fs::write(power.join("events/energy-pkg.unit"), "Joules\n").unwrap();
        let tracing = dir.path().join("tracing");
        std::fs::create_dir_all(tracing.join("events/sched/sched_switch")).unwrap();
        std::fs::write(tracing.join("events/sched/enable"), "0\n").unwrap();
        std::fs::write(tracing.join("events/header_page"), "").unwrap();

        let listing = gather(&pmus, &EventTables::none(), Ok(&Tracefs::at(&tracing)));
        assert!(listing.problems.is_empty(), "{:?}", listing.problems);
        let dynamic: Vec<(&str, Kind, &str)> = listing
            .entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::Pmu | Kind::Tracepoint))
            .map(|e| (e.name.as_str(), e.kind, e.description.as_str()))
            .collect();
        assert_eq!(
            dynamic,
            [
                (
                    "msr/need/",
                    Kind::Pmu,
                    "msr PMU: event=0x1,umask=? (write msr/need,umask=N/)"
                ),
                ("msr/tsc/", Kind::Pmu, "msr PMU: event=0x00, in cycles"),
                (
                    "power/energy-pkg/",
                    Kind::Pmu,
                    "power PMU: event=0x02, in Joules; host only: the whole machine counts \
                     it (on CPUs [0, 28]), under `host:`"
                ),
                ("sched:sched_switch", Kind::Tracepoint, ""),
            ]
        );
        assert_eq!(
            listing.formats,
            [
                PmuFormat {
                    pmu: "msr".into(),
                    terms: vec![("event".into(), "config:0-63".into())],
                },
                PmuFormat {
                    pmu: "power".into(),
                    terms: vec![("event".into(), "config:0-7".into())],
                },
            ]
        );
        assert!(listing.probes[0].starts_with("uprobe: available"));
        assert!(listing.probes[1].starts_with("kprobe: unavailable"));

        let filtered = listing.filtered("TSC");
        assert_eq!(filtered.entries.len(), 1);
        assert!(filtered.formats.is_empty() && filtered.probes.is_empty());
    }

    #[test]
    fn missing_tracefs_is_a_problem_not_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let listing = gather(
            dir.path(),
            &EventTables::none(),
            Err(&"tracefs is not mounted".to_string()),
        );
        assert_eq!(
            listing.problems,
            ["tracepoints not listed: tracefs is not mounted"]
        );
        assert!(listing.entries.iter().any(|e| e.name == "cycles"));
    }
}
