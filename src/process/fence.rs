//! Opening a process's groups at a moment none of its threads runs.
//!
//! A thread that creates a process or a thread copies, early in the
//! creation, the groups it holds then (`inherit`); the new task shows in
//! `/proc` only later. A creation in flight while the groups open copies
//! some of them, all or none, and the kernel does not say which. So the
//! groups are opened between two reads of every thread's task clock (the
//! time it has run, to the nanosecond): where each thread reads the same
//! twice and rests between, sleeping interruptibly (the creation of a task
//! sleeps only uninterruptibly) or not run yet at all, no thread ran
//! meanwhile, no creation was in flight or began, and the children listed
//! then are exactly those made before the open, which inherit nothing;
//! every later one inherits every group. Where a thread ran, the next try
//! opens them again a moment later (those of the try before close then,
//! and the copies children took go with them); a process that never
//! rests is opened unfenced at the last try, and its children and threads
//! that appeared meanwhile (listed once each creation in flight at the
//! open has ended: a task shows in `/proc` only at the end of its
//! creation) are taken to inherit, with a warning, and counted in
//! `cgperf_processes_possibly_uncounted_total`.
//!
//! A process is opened this way when a scan finds it, and when a reload
//! opens its entry's changed groups on it anew (see [`super::regroup`]).

use super::{Counted, Groups, Key, Processes, Start, read_all, scan};
use crate::backend::budget::{Fds, Held};
use crate::events::{EventAttr, PERF_TYPE_SOFTWARE};
use crate::ids::{CgroupSlot, GroupId};
use crate::perf::{self, CounterGroup, OpenError, OpenFailure};
use crate::plan::GroupSpec;
use crate::snapshot::{ErrorReason, Errors, Operation};
use crate::totals::Totals;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// `PERF_COUNT_SW_TASK_CLOCK`: the time a thread has run, in nanoseconds.
const TASK_CLOCK: u64 = 1;

/// How long a process is tried before it is opened unfenced: the
/// children it creates meanwhile are opened one by one afterwards, and
/// each later scan waits for this.
const BUDGET: Duration = Duration::from_millis(20);

/// Tries in a row without a new child or thread after which a process
/// that does not rest is taken not to be creating any, and is opened
/// unfenced: a busy process that does not fork costs a scan little.
const IDLE_TRIES: usize = 3;

/// The pause between two tries: long enough for a thread that forks in a
/// loop to be found asleep between two forks.
const PAUSE: Duration = Duration::from_micros(200);

/// How long an unfenced open waits, at most, for the creations its
/// process's threads had in flight to end.
const SETTLE: Duration = Duration::from_millis(20);

/// The task clock of each thread of a process (not inherited), its
/// descriptors counted in `cgperf_open_fds`.
///
/// An event a thread holds and does not pass on also keeps the kernel
/// from swapping the thread's perf context with its children's: it swaps
/// them at a context switch only between contexts that hold the same
/// inherited events, and then a child created meanwhile copies its
/// groups from one of its siblings' copies, under another lock than a
/// start takes. A group opened paused and started that way can leave the
/// copies that later children take stopped: on Linux 6.18, a process
/// forking 1,500 children, holding another group, had every child made
/// after the start count nothing in 4 runs of 7 (cgperf lost up to 571
/// of 2,000 children through a reload), and none in 8 of 8 with such an
/// event held. So the clocks are held until the groups opened with them
/// have started.
#[derive(Debug)]
pub(super) struct Clocks(Vec<Held>);

impl Clocks {
    /// One clock per thread; `None` when one cannot be opened (the thread
    /// is gone, or the kernel refuses).
    fn open(threads: &[u32], fds: &Fds) -> Option<Self> {
        let clock = [EventAttr::new(PERF_TYPE_SOFTWARE, TASK_CLOCK)];
        threads
            .iter()
            .map(|&tid| {
                let group = CounterGroup::open(&clock, perf::Target::ThreadAlone(tid), 0).ok()?;
                Some(fds.hold(group))
            })
            .collect::<Option<Vec<_>>>()
            .map(Self)
    }

