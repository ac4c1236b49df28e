//! The `metrics:` section, and which metrics a `cgroups:` entry computes.
//!
//! A metric's names are what the config counts: an event of a group as
//! written, a tracepoint's label (one counted without `by:`), a probe's
//! `as:`. Each is found where it is counted when the config is read. A
//! name the config does not count but that is an event or a tracepoint is
//! scheduled, as `perf stat -M` does: the metric's events go into a group
//! of its own, `metric:NAME` (so that its hardware events share their time
//! on the PMU), its tracepoints into the tracepoints; a later metric that
//! uses them takes them from there, so each is counted once. Anything else
//! is a mistake of the file, reported at the metric with the fix.

use serde_saphyr::{Location, Spanned};

use super::error::{ConfigError, quote};
use super::schema::RawMetric;
use super::validate::Validator;
use super::{
    CgroupSelector, DEFAULT_MAX_SERIES, GroupDef, MetricDef, MetricInput, Origin, PROBE_GROUP,
    ProbeDef, TRACEPOINT_GROUP, TracepointDef,
};
use crate::events::{Event, EventSyntaxError, parse_event, parse_tracepoint};
use crate::metrics::Expr;
use crate::suggest::did_you_mean;

/// The start of the name of the group a metric's scheduled events are
/// counted in (`metric:ipc`): a `:` no group under `groups:` may have.
const SCHEDULED_PREFIX: &str = "metric:";

const NAME_HINT: &str = "metric names become the `metric` label and must match \
                         `[A-Za-z_][A-Za-z0-9_]*`, e.g. `ipc` or `reads_per_switch`";

/// What a config counts that a metric may name, in the order a name is
/// looked up: the groups' events, then the tracepoints, then the probes,
/// then what earlier metrics scheduled.
struct Counted<'a> {
    /// (group label, event label, as written): `cs` is counted as
    /// `context-switches`, and a metric may use either name.
    counted: Vec<(String, String, String)>,
    /// Tracepoints counted `by:` fields: their counts are split, not one
    /// number.
    split: Vec<&'a str>,
    /// The groups of events metrics scheduled, one per metric.
    groups: Vec<GroupDef>,
    /// The tracepoints metrics scheduled.
    tracepoints: Vec<TracepointDef>,
}

/// What the metrics scheduled: the groups of their events, and their
/// tracepoints.
pub(super) struct Scheduled {
    pub groups: Vec<GroupDef>,
    pub tracepoints: Vec<TracepointDef>,
}

impl<'a> Counted<'a> {
    fn of(
        groups: &'a [GroupDef],
        tracepoints: &'a [TracepointDef],
        probes: &'a [ProbeDef],
    ) -> Self {
        let mut counted = Vec::new();
        for g in groups {
            counted.extend(
                g.events
                    .iter()
                    .map(|e| (g.name.clone(), e.label(), e.text.clone())),
            );
        }
        let (plain, split): (Vec<_>, Vec<_>) = tracepoints.iter().partition(|t| t.by.is_empty());
        counted.extend(plain.iter().map(|t| {
            (
                TRACEPOINT_GROUP.to_owned(),
                t.label.clone(),
                t.label.clone(),
            )
        }));
        counted.extend(
            probes
                .iter()
                .map(|p| (PROBE_GROUP.to_owned(), p.label.clone(), p.label.clone())),
        );
        Self {
            counted,
            split: split.iter().map(|t| t.label.as_str()).collect(),
            groups: Vec::new(),
            tracepoints: Vec::new(),
        }
    }

    fn find(&self, name: &str) -> Option<MetricInput> {
        self.counted
            .iter()
            .find(|(_, label, written)| label == name || written == name)
            .map(|(group, event, _)| MetricInput {
                group: group.as_str().into(),
                event: event.as_str().into(),
            })
    }
}

