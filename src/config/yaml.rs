//! Running serde-saphyr with safe limits, and turning its errors into
//! [`ConfigError`]s that say which setting is wrong and how to fix it.
//!
//! serde-saphyr reports type errors as e.g. "expected sequence start" at a
//! line and column. To say *which* setting that is, we re-scan the document
//! with its parser (no alias expansion, so linear in the input) up to that
//! position and recover the key path, e.g. `cgroups[1].groups`.

use serde_saphyr::budget::{Budget, BudgetBreach};
use serde_saphyr::granit_parser::{ErrorKind, Event, Parser, ScalarStyle};
use serde_saphyr::{
    DefaultMessageFormatter, DuplicateKeyPolicy, Error, ExternalMessageSource, MessageFormatter,
    Options,
};

use super::error::{ConfigError, quote, sanitize, shorten};
use super::schema::RawConfig;
use super::validate::MAX_CGROUPS_HINT;
use super::{BACKEND_HINT, MAX_CGROUPS_LIMIT, MAX_RING_PAGES, MAX_SERIES_LIMIT};
use crate::suggest::did_you_mean;

/// YAML limits: far above any real config, far below what hurts, so that
/// an alias bomb ("billion laughs") fails after little work.
const MAX_ALIASES: usize = 1_000;
const MAX_ANCHORS: usize = 1_000;
const MAX_EVENTS: usize = 200_000;
const MAX_NODES: usize = 50_000;
const MAX_DEPTH: usize = 32;
/// Total events replayed through aliases: bounds `*list` used many times.
const MAX_REPLAYED_EVENTS: usize = 50_000;

fn options() -> Options {
    let mut budget = Budget::default();
    budget.max_aliases = MAX_ALIASES;
    budget.max_anchors = MAX_ANCHORS;
    budget.max_events = MAX_EVENTS;
    budget.max_nodes = MAX_NODES;
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    let mut options = Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events = MAX_REPLAYED_EVENTS;
    options.duplicate_keys = DuplicateKeyPolicy::Error;
    // Only `true`/`false`: YAML 1.1's `yes`/`on`/`y` are too easy to misread.
    options.strict_booleans = true;
    // We render our own one-line messages.
    options.with_snippet = false;
    options
}

/// Deserializes the document into the raw schema.
pub(crate) fn deserialize(source: &str, text: &str) -> Result<RawConfig, ConfigError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| convert(source, text, &e))
}

