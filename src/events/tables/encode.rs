//! One event of a table file into the terms of its core PMU, as perf's
//! pmu-events converter writes them: `EventCode` is `event=`, `UMask` (with
//! `UMaskExt` above it) `umask=`, `CounterMask` `cmask=`, `Invert` `inv`,
//! `EdgeDetect` `edge`, `AnyThread` `any`, and `MSRValue` goes to the term
//! of the MSR that `MSRIndex` names (`offcore_rsp`, `ldlat`, `frontend`).
//! The terms are then resolved through the PMU's sysfs `format/` files, so
//! the bits they land in are the kernel's, not ours.
//!
//! Files are perf's (a JSON array) or perfmon's (`{"Events": [...]}`); an
//! entry that names `ArchStdEvent` (Arm) takes its fields from the
//! architecture's standard events, overridden by its own.

use serde_json::{Map, Value};

use super::TableEvent;

/// The events of perfmon's fixed counters, encoded as perf encodes them:
/// their event 0x00 pseudo-encodings are not understood by every model's
/// kernel driver, the programmable encodings are, and the kernel still puts
/// them on the fixed counter when it is free.
const FIXED: [(&str, &[(&str, u64)]); 6] = [
    ("inst_retired.any", &[("event", 0xc0)]),
    ("inst_retired.any_p", &[("event", 0xc0)]),
    ("cpu_clk_unhalted.ref", &[("event", 0x00), ("umask", 0x03)]),
    ("cpu_clk_unhalted.thread", &[("event", 0x3c)]),
    ("cpu_clk_unhalted.core", &[("event", 0x3c)]),
    (
        "cpu_clk_unhalted.thread_any",
        &[("event", 0x3c), ("any", 1)],
    ),
];

/// The MSRs whose value an event sets, and the format term that carries it.
const MSR_TERMS: [(u64, &str); 4] = [
    (0x1a6, "offcore_rsp"),
    (0x1a7, "offcore_rsp"),
    (0x3f6, "ldlat"),
    (0x3f7, "frontend"),
];

/// The entries of a table file: its JSON array, or perfmon's `Events`.
pub fn entries(json: Value) -> Option<Vec<Map<String, Value>>> {
    let list = match json {
        Value::Array(list) => list,
        Value::Object(mut object) => match object.remove("Events") {
            Some(Value::Array(list)) => list,
            _ => return None,
        },
        _ => return None,
    };
    Some(
        list.into_iter()
            .filter_map(|v| match v {
                Value::Object(map) => Some(map),
                _ => None,
            })
            .collect(),
    )
}

/// A field as text: tables write numbers as strings, sometimes as numbers.
pub fn field<'a>(entry: &'a Map<String, Value>, key: &str) -> Option<std::borrow::Cow<'a, str>> {
    match entry.get(key)? {
        Value::String(s) => Some(s.trim().into()),
        Value::Number(n) => Some(n.to_string().into()),
        _ => None,
    }
}

/// The first of a field's comma-separated numbers (`0xB7,0xBB` names either
/// of two counters' encodings; the first is the one perf uses).
fn number(entry: &Map<String, Value>, key: &str) -> Option<u64> {
    let text = field(entry, key)?;
    let first = text.split(',').next()?.trim();
    match first
        .strip_prefix("0x")
        .or_else(|| first.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => first.parse().ok(),
    }
}

/// `entry` (already merged with its standard event, if any) as an event of
/// the table, or `None` for entries that are not core events cgperf can
/// encode: metrics, uncore events (they name a `Unit` that is not
/// `core_unit`), events without a code, events of an MSR cgperf does not
/// know.
pub fn event(
    entry: &Map<String, Value>,
    core_units: &[&str],
) -> Option<(Option<String>, TableEvent)> {
    let name = field(entry, "EventName")?.to_string();
    let unit = field(entry, "Unit").map(|u| u.to_string());
    if let Some(unit) = &unit
        && !core_units.contains(&unit.as_str())
    {
        return None;
    }
    let terms = terms(&name, entry)?;
    let description = field(entry, "BriefDescription")
        .or_else(|| field(entry, "PublicDescription"))
        .unwrap_or_default()
        .to_string();
    Some((
        unit,
        TableEvent {
            name,
            terms,
            description,
        },
    ))
}

