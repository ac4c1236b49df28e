//! What a collection costs per (cgroup, CPU) slot under the BPF backend,
//! and how it grows with the CPUs: the backend reads every counted
//! cgroup's slot on every online CPU at each interval, to find the few
//! that changed. The program's maps are laid out for 128 possible CPUs
//! (as on a 128-CPU node, whatever this machine has) and the backend told
//! that all 128 are online; its collection (`Backend::read`: flush every
//! CPU, read each slot, skip the ones that hold what they held) is timed
//! over N cgroups × 128 CPUs, and in the same run over N cgroups × 2 CPUs
//! (the layout of a 2-CPU machine) and against the floor: reading the same
//! number of readings, laid out the same way, from ordinary memory.
//!
//! It also prints the process's resident memory while each set of
//! cgroups is counted (the sets one after the other, by slots: each reuses
//! what the one before freed).
//!
//! The cgroups are made-up ids that never run (nothing is created): every
//! slot is idle, as most are on a large node in an interval. The CPUs this
//! machine lacks open no counter and are flushed as offline ones (a failed
//! system call each, where a real CPU costs a cross-CPU call).
//!
//! Run: `cargo bench --bench slots` (as root: it loads the BPF program).

use cgperf::backend::bpf::BpfBackend;
use cgperf::backend::{Backend, Cgroup, Wanted};
use cgperf::discovery::CgroupFs;
use cgperf::engine::{FdBudget, Fds, raise_nofile_limit};
use cgperf::ids::CgroupSlot;
use cgperf::machine::Machine;
use cgperf::plan::Plan;
use cgperf::snapshot::Operation;
use cgperf::totals::Totals;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Counted per cgroup, as `scripts/bench-scale` counts them.
const EVENTS: [&str; 6] = [
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "minor-faults",
    "major-faults",
];
/// (cgroups, CPUs) measured, by slots: the 2-CPU machine measured as the
/// reference, then the 128-CPU node projected to.
const RUNS: [(usize, u32); 4] = [(1_000, 2), (10_000, 2), (1_000, 128), (10_000, 128)];
/// Far above any directory's inode: ids the program never meets.
const FIRST_ID: u64 = 1 << 62;

fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("benches/slots: loads the BPF program, which needs root; run it as root");
        std::process::exit(2);
    }
}

fn plan() -> Plan {
    let yaml = format!(
        "backend: bpf\ngroups:\n  sched: [{}]\ncgroups:\n  - match: /cgperf-bench/*\n",
        EVENTS.join(", ")
    );
    let config = cgperf::config::parse("benches/slots", &yaml).expect("the config is valid");
    let fs = CgroupFs::locate().expect("cgroup2 is mounted");
    let online = cgperf::cpus::online().expect("online CPUs");
    let machine = Machine {
        pmu_root: cgperf::events::PMU_ROOT.into(),
        tracefs: cgperf::tracefs::Tracefs::locate(),
        probe_cgroup: fs.root().to_path_buf(),
        probe_cpu: online[0],
        cores: Default::default(),
        tables: Default::default(),
        metrics: Default::default(),
    };
    let probe = cgperf::backend::bpf::BpfProbe::new(&machine);
    Plan::build(&config, &machine, &probe).expect("the plan builds")
}

/// A backend laid out for `cpus` CPUs, all online, counting `n` cgroups.
fn backend(plan: &Plan, cpus: u32, n: usize, totals: &mut Totals) -> BpfBackend {
    let fds = Fds {
        tally: Arc::new(AtomicU64::new(0)),
        budget: FdBudget::from_limit(raise_nofile_limit()),
    };
    let mut backend = BpfBackend::laid_out_for(cpus, n, fds, plan.ring_pages);
    backend.configure(plan);
    let online: Vec<u32> = (0..cpus).collect();
    // Loads the program, then grows its maps once for every cgroup, as
    // the engine does.
    backend.apply(&[], &online, totals);
    backend.expect(n);
    let wanted = Wanted::of(plan, &[0]);
    let cgroups: Vec<(Cgroup, Wanted)> = (0..n)
        .map(|i| {
            let cgroup = Cgroup {
                slot: CgroupSlot(i as u64),
                path: format!("/cgperf-bench/cg-{i:05}").into(),
                dir: format!("/nonexistent/cg-{i:05}").into(),
                ino: FIRST_ID + i as u64,
            };
            (cgroup, wanted.clone())
        })
        .collect();
    let outcomes = backend.apply(&cgroups, &online, totals);
    let counted = outcomes
        .iter()
        .filter(|o| **o == cgperf::backend::Outcome::Counted)
        .count();
    assert_eq!(counted, n, "every cgroup is counted");
    // Absent CPUs are flushed as offline ones: no collection fails there.
    backend.read(totals);
    let errors = backend.stats().errors;
    let failed: Vec<_> = errors.of(Operation::Read).filter(|(_, n)| *n > 0).collect();
    assert!(failed.is_empty(), "a collection failed: {failed:?}");
    backend
}

/// This process's resident memory, in KiB (0 where unknown).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS:"));
    let kib = line.and_then(|l| l.split_whitespace().nth(1));
    kib.and_then(|k| k.parse().ok()).unwrap_or(0)
}

/// The floor: the readings the backend reads, laid out as the program's
/// totals (per counter position, slot-major, a CPU's reading beside the
/// next CPU's), read in the same order, in ordinary memory.
fn floor(cpus: usize, n: usize) -> impl FnMut() -> u64 {
    let cells: Vec<Vec<[u64; 3]>> = (0..EVENTS.len())
        .map(|_| vec![[1, 2, 3]; n * cpus])
        .collect();
    move || {
        let mut sum = 0u64;
        for slot in 0..n {
            for cpu in 0..cpus {
                let at = slot * cpus + cpu;
                let leader = &cells[0][at];
                // SAFETY: references to initialized memory.
                sum += unsafe { std::ptr::read_volatile(&leader[1]) }
                    + unsafe { std::ptr::read_volatile(&leader[2]) };
                for position in &cells {
                    // SAFETY: as above.
                    sum += unsafe { std::ptr::read_volatile(&position[at][0]) };
                }
            }
        }
        sum
    }
}

fn bench(c: &mut Criterion) {
    require_root();
    let plan = plan();
    let mut group = c.benchmark_group("collection per (cgroup, CPU) slot");
    group.sample_size(10);
    for (n, cpus) in RUNS {
        let slots = n as u64 * cpus as u64;
        group.throughput(Throughput::Elements(slots));
        let mut totals = Totals::default();
        let mut backend = backend(&plan, cpus, n, &mut totals);
        eprintln!(
            "{n} cgroups x {cpus} CPUs counted: RSS {} MiB",
            rss_kib() / 1024
        );
        group.bench_function(format!("bpf read, {n} cgroups x {cpus} CPUs"), |b| {
            b.iter(|| backend.read(&mut totals))
        });
        drop((backend, totals));
        let mut read = floor(cpus as usize, n);
        group.bench_function(format!("floor, {n} cgroups x {cpus} CPUs"), |b| {
            b.iter(|| black_box(read()))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
