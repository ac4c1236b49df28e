//! What `sampled.bpf.c` needs to count a `by:` entry in the kernel: where
//! its fields sit in the record and in the count key, and its filter
//! compiled into steps the program evaluates (a tracepoint's ftrace filter
//! does not gate a BPF program attached to it). An entry that cannot be
//! expressed so is counted through the rings, and the reason says why.

use crate::events::{Field, FieldKind};
use crate::plan::SampledSpec;

/// `MAX_FIELDS`, `KEY_WORDS`, `FIELD_BYTES` and `MAX_RULES` of
/// `sampled.bpf.c`.
pub(super) const MAX_FIELDS: usize = 4;
pub(super) const KEY_WORDS: usize = 4;
const FIELD_BYTES: usize = 24;
pub(super) const MAX_RULES: usize = 16;
/// Results a filter's evaluation stack holds at most.
const MAX_DEPTH: usize = 31;
/// The bytes of a record a BPF program cannot read: the kernel writes a
/// pointer over the common fields before it runs.
const HIDDEN: usize = 8;

/// The `op` values of `sampled.bpf.c`.
const OP_EQ: u8 = 1;
const OP_NE: u8 = 2;
const OP_LT: u8 = 3;
const OP_LE: u8 = 4;
const OP_GT: u8 = 5;
const OP_GE: u8 = 6;
const OP_BAND: u8 = 7;
const OP_AND: u8 = 8;
const OP_OR: u8 = 9;

/// `struct field` of `sampled.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct FieldAt {
    offset: u32,
    size: u16,
    /// The first word of the key it goes to.
    word: u16,
}

/// `struct rule` of `sampled.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Rule {
    offset: u32,
    size: u8,
    is_signed: u8,
    op: u8,
    unused: u8,
    value: u64,
}

/// `struct entry` of `sampled.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct EntryConfig {
    nfields: u32,
    nrules: u32,
    max_series: u64,
    /// A [`Window`].
    window: u64,
    /// The index of the hashes it counts in.
    home: u64,
    fields: [FieldAt; MAX_FIELDS],
    rules: [Rule; MAX_RULES],
}
// SAFETY: plain integers, no padding (checked by the sizes in the tests).
unsafe impl aya::Pod for EntryConfig {}

/// `enum window` of `sampled.bpf.c`: when an entry counts, with respect to
/// the cut of a reload that moves entries between the kernel and the
/// rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u64)]
pub(super) enum Window {
    #[default]
    Always = 0,
    /// Only hits past the cut (none while it is not set).
    FromCut = 1,
    /// Only hits before the cut (all while it is not set).
    UntilCut = 2,
}

impl EntryConfig {
    /// The same, counting in `window`, in the hashes at `home`.
    pub(super) fn within(self, window: Window, home: u32) -> Self {
        Self {
            window: window as u64,
            home: home as u64,
            ..self
        }
    }
}

/// How `spec` is counted in the kernel, or why it cannot be.
pub(super) fn compile(spec: &SampledSpec) -> Result<EntryConfig, String> {
    let mut config = EntryConfig {
        max_series: spec.max_series as u64,
        ..EntryConfig::default()
    };
    config.fields = layout(spec)?;
    config.nfields = spec.fields.len() as u32;
    if let Some(filter) = &spec.filter {
        let text = filter.to_str().map_err(|_| "its filter is not UTF-8")?;
        let rules = compile_filter(text, &spec.filter_fields)?;
        config.nrules = rules.len() as u32;
        config.rules[..rules.len()].copy_from_slice(&rules);
    }
    Ok(config)
}

/// Where each `by:` field of `spec` sits in the record and in the key.
fn layout(spec: &SampledSpec) -> Result<[FieldAt; MAX_FIELDS], String> {
    let mut fields = [FieldAt::default(); MAX_FIELDS];
    if spec.fields.len() > MAX_FIELDS {
        return Err(format!("more than {MAX_FIELDS} `by:` fields"));
    }
    let mut word = 0;
    for (i, (_, field)) in spec.fields.iter().enumerate() {
        readable(field, FIELD_BYTES)?;
        let words = field.size.div_ceil(8);
        if word + words > KEY_WORDS {
            return Err(format!(
                "its `by:` fields take more than {} bytes",
                KEY_WORDS * 8
            ));
        }
        fields[i] = FieldAt {
            offset: field.offset as u32,
            size: field.size as u16,
            word: word as u16,
        };
        word += words;
    }
    Ok(fields)
}

