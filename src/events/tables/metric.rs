//! The metrics of a table: entries with a `MetricName` and a `MetricExpr`,
//! as perf's pmu-events JSON writes them (`IPC`, `tma_backend_bound`,
//! `branch_misprediction_ratio`), kept as the table writes them. What they
//! mean — their references to other metrics, their `#` literals, their
//! groups — is the metrics' business (`crate::metrics::named`), not the
//! table reader's.

use serde_json::{Map, Value};

use super::encode::field;

/// One metric of a CPU's table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableMetric {
    /// Its name as the table writes it: `IPC`, `tma_retiring`.
    pub name: String,
    /// Its formula as the table writes it (perf's `MetricExpr`).
    pub expr: String,
    /// The table's one-line description.
    pub description: String,
    /// The metric groups it belongs to (`TopdownL1`, `Summary`), from
    /// `MetricGroup`'s `;`-separated list.
    pub groups: Vec<String>,
    /// perf's `ScaleUnit` (`100%`, `1per_instr`, `9.765625e-4KB`): the
    /// factor the value is multiplied by, then its unit; `None` when the
    /// table gives none.
    pub scale_unit: Option<String>,
    /// The PMU the table says it is for (`Unit`: `cpu_core` or `cpu_atom`
    /// on a hybrid CPU), `None` when it does not say.
    pub unit: Option<String>,
    /// perf's `MetricConstraint` (`NO_NMI_WATCHDOG`, `NO_GROUP_EVENTS`):
    /// when its events may not be counted as one group.
    pub constraint: Option<String>,
}

/// `entry` as a metric, or `None` when it is no metric (an event).
pub fn metric(entry: &Map<String, Value>) -> Option<TableMetric> {
    let name = field(entry, "MetricName")?.to_string();
    let expr = field(entry, "MetricExpr")?.to_string();
    let text = |key| field(entry, key).map(|v| v.to_string());
    let groups = text("MetricGroup")
        .map(|g| {
            g.split(';')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    Some(TableMetric {
        description: text("BriefDescription")
            .or_else(|| text("PublicDescription"))
            .unwrap_or_default(),
        groups,
        scale_unit: text("ScaleUnit").filter(|s| !s.is_empty()),
        unit: text("Unit").filter(|s| !s.is_empty()),
        constraint: text("MetricConstraint").filter(|s| !s.is_empty()),
        name,
        expr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(json: &str) -> Map<String, Value> {
        match serde_json::from_str(json) {
            Ok(Value::Object(map)) => map,
            other => panic!("{json}: {other:?}"),
        }
    }

    #[test]
    fn a_metric_entry_keeps_its_fields_as_written() {
        let m = metric(&entry(
            r#"{"BriefDescription": "Instructions Per Cycle (per Logical Processor)",
                "MetricExpr": "INST_RETIRED.ANY / CLKS",
                "MetricGroup": "Ret;Summary",
                "MetricName": "IPC"}"#,
        ))
        .expect("a metric");
        assert_eq!(m.name, "IPC");
        assert_eq!(m.expr, "INST_RETIRED.ANY / CLKS");
        assert_eq!(m.groups, ["Ret", "Summary"]);
        assert_eq!(m.scale_unit, None);
        assert_eq!(m.unit, None);
        let m = metric(&entry(
            r#"{"MetricExpr": "a / b", "MetricName": "tma_x", "ScaleUnit": "100%",
                "Unit": "cpu_atom", "MetricConstraint": "NO_NMI_WATCHDOG", "MetricGroup": ""}"#,
        ))
        .expect("a metric");
        assert_eq!(m.scale_unit.as_deref(), Some("100%"));
        assert_eq!(m.unit.as_deref(), Some("cpu_atom"));
        assert_eq!(m.constraint.as_deref(), Some("NO_NMI_WATCHDOG"));
        assert!(m.groups.is_empty());
    }

    #[test]
    fn events_are_no_metrics() {
        assert_eq!(
            metric(&entry(
                r#"{"EventName": "INST_RETIRED.ANY", "EventCode": "0xc0"}"#
            )),
            None
        );
    }
}
