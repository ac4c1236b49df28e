//! cAdvisor's perf metric families, shown beside cgperf's own with
//! `--compat=cadvisor`, so that dashboards and alerts written for cAdvisor's
//! perf support (`container_perf_events_total`,
//! `container_perf_events_scaling_ratio`) work unchanged on cgperf.
//!
//! Names, types, help texts and labels are cAdvisor's as the kubelet serves
//! them on `/metrics/cadvisor`: the container labels `container`, `id` (the
//! cgroup path), `image`, `name`, `namespace` and `pod`, then `cpu` (empty
//! unless per-CPU output is on, as cAdvisor without per-CPU metrics) and
//! `event`, the event as the config wrote it (`cs` stays `cs`, where
//! cgperf's own families say `context-switches`), as cAdvisor's is the
//! name its perf config gives. The values are cgperf's: totals scaled per interval, which
//! never go down (cAdvisor scales its lifetime totals by the lifetime
//! ratio, so a total drops when multiplexing starts late). The scaling
//! ratio is running/enabled over the series' life, 1 when either is 0, as
//! cAdvisor computes it; without per-CPU output it is that of the sum over
//! CPUs, where cAdvisor shows the lowest CPU's.

use super::families::{Family, Kind, Labels, Point, Unit, Visitor};
use crate::cri;
use crate::labels::CONTAINER_ID;
use crate::snapshot::{Labels as PathLabels, Snapshot};
use std::collections::HashMap;
use std::time::SystemTime;

/// Other exporters' metric families `/metrics` can show as well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Compat {
    /// cAdvisor's `container_perf_events_total` and
    /// `container_perf_events_scaling_ratio`.
    Cadvisor,
}

/// `container_perf_events_total`.
pub const EVENTS: Family = Family {
    name: "container_perf_events",
    help: "Perf event metric.",
    unit: Unit::Count("{event}"),
    kind: Kind::Counter,
};

/// `container_perf_events_scaling_ratio`.
pub const SCALING_RATIO: Family = Family {
    name: "container_perf_events_scaling_ratio",
    help: "Perf event metric scaling ratio.",
    unit: Unit::Count("1"),
    kind: Kind::Gauge,
};

/// One series as cAdvisor names it.
struct Series<'a> {
    labels: Labels<'a>,
    /// cgperf's group, so that the `by:` splits of one entry add up and
    /// an event counted in two groups is shown once (the first group's).
    group: &'a str,
    value: f64,
    ratio: f64,
    start: SystemTime,
}

/// Shows cAdvisor's perf families of `snap`.
pub fn visit<V: Visitor>(snap: &Snapshot, v: &mut V) -> Result<(), V::Error> {
    let series = series(snap);
    v.family(
        &EVENTS,
        series.iter().map(|s| Point {
            labels: s.labels,
            value: s.value,
            start: Some(s.start),
        }),
    )?;
    v.family(
        &SCALING_RATIO,
        series.iter().map(|s| Point::fixed(s.labels, s.ratio)),
    )
}

/// Every counted event of every cgroup (and CPU), once: clocks in
/// nanoseconds, as perf counts them and cAdvisor shows them; each event
/// named as the config wrote it (`cs`, where cgperf's own families say
/// `context-switches`), as cAdvisor names the events of its perf config.
fn series(snap: &Snapshot) -> Vec<Series<'_>> {
    let times: HashMap<(&str, &str, Option<u32>), (f64, f64)> = snap
        .group_times
        .iter()
        .map(|t| {
            let key = (&*t.cgroup, &*t.group, t.cpu);
            (key, (t.enabled_seconds, t.running_seconds))
        })
        .collect();
    let written: HashMap<(&str, &str), &str> = snap
        .spellings
        .iter()
        .map(|s| ((&*s.group, &*s.event), &*s.written))
        .collect();
    let mut at: HashMap<(&str, Option<u32>, &str), usize> = HashMap::new();
    let mut out: Vec<Series<'_>> = Vec::with_capacity(snap.counters.len());
    for c in &snap.counters {
        let value = if c.clock { c.value * 1e9 } else { c.value };
        let key = (&*c.cgroup, c.cpu, &*c.event);
        if let Some(&i) = at.get(&key) {
            if out[i].group == &*c.group {
                out[i].value += value;
            }
            continue;
        }
        let ratio = match times.get(&(&*c.cgroup, &*c.group, c.cpu)) {
            Some(&(enabled, running)) if enabled > 0.0 && running > 0.0 => running / enabled,
            _ => 1.0,
        };
        at.insert(key, out.len());
        out.push(Series {
            labels: Labels::Cadvisor {
                id: &c.cgroup,
                name: label(&c.labels, CONTAINER_ID),
                image: label(&c.labels, cri::IMAGE),
                container: label(&c.labels, cri::CONTAINER),
                pod: label(&c.labels, cri::POD),
                namespace: label(&c.labels, cri::NAMESPACE),
                cpu: c.cpu,
                event: written
                    .get(&(&*c.group, &*c.event))
                    .copied()
                    .unwrap_or(&c.event),
            },
            group: &c.group,
            value,
            ratio,
            start: c.start_time,
        });
    }
    out
}

