//! Counting backends: the mechanisms that make the kernel count what the
//! engine asks for, and read it back into the [`Totals`].
//!
//! The engine decides (which cgroups, which groups, in what order, which
//! totals live); a backend opens, reads and closes. Everything the engine
//! asks of a mechanism is in [`Backend`]. A backend the engine drives is
//! two mechanisms composed ([`compose`]): one counts a cgroup's groups
//! (cgroup-mode perf events, [`cgroup`]; or the BPF program, [`bpf`]), the
//! other its `by:` tracepoints (through rings, [`rings`]; or in the kernel
//! where it can, [`bpf::ByInKernel`]), as [`choose`]'s table pairs them.

pub mod auto;
pub mod bpf;
pub mod budget;
pub mod cgroup;
pub mod choose;
pub mod compose;
mod opening;
pub mod reading;
pub mod rings;

use crate::cpus::CpuChanges;
use crate::ids::CgroupSlot;
use crate::plan::{GroupSpec, Plan, SampledSpec};
use crate::snapshot::{Errors, SkipReason};
use crate::totals::Totals;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a cgroup is to count: the groups and `by:` tracepoints its
/// selectors ask for, in the plan's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wanted {
    /// Counter groups (the counted tracepoints and the probes as one group
    /// each).
    pub groups: Vec<Arc<GroupSpec>>,
    /// Tracepoints counted by field values.
    pub sampled: Vec<Arc<SampledSpec>>,
}

impl Wanted {
    /// What a cgroup chosen by `selectors` (indices into the plan's) wants.
    pub fn of(plan: &Plan, selectors: &[usize]) -> Self {
        Self {
            groups: plan.groups_for(selectors),
            sampled: plan.sampled_for(selectors),
        }
    }
}

/// A cgroup the engine counts, as a backend needs to know it.
#[derive(Debug, Clone)]
pub struct Cgroup {
    /// Its slot: the key of its totals.
    pub slot: CgroupSlot,
    /// Its path under the cgroup2 root, for messages.
    pub path: Arc<str>,
    /// Its directory.
    pub dir: PathBuf,
    /// Its kernel id (its directory's inode), as discovery found it.
    pub ino: u64,
}

/// What became of a cgroup the engine asked a backend to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Counted (what could not be opened for a reason that passes is
    /// tried again by [`Backend::retry`]).
    Counted,
    /// Not counted, for this reason; the backend holds nothing of it.
    Skipped(SkipReason),
    /// Removed since it was found: the next scan drops it.
    Gone,
}

/// What a backend says of itself, for self-metrics.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Descriptors it holds: every perf descriptor of the process (the
    /// tally), and its own others (BPF programs and maps). A mechanism
    /// within a [`compose::Composed`] gives only the latter.
    pub open_fds: u64,
    /// Samples the kernel could not hand over (a full ring).
    pub samples_lost: u64,
    /// Samples that could not be decoded.
    pub samples_undecodable: u64,
    /// Its open and read failures so far.
    pub errors: Errors,
    /// Nanoseconds its BPF programs ran in the kernel (while the kernel
    /// keeps BPF statistics: cgperf turns them on when it may).
    pub bpf_run_ns: u64,
    /// Times its BPF programs ran.
    pub bpf_runs: u64,
    /// Switches the kernel made without the tracepoint the bpf backend
    /// counts by, which its program finds (`docs/backends.md`).
    pub bpf_unseen_switches: u64,
}

impl Stats {
    /// Adds `other`'s figures to these: two mechanisms as one, or one
    /// and what another said before it was dropped.
    pub fn add(&mut self, other: &Stats) {
        self.open_fds += other.open_fds;
        self.samples_lost += other.samples_lost;
        self.samples_undecodable += other.samples_undecodable;
        self.errors.add(&other.errors);
        self.bpf_run_ns += other.bpf_run_ns;
        self.bpf_runs += other.bpf_runs;
        self.bpf_unseen_switches += other.bpf_unseen_switches;
    }
}

/// The cgroups of `batch` (some of `cgroups`, in their order) that a
/// mechanism refused, `outcomes` being its outcome for each of `batch`:
/// their index in `cgroups`, and why.
pub(crate) fn refused(
    cgroups: &[(Cgroup, Wanted)],
    batch: &[(Cgroup, Wanted)],
    outcomes: Vec<Outcome>,
) -> Vec<(usize, Outcome)> {
    let mut theirs = batch.iter().zip(outcomes).peekable();
    let mut refused = Vec::new();
    for (i, (cgroup, _)) in cgroups.iter().enumerate() {
        match theirs.next_if(|((c, _), _)| c.slot == cgroup.slot) {
            Some((_, outcome)) if outcome != Outcome::Counted => refused.push((i, outcome)),
            _ => {}
        }
    }
    refused
}

