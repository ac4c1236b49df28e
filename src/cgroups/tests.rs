//! Unit tests of the cgroups target with a fake backend, without root: what
//! it decides (admission, reconciling on reload, CPUs changing) and what it
//! exports, checked against a model of what the kernel counted.

use super::activity::Weight;
use super::counting::Counting;
use super::series::AllSeries;
use crate::backend::{Backend, Cgroup, Outcome, Stats, Wanted};
use crate::config::Config;
use crate::cpus::CpuChanges;
use crate::discovery::{CgroupFs, Found};
use crate::host::Sockets;
use crate::ids::{CgroupSlot, GroupId};
use crate::perf::GroupRead;
use crate::plan::{GroupSpec, Plan};
use crate::snapshot::{CounterSample, SkipReason, Weighed};
use crate::totals::{Baseline, GroupKey, Handle, Totals, exported_total};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One group open on one CPU in the fake kernel: what it counted since it
/// was opened, and how much of its enabled time it ran.
#[derive(Debug)]
struct FakeGroup {
    spec: Arc<GroupSpec>,
    /// Counts per event since opened (the kernel's cumulative values).
    raw: Vec<u64>,
    enabled: u64,
    running: u64,
    baseline: Baseline,
    totals: Handle,
    columns: Vec<usize>,
}

impl FakeGroup {
    fn open(spec: &Arc<GroupSpec>, key: &GroupKey, totals: &mut Totals) -> Self {
        let handle = totals.group(key);
        let columns = totals.columns(handle, &spec.event_ids());
        Self {
            spec: spec.clone(),
            raw: vec![0; spec.events.len()],
            enabled: 0,
            running: 0,
            baseline: Baseline::new(spec.events.len()),
            totals: handle,
            columns,
        }
    }

    /// Adds what it counted since its last read, through a group read
    /// laid out as the kernel's.
    fn read(&mut self, totals: &mut Totals) {
        let ids: Vec<u64> = (0..self.raw.len() as u64).collect();
        let mut words = vec![self.raw.len() as u64, self.enabled, self.running];
        for (id, value) in ids.iter().zip(&self.raw) {
            words.extend([*value, *id]);
        }
        let Ok(read) = GroupRead::parse(&words) else {
            panic!("a fake read is well formed");
        };
        let baseline = &mut self.baseline;
        totals.add(self.totals, &self.columns, |delta| {
            baseline.delta(&read, &ids, delta)
        });
    }
}

/// A backend that counts in memory: events happen when a test says so.
#[derive(Debug, Default)]
struct Fake {
    open: BTreeMap<(CgroupSlot, GroupId, u32), FakeGroup>,
    wanted: BTreeMap<CgroupSlot, Wanted>,
    /// Most cgroups it admits (its "descriptors").
    capacity: Option<usize>,
    online: Vec<u32>,
}

impl Fake {
    /// Opens `spec` for `slot` on `cpu`, counting from zero.
    fn open_one(&mut self, slot: CgroupSlot, spec: &Arc<GroupSpec>, cpu: u32, totals: &mut Totals) {
        let key = GroupKey {
            cgroup: slot,
            group: spec.id(),
            cpu,
        };
        let group = FakeGroup::open(spec, &key, totals);
        self.open.insert((slot, spec.id(), cpu), group);
    }

    fn open_all(&mut self, slot: CgroupSlot, cpus: &[u32], totals: &mut Totals) {
        let Some(wanted) = self.wanted.get(&slot).cloned() else {
            return;
        };
        for spec in &wanted.groups {
            for &cpu in cpus {
                self.open_one(slot, spec, cpu, totals);
            }
        }
    }

    /// `n` occurrences of event `event` of group `group` in cgroup `slot`
    /// on `cpu`, counted if it is open there; whether it was.
    fn happen(&mut self, slot: CgroupSlot, group: &GroupId, event: &str, cpu: u32, n: u64) -> bool {
        let Some(open) = self.open.get_mut(&(slot, group.clone(), cpu)) else {
            return false;
        };
        let Some(i) = open.spec.events.iter().position(|e| &*e.label == event) else {
            return false;
        };
        open.raw[i] += n;
        open.enabled += 10;
        open.running += 10;
        true
    }
}

impl Backend for Fake {
    fn configure(&mut self, _plan: &Plan) {}

