//! The BPF backend: one system-wide counter per (event, CPU), whatever the
//! number of cgroups, and a BPF program at every context switch that
//! charges what they counted to the cgroup switched out and to each of its
//! monitored ancestors (see `count.bpf.c`). Context switches and the clocks
//! of groups of software events the program counts itself, without a
//! counter ([`placement::sources`]). Descriptors and kernel memory
//! per cgroup: one hash entry and one slot of totals (a reading per counter
//! and CPU), no perf event.
//!
//! Each cgroup gets a slot in the program's totals; a slot's readings are
//! cumulative sums of (value, enabled, running) deltas per counter and CPU,
//! turned into per-interval [`Delta`]s by a [`Baseline`] per (cgroup,
//! group, CPU), exactly as the cgroup backend turns its group reads: the
//! same scaling, the same never-ran rule.
//!
//! The bpf backend is these counters beside [`ByInKernel`]: `by:`
//! tracepoints counted in the kernel by a second program (`sampled.bpf.c`),
//! and those it cannot express through rings (one sampled event per cgroup
//! and CPU, [`ByRings`]).

mod abi;
mod available;
mod chunks;
mod epochs;
mod fed;
mod handover;
mod ids;
mod kernel;
mod placement;
mod probe;
mod programs;
mod sampled;
mod statistics;
mod sys;
mod unavailable;

pub use available::{WATCH, available, hidden_switches, unload};
pub use placement::{CountedBy, counted_by};
pub use probe::BpfProbe;
pub use sampled::{ByInKernel, counted_in_kernel};
pub use statistics::run_statistics;
pub use unavailable::Unavailable;

use super::budget::Fds;
use super::compose::Composed;
use super::rings::ByRings;
use super::{Backend, Cgroup, Outcome, Outgoing, Stats, Wanted};
use crate::cpus::CpuChanges;
use crate::ids::CgroupSlot;
use crate::perf::{OpenFailure, open_failure_reason};
use crate::plan::{GroupSpec, Plan};
use crate::snapshot::{ErrorReason, Errors, Operation, SkipReason};
use crate::totals::Totals;
use fed::Charged;
use kernel::{Kernel, NotOpened};
use placement::{Layout, Phase};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// cgroups counted at most when no capacity is given. It bounds the slots
/// only: the totals take `possible CPUs × 24` bytes per counter placed and
/// slot in use, in chunks added as they are needed (`chunks.rs`).
pub const DEFAULT_CAPACITY: usize = 4096;

/// A counted cgroup.
#[derive(Debug)]
struct Counted {
    /// Its kernel id (its directory's inode), the program's key.
    id: u64,
    /// Its slot in the program's totals.
    slot: u32,
    groups: Vec<Charged>,
}

/// The bpf backend: groups counted by the BPF program, `by:` tracepoints in
/// the kernel where it can, else on rings.
pub type BpfBackend = Composed<BpfCounters, ByInKernel>;

/// Counts groups per cgroup through a BPF program.
#[derive(Debug)]
pub struct BpfCounters {
    /// `None` until a plan names a group to count, unless `available`
    /// loaded it.
    kernel: Option<Kernel>,
    /// The layout the plan in force asks for.
    wanted: Layout,
    capacity: u32,
    cpus: u32,
    tally: Arc<AtomicU64>,
    /// The CPUs counted on.
    online: Vec<u32>,
    /// CPUs gone offline since the last read: what they charged before
    /// going is read once more.
    gone: Vec<u32>,
    /// Whether the plan in force shows per-CPU series: then every CPU a
    /// group counts on has its totals from the start.
    per_cpu: bool,
    /// CPUs where a counter failed to open for a reason that passes.
    unopened: BTreeSet<u32>,
    cgroups: BTreeMap<CgroupSlot, Counted>,
    /// Slots never used, and slots released.
    next_slot: u32,
    free: Vec<u32>,
    /// Slots of removed cgroups, free once a flush has ended every run
    /// that may still charge them.
    released: Vec<u32>,
    errors: Errors,
    logged: HashSet<(Arc<str>, OpenFailure)>,
    /// Switches the kernel made without the program's tracepoint, at the
    /// last read.
    unseen: u64,
}

impl BpfBackend {
    /// A backend counting at most `capacity` cgroups (at least one); `by:`
    /// tracepoints within the budget of `fds`, with `ring_pages` pages per
    /// ring, every perf descriptor counted in its tally.
    pub fn new(capacity: usize, fds: Fds, ring_pages: usize) -> Result<Self, Unavailable> {
        let cpus = available::possible_cpus()?;
        Ok(Self::laid_out_for(cpus, capacity, fds, ring_pages))
    }

