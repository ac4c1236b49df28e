//! Metrics: formulas over what cgperf counts (`instructions / cycles`),
//! computed per cgroup per interval from that interval's counts.
//!
//! A metric is never computed from lifetime totals: a ratio of totals
//! hides every change after the first hour. Each interval's value comes
//! from the growth of its inputs' totals since the last interval, which
//! are scaled per interval already (see docs/design/counting.md), so a
//! metric is as exact as the counts it is made of.

mod expr;
pub mod named;

pub use expr::{EXPANDED, Expr, ExprError, MAX_DEPTH, MAX_LEN, MAX_NODES};
pub use named::{Catalog, Literals, NamedError, NamedMetric};

use std::sync::Arc;
use std::time::Instant;

/// A metric of the config's `metrics:`: a formula over what the config
/// counts, computed per cgroup per interval from that interval's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricDef {
    /// The `metric` label: the config's name (`[A-Za-z_][A-Za-z0-9_]*`),
    /// or the name the CPU's tables give it.
    pub name: String,
    /// The `metrics:` entry that defines it, as written: its own name, or
    /// the metric group of the tables it belongs to (`TopdownL1`). A
    /// `cgroups:` entry's `metrics:` selects by either.
    pub entry: String,
    /// The formula as written.
    pub formula: String,
    /// The formula.
    pub expr: Expr,
    /// Where each of [`Expr::names`] is counted, in that order.
    pub inputs: Vec<MetricInput>,
    /// For people (`cgperf_metric_definition_info`, OTLP); the formula when the
    /// config gives none.
    pub description: String,
    /// What a value measures (`ratio`, `seconds`, ...), for people; empty
    /// when the config gives none.
    pub unit: String,
}

/// perf's tool event of a run's wall-clock time in nanoseconds, which its
/// metrics divide by for rates (`tma_info_system_gflops`): for a metric
/// of cgperf, the time its cgroup's series have counted over.
pub const DURATION_TIME: &str = "duration_time";

/// Where a metric's input is counted: the `group` and `event` labels of
/// its `cgperf_events_total` (or `cgperf_clock_seconds_total`) series; or,
/// with an empty `group`, [`DURATION_TIME`], which nothing counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricInput {
    /// A group's name, or the label of the tracepoints' or the probes'
    /// group.
    pub group: Arc<str>,
    /// The event as written, a tracepoint's label or a probe's `as:`.
    pub event: Arc<str>,
}

impl MetricInput {
    /// [`DURATION_TIME`]: its total is the nanoseconds since the cgroup's
    /// series began, so that an interval's growth is the interval's
    /// length.
    pub fn duration() -> Self {
        Self {
            group: "".into(),
            event: DURATION_TIME.into(),
        }
    }

    /// Whether this is [`MetricInput::duration`].
    pub fn is_duration(&self) -> bool {
        self.group.is_empty() && *self.event == *DURATION_TIME
    }

    /// A literal of the machine (`#num_cpus_online`), as the formula
    /// writes it: its value is the machine's when the metric is computed
    /// (see [`literal`]), not a count.
    pub fn literal(name: &str) -> Self {
        Self {
            group: "".into(),
            event: name.into(),
        }
    }

    /// Whether this is a [`MetricInput::literal`].
    pub fn is_literal(&self) -> bool {
        self.group.is_empty() && self.event.starts_with('#')
    }

    /// Whether cgperf counts this input (it is neither `duration_time` nor
    /// a literal).
    pub fn is_counted(&self) -> bool {
        !self.group.is_empty()
    }
}

/// The machine's literals now. One for the process: they are facts of the
/// machine that every place computing metrics (cgroups, processes, the
/// host, `cgperf stat`) reads, and that CPUs going offline or online
/// change (`#num_cpus_online`, `#num_cores`, ...), so they are set where
/// the online CPUs are followed, not copied into each formula.
static LITERALS: std::sync::RwLock<Option<Literals>> = std::sync::RwLock::new(None);

/// Makes `literals` the machine's, for every metric computed from now on.
pub fn set_literals(literals: Literals) {
    let mut now = LITERALS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *now = Some(literals);
}

