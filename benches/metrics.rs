//! Cost of computing metrics: 1,000 cgroups × the four top-down level-1
//! fractions, written as perf writes them (`topdown\-fe\-bound / (...)`),
//! one interval's values from the inputs' totals, as the engine computes
//! them at each snapshot. The same arithmetic written out in Rust is
//! measured in the same run as the reference.
//!
//! Run: `cargo bench --bench metrics`.

use cgperf::metrics::{Expr, LastTotals, MetricDef, MetricInput};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;

const CGROUPS: usize = 1_000;
const EVENTS: [&str; 5] = [
    "slots",
    "topdown-fe-bound",
    "topdown-bad-spec",
    "topdown-retiring",
    "topdown-be-bound",
];

fn metric(name: &str, part: &str) -> Arc<MetricDef> {
    let formula = format!(
        "{part} / (topdown\\-fe\\-bound + topdown\\-bad\\-spec + topdown\\-retiring + \
         topdown\\-be\\-bound) + 0 * slots"
    );
    let expr = Expr::parse(&formula).expect("parses");
    let inputs = expr
        .names()
        .iter()
        .map(|n| MetricInput {
            group: "topdown".into(),
            event: n.as_str().into(),
        })
        .collect();
    Arc::new(MetricDef {
        name: name.into(),
        entry: name.into(),
        description: formula.clone(),
        formula,
        expr,
        inputs,
        unit: "ratio".into(),
    })
}

/// Totals of cgroup `c` at interval `t`.
fn total(c: usize, t: u64, event: &str) -> f64 {
    let at = EVENTS.iter().position(|e| *e == event).unwrap_or(0) as u64;
    ((t + 1) * (1_000 + c as u64) * (at + 1)) as f64
}

fn bench(c: &mut Criterion) {
    let metrics = [
        metric("tma_frontend_bound", "topdown\\-fe\\-bound"),
        metric("tma_bad_speculation", "topdown\\-bad\\-spec"),
        metric("tma_retiring", "topdown\\-retiring"),
        metric("tma_backend_bound", "topdown\\-be\\-bound"),
    ];
    let mut g = c.benchmark_group("metrics");
    g.throughput(Throughput::Elements((CGROUPS * metrics.len()) as u64));
    let mut last = vec![LastTotals::default(); CGROUPS];
    let mut t = 0;
    g.bench_function("tma_level1_1000_cgroups", |b| {
        b.iter(|| {
            t += 1;
            let mut n = 0;
            for (cgroup, last) in last.iter_mut().enumerate() {
                let values = last.next(&metrics, |input| Some(total(cgroup, t, &input.event)));
                n += values.len();
            }
            black_box(n)
        })
    });
    // The reference: the same growth and fractions, written out.
    let mut last = vec![[0.0f64; 5]; CGROUPS];
    let mut t = 0;
    g.bench_function("written_out_1000_cgroups", |b| {
        b.iter(|| {
            t += 1;
            let mut sum = 0.0;
            for (cgroup, last) in last.iter_mut().enumerate() {
                let mut grown = [0.0; 5];
                for (i, event) in EVENTS.iter().enumerate() {
                    let now = total(cgroup, t, event);
                    grown[i] = now - last[i];
                    last[i] = now;
                }
                let all = grown[1] + grown[2] + grown[3] + grown[4];
                for part in &grown[1..] {
                    sum += part / all + 0.0 * grown[0];
                }
            }
            black_box(sum)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
