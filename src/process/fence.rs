//! Opening a process's groups at a moment none of its threads is creating
//! a task.
//!
//! A thread that creates a process or a thread copies, early in the
//! creation, the groups it holds then (`inherit`); the new task shows in
//! `/proc` only later. A creation in flight while the groups open copies
//! some of them, all or none, and the kernel does not say which. So the
//! groups are opened between two reads of counters on every thread (see
//! [`super::watch`]): where each thread proves it had no creation in
//! flight throughout (it rested and did not run, or its counts of
//! creations begun and ended say none was in flight and none began), the
//! children listed then are exactly those made before the open, which
//! inherit nothing; every later one inherits every group. Where a thread
//! may have been creating a task, the next try opens them again a moment
//! later (those of the try before close then, and the copies children
//! took go with them); a process that proves it at no try (one that never
//! rests, on a kernel that does not count creations, or whose forks
//! follow each other with no gap) is opened unfenced at the last try, and
//! its children and threads that appeared meanwhile (listed once each
//! creation in flight at the open has ended: a task shows in `/proc` only
//! at the end of its creation) are taken to inherit, with a warning, and
//! counted in `cgperf_processes_possibly_uncounted_total`.
//!
//! A process is opened this way when a scan finds it, and when a reload
//! opens its entry's changed groups on it anew (see [`super::regroup`]).

use super::watch::{self, Creation, Seen, Watches};
use super::{Counted, Groups, Key, Processes, Start, read_all, scan};
use crate::ids::{CgroupSlot, GroupId};
use crate::perf::{OpenError, OpenFailure};
use crate::plan::GroupSpec;
use crate::snapshot::{ErrorReason, Errors, Operation};
use crate::totals::Totals;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a process is tried, in the time its threads run, before it is
/// opened unfenced: the children it creates meanwhile are opened one by
/// one afterwards, and each later scan waits for this. On a loaded
/// machine a process runs less than it waits: tried as long as it has not
/// run this long, up to [`BUDGET_CAP`].
const BUDGET: Duration = Duration::from_millis(20);

/// How long a process is tried at most, whatever it ran.
const BUDGET_CAP: Duration = Duration::from_millis(200);

/// How long a process that does not rest is tried while it creates no
/// task and no child or thread appears, before it is taken not to be
/// creating any and opened unfenced: a busy process that does not fork
/// costs a scan little. Longer than the gap between two forks of a
/// process that forks in a loop.
const IDLE: Duration = Duration::from_millis(5);

/// The longest a try waits for every thread to be idle (see
/// [`Watches::idle`]): long enough for a thread that forks in a loop to
/// be found between two forks.
const PAUSE: Duration = Duration::from_micros(200);

