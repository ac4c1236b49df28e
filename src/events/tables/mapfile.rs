//! `mapfile.csv`: which event files belong to which CPU. Intel's perfmon and
//! perf's pmu-events write it alike: `Family-model,Version,Filename,EventType`,
//! perfmon adding the core type and role (`Atom`, `Core`) of hybrid models.
//!
//! Matching follows perf. On x86 the first column is a POSIX extended
//! regular expression that must match the whole id, with or without its
//! stepping (`GenuineIntel-6-55-[01234]` tells Skylake-SP from Cascade Lake
//! by stepping; `GenuineIntel-6-8F` matches every stepping). On Arm it is a
//! MIDR: implementer, architecture and part number must be equal, and the
//! CPU's variant and revision at least the row's.

use super::TableError;

/// What a row's file holds: the core events, of one core type on hybrid
/// models, or something cgperf does not read (uncore, metrics, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// Core events of every core (`core`, or `hybridcore` without a role).
    Core,
    /// Core events of a hybrid model's efficient cores (`cpu_atom`).
    Atom,
    /// Core events of a hybrid model's performance cores (`cpu_core`).
    BigCore,
    /// A file of another kind.
    Other,
}

/// One row of a mapfile.
#[derive(Debug, Clone)]
pub struct Row {
    /// The CPU id pattern, compiled (x86) or the MIDR (Arm).
    id: RowId,
    /// The event file, or perf's directory of event files, relative to
    /// the mapfile's directory.
    pub file: String,
    /// What it holds.
    pub kind: RowKind,
    /// `file:line`, for errors.
    place: String,
}

#[derive(Debug, Clone)]
enum RowId {
    /// The pattern as written and its literal start (up to the first
    /// character special to a regular expression): most rows are another
    /// vendor's or family's, told apart by the start alone, so their
    /// patterns are never compiled.
    Pattern {
        pattern: String,
        literal: String,
    },
    Midr(u64),
}

/// Characters that end the literal start of a pattern.
const SPECIAL: [char; 12] = ['[', '(', '.', '*', '+', '?', '{', '|', '^', '$', '\\', ')'];

/// MIDR_EL1's variant (bits 20-23) and revision (bits 0-3).
const MIDR_VARIANT_REVISION: u64 = 0x00f0_000f;

/// Parses `text`, the mapfile at `name` (for errors).
pub fn parse(name: &str, text: &str) -> Result<Vec<Row>, TableError> {
    let mut rows = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || index == 0 && line.starts_with("Family") {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = |problem: String| TableError::new(format!("{name}:{line_no}"), problem);
        let [pattern, _version, file, kind, rest @ ..] = cells.as_slice() else {
            return Err(bad(
                "expected at least 4 columns: Family-model,Version,Filename,EventType".into(),
            ));
        };
        let role = rest.get(2).copied().unwrap_or("");
        let kind = match (kind.to_ascii_lowercase().as_str(), role) {
            ("core" | "hybridcore", "Atom") => RowKind::Atom,
            ("core" | "hybridcore", "Core") => RowKind::BigCore,
            ("core" | "hybridcore", _) => RowKind::Core,
            _ => RowKind::Other,
        };
        let id = match pattern.strip_prefix("0x") {
            Some(hex) if hex.chars().all(|c| c.is_ascii_hexdigit()) => {
                let midr = u64::from_str_radix(hex, 16)
                    .map_err(|_| bad(format!("MIDR `{pattern}` has more than 64 bits")))?;
                RowId::Midr(midr)
            }
            _ => {
                let literal = pattern.split(SPECIAL).next().unwrap_or("").to_string();
                RowId::Pattern {
                    pattern: pattern.to_string(),
                    literal,
                }
            }
        };
        let file = file.trim_start_matches('/').to_string();
        let place = format!("{name}:{line_no}");
        rows.push(Row {
            id,
            file,
            kind,
            place,
        });
    }
    Ok(rows)
}

/// `pattern` matched against a whole id.
fn compile(pattern: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{pattern})$"))
}

impl Row {
    /// Whether the row is for the x86 CPU `id` (`Vendor-Family-Model-Stepping`).
    /// A pattern is compiled only when its literal start fits `id`, as perf
    /// compiles them one by one until one matches; one that does not
    /// compile is an error naming its line.
    pub fn matches_x86(&self, id: &str) -> Result<bool, TableError> {
        let RowId::Pattern { pattern, literal } = &self.id else {
            return Ok(false);
        };
        if !id.starts_with(literal.as_str()) {
            return Ok(false);
        }
        let re = compile(pattern).map_err(|e| {
            TableError::new(
                self.place.clone(),
                format!("CPU id pattern `{pattern}`: {e}"),
            )
        })?;
        let without_stepping = id.rsplit_once('-').map_or(id, |(head, _)| head);
        Ok(re.is_match(id) || re.is_match(without_stepping))
    }

