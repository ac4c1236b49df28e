//! The HTTP routes: a landing page and the telemetry path, with content
//! negotiation between OpenMetrics and the classic Prometheus text format,
//! behind the web config's basic auth and response headers.

use super::prometheus::Exposition;
use super::web::Shared;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// Content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The router serving `/` and `telemetry_path`, both (and every other
/// path) behind the running web config.
pub fn router(exposition: Arc<Exposition>, telemetry_path: &str, web: Shared) -> Router {
    let landing = landing_page(telemetry_path);
    Router::new()
        .route("/", get(move || async move { Html(landing) }))
        .route(
            telemetry_path,
            get(move |headers: HeaderMap| metrics(exposition.clone(), headers)),
        )
        .layer(middleware::from_fn_with_state(web, guard))
}

/// Applies the web config read when the request arrived: basic auth, then
/// the configured headers on whatever the response is (401 included).
async fn guard(State(web): State<Shared>, request: Request, next: Next) -> Response {
    let web = web.borrow().clone();
    let mut response = match &web.basic_auth {
        Some(auth)
            if !auth
                .allows(request.headers().get(header::AUTHORIZATION))
                .await =>
        {
            (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"cgperf\", charset=\"UTF-8\""),
                )],
                "Unauthorized\n",
            )
                .into_response()
        }
        _ => next.run(request).await,
    };
    response.headers_mut().extend(web.headers.clone());
    response
}

async fn metrics(exposition: Arc<Exposition>, headers: HeaderMap) -> Response {
    let openmetrics = wants_openmetrics(&headers);
    let gzip = accepts_gzip(&headers);
    // Encoding (and compressing) a large snapshot is CPU work: keep it off
    // the async workers.
    let body = tokio::task::spawn_blocking(move || {
        let text = if openmetrics {
            exposition.openmetrics()
        } else {
            exposition.prometheus_text()
        }
        .map_err(|_| "encoding metrics failed")?;
        if gzip {
            super::gzip(text.as_bytes()).map_err(|_| "compressing metrics failed")
        } else {
            Ok(text.into_bytes())
        }
    })
    .await;
    match body {
        Ok(Ok(body)) => {
            let content_type = if openmetrics {
                OPENMETRICS
            } else {
                PROMETHEUS_TEXT
            };
            let mut response = (
                [
                    (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                    // The body depends on both request headers.
                    (
                        header::VARY,
                        HeaderValue::from_static("Accept, Accept-Encoding"),
                    ),
                ],
                body,
            )
                .into_response();
            if gzip {
                response
                    .headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            response
        }
        Ok(Err(what)) => {
            tracing::error!("{what}");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{what}\n")).into_response()
        }
        Err(_) => {
            tracing::error!("encoding /metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding metrics failed\n",
            )
                .into_response()
        }
    }
}

/// True when the scraper lists OpenMetrics among the types it accepts
/// (Prometheus does, preferring it); plain clients get the classic format.
pub fn wants_openmetrics(headers: &HeaderMap) -> bool {
    lists(headers, header::ACCEPT, "application/openmetrics-text")
}

/// True when the scraper accepts a gzip body (Prometheus does).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    lists(headers, header::ACCEPT_ENCODING, "gzip")
}

/// True when the comma-separated values of header `name` list `wanted`
/// (case-insensitively, parameters aside) without `q=0`.
fn lists(headers: &HeaderMap, name: header::HeaderName, wanted: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let value = parts.next().unwrap_or_default();
            let q_zero = parts.any(|p| {
                let p = p.replace(' ', "");
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            value.eq_ignore_ascii_case(wanted) && !q_zero
        })
}

fn landing_page(telemetry_path: &str) -> String {
    let path = telemetry_path
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('"', "&quot;");
    format!(
        "<!DOCTYPE html>\n<html><head><title>cgperf</title></head><body>\n\
         <h1>cgperf {}</h1>\n<p>Per-cgroup CPU performance event counters.</p>\n\
         <p><a href=\"{path}\">Metrics</a></p>\n</body></html>\n",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_str(v).expect("valid header"),
        );
        h
    }

    #[test]
    fn negotiates_like_prometheus_expects() {
        assert!(wants_openmetrics(&accept(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!wants_openmetrics(&accept("text/plain")));
        assert!(!wants_openmetrics(&accept("*/*")));
        assert!(!wants_openmetrics(&HeaderMap::new()));
        assert!(!wants_openmetrics(&accept(
            "application/openmetrics-text;q=0"
        )));
    }

    fn encoding(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(v).expect("valid header"),
        );
        h
    }

    #[test]
    fn gzip_when_the_scraper_accepts_it() {
        assert!(accepts_gzip(&encoding("gzip")));
        assert!(accepts_gzip(&encoding("deflate, GZIP;q=0.5")));
        assert!(!accepts_gzip(&encoding("gzip;q=0")));
        assert!(!accepts_gzip(&encoding("gzip; q=0.0")));
        assert!(!accepts_gzip(&encoding("identity")));
        assert!(!accepts_gzip(&HeaderMap::new()));
        let body = b"cgperf_events_total{cgroup=\"/\"} 1\n".repeat(100);
        let packed = crate::exporter::gzip(&body).expect("compresses");
        assert!(packed.len() < body.len() / 5);
        let mut unpacked = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&packed[..]),
            &mut unpacked,
        )
        .expect("valid gzip");
        assert_eq!(unpacked, body);
    }

    #[test]
    fn landing_page_links_metrics() {
        assert!(landing_page("/metrics").contains("<a href=\"/metrics\">"));
        assert!(landing_page("/x\"<").contains("/x&quot;&lt;"));
    }
}
