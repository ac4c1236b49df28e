//! Metrics by name, as perf defines them for this CPU (`IPC`,
//! `tma_backend_bound`, the group `TopdownL1`), from the metrics of its
//! event tables.
//!
//! A table's formula is perf's: it may refer to other metrics of the table
//! by name (`IPC` is `INST_RETIRED.ANY / CLKS`, and `CLKS` is a metric),
//! which are written out in it, and to literals of the machine (`#smt_on`,
//! `#num_packages`), which take this machine's values. Its `ScaleUnit`
//! (`100%`) multiplies the value and names its unit (`percent`). The
//! result is an ordinary formula over events, which the config schedules
//! as it schedules any metric's.

use std::collections::HashSet;

use super::expr::{Expr, ExprError};
use crate::events::{EventTables, TableMetric};

/// The deepest chain of metrics referring to metrics that is written out:
/// perf's deepest is a few levels; a table whose chain is deeper (or
/// circular) is refused rather than followed.
const MAX_REFERENCES: usize = 16;

/// The values of perf's `#` literals on this machine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Literals {
    /// `#smt_on`: whether SMT (hyper-threading) is active.
    pub smt_on: bool,
    /// `#num_cpus_online`.
    pub num_cpus_online: f64,
    /// `#num_cores`: physical cores.
    pub num_cores: f64,
    /// `#num_dies`.
    pub num_dies: f64,
    /// `#num_packages`: sockets.
    pub num_packages: f64,
    /// `#system_tsc_freq`: the TSC's frequency in Hz, where known.
    pub system_tsc_freq: Option<f64>,
    /// Whether the kernel's NMI watchdog holds a counter of each CPU: a
    /// table's `NO_NMI_WATCHDOG` metrics then cannot keep their events in
    /// one group.
    pub nmi_watchdog: bool,
}

/// A literal's value on a machine, `None` where the machine does not say.
type LiteralValue = fn(&Literals) -> Option<f64>;

/// Every `#` literal cgperf knows (lowercase, as perf's tables write them)
/// and its value on a machine, `None` where the machine does not say: one
/// table for [`Literals::get`], for the config's check of a formula's
/// literals ([`Literals::knows`]) and for the hint that lists them
/// ([`Literals::names`]).
///
/// `#core_wide` is 1: cgperf counts each cgroup on every CPU, as
/// `perf stat -a -G` does, so every thread of a core is counted (perf's
/// rule for system-wide counting).
const LITERALS: &[(&str, LiteralValue)] = &[
    ("smt_on", |l| Some(f64::from(u8::from(l.smt_on)))),
    ("core_wide", |_| Some(1.0)),
    ("num_cpus", |l| Some(l.num_cpus_online)),
    ("num_cpus_online", |l| Some(l.num_cpus_online)),
    ("num_cores", |l| Some(l.num_cores)),
    ("num_dies", |l| Some(l.num_dies)),
    ("num_packages", |l| Some(l.num_packages)),
    ("system_tsc_freq", |l| l.system_tsc_freq),
];

impl Literals {
    /// The value of literal `name` (`#SMT_on`, any case), if cgperf knows
    /// it and this machine says it.
    pub fn get(&self, name: &str) -> Option<f64> {
        Self::find(name).and_then(|value| value(self))
    }

    /// Whether `name` (`#smt_on`, any case) is a literal cgperf knows,
    /// whatever its value on this machine: a formula naming one is valid
    /// everywhere, and has no value where the machine does not say it.
    pub fn knows(name: &str) -> bool {
        Self::find(name).is_some()
    }

    /// Every literal cgperf knows, as a formula writes them.
    pub fn names() -> String {
        let names: Vec<String> = LITERALS.iter().map(|(n, _)| format!("#{n}")).collect();
        names.join(", ")
    }

    fn find(name: &str) -> Option<LiteralValue> {
        let name = name.strip_prefix('#')?;
        let (_, value) = LITERALS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        Some(*value)
    }
}

