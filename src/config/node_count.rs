//! Where a config's YAML nodes are, for the error of a document past the
//! node cap: a user who wrote thousands of list items needs to know which
//! list made the document too big, not only that it is.

use serde_saphyr::granit_parser::{Event, Parser};

/// The two top-level settings holding the most nodes, for a document past
/// the node cap: `` (`metrics:` 38002, `tracepoints:` 12001)``, or nothing
/// where the text does not parse. Counted on the parser's events, which
/// aliases do not expand.
pub(super) fn largest_settings(text: &str) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    // Under the root mapping: whether the next scalar is a key.
    let mut key_next = true;
    for item in Parser::new_from_str(text) {
        let Ok((event, _)) = item else {
            return String::new();
        };
        let node = matches!(
            event,
            Event::Scalar(..)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
                | Event::Alias(..)
        );
        if depth == 1 && node {
            match (&event, key_next) {
                (Event::Scalar(key, ..), true) => {
                    counts.push((key.to_string(), 0));
                    key_next = false;
                    continue;
                }
                _ => key_next = true,
            }
        }
        if node
            && depth >= 1
            && let Some((_, n)) = counts.last_mut()
        {
            *n += 1;
        }
        match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => depth += 1,
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                if depth == 1 {
                    key_next = true;
                }
            }
            _ => {}
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let shown: Vec<String> = counts
        .iter()
        .take(2)
        .map(|(key, n)| format!("`{key}:` {n}"))
        .collect();
    match shown.is_empty() {
        true => String::new(),
        false => format!(" ({})", shown.join(", ")),
    }
}
