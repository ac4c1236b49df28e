//! The `otlp:` section, and the standard `OTEL_*` environment variables that
//! may set (or, with an endpoint, enable) the same push.
//! `OTEL_METRICS_EXPORTER=console` writes the pushes to standard output
//! instead, with or without a section; `none` turns the push off.
//!
//! Parsing the file stays pure: [`validate_section`] only sees the YAML and
//! keeps what it says in an [`OtlpSection`]. [`resolve`] then merges the
//! environment — passed in as a lookup function, so tests use plain maps —
//! under the file (the file wins, key by key) and fills the defaults.
//! Values from either place go through the same checks; an error names the
//! file position or the variable.

use std::time::Duration;

use serde_saphyr::{Location, Spanned};

use super::duration::{MAX_INTERVAL, MIN_INTERVAL, human, parse_duration};
use super::error::{ConfigError, quote, shorten};
use super::schema::{Ordered, RawOtlp, Text};
use crate::suggest::did_you_mean;

/// How often the snapshot is pushed when neither the file nor
/// `OTEL_METRIC_EXPORT_INTERVAL` says.
pub const DEFAULT_OTLP_INTERVAL: Duration = Duration::from_secs(10);

/// How long one export may take when neither the file nor
/// `OTEL_EXPORTER_OTLP_TIMEOUT` says (the OTLP exporter default).
pub const DEFAULT_OTLP_TIMEOUT: Duration = Duration::from_secs(10);

/// How an OTLP request travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`MetricsService/Export`), collector port 4317.
    Grpc,
    /// OTLP/HTTP with binary protobuf bodies (`POST …/v1/metrics`), port 4318.
    HttpProtobuf,
}

impl OtlpProtocol {
    const NAMES: [&'static str; 2] = ["grpc", "http/protobuf"];

    /// The name used in the config and in `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http/protobuf",
        }
    }

    /// The collector's default listener for this protocol, on this host.
    fn default_endpoint(self) -> &'static str {
        match self {
            Self::Grpc => "http://localhost:4317",
            Self::HttpProtobuf => "http://localhost:4318",
        }
    }
}

/// The `otlp:` section as the file writes it: keys left out are `None` (or
/// empty), for the environment or the defaults to fill.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OtlpSection {
    /// Base URL (`http://` or `https://`).
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    pub protocol: Option<OtlpProtocol>,
    /// Push period.
    pub interval: Option<Duration>,
    /// Bound of one export.
    pub timeout: Option<Duration>,
    /// Extra request headers (gRPC metadata), names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Extra resource attributes.
    pub resource: Vec<(String, String)>,
}

/// The effective OTLP settings: file over environment over defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// Where requests go: for gRPC the server's URL, for http/protobuf the
    /// exact URL posted to (the base endpoint plus `/v1/metrics`, or
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` as given).
    pub url: String,
    /// The transport.
    pub protocol: OtlpProtocol,
    /// Push period, within [`MIN_INTERVAL`]`..=`[`MAX_INTERVAL`].
    pub interval: Duration,
    /// Bound of one export attempt, same range.
    pub timeout: Duration,
    /// Extra request headers, names lower-cased, unique.
    pub headers: Vec<(String, String)>,
    /// Resource attributes from the user, unique keys; the exporter adds
    /// `service.name`, `service.version` and `host.name` where absent.
    pub resource: Vec<(String, String)>,
    /// Write each push to standard output as OTLP/JSON instead of sending
    /// it (`OTEL_METRICS_EXPORTER=console`): to look at what a collector
    /// would receive without running one.
    pub console: bool,
}

/// A header or resource attribute: name and value.
type Pair = (String, String);

/// What is wrong with a value and how to fix it; the caller adds where the
/// value came from (a file position or an environment variable).
#[derive(Debug)]
struct Invalid {
    message: String,
    hint: String,
}

fn invalid(message: String, hint: impl Into<String>) -> Invalid {
    Invalid {
        message,
        hint: hint.into(),
    }
}

const ENDPOINT_HINT: &str = "write a base URL such as `http://127.0.0.1:4317` (grpc) or \
                             `https://otel-gateway.example:4318` (http/protobuf; cgperf posts \
                             to its path plus /v1/metrics)";
const HEADER_HINT: &str = "header names are HTTP tokens such as `authorization` or `x-scope-orgid`; \
                           values are printable ASCII";

