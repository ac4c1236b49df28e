//! Pushing the latest snapshot to an OpenTelemetry collector over OTLP.
//!
//! The push loop runs on a thread of its own with its own (single-threaded)
//! async runtime: a collector that is down, slow or rejecting can delay
//! only the next push, never a collection (the sampler's thread) nor a
//! scrape of `/metrics` (the HTTP server's runtime). Each push converts the
//! snapshot current at that moment ([`convert`]), sends its requests one by
//! one, each attempt bounded by the configured `timeout`, retries per the
//! OTLP spec ([`retry`]) until the next push is due, and then drops what
//! did not get through, counting why ([`OtlpStats`]). Every value is
//! cumulative, so the next push that gets through carries all counts. A
//! collector asking to wait longer than that (`Retry-After`, `RetryInfo`)
//! ends the push's retries, counted as deferred; it never delays the next
//! push.

mod convert;
mod retry;
mod stats;
mod transport;

pub use stats::OtlpStats;

use convert::{Batcher, MAX_REQUEST_BYTES, Request, resource};
use retry::{BACKOFF, Next};
use stats::Reason;
use transport::{Failure, Transport};

use crate::config::OtlpConfig;
use crate::snapshot::Latest;
use anyhow::Context;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;

/// Longest the final push at shutdown may take (when `timeout` is shorter,
/// `timeout`): stopping must stay quick whatever the collector does.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);

/// The running push loop.
#[derive(Debug)]
pub struct Pusher {
    stop: oneshot::Sender<()>,
    /// Disconnects when the loop's thread ends.
    done: mpsc::Receiver<()>,
    flush: Duration,
}

/// Starts pushing what `latest` holds as `config` says, counting into
/// `stats`. `started` is when cgperf started: the start time of its
/// process-wide counters.
pub fn start(
    config: OtlpConfig,
    latest: Latest,
    stats: Arc<OtlpStats>,
    started: SystemTime,
) -> anyhow::Result<Pusher> {
    let (stop, stop_rx) = oneshot::channel();
    let (ready_tx, ready) = mpsc::channel();
    let (done_tx, done) = mpsc::channel::<()>();
    let flush = config.timeout.min(FLUSH_LIMIT);
    std::thread::Builder::new()
        .name("cgperf-otlp".into())
        .spawn(move || {
            let _done = done_tx;
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("starting its runtime: {e}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let transport = match Transport::new(&config) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                // Bytes, escaped as cgroup names are where not UTF-8.
                let host = std::fs::read("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| crate::escape::escape(h.trim_ascii()))
                    .filter(|h| !h.is_empty());
                let push = PushLoop {
                    transport,
                    batcher: Batcher::new(
                        resource(&config.resource, host),
                        started,
                        MAX_REQUEST_BYTES,
                    ),
                    latest,
                    stats,
                    timeout: config.timeout,
                    sent: None,
                    trouble: None,
                    partial: false,
                };
                push.run(config.interval, flush, stop_rx).await;
            });
        })
        .context("starting the OTLP thread")?;
    match ready.recv() {
        Ok(Ok(())) => Ok(Pusher { stop, done, flush }),
        Ok(Err(e)) => anyhow::bail!("OTLP exporter: {e}"),
        Err(_) => anyhow::bail!("OTLP exporter: its thread ended at start"),
    }
}

impl Pusher {
    /// Pushes the latest snapshot once more (if it was not sent yet) and
    /// stops, within the flush bound; a collector that does not answer in
    /// time is left behind.
    pub fn stop(self) {
        let _ = self.stop.send(());
        // Slack for the loop to notice and to build the last requests.
        let bound = self.flush.saturating_add(Duration::from_secs(1));
        if let Err(mpsc::RecvTimeoutError::Timeout) = self.done.recv_timeout(bound) {
            tracing::warn!("the final OTLP push did not finish within {bound:?}; giving up");
        }
    }
}

/// State of the push loop.
struct PushLoop {
    transport: Transport,
    batcher: Batcher,
    latest: Latest,
    stats: Arc<OtlpStats>,
    timeout: Duration,
    /// `taken_at` of the last snapshot sent whole.
    sent: Option<SystemTime>,
    /// The reason of the last failure, while failures last: the first is
    /// logged as a warning, the rest quietly, until exports work again.
    trouble: Option<Reason>,
    /// The last export was only partly accepted.
    partial: bool,
}

