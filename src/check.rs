//! `cgperf check`: what this machine can count of a (valid) config, event by
//! event, and why not.

use crate::backend::bpf::{self, CountedBy};
use crate::backend::choose::{Kind, choose};
use crate::config::{CgroupPattern, Config, MetricDef, ProcessMatch};
use crate::ids::GroupId;
use crate::list::{NAME_MAX, column_width};
use crate::machine::{CpuTables, Discovered, Machine};
use crate::plan::Probe;
use crate::plan::{self, Plan};
use crate::snapshot::Support;
use anyhow::Context;
use std::io::Write;

/// One line of the table.
struct Row {
    group: String,
    event: String,
    status: Result<(), String>,
    /// Said after the status: where a host group counts.
    note: String,
}

/// The row of a group as a whole.
const WHOLE_GROUP: &str = "(whole group)";

/// Probes every group, event and tracepoint of `config` and writes the table.
/// `tables` are the CPU's, read at start.
pub fn run(config: &Config, tables: CpuTables, out: &mut dyn Write) -> anyhow::Result<Verdict> {
    let Discovered {
        cgroupfs,
        cpus,
        machine,
    } = Machine::discover(tables)?;
    writeln!(out, "config:      valid")?;
    writeln!(out, "cgroup2:     {}", cgroupfs.root().display())?;
    match &machine.tracefs {
        Ok(t) => writeln!(out, "tracefs:     {}", t.root().display())?,
        Err(e) => writeln!(out, "tracefs:     unavailable: {e}")?,
    }
    writeln!(
        out,
        "online CPUs: {cpus:?} (probing on CPU {})",
        machine.probe_cpu
    )?;
    for core in machine.cores.pmus() {
        writeln!(
            out,
            "core type:   {} on CPUs {:?} (hybrid CPU: events of the CPU are opened there with its type {})",
            core.name, core.cpus, core.type_
        )?;
    }
    writeln!(
        out,
        "kernel.perf_event_paranoid: {}{}",
        crate::perf::paranoid_level(),
        paranoid_note(crate::perf::paranoid(), &crate::perf::Held::now())
    )?;
    let mut chosen = choose(config.backend, config.max_cgroups).context("backend: bpf")?;
    let (plan, probe) = chosen.plan(config, &machine)?;
    writeln!(out, "backend:     {}", chosen.describe())?;
    writeln!(out)?;

    let mut rows = rows(config, &machine, &*probe, &plan);
    if chosen.kind == Kind::Bpf {
        program_notes(&plan, &mut rows);
    }
    let host = host_rows(config, &plan);
    let every = || rows.iter().chain(&host);
    let width = |f: fn(&Row) -> usize| column_width(every().map(f), 5, NAME_MAX);
    let (gw, ew) = (width(|r| r.group.len()), width(|r| r.event.len()));
    // Reasons are footnotes: one failure (no PMU, no permission) usually
    // explains many rows.
    let mut reasons: Vec<String> = Vec::new();
    // A config that counts only `host:` has no cgroup table, nor cgroups.
    let per_cgroup = !rows.is_empty();
    if per_cgroup {
        writeln!(out, "{:gw$}  {:ew$}  STATUS", "GROUP", "EVENT")?;
    }
    for (i, row) in every().enumerate() {
        if i == rows.len() {
            if per_cgroup {
                writeln!(out)?;
            }
            writeln!(
                out,
                "host: counted once for the whole machine, not per cgroup"
            )?;
            writeln!(out, "{:gw$}  {:ew$}  STATUS", "GROUP", "EVENT")?;
        }
        let status = match &row.status {
            Ok(()) => "ok".to_string(),
            Err(reason) => {
                let prefix = format!("event `{}`: ", row.event);
                let reason = reason.strip_prefix(&prefix).unwrap_or(reason);
                let n = match reasons.iter().position(|r| r == reason) {
                    Some(i) => i + 1,
                    None => {
                        reasons.push(reason.to_string());
                        reasons.len()
                    }
                };
                format!("NOT COUNTED [{n}]")
            }
        };
        writeln!(
            out,
            "{:gw$}  {:ew$}  {status}{}",
            row.group, row.event, row.note
        )?;
    }
    if !reasons.is_empty() {
        writeln!(out)?;
    }
    for (i, reason) in reasons.iter().enumerate() {
        writeln!(out, "[{}] {reason}", i + 1)?;
    }
    if chosen.kind == Kind::Bpf {
        by_lines(&plan, out)?;
    }
    metric_lines(config, &plan, out)?;

    if per_cgroup {
        writeln!(out)?;
        let found = cgroupfs.expand(&plan.selectors);
        let sw = column_width(
            plan.selectors.iter().map(|s| s.pattern.as_str().len()),
            9,
            NAME_MAX,
        );
        writeln!(out, "{:5} {:sw$}  CGROUPS NOW", "KIND", "SELECTOR")?;
        for (i, selector) in plan.selectors.iter().enumerate() {
            let kind = match selector.pattern {
                CgroupPattern::Path(_) => "path",
                CgroupPattern::Match { .. } => "match",
            };
            let n = found.iter().filter(|f| f.selectors.contains(&i)).count();
            writeln!(out, "{kind:5} {:sw$}  {n}", selector.pattern.as_str())?;
        }
    }

    process_lines(&plan, out)?;
    if let Some(energy) = &plan.energy {
        writeln!(out)?;
        for line in crate::energy::Account::describe(energy) {
            writeln!(out, "{line}")?;
        }
        // A process series' energy is weighed as the cgroups' are.
        for selector in &plan.processes {
            let weighed = energy.weight.filter(|w| {
                let groups = plan.groups_of_process(selector);
                groups
                    .iter()
                    .any(|g| g.events.iter().any(|e| &*e.label == *w))
            });
            match weighed {
                Some(w) => writeln!(
                    out,
                    "energy: process `{}`: what its {w} cost, a view of the cgroups' shares \
                     (not added to them)",
                    selector.name
                )?,
                None => writeln!(
                    out,
                    "energy: process `{}`: no energy series (its groups count no {})",
                    selector.name,
                    energy.weight.unwrap_or("cycles or task-clock")
                )?,
            }
        }
    }

    writeln!(out)?;
    let support: Vec<&Support> = plan.support.iter().chain(&plan.host.support).collect();
    let nothing = crate::snapshot::nothing_countable(support.iter().copied());
    writeln!(out, "{}", summary(&support, nothing.as_deref()))?;
    let over_budget = support.iter().any(|s| {
        s.status
            .as_ref()
            .is_err_and(|e| e.token == crate::snapshot::NotCountable::COUNTER_BUDGET)
    });
    Ok(if nothing.is_some() {
        Verdict::NothingCountable
    } else if over_budget {
        writeln!(
            out,
            "Some of what the config names does not fit in the backend's counters \
             (counter_budget, reasons above): count fewer events, or use `backend: cgroup`."
        )?;
        Verdict::OverBudget
    } else {
        Verdict::Countable
    })
}