/// A metric of the tables, ready to be scheduled.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedMetric {
    /// Its name as the table writes it.
    pub name: String,
    /// Its formula as the table writes it.
    pub formula: String,
    /// The formula written out: metrics it refers to inlined, literals
    /// replaced by this machine's values, times its scale.
    pub expr: Expr,
    /// The table's description.
    pub description: String,
    /// Its unit as a label value (`percent`, `per_instr`), empty when the
    /// table gives none.
    pub unit: String,
    /// Whether its events may be counted as one group: not when the table
    /// says they cannot (`NO_GROUP_EVENTS`, or `NO_NMI_WATCHDOG` while the
    /// watchdog runs).
    pub grouped: bool,
}

/// Why a name cannot be made a metric of the tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamedError {
    /// Neither a metric nor a metric group of the tables.
    #[error("no metric or metric group `{name}` in {tables}")]
    Unknown {
        /// The name.
        name: String,
        /// Which tables were searched.
        tables: String,
        /// A close name, if any.
        suggestion: Option<String>,
    },
    /// A table's formula that cannot be used.
    #[error("metric `{metric}` of {tables}: {problem}")]
    Broken {
        /// The metric.
        metric: String,
        /// Which tables.
        tables: String,
        /// What is wrong.
        problem: String,
    },
}

/// Errors of the expression language while writing a metric out.
struct Problem(String);

impl From<ExprError> for Problem {
    fn from(e: ExprError) -> Self {
        Self(e.to_string())
    }
}

/// The metrics of one core type's table.
#[derive(Debug, Clone, Default)]
struct CoreType {
    /// The core PMU its events are pinned to (`cpu_atom`), on a hybrid CPU
    /// only: elsewhere a metric's events are named as its table writes
    /// them.
    pmu: Option<String>,
    metrics: Vec<TableMetric>,
}

/// The metrics of this CPU's tables, and the machine's literals.
///
/// On a hybrid CPU each core type has its own table, and a metric both
/// define is two: `tma_retiring` (the first core type's, `cpu_core`) and
/// `cpu_atom/tma_retiring`, each over its own type's events, pinned to its
/// PMU (`cpu_atom/TOPDOWN_RETIRING.ALL/`), as perf counts a hybrid metric
/// per PMU. `cpu_atom/NAME` names the metric, or the group, of one type.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    types: Vec<CoreType>,
    literals: Literals,
    /// Which tables, for messages.
    tables: String,
}

impl Catalog {
    /// No metrics: the config's `metrics:` entries must give their `expr`.
    pub fn none() -> Self {
        Self {
            tables: EventTables::none().describe(),
            ..Self::default()
        }
    }

    /// The metrics of `tables` (one table per core type), with this
    /// machine's `literals`.
    pub fn of(tables: &EventTables, literals: Literals) -> Self {
        let with_metrics: Vec<_> = tables
            .tables()
            .iter()
            .filter(|t| !t.metrics.is_empty())
            .collect();
        let hybrid = with_metrics.len() > 1;
        let types = with_metrics
            .into_iter()
            .map(|t| CoreType {
                pmu: hybrid.then(|| t.pmu.clone()),
                metrics: t.metrics.clone(),
            })
            .collect();
        Self {
            types,
            literals,
            tables: tables.describe(),
        }
    }

    /// The catalog of `metrics` (one CPU's, one core type); `tables` names
    /// them in messages.
    pub fn new(metrics: Vec<TableMetric>, literals: Literals, tables: String) -> Self {
        Self {
            types: vec![CoreType { pmu: None, metrics }],
            literals,
            tables,
        }
    }

    /// The catalog of a hybrid CPU: each core PMU's metrics, the first
    /// type's first.
    pub fn hybrid(
        types: Vec<(String, Vec<TableMetric>)>,
        literals: Literals,
        tables: String,
    ) -> Self {
        Self {
            types: types
                .into_iter()
                .map(|(pmu, metrics)| CoreType {
                    pmu: Some(pmu),
                    metrics,
                })
                .collect(),
            literals,
            tables,
        }
    }

    /// The machine's literals.
    pub fn literals(&self) -> &Literals {
        &self.literals
    }