impl PushLoop {
    async fn run(mut self, interval: Duration, flush: Duration, mut stop: oneshot::Receiver<()>) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = &mut stop => break,
            }
            // Retries end when the next push is due: it carries newer totals.
            let deadline = retry::deadline(Instant::now(), interval);
            tokio::select! {
                () = self.push(deadline) => {}
                _ = &mut stop => break,
            }
        }
        // One attempt (a deadline of now leaves no time to retry), bounded:
        // stopping must not wait for a collector that is away.
        if tokio::time::timeout(flush, self.push(Instant::now()))
            .await
            .is_err()
        {
            tracing::warn!("the final OTLP push was cut short after {flush:?}");
        }
    }

    /// Sends the latest snapshot, unless it was sent already or there is
    /// nothing yet.
    async fn push(&mut self, deadline: Instant) {
        let snap = self.latest.get();
        if snap.collections == 0 || self.sent == Some(snap.taken_at) {
            return;
        }
        let requests = self.batcher.requests(&snap, Some(&self.stats));
        let total = requests.len();
        let mut requests = requests.into_iter();
        let mut whole = true;
        while let Some(request) = requests.next() {
            let Err(failure) = self.send(&request, deadline).await else {
                continue;
            };
            self.stats.failed(failure.reason, 1);
            if failure.reason.retryable() {
                // The collector is in trouble, not this request: the rest
                // of the snapshot would fare no better.
                let rest = requests.len();
                self.stats.failed(failure.reason, rest as u64);
                self.complain(&failure, 1 + rest, total);
                whole = false;
                break;
            }
            self.complain(&failure, 1, total);
        }
        if whole {
            self.sent = Some(snap.taken_at);
        }
    }

    /// Sends one request with retries; `Err` is the last failure.
    async fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Failure> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result =
                tokio::time::timeout(self.timeout, self.transport.export(&request.message))
                    .await
                    .unwrap_or_else(|_| Err(Failure::timed_out(self.timeout)));
            let failure = match result {
                Ok(response) => {
                    let partial = response.partial_success.unwrap_or_default();
                    let rejected = u64::try_from(partial.rejected_data_points).unwrap_or(0);
                    self.stats.accepted(request.points, rejected);
                    if rejected > 0 || !partial.error_message.is_empty() {
                        let message = format!(
                            "the OTLP collector rejected {rejected} of {} points: {}",
                            request.points, partial.error_message
                        );
                        // A warning when partial successes start, then
                        // quietly until an export is whole again.
                        if std::mem::replace(&mut self.partial, true) {
                            tracing::debug!("{message}");
                        } else {
                            tracing::warn!(
                                "{message} (further ones are logged at debug level; \
                                 see cgperf_otlp_rejected_points_total)"
                            );
                        }
                    } else {
                        self.partial = false;
                    }
                    if let Some(reason) = self.trouble.take() {
                        tracing::info!(
                            "OTLP exports work again (after failures: {})",
                            reason.label()
                        );
                    }
                    return Ok(());
                }
                Err(failure) => failure,
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            match BACKOFF.next(attempt, &failure, remaining, fastrand::f64()) {
                Next::Retry(delay) => {
                    tracing::debug!(
                        attempt,
                        "OTLP export failed ({}), retrying in {delay:?}",
                        failure.detail
                    );
                    tokio::time::sleep(delay).await;
                }
                Next::Deferred => {
                    // Waiting as asked would delay the next push, which
                    // carries newer totals anyway.
                    tracing::debug!(
                        "OTLP export failed ({}); the collector asked to wait {:?}, \
                         past the next push, which will carry the values",
                        failure.detail,
                        failure.retry_after.unwrap_or_default()
                    );
                    self.stats.deferred();
                    return Err(failure);
                }
                Next::GiveUp => return Err(failure),
            }
        }
    }

    /// Logs dropped requests: a warning when trouble starts or changes,
    /// quietly while it lasts.
    fn complain(&mut self, failure: &Failure, dropped: usize, total: usize) {
        let reason = failure.reason.label();
        if self.trouble == Some(failure.reason) {
            tracing::debug!(
                reason,
                "OTLP export: dropped {dropped} of {total} requests: {}",
                failure.detail
            );
        } else {
            tracing::warn!(
                reason,
                "OTLP export: dropped {dropped} of {total} requests: {} (further failures of this kind are logged at debug level; see cgperf_otlp_export_failures_total)",
                failure.detail
            );
        }
        self.trouble = Some(failure.reason);
    }
}