impl Validator<'_> {
    /// The top-level `metrics:` list, over what `groups`, `tracepoints`
    /// and `probes` count; a broken entry is reported and left out.
    pub(super) fn metrics(
        &self,
        list: Vec<Spanned<RawMetric>>,
        (groups, tracepoints, probes): (&[GroupDef], &[TracepointDef], &[ProbeDef]),
    ) -> (Vec<MetricDef>, Scheduled) {
        let counted = &mut Counted::of(groups, tracepoints, probes);
        let mut defs: Vec<MetricDef> = Vec::with_capacity(list.len());
        let mut names: Vec<(String, Location)> = Vec::with_capacity(list.len());
        for item in list {
            let name = &item.value.name;
            let named = self.keep(self.metric_name(name, &names));
            if named.is_some() {
                names.push((name.value.clone(), name.referenced));
            }
            if named.is_some()
                && let Some(def) = self.keep(self.metric(item.value, counted))
            {
                defs.push(def);
            }
        }
        let scheduled = Scheduled {
            groups: std::mem::take(&mut counted.groups),
            tracepoints: std::mem::take(&mut counted.tracepoints),
        };
        (defs, scheduled)
    }

    fn metric_name(
        &self,
        name: &Spanned<String>,
        seen: &[(String, Location)],
    ) -> Result<(), ConfigError> {
        let text = &name.value;
        let mut chars = text.chars();
        let valid = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(self
                .error(
                    name.referenced,
                    format!("invalid metric name {}", quote(text)),
                )
                .hint(NAME_HINT));
        }
        if let Some((_, first)) = seen.iter().find(|(n, _)| n == text) {
            return Err(self
                .error(
                    name.referenced,
                    format!(
                        "metric {} is defined twice (first at line {}, column {})",
                        quote(text),
                        first.line(),
                        first.column()
                    ),
                )
                .hint("rename or remove one of them"));
        }
        Ok(())
    }

    fn metric(&self, raw: RawMetric, counted: &mut Counted<'_>) -> Result<MetricDef, ConfigError> {
        let here = format!("metric {}", quote(&raw.name.value));
        let expr = Expr::parse(&raw.expr.value).map_err(|e| {
            self.error(
                raw.expr.referenced,
                format!("{here}: `expr` {}: {e}", quote(&raw.expr.value)),
            )
            .hint(
                "write a formula over counted events, e.g. `instructions / cycles` or \
                 `syscalls:sys_enter_read / context-switches` (a subtraction with spaces: `a - b`)",
            )
        })?;
        let group = format!("{SCHEDULED_PREFIX}{}", raw.name.value);
        let mut events: Vec<Event> = Vec::new();
        let mut tracepoints: Vec<TracepointDef> = Vec::new();
        let mut inputs = Vec::with_capacity(expr.names().len());
        for name in expr.names() {
            if let Some(input) = counted.find(name) {
                inputs.push(input);
                continue;
            }
            if counted.split.contains(&name.as_str()) {
                return Err(self.uncounted(&here, &raw.expr, name, counted, None));
            }
            match parse_event(name) {
                Ok(event) => {
                    inputs.push(MetricInput {
                        group: group.as_str().into(),
                        event: event.label().into(),
                    });
                    events.push(event);
                }
                Err(EventSyntaxError::LooksLikeTracepoint(_)) => {
                    let tracepoint = parse_tracepoint(name).map_err(|e| {
                        self.uncounted(&here, &raw.expr, name, counted, Some(e.to_string()))
                    })?;
                    inputs.push(MetricInput {
                        group: TRACEPOINT_GROUP.into(),
                        event: name.as_str().into(),
                    });
                    tracepoints.push(TracepointDef {
                        name: tracepoint,
                        label: name.clone(),
                        filter: None,
                        by: Vec::new(),
                        max_series: DEFAULT_MAX_SERIES,
                        syscall_name: None,
                        origin: Origin {
                            source: self.source.to_owned(),
                            line: u32::try_from(raw.expr.referenced.line()).unwrap_or(0),
                            column: u32::try_from(raw.expr.referenced.column()).unwrap_or(0),
                        },
                    });
                }
                Err(e) => {
                    let why = Some(e.to_string());
                    return Err(self.uncounted(&here, &raw.expr, name, counted, why));
                }
            }
        }
        let unit = match raw.unit {
            None => String::new(),
            Some(unit) => {
                let ok = !unit.value.is_empty()
                    && unit.value.len() <= 32
                    && unit
                        .value
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                if !ok {
                    return Err(self
                        .error(
                            unit.referenced,
                            format!("{here}: invalid unit {}", quote(&unit.value)),
                        )
                        .hint(
                            "a unit is a short lowercase word, e.g. `ratio`, `seconds` or \
                             `calls_per_switch`",
                        ));
                }
                unit.value
            }
        };
        let description = raw
            .description
            .map_or_else(|| raw.expr.value.clone(), |d| d.value);
        // Intel's top-down events count only in a group led by `slots`.
        if let Some(slots) = events.iter().find_map(Event::topdown_slots) {
            events.retain(|e| e.label() != slots.label());
            events.insert(0, slots);
        }
        // Counted from here on, for this metric and the next ones.
        for e in &events {
            counted
                .counted
                .push((group.clone(), e.label(), e.text.clone()));
        }
        for t in &tracepoints {
            let label = t.label.clone();
            counted
                .counted
                .push((TRACEPOINT_GROUP.to_owned(), label.clone(), label));
        }
        if !events.is_empty() {
            counted.groups.push(GroupDef {
                name: group,
                events,
            });
        }
        counted.tracepoints.extend(tracepoints);
        Ok(MetricDef {
            name: raw.name.value,
            formula: raw.expr.value,
            expr,
            inputs,
            description,
            unit,
        })
    }

    /// The error of a metric's `name` that the config does not count.
    fn uncounted(
        &self,
        here: &str,
        expr: &Spanned<String>,
        name: &str,
        counted: &Counted<'_>,
        not_an_event: Option<String>,
    ) -> ConfigError {
        if counted.split.contains(&name) {
            return self
                .error(
                    expr.referenced,
                    format!(
                        "{here} uses tracepoint {}, which is counted `by:` fields: its count \
                         is split over values, not one number",
                        quote(name)
                    ),
                )
                .hint(
                    "count it once more without `by:` under another label, e.g. \
                     `- {name: ..., as: all_calls}`, and use that label",
                );
        }
        let close = did_you_mean(name, counted.counted.iter().map(|(_, e, _)| e.as_str()));
        let hint = match close {
            Some(close) => format!("did you mean `{close}`?"),
            None => "a metric uses what the config counts (an event of a group, a tracepoint's \
                     label, a probe's `as:`), or an event or tracepoint (see `cgperf list`), \
                     which cgperf then counts for it"
                .to_owned(),
        };
        let message = match not_an_event {
            Some(why) => format!(
                "{here} uses {}, which the config does not count and is no event: {why}",
                quote(name)
            ),
            None => format!(
                "{here} uses {}, which the config does not count",
                quote(name)
            ),
        };
        self.error(expr.referenced, message).hint(hint)
    }

    /// Keeps, of each selector's metrics, those it counts every input of
    /// the config's own, and has it count what they scheduled. A metric
    /// its `metrics:` list names (`explicit[i]` is where the list is)
    /// whose input the selector does not count is a mistake, with the fix;
    /// left to the default, such a metric is just not computed there.
    pub(super) fn selector_metrics(
        &self,
        selectors: &mut [CgroupSelector],
        explicit: &[Option<Location>],
        metrics: &[MetricDef],
        scheduled: &Scheduled,
    ) {
        for (index, (selector, list)) in selectors.iter_mut().zip(explicit).enumerate() {
            let mut kept = Vec::with_capacity(selector.metrics.len());
            for name in std::mem::take(&mut selector.metrics) {
                let Some(def) = metrics.iter().find(|m| m.name == name) else {
                    continue;
                };
                match missing(selector, def, scheduled) {
                    None => {
                        count_scheduled(selector, def, scheduled);
                        kept.push(name);
                    }
                    Some(input) => {
                        if let Some(at) = list {
                            let what = match &*input.group {
                                TRACEPOINT_GROUP => "tracepoint".to_owned(),
                                PROBE_GROUP => "probe".to_owned(),
                                group => format!("group `{group}`"),
                            };
                            self.keep::<()>(Err(self
                                .error(
                                    *at,
                                    format!(
                                        "`cgroups[{index}]` computes metric {}, which uses {} of \
                                         {what}, which this entry does not count",
                                        quote(&name),
                                        quote(&input.event)
                                    ),
                                )
                                .hint(format!(
                                    "count it here too (add it to this entry's `{}:`), or \
                                     leave {} out of its `metrics:`",
                                    match &*input.group {
                                        TRACEPOINT_GROUP => "tracepoints",
                                        PROBE_GROUP => "probes",
                                        _ => "groups",
                                    },
                                    quote(&name)
                                ))));
                        }
                    }
                }
            }
            selector.metrics = kept;
        }
    }
}

