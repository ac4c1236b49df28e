//! Attribution over recorded intervals: shares follow each interval's
//! growth, what no top-level cgroup counted is the system's, every
//! interval adds up exactly at every level, process series see the same
//! rate without adding to the meter, and reloads never send a counter
//! back.

use super::*;
use crate::config::{EnergyDef, MeterChoice, ModelScope, PowerModel};
use crate::snapshot::{CgroupActivity, ProcessSample, Weighed};
use meter::Channel;
use std::sync::Arc;
use std::time::SystemTime;

/// What the recorded meter counts per interval on socket 0's `pkg`.
const METER: u64 = 1_000_003;

/// A meter that counts [`METER`] µJ per interval on socket 0's `pkg`.
#[derive(Debug)]
struct Fixed([Channel; 1]);

impl Meter for Fixed {
    fn source(&self) -> &'static str {
        "model"
    }
    fn channels(&self) -> &[Channel] {
        &self.0
    }
    fn read(&mut self, _busy: &Busy) -> (Vec<u64>, Option<String>) {
        (vec![METER], None)
    }
}

fn plan(weight: &'static str) -> EnergyPlan {
    EnergyPlan {
        def: EnergyDef {
            meter: MeterChoice::Model,
            model: None,
            idle: IdlePolicy::None,
        },
        weight: Some(weight),
        weight_attr: None,
    }
}

fn account() -> Account {
    let meter = Fixed([Channel {
        domain: "pkg",
        socket: 0,
    }]);
    // CPUs without topology are on socket 0.
    let root = std::env::temp_dir().join("cgperf-no-such-cpu-root");
    Account::with_meter(
        plan("cycles"),
        Ok(Box::new(meter)),
        &root.to_string_lossy(),
        (Arc::default(), Fds::unbounded()),
    )
}

/// A cgroup's totals per socket (socket 0: the meter's).
fn activity(cgroup: &str, start: u64, sockets: &[(u32, f64)]) -> CgroupActivity {
    CgroupActivity {
        of: Weighed {
            cgroup: cgroup.into(),
            labels: Arc::from(Vec::new()),
            start_time: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(start),
        },
        sockets: sockets.into(),
    }
}

/// A `processes:` series' total of `event`.
fn process(name: &str, event: &str, value: f64) -> ProcessSample {
    ProcessSample {
        process: name.into(),
        comm: None,
        pid: None,
        group: "hw".into(),
        event: event.into(),
        clock: false,
        value,
        start_time: SystemTime::UNIX_EPOCH,
    }
}

/// One interval: the meter counted [`METER`], the sockets' own count of
/// the weight event was `counted` (none: not known), the cgroups' and
/// processes' totals are `activity` and `processes`. The snapshot shown.
fn shown(
    account: &mut Account,
    activity: Vec<CgroupActivity>,
    processes: Vec<ProcessSample>,
    counted: Option<&[(u32, Option<f64>)]>,
) -> Snapshot {
    account.pending = Some(Pending {
        deltas: vec![METER],
        busy: Busy::default(),
        counted: counted.map(|c| c.iter().copied().collect()),
    });
    let mut snap = Snapshot::empty();
    snap.activity = activity.into_iter().collect();
    snap.processes = processes;
    snap.activity_weight = account.plan.weight.unwrap_or("");
    account.show(&mut snap);
    snap
}

/// The joules of the `n`-th series of `energy`.
fn joules_of(energy: &CgroupEnergy, n: usize) -> f64 {
    energy.iter().nth(n).expect("a series that far").joules
}

fn whole(joules: f64) -> u64 {
    (joules * 1e6).round() as u64
}

/// Each cgroup's micro-Joules, and whether the top-level ones and what no
/// cgroup got add up to the meter (they do while no counted cgroup went
/// away: one that does takes its counter with it).
fn interval(account: &mut Account, activity: Vec<CgroupActivity>) -> (Vec<(String, u64)>, bool) {
    let snap = shown(account, activity, Vec::new(), None);
    let host = &snap.host_energy[0];
    let top: u64 = snap
        .energy
        .iter()
        .filter(|e| e.cgroup.matches('/').count() == 1)
        .map(|e| whole(e.joules))
        .sum();
    let conserved =
        top + whole(host.idle_joules) + whole(host.system_joules) == whole(host.meter_joules);
    let cgroups = snap
        .energy
        .iter()
        .map(|e| (e.cgroup.to_string(), whole(e.joules)))
        .collect();
    (cgroups, conserved)
}

