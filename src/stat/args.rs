//! The flags of `cgperf stat` and the event lists of `-e`, split into
//! counter groups and tracepoints.

use crate::config::GroupDef;
use crate::events::{EventSyntaxError, TracepointName, parse_event, parse_tracepoint};
use crate::tracefs::Tracefs;
use clap::builder::TypedValueParser as _;
use std::ffi::OsString;

/// Events counted when no `-e` is given, as `perf stat` does: one group of
/// software events and one of hardware events, so that a machine without a
/// PMU still counts the first.
const DEFAULT_EVENTS: [&str; 2] = [
    "task-clock,context-switches,cpu-migrations,page-faults",
    "cycles,instructions",
];

/// Count events for a command or cgroups and print them, like `perf stat`.
#[derive(Debug, Clone, clap::Args)]
#[command(
    long_about = "Count events for a command or for cgroups and print them, like `perf stat -G`.\n\n\
With `-- COMMAND`, cgperf creates the cgroup /cgperf-stat-<pid> under the cgroup2 root \
(/cgperf-stat-<pid>-2, ... if that name is taken), starts COMMAND in it (before it runs a \
single instruction), counts that cgroup until COMMAND exits, then removes the cgroup; it \
also removes empty cgroups left behind by runs that were killed. With -G, the given \
cgroups are counted instead (while COMMAND runs, if there is one); with -a, the root \
cgroup `/` (the whole machine). With none of these, `/` is counted until Ctrl-C; with \
--config.file, the config's cgroups are.\n\n\
EVENTS are perf's names (see `cgperf list`), separated by commas. The events of one -e \
that are not tracepoints form one group, scheduled together; a `subsystem:name` that \
exists in tracefs is counted as a tracepoint. Without -e (and without --config.file): \
task-clock, context-switches, cpu-migrations, page-faults, and, as a second group, \
cycles and instructions. --config.file counts that config's groups and tracepoints; a \
tracepoint counted `by:` fields shows, under its total, one line per value combination \
(e.g. `calls{id=110,syscall=getppid}`), most counted first.\n\n\
The counts go to stdout: value (msec for task-clock and cpu-clock), event, cgroup, a \
rate after `#` (CPUs utilized for clocks, insn per cycle, else per second of task-clock, \
as perf prints them), and, when the kernel had to multiplex the group, the share of the time \
it was counting, e.g. (50.00%); the values are scaled up for that time. \
<not supported>: this machine cannot count the event (the reason is logged on stderr). \
<not counted>: the event never ran in the cgroup. With -I, each interval's counts are \
printed as they come, after a timestamp, and the totals at the end. Then the time \
elapsed and, with COMMAND, its user and system CPU time.\n\n\
While COMMAND runs, Ctrl-C goes to COMMAND from the terminal, and cgperf prints when it \
exits. SIGINT, SIGTERM or SIGHUP sent to cgperf (kill, a dropped ssh session) is passed \
on to every process in COMMAND's cgroup (to COMMAND alone with -G or -a); a second one \
kills them with SIGKILL. If cgperf itself is killed, COMMAND gets SIGKILL.",
    after_help = "Exit status: COMMAND's exit status (128+N if a signal N killed it); when \
cgperf is stopped by signal N (SIGINT, SIGTERM, SIGHUP sent to it, or Ctrl-C without \
COMMAND), it prints, cleans up and dies of N (a shell shows 128+N), as perf stat does; 1 \
for invalid flags, events or config; 2 when counting cannot be set up (cgroup not \
created, command not started, no cgroup2).\n\n\
Examples:\n  cgperf stat -- make -j2\n  cgperf stat -e cycles,instructions -e sched:sched_switch -G \
/system.slice -I 1000\n  cgperf stat -A -e syscalls:sys_enter_openat -- ls\n  cgperf stat -a -- sleep 5"
)]
pub struct StatArgs {
    /// Events to count, comma-separated; repeatable (each -e is one group).
    #[arg(short = 'e', long = "event", value_name = "EVENTS")]
    pub events: Vec<String>,

