//! Processes as a target: the processes a `processes:` entry matches, each
//! counted with perf groups on its threads that the kernel passes on to
//! every thread and process they create from then on (`inherit`), so that
//! a process's children and threads count with it, whatever the backend
//! counts cgroups with.
//!
//! At every collection `/proc` is scanned: a process that matches is
//! counted from then on (counts it made before the scan that finds it are
//! not seen); one that descends from a process its entry counts and
//! appeared after that process was found is counted already, through its
//! ancestor's groups, and is not opened again. A process that exits is
//! read a last time and closed: what it counted stays in its entry's
//! series, which never go back (a series per pid, on request, goes with
//! its process). A descendant that outlives its counted ancestor counts
//! on its own from the next scan that finds it, if it matches itself.
//!
//! What a process inherited is its ancestor's, and goes with it: a reload
//! that changes an entry's groups opens them anew on every process that
//! counts through the entry (see [`regroup`]).

mod cap;
mod fence;
mod regroup;
mod scan;
mod series;
mod watch;

pub use scan::{PROC_ROOT, Seen, all_processes, parse_stat, split_stat};

use series::{Series, SeriesId};

use crate::backend::budget::Fds;
use crate::backend::reading::Reader;
use crate::config::MetricDef;
use crate::config::{ProcessLabel, ProcessMatch, ProcessSelector};
use crate::cpus::CpuChanges;
use crate::ids::{CgroupSlot, EventId, GroupId};
use crate::perf::{self, CounterGroup, OpenError, OpenFailure};
use crate::plan::{GroupSpec, Plan};
use crate::snapshot::{ErrorReason, Errors, Operation, ProcessesSkipped, Snapshot};
use crate::target::Target;
use crate::totals::{GroupKey, Totals};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// How far up its ancestry a process is looked at for a counted ancestor:
/// deeper than any real process tree, and a bound on a cycle that a pid
/// reused mid-scan could draw.
const MAX_ANCESTRY: usize = 256;

/// Counts the processes of `processes:`.
#[derive(Debug)]
pub struct Processes {
    selected: Vec<Selected>,
    /// What counts each process an entry counts now.
    counted: BTreeMap<Key, Counted>,
    /// The scan in which each live process was first seen.
    first_seen: HashMap<(u32, u64), u64>,
    /// Scans so far.
    generation: u64,
    series: BTreeMap<SeriesId, Series>,
    totals: Totals,
    next_slot: u64,
    /// Where every descriptor is counted (`cgperf_open_fds`), and how
    /// many cgperf may hold, with everything else's.
    fds: Fds,
    /// Where processes are listed (`/proc`).
    root: PathBuf,
    /// At most this many processes are counted at once.
    max: usize,
    /// Matching processes left uncounted by the last scan, and why.
    skipped: ProcessesSkipped,
    /// Whether an executable could not be read for want of privileges
    /// (said once).
    exe_denied: std::cell::Cell<bool>,
    /// Live processes whose groups the kernel refused (said once each).
    refused: HashSet<Key>,
    /// Per entry, the children and threads that appeared while one of its
    /// processes was opened without a moment of rest, and may not be
    /// counted (`cgperf_processes_possibly_uncounted_total`).
    unsure: HashMap<Arc<str>, u64>,
    /// The tracepoints that count creations, once looked up (see
    /// [`watch`]).
    creation: std::cell::OnceCell<Option<watch::Creation>>,
    /// The creation tracepoints, held from a scan's or a reload's first
    /// open to its end (see [`watch::Creation::keep`]).
    keeper: Option<crate::backend::budget::Held>,
    /// The counters watching the processes whose groups opened paused,
    /// held until those start (see [`watch::Watches`]).
    starting: Vec<watch::Watches>,
}

/// One entry of `processes:` and the groups it counts.
#[derive(Debug)]
struct Selected {
    selector: ProcessSelector,
    name: Arc<str>,
    groups: Vec<Arc<GroupSpec>>,
    metrics: Vec<Arc<MetricDef>>,
}

/// A process an entry counts: the entry, the pid and the start time.
type Key = (Arc<str>, u32, u64);

/// Whether groups opened for a process count at once, or once enabled.
#[derive(Debug, Clone, Copy)]
enum Start {
    Now,
    Paused,
}

/// The open groups of a counted process, each on every thread it had.
type Groups = BTreeMap<GroupId, Vec<Reader>>;

