//! The OTLP push as a collector sees it: the real cgperf binary counting on
//! the real kernel, pushing to OTLP receivers built here on the official
//! protos — a tonic `MetricsServiceServer` with the collector's default
//! 4 MiB message limit, and an HTTP handler for `POST /v1/metrics` — all on
//! loopback, every wait bounded.

mod common;

use cgperf::config::{OtlpConfig, OtlpProtocol};
use cgperf::exporter::otlp::{self, OtlpStats};
use cgperf::snapshot::{CounterSample, Latest, SeriesKey, Snapshot};
use common::*;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, ResourceMetrics, metric, number_data_point,
};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The limit collectors apply to gRPC messages by default.
const GRPC_LIMIT: usize = 4 << 20;

/// One request as a receiver got it.
#[derive(Clone)]
struct Received {
    message: ExportMetricsServiceRequest,
    headers: BTreeMap<String, String>,
    /// Decoded (uncompressed) size.
    size: usize,
    at: Instant,
    /// The status answered (HTTP code; 200 for gRPC).
    status: u16,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Received>>>);

impl Log {
    fn push(&self, r: Received) {
        self.0.lock().expect("log lock").push(r);
    }

    fn all(&self) -> Vec<Received> {
        self.0.lock().expect("log lock").clone()
    }

    /// The requests that were accepted.
    fn accepted(&self) -> Vec<Received> {
        self.all().into_iter().filter(|r| r.status == 200).collect()
    }
}

/// A running OTLP receiver.
struct Receiver {
    addr: SocketAddr,
    log: Log,
    _runtime: tokio::runtime::Runtime,
}

fn headers_of(map: &http::HeaderMap) -> BTreeMap<String, String> {
    map.iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[derive(Clone)]
struct GrpcSink {
    log: Log,
    /// Requests still to refuse, throttled with the largest `RetryInfo`
    /// delay the protocol can express, before accepting.
    throttled: Arc<Mutex<usize>>,
}

/// The status code logged for a refused gRPC request.
const GRPC_THROTTLED: u16 = tonic::Code::ResourceExhausted as u16;

/// A `google.rpc.Status` of `code` carrying a `google.rpc.RetryInfo` of
/// `seconds`, encoded field by field as a collector sends it.
fn retry_info_details(code: tonic::Code, seconds: i64) -> Vec<u8> {
    use prost::encoding::{bytes, int32, int64, string};
    let mut delay = Vec::new();
    int64::encode(1, &seconds, &mut delay);
    let mut info = Vec::new();
    bytes::encode(1, &delay, &mut info);
    let mut any = Vec::new();
    string::encode(
        1,
        &"type.googleapis.com/google.rpc.RetryInfo".to_owned(),
        &mut any,
    );
    bytes::encode(2, &info, &mut any);
    let mut status = Vec::new();
    int32::encode(1, &(code as i32), &mut status);
    bytes::encode(3, &any, &mut status);
    status
}

#[tonic::async_trait]
impl MetricsService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let headers = headers_of(&request.metadata().clone().into_headers());
        let message = request.into_inner();
        let refuse = {
            let mut left = self.throttled.lock().expect("throttle lock");
            let refuse = *left > 0;
            *left = left.saturating_sub(1);
            refuse
        };
        self.log.push(Received {
            size: message.encoded_len(),
            message,
            headers,
            at: Instant::now(),
            status: if refuse { GRPC_THROTTLED } else { 200 },
        });
        if refuse {
            let code = tonic::Code::ResourceExhausted;
            return Err(tonic::Status::with_details(
                code,
                "slow down",
                retry_info_details(code, i64::MAX).into(),
            ));
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// A gRPC receiver on `listener`, with the collector's default limit.
fn grpc_receiver(listener: TcpListener) -> Receiver {
    grpc_receiver_throttling(listener, 0)
}

/// A gRPC receiver that refuses its first `throttled` requests.
fn grpc_receiver_throttling(listener: TcpListener, throttled: usize) -> Receiver {
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    let log = Log::default();
    let sink = GrpcSink {
        log: log.clone(),
        throttled: Arc::new(Mutex::new(throttled)),
    };
    let service = MetricsServiceServer::new(sink)
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(GRPC_LIMIT);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
    });
    Receiver {
        addr,
        log,
        _runtime: runtime,
    }
}

