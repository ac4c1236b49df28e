//! Raw schema -> [`Config`]: every semantic rule, each failing with the
//! position of the offending value and a hint.
//!
//! Every mistake is reported, not only the first: validation goes on past a
//! bad value to the next section, group, event, entry or selector, so that a
//! user fixes a file in one pass. Within one value the first problem wins,
//! and a value that refers to a broken one (a selector naming a group whose
//! events are wrong) is not blamed for it: a cascade of consequences of one
//! mistake helps no one.

use serde_saphyr::{Location, Spanned};

use super::cgroup::CgroupPattern;
use super::duration::{MAX_INTERVAL, MIN_INTERVAL, human, parse_duration};
use super::error::{ConfigError, about, quote, sanitize};
use super::schema::{RawConfig, RawGroups, Text, TextList};
use super::written::Written;
use super::{
    BACKEND_HINT, BackendChoice, CgroupSelector, Config, DEFAULT_INTERVAL, DEFAULT_RING_PAGES,
    GroupDef, MAX_CGROUPS_LIMIT, RESERVED_GROUPS,
};
use crate::events::{Event, TracepointName, parse_event, parse_tracepoint};
use crate::metrics::Catalog;
use crate::suggest::did_you_mean;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::labels::Extractor;

const GROUP_NAME_HINT: &str = "group names become the `group` label and must match \
                               `[A-Za-z_][A-Za-z0-9_-]*`, e.g. `ipc` or `l1d-misses`";
const EVENT_HINT: &str = "events use perf's syntax (see `cgperf list`), e.g. `cycles`, \
                          `L1-dcache-load-misses` or \"msr/tsc/\"; quote names containing `/` or `:`";
const TRACEPOINT_HINT: &str = "tracepoints are `subsystem:name`, as the directories under \
                               /sys/kernel/tracing/events/, e.g. `sched:sched_switch`";
/// Also the hint of the YAML layer's type error for `max_cgroups`.
pub(super) const MAX_CGROUPS_HINT: &str = "set a number of cgroups from 1 to 1000000, \
                                           e.g. `max_cgroups: 1000`, or remove `max_cgroups:` \
                                           to count every selected cgroup";
const NOTHING_HINT: &str = "add a group, e.g. `groups: {sched: [task-clock, context-switches]}`, \
                            a tracepoint, e.g. `tracepoints: [sched:sched_switch]`, \
                            or a probe, e.g. `probes: [{uprobe: /bin/bash:readline, as: readline}]`";

