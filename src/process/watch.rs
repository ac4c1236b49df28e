//! What each thread of a process does while groups open on it, as far as
//! creating tasks goes: how long it ran, how many creations it began (a
//! `task_struct` allocated, `kmem:kmem_cache_alloc`) and how many it ended
//! (`task:task_newtask`).
//!
//! A task copies, early in its creation, the groups its creating thread
//! holds then: groups open on a thread exactly when it had no creation in
//! flight throughout the open (see [`super::fence`]). Each thread proves
//! that one of two ways:
//!
//! - **It did not run.** It rested (slept interruptibly, which a creation
//!   never does, or had not run yet) before the open, and its task clock
//!   stood still across it.
//! - **It began no creation and had none in flight.** Its counters opened
//!   at some moment while it may have been creating a task already; from
//!   then on every creation it begins is counted before it copies any
//!   group, and counted as ended once the new task is listed. A thread
//!   creates one task at a time: whether its first creation counted began
//!   or ended says whether one was in flight when the counters opened.
//!   The kernel records that order in a ring (one page, whose first
//!   record alone is read); where no ring can be mapped, a read that
//!   finds one more begun than ended, or one more ended than begun, says
//!   the same, if reads come often enough to catch one. From then on,
//!   the count of those begun less those ended (and less the one in
//!   flight at the opening, if there was) is never below the creations in
//!   flight (a creation that fails after it began leaves it above, which
//!   only delays the proof). So a thread read with none in flight by that
//!   count before the open, and the same counts after it, had none in
//!   flight throughout: a busy thread that never sleeps proves it between
//!   two forks.
//!
//! Both counts see every creation, whatever asked for it (a clone call of
//! either word size, the kernel's io_uring and vhost workers): every one
//! allocates its `task_struct` from that cache first, and ends at the
//! tracepoint. A kernel whose `kmem_cache_alloc` does not name the cache
//! (before 6.1) gives no beginnings; threads there prove a quiet open by
//! rest alone, as do those whose counts contradict the above (which only
//! a kernel that creates tasks otherwise could make them do).

use crate::backend::budget::{Fds, Held};
use crate::events::{EventAttr, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT, TracepointName};
use crate::perf::{self, CounterGroup};
use perf_event_open_sys::bindings::PERF_SAMPLE_IDENTIFIER;
use std::ffi::CStr;

/// `PERF_COUNT_SW_TASK_CLOCK`: the time a thread has run, in nanoseconds.
const TASK_CLOCK: u64 = 1;

/// The filter that leaves, of the slab allocations a thread makes, those
/// of a new task (`dup_task_struct`, the first step of every creation).
const BEGIN_FILTER: &CStr = c"name == \"task_struct\"";

/// The tracepoints that say a thread began or ended creating a task, as
/// events to count; `None` where tracefs does not say the end's id, and
/// no beginnings where the kernel has no syscall tracepoints (threads
/// then prove a quiet open only by rest).
#[derive(Debug, Clone)]
pub(super) struct Creation {
    /// `task:task_newtask`: fires in the creating thread at the end of
    /// every creation, whatever made it, once the new task is listed in
    /// `/proc`.
    ended: EventAttr,
    /// `kmem:kmem_cache_alloc`, to be filtered by [`BEGIN_FILTER`]; `None`
    /// where the kernel refuses that filter.
    begun: Option<EventAttr>,
}

impl Creation {
    /// Looks the tracepoints up in tracefs.
    pub(super) fn locate() -> Option<Self> {
        let tracefs = crate::tracefs::Tracefs::locate().ok()?;
        let event = |subsystem: &str, name: &str| {
            let name = TracepointName {
                subsystem: subsystem.into(),
                name: name.into(),
            };
            let id = tracefs.tracepoint_id(&name).ok()?;
            Some(EventAttr::new(PERF_TYPE_TRACEPOINT, id))
        };
        let ended = event("task", "task_newtask")?;
        // A kernel without the cache's name in the tracepoint refuses the
        // filter: tried once, on this thread.
        let begun = event("kmem", "kmem_cache_alloc").filter(|&begun| {
            let filters = [None, Some(BEGIN_FILTER)];
            let here = perf::Target::ThreadAlone(std::process::id());
            CounterGroup::open_filtered(&[ended, begun], &filters, here, 0).is_ok()
        });
        Some(Self { ended, begun })
    }
}