/// Whether `input` is something a metric scheduled (not the config).
fn is_scheduled(input: &MetricInput, scheduled: &Scheduled) -> bool {
    input.group.starts_with(SCHEDULED_PREFIX)
        || (*input.group == *TRACEPOINT_GROUP
            && scheduled
                .tracepoints
                .iter()
                .any(|t| *t.label == *input.event))
}

/// Makes `selector` count what `def` scheduled.
fn count_scheduled(selector: &mut CgroupSelector, def: &MetricDef, scheduled: &Scheduled) {
    for input in def.inputs.iter().filter(|i| is_scheduled(i, scheduled)) {
        let (list, name) = match &*input.group {
            TRACEPOINT_GROUP => (&mut selector.tracepoints, &input.event),
            _ => (&mut selector.groups, &input.group),
        };
        if !list.iter().any(|l| **l == **name) {
            list.push(name.to_string());
        }
    }
}

/// The first input of `def`, of the config's own, that `selector` does not
/// count.
fn missing<'a>(
    selector: &CgroupSelector,
    def: &'a MetricDef,
    scheduled: &Scheduled,
) -> Option<&'a MetricInput> {
    def.inputs.iter().find(|input| {
        if is_scheduled(input, scheduled) {
            return false;
        }
        let list = match &*input.group {
            TRACEPOINT_GROUP => &selector.tracepoints,
            PROBE_GROUP => &selector.probes,
            group => return !selector.groups.iter().any(|g| g == group),
        };
        !list.iter().any(|l| **l == *input.event)
    })
}