/// The `term=value` list of an entry.
fn terms(name: &str, entry: &Map<String, Value>) -> Option<Vec<(String, u64)>> {
    let lower = name.to_ascii_lowercase();
    if let Some((_, fixed)) = FIXED.iter().find(|(n, _)| *n == lower) {
        return Some(fixed.iter().map(|(t, v)| (t.to_string(), *v)).collect());
    }
    let mut terms = vec![("event".to_string(), number(entry, "EventCode")?)];
    let umask = number(entry, "UMask").unwrap_or(0) | number(entry, "UMaskExt").unwrap_or(0) << 8;
    let flags = [
        ("umask", umask),
        ("cmask", number(entry, "CounterMask").unwrap_or(0)),
        ("inv", u64::from(number(entry, "Invert").unwrap_or(0) != 0)),
        (
            "edge",
            u64::from(number(entry, "EdgeDetect").unwrap_or(0) != 0),
        ),
        (
            "any",
            u64::from(number(entry, "AnyThread").unwrap_or(0) != 0),
        ),
    ];
    terms.extend(
        flags
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(t, v)| (t.to_string(), v)),
    );
    if let Some(msr) = number(entry, "MSRIndex").filter(|m| *m != 0) {
        let (_, term) = MSR_TERMS.iter().find(|(index, _)| *index == msr)?;
        terms.push((term.to_string(), number(entry, "MSRValue").unwrap_or(0)));
    }
    Some(terms)
}