/// Maps a serde-saphyr error to a [`ConfigError`] at the same position.
fn convert(source: &str, text: &str, err: &Error) -> ConfigError {
    // For errors inside an alias, `location` is where the alias is used,
    // which is the line the user should look at.
    let location = err.location();
    let mut inner = err.without_snippet();
    while let Error::AliasError { error, .. } = inner {
        inner = error.without_snippet();
    }
    let node = location.and_then(|l| node_at(text, l.line(), l.column()));
    let error = |message: String| ConfigError::new(source, message).at(location);
    match inner {
        Error::SerdeUnknownField {
            field, expected, ..
        } => {
            let place = node
                .as_ref()
                .map_or("the config".to_owned(), |n| n.parent());
            let valid = expected.join(", ");
            let hint = match did_you_mean(field, expected.iter().copied()) {
                Some(close) => format!("did you mean `{close}`? valid keys here: {valid}"),
                None => format!("valid keys here: {valid}"),
            };
            error(format!("unknown key {} in {place}", quote(field))).hint(hint)
        }
        Error::DuplicateMappingKey { key, .. } => {
            let place = node.as_ref().map_or("a mapping".to_owned(), |n| n.parent());
            let key = key.as_deref().map_or("a key".to_owned(), quote);
            error(format!("duplicate key {key} in {place}"))
                .hint("each key may appear only once; merge the entries or remove one")
        }
        Error::Budget {
            breach: BudgetBreach::Depth { .. },
            ..
        } => too_deep(error),
        Error::Budget {
            breach: BudgetBreach::Nodes { .. },
            ..
        } => error(format!(
            "the YAML document is too complex: more than {MAX_NODES} nodes{}",
            super::node_count::largest_settings(text)
        ))
        .hint(LIMITS_HINT),
        Error::Budget { breach, .. } => error(format!(
            "the YAML document is too complex: {}",
            describe_breach(breach)
        ))
        .hint(LIMITS_HINT),
        // The parser's own nesting limit (flow collections), which
        // `options` sets to the budget's depth.
        Error::ExternalMessage { source, .. }
            if matches!(&**source, ExternalMessageSource::Parser(scan)
                if matches!(scan.kind(), ErrorKind::RecursionLimitExceeded)) =>
        {
            too_deep(error)
        }
        Error::AliasReplayLimitExceeded { .. }
        | Error::AliasExpansionLimitExceeded { .. }
        | Error::AliasReplayStackDepthExceeded { .. }
        | Error::AliasReplayCounterOverflow { .. } => error(format!(
            "the YAML document is too complex: its aliases expand to more than \
                 {MAX_REPLAYED_EVENTS} YAML events"
        ))
        .hint(LIMITS_HINT),
        Error::MultipleDocuments { .. } => {
            error("the config must be a single YAML document".to_owned())
                .hint("remove the `---` document separator and everything after it")
        }
        Error::Unexpected { .. }
        | Error::InvalidBooleanStrict { .. }
        | Error::InvalidScalar { .. }
        | Error::NullIntoString { .. }
        | Error::SerdeInvalidType { .. }
        | Error::SerdeInvalidValue { .. }
        | Error::TaggedScalarCannotDeserializeIntoString { .. } => match &node {
            Some(node) if node.is_key => error(format!(
                "{} has a key that is not a name, found {}",
                node.parent(),
                node.found
            ))
            .hint("keys are plain names such as `interval` or `ipc`"),
            Some(node) => {
                let shape = shape(&node.path);
                match expectation(&shape) {
                    Some((expected, hint)) => {
                        let message = out_of_range(&shape, node).unwrap_or_else(|| {
                            format!(
                                "{} must be {expected}, found {}",
                                node.describe_path(),
                                node.found
                            )
                        });
                        error(message).hint(hint)
                    }
                    None => invalid_yaml(error, inner),
                }
            }
            None => invalid_yaml(error, inner),
        },
        // Syntax errors and the rest: keep the parser's own words.
        _ => invalid_yaml(error, inner),
    }
}

/// Nesting beyond [`MAX_DEPTH`]: no config needs it, and it is not a
/// matter of indentation.
fn too_deep(error: impl FnOnce(String) -> ConfigError) -> ConfigError {
    error(format!(
        "the YAML document nests lists and mappings more than {MAX_DEPTH} levels deep"
    ))
    .hint(
        "a cgperf config nests a few levels at most (e.g. `tracepoints:` > an entry > `by:`); \
         deeper documents are refused to bound the work of parsing them",
    )
}

/// An error we have nothing specific to say about: mostly YAML syntax.
fn invalid_yaml(error: impl FnOnce(String) -> ConfigError, inner: &Error) -> ConfigError {
    error(format!("invalid YAML: {}", plain_message(inner))).hint(
        "check the indentation (spaces, not tabs), quotes and brackets at and just before this position",
    )
}

const LIMITS_HINT: &str = "cgperf caps the size, nesting and alias use of the YAML to defuse \
                           alias bombs (\"billion laughs\"); real configs stay far below the \
                           caps, so write the values out instead of repeating large aliases";

/// serde-saphyr's message without its location suffix (we add our own).
fn plain_message(err: &Error) -> String {
    sanitize(&DefaultMessageFormatter.format_message(err))
}

fn describe_breach(breach: &BudgetBreach) -> String {
    match breach {
        BudgetBreach::Aliases { .. } => format!("more than {MAX_ALIASES} aliases"),
        BudgetBreach::Anchors { .. } => format!("more than {MAX_ANCHORS} anchors"),
        BudgetBreach::Events { .. } => format!("more than {MAX_EVENTS} YAML events"),
        BudgetBreach::Nodes { .. } => format!("more than {MAX_NODES} nodes"),
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => {
            format!("{aliases} aliases for only {anchors} anchors")
        }
        other => format!("{other:?}"),
    }
}

/// One step from the document root to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// The node found at an error position.
#[derive(Debug)]
struct NodeAt {
    /// Steps from the root to the node (for a key: to its mapping).
    path: Vec<Step>,
    /// The node is a mapping key rather than a value.
    is_key: bool,
    /// What the node is, for "found ..." (e.g. `a list`, `"maybe"`).
    found: String,
    /// The text of a scalar node.
    scalar: Option<String>,
}

impl NodeAt {
    /// `cgroups[1].groups`, or `the config` for the root.
    fn describe_path(&self) -> String {
        render_path(&self.path)
    }

