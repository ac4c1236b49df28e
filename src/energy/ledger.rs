//! Each counted cgroup's state between intervals: its weight totals per
//! socket at the last interval and its micro-Joules per meter scope, laid
//! out in arrays in the order of the snapshot's activity (path order). An
//! interval whose activity shares the last one's list of cgroups (the
//! same cgroups, the same labels) is taken in place, array beside array:
//! it neither hashes a path nor allocates nor touches a cgroup's
//! reference count. Only when the list changed are the new cgroups
//! matched with the last ones, by walking both lists in path order, and
//! the tree of counted cgroups made again. The activity comes summed per
//! socket, so that an interval costs the same on 2 CPUs as on 128: at
//! 10,000 cgroups, well within a millisecond of CPU (benches/energy.rs).

use super::meter::Over;
use super::split::Tree;
use crate::snapshot::{Activity, Weighed};
use std::cmp::Ordering;
use std::sync::Arc;

/// The counted cgroups' state, and what each did in the last interval.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The last activity: its cgroups (their list shared with it) and
    /// their weight totals per socket.
    last: Activity,
    /// Per cgroup of `last`, its micro-Joules on each of `width` scopes
    /// since it was first counted.
    joules: Vec<u64>,
    width: usize,
    /// Per cgroup of `last`, whether it got a share yet.
    shared: Vec<bool>,
    /// The tree of `last`'s paths, made again when the list changes.
    tree: Tree,
    /// The sockets the meter covers, whose weights are kept.
    sockets: Vec<u32>,
    /// Per cgroup, what it did in the last interval: on each socket of
    /// `sockets`, then on every socket.
    weights: Vec<f64>,
}

impl Ledger {
    /// Takes in `activity` (each cgroup's weight totals per socket): each
    /// cgroup's growth since the last call on each socket of `sockets`, and
    /// on all sockets (a total that went back counts from 0; a new
    /// cgroup's whole total). Cgroups no longer in `activity` are
    /// forgotten with their energy.
    pub fn update(&mut self, activity: &Activity, sockets: &[u32]) {
        if self.sockets != sockets {
            self.sockets = sockets.to_vec();
        }
        let width = self.sockets.len() + 1;
        self.weights.clear();
        self.weights.resize(activity.len() * width, 0.0);
        let rows = self.weights.chunks_mut(width).enumerate();
        let (metered, last) = (&self.sockets, &self.last);
        if Arc::ptr_eq(activity.cgroups(), last.cgroups()) {
            // The same cgroups as last time: in place.
            for (i, row) in rows {
                grown(last.sockets(i), activity.sockets(i), row, metered);
            }
        } else {
            // Others: the cgroups that stay keep their totals and energy,
            // the new ones start from none, the gone ones are dropped.
            let was = matched(last.cgroups(), activity.cgroups());
            let mut joules = vec![0; activity.len() * self.width];
            let mut shared = vec![false; activity.len()];
            for ((i, row), j) in rows.zip(&was) {
                let before = j.map_or(&[][..], |j| last.sockets(j));
                grown(before, activity.sockets(i), row, metered);
                if let Some(j) = *j {
                    let (from, to) = (j * self.width, i * self.width);
                    joules[to..to + self.width]
                        .copy_from_slice(&self.joules[from..from + self.width]);
                    shared[i] = self.shared[j];
                }
            }
            self.joules = joules;
            self.shared = shared;
            let paths: Vec<&str> = activity.cgroups().iter().map(|c| &*c.cgroup).collect();
            self.tree = Tree::of(&paths);
        }
        self.last.clone_from(activity);
    }

    /// The counted cgroups' tree, in the order of [`Ledger::weights`].
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// The counted cgroups, in the order of [`Ledger::weights`]: the last
    /// activity's list.
    pub fn cgroups(&self) -> &Arc<[Weighed]> {
        self.last.cgroups()
    }

    /// What each cgroup did in the last interval on the CPUs `over` names
    /// (0 for a socket the meter does not cover).
    pub fn weights(&self, over: Over) -> Vec<f64> {
        let width = self.sockets.len() + 1;
        let column = match over {
            Over::Machine => Some(width - 1),
            Over::Socket(socket) => self.sockets.iter().position(|s| *s == socket),
        };
        match column {
            Some(column) => self
                .weights
                .iter()
                .skip(column)
                .step_by(width)
                .copied()
                .collect(),
            None => vec![0.0; self.last.len()],
        }
    }

