//! Prometheus exposition of a snapshot: OpenMetrics text through the official
//! `prometheus-client` crate, and the classic text format 0.0.4 derived from
//! it for scrapers that do not ask for OpenMetrics.

use crate::snapshot::{CounterSample, GroupTimeSample, Latest, Snapshot, Support};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, LabelSetEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Error;

/// Renders snapshots as `/metrics` bodies.
#[derive(Debug)]
pub struct Exposition {
    registry: Registry,
}

impl Exposition {
    /// An exposition of whatever `latest` holds at scrape time.
    pub fn new(latest: Latest) -> Self {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SnapshotCollector { latest }));
        Self { registry }
    }

    /// OpenMetrics text, terminated by `# EOF`.
    pub fn openmetrics(&self) -> Result<String, Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
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
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), Error> {
        let snap = self.latest.get();
        encode_snapshot(&snap, &mut encoder)
    }
}

/// Labels of a counter or group-time series, written without allocating.
struct SeriesLabels<'a> {
    cgroup: &'a str,
    extra: &'a [(&'static str, Box<str>)],
    group: &'a str,
    event: Option<&'a str>,
    cpu: Option<u32>,
}

impl EncodeLabelSet for SeriesLabels<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), Error> {
        ("cgroup", self.cgroup).encode(encoder.encode_label())?;
        for (name, value) in self.extra {
            (*name, &**value).encode(encoder.encode_label())?;
        }
        ("group", self.group).encode(encoder.encode_label())?;
        if let Some(event) = self.event {
            ("event", event).encode(encoder.encode_label())?;
        }
        if let Some(cpu) = self.cpu {
            ("cpu", cpu).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

fn counter_labels(c: &CounterSample) -> SeriesLabels<'_> {
    SeriesLabels {
        cgroup: &c.cgroup,
        extra: &c.labels,
        group: &c.group,
        event: Some(&c.event),
        cpu: c.cpu,
    }
}

fn time_labels(t: &GroupTimeSample) -> SeriesLabels<'_> {
    SeriesLabels {
        cgroup: &t.cgroup,
        extra: &t.labels,
        group: &t.group,
        event: None,
        cpu: t.cpu,
    }
}

/// Writes one family: a counter or a gauge per item.
fn family<T, L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit, kind): (&str, &str, Option<&Unit>, MetricType),
    items: impl Iterator<Item = T>,
    series: impl Fn(T) -> (L, f64),
) -> Result<(), Error> {
    let mut family = encoder.encode_descriptor(name, help, unit, kind)?;
    for item in items {
        let (labels, value) = series(item);
        let mut metric = family.encode_family(&labels)?;
        match kind {
            MetricType::Counter => metric.encode_counter::<NoLabelSet, _, u64>(&value, None)?,
            _ => metric.encode_gauge(&value)?,
        }
    }
    Ok(())
}

