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
use std::borrow::Cow;
use std::collections::HashMap;
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

/// The pod or container a point belongs to: its resource attributes, in
/// label order (empty: cgperf's own resource, for cgroups outside pods and
/// containers and for cgperf's own metrics).
type Identity = Vec<(&'static str, String)>;

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
            done: Vec::new(),
            resources: Vec::new(),
            index: HashMap::new(),
            family: 0,
            points: 0,
            used: 0,
        };
        let mut others: Vec<&dyn SelfMetrics> = vec![&Process];
        others.extend(stats.map(|s| s as &dyn SelfMetrics));
        let Ok(()) = families::visit(snap, &others, &mut chunker);
        chunker.finish();
        chunker.done
    }

    /// The resource of the points of `identity`: cgperf's own attributes,
    /// less any the identity sets, then the identity's.
    fn resource_of(&self, identity: &Identity) -> Resource {
        let mut attributes: Vec<KeyValue> = self
            .resource
            .attributes
            .iter()
            .filter(|a| !identity.iter().any(|(key, _)| a.key == *key))
            .cloned()
            .collect();
        attributes.extend(
            identity
                .iter()
                .map(|(key, value)| string_attribute(key, value.clone())),
        );
        Resource {
            attributes,
            ..Resource::default()
        }
    }

    fn resource_metrics(&self, identity: &Identity, metrics: Vec<Metric>) -> ResourceMetrics {
        ResourceMetrics {
            resource: Some(self.resource_of(identity)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(self.scope.clone()),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }
    }
}

/// The resource of every request: `service.name=cgperf`, `service.version`,
/// and the host name (when known) as `host.name` and `service.instance.id`,
/// each replaced by a user attribute of the same key, then the other user
/// attributes. Collectors turn `service.instance.id` into the `instance`
/// label when writing to Prometheus: one cgperf runs per host, so the host
/// name tells the series of different hosts apart there, as the scrape's
/// `instance` does on the `/metrics` path. Points of a pod or container
/// get a resource of their own: this one plus the pod's or container's
/// attributes.
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

/// The metrics of one resource in the request being filled.
struct Pending {
    identity: Identity,
    metrics: Vec<Metric>,
    /// The family (its number in the walk) of the last metric, which takes
    /// further points of that family.
    open: Option<usize>,
}

/// Fills requests family by family, point by point, starting a new request
/// when the next point would not fit. Sizes are upper bounds: every length
/// prefix is counted at the width it can grow to.
struct Chunker<'a> {
    batcher: &'a Batcher,
    /// Timestamp of every point: when the snapshot was taken.
    time: u64,
    done: Vec<Request>,
    /// Resources of the request being filled, in the order first met.
    resources: Vec<Pending>,
    /// Where each identity is in `resources`.
    index: HashMap<Identity, usize>,
    /// Number of the family being walked.
    family: usize,
    points: u64,
    /// Bytes of the request being filled.
    used: usize,
}