/// What the paranoid `level` means for the daemon, where it asks for
/// `CAP_SYS_ADMIN`: this check may run with privileges the daemon lacks
/// (root in a shell, beside a unit that does not grant it), so its verdicts
/// hold for the daemon only if the daemon has `CAP_SYS_ADMIN` too.
fn paranoid_note(level: Option<i32>, held: &crate::perf::Held) -> String {
    if !crate::perf::sys_admin_only(level) {
        return String::new();
    }
    if held.sys_admin {
        " (Debian's and Ubuntu's kernels then refuse perf_event_open without CAP_SYS_ADMIN: \
         this check has it; the daemon counts what it says only if given CAP_SYS_ADMIN too, \
         which it then keeps)"
            .to_owned()
    } else {
        " (Debian's and Ubuntu's kernels then refuse perf_event_open without CAP_SYS_ADMIN, \
         which this check does not have)"
            .to_owned()
    }
}

/// Each entry of `processes:`, what it matches on, and how many processes
/// match it now.
fn process_lines(plan: &Plan, out: &mut dyn Write) -> anyhow::Result<()> {
    if plan.processes.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    let now = crate::process::matching_now(&plan.processes);
    let described: Vec<String> = plan
        .processes
        .iter()
        .map(|p| match &p.matches {
            ProcessMatch::Comm(g) => format!("comm: {}", g.text),
            ProcessMatch::Exe(g) => format!("exe: {}", g.text),
            ProcessMatch::Cmdline(g) => format!("cmdline: {}", g.text),
            ProcessMatch::Pid(pid) => format!("pid: {pid}"),
        })
        .collect();
    let nw = column_width(plan.processes.iter().map(|p| p.name.len()), 7, NAME_MAX);
    let mw = column_width(described.iter().map(String::len), 5, NAME_MAX);
    writeln!(out, "{:nw$}  {:mw$}  PROCESSES NOW", "PROCESS", "MATCH")?;
    for (i, (p, what)) in plan.processes.iter().zip(&described).enumerate() {
        let n = match &now {
            Ok(counts) => counts.get(i).map_or("?".to_owned(), ToString::to_string),
            Err(e) => format!("? (listing /proc: {e})"),
        };
        writeln!(out, "{:nw$}  {what:mw$}  {n}", p.name)?;
    }
    Ok(())
}

