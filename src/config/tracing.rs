//! Validation of `tracepoints:` entries (plain, filtered, counted by field
//! value) and `probes:` (uprobes, kprobes), and of `ring_pages`.
//!
//! Only the syntax is checked here; whether the kernel accepts a filter,
//! whether a field exists and where a symbol lives depend on the machine and
//! are checked when the daemon plans what to open.

use serde_saphyr::{Location, Spanned};

use super::error::{ConfigError, quote};
use super::schema::{RawProbe, RawTracepoint, RawTracepointEntry, Text};
use super::validate::{Listed, Validator};
use super::{
    DEFAULT_MAX_SERIES, MAX_RING_PAGES, MAX_SERIES_LIMIT, Origin, ProbeDef, TracepointDef,
};
use crate::events::{ProbeSpec, SYSCALL_LABEL};

/// Longest filter: the kernel copies at most a page of filter text.
const MAX_FILTER_BYTES: usize = 4095;

const LABEL_HINT: &str = "`as:` names become the `event` label and must match \
                          `[A-Za-z_][A-Za-z0-9_:.-]*`, e.g. `as: pgrp_lookups`";
const FIELD_HINT: &str = "`by:` lists field names of the tracepoint, as in its format file \
                          (/sys/kernel/tracing/events/SUBSYSTEM/NAME/format), e.g. `by: [which]`";

/// A tracepoint entry and where its label was written.
struct Labelled {
    def: TracepointDef,
    label: String,
    label_at: Location,
}

