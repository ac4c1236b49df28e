//! What a counted group of a cgroup is charged on each CPU: the baseline
//! its next reading is a delta from, and where that delta goes in the
//! totals. A CPU whose slot holds nothing keeps neither until its first
//! charge (most of thousands of cgroups never run on most CPUs of a large
//! machine).

use super::kernel::Kernel;
use crate::ids::CgroupSlot;
use crate::plan::GroupSpec;
use crate::totals::{Baseline, Delta, GroupKey, Handle, Totals};
use litemap::LiteMap;
use std::sync::Arc;

/// One counted group of a cgroup on one CPU: where its totals go, and the
/// baseline its next reading is a delta from.
#[derive(Debug)]
pub(super) struct Fed {
    totals: Handle,
    columns: Vec<usize>,
    baseline: Baseline,
}

/// A counted group of a cgroup, per CPU.
#[derive(Debug)]
pub(super) struct Charged {
    pub spec: Arc<GroupSpec>,
    /// Where its events stand among a CPU's counters, leader first.
    pub at: Vec<usize>,
    /// The CPUs where its slot was charged something (or, with per-CPU
    /// series, every CPU it counts on). Most of thousands of cgroups never
    /// run on most CPUs of a large machine: a CPU whose slot held nothing
    /// when it was fed there has no baseline (it is zero) and, unless its
    /// series is shown, no totals; both come with its first charge. Kept in
    /// one sorted vector rather than a tree, a group's are read in a few
    /// cache lines.
    cpus: LiteMap<u32, Fed>,
    /// The CPUs it was fed on whose slot held nothing then, and has been
    /// charged nothing since: a bit per CPU.
    waiting: Vec<u64>,
}

/// Whether bit `cpu` is set in `bits`.
fn has(bits: &[u64], cpu: u32) -> bool {
    bits.get(cpu as usize / 64)
        .is_some_and(|w| w & (1 << (cpu % 64)) != 0)
}

/// Sets (`on`) or clears bit `cpu` in `bits`.
fn set(bits: &mut Vec<u64>, cpu: u32, on: bool) {
    let word = cpu as usize / 64;
    if word >= bits.len() {
        if !on {
            return;
        }
        bits.resize(word + 1, 0);
    }
    match on {
        true => bits[word] |= 1 << (cpu % 64),
        false => bits[word] &= !(1 << (cpu % 64)),
    }
}

impl Charged {
    /// `spec`, its events at positions `at` of each CPU's counters, fed
    /// nowhere yet.
    pub(super) fn new(spec: Arc<GroupSpec>, at: Vec<usize>) -> Self {
        Self {
            spec,
            at,
            cpus: LiteMap::new(),
            waiting: Vec::new(),
        }
    }

    /// Counts what the slot is charged on `cpu` from now on (nothing on a
    /// hybrid CPU's other core type): what it holds now is the baseline.
    /// A slot that holds nothing there waits for its first charge for a
    /// baseline, and for its totals unless they are `shown` (per-CPU
    /// series).
    pub(super) fn feed(
        &mut self,
        kernel: &Kernel,
        (cgroup, cpu, slot): (CgroupSlot, u32, u32),
        shown: bool,
        totals: &mut Totals,
    ) {
        if self.cpus.contains_key(&cpu) || !self.spec.counts_on(cpu) {
            return;
        }
        if has(&self.waiting, cpu) {
            if shown {
                // Its baseline is zero: the next read adds all it holds.
                set(&mut self.waiting, cpu, false);
                self.cpus
                    .insert(cpu, Fed::new((cgroup, cpu), &self.spec, totals));
            }
            return;
        }
        if !shown && Fed::holds_nothing(kernel, (cpu, slot), &self.at) {
            set(&mut self.waiting, cpu, true);
            return;
        }
        let mut fed = Fed::new((cgroup, cpu), &self.spec, totals);
        let mut ignored = Delta::default();
        Fed::advance(
            &mut fed.baseline,
            kernel,
            (cpu, slot),
            &self.at,
            &mut ignored,
        );
        self.cpus.insert(cpu, fed);
    }