    /// Where a key sits: `the top level` or `` `cgroups[0]` ``.
    fn parent(&self) -> String {
        if self.path.is_empty() {
            "the top level".to_owned()
        } else {
            render_path(&self.path)
        }
    }
}

fn render_path(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    if out.is_empty() {
        "the config".to_owned()
    } else {
        format!("`{out}`")
    }
}

/// Replays the parser up to the node starting at `line`:`column` (1-based)
/// and returns its path. `None` if there is no node exactly there.
fn node_at(text: &str, line: u64, column: u64) -> Option<NodeAt> {
    /// An open collection; a mapping remembers the key whose value is being read.
    enum Frame {
        Seq(usize),
        Map(Option<String>),
    }
    /// A node just ended: advance the enclosing collection.
    fn finish(frames: &mut [Frame]) {
        match frames.last_mut() {
            Some(Frame::Seq(i)) => *i += 1,
            Some(Frame::Map(key @ Some(_))) => *key = None,
            // A complex (non-scalar) key; its value follows.
            Some(Frame::Map(key @ None)) => *key = Some("?".to_owned()),
            None => {}
        }
    }

    let mut frames: Vec<Frame> = Vec::new();
    for item in Parser::new_from_str(text) {
        let (event, span) = item.ok()?;
        let is_key = matches!(frames.last(), Some(Frame::Map(None)));
        let found = match &event {
            Event::Scalar(value, ScalarStyle::Plain, ..)
                if matches!(value.as_ref(), "" | "~" | "null" | "Null" | "NULL") =>
            {
                "an empty value".to_owned()
            }
            Event::Scalar(value, ..) => quote(value),
            Event::SequenceStart(..) => "a list".to_owned(),
            Event::MappingStart(..) => "a mapping".to_owned(),
            Event::Alias(..) => "an alias".to_owned(),
            Event::SequenceEnd | Event::MappingEnd => {
                frames.pop();
                finish(&mut frames);
                continue;
            }
            _ => continue,
        };
        let scalar = match &event {
            Event::Scalar(value, ..) => Some(value.to_string()),
            _ => None,
        };
        let start = &span.start;
        if start.line() as u64 == line && start.col() as u64 + 1 == column {
            let path = frames
                .iter()
                .filter_map(|frame| match frame {
                    Frame::Seq(i) => Some(Step::Index(*i)),
                    Frame::Map(key) => key.clone().map(Step::Key),
                })
                .collect();
            return Some(NodeAt {
                path,
                is_key,
                found,
                scalar,
            });
        }
        match event {
            Event::SequenceStart(..) => frames.push(Frame::Seq(0)),
            Event::MappingStart(..) => frames.push(Frame::Map(None)),
            Event::Scalar(value, ..) if is_key => {
                if let Some(Frame::Map(key)) = frames.last_mut() {
                    *key = Some(value.into_owned());
                }
            }
            _ => finish(&mut frames),
        }
    }
    None
}

/// A setting's path with list indices and user-chosen keys left out, e.g.
/// `tracepoints[].max_series` or `groups.*[]`.
fn shape(path: &[Step]) -> String {
    let mut shape = String::new();
    for (i, step) in path.iter().enumerate() {
        match step {
            Step::Index(_) => shape.push_str("[]"),
            // The second level under `groups` is a user-chosen group name,
            // the third under `otlp.headers` and `otlp.resource` a
            // user-chosen key.
            Step::Key(_) if user_key(path, i) => shape.push_str(".*"),
            Step::Key(key) if i == 0 => shape.push_str(key),
            Step::Key(key) => {
                shape.push('.');
                shape.push_str(key);
            }
        }
    }
    shape
}

/// The range of a whole-number setting, by its [`shape`].
fn whole_number_range(shape: &str) -> Option<(usize, usize)> {
    match shape {
        "max_cgroups" => Some((1, MAX_CGROUPS_LIMIT)),
        "ring_pages" => Some((1, MAX_RING_PAGES)),
        "tracepoints[].max_series" => Some((1, MAX_SERIES_LIMIT)),
        _ => None,
    }
}