impl Creation {
    /// Opens the tracepoints paused on the calling thread, to be held while
    /// a scan or a reload opens processes: the kernel keeps a tracepoint
    /// registered while any event uses it, and registering one anew (as
    /// the counters of each open would, one after the other) can take it
    /// milliseconds each time: 500 processes opened in a row took
    /// seconds. `None` where they cannot be opened.
    pub(super) fn keep(&self, fds: &Fds) -> Option<Held> {
        let events: Vec<EventAttr> = std::iter::once(self.ended).chain(self.begun).collect();
        let filters = [None, Some(BEGIN_FILTER)];
        // SAFETY: gettid takes no argument and cannot fail.
        let here = unsafe { libc::gettid() };
        let here = perf::Target::ThreadAlone(u32::try_from(here).ok()?);
        let group = CounterGroup::open_paused(&events, &filters, here, 0).ok()?;
        Some(fds.hold(group))
    }
}

/// What one thread's counters read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// Nanoseconds run.
    pub ran: u64,
    /// Creations begun.
    pub begun: u64,
    /// Creations ended.
    pub ended: u64,
}

/// The counters of each thread of one process (not inherited), their
/// descriptors counted in `cgperf_open_fds`, and what their reads proved.
///
/// Events a thread holds and does not pass on also keep the kernel from
/// swapping the thread's perf context with its children's: it swaps them
/// at a context switch only between contexts that hold the same inherited
/// events, and then a child created meanwhile copies its groups from one
/// of its siblings' copies, under another lock than a start takes. A
/// group opened paused and started that way can leave the copies that
/// later children take stopped: on Linux 6.18, a process forking 1,500
/// children, holding another group, had every child made after the start
/// count nothing in 4 runs of 7 (cgperf lost up to 571 of 2,000 children
/// through a reload), and none in 8 of 8 with such an event held. So the
/// counters are held until the groups opened with them have started.
#[derive(Debug)]
pub(super) struct Watches {
    threads: Vec<u32>,
    held: Vec<Held>,
    /// Per thread, until its first creation is known: the ring where its
    /// creations begun and ended are recorded in order.
    rings: Vec<Option<perf::Ring>>,
    /// Per thread, what its reads proved; `None` where the counters do
    /// not count beginnings.
    proofs: Option<Vec<Proof>>,
}

/// What one thread's reads of creations begun and ended proved (see the
/// module's doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Proof {
    /// Once a read proved it: whether a creation was in flight when the
    /// counters opened (1) or not (0).
    before: Option<u64>,
    /// A read found counts no kernel that counts every creation gives.
    blind: bool,
}

impl Proof {
    /// Learns what read `seen` proves.
    fn learn(&mut self, seen: &Seen) {
        let (begun, ended) = (seen.begun, seen.ended);
        if begun.checked_sub(ended) == Some(1) {
            self.blind |= self.before.replace(0) == Some(1);
        } else if ended.checked_sub(begun) == Some(1) {
            self.blind |= self.before.replace(1) == Some(0);
        } else if ended > begun {
            self.blind = true;
        }
    }

    /// Learns which the thread did first since its counters opened: began
    /// a creation (`true`: none was in flight then), or ended one.
    fn first(&mut self, began: bool) {
        let before = u64::from(!began);
        self.blind |= self.before.replace(before).is_some_and(|b| b != before);
    }

    /// The creations in flight when read `seen` (at least: a creation that
    /// failed counts as one), where the reads so far prove it.
    fn in_flight(&self, seen: &Seen) -> Option<u64> {
        let before = self.before.filter(|_| !self.blind)?;
        before.checked_add(seen.begun)?.checked_sub(seen.ended)
    }
}

impl Watches {
    /// The descriptors each thread's counters take.
    pub(super) fn width(creation: Option<&Creation>) -> u64 {
        creation.map_or(1, |c| 2 + u64::from(c.begun.is_some()))
    }

    /// Opens the counters on each of `threads`: the task clock, then, with
    /// `creation`, the creations ended and begun; `None` when one cannot
    /// be opened (the thread is gone, or the kernel refuses).
    pub(super) fn open(threads: &[u32], fds: &Fds, creation: Option<&Creation>) -> Option<Self> {
        let mut events = vec![EventAttr::new(PERF_TYPE_SOFTWARE, TASK_CLOCK)];
        if let Some(c) = creation {
            events.push(c.ended);
            events.extend(c.begun);
        }
        let filters = [None, None, Some(BEGIN_FILTER)];
        let mut held = Vec::with_capacity(threads.len());
        let mut rings = Vec::with_capacity(threads.len());
        for &tid in threads {
            let target = (perf::Target::ThreadAlone(tid), 0);
            // Where no ring can be mapped (a memory-lock limit), the counts
            // alone prove what they can.
            // A ring says something only where beginnings are counted.
            let recorded = creation
                .filter(|c| c.begun.is_some())
                .and_then(|_| CounterGroup::open_recording(&events, &filters, target, 1).ok());
            let (group, ring) = match recorded {
                Some((group, ring)) => (group, Some(ring)),
                None => (Self::open_counting(&events, &filters, target)?, None),
            };
            held.push(fds.hold(group));
            rings.push(ring);
        }
        Some(Self {
            threads: threads.to_vec(),
            held,
            rings,
            proofs: creation
                .is_some_and(|c| c.begun.is_some())
                .then(|| vec![Proof::default(); threads.len()]),
        })
    }