    /// The mechanism counting `by:` tracepoints beside the program's
    /// counters: in the kernel for at most `capacity` cgroups, else on
    /// rings of `ring_pages` pages, within the budget of `fds`.
    pub fn by(capacity: usize, fds: &Fds, ring_pages: usize) -> ByInKernel {
        let rings = ByRings::new(fds.clone(), ring_pages);
        ByInKernel::new(capacity, fds.tally.clone(), rings)
    }

    /// The same with the program's maps laid out for `cpus` possible CPUs
    /// rather than this machine's: every collection reads each counted
    /// cgroup's slot on each CPU it is told is online, and how that cost
    /// grows with the CPUs is measured on a small machine by laying the
    /// maps out for a large one (`benches/slots.rs`). A CPU this machine
    /// lacks opens no counter, is flushed as an offline one (nothing to
    /// charge) and its slots stay empty.
    pub fn laid_out_for(cpus: u32, capacity: usize, fds: Fds, ring_pages: usize) -> Self {
        let counters = BpfCounters::new(cpus, capacity, fds.tally.clone());
        Composed::of(counters, Self::by(capacity, &fds, ring_pages), fds)
    }
}

impl BpfCounters {
    /// Switches the kernel made without the program's tracepoint, as of
    /// the last read.
    pub fn unseen_switches(&self) -> u64 {
        self.unseen
    }

    /// Counters for at most `capacity` cgroups on this machine, every perf
    /// descriptor counted in `tally`.
    pub fn on_this_machine(capacity: usize, tally: Arc<AtomicU64>) -> Result<Self, Unavailable> {
        Ok(Self::new(available::possible_cpus()?, capacity, tally))
    }

    /// Counters for at most `capacity` cgroups, the program's maps laid
    /// out for `cpus` possible CPUs (see [`BpfBackend::laid_out_for`]).
    fn new(cpus: u32, capacity: usize, tally: Arc<AtomicU64>) -> Self {
        // Whether the program loads here is `available`'s question, asked
        // once by whoever chose this backend (`backend::choose`), which
        // keeps what it loaded for this backend.
        Self {
            kernel: available::loaded(capacity, cpus),
            wanted: Layout::default(),
            capacity: available::capacity_u32(capacity),
            cpus,
            tally,
            online: Vec::new(),
            gone: Vec::new(),
            per_cpu: false,
            unopened: BTreeSet::new(),
            cgroups: BTreeMap::new(),
            next_slot: 0,
            free: Vec::new(),
            released: Vec::new(),
            errors: Errors::default(),
            logged: HashSet::new(),
            unseen: 0,
        }
    }

    /// Opens every counter on `cpus`; those that fail for a reason that
    /// passes are tried again by [`Backend::retry`].
    fn open_cpus(&mut self, kernel: &mut Kernel, cpus: &[u32]) {
        for &cpu in cpus {
            let failures = kernel.open_cpu(cpu, &self.tally);
            if failures.iter().any(|f| f.error.errno.passes()) {
                self.unopened.insert(cpu);
            } else {
                self.unopened.remove(&cpu);
            }
            self.note(failures);
        }
    }

    /// Counts and logs (once per group and reason) counters that did not
    /// open.
    fn note(&mut self, failures: Vec<NotOpened>) {
        for NotOpened { group, cpu, error } in failures {
            let failure = OpenFailure::from_errno(error.errno);
            self.errors
                .count(Operation::Open, ErrorReason::Kernel(failure));
            if self.logged.insert((group.shared_label(), failure)) {
                tracing::warn!(
                    group = %group, cpu,
                    "cannot open group system-wide: {} (logged once per group and reason)",
                    open_failure_reason(error.errno)
                );
            }
        }
    }

    /// Flushes every CPU and adds what each counted cgroup's groups were
    /// charged since the last read.
    fn read_groups(&mut self, totals: &mut Totals) {
        let Some(kernel) = &self.kernel else { return };
        for errno in kernel.flush(kernel.cpus()) {
            let reason = ErrorReason::Kernel(OpenFailure::from_errno(errno));
            self.errors.count(Operation::Read, reason);
        }
        let cpus: Vec<u32> = self.online.iter().chain(&self.gone).copied().collect();
        for (&key, counted) in &mut self.cgroups {
            for charged in &mut counted.groups {
                for &cpu in &cpus {
                    charged.read(kernel, (key, cpu, counted.slot), totals);
                }
            }
        }
        let unseen = kernel.unseen_switches();
        if unseen > 0 && self.unseen == 0 {
            tracing::warn!(
                unseen,
                "this kernel switched out of tasks without the sched_switch tracepoint the \
                 bpf backend counts by (a VM guest kernel's own threads, for one): what perf \
                 counters count while such a task runs is charged to the cgroup of the task \
                 that runs next (cgperf_bpf_unseen_switches_total counts them; \
                 docs/backends.md); `backend: cgroup` counts it exactly (`backend: auto` \
                 moves to it at once, `backend: bpf` counts on through BPF)"
            );
        }
        self.unseen = unseen;
        self.gone.clear();
        // Every run that could still charge a released slot has ended.
        self.free.append(&mut self.released);
    }

