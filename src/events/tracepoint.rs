//! Tracepoint names (`subsystem:event`) as tracefs lists them under
//! `events/<subsystem>/<event>`.

use std::fmt;

use crate::events::{EventSyntaxError, check_blank};

/// A tracepoint such as `sched:sched_switch`; both parts are safe to join to
/// a tracefs path (no `/`, no `..`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TracepointName {
    /// The tracefs subsystem directory, e.g. `sched`.
    pub subsystem: String,
    /// The event directory inside it, e.g. `sched_switch`.
    pub name: String,
}

impl fmt::Display for TracepointName {
    /// Writes `subsystem:name`, the form perf and the config use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.subsystem, self.name)
    }
}

/// What is wrong with a tracepoint name.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TracepointProblem {
    /// No `:` between subsystem and event.
    #[error("missing `:`; write it as subsystem:event, e.g. `sched:sched_switch`")]
    MissingColon,
    /// `*`, `?` or `[...]`, which perf expands but this daemon does not.
    #[error("wildcards are not supported; list each tracepoint, e.g. `sched:sched_switch`")]
    Wildcard,
    /// `:event` or `subsystem:`.
    #[error("empty subsystem or event; write it as subsystem:event, e.g. `sched:sched_switch`")]
    EmptyPart,
    /// A part with characters tracefs names do not have.
    #[error("`{0}` may contain only letters, digits, `_` and `-`")]
    BadName(String),
    /// A part longer than a tracefs directory name can be.
    #[error(
        "a subsystem or event name is at most {NAME_MAX} characters (it names a tracefs directory); this one has {0}"
    )]
    TooLong(usize),
}

/// Longest subsystem or event name: each is a directory name in tracefs,
/// and Linux allows no longer file name.
pub const NAME_MAX: usize = 255;

/// Parses `subsystem:event`, each part `[A-Za-z0-9_-]+` (tracefs names such as
/// `sched:sched_switch`, `raw_syscalls:sys_enter`, `xhci-hcd:xhci_urb_enqueue`).
/// Pure syntax: whether the tracepoint exists is not checked.
pub fn parse_tracepoint(text: &str) -> Result<TracepointName, EventSyntaxError> {
    check_blank(text)?;
    let bad = |problem| EventSyntaxError::BadTracepoint {
        text: text.to_string(),
        problem,
    };
    if text.contains(['*', '?', '[', ']']) {
        return Err(bad(TracepointProblem::Wildcard));
    }
    let (subsystem, name) = text
        .split_once(':')
        .ok_or_else(|| bad(TracepointProblem::MissingColon))?;
    for part in [subsystem, name] {
        if part.is_empty() {
            return Err(bad(TracepointProblem::EmptyPart));
        }
        if part.len() > NAME_MAX {
            return Err(bad(TracepointProblem::TooLong(part.len())));
        }
        if !part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        {
            return Err(bad(TracepointProblem::BadName(part.to_string())));
        }
    }
    Ok(TracepointName {
        subsystem: subsystem.to_string(),
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn problem(text: &str) -> TracepointProblem {
        match parse_tracepoint(text) {
            Err(EventSyntaxError::BadTracepoint { problem, .. }) => problem,
            other => panic!("`{text}`: {other:?}"),
        }
    }

    #[test]
    fn valid_tracepoints_round_trip() {
        for text in [
            "sched:sched_switch",
            "syscalls:sys_enter_openat",
            "raw_syscalls:sys_enter",
            "xhci-hcd:xhci_urb_enqueue",
            "9p:9p_client_req",
        ] {
            let tp = parse_tracepoint(text).unwrap();
            assert_eq!(tp.to_string(), text);
        }
        let tp = parse_tracepoint("sched:sched_switch").unwrap();
        assert_eq!(
            (tp.subsystem.as_str(), tp.name.as_str()),
            ("sched", "sched_switch")
        );
    }

    #[test]
    fn malformed_tracepoints() {
        assert_eq!(parse_tracepoint(""), Err(EventSyntaxError::Empty));
        assert_eq!(
            parse_tracepoint(" sched:sched_switch"),
            Err(EventSyntaxError::Whitespace(" sched:sched_switch".into()))
        );
        for text in [
            "sched:*",
            "sched:sched_*",
            "*:sys_enter",
            "sched:sched_switc?",
            "sched:[ab]",
        ] {
            assert_eq!(problem(text), TracepointProblem::Wildcard, "{text}");
        }
        assert_eq!(problem("sched_switch"), TracepointProblem::MissingColon);
        assert_eq!(problem(":sched_switch"), TracepointProblem::EmptyPart);
        assert_eq!(problem("sched:"), TracepointProblem::EmptyPart);
        let longest = "x".repeat(NAME_MAX);
        assert!(parse_tracepoint(&format!("{longest}:{longest}")).is_ok());
        assert_eq!(
            problem(&format!("sched:{longest}x")),
            TracepointProblem::TooLong(NAME_MAX + 1)
        );
        assert_eq!(
            problem(&format!("{}:a", "s".repeat(100_000))),
            TracepointProblem::TooLong(100_000)
        );
        assert_eq!(
            problem("sched:sched:switch"),
            TracepointProblem::BadName("sched:switch".into())
        );
        assert_eq!(problem("../x:y"), TracepointProblem::BadName("../x".into()));
        assert_eq!(
            problem("sched:a/b"),
            TracepointProblem::BadName("a/b".into())
        );
        assert_eq!(
            problem("sched:sched.switch"),
            TracepointProblem::BadName("sched.switch".into())
        );
        let msg = parse_tracepoint("sched:*").unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid tracepoint `sched:*`: wildcards are not supported; list each tracepoint, e.g. `sched:sched_switch`"
        );
    }

    proptest! {
        #[test]
        fn never_panics_and_parts_are_path_safe(text in "\\PC{0,30}") {
            if let Ok(tp) = parse_tracepoint(&text) {
                prop_assert!(!tp.subsystem.contains(['/', '.']) && !tp.name.contains(['/', '.']));
                prop_assert_eq!(tp.to_string(), text);
            }
        }
    }
}
