//! `by:` tracepoints counted in the kernel (`sampled.bpf.c`): each hit adds
//! one to a hash map entry keyed by (cgroup slot, entry, field values), in
//! the entry's own hashes (sized for it when it is created, and grown by a
//! spill hash when a reload raises its `max_series`: see [`Entry`]), for
//! the cgroup it happens in and each monitored ancestor, so that a
//! cgroup's counts include its descendants as in cgroup mode. No ring buffer: exact
//! at any rate, and the kernel holds one perf event and one link per `by:`
//! tracepoint, whatever the number of cgroups and CPUs.
//!
//! The map's values are cumulative; each collection iterates the map and
//! adds what each key gained since the last one (a copy of the last values
//! is kept) into the entry's [`Counts`](crate::totals::Counts), formatted
//! exactly as the rings format a sample. Per (cgroup, entry) the program
//! keeps at most `max_series` keys of series; hits of other values go to
//! its `other` cell, or to a key marked `other` when their first hit raced
//! for the last place (see [`kernel::decode`]), and hits the map refused
//! (full) to its `refused` cell, which the counts report as lost.
//!
//! A reload that moves an entry between the kernel and the rings (its
//! filter becomes one the program cannot evaluate, or the reverse) hands it
//! over at one cut per CPU, so that every hit is counted once: by the side
//! before the cut or by the one past it ([`InKernel::with_rings`]).
//!
//! What can change under a running program is published so that a run sees
//! it whole: the entries each tracepoint counts are written into the idle
//! one of two tables, then one aligned store switches tables; what a run may
//! still use (a retired entry, a removed cgroup's slot) is read or swept
//! only after every run in progress has ended (an RCU grace period: the
//! program runs with preemption disabled).

mod by;
mod handover;
mod kernel;
mod rules;

pub use by::ByInKernel;

use crate::backend::{Stats, Wanted};
use crate::ids::{CgroupSlot, SampledId};
use crate::perf::wait_for_samples_in_flight;
use crate::plan::{Plan, SampledSpec};
use crate::totals::{Handle, SampledKey, Totals};
use kernel::{Cell, Key, Loaded, MAX_ENTRIES, TP_ENTRIES};
use rules::Window;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Whether the bpf backend counts `spec` in the kernel, or why it counts
/// it through ring buffers (`cgperf check` says which): the program must
/// evaluate its filter and fields, and load, and attach to its tracepoint
/// (which the kernel refuses, for example, to a tracepoint that has as many
/// BPF programs as it takes); each is tried here as the backend tries it.
pub fn counted_in_kernel(spec: &SampledSpec) -> Result<(), String> {
    rules::compile(spec)?;
    let mut loaded =
        Loaded::load(1).map_err(|e| format!("cannot load the `by:` BPF program: {e}"))?;
    loaded.ensure_attached(spec, &Arc::new(AtomicU64::new(0)))
}

/// An entry counted in the kernel: its spec, its index in `entries`, the
/// index of the hashes it counts in (its own, or those of the entry of the
/// same series it replaced, whatever its `max_series`: `sampled.bpf.c` says
/// why), and when it counts while it is handed over to or from the rings.
#[derive(Debug, Clone)]
struct Entry {
    spec: Arc<SampledSpec>,
    index: u32,
    home: u32,
    window: Window,
}

/// What a cgroup counts of one entry.
#[derive(Debug)]
struct CellState {
    spec: Arc<SampledSpec>,
    counts: Handle,
    /// The cell as last read.
    last: Cell,
}

/// A cgroup counted here.
#[derive(Debug)]
struct Watched {
    /// Its kernel id (its directory's inode).
    id: u64,
    slot: u32,
    /// By the home of the entries counting them.
    cells: BTreeMap<u32, CellState>,
}