/// How long an unfenced open waits, at most, for the creations its
/// process's threads had in flight to end.
const SETTLE: Duration = Duration::from_millis(20);

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
        let mut idle: Option<std::time::Instant> = None;
        let mut watches: Option<Watches> = None;
        // Each thread's counters as the last try read them, and whether
        // they moved then (see [`watch::moved`]).
        let mut counted: Option<Vec<Seen>> = None;
        let mut moved = false;
        let mut since = std::time::Instant::now();
        let mut counting = false;
        loop {
            let threads = scan::threads(&self.root, pid);
            if threads.is_empty() {
                break;
            }
            // A try is idle where no child or thread appeared since the
            // one before, and the threads neither create tasks nor wait
            // for a CPU (see [`watch::moved`]).
            if let Some(last) = family.take() {
                let now = (scan::children(&self.root, pid), threads.clone());
                idle =
                    (now == last && !moved).then(|| idle.unwrap_or_else(std::time::Instant::now));
                family = Some(now);
            } else {
                family = Some((first_children.clone(), threads.clone()));
            }
            let ran = counted.iter().flatten().map(|s| s.ran);
            let ran = Duration::from_nanos(ran.fold(0, u64::saturating_add));
            let spent = since.elapsed();
            let last = (spent >= BUDGET && (ran >= BUDGET || watches.is_none()))
                || spent >= BUDGET_CAP
                || idle.is_some_and(|t| t.elapsed() >= IDLE);
            // Kept from try to try while the threads stay the same: what
            // their reads prove holds as long as they are open.
            if watches.as_ref().is_none_or(|w| w.threads() != threads) {
                let creation = self.creation.get_or_init(Creation::locate).as_ref();
                if self.keeper.is_none() {
                    self.keeper = creation.and_then(|c| c.keep(&self.fds));
                }
                watches = Watches::open(&threads, &self.fds, creation);
                // Registering the tracepoints anew can take the kernel
                // milliseconds: the budget counts from the first try's.
                if !counting {
                    since = std::time::Instant::now();
                    counting = true;
                }
            }
            // Read until every thread is idle, for a pause at most: a
            // thread that forks in a loop is caught as a creation ends,
            // with the whole gap before the next one left for the open.
            let waiting = std::time::Instant::now();
            let (then, resting, ready) = loop {
                let then = watches.as_mut().and_then(Watches::read);
                // Rest is looked for only where the counts prove nothing:
                // reads come closer together, and a creation as short as
                // a small process's fork is caught in flight.
                let by_counts = |n: usize| match (&watches, &then) {
                    (Some(w), Some(seen)) => seen.get(n).is_some_and(|s| w.idle(n, s, false)),
                    _ => false,
                };
                let resting: Vec<bool> = (threads.iter().enumerate())
                    .map(|(n, &t)| !by_counts(n) && scan::resting(&self.root, pid, t))
                    .collect();
                let ready = (0..threads.len()).all(|n| resting[n] || by_counts(n))
                    && scan::threads(&self.root, pid) == threads;
                if ready || last || waiting.elapsed() >= PAUSE {
                    break (then, resting, ready);
                }
                std::thread::yield_now();
            };
            moved = match (&counted, &then) {
                (Some(was), Some(now)) => watch::moved(was, now, &resting),
                _ => true,
            };
            counted = then.clone();
            if !ready && !last {
                continue;
            }
            // Where both tries' groups do not fit the budget at once, the
            // last are read and closed first.
            if !self.fits(Self::cost(specs, threads.len())) {
                close(&mut self.totals, previous.take(), errors);
            }
            // The children made before the open: an unfenced open must
            // list them before it; a fenced one lists them after, out of
            // the moment that must fall between two creations, and makes
            // sure none ended meanwhile.
            let early = last.then(|| scan::children(&self.root, pid));
            let (mut groups, refused) =
                self.open_groups(specs, &threads, slot, Start::Paused, errors);
            let now = watches.as_mut().and_then(Watches::read);
            let (before, listed) = match early {
                Some(before) => (before, now.clone()),
                None => {
                    let before = scan::children(&self.root, pid);
                    (before, watches.as_mut().and_then(Watches::read))
                }
            };
            let still = self.resting(pid, &threads);
            let quiet = ready
                && match (&watches, &then, &now, &listed) {
                    (Some(w), Some(then), Some(now), Some(listed)) => (0..threads.len()).all(|n| {
                        let reads = (&then[n], &now[n], &listed[n]);
                        w.quiet(n, reads, resting[n] && still[n])
                    }),
                    _ => false,
                };
            // The last read of the try before's, then these start: what
            // happens between is not seen, nothing is counted twice.
            close(&mut self.totals, previous.take(), errors);
            if let Start::Now = start {
                enable_all(&mut groups, errors);
            }
            // Listed once every creation in flight at the open has ended
            // (see [`Processes::settle`]): a child or thread that shows
            // only later was created after it, and inherits.
            let unsure = (last && !quiet).then(|| {
                self.settle(pid, &threads, watches.as_mut().zip(now.as_deref()));
                appeared(&self.root, pid, &before, &threads)
            });
            if quiet || last {
                // Paused groups start later: the counters stay until then.
                if let (Start::Paused, Some(watches)) = (start, watches) {
                    self.starting.push(watches);
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
            // A thread may have been creating a task: what it created
            // meanwhile holds some copies, which go when these close, at
            // the next try.
            previous = Some(groups);
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
    /// flight is still going on, for at most [`SETTLE`]; `watched` are
    /// their counters, as read after the open.
    ///
    /// A task copies its creator's groups early in its creation, but is
    /// listed among its creator's children or threads only at the end of
    /// it: a creation in flight while groups open unfenced can end after
    /// the listing that says what appeared, and its task then holds none
    /// of them while it is taken to inherit them. A thread's creation has
    /// ended once the thread has rested since (a creation never sleeps
    /// interruptibly), or once it has ended a creation since (counted
    /// when the new task is listed; one thread creates one task at a
    /// time).
    fn settle(&self, pid: u32, threads: &[u32], mut watched: Option<(&mut Watches, &[Seen])>) {
        let mut pending: Vec<usize> = (0..threads.len()).collect();
        let since = std::time::Instant::now();
        loop {
            let seen = watched.as_mut().and_then(|(w, _)| w.read());
            pending.retain(|&n| {
                let created = watched
                    .as_ref()
                    .zip(seen.as_ref())
                    .and_then(|((_, then), now)| Some(now.get(n)?.ended > then.get(n)?.ended))
                    .unwrap_or(false);
                let tid = threads[n];
                let ended = created
                    || scan::resting(&self.root, pid, tid)
                    || !scan::thread_exists(&self.root, pid, tid);
                !ended
            });
            if pending.is_empty() || since.elapsed() >= SETTLE {
                return;
            }
            std::thread::sleep(PAUSE);
        }
    }

    /// Whether each of `threads` of `pid` rests now.
    fn resting(&self, pid: u32, threads: &[u32]) -> Vec<bool> {
        threads
            .iter()
            .map(|&t| scan::resting(&self.root, pid, t))
            .collect()
    }
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
                 appeared while its groups were being opened, and no moment was found when none \
                 of its threads was creating a task; those whose creation began before the \
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
            if self.fits(cost.saturating_add(self.watch_cost(threads))) {
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
