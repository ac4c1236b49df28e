//! When to send a failed request again, per the OTLP spec: only for
//! retryable failures, after an exponentially growing delay with jitter, or
//! after exactly the delay the collector asked for (`Retry-After`,
//! `RetryInfo`); a bounded number of times, and never past the deadline of
//! the push. Data is cumulative, so a request given up costs resolution,
//! not counts: the next push carries the totals again.

use super::transport::Failure;
use std::time::{Duration, SystemTime};

/// Exponential backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure, before jitter.
    pub initial: Duration,
    /// Largest delay, before jitter.
    pub max: Duration,
    /// Attempts of one request, the first included.
    pub attempts: u32,
}

/// The push loop's policy: quick first retries (a collector restarting is
/// back within seconds), at most five attempts.
pub const BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(500),
    max: Duration::from_secs(8),
    attempts: 5,
};

impl Backoff {
    /// The wait before attempt `attempt + 1`, after attempt `attempt`
    /// (1-based) failed with `failure`; `None` to give up. `remaining` is
    /// the time left before the push's deadline; `jitter` is uniform in
    /// `[0, 1)` and spreads the computed delay over ±50 %, so that many
    /// cgperf instances do not retry in lockstep. A delay the collector
    /// asked for is used as it is.
    pub fn next(
        &self,
        attempt: u32,
        failure: &Failure,
        remaining: Duration,
        jitter: f64,
    ) -> Option<Duration> {
        if !failure.reason.retryable() || attempt >= self.attempts {
            return None;
        }
        let delay = match failure.retry_after {
            Some(asked) => asked,
            None => {
                let exponential = self
                    .initial
                    .saturating_mul(1 << attempt.saturating_sub(1).min(16))
                    .min(self.max);
                exponential.mul_f64(0.5 + jitter.clamp(0.0, 1.0))
            }
        };
        (delay <= remaining).then_some(delay)
    }
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
    use crate::exporter::otlp::stats::Reason;

    fn failure(reason: Reason, retry_after: Option<Duration>) -> Failure {
        Failure {
            reason,
            retry_after,
            detail: String::new(),
        }
    }

    const LOTS: Duration = Duration::from_secs(3600);

    #[test]
    fn exponential_capped_and_bounded() {
        let f = failure(Reason::Unavailable, None);
        let delays: Vec<Option<Duration>> =
            (1..=5).map(|a| BACKOFF.next(a, &f, LOTS, 0.5)).collect();
        assert_eq!(
            delays,
            [
                Some(Duration::from_millis(500)),
                Some(Duration::from_secs(1)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(4)),
                None,
            ]
        );
        let long = Backoff {
            attempts: 100,
            ..BACKOFF
        };
        assert_eq!(long.next(40, &f, LOTS, 0.5), Some(BACKOFF.max));
    }

    #[test]
    fn jitter_spreads_by_half() {
        let f = failure(Reason::Timeout, None);
        assert_eq!(
            BACKOFF.next(2, &f, LOTS, 0.0),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            BACKOFF.next(2, &f, LOTS, 0.999_999),
            Some(Duration::from_millis(1500) - Duration::from_nanos(1000))
        );
    }

    #[test]
    fn collector_delay_is_honoured() {
        let f = failure(Reason::Throttled, Some(Duration::from_secs(3)));
        assert_eq!(BACKOFF.next(1, &f, LOTS, 0.9), Some(Duration::from_secs(3)));
        // Not past the deadline: give up, the next push carries the totals.
        assert_eq!(BACKOFF.next(1, &f, Duration::from_secs(2), 0.9), None);
    }

    #[test]
    fn rejected_is_never_retried() {
        let f = failure(Reason::Rejected, Some(Duration::from_secs(1)));
        assert_eq!(BACKOFF.next(1, &f, LOTS, 0.5), None);
        for reason in [
            Reason::Unreachable,
            Reason::Timeout,
            Reason::Unavailable,
            Reason::Throttled,
        ] {
            assert!(BACKOFF.next(1, &failure(reason, None), LOTS, 0.5).is_some());
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
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }
}