    fn admits(&self, _wanted: &Wanted, _cpus: usize) -> Result<(), SkipReason> {
        match self.capacity {
            Some(max) if self.wanted.len() >= max => Err(SkipReason::FdBudget),
            _ => Ok(()),
        }
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        self.wanted.contains_key(&slot)
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        self.online = online.to_vec();
        for (cgroup, wanted) in cgroups {
            let slot = cgroup.slot;
            let old = self.wanted.insert(slot, wanted.clone()).unwrap_or_default();
            for spec in &old.groups {
                let kept = wanted.groups.iter().any(|g| **g == **spec);
                if kept {
                    continue;
                }
                for &cpu in online {
                    let Some(mut group) = self.open.remove(&(slot, spec.id(), cpu)) else {
                        continue;
                    };
                    // Replaced: read one last time, as the real one does.
                    if wanted.groups.iter().any(|g| g.id() == spec.id()) {
                        group.read(totals);
                    }
                }
            }
            for spec in &wanted.groups {
                if old.groups.iter().any(|g| **g == **spec) {
                    continue;
                }
                for &cpu in online {
                    self.open_one(slot, spec, cpu, totals);
                }
            }
        }
        vec![Outcome::Counted; cgroups.len()]
    }

    fn remove(&mut self, slot: CgroupSlot) {
        self.wanted.remove(&slot);
        self.open.retain(|(s, _, _), _| *s != slot);
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        let gone = |cpu: &u32| changes.closed.contains(cpu) || changes.open.contains(cpu);
        let keys: Vec<_> = self.open.keys().filter(|k| gone(&k.2)).cloned().collect();
        for key in keys {
            if let Some(mut group) = self.open.remove(&key) {
                group.read(totals);
            }
        }
        self.online.retain(|c| !changes.closed.contains(c));
        let slots: Vec<CgroupSlot> = self.wanted.keys().copied().collect();
        for slot in slots {
            self.open_all(slot, &changes.open, totals);
        }
        self.online.extend(&changes.open);
    }

    fn retry(&mut self, _online: &[u32], _totals: &mut Totals) {}

    fn read(&mut self, totals: &mut Totals) {
        for group in self.open.values_mut() {
            group.read(totals);
        }
    }

    fn drains(&self) -> bool {
        false
    }

    fn wait(&mut self, _timeout: Duration) {}

    fn drain(&mut self, _totals: &mut Totals) {}

    fn stats(&self) -> Stats {
        Stats::default()
    }
}

/// Configs a test moves between: `sw` changes events, `other` comes and
/// goes, the selectors change what `/b` counts.
const CONFIGS: [&str; 3] = [
    "groups:\n  sw: [page-faults, context-switches]\n  other: [cpu-migrations]\n\
     cgroups:\n  - path: /a\n    groups: [sw, other]\n  - match: /b*\n    groups: [sw]\n",
    "groups:\n  sw: [context-switches, minor-faults]\n\
     cgroups:\n  - path: /a\n    groups: [sw]\n  - match: /b*\n    groups: [sw]\n",
    "groups:\n  sw: [page-faults, context-switches]\n  other: [cpu-migrations]\n\
     cgroups:\n  - match: /*\n    groups: [other, sw]\n",
];

fn config(i: usize) -> Config {
    match crate::config::parse("test", CONFIGS[i]) {
        Ok(config) => config,
        Err(e) => panic!("config {i}: {e}"),
    }
}

fn plan(config: &Config) -> Plan {
    crate::plan::testing::software_plan(config)
}

/// The cgroups a test's hierarchy holds, found with the selectors of
/// `config` (as discovery would: by path and glob).
fn found(config: &Config, paths: &[(&str, u64)]) -> Vec<Found> {
    paths
        .iter()
        .filter_map(|&(path, ino)| {
            let selectors: Vec<usize> = config
                .cgroups
                .iter()
                .enumerate()
                .filter(|(_, s)| s.pattern.matches(path))
                .map(|(i, _)| i)
                .collect();
            (!selectors.is_empty()).then(|| Found {
                path: path.into(),
                ino,
                selectors,
                too_long: false,
            })
        })
        .collect()
}

