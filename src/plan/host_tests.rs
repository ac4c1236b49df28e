//! Planning `host:` on recorded sysfs trees: PMUs this machine lacks
//! (`power`, uncore), laid out as the kernel documents them, so that where
//! a group counts, what one count is and what a cgroup may not count are
//! tested without them.

use super::tests::{FakeProbe, config, machine};
use super::*;
use crate::snapshot::NotCountable;

/// The fake machine of the planning tests plus a two-socket server's
/// `power` PMU (one CPU per socket, counts in Joules), a memory
/// controller counting per die, and `msr`.
fn server() -> (tempfile::TempDir, Machine) {
    let (dir, machine) = machine();
    let files = [
        ("msr/type", "12\n"),
        ("msr/events/tsc", "event=0x00\n"),
        ("msr/format/event", "config:0-63\n"),
        ("power/type", "21\n"),
        ("power/cpumask", "0,28\n"),
        ("power/format/event", "config:0-7\n"),
        ("power/events/energy-pkg", "event=0x02\n"),
        (
            "power/events/energy-pkg.scale",
            "2.3283064365386962890625e-10\n",
        ),
        ("power/events/energy-pkg.unit", "Joules\n"),
        ("uncore_imc_0/type", "14\n"),
        ("uncore_imc_0/cpumask", "0,14,28,42\n"),
        ("uncore_imc_0/format/event", "config:0-7\n"),
        ("uncore_imc_0/format/umask", "config:8-15\n"),
        (
            "uncore_imc_0/events/cas_count_read",
            "event=0x04,umask=0x0f\n",
        ),
        (
            "uncore_imc_0/events/cas_count_read.scale",
            "6.103515625e-5\n",
        ),
        ("uncore_imc_0/events/cas_count_read.unit", "MiB\n"),
    ];
    for (path, content) in files {
        let path = machine.pmu_root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    (dir, machine)
}

fn host_plan(yaml: &str, probe: &FakeProbe) -> Result<Plan, ConfigError> {
    let (_dir, machine) = server();
    Plan::build(&config(yaml), &machine, probe)
}

fn named(name: &str) -> GroupId {
    GroupId::Named(name.into())
}

#[test]
fn a_host_group_counts_where_its_pmu_says_with_its_units() {
    let yaml = "host:\n  groups:\n    energy: [power/energy-pkg/]\n    \
                memory: [uncore_imc_0/cas_count_read/]\n    \
                tsc: [msr/tsc/, context-switches]\n";
    let probe = FakeProbe::default();
    let plan = host_plan(yaml, &probe).expect("plans");
    let group = |name: &str| {
        plan.host
            .groups
            .iter()
            .find(|g| g.spec.name == named(name))
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let energy = group("energy");
    assert_eq!(energy.cpumask.as_deref(), Some(&[0, 28][..]));
    let joules = energy.units[0].as_ref().expect("a unit");
    assert_eq!(
        (joules.scale, joules.unit.as_str()),
        (2f64.powi(-32), "Joules")
    );
    assert_eq!(
        group("memory").cpumask.as_deref(),
        Some(&[0, 14, 28, 42][..])
    );
    assert_eq!(group("memory").units[0].as_ref().unwrap().unit, "MiB");
    // msr and software events count on every CPU, in no unit.
    assert_eq!(group("tsc").cpumask, None);
    assert_eq!(group("tsc").units, [None, None]);
    // Each group was asked system-wide, on the first CPU it counts on.
    assert_eq!(*probe.system_wide_cpus.lock().unwrap(), [0, 0, 0]);
    for name in ["energy", "memory", "tsc"] {
        assert_eq!(plan.host.verdict(&named(name)).unwrap().status, Ok(()));
    }
    // Nothing of it is a cgroup's.
    assert!(plan.support.is_empty(), "{:?}", plan.support);
    assert!(plan.groups_for(&[0]).is_empty());
}

#[test]
fn a_host_group_whose_pmus_count_on_different_cpus_is_not_countable() {
    let yaml = "host:\n  groups:\n    mixed: [power/energy-pkg/, uncore_imc_0/cas_count_read/]\n    \
                fine: [power/energy-pkg/]\n";
    let plan = host_plan(yaml, &FakeProbe::default()).expect("plans");
    let why = plan.host.verdict(&named("mixed")).unwrap().status.clone();
    let why = why.expect_err("mixed scopes");
    assert_eq!(why.token, NotCountable::MIXED_SCOPES);
    assert!(why.reason.contains("group of its own"), "{why}");
    // The rest counts.
    assert_eq!(plan.host.groups.len(), 1);
    assert_eq!(plan.host.verdict(&named("fine")).unwrap().status, Ok(()));
}

#[test]
fn a_host_group_the_kernel_refuses_is_disabled_with_its_reason() {
    let yaml = "host:\n  groups:\n    energy: [power/energy-pkg/]\n    \
                sw: [context-switches]\n";
    let probe = FakeProbe::refusing(&[("power/energy-pkg/", false, libc::ENOENT)]);
    let plan = host_plan(yaml, &probe).expect("plans");
    let why = plan.host.verdict(&named("energy")).unwrap().status.clone();
    assert!(
        why.expect_err("refused")
            .reason
            .contains("power/energy-pkg/")
    );
    assert_eq!(plan.host.groups.len(), 1);
    assert_eq!(plan.host.groups[0].spec.name, named("sw"));
}

#[test]
fn host_tracepoints_count_as_one_group_and_an_unknown_one_is_left_out() {
    let yaml = "host:\n  tracepoints: [syscalls:sys_enter_getppid, nosuch:thing]\n";
    let probe = FakeProbe::default();
    let plan = host_plan(yaml, &probe).expect("plans");
    let [group] = &plan.host.groups[..] else {
        panic!("{:?}", plan.host.groups)
    };
    assert_eq!(group.spec.name, GroupId::Tracepoints);
    let labels: Vec<&str> = group.spec.events.iter().map(|e| &*e.label).collect();
    assert_eq!(labels, ["syscalls:sys_enter_getppid"]);
    let unknown = plan
        .host
        .support
        .iter()
        .find(|s| s.event.as_deref() == Some("nosuch:thing"))
        .unwrap();
    assert_eq!(
        unknown.status.as_ref().unwrap_err().token,
        NotCountable::UNKNOWN_TRACEPOINT
    );
    // The group as a whole counts: one of its tracepoints does.
    assert_eq!(
        plan.host.verdict(&GroupId::Tracepoints).unwrap().status,
        Ok(())
    );
    assert_eq!(*probe.system_wide_cpus.lock().unwrap(), [0]);
}

#[test]
fn a_system_wide_event_asked_per_cgroup_is_an_error_saying_to_move_it_to_host() {
    let yaml = "groups:\n  sw: [context-switches]\n  energy: [cycles, power/energy-pkg/]\n";
    let err = host_plan(yaml, &FakeProbe::default()).expect_err("an error");
    let text = err.to_string();
    assert_eq!((err.line, err.column), (Some(3), Some(3)), "{text}");
    assert!(text.contains("power/energy-pkg/"), "{text}");
    assert!(text.contains("`power`"), "{text}");
    assert!(text.contains("move the group under `host:`"), "{text}");
    // Under `host:`, the same group plans.
    let yaml =
        "groups:\n  sw: [context-switches]\nhost:\n  groups:\n    energy: [power/energy-pkg/]\n";
    let plan = host_plan(yaml, &FakeProbe::default()).expect("plans");
    assert_eq!(plan.host.groups.len(), 1);
}