/// How the HTTP receiver answers a request.
#[derive(Clone, Copy)]
enum Answer {
    /// An error status, with a `Retry-After` value.
    Fail(u16, Option<&'static str>),
    /// 200 with a partial success rejecting this many points.
    Partial(i64),
}

/// Answers the HTTP receiver gives, in order, before plain 200s.
type Script = Arc<Mutex<VecDeque<Answer>>>;

/// An OTLP/HTTP receiver: `POST /v1/metrics`, gzip or plain protobuf.
fn http_receiver(script: Vec<Answer>) -> Receiver {
    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::{HeaderMap, StatusCode, header};
    use axum::response::IntoResponse;

    async fn export(
        State((log, script)): State<(Log, Script)>,
        headers: HeaderMap,
        body: Bytes,
    ) -> axum::response::Response {
        let gzipped = headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| v == "gzip");
        let mut raw = Vec::new();
        if gzipped {
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut raw)
                .expect("gzip body");
        } else {
            raw = body.to_vec();
        }
        let message = ExportMetricsServiceRequest::decode(raw.as_slice()).expect("protobuf body");
        let answer = script
            .lock()
            .expect("script lock")
            .pop_front()
            .unwrap_or(Answer::Partial(0));
        let status = match answer {
            Answer::Fail(status, _) => status,
            Answer::Partial(_) => 200,
        };
        log.push(Received {
            message,
            headers: headers_of(&headers),
            size: raw.len(),
            at: Instant::now(),
            status,
        });
        match answer {
            Answer::Partial(rejected) => {
                let partial = (rejected > 0).then(|| ExportMetricsPartialSuccess {
                    rejected_data_points: rejected,
                    error_message: "points too old".into(),
                });
                let body = ExportMetricsServiceResponse {
                    partial_success: partial,
                }
                .encode_to_vec();
                ([(header::CONTENT_TYPE, "application/x-protobuf")], body).into_response()
            }
            Answer::Fail(status, retry_after) => {
                let status = StatusCode::from_u16(status).expect("status");
                let mut response = (status, "try later").into_response();
                if let Some(after) = retry_after {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, after.parse().expect("header value"));
                }
                response
            }
        }
    }

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    let log = Log::default();
    let state = (log.clone(), Arc::new(Mutex::new(script.into())));
    let app = axum::Router::new()
        .route("/v1/metrics", axum::routing::post(export))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        axum::serve(listener, app).await
    });
    Receiver {
        addr,
        log,
        _runtime: runtime,
    }
}

/// One data point, flattened.
#[derive(Debug, Clone)]
struct Point {
    metric: String,
    unit: String,
    /// `Some(monotonic)` for a cumulative Sum, `None` for a Gauge.
    sum: Option<bool>,
    attributes: BTreeMap<String, String>,
    /// Its resource's attributes.
    resource: BTreeMap<String, String>,
    value: f64,
    start: u64,
    time: u64,
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => panic!("unexpected attribute value {other:?}"),
    }
}

fn points(received: &[Received]) -> Vec<Point> {
    let mut out = Vec::new();
    for r in received {
        for rm in &r.message.resource_metrics {
            let resource = attributes_of(rm);
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let (sum, data_points) = match &m.data {
                        Some(metric::Data::Sum(s)) => {
                            assert_eq!(
                                s.aggregation_temporality,
                                AggregationTemporality::Cumulative as i32,
                                "{}",
                                m.name
                            );
                            (Some(s.is_monotonic), &s.data_points)
                        }
                        Some(metric::Data::Gauge(g)) => (None, &g.data_points),
                        other => panic!("unexpected data {other:?}"),
                    };
                    for p in data_points {
                        let Some(number_data_point::Value::AsDouble(value)) = p.value else {
                            panic!("double values");
                        };
                        out.push(Point {
                            metric: m.name.clone(),
                            unit: m.unit.clone(),
                            sum,
                            attributes: p
                                .attributes
                                .iter()
                                .map(|a| (a.key.clone(), text(a)))
                                .collect(),
                            resource: resource.clone(),
                            value,
                            start: p.start_time_unix_nano,
                            time: p.time_unix_nano,
                        });
                    }
                }
            }
        }
    }
    out
}

/// The attributes of the resource of `rm`.
fn attributes_of(rm: &ResourceMetrics) -> BTreeMap<String, String> {
    rm.resource
        .as_ref()
        .expect("resource")
        .attributes
        .iter()
        .map(|a| (a.key.clone(), text(a)))
        .collect()
}

/// The resource attributes of the first request.
fn resource(received: &[Received]) -> BTreeMap<String, String> {
    attributes_of(&received[0].message.resource_metrics[0])
}

