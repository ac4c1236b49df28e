//! `cgperf stat`: a `perf stat`-like terminal view on the daemon's engine.
//!
//! The flags become a [`crate::config::Config`], which goes through the same
//! plan, sampler and snapshot as the exporter's; `cgperf stat` only decides
//! when to collect (before the command starts, every `-I` interval, after it
//! exits) and prints the snapshots. So what it shows is what the exporter
//! would export for the same config, `<not supported>` groups included.

mod args;
mod child;
mod config;
mod counting;
mod energy;
mod table;

pub use args::{EventListError, StatArgs};

use crate::backend::choose::choose;
use crate::config::{CgroupPattern, Config, ConfigError, MetricDef};
use crate::discovery::{CgroupFs, Discovery};
use crate::engine::{Engine, FdBudget, raise_nofile_limit};
use crate::machine::{CpuTables, Discovered, Machine};
use crate::metrics::Catalog;
use crate::snapshot::Latest;
use child::{FreshCgroup, Signals, Wake};
use counting::Counting;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

/// How often the cgroup tree is rescanned without inotify events; matters
/// only for `match:` globs of a `--config.file`.
const RESCAN: Duration = Duration::from_secs(30);

/// Why `cgperf stat` could not count; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StatError {
    /// Bad `-e`.
    #[error(transparent)]
    Events(#[from] EventListError),
    /// `--config.file` does not load.
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    /// `-e` and `--config.file` together.
    #[error(
        "-e and --config.file cannot be combined: give the events either with -e or in the \
         config's `groups:` and `tracepoints:`"
    )]
    EventsAndConfig,
    /// A `-M` name that is no metric: each mistake as `-M ARGUMENT, column
    /// N: what`, then how to fix it.
    #[error("{0}")]
    Metric(String),
    /// A `-G` that is not a cgroup path.
    #[error("-G {given}: {message}; {hint}")]
    BadCgroup {
        /// The value as given.
        given: String,
        /// What is wrong.
        message: String,
        /// How to write it.
        hint: String,
    },
    /// A `-G` cgroup that does not exist.
    #[error("-G {given}: no such cgroup ({} does not exist); create it first or pick one under {}", .dir.display(), .root.display())]
    NoCgroup {
        /// The value as given.
        given: String,
        /// The directory looked for.
        dir: PathBuf,
        /// The cgroup2 root.
        root: PathBuf,
    },
    /// cgroup2, CPUs or the like not found.
    #[error("{0:#}")]
    Machine(anyhow::Error),
    /// The command's cgroup could not be made.
    #[error("cannot create cgroup {}: {source}; {}", .dir.display(), create_hint(.source))]
    CreateCgroup {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The command did not start.
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        source: io::Error,
    },
    /// Blocking or waiting for signals failed.
    #[error("cannot wait for the command or for Ctrl-C: {0}")]
    Signals(io::Error),
    /// stdout failed.
    #[error("cannot write the counts: {0}")]
    Output(#[from] io::Error),
}

/// What to do when the command's cgroup cannot be made: only a refusal
/// is about permissions.
fn create_hint(source: &io::Error) -> &'static str {
    match source.kind() {
        io::ErrorKind::PermissionDenied => {
            "counting a command in its own cgroup needs root (or write access to the cgroup2 \
             root); or count existing cgroups with -G"
        }
        _ => "count existing cgroups with -G, or the whole machine with -a",
    }
}

impl StatError {
    /// 1 for what the user wrote (flags, events, config), 2 for what
    /// failed while setting up or running.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Events(_)
            | Self::Config(_)
            | Self::EventsAndConfig
            | Self::Metric(_)
            | Self::BadCgroup { .. }
            | Self::NoCgroup { .. } => 1,
            Self::Machine(_)
            | Self::CreateCgroup { .. }
            | Self::Spawn { .. }
            | Self::Signals(_)
            | Self::Output(_) => 2,
        }
    }
}