/// An engine core over the fake backend, with its config and plan.
struct Harness {
    counting: Counting<Fake>,
    config: Config,
    plan: Plan,
    fs: CgroupFs,
    online: Vec<u32>,
    cgroups: Vec<(&'static str, u64)>,
}

impl Harness {
    fn new(config: usize, cgroups: &[(&'static str, u64)]) -> Self {
        let config = self::config(config);
        let plan = plan(&config);
        let mut h = Self {
            counting: Counting::new(Fake::default(), config.max_cgroups, Vec::new()),
            config,
            plan,
            fs: CgroupFs::at("/nonexistent"),
            online: vec![0, 1],
            cgroups: cgroups.to_vec(),
        };
        h.scan();
        h
    }

    fn scan(&mut self) {
        let found = found(&self.config, &self.cgroups);
        self.counting
            .sync(found, &self.plan, &self.fs, &self.online, None);
    }

    fn reload(&mut self, config: usize) {
        self.config = self::config(config);
        self.plan = plan(&self.config);
        self.counting
            .reloaded(&self.plan, self.config.max_cgroups, Vec::new(), false);
        self.scan();
    }

    fn slot(&self, path: &str) -> Option<CgroupSlot> {
        self.counting.entries.get(path).map(|e| e.slot)
    }

    /// Events in `path` on `cpu`; whether something counted them.
    fn happen(&mut self, path: &str, group: &str, event: &str, cpu: u32, n: u64) -> bool {
        let Some(slot) = self.slot(path) else {
            return false;
        };
        let group = GroupId::from_label(group);
        self.counting.backend.happen(slot, &group, event, cpu, n)
    }

    /// Every exported series: (cgroup, group, event) → value, after a read.
    fn collect(&mut self) -> BTreeMap<(String, String, String), f64> {
        self.counting.read();
        self.series()
    }

    /// Every exported series as of the last read.
    fn series(&mut self) -> BTreeMap<(String, String, String), f64> {
        keys(self, false)
            .into_iter()
            .map(|((cgroup, group, event, _), c)| ((cgroup, group, event), c.value))
            .collect()
    }
}

fn key(cgroup: &str, group: &str, event: &str) -> (String, String, String) {
    (cgroup.into(), group.into(), event.into())
}

#[test]
fn a_reload_keeps_unchanged_groups_and_the_kept_events_of_changed_ones() {
    let mut h = Harness::new(0, &[("/a", 1), ("/b1", 2)]);
    assert!(h.happen("/a", "sw", "page-faults", 0, 5));
    assert!(h.happen("/a", "sw", "context-switches", 1, 7));
    assert!(h.happen("/a", "other", "cpu-migrations", 0, 3));
    h.collect();
    // Counted after the last read, before the reload: read by the hand-over.
    assert!(h.happen("/a", "sw", "context-switches", 0, 1));
    h.reload(1);
    let after = h.collect();
    assert_eq!(after.get(&key("/a", "sw", "context-switches")), Some(&8.0));
    assert_eq!(after.get(&key("/a", "sw", "minor-faults")), Some(&0.0));
    assert_eq!(after.get(&key("/a", "sw", "page-faults")), None, "dropped");
    assert_eq!(
        after.get(&key("/a", "other", "cpu-migrations")),
        None,
        "removed"
    );
    // Back again: the dropped series start from zero, the kept one goes on.
    assert!(h.happen("/a", "sw", "minor-faults", 1, 2));
    h.reload(0);
    assert!(h.happen("/a", "other", "cpu-migrations", 0, 1));
    let back = h.collect();
    assert_eq!(back.get(&key("/a", "sw", "page-faults")), Some(&0.0));
    assert_eq!(back.get(&key("/a", "sw", "context-switches")), Some(&8.0));
    assert_eq!(back.get(&key("/a", "other", "cpu-migrations")), Some(&1.0));
}

#[test]
fn a_cpu_that_goes_offline_is_read_last_and_counts_again_from_its_totals() {
    let mut h = Harness::new(0, &[("/a", 1)]);
    assert!(h.happen("/a", "sw", "page-faults", 1, 4));
    h.counting.cpus_changed(&CpuChanges {
        open: vec![],
        closed: vec![1],
    });
    assert!(!h.happen("/a", "sw", "page-faults", 1, 100), "offline");
    assert_eq!(h.collect().get(&key("/a", "sw", "page-faults")), Some(&4.0));
    h.counting.cpus_changed(&CpuChanges {
        open: vec![1],
        closed: vec![],
    });
    assert!(h.happen("/a", "sw", "page-faults", 1, 2));
    assert_eq!(h.collect().get(&key("/a", "sw", "page-faults")), Some(&6.0));
}

#[test]
fn admission_follows_selector_order_then_depth_then_name_within_max_cgroups() {
    let text = "max_cgroups: 2\ngroups:\n  sw: [page-faults]\n\
                cgroups:\n  - match: /z*\n  - match: /**\n";
    let config = crate::config::parse("test", text).expect("valid");
    let plan = plan(&config);
    let mut counting = Counting::new(Fake::default(), config.max_cgroups, Vec::new());
    let paths = [("/a/deep", 1), ("/b", 2), ("/a", 3), ("/z9", 4), ("/z1", 5)];
    let found = paths
        .iter()
        .map(|&(path, ino)| Found {
            path: path.into(),
            ino,
            selectors: config
                .cgroups
                .iter()
                .enumerate()
                .filter(|(_, s)| s.pattern.matches(path))
                .map(|(i, _)| i)
                .collect(),
            too_long: false,
        })
        .collect();
    counting.sync(found, &plan, &CgroupFs::at("/x"), &[0], None);
    let counted: Vec<&String> = counting.entries.keys().collect();
    assert_eq!(counted, ["/z1", "/z9"]);
    assert_eq!(counting.skipped.get(&SkipReason::MaxCgroups), Some(&3));
    assert_eq!(counting.skipped.get(&SkipReason::FdBudget), Some(&0));
}

#[test]
fn a_backend_that_is_full_skips_with_its_reason_and_counts_the_others() {
    let mut h = Harness::new(2, &[]);
    h.counting.backend.capacity = Some(1);
    h.cgroups = vec![("/b", 2), ("/a", 1)];
    h.scan();
    let counted: Vec<&String> = h.counting.entries.keys().collect();
    assert_eq!(counted, ["/a"]);
    assert_eq!(h.counting.skipped.get(&SkipReason::FdBudget), Some(&1));
    // Room again: picked up at the next scan.
    h.counting.backend.capacity = Some(2);
    h.scan();
    assert_eq!(h.counting.entries.len(), 2);
    assert_eq!(h.counting.skipped.get(&SkipReason::FdBudget), Some(&0));
}

#[test]
fn a_cgroup_recreated_under_its_path_starts_new_series() {
    let mut h = Harness::new(0, &[("/a", 1)]);
    assert!(h.happen("/a", "sw", "page-faults", 0, 9));
    h.collect();
    let before = h.counting.entries["/a"].created;
    h.cgroups = vec![("/a", 99)];
    h.scan();
    assert!(h.counting.entries["/a"].created >= before);
    assert_eq!(h.collect().get(&key("/a", "sw", "page-faults")), Some(&0.0));
}

#[test]
fn group_times_summed_over_cpus_saturate_rather_than_wrap() {
    // Each CPU's totals saturate; two near the top must not wrap (or
    // panic) when summed.
    let mut h = Harness::new(0, &[("/a", 1)]);
    assert!(h.happen("/a", "sw", "page-faults", 0, 1));
    assert!(h.happen("/a", "sw", "page-faults", 1, 1));
    h.collect();
    let slot = h.slot("/a").expect("counted");
    for cpu in [0, 1] {
        let key = GroupKey {
            cgroup: slot,
            group: GroupId::from_label("sw"),
            cpu,
        };
        let handle = h.counting.totals.group(&key);
        let totals = h.counting.totals.group_mut(handle).expect("live");
        totals.enabled_ns = u64::MAX - 1;
        totals.never_ran_intervals = u64::MAX;
    }
    let series = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        false,
        None,
        Instant::now(),
    );
    let times = series
        .group_times
        .iter()
        .find(|t| &*t.group == "sw")
        .expect("sw");
    assert_eq!(times.enabled_seconds, u64::MAX as f64 / 1e9);
    assert_eq!(times.never_ran_intervals, u64::MAX);
}

#[test]
fn an_interval_enabled_but_never_run_adds_nothing_and_is_counted() {
    let mut h = Harness::new(0, &[("/a", 1)]);
    assert!(h.happen("/a", "sw", "page-faults", 0, 3));
    h.collect();
    let slot = h.slot("/a").expect("counted");
    let open = h
        .counting
        .backend
        .open
        .get_mut(&(slot, GroupId::from_label("sw"), 0))
        .expect("open");
    open.raw[0] += 50;
    open.enabled += 1000;
    h.counting.read();
    let series = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        true,
        None,
        Instant::now(),
    );
    let times = series
        .group_times
        .iter()
        .find(|t| &*t.group == "sw" && t.cpu == Some(0))
        .expect("sw on CPU 0");
    assert_eq!(times.never_ran_intervals, 1);
    let value = series
        .counters
        .iter()
        .find(|c| &*c.event == "page-faults" && c.cpu == Some(0))
        .map(|c| c.value);
    assert_eq!(value, Some(3.0));
}

/// The keys of every series of a snapshot, by (cgroup, group, event, CPU).
fn keys(
    h: &mut Harness,
    per_cpu: bool,
) -> BTreeMap<(String, String, String, Option<u32>), CounterSample> {
    let series = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        per_cpu,
        None,
        Instant::now(),
    );
    series
        .counters
        .iter()
        .map(|c| {
            let at = (
                c.cgroup.to_string(),
                c.group.to_string(),
                c.event.to_string(),
                c.cpu,
            );
            (at, c.clone())
        })
        .collect()
}