    /// cgroup to count, relative to the cgroup2 root (e.g. /system.slice or
    /// system.slice); repeatable.
    // Taken as bytes and escaped as discovery names cgroups, so that one
    // whose name is not UTF-8 can be given raw (or as its escaped path).
    #[arg(
        short = 'G',
        long = "cgroup",
        value_name = "CGROUP",
        value_parser = clap::builder::OsStringValueParser::new()
            .map(|given| crate::escape::escape(given.as_encoded_bytes()))
    )]
    pub cgroups: Vec<String>,

    /// Also print the counts of every interval of MS milliseconds (10 to
    /// 3600000, an hour).
    #[arg(
        short = 'I',
        long = "interval-print",
        value_name = "MS",
        value_parser = clap::value_parser!(u64).range(10..=3_600_000)
    )]
    pub interval_ms: Option<u64>,

    /// Metrics to print beside the counts, comma-separated; repeatable.
    /// They are those of --config.file's `metrics:` (all of them without
    /// -M), computed over the run and over each -I interval.
    /// Each kept as given (split where it is used), so that a mistake can
    /// say which argument it is in and where.
    #[arg(short = 'M', long = "metrics", value_name = "METRICS")]
    pub metrics: Vec<String>,

    /// System-wide: count the root cgroup `/` (the whole machine), while
    /// COMMAND runs if there is one (it gets no cgroup of its own).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// One line per CPU instead of the sum over CPUs.
    #[arg(short = 'A', long = "per-cpu", alias = "no-aggr")]
    pub per_cpu: bool,

    /// Also print the joules of each cgroup counted (the command's): its
    /// share of each socket's energy by the exporter's method (see
    /// docs/energy.md), from the first meter this machine has. With a
    /// --config.file that has `energy:` (a model, where there is no
    /// meter), that is used, and printed without this flag too.
    #[arg(long = "energy")]
    pub energy: bool,

    /// The command to run and count, with its arguments (after `--`).
    // An option before the command is cgperf's, and one it does not know
    // is an error (as perf's), never a command: `--` or the command's name
    // ends cgperf's options.
    #[arg(value_name = "COMMAND", trailing_var_arg = true)]
    pub command: Vec<OsString>,
}

/// Why the events of `-e` cannot be counted; the message says what to write.
#[derive(Debug, thiserror::Error)]
pub enum EventListError {
    /// An item is neither an event nor an existing tracepoint.
    #[error("-e {list}: {source}")]
    Syntax {
        /// The `-e` value.
        list: String,
        /// What is wrong with the item.
        source: EventSyntaxError,
    },
    /// `subsystem:name` that tracefs does not have.
    #[error("-e {list}: {reason}")]
    UnknownTracepoint {
        /// The `-e` value.
        list: String,
        /// Why it is unknown, e.g. the directory that does not exist, with
        /// the closest name and where to list them.
        reason: String,
    },
    /// An empty item, e.g. `cycles,,instructions`.
    #[error("-e {0}: empty event (a stray `,`); separate events with single commas")]
    Empty(String),
    /// The same event twice in one `-e`.
    #[error("-e {list}: `{event}` is given twice; give each event once")]
    Duplicate {
        /// The `-e` value.
        list: String,
        /// The repeated event.
        event: String,
    },
}

/// What the `-e` flags ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// One group per `-e` that names counter events, named `group1`, ...
    /// (`software` and `hardware` for the defaults).
    pub groups: Vec<GroupDef>,
    /// Every tracepoint, in order, without repeats.
    pub tracepoints: Vec<TracepointName>,
}

/// Splits and classifies the `-e` values (the defaults if there are none)
/// against `tracefs`.
pub fn select(
    lists: &[String],
    tracefs: Result<&Tracefs, &String>,
) -> Result<Selection, EventListError> {
    let defaults = lists.is_empty();
    let lists: Vec<String> = if defaults {
        DEFAULT_EVENTS.map(String::from).to_vec()
    } else {
        lists.to_vec()
    };
    let mut selection = Selection {
        groups: Vec::new(),
        tracepoints: Vec::new(),
    };
    for (i, list) in lists.iter().enumerate() {
        let mut events = Vec::new();
        for item in split(list) {
            if item.is_empty() {
                return Err(EventListError::Empty(list.clone()));
            }
            match classify(list, item, tracefs)? {
                Item::Tracepoint(tp) => {
                    if !selection.tracepoints.contains(&tp) {
                        selection.tracepoints.push(tp);
                    }
                }
                Item::Event(event) => {
                    if events.contains(&event) {
                        return Err(EventListError::Duplicate {
                            list: list.clone(),
                            event: event.text,
                        });
                    }
                    events.push(event);
                }
            }
        }
        if events.is_empty() {
            continue;
        }
        let name = match (defaults, i) {
            (true, 0) => "software".to_string(),
            (true, _) => "hardware".to_string(),
            (false, _) => format!("group{}", selection.groups.len() + 1),
        };
        selection.groups.push(GroupDef {
            name,
            events,
            splittable: false,
            origin: None,
        });
    }
    Ok(selection)
}

/// One item of an `-e` list.
enum Item {
    Event(crate::events::Event),
    Tracepoint(TracepointName),
}