pub(crate) fn validate(
    source: &str,
    raw: RawConfig,
    catalog: &Catalog,
) -> Result<Config, ConfigError> {
    let v = Validator {
        source,
        catalog,
        found: RefCell::new(Vec::new()),
    };
    // The names as written, broken entries included: what selectors may
    // refer to without being blamed for the entry's own mistake.
    let mut written = Written::of(&raw);
    let nothing = raw.groups.as_ref().is_none_or(|g| g.value.0.is_empty())
        && raw.tracepoints.as_ref().is_none_or(|t| t.value.is_empty())
        && raw.probes.as_ref().is_none_or(|p| p.value.is_empty())
        && raw.metrics.as_ref().is_none_or(|m| m.value.is_empty())
        && raw.host.as_ref().is_none_or(|h| {
            h.value.groups.as_ref().is_none_or(|g| g.value.0.is_empty())
                && h.value
                    .tracepoints
                    .as_ref()
                    .is_none_or(|t| t.value.is_empty())
                && h.value.metrics.as_ref().is_none_or(|m| m.value.is_empty())
        });
    let interval = raw
        .interval
        .and_then(|text| v.keep(v.interval(&text)))
        .unwrap_or(DEFAULT_INTERVAL);
    let groups_at = raw.groups.as_ref().map(|g| g.referenced);
    let mut groups = raw.groups.map(|g| v.groups(g.value)).unwrap_or_default();
    let host = raw.host.map(|h| v.host(h, &groups)).unwrap_or_default();
    let tracepoints_at = raw.tracepoints.as_ref().map(|t| t.referenced);
    let mut tracepoints = raw
        .tracepoints
        .map(|list| v.tracepoints(list.value))
        .unwrap_or_default();
    let probes_at = raw.probes.as_ref().map(|t| t.referenced);
    let probes = raw
        .probes
        .map(|list| v.probes(list.value))
        .unwrap_or_default();
    let written_metrics = raw.metrics.map(|list| list.value).unwrap_or_default();
    let (metrics, scheduled) = v.metrics(written_metrics, (&groups, &tracepoints, &probes));
    // A selector may name a metric of a group the top level names
    // (`tma_retiring` of `TopdownL1`), or one core type's.
    let mut known: HashSet<String> = written.metrics.iter().cloned().collect();
    for m in &metrics {
        if known.insert(m.name.clone()) {
            written.metrics.push(m.name.clone());
        }
    }
    groups.extend(scheduled.groups.iter().cloned());
    tracepoints.extend(scheduled.tracepoints.iter().cloned());
    let ring_pages = raw
        .ring_pages
        .and_then(|n| v.keep(v.ring_pages(&n)))
        .unwrap_or(DEFAULT_RING_PAGES);
    if nothing {
        let message = "the config defines no groups, tracepoints or probes, \
                       for cgroups or `host:`, so there is nothing to count";
        v.keep::<()>(Err(ConfigError::new(source, message)
            .at(groups_at.or(tracepoints_at).or(probes_at))
            .hint(NOTHING_HINT)));
    }
    let counts_processes = raw.processes.as_ref().is_some_and(|p| !p.value.is_empty());
    let counts_host = !host.is_empty();
    let selectors: Vec<_> = match raw.cgroups {
        // The whole machine, with everything.
        None => vec![(
            CgroupSelector {
                pattern: CgroupPattern::Path("/".to_owned()),
                groups: groups.iter().map(|g| g.name.clone()).collect(),
                tracepoints: tracepoints.iter().map(|t| t.label.clone()).collect(),
                probes: probes.iter().map(|p| p.label.clone()).collect(),
                metrics: metrics.iter().map(|m| m.name.clone()).collect(),
            },
            None,
        )],
        // Processes or the host count without cgroups.
        Some(list) if list.value.is_empty() && (counts_processes || counts_host) => Vec::new(),
        Some(list) if list.value.is_empty() => {
            v.keep::<()>(Err(v
                .error(
                    list.referenced,
                    "`cgroups` is empty, so nothing would be counted",
                )
                .hint(
                    "list at least one selector, e.g. `- path: /`, \
                     or remove `cgroups:` to count the whole machine \
                     (`cgroups: []` is for a config that counts only `processes:` or `host:`)",
                )));
            Vec::new()
        }
        Some(list) => list
            .value
            .into_iter()
            .enumerate()
            .filter_map(|(index, raw)| {
                let here = format!("`cgroups[{index}]`");
                v.keep(v.selector(&here, raw.referenced, raw.value, &written))
            })
            .collect(),
    };
    let (mut cgroups, explicit): (Vec<_>, Vec<_>) = selectors.into_iter().unzip();
    v.selector_metrics("cgroups", &mut cgroups, &explicit, &metrics, &scheduled);
    let max_cgroups = raw.max_cgroups.and_then(|n| v.keep(v.max_cgroups(&n)));
    let (mut processes, explicit): (Vec<_>, Vec<_>) = raw
        .processes
        .map(|list| v.processes(list.value, &written, &tracepoints))
        .unwrap_or_default()
        .into_iter()
        .unzip();
    v.selector_metrics("processes", &mut processes, &explicit, &metrics, &scheduled);
    let max_processes = v.max_processes(raw.max_processes.as_ref());
    let labels = raw
        .labels
        .and_then(|list| v.keep(v.labels(&list)))
        .unwrap_or_default();
    let otlp = raw
        .otlp
        .and_then(|section| v.keep(super::otlp::validate_section(source, section.value)));
    let backends = BackendChoice::ALL.map(|c| (c.name(), c));
    let backend = raw
        .backend
        .and_then(|text| v.keep(v.choice(&text, "backend", &backends, BACKEND_HINT)))
        .unwrap_or_default();
    let energy = raw.energy.and_then(|e| v.energy(e, &groups));
    v.finish()?;
    Ok(Config {
        interval,
        per_cpu: raw.per_cpu.unwrap_or(false),
        groups,
        tracepoints,
        probes,
        ring_pages,
        cgroups,
        max_cgroups,
        labels,
        backend,
        otlp,
        metrics,
        host,
        processes,
        max_processes,
        energy,
    })
}