#[test]
fn series_keys_are_kept_across_snapshots_and_made_again_when_their_names_change() {
    let mut h = Harness::new(0, &[("/a", 1), ("/b1", 2)]);
    let first = keys(&mut h, false);
    let second = keys(&mut h, false);
    assert!(!first.is_empty());
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        second.keys().collect::<Vec<_>>()
    );
    for (at, key) in &first {
        assert!(key.shares_key_with(&second[at]), "{at:?} made again");
    }
    // Per CPU: one key per CPU, kept too.
    let per_cpu = keys(&mut h, true);
    let page_faults = |k: &BTreeMap<_, CounterSample>| {
        k.iter()
            .filter(|((c, _, e, _), _)| c == "/a" && e == "page-faults")
            .map(|((_, _, _, cpu), key)| (*cpu, key.clone()))
            .collect::<Vec<_>>()
    };
    let cpus = page_faults(&per_cpu);
    assert_eq!(
        cpus.iter().map(|(cpu, _)| *cpu).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
    for ((_, now), (_, before)) in page_faults(&keys(&mut h, true)).iter().zip(&cpus) {
        assert!(now.shares_key_with(before));
    }
    // Names from the container runtime: the cgroup's keys carry them.
    let before = keys(&mut h, false);
    let entry = h.counting.entries.get_mut("/a").expect("counted");
    entry.set_labels(Arc::from(vec![("pod", Box::from("web-0"))]));
    let named = keys(&mut h, false);
    let sw = |cgroup: &str, event: &str| (cgroup.into(), "sw".into(), event.into(), None);
    let at = sw("/a", "page-faults");
    assert_eq!(&*named[&at].labels, &[("pod", Box::from("web-0"))]);
    let b1 = sw("/b1", "page-faults");
    assert!(
        named[&b1].shares_key_with(&before[&b1]),
        "other cgroups keep theirs"
    );
    // A reload that changes a group: its series are named anew.
    h.reload(1);
    let reloaded = keys(&mut h, false);
    let minor = sw("/a", "minor-faults");
    assert!(reloaded.contains_key(&minor), "{reloaded:?}");
    assert!(!reloaded.contains_key(&at), "page-faults left the group");
}

