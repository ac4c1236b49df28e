//! Tracepoint record layouts, as tracefs describes them in
//! `events/<subsystem>/<event>/format`, and the decoding of one field of a
//! raw record (`PERF_SAMPLE_RAW`) into a label value.
//!
//! cgperf counts sampled tracepoints by the value of a field, so a value
//! becomes a label: it must be readable, stable from one record to the next
//! and bounded in size. [`Field::format_value`] documents the exact text.

use std::collections::HashSet;
use std::fmt::Write as _;

/// The longest label value [`Field::format_value`] writes, in bytes.
///
/// Prometheus keeps every distinct label value of every series in memory, and
/// a `__data_loc` string can be up to 64 KiB long: values are cut at the last
/// whole character (or array element) that fits in this many bytes.
pub const MAX_VALUE_LEN: usize = 256;

/// The layout of one tracepoint's records, parsed from its `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointFormat {
    /// The event name from the `name:` line, e.g. `sched_switch`.
    pub name: String,
    /// The tracepoint id from the `ID:` line: `perf_event_attr.config`.
    pub id: u64,
    /// Every field in file order, the `common_*` header fields included.
    pub fields: Vec<Field>,
}

/// One field of a tracepoint record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The field name, e.g. `prev_comm`.
    pub name: String,
    /// The declared type without the name, e.g. `unsigned long`, `char[16]`,
    /// `__data_loc char[]`.
    pub type_text: String,
    /// Byte offset of the field from the start of the raw record.
    pub offset: usize,
    /// Size in bytes of the field in the record (4 for `__data_loc` and
    /// `__rel_loc`, which hold a location, not the data).
    pub size: usize,
    /// Whether integers (and elements of integer arrays) are signed.
    pub signed: bool,
    /// How the bytes of the field are interpreted.
    pub kind: FieldKind,
}

/// How [`Field::format_value`] reads and prints a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer of 1, 2, 4 or 8 bytes.
    Int,
    /// A pointer (a `*` in the type) of 1, 2, 4 or 8 bytes.
    Pointer,
    /// `char name[len]`: text up to the first NUL.
    CharArray {
        /// Number of bytes (0 for a flexible `char name[]`).
        len: usize,
    },
    /// A fixed array of integers, or the bytes of a field whose size is not
    /// an integer width.
    Array {
        /// Bytes per element: 1, 2, 4 or 8.
        elem_size: usize,
        /// Number of elements (0 for a flexible `type name[]`).
        len: usize,
    },
    /// `__data_loc type[] name`: a u32 holding the offset (low 16 bits, from
    /// the start of the record) and length (high 16 bits) of the data.
    DataLoc {
        /// `__data_loc char[]`: the data is text.
        chars: bool,
    },
    /// `__rel_loc type[] name`: as [`FieldKind::DataLoc`], but the offset
    /// counts from the end of the field itself.
    RelLoc {
        /// `__rel_loc char[]`: the data is text.
        chars: bool,
    },
}

/// A `format` file that cgperf cannot read; `line` counts from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A line is not what the format file has at that place.
    #[error(
        "tracepoint format, line {line}: expected {expected}, found `{found}` \
         (is this a tracefs `format` file, e.g. /sys/kernel/tracing/events/sched/sched_switch/format?)"
    )]
    Unexpected {
        /// Line number, from 1.
        line: usize,
        /// What the parser expected there.
        expected: &'static str,
        /// The start of the line (at most 80 characters).
        found: String,
    },
    /// The text ends before a required line.
    #[error(
        "tracepoint format ends at line {line}, expected {expected} \
         (was the file read to the end?)"
    )]
    Truncated {
        /// Number of lines in the text.
        line: usize,
        /// The missing line.
        expected: &'static str,
    },
    /// A field line that is well-formed but describes an impossible field.
    #[error("tracepoint format, line {line}: field `{field}`: {problem}")]
    BadField {
        /// Line number, from 1.
        line: usize,
        /// The field name.
        field: String,
        /// What is inconsistent.
        problem: &'static str,
    },
}

/// A raw record that does not hold the field where the format says it is.
///
/// Raw data comes from the kernel, so this means a record of another
/// tracepoint, a format read from another kernel, or a corrupted buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The field's own bytes lie beyond the record.
    #[error(
        "field `{field}` (bytes {offset}..{offset}+{size}) is outside the {raw_len}-byte record; \
         is the record from the tracepoint this format was read for?"
    )]
    FieldOutOfBounds {
        /// The field name.
        field: String,
        /// Offset of the field.
        offset: usize,
        /// Size of the field.
        size: usize,
        /// Length of the record.
        raw_len: usize,
    },
    /// A `__data_loc`/`__rel_loc` field points outside the record.
    #[error(
        "field `{field}` points at bytes {start}..{start}+{len}, outside the {raw_len}-byte record; \
         is the record from the tracepoint this format was read for?"
    )]
    DataOutOfBounds {
        /// The field name.
        field: String,
        /// Where the data starts, from the start of the record.
        start: usize,
        /// The data length the field gives.
        len: usize,
        /// Length of the record.
        raw_len: usize,
    },
    /// An integer or element width other than 1, 2, 4 or 8 bytes (only a
    /// hand-made [`Field`] has one; [`TracepointFormat::parse`] never makes it).
    #[error("field `{field}`: cannot decode an integer of {size} bytes (only 1, 2, 4 or 8)")]
    UnsupportedWidth {
        /// The field name.
        field: String,
        /// The width.
        size: usize,
    },
}

impl TracepointFormat {
    /// Parses the text of a tracefs `format` file: the `name:` and `ID:`
    /// lines, `format:`, then one `field:` line per field (blank lines
    /// between them are allowed) up to `print fmt:` or the end, which is
    /// not interpreted.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let mut lines = Lines::new(text);
        let name = lines.header("name:", "`name: <event>`")?.to_string();
        let id_text = lines.header("ID:", "`ID: <decimal id>`")?;
        let id = id_text
            .parse()
            .map_err(|_| lines.unexpected("`ID: <decimal id>`"))?;
        if !lines.header("format:", "`format:`")?.is_empty() {
            return Err(lines.unexpected("`format:` alone on its line"));
        }
        let mut fields = Vec::new();
        let mut names = HashSet::new();
        while let Some(line) = lines.next_line() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if line.starts_with("print fmt:") {
                break;
            }
            let field = parse_field_line(line).map_err(|e| e.at(&lines))?;
            if !names.insert(field.name.clone()) {
                return Err(
                    FieldLineError::Bad(field.name, "appears twice in the format").at(&lines),
                );
            }
            fields.push(field);
        }
        Ok(Self { name, id, fields })
    }

    /// The field called `name` (`common_*` fields included).
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The names of the event's own fields, without the `common_*` header
    /// every record shares: the ones a user would pick a label from.
    pub fn field_names(&self) -> impl Iterator<Item = &str> {
        self.fields
            .iter()
            .map(|f| f.name.as_str())
            .filter(|name| !name.starts_with("common_"))
    }
}

