//! `--web.config.file`, in the Prometheus exporter-toolkit format:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt          # relative paths: to this file's directory
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # default NoClientCert
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12             # TLS12 (default) or TLS13
//!   max_version: TLS13
//! http_server_config:
//!   headers:
//!     X-Content-Type-Options: nosniff
//! basic_auth_users:
//!   prometheus: $2y$10$...         # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! The file is read and checked whole (certificates loaded, key matched to
//! the certificate, hashes parsed) before it replaces anything, so a bad file
//! fails at start, or is rejected at reload while the running one stays.
//! Unknown keys are errors: a misspelt `basic_auth_user` must not silently
//! leave the endpoint open.

use super::basic_auth::BasicAuth;
use super::tls::{self, ClientCerts, TlsVersion};
use crate::config::ConfigError;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use serde::Deserialize;
use serde_saphyr::{DefaultMessageFormatter, DuplicateKeyPolicy, MessageFormatter, Spanned};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::rustls::ServerConfig;

/// Said with YAML errors, which include keys cgperf does not take.
const UNSUPPORTED_HINT: &str = "cgperf reads exporter-toolkit's web config format, except inline \
     cert/key/client_ca, client_allowed_sans, cipher_suites, curve_preferences, \
     prefer_server_cipher_suites, rate_limit and TLS 1.0/1.1";

/// The headers exporter-toolkit lets a web config set, with the values it
/// accepts when they form a closed set. Others are refused, as there.
const HEADERS: &[(&str, HeaderName, &[&str])] = &[
    (
        "Strict-Transport-Security",
        header::STRICT_TRANSPORT_SECURITY,
        &[],
    ),
    (
        "X-Content-Type-Options",
        header::X_CONTENT_TYPE_OPTIONS,
        &["nosniff"],
    ),
    (
        "X-Frame-Options",
        header::X_FRAME_OPTIONS,
        &["deny", "sameorigin"],
    ),
    ("X-XSS-Protection", header::X_XSS_PROTECTION, &[]),
    (
        "Content-Security-Policy",
        header::CONTENT_SECURITY_POLICY,
        &[],
    ),
];

/// A loaded, checked web config. The default (no file) is plain HTTP
/// without authentication.
#[derive(Default)]
pub struct WebConfig {
    /// TLS for new connections; `None` serves plain HTTP.
    pub tls: Option<Arc<ServerConfig>>,
    /// Required credentials; `None` lets every request through.
    pub basic_auth: Option<Arc<BasicAuth>>,
    /// Added to every response, including 401s.
    pub headers: HeaderMap,
}