    /// Adds `parts` (per cgroup, in the order of [`Ledger::weights`]) to
    /// scope `scope` of `scopes`. Saturating: no meter reading, however
    /// absurd, makes a total overflow (and none ever goes back).
    pub fn add(&mut self, scope: usize, scopes: usize, parts: &[u64]) {
        if scopes > self.width {
            // A meter scope more (a reload): each cgroup's row widens.
            let mut joules = vec![0; self.shared.len() * scopes];
            for (to, from) in joules
                .chunks_mut(scopes)
                .zip(self.joules.chunks(self.width.max(1)))
            {
                to[..self.width].copy_from_slice(&from[..self.width]);
            }
            (self.joules, self.width) = (joules, scopes);
        }
        let width = self.width;
        for ((row, part), shared) in self
            .joules
            .chunks_mut(width.max(1))
            .zip(parts)
            .zip(&mut self.shared)
        {
            if let Some(total) = row.get_mut(scope) {
                *total = total.saturating_add(*part);
            }
            *shared = true;
        }
    }

    /// The `i`-th cgroup's micro-Joules per scope (at most as many as
    /// were ever added to); `None` before its first share.
    pub fn joules(&self, i: usize) -> Option<&[u64]> {
        match self.shared.get(i) {
            Some(true) => self.joules.get(i * self.width..(i + 1) * self.width),
            _ => None,
        }
    }
}

/// Adds what a cgroup did since its totals `before` (per socket, in socket
/// order) to `row`, from its totals `now`: per socket of `metered`, then
/// over all sockets.
fn grown(before: &[(u32, f64)], now: &[(u32, f64)], row: &mut [f64], metered: &[u32]) {
    for (n, &(socket, total)) in now.iter().enumerate() {
        // Both in socket order: mostly the same sockets as last time.
        let was = match before.get(n) {
            Some(&(s, t)) if s == socket => t,
            _ => before
                .binary_search_by_key(&socket, |(s, _)| *s)
                .map_or(0.0, |at| before[at].1),
        };
        let delta = if total >= was { total - was } else { total };
        let slot = metered.iter().position(|s| *s == socket);
        for at in slot.into_iter().chain([metered.len()]) {
            if let Some(w) = row.get_mut(at) {
                *w += delta;
            }
        }
    }
}