/// What `cgperf check` found, for its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Some group can be counted (perhaps not all).
    Countable,
    /// The config is valid, but this machine counts none of its groups.
    NothingCountable,
    /// Some group or tracepoint does not fit in the backend's counters per
    /// CPU: a config that asks more than it can have, which is the
    /// config's to fix (unlike a PMU the machine lacks).
    OverBudget,
}

/// The last line: how many groups count, and what that means. A
/// tracepoint or probe left out of a group that counts is said too, never
/// hidden under "all".
fn summary(support: &[&Support], nothing: Option<&str>) -> String {
    if let Some(why) = nothing {
        return why.to_owned();
    }
    let groups = support.iter().filter(|s| s.event.is_none());
    let (ok, all) = groups.fold((0, 0), |(ok, all), s| {
        (ok + usize::from(s.status.is_ok()), all + 1)
    });
    let counts = |group: &GroupId| {
        support
            .iter()
            .any(|s| s.group == *group && s.event.is_none() && s.status.is_ok())
    };
    let entries_off = support
        .iter()
        .filter(|s| s.event.is_some() && s.status.is_err() && counts(&s.group))
        .count();
    let groups = match all - ok {
        0 if all == 0 => return "The config names no group to count.".to_owned(),
        0 if all == 1 && entries_off == 0 => {
            return "The group can be counted on this machine.".to_owned();
        }
        0 if entries_off == 0 => {
            return format!("All {all} groups can be counted on this machine.");
        }
        0 => format!("{all} of {all} groups can be counted on this machine"),
        off => format!(
            "{ok} of {all} groups can be counted on this machine; {off} {} disabled",
            if off == 1 { "is" } else { "are" }
        ),
    };
    let entries = match entries_off {
        0 => String::new(),
        1 => "; 1 tracepoint or probe is not counted".to_owned(),
        n => format!("; {n} tracepoints or probes are not counted"),
    };
    format!("{groups}{entries} (reasons above), the rest keeps counting.")
}

/// How the bpf backend counts each `by:` entry: in the kernel, or through
/// ring buffers, and why.
fn by_lines(plan: &Plan, out: &mut dyn Write) -> anyhow::Result<()> {
    let every: Vec<usize> = (0..plan.selectors.len()).collect();
    let sampled = plan.sampled_for(&every);
    if !sampled.is_empty() {
        writeln!(out)?;
    }
    for spec in sampled {
        match crate::backend::bpf::counted_in_kernel(&spec) {
            Ok(()) => writeln!(out, "by: {}: counted in the kernel", spec.label)?,
            Err(why) => writeln!(
                out,
                "by: {}: counted through ring buffers: {why}",
                spec.label
            )?,
        }
    }
    Ok(())
}