impl WebConfig {
    /// One line for the log: what this config turns on.
    pub fn summary(&self) -> String {
        format!(
            "TLS {}, basic auth {}, {} extra header(s)",
            if self.tls.is_some() { "on" } else { "off" },
            match &self.basic_auth {
                Some(auth) => format!("on ({} user(s))", auth.users()),
                None => "off".to_owned(),
            },
            self.headers.len()
        )
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    basic_auth_users: Option<BTreeMap<String, Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
    client_ca_file: Option<Spanned<String>>,
    client_auth_type: Option<Spanned<ClientAuthType>>,
    min_version: Option<Spanned<TlsVersion>>,
    max_version: Option<Spanned<TlsVersion>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    headers: Option<BTreeMap<String, Spanned<String>>>,
    /// Accepted so that exporter-toolkit files load; cgperf speaks
    /// HTTP/1.1 only, which every scraper speaks too.
    #[serde(rename = "http2")]
    _http2: Option<bool>,
}

/// Go's `tls.ClientAuthType` names, as exporter-toolkit takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum ClientAuthType {
    NoClientCert,
    RequestClientCert,
    /// `RequireClientCert` is exporter-toolkit's old name for it.
    #[serde(alias = "RequireClientCert")]
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

/// Reads and checks the web config at `path`.
pub fn load(path: &Path) -> Result<WebConfig, ConfigError> {
    let source = path.display().to_string();
    let text = read(&source, path)?;
    let raw: Option<RawWebConfig> = serde_saphyr::from_str_with_options(&text, options())
        .map_err(|e| yaml_error(&source, &e))?;
    // An empty file, like no file: plain HTTP, no authentication.
    let Some(raw) = raw else {
        return Ok(WebConfig::default());
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let err = |at: Option<serde_saphyr::Location>, message: String| {
        ConfigError::new(&source, message).at(at)
    };
    let tls = match raw.tls_server_config {
        Some(raw) => build_tls(raw, dir, &err)?,
        None => None,
    };
    let headers = match raw.http_server_config.and_then(|h| h.headers) {
        Some(headers) => build_headers(headers, &err)?,
        None => HeaderMap::new(),
    };
    let basic_auth = match raw.basic_auth_users {
        Some(users) if !users.is_empty() => Some(Arc::new(build_users(users, &err)?)),
        _ => None,
    };
    Ok(WebConfig {
        tls,
        basic_auth,
        headers,
    })
}

fn read(source: &str, path: &Path) -> Result<String, ConfigError> {
    let bytes = crate::userfile::read(path, crate::userfile::MAX_TEXT_BYTES)
        .map_err(|e| ConfigError::new(source, format!("cannot read the web config: {e}")))?;
    String::from_utf8(bytes)
        .map_err(|_| ConfigError::new(source, "the web config is not valid UTF-8"))
}

fn options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // A web config has a handful of nodes: tight limits defuse alias bombs.
    let mut budget = serde_saphyr::budget::Budget::default();
    budget.max_aliases = 100;
    budget.max_anchors = 100;
    budget.max_events = 10_000;
    budget.max_nodes = 5_000;
    budget.max_depth = 16;
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = 10_000;
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    options.strict_booleans = true;
    options.with_snippet = false;
    options
}

fn yaml_error(source: &str, e: &serde_saphyr::Error) -> ConfigError {
    let message = printable(&DefaultMessageFormatter.format_message(e.without_snippet()));
    ConfigError::new(source, message)
        .at(e.location())
        .hint(UNSUPPORTED_HINT)
}

/// TLS is on when any TLS key is set, as in exporter-toolkit; then the
/// certificate and key are required.
fn build_tls(
    raw: RawTls,
    dir: &Path,
    err: &impl Fn(Option<serde_saphyr::Location>, String) -> ConfigError,
) -> Result<Option<Arc<ServerConfig>>, ConfigError> {
    // Empty strings count as absent, as in exporter-toolkit (templated
    // files often render unset values that way).
    let given = |v: Option<Spanned<String>>| v.filter(|v| !v.value.is_empty());
    let cert_file = given(raw.cert_file);
    let key_file = given(raw.key_file);
    let client_ca_file = given(raw.client_ca_file);
    if cert_file.is_none()
        && key_file.is_none()
        && client_ca_file.is_none()
        && raw.client_auth_type.is_none()
    {
        return Ok(None);
    }
    let (Some(cert_file), Some(key_file)) = (cert_file, key_file) else {
        return Err(err(
            None,
            "tls_server_config needs both cert_file and key_file".to_owned(),
        ));
    };
    let file = |v: &Spanned<String>| (dir.join(&v.value), Some(v.referenced));
    let (cert_path, cert_at) = file(&cert_file);
    let certs = tls::load_certs(&cert_path)
        .map_err(|e| err(cert_at, format!("tls_server_config.cert_file: {e}")))?;
    let (key_path, key_at) = file(&key_file);
    let key = tls::load_key(&key_path)
        .map_err(|e| err(key_at, format!("tls_server_config.key_file: {e}")))?;

    let auth_type = raw
        .client_auth_type
        .as_ref()
        .map_or(ClientAuthType::NoClientCert, |t| t.value);
    let auth_at = raw.client_auth_type.as_ref().map(|t| t.referenced);
    let roots = match (&client_ca_file, auth_type) {
        (Some(ca), ClientAuthType::NoClientCert) => {
            return Err(err(
                Some(ca.referenced),
                "tls_server_config.client_ca_file is set but client_auth_type is NoClientCert; \
                 set client_auth_type: RequireAndVerifyClientCert to check client certificates"
                    .to_owned(),
            ));
        }
        (Some(ca), _) => {
            let (path, at) = file(ca);
            Some(
                tls::load_roots(&path)
                    .map_err(|e| err(at, format!("tls_server_config.client_ca_file: {e}")))?,
            )
        }
        (None, _) => None,
    };
    let client_certs = match (auth_type, roots) {
        (ClientAuthType::NoClientCert, _) => ClientCerts::None,
        (ClientAuthType::RequestClientCert, _) => ClientCerts::Request,
        (ClientAuthType::RequireAnyClientCert, _) => ClientCerts::RequireAny,
        (ClientAuthType::VerifyClientCertIfGiven, Some(roots)) => ClientCerts::VerifyIfGiven(roots),
        (ClientAuthType::RequireAndVerifyClientCert, Some(roots)) => {
            ClientCerts::RequireAndVerify(roots)
        }
        (
            ClientAuthType::VerifyClientCertIfGiven | ClientAuthType::RequireAndVerifyClientCert,
            None,
        ) => {
            return Err(err(
                auth_at,
                format!(
                    "tls_server_config.client_auth_type {auth_type:?} verifies client \
                     certificates, which needs client_ca_file (the CA that signs them)"
                ),
            ));
        }
    };
    let min = raw
        .min_version
        .as_ref()
        .map_or(TlsVersion::TLS12, |v| v.value);
    let max = raw
        .max_version
        .as_ref()
        .map_or(TlsVersion::TLS13, |v| v.value);
    if min > max {
        return Err(err(
            raw.min_version.map(|v| v.referenced),
            format!("tls_server_config.min_version {min:?} is above max_version {max:?}"),
        ));
    }
    let config = tls::server_config(certs, key, client_certs, min, max)
        .map_err(|e| err(cert_at, format!("tls_server_config: {e}")))?;
    Ok(Some(Arc::new(config)))
}

fn build_headers(
    raw: BTreeMap<String, Spanned<String>>,
    err: &impl Fn(Option<serde_saphyr::Location>, String) -> ConfigError,
) -> Result<HeaderMap, ConfigError> {
    let mut headers = HeaderMap::new();
    for (name, value) in raw {
        let at = Some(value.referenced);
        let Some((allowed_name, header_name, allowed_values)) =
            HEADERS.iter().find(|(n, _, _)| *n == name)
        else {
            let names: Vec<&str> = HEADERS.iter().map(|(n, _, _)| *n).collect();
            return Err(err(
                at,
                format!(
                    "http_server_config.headers: header {} cannot be set; allowed: {}",
                    printable(&name),
                    names.join(", ")
                ),
            ));
        };
        // Blank means unset, as in exporter-toolkit.
        if value.value.is_empty() {
            continue;
        }
        if !allowed_values.is_empty() && !allowed_values.contains(&value.value.as_str()) {
            return Err(err(
                at,
                format!(
                    "http_server_config.headers.{allowed_name} must be one of {}, found {}",
                    allowed_values.join(", "),
                    printable(&value.value)
                ),
            ));
        }
        let header_value = HeaderValue::from_str(&value.value).map_err(|_| {
            err(
                at,
                format!("http_server_config.headers.{allowed_name} is not a valid header value"),
            )
        })?;
        headers.insert(header_name.clone(), header_value);
    }
    Ok(headers)
}

fn build_users(
    raw: BTreeMap<String, Spanned<String>>,
    err: &impl Fn(Option<serde_saphyr::Location>, String) -> ConfigError,
) -> Result<BasicAuth, ConfigError> {
    let mut users = Vec::with_capacity(raw.len());
    for (name, hash) in raw {
        if name.contains(':') {
            return Err(err(
                Some(hash.referenced),
                format!(
                    "basic_auth_users: user name {} contains `:`, which basic auth \
                     cannot carry (it separates user and password)",
                    printable(&name)
                ),
            ));
        }
        BasicAuth::check_hash(&hash.value).map_err(|e| {
            err(
                Some(hash.referenced),
                format!(
                    "basic_auth_users.{}: not a bcrypt hash ({e}); make one with \
                     `htpasswd -nBC 10 \"\" | tr -d ':\\n'`",
                    printable(&name)
                ),
            )
        })?;
        users.push((name, hash.value));
    }
    Ok(BasicAuth::new(users))
}

/// `value` with control characters escaped, so that a hostile file cannot
/// forge log lines or terminal sequences through an error message.
fn printable(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
