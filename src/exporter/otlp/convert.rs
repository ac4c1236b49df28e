//! Snapshot → OTLP export requests, built directly on the generated protos.
//!
//! The OpenTelemetry SDK is not used: its aggregation keeps one start time
//! per stream and caps a metric at 2,000 attribute sets, while cgperf has a
//! start time per cgroup series and no cardinality cap. A snapshot can be
//! larger than collectors accept in one gRPC message (4 MiB by default), so
//! it is split into requests whose encoded size stays under
//! [`MAX_REQUEST_BYTES`], measured with prost's `encoded_len`.

use super::OtlpStats;
use crate::exporter::families::{self, Family, Kind, Point, SelfMetrics, Value, Visitor};
use crate::exporter::process::Process;
use crate::snapshot::Snapshot;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use prost::encoding::{encoded_len_varint, key_len};
use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

/// Largest encoded request: collectors reject gRPC messages over 4 MiB by
/// default; 64 KiB stay free for whatever a proxy adds.
pub const MAX_REQUEST_BYTES: usize = (4 << 20) - (64 << 10);

/// A length prefix of a message under 4 MiB takes at most 4 bytes, and at
/// least 1: how much a prefix measured on an empty message can grow.
const LENGTH_GROWTH: usize = 3;

/// One export request and the number of data points in it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The message sent.
    pub message: ExportMetricsServiceRequest,
    /// Data points it carries.
    pub points: u64,
}

/// What stays the same across pushes: who sends, and since when.
#[derive(Debug, Clone)]
pub struct Batcher {
    resource: Resource,
    scope: InstrumentationScope,
    /// Start of the counters that are not per cgroup (errors, collections):
    /// they began with the process.
    started: SystemTime,
    limit: usize,
}

impl Batcher {
    /// Requests of at most `limit` encoded bytes from `resource`, for a
    /// process started at `started`.
    pub fn new(resource: Resource, started: SystemTime, limit: usize) -> Self {
        Self {
            resource,
            scope: InstrumentationScope {
                name: "cgperf".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..InstrumentationScope::default()
            },
            started,
            limit,
        }
    }

    /// Every family of `snap` (and the exporter's own counters), split into
    /// requests under the size limit. A family too large for one request
    /// continues in the next; no point is left out.
    pub fn requests(&self, snap: &Snapshot, stats: Option<&OtlpStats>) -> Vec<Request> {
        let mut chunker = Chunker {
            batcher: self,
            time: nanos(snap.taken_at),
            skeleton: self.envelope(Vec::new()).encoded_len() + 2 * LENGTH_GROWTH,
            done: Vec::new(),
            metrics: Vec::new(),
            points: 0,
            used: 0,
        };
        chunker.used = chunker.skeleton;
        let mut others: Vec<&dyn SelfMetrics> = vec![&Process];
        others.extend(stats.map(|s| s as &dyn SelfMetrics));
        let Ok(()) = families::visit(snap, &others, &mut chunker);
        chunker.finish();
        chunker.done
    }

    fn envelope(&self, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(self.scope.clone()),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
    }
}

/// The resource of every request: `service.name=cgperf`, `service.version`,
/// and the host name (when known) as `host.name` and `service.instance.id`,
/// each replaced by a user attribute of the same key, then the other user
/// attributes. Collectors turn `service.instance.id` into the `instance`
/// label when writing to Prometheus: one cgperf runs per host, so the host
/// name tells the series of different hosts apart there, as the scrape's
/// `instance` does on the `/metrics` path.
pub fn resource(user: &[(String, String)], host: Option<String>) -> Resource {
    let mut attributes: Vec<KeyValue> = [
        ("service.name", Some("cgperf".to_owned())),
        (
            "service.version",
            Some(env!("CARGO_PKG_VERSION").to_owned()),
        ),
        ("service.instance.id", host.clone()),
        ("host.name", host),
    ]
    .into_iter()
    .filter(|(key, _)| !user.iter().any(|(k, _)| k == key))
    .filter_map(|(key, value)| Some(string_attribute(key, value?)))
    .collect();
    attributes.extend(user.iter().map(|(k, v)| string_attribute(k, v.clone())));
    Resource {
        attributes,
        ..Resource::default()
    }
}