    /// What each clock reads now; `None` when one cannot be read.
    fn read(&mut self) -> Option<Vec<u64>> {
        self.0
            .iter_mut()
            .map(|held| count(&mut held.group))
            .collect()
    }
}

/// What a group of one event (a clock, a creation counter) reads now;
/// `None` when it cannot be read.
fn count(group: &mut CounterGroup) -> Option<u64> {
    let (read, _) = group.read().ok()?;
    read.members().next().map(|(_, value)| value)
}

/// Groups opened on a process, and what its children did meanwhile.
pub(super) struct Opened {
    pub groups: Groups,
    /// The first refusal, if any: the thread and group, and why.
    pub refused: Option<(u32, GroupId, OpenError)>,
    /// Its children listed just before the open: they inherit nothing.
    pub before: Vec<u32>,
    /// Those of `before` that appeared since it was found (while it was
    /// being opened, over several tries, among them): they hold none of
    /// its groups.
    pub during: Vec<u32>,
    /// Where the open was not fenced, its children and threads that
    /// appeared during it (each inherits some of the groups, all or none).
    pub unsure: Option<(Vec<u32>, Vec<u32>)>,
}

impl Processes {
    /// Opens `specs` on every thread of `pid` while none of them runs
    /// (see the module's doc), adding to the totals of `slot`; they count
    /// at once, or once enabled (`Start::Paused`).
    ///
    /// Each try opens the groups paused, reads and closes those of the
    /// try before, and starts the new ones: the process is counted from
    /// the first try on, and the kernel's tracepoints stay registered
    /// between tries (registering one anew can take milliseconds, longer
    /// than a forking process rests). What a thread does between one
    /// try's last read and the next one's start, a few microseconds, is
    /// not seen.
    /// `found` is its children when it was found: those of the others
    /// listed before the open appeared since (`during`).
    pub(super) fn open_quiet(
        &mut self,
        (pid, found): (u32, &[u32]),
        specs: &[Arc<GroupSpec>],
        slot: CgroupSlot,
        start: Start,
        errors: &mut Errors,
    ) -> Opened {
        let first_children = scan::children(&self.root, pid);
        let mut previous: Option<Groups> = None;
        let mut family: Option<(Vec<u32>, Vec<u32>)> = None;
        let mut idle = 0;
        let since = std::time::Instant::now();
        loop {
            let threads = scan::threads(&self.root, pid);
            if threads.is_empty() {
                break;
            }
            if let Some(last) = family.take() {
                let now = (scan::children(&self.root, pid), threads.clone());
                idle = if now == last { idle + 1 } else { 0 };
                family = Some(now);
            } else {
                family = Some((first_children.clone(), threads.clone()));
            }
            let last = since.elapsed() >= BUDGET || idle > IDLE_TRIES;
            let mut clocks = Clocks::open(&threads, &self.fds);
            let first = clocks.as_mut().and_then(Clocks::read);
            let resting = first.is_some()
                && threads.iter().all(|&t| scan::resting(&self.root, pid, t))
                && scan::threads(&self.root, pid) == threads;
            if !resting && !last {
                std::thread::sleep(PAUSE);
                continue;
            }
            // Where both tries' groups do not fit the budget at once, the
            // last are read and closed first.
            let cost = Self::cost(specs, threads.len()).saturating_add(threads.len() as u64);
            if !self.fits(cost) {
                close(&mut self.totals, previous.take(), errors);
            }
            let before = scan::children(&self.root, pid);
            let (mut groups, refused) =
                self.open_groups(specs, &threads, slot, Start::Paused, errors);
            let rested = resting
                && clocks.as_mut().and_then(Clocks::read) == first
                && threads.iter().all(|&t| scan::resting(&self.root, pid, t));
            // The last read of the try before's, then these start: what
            // happens between is not seen, nothing is counted twice.
            close(&mut self.totals, previous.take(), errors);
            if let Start::Now = start {
                enable_all(&mut groups, errors);
            }
            // Listed once every creation in flight at the open has ended
            // (see [`Processes::settle`]): a child or thread that shows
            // only later was created after it, and inherits.
            let unsure = (last && !rested).then(|| {
                self.settle(pid, &threads);
                appeared(&self.root, pid, &before, &threads)
            });
            if rested || last {
                // Paused groups start later: the clocks stay until then.
                if let (Start::Paused, Some(clocks)) = (start, clocks) {
                    self.starting.push(clocks);
                }
                let found: HashSet<&u32> = found.iter().collect();
                let during = before
                    .iter()
                    .filter(|c| !found.contains(c))
                    .copied()
                    .collect();
                return Opened {
                    groups,
                    refused,
                    before,
                    during,
                    unsure,
                };
            }
            // A thread ran: what it created meanwhile holds some copies,
            // which go when these close, at the next try.
            previous = Some(groups);
            std::thread::sleep(PAUSE);
        }
        close(&mut self.totals, previous, errors);
        Opened {
            groups: Groups::new(),
            refused: None,
            before: Vec::new(),
            during: Vec::new(),
            unsure: None,
        }
    }
}