/// For each of `now`, where it was in `before` (both in path order, then
/// start), if it was.
fn matched(before: &[Weighed], now: &[Weighed]) -> Vec<Option<usize>> {
    let mut j = 0;
    now.iter()
        .map(|c| {
            while before.get(j).is_some_and(|b| b.order(c) == Ordering::Less) {
                j += 1;
            }
            let found = before.get(j).is_some_and(|b| b.order(c) == Ordering::Equal);
            found.then(|| {
                j += 1;
                j - 1
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::CgroupActivity;
    use std::time::{Duration, SystemTime};

    /// A cgroup's totals per socket.
    fn activity(cgroup: &str, start: u64, sockets: &[(u32, f64)]) -> CgroupActivity {
        CgroupActivity {
            of: Weighed {
                cgroup: cgroup.into(),
                labels: Arc::from(Vec::new()),
                start_time: SystemTime::UNIX_EPOCH + Duration::from_secs(start),
            },
            sockets: sockets.into(),
        }
    }

    /// `last`'s cgroups again with the sums `sockets`, as the engine
    /// gives them: their list shared.
    fn again(last: &Activity, sockets: &[&[(u32, f64)]]) -> Activity {
        let mut next = Activity::after(last.cgroups());
        for (c, s) in last.cgroups().iter().zip(sockets) {
            next.push(&c.cgroup, &c.labels, c.start_time, s);
        }
        next.finish()
    }

    /// Each cgroup's path and micro-Joules.
    fn joules(ledger: &Ledger) -> Vec<(String, Option<Vec<u64>>)> {
        let cgroups = ledger.cgroups().iter().enumerate();
        cgroups
            .map(|(i, c)| (c.cgroup.to_string(), ledger.joules(i).map(<[u64]>::to_vec)))
            .collect()
    }

    #[test]
    fn growth_per_socket_follows_each_cgroup_and_a_new_one_starts_whole() {
        let mut ledger = Ledger::default();
        let first: Activity = [
            activity("/b", 1, &[(0, 5.0), (1, 1.0)]),
            activity("/a", 1, &[(0, 2.0), (2, 9.0)]),
        ]
        .into_iter()
        .collect();
        // Sockets 0 and 1 metered, 2 not.
        ledger.update(&first, &[0, 1]);
        // Given out of order: kept in path order.
        assert_eq!(*ledger.weights(Over::Socket(0)), [2.0, 5.0]);
        assert_eq!(*ledger.weights(Over::Socket(1)), [0.0, 1.0]);
        assert_eq!(
            *ledger.weights(Over::Socket(2)),
            [0.0, 0.0],
            "socket 2 is not metered"
        );
        assert_eq!(
            *ledger.weights(Over::Machine),
            [11.0, 6.0],
            "every socket, metered or not"
        );
        assert_eq!(joules(&ledger), [("/a".into(), None), ("/b".into(), None)]);
        ledger.add(0, 2, &[10, 20]);
        let tree = ledger.tree().clone();
        // a grew by 3 on socket 0 and no longer shows socket 2; c
        // appeared under a; b was made again (later start).
        let second: Activity = [
            activity("/a", 1, &[(0, 5.0)]),
            activity("/a/c", 3, &[(1, 7.0)]),
            activity("/b", 2, &[(0, 6.0), (1, 0.5)]),
        ]
        .into_iter()
        .collect();
        ledger.update(&second, &[0, 1]);
        assert_eq!(*ledger.weights(Over::Socket(0)), [3.0, 0.0, 6.0]);
        assert_eq!(*ledger.weights(Over::Socket(1)), [0.0, 7.0, 0.5]);
        assert_eq!(
            joules(&ledger),
            [
                ("/a".into(), Some(vec![10, 0])),
                ("/a/c".into(), None),
                ("/b".into(), None)
            ],
            "a keeps its energy; the new b starts from none"
        );
        assert_ne!(*ledger.tree(), tree, "the tree is made again");
        assert_eq!(ledger.tree().children[0], [1]);
        // The same cgroups (their list shared, as the engine shares it),
        // taken in place: c grew by 1; b went back on socket 1 since,
        // counted from 0.
        let third = again(&second, &[&[(0, 5.0)], &[(1, 8.0)], &[(0, 6.0), (1, 0.25)]]);
        assert!(Arc::ptr_eq(third.cgroups(), second.cgroups()));
        ledger.add(1, 2, &[1, 2, 3]);
        ledger.update(&third, &[0, 1]);
        assert_eq!(*ledger.weights(Over::Socket(1)), [0.0, 1.0, 0.25]);
        assert_eq!(
            joules(&ledger),
            [
                ("/a".into(), Some(vec![10, 1])),
                ("/a/c".into(), Some(vec![0, 2])),
                ("/b".into(), Some(vec![0, 3]))
            ]
        );
        assert_eq!(ledger.tree().children[0], [1]);
        // A meter scope more: every row widens and keeps what it had.
        ledger.add(2, 3, &[5, 0, 0]);
        assert_eq!(ledger.joules(0), Some(&[10, 1, 5][..]));
        assert_eq!(ledger.joules(2), Some(&[0, 3, 0][..]));
        // The meter's sockets change: socket 2 is now metered.
        let fourth = again(&third, &[&[(0, 5.0)], &[(1, 8.0)], &[(0, 6.0), (1, 0.25)]]);
        ledger.update(&fourth, &[2]);
        assert_eq!(*ledger.weights(Over::Socket(2)), [0.0, 0.0, 0.0]);
        assert_eq!(
            *ledger.weights(Over::Socket(0)),
            [0.0; 3],
            "no longer metered"
        );
        // Every cgroup gone, then one back with the same start: it is
        // the one that was, from none.
        ledger.update(&Activity::default(), &[0]);
        assert!(ledger.cgroups().is_empty() && ledger.weights(Over::Machine).is_empty());
        let back: Activity = [activity("/a", 1, &[(0, 7.0)])].into_iter().collect();
        ledger.update(&back, &[0]);
        assert_eq!(*ledger.weights(Over::Socket(0)), [7.0], "counted whole");
        assert_eq!(joules(&ledger), [("/a".into(), None)]);
    }
}
