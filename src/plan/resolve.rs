//! One config entry resolved against this machine and probed: a group's
//! events by name through its PMUs and event tables, a tracepoint through
//! tracefs (its filter and `by:` fields checked against its format), a
//! probe through its dynamic PMU. A mistake in the entry is a
//! [`ConfigError`]; what this machine cannot count is a [`NotCountable`].

use super::fields::{self, check_filter, field_label, rejected_filter, unknown_field};
use super::{GroupSpec, Planned, PlannedEvent, Probe, Refusal, SampledSpec};
use crate::config::{ConfigError, GroupDef, ProbeDef, TracepointDef};
use crate::events::{Event, EventAttr, PERF_TYPE_TRACEPOINT};
use crate::ids::GroupId;
use crate::machine::Machine;
use crate::perf::OpenFailure;
use crate::snapshot::NotCountable;

/// Resolves and probes one tracepoint entry. `Err(ConfigError)` for a
/// mistake in the entry (filter, fields); `Ok(Err(reason))` when this
/// machine cannot count it.
pub(super) fn plan_tracepoint(
    def: &TracepointDef,
    machine: &Machine,
    probe: &dyn Probe,
) -> Result<Result<Planned, NotCountable>, ConfigError> {
    let tracefs = match machine.tracefs.as_ref() {
        Ok(tracefs) => tracefs,
        Err(reason) => return Ok(Err(NotCountable::new(NotCountable::NO_TRACEFS, reason))),
    };
    let (id, format) = match tracefs
        .tracepoint_id(&def.name)
        .and_then(|id| Ok((id, tracefs.format(&def.name)?)))
    {
        Ok(found) => found,
        // Perhaps a typo, perhaps a tracepoint of another kernel: not an
        // error, but located, with the closest name, in check and the log.
        Err(reason) if !tracefs.has(&def.name) && tracefs.readable() => {
            let located = def.origin.error(reason).to_string();
            return Ok(Err(NotCountable::new(
                NotCountable::UNKNOWN_TRACEPOINT,
                located,
            )));
        }
        Err(reason) => {
            let token = if tracefs.readable() {
                NotCountable::NO_TRACEFS
            } else {
                OpenFailure::Permission.label()
            };
            return Ok(Err(NotCountable::new(token, reason)));
        }
    };
    let filter = match &def.filter {
        Some(text) => Some(check_filter(def, text, &format)?),
        None => None,
    };
    let mut event = PlannedEvent {
        label: def.label.as_str().into(),
        attr: tracepoint_attr(id),
        clock: false,
        filter: None,
        binary: None,
    };
    // First without the filter: whether this machine can count the
    // tracepoint at all. Then with it: a refusal by the kernel is then the
    // filter's.
    if let Err(refusal) = probe.try_group(&[event.trial()]) {
        return Ok(Err(refusal.into()));
    }
    if let (Some(text), Some(filter)) = (&def.filter, &filter) {
        event.filter = Some(filter.clone());
        match probe.try_group(&[event.trial()]) {
            Ok(()) => {}
            Err(Refusal {
                refused: Some((_, errno)),
                ..
            }) => return Err(rejected_filter(def, text, errno, &format)),
            Err(refusal) => return Ok(Err(refusal.into())),
        }
    }
    if def.by.is_empty() {
        return Ok(Ok(Planned::Counted(event)));
    }
    let fields = def
        .by
        .iter()
        .map(|name| match format.field(name) {
            Some(field) => Ok((field_label(name), field.clone())),
            None => Err(unknown_field(def, name, &format)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(at) = def.syscall_name {
        fields::check_syscall_field(def, fields.get(at).map(|(_, field)| field))?;
    }
    Ok(Ok(Planned::Sampled(SampledSpec {
        label: event.label,
        attr: event.attr,
        filter_fields: match &def.filter {
            Some(text) => fields::filter_fields(text)
                .filter_map(|name| format.field(name).cloned())
                .collect(),
            None => Vec::new(),
        },
        filter,
        fields,
        max_series: def.max_series,
        syscall_name: def.syscall_name,
    })))
}

/// Resolves and probes one probe.
pub(super) fn plan_probe(
    def: &ProbeDef,
    machine: &Machine,
    probe: &dyn Probe,
) -> Result<PlannedEvent, NotCountable> {
    let resolved = def
        .spec
        .resolve(&machine.pmu_root)
        .map_err(|e| NotCountable::new(NotCountable::UNKNOWN_EVENT, e.to_string()))?;
    let event = PlannedEvent {
        label: def.label.as_str().into(),
        attr: resolved.attr,
        clock: false,
        filter: None,
        binary: resolved.binary,
    };
    match probe.try_group(&[event.trial()]) {
        Ok(()) => Ok(event),
        Err(Refusal {
            refused: Some((_, errno)),
            permission: true,
            ..
        }) => Err(NotCountable::new(
            OpenFailure::Permission.label(),
            format!(
                "{} `{}`: permission denied: the kernel's {} PMU needs CAP_SYS_ADMIN \
                 (CAP_PERFMON is not enough) ({errno})",
                def.spec.kind(),
                def.spec.text(),
                def.spec.kind()
            ),
        )),
        Err(refusal) => Err(refusal.into()),
    }
}

/// Resolves every event of a group, or says which one cannot be resolved.
pub fn resolve_group(def: &GroupDef, machine: &Machine) -> Result<GroupSpec, NotCountable> {
    let events = def
        .events
        .iter()
        .map(|e| resolve_event(e, machine))
        .collect::<Result<_, _>>()?;
    Ok(GroupSpec {
        name: GroupId::Named(def.name.as_str().into()),
        events,
        cores: machine.cores.clone(),
    })
}

/// Resolves one event against the PMUs and event tables of this machine.
/// An event of the CPU's PMU on a machine that has no hardware PMU at all
/// (a VM without one) is `not_supported`, as `cycles` is there: nothing a
/// config can fix; any other event that does not resolve is
/// `unknown_event`.
pub fn resolve_event(event: &Event, machine: &Machine) -> Result<PlannedEvent, NotCountable> {
    let attr = event
        .resolve(&machine.pmu_root, &machine.tables)
        .map_err(|e| {
            let reason = format!("event `{}`: {e}", event.text);
            if e.is_missing_hardware_pmu(&machine.pmu_root) {
                let reason =
                    format!("{reason}: this machine has no hardware PMU (a VM without one)");
                NotCountable::new(OpenFailure::NotSupported.label(), reason)
            } else {
                NotCountable::new(NotCountable::UNKNOWN_EVENT, reason)
            }
        })?;
    Ok(PlannedEvent {
        label: event.label().into(),
        attr,
        clock: event.is_clock(),
        filter: None,
        binary: None,
    })
}

/// Resolves `event` and asks `probe` whether the kernel counts it alone,
/// as cgperf would count it: system-wide on its PMU's first `cpumask` CPU
/// where only the whole machine counts it (under `host:`), else the way
/// `probe`'s mechanism counts cgroups. What `cgperf check` shows per event
/// and `cgperf list` leaves out.
pub fn probe_event(event: &Event, machine: &Machine, probe: &dyn Probe) -> Result<(), Refusal> {
    let resolved =
        resolve_event(event, machine).map_err(|r| Refusal::not_asked(r.token, r.reason))?;
    match crate::events::cpumask(&machine.pmu_root, event) {
        Ok(Some(cpus)) => {
            let cpu = cpus.first().copied().unwrap_or(machine.probe_cpu);
            probe.try_system_wide(&[resolved.trial()], cpu)
        }
        _ => probe.try_group(&[resolved.trial()]),
    }
}

/// The attr of a tracepoint, by its tracefs id.
fn tracepoint_attr(id: u64) -> EventAttr {
    EventAttr::new(PERF_TYPE_TRACEPOINT, id)
}