/// Each metric, its formula, and whether this machine counts what it uses:
/// the cgroups' metrics, then the host's.
fn metric_lines(config: &Config, plan: &Plan, out: &mut dyn Write) -> anyhow::Result<()> {
    let every = [
        ("metric", &config.metrics, &plan.support),
        ("host metric", &config.host.metrics, &plan.host.support),
    ];
    for (what, metrics, support) in every {
        if !metrics.is_empty() {
            writeln!(out)?;
        }
        for metric in metrics {
            let status = metric_status(metric, support);
            writeln!(out, "{what} {} = {}: {status}", metric.name, metric.formula)?;
        }
    }
    Ok(())
}

/// Whether `metric` is computed, given the verdicts on its inputs' groups
/// (`support`): the first input this machine does not count says why not.
fn metric_status(metric: &MetricDef, support: &[Support]) -> String {
    let uncounted = metric.inputs.iter().find(|input| {
        let group = GroupId::from_label(&input.group);
        let event = match group {
            GroupId::Named(_) => None,
            _ => Some(&*input.event),
        };
        input.is_counted() && verdict(support, &group, event).is_err()
    });
    match uncounted {
        None => "computed".to_owned(),
        Some(input) => format!(
            "NOT COMPUTED: it uses `{}` (group `{}`), which this machine does not count",
            input.event, input.group
        ),
    }
}

/// Every event alone, then the group as a whole (a group can fail as a whole,
/// e.g. more events than the PMU has counters), then each tracepoint.
fn rows(config: &Config, machine: &Machine, probe: &dyn Probe, plan: &Plan) -> Vec<Row> {
    let mut rows = Vec::new();
    for def in &config.groups {
        let id = GroupId::Named(def.name.as_str().into());
        for event in &def.events {
            let status = plan::probe_event(event, machine, probe).map_err(|r| r.reason);
            rows.push(Row {
                group: def.name.clone(),
                event: event.text.clone(),
                status,
                note: String::new(),
            });
        }
        rows.push(Row {
            group: def.name.clone(),
            event: WHOLE_GROUP.into(),
            status: verdict(&plan.support, &id, None),
            note: String::new(),
        });
    }
    let tracepoints = config
        .tracepoints
        .iter()
        .map(|t| (GroupId::Tracepoints, &t.label));
    let probes = config.probes.iter().map(|p| (GroupId::Probes, &p.label));
    for (group, label) in tracepoints.chain(probes) {
        rows.push(Row {
            group: group.label().into(),
            status: verdict(&plan.support, &group, Some(label)),
            event: label.to_string(),
            note: String::new(),
        });
    }
    rows
}

/// Under the bpf backend, notes of each event the program counts itself
/// that it takes no perf counter, and of each one a hardware event beside
/// it keeps on a perf counter that a group of its own would not
/// (`docs/configuration.md` says why to prefer that).
fn program_notes(plan: &Plan, rows: &mut [Row]) {
    let every: Vec<usize> = (0..plan.selectors.len()).collect();
    // Tracepoints and probes are always perf counters: only named groups
    // get notes. Their rows are their events as written, in order.
    let named = plan
        .groups_for(&every)
        .into_iter()
        .filter(|spec| matches!(spec.name, GroupId::Named(_)));
    for spec in named {
        let group = spec.name.label();
        let events = rows
            .iter_mut()
            .filter(|r| r.group == group && r.event != WHOLE_GROUP);
        for (row, counted) in events.zip(bpf::counted_by(&spec)) {
            row.note = match counted {
                CountedBy::Program => " (counted by the BPF program: no perf counter)",
                CountedBy::CounterInThisGroup => {
                    " (a perf counter, scheduled with the group's hardware events; in a group \
                     of software events only, the BPF program counts it, at less cost)"
                }
                CountedBy::Counter => continue,
            }
            .to_owned();
        }
    }
}