/// One process cgperf holds groups on: one its entry matched, or one that
/// counted through such a process when a reload changed the entry's
/// groups (the kernel passes on only what is open when a process is
/// created, so each got the new groups of its own).
#[derive(Debug)]
struct Counted {
    /// The scan after which what it creates inherits its groups: the one
    /// that found it, or in which its groups were last opened anew.
    admitted: u64,
    series: SeriesId,
    groups: Groups,
    /// Groups of its entry it should hold but that did not fit the
    /// descriptor budget: opened by the scans once there is room.
    missing: Vec<GroupId>,
    /// For a process given groups for a reload's sake, the matching
    /// process it counts through (for the groups it does not hold): it is
    /// read a last time and closed with it.
    through: Option<Key>,
}

impl Counted {
    /// Reads every group it holds into `totals`.
    fn read(&mut self, totals: &mut Totals, errors: &mut Errors) {
        for readers in self.groups.values_mut() {
            read_all(totals, readers, errors);
        }
    }
}

impl Processes {
    /// Counts nothing yet; descriptors are counted in `fds`, and a process
    /// whose groups would take more than its budget leaves is not counted.
    pub fn new(fds: Fds) -> Self {
        Self {
            selected: Vec::new(),
            counted: BTreeMap::new(),
            first_seen: HashMap::new(),
            generation: 0,
            series: BTreeMap::new(),
            totals: Totals::default(),
            next_slot: 0,
            fds,
            root: PathBuf::from(PROC_ROOT),
            max: crate::config::DEFAULT_MAX_PROCESSES,
            skipped: ProcessesSkipped::default(),
            exe_denied: std::cell::Cell::new(false),
            refused: HashSet::new(),
            unsure: HashMap::new(),
            creation: std::cell::OnceCell::new(),
            keeper: None,
            starting: Vec::new(),
        }
    }

    /// Counts what `plan` asks: an entry that did not change keeps its
    /// processes and series. One whose groups changed opens those anew on
    /// every process that counts through it (see [`regroup`]), keeping
    /// the totals of the events it still counts; one that matches or
    /// labels differently is read, closed, and finds its processes again
    /// at once, its series going with its labels; an entry gone takes its
    /// series with it.
    fn apply_processes(&mut self, plan: &Plan, errors: &mut Errors) {
        self.read_all(errors);
        self.max = plan.max_processes;
        let selected: Vec<Selected> = plan
            .processes
            .iter()
            .map(|selector| Selected {
                name: selector.name.as_str().into(),
                groups: plan.groups_of_process(selector),
                metrics: plan.metrics_of_process(selector),
                selector: selector.clone(),
            })
            .collect();
        let old = std::mem::replace(&mut self.selected, selected);
        let names: HashSet<Arc<str>> = self.selected.iter().map(|s| s.name.clone()).collect();
        self.unsure.retain(|name, _| names.contains(name));
        let find = |list: &[Selected], name: &str| list.iter().position(|s| &*s.name == name);
        // Same processes, same series: what matches and what labels them.
        let same_match = |name: &str| match (find(&old, name), find(&self.selected, name)) {
            (Some(a), Some(b)) => {
                let (a, b) = (&old[a].selector, &self.selected[b].selector);
                a.matches == b.matches && a.labels == b.labels
            }
            _ => false,
        };
        let kept: Vec<Arc<str>> = old
            .iter()
            .filter(|s| same_match(&s.name))
            .map(|s| s.name.clone())
            .collect();
        self.counted.retain(|(name, _, _), _| kept.contains(name));
        let totals = &mut self.totals;
        self.series.retain(|id, series| {
            let same = kept.contains(&id.process);
            if !same {
                totals.remove(series.slot);
            }
            same
        });
        self.regroup_changed(&old, errors);
        self.keeper = None;
        self.shed_over_max(errors);
        for (id, series) in &self.series {
            if let Some(s) = self.selected.iter().find(|s| s.name == id.process) {
                let keep: Vec<(GroupId, Vec<EventId>)> = s
                    .groups
                    .iter()
                    .map(|g| (g.name.clone(), g.event_ids()))
                    .collect();
                self.totals.keep_only(series.slot, &keep, &[]);
            }
        }
        // An entry counted by itself alone has its series from the start,
        // at zero, so that rates see its first counts.
        let alone: Vec<SeriesId> = self
            .selected
            .iter()
            .filter(|s| s.selector.labels.is_empty())
            .map(|s| SeriesId {
                process: s.name.clone(),
                comm: None,
                pid: None,
            })
            .collect();
        for id in alone {
            self.series_slot(id);
        }
        self.rescan(errors);
    }

