//! Every metric family cgperf exports, described once: name, help, unit,
//! kind, and the points a snapshot gives it (cAdvisor's families, shown
//! with `--compat=cadvisor`, are described in [`super::cadvisor`]). The
//! Prometheus exposition and the OTLP push both walk this description
//! ([`visit`]), so the two can never disagree on a name, a label or a
//! value.
//!
//! The families are kept the way the targets are: one file per target
//! (`cgroups.rs`, `host.rs`, `processes.rs`), `energy.rs` the energy
//! shares of `energy:`, what they share (`shared.rs`:
//! group times and support), cgperf's own figures (`own.rs`), and the
//! labels of a point (`labels.rs`). [`visit`] alone fixes the order they are
//! shown in.
//!
//! Figures kept outside the snapshot (the process's own, the OTLP
//! exporter's counters) reach the walk through [`SelfMetrics`]: their
//! families are described here, their values come from whoever keeps them,
//! so the catalogue imports no exporter.

mod cgroups;
mod energy;
mod host;
mod labels;
mod own;
mod processes;
mod shared;

pub use labels::{Labels, ProcessLabels, Value};
pub use own::{
    OTLP_DEFERRED, OTLP_EXPORTS, OTLP_FAILURES, OTLP_POINTS, OTLP_REJECTED, PROCESS_CPU,
    PROCESS_MAX_FDS, PROCESS_OPEN_FDS, PROCESS_RESIDENT, PROCESS_START, PROCESS_VIRTUAL,
};

use crate::snapshot::Snapshot;
use std::time::SystemTime;

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

/// Walks every family of `snap` in a stable order, then those of `others`
/// (the process's own figures, the OTLP exporter's counters when it runs).
/// The order is that of every release so far (a test compares a scrape's
/// with the one recorded): the host's tracepoint support comes after the
/// processes' families.
pub fn visit<V: Visitor>(
    snap: &Snapshot,
    others: &[&dyn SelfMetrics],
    v: &mut V,
) -> Result<(), V::Error> {
    cgroups::counts(snap, v)?;
    cgroups::times_and_support(snap, v)?;
    host::series(snap, v)?;
    processes::series(snap, v)?;
    host::event_supported(snap, v)?;
    energy::series(snap, v)?;
    own::figures(snap, v)?;
    for source in others {
        for (family, points) in source.families() {
            v.family(family, points.into_iter())?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::cgroups::{CLOCK, EVENTS, EVENTS_LOST};
    use super::own::{BUILD, COLLECTION_DURATION, OPEN_FDS};
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