/// The value now of literal `name` (`#smt_on`), when it has one.
pub fn literal(name: &str) -> Option<f64> {
    let now = LITERALS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    now.as_ref()?.get(name)
}

/// The total now of `input` in a target (a cgroup, a process entry's
/// series): the nanoseconds it has been counted for a duration input
/// (`duration_time`), else the sum of its series (group, event, value) of
/// the input's group and event; `None` when it has none (not counted).
fn input_total<'a>(
    input: &MetricInput,
    counting_ns: f64,
    counted: impl Iterator<Item = (&'a str, &'a str, f64)>,
) -> Option<f64> {
    if input.is_duration() {
        return Some(counting_ns);
    }
    if input.is_literal() {
        return literal(&input.event);
    }
    let mut found = counted
        .filter(|(group, event, _)| **group == *input.group && **event == *input.event)
        .peekable();
    found.peek()?;
    Some(found.fold(0.0, |sum, (_, _, value)| sum + value))
}

/// A cgroup's inputs' totals at the last interval, to take the next
/// interval's growth from. Starts empty: the first interval's growth is
/// the totals themselves, which began at zero with the cgroup's series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LastTotals {
    last: Vec<(MetricInput, f64)>,
    /// This interval's, filled at each call: kept so that no call
    /// allocates once the first has.
    now: Vec<(MetricInput, f64)>,
}

