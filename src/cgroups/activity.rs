//! What each counted cgroup did on each socket, for `energy:`: the totals
//! of the event its energy share is weighed by, summed over each socket's
//! CPUs, from the same totals its series are made of. Summed here, once
//! per cgroup and CPU, so that attribution takes a few numbers per cgroup
//! whatever the number of CPUs.

use super::counting::Entry;
use crate::host::Sockets;
use crate::snapshot::CgroupActivity;
use crate::totals::{Totals, exported_total};
use std::collections::BTreeMap;

/// The activity of every entry that counts `weight` (the `event` label of
/// `cycles` or `task-clock`), in path order; an entry whose groups do not
/// count it has none (its work goes to its counted ancestor's own share,
/// or to `system`). `sockets` tells each CPU's socket.
pub(super) fn of(
    entries: &BTreeMap<String, Entry>,
    totals: &Totals,
    weight: &str,
    sockets: &mut Sockets,
) -> Vec<CgroupActivity> {
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries.values() {
        let found = entry.wanted().groups.iter().find_map(|spec| {
            let at = spec.events.iter().position(|e| &*e.label == weight)?;
            Some((spec, at))
        });
        let Some((spec, at)) = found else { continue };
        let event = &spec.events[at];
        let id = spec.id();
        let per_cpu = totals
            .per_cpu(entry.slot, &id)
            .map(|(cpu, t)| (cpu, exported_total([t], at, &event.label, event.clock)));
        let sockets = sockets.sum(per_cpu);
        out.push(CgroupActivity {
            cgroup: entry.path.clone(),
            labels: entry.labels().clone(),
            start_time: entry.created,
            sockets,
        });
    }
    out
}