/// The lines of a format file with the number of the current one, for
/// positioned errors.
struct Lines<'a> {
    lines: std::str::Lines<'a>,
    number: usize,
    current: &'a str,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            lines: text.lines(),
            number: 0,
            current: "",
        }
    }

    fn next_line(&mut self) -> Option<&'a str> {
        let line = self.lines.next()?;
        self.number += 1;
        self.current = line;
        Some(line)
    }

    /// The rest of the next line after `key`, trimmed.
    fn header(&mut self, key: &str, expected: &'static str) -> Result<&'a str, FormatError> {
        let Some(line) = self.next_line() else {
            return Err(FormatError::Truncated {
                line: self.number,
                expected,
            });
        };
        line.strip_prefix(key)
            .map(str::trim)
            .ok_or_else(|| self.unexpected(expected))
    }

    fn unexpected(&self, expected: &'static str) -> FormatError {
        FormatError::Unexpected {
            line: self.number,
            expected,
            found: self.current.chars().take(80).collect(),
        }
    }
}

/// A field line's problem, before the line number is attached.
enum FieldLineError {
    Syntax(&'static str),
    Bad(String, &'static str),
}

impl FieldLineError {
    fn at(self, lines: &Lines<'_>) -> FormatError {
        match self {
            Self::Syntax(expected) => lines.unexpected(expected),
            Self::Bad(field, problem) => FormatError::BadField {
                line: lines.number,
                field,
                problem,
            },
        }
    }
}

const FIELD_SYNTAX: &str =
    "`field:<type> <name>; offset:<n>; size:<n>; signed:<0|1>;` (tab-separated) or `print fmt:`";

/// Parses `field:<declaration>; offset:N; size:N; signed:B;` (trimmed).
fn parse_field_line(line: &str) -> Result<Field, FieldLineError> {
    let syntax = FieldLineError::Syntax(FIELD_SYNTAX);
    let Some(rest) = line.strip_prefix("field:") else {
        return Err(syntax);
    };
    let mut parts = rest.split(';').map(str::trim);
    let declaration = parts.next().unwrap_or_default();
    let (Some(offset), Some(size), Some(signed), Some(""), None) = (
        number_after(parts.next(), "offset:"),
        number_after(parts.next(), "size:"),
        number_after(parts.next(), "signed:"),
        parts.next(),
        parts.next(),
    ) else {
        return Err(syntax);
    };
    let signed = match signed {
        0 => false,
        1 => true,
        _ => return Err(FieldLineError::Syntax("`signed:0;` or `signed:1;`")),
    };
    let decl = parse_declaration(declaration)?;
    let kind = decl.kind(size)?;
    Ok(Field {
        name: decl.name.to_string(),
        type_text: decl.type_text(),
        offset,
        size,
        signed,
        kind,
    })
}

/// The decimal after `key` in `part`, if `part` is exactly that.
fn number_after(part: Option<&str>, key: &str) -> Option<usize> {
    let digits = part?.strip_prefix(key)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The declaration part of a field line, split up.
struct Declaration<'a> {
    /// `__data_loc`/`__rel_loc`, if any.
    location: Option<Location>,
    /// The element type of an array, else the type, e.g. `unsigned long`.
    base_type: &'a str,
    /// The text between `[` and `]`, if the declaration has brackets.
    brackets: Option<&'a str>,
    name: &'a str,
}

#[derive(Clone, Copy)]
enum Location {
    Data,
    Rel,
}

/// Splits `type name`, `type name[N]`, `type name[]` and
/// `__data_loc type[] name` (the forms the kernel prints).
fn parse_declaration(text: &str) -> Result<Declaration<'_>, FieldLineError> {
    const EXPECTED: &str =
        "a field declaration `<type> <name>`, `<type> <name>[<n>]` or `__data_loc <type>[] <name>`";
    let syntax = FieldLineError::Syntax(EXPECTED);
    let (location, text) = if let Some(rest) = text.strip_prefix("__data_loc ") {
        (Some(Location::Data), rest)
    } else if let Some(rest) = text.strip_prefix("__rel_loc ") {
        (Some(Location::Rel), rest)
    } else {
        (None, text)
    };
    let Some((type_part, name_part)) = text.trim().rsplit_once(char::is_whitespace) else {
        return Err(syntax);
    };
    // Fixed arrays carry the brackets on the name, dynamic ones on the type.
    let (name, name_brackets) =
        split_brackets(name_part).ok_or(FieldLineError::Syntax(EXPECTED))?;
    let (base_type, type_brackets) =
        split_brackets(type_part.trim()).ok_or(FieldLineError::Syntax(EXPECTED))?;
    let brackets = match (location, name_brackets, type_brackets) {
        (None, brackets, None) => brackets,
        (Some(_), None, brackets) => brackets,
        _ => return Err(syntax),
    };
    let is_identifier =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !is_identifier(name) || base_type.is_empty() {
        return Err(syntax);
    }
    Ok(Declaration {
        location,
        base_type,
        brackets,
        name,
    })
}

/// `word[text]` → (`word`, Some(`text`)); `word` → (`word`, None); anything
/// else (unbalanced or trailing text) → None.
fn split_brackets(text: &str) -> Option<(&str, Option<&str>)> {
    match text.split_once('[') {
        None if !text.contains(']') => Some((text, None)),
        None => None,
        Some((word, rest)) => {
            let inner = rest.strip_suffix(']')?;
            (!inner.contains(['[', ']'])).then_some((word.trim_end(), Some(inner)))
        }
    }
}

impl Declaration<'_> {
    /// The declared type without the name, e.g. `char[16]`, `__data_loc char[]`.
    fn type_text(&self) -> String {
        let prefix = match self.location {
            None => "",
            Some(Location::Data) => "__data_loc ",
            Some(Location::Rel) => "__rel_loc ",
        };
        match self.brackets {
            Some(inner) => format!("{prefix}{}[{inner}]", self.base_type),
            None => format!("{prefix}{}", self.base_type),
        }
    }