pub(super) struct Validator<'a> {
    pub(super) source: &'a str,
    /// The metrics of the CPU's tables, for `metrics:` entries that name
    /// one.
    pub(super) catalog: &'a Catalog,
    /// The mistakes found so far.
    found: RefCell<Vec<ConfigError>>,
}

impl Validator<'_> {
    /// The value of `result`, or `None` with its error kept for the report:
    /// the caller goes on to the next value.
    pub(super) fn keep<T>(&self, result: Result<T, ConfigError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                self.found.borrow_mut().push(error);
                None
            }
        }
    }

    /// How many mistakes were found so far.
    pub(super) fn mistakes(&self) -> usize {
        self.found.borrow().len()
    }

    /// `Ok` when nothing was found, else the first mistake in the file with
    /// the others after it, in file order.
    fn finish(self) -> Result<(), ConfigError> {
        let mut found = self.found.into_inner();
        // Sections are checked in a fixed order; the report follows the file.
        found.sort_by_key(|e| (e.line.unwrap_or(0), e.column.unwrap_or(0)));
        let mut found = found.into_iter();
        match found.next() {
            None => Ok(()),
            Some(first) => Err(first.with_others(found.collect())),
        }
    }

    pub(super) fn error(&self, at: Location, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.source, message).at(Some(at))
    }

    fn interval(&self, text: &Text) -> Result<std::time::Duration, ConfigError> {
        let at = text.referenced;
        let interval = parse_duration(&text.value).map_err(|e| {
            self.error(at, format!("invalid interval: {}", e.message))
                .hint(e.hint)
        })?;
        let (min, max) = (human(MIN_INTERVAL), human(MAX_INTERVAL));
        let shown = quote(&text.value);
        if interval < MIN_INTERVAL {
            return Err(self
                .error(at, format!("interval {shown} is shorter than {min}"))
                .hint(format!(
                    "the interval must be between {min} and {max}; reading all counters \
                     more often costs more than it measures"
                )));
        }
        if interval > MAX_INTERVAL {
            return Err(self
                .error(at, format!("interval {shown} is longer than {max}"))
                .hint(format!(
                    "the interval must be between {min} and {max}; new cgroups only get \
                     their series after one interval"
                )));
        }
        Ok(interval)
    }

    /// `max_cgroups`: `1..=MAX_CGROUPS_LIMIT`. Non-integers never get here
    /// (the YAML layer rejects them with the same hint).
    fn max_cgroups(&self, n: &Spanned<i64>) -> Result<usize, ConfigError> {
        let at = n.referenced;
        let value = n.value;
        let message = if value < 0 {
            format!("`max_cgroups` is negative ({value}); it must be at least 1")
        } else if value == 0 {
            "`max_cgroups` is 0, so no cgroup would be counted".to_owned()
        } else {
            match usize::try_from(value) {
                Ok(limit) if limit <= MAX_CGROUPS_LIMIT => return Ok(limit),
                _ => format!(
                    "`max_cgroups` is {value}, more than the largest allowed, {MAX_CGROUPS_LIMIT}"
                ),
            }
        };
        Err(self.error(at, message).hint(MAX_CGROUPS_HINT))
    }

    /// One of `choices` by name, for the setting `what`: else an error
    /// that names the setting, the closest choice and `hint`.
    pub(super) fn choice<T: Copy>(
        &self,
        text: &Text,
        what: &str,
        choices: &[(&'static str, T)],
        hint: &str,
    ) -> Result<T, ConfigError> {
        if let Some((_, c)) = choices.iter().find(|(name, _)| *name == text.value) {
            return Ok(*c);
        }
        let names = choices.iter().map(|(n, _)| *n);
        let hint = match did_you_mean(&text.value, names) {
            Some(close) => format!("did you mean `{close}`? {hint}"),
            None => hint.to_owned(),
        };
        let message = format!("unknown {what} {}", quote(&text.value));
        Err(self.error(text.referenced, message).hint(hint))
    }

    /// `labels`: known extractor names, each once; returned in
    /// [`Extractor::ALL`] order so that equal configs compare equal.
    fn labels(&self, list: &TextList) -> Result<Vec<Extractor>, ConfigError> {
        let names = Extractor::ALL.map(Extractor::name);
        let mut seen: Listed<Extractor> = Listed::with_capacity(list.value.len());
        for item in &list.value {
            let Some(extractor) = Extractor::parse(&item.value) else {
                let listing = format!("label extractors: {}", names.join(", "));
                let hint = match did_you_mean(&item.value, names) {
                    Some(close) => format!("did you mean `{close}`? {listing}"),
                    None => listing,
                };
                let message = format!("unknown label extractor {}", quote(&item.value));
                return Err(self.error(item.referenced, message).hint(hint));
            };
            self.unique(
                "label extractor",
                " in `labels`",
                &mut seen,
                extractor,
                item,
            )?;
        }
        Ok(Extractor::ALL
            .into_iter()
            .filter(|e| seen.contains(e))
            .collect())
    }

    /// The groups; a broken one is reported and left out.
    pub(super) fn groups(&self, raw: RawGroups) -> Vec<GroupDef> {
        let mut groups = Vec::with_capacity(raw.0.len());
        for (name, events) in raw.0 {
            let named = self.keep(self.group_name(&name));
            let events = self.group_events(&name.value, &events);
            if let (Some(()), Some(events)) = (named, events) {
                groups.push(GroupDef {
                    events,
                    origin: Some(self.origin(name.referenced)),
                    name: name.value,
                    splittable: false,
                });
            }
        }
        groups
    }

    fn group_name(&self, name: &Text) -> Result<(), ConfigError> {
        let mut chars = name.value.chars();
        let well_formed = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let shown = quote(&name.value);
        if !well_formed {
            return Err(self
                .error(name.referenced, format!("invalid group name {shown}"))
                .hint(GROUP_NAME_HINT));
        }
        if RESERVED_GROUPS.contains(&name.value.as_str()) {
            let reserved: Vec<String> = RESERVED_GROUPS.iter().map(|g| format!("`{g}`")).collect();
            return Err(self
                .error(
                    name.referenced,
                    format!("the group name {shown} is reserved"),
                )
                .hint(format!(
                    "cgperf exports the counts of the top-level `tracepoints:` and `probes:` \
                     lists under the group names {}; list tracepoints and probes there, \
                     or pick another group name",
                    reserved.join(" and ")
                )));
        }
        Ok(())
    }

    /// A group's events; `None` when any is wrong (each is reported).
    fn group_events(&self, group: &str, list: &TextList) -> Option<Vec<Event>> {
        if list.value.is_empty() {
            return self.keep(Err(self
                .error(list.referenced, format!("group `{group}` has no events"))
                .hint("list at least one event, e.g. `ipc: [cycles, instructions]`, or remove the group")));
        }
        let before = self.mistakes();
        let mut events: Listed<Event> = Listed::with_capacity(list.value.len());
        for item in &list.value {
            self.keep(self.group_event(group, item, &mut events));
        }
        (self.mistakes() == before).then(|| events.into_values())
    }

    /// One event of `group`, appended to `events` unless it is wrong or
    /// one of them already.
    fn group_event(
        &self,
        group: &str,
        item: &Text,
        events: &mut Listed<Event>,
    ) -> Result<(), ConfigError> {
        let context = format!(" in group `{group}`");
        let event = parse_event(&item.value).map_err(|e| {
            let message = syntax_message("event", &item.value, &e.to_string());
            self.error(item.referenced, format!("in group `{group}`: {message}"))
                .hint(EVENT_HINT)
        })?;
        if let Some((first, at)) = events
            .iter()
            .find(|(other, _)| other.text != event.text && other.label() == event.label())
        {
            let message = format!(
                "event {} is {} again{context} (line {}, column {}): perf's aliases name one event, exported as event=\"{}\"",
                quote(&item.value),
                quote(&first.text),
                at.line(),
                at.column(),
                event.label()
            );
            return Err(self
                .error(item.referenced, message)
                .hint("remove one of them"));
        }
        self.unique("event", &context, events, event, item)
    }

    pub(super) fn tracepoint(&self, item: &Text) -> Result<TracepointName, ConfigError> {
        parse_tracepoint(&item.value).map_err(|e| {
            let message = syntax_message("tracepoint", &item.value, &e.to_string());
            self.error(item.referenced, message).hint(TRACEPOINT_HINT)
        })
    }

    /// Appends `value` to `seen`, or rejects it as a duplicate, pointing at
    /// both occurrences.
    pub(super) fn unique<T: Hash + Eq + Clone>(
        &self,
        kind: &str,
        context: &str,
        seen: &mut Listed<T>,
        value: T,
        item: &Text,
    ) -> Result<(), ConfigError> {
        if let Some(first) = seen.first(&value) {
            let message = format!(
                "{kind} {} is listed twice{context} (first at line {}, column {})",
                quote(&item.value),
                first.line(),
                first.column()
            );
            return Err(self
                .error(item.referenced, message)
                .hint("remove the duplicate"));
        }
        seen.push(value, item.referenced);
        Ok(())
    }
}

/// The values of one list so far, in order, each with where it was
/// written: a repeat is found by hashing, so that a list of thousands is
/// checked in linear time.
#[derive(Debug)]
pub(super) struct Listed<T> {
    order: Vec<T>,
    at: HashMap<T, Location>,
}

impl<T: Hash + Eq + Clone> Listed<T> {
    pub fn with_capacity(n: usize) -> Self {
        Self {
            order: Vec::with_capacity(n),
            at: HashMap::with_capacity(n),
        }
    }

    /// Where `value` was written, if it was.
    pub fn first<Q: Hash + Eq + ?Sized>(&self, value: &Q) -> Option<Location>
    where
        T: std::borrow::Borrow<Q>,
    {
        self.at.get(value).copied()
    }

    /// Whether `value` was written.
    pub fn contains<Q: Hash + Eq + ?Sized>(&self, value: &Q) -> bool
    where
        T: std::borrow::Borrow<Q>,
    {
        self.at.contains_key(value)
    }

    /// Adds `value`, written at `at` (the first place is kept).
    pub fn push(&mut self, value: T, at: Location) {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.at.entry(value.clone()) {
            slot.insert(at);
            self.order.push(value);
        }
    }

    /// The values and where each was, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&T, Location)> + '_ {
        self.order
            .iter()
            .filter_map(|v| self.at.get(v).map(|at| (v, *at)))
    }

    /// The values, in order.
    pub fn into_values(self) -> Vec<T> {
        self.order
    }
}

/// The events module's message, which usually quotes the text already;
/// quote it ourselves only when it does not, so that the value is always
/// named exactly once, and shortened when long.
fn syntax_message(kind: &str, text: &str, error: &str) -> String {
    if !text.is_empty() && error.contains(text) {
        about(text, error)
    } else {
        format!("invalid {kind} {}: {}", quote(text), sanitize(error))
    }
}

#[cfg(test)]
mod tests {
    use super::syntax_message;

    #[test]
    fn syntax_message_names_the_value_once() {
        assert_eq!(
            syntax_message("event", "cyclez", "unknown event `cyclez`"),
            "unknown event `cyclez`"
        );
        assert_eq!(
            syntax_message("event", "x y", "contains whitespace"),
            "invalid event \"x y\": contains whitespace"
        );
        assert_eq!(
            syntax_message("tracepoint", "", "is empty\n"),
            "invalid tracepoint \"\": is empty\\n"
        );
    }
}
