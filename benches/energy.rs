//! Cost of energy attribution per interval at 10,000 cgroups: the model
//! meter read (`/proc/stat`) and its energy shared among the cgroups by
//! what each did on each socket, down their tree, into their series
//! (`Account::read` and `Account::show`, as the engine calls them at each
//! collection). The cgroups are a Kubernetes node's: 2,000 pods of 4
//! containers each, every one busy on every CPU in every interval (the
//! worst case: no cgroup's share is 0).
//!
//! Measured at this machine's CPUs and at 128 (a large node). The
//! snapshot gives each cgroup's activity summed per socket, which the
//! engine sums from its per-CPU totals as it makes the snapshot
//! ([`Sockets::sum`]): that summing is measured too, apart, since it is
//! the one step whose cost grows with the CPUs. The reference in the same
//! run is the OpenMetrics exposition of the same cgroups' energy series,
//! which every scrape does. Besides criterion's wall time, it prints the
//! thread's CPU time per interval over 50 intervals of each (the target
//! is CPU time: on a shared machine wall time counts other programs'
//! turns too).
//!
//! Run: `cargo bench --bench energy`.

use cgperf::backend::budget::Fds;
use cgperf::config::{EnergyDef, IdlePolicy, MeterChoice, ModelScope, PowerModel};
use cgperf::energy::Account;
use cgperf::exporter::prometheus::Exposition;
use cgperf::host::Sockets;
use cgperf::plan::EnergyPlan;
use cgperf::snapshot::{CgroupActivity, Labels, Latest, Snapshot};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use std::time::SystemTime;

const PODS: usize = 2_000;
const CONTAINERS: usize = 4;
/// Pods and their containers: 10,000 counted cgroups.
const CGROUPS: usize = PODS * (CONTAINERS + 1);

fn account() -> Account {
    let plan = EnergyPlan {
        def: EnergyDef {
            meter: MeterChoice::Model,
            model: Some(PowerModel {
                per: ModelScope::Socket,
                idle_milliwatts: 40_000,
                max_milliwatts: 180_000,
            }),
            idle: IdlePolicy::Model,
        },
        weight: Some("cycles"),
        // No system-wide counters: what is measured is the attribution.
        weight_attr: None,
    };
    Account::new(plan, Default::default(), Fds::unbounded())
}

/// The counted cgroups, in path order as the engine keeps them: each
/// one's path and labels, made once and shared by every interval's
/// activity (as the engine's entries share theirs).
fn cgroups() -> Vec<(Arc<str>, Labels)> {
    let labels = |pod: usize, container: Option<usize>| -> Labels {
        let mut l = vec![
            ("namespace", "bench".into()),
            ("pod", format!("pod-{pod:04}").into()),
        ];
        if let Some(c) = container {
            l.push(("container", format!("c{c}").into()));
        }
        Arc::from(l)
    };
    let mut out = Vec::with_capacity(CGROUPS);
    for pod in 0..PODS {
        let path = format!("/kubepods/burstable/pod{pod:04}");
        out.push((path.as_str().into(), labels(pod, None)));
        for c in 0..CONTAINERS {
            out.push((format!("{path}/{c:064x}").into(), labels(pod, Some(c))));
        }
    }
    out
}

/// What `cgroups` counted on each of `cpus` CPUs after `interval`
/// intervals, as the engine's totals hold it: every cgroup grows on every
/// CPU, a pod by its containers' growth and a little of its own.
fn per_cpu(cgroups: &[(Arc<str>, Labels)], cpus: u32, interval: u64) -> Vec<Vec<(u32, f64)>> {
    let total =
        |seed: usize, cpu: u32| ((interval + 1) * (1_000 + seed as u64) * (cpu as u64 + 1)) as f64;
    (0..cgroups.len())
        .map(|i| {
            let (pod, container) = (i / (CONTAINERS + 1), i % (CONTAINERS + 1));
            (0..cpus)
                .map(|cpu| {
                    let value = match container {
                        0 => {
                            (0..CONTAINERS)
                                .map(|c| total(pod * 8 + c, cpu))
                                .sum::<f64>()
                                + total(pod, cpu)
                        }
                        c => total(pod * 8 + c - 1, cpu),
                    };
                    (cpu, value)
                })
                .collect()
        })
        .collect()
}