/// A mechanism handing the groups it counts over to cgroup-mode counters
/// (`backend: auto` leaving BPF, [`auto`]): asked on each CPU, by a thread
/// running there where it may, right after each new group started there.
pub trait Outgoing {
    /// The handing-over thread is now on `cpu` (if it could move there):
    /// what ran there before and is not yet taken in is taken in now.
    fn arrived(&mut self, cpu: u32);

    /// Adds what it counted of group `spec` of the cgroup in `slot` on
    /// `cpu` since its last read to the totals.
    fn read(&mut self, slot: CgroupSlot, spec: &GroupSpec, cpu: u32, totals: &mut Totals);
}

/// A counting mechanism.
///
/// Contract: what a backend reads goes into the [`Totals`] under the keys
/// of the cgroup's slot, the group's id and the CPU (or the `by:`
/// tracepoint's id); nothing counted between two reads is dropped when the
/// backend replaces or closes what counted it, except with the cgroup
/// itself ([`Backend::remove`]), whose series vanish.
pub trait Backend {
    /// A plan is in force (at start and after each reload): its settings
    /// for the mechanism, such as the size of new rings.
    fn configure(&mut self, plan: &Plan);

    /// Whether a cgroup that wants `wanted` fits now on `cpus` CPUs, the
    /// perf descriptors it needs aside ([`Backend::fds_per_cpu`]); if not,
    /// why it is skipped.
    /// A mechanism with no limit of its own admits every cgroup.
    fn admits(&self, wanted: &Wanted, cpus: usize) -> Result<(), SkipReason> {
        let _ = (wanted, cpus);
        Ok(())
    }

    /// The perf descriptors a cgroup that wants `wanted` holds here per
    /// CPU: whoever composes mechanisms checks the sum against the budget.
    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        let _ = wanted;
        0
    }

    /// Whether it holds anything of the cgroup in `slot`.
    fn counts(&self, slot: CgroupSlot) -> bool;

    /// Makes each cgroup count what it wants on the `online` CPUs: what it
    /// counts already and did not change is kept as it is; a group whose
    /// events changed is replaced, the old one read one last time, so that
    /// its events that stay lose nothing and count nothing twice; what is
    /// no longer wanted is closed. One outcome per cgroup, in order; a
    /// cgroup that is not counted holds nothing afterwards.
    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome>;

    /// About `more` cgroups are about to be applied one by one (a scan
    /// found them): room for them all may be made at once.
    fn expect(&mut self, more: usize) {
        let _ = more;
    }

    /// Stops counting a cgroup (its series vanish: nothing is read).
    fn remove(&mut self, slot: CgroupSlot);

    /// Follows CPUs that went offline (what counted there is read one last
    /// time) and came (back) online (everything is opened there).
    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals);

    /// Opens again what a failure that passes (descriptors, memory, a busy
    /// PMU) left unopened on one of the `online` CPUs.
    fn retry(&mut self, online: &[u32], totals: &mut Totals);

    /// Reads everything into the totals: once per interval.
    fn read(&mut self, totals: &mut Totals);

    /// Whether the backend has work between reads ([`Backend::wait`],
    /// [`Backend::drain`]).
    /// A mechanism read only at collections has none.
    fn drains(&self) -> bool {
        false
    }

    /// Waits until the backend asks to be drained, or `timeout` passes.
    fn wait(&mut self, timeout: Duration) {
        std::thread::sleep(timeout);
    }

    /// Takes in what the kernel handed over since the last drain.
    fn drain(&mut self, totals: &mut Totals) {
        let _ = totals;
    }

    /// Its statistics now.
    fn stats(&self) -> Stats;
}

/// A backend chosen at run time (see [`choose`]) counts as itself.
impl<B: Backend + ?Sized> Backend for Box<B> {
    fn configure(&mut self, plan: &Plan) {
        (**self).configure(plan)
    }

    fn admits(&self, wanted: &Wanted, cpus: usize) -> Result<(), SkipReason> {
        (**self).admits(wanted, cpus)
    }

    fn fds_per_cpu(&self, wanted: &Wanted) -> u64 {
        (**self).fds_per_cpu(wanted)
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        (**self).counts(slot)
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        (**self).apply(cgroups, online, totals)
    }

    fn remove(&mut self, slot: CgroupSlot) {
        (**self).remove(slot)
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        (**self).cpus_changed(changes, totals)
    }

    fn retry(&mut self, online: &[u32], totals: &mut Totals) {
        (**self).retry(online, totals)
    }

    fn read(&mut self, totals: &mut Totals) {
        (**self).read(totals)
    }

    fn drains(&self) -> bool {
        (**self).drains()
    }

    fn expect(&mut self, more: usize) {
        (**self).expect(more)
    }

    fn wait(&mut self, timeout: Duration) {
        (**self).wait(timeout)
    }

    fn drain(&mut self, totals: &mut Totals) {
        (**self).drain(totals)
    }

    fn stats(&self) -> Stats {
        (**self).stats()
    }
}
