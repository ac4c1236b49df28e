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

mod schedule;

use serde_saphyr::{Location, Spanned};
use std::collections::{HashMap, HashSet};

use super::error::{ConfigError, quote};
use super::schema::{RawMetric, RawMetricItem, metric_entry};
use super::validate::Validator;
use super::{
    GroupDef, MetricDef, MetricInput, PROBE_GROUP, ProbeDef, Selection, TRACEPOINT_GROUP,
    TracepointDef,
};
use crate::metrics::{Expr, Literals, MAX_LEN, NamedError, NamedMetric};

/// The start of the name of the group a metric's scheduled events are
/// counted in (`metric:ipc`): a `:` no group under `groups:` may have.
pub const SCHEDULED_PREFIX: &str = "metric:";

const NAME_HINT: &str = "metric names become the `metric` label and must match \
                         `[A-Za-z_][A-Za-z0-9_]*`, e.g. `ipc` or `reads_per_switch`";

/// What a config counts that a metric may name, in the order a name is
/// looked up: the groups' events, then the tracepoints, then the probes,
/// then what earlier metrics scheduled.
struct Counted<'a> {
    /// (group label, event label, as written): `cs` is counted as
    /// `context-switches`, and a metric may use either name.
    counted: Vec<(String, String, String)>,
    /// The first of `counted` each name (label or as written) finds: a
    /// config's thousands of metrics look their inputs up in linear time.
    by_name: HashMap<String, usize>,
    /// Tracepoints counted `by:` fields: their counts are split, not one
    /// number.
    split: HashSet<&'a str>,
    /// The groups of events metrics scheduled, one per metric.
    groups: Vec<GroupDef>,
    /// The tracepoints metrics scheduled.
    tracepoints: Vec<TracepointDef>,
}

/// The metrics defined so far, with where every metric's name and those
/// of the entries that define one metric (not a group) first appear: a
/// name defined twice is a mistake, a metric of two groups is computed
/// once. Maps, so that thousands of metrics load in linear time.
#[derive(Default)]
struct Defined {
    defs: Vec<MetricDef>,
    /// Where each of `defs` is, by name.
    index: HashMap<String, usize>,
    names: HashMap<String, Location>,
    /// By the name in ASCII lowercase (the CPU's tables ignore case).
    explicit: HashMap<String, Location>,
}

impl Defined {
    /// Adds `def`, first defined where `names` says.
    fn push(&mut self, def: MetricDef) {
        self.index.insert(def.name.clone(), self.defs.len());
        self.defs.push(def);
    }

    /// The metric named `name`, if defined.
    fn get(&self, name: &str) -> Option<&MetricDef> {
        self.index.get(name).map(|&i| &self.defs[i])
    }

