//! The OTLP exporter's own counters. The push loop writes them; `/metrics`
//! and the next push read them. They live outside the snapshot because the
//! sampler knows nothing of the exporter: data still flows one way.

use crate::exporter::families::{
    Family, Labels, OTLP_DEFERRED, OTLP_EXPORTS, OTLP_FAILURES, OTLP_POINTS, OTLP_REJECTED, Point,
    SelfMetrics,
};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an export request was dropped: the `reason` label of
/// `cgperf_otlp_export_failures_total`. A fixed set, so the label's
/// cardinality is bounded whatever a collector answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No connection could be made (refused, no route, TLS handshake).
    Unreachable,
    /// No answer within `timeout`.
    Timeout,
    /// The collector answered that it cannot take data now (gRPC
    /// UNAVAILABLE and the other retryable codes, HTTP 502/503/504).
    Unavailable,
    /// The collector asked to slow down (HTTP 429, gRPC RESOURCE_EXHAUSTED
    /// with RetryInfo).
    Throttled,
    /// The collector refused the request for good (bad request,
    /// authentication, too large): retrying the same bytes cannot help.
    Rejected,
}

impl Reason {
    /// Every reason, in label order.
    pub const ALL: [Reason; 5] = [
        Self::Unreachable,
        Self::Timeout,
        Self::Unavailable,
        Self::Throttled,
        Self::Rejected,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Throttled => "throttled",
            Self::Rejected => "rejected",
        }
    }

    /// Whether the OTLP spec lets a client send the same request again.
    pub fn retryable(self) -> bool {
        self != Self::Rejected
    }

    fn index(self) -> usize {
        match self {
            Self::Unreachable => 0,
            Self::Timeout => 1,
            Self::Unavailable => 2,
            Self::Throttled => 3,
            Self::Rejected => 4,
        }
    }
}

/// Counters of the OTLP push since start.
#[derive(Debug, Default)]
pub struct OtlpStats {
    exports: AtomicU64,
    exported_points: AtomicU64,
    rejected_points: AtomicU64,
    failures: [AtomicU64; Reason::ALL.len()],
    deferred: AtomicU64,
}

impl OtlpStats {
    /// Requests the collector accepted (fully or partly).
    pub fn exports(&self) -> u64 {
        self.exports.load(Ordering::Relaxed)
    }

    /// Points in accepted requests, less those the collector rejected.
    pub fn exported_points(&self) -> u64 {
        self.exported_points.load(Ordering::Relaxed)
    }

    /// Points the collector rejected in partially successful requests.
    pub fn rejected_points(&self) -> u64 {
        self.rejected_points.load(Ordering::Relaxed)
    }

    /// Pushes whose retries ended because the collector asked to wait
    /// (`Retry-After`, `RetryInfo`) past the next push.
    pub fn deferred_pushes(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }

    /// Dropped requests by reason, every reason included (zeros too, so
    /// that rates work from the start).
    pub fn failures(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Reason::ALL
            .into_iter()
            .map(|r| (r.label(), self.failures[r.index()].load(Ordering::Relaxed)))
    }

    /// Records an accepted request of `points` points, `rejected` of which
    /// the collector refused.
    pub(super) fn accepted(&self, points: u64, rejected: u64) {
        self.exports.fetch_add(1, Ordering::Relaxed);
        self.exported_points
            .fetch_add(points.saturating_sub(rejected), Ordering::Relaxed);
        self.rejected_points.fetch_add(rejected, Ordering::Relaxed);
    }

    /// Records a push deferred to the next one at the collector's request.
    pub(super) fn deferred(&self) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `requests` dropped requests.
    pub(super) fn failed(&self, reason: Reason, requests: u64) {
        self.failures[reason.index()].fetch_add(requests, Ordering::Relaxed);
    }
}

impl SelfMetrics for OtlpStats {
    fn families(&self) -> Vec<(&'static Family, Vec<Point<'static>>)> {
        let scalar = |n: u64| vec![Point::fixed(Labels::NONE, n as f64)];
        let failures = self
            .failures()
            .map(|(reason, n)| Point::fixed(Labels::one("reason", reason), n as f64))
            .collect();
        vec![
            (&OTLP_EXPORTS, scalar(self.exports())),
            (&OTLP_POINTS, scalar(self.exported_points())),
            (&OTLP_REJECTED, scalar(self.rejected_points())),
            (&OTLP_FAILURES, failures),
            (&OTLP_DEFERRED, scalar(self.deferred_pushes())),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason() {
        let stats = OtlpStats::default();
        stats.accepted(10, 3);
        stats.failed(Reason::Timeout, 2);
        assert_eq!(
            (
                stats.exports(),
                stats.exported_points(),
                stats.rejected_points()
            ),
            (1, 7, 3)
        );
        let failures: Vec<_> = stats.failures().collect();
        assert_eq!(failures.len(), 5);
        assert!(failures.contains(&("timeout", 2)));
        assert!(failures.contains(&("rejected", 0)));
        assert!(!Reason::Rejected.retryable() && Reason::Throttled.retryable());
    }
}