/// The activity of `cgroups` from their totals per CPU, summed per socket
/// as the engine sums them.
fn activity(
    cgroups: &[(Arc<str>, Labels)],
    per_cpu: &[Vec<(u32, f64)>],
    sockets: &mut Sockets,
) -> Vec<CgroupActivity> {
    cgroups
        .iter()
        .zip(per_cpu)
        .map(|((path, labels), cpus)| CgroupActivity {
            cgroup: path.clone(),
            labels: labels.clone(),
            start_time: SystemTime::UNIX_EPOCH,
            sockets: sockets.sum(cpus.iter().copied()),
        })
        .collect()
}

/// This thread's CPU time, in seconds.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into the local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The thread's CPU time per call of `f` over `n` calls, each on what
/// `prepare` made (untimed, and dropped untimed).
fn cpu_per_call<T>(n: u32, mut prepare: impl FnMut() -> T, mut f: impl FnMut(&mut T)) -> f64 {
    let mut spent = 0.0;
    for _ in 0..n {
        let mut input = prepare();
        let start = cpu_seconds();
        f(&mut input);
        spent += cpu_seconds() - start;
    }
    spent / f64::from(n)
}

/// A snapshot of `cgroups`' activity after `interval` intervals.
fn snapshot(cgroups: &[(Arc<str>, Labels)], cpus: u32, interval: u64) -> Snapshot {
    let mut snap = Snapshot::empty();
    let mut sockets = Sockets::new(std::path::Path::new(cgperf::host::CPU_ROOT));
    snap.activity = activity(cgroups, &per_cpu(cgroups, cpus, interval), &mut sockets);
    snap.activity_weight = "cycles";
    snap
}

/// One interval of attribution, as the engine does it.
fn attribute(account: &mut Account, snap: &mut Snapshot) {
    account.read();
    account.show(snap);
}

fn bench(c: &mut Criterion) {
    let online = cgperf::cpus::online().map_or(2, |cpus| cpus.len() as u32);
    let mut group = c.benchmark_group("energy attribution per interval, 10,000 cgroups");
    group.sample_size(20);
    group.throughput(Throughput::Elements(CGROUPS as u64));
    let cgroups = cgroups();
    for cpus in [online, 128] {
        // Two intervals first: the meter started, every cgroup known.
        let mut account = account();
        let mut interval = 0u64;
        let mut next = || {
            interval += 1;
            snapshot(&cgroups, cpus, interval)
        };
        for _ in 0..2 {
            attribute(&mut account, &mut next());
        }
        let attribution = cpu_per_call(50, &mut next, |snap| attribute(&mut account, snap));
        // The engine's part: each cgroup's totals per CPU summed per socket.
        let mut sockets = Sockets::new(std::path::Path::new(cgperf::host::CPU_ROOT));
        let totals = per_cpu(&cgroups, cpus, 3);
        let summing = cpu_per_call(
            50,
            || (),
            |()| {
                black_box(activity(&cgroups, &totals, &mut sockets));
            },
        );
        group.bench_function(format!("attribution, {cpus} CPUs"), |b| {
            b.iter_batched_ref(
                &mut next,
                |snap| attribute(&mut account, snap),
                BatchSize::LargeInput,
            )
        });
        // The reference: exposing what it made.
        let mut snap = next();
        attribute(&mut account, &mut snap);
        assert_eq!(snap.energy.len(), CGROUPS, "every cgroup has a share");
        let latest = Latest::new();
        latest.publish(snap);
        let exposition = Exposition::new(latest);
        let reference = cpu_per_call(
            50,
            || (),
            |()| {
                black_box(exposition.openmetrics()).ok();
            },
        );
        eprintln!(
            "{CGROUPS} cgroups x {cpus} CPUs: attribution {:.3} ms of CPU per interval, \
             exposition of their series {:.3} ms: ratio {:.2}; the engine's summing per \
             socket {:.3} ms: ratio {:.2}",
            attribution * 1e3,
            reference * 1e3,
            attribution / reference,
            summing * 1e3,
            summing / reference
        );
        group.bench_function(format!("exposition of their series, {cpus} CPUs"), |b| {
            b.iter(|| black_box(exposition.openmetrics()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