    /// Opens `specs` on `threads` (of one process), adding to the totals
    /// of `slot`; with the first refusal, if any.
    fn open_groups(
        &mut self,
        specs: &[Arc<GroupSpec>],
        threads: &[u32],
        slot: CgroupSlot,
        start: Start,
        errors: &mut Errors,
    ) -> (Groups, Option<(u32, GroupId, OpenError)>) {
        let mut groups = Groups::new();
        let mut refused = None;
        for &tid in threads {
            for spec in specs {
                let attrs: Vec<_> = spec.events.iter().map(|e| e.attr).collect();
                let open = match start {
                    Start::Now => CounterGroup::open_filtered,
                    Start::Paused => CounterGroup::open_paused,
                };
                match open(&attrs, &spec.filters(), perf::Target::Thread(tid), 0) {
                    Ok(group) => {
                        let key = GroupKey {
                            cgroup: slot,
                            group: spec.name.clone(),
                            cpu: 0,
                        };
                        let events = spec.event_ids();
                        let reader =
                            Reader::new(group, &self.fds.tally, &mut self.totals, &key, &events);
                        groups.entry(spec.name.clone()).or_default().push(reader);
                    }
                    // The thread is gone already.
                    Err(e) if e.errno.0 == libc::ESRCH => {}
                    Err(e) => {
                        let failure = OpenFailure::from_errno(e.errno);
                        errors.count(Operation::Open, ErrorReason::Kernel(failure));
                        refused.get_or_insert((tid, spec.name.clone(), e));
                    }
                }
            }
        }
        (groups, refused)
    }

    /// Reads every open group into the totals.
    fn read_all(&mut self, errors: &mut Errors) {
        for counted in self.counted.values_mut() {
            counted.read(&mut self.totals, errors);
        }
    }

    /// Finds the processes that started or stopped matching since the
    /// last scan: those that exited are read a last time and closed, new
    /// ones are opened.
    fn rescan(&mut self, errors: &mut Errors) {
        if self.selected.is_empty() && self.counted.is_empty() {
            return;
        }
        let seen = match scan::all_processes(&self.root) {
            Ok(seen) => seen,
            Err(e) => {
                errors.count(Operation::Read, ErrorReason::ProcessList);
                tracing::debug!("listing {}: {e}", self.root.display());
                return;
            }
        };
        self.generation += 1;
        let generation = self.generation;
        let alive: HashMap<u32, &Seen> = seen
            .iter()
            .filter(|s| !s.dead)
            .map(|s| (s.pid, s))
            .collect();
        self.first_seen
            .retain(|(pid, start), _| alive.get(pid).is_some_and(|s| s.start == *start));
        for s in alive.values() {
            self.first_seen.entry(s.id()).or_insert(generation);
        }
        self.forget_exited(&alive, errors);
        self.refused
            .retain(|(_, pid, start)| alive.get(pid).is_some_and(|s| s.start == *start));
        let mut skipped = ProcessesSkipped::default();
        skipped.fd_budget += self.open_missing(errors);
        // Each process's children as the listing found them.
        let mut found: HashMap<u32, Vec<u32>> = HashMap::new();
        for s in alive.values() {
            found.entry(s.ppid).or_default().push(s.pid);
        }
        for s in seen.iter().filter(|s| !s.dead) {
            for at in 0..self.selected.len() {
                let selected = &self.selected[at];
                let key = (selected.name.clone(), s.pid, s.start);
                if self.counted.contains_key(&key)
                    || !self.matches(&selected.selector.matches, s)
                    || self.counted_ancestor(&selected.name, s, &alive).is_some()
                {
                    continue;
                }
                let matched = self.counted.values().filter(|c| c.through.is_none());
                if matched.count() >= self.max {
                    skipped.max_processes += 1;
                    continue;
                }
                let found = found.get(&s.pid).map_or(&[][..], Vec::as_slice);
                if !self.admit(at, (s, found), errors) {
                    skipped.fd_budget += 1;
                }
            }
        }
        // Said when it starts and when it ends, not at every scan.
        match (skipped.fd_budget > 0, self.skipped.fd_budget > 0) {
            (true, false) => tracing::warn!(
                "{} matching processes are not counted: their perf descriptors (one per event \
                 of their entry's groups per thread) would exceed the open-files limit; raise \
                 LimitNOFILE / ulimit -n, or count fewer events or processes; they are counted \
                 once there is room",
                skipped.fd_budget
            ),
            (false, true) => {
                tracing::info!("every matching process fits the open-files limit again")
            }
            _ => {}
        }
        self.skipped = skipped;
        self.keeper = None;
    }

