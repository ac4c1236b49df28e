//! Prometheus exposition of a snapshot: OpenMetrics text through the official
//! `prometheus-client` crate, and the classic text format 0.0.4 derived from
//! it for scrapers that do not ask for OpenMetrics.

use super::cadvisor::{self, Compat};
use super::families::{self, Family, Kind, Labels, Point, SelfMetrics, Value, Visitor};
use super::process::Process;
use crate::snapshot::Latest;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, LabelSetEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Renders snapshots as `/metrics` bodies.
#[derive(Debug)]
pub struct Exposition {
    registry: Registry,
    /// The length of the last body: the next one is about as long, and is
    /// written into room of that size rather than grown by doubling (with
    /// thousands of cgroups a body is megabytes).
    last_len: AtomicUsize,
}

impl Exposition {
    /// An exposition of whatever `latest` holds at scrape time, and of the
    /// process's own figures.
    pub fn new(latest: Latest) -> Self {
        Self::with_self_metrics(latest, Vec::new(), &[])
    }

    /// Also shows the figures of `others` (the OTLP exporter's counters),
    /// read at scrape time, after the process's own, and then the families
    /// of the other exporters in `compat`.
    pub fn with_self_metrics(
        latest: Latest,
        others: Vec<Arc<dyn SelfMetrics>>,
        compat: &[Compat],
    ) -> Self {
        let mut sources: Vec<Arc<dyn SelfMetrics>> = vec![Arc::new(Process)];
        sources.extend(others);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SnapshotCollector {
            latest,
            sources,
            cadvisor: compat.contains(&Compat::Cadvisor),
        }));
        Self {
            registry,
            last_len: AtomicUsize::new(0),
        }
    }

    /// OpenMetrics text, terminated by `# EOF`.
    pub fn openmetrics(&self) -> Result<String, Error> {
        let mut out = String::with_capacity(self.last_len.load(Ordering::Relaxed) * 9 / 8);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        self.last_len.store(out.len(), Ordering::Relaxed);
        Ok(out)
    }

    /// Prometheus text format 0.0.4.
    pub fn prometheus_text(&self) -> Result<String, Error> {
        Ok(openmetrics_to_text(&self.openmetrics()?))
    }
}

/// Encodes the snapshot current at scrape time.
#[derive(Debug)]
struct SnapshotCollector {
    latest: Latest,
    /// Figures outside the snapshot, the process's own first.
    sources: Vec<Arc<dyn SelfMetrics>>,
    /// Whether cAdvisor's perf families are shown too.
    cadvisor: bool,
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), Error> {
        let snap = self.latest.get();
        let sources: Vec<&dyn SelfMetrics> = self.sources.iter().map(|s| &**s).collect();
        families::visit(&snap, &sources, &mut Encoder(&mut encoder))?;
        if self.cadvisor {
            cadvisor::visit(&snap, &mut Encoder(&mut encoder))?;
        }
        Ok(())
    }
}

impl EncodeLabelSet for Labels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), Error> {
        self.for_each(|name, value| match value {
            Value::Str(v) => (name, v).encode(encoder.encode_label()),
            Value::Number(cpu) => (name, cpu).encode(encoder.encode_label()),
        })
    }
}

/// Writes each family through `prometheus-client`, without allocating
/// per series.
struct Encoder<'a, 'b>(&'a mut DescriptorEncoder<'b>);

impl Visitor for Encoder<'_, '_> {
    type Error = Error;

    fn family<'p>(
        &mut self,
        family: &Family,
        points: impl Iterator<Item = Point<'p>>,
    ) -> Result<(), Error> {
        let (kind, unit) = (
            match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Info => MetricType::Info,
            },
            match family.unit {
                families::Unit::Seconds => Some(&Unit::Seconds),
                families::Unit::Joules => Some(&Unit::Joules),
                families::Unit::Bytes | families::Unit::Count(_) => None,
            },
        );
        let mut descriptor = self
            .0
            .encode_descriptor(family.name, family.help, unit, kind)?;
        for point in points {
            if family.kind == Kind::Info {
                descriptor.encode_info(&point.labels)?;
                continue;
            }
            // `encode_family` would write `{}` for a point without labels.
            if point.labels.is_empty() {
                write_value(&mut descriptor, family.kind, point.value)?;
            } else {
                write_value(
                    &mut descriptor.encode_family(&point.labels)?,
                    family.kind,
                    point.value,
                )?;
            }
        }
        Ok(())
    }
}

/// Writes one sample's value.
fn write_value(metric: &mut MetricEncoder<'_>, kind: Kind, value: f64) -> Result<(), Error> {
    match kind {
        Kind::Counter => metric.encode_counter::<NoLabelSet, _, u64>(&value, None),
        _ => metric.encode_gauge(&value),
    }
}