    /// Every metric with the name it goes by: the table's, or on a hybrid
    /// CPU `cpu_atom/NAME` where an earlier core type has one of that
    /// name.
    pub fn metrics(&self) -> Vec<(String, &TableMetric)> {
        let mut out = Vec::new();
        for (i, t) in self.types.iter().enumerate() {
            for m in &t.metrics {
                out.push((self.label(i, &m.name), m));
            }
        }
        out
    }

    /// The name metric `name` of core type `i` goes by.
    fn label(&self, i: usize, name: &str) -> String {
        let earlier = self.types[..i]
            .iter()
            .any(|t| find(&t.metrics, name).is_some());
        match &self.types[i].pmu {
            Some(pmu) if earlier => format!("{pmu}/{name}"),
            _ => name.to_owned(),
        }
    }

    /// Every metric group's name, sorted, each once.
    pub fn groups(&self) -> Vec<&str> {
        let mut groups: Vec<&str> = self
            .types
            .iter()
            .flat_map(|t| &t.metrics)
            .flat_map(|m| m.groups.iter().map(String::as_str))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// The metric `name` (any case, as perf matches it) of each core type
    /// that has it, or every metric of the group `name`, written out;
    /// `pmu/NAME` keeps to one core type.
    pub fn resolve(&self, name: &str) -> Result<Vec<NamedMetric>, NamedError> {
        let (only, bare) = match name.split_once('/') {
            Some((pmu, rest)) if self.types.iter().any(|t| t.pmu.as_deref() == Some(pmu)) => {
                (Some(pmu), rest)
            }
            _ => (None, name),
        };
        let chosen = |t: &CoreType| only.is_none_or(|p| t.pmu.as_deref() == Some(p));
        let mut out = Vec::new();
        for (i, t) in self.types.iter().enumerate().filter(|(_, t)| chosen(t)) {
            if let Some(metric) = find(&t.metrics, bare) {
                out.push(self.named(i, metric)?);
            }
        }
        if out.is_empty() {
            for (i, t) in self.types.iter().enumerate().filter(|(_, t)| chosen(t)) {
                for metric in t
                    .metrics
                    .iter()
                    .filter(|m| m.groups.iter().any(|g| g.eq_ignore_ascii_case(bare)))
                {
                    out.push(self.named(i, metric)?);
                }
            }
        }
        if out.is_empty() {
            let labels: Vec<String> = self.metrics().into_iter().map(|(l, _)| l).collect();
            let names = labels.iter().map(String::as_str).chain(self.groups());
            return Err(NamedError::Unknown {
                name: name.to_owned(),
                tables: self.tables.clone(),
                suggestion: crate::suggest::did_you_mean(name, names).map(String::from),
            });
        }
        Ok(out)
    }

    /// `metric` of core type `i`, written out.
    fn named(&self, i: usize, metric: &TableMetric) -> Result<NamedMetric, NamedError> {
        let broken = |problem: String| NamedError::Broken {
            metric: metric.name.clone(),
            tables: self.tables.clone(),
            problem,
        };
        let mut seen = HashSet::new();
        let mut expr = self
            .written_out(i, metric, &mut seen, 0)
            .map_err(|Problem(p)| broken(p))?;
        if let Some(pmu) = &self.types[i].pmu {
            expr = expr.renamed(|event| pinned(pmu, event));
        }
        let (scale, unit) = scale_unit(metric.scale_unit.as_deref().unwrap_or(""))
            .ok_or_else(|| broken(format!("cannot read its ScaleUnit {:?}", metric.scale_unit)))?;
        let constraint = metric.constraint.as_deref().unwrap_or("");
        let grouped = !(constraint.starts_with("NO_GROUP_EVENTS")
            || (constraint == "NO_NMI_WATCHDOG" && self.literals.nmi_watchdog));
        Ok(NamedMetric {
            name: self.label(i, &metric.name),
            formula: metric.expr.clone(),
            expr: expr.times(scale),
            description: metric.description.clone(),
            unit,
            grouped,
        })
    }

    /// `metric`'s formula with the metrics it refers to written out
    /// (unscaled, as perf does; those of its own core type `i` first) and
    /// its literals replaced; `seen` holds the metrics being written out,
    /// to refuse a circle.
    fn written_out(
        &self,
        i: usize,
        metric: &TableMetric,
        seen: &mut HashSet<String>,
        depth: usize,
    ) -> Result<Expr, Problem> {
        if depth > MAX_REFERENCES {
            return Err(Problem(format!(
                "it refers to metrics more than {MAX_REFERENCES} deep"
            )));
        }
        let key = metric.name.to_ascii_lowercase();
        if !seen.insert(key.clone()) {
            return Err(Problem(format!(
                "it refers to itself through `{}`",
                metric.name
            )));
        }
        let parsed = Expr::parse_perf(&metric.expr)?;
        let expr = parsed.substitute(|name| {
            if name.starts_with('#') {
                // Kept a name: its value is the machine's when the metric
                // is computed (see `crate::metrics::literal`).
                return match self.literals.get(name) {
                    Some(_) => Ok(None),
                    None => Err(Problem(format!(
                        "its literal `{name}` is not known on this machine"
                    ))),
                };
            }
            let own = find(&self.types[i].metrics, name);
            let other = || self.types.iter().find_map(|t| find(&t.metrics, name));
            match own.or_else(other) {
                Some(other) => self.written_out(i, other, seen, depth + 1).map(Some),
                None => Ok(None),
            }
        })?;
        seen.remove(&key);
        Ok(expr)
    }
}

/// The metric `name` of `metrics`, in any case.
fn find<'a>(metrics: &'a [TableMetric], name: &str) -> Option<&'a TableMetric> {
    metrics.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