/// Polls `f` until it gives a value, for at most `secs` seconds.
fn wait<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The latest point of `metric` whose attributes include `want`.
fn latest(received: &[Received], metric: &str, want: &[(&str, &str)]) -> Option<Point> {
    points(received)
        .into_iter()
        .filter(|p| {
            p.metric == metric
                && want
                    .iter()
                    .all(|(k, v)| p.attributes.get(*k).map(String::as_str) == Some(*v))
        })
        .max_by_key(|p| p.time)
}

const GETPPID: &str = "syscalls:sys_enter_getppid";

fn tracepoint_config(cgroups: &str, otlp: &str) -> String {
    format!(
        "interval: 100ms\ntracepoints: [{GETPPID}]\n\
         metrics:\n  - {{name: calls, expr: \"{GETPPID}\", unit: calls}}\n\
         cgroups:\n{cgroups}{otlp}"
    )
}

/// A workload of exactly `N` getppid calls in a fresh cgroup arrives at the
/// receiver as exactly `N`, the value `/metrics` shows, with the same
/// attributes.
fn exact_count_arrives(name: &str, receiver: &Receiver, start: impl FnOnce(&str) -> Exporter) {
    const N: u64 = 4321;
    let cg = TestCgroup::create(name);
    let exporter = start(&format!("  - path: {}\n", cg.rel));
    exporter.wait_collections(1);
    getppid_workload(Some(&cg.dir), N);
    let want = [("cgroup", cg.rel.as_str()), ("event", GETPPID)];
    let body = exporter.wait_for("the workload on /metrics", |b| {
        value(b, "cgperf_events_total", &want) == Some(N as f64)
    });
    // The same series under OpenTelemetry's names.
    let otlp_want = [("cgroup.path", cg.rel.as_str()), ("cgperf.event", GETPPID)];
    let point = wait("the workload at the receiver", 20, || {
        latest(&receiver.log.accepted(), "cgperf_events_total", &otlp_want)
            .filter(|p| p.value == N as f64)
    });
    assert_eq!(
        Some(point.value),
        value(&body, "cgperf_events_total", &want)
    );
    assert_eq!(point.sum, Some(true), "a monotonic cumulative sum");
    let keys: Vec<&str> = point.attributes.keys().map(String::as_str).collect();
    assert_eq!(keys, ["cgperf.event", "cgperf.group", "cgroup.path"]);
    assert_eq!(point.attributes["cgperf.group"], "tracepoints");
    assert_eq!(point.unit, "{event}");
    assert!(0 < point.start && point.start <= point.time, "{point:?}");
    // The metric: a gauge per cgroup, the calls of the interval before the
    // push (0 once the workload is done; the push, slower than the
    // interval, need not see the interval of the calls), and its
    // description.
    let metric = wait("the metric at the receiver", 20, || {
        latest(
            &receiver.log.accepted(),
            "cgperf_metric",
            &[("cgroup.path", cg.rel.as_str())],
        )
    });
    assert_eq!(metric.sum, None, "a gauge");
    assert!(metric.value <= N as f64, "{metric:?}");
    let keys: Vec<&str> = metric.attributes.keys().map(String::as_str).collect();
    assert_eq!(keys, ["cgperf.metric", "cgroup.path"]);
    assert_eq!(metric.attributes["cgperf.metric"], "calls");
    let info = latest(
        &receiver.log.accepted(),
        "cgperf_metric_definition_info",
        &[("cgperf.metric", "calls")],
    )
    .expect("the metric's description");
    assert_eq!(info.attributes["cgperf.description"], GETPPID);
    assert_eq!(info.attributes["cgperf.unit"], "calls");
    let received = receiver.log.accepted();
    let all = points(&received);
    let gauge = all
        .iter()
        .find(|p| p.metric == "cgperf_monitored_cgroups")
        .expect("monitored cgroups");
    assert_eq!(gauge.sum, None, "gauges stay gauges");
    let duration = all
        .iter()
        .find(|p| p.metric == "cgperf_collection_duration_seconds")
        .expect("collection duration");
    assert_eq!(duration.unit, "s");
    let body = exporter.wait_for("the exporter's own counters", |b| {
        value(b, "cgperf_otlp_exports_total", &[]).unwrap_or(0.0) > 0.0
            && value(b, "cgperf_otlp_exported_points_total", &[]).unwrap_or(0.0) > 0.0
    });
    assert_eq!(
        value(
            &body,
            "cgperf_otlp_export_failures_total",
            &[("reason", "rejected")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&body, "cgperf_otlp_pushes_deferred_total", &[]),
        Some(0.0),
        "present from the start"
    );
}

#[test]
fn grpc_push_carries_the_exact_count_that_metrics_serves() {
    let receiver = grpc_receiver(TcpListener::bind("127.0.0.1:0").expect("bind"));
    let addr = receiver.addr;
    exact_count_arrives("cgperf-otlp-grpc", &receiver, |cgroups| {
        let otlp = format!(
            "otlp:\n  endpoint: http://{addr}\n  protocol: grpc\n  interval: 200ms\n  \
             headers:\n    Authorization: Bearer secret\n  resource:\n    team: perf\n"
        );
        Exporter::start_with_env(&tracepoint_config(cgroups, &otlp), &[])
    });
    let received = receiver.log.accepted();
    assert_eq!(received[0].headers["authorization"], "Bearer secret");
    assert_eq!(received[0].headers["grpc-encoding"], "gzip");
    let resource = resource(&received);
    assert_eq!(resource["service.name"], "cgperf");
    assert_eq!(resource["service.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(resource["team"], "perf");
    assert!(!resource["host.name"].is_empty());
    assert_eq!(resource["service.instance.id"], resource["host.name"]);
}

/// A cgroup whose name is not UTF-8 arrives under the escaped path that
/// `/metrics` shows, with its exact count.
#[test]
fn a_cgroup_whose_name_is_not_utf8_arrives_under_its_escaped_path() {
    use std::os::unix::ffi::OsStrExt;
    const N: u64 = 1234;
    let parent = TestCgroup::create("cgperf-otlp-bytes");
    let odd = TestCgroup {
        rel: format!("{}/caf\\xE9", parent.rel),
        dir: parent.dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9")),
    };
    std::fs::create_dir(&odd.dir).expect("mkdir a cgroup named with invalid UTF-8");
    let receiver = grpc_receiver(TcpListener::bind("127.0.0.1:0").expect("bind"));
    let otlp = format!(
        "otlp:\n  endpoint: http://{}\n  interval: 200ms\n",
        receiver.addr
    );
    let cgroups = format!("  - match: {}/*\n", parent.rel);
    let exporter = Exporter::start_with_env(&tracepoint_config(&cgroups, &otlp), &[]);
    // The exposition doubles the backslash.
    let exposed = format!("{}/caf\\\\xE9", parent.rel);
    exporter.wait_for("the cgroup's series", |b| getppid_of(b, &exposed).is_some());
    getppid_workload(Some(&odd.dir), N);
    exporter.wait_for("the workload on /metrics", |b| {
        getppid_of(b, &exposed) == Some(N as f64)
    });
    let want = [("cgroup.path", odd.rel.as_str()), ("cgperf.event", GETPPID)];
    wait("the workload at the receiver", 20, || {
        latest(&receiver.log.accepted(), "cgperf_events_total", &want)
            .filter(|p| p.value == N as f64)
    });
}

/// A container's points arrive in a resource of their own that names it
/// (`container.id`, `container.runtime.name`, with cgperf's own
/// attributes), as kubeletstats sends them and as the collector's
/// `k8sattributes` processor expects; the points do not repeat it. A
/// cgroup outside any container stays on cgperf's resource.
#[test]
fn a_container_is_a_resource_of_its_own() {
    const N: u64 = 2345;
    let id = "4f79c2b8d0e1a3f5".repeat(4);
    let parent = TestCgroup::create("cgperf-otlp-resource");
    let container = TestCgroup::create_under(&parent.rel, &format!("cri-containerd-{id}.scope"));
    let receiver = grpc_receiver(TcpListener::bind("127.0.0.1:0").expect("bind"));
    let otlp = format!(
        "otlp:\n  endpoint: http://{}\n  interval: 200ms\n",
        receiver.addr
    );
    let cgroups = format!("  - path: {}\n  - path: {}\n", parent.rel, container.rel);
    let exporter = Exporter::start_with_env(
        &format!(
            "labels: [containers]\n{}",
            tracepoint_config(&cgroups, &otlp)
        ),
        &[("OTEL_RESOURCE_ATTRIBUTES", "k8s.node.name=node-1")],
    );
    exporter.wait_collections(1);
    getppid_workload(Some(&container.dir), N);
    let point = wait("the container's count at the receiver", 20, || {
        latest(
            &receiver.log.accepted(),
            "cgperf_events_total",
            &[("cgroup.path", &container.rel), ("cgperf.event", GETPPID)],
        )
        .filter(|p| p.value == N as f64)
    });
    assert_eq!(point.resource["container.id"], id);
    assert_eq!(point.resource["container.runtime.name"], "containerd");
    assert_eq!(point.resource["service.name"], "cgperf");
    assert_eq!(point.resource["k8s.node.name"], "node-1");
    let keys: Vec<&str> = point.attributes.keys().map(String::as_str).collect();
    assert_eq!(keys, ["cgperf.event", "cgperf.group", "cgroup.path"]);
    let outside = latest(
        &receiver.log.accepted(),
        "cgperf_events_total",
        &[("cgroup.path", &parent.rel)],
    )
    .expect("the parent's series");
    assert!(
        !outside.resource.contains_key("container.id"),
        "{outside:?}"
    );
    assert_eq!(outside.resource["k8s.node.name"], "node-1");
}

/// `OTEL_METRICS_EXPORTER=console` writes each push to standard output as
/// cgperf started on `yaml` with `OTEL_METRICS_EXPORTER=console`, and the
/// OTLP/JSON lines it prints on standard output, each parsed (a line that is
/// not OTLP/JSON fails the test).
fn console_exporter(yaml: &str) -> (Exporter, Log) {
    let (exporter, stdout) = Exporter::start_with_env_and_stdout(
        yaml,
        &[
            ("OTEL_METRICS_EXPORTER", "console"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
        ],
    );
    let log = Log::default();
    let lines = log.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.expect("a line of standard output");
            let message: ExportMetricsServiceRequest = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not OTLP/JSON ({e}): {line}"));
            lines.push(Received {
                message,
                headers: BTreeMap::new(),
                size: line.len(),
                at: Instant::now(),
                status: 200,
            });
        }
    });
    (exporter, log)
}

/// OTLP/JSON lines, without any collector, carrying the exact count.
#[test]
fn the_console_exporter_prints_otlp_json_with_the_exact_count() {
    const N: u64 = 3456;
    let cg = TestCgroup::create("cgperf-otlp-console");
    let (exporter, log) =
        console_exporter(&tracepoint_config(&format!("  - path: {}\n", cg.rel), ""));
    exporter.wait_collections(1);
    getppid_workload(Some(&cg.dir), N);
    let want = [("cgroup.path", cg.rel.as_str()), ("cgperf.event", GETPPID)];
    let point = wait("the workload on standard output", 20, || {
        latest(&log.accepted(), "cgperf_events_total", &want).filter(|p| p.value == N as f64)
    });
    assert_eq!(point.sum, Some(true));
    assert_eq!(point.unit, "{event}");
    assert_eq!(point.resource["service.name"], "cgperf");
    let body = exporter.scrape();
    assert_eq!(
        value(
            &body,
            "cgperf_otlp_export_failures_total",
            &[("reason", "unreachable")]
        ),
        Some(0.0)
    );
}

#[test]
fn http_push_configured_by_the_environment_carries_the_exact_count() {
    let receiver = http_receiver(Vec::new());
    let endpoint = format!("http://{}", receiver.addr);
    exact_count_arrives("cgperf-otlp-http", &receiver, |cgroups| {
        Exporter::start_with_env(
            &tracepoint_config(cgroups, ""),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team%201"),
                ("OTEL_SERVICE_NAME", "cgperf-test"),
            ],
        )
    });
    let received = receiver.log.accepted();
    assert_eq!(received[0].headers["content-encoding"], "gzip");
    assert_eq!(
        received[0].headers["content-type"],
        "application/x-protobuf"
    );
    assert_eq!(received[0].headers["x-tenant"], "team 1");
    assert_eq!(resource(&received)["service.name"], "cgperf-test");
}