#[test]
fn a_group_with_nothing_read_yet_counts_zero_not_minus_zero() {
    let mut h = Harness::new(0, &[("/a", 1)]);
    h.counting.totals = Totals::default();
    let all = keys(&mut h, false);
    assert!(!all.is_empty());
    for (at, c) in &all {
        assert!(
            c.value == 0.0 && c.value.is_sign_positive(),
            "{at:?}: {}",
            c.value
        );
    }
}

/// One step of a lifetime.
#[derive(Debug, Clone)]
enum Step {
    Happen {
        cgroup: usize,
        event: usize,
        cpu: u32,
        n: u64,
    },
    Collect,
    Reload(usize),
    CpuOff(u32),
    CpuOn(u32),
    /// A cgroup appears (or, if there, goes).
    Toggle(usize),
}

const PATHS: [&str; 3] = ["/a", "/b1", "/c"];
const EVENTS: [(&str, &str); 4] = [
    ("sw", "page-faults"),
    ("sw", "context-switches"),
    ("sw", "minor-faults"),
    ("other", "cpu-migrations"),
];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..PATHS.len(), 0..EVENTS.len(), 0u32..2, 1u64..100)
            .prop_map(|(cgroup, event, cpu, n)| Step::Happen { cgroup, event, cpu, n }),
        2 => Just(Step::Collect),
        1 => (0..CONFIGS.len()).prop_map(Step::Reload),
        1 => (0u32..2).prop_map(Step::CpuOff),
        1 => (0u32..2).prop_map(Step::CpuOn),
        1 => (0..PATHS.len()).prop_map(Step::Toggle),
    ]
}