#[test]
fn shares_follow_each_intervals_growth_and_a_new_cgroup_starts_from_zero() {
    let mut account = account();
    // First interval: a did 1, b 3 (their totals so far).
    let (got, conserved) = interval(
        &mut account,
        vec![
            activity("/a", 1, &[(0, 1.0)]),
            activity("/b", 1, &[(0, 3.0)]),
        ],
    );
    assert_eq!(got, [("/a".into(), 250_001), ("/b".into(), 750_002)]);
    assert!(conserved);
    // Second: a grew by 3, b not at all; a child of a
    // appears having done 1.
    let (got, conserved) = interval(
        &mut account,
        vec![
            activity("/a", 1, &[(0, 4.0)]),
            activity("/a/c", 5, &[(0, 1.0)]),
            activity("/b", 1, &[(0, 3.0)]),
        ],
    );
    assert!(conserved);
    assert_eq!(got[0], ("/a".into(), 250_001 + METER));
    assert_eq!(got[2], ("/b".into(), 750_002));
    assert_eq!(got[1].1.abs_diff(333_334), 0, "a third of a's share");
    // b is made again (a later start): it starts from 0, its total
    // smaller than before counts whole; a is gone.
    let (got, conserved) = interval(&mut account, vec![activity("/b", 9, &[(0, 2.0)])]);
    assert_eq!(got, [("/b".into(), METER)]);
    assert!(!conserved, "a's and the first b's energy went with them");
}

/// With `cycles`: the socket counted 10, the top-level cgroups 5 of it;
/// the other half is the system's. A socket whose count is unknown (a CPU
/// whose counter never ran) has no system share; one below the cgroups'
/// (counted moments apart) neither.
#[test]
fn cycles_no_top_level_cgroup_counted_are_the_systems() {
    let mut account = account();
    let cgroups = |a: f64, x: f64, b: f64| {
        vec![
            activity("/a", 1, &[(0, a)]),
            activity("/a/x", 1, &[(0, x)]),
            activity("/b", 1, &[(0, b)]),
        ]
    };
    let system = |s: &Snapshot| whole(s.host_energy[0].system_joules);
    let energy = |s: &Snapshot| -> Vec<u64> { s.energy.iter().map(|e| whole(e.joules)).collect() };
    let snap = shown(
        &mut account,
        cgroups(2.0, 1.0, 3.0),
        vec![],
        Some(&[(0, Some(10.0))]),
    );
    // x did half of a: half of its 200,001, rounded up (a's own tasks
    // the other half, rounded down).
    assert_eq!(energy(&snap), [200_001, 100_001, 300_001]);
    assert_eq!(system(&snap), 500_001);
    // Unknown: the cgroups share all of it.
    let snap = shown(
        &mut account,
        cgroups(4.0, 2.0, 6.0),
        vec![],
        Some(&[(0, None)]),
    );
    assert_eq!(system(&snap), 500_001, "no system share this interval");
    let e = energy(&snap);
    assert_eq!(e[0] + e[2], 200_001 + 300_001 + METER);
    // Below what the cgroups counted: the same.
    let snap = shown(
        &mut account,
        cgroups(6.0, 3.0, 9.0),
        vec![],
        Some(&[(0, Some(4.0))]),
    );
    assert_eq!(system(&snap), 500_001);
}

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Random intervals with `cycles`: children that counted more than their
/// parent (multiplexed, scaled), sockets counted below the cgroups or not
/// at all, cgroups idle. In every interval the top-level cgroups and the
/// system add up to the meter exactly, and every parent got at least its
/// children's sum (the rest is its own tasks').
#[test]
fn every_interval_adds_up_exactly_and_parents_hold_their_children() {
    let mut account = account();
    let paths = ["/a", "/a/x", "/a/x/y", "/a/z", "/b", "/b/w"];
    let parent = [None, Some(0), Some(1), Some(0), None, Some(4)];
    let mut rng = Lcg(42);
    let mut totals = [0.0f64; 6];
    let mut before: Option<(Vec<u64>, u64, u64)> = None;
    for round in 0..500 {
        for t in &mut totals {
            // Scaled counts: large, fractional, sometimes idle.
            if rng.next() > 0.2 {
                *t += rng.next() * 3e9;
            }
        }
        let counted = match round % 4 {
            0 => None,
            1 => Some(rng.next() * 1e10),
            _ => Some(rng.next() * 3e10),
        };
        let activity: Vec<_> = paths
            .iter()
            .zip(&totals)
            .map(|(p, t)| activity(p, 1, &[(0, *t)]))
            .collect();
        let snap = shown(&mut account, activity, vec![], Some(&[(0, counted)]));
        let now: Vec<u64> = snap.energy.iter().map(|e| whole(e.joules)).collect();
        let host = &snap.host_energy[0];
        let (meter, system) = (whole(host.meter_joules), whole(host.system_joules));
        if let Some((was, meter_was, system_was)) = &before {
            let d: Vec<u64> = now.iter().zip(was).map(|(n, w)| n - w).collect();
            assert_eq!(
                d[0] + d[4] + (system - system_was),
                meter - meter_was,
                "round {round}: {d:?}"
            );
            for (i, path) in paths.iter().enumerate() {
                let children: u64 = (0..6).filter(|c| parent[*c] == Some(i)).map(|c| d[c]).sum();
                assert!(d[i] >= children, "round {round}: {path} {d:?}");
            }
        }
        before = Some((now, meter, system));
    }
}