#[test]
fn cgroups_created_later_start_new_series() {
    let parent = TestCgroup::create("cgperf-otlp-late");
    let receiver = grpc_receiver(TcpListener::bind("127.0.0.1:0").expect("bind"));
    let otlp = format!(
        "otlp:\n  endpoint: http://{}\n  interval: 200ms\n",
        receiver.addr
    );
    let cgroups = format!("  - path: /\n  - match: {}/*\n", parent.rel);
    let exporter = Exporter::start_with_env(&tracepoint_config(&cgroups, &otlp), &[]);
    let series = |cgroup: &str| {
        latest(
            &receiver.log.accepted(),
            "cgperf_events_total",
            &[("cgroup.path", cgroup), ("cgperf.event", GETPPID)],
        )
    };
    let root = wait("the root cgroup's series", 20, || series("/"));
    std::thread::sleep(Duration::from_millis(50));
    let child = TestCgroup::create_under(&parent.rel, "late");
    let first = wait("the late cgroup's series", 20, || series(&child.rel));
    assert!(first.start > root.start, "{first:?} vs {root:?}");
    assert!(first.start <= first.time);
    // Removed and created again: a new series, with a new start.
    child.remove();
    exporter.wait_for("the removed cgroup to vanish", |b| {
        value(b, "cgperf_events_total", &[("cgroup", &child.rel)]).is_none()
    });
    let again = TestCgroup::create_under(&parent.rel, "late");
    let second = wait("the recreated cgroup's series", 20, || {
        series(&again.rel).filter(|p| p.start > first.start)
    });
    assert!(second.start > first.time, "{second:?} vs {first:?}");
    // The root's series kept its start all along.
    assert_eq!(series("/").map(|p| p.start), Some(root.start));
}

