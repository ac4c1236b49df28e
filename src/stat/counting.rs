//! The printing side of `cgperf stat`: the rows it prints for the
//! snapshots the engine publishes, each `-I` interval's counts and the
//! totals at the end, perf style.

use super::StatError;
use super::child;
use super::table::{self, Counts};
use crate::config::CgroupPattern;
use crate::snapshot::Latest;
use std::io::Write;
use std::time::Instant;

/// The printing side of a run: what the rows are, and the totals of the
/// last interval printed.
pub(super) struct Counting {
    latest: Latest,
    rows: Vec<table::Row>,
    /// The metrics printed after each cgroup's counts.
    metrics: Vec<crate::metrics::MetricDef>,
    /// The config's cgroup paths and globs.
    selected: Vec<CgroupPattern>,
    /// `[None]`, or every CPU with `-A`.
    cpus: Vec<Option<u32>>,
    /// When counting began.
    pub(super) started: Instant,
    /// The totals when the last interval was printed, and when.
    last: (Counts, Instant),
    /// Whether the config shares energy (joules are printed).
    energy: bool,
}

impl Counting {
    /// Starts the clock; the sampler has collected once (so the snapshot
    /// has the plan's verdicts and the totals start from there).
    pub(super) fn new(config: &crate::config::Config, cpus: Vec<u32>, latest: Latest) -> Self {
        let snapshot = latest.get();
        let started = Instant::now();
        Self {
            rows: table::layout(config, &snapshot.support),
            metrics: config.metrics.clone(),
            selected: config.cgroups.iter().map(|s| s.pattern.clone()).collect(),
            cpus: if config.per_cpu {
                cpus.into_iter().map(Some).collect()
            } else {
                vec![None]
            },
            started,
            last: (Counts::of(&snapshot), started),
            energy: config.energy.is_some(),
            latest,
        }
    }

    /// Starts the clock of the time elapsed (and of the first interval) at
    /// `started`.
    pub(super) fn start_clock(&mut self, started: Instant) {
        self.started = started;
        self.last.1 = started;
    }

    /// The cgroups to show: those selected by path (even when nothing could
    /// be counted there), then any other that was counted (globs).
    fn cgroups(&self, counts: &Counts) -> Vec<String> {
        let mut cgroups: Vec<String> = self
            .selected
            .iter()
            .filter_map(|p| match p {
                CgroupPattern::Path(path) => Some(path.clone()),
                CgroupPattern::Match { .. } => None,
            })
            .collect();
        for counted in counts.cgroups() {
            if !cgroups.contains(&counted) {
                cgroups.push(counted);
            }
        }
        cgroups
    }

    /// Prints what was counted since the last interval, after a timestamp
    /// in seconds since the start.
    pub(super) fn interval(&mut self, out: &mut dyn Write) -> Result<(), StatError> {
        let now = Instant::now();
        let totals = Counts::of(&self.latest.get());
        let delta = totals.since(&self.last.0);
        let seconds = now.duration_since(self.last.1).as_secs_f64();
        if self.last.1 == self.started {
            writeln!(out, "#           time             counts unit events")?;
        }
        let prefix = format!("{:15.9} ", now.duration_since(self.started).as_secs_f64());
        let cgroups = self.cgroups(&delta);
        let lines = table::lines(
            (&self.rows, &self.metrics),
            &delta,
            &cgroups,
            &self.cpus,
            seconds,
        );
        table::write_lines(out, &prefix, &lines)?;
        out.flush()?;
        self.last = (totals, now);
        Ok(())
    }

    /// The totals, perf style: what was counted (`title`: the command or
    /// 'system wide'; the cgroups), the lines, the time from the start to
    /// `end` (the command's exit) and, with a command, its user and system
    /// CPU time as `wait4` gives them.
    pub(super) fn summary(
        &self,
        out: &mut dyn Write,
        title: Option<&str>,
        end: Instant,
        ended: Option<&child::Ended>,
    ) -> Result<(), StatError> {
        let elapsed = end.duration_since(self.started).as_secs_f64();
        let snapshot = self.latest.get();
        let counts = Counts::of(&snapshot);
        let targets: Vec<&str> = self.selected.iter().map(CgroupPattern::as_str).collect();
        let plural = if targets.len() == 1 { "" } else { "s" };
        let cgroups = format!("cgroup{plural} {}", targets.join(", "));
        let title = match title {
            Some(title) => format!("{title} ({cgroups})"),
            None => cgroups,
        };
        writeln!(out)?;
        writeln!(out, " Performance counter stats for {title}:")?;
        writeln!(out)?;
        let cgroups = self.cgroups(&counts);
        let mut lines = table::lines(
            (&self.rows, &self.metrics),
            &counts,
            &cgroups,
            &self.cpus,
            elapsed,
        );
        if self.energy {
            lines.extend(super::energy::lines(&snapshot, &cgroups));
        }
        table::write_lines(out, "", &lines)?;
        writeln!(out)?;
        writeln!(out, "{elapsed:18.9} seconds time elapsed")?;
        writeln!(out)?;
        if let Some(ended) = ended {
            writeln!(out, "{:18.9} seconds user", ended.user.as_secs_f64())?;
            writeln!(out, "{:18.9} seconds sys", ended.sys.as_secs_f64())?;
            writeln!(out)?;
        }
        out.flush()?;
        Ok(())
    }
}
