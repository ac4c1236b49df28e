//! What each counted cgroup did on each socket, for `energy:`: the totals
//! of the event its energy share is weighed by, summed over each socket's
//! CPUs, from the same totals its series are made of. Summed once per
//! cgroup and CPU, so that attribution takes a few numbers per cgroup
//! whatever the number of CPUs; and summed in the pass that makes the
//! cgroup's series (`series.rs`), in the loop that reads the weight's
//! totals for its series (`Sockets::weigh`), and kept with those series:
//! a cgroup whose totals did not change since the last snapshot shows the
//! same sums again without reading its totals (recomputed, never adjusted
//! by a difference, so that they are exactly what a sum of the exported
//! totals per CPU gives). Each cgroup's sums are kept inline with its
//! series (up to two sockets) and copied into the snapshot's one array of
//! sums: no interval allocates for them, nor reads them from memory of
//! their own.

use crate::host::Sockets;
use crate::plan::GroupSpec;
use crate::snapshot::Weighed;
use std::sync::Arc;

/// The event cgroups' energy shares are weighed by (the `event` label of
/// `cycles` or `task-clock`), each CPU's socket, and the cgroups the last
/// snapshot's activity had (shared by the next while the same).
#[derive(Debug)]
pub(super) struct Weight<'a> {
    pub label: &'static str,
    pub sockets: &'a mut Sockets,
    pub last: &'a mut Arc<[Weighed]>,
}

/// Of `groups`, the first that counts the event labelled `weight`, and the
/// event's position in it; `None` where none does (the cgroup's work goes
/// to its counted ancestor's own share, or to `system`).
pub(super) fn weighed(groups: &[Arc<GroupSpec>], weight: &str) -> Option<(usize, usize)> {
    groups.iter().enumerate().find_map(|(n, spec)| {
        let at = spec.events.iter().position(|e| &*e.label == weight)?;
        Some((n, at))
    })
}