    /// Compiles the row's pattern whatever the CPU: the tests' check that
    /// every embedded pattern is valid.
    #[cfg(test)]
    pub fn check_pattern(&self) -> Result<(), TableError> {
        match &self.id {
            RowId::Pattern { literal, .. } => self.matches_x86(literal).map(drop),
            RowId::Midr(_) => Ok(()),
        }
    }

    /// Whether the row is for an Arm CPU whose MIDR is `midr`.
    pub fn matches_midr(&self, midr: u64) -> bool {
        let RowId::Midr(row) = self.id else {
            return false;
        };
        let part = |m: u64| m & !MIDR_VARIANT_REVISION;
        let version = |m: u64| ((m >> 20) & 0xf, m & 0xf);
        part(midr) == part(row) && version(midr) >= version(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTEL: &str =
        "Family-model,Version,Filename,EventType,Core Type,Native Model ID,Core Role Name
GenuineIntel-6-55-[01234],V1.3,/SKX/events/skylakex_core.json,core,,,
GenuineIntel-6-55-[56789ABCDEF],V1.2,/CLX/events/cascadelakex_core.json,core,,,
GenuineIntel-6-8F,V1.39,/SPR/events/sapphirerapids_core.json,core,,,
GenuineIntel-6-8F,V1.39,/SPR/events/sapphirerapids_uncore.json,uncore,,,
GenuineIntel-6-97,V1.40,/ADL/events/alderlake_gracemont_core.json,hybridcore,0x20,0x000001,Atom
GenuineIntel-6-97,V1.40,/ADL/events/alderlake_goldencove_core.json,hybridcore,0x40,0x000001,Core
AuthenticAMD-25-([245][[:xdigit:]]|[[:xdigit:]]),v1,amdzen3,core
";

    fn matching(rows: &[Row], id: &str) -> Vec<(String, RowKind)> {
        rows.iter()
            .filter(|r| r.matches_x86(id).unwrap())
            .map(|r| (r.file.clone(), r.kind))
            .collect()
    }

    #[test]
    fn x86_rows_match_as_perf_matches_them() {
        let rows = parse("mapfile.csv", INTEL).unwrap();
        let skx = matching(&rows, "GenuineIntel-6-55-4");
        assert_eq!(
            skx,
            [("SKX/events/skylakex_core.json".into(), RowKind::Core)]
        );
        let clx = matching(&rows, "GenuineIntel-6-55-7");
        assert_eq!(
            clx,
            [("CLX/events/cascadelakex_core.json".into(), RowKind::Core)]
        );
        let spr = matching(&rows, "GenuineIntel-6-8F-8");
        assert_eq!(spr.len(), 2, "{spr:?}");
        assert_eq!(spr[1].1, RowKind::Other, "uncore is another kind");
        let adl: Vec<RowKind> = matching(&rows, "GenuineIntel-6-97-2")
            .into_iter()
            .map(|(_, k)| k)
            .collect();
        assert_eq!(adl, [RowKind::Atom, RowKind::BigCore]);
        // Models must match whole: 6-8F is not 6-8; family 25 is not 2.
        assert!(matching(&rows, "GenuineIntel-6-8-0").is_empty());
        assert!(matching(&rows, "GenuineIntel-6-8FF-0").is_empty());
        assert_eq!(matching(&rows, "AuthenticAMD-25-1-1").len(), 1);
        assert_eq!(matching(&rows, "AuthenticAMD-25-44-1").len(), 1);
        assert!(matching(&rows, "AuthenticAMD-25-61-1").is_empty());
        assert!(matching(&rows, "AuthenticAMD-26-2-1").is_empty());
    }

    #[test]
    fn arm_rows_match_part_and_at_least_the_version() {
        let text = "0x00000000410fd0c0,v1,arm/cortex-a76-n1,core\n0x00000000411fd400,v1,arm/neoverse-v1,core\n";
        let rows = parse("mapfile.csv", text).unwrap();
        let n1 = &rows[0];
        assert!(n1.matches_midr(0x410f_d0c0));
        assert!(n1.matches_midr(0x413f_d0c1), "a later variant and revision");
        assert!(!n1.matches_midr(0x410f_d0d0), "another part");
        assert!(!n1.matches_midr(0x420f_d0c0), "another implementer");
        assert!(!rows[1].matches_midr(0x410f_d400), "an earlier variant");
        assert!(!n1.matches_x86("GenuineIntel-6-8F-8").unwrap());
    }

    #[test]
    fn bad_rows_name_the_line_and_the_fix() {
        let e = parse(
            "x86/mapfile.csv",
            "Family-model,Version\nGenuineIntel-6-8F,v1\n",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x86/mapfile.csv:2: expected at least 4 columns"),
            "{e}"
        );
        // A broken pattern: an error where it could match, unseen by
        // another vendor's CPU.
        let rows = parse("m.csv", "GenuineIntel-6-[8F,v1,f,core\n").unwrap();
        assert!(!rows[0].matches_x86("AuthenticAMD-25-11-1").unwrap());
        let e = rows[0].matches_x86("GenuineIntel-6-8F-8").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("m.csv:1: CPU id pattern `GenuineIntel-6-[8F`"),
            "{e}"
        );
    }
}