fn string_attribute(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..KeyValue::default()
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Bytes a length-delimited field of `len` bytes takes in its parent.
fn framed(len: usize) -> usize {
    key_len(1) + encoded_len_varint(len as u64) + len
}

/// Fills requests family by family, point by point, starting a new request
/// when the next point would not fit. Sizes are upper bounds: every length
/// prefix is counted at the width it can grow to.
struct Chunker<'a> {
    batcher: &'a Batcher,
    /// Timestamp of every point: when the snapshot was taken.
    time: u64,
    /// Bytes of a request without metrics.
    skeleton: usize,
    done: Vec<Request>,
    /// Complete metrics of the request being filled.
    metrics: Vec<Metric>,
    points: u64,
    /// Bytes of the request being filled.
    used: usize,
}

impl Chunker<'_> {
    fn finish(&mut self) {
        if self.metrics.is_empty() {
            return;
        }
        let message = self.batcher.envelope(std::mem::take(&mut self.metrics));
        debug_assert!(
            message.encoded_len() <= self.used,
            "size accounting is an upper bound"
        );
        self.done.push(Request {
            message,
            points: std::mem::take(&mut self.points),
        });
        self.used = self.skeleton;
    }

    fn data_point(&self, point: &Point<'_>, cumulative: bool) -> NumberDataPoint {
        let mut attributes = Vec::new();
        let Ok(()) = point.labels.for_each(|name, value| {
            let value = match value {
                Value::Str(s) => any_value::Value::StringValue(s.to_owned()),
                Value::Cpu(cpu) => any_value::Value::IntValue(i64::from(cpu)),
            };
            attributes.push(KeyValue {
                key: attribute_name(name).to_owned(),
                value: Some(AnyValue { value: Some(value) }),
                ..KeyValue::default()
            });
            Ok::<(), Infallible>(())
        });
        let start = if cumulative {
            nanos(point.start.unwrap_or(self.batcher.started)).min(self.time)
        } else {
            0
        };
        NumberDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: self.time,
            value: Some(number_data_point::Value::AsDouble(point.value)),
            ..NumberDataPoint::default()
        }
    }
}

/// The OpenTelemetry semantic-convention name of a label that has one
/// (pod and container identity), so that collectors and backends join
/// cgperf's points with their other Kubernetes data; other labels keep
/// their Prometheus name.
fn attribute_name(label: &str) -> &str {
    use crate::cri::{CONTAINER, IMAGE, NAMESPACE, POD};
    use crate::labels::{CONTAINER_ID, CONTAINER_RUNTIME, POD_UID};
    match label {
        POD => "k8s.pod.name",
        POD_UID => "k8s.pod.uid",
        NAMESPACE => "k8s.namespace.name",
        CONTAINER => "k8s.container.name",
        CONTAINER_ID => "container.id",
        CONTAINER_RUNTIME => "container.runtime",
        IMAGE => "container.image.name",
        other => other,
    }
}

