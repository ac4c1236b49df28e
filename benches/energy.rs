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
//! engine sums from its per-CPU totals as it makes the snapshot: that
//! summing is measured too, apart, on real totals (one group of `cycles`
//! and `instructions` per cgroup and CPU), since it is the one step whose
//! cost grows with the CPUs. The engine sums a cgroup's weight per socket
//! in the pass that makes its series, in the loop that reads the weight's
//! totals for its series (`Sockets::weigh`, which gives their total too),
//! and only for the cgroups whose totals changed since the last interval
//! (the others show their last sums again): its cost is that pass with
//! the sums less the same pass without them (both walk the changed
//! cgroups' totals as the series pass does: `Totals::per_cpu`, each
//! event's total, the group's times). Measured when every cgroup's totals
//! change on every CPU in every interval (the worst case) and when one
//! cgroup in ten counts something in an interval (on every CPU); on this
//! machine's sockets (a CPU it does not have is on socket 0: one socket
//! at 128 CPUs on a one-socket machine), and at 128 CPUs on two sockets
//! whose CPUs alternate (even on one, odd on the other), which every
//! value must be told apart for. The summing as it was before, a walk of
//! every cgroup's totals per CPU apart from that pass, is measured in the
//! same run.
//!
//! The reference in the same run is the OpenMetrics exposition of the
//! same cgroups' energy series, which every scrape does. Besides
//! criterion's wall time, it prints the thread's CPU time per interval
//! over 50 intervals of each (the target is CPU time: on a shared machine
//! wall time counts other programs' turns too).
//!
//! Run: `cargo bench --bench energy`.