/// Headers the transports set themselves; a user value would break the
/// request rather than add to it.
const RESERVED_HEADERS: [&str; 8] = [
    "content-type",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "connection",
    "host",
    "te",
    "accept-encoding",
];

/// Where pushes go, from `OTEL_METRICS_EXPORTER` (the SDKs' variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exporter {
    /// To the collector (the default).
    Otlp,
    /// To standard output, as OTLP/JSON.
    Console,
    /// Nowhere: no push.
    None,
}

fn exporter(text: &str) -> Result<Exporter, Invalid> {
    match text {
        "otlp" => Ok(Exporter::Otlp),
        "console" => Ok(Exporter::Console),
        "none" => Ok(Exporter::None),
        other => Err(unknown(
            "metrics exporter",
            other,
            ["otlp", "console", "none"],
            "exporters: otlp (the collector), console (OTLP/JSON on standard output), none (no push; /metrics still serves)",
        )),
    }
}

/// `other` is no `what`: the closest of `names`, and `listing`.
fn unknown<'a>(
    what: &str,
    other: &str,
    names: impl IntoIterator<Item = &'a str>,
    listing: &str,
) -> Invalid {
    let hint = match did_you_mean(other, names) {
        Some(close) => format!("did you mean `{close}`? {listing}"),
        None => listing.to_owned(),
    };
    invalid(format!("unknown {what} {}", quote(other)), hint)
}

fn protocol(text: &str) -> Result<OtlpProtocol, Invalid> {
    match text {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        "http/json" => Err(invalid(
            "OTLP protocol \"http/json\" is not supported".to_owned(),
            "use `grpc` or `http/protobuf`; every collector accepts both",
        )),
        other => Err(unknown(
            "OTLP protocol",
            other,
            OtlpProtocol::NAMES,
            "protocols: grpc, http/protobuf",
        )),
    }
}

/// Checks a base URL: `http://` or `https://`, a host, no credentials, no
/// query. Returns it without a trailing `/`, ready for `/v1/metrics`.
fn endpoint(text: &str) -> Result<String, Invalid> {
    let shown = quote(text);
    let bad = |why: &str| {
        invalid(
            format!("invalid OTLP endpoint {shown}: {why}"),
            ENDPOINT_HINT,
        )
    };
    match text
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase())
        .as_deref()
    {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(bad(&format!(
                "the scheme is `{other}`; only http:// and https:// are supported"
            )));
        }
        None => return Err(bad("it has no scheme; start it with http:// or https://")),
    }
    let uri: http::Uri = text
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    let Some(authority) = uri.authority() else {
        return Err(bad("it has no host"));
    };
    if authority.as_str().contains('@') {
        return Err(invalid(
            format!("invalid OTLP endpoint {shown}: credentials in the URL are not sent"),
            "put credentials in `headers:`, e.g. `authorization: Basic …`",
        ));
    }
    if authority.host().is_empty() {
        return Err(bad("it has no host"));
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(bad("a query or fragment is not allowed"));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

/// A duration within [`MIN_INTERVAL`]`..=`[`MAX_INTERVAL`]; `what` names
/// the setting in messages.
fn duration_in_range(what: &str, d: Duration, shown: &str) -> Result<Duration, Invalid> {
    let (min, max) = (human(MIN_INTERVAL), human(MAX_INTERVAL));
    if d < MIN_INTERVAL || d > MAX_INTERVAL {
        return Err(invalid(
            format!("OTLP {what} {shown} is outside {min} to {max}"),
            format!("set an OTLP {what} from {min} to {max}, e.g. `10s`"),
        ));
    }
    Ok(d)
}

fn duration(what: &str, text: &str) -> Result<Duration, Invalid> {
    let d = parse_duration(text)
        .map_err(|e| invalid(format!("invalid OTLP {what}: {}", e.message), e.hint))?;
    duration_in_range(what, d, &quote(text))
}

/// Environment durations are whole milliseconds, as the OTel spec says.
fn millis(what: &str, text: &str) -> Result<Duration, Invalid> {
    let digits = text.trim();
    let ms: u64 = match digits.parse() {
        Ok(ms) => ms,
        // Beyond 64 bits: a whole number, and out of range.
        Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => u64::MAX,
        Err(_) => {
            return Err(invalid(
                format!("invalid OTLP {what} {}: not a whole number", quote(text)),
                "the OTEL_* variables give durations in milliseconds, e.g. `10000`",
            ));
        }
    };
    duration_in_range(
        what,
        Duration::from_millis(ms),
        &format!("{}ms", shorten(digits)),
    )
}

/// A header both transports can send: an HTTP token name (lower-cased, as
/// gRPC metadata requires), not one they set themselves, not binary gRPC
/// metadata, and a printable ASCII value.
fn header(name: &str, value: &str) -> Result<(String, String), Invalid> {
    let parsed = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        invalid(
            format!("invalid OTLP header name {}", quote(name)),
            HEADER_HINT,
        )
    })?;
    let lower = parsed.as_str();
    if RESERVED_HEADERS.contains(&lower) || lower.starts_with("grpc-") {
        return Err(invalid(
            format!("OTLP header {} is set by cgperf itself", quote(name)),
            "remove it; cgperf sets content type, encoding and framing headers",
        ));
    }
    if lower.ends_with("-bin") {
        return Err(invalid(
            format!(
                "OTLP header {}: binary (-bin) gRPC metadata is not supported",
                quote(name)
            ),
            HEADER_HINT,
        ));
    }
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(invalid(
            format!(
                "the value of OTLP header {} is not printable ASCII",
                quote(name)
            ),
            HEADER_HINT,
        ));
    }
    Ok((lower.to_owned(), value.to_owned()))
}