    /// A slot for a new cgroup, if one is free.
    fn take_slot(&mut self) -> Option<u32> {
        if self.free.is_empty() && self.next_slot >= self.capacity && !self.released.is_empty() {
            if let Some(kernel) = &self.kernel {
                kernel.flush(kernel.cpus());
            }
            self.free.append(&mut self.released);
        }
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        (self.next_slot < self.capacity).then(|| {
            self.next_slot += 1;
            self.next_slot - 1
        })
    }

    /// Gives `counted` the groups of `wanted` the program counts, on every
    /// CPU counted on: groups it keeps keep their baselines; new ones start
    /// from what the slot holds now.
    fn charge(&mut self, key: CgroupSlot, wanted: &Wanted, totals: &mut Totals) {
        let Some(counted) = self.cgroups.get_mut(&key) else {
            return;
        };
        let Some(kernel) = &self.kernel else {
            counted.groups.clear();
            return;
        };
        let mut old = std::mem::take(&mut counted.groups);
        for spec in &wanted.groups {
            let Some(placed) = kernel
                .placement(spec)
                .filter(|p| p.phase != Phase::Retiring)
            else {
                continue;
            };
            let mut charged = match old.iter().position(|c| c.spec == *spec) {
                Some(i) => old.swap_remove(i),
                None => Charged::new(spec.clone(), placed.at.clone()),
            };
            for &cpu in &self.online {
                charged.feed(kernel, (key, cpu, counted.slot), self.per_cpu, totals);
            }
            counted.groups.push(charged);
        }
    }

    /// Counts a new cgroup, or says why not. Its id is the one discovery
    /// found: one removed and created again since is found anew by the
    /// next scan.
    fn admit(&mut self, cgroup: &Cgroup) -> Outcome {
        let id = cgroup.ino;
        let Some(slot) = self.take_slot() else {
            return Outcome::Skipped(SkipReason::MaxCgroups);
        };
        if let Some(kernel) = &mut self.kernel
            && let Err(e) = kernel.monitor(id, slot)
        {
            tracing::warn!(cgroup = %cgroup.path, "cannot count cgroup: {e}");
            self.released.push(slot);
            return Outcome::Skipped(SkipReason::MaxCgroups);
        }
        let counted = Counted {
            id,
            slot,
            groups: Vec::new(),
        };
        self.cgroups.insert(cgroup.slot, counted);
        Outcome::Counted
    }
}

/// `backend: auto` leaving BPF hands each counted group over to
/// cgroup-mode counters (`backend::auto`).
impl Outgoing for BpfCounters {
    /// Charges the interval in progress on `cpu`, that of the thread
    /// handing over, which runs there now: what ran there before it was
    /// charged at its switch in, or, on a kernel that hid that switch, is
    /// charged now.
    fn arrived(&mut self, cpu: u32) {
        if let Some(kernel) = &self.kernel {
            for errno in kernel.flush(std::iter::once(cpu)) {
                let reason = ErrorReason::Kernel(OpenFailure::from_errno(errno));
                self.errors.count(Operation::Read, reason);
            }
        }
    }

    fn read(&mut self, slot: CgroupSlot, spec: &GroupSpec, cpu: u32, totals: &mut Totals) {
        let (Some(kernel), Some(counted)) = (&self.kernel, self.cgroups.get_mut(&slot)) else {
            return;
        };
        for charged in counted.groups.iter_mut().filter(|c| *c.spec == *spec) {
            charged.read(kernel, (slot, cpu, counted.slot), totals);
        }
    }
}

impl Backend for BpfCounters {
    fn configure(&mut self, plan: &Plan) {
        self.per_cpu = plan.per_cpu;
        let every: Vec<usize> = (0..plan.selectors.len()).collect();
        let (layout, left) = Layout::of(plan.groups_for(&every));
        for spec in left {
            tracing::warn!(
                group = %spec.name,
                "not counted: the BPF backend counts at most {} events per CPU",
                abi::MAX_COUNTED
            );
        }
        self.wanted = layout;
    }