proptest! {
    /// Whatever happens — reloads that change, drop and bring back groups
    /// and events, CPUs going and coming, cgroups coming and going — every
    /// series the engine exports never goes down while it exists, and is
    /// exactly what was counted since it began.
    #[test]
    fn every_series_is_monotonic_and_exact(steps in proptest::collection::vec(step(), 1..80)) {
        let mut h = Harness::new(0, &[("/a", 1), ("/b1", 2)]);
        let mut inos = 10;
        // What the model says each series holds.
        let mut truth: BTreeMap<(String, String, String), f64> = BTreeMap::new();
        let mut last: BTreeMap<(String, String, String), f64> = BTreeMap::new();
        let mut cpu_online = [true, true];
        for step in steps {
            match step.clone() {
                Step::Happen { cgroup, event, cpu, n } => {
                    let (group, event) = EVENTS[event];
                    if h.happen(PATHS[cgroup], group, event, cpu, n) {
                        *truth.entry(key(PATHS[cgroup], group, event)).or_default() += n as f64;
                    }
                }
                Step::Collect => {}
                Step::Reload(i) => h.reload(i),
                Step::CpuOff(cpu) if cpu_online[cpu as usize] => {
                    cpu_online[cpu as usize] = false;
                    h.online.retain(|c| *c != cpu);
                    h.counting.cpus_changed(&CpuChanges { open: vec![], closed: vec![cpu] });
                }
                Step::CpuOn(cpu) if !cpu_online[cpu as usize] => {
                    cpu_online[cpu as usize] = true;
                    h.online.push(cpu);
                    h.online.sort();
                    h.counting.cpus_changed(&CpuChanges { open: vec![cpu], closed: vec![] });
                }
                Step::CpuOff(_) | Step::CpuOn(_) => {}
                Step::Toggle(i) => {
                    match h.cgroups.iter().position(|(p, _)| *p == PATHS[i]) {
                        Some(at) => {
                            h.cgroups.remove(at);
                        }
                        None => {
                            inos += 1;
                            h.cgroups.push((PATHS[i], inos));
                        }
                    }
                    h.scan();
                }
            }
            // A series that is gone starts from zero if it comes back.
            let exported = h.series();
            truth.retain(|k, _| exported.contains_key(k));
            last.retain(|k, _| exported.contains_key(k));
            if !matches!(step, Step::Collect) {
                continue;
            }
            let now = h.collect();
            for (k, value) in &now {
                let expected = truth.get(k).copied().unwrap_or(0.0);
                prop_assert_eq!(*value, expected, "{:?}", k);
                if let Some(before) = last.get(k) {
                    prop_assert!(value >= before, "{:?} went down", k);
                }
            }
            last = now;
        }
    }
}

