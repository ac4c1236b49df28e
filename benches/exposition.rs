//! Cost of rendering `/metrics` for 10,000 counter series, in both formats.
//!
//! Run: `cargo bench --bench exposition`.

use cgperf::exporter::prometheus::Exposition;
use cgperf::snapshot::{CounterSample, GroupTimeSample, Latest, SeriesKey, Snapshot};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;

/// 2,500 cgroups × one group of 4 events: 10,000 counter series.
fn snapshot() -> Snapshot {
    let mut snap = Snapshot::empty();
    let group: Arc<str> = "sched".into();
    let events: Vec<Arc<str>> = [
        "task-clock",
        "context-switches",
        "cpu-migrations",
        "page-faults",
    ]
    .into_iter()
    .map(Arc::from)
    .collect();
    for i in 0..2_500 {
        let cgroup: Arc<str> =
            format!("/kubepods.slice/kubepods-burstable.slice/pod{i:05}.slice").into();
        for (j, event) in events.iter().enumerate() {
            snap.counters.push(CounterSample::new(
                SeriesKey {
                    fields: Box::new([]),
                    cgroup: cgroup.clone(),
                    labels: Arc::from(Vec::new()),
                    group: group.clone(),
                    event: event.clone(),
                    cpu: None,
                    clock: j == 0,
                    start_time: snap.taken_at,
                },
                (i * 1000 + j) as f64 * 1.5,
            ));
        }
        snap.group_times.push(GroupTimeSample {
            cgroup,
            labels: Arc::from(Vec::new()),
            group: group.clone(),
            cpu: None,
            enabled_seconds: 12.5,
            running_seconds: 12.5,
            never_ran_intervals: 0,
            start_time: snap.taken_at,
        });
    }
    snap
}

fn bench(c: &mut Criterion) {
    let latest = Latest::new();
    latest.publish(snapshot());
    let exposition = Exposition::new(latest);
    let mut group = c.benchmark_group("exposition of 10k series");
    group.throughput(Throughput::Elements(10_000));
    group.bench_function("openmetrics", |b| {
        b.iter(|| black_box(exposition.openmetrics()))
    });
    group.bench_function("prometheus text 0.0.4", |b| {
        b.iter(|| black_box(exposition.prometheus_text()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
