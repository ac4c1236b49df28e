//! Arbitrary text through `cgperf::events::TracepointFormat::parse`, and
//! arbitrary raw records through `Field::format_value` of every field of
//! each format that parses, as cgperf does with tracefs `format` files and
//! the `PERF_SAMPLE_RAW` data of sampled tracepoints.
//!
//! Input layout: the format text up to the first NUL byte (inputs whose text
//! is not UTF-8 are skipped, as `read_to_string` would refuse them), then the
//! raw record.
//!
//! Asserts, besides "never panics":
//! - every error message renders;
//! - a parsed format finds each of its fields by name, and `field_names`
//!   lists exactly the fields not named `common_*`;
//! - a formatted value never exceeds `MAX_VALUE_LEN` bytes and holds no
//!   control character (they are escaped);
//! - a field whose bytes lie inside the record formats without error unless
//!   it is a `__data_loc`/`__rel_loc` pointing outside; one whose bytes do
//!   not is `FieldOutOfBounds`;
//! - integers equal an independent little-endian read of their bytes
//!   (sign-extended when signed), pointers print as `0x` and lowercase hex.

#![no_main]

use cgperf::events::{DecodeError, Field, FieldKind, MAX_VALUE_LEN, TracepointFormat};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (text, raw) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let format = match TracepointFormat::parse(text) {
        Ok(format) => format,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    check_lookup(&format);
    let mut out = String::new();
    for field in &format.fields {
        check_field(field, raw, &mut out);
        // The same field in a record cut just before its end.
        if let Some(cut) = (field.offset + field.size).checked_sub(1) {
            check_field(field, &raw[..cut.min(raw.len())], &mut out);
        }
    }
});

fn check_lookup(format: &TracepointFormat) {
    for field in &format.fields {
        assert_eq!(format.field(&field.name), Some(field));
    }
    let own: Vec<&str> = format
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .filter(|name| !name.starts_with("common_"))
        .collect();
    assert_eq!(format.field_names().collect::<Vec<_>>(), own);
}

fn check_field(field: &Field, raw: &[u8], out: &mut String) {
    let result = field.format_value(raw, out);
    assert!(out.len() <= MAX_VALUE_LEN, "{} bytes: {out:?}", out.len());
    assert!(!out.chars().any(char::is_control), "{out:?}");
    let inside = field.offset + field.size <= raw.len();
    match result {
        Err(ref e) => {
            assert!(!e.to_string().is_empty());
            match e {
                DecodeError::FieldOutOfBounds { .. } => assert!(!inside, "{e}"),
                DecodeError::DataOutOfBounds { .. } => assert!(
                    inside
                        && matches!(
                            field.kind,
                            FieldKind::DataLoc { .. } | FieldKind::RelLoc { .. }
                        ),
                    "{e}"
                ),
                DecodeError::UnsupportedWidth { .. } => panic!("a parsed field: {e}"),
            }
        }
        Ok(()) => {
            assert!(inside);
            let bytes = &raw[field.offset..field.offset + field.size];
            check_value(field, bytes, out);
        }
    }
}

/// The text of integers and pointers against an independent read.
fn check_value(field: &Field, bytes: &[u8], out: &str) {
    let mut word = [0u8; 8];
    word[..bytes.len().min(8)].copy_from_slice(&bytes[..bytes.len().min(8)]);
    let unsigned = u64::from_le_bytes(word);
    match field.kind {
        FieldKind::Int if field.signed => {
            let shift = 64 - 8 * bytes.len() as u32;
            let signed = ((unsigned << shift) as i64) >> shift;
            assert_eq!(out, signed.to_string());
        }
        FieldKind::Int => assert_eq!(out, unsigned.to_string()),
        FieldKind::Pointer => assert_eq!(out, format!("0x{unsigned:x}")),
        _ => {}
    }
}
