//! The HTTP routes: a landing page, the telemetry path (with content
//! negotiation between OpenMetrics and the classic Prometheus text format),
//! and the `/-/healthy` and `/-/ready` probes, all behind the web config's
//! basic auth and response headers.

use super::prometheus::Exposition;
use super::web::Shared;
use crate::snapshot::{Latest, Snapshot};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Path of the liveness probe: 200 while the process serves.
pub const HEALTHY_PATH: &str = "/-/healthy";
/// Path of the readiness probe: 200 while collections keep finishing.
pub const READY_PATH: &str = "/-/ready";

/// The least time without a finished collection that `/-/ready` calls a
/// stall, so that a short interval on a loaded machine does not flap.
pub const MIN_STALL: Duration = Duration::from_secs(5);

/// The router serving `/`, `telemetry_path`, `/-/healthy` and `/-/ready`
/// from what `latest` holds, all (and every other path) behind the running
/// web config.
pub fn router(
    exposition: Arc<Exposition>,
    latest: Latest,
    telemetry_path: &str,
    web: Shared,
) -> Router {
    let landing = landing_page(telemetry_path);
    Router::new()
        .route("/", get(move || async move { Html(landing) }))
        .route(HEALTHY_PATH, get(|| async { "Healthy\n" }))
        .route(
            READY_PATH,
            get(move || async move {
                match readiness(&latest.get(), Instant::now()) {
                    Ok(()) => (StatusCode::OK, "Ready\n".to_string()),
                    Err(reason) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("Not ready: {reason}\n"),
                    ),
                }
            }),
        )
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

/// Whether collections keep finishing as of `now`: the last one finished
/// within three intervals (at least [`MIN_STALL`]); otherwise why not.
/// A sampler that is stuck, dead or not yet started is not ready, even
/// though `/metrics` still answers with what it last published. Nor is
/// one whose config this machine can count nothing of: it would serve
/// empty counts that look healthy (a reload that fixes it makes it ready).
pub fn readiness(snap: &Snapshot, now: Instant) -> Result<(), String> {
    let Some(finished) = snap.finished else {
        return Err("no collection has finished yet".into());
    };
    if let Some(why) =
        crate::snapshot::nothing_countable(snap.support.iter().chain(&snap.host_support))
    {
        return Err(why);
    }
    if let Some(why) = nothing_monitored(snap) {
        return Err(why);
    }
    let limit = snap.interval.saturating_mul(3).max(MIN_STALL);
    let age = now.saturating_duration_since(finished);
    if age > limit {
        return Err(format!(
            "the last collection finished {:.1}s ago; collections are due every {:?}, \
             and none for {:?} is a stall",
            age.as_secs_f64(),
            snap.interval,
            limit
        ));
    }
    Ok(())
}