#[test]
fn collector_down_at_start_gets_data_once_it_is_up() {
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let cg = TestCgroup::create("cgperf-otlp-down");
    let otlp = format!("otlp:\n  endpoint: http://127.0.0.1:{port}\n  interval: 200ms\n");
    let exporter = Exporter::start_with_env(
        &tracepoint_config(&format!("  - path: {}\n", cg.rel), &otlp),
        &[],
    );
    let body = exporter.wait_for("failed exports to be counted", |b| {
        value(
            b,
            "cgperf_otlp_export_failures_total",
            &[("reason", "unreachable")],
        )
        .unwrap_or(0.0)
            > 0.0
    });
    // Sampling goes on while the collector is down.
    let before = value(&body, "cgperf_collections_total", &[]).expect("collections");
    exporter.wait_collections(3);
    let receiver = grpc_receiver(TcpListener::bind(("127.0.0.1", port)).expect("rebind the port"));
    wait("data at the receiver that came up", 20, || {
        latest(
            &receiver.log.accepted(),
            "cgperf_events_total",
            &[("cgroup.path", &cg.rel)],
        )
    });
    let body = exporter.wait_for("successful exports to be counted", |b| {
        value(b, "cgperf_otlp_exports_total", &[]).unwrap_or(0.0) > 0.0
    });
    assert!(value(&body, "cgperf_collections_total", &[]).expect("collections") >= before + 3.0);
    let pushed = points(&receiver.log.accepted());
    let failures = pushed
        .iter()
        .filter(|p| p.metric == "cgperf_otlp_export_failures_total")
        .map(|p| p.value)
        .fold(0.0, f64::max);
    assert!(failures > 0.0, "the push carries the failure counter too");
}