impl Processes {
    /// Waits until no creation that `threads` of `pid` may have had in
    /// flight is still going on, for at most [`SETTLE`].
    ///
    /// A task copies its creator's groups early in its creation, but is
    /// listed among its creator's children or threads only at the end of
    /// it: a creation in flight while groups open unfenced can end after
    /// the listing that says what appeared, and its task then holds none
    /// of them while it is taken to inherit them. A thread's creation has
    /// ended once the thread has rested since (a creation never sleeps
    /// interruptibly), or once it has ended a creation since:
    /// `sched:sched_process_fork` fires in the creating thread when the
    /// new task is listed, and one thread creates one task at a time.
    fn settle(&self, pid: u32, threads: &[u32]) {
        let created = self.creations.get_or_init(creation_event);
        let mut pending: Vec<(u32, Option<CounterGroup>)> = threads
            .iter()
            .map(|&tid| {
                let counter = created.and_then(|event| {
                    CounterGroup::open(&[event], perf::Target::ThreadAlone(tid), 0).ok()
                });
                (tid, counter)
            })
            .collect();
        let since = std::time::Instant::now();
        loop {
            pending.retain_mut(|(tid, counter)| {
                let created = counter.as_mut().and_then(count).is_some_and(|n| n > 0);
                let ended = created
                    || scan::resting(&self.root, pid, *tid)
                    || !scan::thread_exists(&self.root, pid, *tid);
                !ended
            });
            if pending.is_empty() || since.elapsed() >= SETTLE {
                return;
            }
            std::thread::sleep(PAUSE);
        }
    }
}

/// `sched:sched_process_fork` as an event to count, where tracefs says its
/// id (see [`Processes::settle`]); without it, an unfenced open waits for
/// each thread to rest, at most [`SETTLE`].
fn creation_event() -> Option<EventAttr> {
    let tracefs = crate::tracefs::Tracefs::locate().ok()?;
    let name = crate::events::TracepointName {
        subsystem: "sched".into(),
        name: "sched_process_fork".into(),
    };
    let id = tracefs.tracepoint_id(&name).ok()?;
    Some(EventAttr::new(crate::events::PERF_TYPE_TRACEPOINT, id))
}

/// Reads `groups`, if any, a last time and closes them.
fn close(totals: &mut Totals, groups: Option<Groups>, errors: &mut Errors) {
    for mut readers in groups.into_iter().flat_map(|g| g.into_values()) {
        read_all(totals, &mut readers, errors);
    }
}

/// Starts every group of `groups` opened paused; one the kernel will not
/// start is closed, and counted as an open error.
pub(super) fn enable_all(groups: &mut Groups, errors: &mut Errors) {
    for readers in groups.values_mut() {
        readers.retain(|reader| match reader.enable() {
            Ok(()) => true,
            Err(errno) => {
                let failure = OpenFailure::from_errno(errno);
                errors.count(Operation::Open, ErrorReason::Kernel(failure));
                false
            }
        });
    }
    groups.retain(|_, readers| !readers.is_empty());
}

/// The children and threads of `pid` now that are not among `children`
/// and `threads`.
fn appeared(root: &Path, pid: u32, children: &[u32], threads: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let new = |now: Vec<u32>, then: &[u32]| -> Vec<u32> {
        let then: HashSet<&u32> = then.iter().collect();
        now.into_iter().filter(|p| !then.contains(p)).collect()
    };
    (
        new(scan::children(root, pid), children),
        new(scan::threads(root, pid), threads),
    )
}

