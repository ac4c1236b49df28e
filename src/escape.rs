//! Names that are bytes, as text: cgroup paths and task names (`comm`)
//! are whatever bytes their creator chose, while cgperf's labels, config
//! and logs are UTF-8. [`escape`] writes such a name as text that tells
//! any two apart, and [`unescape`] reads the bytes back wherever the name
//! itself is needed (a directory to open, the length the kernel keeps).

use std::fmt::Write as _;

/// The text of a name given as bytes (a cgroup path, a task's comm), the same for the same bytes
/// and telling any two paths apart: UTF-8 stays as it is, and each byte
/// that is not part of UTF-8 is written `\xHH` (upper-case hex; such a
/// byte is always 0x80 or above). A backslash is doubled only where what
/// follows would otherwise read as an escape (another backslash, an
/// escaped byte, or a literal `xHH` of that form), so that a valid name
/// changes only in that case, which no runtime makes: systemd's `\x2d`
/// and lower-case `\xc3` escapes in unit names stay as they are.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        for (i, c) in valid.char_indices() {
            if c == '\\' {
                let rest = &valid[i + 1..];
                let reads_as_escape = match rest.is_empty() {
                    true => !chunk.invalid().is_empty(),
                    false => rest.starts_with('\\') || escaped_byte(rest).is_some(),
                };
                if reads_as_escape {
                    out.push('\\');
                }
            }
            out.push(c);
        }
        for byte in chunk.invalid() {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\x{byte:02X}");
        }
    }
    out
}

/// The bytes of a path [`escape`] wrote; any other text reads as itself,
/// save for the escapes.
pub fn unescape(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        let after = &rest[at + 1..];
        if let Some(unescaped) = after.strip_prefix('\\') {
            out.push(b'\\');
            rest = unescaped;
        } else if let Some(byte) = escaped_byte(after) {
            out.push(byte);
            rest = &after[3..];
        } else {
            out.push(b'\\');
            rest = after;
        }
    }
    out.extend_from_slice(rest.as_bytes());
    out
}

/// The byte that `text`, following a backslash, stands for, if it starts
/// with an escape [`escape`] writes: `x` and two upper-case hex digits of
/// a byte that cannot be UTF-8 on its own.
fn escaped_byte(text: &str) -> Option<u8> {
    let hex = text.strip_prefix('x')?.get(..2)?;
    if !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F')) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok().filter(|b| *b >= 0x80)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn valid_names_keep_their_paths_and_invalid_bytes_are_escaped() {
        let table: [(&[u8], &str); 8] = [
            (b"/system.slice/a.service", "/system.slice/a.service"),
            (
                b"/system-getty.slice/x\\x2dy",
                "/system-getty.slice/x\\x2dy",
            ),
            (b"/caf\\xc3\\xa9.service", "/caf\\xc3\\xa9.service"),
            ("/café".as_bytes(), "/café"),
            (b"/w\\", "/w\\"),
            (b"/caf\xe9", "/caf\\xE9"),
            (b"/a\\\xff", "/a\\\\\\xFF"),
            (b"/lit\\xFF", "/lit\\\\xFF"),
        ];
        for (bytes, text) in table {
            assert_eq!(escape(bytes), text, "{bytes:?}");
            assert_eq!(unescape(text), bytes, "{text}");
        }
    }

    proptest! {
        /// Unambiguous: the bytes come back, so no two paths share a text.
        #[test]
        fn escaping_is_undone(bytes in proptest::collection::vec(
            prop_oneof![Just(b'\\'), Just(b'x'), Just(b'F'), Just(b'8'), Just(0xffu8),
                        Just(0xc3u8), Just(0xa9u8), any::<u8>()],
            0..24,
        )) {
            prop_assert_eq!(unescape(&escape(&bytes)), bytes);
        }

        #[test]
        fn utf8_without_backslashes_is_unchanged(text in "[^\\\\]{0,24}") {
            prop_assert_eq!(escape(text.as_bytes()), text);
        }
    }
}
