//! Energy's perf descriptors are counted as every other of the process
//! (`cgperf_open_fds`) and kept within the descriptor budget: the
//! system-wide counters of the weight event, one per online CPU, here of
//! `cpu-clock` (a software event every machine counts system-wide, in the
//! place of `cycles`, which machines without a PMU cannot). This file
//! holds one test, so that the perf descriptors `/proc/self/fd` shows are
//! this test's only.

use cgperf::backend::budget::{FdBudget, Fds};
use cgperf::config::{EnergyDef, IdlePolicy, MeterChoice, ModelScope, PowerModel};
use cgperf::energy::Account;
use cgperf::plan::EnergyPlan;
use std::sync::atomic::Ordering;

/// perf event descriptors this process holds now.
fn perf_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd")
        .expect("procfs")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:[perf_event]")
        .count() as u64
}

/// A model meter, shares weighed by `cycles` whose system-wide count is
/// taken with `cpu-clock`'s attributes.
fn plan() -> EnergyPlan {
    let event = cgperf::events::parse_event("cpu-clock").expect("cpu-clock");
    let attr = event
        .resolve(
            std::path::Path::new(cgperf::events::PMU_ROOT),
            &Default::default(),
        )
        .expect("cpu-clock resolves");
    EnergyPlan {
        def: EnergyDef {
            meter: MeterChoice::Model,
            model: Some(PowerModel {
                per: ModelScope::Socket,
                idle_milliwatts: 10_000,
                max_milliwatts: 110_000,
            }),
            idle: IdlePolicy::Model,
        },
        weight: Some("cycles"),
        weight_attr: Some(attr),
    }
}

fn fds(max_perf_fds: u64) -> Fds {
    Fds {
        tally: Default::default(),
        budget: FdBudget { max_perf_fds },
    }
}

#[test]
fn energys_descriptors_are_counted_as_proc_shows_them_and_kept_within_the_budget() {
    let online = cgperf::cpus::online().expect("online CPUs").len() as u64;
    assert_eq!(perf_fds(), 0, "no perf descriptor before");
    // Room for all: one per online CPU, each counted.
    let all = fds(u64::MAX);
    let mut account = Account::new(plan(), Default::default(), all.clone());
    account.read();
    assert_eq!(perf_fds(), online);
    assert_eq!(all.tally.load(Ordering::Relaxed), online);
    account.read();
    assert_eq!(all.tally.load(Ordering::Relaxed), perf_fds());
    drop(account);
    assert_eq!((perf_fds(), all.tally.load(Ordering::Relaxed)), (0, 0));
    // Room for all but one, and 3 held by others already: the last CPU
    // gets none, interval after interval, and nothing goes past the
    // budget.
    let tight = fds(online - 1 + 3);
    tight.tally.fetch_add(3, Ordering::Relaxed);
    let mut account = Account::new(plan(), Default::default(), tight.clone());
    for _ in 0..3 {
        account.read();
        assert_eq!(perf_fds(), online - 1);
        assert_eq!(tight.tally.load(Ordering::Relaxed), online - 1 + 3);
    }
    drop(account);
    assert_eq!(perf_fds(), 0);
    assert_eq!(tight.tally.load(Ordering::Relaxed), 3, "its own given back");
}