    /// Adds what the slot was charged on `cpu` since the last read to its
    /// totals, if it is fed there; a first charge of a slot that held
    /// nothing is counted whole.
    pub(super) fn read(
        &mut self,
        kernel: &Kernel,
        (cgroup, cpu, slot): (CgroupSlot, u32, u32),
        totals: &mut Totals,
    ) {
        if let Some(fed) = self.cpus.get_mut(&cpu) {
            fed.read(kernel, cpu, slot, &self.at, totals);
            return;
        }
        if !has(&self.waiting, cpu) {
            return;
        }
        if Fed::holds_nothing(kernel, (cpu, slot), &self.at) {
            return;
        }
        set(&mut self.waiting, cpu, false);
        let mut fed = Fed::new((cgroup, cpu), &self.spec, totals);
        fed.read(kernel, cpu, slot, &self.at, totals);
        self.cpus.insert(cpu, fed);
    }

    /// Reads `cpu` one last time and stops counting there.
    pub(super) fn last_read(
        &mut self,
        kernel: &Kernel,
        at: (CgroupSlot, u32, u32),
        totals: &mut Totals,
    ) {
        self.read(kernel, at, totals);
        let cpu = at.1;
        self.cpus.remove(&cpu);
        set(&mut self.waiting, cpu, false);
    }
}

impl Fed {
    /// Feeds the totals of `spec` in `cgroup` on `cpu`, from a zero
    /// baseline.
    fn new((cgroup, cpu): (CgroupSlot, u32), spec: &GroupSpec, totals: &mut Totals) -> Self {
        let handle = totals.group(&GroupKey {
            cgroup,
            group: spec.id(),
            cpu,
        });
        let columns = totals.columns(handle, &spec.event_ids());
        Self {
            totals: handle,
            columns,
            baseline: Baseline::new(spec.events.len()),
        }
    }

    /// The slot's cumulative reading on `cpu` for this group: its leader's
    /// times enabled and running (a group's members share them, as in a
    /// group read), and each event's value in group order.
    fn reading<'k>(
        kernel: &'k Kernel,
        (cpu, slot): (u32, u32),
        at: &'k [usize],
    ) -> (u64, u64, impl Iterator<Item = u64> + 'k) {
        let leader = at.first().map(|&e| kernel.reading(cpu, slot, e));
        let leader = leader.unwrap_or_default();
        let values = at.iter().enumerate().map(move |(i, &e)| match i {
            0 => leader.value,
            _ => kernel.reading(cpu, slot, e).value,
        });
        (leader.enabled, leader.running, values)
    }

    /// Whether the slot was never charged anything for this group on
    /// `cpu`.
    fn holds_nothing(kernel: &Kernel, at_slot: (u32, u32), at: &[usize]) -> bool {
        let (enabled, running, mut values) = Self::reading(kernel, at_slot, at);
        enabled == 0 && running == 0 && values.all(|v| v == 0)
    }

    /// What the slot was charged for this group on `cpu` since the last
    /// call, into `delta`.
    fn advance(
        baseline: &mut Baseline,
        kernel: &Kernel,
        at_slot: (u32, u32),
        at: &[usize],
        delta: &mut Delta,
    ) {
        let (enabled, running, values) = Self::reading(kernel, at_slot, at);
        baseline.advance(enabled, running, values.map(Some), delta);
    }

    /// Adds what the slot was charged for this group on `cpu` since the
    /// last call to its totals. Most of thousands of cgroups ran nothing on
    /// a CPU in an interval: a slot that holds what the baseline holds is
    /// left at that.
    fn read(&mut self, kernel: &Kernel, cpu: u32, slot: u32, at: &[usize], totals: &mut Totals) {
        let Self {
            totals: handle,
            columns,
            baseline,
        } = self;
        let (enabled, running, values) = Self::reading(kernel, (cpu, slot), at);
        if baseline.is_at(enabled, running, values) {
            return;
        }
        totals.add(*handle, columns, |delta| {
            Self::advance(baseline, kernel, (cpu, slot), at, delta)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_bits_are_set_and_cleared_one_by_one_past_the_first_word() {
        let mut bits = Vec::new();
        assert!(!has(&bits, 0) && !has(&bits, 4095));
        // Clearing a CPU never set grows nothing.
        set(&mut bits, 300, false);
        assert!(bits.is_empty());
        for cpu in [0, 63, 64, 127, 1000] {
            set(&mut bits, cpu, true);
        }
        assert_eq!(bits.len(), 1000 / 64 + 1);
        for cpu in 0..1100 {
            assert_eq!(
                has(&bits, cpu),
                [0, 63, 64, 127, 1000].contains(&cpu),
                "{cpu}"
            );
        }
        set(&mut bits, 64, false);
        set(&mut bits, 1000, false);
        assert!(has(&bits, 63) && !has(&bits, 64) && has(&bits, 127) && !has(&bits, 1000));
    }
}