/// A tracepoint if it has tracefs's `subsystem:name` form and tracefs has it
/// (so `cycles:u` stays an event with a modifier), else a counter event.
fn classify(
    list: &str,
    item: &str,
    tracefs: Result<&Tracefs, &String>,
) -> Result<Item, EventListError> {
    let tracepoint = parse_tracepoint(item).ok();
    if let (Some(tp), Ok(tracefs)) = (&tracepoint, tracefs)
        && tracefs.has(tp)
    {
        return Ok(Item::Tracepoint(tp.clone()));
    }
    match (parse_event(item), tracepoint) {
        (Ok(event), _) => Ok(Item::Event(event)),
        // Not an event but shaped like a tracepoint: say why it is not one.
        (Err(_), Some(tp)) => Err(EventListError::UnknownTracepoint {
            list: list.to_string(),
            reason: match tracefs {
                Ok(tracefs) => tracefs
                    .tracepoint_id(&tp)
                    .err()
                    .unwrap_or_else(|| format!("unknown tracepoint `{tp}`")),
                Err(why) => format!("tracepoint `{tp}` needs tracefs: {why}"),
            },
        }),
        (Err(source), None) => Err(EventListError::Syntax {
            list: list.to_string(),
            source,
        }),
    }
}

/// Splits an `-e` value at the commas that separate events: a comma between
/// the slashes of `pmu/term=v,term=v/` belongs to the event.
fn split(list: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut start, mut in_pmu) = (0, false);
    for (i, c) in list.char_indices() {
        match c {
            '/' => in_pmu = !in_pmu,
            ',' if !in_pmu => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_tracefs() -> (tempfile::TempDir, Tracefs) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("events/sched/sched_switch")).unwrap();
        let tracefs = Tracefs::at(dir.path());
        (dir, tracefs)
    }

    fn names(selection: &Selection) -> (Vec<(String, Vec<String>)>, Vec<String>) {
        let groups = selection
            .groups
            .iter()
            .map(|g| {
                let events = g.events.iter().map(|e| e.text.clone()).collect();
                (g.name.clone(), events)
            })
            .collect();
        let tps = selection
            .tracepoints
            .iter()
            .map(|t| t.to_string())
            .collect();
        (groups, tps)
    }

    #[test]
    fn splits_at_commas_outside_pmu_terms() {
        assert_eq!(
            split("cycles,cpu/event=0x3c,umask=0x0/u,msr/tsc/,instructions:u"),
            [
                "cycles",
                "cpu/event=0x3c,umask=0x0/u",
                "msr/tsc/",
                "instructions:u"
            ]
        );
        assert_eq!(split("a,,b"), ["a", "", "b"]);
    }

    #[test]
    fn tracepoints_and_events_are_told_apart() {
        let (_dir, tracefs) = fake_tracefs();
        let lists = [
            "cycles:u,sched:sched_switch,instructions".to_string(),
            "task-clock".into(),
        ];
        let selection = select(&lists, Ok(&tracefs)).unwrap();
        assert_eq!(
            names(&selection),
            (
                vec![
                    (
                        "group1".into(),
                        vec!["cycles:u".into(), "instructions".into()]
                    ),
                    ("group2".into(), vec!["task-clock".into()]),
                ],
                vec!["sched:sched_switch".into()]
            )
        );
    }

    #[test]
    fn defaults_are_a_software_and_a_hardware_group() {
        let (_dir, tracefs) = fake_tracefs();
        let selection = select(&[], Ok(&tracefs)).unwrap();
        let (groups, tps) = names(&selection);
        assert_eq!(groups[0].0, "software");
        assert_eq!(groups[0].1[0], "task-clock");
        assert_eq!(
            groups[1],
            (
                "hardware".into(),
                vec!["cycles".into(), "instructions".into()]
            )
        );
        assert!(tps.is_empty());
    }

    #[test]
    fn bad_items_say_what_is_wrong() {
        let (_dir, tracefs) = fake_tracefs();
        let err = |list: &str| {
            select(&[list.to_string()], Ok(&tracefs))
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("cycels").contains("unknown event `cycels`; did you mean `cycles`?"),
            "{}",
            err("cycels")
        );
        let unknown = err("sched:nope");
        assert!(
            unknown.starts_with("-e sched:nope: unknown tracepoint `sched:nope`"),
            "{unknown}"
        );
        // Where to look, without repeating the typo.
        assert!(
            unknown.ends_with("(list those of `sched` with `cgperf list sched:`)"),
            "{unknown}"
        );
        assert_eq!(unknown.matches("nope").count(), 3, "{unknown}");
        assert_eq!(
            err("cycles,,instructions"),
            "-e cycles,,instructions: empty event (a stray `,`); separate events with single commas"
        );
        assert_eq!(
            err("cycles,cycles"),
            "-e cycles,cycles: `cycles` is given twice; give each event once"
        );
        let no_tracefs = select(&["sched:sched_switch".into()], Err(&"not mounted".into()))
            .unwrap_err()
            .to_string();
        assert!(
            no_tracefs.contains("tracepoint `sched:sched_switch` needs tracefs: not mounted"),
            "{no_tracefs}"
        );
    }
}
