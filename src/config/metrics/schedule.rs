//! Where a metric's inputs come from: each name found where the config
//! counts it, or scheduled into the metric's own group (events) or the
//! tracepoints, as the parent module's doc says; a name that is neither is
//! the metric's error, with the closest name the config counts.

use serde_saphyr::Location;

use super::{Counted, SCHEDULED_PREFIX};
use crate::config::error::{ConfigError, quote};
use crate::config::validate::Validator;
use crate::config::{
    DEFAULT_MAX_SERIES, GroupDef, MetricDef, MetricInput, Origin, TRACEPOINT_GROUP, TracepointDef,
    part_name,
};
use crate::events::{Event, EventSyntaxError, parse_event, parse_tracepoint};
use crate::metrics::{DURATION_TIME, NamedMetric};
use crate::suggest::did_you_mean;

impl Validator<'_> {
    /// Finds each input of `metric` where the config counts it, or
    /// schedules it (see the module's doc); `entry` is the `metrics:` entry
    /// that defines it, `at` where errors point.
    pub(super) fn schedule(
        &self,
        entry: &str,
        metric: NamedMetric,
        at: Location,
        counted: &mut Counted<'_>,
    ) -> Result<MetricDef, ConfigError> {
        let here = format!("metric {}", quote(&metric.name));
        let group = format!("{SCHEDULED_PREFIX}{}", metric.name);
        let mut events: Vec<Event> = Vec::new();
        let mut tracepoints: Vec<TracepointDef> = Vec::new();
        let mut inputs = Vec::with_capacity(metric.expr.names().len());
        for name in metric.expr.names() {
            if let Some(input) = counted.find(name) {
                inputs.push(input);
                continue;
            }
            if counted.split.contains(name.as_str()) {
                return Err(self.uncounted(&here, at, name, counted, None));
            }
            if name == DURATION_TIME {
                inputs.push(MetricInput::duration());
                continue;
            }
            if name.starts_with('#') {
                inputs.push(MetricInput::literal(name));
                continue;
            }
            match parse_event(&crate::events::from_metric_name(name)) {
                Ok(event) => {
                    inputs.push(MetricInput {
                        group: group.as_str().into(),
                        event: event.label().into(),
                    });
                    events.push(event);
                }
                Err(EventSyntaxError::LooksLikeTracepoint(_)) => {
                    let tracepoint = parse_tracepoint(name).map_err(|e| {
                        self.uncounted(&here, at, name, counted, Some(e.to_string()))
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
                            line: u32::try_from(at.line()).unwrap_or(0),
                            column: u32::try_from(at.column()).unwrap_or(0),
                        },
                    });
                }
                Err(e) => {
                    let why = Some(e.to_string());
                    return Err(self.uncounted(&here, at, name, counted, why));
                }
            }
        }
        // Intel's top-down events count only in a group led by `slots`.
        if let Some(slots) = events.iter().find_map(Event::topdown_slots) {
            events.retain(|e| e.label() != slots.label());
            events.insert(0, slots);
        }
        // Counted from here on, for this metric and the next ones; events
        // that may not share a group get one each.
        let mut new_groups: Vec<GroupDef> = Vec::new();
        if metric.grouped {
            if !events.is_empty() {
                new_groups.push(GroupDef {
                    name: group.clone(),
                    events,
                    splittable: true,
                    origin: None,
                });
            }
        } else {
            for (i, event) in events.into_iter().enumerate() {
                let name = part_name(&group, i);
                if let Some(input) = inputs
                    .iter_mut()
                    .find(|input| *input.group == *group && *input.event == *event.label())
                {
                    input.group = name.as_str().into();
                }
                new_groups.push(GroupDef {
                    name,
                    events: vec![event],
                    splittable: false,
                    origin: None,
                });
            }
        }
        for g in &new_groups {
            for e in &g.events {
                counted.add(&g.name, e.label(), &e.text);
            }
        }
        for t in &tracepoints {
            counted.add(TRACEPOINT_GROUP, t.label.clone(), &t.label);
        }
        counted.groups.extend(new_groups);
        counted.tracepoints.extend(tracepoints);
        Ok(MetricDef {
            name: metric.name,
            entry: entry.to_owned(),
            formula: metric.formula,
            expr: metric.expr,
            inputs,
            description: metric.description,
            unit: metric.unit,
        })
    }

    /// The error of a metric's `name` that the config does not count.
    pub(super) fn uncounted(
        &self,
        here: &str,
        at: Location,
        name: &str,
        counted: &Counted<'_>,
        not_an_event: Option<String>,
    ) -> ConfigError {
        if counted.split.contains(name) {
            return self
                .error(
                    at,
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
        // The event parser's own did-you-mean, when it names the same, is
        // said once, in the hint.
        let not_an_event = match (close, not_an_event) {
            (Some(close), Some(why)) => {
                Some(why.replace(&format!("; did you mean `{close}`?"), ""))
            }
            (_, why) => why,
        };
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
        self.error(at, message).hint(hint)
    }
}
