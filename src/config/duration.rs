//! Durations as people write them in configs: `250ms`, `1s`, `1.5s`, `2m`, `1h`.
//!
//! Parsed with integer arithmetic (no floats), so `0.1s` is exactly 100ms
//! and range checks at the boundaries are exact.

use std::time::Duration;

use super::error::quote;

/// Shortest sampling interval: below this the cost of reading every group
/// on every CPU for every cgroup dominates what is being measured.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Longest sampling interval: beyond this, new cgroups would stay invisible
/// for too long (a cgroup gets its series within one interval).
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Why a duration does not parse: the message quotes the text, the hint is the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DurationError {
    pub message: String,
    pub hint: String,
}

const FORMAT_HINT: &str = "write a number directly followed by a unit (ms, s, m or h), \
                           e.g. `250ms`, `1s`, `1.5s` or `2m`";

fn fail(message: String) -> DurationError {
    DurationError {
        message,
        hint: FORMAT_HINT.to_owned(),
    }
}

/// Parses `<digits>[.<digits>]<unit>` with unit `ms`, `s`, `m` or `h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let shown = quote(text);
    if text.is_empty() {
        return Err(fail("the duration is empty".to_owned()));
    }
    if text.starts_with('-') {
        return Err(fail(format!(
            "duration {shown} is negative; it must be positive"
        )));
    }
    let (int_digits, rest) = split_digits(text);
    if int_digits.is_empty() {
        return Err(fail(format!("duration {shown} must start with a number")));
    }
    let (frac_digits, unit) = match rest.strip_prefix('.') {
        Some(after_dot) => split_digits(after_dot),
        None => ("", rest),
    };
    if rest.starts_with('.') && frac_digits.is_empty() {
        return Err(fail(format!(
            "duration {shown} has no digits after the decimal point"
        )));
    }
    let unit_nanos: u128 = match unit {
        "ms" => 1_000_000,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3600 * NANOS_PER_SEC,
        "" => {
            return Err(DurationError {
                message: format!("duration {shown} has no unit"),
                hint: unit_hint(text),
            });
        }
        other => {
            return Err(fail(format!(
                "unknown unit {} in duration {shown}",
                quote(other)
            )));
        }
    };
    if frac_digits.len() > 9 {
        return Err(fail(format!(
            "duration {shown} has more than 9 decimal places"
        )));
    }
    let too_large = || fail(format!("duration {shown} is far too large"));
    // Both parse only ASCII digits, so the only failure is overflow.
    let int: u128 = int_digits.parse().map_err(|_| too_large())?;
    let frac: u128 = if frac_digits.is_empty() {
        0
    } else {
        frac_digits.parse().map_err(|_| too_large())?
    };
    let frac_scale = 10u128.pow(u32::try_from(frac_digits.len()).map_err(|_| too_large())?);
    let nanos = int
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(frac * unit_nanos / frac_scale))
        .ok_or_else(too_large)?;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| too_large())?;
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).map_err(|_| too_large())?;
    Ok(Duration::new(secs, subsec))
}

/// The fix for a number written without a unit: the readings of it as
/// seconds and as milliseconds that a duration setting accepts (every one,
/// `interval`, `otlp.interval` and `otlp.timeout`, takes
/// [`MIN_INTERVAL`]`..=`[`MAX_INTERVAL`]), or the range when neither is.
fn unit_hint(number: &str) -> String {
    let accepted = |unit: &str| {
        let text = format!("{number}{unit}");
        parse_duration(&text)
            .is_ok_and(|d| (MIN_INTERVAL..=MAX_INTERVAL).contains(&d))
            .then_some(text)
    };
    match (accepted("s"), accepted("ms")) {
        (Some(s), Some(ms)) => format!("write `{s}` for seconds or `{ms}` for milliseconds"),
        (Some(s), None) => format!("write `{s}` for seconds"),
        (None, Some(ms)) => format!("write `{ms}` for milliseconds"),
        (None, None) => format!(
            "write a duration from {} to {} with its unit (ms, s, m or h), e.g. `1s`",
            human(MIN_INTERVAL),
            human(MAX_INTERVAL)
        ),
    }
}

/// Writes `d` the way the config does (`100ms`, `1s`, `2m`, `1h`), for messages.
pub(crate) fn human(d: Duration) -> String {
    let secs = d.as_secs();
    match (secs, d.subsec_nanos()) {
        (0, nanos) if nanos % 1_000_000 == 0 => format!("{}ms", nanos / 1_000_000),
        (s, 0) if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        (s, 0) if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        _ => format!("{d:?}"),
    }
}

/// Splits off the leading ASCII digits.
fn split_digits(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let table = [
            ("250ms", Duration::from_millis(250)),
            ("100ms", Duration::from_millis(100)),
            ("1s", Duration::from_secs(1)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.1s", Duration::from_millis(100)),
            ("2m", Duration::from_secs(120)),
            ("0.5m", Duration::from_secs(30)),
            ("1h", Duration::from_secs(3600)),
            ("0s", Duration::ZERO),
            ("1.000000001s", Duration::new(1, 1)),
            ("007s", Duration::from_secs(7)),
        ];
        for (text, want) in table {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn human_forms() {
        assert_eq!(human(Duration::from_millis(100)), "100ms");
        assert_eq!(human(Duration::from_secs(1)), "1s");
        assert_eq!(human(Duration::from_secs(120)), "2m");
        assert_eq!(human(Duration::from_secs(3600)), "1h");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
    }

    #[test]
    fn rejected_forms() {
        let table = [
            ("", "empty"),
            ("1 sec", "unknown unit \" sec\""),
            ("1sec", "unknown unit \"sec\""),
            ("1us", "unknown unit \"us\""),
            ("-1s", "negative"),
            ("+1s", "must start with a number"),
            ("s", "must start with a number"),
            (".5s", "must start with a number"),
            ("1.s", "no digits after the decimal point"),
            ("5", "has no unit"),
            ("1.5", "has no unit"),
            ("1m30s", "unknown unit \"m30s\""),
            ("1.0000000001s", "more than 9 decimal places"),
            ("99999999999999999999999h", "far too large"),
            ("9999999999999999999999999999999999999999s", "far too large"),
        ];
        for (text, want) in table {
            let err = parse_duration(text).expect_err(text);
            assert!(err.message.contains(want), "{text}: {}", err.message);
            assert!(!err.hint.is_empty());
        }
        let hint = |text| parse_duration(text).expect_err("no unit").hint;
        assert_eq!(
            hint("500"),
            "write `500s` for seconds or `500ms` for milliseconds"
        );
        // Only what a duration setting accepts is suggested.
        assert_eq!(hint("5"), "write `5s` for seconds");
        assert_eq!(hint("5000"), "write `5000ms` for milliseconds");
        for never in ["0", "0.01", "99999999999999999999999"] {
            assert_eq!(
                hint(never),
                "write a duration from 100ms to 1h with its unit (ms, s, m or h), e.g. `1s`"
            );
        }
    }
}
