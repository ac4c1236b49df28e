//! When to send a failed request again, per the OTLP spec: only for
//! retryable failures, after an exponentially growing delay with jitter, or
//! after exactly the delay the collector asked for (`Retry-After`,
//! `RetryInfo`); a bounded number of times, and never past the deadline of
//! the push, which is when the next push is due. Data is cumulative, so a
//! request given up costs resolution, not counts: the next push carries the
//! totals again.
//!
//! A delay the collector asks for is a number it chooses, up to 2^64 - 1
//! seconds: it is only ever compared with the time left before the next
//! push, never added to a clock, so no value can overflow, and no value can
//! silence cgperf for longer than one push interval.

use super::transport::Failure;
use std::time::{Duration, Instant};

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

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Send the request again after this delay.
    Retry(Duration),
    /// Give up: the failure is final, the attempts are used up, or the
    /// backoff would end past the push's deadline.
    GiveUp,
    /// Give up because the collector asked to wait past the push's
    /// deadline: the next push, on schedule, carries the values.
    Deferred,
}

impl Backoff {
    /// What to do after attempt `attempt` (1-based) failed with `failure`.
    /// `remaining` is the time left before the push's deadline; `jitter` is
    /// uniform in `[0, 1)` and spreads the computed delay over ±50 %, so
    /// that many cgperf instances do not retry in lockstep. A delay the
    /// collector asked for is used as it is when it ends before the
    /// deadline.
    pub fn next(&self, attempt: u32, failure: &Failure, remaining: Duration, jitter: f64) -> Next {
        if !failure.reason.retryable() || attempt >= self.attempts {
            return Next::GiveUp;
        }
        match failure.retry_after {
            Some(asked) if asked <= remaining => Next::Retry(asked),
            Some(_) => Next::Deferred,
            None => {
                let exponential = self
                    .initial
                    .saturating_mul(1 << attempt.saturating_sub(1).min(16))
                    .min(self.max);
                let delay = exponential.mul_f64(0.5 + jitter.clamp(0.0, 1.0));
                if delay <= remaining {
                    Next::Retry(delay)
                } else {
                    Next::GiveUp
                }
            }
        }
    }
}

/// When a push that starts `now` must end: when the next push is due,
/// `interval` later. An instant the clock cannot represent (an interval
/// larger than any the config accepts) ends it now rather than panicking.
pub fn deadline(now: Instant, interval: Duration) -> Instant {
    now.checked_add(interval).unwrap_or(now)
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
        let delays: Vec<Next> = (1..=5).map(|a| BACKOFF.next(a, &f, LOTS, 0.5)).collect();
        assert_eq!(
            delays,
            [
                Next::Retry(Duration::from_millis(500)),
                Next::Retry(Duration::from_secs(1)),
                Next::Retry(Duration::from_secs(2)),
                Next::Retry(Duration::from_secs(4)),
                Next::GiveUp,
            ]
        );
        let long = Backoff {
            attempts: 100,
            ..BACKOFF
        };
        assert_eq!(long.next(40, &f, LOTS, 0.5), Next::Retry(BACKOFF.max));
        // A backoff that would end after the deadline is no deferral: the
        // collector asked for nothing.
        assert_eq!(
            BACKOFF.next(4, &f, Duration::from_secs(1), 0.5),
            Next::GiveUp
        );
    }

    #[test]
    fn jitter_spreads_by_half() {
        let f = failure(Reason::Timeout, None);
        assert_eq!(
            BACKOFF.next(2, &f, LOTS, 0.0),
            Next::Retry(Duration::from_millis(500))
        );
        assert_eq!(
            BACKOFF.next(2, &f, LOTS, 0.999_999),
            Next::Retry(Duration::from_millis(1500) - Duration::from_nanos(1000))
        );
    }

    #[test]
    fn collector_delay_is_honoured_until_the_next_push() {
        let f = failure(Reason::Throttled, Some(Duration::from_secs(3)));
        assert_eq!(
            BACKOFF.next(1, &f, LOTS, 0.9),
            Next::Retry(Duration::from_secs(3))
        );
        // Not past the deadline: give up, the next push carries the totals.
        assert_eq!(
            BACKOFF.next(1, &f, Duration::from_secs(2), 0.9),
            Next::Deferred
        );
        // The largest delays a collector can express defer as well.
        for asked in [
            Duration::from_secs(u64::MAX),
            Duration::new(u64::MAX, 999_999_999),
            Duration::MAX,
        ] {
            let f = failure(Reason::Unavailable, Some(asked));
            assert_eq!(BACKOFF.next(1, &f, LOTS, 0.5), Next::Deferred);
        }
    }

    #[test]
    fn deadline_never_overflows() {
        let now = Instant::now();
        assert_eq!(
            deadline(now, Duration::from_secs(10)),
            now + Duration::from_secs(10)
        );
        assert_eq!(deadline(now, Duration::MAX), now);
    }

    #[test]
    fn rejected_is_never_retried() {
        let f = failure(Reason::Rejected, Some(Duration::from_secs(1)));
        assert_eq!(BACKOFF.next(1, &f, LOTS, 0.5), Next::GiveUp);
        for reason in [
            Reason::Unreachable,
            Reason::Timeout,
            Reason::Unavailable,
            Reason::Throttled,
        ] {
            assert!(matches!(
                BACKOFF.next(1, &failure(reason, None), LOTS, 0.5),
                Next::Retry(_)
            ));
        }
    }
}