impl Chunker<'_> {
    fn finish(&mut self) {
        if self.resources.is_empty() {
            return;
        }
        self.index.clear();
        let message = ExportMetricsServiceRequest {
            resource_metrics: std::mem::take(&mut self.resources)
                .into_iter()
                .map(|p| self.batcher.resource_metrics(&p.identity, p.metrics))
                .collect(),
        };
        debug_assert!(
            message.encoded_len() <= self.used,
            "size accounting is an upper bound"
        );
        self.done.push(Request {
            message,
            points: std::mem::take(&mut self.points),
        });
        self.used = 0;
    }

    /// The point's identity and its data point, which carries the other
    /// labels.
    fn data_point(&self, point: &Point<'_>, cumulative: bool) -> (Identity, NumberDataPoint) {
        let mut identity = Identity::new();
        let mut attributes = Vec::new();
        let Ok(()) = point.labels.for_each(|name, value| {
            match (value, attribute(name)) {
                (Value::Str(s), Attribute::Resource(key)) => identity.push((key, s.to_owned())),
                (Value::Str(s), Attribute::Point(key)) => attributes.push(KeyValue {
                    key: key.into_owned(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(s.to_owned())),
                    }),
                    ..KeyValue::default()
                }),
                // Numbers (CPU, socket, die) are the point's own.
                (Value::Number(n), attribute) => attributes.push(KeyValue {
                    key: match attribute {
                        Attribute::Point(key) => key.into_owned(),
                        Attribute::Resource(key) => key.to_owned(),
                    },
                    value: Some(AnyValue {
                        value: Some(any_value::Value::IntValue(i64::from(n))),
                    }),
                    ..KeyValue::default()
                }),
            }
            Ok::<(), Infallible>(())
        });
        let start = if cumulative {
            nanos(point.start.unwrap_or(self.batcher.started)).min(self.time)
        } else {
            0
        };
        let point = NumberDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: self.time,
            value: Some(number_data_point::Value::AsDouble(point.value)),
            ..NumberDataPoint::default()
        };
        (identity, point)
    }

    /// Bytes that adding a point of `identity` to the request being filled
    /// takes besides the point itself: its resource and its metric (of
    /// `metric_bytes`), where the request has them not yet.
    fn overhead(&self, identity: &Identity, metric_bytes: usize) -> usize {
        match self.index.get(identity) {
            Some(&at) if self.resources[at].open == Some(self.family) => 0,
            Some(_) => metric_bytes,
            None => {
                let empty = self.batcher.resource_metrics(identity, Vec::new());
                // Its own prefix and that of its ScopeMetrics can grow.
                framed(empty.encoded_len()) + 2 * LENGTH_GROWTH + metric_bytes
            }
        }
    }

    /// Adds `point` to the metric of `family` in the resource of
    /// `identity`, making either where missing.
    fn add(&mut self, identity: Identity, family: &Family, point: NumberDataPoint) {
        let at = match self.index.get(&identity) {
            Some(&at) => at,
            None => {
                self.index.insert(identity.clone(), self.resources.len());
                self.resources.push(Pending {
                    identity,
                    metrics: Vec::new(),
                    open: None,
                });
                self.resources.len() - 1
            }
        };
        let pending = &mut self.resources[at];
        if pending.open != Some(self.family) {
            pending.metrics.push(metric(family, Vec::new()));
            pending.open = Some(self.family);
        }
        if let Some(metric) = pending.metrics.last_mut() {
            match &mut metric.data {
                Some(metric::Data::Sum(sum)) => sum.data_points.push(point),
                Some(metric::Data::Gauge(gauge)) => gauge.data_points.push(point),
                _ => {}
            }
        }
        self.points += 1;
    }
}

/// The attribute name the OTLP data point gives the point attribute for
/// a CPU.
const CPU: &str = "cpu.logical_number";