    fn is_char(&self) -> bool {
        self.base_type == "char"
    }

    fn kind(&self, size: usize) -> Result<FieldKind, FieldLineError> {
        let bad = |problem| FieldLineError::Bad(self.name.to_string(), problem);
        if let Some(location) = self.location {
            if size != 4 {
                return Err(bad("a __data_loc/__rel_loc field must have size 4"));
            }
            let chars = self.is_char();
            return Ok(match location {
                Location::Data => FieldKind::DataLoc { chars },
                Location::Rel => FieldKind::RelLoc { chars },
            });
        }
        let Some(inner) = self.brackets else {
            return Ok(scalar_kind(self.base_type, size));
        };
        if inner.is_empty() {
            return self
                .flexible_kind(size)
                .ok_or_else(|| bad("a flexible array `[]` must have size 0"));
        }
        let len: usize = match inner.parse() {
            Ok(len) if len > 0 && inner.bytes().all(|b| b.is_ascii_digit()) => len,
            _ => {
                return Err(FieldLineError::Syntax(
                    "a decimal array length such as `[16]`",
                ));
            }
        };
        if !size.is_multiple_of(len) {
            return Err(bad("the size is not a whole number of elements"));
        }
        Ok(if self.is_char() && size == len {
            FieldKind::CharArray { len }
        } else {
            array_kind(size / len, len)
        })
    }

    /// `type name[]` with size 0: its data has no extent in the format.
    fn flexible_kind(&self, size: usize) -> Option<FieldKind> {
        (size == 0).then(|| {
            if self.is_char() {
                FieldKind::CharArray { len: 0 }
            } else {
                FieldKind::Array {
                    elem_size: c_type_size(self.base_type).unwrap_or(1),
                    len: 0,
                }
            }
        })
    }
}

/// A field without brackets: a pointer or integer of a width we decode, else
/// its bytes.
fn scalar_kind(type_text: &str, size: usize) -> FieldKind {
    match (is_int_width(size), type_text.contains('*')) {
        (true, true) => FieldKind::Pointer,
        (true, false) => FieldKind::Int,
        (false, _) => FieldKind::Array {
            elem_size: 1,
            len: size,
        },
    }
}

/// `len` elements of `elem_size` bytes, as bytes when that is not an
/// integer width.
fn array_kind(elem_size: usize, len: usize) -> FieldKind {
    if is_int_width(elem_size) {
        FieldKind::Array { elem_size, len }
    } else {
        FieldKind::Array {
            elem_size: 1,
            len: elem_size * len,
        }
    }
}

fn is_int_width(size: usize) -> bool {
    matches!(size, 1 | 2 | 4 | 8)
}

/// The size on a 64-bit kernel of the element types found in dynamic and
/// flexible arrays, whose format gives no element count to derive it from.
fn c_type_size(type_text: &str) -> Option<usize> {
    Some(match type_text {
        "char" | "signed char" | "unsigned char" | "u8" | "__u8" | "s8" | "__s8" | "bool" => 1,
        "short" | "unsigned short" | "u16" | "__u16" | "s16" | "__s16" => 2,
        "int" | "unsigned" | "unsigned int" | "u32" | "__u32" | "s32" | "__s32" | "pid_t" => 4,
        "long" | "unsigned long" | "long long" | "unsigned long long" | "u64" | "__u64" | "s64"
        | "__s64" | "size_t" | "cpumask_t" => 8,
        _ if type_text.ends_with('*') => 8,
        _ => return None,
    })
}

impl Field {
    /// Formats this field of one raw record (`PERF_SAMPLE_RAW` bytes) as a
    /// label value into `out` (cleared first); never panics on short or
    /// garbage input.
    ///
    /// The text, by [`FieldKind`]:
    /// - `Int`: decimal, sign-extended when `signed` (`-1`, `4294967295`);
    /// - `Pointer`: `0x` and lowercase hex without padding (`0xffff8881`);
    /// - `CharArray` and `DataLoc`/`RelLoc { chars: true }`: the text up to
    ///   the first NUL (or the whole data without one); invalid UTF-8 becomes
    ///   U+FFFD as in `String::from_utf8_lossy`, and control characters and
    ///   `\` are escaped as Rust's `char::escape_debug` does (`\n`,
    ///   `\u{1b}`, `\\`), so that a value is one printable line;
    /// - `Array` and non-text `DataLoc`/`RelLoc`: the elements in decimal
    ///   (signed per `signed`), separated by `,` (`1,2,3`); a flexible array
    ///   (`name[]`, size 0) is empty. Dynamic elements are as wide as the
    ///   declared element type (`u64[]`: 8 bytes; unknown types: bytes).
    ///
    /// At most [`MAX_VALUE_LEN`] bytes are written: text is cut after the
    /// last whole (escaped) character that fits, arrays after the last whole
    /// element, so a cut value never shows half a character or a wrong number.
    ///
    /// `__data_loc` data lies at the 16-bit offset in the low half of the u32
    /// from the start of the record, with the length in the high half;
    /// `__rel_loc` offsets count from the end of the field.
    pub fn format_value(&self, raw: &[u8], out: &mut String) -> Result<(), DecodeError> {
        out.clear();
        let bytes = self.own_bytes(raw)?;
        match self.kind {
            FieldKind::Int => {
                let value = self.read_int(bytes, self.size)?;
                write_decimal(out, value, self.size, self.signed);
            }
            FieldKind::Pointer => {
                let value = self.read_int(bytes, self.size)?;
                // Writing to a String cannot fail.
                let _ = write!(out, "{value:#x}");
            }
            FieldKind::CharArray { .. } => write_text(out, bytes),
            FieldKind::Array { elem_size, .. } => self.write_array(out, bytes, elem_size)?,
            FieldKind::DataLoc { chars } | FieldKind::RelLoc { chars } => {
                let data = self.dynamic_data(raw, bytes)?;
                if chars {
                    write_text(out, data);
                } else {
                    let elem_size = self.dynamic_element_size();
                    self.write_array(out, data, elem_size)?;
                }
            }
        }
        Ok(())
    }