    fn admits(&self, _wanted: &Wanted, _cpus: usize) -> Result<(), SkipReason> {
        let room =
            (self.next_slot < self.capacity) || !self.free.is_empty() || !self.released.is_empty();
        match room {
            true => Ok(()),
            false => Err(SkipReason::MaxCgroups),
        }
    }

    fn counts(&self, slot: CgroupSlot) -> bool {
        self.cgroups.contains_key(&slot)
    }

    fn apply(
        &mut self,
        cgroups: &[(Cgroup, Wanted)],
        online: &[u32],
        totals: &mut Totals,
    ) -> Vec<Outcome> {
        if self.online.is_empty() {
            self.online = online.to_vec();
        }
        self.relayout(cgroups, totals);
        let mut outcomes = Vec::with_capacity(cgroups.len());
        for (cgroup, wanted) in cgroups {
            let outcome = match self.cgroups.contains_key(&cgroup.slot) {
                true => Outcome::Counted,
                false => self.admit(cgroup),
            };
            if outcome == Outcome::Counted {
                self.charge(cgroup.slot, wanted, totals);
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Grows the program's hash of cgroups and its totals once for all of
    /// them, rather than doubling the hash (a copy of every entry, two
    /// system calls each) again and again while they are admitted.
    fn expect(&mut self, more: usize) {
        let Some(kernel) = &mut self.kernel else {
            return;
        };
        let reused = self.free.len() + self.released.len();
        let more = u32::try_from(more).unwrap_or(u32::MAX);
        let fresh = more.saturating_sub(u32::try_from(reused).unwrap_or(u32::MAX));
        let last = self
            .next_slot
            .saturating_add(fresh)
            .min(self.capacity)
            .saturating_sub(1);
        if let Err(e) = kernel.reserve(last, more.min(self.capacity)) {
            tracing::debug!("cannot make room for {more} cgroups at once: {e}");
        }
    }

    fn remove(&mut self, slot: CgroupSlot) {
        if let Some(gone) = self.cgroups.remove(&slot) {
            if let Some(kernel) = &mut self.kernel {
                kernel.unmonitor(gone.id);
            }
            self.released.push(gone.slot);
        }
    }

    fn cpus_changed(&mut self, changes: &CpuChanges, totals: &mut Totals) {
        let gone = self
            .online
            .iter()
            .filter(|cpu| changes.closed.contains(cpu));
        self.gone.extend(gone);
        changes.follow(&mut self.online);
        let Some(mut kernel) = self.kernel.take() else {
            return;
        };
        // What an offline CPU's counters counted was charged at its last
        // switch (a CPU goes down through the stopper task): its totals
        // stay, only its counters go.
        for &cpu in &changes.closed {
            kernel.close_cpu(cpu);
            self.unopened.remove(&cpu);
        }
        self.open_cpus(&mut kernel, &changes.open);
        self.kernel = Some(kernel);
        let wanted: Vec<(CgroupSlot, Wanted)> = self
            .cgroups
            .iter()
            .map(|(&key, c)| {
                let groups = c.groups.iter().map(|g| g.spec.clone()).collect();
                (
                    key,
                    Wanted {
                        groups,
                        sampled: Vec::new(),
                    },
                )
            })
            .collect();
        for (key, wanted) in wanted {
            self.charge(key, &wanted, totals);
        }
    }

    fn retry(&mut self, online: &[u32], _totals: &mut Totals) {
        let Some(mut kernel) = self.kernel.take() else {
            return;
        };
        let again: Vec<u32> = std::mem::take(&mut self.unopened)
            .into_iter()
            .filter(|cpu| online.contains(cpu) && self.online.contains(cpu))
            .collect();
        // Only what is missing opens: the counters open there count on.
        for cpu in again {
            let failures = kernel.reopen(cpu, &self.tally);
            if failures.iter().any(|f| f.error.errno.passes()) {
                self.unopened.insert(cpu);
            }
            self.note(failures);
        }
        self.kernel = Some(kernel);
    }

    fn read(&mut self, totals: &mut Totals) {
        self.read_groups(totals);
    }

    /// The program's descriptors (the counters' are in the tally).
    fn stats(&self) -> Stats {
        let (ns, runs) = self.kernel.as_ref().map_or((0, 0), Kernel::runs);
        Stats {
            open_fds: self.kernel.as_ref().map_or(0, Kernel::own_fds),
            bpf_run_ns: ns,
            bpf_runs: runs,
            bpf_unseen_switches: self.unseen,
            errors: self.errors.clone(),
            ..Stats::default()
        }
    }
}