/// A record with the field values of a key (`words`) at their offsets, for
/// [`SampledSpec::key_of`]: a count from the kernel is formatted exactly as
/// a sample's record.
pub(super) fn record(spec: &SampledSpec, words: &[u64; KEY_WORDS], raw: &mut Vec<u8>) {
    let mut bytes = [0u8; KEY_WORDS * 8];
    for (i, w) in words.iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    raw.clear();
    let fields = layout(spec).unwrap_or_default();
    for (at, _) in fields.iter().zip(&spec.fields) {
        let (offset, size, word) = (at.offset as usize, at.size as usize, at.word as usize);
        if raw.len() < offset + size {
            raw.resize(offset + size, 0);
        }
        if let Some(value) = bytes.get(word * 8..word * 8 + size) {
            raw[offset..offset + size].copy_from_slice(value);
        }
    }
}

/// Whether the program can read `field` as a value of at most `max` bytes.
fn readable(field: &Field, max: usize) -> Result<(), String> {
    let name = &field.name;
    if field.offset < HIDDEN {
        return Err(format!(
            "field `{name}` is a common field, which a BPF program cannot read"
        ));
    }
    let ok = match field.kind {
        FieldKind::Int | FieldKind::Pointer => matches!(field.size, 1 | 2 | 4 | 8),
        FieldKind::CharArray { len } => len > 0 && field.size <= max,
        _ => false,
    };
    match ok && field.size <= max {
        true => Ok(()),
        false => Err(format!(
            "field `{name}` ({}) is not an integer or a char array of at most {max} bytes",
            field.type_text
        )),
    }
}

/// One token of a filter.
#[derive(Debug, Clone, PartialEq)]
enum Token<'a> {
    Name(&'a str),
    Number(u64),
    Op(u8),
    And,
    Or,
    Open,
    Close,
}

/// A filter's text turned into postfix steps: comparisons of numeric
/// fields with numbers, `&&`, `||` and parentheses (what ftrace accepts
/// besides strings, globs and `!`).
struct Compiler<'a> {
    tokens: Vec<Token<'a>>,
    at: usize,
    fields: &'a [Field],
    out: Vec<Rule>,
    depth: usize,
    deepest: usize,
}

/// `text` compiled, or why it cannot be.
fn compile_filter(text: &str, fields: &[Field]) -> Result<Vec<Rule>, String> {
    let tokens = tokenize(text).map_err(|()| {
        "its filter compares strings or uses an operator the BPF program does not \
         evaluate (only numeric comparisons joined by && and ||)"
            .to_string()
    })?;
    Compiler {
        tokens,
        at: 0,
        fields,
        out: Vec::new(),
        depth: 0,
        deepest: 0,
    }
    .compile()
}

impl<'a> Compiler<'a> {
    fn compile(mut self) -> Result<Vec<Rule>, String> {
        self.or()?;
        if self.at != self.tokens.len() {
            return Err("its filter does not parse as comparisons joined by && and ||".into());
        }
        if self.out.len() > MAX_RULES || self.deepest > MAX_DEPTH {
            return Err(format!(
                "its filter has more than {MAX_RULES} comparisons and operators"
            ));
        }
        Ok(self.out)
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn peek(&self) -> Option<&Token<'a>> {
        self.tokens.get(self.at)
    }

    fn push(&mut self, rule: Rule) {
        if matches!(rule.op, OP_AND | OP_OR) {
            self.depth = self.depth.saturating_sub(1);
        } else {
            self.depth += 1;
            self.deepest = self.deepest.max(self.depth);
        }
        self.out.push(rule);
    }

    fn or(&mut self) -> Result<(), String> {
        self.and()?;
        while self.peek() == Some(&Token::Or) {
            self.at += 1;
            self.and()?;
            self.push(Rule {
                op: OP_OR,
                ..Rule::default()
            });
        }
        Ok(())
    }

    fn and(&mut self) -> Result<(), String> {
        self.primary()?;
        while self.peek() == Some(&Token::And) {
            self.at += 1;
            self.primary()?;
            self.push(Rule {
                op: OP_AND,
                ..Rule::default()
            });
        }
        Ok(())
    }