    /// The descriptors `specs` take on `threads` threads.
    fn cost(specs: &[Arc<GroupSpec>], threads: usize) -> u64 {
        let per_thread: usize = specs.iter().map(|g| g.events.len()).sum();
        (per_thread as u64).saturating_mul(threads as u64)
    }

    /// The descriptors the counters that watch `threads` threads while
    /// their groups open take (see [`watch`]).
    fn watch_cost(&self, threads: usize) -> u64 {
        let creation = self.creation.get_or_init(watch::Creation::locate);
        watch::Watches::width(creation.as_ref()).saturating_mul(threads as u64)
    }

    /// Whether `more` descriptors fit beside every one cgperf holds now.
    fn fits(&self, more: u64) -> bool {
        self.fds.fit(more)
    }

    /// Reads and closes what counted processes that are gone (or dead),
    /// with those that counted through them (what they inherited went with
    /// them), and drops the series of those counted by pid.
    fn forget_exited(&mut self, alive: &HashMap<u32, &Seen>, errors: &mut Errors) {
        let gone: HashSet<Key> = self
            .counted
            .keys()
            .filter(|(_, pid, start)| alive.get(pid).is_none_or(|s| s.start != *start))
            .cloned()
            .collect();
        self.stop_counting(&gone, errors);
    }

    /// Whether `s` matches; an executable cgperf may not read is said
    /// once, and is no match.
    fn matches(&self, matches: &ProcessMatch, s: &Seen) -> bool {
        match is_match(&self.root, matches, s) {
            Ok(matched) => matched,
            Err(e) => {
                if !self.exe_denied.replace(true) {
                    tracing::warn!(
                        "cannot read /proc/{}/exe ({}): {e}: matching processes by `exe:` \
                         needs CAP_SYS_PTRACE, which cgperf keeps only when its config at start \
                         has an `exe:` entry; restart it, or match by `comm:` or `cmdline:`",
                        s.pid,
                        s.comm
                    );
                }
                false
            }
        }
    }

    /// The counted process of entry `name` whose groups already count `s`:
    /// its nearest counted ancestor, if it was found (or given groups
    /// anew) before `s` and every process between them appeared, so that
    /// each was created after those groups were opened and inherited them.
    fn counted_ancestor(
        &self,
        name: &Arc<str>,
        s: &Seen,
        alive: &HashMap<u32, &Seen>,
    ) -> Option<Key> {
        let first = |p: &Seen| self.first_seen.get(&p.id()).copied().unwrap_or(u64::MAX);
        let mut newest_since = first(s);
        let mut at = s.ppid;
        for _ in 0..MAX_ANCESTRY {
            let ancestor = alive.get(&at)?;
            let key = (name.clone(), ancestor.pid, ancestor.start);
            if let Some(counted) = self.counted.get(&key) {
                return (newest_since > counted.admitted).then_some(key);
            }
            newest_since = newest_since.min(first(ancestor));
            if ancestor.ppid == 0 || ancestor.ppid == ancestor.pid {
                return None;
            }
            at = ancestor.ppid;
        }
        None
    }

