//! The `metrics:` section, and which metrics a `cgroups:` entry computes.
//!
//! A metric's names are what the config counts: an event of a group as
//! written, a tracepoint's label (one counted without `by:`), a probe's
//! `as:`. Each is found where it is counted when the config is read, so a
//! metric that names something cgperf does not count is a mistake of the
//! file, reported at the metric with the fix.

use serde_saphyr::{Location, Spanned};

use super::error::{ConfigError, quote};
use super::schema::RawMetric;
use super::validate::Validator;
use super::{
    CgroupSelector, GroupDef, MetricDef, MetricInput, PROBE_GROUP, ProbeDef, TRACEPOINT_GROUP,
    TracepointDef,
};
use crate::metrics::Expr;
use crate::suggest::did_you_mean;

const NAME_HINT: &str = "metric names become the `metric` label and must match \
                         `[A-Za-z_][A-Za-z0-9_]*`, e.g. `ipc` or `reads_per_switch`";

/// What a config counts that a metric may name, in the order a name is
/// looked up: the groups' events, then the tracepoints, then the probes.
struct Counted<'a> {
    /// (group label, event label, as written): `cs` is counted as
    /// `context-switches`, and a metric may use either name.
    counted: Vec<(&'a str, String, String)>,
    /// Tracepoints counted `by:` fields: their counts are split, not one
    /// number.
    split: Vec<&'a str>,
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
                    .map(|e| (g.name.as_str(), e.label(), e.text.clone())),
            );
        }
        let (plain, split): (Vec<_>, Vec<_>) = tracepoints.iter().partition(|t| t.by.is_empty());
        counted.extend(
            plain
                .iter()
                .map(|t| (TRACEPOINT_GROUP, t.label.clone(), t.label.clone())),
        );
        counted.extend(
            probes
                .iter()
                .map(|p| (PROBE_GROUP, p.label.clone(), p.label.clone())),
        );
        Self {
            counted,
            split: split.iter().map(|t| t.label.as_str()).collect(),
        }
    }

    fn find(&self, name: &str) -> Option<MetricInput> {
        self.counted
            .iter()
            .find(|(_, label, written)| label == name || written == name)
            .map(|(group, event, _)| MetricInput {
                group: (*group).into(),
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
    ) -> Vec<MetricDef> {
        let counted = &Counted::of(groups, tracepoints, probes);
        let mut defs: Vec<MetricDef> = Vec::with_capacity(list.len());
        let mut names: Vec<(String, Location)> = Vec::with_capacity(list.len());
        for item in list {
            let name = &item.value.name;
            let named = self.keep(self.metric_name(name, &names));
            if named.is_some() {
                names.push((name.value.clone(), name.referenced));
            }
            if let Some(def) = self.keep(self.metric(item.value, counted))
                && named.is_some()
            {
                defs.push(def);
            }
        }
        defs
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

    fn metric(&self, raw: RawMetric, counted: &Counted<'_>) -> Result<MetricDef, ConfigError> {
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
        let mut inputs = Vec::with_capacity(expr.names().len());
        for name in expr.names() {
            match counted.find(name) {
                Some(input) => inputs.push(input),
                None => return Err(self.uncounted(&here, &raw.expr, name, counted)),
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
            None => "count it first: add it to a group under `groups:`, to `tracepoints:`, \
                     or use a probe's `as:`; a metric uses only what the config counts"
                .to_owned(),
        };
        self.error(
            expr.referenced,
            format!(
                "{here} uses {}, which the config does not count",
                quote(name)
            ),
        )
        .hint(hint)
    }

    /// Keeps, of each selector's metrics, those it counts every input of.
    /// A metric its `metrics:` list names (`explicit[i]` is where the list
    /// is) that it does not is a mistake, with the fix; left to the
    /// default, such a metric is just not computed there.
    pub(super) fn selector_metrics(
        &self,
        selectors: &mut [CgroupSelector],
        explicit: &[Option<Location>],
        metrics: &[MetricDef],
    ) {
        for (index, (selector, list)) in selectors.iter_mut().zip(explicit).enumerate() {
            let mut kept = Vec::with_capacity(selector.metrics.len());
            for name in std::mem::take(&mut selector.metrics) {
                let Some(def) = metrics.iter().find(|m| m.name == name) else {
                    continue;
                };
                match missing(selector, def) {
                    None => kept.push(name),
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

/// The first input of `def` that `selector` does not count.
fn missing<'a>(selector: &CgroupSelector, def: &'a MetricDef) -> Option<&'a MetricInput> {
    def.inputs.iter().find(|input| {
        let list = match &*input.group {
            TRACEPOINT_GROUP => &selector.tracepoints,
            PROBE_GROUP => &selector.probes,
            group => return !selector.groups.iter().any(|g| g == group),
        };
        !list.iter().any(|l| **l == *input.event)
    })
}
