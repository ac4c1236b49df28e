//! `cgperf list`: the events this machine offers, named as cgperf's config
//! (and `perf`) writes them: generalized hardware, software and cache events,
//! the CPU's own events from the event tables of its model, the dynamic PMU
//! events of sysfs, and the tracepoints of tracefs.
//!
//! Every name listed is one that [`parse_event`] or [`crate::events::parse_tracepoint`]
//! accepts, so any line can be copied into a config or `cgperf stat -e`.
//! Listing only reads sysfs and tracefs; tracefs usually needs root, and
//! without it the tracepoints are left out with a note on stderr.

mod sources;
mod table;

pub use table::{NAME_MAX, column_width};

use crate::backend::cgroup::CgroupProbe;
use crate::backend::choose::choose;
use crate::config::BackendChoice;
use crate::events::{self, EventTables, parse_event};
use crate::tracefs::Tracefs;
use sources::{
    metric_entries, pmu_dirs, pmu_entries, pmu_format, probe_support, symbolic_entries,
    tracepoint_entries, vendor_entries,
};
use std::io::{self, Write};
use std::path::Path;
use table::{write_json, write_table};

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
