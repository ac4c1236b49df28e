//! A backend's counters per CPU, shared by everything it counts: what fits,
//! in the order the config names it, and what does not, disabled with the
//! reason.

use super::{GroupSpec, Plan, PlannedEvent};
use crate::ids::{EventId, GroupId};
use crate::snapshot::NotCountable;
use std::sync::Arc;

impl Plan {
    /// Keeps, of the groups some selector counts, those whose events fit in
    /// `max` counters per CPU together; the others cannot be counted, and
    /// say why. What the config names comes first: its own groups, then
    /// its tracepoints one by one (those metrics scheduled are listed after
    /// the config's, so they never push one of the config's out), then its
    /// probes, then the groups metrics scheduled.
    pub(super) fn fit(&mut self, max: usize) {
        let every: Vec<usize> = (0..self.selectors.len()).collect();
        let wanted = self.groups_for(&every);
        let scheduled = |spec: &GroupSpec| match &spec.name {
            GroupId::Named(name) => name.starts_with(crate::config::SCHEDULED_PREFIX),
            _ => false,
        };
        let mut units: Vec<GroupSpec> = Vec::new();
        let named = |of_metrics: bool| {
            wanted
                .iter()
                .filter(move |g| matches!(g.name, GroupId::Named(_)) && scheduled(g) == of_metrics)
                .map(|g| (**g).clone())
        };
        units.extend(named(false));
        for list in [GroupId::Tracepoints, GroupId::Probes] {
            for spec in wanted.iter().filter(|g| g.name == list) {
                units.extend(spec.events.iter().map(|e| GroupSpec {
                    name: spec.name.clone(),
                    events: vec![e.clone()],
                    cores: spec.cores.clone(),
                }));
            }
        }
        units.extend(named(true));
        let mut used = 0;
        for spec in units {
            let n = spec.events.len();
            if used + n <= max {
                used += n;
                continue;
            }
            let counters = if n == 1 { "counter" } else { "counters" };
            let reason = format!(
                "needs {n} {counters} per CPU, and what the config names before it (its groups, \
                 then its tracepoints and probes, then what its metrics schedule) takes {used} \
                 of the {max} this backend has: count fewer events, or use `backend: cgroup`"
            );
            self.disable(&spec, &reason);
        }
    }

    /// Plans `spec` (one of [`Plan::groups_for`]'s) as not countable, for
    /// `reason`.
    fn disable(&mut self, spec: &GroupSpec, reason: &str) {
        let events: Vec<EventId> = spec.events.iter().map(PlannedEvent::id).collect();
        let is = |event: &Option<Arc<str>>| match event {
            // The tracepoints' and probes' lists as a whole: once none of
            // theirs counts (disabled one by one).
            None => matches!(spec.name, GroupId::Named(_)),
            Some(label) => events.iter().any(|e| e.label == *label),
        };
        let refused = || Err(NotCountable::new(NotCountable::COUNTER_BUDGET, reason));
        for s in &mut self.support {
            if s.group == spec.name && is(&s.event) {
                s.status = refused();
            }
        }
        let whole = !matches!(spec.name, GroupId::Named(_))
            && self
                .support
                .iter()
                .filter(|s| s.group == spec.name && s.event.is_some())
                .all(|s| s.status.is_err());
        if whole {
            for s in &mut self.support {
                if s.group == spec.name && s.event.is_none() {
                    s.status = refused();
                }
            }
        }
        match spec.name {
            GroupId::Named(_) => self
                .groups
                .iter_mut()
                .filter(|(id, _)| *id == spec.name)
                .for_each(|(_, planned)| *planned = None),
            GroupId::Tracepoints | GroupId::Probes => {
                let list = match spec.name {
                    GroupId::Probes => &mut self.probes,
                    _ => &mut self.tracepoints,
                };
                list.iter_mut()
                    .filter(|(id, _)| events.contains(id))
                    .for_each(|(_, planned)| *planned = None);
            }
        }
    }
}