#[test]
fn a_snapshot_shares_the_series_of_idle_cgroups_and_makes_those_that_counted_anew() {
    let mut h = Harness::new(0, &[("/a", 1), ("/b1", 2)]);
    h.collect();
    let at = |cgroup: &str| {
        (
            cgroup.to_owned(),
            "sw".to_owned(),
            "page-faults".to_owned(),
            None,
        )
    };
    let (a, b1) = (at("/a"), at("/b1"));
    let before = keys(&mut h, false);
    assert!(h.happen("/a", "sw", "page-faults", 0, 7));
    h.counting.read();
    let after = keys(&mut h, false);
    assert_eq!(after[&a].value, before[&a].value + 7.0);
    assert_eq!(after[&b1].value, before[&b1].value);
    // An idle cgroup's series are the very ones of the last snapshot.
    let find = |s: &AllSeries, cgroup: &str| {
        s.counters
            .iter()
            .find(|c| &*c.cgroup == cgroup && &*c.event == "page-faults")
            .map(|c| c as *const CounterSample)
    };
    let first = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        false,
        None,
        Instant::now(),
    );
    assert!(h.happen("/a", "sw", "page-faults", 1, 5));
    h.counting.read();
    let second = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        false,
        None,
        Instant::now(),
    );
    assert_eq!(find(&first, "/b1"), find(&second, "/b1"), "/b1 is shared");
    assert_ne!(find(&first, "/a"), find(&second, "/a"), "/a is made anew");
    let value = |s: &AllSeries, cgroup: &str| {
        s.counters
            .iter()
            .find(|c| &*c.cgroup == cgroup && &*c.event == "page-faults")
            .map(|c| c.value)
    };
    assert_eq!(value(&second, "/a"), Some(before[&a].value + 12.0));
    // A read that finds nothing new changes nothing: the next snapshot
    // shares every cgroup's series.
    h.counting.read();
    let third = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        false,
        None,
        Instant::now(),
    );
    for cgroup in ["/a", "/b1"] {
        assert_eq!(find(&second, cgroup), find(&third, cgroup), "{cgroup}");
    }
}

/// CPUs 0 and 1 on socket 0, 2 and 3 on socket 1.
fn two_sockets() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temporary directory");
    for cpu in 0..4u32 {
        let dir = root.path().join(format!("cpu{cpu}/topology"));
        std::fs::create_dir_all(&dir).expect("topology directory");
        std::fs::write(dir.join("physical_package_id"), format!("{}\n", cpu / 2))
            .expect("socket file");
    }
    root
}

/// Each counted cgroup's activity per socket, as the snapshot shows it
/// (summed where its series are made, or kept from the last snapshot),
/// checked bit for bit against a sum of every total per CPU made anew.
/// `last` is the last snapshot's list of cgroups: shared by this one when
/// the cgroups are the same.
fn activity(
    h: &mut Harness,
    weight: &'static str,
    per_cpu: bool,
    (sockets, last): (&mut Sockets, &mut Arc<[Weighed]>),
    fresh: &mut Sockets,
) -> BTreeMap<String, Vec<(u32, f64)>> {
    let before = last.clone();
    let series = AllSeries::of(
        &mut h.counting.entries,
        &mut h.counting.totals,
        per_cpu,
        Some(Weight {
            label: weight,
            sockets,
            last,
        }),
        Instant::now(),
    );
    // The same: the very paths and labels the entries share (a reload
    // may give an entry new ones), and the same starts.
    let same = |a: &Weighed, b: &Weighed| {
        Arc::ptr_eq(&a.cgroup, &b.cgroup)
            && Arc::ptr_eq(&a.labels, &b.labels)
            && a.start_time == b.start_time
    };
    let cgroups = series.activity.cgroups();
    assert_eq!(
        Arc::ptr_eq(cgroups, &before),
        !before.is_empty()
            && cgroups.len() == before.len()
            && cgroups.iter().zip(before.iter()).all(|(a, b)| same(a, b)),
        "the list of cgroups is shared exactly when they are the same"
    );
    assert!(Arc::ptr_eq(cgroups, last), "kept for the next snapshot");
    let shown: BTreeMap<String, Vec<(u32, f64)>> = series
        .activity
        .iter()
        .map(|(a, sockets)| (a.cgroup.to_string(), sockets.to_vec()))
        .collect();
    let mut full = BTreeMap::new();
    for entry in h.counting.entries.values() {
        let found = entry.wanted().groups.iter().find_map(|spec| {
            let at = spec.events.iter().position(|e| &*e.label == weight)?;
            Some((spec, at))
        });
        let Some((spec, at)) = found else { continue };
        let (event, id) = (&spec.events[at], spec.id());
        // Each socket's sum folded from +0 in CPU order, apart from the
        // engine's loop.
        let mut sums = BTreeMap::new();
        for (cpu, t) in h.counting.totals.per_cpu(entry.slot, &id) {
            let value = exported_total([t], at, &event.label, event.clock);
            *sums.entry(fresh.of(cpu)).or_insert(0.0) += value;
        }
        full.insert(entry.path.to_string(), sums.into_iter().collect());
    }
    let bits = |m: &BTreeMap<String, Vec<(u32, f64)>>| -> Vec<(String, Vec<(u32, u64)>)> {
        m.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.iter().map(|(s, x)| (*s, x.to_bits())).collect(),
                )
            })
            .collect()
    };
    assert_eq!(
        bits(&shown),
        bits(&full),
        "kept sums drifted from the totals"
    );
    shown
}