/// For a whole-number setting written as a whole number that the parser
/// could not take (beyond 64 bits), says so with the range; `None` for
/// anything else.
fn out_of_range(shape: &str, node: &NodeAt) -> Option<String> {
    let (min, max) = whole_number_range(shape)?;
    let text = node.scalar.as_deref()?.trim();
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (digits, radix) = match magnitude.get(..2) {
        Some("0x" | "0X") => (&magnitude[2..], 16),
        Some("0o" | "0O") => (&magnitude[2..], 8),
        _ => (magnitude, 10),
    };
    let whole = digits.chars().any(|c| c.is_digit(radix))
        && digits.chars().all(|c| c.is_digit(radix) || c == '_');
    if !whole {
        return None;
    }
    let size = if negative { "negative" } else { "too large" };
    Some(format!(
        "{} is {}, {size}: it must be from {min} to {max}",
        node.describe_path(),
        shorten(text)
    ))
}

/// What a setting must be and an example, by its [`shape`].
fn expectation(shape: &str) -> Option<(&'static str, &'static str)> {
    let found = match shape {
        "" => (
            "a mapping of settings",
            "the config is a mapping with the keys interval, per_cpu, groups, tracepoints, \
             probes, ring_pages, cgroups, max_cgroups, labels and otlp; see the embedded \
             default config",
        ),
        "interval" => (
            "a duration",
            "write a number directly followed by a unit (ms, s, m or h), e.g. `interval: 1s`",
        ),
        "per_cpu" => (
            "`true` or `false`",
            "write `per_cpu: true` or `per_cpu: false`",
        ),
        "groups" => (
            "a mapping from group name to a list of events",
            "write e.g. `groups: {ipc: [cycles, instructions]}`",
        ),
        "groups.*" => (
            "a list of events",
            "write e.g. `ipc: [cycles, instructions]`, even for a single event",
        ),
        "groups.*[]" => (
            "an event name",
            "write one event per list item in perf's syntax, e.g. `cycles` or \"msr/tsc/\"",
        ),
        "tracepoints" | "cgroups[].tracepoints" => (
            "a list of tracepoints",
            "write e.g. `tracepoints: [sched:sched_switch]`, even for a single tracepoint",
        ),
        "tracepoints[]" => (
            "a tracepoint name or a mapping with `name:`",
            "write `subsystem:name`, e.g. `sched:sched_switch`, or \
             `{name: syscalls:sys_enter_getpriority, by: [which], as: getpriority}`",
        ),
        "cgroups[].tracepoints[]" => (
            "a tracepoint's event label",
            "write the `as:` name of a top-level tracepoint, or its `subsystem:name`",
        ),
        "tracepoints[].name" => (
            "a tracepoint name",
            "write `subsystem:name`, e.g. `sched:sched_switch`",
        ),
        "tracepoints[].filter" => (
            "a filter expression",
            "write the kernel's tracepoint filter syntax, quoted, e.g. `filter: \"which == 1\"`",
        ),
        "tracepoints[].as" | "probes[].as" => (
            "an event label",
            "write a name for the `event` label, e.g. `as: pgrp_lookups`",
        ),
        "tracepoints[].by" => (
            "a list of field names",
            "write e.g. `by: [which]`; the fields are listed in the tracepoint's format file",
        ),
        "tracepoints[].max_series" => (
            "a whole number",
            "write e.g. `max_series: 100`; values beyond it are counted under `other`",
        ),
        "probes" | "cgroups[].probes" => (
            "a list of probes",
            "write e.g. `probes: [{uprobe: /usr/lib/x86_64-linux-gnu/libc.so.6:malloc, as: malloc_calls}]`",
        ),
        "probes[]" => (
            "a mapping with `uprobe:` or `kprobe:` and `as:`",
            "write e.g. `- {uprobe: /usr/bin/bash:readline, as: readline_calls}`",
        ),
        "probes[].uprobe" => (
            "a probe location",
            "write `/absolute/path/to/binary:symbol` or `/absolute/path:0xOFFSET`",
        ),
        "probes[].kprobe" => ("a kernel function", "write e.g. `kprobe: do_sys_openat2`"),
        "cgroups[].probes[]" => ("a probe's event label", "write the `as:` name of a probe"),
        "ring_pages" => (
            "a whole number",
            "write a power of two from 1 to 1024, e.g. `ring_pages: 64`",
        ),
        "cgroups" => (
            "a list of cgroup selectors",
            "write e.g. `cgroups: [{path: /}, {match: /system.slice/*.service}]`",
        ),
        "cgroups[]" => (
            "a mapping with `path:` or `match:`",
            "write `- path: /system.slice` for one cgroup or `- match: /system.slice/*` for a glob",
        ),
        "cgroups[].path" | "cgroups[].match" => (
            "a cgroup path",
            "write a path relative to the cgroup2 root, e.g. `/system.slice`",
        ),
        "cgroups[].groups" => (
            "a list of group names",
            "write e.g. `groups: [sched, ipc]`, even for a single group",
        ),
        "cgroups[].groups[]" => ("a group name", "list names defined under `groups:`"),
        "max_cgroups" => ("a whole number", MAX_CGROUPS_HINT),
        "labels" => (
            "a list of label extractors",
            "write e.g. `labels: [kubernetes, systemd, containers]`, even for a single one",
        ),
        "labels[]" => (
            "a label extractor name",
            "label extractors: kubernetes, systemd, containers",
        ),
        "backend" => ("`auto`, `cgroup` or `bpf`", BACKEND_HINT),
        "otlp" => (
            "a mapping of OTLP settings",
            "write e.g. `otlp: {endpoint: http://127.0.0.1:4317}`",
        ),
        "otlp.endpoint" => ("a URL", "write e.g. `endpoint: http://127.0.0.1:4317`"),
        "otlp.protocol" => ("`grpc` or `http/protobuf`", "write e.g. `protocol: grpc`"),
        "otlp.interval" | "otlp.timeout" => (
            "a duration",
            "write a number directly followed by a unit (ms, s, m or h), e.g. `10s`",
        ),
        "otlp.headers" => (
            "a mapping from header name to value",
            "write e.g. `headers: {authorization: \"Bearer …\"}`",
        ),
        "otlp.resource" => (
            "a mapping from attribute name to value",
            "write e.g. `resource: {deployment.environment.name: production}`",
        ),
        "energy" => (
            "a mapping of energy settings",
            "write e.g. `energy: {meter: auto}`",
        ),
        "energy.meter" => (
            "`auto`, `perf`, `powercap` or `model`",
            "write e.g. `meter: auto`",
        ),
        "energy.idle" => ("`model` or `none`", "write e.g. `idle: model`"),
        "energy.model" => (
            "a mapping with `per:`, `idle_watts:` and `max_watts:`",
            "write e.g. `model: {per: socket, idle_watts: 40, max_watts: 180}`",
        ),
        "energy.model.per" => ("`socket` or `cpu`", "write e.g. `per: socket`"),
        "energy.model.idle_watts" | "energy.model.max_watts" => {
            ("a number of watts", "write e.g. `idle_watts: 40`")
        }
        "otlp.headers.*" | "otlp.resource.*" => (
            "a text value",
            "quote values that YAML would read as something else, e.g. \"1\" or \"true\"",
        ),
        _ => return None,
    };
    Some(found)
}

