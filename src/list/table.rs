//! How `cgperf list` prints: the aligned table (and the column width that
//! `check` and `stat` align by too), or one JSON array.

use super::{Countable, Entry, Listing};
use std::io::{self, Write};

/// Longest name aligned in the tables of `cgperf check` and `cgperf stat`:
/// the longest file name Linux allows; longer ones overflow their column.
pub const NAME_MAX: usize = 255;

/// The width of a table column holding values of `lengths` under a
/// heading of `heading` characters: the longest value of at most `aligned`
/// characters. Longer values overflow their column rather than push every
/// row far right; and a width computed from a value a user wrote, unbounded,
/// would make the formatting panic past 65,535.
pub fn column_width(
    lengths: impl IntoIterator<Item = usize>,
    heading: usize,
    aligned: usize,
) -> usize {
    lengths
        .into_iter()
        .filter(|&n| n <= aligned)
        .max()
        .unwrap_or(0)
        .max(heading)
}

/// The table: `name  kind  description`, then the PMU format terms and probe
/// support.
pub(super) fn write_table(listing: &Listing, out: &mut dyn Write) -> io::Result<()> {
    // Long tracepoint names would push every description far right.
    let width = column_width(listing.entries.iter().map(|e| e.name.len()), 0, 40);
    for e in &listing.entries {
        let mark = match e.countable {
            Countable::No => "[not countable here] ",
            Countable::Yes | Countable::Unknown => "",
        };
        let line = format!(
            "  {:width$}  {:11}  {mark}{}",
            e.name,
            e.kind.as_str(),
            e.description
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    if !listing.formats.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "PMU format terms (write pmu/term=value,.../, e.g. cpu/event=0x3c,umask=0x0/):"
        )?;
        let width = listing
            .formats
            .iter()
            .map(|f| f.pmu.len() + 1)
            .max()
            .unwrap_or(0);
        for f in &listing.formats {
            let terms: Vec<String> = f
                .terms
                .iter()
                .map(|(t, bits)| format!("{t}={bits}"))
                .collect();
            let pmu = format!("{}/", f.pmu);
            writeln!(out, "  {pmu:width$}  {}", terms.join("  "))?;
        }
    }
    if !listing.probes.is_empty() {
        writeln!(out)?;
        writeln!(out, "Probes:")?;
        for line in &listing.probes {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

/// One JSON array, one object per line.
pub(super) fn write_json(entries: &[Entry], out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "[")?;
    for (i, e) in entries.iter().enumerate() {
        let comma = if i + 1 < entries.len() { "," } else { "" };
        let countable = match e.countable {
            Countable::Yes => "true",
            Countable::No => "false",
            Countable::Unknown => "null",
        };
        writeln!(
            out,
            "  {{\"name\":{},\"kind\":{},\"description\":{},\"countable\":{countable}}}{comma}",
            json_string(&e.name),
            json_string(e.kind.as_str()),
            json_string(&e.description)
        )?;
    }
    writeln!(out, "]")
}

/// `text` as a JSON string literal (RFC 8259: quote, backslash and control
/// characters escaped; everything else is valid UTF-8 as it is).
fn json_string(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if u32::from(c) < 0x20 => s.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("plain"), "\"plain\"");
        assert_eq!(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(json_string("t\tn\n\u{1}"), "\"t\\tn\\n\\u0001\"");
        assert_eq!(json_string("é"), "\"é\"");
    }
}
