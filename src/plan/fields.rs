//! The fields of a tracepoint entry checked against its record layout: the
//! names its filter compares and its `by:` fields, and the label each `by:`
//! field is exported under; and what to say when the kernel rejects a filter
//! (it gives only an errno).

use crate::config::{ConfigError, TracepointDef};
use crate::events::{Field, FieldKind, TracepointFormat};
use crate::perf::Errno;
use std::ffi::{CStr, CString};
use std::sync::Arc;

/// Label names a `by:` field may not take, because every series of
/// `cgperf_events_total` already has them (the extractors' labels included);
/// a field with such a name is exported as `field_<name>`.
const RESERVED_LABELS: [&str; 10] = [
    "cgroup",
    "group",
    "event",
    "cpu",
    "pod_uid",
    "qos_class",
    "slice",
    "unit",
    "container_id",
    "container_runtime",
];

/// The label name of a `by:` field: its own name unless that would clash
/// with a label every series has, or is reserved by Prometheus (`__`).
pub(super) fn field_label(name: &str) -> Arc<str> {
    if RESERVED_LABELS.contains(&name) || name.starts_with("__") {
        format!("field_{name}").into()
    } else {
        name.into()
    }
}

/// Checks the field names of a filter against the format (the kernel only
/// says EINVAL), and turns it into the C string the kernel takes.
pub(super) fn check_filter(
    def: &TracepointDef,
    text: &str,
    format: &TracepointFormat,
) -> Result<Arc<CStr>, ConfigError> {
    if let Some(unknown) = filter_fields(text).find(|name| format.field(name).is_none()) {
        return Err(unknown_field(def, unknown, format));
    }
    CString::new(text)
        .map(Arc::from)
        .map_err(|_| def.origin.error("the filter contains a NUL character"))
}

/// The identifiers of a filter that are compared with a value: the fields
/// it names (`which == 1 && comm ~ "bash*"` names `which` and `comm`).
pub(super) fn filter_fields(text: &str) -> impl Iterator<Item = &str> {
    const OPERATORS: [&str; 8] = ["==", "!=", "<=", ">=", "<", ">", "&", "~"];
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut quoted = false;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'"' {
                quoted = !quoted;
                i += 1;
                continue;
            }
            if quoted || !(c.is_ascii_alphabetic() || c == b'_') {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let rest = text[i..].trim_start();
            if OPERATORS.iter().any(|op| rest.starts_with(op)) {
                return Some(word);
            }
        }
        None
    })
}

fn field_listing(format: &TracepointFormat) -> String {
    let names: Vec<&str> = format.field_names().collect();
    format!("fields of this tracepoint: {}", names.join(", "))
}

/// Checks that the `syscall_name:` field is an integer: only a number can
/// be looked up in the syscall table.
pub(super) fn check_syscall_field(
    def: &TracepointDef,
    field: Option<&Field>,
) -> Result<(), ConfigError> {
    match field {
        Some(field) if field.kind == FieldKind::Int => Ok(()),
        Some(field) => Err(def
            .origin
            .error(format!(
                "`syscall_name: {}` names a field of type `{}`, not a syscall number",
                field.name, field.type_text
            ))
            .hint("name an integer field such as `id` of raw_syscalls:sys_enter")),
        None => Err(def
            .origin
            .error("`syscall_name` names none of the `by:` fields")),
    }
}

pub(super) fn unknown_field(
    def: &TracepointDef,
    name: &str,
    format: &TracepointFormat,
) -> ConfigError {
    let listing = field_listing(format);
    let hint = match crate::suggest::did_you_mean(name, format.field_names()) {
        Some(close) => format!("did you mean `{close}`? {listing}"),
        None => listing,
    };
    def.origin
        .error(format!("tracepoint {} has no field `{name}`", def.name))
        .hint(hint)
}

pub(super) fn rejected_filter(
    def: &TracepointDef,
    text: &str,
    errno: Errno,
    format: &TracepointFormat,
) -> ConfigError {
    // The kernel explains a rejected filter only by its errno.
    let why = match errno.0 {
        libc::EINVAL => {
            "a comparison does not parse, or compares a field with a value of the \
                         wrong type"
        }
        libc::ENOENT => {
            "the expression is incomplete, e.g. an unbalanced parenthesis or an \
                         operator without a field"
        }
        libc::ENOMEM | libc::E2BIG | libc::ENOSPC => "the expression is too long or too complex",
        _ => "the kernel gave no other reason",
    };
    def.origin
        .error(format!(
            "the kernel rejected the filter \"{text}\" of tracepoint {} ({errno}: {why})",
            def.name
        ))
        .hint(format!(
            "write `field op value` joined by && and ||, with ==, !=, <, <=, >, >=, & for \
             numbers and ==, !=, ~ (glob) for strings in double quotes; {}",
            field_listing(format)
        ))
}
