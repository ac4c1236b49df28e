//! Asking the kernel, through the mechanism that will count, whether this
//! machine can count something: the only question planning cannot answer
//! from sysfs and tracefs. Backends implement [`Probe`]; planning and
//! `cgperf check` / `cgperf list` ask it.

use crate::events::{CorePmus, EventAttr};
use crate::perf::{CounterGroup, Errno, OpenFailure, Target};
use crate::snapshot::NotCountable;
use std::ffi::CStr;

/// One event of a group to try: what the kernel is given, and the label a
/// refusal names it by.
#[derive(Debug, Clone, Copy)]
pub struct Trial<'a> {
    /// The `event` label, for the reason of a refusal.
    pub label: &'a str,
    /// What to pass to the kernel.
    pub attr: EventAttr,
    /// A tracepoint filter, set before the event would be enabled.
    pub filter: Option<&'a CStr>,
}

/// Asks the kernel, through the mechanism that will count, whether this
/// machine can count something.
///
/// Planning resolves names against sysfs and tracefs without asking the
/// kernel anything; whatever only the kernel can judge (a PMU that is not
/// there, a counter it refuses in this mode, a filter it does not parse,
/// missing privileges) is asked here, so that a backend answers for what it
/// will open and planning can be tested without root.
pub trait Probe: Send + Sync + std::fmt::Debug {
    /// Opens `group` (leader first, each event with its filter) once, the
    /// way this mechanism would count it, and closes it again: `Ok` when
    /// the kernel accepts all of it, else which event it refused and why.
    fn try_group(&self, group: &[Trial<'_>]) -> Result<(), Refusal>;

    /// The most counters this mechanism holds per CPU for all groups
    /// together, if it has such a bound: groups past it are planned as
    /// not countable, with the reason, rather than left uncounted behind
    /// a verdict that says they are.
    fn counters_per_cpu(&self) -> Option<usize> {
        None
    }

    /// Opens `group` once system-wide on `cpu` and closes it again: how
    /// the groups of `host:` are counted, whatever the backend. Every
    /// backend asks the kernel the same way; tests answer without it.
    fn try_system_wide(&self, group: &[Trial<'_>], cpu: u32) -> Result<(), Refusal> {
        let attrs: Vec<EventAttr> = group.iter().map(|t| t.attr).collect();
        let filters: Vec<Option<&CStr>> = group.iter().map(|t| t.filter).collect();
        CounterGroup::open_filtered(&attrs, &filters, Target::AllTasks, cpu)
            .map(drop)
            .map_err(|e| Refusal::kernel(group, e.index, e.errno))
    }
}

/// Why the kernel would not count an event, or a group of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why, for people, naming the event refused.
    pub reason: String,
    /// The `reason` label: the kernel's refusal, or why it was not asked.
    pub token: &'static str,
    /// The kernel refused for want of privileges (EACCES, EPERM): it did
    /// not say whether the machine could count the event.
    pub permission: bool,
    /// The event the kernel refused, by its index in the group, and the
    /// errno it gave; `None` when the mechanism could not ask the kernel
    /// about any event (e.g. its probe cgroup could not be opened).
    pub refused: Option<(usize, Errno)>,
}

impl Refusal {
    /// The kernel refused event `index` of `group` with `errno`.
    pub fn kernel(group: &[Trial<'_>], index: usize, errno: Errno) -> Self {
        let event = group.get(index).map_or("?", |t| t.label);
        Self {
            reason: format!(
                "event `{event}`: {}",
                crate::perf::open_failure_reason(errno)
            ),
            token: OpenFailure::from_errno(errno).label(),
            permission: matches!(errno.0, libc::EACCES | libc::EPERM),
            refused: Some((index, errno)),
        }
    }

    /// The kernel was not asked, for `reason` (`token` says which kind):
    /// the event did not resolve, or the mechanism could not open what it
    /// probes on.
    pub fn not_asked(token: &'static str, reason: String) -> Self {
        Self {
            reason,
            token,
            permission: false,
            refused: None,
        }
    }
}

/// Where `group` is tried, and its events as opened there: on `cpu`, or on
/// a hybrid CPU the first online CPU (`cpu` first) whose core PMU counts
/// every event of the group. Refused without asking the kernel when no CPU
/// does: the group holds events of two core types.
pub fn placed<'a>(
    group: &[Trial<'a>],
    cores: &CorePmus,
    cpu: u32,
) -> Result<(u32, Vec<Trial<'a>>), Refusal> {
    let attrs: Vec<EventAttr> = group.iter().map(|t| t.attr).collect();
    let online = std::iter::once_with(|| crate::cpus::online().unwrap_or_default()).flatten();
    let Some((cpu, attrs)) = cores.first_cpu_for(&attrs, std::iter::once(cpu).chain(online)) else {
        let names: Vec<&str> = cores.pmus().iter().map(|p| p.name.as_str()).collect();
        return Err(Refusal::not_asked(
            NotCountable::MIXED_CORE_TYPES,
            format!(
                "no online CPU counts all of its events: this CPU's core types ({}) each \
                 count on their own CPUs; put the events of each core type in a group of \
                 their own",
                names.join(", ")
            ),
        ));
    };
    let trials = group
        .iter()
        .zip(attrs)
        .map(|(t, attr)| Trial { attr, ..*t })
        .collect();
    Ok((cpu, trials))
}

impl From<Refusal> for NotCountable {
    fn from(refusal: Refusal) -> Self {
        Self::new(refusal.token, refusal.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE};

    fn trial(label: &str, attr: EventAttr) -> Trial<'_> {
        Trial {
            label,
            attr,
            filter: None,
        }
    }

    /// An Intel hybrid's sysfs: `cpu_core` on CPUs 0-3, `cpu_atom` on 4-7.
    fn hybrid() -> (tempfile::TempDir, CorePmus) {
        let root = tempfile::tempdir().expect("temp dir");
        for (name, type_, cpus) in [("cpu_core", 4, "0-3"), ("cpu_atom", 10, "4-7")] {
            let dir = root.path().join(name);
            std::fs::create_dir(&dir).expect("PMU dir");
            std::fs::write(dir.join("type"), format!("{type_}\n")).expect("type");
            std::fs::write(dir.join("cpus"), format!("{cpus}\n")).expect("cpus");
        }
        let cores = CorePmus::discover(root.path()).expect("core PMUs");
        (root, cores)
    }

    #[test]
    fn a_group_is_tried_where_it_counts_and_events_of_two_core_types_are_refused() {
        let (_root, cores) = hybrid();
        let cycles = EventAttr::new(PERF_TYPE_HARDWARE, 0);
        let clock = EventAttr::new(PERF_TYPE_SOFTWARE, 1);
        // On the probe CPU, generalized events with its PMU's type.
        let (cpu, trials) = placed(
            &[trial("cycles", cycles), trial("task-clock", clock)],
            &cores,
            1,
        )
        .expect("placed");
        assert_eq!(cpu, 1);
        assert_eq!(trials[0].attr.config, 4 << 32);
        assert_eq!((trials[1].label, trials[1].attr), ("task-clock", clock));
        // An E-core event is tried on the first online E-core; where none
        // of CPUs 4-7 is online (this machine may have fewer CPUs), no CPU
        // counts it.
        let atom = [trial("cpu_atom/event=0xc0/", EventAttr::new(10, 0xc0))];
        let first_e_core = crate::cpus::online()
            .expect("online CPUs")
            .into_iter()
            .find(|c| (4..=7).contains(c));
        match (placed(&atom, &cores, 1), first_e_core) {
            (Ok((cpu, _)), Some(e_core)) => assert_eq!(cpu, e_core),
            (Err(refusal), None) => assert_eq!(refusal.token, NotCountable::MIXED_CORE_TYPES),
            (placed, e_core) => panic!("{placed:?} with E-core {e_core:?} online"),
        }
        let mixed = [
            trial("cpu_core/event=0xc0/", EventAttr::new(4, 0xc0)),
            trial("cpu_atom/event=0xc0/", EventAttr::new(10, 0xc0)),
        ];
        let refusal = placed(&mixed, &cores, 0).expect_err("no CPU counts both");
        assert_eq!(refusal.token, NotCountable::MIXED_CORE_TYPES);
        assert_eq!(refusal.refused, None);
        assert!(
            refusal.reason.contains("(cpu_atom, cpu_core)")
                && refusal.reason.contains("a group of their own"),
            "{}",
            refusal.reason
        );
        // Without a hybrid CPU, everything is tried on the probe CPU.
        let (cpu, trials) = placed(&mixed, &CorePmus::default(), 3).expect("placed");
        assert_eq!((cpu, trials[1].attr.type_), (3, 10));
    }
}