/// Runs `cgperf stat`; `config_file` and `event_tables` are the global
/// `--config.file` and `--event-tables`. The exit
/// status is the command's (see [`StatArgs`]); when a signal ended the run,
/// cgperf stat dies of that signal once it has printed and cleaned up.
pub fn run(args: &StatArgs, config_file: Option<&Path>, event_tables: Option<&Path>) -> ExitCode {
    match stat(args, config_file, event_tables) {
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        Ok(Outcome::Signal(signal)) => {
            child::die_of(signal);
            ExitCode::from(child::signal_status(signal))
        }
        Err(e) => {
            eprintln!("cgperf stat: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// How a run ends.
enum Outcome {
    /// With this status.
    Exit(u8),
    /// By this signal (SIGINT, SIGTERM or SIGHUP), as perf stat does.
    Signal(libc::c_int),
}

/// Sets up, counts until the command exits (or a signal stops it), prints;
/// returns how to end.
fn stat(
    args: &StatArgs,
    config_file: Option<&Path>,
    event_tables: Option<&Path>,
) -> Result<Outcome, StatError> {
    // Before anything needs cleaning up: a stop signal now waits for the
    // counts and the clean-up.
    let signals = Signals::block().map_err(StatError::Signals)?;
    let Setup {
        config,
        cgroupfs,
        cpus,
        machine,
        fresh,
    } = setup(args, config_file, event_tables)?;
    let latest = Latest::new();
    let discovery = Discovery::new(cgroupfs, RESCAN);
    let budget = FdBudget::from_limit(raise_nofile_limit());
    let mut chosen =
        choose(config.backend, config.max_cgroups).map_err(|e| StatError::Machine(e.into()))?;
    let (plan, _) = chosen.plan(&config, &machine).map_err(|e| {
        e.downcast::<ConfigError>()
            .map_or_else(StatError::Machine, StatError::Config)
    })?;
    let opened = chosen
        .open(&config, &plan, budget)
        .map_err(|e| StatError::Machine(e.into()))?;
    let mut sampler = Engine::new(plan, discovery, opened, latest.clone(), None);
    sampler.collect(); // Opens every group: counting starts here.
    let mut counting = Counting::new(&config, cpus, latest);
    let child = match start_command(&args.command, fresh.as_ref())? {
        Some((child, started)) => {
            // The time elapsed is the command's own, without the fork and
            // the move into its cgroup.
            counting.start_clock(started);
            Some(child)
        }
        None => None,
    };
    let mut out = io::stdout().lock();
    let running = Running {
        child: child.as_ref(),
        fresh: fresh.as_ref(),
    };
    let ending = count(
        &signals,
        &mut sampler,
        &mut counting,
        &mut out,
        args,
        &running,
    );
    let (outcome, ended) = match ending {
        Ok(ending) => ending,
        Err(e) => {
            // Nothing is printed any more: end the command rather than leave
            // it running in a cgroup that cannot be removed.
            if let Some(child) = &child {
                end_command(child, fresh.as_ref(), libc::SIGKILL);
                // Reaped, so that its cgroup can go.
                let _ = signals.wait(None, Some(child));
            }
            return Err(e);
        }
    };
    sampler.collect();
    if args.interval_ms.is_some() {
        counting.interval(&mut out)?;
    }
    let title = if args.all_cpus && args.cgroups.is_empty() {
        Some("'system wide'".to_string())
    } else {
        (!args.command.is_empty()).then(|| format!("'{}'", command_line(&args.command)))
    };
    let end = ended.as_ref().map_or_else(Instant::now, |e| e.at);
    counting.summary(&mut out, title.as_deref(), end, ended.as_ref())?;
    // Close the counters before the cgroup they count goes.
    drop(sampler);
    drop(fresh);
    Ok(outcome)
}

/// Counts (printing every `-I` interval) until the command exits, or until
/// a stop signal ends a run without a command. With a command, a stop
/// signal (kill, systemd, a shell whose session was dropped) is passed on
/// to the command's cgroup (to the command alone with `-G` or `-a`), and a
/// second one kills what is left with SIGKILL; a Ctrl-C from the terminal
/// has reached the command already. Returns how to end
/// and, with a command, how it ended.
fn count(
    signals: &Signals,
    sampler: &mut Engine,
    counting: &mut Counting,
    out: &mut dyn Write,
    args: &StatArgs,
    running: &Running,
) -> Result<(Outcome, Option<child::Ended>), StatError> {
    let child = running.child;
    let interval = args.interval_ms.map(Duration::from_millis);
    let mut next = interval.map(|i| counting.started + i);
    let mut stopped_by = None;
    loop {
        match signals.wait(next, child).map_err(StatError::Signals)? {
            Wake::Deadline => {
                sampler.collect();
                counting.interval(out)?;
                next = next.zip(interval).map(|(n, i)| n + i);
            }
            Wake::Exited(ended) => {
                let outcome = match stopped_by {
                    Some(signal) => Outcome::Signal(signal),
                    None => Outcome::Exit(child::exit_code(ended.status)),
                };
                return Ok((outcome, Some(ended)));
            }
            Wake::Stop { signal, .. } if child.is_none() => {
                return Ok((Outcome::Signal(signal), None));
            }
            Wake::Stop {
                from_terminal: true,
                ..
            } => {}
            Wake::Stop { signal, .. } => {
                let again = stopped_by.replace(signal).is_some();
                if let Some(child) = child {
                    let signal = if again { libc::SIGKILL } else { signal };
                    end_command(child, running.fresh, signal);
                }
            }
        }
    }
}

/// The command being counted, if any, and its own cgroup, if it has one.
struct Running<'a> {
    child: Option<&'a Child>,
    fresh: Option<&'a FreshCgroup>,
}

/// Sends `signal` to everything in the command's own cgroup `fresh`, or to
/// the command alone when it has none.
fn end_command(child: &Child, fresh: Option<&FreshCgroup>, signal: libc::c_int) {
    let sent = fresh.map(|f| f.signal_all(signal));
    if !matches!(sent, Some(Ok(()))) {
        child::signal_command(child, signal);
    }
}

/// What counting needs, found and checked before anything starts.
struct Setup {
    config: crate::config::Config,
    cgroupfs: CgroupFs,
    cpus: Vec<u32>,
    machine: Machine,
    /// The command's own cgroup, if it gets one.
    fresh: Option<FreshCgroup>,
}

/// Checks the flags against this machine and builds the config: the -G
/// cgroups, else the command's fresh cgroup, else the config file's
/// cgroups, else `/`.
fn setup(
    args: &StatArgs,
    config_file: Option<&Path>,
    event_tables: Option<&Path>,
) -> Result<Setup, StatError> {
    if config_file.is_some() && !args.events.is_empty() {
        return Err(StatError::EventsAndConfig);
    }
    let patterns = args
        .cgroups
        .iter()
        .map(|given| cgroup_pattern(given))
        .collect::<Result<Vec<_>, _>>()?;
    let Discovered {
        cgroupfs,
        cpus,
        machine,
    } = CpuTables::read(event_tables)
        .and_then(Machine::discover)
        .map_err(StatError::Machine)?;
    // Under the deadline start-up and `cgperf check` read theirs with: a
    // file system that does not answer fails the run, naming the file.
    let file = config_file
        .map(|path| {
            let owned = path.to_path_buf();
            let catalog = machine.metrics.clone();
            crate::deadline::load(path, move || crate::config::load(&owned, &catalog))
        })
        .transpose()?;
    for (given, pattern) in args.cgroups.iter().zip(&patterns) {
        let dir = cgroupfs.dir(pattern.as_str());
        if !dir.is_dir() {
            let root = cgroupfs.root().to_path_buf();
            let given = given.clone();
            return Err(StatError::NoCgroup { given, dir, root });
        }
    }
    let selection = args::select(&args.events, machine.tracefs.as_ref())?;
    let fresh = if !args.command.is_empty() && patterns.is_empty() && !args.all_cpus {
        Some(FreshCgroup::create(cgroupfs.root())?)
    } else {
        None
    };
    let targets = match &fresh {
        Some(fresh) => vec![CgroupPattern::Path(fresh.rel.clone())],
        None if patterns.is_empty() && (file.is_none() || args.all_cpus) => {
            vec![CgroupPattern::Path("/".into())]
        }
        None => patterns,
    };
    let mut config = config::build(file, selection, &targets, args.per_cpu, args.energy);
    if !args.metrics.is_empty() {
        pick_metrics(&mut config, &args.metrics, &machine.metrics)?;
    }
    Ok(Setup {
        config,
        cgroupfs,
        cpus,
        machine,
        fresh,
    })
}

/// Makes `config` compute the metrics `-M` names, in the order given: the
/// config's own (by name, or by the group of the tables it came from), else
/// those of this CPU's tables (`IPC`, `TopdownL1`), which are scheduled as
/// a config's `metrics:` would schedule them, into every cgroup counted.
fn pick_metrics(config: &mut Config, given: &[String], catalog: &Catalog) -> Result<(), StatError> {
    let mut picked: Vec<MetricDef> = Vec::new();
    // Each name the config does not define, with its argument and where it
    // starts there (in characters).
    let mut named: Vec<(&str, &str, usize)> = Vec::new();
    for argument in given {
        let mut column = 0;
        for name in argument.split(',') {
            let defs: Vec<&MetricDef> = config
                .metrics
                .iter()
                .filter(|m| m.name == name || m.entry == name)
                .collect();
            if defs.is_empty() {
                named.push((name, argument, column));
            }
            for def in defs {
                if !picked.iter().any(|p| p.name == def.name) {
                    picked.push(def.clone());
                }
            }
            column += name.chars().count() + 1;
        }
    }
    if !named.is_empty() {
        // The names as JSON strings (YAML scalars whatever they hold), and
        // the column each starts at in the one line of YAML.
        let mut yaml = "metrics: [".to_owned();
        let mut starts = Vec::with_capacity(named.len());
        for (i, (name, _, _)) in named.iter().enumerate() {
            if i > 0 {
                yaml.push_str(", ");
            }
            starts.push(yaml.chars().count() + 1);
            yaml.push_str(&serde_json::Value::String((*name).to_owned()).to_string());
        }
        yaml.push_str("]\n");
        let scheduled = crate::config::parse_for("-M", &yaml, catalog).map_err(|e| {
            let names: Vec<&str> = config.metrics.iter().map(|m| m.name.as_str()).collect();
            let close = named
                .iter()
                .find_map(|(n, _, _)| crate::suggest::did_you_mean(n, names.iter().copied()));
            let mut lines = Vec::new();
            for mistake in std::iter::once(&e).chain(&e.others) {
                // The name the mistake's column falls in (past the quote
                // its JSON form opens with), and the column in its argument.
                let column = mistake.column.map_or(0, |c| c as usize);
                let i = starts.iter().rposition(|&s| s <= column).unwrap_or(0);
                let (_, argument, start) = named[i];
                let within = start + column.saturating_sub(starts[i] + 1) + 1;
                let mut line = format!("-M {argument:?}, column {within}: {}", mistake.message);
                if let Some(close) = close.as_ref().filter(|_| lines.is_empty()) {
                    line.push_str(&format!("; the config has `{close}`"));
                }
                if let Some(hint) = &mistake.hint {
                    line.push_str(&format!("\n  hint: {hint}"));
                }
                lines.push(line);
            }
            StatError::Metric(lines.join("\n"))
        })?;
        for group in scheduled.groups {
            if !config.groups.iter().any(|g| g.name == group.name) {
                for selector in &mut config.cgroups {
                    selector.groups.push(group.name.clone());
                }
                config.groups.push(group);
            }
        }
        for tracepoint in scheduled.tracepoints {
            if !config
                .tracepoints
                .iter()
                .any(|t| t.label == tracepoint.label)
            {
                for selector in &mut config.cgroups {
                    selector.tracepoints.push(tracepoint.label.clone());
                }
                config.tracepoints.push(tracepoint);
            }
        }
        for def in scheduled.metrics {
            if !picked.iter().any(|p| p.name == def.name) {
                for selector in &mut config.cgroups {
                    selector.metrics.push(def.name.clone());
                }
                picked.push(def);
            }
        }
    }
    config.metrics = picked;
    Ok(())
}

/// Starts the command, if there is one, in its fresh cgroup if it has one;
/// returns it and when it started (see [`child::spawn`]).
fn start_command(
    command: &[OsString],
    fresh: Option<&FreshCgroup>,
) -> Result<Option<(Child, Instant)>, StatError> {
    if command.is_empty() {
        return Ok(None);
    }
    let started =
        child::spawn(command, fresh.map(FreshCgroup::dir)).map_err(|source| StatError::Spawn {
            command: command_line(command),
            source,
        })?;
    Ok(Some(started))
}

/// A `-G` value as a cgroup path; perf's relative form (`system.slice`) is
/// taken as relative to the root.
fn cgroup_pattern(given: &str) -> Result<CgroupPattern, StatError> {
    let absolute = if given.starts_with('/') {
        given.to_string()
    } else {
        format!("/{given}")
    };
    CgroupPattern::exact(&absolute).map_err(|e| StatError::BadCgroup {
        given: given.to_string(),
        message: e.message,
        hint: e.hint,
    })
}

/// The command as a shell would show it (lossy for non-UTF-8 arguments).
fn command_line(command: &[OsString]) -> String {
    let words: Vec<_> = command.iter().map(|w| w.to_string_lossy()).collect();
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_flags_take_perfs_relative_form() {
        let as_str = |g: &str| cgroup_pattern(g).map(|p| p.as_str().to_string());
        assert_eq!(as_str("system.slice").unwrap(), "/system.slice");
        assert_eq!(as_str("/a//b/").unwrap(), "/a/b");
        assert_eq!(as_str("/").unwrap(), "/");
        let err = as_str("/a/../b").unwrap_err();
        assert_eq!(err.exit_code(), 1);
        assert!(err.to_string().starts_with("-G /a/../b: the path"), "{err}");
    }
}