fn resource_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() {
        return Err(invalid(
            "an OTLP resource attribute has an empty key".to_owned(),
            "write e.g. `deployment.environment.name: production`",
        ));
    }
    Ok(())
}

/// Validates the file's `otlp:` section; `source` names the file.
pub(super) fn validate_section(source: &str, raw: RawOtlp) -> Result<OtlpSection, ConfigError> {
    let positioned = |at: Location, e: Invalid| {
        ConfigError::new(source, e.message)
            .at(Some(at))
            .hint(e.hint)
    };
    fn one<T>(
        text: Option<Text>,
        check: impl Fn(&str) -> Result<T, Invalid>,
        positioned: impl Fn(Location, Invalid) -> ConfigError,
    ) -> Result<Option<T>, ConfigError> {
        text.map(|t| check(&t.value).map_err(|e| positioned(t.referenced, e)))
            .transpose()
    }
    let endpoint = one(raw.endpoint, endpoint, positioned)?;
    let protocol = one(raw.protocol, protocol, positioned)?;
    let interval = one(raw.interval, |t| duration("interval", t), positioned)?;
    let timeout = one(raw.timeout, |t| duration("timeout", t), positioned)?;
    let pairs = |raw: Option<Spanned<Ordered<Text>>>,
                 check: fn(&str, &str) -> Result<Pair, Invalid>|
     -> Result<Vec<Pair>, ConfigError> {
        let mut out: Vec<(Pair, Location)> = Vec::new();
        for (key, value) in raw.map(|r| r.value.0).unwrap_or_default() {
            let pair =
                check(&key.value, &value.value).map_err(|e| positioned(key.referenced, e))?;
            if let Some((_, first)) = out.iter().find(|((k, _), _)| *k == pair.0) {
                let message = format!(
                    "{} is listed twice (first at line {}, column {})",
                    quote(&key.value),
                    first.line(),
                    first.column()
                );
                return Err(ConfigError::new(source, message)
                    .at(Some(key.referenced))
                    .hint("header names are case-insensitive; remove the duplicate"));
            }
            out.push((pair, key.referenced));
        }
        Ok(out.into_iter().map(|(pair, _)| pair).collect())
    };
    let headers = pairs(raw.headers, header)?;
    let resource = pairs(raw.resource, |k, v| {
        resource_key(k).map(|()| (k.to_owned(), v.to_owned()))
    })?;
    Ok(OtlpSection {
        endpoint,
        protocol,
        interval,
        timeout,
        headers,
        resource,
    })
}