/// Where a label goes in OTLP, under which name.
#[derive(Debug, PartialEq, Eq)]
enum Attribute {
    /// On the resource: it names the pod or container the point belongs
    /// to, as the collector's `k8sattributes` processor and kubeletstats
    /// do, under the OpenTelemetry semantic-convention name.
    Resource(&'static str),
    /// On the data point: a semantic-convention name where one exists,
    /// `cgperf.<label>` otherwise.
    Point(Cow<'static, str>),
}

/// Where the label `label` goes, and its name there.
fn attribute(label: &str) -> Attribute {
    use crate::cri::{CONTAINER, IMAGE, NAMESPACE, POD};
    use crate::labels::{CONTAINER_ID, CONTAINER_RUNTIME, POD_UID};
    let resource = match label {
        POD => "k8s.pod.name",
        POD_UID => "k8s.pod.uid",
        NAMESPACE => "k8s.namespace.name",
        CONTAINER => "k8s.container.name",
        CONTAINER_ID => "container.id",
        CONTAINER_RUNTIME => "container.runtime.name",
        IMAGE => "container.image.name",
        "cgroup" => return Attribute::Point(Cow::Borrowed("cgroup.path")),
        "cpu" => return Attribute::Point(Cow::Borrowed(CPU)),
        "comm" => return Attribute::Point(Cow::Borrowed("process.executable.name")),
        "pid" => return Attribute::Point(Cow::Borrowed("process.pid")),
        other => return Attribute::Point(Cow::Owned(format!("cgperf.{other}"))),
    };
    Attribute::Resource(resource)
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
        unit: family.unit.ucum().to_owned(),
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
        self.family += 1;
        let cumulative = family.kind == Kind::Counter;
        // An empty metric of this family; its own length prefix and that
        // of its Sum/Gauge can both grow as points are added.
        let metric_bytes = framed(metric(family, Vec::new()).encoded_len()) + 2 * LENGTH_GROWTH;
        for point in points {
            let (identity, point) = self.data_point(&point, cumulative);
            let bytes = framed(point.encoded_len());
            let mut cost = self.overhead(&identity, metric_bytes) + bytes;
            if self.used + cost > self.batcher.limit && self.points > 0 {
                self.finish();
                cost = self.overhead(&identity, metric_bytes) + bytes;
            }
            self.used += cost;
            self.add(identity, family, point);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn labels_take_opentelemetry_names_and_pods_go_on_the_resource() {
        for (label, want) in [
            ("pod", Attribute::Resource("k8s.pod.name")),
            ("pod_uid", Attribute::Resource("k8s.pod.uid")),
            ("namespace", Attribute::Resource("k8s.namespace.name")),
            ("container", Attribute::Resource("k8s.container.name")),
            ("container_id", Attribute::Resource("container.id")),
            (
                "container_runtime",
                Attribute::Resource("container.runtime.name"),
            ),
            ("image", Attribute::Resource("container.image.name")),
            ("cgroup", Attribute::Point("cgroup.path".into())),
            ("cpu", Attribute::Point("cpu.logical_number".into())),
            ("group", Attribute::Point("cgperf.group".into())),
            ("event", Attribute::Point("cgperf.event".into())),
            ("qos_class", Attribute::Point("cgperf.qos_class".into())),
            ("reason", Attribute::Point("cgperf.reason".into())),
        ] {
            assert_eq!(attribute(label), want, "{label}");
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

    /// The metrics of every resource of `r`.
    fn metrics(r: &Request) -> impl Iterator<Item = &Metric> {
        r.message
            .resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
    }

    fn points(m: &Metric) -> &[NumberDataPoint] {
        match &m.data {
            Some(metric::Data::Sum(s)) => &s.data_points,
            Some(metric::Data::Gauge(g)) => &g.data_points,
            _ => &[],
        }
    }

    fn keys(attributes: &[KeyValue]) -> Vec<&str> {
        attributes.iter().map(|a| a.key.as_str()).collect()
    }

    /// `snapshot(cgroups, events)` whose first `pods` cgroups are
    /// containers of pods of their own.
    fn pod_snapshot(cgroups: usize, events: usize, pods: usize) -> Snapshot {
        let mut snap = snapshot(cgroups, events);
        let identity = |cgroup: &str| -> Option<crate::snapshot::Labels> {
            let n: usize = cgroup
                .strip_prefix("/kubepods.slice/pod")?
                .strip_suffix(".slice")?
                .parse()
                .ok()?;
            (n < pods).then(|| {
                Arc::from(vec![
                    ("pod_uid", Box::from(format!("uid-{n}"))),
                    ("container_id", Box::from(format!("{n:064x}"))),
                    ("container_runtime", Box::from("containerd")),
                ])
            })
        };
        snap.counters = snap
            .counters
            .iter()
            .map(|c| match identity(&c.cgroup) {
                Some(labels) => {
                    let mut key = SeriesKey::clone(c);
                    key.labels = labels;
                    CounterSample::new(key, c.value)
                }
                None => c.clone(),
            })
            .collect();
        snap.group_times = snap
            .group_times
            .iter()
            .map(|g| {
                let mut g = g.clone();
                if let Some(labels) = identity(&g.cgroup) {
                    g.labels = labels;
                }
                g
            })
            .collect();
        snap
    }

    fn count_points(requests: &[Request]) -> usize {
        requests
            .iter()
            .flat_map(metrics)
            .map(|m| points(m).len())
            .sum()
    }

    #[test]
    fn families_become_sums_and_gauges_with_prometheus_names() {
        let snap = snapshot(2, 1);
        let batcher = batcher(MAX_REQUEST_BYTES);
        let requests = batcher.requests(&snap, Some(&OtlpStats::default()));
        assert_eq!(requests.len(), 1);
        let find = |name: &str| {
            metrics(&requests[0])
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
        assert_eq!(
            keys,
            ["cgroup.path", "cgperf.unit", "cgperf.group", "cgperf.event"]
        );
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
        assert_eq!(cpu.key, "cpu.logical_number");
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

    /// A point's attributes: each key and value.
    fn attributes(point: &NumberDataPoint) -> Vec<(&str, Option<any_value::Value>)> {
        point
            .attributes
            .iter()
            .map(|a| (a.key.as_str(), a.value.clone().and_then(|v| v.value)))
            .collect()
    }

    fn text(s: &str) -> Option<any_value::Value> {
        Some(any_value::Value::StringValue(s.into()))
    }

    fn number(n: i64) -> Option<any_value::Value> {
        Some(any_value::Value::IntValue(n))
    }

    /// A `processes:` series' energy: a cumulative sum in `J`, with the
    /// entry's and the meter's attributes.
    #[test]
    fn process_energy_is_a_sum_in_joules_with_its_process_and_meter() {
        use crate::snapshot::{EnergyScope, ProcessEnergy};
        let mut snap = Snapshot::empty();
        let start = snap.taken_at - Duration::from_secs(5);
        snap.process_energy = vec![ProcessEnergy {
            process: "db".into(),
            comm: Some("postgres".into()),
            pid: Some(42),
            scope: EnergyScope {
                socket: 1,
                domain: "pkg",
                source: "model",
            },
            weight: "cycles",
            joules: 3.25,
            start_time: start,
        }];
        let requests = batcher(MAX_REQUEST_BYTES).requests(&snap, None);
        let metric = requests
            .iter()
            .flat_map(metrics)
            .find(|m| m.name == "cgperf_process_energy_joules_total")
            .expect("the family");
        assert_eq!(metric.unit, "J");
        let Some(metric::Data::Sum(sum)) = &metric.data else {
            panic!("energy is a sum");
        };
        assert!(sum.is_monotonic);
        let point = &sum.data_points[0];
        assert_eq!(point.value, Some(number_data_point::Value::AsDouble(3.25)));
        assert_eq!(point.start_time_unix_nano, nanos(start));
        let got = attributes(point);
        for want in [
            ("cgperf.source", text("model")),
            ("cgperf.domain", text("pkg")),
            ("cgperf.socket", number(1)),
            ("cgperf.weight", text("cycles")),
        ] {
            assert!(got.contains(&want), "{want:?} in {got:?}");
        }
        assert!(got.len() >= 7, "process, comm and pid too: {got:?}");
    }

    #[test]
    fn host_series_carry_their_scope_on_the_point_and_no_cgroup() {
        use crate::snapshot::{HostSample, HostUnit, Scope};
        let mut snap = Snapshot::empty();
        let start = snap.taken_at - Duration::from_secs(5);
        let host = |event: &str, scope, unit, value| HostSample {
            group: "energy".into(),
            event: event.into(),
            scope,
            unit,
            value,
            start_time: start,
        };
        snap.host = vec![
            host(
                "power/energy-pkg/",
                Scope::Die { socket: 1, die: 3 },
                HostUnit::Joules,
                12.5,
            ),
            host("cpu-clock", Scope::Machine, HostUnit::Seconds, 2.0),
        ];
        let yaml = "host:\n  groups:\n    m: [cpu-clock]\n  metrics:\n    \
                    - {name: busy, expr: cpu-clock / duration_time * 1e9}\n";
        let config = crate::config::parse("host.yaml", yaml).expect("a host metric");
        snap.host_metrics = vec![crate::snapshot::HostMetricSample {
            metric: config.host.metrics[0].clone().into(),
            value: 1.5,
        }];
        let requests = batcher(MAX_REQUEST_BYTES).requests(&snap, None);
        let find = |name: &str| {
            requests
                .iter()
                .flat_map(metrics)
                .find(|m| m.name == name)
                .unwrap_or_else(|| panic!("no {name}"))
        };
        let energy = find("cgperf_host_energy_joules_total");
        assert_eq!(energy.unit, "J");
        let Some(metric::Data::Sum(sum)) = &energy.data else {
            panic!("energy is a sum");
        };
        let point = &sum.data_points[0];
        assert_eq!(point.value, Some(number_data_point::Value::AsDouble(12.5)));
        assert_eq!(point.start_time_unix_nano, nanos(start));
        assert_eq!(
            attributes(point),
            [
                ("cgperf.group", text("energy")),
                ("cgperf.event", text("power/energy-pkg/")),
                ("cgperf.socket", number(1)),
                ("cgperf.die", number(3)),
            ]
        );
        let clock = find("cgperf_host_clock_seconds_total");
        assert_eq!(clock.unit, "s");
        // A host metric: a gauge of the machine, named by its metric alone.
        let busy = find("cgperf_host_metric");
        let Some(metric::Data::Gauge(gauge)) = &busy.data else {
            panic!("a host metric is a gauge");
        };
        let point = &gauge.data_points[0];
        assert_eq!(point.value, Some(number_data_point::Value::AsDouble(1.5)));
        assert_eq!(attributes(point), [("cgperf.metric", text("busy"))]);
    }

    #[test]
    fn process_series_name_the_process_as_opentelemetry_does() {
        use crate::snapshot::ProcessSample;
        let mut snap = Snapshot::empty();
        snap.processes = vec![ProcessSample {
            process: "postgres".into(),
            comm: Some("postgres".into()),
            pid: Some(4242),
            group: "sched".into(),
            event: "context-switches".into(),
            clock: false,
            value: 7.0,
            start_time: snap.taken_at,
        }];
        let requests = batcher(MAX_REQUEST_BYTES).requests(&snap, None);
        let metric = requests
            .iter()
            .flat_map(metrics)
            .find(|m| m.name == "cgperf_process_events_total")
            .expect("the process family");
        let Some(metric::Data::Sum(sum)) = &metric.data else {
            panic!("a sum");
        };
        assert_eq!(
            attributes(&sum.data_points[0]),
            [
                ("cgperf.process", text("postgres")),
                ("process.executable.name", text("postgres")),
                ("process.pid", number(4242)),
                ("cgperf.group", text("sched")),
                ("cgperf.event", text("context-switches")),
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

    /// Each pod's container is a resource of its own carrying its
    /// identity, which its points do not repeat; cgroups outside pods and
    /// cgperf's own metrics stay on cgperf's resource.
    #[test]
    fn each_container_is_a_resource() {
        let snap = pod_snapshot(3, 2, 2);
        let requests = batcher(MAX_REQUEST_BYTES).requests(&snap, None);
        assert_eq!(requests.len(), 1);
        let resources = &requests[0].message.resource_metrics;
        let identities: Vec<Vec<&str>> = resources
            .iter()
            .map(|rm| keys(&rm.resource.as_ref().expect("resource").attributes))
            .collect();
        let own = [
            "service.name",
            "service.version",
            "service.instance.id",
            "host.name",
        ];
        let container = [
            "service.name",
            "service.version",
            "service.instance.id",
            "host.name",
            "k8s.pod.uid",
            "container.id",
            "container.runtime.name",
        ];
        assert_eq!(identities, [&container[..], &container[..], &own[..]]);
        for rm in &resources[..2] {
            let events = rm.scope_metrics[0]
                .metrics
                .iter()
                .find(|m| m.name == "cgperf_events_total")
                .expect("events");
            assert_eq!(events.unit, "{event}");
            // Two events of one container.
            assert_eq!(points(events).len(), 2);
            for p in points(events) {
                assert_eq!(
                    keys(&p.attributes),
                    ["cgroup.path", "cgperf.group", "cgperf.event"]
                );
            }
        }
        let host = &resources[2].scope_metrics[0].metrics;
        let events = host
            .iter()
            .find(|m| m.name == "cgperf_events_total")
            .expect("events");
        assert_eq!(points(events).len(), 2, "the third cgroup's");
        assert!(host.iter().any(|m| m.name == "cgperf_collections_total"));
        assert_eq!(
            count_points(&requests),
            count_points(&batcher(MAX_REQUEST_BYTES).requests(&snapshot(3, 2), None))
        );
    }

    /// Thousands of pods: requests stay under the limit, every point
    /// arrives once, and a pod split over two requests names itself in
    /// both.
    #[test]
    fn many_pods_split_under_the_limit() {
        let snap = pod_snapshot(5_000, 10, 5_000);
        let all = count_points(&batcher(MAX_REQUEST_BYTES).requests(&snapshot(5_000, 10), None));
        for limit in [MAX_REQUEST_BYTES, 100_000, 1_000] {
            let requests = batcher(limit).requests(&snap, None);
            assert_eq!(count_points(&requests), all, "limit {limit}");
            let declared: u64 = requests.iter().map(|r| r.points).sum();
            assert_eq!(declared as usize, all);
            for r in &requests {
                assert!(r.message.encoded_len() <= limit, "limit {limit}");
                for rm in &r.message.resource_metrics {
                    let resource = &rm.resource.as_ref().expect("resource").attributes;
                    let id = resource.iter().find(|a| a.key == "container.id").map(|a| {
                        let Some(any_value::Value::StringValue(id)) =
                            a.value.as_ref().and_then(|v| v.value.as_ref())
                        else {
                            panic!("container.id is a string");
                        };
                        usize::from_str_radix(id, 16).expect("hex id")
                    });
                    for p in rm.scope_metrics[0].metrics.iter().flat_map(points) {
                        let Some(path) = p.attributes.iter().find(|a| a.key == "cgroup.path")
                        else {
                            continue;
                        };
                        // Pods are the cgroups numbered below 5,000: all.
                        let pod = match path.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(any_value::Value::StringValue(p)) => p.clone(),
                            _ => panic!("cgroup.path is a string"),
                        };
                        assert_eq!(
                            id.map(|n| format!("/kubepods.slice/pod{n:06}.slice")),
                            Some(pod)
                        );
                    }
                }
            }
        }
    }
}