/// The value of the path label `name`, empty when the cgroup has none (as
/// cAdvisor shows a label it does not know).
fn label<'a>(labels: &'a PathLabels, name: &str) -> &'a str {
    labels
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exporter::prometheus::Exposition;
    use crate::snapshot::{CounterSample, GroupTimeSample, Latest, SeriesKey, Spelling};
    use std::sync::Arc;

    /// A container counted in two groups (one event in both), a clock, a
    /// `by:` tracepoint split two ways, and a group that never ran.
    fn snapshot(cpu: Option<u32>) -> Snapshot {
        let mut snap = Snapshot::empty();
        let cgroup: Arc<str> = "/kubepods/pod1/c0ffee".into();
        let labels: PathLabels = Arc::from(vec![
            ("pod_uid", Box::from("1")),
            (CONTAINER_ID, Box::from("c0ffee")),
            (cri::POD, Box::from("web-0")),
            (cri::NAMESPACE, Box::from("shop")),
            (cri::CONTAINER, Box::from("nginx")),
            (cri::IMAGE, Box::from("nginx:1.27")),
        ]);
        let key = |group: &str, event: &str, clock: bool| SeriesKey {
            cgroup: cgroup.clone(),
            labels: labels.clone(),
            group: group.into(),
            event: event.into(),
            fields: Box::new([]),
            cpu,
            clock,
            start_time: snap.taken_at,
        };
        let split = |id: &str| SeriesKey {
            fields: Box::new([("id".into(), id.into())]),
            ..key("tracepoints", "syscalls", false)
        };
        for (k, v) in [
            (key("sched", "task-clock", true), 1.5),
            (key("sched", "context-switches", false), 40.0),
            (key("other", "context-switches", false), 41.0),
            (key("idle", "page-faults", false), 0.0),
            (split("0"), 3.0),
            (split("110"), 4.0),
        ] {
            snap.counters.push(CounterSample::new(k, v));
        }
        snap.spellings = Arc::new([Spelling {
            group: "sched".into(),
            event: "context-switches".into(),
            written: "cs".into(),
        }]);
        for (group, enabled, running) in [("sched", 2.0, 0.5), ("idle", 2.0, 0.0)] {
            snap.group_times.push(GroupTimeSample {
                cgroup: cgroup.clone(),
                labels: labels.clone(),
                group: group.into(),
                cpu,
                enabled_seconds: enabled,
                running_seconds: running,
                never_ran_intervals: 0,
                start_time: snap.taken_at,
            });
        }
        snap
    }

    fn text(snap: Snapshot, compat: &[Compat]) -> String {
        let latest = Latest::new();
        latest.publish(snap);
        Exposition::with_self_metrics(latest, Vec::new(), compat)
            .prometheus_text()
            .expect("encodes")
    }

    /// The lines of `family` in `text`.
    fn family<'a>(text: &'a str, family: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| {
                l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("# TYPE {family} "))
            })
            .collect()
    }

    #[test]
    fn cadvisors_families_with_its_labels_clocks_in_nanoseconds_each_event_once_as_written() {
        let text = text(snapshot(None), &[Compat::Cadvisor]);
        let labels = |event: &str| {
            format!(
                "{{container=\"nginx\",cpu=\"\",event=\"{event}\",id=\"/kubepods/pod1/c0ffee\",\
                 image=\"nginx:1.27\",name=\"c0ffee\",namespace=\"shop\",pod=\"web-0\"}}"
            )
        };
        let line =
            |name: &str, event: &str, value: &str| format!("{name}{} {value}", labels(event));
        let rows = [
            ("task-clock", "1500000000.0", "0.25"),
            ("cs", "40.0", "0.25"),
            ("page-faults", "0.0", "1.0"),
            ("syscalls", "7.0", "1.0"),
        ];
        for (name, kind, help, column) in [
            (
                "container_perf_events_total",
                "counter",
                "Perf event metric.",
                1,
            ),
            (
                "container_perf_events_scaling_ratio",
                "gauge",
                "Perf event metric scaling ratio.",
                2,
            ),
        ] {
            let mut want = vec![format!("# TYPE {name} {kind}")];
            want.extend(rows.iter().map(|row| {
                let value = if column == 1 { row.1 } else { row.2 };
                line(name, row.0, value)
            }));
            assert_eq!(family(&text, name), want, "{text}");
            assert!(text.contains(&format!("# HELP {name} {help}\n")), "{text}");
        }
    }

    #[test]
    fn per_cpu_output_names_the_cpu_and_without_compat_nothing_is_added() {
        let text = text(snapshot(Some(3)), &[Compat::Cadvisor]);
        assert!(
            family(&text, "container_perf_events_total")
                .iter()
                .skip(1)
                .all(|l| l.contains(",cpu=\"3\",")),
            "{text}"
        );
        let plain = super::tests::text(snapshot(None), &[]);
        assert!(!plain.contains("container_perf"), "{plain}");
        assert!(plain.contains("cgperf_events_total{"), "{plain}");
    }
}