/// A process series that did what `/b` did gets what `/b` got, to a
/// micro-Joule per interval; one that did half, half; and the meter's
/// total is the cgroups' and the system's alone.
#[test]
fn process_series_see_the_cgroups_rate_without_adding_to_the_meter() {
    let mut account = account();
    let mut last = None;
    for round in 1..=5 {
        let r = round as f64;
        let snap = shown(
            &mut account,
            vec![
                activity("/a", 1, &[(0, 1.0 * r)]),
                activity("/b", 1, &[(0, 3.0 * r)]),
            ],
            vec![
                process("like-b", "cycles", 3.0 * r),
                process("half-b", "cycles", 1.5 * r),
                process("clock-only", "task-clock", 9.0 * r),
            ],
            Some(&[(0, Some(8.0)), (1, Some(0.0))]),
        );
        let b = whole(joules_of(&snap.energy, 1));
        let of = |name: &str| {
            snap.process_energy
                .iter()
                .find(|p| &*p.process == name)
                .map(|p| p.joules * 1e6)
        };
        let like_b = of("like-b").expect("like-b");
        let half_b = of("half-b").expect("half-b");
        assert!((like_b - b as f64).abs() <= round as f64, "{like_b} {b}");
        assert!((half_b * 2.0 - like_b).abs() < 1e-6, "{half_b} {like_b}");
        assert_eq!(of("clock-only"), None, "not weighed by cycles");
        let host = &snap.host_energy[0];
        let cgroups: u64 = snap.energy.iter().map(|e| whole(e.joules)).sum();
        assert_eq!(
            cgroups + whole(host.system_joules),
            whole(host.meter_joules)
        );
        assert_eq!(whole(host.meter_joules), METER * round);
        if let Some(last) = last {
            assert!(like_b >= last, "never back");
        }
        last = Some(like_b);
    }
    // A series that did more than the socket counted (read moments
    // apart) gets at most the interval's energy.
    let snap = shown(
        &mut account,
        vec![activity("/a", 1, &[(0, 6.0)])],
        vec![process("like-b", "cycles", 1e12)],
        Some(&[(0, Some(8.0))]),
    );
    let got = snap.process_energy[0].joules * 1e6;
    assert!(got <= (METER * 6) as f64 + 1.0, "{got}");
}

