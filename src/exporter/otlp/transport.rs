//! Sending one export request: OTLP/gRPC through tonic, OTLP/HTTP with
//! protobuf bodies through hyper's client, both gzip-compressed, https
//! through rustls with the system's trust store. Every failure becomes a
//! [`Failure`] with a bounded-cardinality [`Reason`] and, when the collector
//! said so, how long to wait.

use super::stats::Reason;
use crate::config::{OtlpConfig, OtlpProtocol};
use crate::exporter::gzip;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;
use std::io::Read;
use std::time::{Duration, SystemTime};
use tonic::codec::CompressionEncoding;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// Largest response body read (and inflated): an export response is a few
/// bytes; a misbehaving server must not make cgperf buffer more.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Why an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The `reason` label, which also says whether to retry.
    pub reason: Reason,
    /// The delay the collector asked for (`Retry-After`, gRPC `RetryInfo`).
    pub retry_after: Option<Duration>,
    /// What happened, for the log.
    pub detail: String,
}

impl Failure {
    fn new(reason: Reason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            retry_after: None,
            detail: detail.into(),
        }
    }

    /// The attempt did not finish within `timeout`.
    pub fn timed_out(timeout: Duration) -> Self {
        Self::new(
            Reason::Timeout,
            format!("no answer within {}", humantime(timeout)),
        )
    }
}

fn humantime(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// A connection to the collector.
#[derive(Debug)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc {
        /// Reconnects by itself after failures.
        client: MetricsServiceClient<Channel>,
        /// The configured headers.
        metadata: MetadataMap,
    },
    /// OTLP/HTTP over plain TCP.
    Http(HttpTransport<HttpConnector>),
    /// OTLP/HTTP over TLS.
    Https(HttpTransport<hyper_rustls::HttpsConnector<HttpConnector>>),
    /// No collector: each request is written to standard output as one
    /// line of OTLP/JSON, the collector's file exporter format.
    Console,
}

/// An http/protobuf client and what every request carries.
#[derive(Debug)]
pub struct HttpTransport<C> {
    client: Client<C, Full<Bytes>>,
    uri: Uri,
    headers: HeaderMap,
}

fn user_agent() -> String {
    format!("cgperf/{}", env!("CARGO_PKG_VERSION"))
}

impl Transport {
    /// A client for `config`. Connects lazily, so a collector that is down
    /// at start is no error. Must run inside a tokio runtime.
    pub fn new(config: &OtlpConfig) -> Result<Self, String> {
        if config.console {
            return Ok(Self::Console);
        }
        let https = config.url.to_ascii_lowercase().starts_with("https://");
        match config.protocol {
            OtlpProtocol::Grpc => grpc(config, https),
            OtlpProtocol::HttpProtobuf => {
                let uri: Uri = config
                    .url
                    .parse()
                    .map_err(|e| format!("OTLP endpoint {}: {e}", config.url))?;
                let mut headers = HeaderMap::new();
                for (name, value) in &config.headers {
                    let name = HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| format!("OTLP header {name}: {e}"))?;
                    let value = HeaderValue::from_str(value)
                        .map_err(|e| format!("OTLP header {name}: {e}"))?;
                    headers.insert(name, value);
                }
                let static_headers = [
                    (header::CONTENT_TYPE, "application/x-protobuf"),
                    (header::CONTENT_ENCODING, "gzip"),
                    (header::ACCEPT_ENCODING, "gzip"),
                ];
                for (name, value) in static_headers {
                    headers.insert(name, HeaderValue::from_static(value));
                }
                let agent = HeaderValue::from_str(&user_agent()).map_err(|e| e.to_string())?;
                headers.insert(header::USER_AGENT, agent);
                let mut http = HttpConnector::new();
                http.set_connect_timeout(Some(config.timeout));
                http.set_nodelay(true);
                http.enforce_http(!https);
                if https {
                    let connector = hyper_rustls::HttpsConnectorBuilder::new()
                        .with_native_roots()
                        .map_err(|e| format!("no CA certificates for https: {e}"))?
                        .https_only()
                        .enable_http1()
                        .wrap_connector(http);
                    Ok(Self::Https(HttpTransport::new(connector, uri, headers)))
                } else {
                    Ok(Self::Http(HttpTransport::new(http, uri, headers)))
                }
            }
        }
    }

    /// Sends one request, once.
    pub async fn export(
        &mut self,
        request: &ExportMetricsServiceRequest,
    ) -> Result<ExportMetricsServiceResponse, Failure> {
        match self {
            Self::Grpc { client, metadata } => {
                let mut grpc_request = tonic::Request::new(request.clone());
                *grpc_request.metadata_mut() = metadata.clone();
                client
                    .export(grpc_request)
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|status| grpc_failure(&status))
            }
            Self::Http(t) => t.export(request).await,
            Self::Https(t) => t.export(request).await,
            Self::Console => console(request),
        }
    }
}