impl LastTotals {
    /// The value of each of `metrics` over the interval from the last call
    /// to `now`, for a target (a cgroup, a process series, the host) whose
    /// series began at `began` and are `counted()`, (group, event, value)
    /// as exported: an input's total is the sum of its series, and
    /// `duration_time`'s the nanoseconds since `began`. What every target
    /// computes its metrics with.
    pub fn next_over<'a, I>(
        &mut self,
        metrics: &[Arc<MetricDef>],
        (began, now): (Instant, Instant),
        counted: impl Fn() -> I,
    ) -> Vec<(Arc<MetricDef>, f64)>
    where
        I: Iterator<Item = (&'a str, &'a str, f64)>,
    {
        let counting = now.saturating_duration_since(began).as_nanos() as f64;
        self.next(metrics, |input| input_total(input, counting, counted()))
    }

    /// The value of each of `metrics` over the interval that ends now, when
    /// it has one, given each input's total now (`None`: not counted, e.g.
    /// its group is not supported here). Remembers the totals for the
    /// next interval.
    ///
    /// A metric has no value when an input is not counted, or its formula
    /// divides by zero (an input that did not grow: a cgroup that did not
    /// run), never 0 or NaN. A total lower than the last one (its series
    /// began again, as after a reload that dropped and restored its group)
    /// grew by all of itself.
    pub fn next(
        &mut self,
        metrics: &[Arc<MetricDef>],
        total: impl Fn(&MetricInput) -> Option<f64>,
    ) -> Vec<(Arc<MetricDef>, f64)> {
        let mut now = std::mem::take(&mut self.now);
        now.clear();
        for input in metrics.iter().flat_map(|m| &m.inputs) {
            if !now.iter().any(|(i, _)| i == input)
                && let Some(value) = total(input)
            {
                now.push((input.clone(), value));
            }
        }
        let grown = |input: &MetricInput| -> Option<f64> {
            let (_, value) = now.iter().find(|(i, _)| i == input)?;
            if input.is_literal() {
                return Some(*value);
            }
            let last = self
                .last
                .iter()
                .find(|(i, _)| i == input)
                .map_or(0.0, |(_, v)| *v);
            Some(if *value >= last { value - last } else { *value })
        };
        let mut values = Vec::new();
        let mut out = Vec::with_capacity(metrics.len());
        for metric in metrics {
            values.clear();
            let Some(()) = metric.inputs.iter().try_for_each(|input| {
                values.push(grown(input)?);
                Some(())
            }) else {
                continue;
            };
            if let Some(value) = metric.expr.eval(&values) {
                out.push((metric.clone(), value));
            }
        }
        self.now = std::mem::replace(&mut self.last, now);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(group: &str, event: &str) -> MetricInput {
        MetricInput {
            group: group.into(),
            event: event.into(),
        }
    }

    fn metric(name: &str, text: &str) -> Arc<MetricDef> {
        let expr = Expr::parse(text).expect("parses");
        let inputs = expr.names().iter().map(|n| input("g", n)).collect();
        Arc::new(MetricDef {
            name: name.into(),
            entry: name.into(),
            formula: text.into(),
            expr,
            inputs,
            description: text.into(),
            unit: String::new(),
        })
    }

    fn values(out: &[(Arc<MetricDef>, f64)]) -> Vec<(&str, f64)> {
        out.iter().map(|(m, v)| (m.name.as_str(), *v)).collect()
    }

    #[test]
    fn each_interval_is_computed_from_its_own_growth_not_the_totals() {
        let metrics = [metric("ipc", "i / c"), metric("c_per_s", "c / s")];
        let mut last = LastTotals::default();
        let totals = |i: f64, c: f64, s: f64| {
            move |input: &MetricInput| match &*input.event {
                "i" => Some(i),
                "c" => Some(c),
                "s" => Some(s),
                _ => None,
            }
        };
        // First interval: the totals are the growth.
        let out = last.next(&metrics, totals(300.0, 100.0, 1.0));
        assert_eq!(values(&out), [("ipc", 3.0), ("c_per_s", 100.0)]);
        // Second: 100 more instructions over 100 more cycles is 1, whatever
        // the totals' ratio (400 / 200 = 2).
        let out = last.next(&metrics, totals(400.0, 200.0, 2.0));
        assert_eq!(values(&out), [("ipc", 1.0), ("c_per_s", 100.0)]);
        // An interval in which nothing ran: no value, not 0 or NaN.
        let out = last.next(&metrics, totals(400.0, 200.0, 2.0));
        assert_eq!(values(&out), []);
        // And the next one counts from where the idle one left off.
        let out = last.next(&metrics, totals(460.0, 230.0, 2.5));
        assert_eq!(values(&out), [("ipc", 2.0), ("c_per_s", 60.0)]);
    }

    #[test]
    fn a_metric_with_an_input_not_counted_has_no_value_and_the_others_go_on() {
        let metrics = [metric("ipc", "i / c"), metric("twice", "c * 2")];
        let mut last = LastTotals::default();
        let out = last.next(&metrics, |input| (&*input.event == "c").then_some(10.0));
        assert_eq!(values(&out), [("twice", 20.0)]);
    }

    #[test]
    fn a_series_that_began_again_grew_by_its_whole_total() {
        let metrics = [metric("ipc", "i / c")];
        let mut last = LastTotals::default();
        last.next(&metrics, |input| {
            Some(if &*input.event == "i" { 1000.0 } else { 500.0 })
        });
        // Both began again (their group was dropped and restored by a
        // reload): never a negative growth.
        let out = last.next(&metrics, |input| {
            Some(if &*input.event == "i" { 30.0 } else { 10.0 })
        });
        assert_eq!(values(&out), [("ipc", 3.0)]);
    }

    #[test]
    fn duration_time_grows_by_the_intervals_length() {
        let expr = Expr::parse("c / (duration_time / 1e9)").expect("parses");
        let metrics = [Arc::new(MetricDef {
            name: "c_per_second".into(),
            entry: "c_per_second".into(),
            formula: String::new(),
            inputs: vec![input("g", "c"), MetricInput::duration()],
            expr,
            description: String::new(),
            unit: String::new(),
        })];
        let mut last = LastTotals::default();
        let at =
            |c: f64, ns: f64| move |i: &MetricInput| Some(if i.is_duration() { ns } else { c });
        // 100 in the first half second, then 300 in the next 1.5 s.
        assert_eq!(
            values(&last.next(&metrics, at(100.0, 0.5e9))),
            [("c_per_second", 200.0)]
        );
        assert_eq!(
            values(&last.next(&metrics, at(400.0, 2e9))),
            [("c_per_second", 200.0)]
        );
    }

    #[test]
    fn inputs_shared_by_metrics_are_taken_once() {
        // The second metric sees the same growth as the first.
        let metrics = [metric("a", "c"), metric("b", "c")];
        let mut last = LastTotals::default();
        last.next(&metrics, |_| Some(5.0));
        let out = last.next(&metrics, |_| Some(12.0));
        assert_eq!(values(&out), [("a", 7.0), ("b", 7.0)]);
    }
}