/// Every counter the account shows, by series, for comparing across a
/// reload.
fn counters(snap: &Snapshot) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = snap
        .energy
        .iter()
        .map(|e| (format!("{} {}", e.cgroup, e.weight), e.joules))
        .collect();
    for h in &snap.host_energy {
        out.push((format!("meter {}", h.scope.source), h.meter_joules));
        out.push(("idle".into(), h.idle_joules));
        out.push(("system".into(), h.system_joules));
    }
    for p in &snap.process_energy {
        out.push((format!("process {}", p.process), p.joules));
    }
    out
}

/// A reload between two intervals that changes the idle policy and the
/// model keeps every series and its total (same labels: never back); one
/// that changes the weight event ends the cgroups' and processes' series,
/// and the interval after it, whose weights began before, is the
/// system's, still adding up.
#[test]
fn a_reload_never_sends_a_counter_back() {
    let mut account = account();
    let one = |account: &mut Account, r: f64| {
        shown(
            account,
            vec![activity("/a", 1, &[(0, r)])],
            vec![process("p", account.plan.weight.unwrap_or(""), r / 2.0)],
            Some(&[(0, Some(4.0 * r))]),
        )
    };
    one(&mut account, 1.0);
    let before = counters(&one(&mut account, 2.0));
    // Same meter choice (the test's meter is kept), another idle policy.
    let mut changed = plan("cycles");
    changed.def.idle = IdlePolicy::Model;
    changed.def.model = account.plan.def.model;
    account = account.reload(changed);
    let after = counters(&one(&mut account, 3.0));
    assert_eq!(before.len(), after.len());
    for ((name, b), (same, a)) in before.iter().zip(&after) {
        assert_eq!(name, same);
        assert!(a >= b, "{name}: {b} then {a}");
    }
    // The weight event changes: new series, the next interval goes to
    // the system whole, and the one after is shared again.
    account = account.reload(plan("task-clock"));
    let system = |snap: &Snapshot| whole(snap.host_energy[0].system_joules);
    let system_was = whole(
        after
            .iter()
            .find(|(n, _)| n == "system")
            .map_or(0.0, |(_, v)| *v),
    );
    let snap = one(&mut account, 4.0);
    assert_eq!(system(&snap), system_was + METER, "{snap:?}");
    assert!(snap.energy.iter().all(|e| e.weight == "task-clock"));
    let snap = one(&mut account, 5.0);
    let cgroups: u64 = snap.energy.iter().map(|e| whole(e.joules)).sum();
    assert!(cgroups > 0);
    assert!(
        cgroups + system(&snap) < whole(snap.host_energy[0].meter_joules),
        "the old series' energy went with them"
    );
}

/// The model's idle part is at most what the meter counted, whatever the
/// declared watts: a model of the largest wattage over a meter that
/// counted little leaves nothing negative and adds up.
#[test]
fn idle_is_at_most_the_meter() {
    let mut account = account();
    account.plan.def.idle = IdlePolicy::Model;
    account.plan.def.model = Some(PowerModel {
        per: ModelScope::Cpu,
        idle_milliwatts: u64::MAX,
        max_milliwatts: u64::MAX,
    });
    let busy = Busy {
        cpus: [(0, (u64::MAX, u64::MAX)), (1, (0, u64::MAX))].into(),
    };
    account.pending = Some(Pending {
        deltas: vec![METER],
        busy,
        counted: None,
    });
    let mut snap = Snapshot::empty();
    snap.activity = vec![activity("/a", 1, &[(0, 1.0)])].into_iter().collect();
    snap.activity_weight = "cycles";
    account.show(&mut snap);
    let host = &snap.host_energy[0];
    assert_eq!(whole(host.idle_joules), METER);
    assert_eq!(whole(host.meter_joules), METER);
    assert_eq!(
        whole(joules_of(&snap.energy, 0)) + whole(host.system_joules),
        0
    );
}