/// `by:` entries counted in the kernel.
#[derive(Debug)]
pub(super) struct InKernel {
    capacity: u32,
    tally: Arc<AtomicU64>,
    loaded: Option<Loaded>,
    /// The entries in force.
    entries: Vec<Entry>,
    /// Entries that left the kernel and still count until the rings took
    /// them over ([`InKernel::handed_over`]).
    leaving: Vec<Entry>,
    /// The entries of the plan just configured: in force at the next
    /// [`InKernel::apply`].
    pending: Option<Vec<Entry>>,
    /// The entries of that plan.
    planned: HashSet<SampledId>,
    /// The entries of the plan in force that the rings count.
    on_rings: HashSet<SampledId>,
    cgroups: BTreeMap<CgroupSlot, Watched>,
    /// Program slot → cgroup.
    by_slot: HashMap<u32, CgroupSlot>,
    next_slot: u32,
    free: Vec<u32>,
    /// Slots of removed cgroups: their keys are swept, then they are free.
    released: Vec<u32>,
    /// Every key's hits as last read.
    last: HashMap<Key, u64>,
    /// Entries logged as counted through the rings, with why.
    logged: HashSet<(Arc<str>, String)>,
    /// Scratch for formatting keys.
    raw: Vec<u8>,
    key: String,
    value: String,
}

impl InKernel {
    /// Nothing loaded yet: the program loads when a plan has an entry it
    /// can count; at most `capacity` cgroups.
    pub fn new(capacity: usize, tally: Arc<AtomicU64>) -> Self {
        Self {
            capacity: u32::try_from(capacity.max(1)).unwrap_or(u32::MAX),
            tally,
            loaded: None,
            entries: Vec::new(),
            leaving: Vec::new(),
            pending: None,
            planned: HashSet::new(),
            on_rings: HashSet::new(),
            cgroups: BTreeMap::new(),
            by_slot: HashMap::new(),
            next_slot: 0,
            free: Vec::new(),
            released: Vec::new(),
            last: HashMap::new(),
            logged: HashSet::new(),
            raw: Vec::new(),
            key: String::new(),
            value: String::new(),
        }
    }

    /// Chooses, for the `by:` entries of `plan`, those counted in the
    /// kernel (the others stay with the rings, with the reason in the log):
    /// in force at the next [`InKernel::apply`].
    pub fn configure(&mut self, plan: &Plan) {
        let every: Vec<usize> = (0..plan.selectors.len()).collect();
        let mut next: Vec<Entry> = Vec::new();
        let mut per_tracepoint: BTreeMap<u64, usize> = BTreeMap::new();
        self.planned.clear();
        for spec in plan.sampled_for(&every) {
            self.planned.insert(spec.id());
            let taken = per_tracepoint.entry(spec.attr.config).or_default();
            let verdict = rules::compile(&spec).and_then(|_| {
                if *taken >= TP_ENTRIES {
                    return Err(format!(
                        "more than {TP_ENTRIES} `by:` entries on one tracepoint"
                    ));
                }
                self.place(&spec, &next)
                    .ok_or_else(|| format!("more than {} `by:` entries", MAX_ENTRIES / 2))
            });
            match verdict {
                Ok(entry) => {
                    *taken += 1;
                    next.push(entry);
                }
                Err(why) => {
                    if self.logged.insert((spec.label.clone(), why.clone())) {
                        tracing::warn!(
                            entry = %spec.label,
                            "`by:` entry counted through ring buffers, not in the kernel: {why}"
                        );
                    }
                }
            }
        }
        self.pending = Some(next);
    }

    /// `spec` as an entry of the plan after `next`: the entry in force if
    /// it is one; else at an index free in the tables of every run (in none
    /// in force, leaving or next, nor the home of one), counting in the
    /// hashes of the entry in force of the same series (which
    /// [`Loaded::make_room`] grows if its `max_series` needs it), else in
    /// hashes of its own.
    fn place(&self, spec: &Arc<SampledSpec>, next: &[Entry]) -> Option<Entry> {
        if let Some(kept) = self.entries.iter().find(|e| *e.spec == **spec) {
            return Some(kept.clone());
        }
        let live = || self.entries.iter().chain(&self.leaving).chain(next);
        let index = (0..MAX_ENTRIES).find(|i| !live().any(|e| e.index == *i || e.home == *i))?;
        let same = self.entries.iter().find(|e| e.spec.id() == spec.id());
        Some(Entry {
            spec: spec.clone(),
            index,
            home: same.map_or(index, |e| e.home),
            window: Window::Always,
        })
    }