    fn primary(&mut self) -> Result<(), String> {
        let unparsed = || "its filter does not parse as comparisons joined by && and ||";
        match self.next() {
            Some(Token::Open) => {
                self.or()?;
                match self.next() {
                    Some(Token::Close) => Ok(()),
                    _ => Err(unparsed().into()),
                }
            }
            Some(Token::Name(name)) => {
                let (Some(Token::Op(op)), Some(Token::Number(value))) = (self.next(), self.next())
                else {
                    return Err(unparsed().into());
                };
                let field = self
                    .fields
                    .iter()
                    .find(|f| f.name == name)
                    .ok_or_else(|| format!("its filter names `{name}`, not a field"))?;
                readable(field, 8)?;
                if matches!(field.kind, FieldKind::CharArray { .. }) {
                    return Err(format!("its filter compares the text field `{name}`"));
                }
                self.push(Rule {
                    offset: field.offset as u32,
                    size: field.size as u8,
                    is_signed: field.signed as u8,
                    op,
                    unused: 0,
                    value,
                });
                Ok(())
            }
            _ => Err(unparsed().into()),
        }
    }
}

/// The tokens of a filter; `Err` on anything but names, numbers,
/// comparisons, `&&`, `||` and parentheses.
fn tokenize(text: &str) -> Result<Vec<Token<'_>>, ()> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let two = text.get(i..i + 2).unwrap_or("");
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let (token, len) = match two {
            "&&" => (Token::And, 2),
            "||" => (Token::Or, 2),
            "==" => (Token::Op(OP_EQ), 2),
            "!=" => (Token::Op(OP_NE), 2),
            "<=" => (Token::Op(OP_LE), 2),
            ">=" => (Token::Op(OP_GE), 2),
            _ => match c {
                b'<' => (Token::Op(OP_LT), 1),
                b'>' => (Token::Op(OP_GT), 1),
                b'&' => (Token::Op(OP_BAND), 1),
                b'(' => (Token::Open, 1),
                b')' => (Token::Close, 1),
                _ if c.is_ascii_alphabetic() || c == b'_' => {
                    let len = b[i..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
                        .count();
                    (Token::Name(&text[i..i + len]), len)
                }
                _ if c.is_ascii_digit() || c == b'-' => {
                    let len = 1 + b[i + 1..]
                        .iter()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .count();
                    (Token::Number(number(&text[i..i + len]).ok_or(())?), len)
                }
                _ => return Err(()),
            },
        };
        out.push(token);
        i += len;
    }
    Ok(out)
}

/// A number as ftrace reads one: decimal, `0x` hex or `0` octal, maybe
/// negative (two's complement).
fn number(text: &str) -> Option<u64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let value = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        u64::from_str_radix(hex, 16).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse().ok()?
    };
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(name: &str, offset: usize, size: usize, signed: bool) -> Field {
        Field {
            name: name.into(),
            type_text: "int".into(),
            offset,
            size,
            signed,
            kind: FieldKind::Int,
        }
    }

    fn rules(text: &str, fields: &[Field]) -> Result<Vec<Rule>, String> {
        compile_filter(text, fields)
    }

    #[test]
    fn the_c_structs_have_the_sizes_of_sampled_bpf_c() {
        assert_eq!(std::mem::size_of::<FieldAt>(), 8);
        assert_eq!(std::mem::size_of::<Rule>(), 16);
        assert_eq!(std::mem::size_of::<EntryConfig>(), 32 + 8 * 4 + 16 * 16);
    }

    #[test]
    fn comparisons_and_connectives_compile_to_postfix() {
        let fields = [int("which", 16, 8, false), int("who", 24, 4, true)];
        let r = rules("(which == 1 || which >= 0x10) && who < -2", &fields)
            .expect("a filter of numeric comparisons compiles");
        let ops: Vec<u8> = r.iter().map(|r| r.op).collect();
        assert_eq!(ops, vec![OP_EQ, OP_GE, OP_OR, OP_LT, OP_AND]);
        assert_eq!(r[1].value, 16);
        assert_eq!(r[3].value, (-2i64) as u64);
        assert_eq!((r[3].offset, r[3].size, r[3].is_signed), (24, 4, 1));
    }

    #[test]
    fn strings_globs_negations_and_common_fields_are_refused_with_a_reason() {
        let fields = [int("which", 16, 8, false), int("common_pid", 4, 4, true)];
        for text in [
            "comm == \"bash\"",
            "comm ~ \"b*\"",
            "!(which == 1)",
            "common_pid == 3",
            "which == 1 &&",
        ] {
            assert!(rules(text, &fields).is_err(), "{text}");
        }
        let many = ["which == 1"; 9].join(" && ");
        assert!(rules(&many, &fields).is_err());
    }
}