/// `entry` with the fields of the standard event it names (`ArchStdEvent`)
/// under its own; entries without one are returned as they are.
pub fn with_standard(
    entry: Map<String, Value>,
    standard: &[Map<String, Value>],
) -> Map<String, Value> {
    let Some(std_name) = field(&entry, "ArchStdEvent").map(|n| n.to_ascii_lowercase()) else {
        return entry;
    };
    let Some(base) = standard
        .iter()
        .find(|s| field(s, "EventName").is_some_and(|n| n.to_ascii_lowercase() == std_name))
    else {
        return entry;
    };
    let mut merged = base.clone();
    merged.extend(entry);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn encode(value: Value) -> Option<Vec<(String, u64)>> {
        let Value::Object(map) = value else { panic!() };
        event(&map, &["cpu_core"]).map(|(_, e)| e.terms)
    }

    fn t(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn intel_fields_become_perf_terms() {
        let taken = json!({"EventName": "BR_INST_RETIRED.NEAR_TAKEN", "EventCode": "0xc4", "UMask": "0x20"});
        assert_eq!(encode(taken), Some(t(&[("event", 0xc4), ("umask", 0x20)])));
        let stalls = json!({"EventName": "CYCLE_ACTIVITY.STALLS_L3_MISS", "EventCode": "0xA3",
            "UMask": "0x06", "CounterMask": "6", "Invert": "0", "EdgeDetect": "0"});
        assert_eq!(
            encode(stalls),
            Some(t(&[("event", 0xa3), ("umask", 6), ("cmask", 6)]))
        );
        let edge = json!({"EventName": "X", "EventCode": "0x79", "UMask": "0x30",
            "CounterMask": "1", "Invert": "1", "EdgeDetect": "1", "AnyThread": "1"});
        let all = t(&[
            ("event", 0x79),
            ("umask", 0x30),
            ("cmask", 1),
            ("inv", 1),
            ("edge", 1),
            ("any", 1),
        ]);
        assert_eq!(encode(edge), Some(all));
        let ext =
            json!({"EventName": "X", "EventCode": "0x2c", "UMask": "0x10", "UMaskExt": "0x2"});
        assert_eq!(encode(ext), Some(t(&[("event", 0x2c), ("umask", 0x210)])));
    }

    #[test]
    fn msr_values_go_to_their_terms() {
        let offcore = json!({"EventName": "OCR.DEMAND_DATA_RD.ANY_RESPONSE", "EventCode": "0x2A,0x2B",
            "UMask": "0x01", "MSRIndex": "0x1a6,0x1a7", "MSRValue": "0x10001"});
        let want = t(&[("event", 0x2a), ("umask", 1), ("offcore_rsp", 0x10001)]);
        assert_eq!(encode(offcore), Some(want));
        let ldlat = json!({"EventName": "MEM_TRANS_RETIRED.LOAD_LATENCY_GT_4", "EventCode": "0xcd",
            "UMask": "0x01", "MSRIndex": "0x3F6", "MSRValue": "0x4"});
        assert_eq!(
            encode(ldlat),
            Some(t(&[("event", 0xcd), ("umask", 1), ("ldlat", 4)]))
        );
        let unknown =
            json!({"EventName": "X", "EventCode": "0x1", "MSRIndex": "0x3E0", "MSRValue": "1"});
        assert_eq!(encode(unknown), None, "an MSR cgperf cannot set");
    }

    #[test]
    fn fixed_counter_events_use_programmable_encodings() {
        let any = json!({"EventName": "INST_RETIRED.ANY", "EventCode": "0x00", "UMask": "0x01"});
        assert_eq!(encode(any), Some(t(&[("event", 0xc0)])));
        let thread =
            json!({"EventName": "cpu_clk_unhalted.thread", "EventCode": "0x0", "UMask": "0x0"});
        assert_eq!(encode(thread), Some(t(&[("event", 0x3c)])));
    }

    #[test]
    fn entries_that_are_not_core_events_are_left_out() {
        assert_eq!(
            encode(json!({"MetricName": "IPC", "MetricExpr": "a / b"})),
            None
        );
        assert_eq!(
            encode(json!({"EventName": "UNC_CHA_CLOCKTICKS", "EventCode": "0x1", "Unit": "CHA"})),
            None
        );
        assert_eq!(
            encode(json!({"EventName": "NO_CODE", "UMask": "0x1"})),
            None
        );
        assert_eq!(
            encode(json!({"EventName": "BAD", "EventCode": "0xzz"})),
            None
        );
        let unit = json!({"EventName": "X", "EventCode": "0xc0", "Unit": "cpu_core"});
        assert_eq!(encode(unit), Some(t(&[("event", 0xc0)])));
    }

    #[test]
    fn arm_standard_events_fill_in_their_fields() {
        let Value::Array(std) = json!([
            {"EventName": "L1D_CACHE_REFILL", "EventCode": "0x03", "BriefDescription": "Level 1 data cache refill"},
            {"EventName": "STALL_BACKEND", "EventCode": "0x24", "BriefDescription": "No operation issued due to the backend"}
        ]) else {
            panic!()
        };
        let std: Vec<Map<String, Value>> = std
            .into_iter()
            .map(|v| match v {
                Value::Object(m) => m,
                _ => panic!(),
            })
            .collect();
        let Value::Object(entry) =
            json!({"ArchStdEvent": "stall_backend", "PublicDescription": "Own words"})
        else {
            panic!()
        };
        let merged = with_standard(entry, &std);
        let (_, event) = event(&merged, &[]).unwrap();
        assert_eq!(event.name, "STALL_BACKEND");
        assert_eq!(event.terms, t(&[("event", 0x24)]));
        assert_eq!(event.description, "No operation issued due to the backend");
        let Value::Object(entry) = json!({"ArchStdEvent": "NOT_STANDARD"}) else {
            panic!()
        };
        assert!(super::event(&with_standard(entry, &std), &[]).is_none());
    }

    #[test]
    fn perf_and_perfmon_files_both_list_entries() {
        assert_eq!(entries(json!([{"EventName": "A"}, 3])).unwrap().len(), 1);
        let perfmon = json!({"Header": {}, "Events": [{"EventName": "A"}, {"EventName": "B"}]});
        assert_eq!(entries(perfmon).unwrap().len(), 2);
        assert!(entries(json!({"Header": {}})).is_none());
        assert!(entries(json!("text")).is_none());
    }
}
