//! Unit tests of the engine over recording targets, without root: every
//! target is driven the same way and in the documented order, reloads
//! reach them all, only a target that drains is waited on and drained, and
//! the snapshot holds the engine's figures and each target's series.

use super::{Control, Engine};
use crate::backend::budget::{FdBudget, Fds};
use crate::config::Config;
use crate::cpus::CpuChanges;
use crate::engine::CpuTracker;
use crate::plan::Plan;
use crate::snapshot::{Errors, Latest, Snapshot};
use crate::target::Target;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What every recording target was asked, in order: (target, call).
type Calls = Arc<Mutex<Vec<(&'static str, &'static str)>>>;

#[derive(Debug)]
struct Recording {
    name: &'static str,
    drains: bool,
    calls: Calls,
    /// Added to `samples_undecodable` by each `show`, so that the snapshot
    /// tells which targets showed.
    shows: u64,
    /// How long each `read` and each `show` take (computing thousands of
    /// metrics over hundreds of cgroups takes seconds).
    takes: Duration,
}

impl Recording {
    fn log(&self, call: &'static str) {
        match self.calls.lock() {
            Ok(mut calls) => calls.push((self.name, call)),
            Err(e) => panic!("a test thread panicked: {e}"),
        }
    }
}

impl Target for Recording {
    fn apply(&mut self, _plan: &Plan, online: &[u32], _errors: &mut Errors) {
        assert!(!online.is_empty(), "a plan is applied once CPUs are known");
        self.log("apply");
    }

    fn read(&mut self, _errors: &mut Errors) {
        self.log("read");
        std::thread::sleep(self.takes);
    }

    fn cpus_changed(&mut self, _changes: &CpuChanges, _online: &[u32], _errors: &mut Errors) {
        self.log("cpus_changed");
    }

    fn follow(&mut self, _plan: &Plan, _online: &[u32], _errors: &mut Errors) {
        self.log("follow");
    }

    fn show(&mut self, _plan: &Plan, _now: Instant, snapshot: &mut Snapshot) {
        self.log("show");
        std::thread::sleep(self.takes);
        snapshot.samples_undecodable += self.shows;
    }

    fn drains(&self) -> bool {
        self.drains
    }

    fn wait(&mut self, timeout: Duration) {
        self.log("wait");
        std::thread::sleep(timeout);
    }

    fn drain(&mut self) {
        self.log("drain");
    }
}

fn plan(interval: &str) -> Plan {
    let yaml = format!("interval: {interval}\ngroups:\n  sw: [context-switches]\n");
    let config: Config = match crate::config::parse("test", &yaml) {
        Ok(config) => config,
        Err(e) => panic!("config: {e}"),
    };
    crate::plan::testing::software_plan(&config)
}

/// An engine over two recording targets, the first draining when `drains`.
fn engine(interval: &str, drains: bool) -> (Engine, Calls, Latest) {
    let calls = Calls::default();
    let target = |name, drains, shows| -> Box<dyn Target> {
        Box::new(Recording {
            name,
            drains,
            calls: calls.clone(),
            shows,
            takes: Duration::ZERO,
        })
    };
    let targets = vec![target("a", drains, 1), target("b", false, 10)];
    let cpus = CpuTracker::new(Arc::new(AtomicU64::new(0)));
    let latest = Latest::new();
    let fds = Fds {
        tally: cpus.tally(),
        budget: FdBudget::from_limit(u64::MAX),
    };
    let engine = Engine::of(plan(interval), targets, cpus, latest.clone(), fds);
    (engine, calls, latest)
}

/// The calls made so far, and forgets them.
fn take(calls: &Calls) -> Vec<(&'static str, &'static str)> {
    match calls.lock() {
        Ok(mut calls) => std::mem::take(&mut *calls),
        Err(e) => panic!("a test thread panicked: {e}"),
    }
}

#[test]
fn every_target_is_read_first_then_given_the_cpus_then_the_plan_then_shown() {
    let (mut engine, calls, latest) = engine("1s", false);
    engine.collect();
    // The first collection finds every online CPU: each target hears of
    // them before it is given the plan.
    assert_eq!(
        take(&calls),
        [
            ("a", "read"),
            ("b", "read"),
            ("a", "cpus_changed"),
            ("b", "cpus_changed"),
            ("a", "apply"),
            ("b", "apply"),
            ("a", "show"),
            ("b", "show"),
        ]
    );
    let first = latest.get();
    assert_eq!(first.collections, 1);
    assert_eq!(first.samples_undecodable, 11, "both targets showed");
    engine.collect();
    // Later ones follow what they count instead; the CPUs did not change.
    assert_eq!(
        take(&calls),
        [
            ("a", "read"),
            ("b", "read"),
            ("a", "follow"),
            ("b", "follow"),
            ("a", "show"),
            ("b", "show"),
        ]
    );
    assert_eq!(latest.get().collections, 2);
}

#[test]
fn a_reload_gives_every_target_the_new_plan_and_the_snapshot_its_interval() {
    let (mut engine, calls, latest) = engine("1s", false);
    engine.collect();
    take(&calls);
    engine.reload(plan("250ms"));
    assert_eq!(take(&calls), [("a", "apply"), ("b", "apply")]);
    engine.collect();
    assert_eq!(latest.get().interval, Duration::from_millis(250));
    assert!(latest.get().reload_ok);
    assert!(
        !take(&calls).contains(&("a", "apply")),
        "applied once, not again at the next collection"
    );
}

#[test]
fn only_a_target_that_drains_is_waited_on_and_drained_between_collections() {
    let (engine, calls, _latest) = engine("1h", true);
    let (control, inbox) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || engine.run(inbox));
    // The interval is an hour: every drain comes from waiting on `a`.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while seen.iter().filter(|c| **c == ("a", "drain")).count() < 3 {
        assert!(Instant::now() < deadline, "no drains within 30 s: {seen:?}");
        std::thread::sleep(Duration::from_millis(5));
        seen.extend(take(&calls));
    }
    if control.send(Control::Stop).is_err() {
        panic!("the engine stopped by itself");
    }
    if thread.join().is_err() {
        panic!("the engine's thread panicked");
    }
    seen.extend(take(&calls));
    assert!(seen.contains(&("a", "wait")));
    assert!(!seen.contains(&("b", "wait")), "{seen:?}");
    assert!(!seen.contains(&("b", "drain")), "{seen:?}");
    let shows = seen.iter().filter(|c| c.1 == "show").count();
    assert_eq!(shows, 2, "one collection in an hour's interval: {seen:?}");
}

#[test]
fn the_collection_duration_is_the_whole_collection_showing_included() {
    let takes = Duration::from_millis(150);
    let target = Box::new(Recording {
        name: "slow",
        drains: false,
        calls: Calls::default(),
        shows: 0,
        takes,
    });
    let cpus = CpuTracker::new(Arc::new(AtomicU64::new(0)));
    let latest = Latest::new();
    let fds = Fds {
        tally: cpus.tally(),
        budget: FdBudget::from_limit(u64::MAX),
    };
    let mut engine = Engine::of(plan("1s"), vec![target], cpus, latest.clone(), fds);
    let began = Instant::now();
    engine.collect();
    let took = began.elapsed().as_secs_f64();
    let reported = latest.get().collection_seconds;
    // Reading and showing (where the metrics are computed) both count.
    assert!(
        reported >= 2.0 * takes.as_secs_f64() && reported <= took,
        "reported {reported} s of a collection of {took} s"
    );
}
