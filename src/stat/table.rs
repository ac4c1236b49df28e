//! What `cgperf stat` prints: snapshots turned into counts per period (the
//! whole run, or one `-I` interval) and laid out like `perf stat`.

use crate::config::Config;
use crate::metrics::MetricDef;
use crate::snapshot::{Snapshot, Support};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

/// Where the rate comment starts, so that `(NN.NN%)` lines up after it.
const NOTE_WIDTH: usize = 28;

/// One event line of the table, before any counts: which group and event,
/// and whether this machine can count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The group (`tracepoints` for tracepoints).
    pub group: String,
    /// The event as written.
    pub event: String,
    /// `Err(reason)` when this machine cannot count it.
    pub support: Result<(), String>,
}

/// The rows in config order: every event of every group, then each
/// tracepoint (and whatever else the plan judges one by one).
pub fn layout(config: &Config, support: &[Support]) -> Vec<Row> {
    let mut rows = Vec::new();
    for verdict in support {
        match &verdict.event {
            Some(event) => rows.push(Row {
                group: verdict.group.to_string(),
                event: event.to_string(),
                support: verdict.status.clone().map_err(|e| e.reason),
            }),
            None => {
                let def = config
                    .groups
                    .iter()
                    .find(|g| g.name == verdict.group.label());
                for event in def.into_iter().flat_map(|g| &g.events) {
                    rows.push(Row {
                        group: verdict.group.to_string(),
                        // The label the counts are published under.
                        event: event.label(),
                        support: verdict.status.clone().map_err(|e| e.reason),
                    });
                }
            }
        }
    }
    rows
}

/// `(cgroup, group, cpu)`.
type GroupKey = (String, String, Option<u32>);

/// Counts of one period, for lookup by cgroup, group, event and CPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// `(group key, event)` → (value, is a clock in seconds).
    values: HashMap<(GroupKey, String), (f64, bool)>,
    /// Group key → (enabled seconds, running seconds).
    times: HashMap<GroupKey, (f64, f64)>,
    /// `(group key, event)` → the counts of a `by:` tracepoint per value
    /// combination (`id=110,syscall=getppid`), whose sum `values` holds.
    parts: HashMap<(GroupKey, String), BTreeMap<String, f64>>,
}

impl Counts {
    /// The totals of a snapshot; series of one event that differ only in
    /// other labels are summed, and those split `by:` fields are also kept
    /// apart in `parts`.
    pub fn of(snapshot: &Snapshot) -> Self {
        let mut values: HashMap<(GroupKey, String), (f64, bool)> = HashMap::new();
        let mut parts: HashMap<(GroupKey, String), BTreeMap<String, f64>> = HashMap::new();
        for c in &snapshot.counters {
            let key = (c.cgroup.to_string(), c.group.to_string(), c.cpu);
            if !c.fields.is_empty() {
                let part = c
                    .fields
                    .iter()
                    .map(|(name, value)| format!("{name}={value}"))
                    .collect::<Vec<_>>()
                    .join(",");
                *parts
                    .entry((key.clone(), c.event.to_string()))
                    .or_default()
                    .entry(part)
                    .or_default() += c.value;
            }
            let total = values
                .entry((key, c.event.to_string()))
                .or_insert((0.0, c.clock));
            total.0 += c.value;
        }
        let times = snapshot
            .group_times
            .iter()
            .map(|t| {
                let key = (t.cgroup.to_string(), t.group.to_string(), t.cpu);
                (key, (t.enabled_seconds, t.running_seconds))
            })
            .collect();
        Self {
            values,
            times,
            parts,
        }
    }

    /// What was counted between `earlier` and these totals. A series that
    /// is new since `earlier` counts from zero.
    pub fn since(&self, earlier: &Counts) -> Self {
        let values = self
            .values
            .iter()
            .map(|(key, (value, clock))| {
                let before = earlier.values.get(key).map_or(0.0, |(v, _)| *v);
                (key.clone(), (value - before, *clock))
            })
            .collect();
        let times = self
            .times
            .iter()
            .map(|(key, (enabled, running))| {
                let (e0, r0) = earlier.times.get(key).copied().unwrap_or_default();
                (key.clone(), (enabled - e0, running - r0))
            })
            .collect();
        let parts = self
            .parts
            .iter()
            .map(|(key, parts)| {
                let before = earlier.parts.get(key);
                let delta = parts
                    .iter()
                    .map(|(part, value)| {
                        let was = before.and_then(|b| b.get(part)).copied().unwrap_or(0.0);
                        (part.clone(), value - was)
                    })
                    .collect();
                (key.clone(), delta)
            })
            .collect();
        Self {
            values,
            times,
            parts,
        }
    }