    /// Opens the groups of entry `at` on every thread of `s`; false when
    /// their descriptors would not fit the budget (nothing is opened).
    /// `found` is its children in the listing that found it: those that
    /// appeared since count through it, as those created later do.
    fn admit(&mut self, at: usize, (s, found): (&Seen, &[u32]), errors: &mut Errors) -> bool {
        let threads = scan::threads(&self.root, s.pid);
        // With counters watching each thread while they open (see [`watch`]).
        let cost = Self::cost(&self.selected[at].groups, threads.len());
        if !self.fits(cost.saturating_add(self.watch_cost(threads.len()))) {
            return false;
        }
        let selected = &self.selected[at];
        let labels = &selected.selector.labels;
        let id = SeriesId {
            process: selected.name.clone(),
            comm: labels
                .contains(&ProcessLabel::Comm)
                .then(|| s.comm.as_str().into()),
            pid: labels.contains(&ProcessLabel::Pid).then_some(s.pid),
        };
        let slot = self.series_slot(id.clone());
        let specs = self.selected[at].groups.clone();
        // Its children made before its groups open (the scan that found it
        // listed /proc earlier) inherit none of them, and are not counted
        // through it; every later one inherits them all (see [`fence`]).
        let fence::Opened {
            groups: readers,
            refused,
            before,
            during,
            unsure,
        } = self.open_quiet((s.pid, found), &specs, slot, Start::Now, errors);
        for child in before.iter().filter_map(|&c| scan::stat(&self.root, c)) {
            self.first_seen.entry(child.id()).or_insert(self.generation);
        }
        if let Some(unsure) = &unsure {
            self.note_unsure(at, (s.pid, &s.comm), unsure);
        }
        let selected = &self.selected[at];
        let key = (selected.name.clone(), s.pid, s.start);
        if let Some((tid, group, e)) = refused
            && self.refused.insert(key.clone())
        {
            // Once per process: a refusal that lasts is tried again at
            // every scan, and counted in cgperf_open_errors_total.
            tracing::warn!(
                "process {} ({}) of `{}`: group `{group}` could not be opened on thread {tid}: \
                 {e}; {}",
                s.pid,
                s.comm,
                selected.name,
                match readers.is_empty() {
                    true => "it is not counted, and tried again at each collection",
                    false => "it is counted without those of its threads",
                }
            );
        }
        if readers.is_empty() {
            // Gone before it could be opened, or refused everywhere.
            return true;
        }
        let counted = Counted {
            admitted: self.generation,
            series: id,
            groups: readers,
            missing: Vec::new(),
            through: None,
        };
        self.counted.insert(key.clone(), counted);
        self.count_through((at, &specs), &key, during, Start::Now, errors);
        true
    }
}

impl Target for Processes {
    fn apply(&mut self, plan: &Plan, _online: &[u32], errors: &mut Errors) {
        self.apply_processes(plan, errors);
    }

    fn read(&mut self, errors: &mut Errors) {
        self.read_all(errors);
    }

    /// Nothing to do: a thread's groups count it on whichever CPU it runs.
    fn cpus_changed(&mut self, _changes: &CpuChanges, _online: &[u32], _errors: &mut Errors) {}

    fn follow(&mut self, _plan: &Plan, _online: &[u32], errors: &mut Errors) {
        self.rescan(errors);
    }

    fn show(&mut self, _plan: &Plan, now: Instant, snapshot: &mut Snapshot) {
        let shown = self.samples(now);
        snapshot.processes = shown.counters;
        snapshot.process_group_times = shown.group_times;
        snapshot.process_counts = shown.counts;
        snapshot.process_metrics = shown.metrics;
        snapshot.processes_skipped = self.skipped;
    }
}

/// Whether `s` matches `matches` (under the `/proc` at `root`); `Err` when
/// its executable may not be read (`PermissionDenied`), a process gone
/// meanwhile being no match.
pub fn is_match(root: &Path, matches: &ProcessMatch, s: &Seen) -> std::io::Result<bool> {
    Ok(match matches {
        ProcessMatch::Comm(p) => p.matcher.is_match(&s.comm),
        ProcessMatch::Exe(p) => match scan::exe(root, s.pid) {
            Ok(exe) => p.matcher.is_match(exe),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Err(e),
            Err(_) => false,
        },
        ProcessMatch::Cmdline(p) => {
            scan::cmdline(root, s.pid).is_some_and(|c| p.matcher.is_match(c))
        }
        ProcessMatch::Pid(pid) => s.pid == *pid,
    })
}

/// How many live processes each of `selectors` matches now (their
/// children that match too included): what `cgperf check` shows.
pub fn matching_now(selectors: &[ProcessSelector]) -> std::io::Result<Vec<usize>> {
    let root = Path::new(PROC_ROOT);
    let seen = scan::all_processes(root)?;
    Ok(selectors
        .iter()
        .map(|selector| {
            seen.iter()
                .filter(|s| !s.dead)
                .filter(|s| is_match(root, &selector.matches, s).unwrap_or(false))
                .count()
        })
        .collect())
}

/// Reads `readers` into `totals`, counting the failures.
fn read_all(totals: &mut Totals, readers: &mut [Reader], errors: &mut Errors) {
    for reader in readers {
        reader.read(totals, errors);
    }
}
