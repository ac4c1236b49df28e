//! A backend is two mechanisms composed, one for a cgroup's groups, one
//! for its `by:` tracepoints: on the real kernel, with the cgroup backend
//! (cgroup-mode counters and rings), one descriptor budget covers both,
//! and a cgroup whose `by:` entries do not fit after its groups opened is
//! held by neither, then counted exactly once there is room.

mod common;

use cgperf::backend::cgroup::{CgroupBackend, CgroupProbe};
use cgperf::backend::{Backend, Cgroup, Outcome, Wanted};
use cgperf::engine::{FdBudget, Fds};
use cgperf::ids::{CgroupSlot, EventId, GroupId};
use cgperf::plan::Plan;
use cgperf::snapshot::SkipReason;
use cgperf::totals::{SampledKey, Totals};
use common::this_machine as machine;
use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A group of two software events, and getpriority counted by `which`.
fn plan() -> Plan {
    let yaml = "backend: cgroup
groups:
  sw: [context-switches, page-faults]
tracepoints:
  - name: syscalls:sys_enter_getpriority
    by: [which]
    as: by_which
";
    let config = cgperf::config::parse("test", yaml).expect("the test config is valid");
    let machine = machine();
    Plan::build(&config, &machine, &CgroupProbe::new(&machine)).expect("the plan builds")
}

fn cgroup(slot: u64, cg: &TestCgroup) -> Cgroup {
    use std::os::unix::fs::MetadataExt;
    Cgroup {
        slot: CgroupSlot(slot),
        path: cg.rel.as_str().into(),
        dir: cg.dir.clone(),
        ino: std::fs::metadata(&cg.dir).expect("the cgroup").ino(),
    }
}

/// `n` calls of getpriority(1, 0) in `cg`.
fn getpriority(cg: &TestCgroup, n: u64) {
    in_child(Some(&cg.dir), || {
        for _ in 0..n {
            // SAFETY: a raw syscall with integer arguments.
            unsafe { libc::syscall(libc::SYS_getpriority, 1, 0) };
        }
    });
}

/// Hits of `which="1"` counted for the cgroup in `slot`.
fn which_one(totals: &Totals, slot: u64, wanted: &Wanted) -> Option<u64> {
    let key = SampledKey {
        cgroup: CgroupSlot(slot),
        id: wanted.sampled[0].id(),
    };
    let counts = totals.counts(&key)?;
    let value = counts
        .series(1)
        .find(|(values, _)| values.as_slice() == ["1"])
        .map(|(_, n)| n);
    Some(value.unwrap_or(0))
}

/// Page faults counted for the cgroup in `slot`, over every CPU.
fn faults(totals: &Totals, slot: u64) -> f64 {
    let id = EventId {
        label: "page-faults".into(),
        clock: false,
    };
    totals
        .per_cpu(CgroupSlot(slot), &GroupId::from_label("sw"))
        .map(|(_, t)| t.value(&id))
        .sum()
}

#[test]
fn a_cgroup_whose_by_entries_do_not_fit_after_its_groups_is_held_by_neither() {
    require_root("opens perf events in cgroup mode");
    let cpus = cgperf::cpus::online().expect("online CPUs");
    let n = cpus.len() as u64;
    let plan = plan();
    let wanted = Wanted::of(&plan, &[0]);
    assert_eq!(
        (wanted.groups.len(), wanted.sampled.len()),
        (1, 1),
        "premise: one group and one `by:` entry"
    );
    // Per CPU, a cgroup takes 2 group descriptors and 1 `by:` event; the
    // rings take 1 per CPU once. Room for the first cgroup whole and for
    // the second's groups, not its `by:` events.
    let first_needs = 4 * n;
    let budget = FdBudget {
        max_perf_fds: first_needs + 2 * n,
    };
    let tally = Arc::new(AtomicU64::new(0));
    let fds = Fds {
        tally: tally.clone(),
        budget,
    };
    let mut backend = CgroupBackend::new(fds, plan.ring_pages);
    backend.configure(&plan);
    let mut totals = Totals::default();

    let a = TestCgroup::create("cgperf-compose-a");
    let b = TestCgroup::create("cgperf-compose-b");
    let outcomes = backend.apply(&[(cgroup(1, &a), wanted.clone())], &cpus, &mut totals);
    assert_eq!(outcomes, vec![Outcome::Counted]);
    assert_eq!(tally.load(Ordering::Relaxed), first_needs);

    let outcomes = backend.apply(&[(cgroup(2, &b), wanted.clone())], &cpus, &mut totals);
    assert_eq!(outcomes, vec![Outcome::Skipped(SkipReason::FdBudget)]);
    assert!(
        !backend.counts(CgroupSlot(2)),
        "the refused cgroup holds nothing in either mechanism"
    );
    assert_eq!(
        tally.load(Ordering::Relaxed),
        first_needs,
        "the groups it had opened are closed"
    );
    assert_eq!(
        backend.admits(&wanted, cpus.len()),
        Err(SkipReason::FdBudget),
        "both mechanisms' descriptors are checked against the one budget"
    );

    // The first counts on, exactly.
    getpriority(&a, 1_234);
    backend.read(&mut totals);
    assert_eq!(which_one(&totals, 1, &wanted), Some(1_234));
    assert!(faults(&totals, 1) > 0.0, "its group counts too");

    // Room again: the second is counted whole, from then on.
    backend.remove(CgroupSlot(1));
    assert_eq!(tally.load(Ordering::Relaxed), n, "the rings stay");
    assert_eq!(backend.admits(&wanted, cpus.len()), Ok(()));
    let outcomes = backend.apply(&[(cgroup(2, &b), wanted.clone())], &cpus, &mut totals);
    assert_eq!(outcomes, vec![Outcome::Counted]);
    getpriority(&b, 777);
    backend.read(&mut totals);
    assert_eq!(which_one(&totals, 2, &wanted), Some(777));
    assert!(faults(&totals, 2) > 0.0, "its group counts too");
}