    /// The cgroups counted, sorted.
    pub fn cgroups(&self) -> Vec<String> {
        let mut cgroups: Vec<String> = self.times.keys().map(|(c, _, _)| c.clone()).collect();
        cgroups.sort();
        cgroups.dedup();
        cgroups
    }

    /// An event's value in a group of a cgroup on a CPU (summed over CPUs
    /// for `None` when counted per CPU).
    fn find_in(&self, cgroup: &str, group: &str, event: &str, cpu: Option<u32>) -> Option<f64> {
        let mut found = self
            .values
            .iter()
            .filter(|(((c, g, at), e), _)| {
                c == cgroup && g == group && e == event && (cpu.is_none() || *at == cpu)
            })
            .peekable();
        found.peek()?;
        Some(found.fold(0.0, |sum, (_, (value, _))| sum + value))
    }

    /// A counted event's value in a cgroup on a CPU, whatever its group.
    fn find(&self, cgroup: &str, event: &str, cpu: Option<u32>) -> Option<f64> {
        self.values
            .iter()
            .find(|(((c, _, p), e), _)| c == cgroup && e == event && *p == cpu)
            .map(|(_, (v, _))| *v)
    }
}

/// What a line shows in the value column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shown {
    /// A count.
    Count(f64),
    /// A clock, in seconds (shown in msec).
    Clock(f64),
    /// The machine cannot count the event.
    NotSupported,
    /// The event's group never ran in the period.
    NotCounted,
    /// A metric's value.
    Metric(f64),
    /// A metric whose formula divides by zero in the period.
    NoValue,
    /// Energy, in Joules.
    Joules(f64),
}

/// One line of output.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The CPU, with `-A`.
    pub cpu: Option<u32>,
    /// The value.
    pub shown: Shown,
    /// The event as written.
    pub event: String,
    /// The cgroup.
    pub cgroup: String,
    /// The `# ...` rate, if any.
    pub note: String,
    /// Percent of the enabled time the group was counting, when below 100.
    pub share: Option<f64>,
}

/// The lines of one period of `elapsed` seconds: for each cgroup, each row,
/// each CPU, then each metric over the period's counts. Rows a cgroup does
/// not count are left out, and so are metrics of which it counts no input
/// unless they have none to count (a constant) or the machine cannot count
/// one (shown as `<no value>`, as its row is `<not supported>`).
pub fn lines(
    (rows, metrics): (&[Row], &[MetricDef]),
    counts: &Counts,
    cgroups: &[String],
    cpus: &[Option<u32>],
    elapsed: f64,
) -> Vec<Line> {
    let mut out = Vec::new();
    for cgroup in cgroups {
        for row in rows {
            for &cpu in cpus {
                if let Some(line) = line(row, counts, cgroup, cpu, elapsed) {
                    out.push(line);
                    out.extend(part_lines(row, counts, cgroup, cpu, elapsed));
                }
            }
        }
        for metric in metrics {
            for &cpu in cpus {
                out.extend(metric_line(metric, (rows, counts), cgroup, cpu, elapsed));
            }
        }
    }
    out
}

/// A metric over the period's counts (`duration_time`: its `elapsed`
/// seconds), as the exporter computes it over an interval's; `<no value>`
/// when its formula divides by zero (the cgroup did not run in the
/// period) or an input is not counted; none when the cgroup counts no
/// input of it, unless it has no input to count or one of its inputs is a
/// row this machine cannot count.
fn metric_line(
    metric: &MetricDef,
    (rows, counts): (&[Row], &Counts),
    cgroup: &str,
    cpu: Option<u32>,
    elapsed: f64,
) -> Option<Line> {
    let values: Vec<Option<f64>> = metric
        .inputs
        .iter()
        .map(|input| match input.is_counted() {
            false => None,
            true => counts.find_in(cgroup, &input.group, &input.event, cpu),
        })
        .collect();
    let counted = metric.inputs.iter().filter(|i| i.is_counted());
    let unsupported = || {
        metric.inputs.iter().any(|input| {
            rows.iter()
                .any(|r| r.support.is_err() && r.group == *input.group && r.event == *input.event)
        })
    };
    if counted.count() > 0 && values.iter().all(Option::is_none) && !unsupported() {
        return None;
    }
    let values: Vec<Option<f64>> = metric
        .inputs
        .iter()
        .zip(values)
        .map(|(input, v)| {
            if input.is_duration() {
                Some(elapsed * 1e9)
            } else if input.is_literal() {
                crate::metrics::literal(&input.event)
            } else {
                v
            }
        })
        .collect();
    let values: Option<Vec<f64>> = values.into_iter().collect();
    let shown = match values.and_then(|v| metric.expr.eval(&v)) {
        Some(value) => Shown::Metric(value),
        None => Shown::NoValue,
    };
    Some(Line {
        cpu,
        shown,
        event: metric.name.clone(),
        cgroup: cgroup.to_string(),
        note: format!("# {}", metric.description),
        share: None,
    })
}