    /// The counters alone, without a ring.
    fn open_counting(
        events: &[EventAttr],
        filters: &[Option<&CStr>],
        (target, cpu): (perf::Target<'_>, u32),
    ) -> Option<CounterGroup> {
        CounterGroup::open_filtered(events, filters, target, cpu).ok()
    }

    /// The threads watched, in the order of every read.
    pub(super) fn threads(&self) -> &[u32] {
        &self.threads
    }

    /// What each thread's counters read now (and what that proves);
    /// `None` when one cannot be read.
    pub(super) fn read(&mut self) -> Option<Vec<Seen>> {
        let seen = self
            .held
            .iter_mut()
            .map(|held| read_one(&mut held.group))
            .collect::<Option<Vec<_>>>()?;
        let proofs = self.proofs.iter_mut().flatten();
        let watched = proofs.zip(&self.held).zip(&mut self.rings).zip(&seen);
        for (((proof, held), ring), one) in watched {
            if let Some(first) = ring
                .as_mut()
                .and_then(|r| first_creation(r, held.group.ids()))
            {
                if let Some(began) = first {
                    proof.first(began);
                }
                *ring = None;
            }
            proof.learn(one);
        }
        Some(seen)
    }

    /// Whether thread `n`, read `then`, had no creation in flight then:
    /// it was `resting`, or its counts prove it.
    pub(super) fn idle(&self, n: usize, then: &Seen, resting: bool) -> bool {
        resting || self.in_flight(n, then) == Some(0)
    }

    /// Whether thread `n`, read `then` before an open, `now` right after
    /// it and `listed` once the children were listed, had no creation in
    /// flight during the open, and ended none until the listing: it
    /// rested (`resting`, before and after) and did not run, or its counts
    /// prove it had none in flight then, began none until `now` and ended
    /// none until `listed`.
    pub(super) fn quiet(
        &self,
        n: usize,
        (then, now, listed): (&Seen, &Seen, &Seen),
        resting: bool,
    ) -> bool {
        let slept = resting && then.ran == listed.ran;
        let unchanged = now.begun == then.begun && listed.ended == then.ended;
        slept || (self.idle(n, then, false) && unchanged)
    }

    /// The creations thread `n` had in flight when read `seen`, at least,
    /// where its counts say (see the module's doc).
    fn in_flight(&self, n: usize, seen: &Seen) -> Option<u64> {
        self.proofs.as_ref()?.get(n)?.in_flight(seen)
    }
}

/// Whether, from the reads `was` to `now` of the same threads, one of them
/// created a task since its counters opened (it is one to wait for: the
/// moment between two creations comes), or one that does not rest
/// (`resting`) did not run (it waits for a CPU): a try that sees neither,
/// and no new child or thread, is idle (see [`super::fence`]).
pub(super) fn moved(was: &[Seen], now: &[Seen], resting: &[bool]) -> bool {
    let threads = was.iter().zip(now).zip(resting);
    threads.into_iter().any(|((was, now), &rests)| {
        now.begun != 0 || now.ended != 0 || (was.ran == now.ran && !rests)
    })
}

/// The first record in `ring`, once there is one: a creation begun
/// (`Some(true)`), ended (`Some(false)`), or a record of neither (`None`);
/// the group's `ids` are the clock's, the end's, then the beginning's.
/// `None` while nothing was recorded. Drains the ring: only its first
/// record says anything.
fn first_creation(ring: &mut perf::Ring, ids: &[u64]) -> Option<Option<bool>> {
    let (ended, begun) = (ids.get(1).copied(), ids.get(2).copied());
    let mut first = None;
    ring.drain(|record| {
        if first.is_some() {
            return;
        }
        let sample = match perf::parse_record(u64::from(PERF_SAMPLE_IDENTIFIER), record) {
            Ok(perf::Record::Sample(sample)) => Some(sample.identifier),
            _ => None,
        };
        first = Some(match sample.flatten() {
            id if id.is_some() && id == begun => Some(true),
            id if id.is_some() && id == ended => Some(false),
            _ => None,
        });
    });
    first
}

/// The clock and the creations ended and begun that one thread's counters
/// read now; `None` when they cannot be read.
fn read_one(group: &mut CounterGroup) -> Option<Seen> {
    let (read, _) = group.read().ok()?;
    let mut values = read.members().map(|(_, value)| value);
    let ran = values.next()?;
    let ended = values.next().unwrap_or(0);
    let begun = values.next().unwrap_or(0);
    Some(Seen { ran, begun, ended })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(ran: u64, begun: u64, ended: u64) -> Seen {
        Seen { ran, begun, ended }
    }

    /// What a thread's proof says after reads of (begun, ended).
    fn proof(reads: &[(u64, u64)]) -> Proof {
        let mut proof = Proof::default();
        for &(begun, ended) in reads {
            proof.learn(&seen(0, begun, ended));
        }
        proof
    }

    #[test]
    fn nothing_is_proven_before_a_read_inside_or_right_after_a_creation() {
        // As many begun as ended: a creation may have been in flight at
        // the opening, and be again now.
        let p = proof(&[(0, 0), (3, 3), (7, 7)]);
        assert_eq!(p.in_flight(&seen(0, 7, 7)), None);
    }

    #[test]
    fn one_begun_and_not_ended_proves_none_was_in_flight_at_the_opening() {
        let p = proof(&[(2, 2), (3, 2)]);
        assert_eq!(p.before, Some(0));
        assert_eq!(p.in_flight(&seen(0, 3, 2)), Some(1));
        assert_eq!(p.in_flight(&seen(0, 3, 3)), Some(0));
        assert_eq!(p.in_flight(&seen(0, 5, 4)), Some(1));
    }

    #[test]
    fn one_ended_and_not_begun_proves_one_was() {
        let p = proof(&[(0, 0), (0, 1)]);
        assert_eq!(p.before, Some(1));
        assert_eq!(p.in_flight(&seen(0, 0, 1)), Some(0));
        assert_eq!(p.in_flight(&seen(0, 1, 1)), Some(1));
        assert_eq!(p.in_flight(&seen(0, 4, 5)), Some(0));
    }

    #[test]
    fn the_first_creation_recorded_says_at_once_whether_one_was_in_flight() {
        // Begun first: none was; as many begun as ended is then none.
        let mut p = Proof::default();
        p.first(true);
        assert_eq!(p.in_flight(&seen(0, 4, 4)), Some(0));
        // Ended first: one was; one more ended than begun is then none.
        let mut p = Proof::default();
        p.first(false);
        assert_eq!(p.in_flight(&seen(0, 4, 5)), Some(0));
        assert_eq!(p.in_flight(&seen(0, 5, 5)), Some(1));
        // Reads that contradict the record prove nothing.
        let mut p = Proof::default();
        p.first(true);
        p.learn(&seen(0, 0, 1));
        assert_eq!(p.in_flight(&seen(0, 1, 1)), None);
    }

    #[test]
    fn a_creation_that_failed_only_delays_the_proof() {
        // Begun twice (one failed), ended once: never taken as idle while
        // the count says one is in flight.
        let p = proof(&[(1, 0), (2, 1)]);
        assert_eq!(p.in_flight(&seen(0, 2, 1)), Some(1));
    }

    #[test]
    fn counts_no_kernel_that_counts_every_creation_gives_prove_nothing() {
        for reads in [
            &[(0, 2)][..],
            &[(1, 0), (1, 2)],
            &[(0, 1), (2, 1)],
            &[(0, 0), (0, 3)],
        ] {
            let p = proof(reads);
            assert!(p.blind, "{reads:?}");
            assert_eq!(p.in_flight(&seen(0, 9, 9)), None, "{reads:?}");
        }
    }

    #[test]
    fn counts_near_the_top_of_the_range_do_not_overflow() {
        let p = proof(&[(u64::MAX, u64::MAX - 1)]);
        assert_eq!(p.in_flight(&seen(0, u64::MAX, u64::MAX)), Some(0));
        let p = proof(&[(0, 1)]);
        assert_eq!(p.in_flight(&seen(0, u64::MAX, 0)), None);
    }

    #[test]
    fn a_try_moved_where_a_thread_creates_tasks_or_a_busy_one_did_not_run() {
        let was = [seen(10, 0, 0), seen(5, 0, 0)];
        let rests = [false, true];
        // The busy thread ran, the resting one did not: idle.
        let now = [seen(20, 0, 0), seen(5, 0, 0)];
        assert!(!moved(&was, &now, &rests));
        // A creation began, or ended, since the counters opened.
        assert!(moved(&was, &[seen(20, 1, 0), seen(5, 0, 0)], &rests));
        assert!(moved(&was, &[seen(20, 0, 0), seen(5, 0, 1)], &rests));
        assert!(moved(&now, &[seen(30, 3, 3), seen(5, 0, 0)], &rests));
        // The busy thread did not run: it waits for a CPU.
        assert!(moved(&was, &[seen(10, 0, 0), seen(5, 0, 0)], &rests));
    }
}