/// A meter of `source` on socket 0's `pkg`.
#[derive(Debug)]
struct Source(&'static str, [Channel; 1]);

impl Source {
    fn boxed(source: &'static str) -> Result<Box<dyn Meter>, String> {
        let channel = Channel {
            domain: "pkg",
            socket: 0,
        };
        Ok(Box::new(Self(source, [channel])))
    }
}

impl Meter for Source {
    fn source(&self) -> &'static str {
        self.0
    }
    fn channels(&self) -> &[Channel] {
        &self.1
    }
    fn read(&mut self, _busy: &Busy) -> (Vec<u64>, Option<String>) {
        (vec![METER], None)
    }
}

/// The meter source changes at reloads, to none, to another and back: the
/// series of a source gone are not shown, a new source's start at 0, and
/// a source that comes back resumes from its totals: within cgperf's life
/// no counter goes back.
#[test]
fn a_meter_that_goes_and_comes_back_resumes_its_series() {
    let mut account = account();
    let a = || vec![activity("/a", 1, &[(0, 1.0)])];
    let one = |account: &mut Account, r: f64| {
        shown(
            account,
            vec![activity("/a", 1, &[(0, r)])],
            vec![],
            Some(&[(0, Some(2.0 * r))]),
        )
    };
    one(&mut account, 1.0);
    let before = one(&mut account, 2.0);
    let model = whole(before.host_energy[0].meter_joules);
    assert_eq!(model, 2 * METER);
    account.take_meter(Err("no meter".into()));
    let mut snap = Snapshot::empty();
    snap.activity = a().into_iter().collect();
    account.show(&mut snap);
    assert!(snap.energy.is_empty() && snap.host_energy.is_empty());
    account.take_meter(Source::boxed("powercap"));
    let other = one(&mut account, 3.0);
    assert_eq!(other.host_energy[0].scope.source, "powercap");
    assert_eq!(whole(other.host_energy[0].meter_joules), METER);
    account.take_meter(Source::boxed("model"));
    let back = one(&mut account, 4.0);
    assert_eq!(back.host_energy[0].scope.source, "model");
    assert_eq!(whole(back.host_energy[0].meter_joules), 3 * METER);
    assert!(joules_of(&back.energy, 0) >= joules_of(&before.energy, 0));
}

/// A meter that reads the largest count there is, every interval: totals
/// saturate, nothing overflows or goes back.
#[test]
fn an_absurd_meter_saturates_and_never_goes_back() {
    let mut account = account();
    let mut last = 0;
    for r in 1..=3 {
        account.pending = Some(Pending {
            deltas: vec![u64::MAX],
            busy: Busy::default(),
            counted: Some([(0, Some(f64::INFINITY))].into()),
        });
        let mut snap = Snapshot::empty();
        snap.activity = vec![activity("/a", 1, &[(0, f64::from(r))])]
            .into_iter()
            .collect();
        snap.activity_weight = "cycles";
        account.show(&mut snap);
        let meter = account.host[account.current[0]][0];
        assert!(meter >= last);
        last = meter;
    }
    assert_eq!(last, u64::MAX);
}

/// A meter of recorded channels, whose readings each test gives.
#[derive(Debug)]
struct Recorded(Vec<Channel>);

impl Meter for Recorded {
    fn source(&self) -> &'static str {
        "powercap"
    }
    fn channels(&self) -> &[Channel] {
        &self.0
    }
    fn read(&mut self, _busy: &Busy) -> (Vec<u64>, Option<String>) {
        (vec![0; self.0.len()], None)
    }
}