/// The sums per socket a snapshot keeps for cgroups whose totals did not
/// change are exactly those of every total summed anew, across intervals
/// in which only some cgroups and CPUs count, a cgroup removed and counted
/// again under the same path, a CPU going offline, reloads that change
/// the groups, and a change of the weight event.
#[test]
fn activity_kept_between_snapshots_is_what_the_totals_sum_to() {
    let root = two_sockets();
    for per_cpu in [false, true] {
        let mut sockets = Sockets::new(root.path());
        let mut fresh = Sockets::new(root.path());
        let mut last: Arc<[Weighed]> = Arc::from([]);
        let mut h = Harness::new(0, &[("/a", 1), ("/b1", 2), ("/b2", 3)]);
        h.online = vec![0, 1, 2, 3];
        h.counting.cpus_changed(&CpuChanges {
            open: vec![2, 3],
            closed: vec![],
        });
        let mut check = |h: &mut Harness, weight| {
            h.counting.read();
            activity(h, weight, per_cpu, (&mut sockets, &mut last), &mut fresh)
        };
        let w = "context-switches";
        for (path, cpu, n) in [("/a", 0, 3), ("/a", 2, 5), ("/b1", 1, 2), ("/b2", 3, 4)] {
            assert!(h.happen(path, "sw", w, cpu, n));
        }
        let first = check(&mut h, w);
        assert_eq!(first["/a"], [(0, 3.0), (1, 5.0)]);
        // Only /a counts, on one CPU of socket 1.
        assert!(h.happen("/a", "sw", w, 3, 7));
        let second = check(&mut h, w);
        assert_eq!(second["/a"], [(0, 3.0), (1, 12.0)]);
        assert_eq!(second["/b1"], first["/b1"]);
        // Nothing counts; then another event of the group only.
        check(&mut h, w);
        assert!(h.happen("/b2", "sw", "page-faults", 0, 9));
        assert_eq!(check(&mut h, w)["/b2"], [(0, 0.0), (1, 4.0)]);
        // /b1 goes, and comes back under the same path: from zero.
        h.cgroups.retain(|(path, _)| *path != "/b1");
        h.scan();
        assert!(!check(&mut h, w).contains_key("/b1"));
        h.cgroups.push(("/b1", 4));
        h.scan();
        assert!(h.happen("/b1", "sw", w, 2, 1));
        assert_eq!(check(&mut h, w)["/b1"], [(0, 0.0), (1, 1.0)]);
        // CPU 3 goes offline: what it counted stays in socket 1's sum.
        assert!(h.happen("/a", "sw", w, 3, 2));
        h.counting.cpus_changed(&CpuChanges {
            open: vec![],
            closed: vec![3],
        });
        h.online.retain(|&cpu| cpu != 3);
        assert!(!h.happen("/a", "sw", w, 3, 100), "offline");
        assert!(h.happen("/b2", "sw", w, 0, 1));
        let offline = check(&mut h, w);
        assert_eq!(offline["/a"], [(0, 3.0), (1, 14.0)]);
        assert_eq!(offline["/b2"], [(0, 1.0), (1, 4.0)]);
        // Reloads that move the weight within its group, and the groups.
        h.reload(1);
        assert!(h.happen("/a", "sw", w, 1, 1));
        assert_eq!(check(&mut h, w)["/a"], [(0, 4.0), (1, 14.0)]);
        h.reload(2);
        check(&mut h, w);
        // Another weight, nothing counted since: summed of that event.
        assert!(h.happen("/a", "sw", "page-faults", 2, 6));
        h.counting.read();
        check(&mut h, w);
        let other = check(&mut h, "page-faults");
        assert_eq!(other["/a"], [(0, 0.0), (1, 6.0)]);
        assert_eq!(check(&mut h, "cpu-migrations")["/a"], [(0, 0.0), (1, 0.0)]);
    }
}
