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

impl Literals {
    /// The value of literal `name` (`#SMT_on`, any case).
    ///
    /// `#core_wide` is 1: cgperf counts each cgroup on every CPU, as
    /// `perf stat -a -G` does, so every thread of a core is counted
    /// (perf's rule for system-wide counting).
    pub fn get(&self, name: &str) -> Option<f64> {
        let name = name.strip_prefix('#')?.to_ascii_lowercase();
        Some(match name.as_str() {
            "smt_on" => f64::from(u8::from(self.smt_on)),
            "core_wide" => 1.0,
            "num_cpus" | "num_cpus_online" => self.num_cpus_online,
            "num_cores" => self.num_cores,
            "num_dies" => self.num_dies,
            "num_packages" => self.num_packages,
            "system_tsc_freq" => self.system_tsc_freq?,
            _ => return None,
        })
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

/// The metrics of this CPU's tables, and the machine's literals.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Every core PMU's metrics, `cpu_core`'s first; the first of a name
    /// wins.
    metrics: Vec<TableMetric>,
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

    /// The metrics of `tables`, with this machine's `literals`.
    pub fn of(tables: &EventTables, literals: Literals) -> Self {
        let mut metrics: Vec<TableMetric> = Vec::new();
        for m in tables.tables().iter().flat_map(|t| &t.metrics) {
            if !metrics.iter().any(|k| k.name.eq_ignore_ascii_case(&m.name)) {
                metrics.push(m.clone());
            }
        }
        Self::new(metrics, literals, tables.describe())
    }

    /// The catalog of `metrics` (one CPU's); `tables` names them in messages.
    pub fn new(metrics: Vec<TableMetric>, literals: Literals, tables: String) -> Self {
        Self {
            metrics,
            literals,
            tables,
        }
    }

    /// The machine's literals.
    pub fn literals(&self) -> &Literals {
        &self.literals
    }

    /// Every metric, as the tables list them.
    pub fn metrics(&self) -> &[TableMetric] {
        &self.metrics
    }

    /// Every metric group's name, sorted, each once.
    pub fn groups(&self) -> Vec<&str> {
        let mut groups: Vec<&str> = self
            .metrics
            .iter()
            .flat_map(|m| m.groups.iter().map(String::as_str))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    fn find(&self, name: &str) -> Option<&TableMetric> {
        self.metrics
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(name))
    }

    /// The metric `name` (any case, as perf matches it), or every metric of
    /// the group `name`, written out.
    pub fn resolve(&self, name: &str) -> Result<Vec<NamedMetric>, NamedError> {
        if let Some(metric) = self.find(name) {
            return Ok(vec![self.named(metric)?]);
        }
        let members: Vec<&TableMetric> = self
            .metrics
            .iter()
            .filter(|m| m.groups.iter().any(|g| g.eq_ignore_ascii_case(name)))
            .collect();
        if members.is_empty() {
            let names = self
                .metrics
                .iter()
                .map(|m| m.name.as_str())
                .chain(self.groups());
            return Err(NamedError::Unknown {
                name: name.to_owned(),
                tables: self.tables.clone(),
                suggestion: crate::suggest::did_you_mean(name, names).map(String::from),
            });
        }
        members.into_iter().map(|m| self.named(m)).collect()
    }

    fn named(&self, metric: &TableMetric) -> Result<NamedMetric, NamedError> {
        let broken = |problem: String| NamedError::Broken {
            metric: metric.name.clone(),
            tables: self.tables.clone(),
            problem,
        };
        let mut seen = HashSet::new();
        let expr = self
            .written_out(metric, &mut seen, 0)
            .map_err(|Problem(p)| broken(p))?;
        let (scale, unit) = scale_unit(metric.scale_unit.as_deref().unwrap_or(""))
            .ok_or_else(|| broken(format!("cannot read its ScaleUnit {:?}", metric.scale_unit)))?;
        let constraint = metric.constraint.as_deref().unwrap_or("");
        let grouped = !(constraint.starts_with("NO_GROUP_EVENTS")
            || (constraint == "NO_NMI_WATCHDOG" && self.literals.nmi_watchdog));
        Ok(NamedMetric {
            name: metric.name.clone(),
            formula: metric.expr.clone(),
            expr: expr.times(scale),
            description: metric.description.clone(),
            unit,
            grouped,
        })
    }

    /// `metric`'s formula with the metrics it refers to written out
    /// (unscaled, as perf does) and its literals replaced; `seen` holds the
    /// metrics being written out, to refuse a circle.
    fn written_out(
        &self,
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
                return match self.literals.get(name) {
                    Some(value) => Ok(Some(Expr::number(value))),
                    None => Err(Problem(format!(
                        "its literal `{name}` is not known on this machine"
                    ))),
                };
            }
            match self.find(name) {
                Some(other) => self.written_out(other, seen, depth + 1).map(Some),
                None => Ok(None),
            }
        })?;
        seen.remove(&key);
        Ok(expr)
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