/// The effective settings: the file's `section` over the `OTEL_*`
/// variables `env` returns over the defaults. `None` when the file has no
/// `otlp:` section and no endpoint variable is set.
///
/// Variables: `OTEL_EXPORTER_OTLP_[METRICS_]ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL`, `OTEL_EXPORTER_OTLP_[METRICS_]HEADERS`,
/// `OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT` (ms), `OTEL_METRIC_EXPORT_INTERVAL`
/// (ms), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`; the `METRICS_`
/// ones win over the generic ones. A generic endpoint is a base URL (for
/// http/protobuf cgperf appends `/v1/metrics`); the `METRICS_` endpoint is
/// used as it is.
pub fn resolve(
    section: Option<&OtlpSection>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<OtlpConfig>, ConfigError> {
    let var = |names: &[&'static str]| {
        names.iter().find_map(|name| {
            env(name)
                .filter(|v| !v.trim().is_empty())
                .map(|v| (*name, v))
        })
    };
    let from_env = |name: &str, e: Invalid| ConfigError::new(name, e.message).hint(e.hint);
    let env_endpoint = match var(&["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"]) {
        Some((name, v)) => Some((endpoint(v.trim()).map_err(|e| from_env(name, e))?, true)),
        None => match var(&["OTEL_EXPORTER_OTLP_ENDPOINT"]) {
            Some((name, v)) => Some((endpoint(v.trim()).map_err(|e| from_env(name, e))?, false)),
            None => None,
        },
    };
    let console = match var(&["OTEL_METRICS_EXPORTER"]) {
        Some((name, v)) => match exporter(v.trim()).map_err(|e| from_env(name, e))? {
            Exporter::Console => true,
            Exporter::None => return Ok(None),
            Exporter::Otlp => false,
        },
        None => false,
    };
    if section.is_none() && env_endpoint.is_none() && !console {
        return Ok(None);
    }
    let file = section.cloned().unwrap_or_default();
    let protocol = match file.protocol {
        Some(p) => p,
        None => match var(&[
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ]) {
            Some((name, v)) => self::protocol(v.trim()).map_err(|e| from_env(name, e))?,
            None => OtlpProtocol::Grpc,
        },
    };
    // (base URL, whether it is already the full metrics URL)
    let (base, exact) = match (file.endpoint, env_endpoint) {
        (Some(url), _) => (url, false),
        (None, Some(env)) => env,
        (None, None) => (protocol.default_endpoint().to_owned(), false),
    };
    let url = match protocol {
        OtlpProtocol::HttpProtobuf if !exact => format!("{base}/v1/metrics"),
        _ => base,
    };
    let interval = match file.interval {
        Some(d) => d,
        None => match var(&["OTEL_METRIC_EXPORT_INTERVAL"]) {
            Some((name, v)) => millis("interval", &v).map_err(|e| from_env(name, e))?,
            None => DEFAULT_OTLP_INTERVAL,
        },
    };
    let timeout = match file.timeout {
        Some(d) => d,
        None => match var(&[
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ]) {
            Some((name, v)) => millis("timeout", &v).map_err(|e| from_env(name, e))?,
            None => DEFAULT_OTLP_TIMEOUT,
        },
    };
    let mut headers = Vec::new();
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    ] {
        if let Some((name, v)) = var(&[name]) {
            for (k, v) in env_pairs(&v).map_err(|e| from_env(name, e))? {
                let pair = header(&k, &v).map_err(|e| from_env(name, e))?;
                merge(&mut headers, pair);
            }
        }
    }
    let mut resource = Vec::new();
    if let Some((name, v)) = var(&["OTEL_RESOURCE_ATTRIBUTES"]) {
        for (k, v) in env_pairs(&v).map_err(|e| from_env(name, e))? {
            resource_key(&k).map_err(|e| from_env(name, e))?;
            merge(&mut resource, (k, v));
        }
    }
    if let Some((_, v)) = var(&["OTEL_SERVICE_NAME"]) {
        merge(
            &mut resource,
            ("service.name".to_owned(), v.trim().to_owned()),
        );
    }
    for pair in file.headers {
        merge(&mut headers, pair);
    }
    for pair in file.resource {
        merge(&mut resource, pair);
    }
    Ok(Some(OtlpConfig {
        url,
        protocol,
        interval,
        timeout,
        headers,
        resource,
        console,
    }))
}

/// Sets `pair` in `list`, replacing an earlier value of the same key.
fn merge(list: &mut Vec<(String, String)>, pair: (String, String)) {
    match list.iter_mut().find(|(k, _)| *k == pair.0) {
        Some(slot) => *slot = pair,
        None => list.push(pair),
    }
}