/// Refusals the receivers below answer before they accept again.
const REFUSALS: usize = 3;

/// cgperf pushing every 200 ms to a receiver that refuses the first
/// [`REFUSALS`] requests asking to wait for ever: each refused push is
/// deferred to the next (no wait can overflow a clock or silence the push),
/// counted, and the push after the last refusal arrives with the counts.
fn endless_wait_defers_one_push_at_a_time(receiver: &Receiver, otlp: &str, reason: &str) {
    let exporter = Exporter::start_with_env(&tracepoint_config("  - path: /\n", otlp), &[]);
    let n = REFUSALS as f64;
    let pushed = wait("an accepted push after the refusals", 20, || {
        latest(
            &receiver.log.accepted(),
            "cgperf_otlp_pushes_deferred_total",
            &[],
        )
    });
    assert_eq!(pushed.value, n, "the push carries the deferrals");
    // Each refusal ended its push at once: no retry used up a refusal.
    let refused = receiver.log.all().len() - receiver.log.accepted().len();
    assert_eq!(refused, REFUSALS);
    // The daemon lives on and keeps pushing.
    let before = receiver.log.accepted().len();
    wait("later pushes", 20, || {
        (receiver.log.accepted().len() > before).then_some(())
    });
    let body = exporter.wait_collections(1);
    assert_eq!(
        value(&body, "cgperf_otlp_pushes_deferred_total", &[]),
        Some(n)
    );
    assert_eq!(
        value(
            &body,
            "cgperf_otlp_export_failures_total",
            &[("reason", reason)]
        ),
        Some(n)
    );
}

#[test]
fn http_retry_after_of_2_pow_64_defers_pushes_and_they_resume() {
    let receiver = http_receiver(vec![
        Answer::Fail(503, Some("18446744073709551615"));
        REFUSALS
    ]);
    let otlp = format!(
        "otlp:\n  endpoint: http://{}\n  protocol: http/protobuf\n  interval: 200ms\n",
        receiver.addr
    );
    endless_wait_defers_one_push_at_a_time(&receiver, &otlp, "unavailable");
}

#[test]
fn grpc_retry_info_of_i64_max_seconds_defers_pushes_and_they_resume() {
    let receiver =
        grpc_receiver_throttling(TcpListener::bind("127.0.0.1:0").expect("bind"), REFUSALS);
    let otlp = format!(
        "otlp:\n  endpoint: http://{}\n  interval: 200ms\n",
        receiver.addr
    );
    endless_wait_defers_one_push_at_a_time(&receiver, &otlp, "throttled");
}

