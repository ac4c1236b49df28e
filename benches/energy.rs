//! What `energy:` adds to each collection at 10,000 cgroups: the engine's
//! summing of each cgroup's weight per socket as it makes the snapshot,
//! the model meter read (`/proc/stat`), the meter's energy shared among
//! the cgroups down their tree into their series (`Account::read` and
//! `Account::show`, as the engine calls them), and the dropping of all
//! that when the next snapshot replaces it. The cgroups are a Kubernetes
//! node's: 2,000 pods of 4 containers each.
//!
//! Two figures, each the thread's CPU time per interval over 50 intervals
//! (the target is CPU time: on a shared machine wall time counts other
//! programs' turns too):
//!
//! - **attribution**: `Account::read` and `Account::show` on a snapshot
//!   whose activity is made beforehand (untimed), every cgroup busy on
//!   every CPU (no share is 0), and the drop of that snapshot; against the
//!   OpenMetrics exposition of the same cgroups' energy series, which every
//!   scrape does. Also when one cgroup is replaced in every interval (a pod
//!   restarts: the list of cgroups and their tree are made anew).
//! - **all of it**: the engine's pass that makes the cgroups' series from
//!   their totals (one group of `cycles` and `instructions` per cgroup and
//!   CPU), with the sums per socket, the snapshot's activity, attribution
//!   and the drop, less the same pass without any of it, on the same
//!   changes, in turn first. When every cgroup's totals change on every
//!   CPU in every interval (the worst case) and when one cgroup in ten
//!   counts something in an interval; on this machine's sockets (a CPU it
//!   does not have is on socket 0: one socket at 128 CPUs on a one-socket
//!   machine), and at 128 CPUs on two sockets whose CPUs alternate (even
//!   on one, odd on the other), which every value must be told apart for.
//!
//! Measured at this machine's CPUs and at 128 (a large node). Criterion's
//! wall time is measured too.
//!
//! Run: `cargo bench --bench energy`.

use cgperf::backend::budget::Fds;
use cgperf::config::{EnergyDef, IdlePolicy, MeterChoice, ModelScope, PowerModel};
use cgperf::energy::Account;
use cgperf::exporter::prometheus::Exposition;
use cgperf::host::{SocketSums, Sockets};
use cgperf::ids::{CgroupSlot, EventId, GroupId};
use cgperf::plan::EnergyPlan;
use cgperf::snapshot::{Activity, Labels, Latest, Snapshot, Weighed};
use cgperf::totals::{GroupKey, GroupTimes, GroupTotals, Handle, Totals, exported_total};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashSet;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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

/// A counted cgroup as the engine keeps it: its path and labels, made
/// once and shared by every interval's activity.
struct Counted {
    path: Arc<str>,
    labels: Labels,
    start: SystemTime,
}

/// The counted cgroups, in path order as the engine keeps them.
fn cgroups() -> Vec<Counted> {
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
        let counted = |path: String, labels| Counted {
            path: path.into(),
            labels,
            start: SystemTime::UNIX_EPOCH,
        };
        out.push(counted(path.clone(), labels(pod, None)));
        for c in 0..CONTAINERS {
            out.push(counted(format!("{path}/{c:064x}"), labels(pod, Some(c))));
        }
    }
    out
}