/// A two-socket machine with `pkg` on each socket and `psys` (read on
/// socket 0's CPU): `/a` runs on socket 0 only, `/b` on socket 1 only,
/// 1:3, and each socket's CPUs counted one more than its cgroups did (the
/// system's). `pkg` is shared by its socket's activity; `psys`, which
/// meters the whole platform, by every CPU's: `/b` gets three times
/// `/a`'s, and the system its part of both sockets, never all of socket
/// 0's alone. Each channel adds up exactly.
#[test]
fn psys_is_shared_by_every_cpus_activity_and_pkg_by_its_sockets() {
    let channel = |domain, socket| Channel { domain, socket };
    let meter = Recorded(vec![
        channel("pkg", 0),
        channel("pkg", 1),
        channel("psys", 0),
    ]);
    let root = std::env::temp_dir().join("cgperf-no-such-cpu-root");
    let mut account = Account::with_meter(
        plan("cycles"),
        Ok(Box::new(meter)),
        &root.to_string_lossy(),
        (Arc::default(), Fds::unbounded()),
    );
    for round in 1..=3u64 {
        let r = round as f64;
        account.pending = Some(Pending {
            deltas: vec![1_000_000, 3_000_000, 8_000_000],
            busy: Busy::default(),
            counted: Some(BTreeMap::from([(0, Some(2.0)), (1, Some(4.0))])),
        });
        let mut snap = Snapshot::empty();
        snap.activity = vec![
            activity("/a", 1, &[(0, 1.0 * r)]),
            activity("/b", 1, &[(1, 3.0 * r)]),
        ]
        .into_iter()
        .collect();
        snap.activity_weight = "cycles";
        account.show(&mut snap);
        let got = |cgroup: &str, domain: &str, socket: u32| {
            snap.energy
                .iter()
                .find(|e| {
                    e.cgroup == cgroup && e.scope.domain == domain && e.scope.socket == socket
                })
                .map(|e| whole(e.joules))
        };
        let host = |domain: &str, socket: u32| {
            let h = snap
                .host_energy
                .iter()
                .find(|h| h.scope.domain == domain && h.scope.socket == socket)
                .expect("host energy");
            (whole(h.meter_joules), whole(h.system_joules))
        };
        // Per socket: a did 1 of socket 0's 2, b 3 of socket 1's 4.
        assert_eq!(got("/a", "pkg", 0), Some(500_000 * round));
        assert_eq!(got("/b", "pkg", 0), Some(0));
        assert_eq!(got("/b", "pkg", 1), Some(2_250_000 * round));
        // The platform: a did 1 and b 3 of the CPUs' 6.
        assert_eq!(got("/a", "psys", 0), Some(1_333_333 * round));
        assert_eq!(got("/b", "psys", 0), Some(4_000_000 * round));
        let (meter, system) = host("psys", 0);
        assert_eq!(system, 2_666_667 * round);
        for (domain, socket) in [("pkg", 0), ("pkg", 1), ("psys", 0)] {
            let (meter, system) = host(domain, socket);
            let cgroups =
                got("/a", domain, socket).unwrap_or(0) + got("/b", domain, socket).unwrap_or(0);
            assert_eq!(cgroups + system, meter, "{domain} {socket}");
        }
        assert_eq!(meter, 8_000_000 * round);
    }
}

/// An account made anew (a reload that turns `energy:` off and on again)
/// counts from 0: its series begin when it began, not when their cgroup
/// or process did, so that no series is seen to go back; one that began
/// after it keeps its own start.
#[test]
fn an_account_made_anew_begins_new_series() {
    let later = SystemTime::now() + std::time::Duration::from_secs(3600);
    let since_epoch = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let mut starts = Vec::new();
    for _ in 0..2 {
        let mut account = account();
        let mut snap = Snapshot::empty();
        for round in 1..=2 {
            let r = f64::from(round);
            let mut fresh = activity("/fresh", 0, &[(0, r)]);
            fresh.of.start_time = later;
            snap = shown(
                &mut account,
                vec![activity("/old", 1, &[(0, r)]), fresh],
                vec![process("p", "cycles", r)],
                None,
            );
        }
        let cgroups: Vec<SystemTime> = snap.energy.iter().map(|e| e.start_time).collect();
        // In path order.
        let [fresh, old] = cgroups[..] else {
            panic!("two cgroups' series: {cgroups:?}")
        };
        assert_eq!(old, account.since, "a cgroup counted before the account");
        assert_eq!(fresh, later, "a cgroup counted after it keeps its start");
        assert!(
            snap.process_energy
                .iter()
                .all(|p| p.start_time == account.since)
        );
        assert!(snap.host_energy.iter().all(|h| h.since == account.since));
        assert!(since_epoch(old) > 1, "not the cgroup's own start");
        starts.push(account.since);
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        starts[1] > starts[0],
        "the second account's series are new ones"
    );
}