/// The groups of `host:`, as a whole, with where each counts, then each of
/// its tracepoints.
fn host_rows(config: &Config, plan: &Plan) -> Vec<Row> {
    let support = &plan.host.support;
    let mut rows = Vec::new();
    for def in &config.host.groups {
        let id = GroupId::Named(def.name.as_str().into());
        let counted = plan.host.groups.iter().find(|g| g.spec.name == id);
        let note = match counted.and_then(|g| g.cpumask.as_deref()) {
            Some(cpus) => format!(" (once per socket or die: on CPUs {cpus:?}, the PMU's cpumask)"),
            None if counted.is_some() => " (on every CPU)".to_owned(),
            None => String::new(),
        };
        rows.push(Row {
            group: def.name.clone(),
            event: def
                .events
                .iter()
                .map(|e| e.text.as_str())
                .collect::<Vec<_>>()
                .join(","),
            status: verdict(support, &id, None),
            note,
        });
    }
    for t in &config.host.tracepoints {
        rows.push(Row {
            group: GroupId::Tracepoints.label().into(),
            status: verdict(support, &GroupId::Tracepoints, Some(&t.label)),
            event: t.label.clone(),
            note: String::new(),
        });
    }
    rows
}

fn verdict(support: &[Support], group: &GroupId, event: Option<&str>) -> Result<(), String> {
    support
        .iter()
        .find(|s| s.group == *group && s.event.as_deref() == event)
        .map_or_else(
            || Err("not probed".into()),
            |s| s.status.clone().map_err(|e| e.reason),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::NotCountable;

    fn support(group: GroupId, event: Option<&str>, ok: bool) -> Support {
        Support {
            group,
            event: event.map(Into::into),
            status: if ok {
                Ok(())
            } else {
                Err(NotCountable::new(
                    NotCountable::UNKNOWN_EVENT,
                    "no such".to_owned(),
                ))
            },
        }
    }

    #[test]
    fn the_summary_never_says_all_under_a_tracepoint_not_counted() {
        let sched = GroupId::Named("sched".into());
        let all = [
            support(sched.clone(), None, true),
            support(GroupId::Tracepoints, None, true),
            support(GroupId::Tracepoints, Some("sched:sched_switch"), true),
        ];
        let refs: Vec<&Support> = all.iter().collect();
        assert_eq!(
            summary(&refs, None),
            "All 2 groups can be counted on this machine."
        );
        let mut one_off = all.to_vec();
        one_off.push(support(GroupId::Tracepoints, Some("sched:no_such"), false));
        let refs: Vec<&Support> = one_off.iter().collect();
        assert_eq!(
            summary(&refs, None),
            "2 of 2 groups can be counted on this machine; 1 tracepoint or probe is not \
             counted (reasons above), the rest keeps counting."
        );
        one_off.push(support(sched, None, false));
        one_off.remove(0);
        let refs: Vec<&Support> = one_off.iter().collect();
        assert_eq!(
            summary(&refs, None),
            "1 of 2 groups can be counted on this machine; 1 is disabled; 1 tracepoint or \
             probe is not counted (reasons above), the rest keeps counting."
        );
    }

    #[test]
    fn a_metric_over_duration_time_is_computed_when_its_counts_are() {
        let yaml = "groups:\n  sw: [cs]\nmetrics:\n  - {name: rate, expr: cs / duration_time}\n";
        let config = crate::config::parse("m.yaml", yaml).expect("config");
        let mut plan = crate::plan::testing::software_plan(&config);
        assert_eq!(metric_status(&config.metrics[0], &plan.support), "computed");
        // The same metric with its counted group refused says which input.
        for s in &mut plan.support {
            s.status = Err(crate::snapshot::NotCountable::new(
                crate::snapshot::NotCountable::UNKNOWN_EVENT,
                "refused".to_owned(),
            ));
        }
        let status = metric_status(&config.metrics[0], &plan.support);
        assert!(
            status.starts_with("NOT COMPUTED: it uses `context-switches` (group `sw`)"),
            "{status}"
        );
    }
}