/// Writes `request` to standard output as one line of OTLP/JSON. A closed
/// or full standard output fails the request like an unreachable
/// collector: counted, and the next push tries again.
fn console(request: &ExportMetricsServiceRequest) -> Result<ExportMetricsServiceResponse, Failure> {
    use std::io::Write;
    let mut line = serde_json::to_vec(request)
        .map_err(|e| Failure::new(Reason::Rejected, format!("OTLP/JSON: {e}")))?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line)
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(Reason::Unreachable, format!("standard output: {e}")))?;
    Ok(ExportMetricsServiceResponse::default())
}

fn grpc(config: &OtlpConfig, https: bool) -> Result<Transport, String> {
    let error = |e: tonic::transport::Error| format!("OTLP endpoint {}: {e}", config.url);
    let mut endpoint = Endpoint::from_shared(config.url.clone())
        .map_err(error)?
        .connect_timeout(config.timeout)
        .timeout(config.timeout)
        .tcp_nodelay(true)
        .user_agent(user_agent())
        .map_err(error)?;
    if https {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_native_roots())
            .map_err(error)?;
    }
    let mut metadata = MetadataMap::new();
    for (name, value) in &config.headers {
        let key = AsciiMetadataKey::from_bytes(name.as_bytes())
            .map_err(|e| format!("OTLP header {name}: {e}"))?;
        let value =
            AsciiMetadataValue::try_from(value).map_err(|e| format!("OTLP header {name}: {e}"))?;
        metadata.insert(key, value);
    }
    let client = MetricsServiceClient::new(endpoint.connect_lazy())
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    Ok(Transport::Grpc { client, metadata })
}

impl<C: Connect + Clone + Send + Sync + 'static> HttpTransport<C> {
    fn new(connector: C, uri: Uri, headers: HeaderMap) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            uri,
            headers,
        }
    }

    async fn export(
        &self,
        request: &ExportMetricsServiceRequest,
    ) -> Result<ExportMetricsServiceResponse, Failure> {
        let body = gzip(&request.encode_to_vec())
            .map_err(|e| Failure::new(Reason::Rejected, format!("compressing: {e}")))?;
        let mut http_request = http::Request::new(Full::new(Bytes::from(body)));
        *http_request.method_mut() = Method::POST;
        *http_request.uri_mut() = self.uri.clone();
        *http_request.headers_mut() = self.headers.clone();
        let response = self.client.request(http_request).await.map_err(|e| {
            let reason = if e.is_connect() {
                Reason::Unreachable
            } else {
                Reason::Unavailable
            };
            Failure::new(reason, error_chain(&e))
        })?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| Failure::new(Reason::Unavailable, format!("reading the response: {e}")));
        let gzipped = parts
            .headers
            .get(header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let body = body.and_then(|b| {
            if gzipped {
                gunzip(&b).map_err(|e| {
                    Failure::new(Reason::Unavailable, format!("inflating the response: {e}"))
                })
            } else {
                Ok(b.to_vec())
            }
        });
        if parts.status.is_success() {
            return ExportMetricsServiceResponse::decode(body?.as_slice()).map_err(|e| {
                Failure::new(
                    Reason::Rejected,
                    format!("undecodable export response: {e}"),
                )
            });
        }
        let retry_after = parts
            .headers
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        Err(http_failure(
            parts.status,
            retry_after,
            &body.unwrap_or_default(),
        ))
    }
}

/// Classifies an HTTP error answer per the OTLP/HTTP spec: 429, 502, 503
/// and 504 may be retried; anything else is final.
fn http_failure(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> Failure {
    let reason = match status.as_u16() {
        429 => Reason::Throttled,
        502..=504 => Reason::Unavailable,
        _ => Reason::Rejected,
    };
    // The spec's error body is a google.rpc.Status; show its message, or
    // the start of whatever text the server sent.
    let message = match RpcStatus::decode(body) {
        Ok(s) if !s.message.is_empty() => s.message,
        _ => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    Failure {
        reason,
        retry_after,
        detail: format!("HTTP {status}: {}", message.trim()),
    }
}

/// Classifies a gRPC status per the OTLP/gRPC spec; tonic's own errors
/// (no connection, the attempt's deadline) are told apart by their cause.
fn grpc_failure(status: &tonic::Status) -> Failure {
    use tonic::Code;
    let retry_after = retry_info(status.details());
    let reason = match status.code() {
        _ if caused_by::<tonic::TimeoutExpired>(status) => Reason::Timeout,
        _ if caused_by::<tonic::ConnectError>(status) => Reason::Unreachable,
        Code::Unavailable | Code::Cancelled | Code::Aborted | Code::OutOfRange | Code::DataLoss => {
            Reason::Unavailable
        }
        Code::DeadlineExceeded => Reason::Timeout,
        // Without RetryInfo the collector is not asking to come back later
        // (for example: the message is larger than it accepts).
        Code::ResourceExhausted if retry_after.is_some() => Reason::Throttled,
        _ => Reason::Rejected,
    };
    let mut detail = format!("gRPC {:?}: {}", status.code(), status.message());
    // The innermost cause says what really happened ("Connection refused").
    let mut root = std::error::Error::source(status);
    while let Some(cause) = root.and_then(std::error::Error::source) {
        root = Some(cause);
    }
    if let Some(root) = root.map(ToString::to_string)
        && !detail.contains(&root)
    {
        detail = format!("{detail} ({root})");
    }
    Failure {
        reason,
        retry_after,
        detail,
    }
}

/// Whether an `E` is among the causes of `error`.
fn caused_by<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = error.source();
    while let Some(e) = next {
        if e.is::<E>() {
            return true;
        }
        next = e.source();
    }
    false
}

/// An error and its causes on one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

fn gunzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_RESPONSE_BYTES as u64)
        .read_to_end(&mut out)?;
    Ok(out)
}