use cgperf::backend::budget::Fds;
use cgperf::config::{EnergyDef, IdlePolicy, MeterChoice, ModelScope, PowerModel};
use cgperf::energy::Account;
use cgperf::exporter::prometheus::Exposition;
use cgperf::host::Sockets;
use cgperf::ids::{CgroupSlot, EventId, GroupId};
use cgperf::plan::EnergyPlan;
use cgperf::snapshot::{CgroupActivity, Labels, Latest, Snapshot};
use cgperf::totals::{GroupKey, GroupTimes, GroupTotals, Handle, Totals, exported_total};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashSet;
use std::hint::black_box;
use std::path::Path;
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
            sockets: sockets.weigh(cpus.iter().copied(), false).1,
        })
        .collect()
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
    shown: Vec<Arc<[(u32, f64)]>>,
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
            shown: vec![Arc::from([]); cgroups],
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
    /// engine makes their series (with `sums`, their sums per socket too);
    /// with `sums`, the snapshot's activity of every cgroup.
    fn series(
        &mut self,
        cgroups: &[(Arc<str>, Labels)],
        changed: &HashSet<CgroupSlot>,
        sums: bool,
    ) -> Vec<CgroupActivity> {
        let Self {
            totals,
            group,
            events,
            sockets,
            shown,
            ..
        } = self;
        let totals: &Totals = totals;
        // Reused for every cgroup, as the series pass reuses it.
        let mut parts: Vec<(u32, &GroupTotals)> = Vec::new();
        let mut activity = Vec::with_capacity(if sums { cgroups.len() } else { 0 });
        for (c, (path, labels)) in cgroups.iter().enumerate() {
            let slot = CgroupSlot(c as u64);
            if changed.contains(&slot) {
                parts.clear();
                parts.extend(totals.per_cpu(slot, group));
                let mut rest = 0;
                if sums {
                    // The weight's totals summed per socket and in all (its
                    // series) in the pass that reads them.
                    let weight = &events[0];
                    let value = |&(cpu, t): &(u32, &GroupTotals)| {
                        (cpu, t.value_at(0, &weight.label, weight.clock))
                    };
                    let (total, summed) = sockets.weigh(parts.iter().map(value), weight.clock);
                    black_box(total);
                    shown[c] = summed;
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
            if sums {
                activity.push(CgroupActivity {
                    cgroup: path.clone(),
                    labels: labels.clone(),
                    start_time: SystemTime::UNIX_EPOCH,
                    sockets: shown[c].clone(),
                });
            }
        }
        activity
    }

    /// The summing as it was: every cgroup's totals per CPU walked apart
    /// from the series pass, and summed per socket.
    fn walk_all(&mut self, cgroups: &[(Arc<str>, Labels)]) -> Vec<CgroupActivity> {
        let label = &self.events[0].label;
        let mut per_cpu = Vec::new();
        cgroups
            .iter()
            .enumerate()
            .map(|(c, (path, labels))| CgroupActivity {
                cgroup: path.clone(),
                labels: labels.clone(),
                start_time: SystemTime::UNIX_EPOCH,
                sockets: {
                    let totals = self.totals.per_cpu(CgroupSlot(c as u64), &self.group);
                    per_cpu.clear();
                    per_cpu
                        .extend(totals.map(|(cpu, t)| (cpu, exported_total([t], 0, label, false))));
                    self.sockets.weigh(per_cpu.iter().copied(), false).1
                },
            })
            .collect()
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

/// The thread's CPU time per interval of the engine's summing per socket
/// over [`rounds`] intervals in which every `every`-th cgroup counts: (the series
/// pass with the sums less the same pass without them, the latter, the
/// walk of every cgroup as it was before). Both passes run on each
/// interval's changes, in turn first.
fn summing(
    cgroups: &[(Arc<str>, Labels)],
    cpus: u32,
    cpu_root: &Path,
    every: usize,
) -> (f64, f64, f64) {
    let mut engine = Engine::new(cgroups.len(), cpus, cpu_root);
    engine.count(0, 1);
    let changed = engine.totals.take_changed();
    engine.series(cgroups, &changed, true);
    let (mut without, mut with, mut before) = (0.0, 0.0, 0.0);
    let rounds = rounds();
    for round in 0..rounds as usize {
        engine.count(round % every, every);
        let changed = engine.totals.take_changed();
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for sums in order {
            let start = cpu_seconds();
            black_box(engine.series(cgroups, &changed, sums));
            let spent = cpu_seconds() - start;
            if sums {
                with += spent;
            } else {
                without += spent;
            }
        }
        let start = cpu_seconds();
        black_box(engine.walk_all(cgroups));
        before += cpu_seconds() - start;
    }
    let n = f64::from(rounds);
    ((with - without) / n, without / n, before / n)
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

/// A snapshot of `cgroups`' activity after `interval` intervals.
fn snapshot(cgroups: &[(Arc<str>, Labels)], cpus: u32, interval: u64) -> Snapshot {
    let mut snap = Snapshot::empty();
    let mut sockets = Sockets::new(Path::new(cgperf::host::CPU_ROOT));
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
        let attribution = cpu_per_call(rounds(), &mut next, |snap| attribute(&mut account, snap));
        // The engine's part: each cgroup's totals per CPU summed per
        // socket, on this machine's sockets (a CPU it does not have is on
        // socket 0), and at 128 CPUs on two sockets numbered alternately.
        let mut layouts = vec![("this machine's sockets", None)];
        if cpus == 128 {
            layouts.push(("two sockets, CPUs alternate", Some(alternate_sockets(cpus))));
        }
        let summed: Vec<_> = layouts
            .iter()
            .map(|(layout, root)| {
                let root = root
                    .as_ref()
                    .map_or(Path::new(cgperf::host::CPU_ROOT), |r| r.path());
                let worst = summing(&cgroups, cpus, root, 1);
                let some = summing(&cgroups, cpus, root, 10);
                (layout, worst, some)
            })
            .collect();
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
            rounds(),
            || (),
            |()| {
                black_box(exposition.openmetrics()).ok();
            },
        );
        eprintln!(
            "{CGROUPS} cgroups x {cpus} CPUs: attribution {:.3} ms of CPU per interval, \
             exposition of their series {:.3} ms: ratio {:.2}",
            attribution * 1e3,
            reference * 1e3,
            attribution / reference,
        );
        for (layout, worst, some) in &summed {
            for (what, (now, pass, before)) in [
                ("every cgroup counts", worst),
                ("one cgroup in ten counts", some),
            ] {
                eprintln!(
                    "  {layout}, {what}: the engine's summing per socket {:.3} ms ({:.2} of \
                     attribution; the series pass it is part of {:.3} ms), before {:.3} ms \
                     ({:.2} of attribution)",
                    now * 1e3,
                    now / attribution,
                    pass * 1e3,
                    before * 1e3,
                    before / attribution,
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