#[test]
fn a_collector_that_never_answers_blocks_nothing() {
    // The kernel accepts the connection; nobody ever reads or answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let otlp = format!("otlp:\n  endpoint: http://{addr}\n  interval: 200ms\n  timeout: 300ms\n");
    let exporter = Exporter::start_with_env(&tracepoint_config("  - path: /\n", &otlp), &[]);
    exporter.wait_for("timeouts to be counted", |b| {
        value(
            b,
            "cgperf_otlp_export_failures_total",
            &[("reason", "timeout")],
        )
        .unwrap_or(0.0)
            > 0.0
    });
    let started = Instant::now();
    exporter.wait_collections(5);
    // 5 collections at 100ms take about 0.5 s, however long the exports
    // hang.
    assert!(started.elapsed() < Duration::from_secs(5));
    let scrape = Instant::now();
    exporter.scrape();
    assert!(scrape.elapsed() < Duration::from_secs(1));
    drop(silent);
}

#[test]
fn sigterm_flushes_the_latest_snapshot() {
    let receiver = http_receiver(Vec::new());
    let otlp = format!(
        "otlp:\n  endpoint: http://{}\n  protocol: http/protobuf\n  interval: 1h\n",
        receiver.addr
    );
    let mut exporter = Exporter::start_with_env(&tracepoint_config("  - path: /\n", &otlp), &[]);
    let body = exporter.wait_collections(3);
    let collections = value(&body, "cgperf_collections_total", &[]).expect("collections");
    assert!(exporter.terminate(), "cgperf exits cleanly");
    let pushed = latest(&receiver.log.accepted(), "cgperf_collections_total", &[])
        .expect("the final push arrived before exit");
    assert!(pushed.value >= collections, "{pushed:?}");
}

/// A synthetic snapshot of `cgroups` × `events` tracepoint series.
fn synthetic(cgroups: usize, events: usize) -> Snapshot {
    let mut snap = Snapshot::empty();
    snap.collections = 1;
    for c in 0..cgroups {
        let cgroup: Arc<str> =
            format!("/kubepods.slice/kubepods-burstable.slice/pod{c:05}.slice").into();
        for e in 0..events {
            snap.counters.push(CounterSample::new(
                SeriesKey {
                    fields: Box::new([]),
                    cgroup: cgroup.clone(),
                    labels: Arc::from(Vec::new()),
                    group: "tracepoints".into(),
                    event: format!("syscalls:sys_enter_call{e:03}").into(),
                    cpu: None,
                    clock: false,
                    start_time: snap.taken_at,
                },
                (c * events + e) as f64,
            ));
        }
    }
    snap
}

fn push_config(protocol: OtlpProtocol, url: String) -> OtlpConfig {
    OtlpConfig {
        url,
        protocol,
        interval: Duration::from_secs(10),
        timeout: Duration::from_secs(10),
        headers: Vec::new(),
        resource: Vec::new(),
        console: false,
    }
}

/// Starts the pusher on `snapshot` against `url`, outside any cgperf
/// process: for what depends on the snapshot's size or the receiver's
/// answers, not on counting.
fn push_snapshot(
    protocol: OtlpProtocol,
    url: String,
    snapshot: Snapshot,
) -> (otlp::Pusher, Arc<OtlpStats>) {
    let latest = Latest::new();
    latest.publish(snapshot);
    let stats = Arc::new(OtlpStats::default());
    let pusher = otlp::start(
        push_config(protocol, url),
        latest,
        stats.clone(),
        SystemTime::now(),
    )
    .expect("pusher starts");
    (pusher, stats)
}