impl Validator<'_> {
    pub(super) fn origin(&self, at: Location) -> Origin {
        Origin {
            source: self.source.to_owned(),
            line: u32::try_from(at.line()).unwrap_or(0),
            column: u32::try_from(at.column()).unwrap_or(0),
        }
    }

    /// The top-level `tracepoints:` list; a broken entry is reported and
    /// left out.
    pub(super) fn tracepoints(&self, list: Vec<Spanned<RawTracepoint>>) -> Vec<TracepointDef> {
        let mut defs: Vec<TracepointDef> = Vec::with_capacity(list.len());
        let mut labels: Listed<String> = Listed::with_capacity(list.len());
        for item in list {
            if let Some(def) = self.keep(self.tracepoint_item(item, &labels)) {
                labels.push(def.label.clone(), def.label_at);
                defs.push(def.def);
            }
        }
        defs
    }

    /// One entry of `tracepoints:`, unless its label is one of `labels`
    /// already.
    fn tracepoint_item(
        &self,
        item: Spanned<RawTracepoint>,
        labels: &Listed<String>,
    ) -> Result<Labelled, ConfigError> {
        let at = item.referenced;
        let (def, label_text) = match item.value {
            RawTracepoint::Name(name) => {
                let text = Text {
                    value: name,
                    referenced: at,
                    defined: item.defined,
                };
                let def = TracepointDef {
                    name: self.tracepoint(&text)?,
                    label: text.value.clone(),
                    filter: None,
                    by: Vec::new(),
                    max_series: DEFAULT_MAX_SERIES,
                    syscall_name: None,
                    origin: self.origin(at),
                };
                (def, text)
            }
            RawTracepoint::Entry(entry) => self.tracepoint_entry(at, *entry)?,
        };
        if let Some(first) = labels.first(def.label.as_str()) {
            let message = format!(
                "tracepoint event label {} is used twice (first at line {}, column {})",
                quote(&def.label),
                first.line(),
                first.column()
            );
            return Err(self.error(label_text.referenced, message).hint(
                "give each entry its own `as:` name; the same tracepoint may be listed \
                 several times with different filters or `by:` fields",
            ));
        }
        Ok(Labelled {
            label: def.label.clone(),
            label_at: label_text.referenced,
            def,
        })
    }

    /// One `- name: ...` entry; returns it and the text its label came from.
    fn tracepoint_entry(
        &self,
        at: Location,
        entry: RawTracepointEntry,
    ) -> Result<(TracepointDef, Text), ConfigError> {
        let name = self.tracepoint(&entry.name)?;
        let filter = match &entry.filter {
            Some(text) => Some(self.filter(text)?),
            None => None,
        };
        let by = match &entry.by {
            Some(list) => self.fields(list)?,
            None => Vec::new(),
        };
        let max_series = match &entry.max_series {
            Some(n) if by.is_empty() => {
                return Err(self
                    .error(
                        n.referenced,
                        "`max_series` applies only to counts split `by:` fields",
                    )
                    .hint("add `by: [field]` or remove `max_series:`"));
            }
            Some(n) => self.max_series(n)?,
            None => DEFAULT_MAX_SERIES,
        };
        let syscall_name = match &entry.syscall_name {
            Some(text) => Some(self.syscall_field(text, &by)?),
            None => None,
        };
        let label_text = match entry.label {
            Some(label) => {
                self.label(&label)?;
                label
            }
            None => entry.name.clone(),
        };
        let def = TracepointDef {
            name,
            label: label_text.value.clone(),
            filter,
            by,
            max_series,
            syscall_name,
            origin: self.origin(at),
        };
        Ok((def, label_text))
    }

    /// `syscall_name:`: which of the `by:` fields holds a syscall number.
    fn syscall_field(&self, text: &Text, by: &[String]) -> Result<usize, ConfigError> {
        if by.iter().any(|field| field == SYSCALL_LABEL) {
            let message = format!(
                "`syscall_name` adds a `{SYSCALL_LABEL}` label, and `by:` already has a field of that name"
            );
            return Err(self
                .error(text.referenced, message)
                .hint("remove `syscall_name:`; the field is exported under its own name"));
        }
        by.iter()
            .position(|field| *field == text.value)
            .ok_or_else(|| {
                let message = if by.is_empty() {
                    "`syscall_name` applies only to counts split `by:` fields".to_owned()
                } else {
                    format!(
                        "`syscall_name` names {}, which is not among the `by:` fields",
                        quote(&text.value)
                    )
                };
                self.error(text.referenced, message).hint(
                    "name the `by:` field that holds the syscall number, e.g. \
                 `{name: raw_syscalls:sys_enter, by: [id], syscall_name: id}`",
                )
            })
    }

    fn filter(&self, text: &Text) -> Result<String, ConfigError> {
        let filter = text.value.trim();
        let problem = if filter.is_empty() {
            "is empty"
        } else if filter.len() > MAX_FILTER_BYTES {
            "is longer than 4095 bytes, the most the kernel accepts"
        } else if filter.contains('\0') {
            "contains a NUL character"
        } else {
            return Ok(filter.to_owned());
        };
        Err(self
            .error(
                text.referenced,
                format!("filter {} {problem}", quote(filter)),
            )
            .hint(
                "write the kernel's tracepoint filter syntax, e.g. `filter: \"which == 1\"`, \
                 or remove `filter:`",
            ))
    }

    fn fields(&self, list: &Spanned<Vec<Text>>) -> Result<Vec<String>, ConfigError> {
        if list.value.is_empty() {
            return Err(self
                .error(list.referenced, "`by` is empty")
                .hint("list at least one field, or remove `by:` for a plain count"));
        }
        let mut seen: Listed<String> = Listed::with_capacity(list.value.len());
        for item in &list.value {
            if !is_identifier(&item.value) {
                let message = format!("{} is not a field name", quote(&item.value));
                return Err(self.error(item.referenced, message).hint(FIELD_HINT));
            }
            self.unique("field", " in `by`", &mut seen, item.value.clone(), item)?;
        }
        Ok(seen.into_values())
    }

    fn max_series(&self, n: &Spanned<i64>) -> Result<usize, ConfigError> {
        match usize::try_from(n.value) {
            Ok(v) if (1..=MAX_SERIES_LIMIT).contains(&v) => Ok(v),
            _ => Err(self
                .error(
                    n.referenced,
                    format!(
                        "`max_series` is {}; it must be from 1 to {MAX_SERIES_LIMIT}",
                        n.value
                    ),
                )
                .hint(
                    "values beyond `max_series` are counted under `other`; e.g. `max_series: 100`",
                )),
        }
    }

    fn label(&self, text: &Text) -> Result<(), ConfigError> {
        let ok = text
            .value
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && text
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.' | '-'));
        if ok {
            return Ok(());
        }
        let message = format!("{} is not a valid event label", quote(&text.value));
        Err(self.error(text.referenced, message).hint(LABEL_HINT))
    }

    /// The top-level `probes:` list; a broken entry is reported and left
    /// out.
    pub(super) fn probes(&self, list: Vec<Spanned<RawProbe>>) -> Vec<ProbeDef> {
        let mut defs = Vec::with_capacity(list.len());
        let mut labels: Listed<String> = Listed::with_capacity(list.len());
        for item in list {
            if let Some(def) = self.keep(self.probe(item, &mut labels)) {
                defs.push(def);
            }
        }
        defs
    }

    /// One entry of `probes:`; its label joins `labels` unless it is there
    /// already.
    fn probe(
        &self,
        item: Spanned<RawProbe>,
        labels: &mut Listed<String>,
    ) -> Result<ProbeDef, ConfigError> {
        let at = item.referenced;
        let raw = item.value;
        let spec = match (&raw.uprobe, &raw.kprobe) {
            (Some(text), None) => ProbeSpec::parse_uprobe(&text.value)
                .map_err(|e| self.probe_error(text, &e.to_string()))?,
            (None, Some(text)) => ProbeSpec::parse_kprobe(&text.value)
                .map_err(|e| self.probe_error(text, &e.to_string()))?,
            (Some(_), Some(kprobe)) => {
                return Err(self
                    .error(
                        kprobe.referenced,
                        "a probe has both `uprobe:` and `kprobe:`",
                    )
                    .hint("write one entry per probe"));
            }
            (None, None) => {
                return Err(self
                    .error(at, "a probe has neither `uprobe:` nor `kprobe:`")
                    .hint(
                        "write e.g. `- {uprobe: /usr/lib/x86_64-linux-gnu/libc.so.6:malloc, \
                     as: malloc_calls}`",
                    ));
            }
        };
        let Some(label) = raw.label else {
            return Err(self
                .error(at, "a probe has no `as:` name")
                .hint("add e.g. `as: malloc_calls`; it becomes the `event` label"));
        };
        self.label(&label)?;
        self.unique("probe name", "", labels, label.value.clone(), &label)?;
        Ok(ProbeDef {
            spec,
            label: label.value,
            origin: self.origin(at),
        })
    }

    fn probe_error(&self, text: &Text, error: &str) -> ConfigError {
        self.error(text.referenced, super::error::about(&text.value, error))
            .hint("uprobes are `/absolute/path/to/binary:symbol` or `/path:0xOFFSET`; kprobes name a kernel function")
    }

    /// `ring_pages`: a power of two within `1..=MAX_RING_PAGES`.
    pub(super) fn ring_pages(&self, n: &Spanned<i64>) -> Result<usize, ConfigError> {
        match usize::try_from(n.value) {
            Ok(v) if v.is_power_of_two() && v <= MAX_RING_PAGES => Ok(v),
            _ => Err(self
                .error(
                    n.referenced,
                    format!(
                        "`ring_pages` is {}; it must be a power of two from 1 to {MAX_RING_PAGES}",
                        n.value
                    ),
                )
                .hint("e.g. `ring_pages: 64` (256 KiB per CPU with 4 KiB pages)")),
        }
    }
}

/// A C identifier, as tracepoint field names are.
fn is_identifier(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