/// The lines of a `by:` tracepoint's value combinations under its total,
/// `event{field=value,...}`, most counted first; none that counted nothing
/// in the period.
fn part_lines(
    row: &Row,
    counts: &Counts,
    cgroup: &str,
    cpu: Option<u32>,
    elapsed: f64,
) -> Vec<Line> {
    let key = (
        (cgroup.to_string(), row.group.clone(), cpu),
        row.event.clone(),
    );
    let Some(parts) = counts.parts.get(&key) else {
        return Vec::new();
    };
    let mut parts: Vec<(&String, f64)> = parts
        .iter()
        .map(|(part, v)| (part, *v))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    parts.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    parts
        .into_iter()
        .map(|(part, value)| Line {
            cpu,
            shown: Shown::Count(value),
            event: format!("{}{{{part}}}", row.event),
            cgroup: cgroup.to_string(),
            note: note(&row.event, value, false, counts, cgroup, cpu, elapsed),
            share: None,
        })
        .collect()
}

fn line(row: &Row, counts: &Counts, cgroup: &str, cpu: Option<u32>, elapsed: f64) -> Option<Line> {
    let mut line = Line {
        cpu,
        shown: Shown::NotSupported,
        event: row.event.clone(),
        cgroup: cgroup.to_string(),
        note: String::new(),
        share: None,
    };
    if row.support.is_err() {
        return Some(line);
    }
    let key = (cgroup.to_string(), row.group.clone(), cpu);
    // Series without group times (counts by field value) are shown as they are.
    let times = counts.times.get(&key).copied();
    let (value, clock) = *counts.values.get(&(key, row.event.clone()))?;
    if let Some((enabled, running)) = times {
        if enabled <= 0.0 || running <= 0.0 {
            line.shown = Shown::NotCounted;
            return Some(line);
        }
        line.share = (running < enabled).then(|| 100.0 * running / enabled);
    }
    line.shown = if clock {
        Shown::Clock(value)
    } else {
        Shown::Count(value)
    };
    line.note = note(&row.event, value, clock, counts, cgroup, cpu, elapsed);
    Some(line)
}

/// perf's comment: CPUs utilized (the clock over `elapsed` wall seconds)
/// for clocks, instructions per cycle when cycles (with the same modifiers)
/// were counted in the cgroup, else a rate per task-clock second when a
/// clock was counted in the cgroup, else nothing.
fn note(
    event: &str,
    value: f64,
    clock: bool,
    counts: &Counts,
    cgroup: &str,
    cpu: Option<u32>,
    elapsed: f64,
) -> String {
    if clock {
        return format!("# {:8.3} CPUs utilized", ratio(value, elapsed));
    }
    if let Some(modifiers) = event.strip_prefix("instructions") {
        let cycles = counts
            .find(cgroup, &format!("cycles{modifiers}"), cpu)
            .filter(|&c| c > 0.0);
        if let Some(cycles) = cycles {
            return format!("# {:8.2} insn per cycle", value / cycles);
        }
    }
    // perf's rate is per second the counted tasks ran (task-clock), not per
    // second of wall time; without a clock counted beside it there is none.
    let Some(ran) = ["task-clock", "cpu-clock"]
        .iter()
        .find_map(|c| counts.find(cgroup, c, cpu))
    else {
        return String::new();
    };
    let rate = ratio(value, ran);
    let (scaled, unit) = [(1e9, "G"), (1e6, "M"), (1e3, "K")]
        .iter()
        .find(|(scale, _)| rate >= *scale)
        .map_or((rate, ""), |(scale, unit)| (rate / scale, *unit));
    format!("# {scaled:8.3} {unit}/sec")
}