impl Processes {
    /// Says how many children and threads of process `pid` (named `comm`)
    /// appeared while its groups opened without a moment when none of its
    /// threads ran (see the module's doc): each was created either before the
    /// open, inheriting nothing, or after, inheriting them, and the kernel
    /// does not say which. They are taken to inherit (never counted
    /// twice); those that did not are not counted, and each is counted in
    /// `cgperf_processes_possibly_uncounted_total` of entry `at`, so that
    /// no such loss is silent.
    pub(super) fn note_unsure(
        &mut self,
        at: usize,
        (pid, comm): (u32, &str),
        (children, threads): &(Vec<u32>, Vec<u32>),
    ) {
        let appeared = (children.len() + threads.len()) as u64;
        if appeared == 0 {
            return;
        }
        let name = &self.selected[at].name;
        let first = !self.unsure.contains_key(name);
        *self.unsure.entry(name.clone()).or_default() += appeared;
        let (children, threads) = (children.len(), threads.len());
        // A process that forks all the time meets this at every open: the
        // first time is a warning, the rest are in the metric (and debug).
        match first {
            true => tracing::warn!(
                "process {pid} ({comm}) of `{name}`: {children} children and {threads} threads \
                 appeared while its groups were being opened, and its threads never rested long \
                 enough to open them between two forks; those whose creation began before the \
                 open inherit nothing and are not counted (the kernel does not say which; \
                 cgperf_processes_possibly_uncounted_total counts them, and this entry's later \
                 ones are logged at debug level only)"
            ),
            false => tracing::debug!(
                "process {pid} ({comm}) of `{name}`: {children} children and {threads} threads \
                 appeared while its groups were being opened; possibly uncounted"
            ),
        }
    }

    /// Gives `specs` of entry `at` of their own to `children` of the
    /// counted process `of` that appeared while `specs` were being opened
    /// on it, and so hold none of them, and to their children: they count
    /// through it from now on (in its series, and closed with the matching
    /// process it counts through), as those created later do. They open
    /// as `start` says; returns the processes given groups. One whose
    /// groups do not fit the descriptor budget misses them until a scan
    /// finds room (`fd_budget`).
    pub(super) fn count_through(
        &mut self,
        (at, specs): (usize, &[Arc<GroupSpec>]),
        of: &Key,
        mut children: Vec<u32>,
        start: Start,
        errors: &mut Errors,
    ) -> Vec<Key> {
        let mut given = Vec::new();
        let Some((series, through)) = self
            .counted
            .get(of)
            .map(|c| (c.series.clone(), c.through.clone().unwrap_or(of.clone())))
        else {
            return given;
        };
        let Some(slot) = self.series.get(&series).map(|s| s.slot) else {
            return given;
        };
        while let Some(pid) = children.pop() {
            let Some(s) = scan::stat(&self.root, pid).filter(|s| !s.dead) else {
                continue;
            };
            let key = (of.0.clone(), s.pid, s.start);
            if self.counted.contains_key(&key) {
                continue;
            }
            self.first_seen.entry(s.id()).or_insert(self.generation);
            let threads = scan::threads(&self.root, pid).len();
            let cost = Self::cost(specs, threads);
            let mut counted = Counted {
                admitted: self.generation,
                series: series.clone(),
                groups: Groups::new(),
                missing: Vec::new(),
                through: Some(through.clone()),
            };
            if self.fits(cost.saturating_add(threads as u64)) {
                let opened = self.open_quiet((pid, &[]), specs, slot, start, errors);
                if let Some(unsure) = &opened.unsure {
                    self.note_unsure(at, (s.pid, &s.comm), unsure);
                }
                // Each of its children appeared after `of` was found.
                children.extend(opened.before);
                counted.groups = opened.groups;
            } else {
                counted.missing = specs.iter().map(|g| g.name.clone()).collect();
            }
            self.counted.insert(key.clone(), counted);
            given.push(key);
        }
        given
    }
}