    /// Notes that `name` is defined at `at` (where it is first, if more
    /// than once), and by an entry of its own if `explicit`.
    fn name(&mut self, name: &str, at: Location, explicit: bool) {
        if explicit {
            self.explicit.entry(name.to_ascii_lowercase()).or_insert(at);
        }
        self.names.entry(name.to_owned()).or_insert(at);
    }
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
        let (plain, split): (Vec<_>, Vec<_>) = tracepoints.iter().partition(|t| t.by.is_empty());
        let mut counted = Self {
            counted: Vec::new(),
            by_name: HashMap::new(),
            split: split.iter().map(|t| t.label.as_str()).collect(),
            groups: Vec::new(),
            tracepoints: Vec::new(),
        };
        for g in groups {
            for e in &g.events {
                counted.add(&g.name, e.label(), &e.text);
            }
        }
        for t in plain {
            counted.add(TRACEPOINT_GROUP, t.label.clone(), &t.label);
        }
        for p in probes {
            counted.add(PROBE_GROUP, p.label.clone(), &p.label);
        }
        counted
    }

    /// Notes that `group` counts the event labelled `label`, written
    /// `written`; a name found earlier keeps its first place.
    fn add(&mut self, group: &str, label: String, written: &str) {
        let at = self.counted.len();
        self.by_name.entry(label.clone()).or_insert(at);
        self.by_name.entry(written.to_owned()).or_insert(at);
        self.counted
            .push((group.to_owned(), label, written.to_owned()));
    }

    fn find(&self, name: &str) -> Option<MetricInput> {
        let &i = self.by_name.get(name)?;
        self.counted.get(i).map(|(group, event, _)| MetricInput {
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
        list: Vec<Spanned<RawMetricItem>>,
        (groups, tracepoints, probes): (&[GroupDef], &[TracepointDef], &[ProbeDef]),
    ) -> (Vec<MetricDef>, Scheduled) {
        let counted = &mut Counted::of(groups, tracepoints, probes);
        let mut defined = Defined::default();
        for item in list {
            let raw = metric_entry(item);
            let Some(expr) = raw.expr.clone() else {
                self.tables_entry(&raw, &mut defined, counted);
                continue;
            };
            let name = &raw.name;
            if self.keep(self.metric_name(name, &defined.names)).is_none() {
                continue;
            }
            defined.name(&name.value, name.referenced, true);
            if let Some(def) = self.keep(self.metric(raw, &expr, counted)) {
                defined.push(def);
            }
        }
        let scheduled = Scheduled {
            groups: std::mem::take(&mut counted.groups),
            tracepoints: std::mem::take(&mut counted.tracepoints),
        };
        (defined.defs, scheduled)
    }

    /// Defines the metrics of the CPU's tables that `raw` (an entry without
    /// `expr`) names. A metric two groups share, or a group and one of its
    /// metrics, is computed once; one that a metric of the config's own
    /// already names is a mistake.
    fn tables_entry(&self, raw: &RawMetric, defined: &mut Defined, counted: &mut Counted<'_>) {
        let found = self
            .keep(self.named(raw, &defined.explicit))
            .unwrap_or_default();
        let group = found.len() > 1
            || found
                .iter()
                .all(|m| !m.name.eq_ignore_ascii_case(&raw.name.value));
        let at = raw.name.referenced;
        for metric in found {
            if let Some(def) = defined.get(&metric.name) {
                if def.formula != metric.formula
                    && let Some(first) = defined.names.get(&def.name)
                {
                    self.keep::<()>(Err(self
                        .error(
                            at,
                            format!(
                                "metric {} of {} is also defined at line {}, column {}",
                                quote(&metric.name),
                                quote(&raw.name.value),
                                first.line(),
                                first.column()
                            ),
                        )
                        .hint("rename the metric of your own")));
                }
                continue;
            }
            defined.name(&metric.name, at, !group);
            if let Some(def) = self.keep(self.schedule(&raw.name.value, metric, at, counted)) {
                defined.push(def);
            }
        }
    }

    /// The metrics of the CPU's tables that a `metrics:` entry without
    /// `expr` names: one metric, or every metric of a group.
    fn named(
        &self,
        raw: &RawMetric,
        seen: &HashMap<String, Location>,
    ) -> Result<Vec<NamedMetric>, ConfigError> {
        let name = &raw.name;
        if raw.description.is_some() || raw.unit.is_some() {
            return Err(self
                .error(
                    name.referenced,
                    format!(
                        "metric {} has `description` or `unit` but no `expr`",
                        quote(&name.value)
                    ),
                )
                .hint(
                    "a metric of the CPU's tables keeps their description and unit: write just \
                     its name; a metric of your own needs `expr:`",
                ));
        }
        let found = self.catalog.resolve(&name.value).map_err(|e| {
            let hint = match &e {
                NamedError::Unknown {
                    suggestion: Some(close),
                    ..
                } => format!("did you mean `{close}`?"),
                NamedError::Unknown { .. } => "`cgperf list` shows the metrics and metric groups \
                     of this CPU's tables (perf's, given with --event-tables DIR); a metric of \
                     your own needs `expr:`, e.g. `expr: instructions / cycles`"
                    .to_owned(),
                NamedError::Broken { .. } => {
                    "define the metric yourself with `name:` and `expr:`, \
                     or give other tables with --event-tables"
                        .to_owned()
                }
            };
            self.error(name.referenced, e.to_string()).hint(hint)
        })?;
        if let [one] = found.as_slice()
            && let Some(first) = seen.get(&one.name.to_ascii_lowercase())
        {
            return Err(self
                .error(
                    name.referenced,
                    format!(
                        "metric {} is defined twice (first at line {}, column {})",
                        quote(&name.value),
                        first.line(),
                        first.column()
                    ),
                )
                .hint("remove one of them"));
        }
        Ok(found)
    }

    fn metric_name(
        &self,
        name: &Spanned<String>,
        seen: &HashMap<String, Location>,
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
        if let Some(first) = seen.get(text) {
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

    /// A metric of the config's own: `raw` with its `expr`.
    fn metric(
        &self,
        raw: RawMetric,
        expr_text: &Spanned<String>,
        counted: &mut Counted<'_>,
    ) -> Result<MetricDef, ConfigError> {
        let here = format!("metric {}", quote(&raw.name.value));
        let parsed = Expr::parse(&expr_text.value).map_err(|e| {
            self.error(
                expr_text.referenced,
                format!("{here}: `expr` {}: {e}", quote(&expr_text.value)),
            )
            .hint(
                "write a formula over counted events, e.g. `instructions / cycles` or \
                 `syscalls:sys_enter_read / context-switches` (a subtraction with spaces: `a - b`; \
                 quote a formula with a literal, `\"cycles / #num_cores\"`: an unquoted ` #` \
                 starts a YAML comment)",
            )
        })?;
        let expr = parsed
            .substitute(|name| {
                if !name.starts_with('#') {
                    return Ok(None);
                }
                // Kept a name, whose value is the machine's when the
                // metric is computed: CPUs go offline and come back.
                match Literals::knows(name) {
                    true => Ok(None),
                    false => Err(ExprOrConfig::Config(
                        self.error(
                            expr_text.referenced,
                            format!(
                                "{here} uses {}, which is no literal cgperf knows",
                                quote(name)
                            ),
                        )
                        .hint(format!(
                            "the literals of perf's metrics are {}",
                            Literals::names()
                        )),
                    )),
                }
            })
            .map_err(|e: ExprOrConfig| e.into_config(self, &here, expr_text))?;
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
        let description = match raw.description {
            None => expr_text.value.clone(),
            Some(d) if d.value.len() > MAX_LEN => {
                return Err(self
                    .error(
                        d.referenced,
                        format!(
                            "{here}: `description` is {} bytes long, more than the {MAX_LEN} \
                             it may have: it is a label of the metric's series",
                            d.value.len()
                        ),
                    )
                    .hint("say in a sentence what the metric measures"));
            }
            Some(d) => d.value,
        };
        let metric = NamedMetric {
            name: raw.name.value.clone(),
            formula: expr_text.value.clone(),
            expr,
            description,
            unit,
            grouped: true,
        };
        self.schedule(&raw.name.value, metric, expr_text.referenced, counted)
    }

    /// Keeps, of each selector's metrics, those it counts every input of
    /// the config's own, and has it count what they scheduled. A metric
    /// its `metrics:` list names (`explicit[i]` is where the list is)
    /// whose input the selector does not count is a mistake, with the fix;
    /// left to the default, such a metric is just not computed there.
    pub(super) fn selector_metrics<S: Selection>(
        &self,
        kind: &str,
        selectors: &mut [S],
        explicit: &[Option<Location>],
        metrics: &[MetricDef],
        scheduled: &Scheduled,
    ) {
        for (index, (selector, list)) in selectors.iter_mut().zip(explicit).enumerate() {
            let selected = std::mem::take(selector.metrics_mut());
            let mut kept = Vec::with_capacity(selected.len());
            let set: std::collections::HashSet<_> = selected.iter().map(String::as_str).collect();
            let wanted = |m: &&MetricDef| set.contains(&*m.name) || set.contains(&*m.entry);
            let defs = metrics.iter().filter(wanted);
            for def in defs {
                let name = def.name.clone();
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
                                        "`{kind}[{index}]` computes metric {}, which uses {} of \
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
            *selector.metrics_mut() = kept;
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
fn count_scheduled(selector: &mut impl Selection, def: &MetricDef, scheduled: &Scheduled) {
    for input in def.inputs.iter().filter(|i| is_scheduled(i, scheduled)) {
        let (list, name) = match &*input.group {
            TRACEPOINT_GROUP => (selector.tracepoints_mut(), &input.event),
            _ => (selector.groups_mut(), &input.group),
        };
        if !list.iter().any(|l| **l == **name) {
            list.push(name.to_string());
        }
    }
}

/// The first input of `def`, of the config's own, that `selector` does not
/// count.
fn missing<'a>(
    selector: &mut impl Selection,
    def: &'a MetricDef,
    scheduled: &Scheduled,
) -> Option<&'a MetricInput> {
    def.inputs.iter().find(|input| {
        if is_scheduled(input, scheduled) || !input.is_counted() {
            return false;
        }
        let list = match &*input.group {
            TRACEPOINT_GROUP => selector.tracepoints_mut(),
            PROBE_GROUP => selector.probes_mut(),
            group => return !selector.groups_mut().iter().any(|g| g == group),
        };
        !list.iter().any(|l| **l == *input.event)
    })
}

/// An error while writing out a config metric's literals: the formula grew
/// too large, or a literal is unknown.
enum ExprOrConfig {
    Expr(crate::metrics::ExprError),
    Config(ConfigError),
}

impl From<crate::metrics::ExprError> for ExprOrConfig {
    fn from(e: crate::metrics::ExprError) -> Self {
        Self::Expr(e)
    }
}

impl From<ConfigError> for ExprOrConfig {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl ExprOrConfig {
    fn into_config(self, v: &Validator<'_>, here: &str, expr: &Spanned<String>) -> ConfigError {
        match self {
            Self::Config(e) => e,
            Self::Expr(e) => v.error(expr.referenced, format!("{here}: `expr`: {e}")),
        }
    }
}