/// `a / b`, or 0 for an empty period.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// Writes `lines`, each after `prefix` (the timestamp with `-I`), in
/// aligned columns.
pub fn write_lines(out: &mut dyn Write, prefix: &str, lines: &[Line]) -> io::Result<()> {
    let width = |f: fn(&Line) -> usize| {
        crate::list::column_width(lines.iter().map(f), 0, crate::list::NAME_MAX)
    };
    let (ew, cw) = (width(|l| l.event.len()), width(|l| l.cgroup.len()));
    for l in lines {
        let cpu = l.cpu.map_or(String::new(), |c| format!("CPU{c:<4} "));
        let (value, unit) = match l.shown {
            Shown::Count(v) => (thousands(v, 0), ""),
            Shown::Clock(seconds) => (thousands(seconds * 1e3, 2), "msec"),
            Shown::NotSupported => ("<not supported>".to_string(), ""),
            Shown::NotCounted => ("<not counted>".to_string(), ""),
            Shown::Metric(v) if v < 0.0 => (format!("-{}", thousands(-v, 2)), ""),
            Shown::Metric(v) => (thousands(v, 2), ""),
            Shown::NoValue => ("<no value>".to_string(), ""),
            Shown::Joules(v) => (thousands(v, 2), "J"),
        };
        let share = l.share.map_or(String::new(), |p| format!("({p:.2}%)"));
        let text = format!(
            "{prefix}{cpu}{value:>18} {unit:4} {:ew$}  {:cw$}  {:NOTE_WIDTH$}  {share}",
            l.event, l.cgroup, l.note
        );
        writeln!(out, "{}", text.trim_end())?;
    }
    Ok(())
}