    /// The entries counted in the kernel from the next apply on.
    fn upcoming(&self) -> &[Entry] {
        self.pending.as_deref().unwrap_or(&self.entries)
    }

    /// What of `wanted` the rings count: the `by:` entries not counted
    /// here.
    pub fn rings_part(&self, wanted: &Wanted) -> Wanted {
        let ours = self.upcoming();
        Wanted {
            groups: Vec::new(),
            sampled: wanted
                .sampled
                .iter()
                .filter(|s| !ours.iter().any(|e| *e.spec == ***s))
                .cloned()
                .collect(),
        }
    }

    /// Makes each cgroup of `cgroups` (all counted by the backend) count
    /// its entries counted here, and puts the configured entries in force:
    /// an entry kept keeps its counts; one whose spec changed under the
    /// same series counts on in the same cells and keys, so that its values
    /// keep their place within `max_series`.
    pub fn apply<'a>(
        &mut self,
        cgroups: impl Iterator<Item = (&'a crate::backend::Cgroup, &'a Wanted)>,
        totals: &mut Totals,
    ) {
        if self.loaded.is_none() && self.upcoming().is_empty() {
            self.pending = None;
            // The rings count every entry of the plan: one that later
            // moves here arrives at a cut ([`InKernel::switch`]).
            self.on_rings = self.planned.clone();
            return;
        }
        if self.loaded.is_none() {
            match Loaded::load(self.capacity) {
                Ok(loaded) => self.loaded = Some(loaded),
                Err(e) => {
                    tracing::error!(
                        "cannot load the `by:` BPF program, counting `by:` entries through \
                         ring buffers: {e}"
                    );
                    // Everything goes to the rings, which count what is
                    // wanted in the same apply.
                    self.pending = None;
                    self.entries.clear();
                    self.on_rings = self.planned.clone();
                    return;
                }
            }
        }
        // An entry whose tracepoint the program cannot be attached to, or
        // that cannot have its own hashes, goes to the rings, which count
        // what is wanted in the same apply.
        if let (Some(loaded), Some(pending)) = (self.loaded.as_mut(), self.pending.as_mut()) {
            let mut ready = |e: &Entry| {
                loaded.ensure_attached(&e.spec, &self.tally)?;
                loaded.make_room(e)
            };
            pending.retain(|e| match ready(e) {
                Ok(()) => true,
                Err(why) => {
                    if self.logged.insert((e.spec.label.clone(), why.clone())) {
                        tracing::warn!(
                            entry = %e.spec.label,
                            "`by:` entry counted through ring buffers, not in the kernel: {why}"
                        );
                    }
                    false
                }
            });
        }
        let upcoming: Vec<Entry> = self.upcoming().to_vec();
        for (cgroup, wanted) in cgroups {
            self.watch(cgroup, wanted, &upcoming, totals);
        }
        if let Some(next) = self.pending.take() {
            self.switch(next, totals);
        }
    }

    /// Counts `cgroup`'s entries among `upcoming` (watching it first if
    /// new); drops the cells of entries it no longer counts.
    fn watch(
        &mut self,
        cgroup: &crate::backend::Cgroup,
        wanted: &Wanted,
        upcoming: &[Entry],
        totals: &mut Totals,
    ) {
        let full = self.free.is_empty() && self.next_slot >= self.capacity;
        if full && !self.released.is_empty() && !self.cgroups.contains_key(&cgroup.slot) {
            // The backend reuses a removed cgroup's place at once: so
            // does this.
            self.reclaim(totals);
        }
        let Some(loaded) = self.loaded.as_mut() else {
            return;
        };
        let ours: Vec<&Entry> = upcoming
            .iter()
            .filter(|e| wanted.sampled.iter().any(|s| **s == *e.spec))
            .collect();
        if !self.cgroups.contains_key(&cgroup.slot) {
            if ours.is_empty() {
                return;
            }
            let Ok(meta) = std::fs::metadata(&cgroup.dir) else {
                return; // Removed: the next scan drops it.
            };
            let Some(slot) = take_slot(&mut self.free, &mut self.next_slot, self.capacity) else {
                tracing::warn!(cgroup = %cgroup.path, "no room left to count `by:` entries in the kernel");
                return;
            };
            if let Err(e) = loaded.watch(meta.ino(), slot) {
                tracing::warn!(cgroup = %cgroup.path, "cannot count `by:` entries: {e}");
                self.free.push(slot);
                return;
            }
            self.by_slot.insert(slot, cgroup.slot);
            self.cgroups.insert(
                cgroup.slot,
                Watched {
                    id: meta.ino(),
                    slot,
                    cells: BTreeMap::new(),
                },
            );
        }
        let Some(watched) = self.cgroups.get_mut(&cgroup.slot) else {
            return;
        };
        let slot = watched.slot;
        // Cells of entries it no longer counts, and not about to be
        // retired with their entry: their series vanish, keys swept.
        let unwanted: Vec<u32> = watched
            .cells
            .iter()
            .filter(|(home, _)| {
                // An entry of the same series keeps its home: a cell at a
                // home none of `ours` counts in is one it no longer counts.
                !ours.iter().any(|e| e.home == **home) && upcoming.iter().any(|e| e.home == **home)
            })
            .map(|(home, _)| *home)
            .collect();
        for home in unwanted {
            watched.cells.remove(&home);
            loaded.drop_cell(slot, home);
        }
        for entry in ours {
            if let Some(cell) = watched.cells.get_mut(&entry.home) {
                // Kept, or changed in the same home: the same cell.
                cell.spec = entry.spec.clone();
                continue;
            }
            let counts = totals.sampled(&SampledKey {
                cgroup: cgroup.slot,
                id: entry.spec.id(),
            });
            if let Err(e) = loaded.insert_cell(slot, entry.home, Cell::default()) {
                tracing::warn!(cgroup = %cgroup.path, entry = %entry.spec.label, "cannot count in the kernel: {e}");
                continue;
            }
            watched.cells.insert(
                entry.home,
                CellState {
                    spec: entry.spec.clone(),
                    counts,
                    last: Cell::default(),
                },
            );
        }
    }

    /// Whether it counts entries of the cgroup in `slot`.
    pub fn counts(&self, slot: CgroupSlot) -> bool {
        self.cgroups.contains_key(&slot)
    }

    /// Stops counting a cgroup: its series vanish, its keys are swept at
    /// the next read.
    pub fn remove(&mut self, slot: CgroupSlot) {
        let Some(gone) = self.cgroups.remove(&slot) else {
            return;
        };
        self.by_slot.remove(&gone.slot);
        if let Some(loaded) = self.loaded.as_mut() {
            loaded.unwatch(gone.id);
            for home in gone.cells.keys() {
                loaded.drop_cell(gone.slot, *home);
            }
        }
        self.released.push(gone.slot);
    }

    /// Adds what every key and cell gained since the last read into the
    /// counts; sweeps the keys of removed cgroups and dropped cells.
    pub fn read(&mut self, totals: &mut Totals) {
        if self.loaded.is_some() {
            self.reclaim(totals);
        }
    }

    /// Reads everything, and frees the slots of removed cgroups once their
    /// keys are swept.
    fn reclaim(&mut self, totals: &mut Totals) {
        if !self.released.is_empty() {
            // No run still charges a released slot after this.
            settle_runs();
        }
        self.collect(totals, &BTreeSet::new());
        self.free.append(&mut self.released);
    }

    /// One pass over the counts map: each key's gain goes to its cell's
    /// counts, keys without a cell go; then each cell's `other` and
    /// `refused`. With `only` non-empty, just those entries.
    fn collect(&mut self, totals: &mut Totals, only: &BTreeSet<u32>) {
        let Some(loaded) = self.loaded.as_mut() else {
            return;
        };
        let pairs = loaded.keys();
        let mut gained: HashMap<(u32, u32), u64> = HashMap::new();
        let mut stale = Vec::new();
        for (key, value) in pairs {
            if !only.is_empty() && !only.contains(&key.entry) {
                continue;
            }
            let cell = self
                .by_slot
                .get(&key.slot)
                .and_then(|c| self.cgroups.get(c))
                .and_then(|w| w.cells.get(&key.entry));
            let Some(cell) = cell else {
                stale.push(key);
                continue;
            };
            let Some((value, other)) = value else {
                continue; // Read once decided.
            };
            let last = self.last.entry(key).or_default();
            let delta = value.saturating_sub(*last);
            *last = value.max(*last);
            if delta == 0 {
                continue;
            }
            *gained.entry((key.slot, key.entry)).or_default() += delta;
            let Some(counts) = totals.sampled_mut(cell.counts) else {
                continue;
            };
            if other {
                counts.add_hits(None, delta, cell.spec.max_series);
                continue;
            }
            rules::record(&cell.spec, &key.words, &mut self.raw);
            cell.spec.key_of(&self.raw, &mut self.key, &mut self.value);
            counts.add_hits(Some(&self.key), delta, cell.spec.max_series);
        }
        // A removed cgroup's keys (or a dropped cell's) go from every hash
        // of the chain: its slot is reused, and the next cgroup there must
        // find none. Room that a deletion makes in a full hash lets the
        // first hits of a value, on two CPUs at the same instant, create
        // it in two hashes (one in the full one just before, one in the
        // room just after): so rare, and made harmless by merging the
        // copies ([`kernel::merge`]), that no deletion is held back for it.
        for key in stale {
            loaded.remove_key(&key);
            self.last.remove(&key);
        }
        let cells = loaded.cells();
        for watched in self.cgroups.values_mut() {
            for (&home, cell) in &mut watched.cells {
                if !only.is_empty() && !only.contains(&home) {
                    continue;
                }
                let now = cells.get(&(watched.slot, home)).copied();
                let now = now.unwrap_or(cell.last);
                let other = now.other.saturating_sub(cell.last.other);
                let refused = now.refused.saturating_sub(cell.last.refused);
                cell.last = now;
                let values = gained.get(&(watched.slot, home)).copied().unwrap_or(0);
                if let Some(counts) = totals.sampled_mut(cell.counts) {
                    counts.add_hits(None, other, cell.spec.max_series);
                    // Every hit: those counted above and those the map
                    // refused, which the counts then report lost.
                    counts.counted(values + other + refused);
                    counts.settle();
                }
            }
        }
    }

    /// Adds its descriptors and its program's run time and count.
    pub fn add_stats(&self, stats: &mut Stats) {
        if let Some(loaded) = &self.loaded {
            let (fds, ns, runs) = loaded.stats();
            stats.open_fds += fds;
            stats.bpf_run_ns += ns;
            stats.bpf_runs += runs;
            stats.samples_lost += loaded.missed();
        }
    }
}

/// A slot for a new cgroup, if one is free.
fn take_slot(free: &mut Vec<u32>, next: &mut u32, capacity: u32) -> Option<u32> {
    if let Some(slot) = free.pop() {
        return Some(slot);
    }
    (*next < capacity).then(|| {
        *next += 1;
        *next - 1
    })
}

/// Waits until every run of the program in progress has ended.
fn settle_runs() {
    if let Err(e) = wait_for_samples_in_flight() {
        tracing::debug!("membarrier refused ({e:?}); waiting 1 ms for runs in flight");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
