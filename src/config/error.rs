//! The one error type of the config module.
//!
//! Every problem, from an unreadable file to a group name typo, becomes a
//! [`ConfigError`] that names the file, the position of the offending value
//! when it has one, what is wrong, and (in `hint`) how to fix it. One flat
//! type keeps `cgperf check` output and daemon logs uniform.

use serde_saphyr::Location;

/// A config file problem, positioned where possible.
///
/// Displays as `{source}:{line}:{column}: {message}` (or `{source}: {message}`
/// when there is no position), followed by `\n  hint: {hint}` when there is a
/// hint. Lines and columns are 1-based and count characters, like editors do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct ConfigError {
    /// The file name (or [`super::DEFAULT_SOURCE`]) the error is about.
    pub source_name: String,
    /// 1-based line of the offending value, if known.
    pub line: Option<u32>,
    /// 1-based column of the offending value, if known.
    pub column: Option<u32>,
    /// What is wrong, quoting the offending value.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
    /// The other mistakes found in the same file, in file order.
    pub others: Vec<ConfigError>,
}

impl ConfigError {
    /// An error about the file as a whole, without a position.
    pub(crate) fn new(source_name: &str, message: impl Into<String>) -> Self {
        Self {
            source_name: source_name.to_owned(),
            line: None,
            column: None,
            message: message.into(),
            hint: None,
            others: Vec::new(),
        }
    }

    /// This error followed by `others`.
    pub(crate) fn with_others(mut self, others: Vec<ConfigError>) -> Self {
        self.others = others;
        self
    }

    /// Positions the error at `location`, unless the parser did not know it
    /// (serde-saphyr uses line 0 for "unknown").
    pub(crate) fn at(mut self, location: Option<Location>) -> Self {
        let known = location.filter(|l| l.line() > 0);
        self.line = known.and_then(|l| u32::try_from(l.line()).ok());
        self.column = known.and_then(|l| u32::try_from(l.column()).ok());
        self
    }

    /// Positions the error at a known 1-based line and column.
    pub(crate) fn at_position(mut self, line: u32, column: u32) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// Adds the "how to fix it" line.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    fn render(&self) -> String {
        let mut out = self.source_name.clone();
        if let Some(line) = self.line {
            out.push_str(&format!(":{line}"));
            if let Some(column) = self.column {
                out.push_str(&format!(":{column}"));
            }
        }
        out.push_str(": ");
        out.push_str(&self.message);
        if let Some(hint) = &self.hint {
            out.push_str("\n  hint: ");
            out.push_str(hint);
        }
        let shown = self.others.len().min(MAX_SHOWN_ERRORS - 1);
        for other in &self.others[..shown] {
            out.push('\n');
            out.push_str(&other.render());
        }
        let unshown = self.others.len() - shown;
        if unshown > 0 {
            out.push_str(&format!(
                "\n{}: and {unshown} more mistake{} after these",
                self.source_name,
                if unshown == 1 { "" } else { "s" }
            ));
        }
        out
    }
}

/// Mistakes of one file shown at most (a file of thousands must not bury
/// the first under them); past them, only their number.
const MAX_SHOWN_ERRORS: usize = 20;

/// Longest part of a value a message shows.
const MAX_SHOWN_CHARS: usize = 80;

/// Quotes a user-supplied value for a message, escaping control characters
/// so that a hostile config cannot forge log lines or terminal sequences.
pub(crate) fn quote(value: &str) -> String {
    format!("{:?}", shorten(value))
}

/// The start of `value` when it is too long to show whole in a message
/// (its first [`MAX_SHOWN_CHARS`] characters and `…`), else `value`: one
/// line of error stays one readable line, whatever the config holds.
pub(crate) fn shorten(value: &str) -> std::borrow::Cow<'_, str> {
    match value.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((end, _)) => format!("{}…", &value[..end]).into(),
        None => value.into(),
    }
}

/// A message from elsewhere (the events module) about `value`, with
/// `value`, and every part of it the message quotes between backticks,
/// shortened, and control characters escaped.
pub(crate) fn about(value: &str, message: &str) -> String {
    let shown = shorten(value);
    let message = if shown.len() == value.len() {
        message.into()
    } else {
        message.replace(value, &shown)
    };
    let parts: Vec<std::borrow::Cow<'_, str>> = message
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                shorten(part)
            } else {
                part.into()
            }
        })
        .collect();
    sanitize(&parts.join("`"))
}

/// Escapes control characters in text we did not write (parser messages).
pub(crate) fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_with_and_without_position_and_hint() {
        let mut e = ConfigError::new("a.yaml", "bad");
        assert_eq!(e.to_string(), "a.yaml: bad");
        e.line = Some(3);
        e.column = Some(7);
        assert_eq!(e.to_string(), "a.yaml:3:7: bad");
        let e = e.hint("fix it");
        assert_eq!(e.to_string(), "a.yaml:3:7: bad\n  hint: fix it");
    }

    #[test]
    fn quote_escapes_and_truncates() {
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        assert!(quote(&"x".repeat(200)).ends_with("…\""));
        assert_eq!(sanitize("a\x1b[31mb"), "a\\u{1b}[31mb");
        assert_eq!(shorten(&"é".repeat(80)), "é".repeat(80));
        assert_eq!(shorten(&"é".repeat(81)), format!("{}…", "é".repeat(80)));
    }

    #[test]
    fn messages_about_long_values_show_their_start() {
        let long = format!("{}\x1b", "x".repeat(100_000));
        let said = about(&long, &format!("unknown event `{long}`"));
        assert_eq!(said, format!("unknown event `{}…`", "x".repeat(80)));
        assert_eq!(about("a\x1b", "bad `a\x1b`"), "bad `a\\u{1b}`");
        assert_eq!(about("", "is empty"), "is empty");
        let part = "y".repeat(1_000);
        let said = about(&format!("a:{part}"), &format!("the part `{part}` is bad"));
        assert_eq!(said, format!("the part `{}…` is bad", "y".repeat(80)));
    }
}