/// Every metric family cgperf exports, in a stable order.
fn encode_snapshot(snap: &Snapshot, encoder: &mut DescriptorEncoder) -> Result<(), Error> {
    family(
        encoder,
        (
            "cgperf_events",
            "Event counts per cgroup, scaled per interval by enabled/running time when the kernel multiplexes counters.",
            None,
            MetricType::Counter,
        ),
        snap.counters.iter().filter(|c| !c.clock),
        |c| (counter_labels(c), c.value),
    )?;
    family(
        encoder,
        (
            "cgperf_clock",
            "CPU time counted by the task-clock and cpu-clock software events, per cgroup.",
            Some(&Unit::Seconds),
            MetricType::Counter,
        ),
        snap.counters.iter().filter(|c| c.clock),
        |c| (counter_labels(c), c.value),
    )?;
    family(
        encoder,
        (
            "cgperf_group_enabled",
            "Time the group was enabled (its cgroup was scheduled), summed over CPUs.",
            Some(&Unit::Seconds),
            MetricType::Counter,
        ),
        snap.group_times.iter(),
        |t| (time_labels(t), t.enabled_seconds),
    )?;
    family(
        encoder,
        (
            "cgperf_group_running",
            "Time the group was actually counting on the PMU; running/enabled is the multiplexing ratio.",
            Some(&Unit::Seconds),
            MetricType::Counter,
        ),
        snap.group_times.iter(),
        |t| (time_labels(t), t.running_seconds),
    )?;
    family(
        encoder,
        (
            "cgperf_group_never_ran_intervals",
            "Intervals in which the group was enabled but never got a counter; they add nothing to cgperf_events_total.",
            None,
            MetricType::Counter,
        ),
        snap.group_times.iter(),
        |t| (time_labels(t), t.never_ran_intervals as f64),
    )?;
    family(
        encoder,
        (
            "cgperf_group_supported",
            "1 when this machine can count the group, 0 when it cannot (the reason is in the log and in `cgperf check`).",
            None,
            MetricType::Gauge,
        ),
        snap.support.iter().filter(|s| s.event.is_none()),
        |s: &Support| {
            (
                [("group", &*s.group)],
                f64::from(u8::from(s.status.is_ok())),
            )
        },
    )?;
    family(
        encoder,
        (
            "cgperf_event_supported",
            "1 when this machine can count the tracepoint, 0 when it cannot.",
            None,
            MetricType::Gauge,
        ),
        snap.support.iter().filter(|s| s.event.is_some()),
        |s: &Support| {
            let event = s.event.as_deref().unwrap_or_default();
            (
                [("group", &*s.group), ("event", event)],
                f64::from(u8::from(s.status.is_ok())),
            )
        },
    )?;
    for (kind, help) in [
        ("read", "Failed group reads, by reason."),
        ("open", "Failed group opens, by reason."),
    ] {
        family(
            encoder,
            (
                &format!("cgperf_{kind}_errors"),
                help,
                None,
                MetricType::Counter,
            ),
            snap.errors.iter().filter(|((k, _), _)| *k == kind),
            |((_, reason), n)| ([("reason", *reason)], *n as f64),
        )?;
    }
    scalar(
        encoder,
        "cgperf_collection_duration",
        "Time the last collection (discover, read, scale, publish) took.",
        Some(&Unit::Seconds),
        MetricType::Gauge,
        snap.collection_seconds,
    )?;
    scalar(
        encoder,
        "cgperf_collections",
        "Collections done since start.",
        None,
        MetricType::Counter,
        snap.collections as f64,
    )?;
    family(
        encoder,
        (
            "cgperf_cgroups_skipped",
            "cgroups a selector chose but cgperf does not count: more than max_cgroups, or their perf descriptors would exceed the open-files limit.",
            None,
            MetricType::Gauge,
        ),
        snap.skipped.iter(),
        |(reason, n)| ([("reason", *reason)], *n as f64),
    )?;
    scalar(
        encoder,
        "cgperf_config_last_reload_successful",
        "1 if the last config (re)load succeeded, 0 if it failed and the previous config is still running.",
        None,
        MetricType::Gauge,
        f64::from(u8::from(snap.reload_ok)),
    )?;
    scalar(
        encoder,
        "cgperf_config_last_reload_success_timestamp",
        "When a config was last loaded successfully, in seconds since the epoch.",
        Some(&Unit::Seconds),
        MetricType::Gauge,
        snap.reload_success_time
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    )?;
    scalar(
        encoder,
        "cgperf_open_fds",
        "perf event file descriptors held now.",
        None,
        MetricType::Gauge,
        snap.open_fds as f64,
    )?;
    scalar(
        encoder,
        "cgperf_monitored_cgroups",
        "cgroups monitored now.",
        None,
        MetricType::Gauge,
        snap.monitored_cgroups as f64,
    )?;
    let mut build = encoder.encode_descriptor(
        "cgperf_build",
        "cgperf build information.",
        None,
        MetricType::Info,
    )?;
    build.encode_info(&[("version", env!("CARGO_PKG_VERSION"))])?;
    Ok(())
}

/// Writes a family with one unlabelled sample.
fn scalar(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    value: f64,
) -> Result<(), Error> {
    family(
        encoder,
        (name, help, unit, kind),
        std::iter::once(value),
        |v| (NoLabels, v),
    )
}

/// An empty label set.
struct NoLabels;

impl EncodeLabelSet for NoLabels {
    fn encode(&self, _: &mut LabelSetEncoder) -> Result<(), Error> {
        Ok(())
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
    use std::sync::Arc;

    fn sample_snapshot() -> Snapshot {
        let mut snap = Snapshot::empty();
        let cg: Arc<str> = "/system.slice/a b\"c.service".into();
        snap.counters.push(CounterSample {
            cgroup: cg.clone(),
            labels: Arc::from(vec![("unit", Box::from("a.service"))]),
            group: "sched".into(),
            event: "context-switches".into(),
            cpu: None,
            value: 42.0,
            clock: false,
        });
        snap.counters.push(CounterSample {
            cgroup: cg.clone(),
            labels: Arc::from(vec![("unit", Box::from("a.service"))]),
            group: "sched".into(),
            event: "task-clock".into(),
            cpu: Some(1),
            value: 1.5,
            clock: true,
        });
        snap.group_times.push(GroupTimeSample {
            cgroup: cg,
            labels: Arc::from(Vec::new()),
            group: "sched".into(),
            cpu: None,
            enabled_seconds: 2.0,
            running_seconds: 1.0,
            never_ran_intervals: 3,
        });
        snap.support.push(Support {
            group: "ipc".into(),
            event: None,
            status: Err("no PMU".into()),
        });
        snap.errors.insert(("read", "gone"), 2);
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
        assert!(om.contains("cgperf_group_never_ran_intervals_total{"));
        assert!(
            om.contains("cgperf_group_supported{group=\"ipc\"} 0"),
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
    }
}