/// What `cgroups` counted on each of `cpus` CPUs after `interval`
/// intervals: every cgroup grows on every CPU, a pod by its containers'
/// growth and a little of its own.
fn per_cpu(cgroups: usize, cpus: u32, interval: u64) -> Vec<Vec<(u32, f64)>> {
    let total =
        |seed: usize, cpu: u32| ((interval + 1) * (1_000 + seed as u64) * (cpu as u64 + 1)) as f64;
    (0..cgroups)
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

/// A snapshot of `cgroups`' activity after `interval` intervals, summed
/// per socket as the engine sums it, its list of cgroups shared with
/// `last` (the last interval's) where the cgroups are the same.
fn snapshot(cgroups: &[Counted], cpus: u32, interval: u64, last: &mut Arc<[Weighed]>) -> Snapshot {
    let mut sockets = Sockets::new(Path::new(cgperf::host::CPU_ROOT));
    let mut activity = Activity::after(last);
    let mut sums = SocketSums::new();
    for (c, values) in cgroups.iter().zip(per_cpu(cgroups.len(), cpus, interval)) {
        sockets.weigh(&values, |v| *v, false, &mut sums);
        activity.push(&c.path, &c.labels, c.start, &sums);
    }
    let mut snap = Snapshot::empty();
    snap.activity = activity.finish();
    snap.activity_weight = "cycles";
    last.clone_from(snap.activity.cgroups());
    snap
}

/// One interval of attribution, as the engine does it, and the drop of
/// what it made when the next snapshot replaces it.
fn attribute(account: &mut Account, mut snap: Snapshot) {
    account.read();
    account.show(&mut snap);
    drop(snap);
}

/// The engine's totals of `cgroups` on `cpus` CPUs: one group of
/// `cycles` and `instructions` per cgroup and CPU, as the backends add to
/// them.
struct Engine {
    totals: Totals,
    group: GroupId,
    events: [EventId; 2],
    /// Per cgroup, its handle and columns on each CPU.
    handles: Vec<Vec<(Handle, Vec<usize>)>>,
    sockets: Sockets,
    /// Per cgroup, its sums per socket as the last interval showed them.
    shown: Vec<SocketSums>,
    /// The last snapshot's cgroups.
    last: Arc<[Weighed]>,
    account: Account,
}

impl Engine {
    /// With the sockets of the CPUs under `cpu_root`.
    fn new(cgroups: usize, cpus: u32, cpu_root: &Path) -> Self {
        let group = GroupId::Named("bench".into());
        let events = ["cycles", "instructions"].map(|label| EventId {
            label: label.into(),
            clock: false,
        });
        let mut totals = Totals::default();
        let handles = (0..cgroups)
            .map(|c| {
                (0..cpus)
                    .map(|cpu| {
                        let key = GroupKey {
                            cgroup: CgroupSlot(c as u64),
                            group: group.clone(),
                            cpu,
                        };
                        let handle = totals.group(&key);
                        let columns = totals.columns(handle, &events);
                        (handle, columns)
                    })
                    .collect()
            })
            .collect();
        Self {
            totals,
            group,
            events,
            handles,
            sockets: Sockets::new(cpu_root),
            shown: vec![SocketSums::new(); cgroups],
            last: Arc::from([]),
            account: account(),
        }
    }

    /// One interval read: every `every`-th cgroup (from `first`) counts
    /// on every CPU.
    fn count(&mut self, first: usize, every: usize) {
        for c in (first..self.handles.len()).step_by(every) {
            for (cpu, (handle, columns)) in self.handles[c].iter().enumerate() {
                self.totals.add(*handle, columns, |d| {
                    d.enabled_ns = 10_000_000;
                    d.running_ns = 10_000_000;
                    d.values.clear();
                    d.values
                        .extend([Some(1_000 + (c + cpu) as u64), Some(3_000 + c as u64)]);
                });
            }
        }
    }

    /// The series pass over the cgroups whose totals changed, as the
    /// engine makes their series; with `energy`, their sums per socket in
    /// it, the snapshot's activity of every cgroup, its attribution and
    /// its drop.
    fn interval(&mut self, cgroups: &[Counted], changed: &HashSet<CgroupSlot>, energy: bool) {
        let Self {
            totals,
            group,
            events,
            sockets,
            shown,
            last,
            account,
            ..
        } = self;
        let totals: &Totals = totals;
        // Reused for every cgroup, as the series pass reuses it.
        let mut parts: Vec<(u32, &GroupTotals)> = Vec::new();
        let mut activity = energy.then(|| Activity::after(last));
        for (c, counted) in cgroups.iter().enumerate() {
            let slot = CgroupSlot(c as u64);
            if changed.contains(&slot) {
                parts.clear();
                parts.extend(totals.per_cpu(slot, group));
                let mut rest = 0;
                if energy {
                    // The weight's totals summed per socket and in all (its
                    // series) in the pass that reads them.
                    let weight = &events[0];
                    let value = |t: &&GroupTotals| t.value_at(0, &weight.label, weight.clock);
                    let total = sockets.weigh(&parts, value, weight.clock, &mut shown[c]);
                    black_box(total);
                    rest = 1;
                }
                for (i, event) in events.iter().enumerate().skip(rest) {
                    black_box(exported_total(
                        parts.iter().map(|&(_, t)| t),
                        i,
                        &event.label,
                        event.clock,
                    ));
                }
                black_box(GroupTimes::of(parts.iter().map(|&(_, t)| t)));
            }
            if let Some(activity) = &mut activity {
                activity.push(&counted.path, &counted.labels, counted.start, &shown[c]);
            }
        }
        if let Some(activity) = activity {
            let mut snap = Snapshot::empty();
            snap.activity = activity.finish();
            snap.activity_weight = "cycles";
            last.clone_from(snap.activity.cgroups());
            attribute(account, snap);
        }
    }
}

/// Intervals each figure is measured over: 50 under `cargo bench`; 2 when
/// `cargo test` runs the bench once to see that it works (the test suite's
/// debug build took 90 s for 50).
fn rounds() -> u32 {
    match std::env::args().any(|a| a == "--bench") {
        true => 50,
        false => 2,
    }
}

/// The thread's CPU time per interval of all `energy:` adds, over
/// [`rounds`] intervals in which every `every`-th cgroup counts: (the pass
/// with energy less the same pass without, the latter). Both run on each
/// interval's changes, in turn first.
fn all_of_it(cgroups: &[Counted], cpus: u32, cpu_root: &Path, every: usize) -> (f64, f64) {
    let mut engine = Engine::new(cgroups.len(), cpus, cpu_root);
    // Two intervals first: the meter started, every cgroup known.
    for _ in 0..2 {
        engine.count(0, 1);
        let changed = engine.totals.take_changed();
        engine.interval(cgroups, &changed, true);
    }
    let (mut without, mut with) = (0.0, 0.0);
    for round in 0..rounds() as usize {
        engine.count(round % every, every);
        let changed = engine.totals.take_changed();
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for energy in order {
            let start = cpu_seconds();
            engine.interval(cgroups, &changed, energy);
            let spent = cpu_seconds() - start;
            if energy {
                with += spent;
            } else {
                without += spent;
            }
        }
    }
    let n = f64::from(rounds());
    ((with - without) / n, without / n)
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
/// `prepare` made (untimed).
fn cpu_per_call<T>(n: u32, mut prepare: impl FnMut() -> T, mut f: impl FnMut(T)) -> f64 {
    let mut spent = 0.0;
    for _ in 0..n {
        let input = prepare();
        let start = cpu_seconds();
        f(input);
        spent += cpu_seconds() - start;
    }
    spent / f64::from(n)
}

/// A CPU tree of `cpus` CPUs on two sockets, even CPUs on socket 0 and
/// odd ones on socket 1, as some two-socket machines number them: a
/// cgroup's values come from one socket and the other in turn.
fn alternate_sockets(cpus: u32) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temporary directory");
    for cpu in 0..cpus {
        let dir = root.path().join(format!("cpu{cpu}/topology"));
        std::fs::create_dir_all(&dir).expect("topology directory");
        std::fs::write(dir.join("physical_package_id"), format!("{}\n", cpu % 2))
            .expect("socket file");
    }
    root
}

fn bench(c: &mut Criterion) {
    let online = cgperf::cpus::online().map_or(2, |cpus| cpus.len() as u32);
    let mut group = c.benchmark_group("energy attribution per interval, 10,000 cgroups");
    group.sample_size(20);
    group.throughput(Throughput::Elements(CGROUPS as u64));
    let mut cgroups = cgroups();
    for cpus in [online, 128] {
        let mut account = account();
        let mut last = Arc::from([]);
        let mut interval = 0u64;
        let mut next = |cgroups: &[Counted]| {
            interval += 1;
            snapshot(cgroups, cpus, interval, &mut last)
        };
        // Two intervals first: the meter started, every cgroup known.
        for _ in 0..2 {
            attribute(&mut account, next(&cgroups));
        }
        let attribution = cpu_per_call(
            rounds(),
            || next(&cgroups),
            |snap| attribute(&mut account, snap),
        );
        // One container restarts in every interval: a cgroup of the same
        // path, started later.
        let mut restart = 0;
        let churn = cpu_per_call(
            rounds(),
            || {
                restart += 1;
                let at = 1 + (restart * 7919) % (CGROUPS - 1);
                let c = &mut cgroups[at];
                c.path = c.path.to_string().into();
                c.start += Duration::from_secs(1);
                next(&cgroups)
            },
            |snap| attribute(&mut account, snap),
        );
        group.bench_function(format!("attribution, {cpus} CPUs"), |b| {
            b.iter_batched(
                || next(&cgroups),
                |snap| attribute(&mut account, snap),
                BatchSize::LargeInput,
            )
        });
        // The reference: exposing what it made.
        let mut snap = next(&cgroups);
        account.read();
        account.show(&mut snap);
        assert_eq!(snap.energy.len(), CGROUPS, "every cgroup has a share");
        let latest = Latest::new();
        latest.publish(snap);
        let exposition = Exposition::new(latest);
        let reference = cpu_per_call(
            rounds(),
            || (),
            |()| {
                black_box(exposition.openmetrics()).ok();
            },
        );
        eprintln!(
            "{CGROUPS} cgroups x {cpus} CPUs: attribution {:.3} ms of CPU per interval \
             ({:.3} ms when a cgroup restarts in each), exposition of their series {:.3} ms: \
             ratio {:.2}",
            attribution * 1e3,
            churn * 1e3,
            reference * 1e3,
            attribution / reference,
        );
        // All of it, on this machine's sockets (a CPU it does not have is
        // on socket 0), and at 128 CPUs on two sockets numbered
        // alternately.
        let mut layouts = vec![("this machine's sockets", None)];
        if cpus == 128 {
            layouts.push(("two sockets, CPUs alternate", Some(alternate_sockets(cpus))));
        }
        for (layout, root) in &layouts {
            let root = root
                .as_ref()
                .map_or(Path::new(cgperf::host::CPU_ROOT), |r| r.path());
            for (what, every) in [("every cgroup counts", 1), ("one cgroup in ten counts", 10)] {
                let (added, pass) = all_of_it(&cgroups, cpus, root, every);
                eprintln!(
                    "  {layout}, {what}: energy adds {:.3} ms of CPU per interval to a series \
                     pass of {:.3} ms",
                    added * 1e3,
                    pass * 1e3,
                );
            }
        }
        group.bench_function(format!("exposition of their series, {cpus} CPUs"), |b| {
            b.iter(|| black_box(exposition.openmetrics()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
