//! Planning without root: a PMU directory and a tracefs written into a
//! temporary directory, and a probe that refuses what each test chooses.

use super::*;
use crate::perf::{Errno, open_failure_reason};
use crate::plan::{Probe, Refusal, Trial};
use crate::snapshot::{NotCountable, Support};
use crate::tracefs::Tracefs;
use std::sync::Mutex;

const SOURCE: &str = "t.yaml";

/// One call to [`FakeProbe::try_group`]: each event's label and filter.
type Call = Vec<(String, Option<String>)>;

/// Refuses the events it is told to, and records every group it is asked
/// about.
#[derive(Debug, Default)]
pub(super) struct FakeProbe {
    /// (label, refused only when it has a filter, errno).
    refuse: Vec<(&'static str, bool, i32)>,
    calls: Mutex<Vec<Call>>,
    /// The CPU of each system-wide call, in the order asked.
    pub(super) system_wide_cpus: Mutex<Vec<u32>>,
    /// The counters per CPU it holds at most.
    room: Option<usize>,
}

impl FakeProbe {
    pub(super) fn refusing(refuse: &[(&'static str, bool, i32)]) -> Self {
        Self {
            refuse: refuse.to_vec(),
            ..Self::default()
        }
    }

    pub(super) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Probe for FakeProbe {
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal> {
        let call = group
            .iter()
            .map(|t| {
                let filter = t.filter.map(|f| f.to_string_lossy().into_owned());
                (t.label.to_string(), filter)
            })
            .collect();
        self.calls.lock().unwrap().push(call);
        for (i, trial) in group.iter().enumerate() {
            let refused = self.refuse.iter().find(|(label, filtered, _)| {
                *label == trial.label && (!filtered || trial.filter.is_some())
            });
            if let Some(&(_, _, errno)) = refused {
                return Err(Refusal::kernel(group, i, Errno(errno)));
            }
        }
        Ok(())
    }

    fn counters_per_cpu(&self) -> Option<usize> {
        self.room
    }

    /// As [`FakeProbe::try_group`], noting the CPU.
    fn try_system_wide(&self, group: &[Trial<'_>], cpu: u32) -> Result<(), Refusal> {
        self.system_wide_cpus.lock().unwrap().push(cpu);
        self.try_group(group)
    }
}

/// A tracefs `format` file: the common fields, then `fields` (C
/// declaration, size) one after the other.
fn format_file(name: &str, id: u64, fields: &[(&str, usize)]) -> String {
    let mut text = format!(
        "name: {name}\nID: {id}\nformat:\n\
         \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
    );
    let mut offset = 8;
    for (declaration, size) in fields {
        let signed = u8::from(!declaration.contains('['));
        text.push_str(&format!(
            "\tfield:{declaration};\toffset:{offset};\tsize:{size};\tsigned:{signed};\n"
        ));
        offset += size;
    }
    text + "\nprint fmt: \"\"\n"
}

/// A machine in a temporary directory: a PMU directory with a kprobe PMU
/// (no `msr`), and a tracefs with two tracepoints. Its probe cgroup does
/// not exist: nothing may open it.
pub(super) fn machine() -> (tempfile::TempDir, Machine) {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, content: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    write("pmu/kprobe/type", "7\n");
    write("pmu/kprobe/format/retprobe", "config:0\n");
    write("tracing/events/sched/sched_switch/id", "316\n");
    let switch = [
        ("char prev_comm[16]", 16),
        ("pid_t prev_pid", 4),
        ("pid_t next_pid", 4),
    ];
    let switch = format_file("sched_switch", 316, &switch);
    write("tracing/events/sched/sched_switch/format", &switch);
    write("tracing/events/syscalls/sys_enter_getppid/id", "291\n");
    let getppid = format_file("sys_enter_getppid", 291, &[("int __syscall_nr", 4)]);
    write("tracing/events/syscalls/sys_enter_getppid/format", &getppid);
    let machine = Machine {
        pmu_root: dir.path().join("pmu"),
        tracefs: Ok(Tracefs::at(dir.path().join("tracing"))),
        probe_cgroup: dir.path().join("no-such-cgroup"),
        probe_cpu: 0,
        cores: Default::default(),
        tables: Default::default(),
        metrics: Default::default(),
    };
    (dir, machine)
}

pub(super) fn config(yaml: &str) -> Config {
    crate::config::parse(SOURCE, yaml).unwrap_or_else(|e| panic!("{yaml}:\n{e}"))
}

/// The plan of `yaml` on a fake machine, asking `probe`.
fn plan(yaml: &str, probe: &FakeProbe) -> Result<Plan, ConfigError> {
    let (_dir, machine) = machine();
    Plan::build(&config(yaml), &machine, probe)
}

fn support<'a>(plan: &'a Plan, group: &GroupId, event: Option<&str>) -> &'a Support {
    plan.support
        .iter()
        .find(|s| s.group == *group && s.event.as_deref() == event)
        .unwrap_or_else(|| panic!("no verdict on {group} {event:?}"))
}

/// The verdict's sentence.
fn verdict(plan: &Plan, group: &GroupId, event: Option<&str>) -> Result<(), String> {
    support(plan, group, event)
        .status
        .clone()
        .map_err(|e| e.reason)
}

/// The verdict's `reason` token, `""` when countable.
fn token(plan: &Plan, group: &GroupId, event: Option<&str>) -> &'static str {
    support(plan, group, event)
        .status
        .as_ref()
        .map_or_else(|e| e.token, |()| "")
}

fn named(name: &str) -> GroupId {
    GroupId::Named(name.into())
}

/// The groups for `selectors`, each as its id and its events' labels.
fn groups_for(plan: &Plan, selectors: &[usize]) -> Vec<(GroupId, Vec<String>)> {
    plan.groups_for(selectors)
        .iter()
        .map(|g| {
            let labels = g.events.iter().map(|e| e.label.to_string()).collect();
            (g.name.clone(), labels)
        })
        .collect()
}

#[test]
fn a_refused_group_is_disabled_with_its_reason_and_the_others_kept() {
    let probe = FakeProbe::refusing(&[("page-faults", false, libc::ENOENT)]);
    let plan = plan(
        "groups:\n  a: [task-clock]\n  b: [context-switches, page-faults]\n",
        &probe,
    )
    .unwrap();
    assert_eq!(verdict(&plan, &named("a"), None), Ok(()));
    let reason = format!(
        "event `page-faults`: {}",
        open_failure_reason(Errno(libc::ENOENT))
    );
    assert_eq!(verdict(&plan, &named("b"), None), Err(reason));
    assert_eq!(token(&plan, &named("b"), None), "not_supported");
    assert_eq!(token(&plan, &named("a"), None), "");
    assert_eq!(
        groups_for(&plan, &[0]),
        [(named("a"), vec!["task-clock".to_string()])]
    );
    // The whole group was asked about, leader first, in one call.
    assert_eq!(
        probe.calls()[1],
        [
            ("context-switches".to_string(), None),
            ("page-faults".to_string(), None)
        ]
    );
}

#[test]
fn a_tracepoint_refused_without_its_filter_is_unsupported_not_a_config_error() {
    let probe = FakeProbe::refusing(&[("sched:sched_switch", false, libc::EACCES)]);
    let plan = plan(
        "tracepoints:\n  - syscalls:sys_enter_getppid\n  \
         - {name: sched:sched_switch, filter: \"prev_pid == 1\"}\n",
        &probe,
    )
    .unwrap();
    let reason = format!(
        "event `sched:sched_switch`: {}",
        open_failure_reason(Errno(libc::EACCES))
    );
    let switch = Some("sched:sched_switch");
    assert_eq!(verdict(&plan, &GroupId::Tracepoints, switch), Err(reason));
    assert_eq!(token(&plan, &GroupId::Tracepoints, switch), "permission");
    let getppid = Some("syscalls:sys_enter_getppid");
    assert_eq!(verdict(&plan, &GroupId::Tracepoints, getppid), Ok(()));
    assert_eq!(verdict(&plan, &GroupId::Tracepoints, None), Ok(()));
    assert_eq!(
        groups_for(&plan, &[0]),
        [(
            GroupId::Tracepoints,
            vec!["syscalls:sys_enter_getppid".to_string()]
        )]
    );
    // Refused unfiltered: the filter is never tried.
    assert_eq!(probe.calls().len(), 2);
}

#[test]
fn no_countable_tracepoint_disables_the_tracepoints_group() {
    let probe = FakeProbe::refusing(&[("syscalls:sys_enter_getppid", false, libc::ENODEV)]);
    let plan = plan("tracepoints: [syscalls:sys_enter_getppid]\n", &probe).unwrap();
    let gone = format!(
        "none of the configured tracepoints can be counted: event \
         `syscalls:sys_enter_getppid`: {}",
        open_failure_reason(Errno(libc::ENODEV))
    );
    assert_eq!(verdict(&plan, &GroupId::Tracepoints, None), Err(gone));
    // The group is refused for its events' reason.
    assert_eq!(token(&plan, &GroupId::Tracepoints, None), "gone");
    assert!(plan.groups_for(&[0]).is_empty());
}

#[test]
fn a_filter_the_kernel_rejects_is_a_config_error_at_its_entry() {
    let yaml = "groups:\n  a: [task-clock]\ntracepoints:\n  \
                - {name: sched:sched_switch, filter: \"prev_pid == 1 &&\"}\n";
    for (errno, why) in [
        (libc::EINVAL, "a comparison does not parse"),
        (libc::ENOENT, "the expression is incomplete"),
    ] {
        let probe = FakeProbe::refusing(&[("sched:sched_switch", true, errno)]);
        let err = plan(yaml, &probe).unwrap_err();
        assert_eq!(err.source_name, SOURCE);
        assert_eq!((err.line, err.column), (Some(4), Some(5)), "{err}");
        assert!(
            err.message.contains(&format!(
                "the kernel rejected the filter \"prev_pid == 1 &&\" of tracepoint \
                 sched:sched_switch ({}: {why}",
                Errno(errno)
            )),
            "{err}"
        );
        let hint = err.hint.as_deref().unwrap_or_default();
        assert!(hint.contains("prev_comm, prev_pid, next_pid"), "{hint}");
        // Unfiltered, then filtered.
        let calls = probe.calls();
        let tried: Vec<&Call> = calls.iter().skip(1).collect();
        assert_eq!(
            tried,
            [
                &vec![("sched:sched_switch".to_string(), None)],
                &vec![(
                    "sched:sched_switch".to_string(),
                    Some("prev_pid == 1 &&".to_string())
                )]
            ]
        );
    }
}

#[test]
fn a_syscall_name_must_come_from_an_integer_field() {
    let yaml = |field: &str| {
        format!(
            "tracepoints:\n  - {{name: sched:sched_switch, by: [prev_comm, prev_pid], \
             syscall_name: {field}, as: s}}\n"
        )
    };
    let probe = FakeProbe::refusing(&[]);
    let err = plan(&yaml("prev_comm"), &probe).unwrap_err();
    assert_eq!((err.line, err.column), (Some(2), Some(5)), "{err}");
    assert!(
        err.message.contains(
            "`syscall_name: prev_comm` names a field of type `char[16]`, not a syscall number"
        ),
        "{err}"
    );
    let plan = plan(&yaml("prev_pid"), &probe).expect("an integer field takes syscall names");
    assert_eq!(plan.sampled_for(&[0])[0].syscall_name, Some(1));
}

#[test]
fn a_mechanism_that_cannot_ask_leaves_the_filter_unjudged() {
    // The probe cgroup gone between the two opens: not the filter's fault.
    #[derive(Debug, Default)]
    struct SecondCallFails(Mutex<usize>);
    impl Probe for SecondCallFails {
        fn try_group(&self, _: &[Trial<'_>]) -> Result<(), Refusal> {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            match *n {
                1 => Ok(()),
                _ => Err(Refusal::not_asked(
                    NotCountable::NOT_PROBED,
                    "opening cgroup /x: gone".into(),
                )),
            }
        }
    }
    let (_dir, machine) = machine();
    let yaml = "tracepoints:\n  - {name: sched:sched_switch, filter: \"prev_pid == 1\"}\n";
    let plan = Plan::build(&config(yaml), &machine, &SecondCallFails::default()).unwrap();
    assert_eq!(
        verdict(&plan, &GroupId::Tracepoints, Some("sched:sched_switch")),
        Err("opening cgroup /x: gone".to_string())
    );
    let switch = Some("sched:sched_switch");
    assert_eq!(token(&plan, &GroupId::Tracepoints, switch), "not_probed");
}

#[test]
fn groups_and_sampled_tracepoints_are_the_union_over_selectors() {
    let yaml = "groups:\n  a: [task-clock]\n  b: [context-switches]\n  c: [page-faults]\n\
                tracepoints:\n  - syscalls:sys_enter_getppid\n  \
                - {name: sched:sched_switch, as: switches}\n  \
                - {name: sched:sched_switch, as: by_pid, by: [prev_pid]}\n\
                probes: [{kprobe: \"0xffffffff81000000\", as: k}]\n\
                cgroups:\n  \
                - {path: /x, groups: [a], tracepoints: [switches, by_pid], probes: []}\n  \
                - {match: /y/*, groups: [c, a], tracepoints: [syscalls:sys_enter_getppid], \
                probes: [k]}\n";
    let plan = plan(yaml, &FakeProbe::default()).unwrap();
    let s = |labels: &[&str]| labels.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(
        groups_for(&plan, &[0]),
        [
            (named("a"), s(&["task-clock"])),
            (GroupId::Tracepoints, s(&["switches"])),
        ]
    );
    // In config order, each once; tracepoints and probes as one group each.
    assert_eq!(
        groups_for(&plan, &[1, 0]),
        [
            (named("a"), s(&["task-clock"])),
            (named("c"), s(&["page-faults"])),
            (
                GroupId::Tracepoints,
                s(&["syscalls:sys_enter_getppid", "switches"])
            ),
            (GroupId::Probes, s(&["k"])),
        ]
    );
    let sampled = |selectors: &[usize]| -> Vec<SampledId> {
        plan.sampled_for(selectors).iter().map(|s| s.id()).collect()
    };
    let by_pid = SampledId {
        label: "by_pid".into(),
        fields: Arc::from([Arc::from("prev_pid")]),
    };
    assert_eq!(sampled(&[0]), std::slice::from_ref(&by_pid));
    assert_eq!(sampled(&[0, 1]), [by_pid]);
    assert!(sampled(&[1]).is_empty());
    assert!(plan.groups_for(&[7]).is_empty(), "no such selector");
    let by_pid = &plan.sampled_for(&[0])[0];
    assert_eq!(by_pid.fields[0].0.as_ref(), "prev_pid");
    assert_eq!(by_pid.attr.config, 316);
}

#[test]
fn a_probe_refused_for_want_of_privileges_names_cap_sys_admin() {
    for errno in [libc::EACCES, libc::EPERM] {
        let probe = FakeProbe::refusing(&[("k", false, errno)]);
        let plan = plan(
            "probes: [{kprobe: \"0xffffffff81000000\", as: k}]\n",
            &probe,
        )
        .unwrap();
        let expected = format!(
            "kprobe `0xffffffff81000000`: permission denied: the kernel's kprobe PMU needs \
             CAP_SYS_ADMIN (CAP_PERFMON is not enough) ({})",
            Errno(errno)
        );
        assert_eq!(
            verdict(&plan, &GroupId::Probes, Some("k")),
            Err(expected.clone())
        );
        assert_eq!(
            verdict(&plan, &GroupId::Probes, None),
            Err(format!(
                "none of the configured probes can be counted: {expected}"
            ))
        );
        assert_eq!(token(&plan, &GroupId::Probes, None), "permission");
    }
    // Any other refusal is the kernel's reason.
    let probe = FakeProbe::refusing(&[("k", false, libc::ENOENT)]);
    let plan = plan(
        "probes: [{kprobe: \"0xffffffff81000000\", as: k}]\n",
        &probe,
    )
    .unwrap();
    let reason = format!("event `k`: {}", open_failure_reason(Errno(libc::ENOENT)));
    assert_eq!(verdict(&plan, &GroupId::Probes, Some("k")), Err(reason));
}

#[test]
fn the_kernel_is_asked_only_through_the_probe_once_per_resolved_entry() {
    // A group that does not resolve (no msr PMU here), a tracepoint this
    // tracefs lacks: judged from sysfs and tracefs alone, never asked.
    let yaml = "groups:\n  a: [task-clock]\n  b: [\"msr/tsc/\"]\n  c: [cs, page-faults]\n\
                tracepoints:\n  - syscalls:sys_enter_getppid\n  \
                - {name: sched:sched_switch, filter: \"prev_pid == 1\"}\n  \
                - {name: sched:sched_switch, as: by_pid, by: [next_pid]}\n  \
                - sched:sched_wakeup\n";
    let probe = FakeProbe::default();
    let plan = plan(yaml, &probe).unwrap();
    let labels: Vec<Vec<String>> = probe
        .calls()
        .into_iter()
        .map(|call| call.into_iter().map(|(label, _)| label).collect())
        .collect();
    assert_eq!(
        labels,
        [
            vec!["task-clock"],
            vec!["context-switches", "page-faults"],
            vec!["syscalls:sys_enter_getppid"],
            vec!["sched:sched_switch"],
            vec!["sched:sched_switch"],
            vec!["by_pid"],
        ]
    );
    let b = verdict(&plan, &named("b"), None).unwrap_err();
    assert!(b.starts_with("event `msr/tsc/`:"), "{b}");
    let wakeup = verdict(&plan, &GroupId::Tracepoints, Some("sched:sched_wakeup"));
    let wakeup = wakeup.as_ref().unwrap_err();
    assert!(
        wakeup.contains("unknown tracepoint `sched:sched_wakeup`") && wakeup.contains("t.yaml:"),
        "{wakeup}"
    );
    // Without tracefs, tracepoints are unsupported without asking.
    let (_dir, mut machine) = machine();
    machine.tracefs = Err("tracefs is not mounted".into());
    let probe = FakeProbe::default();
    let plan = Plan::build(
        &config("tracepoints: [syscalls:sys_enter_getppid]\n"),
        &machine,
        &probe,
    )
    .unwrap();
    assert!(probe.calls().is_empty());
    assert_eq!(
        verdict(
            &plan,
            &GroupId::Tracepoints,
            Some("syscalls:sys_enter_getppid")
        ),
        Err("tracefs is not mounted".to_string())
    );
    assert_eq!(token(&plan, &GroupId::Tracepoints, None), "no_tracefs");
}

#[test]
fn groups_past_a_backends_counters_per_cpu_are_disabled_with_the_reason() {
    // Room for 4: `a` (3) fits, `b` (2) does not, `c` (1) does, and the
    // tracepoints (2) do not; `unused`, which no selector counts, takes
    // no room.
    let yaml = "groups:\n  unused: [task-clock, cpu-clock, page-faults, minor-faults]\n  \
                a: [task-clock, context-switches, cpu-migrations]\n  \
                b: [page-faults, minor-faults]\n  c: [major-faults]\n\
                tracepoints:\n  - syscalls:sys_enter_getppid\n  \
                - {name: sched:sched_switch, as: switches}\n  \
                - {name: sched:sched_switch, as: by_pid, by: [prev_pid]}\n\
                cgroups:\n  - {path: /x, groups: [a, b, c], tracepoints: [switches, \
                syscalls:sys_enter_getppid, by_pid]}\n";
    let probe = FakeProbe {
        room: Some(4),
        ..FakeProbe::default()
    };
    let plan = plan(yaml, &probe).expect("the config plans");
    let s = |labels: &[&str]| labels.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(
        groups_for(&plan, &[0]),
        [
            (
                named("a"),
                s(&["task-clock", "context-switches", "cpu-migrations"])
            ),
            (named("c"), s(&["major-faults"])),
        ]
    );
    assert_eq!(verdict(&plan, &named("unused"), None), Ok(()));
    assert_eq!(verdict(&plan, &named("a"), None), Ok(()));
    assert_eq!(verdict(&plan, &named("b"), None), past(4, 2, 3));
    assert_eq!(verdict(&plan, &named("c"), None), Ok(()));
    let tracepoints = GroupId::Tracepoints;
    assert_eq!(token(&plan, &named("b"), None), "counter_budget");
    // Each tracepoint on its own.
    for label in ["switches", "syscalls:sys_enter_getppid"] {
        assert_eq!(verdict(&plan, &tracepoints, Some(label)), past(4, 1, 4));
        assert_eq!(token(&plan, &tracepoints, Some(label)), "counter_budget");
    }
    // A `by:` entry takes no counter: it stays countable, and so does the
    // tracepoints' list as a whole.
    assert_eq!(verdict(&plan, &tracepoints, Some("by_pid")), Ok(()));
    assert_eq!(verdict(&plan, &tracepoints, None), Ok(()));
    assert_eq!(plan.sampled_for(&[0]).len(), 1);
    // Without a bound, every group is kept.
    let unbounded = self::plan(yaml, &FakeProbe::default()).expect("the config plans");
    assert_eq!(groups_for(&unbounded, &[0]).len(), 4);
}

/// The reason of a group or tracepoint that needs `n` of `max` counters
/// per CPU, `used` taken before it.
fn past(max: usize, n: usize, used: usize) -> Result<(), String> {
    let counters = if n == 1 { "counter" } else { "counters" };
    Err(format!(
        "needs {n} {counters} per CPU, and what the config names before it (its groups, then its \
         tracepoints and probes, then what its metrics schedule) takes {used} of the {max} this \
         backend has: count fewer events, or use `backend: cgroup`"
    ))
}

#[test]
fn what_metrics_schedule_never_pushes_out_what_the_config_names() {
    // Room for 3: the config's group and its tracepoint. The metric's group
    // (`metric:m`, listed before the tracepoints) and its tracepoint
    // (listed with them) are left out, not the config's.
    let yaml = "groups:\n  a: [task-clock, cs]\ntracepoints: [sched:sched_switch]\n\
                metrics:\n  - {name: m, expr: \"syscalls:sys_enter_getppid + page-faults\"}\n";
    let probe = FakeProbe {
        room: Some(3),
        ..FakeProbe::default()
    };
    let plan = plan(yaml, &probe).expect("the config plans");
    let tracepoints = GroupId::Tracepoints;
    assert_eq!(verdict(&plan, &named("a"), None), Ok(()));
    assert_eq!(
        verdict(&plan, &tracepoints, Some("sched:sched_switch")),
        Ok(())
    );
    assert_eq!(verdict(&plan, &tracepoints, None), Ok(()));
    assert_eq!(
        verdict(&plan, &tracepoints, Some("syscalls:sys_enter_getppid")),
        past(3, 1, 3)
    );
    assert_eq!(verdict(&plan, &named("metric:m"), None), past(3, 1, 3));
    let counted: usize = groups_for(&plan, &[0]).iter().map(|(_, e)| e.len()).sum();
    assert_eq!(counted, 3);
}

/// A PMU with one counter: any group of two or more events is refused at
/// its second member (EINVAL, as x86's group validation refuses a group
/// that cannot be scheduled); `instructions` is also refused alone when
/// `broken`.
#[derive(Debug)]
struct OneCounter {
    broken: bool,
}

impl Probe for OneCounter {
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal> {
        if group.len() > 1 {
            return Err(Refusal::kernel(group, 1, Errno(libc::EINVAL)));
        }
        match group.first() {
            Some(t) if self.broken && t.label == "instructions" => {
                Err(Refusal::kernel(group, 0, Errno(libc::ENOENT)))
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn a_metrics_group_the_pmu_cannot_hold_is_counted_apart_and_a_configs_is_not() {
    let (_dir, machine) = machine();
    let yaml = "groups:
  mine: [branches, page-faults]
metrics:
  - name: ipc
    expr: instructions / cycles
  - name: per_switch
    expr: instructions / context-switches
cgroups:
  - path: /a
    groups: [mine]
    metrics: []
  - path: /b
    groups: []
    metrics: [ipc]
";
    let plan = Plan::build(&config(yaml), &machine, &OneCounter { broken: false }).unwrap();
    // The config's own group counts together or not at all.
    let refused = verdict(&plan, &named("mine"), None).expect_err("refused");
    assert!(refused.contains("event `page-faults`"), "{refused}");
    // The metric's is counted apart, each part probed alone.
    for part in ["metric:ipc:1", "metric:ipc:2"] {
        assert_eq!(verdict(&plan, &named(part), None), Ok(()), "{part}");
    }
    assert!(plan.support.iter().all(|s| s.group != named("metric:ipc")));
    assert_eq!(
        groups_for(&plan, &[1]),
        [
            (named("metric:ipc:1"), vec!["instructions".to_string()]),
            (named("metric:ipc:2"), vec!["cycles".to_string()]),
        ]
    );
    // The metric takes each input from its part; the other metric, which
    // took `instructions` from the first metric's group, does too.
    let inputs = |name: &str| -> Vec<(String, String)> {
        let metric = plan.metrics.iter().find(|m| m.name == name).expect(name);
        metric
            .inputs
            .iter()
            .map(|i| (i.group.to_string(), i.event.to_string()))
            .collect()
    };
    assert_eq!(
        inputs("ipc"),
        [
            ("metric:ipc:1".to_string(), "instructions".to_string()),
            ("metric:ipc:2".to_string(), "cycles".to_string()),
        ]
    );
    assert_eq!(inputs("per_switch")[0].0, "metric:ipc:1");
    // A part the kernel refuses alone is disabled with its own reason; the
    // other part counts.
    let plan = Plan::build(&config(yaml), &machine, &OneCounter { broken: true }).unwrap();
    let refused = verdict(&plan, &named("metric:ipc:1"), None).expect_err("refused");
    assert!(refused.contains("event `instructions`"), "{refused}");
    assert_eq!(verdict(&plan, &named("metric:ipc:2"), None), Ok(()));
}

#[test]
fn a_group_the_pmu_cannot_hold_together_says_so_not_that_an_event_is_wrong() {
    let (_dir, machine) = machine();
    let yaml = "groups:\n  mine: [branches, page-faults]\n";
    // Each event opens alone, the two together do not (a PMU of one
    // counter refuses the second member with EINVAL, as Arm's does).
    let plan = Plan::build(&config(yaml), &machine, &OneCounter { broken: false }).unwrap();
    let refused = verdict(&plan, &named("mine"), None).expect_err("refused");
    assert!(
        refused.starts_with("event `page-faults`: the PMU cannot count the group's 2 events together: it took the first 1")
            && refused.contains("split the group"),
        "{refused}"
    );
    assert_eq!(token(&plan, &named("mine"), None), "invalid");
    // A member refused alone too is wrong in itself: the kernel's reason.
    let probe = FakeProbe::refusing(&[("page-faults", false, libc::EINVAL)]);
    let plan = Plan::build(&config(yaml), &machine, &probe).unwrap();
    let refused = verdict(&plan, &named("mine"), None).expect_err("refused");
    assert_eq!(
        refused,
        format!(
            "event `page-faults`: {}",
            open_failure_reason(Errno(libc::EINVAL))
        )
    );
}