#[test]
fn fifty_thousand_series_reach_a_4_mib_grpc_receiver_in_several_requests() {
    const CGROUPS: usize = 1_000;
    const EVENTS: usize = 50;
    let receiver = grpc_receiver(TcpListener::bind("127.0.0.1:0").expect("bind"));
    let (pusher, stats) = push_snapshot(
        OtlpProtocol::Grpc,
        format!("http://{}", receiver.addr),
        synthetic(CGROUPS, EVENTS),
    );
    let failed = || stats.failures().map(|(_, n)| n).sum::<u64>();
    wait("all 50k series, or a failure", 60, || {
        let n = points(&receiver.log.accepted())
            .iter()
            .filter(|p| p.metric == "cgperf_events_total")
            .count();
        (n >= CGROUPS * EVENTS || failed() > 0).then_some(())
    });
    assert_eq!(failed(), 0, "{:?}", stats.failures().collect::<Vec<_>>());
    // Once the pusher has seen every answer, stopping sends nothing more.
    wait("the pusher to see every answer", 20, || {
        (stats.exports() as usize >= receiver.log.accepted().len()).then_some(())
    });
    pusher.stop();
    let received = receiver.log.accepted();
    let series: BTreeSet<(String, String)> = points(&received)
        .into_iter()
        .filter(|p| p.metric == "cgperf_events_total")
        .map(|p| {
            (
                p.attributes["cgroup.path"].clone(),
                p.attributes["cgperf.event"].clone(),
            )
        })
        .collect();
    assert_eq!(series.len(), CGROUPS * EVENTS, "every series exactly once");
    let sizes: Vec<usize> = received.iter().map(|r| r.size).collect();
    let total: usize = sizes.iter().sum();
    eprintln!(
        "{} series in {} requests of {sizes:?} bytes ({:.1} bytes/point)",
        series.len(),
        sizes.len(),
        total as f64 / (CGROUPS * EVENTS) as f64
    );
    assert!(total > GRPC_LIMIT, "the snapshot needs splitting");
    assert!(sizes.len() > 1);
    assert!(sizes.iter().all(|s| *s <= GRPC_LIMIT), "{sizes:?}");
    assert_eq!(stats.exports(), sizes.len() as u64);
}

#[test]
fn retry_after_is_honoured() {
    let receiver = http_receiver(vec![
        Answer::Fail(503, Some("1")),
        Answer::Fail(429, Some("2")),
    ]);
    let (pusher, stats) = push_snapshot(
        OtlpProtocol::HttpProtobuf,
        format!("http://{}/v1/metrics", receiver.addr),
        synthetic(2, 2),
    );
    // Wait for the pusher to see the answer, not just for the receiver to
    // get the request: stopping earlier would rightly send it again.
    wait("the third attempt to succeed", 20, || {
        (stats.exports() > 0).then_some(())
    });
    pusher.stop();
    let attempts = receiver.log.all();
    let statuses: Vec<u16> = attempts.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [503, 429, 200]);
    // Without Retry-After, the first retries would come after 0.25–0.75 s
    // and 0.5–1.5 s.
    let gaps: Vec<Duration> = attempts.windows(2).map(|w| w[1].at - w[0].at).collect();
    assert!(gaps[0] >= Duration::from_secs(1), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_secs(2), "{gaps:?}");
    assert_eq!(stats.exports(), 1);
    assert_eq!(stats.failures().map(|(_, n)| n).sum::<u64>(), 0);
}

#[test]
fn partial_successes_are_counted() {
    let receiver = http_receiver(vec![Answer::Partial(3)]);
    let (pusher, stats) = push_snapshot(
        OtlpProtocol::HttpProtobuf,
        format!("http://{}/v1/metrics", receiver.addr),
        synthetic(2, 5),
    );
    wait("the export", 20, || (stats.exports() > 0).then_some(()));
    pusher.stop();
    let sent = points(&receiver.log.accepted()).len() as u64;
    assert_eq!(stats.rejected_points(), 3);
    assert_eq!(stats.exported_points(), sent - 3);
}

/// `energy:`'s families reach OTLP as cumulative sums in Joules (`J`),
/// with the meter's labels.
#[test]
fn energy_is_pushed_in_joules() {
    let cg = TestCgroup::create("cgperf-otlp-energy");
    let (exporter, log) = console_exporter(&format!(
        "interval: 200ms\ngroups: {{sched: [task-clock]}}\ncgroups:\n  - path: {}\n\
         energy: {{meter: model, model: {{idle_watts: 5, max_watts: 50}}}}\n",
        cg.rel
    ));
    exporter.wait_collections(1);
    spin_workload(&cg.dir, 300);
    let want = [("cgroup.path", cg.rel.as_str()), ("cgperf.source", "model")];
    let point = wait("the cgroup's energy on standard output", 20, || {
        latest(&log.accepted(), "cgperf_energy_joules_total", &want).filter(|p| p.value > 0.0)
    });
    assert_eq!(point.sum, Some(true));
    assert_eq!(point.unit, "J");
    let meter = wait("the meter on standard output", 20, || {
        latest(
            &log.accepted(),
            "cgperf_energy_meter_joules_total",
            &[("cgperf.domain", "pkg")],
        )
    });
    assert_eq!(meter.unit, "J");
    assert!(meter.value >= point.value, "{meter:?} {point:?}");
}