/// Whether step `i` of `path` is a key the user chose rather than a setting.
fn user_key(path: &[Step], i: usize) -> bool {
    let key = |j: usize| match path.get(j) {
        Some(Step::Key(k)) => k.as_str(),
        _ => "",
    };
    (i == 1 && key(0) == "groups")
        || (i == 2 && key(0) == "otlp" && matches!(key(1), "headers" | "resource"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_at(text: &str, line: u64, column: u64) -> Option<String> {
        node_at(text, line, column).map(|n| n.describe_path())
    }

    #[test]
    fn node_paths() {
        let text = "interval: 1s\ngroups:\n  ipc: [cycles, instructions]\n\
                    cgroups:\n  - path: /\n  - match: /*\n    groups: [ipc]\n";
        assert_eq!(path_at(text, 1, 11).as_deref(), Some("`interval`"));
        assert_eq!(path_at(text, 3, 8).as_deref(), Some("`groups.ipc`"));
        assert_eq!(path_at(text, 3, 17).as_deref(), Some("`groups.ipc[1]`"));
        assert_eq!(path_at(text, 6, 12).as_deref(), Some("`cgroups[1].match`"));
        assert_eq!(path_at(text, 7, 13).as_deref(), Some("`cgroups[1].groups`"));
        assert_eq!(
            path_at(text, 7, 14).as_deref(),
            Some("`cgroups[1].groups[0]`")
        );
        let key = node_at(text, 7, 5).expect("key node");
        assert!(key.is_key);
        assert_eq!(key.parent(), "`cgroups[1]`");
        assert!(path_at(text, 1, 2).is_none());
    }
}