    /// The field's own `size` bytes at `offset`.
    fn own_bytes<'r>(&self, raw: &'r [u8]) -> Result<&'r [u8], DecodeError> {
        self.offset
            .checked_add(self.size)
            .and_then(|end| raw.get(self.offset..end))
            .ok_or_else(|| DecodeError::FieldOutOfBounds {
                field: self.name.clone(),
                offset: self.offset,
                size: self.size,
                raw_len: raw.len(),
            })
    }

    /// The data a `__data_loc`/`__rel_loc` field (whose own bytes are
    /// `location`) points at.
    fn dynamic_data<'r>(&self, raw: &'r [u8], location: &[u8]) -> Result<&'r [u8], DecodeError> {
        let word = self.read_int(location, 4)?;
        let len = ((word >> 16) & 0xffff) as usize;
        let relative = (word & 0xffff) as usize;
        let base = match self.kind {
            FieldKind::RelLoc { .. } => self.offset + self.size,
            _ => 0,
        };
        let start = base + relative;
        raw.get(start..start + len)
            .ok_or_else(|| DecodeError::DataOutOfBounds {
                field: self.name.clone(),
                start,
                len,
                raw_len: raw.len(),
            })
    }

    /// Element width of a non-text `__data_loc`/`__rel_loc` array, from the
    /// declared element type (`__data_loc u64[] addrs` → 8); bytes when the
    /// type is not one cgperf knows.
    fn dynamic_element_size(&self) -> usize {
        let element = self
            .type_text
            .trim_start_matches("__data_loc ")
            .trim_start_matches("__rel_loc ")
            .trim_end_matches("[]");
        c_type_size(element)
            .filter(|&size| is_int_width(size))
            .unwrap_or(1)
    }

    /// The first `width` bytes of `bytes` as a native-endian integer,
    /// zero-extended to 64 bits.
    fn read_int(&self, bytes: &[u8], width: usize) -> Result<u64, DecodeError> {
        let unsupported = || DecodeError::UnsupportedWidth {
            field: self.name.clone(),
            size: width,
        };
        if !is_int_width(width) {
            return Err(unsupported());
        }
        let bytes = bytes.get(..width).ok_or_else(unsupported)?;
        let mut word = [0u8; 8];
        let at = if cfg!(target_endian = "big") {
            8 - width
        } else {
            0
        };
        word[at..at + width].copy_from_slice(bytes);
        Ok(u64::from_ne_bytes(word) & width_mask(width))
    }

    /// Elements of `elem_size` bytes as `1,2,3`, whole elements up to
    /// [`MAX_VALUE_LEN`]; a trailing partial element is ignored.
    fn write_array(
        &self,
        out: &mut String,
        bytes: &[u8],
        elem_size: usize,
    ) -> Result<(), DecodeError> {
        let mut element = String::new();
        for chunk in bytes.chunks_exact(elem_size.max(1)) {
            let value = self.read_int(chunk, elem_size)?;
            element.clear();
            if !out.is_empty() {
                element.push(',');
            }
            write_decimal(&mut element, value, elem_size, self.signed);
            if !push_bounded(out, &element) {
                break;
            }
        }
        Ok(())
    }
}

/// All ones in the low `width` bytes.
fn width_mask(width: usize) -> u64 {
    u64::MAX >> (64 - 8 * width.clamp(1, 8))
}

/// Writes `value`, an integer of `width` bytes zero-extended to 64 bits, in
/// decimal: as a two's complement number of that width when `signed`.
fn write_decimal(out: &mut String, value: u64, width: usize, signed: bool) {
    // Writing to a String cannot fail.
    let _ = if signed {
        let unused = 64 - 8 * width.clamp(1, 8) as u32;
        write!(out, "{}", ((value << unused) as i64) >> unused)
    } else {
        write!(out, "{value}")
    };
}

/// Appends `piece` if the result stays within [`MAX_VALUE_LEN`]; false when
/// it did not fit (the value is complete as far as it goes).
fn push_bounded(out: &mut String, piece: &str) -> bool {
    let fits = out.len() + piece.len() <= MAX_VALUE_LEN;
    if fits {
        out.push_str(piece);
    }
    fits
}