/// `google.rpc.Status`, the error detail of OTLP/HTTP and gRPC.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The delay in the `RetryInfo` detail of a gRPC status, if any.
fn retry_info(details: &[u8]) -> Option<Duration> {
    let status = RpcStatus::decode(details).ok()?;
    let any = status
        .details
        .iter()
        .find(|d| d.type_url == RETRY_INFO_TYPE)?;
    let delay = RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay?;
    let seconds = u64::try_from(delay.seconds).ok()?;
    let nanos = u32::try_from(delay.nanos).ok()?;
    Some(Duration::new(seconds, nanos.min(999_999_999)))
}

/// The value of an HTTP `Retry-After` header: delay-seconds or an HTTP
/// date (a date in the past means "now").
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn retry_details(seconds: i64) -> Vec<u8> {
        RpcStatus {
            code: Code::ResourceExhausted as i32,
            message: "slow down".into(),
            details: vec![ProtoAny {
                type_url: RETRY_INFO_TYPE.into(),
                value: RetryInfo {
                    retry_delay: Some(ProtoDuration { seconds, nanos: 0 }),
                }
                .encode_to_vec(),
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn grpc_codes_per_the_spec() {
        let reason = |code| grpc_failure(&tonic::Status::new(code, "x")).reason;
        for code in [
            Code::Unavailable,
            Code::Cancelled,
            Code::Aborted,
            Code::OutOfRange,
            Code::DataLoss,
        ] {
            assert_eq!(reason(code), Reason::Unavailable, "{code:?}");
        }
        assert_eq!(reason(Code::DeadlineExceeded), Reason::Timeout);
        for code in [
            Code::ResourceExhausted,
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::Unimplemented,
            Code::Internal,
        ] {
            assert_eq!(reason(code), Reason::Rejected, "{code:?}");
        }
        let throttled = tonic::Status::with_details(
            Code::ResourceExhausted,
            "slow down",
            retry_details(7).into(),
        );
        let f = grpc_failure(&throttled);
        assert_eq!(f.reason, Reason::Throttled);
        assert_eq!(f.retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn http_statuses_per_the_spec() {
        let f =
            |code: u16| http_failure(StatusCode::from_u16(code).expect("status"), None, b"nope");
        assert_eq!(f(429).reason, Reason::Throttled);
        for code in [502, 503, 504] {
            assert_eq!(f(code).reason, Reason::Unavailable);
        }
        for code in [400, 401, 403, 404, 413, 500] {
            assert_eq!(f(code).reason, Reason::Rejected);
        }
        assert_eq!(f(400).detail, "HTTP 400 Bad Request: nope");
        let status = RpcStatus {
            code: 3,
            message: "bad metric".into(),
            details: Vec::new(),
        };
        let f = http_failure(
            StatusCode::BAD_REQUEST,
            Some(Duration::from_secs(1)),
            &status.encode_to_vec(),
        );
        assert_eq!(f.detail, "HTTP 400 Bad Request: bad metric");
        assert_eq!(f.retry_after, Some(Duration::from_secs(1)));
    }

    #[test]
    fn gzip_round_trip() {
        let data = b"cgperf".repeat(1000);
        let packed = gzip(&data).expect("gzip");
        assert!(packed.len() < data.len() / 10);
        assert_eq!(gunzip(&packed).expect("gunzip"), data);
    }

    fn config(protocol: OtlpProtocol, url: String) -> OtlpConfig {
        OtlpConfig {
            url,
            protocol,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            headers: vec![("authorization".into(), "Bearer x".into())],
            resource: Vec::new(),
            console: false,
        }
    }

    /// A port on loopback that nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    }

    #[tokio::test]
    async fn refused_connections_are_unreachable_on_both_transports() {
        let port = closed_port();
        for (protocol, url) in [
            (OtlpProtocol::Grpc, format!("http://127.0.0.1:{port}")),
            (
                OtlpProtocol::HttpProtobuf,
                format!("http://127.0.0.1:{port}/v1/metrics"),
            ),
        ] {
            let mut transport = Transport::new(&config(protocol, url)).expect("client");
            let failure = transport
                .export(&ExportMetricsServiceRequest::default())
                .await
                .expect_err("nothing listens");
            assert_eq!(
                failure.reason,
                Reason::Unreachable,
                "{protocol:?}: {failure:?}"
            );
        }
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").expect("date");
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }
}