/// Why no cgroup is counted, where every one selected is skipped (for the
/// descriptor budget, `max_cgroups` or a path too long): counts that stay
/// empty would look healthy. `None` while one is counted, or none is
/// selected (a config that counts processes or the host alone).
fn nothing_monitored(snap: &Snapshot) -> Option<String> {
    use crate::snapshot::SkipReason;
    let skips: Vec<(SkipReason, u64)> = SkipReason::ALL
        .into_iter()
        .filter_map(|r| Some((r, snap.skipped.get(&r).copied().filter(|&n| n > 0)?)))
        .collect();
    if snap.monitored_cgroups > 0 || skips.is_empty() {
        return None;
    }
    let total: u64 = skips.iter().map(|(_, n)| n).sum();
    let labels: Vec<String> = match skips.as_slice() {
        [(reason, _)] => vec![reason.label().to_string()],
        _ => skips
            .iter()
            .map(|(reason, n)| format!("{n} {}", reason.label()))
            .collect(),
    };
    let why: Vec<&str> = skips.iter().map(|(reason, _)| reason.explain()).collect();
    Some(format!(
        "no cgroup is counted: the {total} selected are skipped ({}), {}",
        labels.join(", "),
        why.join("; ")
    ))
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

    /// `GET path` on the real server serving `latest`: (status, body).
    fn serve_and_get(latest: Latest, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (web_sender, web) =
            tokio::sync::watch::channel(Arc::new(crate::exporter::web::WebConfig::default()));
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std_listener.set_nonblocking(true).expect("non-blocking");
        let addr = std_listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let exposition = Arc::new(Exposition::new(latest.clone()));
        let server = runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            let router = router(exposition, latest, "/metrics", web.clone());
            crate::exporter::web::server::serve(listener, router, web, 4, async {
                let _ = stopped.await;
            })
            .await;
        });
        let mut tcp = std::net::TcpStream::connect(addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            tcp,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut raw = String::new();
        tcp.read_to_string(&mut raw).expect("response");
        let _ = stop.send(());
        runtime.block_on(server).expect("server ends");
        drop(web_sender);
        let status = raw.split(' ').nth(1).and_then(|s| s.parse().ok());
        let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
        (status.expect("status"), body.expect("body"))
    }

    /// A snapshot whose collection finished `ago`, every `interval`.
    fn finished(ago: Duration, interval: Duration) -> Latest {
        let latest = Latest::new();
        let mut snap = Snapshot::empty();
        snap.finished = Instant::now().checked_sub(ago);
        assert!(snap.finished.is_some(), "monotonic clock too young");
        snap.interval = interval;
        snap.collections = 1;
        latest.publish(snap);
        latest
    }

    #[test]
    fn ready_only_while_collections_keep_finishing() {
        let (status, body) = serve_and_get(Latest::new(), READY_PATH);
        assert_eq!(status, 503);
        assert!(body.contains("no collection has finished yet"), "{body}");
        let fresh = finished(Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(serve_and_get(fresh.clone(), READY_PATH).0, 200);
        assert_eq!(serve_and_get(fresh, HEALTHY_PATH).0, 200);
        // Three 1 s intervals would be 3 s: the floor is MIN_STALL.
        let late = finished(Duration::from_secs(4), Duration::from_secs(1));
        assert_eq!(serve_and_get(late, READY_PATH).0, 200);
        let stalled = finished(Duration::from_secs(7), Duration::from_secs(1));
        let (status, body) = serve_and_get(stalled.clone(), READY_PATH);
        assert_eq!(status, 503);
        assert!(body.contains("the last collection finished 7."), "{body}");
        // Still healthy: the process serves.
        assert_eq!(serve_and_get(stalled, HEALTHY_PATH).0, 200);
        let slow = finished(Duration::from_secs(25), Duration::from_secs(10));
        assert_eq!(serve_and_get(slow, READY_PATH).0, 200);
    }

    #[test]
    fn not_ready_while_every_cgroup_is_skipped_for_the_descriptor_budget() {
        use crate::snapshot::SkipReason;
        let with = |monitored: u64, over_budget: u64| {
            let latest = finished(Duration::from_millis(100), Duration::from_secs(1));
            let mut snap = (*latest.get()).clone();
            snap.monitored_cgroups = monitored;
            snap.skipped.insert(SkipReason::FdBudget, over_budget);
            latest.publish(snap);
            serve_and_get(latest, READY_PATH)
        };
        let (status, body) = with(0, 1);
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("no cgroup is counted: the 1 selected are skipped (fd_budget)")
                && body.contains("ulimit -n"),
            "{body}"
        );
        // Some counted: ready, the skip counter says the rest.
        assert_eq!(with(1, 5).0, 200);
        assert_eq!(with(0, 0).0, 200);
    }

    #[test]
    fn not_ready_while_every_cgroup_is_skipped_for_max_cgroups_or_a_path_too_long() {
        use crate::snapshot::SkipReason;
        let with = |monitored: u64, skips: &[(SkipReason, u64)]| {
            let latest = finished(Duration::from_millis(100), Duration::from_secs(1));
            let mut snap = (*latest.get()).clone();
            snap.monitored_cgroups = monitored;
            for &(reason, n) in skips {
                snap.skipped.insert(reason, n);
            }
            latest.publish(snap);
            serve_and_get(latest, READY_PATH)
        };
        let (status, body) = with(0, &[(SkipReason::MaxCgroups, 3)]);
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("no cgroup is counted: the 3 selected are skipped (max_cgroups)")
                && body.contains("`max_cgroups` allows"),
            "{body}"
        );
        let (status, body) = with(0, &[(SkipReason::PathTooLong, 1)]);
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("the 1 selected are skipped (path_too_long)")
                && body.contains("PATH_MAX"),
            "{body}"
        );
        let both = [(SkipReason::PathTooLong, 1), (SkipReason::FdBudget, 2)];
        let (status, body) = with(0, &both);
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("the 3 selected are skipped (2 fd_budget, 1 path_too_long)")
                && body.contains("ulimit -n")
                && body.contains("PATH_MAX"),
            "{body}"
        );
        assert_eq!(with(1, &[(SkipReason::MaxCgroups, 9)]).0, 200);
        assert_eq!(with(1, &both).0, 200);
    }

    #[test]
    fn not_ready_while_nothing_can_be_counted() {
        use crate::ids::GroupId;
        use crate::snapshot::{NotCountable, Support};
        let refused = |group: &str| Support {
            group: GroupId::Named(group.into()),
            event: None,
            status: Err(NotCountable::new(
                "permission",
                "event `x`: permission denied",
            )),
        };
        let with = |support: Vec<Support>| {
            let latest = finished(Duration::from_millis(100), Duration::from_secs(1));
            let mut snap = (*latest.get()).clone();
            snap.support = support;
            latest.publish(snap);
            serve_and_get(latest, READY_PATH)
        };
        let (status, body) = with(vec![refused("sw"), refused("hw")]);
        assert_eq!(status, 503, "{body}");
        assert!(
            body.contains("nothing can be counted: every group is refused (permission)")
                && body.contains("seccomp"),
            "{body}"
        );
        let mut some = vec![refused("hw")];
        some.push(Support {
            status: Ok(()),
            ..refused("sw")
        });
        assert_eq!(with(some).0, 200);
        // A tracepoint that cannot be counted is not a group's verdict.
        let mut events_only = vec![Support {
            event: Some("sched:nope".into()),
            ..refused("tracepoints")
        }];
        assert_eq!(
            with(events_only.clone()).0,
            200,
            "no group verdict: no verdict"
        );
        events_only.push(Support {
            status: Ok(()),
            ..refused("sched")
        });
        assert_eq!(with(events_only).0, 200);
    }

    #[test]
    fn landing_page_links_metrics() {
        assert!(landing_page("/metrics").contains("<a href=\"/metrics\">"));
        assert!(landing_page("/x\"<").contains("/x&quot;&lt;"));
    }
}