/// Event `name` of a formula pinned to core PMU `pmu` (`INST_RETIRED.ANY`
/// is `cpu_atom/INST_RETIRED.ANY/`, `cycles:k` is `cpu_atom/cycles/k`),
/// so that a core type's metric counts on its own cores only; an event
/// that names its PMU already (`cpu_atom@...@`) is kept.
fn pinned(pmu: &str, name: &str) -> String {
    if name.contains(['@', '/']) {
        return name.to_owned();
    }
    match name.split_once(':') {
        Some((event, modifiers)) if modifiers.chars().all(|c| c.is_ascii_alphabetic()) => {
            format!("{pmu}/{event}/{modifiers}")
        }
        // A tracepoint (`sched:sched_switch`) counts wherever it fires.
        Some(_) => name.to_owned(),
        None => format!("{pmu}/{name}/"),
    }
}

/// perf's `ScaleUnit` (`100%`, `1per_instr`, `9.765625e-4KB`, or none) as
/// a factor and a unit label value: `%` is `percent`, `/` is `_per_`, and
/// what else is not a lowercase letter, digit or `_` is dropped.
fn scale_unit(text: &str) -> Option<(f64, String)> {
    let text = text.trim();
    if text.is_empty() {
        return Some((1.0, String::new()));
    }
    let split = text
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit()
                || c == '.'
                || ((c == 'e' || c == 'E')
                    && text[i + 1..]
                        .starts_with(|n: char| n.is_ascii_digit() || n == '-' || n == '+'))
                || ((c == '-' || c == '+') && i > 0 && text[..i].ends_with(['e', 'E'])))
        })
        .map_or(text.len(), |(i, _)| i);
    let (number, unit) = text.split_at(split);
    let factor: f64 = if number.is_empty() {
        1.0
    } else {
        number.parse().ok()?
    };
    let mut label = String::new();
    for c in unit.trim().chars() {
        match c {
            '%' => label.push_str("percent"),
            '/' => label.push_str("_per_"),
            ' ' | '-' | '_' => label.push('_'),
            c if c.is_ascii_alphanumeric() => label.push(c.to_ascii_lowercase()),
            _ => {}
        }
    }
    let label = label.trim_matches('_').to_owned();
    Some((factor, label.chars().take(32).collect()))
}

#[cfg(test)]
mod tests;