/// `value` with `decimals` decimals and `,` between thousands, as perf
/// prints counts (`1,234,567`) and msec (`1,234.56`).
pub fn thousands(value: f64, decimals: usize) -> String {
    let text = format!("{:.decimals$}", value.max(0.0));
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::with_capacity(text.len() + int.len() / 3);
    for (i, digit) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    if !frac.is_empty() {
        grouped.push('.');
        grouped.push_str(frac);
    }
    grouped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::GroupId;

    fn counts(values: &[(&str, &str, f64, bool)], times: &[(&str, f64, f64)]) -> Counts {
        let key = |group: &str| ("/a".to_string(), group.to_string(), None);
        Counts {
            values: values
                .iter()
                .map(|(g, e, v, c)| ((key(g), e.to_string()), (*v, *c)))
                .collect(),
            times: times.iter().map(|(g, e, r)| (key(g), (*e, *r))).collect(),
            parts: HashMap::new(),
        }
    }

    fn row(group: &str, event: &str) -> Row {
        Row {
            group: group.into(),
            event: event.into(),
            support: Ok(()),
        }
    }

    #[test]
    fn rows_are_found_under_the_label_the_counts_have() {
        let config = crate::config::parse(
            "t",
            "groups:\n  sched: [cs, cpu-cycles:u]\ncgroups:\n  - path: /\n",
        )
        .expect("valid");
        let support = [Support {
            group: GroupId::Named("sched".into()),
            event: None,
            status: Ok(()),
        }];
        let rows = layout(&config, &support);
        let events: Vec<&str> = rows.iter().map(|r| r.event.as_str()).collect();
        assert_eq!(events, ["context-switches", "cycles:u"]);
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0, 0), "0");
        assert_eq!(thousands(4321.0, 0), "4,321");
        assert_eq!(thousands(999.4, 0), "999");
        assert_eq!(thousands(1_234_567.0, 0), "1,234,567");
        assert_eq!(thousands(123_456.0, 0), "123,456");
        assert_eq!(thousands(1234.5678, 2), "1,234.57");
        assert_eq!(thousands(0.62, 2), "0.62");
    }

    #[test]
    fn lines_show_values_rates_and_shares() {
        let c = counts(
            &[
                ("g", "task-clock", 0.5, true),
                ("h", "cycles", 2000.0, false),
                ("h", "instructions", 3000.0, false),
                ("t", "sched:sched_switch", 4321.0, false),
                ("z", "page-faults", 0.0, false),
                ("s", "by:field", 7.0, false),
            ],
            &[
                ("g", 1.0, 1.0),
                ("h", 1.0, 0.25),
                ("t", 1.0, 1.0),
                ("z", 0.0, 0.0),
            ],
        );
        let mut unsupported = row("u", "ref-cycles");
        unsupported.support = Err("no PMU".into());
        let rows = [
            row("g", "task-clock"),
            row("h", "cycles"),
            row("h", "instructions"),
            row("t", "sched:sched_switch"),
            row("z", "page-faults"),
            unsupported,
            row("other", "not-in-this-cgroup"),
            row("s", "by:field"),
        ];
        let lines = lines((&rows, &[]), &c, &["/a".into()], &[None], 2.0);
        let shown: Vec<(Shown, &str, Option<f64>)> = lines
            .iter()
            .map(|l| (l.shown, l.note.as_str(), l.share))
            .collect();
        assert_eq!(
            shown,
            [
                (Shown::Clock(0.5), "#    0.250 CPUs utilized", None),
                (Shown::Count(2000.0), "#    4.000 K/sec", Some(25.0)),
                (
                    Shown::Count(3000.0),
                    "#     1.50 insn per cycle",
                    Some(25.0)
                ),
                (Shown::Count(4321.0), "#    8.642 K/sec", None),
                (Shown::NotCounted, "", None),
                (Shown::NotSupported, "", None),
                (Shown::Count(7.0), "#   14.000 /sec", None),
            ]
        );
        let mut out = Vec::new();
        write_lines(&mut out, "", &lines).unwrap();
        let text = String::from_utf8(out).unwrap();
        let text: Vec<&str> = text.lines().collect();
        assert_eq!(
            text[0],
            "            500.00 msec task-clock          /a  #    0.250 CPUs utilized"
        );
        assert_eq!(
            text[1],
            "             2,000      cycles              /a  #    4.000 K/sec              (25.00%)"
        );
        assert_eq!(text[5], "   <not supported>      ref-cycles          /a");
    }

    #[test]
    fn no_rate_without_a_clock_as_perf_prints_it() {
        let c = counts(
            &[("t", "sched:sched_switch", 10.0, false)],
            &[("t", 1.0, 1.0)],
        );
        let lines = lines(
            (&[row("t", "sched:sched_switch")], &[]),
            &c,
            &["/a".into()],
            &[None],
            2.0,
        );
        assert_eq!(lines[0].shown, Shown::Count(10.0));
        assert_eq!(lines[0].note, "");
    }

    #[test]
    fn by_field_counts_follow_their_total_most_counted_first() {
        let mut c = counts(
            &[
                ("tracepoints", "s", 10.0, false),
                ("g", "task-clock", 1.0, true),
            ],
            &[("g", 1.0, 1.0)],
        );
        let key = (
            ("/a".to_string(), "tracepoints".to_string(), None),
            "s".to_string(),
        );
        let parts = [
            ("id=0,syscall=read", 3.0),
            ("id=110,syscall=getppid", 7.0),
            ("id=1,syscall=write", 0.0),
        ];
        c.parts.insert(
            key.clone(),
            parts.iter().map(|(p, v)| (p.to_string(), *v)).collect(),
        );
        let mut earlier = c.clone();
        earlier.values.clear();
        earlier
            .parts
            .insert(key, [("id=0,syscall=read".to_string(), 1.0)].into());
        for (counts, read) in [(c.clone(), 3.0), (c.since(&earlier), 2.0)] {
            let lines = lines(
                (&[row("tracepoints", "s")], &[]),
                &counts,
                &["/a".into()],
                &[None],
                1.0,
            );
            let shown: Vec<(&str, Shown, String)> = lines
                .iter()
                .map(|l| (l.event.as_str(), l.shown, l.note.clone()))
                .collect();
            let note = |v: f64| format!("# {v:8.3} /sec");
            assert_eq!(
                shown,
                [
                    ("s", Shown::Count(10.0), note(10.0)),
                    ("s{id=110,syscall=getppid}", Shown::Count(7.0), note(7.0)),
                    ("s{id=0,syscall=read}", Shown::Count(read), note(read)),
                ]
            );
        }
    }

    #[test]
    fn deltas_between_snapshots() {
        let before = counts(&[("t", "x", 10.0, false)], &[("t", 1.0, 1.0)]);
        let after = counts(
            &[("t", "x", 25.0, false), ("t", "y", 5.0, false)],
            &[("t", 3.0, 2.0)],
        );
        let delta = after.since(&before);
        assert_eq!(
            delta,
            counts(
                &[("t", "x", 15.0, false), ("t", "y", 5.0, false)],
                &[("t", 2.0, 1.0)]
            )
        );
    }

    #[test]
    fn metrics_follow_the_counts_of_their_cgroup_with_no_value_for_an_empty_period() {
        let config = crate::config::parse(
            "t",
            "groups:\n  sched: [task-clock, cs]\nmetrics:\n  - {name: per_ms, expr: cs / (task-clock * 1000)}\n\
             \x20 - {name: neg, expr: 0 - cs, description: minus}\n\
             \x20 - {name: cs_per_s, expr: cs / (duration_time / 1e9)}\n",
        )
        .expect("valid");
        let rows = [row("sched", "task-clock"), row("sched", "context-switches")];
        let busy = counts(
            &[
                ("sched", "task-clock", 0.5, true),
                ("sched", "context-switches", 1500.0, false),
            ],
            &[("sched", 1.0, 1.0)],
        );
        let shown_lines = lines(
            (&rows, &config.metrics),
            &busy,
            &["/a".into()],
            &[None],
            1.0,
        );
        let shown: Vec<(&str, &Shown, &str)> = shown_lines
            .iter()
            .map(|l| (l.event.as_str(), &l.shown, l.note.as_str()))
            .collect();
        assert_eq!(
            shown[2],
            ("per_ms", &Shown::Metric(3.0), "# cs / (task-clock * 1000)")
        );
        assert_eq!(shown[3], ("neg", &Shown::Metric(-1500.0), "# minus"));
        // duration_time is the period's: 1,500 switches in 1 s.
        assert_eq!(shown[4].1, &Shown::Metric(1500.0));
        let half = lines(
            (&rows, &config.metrics),
            &busy,
            &["/a".into()],
            &[None],
            0.5,
        );
        assert_eq!(half[4].shown, Shown::Metric(3000.0));
        let mut out = Vec::new();
        write_lines(&mut out, "", &shown_lines).expect("written");
        let out = String::from_utf8(out).expect("text");
        assert!(out.contains("-1,500.00 "), "{out}");
        let idle = counts(
            &[
                ("sched", "task-clock", 0.0, true),
                ("sched", "context-switches", 0.0, false),
            ],
            &[("sched", 1.0, 1.0)],
        );
        let idle_lines = lines(
            (&rows, &config.metrics),
            &idle,
            &["/a".into()],
            &[None],
            1.0,
        );
        assert_eq!(idle_lines[2].shown, Shown::NoValue);
        assert_eq!(idle_lines[3].shown, Shown::Metric(0.0));
        assert_eq!(idle_lines[4].shown, Shown::Metric(0.0));
        // A cgroup that counts none of a metric's inputs shows no line.
        let other = counts(&[], &[]);
        let none = lines((&[], &config.metrics), &other, &["/a".into()], &[None], 1.0);
        assert!(none.is_empty(), "{none:?}");
    }

    #[test]
    fn a_constant_metric_and_one_the_machine_cannot_count_are_shown_as_the_others() {
        let config = crate::config::parse(
            "t",
            "groups:\n  sched: [cs]\n  hw: [instructions, cycles]\nmetrics:\n\
             \x20 - {name: two, expr: 2}\n\
             \x20 - {name: ipc, expr: instructions / cycles}\n\
             \x20 - {name: per_s, expr: cs / (duration_time / 1e9)}\n",
        )
        .expect("valid");
        let unsupported = |event: &str| Row {
            support: Err("no PMU".into()),
            ..row("hw", event)
        };
        let rows = [
            row("sched", "context-switches"),
            unsupported("instructions"),
            unsupported("cycles"),
        ];
        let busy = counts(
            &[("sched", "context-switches", 10.0, false)],
            &[("sched", 1.0, 1.0)],
        );
        let shown = lines(
            (&rows, &config.metrics),
            &busy,
            &["/a".into()],
            &[None],
            2.0,
        );
        let metrics: Vec<(&str, &Shown)> = shown
            .iter()
            .skip(3)
            .map(|l| (l.event.as_str(), &l.shown))
            .collect();
        assert_eq!(
            metrics,
            [
                ("two", &Shown::Metric(2.0)),
                ("ipc", &Shown::NoValue),
                ("per_s", &Shown::Metric(5.0))
            ],
            "{shown:?}"
        );
        // Where the machine counts them but this cgroup does not, no line.
        let counted = [row("sched", "context-switches"), row("hw", "instructions")];
        let shown = lines(
            (&counted, &config.metrics),
            &busy,
            &["/a".into()],
            &[None],
            2.0,
        );
        assert!(!shown.iter().any(|l| l.event == "ipc"), "{shown:?}");
    }
}
