//! A metric's group counted apart when the kernel cannot count it as one,
//! as perf splits a weak group: a metric's events go into one group so
//! that their ratio is exact under multiplexing, but a group with more
//! events than the PMU has counters never counts at all (the kernel refuses
//! the member that does not fit). Counted one group per event, each is
//! scaled on its own and the metric is estimated, as perf's is. A group
//! the config writes is never split: its events count together or not at
//! all.

use std::sync::Arc;

use super::{GroupSpec, Probe, Refusal};
use crate::config::{GroupDef, MetricDef, Selection, part_name};
use crate::ids::GroupId;
use crate::snapshot::NotCountable;

/// A group counted apart: its name and, in its order, each part's name
/// and the label of its one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Split {
    group: String,
    parts: Vec<(String, Arc<str>)>,
}

/// Whether `def`'s group, which the kernel refused as `refusal` says, is
/// to be counted apart: a group a metric scheduled, refused at a member
/// past its leader (the leader alone was accepted).
pub(super) fn worth_splitting(def: &GroupDef, refusal: &Refusal) -> bool {
    def.splittable && def.events.len() > 1 && refusal.refused.is_some_and(|(i, _)| i > 0)
}

/// A part of a split group, and whether it counts.
pub(super) type Part = (GroupId, Result<GroupSpec, NotCountable>);

/// `spec`'s events as groups of one each, each asked of `probe` alone.
pub(super) fn parts(spec: &GroupSpec, probe: &dyn Probe) -> (Split, Vec<Part>) {
    let group = spec.name.label().to_string();
    let mut split = Split {
        group: group.clone(),
        parts: Vec::with_capacity(spec.events.len()),
    };
    let mut planned = Vec::with_capacity(spec.events.len());
    for (i, event) in spec.events.iter().enumerate() {
        let name = part_name(&group, i);
        let id = GroupId::Named(name.as_str().into());
        let part = GroupSpec {
            name: id.clone(),
            events: vec![event.clone()],
            cores: spec.cores.clone(),
        };
        let status = part.probe(probe).map(|()| part).map_err(NotCountable::from);
        split.parts.push((name, event.label.clone()));
        planned.push((id, status));
    }
    (split, planned)
}

/// Makes `selectors` (of `cgroups:` or `processes:`) count the parts of
/// each split group instead of it.
pub(super) fn rewire_selectors(splits: &[Split], selectors: &mut [impl Selection]) {
    for selector in selectors {
        let groups = selector.groups_mut();
        *groups = std::mem::take(groups)
            .into_iter()
            .flat_map(|name| match splits.iter().find(|s| s.group == name) {
                Some(split) => split.parts.iter().map(|(p, _)| p.clone()).collect(),
                None => vec![name],
            })
            .collect();
    }
}

/// Makes `metrics` take each input from the part of its split group that
/// counts it.
pub(super) fn rewire_metrics(splits: &[Split], metrics: &mut [Arc<MetricDef>]) {
    for metric in metrics {
        let moved = |input: &crate::config::MetricInput| {
            let split = splits.iter().find(|s| *s.group == *input.group)?;
            let (part, _) = split.parts.iter().find(|(_, e)| *e == input.event)?;
            Some(part.as_str())
        };
        if metric.inputs.iter().all(|i| moved(i).is_none()) {
            continue;
        }
        let mut def = MetricDef::clone(metric);
        for input in &mut def.inputs {
            if let Some(part) = moved(input) {
                input.group = part.into();
            }
        }
        *metric = Arc::new(def);
    }
}