/// Text up to the first NUL, lossy and escaped, bounded (see
/// [`Field::format_value`]).
fn write_text(out: &mut String, bytes: &[u8]) {
    let text = bytes.split(|&b| b == 0).next().unwrap_or_default();
    let mut piece = String::new();
    for chunk in text.utf8_chunks() {
        let replacement = (!chunk.invalid().is_empty()).then_some(char::REPLACEMENT_CHARACTER);
        for c in chunk.valid().chars().chain(replacement) {
            piece.clear();
            if c.is_control() || c == '\\' {
                piece.extend(c.escape_debug());
            } else {
                piece.push(c);
            }
            if !push_bounded(out, &piece) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Copies of this machine's format files (Linux 6.18), so that the parser
    // is also tested on text that does not change with the kernel.
    const GETPRIORITY: &str = "name: sys_enter_getpriority\nID: 331\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
        \tfield:int which;\toffset:16;\tsize:8;\tsigned:0;\n\
        \tfield:int who;\toffset:24;\tsize:8;\tsigned:0;\n\n\
        print fmt: \"which: 0x%08lx, who: 0x%08lx\", ((unsigned long)(REC->which)), ((unsigned long)(REC->who))\n";

    const SCHED_SWITCH: &str = "name: sched_switch\nID: 372\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
        \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
        \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
        \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
        \tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\n\
        print fmt: \"prev_comm=%s prev_pid=%d\", REC->prev_comm, REC->prev_pid\n";

    const PROCESS_EXEC: &str = "name: sched_process_exec\nID: 365\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n\
        \tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;\n\n\
        print fmt: \"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid\n";

    const RAW_SYS_ENTER: &str = "name: sys_enter\nID: 443\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
        \tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n\n\
        print fmt: \"NR %ld (%lx, %lx, %lx, %lx, %lx, %lx)\", REC->id, REC->args[0], REC->args[1], REC->args[2], REC->args[3], REC->args[4], REC->args[5]\n";

    /// Made by hand: the forms this kernel has no event for (`__rel_loc`) or
    /// only in a few events (pointers, bitmaps, flexible and odd arrays).
    const HAND_MADE: &str = "name: odd\nID: 7\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:__rel_loc char[] rel_name;\toffset:4;\tsize:4;\tsigned:0;\n\
        \tfield:__rel_loc u16[] rel_ids;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:__data_loc u64[] addrs;\toffset:12;\tsize:4;\tsigned:0;\n\
        \tfield:__data_loc cpumask_t cpumask;\toffset:16;\tsize:4;\tsigned:0;\n\
        \tfield:const char * fmt;\toffset:24;\tsize:8;\tsigned:0;\n\
        \tfield:long sysctl_mem[3];\toffset:32;\tsize:24;\tsigned:1;\n\
        \tfield:unsigned char addr[6];\toffset:56;\tsize:6;\tsigned:0;\n\
        \tfield:int three;\toffset:62;\tsize:3;\tsigned:1;\n\
        \tfield:u8 odd[2];\toffset:65;\tsize:6;\tsigned:0;\n\
        \tfield:unsigned long args[];\toffset:72;\tsize:0;\tsigned:0;\n";

    fn parse(text: &str) -> TracepointFormat {
        TracepointFormat::parse(text).unwrap()
    }

    fn field(format: &TracepointFormat, name: &str) -> Field {
        format.field(name).unwrap().clone()
    }

    fn value(field: &Field, raw: &[u8]) -> Result<String, DecodeError> {
        let mut out = String::from("stale");
        field.format_value(raw, &mut out).map(|()| out)
    }

    fn ok(field: &Field, raw: &[u8]) -> String {
        value(field, raw).unwrap()
    }

    /// A field of `kind` at offset 0 of `size` bytes.
    fn synthetic(type_text: &str, size: usize, signed: bool, kind: FieldKind) -> Field {
        Field {
            name: "f".into(),
            type_text: type_text.into(),
            offset: 0,
            size,
            signed,
            kind,
        }
    }

    fn error_line(text: &str) -> usize {
        match TracepointFormat::parse(text).unwrap_err() {
            FormatError::Unexpected { line, .. }
            | FormatError::Truncated { line, .. }
            | FormatError::BadField { line, .. } => line,
        }
    }

    #[test]
    fn parses_getpriority() {
        let format = parse(GETPRIORITY);
        assert_eq!(
            (format.name.as_str(), format.id),
            ("sys_enter_getpriority", 331)
        );
        assert_eq!(format.fields.len(), 7);
        assert_eq!(
            field(&format, "which"),
            Field {
                name: "which".into(),
                type_text: "int".into(),
                offset: 16,
                size: 8,
                signed: false,
                kind: FieldKind::Int,
            }
        );
        assert_eq!(
            field(&format, "common_pid"),
            Field {
                name: "common_pid".into(),
                type_text: "int".into(),
                offset: 4,
                size: 4,
                signed: true,
                kind: FieldKind::Int,
            }
        );
        assert_eq!(
            format.field_names().collect::<Vec<_>>(),
            ["__syscall_nr", "which", "who"]
        );
        assert!(format.field("nope").is_none());
    }

    #[test]
    fn parses_arrays_and_strings() {
        let switch = parse(SCHED_SWITCH);
        let comm = field(&switch, "prev_comm");
        assert_eq!(comm.type_text, "char[16]");
        assert_eq!((comm.offset, comm.size), (8, 16));
        assert_eq!(comm.kind, FieldKind::CharArray { len: 16 });
        assert_eq!(field(&switch, "prev_state").type_text, "long");
        assert_eq!(field(&switch, "next_pid").type_text, "pid_t");
        assert_eq!(switch.field_names().count(), 7);

        let exec = parse(PROCESS_EXEC);
        let filename = field(&exec, "filename");
        assert_eq!(filename.type_text, "__data_loc char[]");
        assert_eq!(filename.kind, FieldKind::DataLoc { chars: true });
        assert_eq!((filename.offset, filename.size), (8, 4));

        let enter = parse(RAW_SYS_ENTER);
        let args = field(&enter, "args");
        assert_eq!(args.type_text, "unsigned long[6]");
        assert_eq!(
            args.kind,
            FieldKind::Array {
                elem_size: 8,
                len: 6
            }
        );
        assert!(field(&enter, "id").signed);
    }

    #[test]
    fn parses_hand_made_forms() {
        let format = parse(HAND_MADE);
        let kind = |name: &str| field(&format, name).kind;
        let type_text = |name: &str| field(&format, name).type_text;
        assert_eq!(kind("rel_name"), FieldKind::RelLoc { chars: true });
        assert_eq!(type_text("rel_name"), "__rel_loc char[]");
        assert_eq!(kind("rel_ids"), FieldKind::RelLoc { chars: false });
        assert_eq!(kind("addrs"), FieldKind::DataLoc { chars: false });
        assert_eq!(type_text("cpumask"), "__data_loc cpumask_t");
        assert_eq!(kind("fmt"), FieldKind::Pointer);
        assert_eq!(type_text("fmt"), "const char *");
        assert_eq!(
            kind("sysctl_mem"),
            FieldKind::Array {
                elem_size: 8,
                len: 3
            }
        );
        assert_eq!(
            kind("addr"),
            FieldKind::Array {
                elem_size: 1,
                len: 6
            }
        );
        // Widths that are not integers are read as bytes.
        assert_eq!(
            kind("three"),
            FieldKind::Array {
                elem_size: 1,
                len: 3
            }
        );
        assert_eq!(
            kind("odd"),
            FieldKind::Array {
                elem_size: 1,
                len: 6
            }
        );
        assert_eq!(
            kind("args"),
            FieldKind::Array {
                elem_size: 8,
                len: 0
            }
        );
        assert_eq!(type_text("args"), "unsigned long[]");
        // No `print fmt:` line is needed.
        assert_eq!(format.fields.len(), 11);
    }

    /// The tracefs of this machine: mounted where cgperf looks for it.
    fn tracefs_events() -> std::path::PathBuf {
        let tracefs = crate::tracefs::Tracefs::locate().unwrap_or_else(|e| {
            panic!("this test reads the kernel's format files and needs tracefs mounted (mount -t tracefs nodev /sys/kernel/tracing): {e}")
        });
        tracefs.root().join("events")
    }

    #[test]
    fn parses_this_machines_format_files() {
        let events = tracefs_events();
        let read = |path: &str| {
            let path = events.join(path).join("format");
            std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "cannot read {} (run as root with tracefs mounted): {e}",
                    path.display()
                )
            })
        };
        let getpriority = parse(&read("syscalls/sys_enter_getpriority"));
        assert_eq!(field(&getpriority, "which").kind, FieldKind::Int);
        let switch = parse(&read("sched/sched_switch"));
        assert_eq!(
            field(&switch, "next_comm").kind,
            FieldKind::CharArray { len: 16 }
        );
        let exec = parse(&read("sched/sched_process_exec"));
        assert_eq!(
            field(&exec, "filename").kind,
            FieldKind::DataLoc { chars: true }
        );
        let irq = parse(&read("irq/irq_handler_entry"));
        assert_eq!(field(&irq, "name").kind, FieldKind::DataLoc { chars: true });
        assert_eq!(field(&irq, "irq").kind, FieldKind::Int);
        let enter = parse(&read("raw_syscalls/sys_enter"));
        assert_eq!(
            field(&enter, "args").kind,
            FieldKind::Array {
                elem_size: 8,
                len: 6
            }
        );
        // The ids are the kernel's, as perf_event_attr.config needs them.
        let id: u64 = read("sched/sched_switch").lines().nth(1).unwrap()[4..]
            .parse()
            .unwrap();
        assert_eq!(switch.id, id);
    }

    /// Every format file of the running kernel parses, and every field lies
    /// after the common header.
    #[test]
    fn parses_every_format_file_of_this_kernel() {
        let mut parsed = 0;
        let mut failures = Vec::new();
        for subsystem in std::fs::read_dir(tracefs_events()).unwrap() {
            let Ok(events) = std::fs::read_dir(subsystem.unwrap().path()) else {
                continue; // files such as `enable` and `header_page`
            };
            for event in events {
                let path = event.unwrap().path().join("format");
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue; // `enable`, `filter`: not event directories
                };
                match TracepointFormat::parse(&text) {
                    Ok(format) => {
                        assert_eq!(
                            field(&format, "common_type").offset,
                            0,
                            "{}",
                            path.display()
                        );
                        parsed += 1;
                    }
                    Err(e) => failures.push(format!("{}: {e}", path.display())),
                }
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
        assert!(parsed > 1000, "only {parsed} format files found");
    }

    #[test]
    fn malformed_files_give_the_line_and_what_was_expected() {
        let err = TracepointFormat::parse("").unwrap_err();
        assert_eq!(
            err,
            FormatError::Truncated {
                line: 0,
                expected: "`name: <event>`"
            }
        );
        let err = TracepointFormat::parse("ID: 1\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("tracepoint format, line 1: expected `name: <event>`, found `ID: 1`"),
            "{err}"
        );
        assert_eq!(error_line("name: x\nID: twelve\nformat:\n"), 2);
        assert_eq!(error_line("name: x\nID: -1\nformat:\n"), 2);
        assert_eq!(error_line("name: x\nID: 1\n"), 2);
        assert_eq!(error_line("name: x\nID: 1\nformat: now\n"), 3);
        let with_field = |line: &str| format!("name: x\nID: 1\nformat:\n\n{line}\n");
        for bad in [
            "\tfield:int a;\toffset:0;\tsize:4;",
            "\tfield:int a;\toffset:0;\tsize:4;\tsigned:1",
            "\tfield:int a;\toffset:0;\tsize:4;\tsigned:2;",
            "\tfield:int a;\toffset:-1;\tsize:4;\tsigned:1;",
            "\tfield:int a;\toffset:0x8;\tsize:4;\tsigned:1;",
            "\tfield:int a;\tsize:4;\toffset:0;\tsigned:1;",
            "\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\textra:1;",
            "\tfield:int;\toffset:0;\tsize:4;\tsigned:1;",
            "\tfield:int a-b;\toffset:0;\tsize:4;\tsigned:1;",
            "\tfield:char a[x];\toffset:0;\tsize:4;\tsigned:0;",
            "\tfield:char a[0];\toffset:0;\tsize:4;\tsigned:0;",
            "\tfield:char a[4;\toffset:0;\tsize:4;\tsigned:0;",
            "\tfield:char a[2][2];\toffset:0;\tsize:4;\tsigned:0;",
            "\tfield:char[4] a;\toffset:0;\tsize:4;\tsigned:0;",
            "\tfield:__data_loc char[] a[4];\toffset:0;\tsize:4;\tsigned:0;",
            "\tfield:int a;\toffset:99999999999999999999999;\tsize:4;\tsigned:1;",
            "field int a;\toffset:0;\tsize:4;\tsigned:1;",
            "garbage",
        ] {
            assert_eq!(error_line(&with_field(bad)), 5, "{bad:?}");
        }
        let problem = |line: &str| match TracepointFormat::parse(&with_field(line)).unwrap_err() {
            FormatError::BadField {
                line: 5,
                field,
                problem,
            } => (field, problem),
            other => panic!("{line:?}: {other:?}"),
        };
        assert_eq!(
            problem("\tfield:int a[3];\toffset:0;\tsize:8;\tsigned:1;"),
            ("a".into(), "the size is not a whole number of elements")
        );
        assert_eq!(
            problem("\tfield:__data_loc char[] s;\toffset:0;\tsize:8;\tsigned:0;").0,
            "s"
        );
        assert_eq!(
            problem("\tfield:char s[];\toffset:0;\tsize:8;\tsigned:0;").0,
            "s"
        );
        let twice = format!(
            "{}\tfield:int a;\toffset:4;\tsize:4;\tsigned:1;\n",
            with_field("\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;")
        );
        assert!(matches!(
            TracepointFormat::parse(&twice).unwrap_err(),
            FormatError::BadField {
                line: 6,
                problem: "appears twice in the format",
                ..
            }
        ));
        let long = format!("name: x\nID: 1\nformat:\n{}", "y".repeat(500));
        match TracepointFormat::parse(&long).unwrap_err() {
            FormatError::Unexpected { found, .. } => assert_eq!(found.len(), 80),
            other => panic!("{other:?}"),
        }
    }

    /// A sys_enter_getpriority record: pid 1234, nr 141, which, who.
    fn getpriority_record(which: u64, who: u64) -> Vec<u8> {
        let mut raw = vec![0u8; 32];
        raw[0..2].copy_from_slice(&331u16.to_ne_bytes());
        raw[4..8].copy_from_slice(&1234i32.to_ne_bytes());
        raw[8..12].copy_from_slice(&141i32.to_ne_bytes());
        raw[16..24].copy_from_slice(&which.to_ne_bytes());
        raw[24..32].copy_from_slice(&who.to_ne_bytes());
        raw
    }

    #[test]
    fn formats_integers() {
        let format = parse(GETPRIORITY);
        let raw = getpriority_record(1, u64::MAX);
        assert_eq!(ok(&field(&format, "which"), &raw), "1");
        assert_eq!(ok(&field(&format, "who"), &raw), "18446744073709551615");
        assert_eq!(ok(&field(&format, "common_type"), &raw), "331");
        assert_eq!(ok(&field(&format, "common_pid"), &raw), "1234");
        assert_eq!(ok(&field(&format, "__syscall_nr"), &raw), "141");

        for (size, bytes, unsigned, signed) in [
            (1, vec![0xff], "255", "-1"),
            (1, vec![0x80], "128", "-128"),
            (2, 0xfffeu16.to_ne_bytes().to_vec(), "65534", "-2"),
            (4, (-7i32).to_ne_bytes().to_vec(), "4294967289", "-7"),
            (
                4,
                0x7fff_ffffu32.to_ne_bytes().to_vec(),
                "2147483647",
                "2147483647",
            ),
            (
                8,
                i64::MIN.to_ne_bytes().to_vec(),
                "9223372036854775808",
                "-9223372036854775808",
            ),
            (8, 0u64.to_ne_bytes().to_vec(), "0", "0"),
        ] {
            let f = synthetic("int", size, false, FieldKind::Int);
            assert_eq!(ok(&f, &bytes), unsigned, "{size} {bytes:?}");
            let f = synthetic("int", size, true, FieldKind::Int);
            assert_eq!(ok(&f, &bytes), signed, "{size} {bytes:?}");
        }
    }

    #[test]
    fn formats_pointers_in_lowercase_hex() {
        let f = synthetic("void *", 8, false, FieldKind::Pointer);
        assert_eq!(
            ok(&f, &0xffff_8881_0abc_def0u64.to_ne_bytes()),
            "0xffff88810abcdef0"
        );
        assert_eq!(ok(&f, &[0; 8]), "0x0");
        let f = synthetic("void *", 4, true, FieldKind::Pointer);
        assert_eq!(ok(&f, &0xdead_beefu32.to_ne_bytes()), "0xdeadbeef");
    }

    fn switch_record(prev_comm: &[u8], next_comm: &[u8]) -> Vec<u8> {
        let mut raw = vec![0u8; 64];
        raw[8..8 + prev_comm.len()].copy_from_slice(prev_comm);
        raw[24..28].copy_from_slice(&(-3i32).to_ne_bytes());
        raw[32..40].copy_from_slice(&(-1i64).to_ne_bytes());
        raw[40..40 + next_comm.len()].copy_from_slice(next_comm);
        raw
    }

    #[test]
    fn formats_char_arrays() {
        let format = parse(SCHED_SWITCH);
        let prev = field(&format, "prev_comm");
        let next = field(&format, "next_comm");
        let raw = switch_record(b"swapper/0\0junk", b"0123456789abcdef");
        assert_eq!(ok(&prev, &raw), "swapper/0");
        // No NUL in the array: all of it.
        assert_eq!(ok(&next, &raw), "0123456789abcdef");
        assert_eq!(ok(&field(&format, "prev_pid"), &raw), "-3");
        assert_eq!(ok(&field(&format, "prev_state"), &raw), "-1");
        // Invalid UTF-8 as from_utf8_lossy, control characters escaped.
        let raw = switch_record(b"a\xffb\xe2\x82c\0", "t\u{e9}\u{1b}[1m\\\n".as_bytes());
        assert_eq!(ok(&prev, &raw), "a\u{fffd}b\u{fffd}c");
        assert_eq!(ok(&next, &raw), "t\u{e9}\\u{1b}[1m\\\\\\n");
        assert_eq!(ok(&prev, &switch_record(b"", b"")), "");
    }

    /// A sched_process_exec record whose filename is `name` (with its NUL),
    /// the __data_loc word being `loc`.
    fn exec_record(loc: u32, tail: &[u8]) -> Vec<u8> {
        let mut raw = vec![0u8; 20];
        raw[8..12].copy_from_slice(&loc.to_ne_bytes());
        raw[12..16].copy_from_slice(&42i32.to_ne_bytes());
        raw.extend_from_slice(tail);
        raw
    }

    fn data_loc(offset: usize, len: usize) -> u32 {
        (len << 16 | offset) as u32
    }

    #[test]
    fn formats_data_loc_strings() {
        let filename = field(&parse(PROCESS_EXEC), "filename");
        let raw = exec_record(data_loc(20, 10), b"/bin/true\0\0\0\0\0");
        assert_eq!(ok(&filename, &raw), "/bin/true");
        // Without a NUL, the whole length.
        assert_eq!(
            ok(&filename, &exec_record(data_loc(20, 4), b"/bin/true")),
            "/bin"
        );
        assert_eq!(ok(&filename, &exec_record(data_loc(20, 0), b"")), "");
        // Pointing into the fixed part is allowed (it is inside the record).
        assert_eq!(ok(&filename, &exec_record(data_loc(12, 1), b"")), "*");
        assert_eq!(
            value(&filename, &exec_record(data_loc(20, 11), b"/bin/true\0")),
            Err(DecodeError::DataOutOfBounds {
                field: "filename".into(),
                start: 20,
                len: 11,
                raw_len: 30
            })
        );
        assert!(matches!(
            value(&filename, &exec_record(data_loc(0xffff, 0xffff), b"")),
            Err(DecodeError::DataOutOfBounds {
                start: 0xffff,
                len: 0xffff,
                ..
            })
        ));
        let msg = value(&filename, &exec_record(data_loc(40, 1), b""))
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "field `filename` points at bytes 40..40+1, outside the 20-byte record; \
             is the record from the tracepoint this format was read for?"
        );
    }

    #[test]
    fn formats_rel_loc_and_dynamic_arrays() {
        let format = parse(HAND_MADE);
        let mut raw = vec![0u8; 72];
        // rel_name ends at 8: the text at 8 + 72 - 8 = 72.
        raw[4..8].copy_from_slice(&data_loc(64, 4).to_ne_bytes());
        // rel_ids ends at 12: two u16 at 12 + 64 = 76.
        raw[8..12].copy_from_slice(&data_loc(64, 4).to_ne_bytes());
        raw[12..16].copy_from_slice(&data_loc(80, 16).to_ne_bytes());
        raw[16..20].copy_from_slice(&data_loc(80, 8).to_ne_bytes());
        raw[24..32].copy_from_slice(&0x1000u64.to_ne_bytes());
        for (i, v) in [-1i64, 0, 7].iter().enumerate() {
            raw[32 + 8 * i..40 + 8 * i].copy_from_slice(&v.to_ne_bytes());
        }
        raw[56..62].copy_from_slice(&[0, 0x1b, 0x21, 0xaa, 0xbb, 0xff]);
        raw[62..65].copy_from_slice(&[1, 2, 3]);
        raw.extend_from_slice(b"eth0");
        raw.extend_from_slice(&[5, 0, 0xff, 0xff]);
        raw.extend_from_slice(&3u64.to_ne_bytes());
        raw.extend_from_slice(&u64::MAX.to_ne_bytes());
        let v = |name: &str| ok(&field(&format, name), &raw);
        assert_eq!(v("rel_name"), "eth0");
        assert_eq!(v("rel_ids"), "5,65535");
        assert_eq!(v("addrs"), "3,18446744073709551615");
        assert_eq!(v("cpumask"), "3");
        assert_eq!(v("fmt"), "0x1000");
        assert_eq!(v("sysctl_mem"), "-1,0,7");
        assert_eq!(v("addr"), "0,27,33,170,187,255");
        assert_eq!(v("three"), "1,2,3");
        assert_eq!(v("args"), "");
        // A __rel_loc offset counts from the end of the field, not the record.
        let rel = field(&format, "rel_name");
        // (0, 2) from the end of the field is the start of rel_ids: 64, 0.
        raw[4..8].copy_from_slice(&data_loc(0, 2).to_ne_bytes());
        assert_eq!(ok(&rel, &raw), "@");
        // (88, 1) from the start of the record would be inside it.
        raw[4..8].copy_from_slice(&data_loc(88, 1).to_ne_bytes());
        assert_eq!(
            value(&rel, &raw),
            Err(DecodeError::DataOutOfBounds {
                field: "rel_name".into(),
                start: 96,
                len: 1,
                raw_len: 96
            })
        );
    }

    #[test]
    fn short_records_are_errors() {
        let format = parse(SCHED_SWITCH);
        let raw = switch_record(b"x", b"y");
        for f in &format.fields {
            for len in 0..f.offset + f.size {
                assert!(
                    matches!(
                        value(f, &raw[..len]),
                        Err(DecodeError::FieldOutOfBounds { .. })
                    ),
                    "{} {len}",
                    f.name
                );
            }
            assert!(value(f, &raw).is_ok());
        }
        let msg = value(&field(&format, "next_prio"), &raw[..10])
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("field `next_prio` (bytes 60..60+4) is outside the 10-byte record"),
            "{msg}"
        );
        // Offsets near usize::MAX do not overflow.
        let mut far = synthetic("int", 4, false, FieldKind::Int);
        far.offset = usize::MAX - 1;
        assert!(matches!(
            value(&far, &raw),
            Err(DecodeError::FieldOutOfBounds { .. })
        ));
    }

    #[test]
    fn hand_made_widths_are_errors_not_panics() {
        let f = synthetic("int", 3, false, FieldKind::Int);
        assert_eq!(
            value(&f, &[1, 2, 3]),
            Err(DecodeError::UnsupportedWidth {
                field: "f".into(),
                size: 3
            })
        );
        let f = synthetic(
            "x",
            6,
            false,
            FieldKind::Array {
                elem_size: 3,
                len: 2,
            },
        );
        assert!(matches!(
            value(&f, &[0; 6]),
            Err(DecodeError::UnsupportedWidth { size: 3, .. })
        ));
        let f = synthetic("x", 2, false, FieldKind::DataLoc { chars: true });
        assert!(matches!(
            value(&f, &[0; 6]),
            Err(DecodeError::UnsupportedWidth { size: 4, .. })
        ));
    }

    #[test]
    fn values_are_bounded() {
        let filename = field(&parse(PROCESS_EXEC), "filename");
        let long = "/".repeat(1000);
        let raw = exec_record(data_loc(20, 1000), long.as_bytes());
        assert_eq!(ok(&filename, &raw), "/".repeat(MAX_VALUE_LEN));
        // Cut on a character boundary: 'é' is 2 bytes, 256 is even but the
        // text starts one byte in.
        let text = format!("a{}", "\u{e9}".repeat(300));
        let raw = exec_record(data_loc(20, text.len()), text.as_bytes());
        let v = ok(&filename, &raw);
        assert_eq!(v, format!("a{}", "\u{e9}".repeat(127)));
        assert_eq!(v.len(), 255);
        // Escapes are not cut in the middle: `\u{1b}` is 6 bytes.
        let text = format!("{}\u{1b}", "a".repeat(251));
        let raw = exec_record(data_loc(20, text.len()), text.as_bytes());
        assert_eq!(ok(&filename, &raw), "a".repeat(251));
        let text = format!("{}\u{1b}", "a".repeat(250));
        let raw = exec_record(data_loc(20, text.len()), text.as_bytes());
        assert_eq!(ok(&filename, &raw), "a".repeat(250) + "\\u{1b}");
        // Arrays stop after the last whole element.
        let bytes = vec![0xffu8; 1000];
        let f = synthetic(
            "u8[1000]",
            1000,
            false,
            FieldKind::Array {
                elem_size: 1,
                len: 1000,
            },
        );
        let v = ok(&f, &bytes);
        assert_eq!(v, vec!["255"; 64].join(","));
        assert_eq!(v.len(), 255);
    }

    proptest! {
        #[test]
        fn any_record_through_sched_switch_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..100)) {
            let format = parse(SCHED_SWITCH);
            let mut out = String::new();
            for f in &format.fields {
                let result = f.format_value(&raw, &mut out);
                prop_assert!(out.len() <= MAX_VALUE_LEN);
                prop_assert_eq!(result.is_ok(), raw.len() >= f.offset + f.size, "{}", f.name);
            }
        }

        #[test]
        fn any_record_through_dynamic_fields_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut out = String::new();
            for text in [PROCESS_EXEC, HAND_MADE, RAW_SYS_ENTER] {
                for f in &parse(text).fields {
                    let _ = f.format_value(&raw, &mut out);
                    prop_assert!(out.len() <= MAX_VALUE_LEN);
                }
            }
        }

        #[test]
        fn parse_never_panics(text in "(name: [a-z]{0,3}\nID: [0-9]{0,3}\nformat:\n)?(\t?field:[a-z_ *\\[\\]0-9]{0,12};\t?offset:[0-9]{0,2};\t?size:[0-9]{0,2};\t?signed:[0-2];\n){0,4}") {
            let _ = TracepointFormat::parse(&text);
        }
    }
}