/// The metric of `family` with `data_points`.
fn metric(family: &Family, data_points: Vec<NumberDataPoint>) -> Metric {
    let data = match family.kind {
        Kind::Counter => metric::Data::Sum(Sum {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        Kind::Gauge | Kind::Info => metric::Data::Gauge(Gauge { data_points }),
    };
    Metric {
        name: family.sample_name(),
        description: family.help.to_owned(),
        unit: if family.seconds { "s" } else { "" }.to_owned(),
        data: Some(data),
        ..Metric::default()
    }
}

impl Visitor for Chunker<'_> {
    type Error = Infallible;

    fn family<'p>(
        &mut self,
        family: &Family,
        points: impl Iterator<Item = Point<'p>>,
    ) -> Result<(), Infallible> {
        // The metric's own length prefix and that of its Sum/Gauge can both
        // grow as points are added.
        let base = framed(metric(family, Vec::new()).encoded_len()) + 2 * LENGTH_GROWTH;
        let cumulative = family.kind == Kind::Counter;
        let mut current = Vec::new();
        let mut size = base;
        for point in points {
            let point = self.data_point(&point, cumulative);
            let bytes = framed(point.encoded_len());
            if self.used + size + bytes > self.batcher.limit
                && (!current.is_empty() || !self.metrics.is_empty())
            {
                if !current.is_empty() {
                    self.metrics
                        .push(metric(family, std::mem::take(&mut current)));
                    self.used += size;
                }
                self.finish();
                size = base;
            }
            current.push(point);
            size += bytes;
            self.points += 1;
        }
        if !current.is_empty() {
            self.metrics.push(metric(family, current));
            self.used += size;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn identity_labels_take_opentelemetry_names() {
        for (label, attribute) in [
            ("pod", "k8s.pod.name"),
            ("namespace", "k8s.namespace.name"),
            ("container", "k8s.container.name"),
            ("container_id", "container.id"),
            ("image", "container.image.name"),
            ("cgroup", "cgroup"),
        ] {
            assert_eq!(attribute_name(label), attribute);
        }
    }
    use super::*;
    use crate::snapshot::{CounterSample, GroupTimeSample, SeriesKey};
    use std::sync::Arc;
    use std::time::Duration;

    fn sample(cgroup: &Arc<str>, event: usize, start: SystemTime) -> CounterSample {
        CounterSample::new(
            SeriesKey {
                fields: Box::new([]),
                cgroup: cgroup.clone(),
                labels: Arc::from(vec![("unit", Box::from("a.service"))]),
                group: "tracepoints".into(),
                event: format!("syscalls:sys_enter_call{event}").into(),
                cpu: None,
                clock: false,
                start_time: start,
            },
            1000.0 + event as f64,
        )
    }

    /// `cgroups` × `events` event series, plus one clock and one group-time
    /// series per cgroup.
    fn snapshot(cgroups: usize, events: usize) -> Snapshot {
        let mut snap = Snapshot::empty();
        let start = snap.taken_at - Duration::from_secs(60);
        for c in 0..cgroups {
            let cgroup: Arc<str> = format!("/kubepods.slice/pod{c:06}.slice").into();
            for e in 0..events {
                snap.counters.push(sample(&cgroup, e, start));
            }
            let clock = sample(&cgroup, 0, start);
            let key = SeriesKey {
                event: "task-clock".into(),
                clock: true,
                cpu: Some(1),
                ..SeriesKey::clone(&clock)
            };
            snap.counters.push(CounterSample::new(key, clock.value));
            snap.group_times.push(GroupTimeSample {
                cgroup,
                labels: Arc::from(Vec::new()),
                group: "sched".into(),
                cpu: None,
                enabled_seconds: 2.0,
                running_seconds: 1.0,
                never_ran_intervals: 0,
                start_time: start,
            });
        }
        snap
    }

    fn batcher(limit: usize) -> Batcher {
        Batcher::new(
            resource(&[], Some("node-1".to_owned())),
            SystemTime::now() - Duration::from_secs(3600),
            limit,
        )
    }

    fn metrics(r: &Request) -> &[Metric] {
        &r.message.resource_metrics[0].scope_metrics[0].metrics
    }

    fn count_points(requests: &[Request]) -> usize {
        requests
            .iter()
            .flat_map(metrics)
            .map(|m| match &m.data {
                Some(metric::Data::Sum(s)) => s.data_points.len(),
                Some(metric::Data::Gauge(g)) => g.data_points.len(),
                _ => 0,
            })
            .sum()
    }

    #[test]
    fn families_become_sums_and_gauges_with_prometheus_names() {
        let snap = snapshot(2, 1);
        let batcher = batcher(MAX_REQUEST_BYTES);
        let requests = batcher.requests(&snap, Some(&OtlpStats::default()));
        assert_eq!(requests.len(), 1);
        let metrics = metrics(&requests[0]);
        let find = |name: &str| {
            metrics
                .iter()
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("no {name}"))
        };
        let Some(metric::Data::Sum(events)) = &find("cgperf_events_total").data else {
            panic!("events are a sum");
        };
        assert!(events.is_monotonic);
        assert_eq!(
            events.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let point = &events.data_points[0];
        assert_eq!(
            point.value,
            Some(number_data_point::Value::AsDouble(1000.0))
        );
        let keys: Vec<&str> = point.attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["cgroup", "unit", "group", "event"]);
        assert_eq!(point.time_unix_nano, nanos(snap.taken_at));
        assert_eq!(
            point.start_time_unix_nano,
            nanos(snap.taken_at - Duration::from_secs(60))
        );
        let clock = find("cgperf_clock_seconds_total");
        assert_eq!(clock.unit, "s");
        let Some(metric::Data::Sum(clock)) = &clock.data else {
            panic!("clock is a sum");
        };
        let cpu = clock.data_points[0].attributes.last().expect("cpu");
        assert_eq!(cpu.key, "cpu");
        assert_eq!(
            cpu.value.as_ref().and_then(|v| v.value.clone()),
            Some(any_value::Value::IntValue(1))
        );
        assert!(matches!(
            find("cgperf_monitored_cgroups").data,
            Some(metric::Data::Gauge(_))
        ));
        assert!(matches!(
            find("cgperf_build_info").data,
            Some(metric::Data::Gauge(_))
        ));
        let Some(metric::Data::Sum(failures)) = &find("cgperf_otlp_export_failures_total").data
        else {
            panic!("failures are a sum");
        };
        assert_eq!(failures.data_points.len(), 5);
        // Process-wide counters start with the process.
        assert_eq!(
            failures.data_points[0].start_time_unix_nano,
            nanos(batcher.started)
        );
        let resource = &requests[0].message.resource_metrics[0]
            .resource
            .as_ref()
            .expect("resource")
            .attributes;
        let keys: Vec<&str> = resource.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "service.name",
                "service.version",
                "service.instance.id",
                "host.name"
            ]
        );
    }

    #[test]
    fn user_resource_attributes_replace_defaults() {
        let user = [
            ("service.name".to_owned(), "mine".to_owned()),
            ("team".to_owned(), "perf".to_owned()),
        ];
        let r = resource(&user, None);
        let pairs: Vec<(String, String)> = r
            .attributes
            .iter()
            .map(|a| {
                let Some(AnyValue {
                    value: Some(any_value::Value::StringValue(v)),
                }) = &a.value
                else {
                    panic!("string attributes");
                };
                (a.key.clone(), v.clone())
            })
            .collect();
        assert_eq!(
            pairs,
            [
                (
                    "service.version".to_owned(),
                    env!("CARGO_PKG_VERSION").to_owned()
                ),
                ("service.name".to_owned(), "mine".to_owned()),
                ("team".to_owned(), "perf".to_owned()),
            ]
        );
    }

    /// 50k event series (plus their clock and group-time series) split into
    /// requests that each fit, with every point present exactly once.
    #[test]
    fn large_snapshots_split_under_the_limit() {
        let snap = snapshot(5_000, 10);
        let requests = batcher(MAX_REQUEST_BYTES).requests(&snap, None);
        let sizes: Vec<usize> = requests.iter().map(|r| r.message.encoded_len()).collect();
        assert!(sizes.len() > 1, "{sizes:?}");
        assert!(sizes.iter().all(|s| *s <= MAX_REQUEST_BYTES), "{sizes:?}");
        let points = count_points(&requests);
        let declared: u64 = requests.iter().map(|r| r.points).sum();
        assert_eq!(points as u64, declared);
        let fixed = count_points(&batcher(MAX_REQUEST_BYTES).requests(&Snapshot::empty(), None));
        // 50k events + 5k clock + 3 × 5k group times.
        assert_eq!(points, 50_000 + 5_000 + 3 * 5_000 + fixed);
        let total: usize = sizes.iter().sum();
        eprintln!(
            "{} points in {} requests, {} bytes, {:.1} bytes/point, sizes {sizes:?}",
            points,
            sizes.len(),
            total,
            total as f64 / points as f64
        );
        // Requests are filled: all but the last are at least 90 % full.
        for size in &sizes[..sizes.len() - 1] {
            assert!(*size > MAX_REQUEST_BYTES * 9 / 10, "{sizes:?}");
        }
    }

    #[test]
    fn tiny_limits_still_send_every_point() {
        let snap = snapshot(3, 2);
        let all = count_points(&batcher(MAX_REQUEST_BYTES).requests(&snap, None));
        for limit in [0, 200, 400, 1000] {
            let requests = batcher(limit).requests(&snap, None);
            assert_eq!(count_points(&requests), all, "limit {limit}");
            for r in &requests {
                // A request over a limit holds a single point that cannot
                // be split further.
                assert!(
                    r.message.encoded_len() <= limit || r.points == 1,
                    "limit {limit}"
                );
            }
        }
    }
}
