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
    // Encoding a large snapshot is CPU work: keep it off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        if openmetrics {
            exposition.openmetrics()
        } else {
            exposition.prometheus_text()
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
            (
                [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
                body,
            )
                .into_response()
        }
        Ok(Err(_)) | Err(_) => {
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
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let q_zero = parts.any(|p| p.replace(' ', "") == "q=0");
            media.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
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

    #[test]
    fn landing_page_links_metrics() {
        assert!(landing_page("/metrics").contains("<a href=\"/metrics\">"));
        assert!(landing_page("/x\"<").contains("/x&quot;&lt;"));
    }
}
