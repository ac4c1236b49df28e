//! Where each counted group's events sit among a CPU's counters: stable
//! positions, so that a reload changes only the groups that change.

use super::abi::{MAX_COUNTED, MAX_EVENTS};
use crate::backend::budget::Held;
use crate::plan::GroupSpec;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The groups wanted, in plan order, as many as fit in [`MAX_COUNTED`]
/// counters per CPU.
#[derive(Debug, Clone, Default)]
pub(super) struct Layout {
    groups: Vec<Arc<GroupSpec>>,
}

impl Layout {
    /// The groups in this order, as many as fit in [`MAX_COUNTED`]; the
    /// others, returned second, cannot be counted through BPF.
    pub fn of(groups: Vec<Arc<GroupSpec>>) -> (Self, Vec<Arc<GroupSpec>>) {
        let mut layout = Self::default();
        let mut left = Vec::new();
        let mut events = 0;
        for spec in groups {
            let n = spec.events.len();
            if events + n > MAX_COUNTED {
                left.push(spec);
                continue;
            }
            events += n;
            layout.groups.push(spec);
        }
        (layout, left)
    }

    /// The groups, in order.
    pub fn groups(&self) -> impl Iterator<Item = &Arc<GroupSpec>> {
        self.groups.iter()
    }
}

/// Where a placed group stands in a change of the counted groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Counted.
    Live,
    /// Placed, counted on each CPU from its [`Kernel::cut`] on.
    New,
    /// Counted on each CPU until its [`Kernel::cut`].
    Retiring,
}

/// A group placed at counter indices, and its counters per CPU.
#[derive(Debug)]
pub(super) struct Placed {
    pub spec: Arc<GroupSpec>,
    /// The indices of its events, leader first.
    pub at: Vec<usize>,
    pub phase: Phase,
    pub held: BTreeMap<u32, Held>,
}

impl Placed {
    /// Its indices, each with whether it leads the group.
    pub fn described(&self) -> impl Iterator<Item = (usize, bool)> + '_ {
        self.at.iter().enumerate().map(|(i, &e)| (e, i == 0))
    }
}

/// Starts changing `placed` to `wanted`: groups identical stay
/// where they are, the others become [`Phase::Retiring`], and each new
/// one (or changed one) is placed at free indices ([`Phase::New`]), as
/// many as fit beside those retiring. Then, per CPU,
/// [`Kernel::open_new`], [`Kernel::cut`] and [`Kernel::close_retiring`],
/// and [`Kernel::settle`] at the end. Returns whether anything changes.
pub(super) fn place(placed: &mut Vec<Placed>, wanted: &Layout) -> bool {
    let mut kept = vec![false; placed.len()];
    let mut new = Vec::new();
    for spec in wanted.groups() {
        match placed.iter().position(|p| p.spec == *spec) {
            Some(i) => kept[i] = true,
            None => new.push(spec.clone()),
        }
    }
    let mut changed = false;
    for (p, kept) in placed.iter_mut().zip(kept) {
        if !kept {
            p.phase = Phase::Retiring;
            changed = true;
        }
    }
    let mut used = [false; MAX_EVENTS];
    for &e in placed.iter().flat_map(|p| &p.at) {
        used[e] = true;
    }
    for spec in new {
        let free: Vec<usize> = (0..MAX_EVENTS).filter(|&i| !used[i]).collect();
        if free.len() < spec.events.len() {
            // Not while layouts hold at most MAX_COUNTED (half the
            // positions): kept + old and kept + new fit side by side.
            continue;
        }
        let at = free[..spec.events.len()].to_vec();
        for &e in &at {
            used[e] = true;
        }
        placed.push(Placed {
            spec,
            at,
            phase: Phase::New,
            held: BTreeMap::new(),
        });
        changed = true;
    }
    changed
}