/// Rewrites OpenMetrics text as Prometheus text format 0.0.4.
///
/// The two formats differ only in metadata: OpenMetrics names a counter
/// family without `_total` and an info family without `_info`, has `# UNIT`
/// lines and ends with `# EOF`; the samples are identical. `prometheus-client`
/// writes only OpenMetrics, so cgperf derives the classic format from it
/// rather than keeping a second encoder of every family.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (suffix, kind) = match kind {
                "counter" => ("_total", "counter"),
                "info" => ("_info", "gauge"),
                other => ("", other),
            };
            if let Some(help) = help.take() {
                let text = help.strip_prefix(name).unwrap_or(help);
                out.push_str(&format!("# HELP {name}{suffix}{text}\n"));
            }
            out.push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
        } else if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{
        CounterSample, ErrorReason, GroupTimeSample, Operation, SeriesKey, Snapshot, Support,
    };
    use std::sync::Arc;

    fn sample_snapshot() -> Snapshot {
        let mut snap = Snapshot::empty();
        let cg: Arc<str> = "/system.slice/a b\"c.service".into();
        let switches = SeriesKey {
            fields: Box::new([]),
            cgroup: cg.clone(),
            labels: Arc::from(vec![("unit", Box::from("a.service"))]),
            group: "sched".into(),
            event: "context-switches".into(),
            cpu: None,
            clock: false,
            start_time: snap.taken_at,
        };
        let clock = SeriesKey {
            event: "task-clock".into(),
            cpu: Some(1),
            clock: true,
            ..switches.clone()
        };
        snap.counters.push(CounterSample::new(switches, 42.0));
        snap.counters.push(CounterSample::new(clock, 1.5));
        snap.counters.push(CounterSample::new(
            SeriesKey {
                fields: Box::new([("which".into(), "1".into()), ("comm".into(), "a\"b".into())]),
                cgroup: cg.clone(),
                labels: Arc::from(Vec::new()),
                group: "tracepoints".into(),
                event: "by_which".into(),
                cpu: None,
                clock: false,
                start_time: snap.taken_at,
            },
            7.0,
        ));
        snap.samples_lost = 5;
        snap.group_times.push(GroupTimeSample {
            cgroup: cg,
            labels: Arc::from(Vec::new()),
            group: "sched".into(),
            cpu: None,
            enabled_seconds: 2.0,
            running_seconds: 1.0,
            never_ran_intervals: 3,
            start_time: snap.taken_at,
        });
        snap.support.push(Support {
            group: crate::ids::GroupId::Named("ipc".into()),
            event: None,
            status: Err(crate::snapshot::NotCountable::new(
                crate::perf::OpenFailure::NotSupported.label(),
                "no PMU",
            )),
        });
        snap.support.push(Support {
            group: crate::ids::GroupId::Named("sched".into()),
            event: None,
            status: Ok(()),
        });
        let gone = ErrorReason::Kernel(crate::perf::OpenFailure::Gone);
        snap.errors.count(Operation::Read, gone);
        snap.errors.count(Operation::Read, gone);
        snap
    }

    fn exposition() -> Exposition {
        let latest = Latest::new();
        latest.publish(sample_snapshot());
        Exposition::new(latest)
    }

    #[test]
    fn openmetrics_has_the_contract_names() {
        let om = exposition().openmetrics().expect("encodes");
        assert!(om.contains(
            "cgperf_events_total{cgroup=\"/system.slice/a b\\\"c.service\",unit=\"a.service\",group=\"sched\",event=\"context-switches\"} 42.0"
        ), "{om}");
        assert!(om.contains("cgperf_clock_seconds_total{cgroup=\"/system.slice/a b\\\"c.service\",unit=\"a.service\",group=\"sched\",event=\"task-clock\",cpu=\"1\"} 1.5"), "{om}");
        assert!(om.contains("cgperf_group_enabled_seconds_total{cgroup=\"/system.slice/a b\\\"c.service\",group=\"sched\"} 2.0"));
        assert!(om.contains("cgperf_group_running_seconds_total{"));
        // Field labels of `by:` counts follow `event`, escaped.
        assert!(
            om.contains(
                "cgperf_events_total{cgroup=\"/system.slice/a b\\\"c.service\",group=\"tracepoints\",event=\"by_which\",which=\"1\",comm=\"a\\\"b\"} 7.0"
            ),
            "{om}"
        );
        assert!(om.contains("cgperf_samples_lost_total 5.0\n"), "{om}");
        assert!(om.contains("cgperf_group_never_ran_intervals_total{"));
        assert!(
            om.contains("cgperf_group_supported{group=\"ipc\",reason=\"not_supported\"} 0"),
            "{om}"
        );
        assert!(
            om.contains("cgperf_group_supported{group=\"sched\"} 1"),
            "{om}"
        );
        assert!(
            om.contains("cgperf_read_errors_total{reason=\"gone\"} 2"),
            "{om}"
        );
        assert!(om.contains("cgperf_build_info{version=\""));
        assert!(om.ends_with("# EOF\n"));
    }

    #[test]
    fn classic_text_names_counter_families_with_total() {
        let text = exposition().prometheus_text().expect("encodes");
        assert!(
            text.contains("# TYPE cgperf_events_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP cgperf_events_total Event counts"),
            "{text}"
        );
        assert!(text.contains("# TYPE cgperf_clock_seconds_total counter\n"));
        assert!(text.contains("# TYPE cgperf_build_info gauge\n"));
        assert!(text.contains("# TYPE cgperf_group_supported gauge\n"));
        assert!(!text.contains("# UNIT") && !text.contains("# EOF"));
        assert!(text.contains("cgperf_events_total{cgroup="));
        assert!(
            text.contains("\ncgperf_open_fds 0\n") || text.contains("\ncgperf_open_fds 0.0\n"),
            "{text}"
        );
    }

    /// The families of a scrape, in the order `/metrics` shows them, are
    /// those recorded in `tests/fixtures/metrics-family-order.txt`: a
    /// change to the catalogue's layout moves no family (dashboards and
    /// diffs of scrapes rely on the order); a new family is added to the
    /// file where it appears.
    #[test]
    fn a_scrape_shows_the_families_in_the_recorded_order() {
        let mut snap = sample_snapshot();
        snap.backend.name = "cgroup";
        let latest = Latest::new();
        latest.publish(snap);
        let om = Exposition::new(latest).openmetrics().expect("encodes");
        let order: Vec<&str> = om
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap_or(l))
            .collect();
        let recorded = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/metrics-family-order.txt"
        ));
        let recorded: Vec<&str> = recorded.lines().collect();
        assert_eq!(order, recorded, "scraped:\n{}", order.join("\n"));
    }
}