/// `key=value,key2=value2` with percent-encoded keys and values, the format
/// of `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`.
fn env_pairs(text: &str) -> Result<Vec<(String, String)>, Invalid> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s.trim())
            .decode_utf8()
            .map(|d| d.into_owned())
            .map_err(|_| {
                invalid(
                    format!("{} is not UTF-8 once percent-decoded", quote(s)),
                    "percent-encode UTF-8 text only",
                )
            })
    };
    text.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            let (k, v) = item.split_once('=').ok_or_else(|| {
                invalid(
                    format!("{} is not `key=value`", quote(item.trim())),
                    "write `key=value` pairs separated by commas, e.g. `a=1,b=2`",
                )
            })?;
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn resolved(section: Option<&OtlpSection>, vars: &[(&str, &str)]) -> Option<OtlpConfig> {
        match resolve(section, &env(vars)) {
            Ok(c) => c,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    fn error(section: Option<&OtlpSection>, vars: &[(&str, &str)]) -> ConfigError {
        match resolve(section, &env(vars)) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn nothing_set_means_no_otlp() {
        assert_eq!(resolved(None, &[]), None);
        // Settings without an endpoint do not turn OTLP on.
        assert_eq!(
            resolved(None, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            None
        );
        assert_eq!(
            resolved(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]),
            None
        );
    }

    #[test]
    fn empty_section_takes_the_defaults() {
        let c = resolved(Some(&OtlpSection::default()), &[]).expect("on");
        assert_eq!(c.url, "http://localhost:4317");
        assert_eq!(c.protocol, OtlpProtocol::Grpc);
        assert_eq!(c.interval, DEFAULT_OTLP_INTERVAL);
        assert_eq!(c.timeout, DEFAULT_OTLP_TIMEOUT);
        assert!(c.headers.is_empty() && c.resource.is_empty());
        let http = OtlpSection {
            protocol: Some(OtlpProtocol::HttpProtobuf),
            ..OtlpSection::default()
        };
        let c = resolved(Some(&http), &[]).expect("on");
        assert_eq!(c.url, "http://localhost:4318/v1/metrics");
    }

    #[test]
    fn environment_alone_enables_and_configures() {
        let c = resolved(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://gw.example/otlp/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "Authorization=Bearer%20abc , x-tenant=a%2Cb",
                ),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "30000"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "service.name=x,k8s.node.name=n%201",
                ),
                ("OTEL_SERVICE_NAME", "cgperf-node"),
            ],
        )
        .expect("on");
        assert_eq!(c.url, "https://gw.example/otlp/v1/metrics");
        assert_eq!(c.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(c.timeout, Duration::from_millis(2500));
        assert_eq!(c.interval, Duration::from_secs(30));
        assert_eq!(
            c.headers,
            [
                ("authorization".to_owned(), "Bearer abc".to_owned()),
                ("x-tenant".to_owned(), "a,b".to_owned())
            ]
        );
        assert_eq!(
            c.resource,
            [
                ("service.name".to_owned(), "cgperf-node".to_owned()),
                ("k8s.node.name".to_owned(), "n 1".to_owned())
            ]
        );
    }

    #[test]
    fn metrics_specific_variables_win_and_the_endpoint_is_exact() {
        let c = resolved(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://b:9/custom"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
                ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2000"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=2"),
                ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "b=3"),
            ],
        )
        .expect("on");
        assert_eq!(c.url, "http://b:9/custom");
        assert_eq!(c.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(c.timeout, Duration::from_secs(2));
        assert_eq!(
            c.headers,
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "3".to_owned())
            ]
        );
    }

    #[test]
    fn the_file_wins_key_by_key() {
        let file = OtlpSection {
            endpoint: Some("http://file:4318".to_owned()),
            protocol: Some(OtlpProtocol::HttpProtobuf),
            interval: None,
            timeout: Some(Duration::from_secs(3)),
            headers: vec![("a".to_owned(), "file".to_owned())],
            resource: vec![("service.name".to_owned(), "from-file".to_owned())],
        };
        let c = resolved(
            Some(&file),
            &[
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://env:1/x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "2000"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=env,b=env"),
                ("OTEL_SERVICE_NAME", "env"),
            ],
        )
        .expect("on");
        assert_eq!(c.url, "http://file:4318/v1/metrics");
        assert_eq!(c.protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(c.timeout, Duration::from_secs(3));
        assert_eq!(c.interval, Duration::from_secs(2));
        assert_eq!(
            c.headers,
            [
                ("a".to_owned(), "file".to_owned()),
                ("b".to_owned(), "env".to_owned())
            ]
        );
        assert_eq!(
            c.resource,
            [("service.name".to_owned(), "from-file".to_owned())]
        );
    }

    #[test]
    fn bad_variables_name_the_variable() {
        let table: [(&str, &str, &str); 10] = [
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "ftp://x",
                "only http:// and https://",
            ),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "localhost:4317",
                "scheme",
            ),
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "grcp",
                "unknown OTLP protocol",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "not supported"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "not a whole number"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "5", "outside 100ms to 1h"),
            (
                "OTEL_EXPORTER_OTLP_TIMEOUT",
                "99999999999999999999",
                "OTLP timeout 99999999999999999999ms is outside 100ms to 1h",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "not `key=value`"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "bad name=1",
                "invalid OTLP header name",
            ),
            ("OTEL_RESOURCE_ATTRIBUTES", "=x", "empty key"),
        ];
        for (name, value, want) in table {
            let mut vars = vec![(name, value)];
            if !name.ends_with("ENDPOINT") {
                vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ok:1"));
            }
            let e = error(None, &vars);
            assert_eq!(e.source_name, name, "{e}");
            assert!(e.message.contains(want), "{name}={value}: {e}");
            assert!(e.hint.is_some());
        }
        let e = error(
            Some(&OtlpSection::default()),
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/proto")],
        );
        assert!(
            e.hint
                .as_deref()
                .unwrap_or_default()
                .contains("did you mean `http/protobuf`?"),
            "{e}"
        );
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint("http://a:4317/").ok().as_deref(),
            Some("http://a:4317")
        );
        assert_eq!(
            endpoint("HTTPS://[::1]:4318/p").ok().as_deref(),
            Some("HTTPS://[::1]:4318/p")
        );
        for (bad, why) in [
            ("unix:///run/otel.sock", "only http:// and https://"),
            ("http://u:p@h:1", "credentials"),
            ("http://h:1/?q=1", "query"),
            ("http://h:1/#f", "fragment"),
            ("http://", "invalid OTLP endpoint"),
            ("", "invalid OTLP endpoint"),
        ] {
            let e = endpoint(bad).expect_err(bad);
            assert!(e.message.contains(why), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn headers() {
        assert_eq!(
            header("X-Scope-OrgID", "tenant 1").ok(),
            Some(("x-scope-orgid".to_owned(), "tenant 1".to_owned()))
        );
        for (name, value, why) in [
            ("content-type", "x", "set by cgperf"),
            ("grpc-timeout", "1", "set by cgperf"),
            ("x-trace-bin", "a", "binary"),
            ("a b", "x", "header name"),
            ("x", "caf\u{e9}", "printable ASCII"),
            ("x", "a\nb", "printable ASCII"),
        ] {
            let e = header(name, value).expect_err(name);
            assert!(e.message.contains(why), "{name}: {}", e.message);
        }
    }

    #[test]
    fn the_console_exporter_needs_no_collector_and_none_turns_the_push_off() {
        let c = resolved(None, &[("OTEL_METRICS_EXPORTER", "console")]).expect("on");
        assert!(c.console);
        assert_eq!(c.interval, DEFAULT_OTLP_INTERVAL);
        let c = resolved(
            Some(&OtlpSection::default()),
            &[("OTEL_METRICS_EXPORTER", "otlp")],
        )
        .expect("on");
        assert!(!c.console);
        assert_eq!(
            resolved(
                Some(&OtlpSection::default()),
                &[
                    ("OTEL_METRICS_EXPORTER", "none"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317")
                ]
            ),
            None
        );
        let e = error(None, &[("OTEL_METRICS_EXPORTER", "consol")]);
        let text = e.to_string();
        assert!(text.contains("OTEL_METRICS_EXPORTER"), "{text}");
        assert!(
            e.hint
                .as_deref()
                .unwrap_or_default()
                .contains("did you mean `console`?"),
            "{e}"
        );
    }
}
