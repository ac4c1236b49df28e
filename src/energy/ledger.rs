//! Each counted cgroup's state between intervals: its weight totals per
//! socket at the last interval and its micro-Joules per meter scope, kept
//! in path order as the snapshot's activity comes. A new interval's
//! cgroups are matched with the last ones by walking both lists in that
//! order (one comparison of pointers per cgroup that stays), so that an
//! interval neither hashes a path nor allocates for a cgroup already
//! known, and the tree of counted cgroups is made again only when the set
//! of cgroups changed. The activity comes summed per socket, so that an
//! interval costs the same on 2 CPUs as on 128: at 10,000 cgroups, well
//! within a millisecond of CPU (benches/energy.rs).

use super::meter::Over;
use super::split::Tree;
use crate::snapshot::CgroupActivity;
use std::cmp::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

/// One counted cgroup: a cgroup removed and made again (a later start)
/// is another.
#[derive(Debug)]
struct Known {
    path: Arc<str>,
    start: SystemTime,
    /// Its weight totals per socket at the last interval, in socket order.
    totals: Vec<(u32, f64)>,
    /// Its micro-Joules per meter scope since it was first counted.
    joules: Vec<u64>,
}

impl Known {
    /// Where `a` sorts against this one: by path, then start.
    fn order(&self, a: &CgroupActivity) -> Ordering {
        let path = if Arc::ptr_eq(&self.path, &a.cgroup) {
            Ordering::Equal
        } else {
            self.path.cmp(&a.cgroup)
        };
        path.then(self.start.cmp(&a.start_time))
    }
}

/// The counted cgroups' state, and what each did in the last interval.
#[derive(Debug, Default)]
pub struct Ledger {
    /// In path order, then start.
    known: Vec<Known>,
    /// The list before `known`, emptied: its room is used again.
    spare: Vec<Known>,
    /// The index in the last activity of each of `known`.
    at: Vec<usize>,
    /// The tree of `known`'s paths, made again when the set changes.
    tree: Tree,
    /// The sockets the meter covers, whose weights are kept.
    sockets: Vec<u32>,
    /// Per known cgroup, what it did in the last interval: on each socket
    /// of `sockets`, then on every socket.
    weights: Vec<f64>,
}

impl Ledger {
    /// Takes in `activity` (each cgroup's weight totals per socket): each
    /// cgroup's growth since the last call on each socket of `sockets`, and
    /// on all sockets (a total that went back counts from 0; a new
    /// cgroup's whole total). Cgroups no longer in `activity` are
    /// forgotten with their energy.
    pub fn update(&mut self, activity: &[CgroupActivity], sockets: &[u32]) {
        if self.sockets != sockets {
            self.sockets = sockets.to_vec();
        }
        let width = self.sockets.len() + 1;
        self.weights.clear();
        self.weights.resize(activity.len() * width, 0.0);
        let mut rows = self.weights.chunks_mut(width);
        let metered = &self.sockets;
        let same = activity.len() == self.known.len()
            && activity
                .iter()
                .zip(&self.known)
                .all(|(a, k)| Arc::ptr_eq(&a.cgroup, &k.path) && a.start_time == k.start);
        if same {
            // The same cgroups as last time, in the same order: in place.
            for (k, a) in self.known.iter_mut().zip(activity) {
                k.weigh(a, rows.next().unwrap_or_default(), metered);
            }
            self.at.clear();
            self.at.extend(0..activity.len());
            return;
        }
        // Others: both lists walked in path order, the cgroups that stay
        // moved over, the new ones made, the gone ones dropped.
        let order = path_order(activity);
        self.at.clear();
        let mut known = std::mem::take(&mut self.spare);
        known.reserve(activity.len());
        let mut old = self.known.drain(..).peekable();
        for j in 0..activity.len() {
            let i = order.as_ref().map_or(j, |order| order[j]);
            let a = &activity[i];
            while old.next_if(|k| k.order(a) == Ordering::Less).is_some() {}
            let mut k = old
                .next_if(|k| k.order(a) == Ordering::Equal)
                .unwrap_or_else(|| Known {
                    path: a.cgroup.clone(),
                    start: a.start_time,
                    totals: Vec::with_capacity(a.sockets.len()),
                    joules: Vec::new(),
                });
            k.weigh(a, rows.next().unwrap_or_default(), metered);
            known.push(k);
            self.at.push(i);
        }
        drop(old);
        self.spare = std::mem::replace(&mut self.known, known);
        let paths: Vec<&str> = self.known.iter().map(|k| &*k.path).collect();
        self.tree = Tree::of(&paths);
    }

    /// The counted cgroups' tree, in the order of [`Ledger::weights`].
    pub fn tree(&self) -> &Tree {
        &self.tree
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
            None => vec![0.0; self.known.len()],
        }
    }

    /// Adds `parts` (per cgroup, in the order of [`Ledger::weights`]) to
    /// scope `scope` of `scopes`. Saturating: no meter reading, however
    /// absurd, makes a total overflow (and none ever goes back).
    pub fn add(&mut self, scope: usize, scopes: usize, parts: &[u64]) {
        for (k, part) in self.known.iter_mut().zip(parts) {
            k.joules.resize(scopes.max(k.joules.len()), 0);
            if let Some(total) = k.joules.get_mut(scope) {
                *total = total.saturating_add(*part);
            }
        }
    }

    /// Each cgroup's index in the last activity and its micro-Joules per
    /// scope (none before its first share).
    pub fn totals(&self) -> impl Iterator<Item = (usize, &[u64])> {
        self.at
            .iter()
            .copied()
            .zip(self.known.iter().map(|k| &*k.joules))
    }
}

impl Known {
    /// Adds what `a` did since this one's last totals to `row` (per
    /// socket of `metered`, then over all sockets), and keeps `a`'s
    /// totals.
    fn weigh(&mut self, a: &CgroupActivity, row: &mut [f64], metered: &[u32]) {
        for (n, &(socket, total)) in a.sockets.iter().enumerate() {
            // Both in socket order: mostly the same sockets as last time.
            let was = match self.totals.get(n) {
                Some(&(s, t)) if s == socket => t,
                _ => self
                    .totals
                    .binary_search_by_key(&socket, |(s, _)| *s)
                    .map_or(0.0, |at| self.totals[at].1),
            };
            let delta = if total >= was { total - was } else { total };
            let slot = metered.iter().position(|s| *s == socket);
            for at in slot.into_iter().chain([metered.len()]) {
                if let Some(w) = row.get_mut(at) {
                    *w += delta;
                }
            }
        }
        self.totals.clear();
        self.totals.extend_from_slice(&a.sockets);
    }
}

/// The indices of `activity` in path order, then start, where it does
/// not come so (the engine gives cgroups in path order); `None` where it
/// does.
fn path_order(activity: &[CgroupActivity]) -> Option<Vec<usize>> {
    fn key(a: &CgroupActivity) -> (&str, SystemTime) {
        (&a.cgroup, a.start_time)
    }
    if activity.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
        return None;
    }
    let mut order: Vec<usize> = (0..activity.len()).collect();
    order.sort_by(|i, j| key(&activity[*i]).cmp(&key(&activity[*j])));
    Some(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A cgroup's totals per socket.
    fn activity(cgroup: &str, start: u64, sockets: &[(u32, f64)]) -> CgroupActivity {
        CgroupActivity {
            cgroup: cgroup.into(),
            labels: Arc::from(Vec::new()),
            start_time: SystemTime::UNIX_EPOCH + Duration::from_secs(start),
            sockets: sockets.into(),
        }
    }

    #[test]
    fn growth_per_socket_follows_each_cgroup_whatever_the_order_and_a_new_one_starts_whole() {
        let mut ledger = Ledger::default();
        let first = vec![
            activity("/b", 1, &[(0, 5.0), (1, 1.0)]),
            activity("/a", 1, &[(0, 2.0), (2, 9.0)]),
        ];
        // Sockets 0 and 1 metered, 2 not.
        ledger.update(&first, &[0, 1]);
        // Given out of order: kept in path order, each with its index.
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
        let at: Vec<usize> = ledger.totals().map(|(i, _)| i).collect();
        assert_eq!(at, [1, 0]);
        ledger.add(0, 2, &[10, 20]);
        let tree = ledger.tree().clone();
        // a grew by 3 on socket 0 and no longer shows socket 2; c
        // appeared under a; b was made again (later start).
        let second = vec![
            activity("/a", 1, &[(0, 5.0)]),
            activity("/a/c", 3, &[(1, 7.0)]),
            activity("/b", 2, &[(0, 6.0), (1, 0.5)]),
        ];
        ledger.update(&second, &[0, 1]);
        assert_eq!(*ledger.weights(Over::Socket(0)), [3.0, 0.0, 6.0]);
        assert_eq!(*ledger.weights(Over::Socket(1)), [0.0, 7.0, 0.5]);
        let totals: Vec<(usize, Vec<u64>)> =
            ledger.totals().map(|(i, j)| (i, j.to_vec())).collect();
        assert_eq!(
            totals,
            [(0, vec![10, 0]), (1, vec![]), (2, vec![])],
            "a keeps its energy; the new b starts from none"
        );
        assert_ne!(*ledger.tree(), tree, "the tree is made again");
        assert_eq!(ledger.tree().children[0], [1]);
        // The same cgroups (their paths shared, as the engine's entries
        // share them), updated in place: c grew by 1; b went back on
        // socket 1 since, counted from 0.
        let mut third = second.clone();
        third[1].sockets = [(1, 8.0)].into();
        third[2].sockets = [(0, 6.0), (1, 0.25)].into();
        ledger.add(1, 2, &[1, 2, 3]);
        ledger.update(&third, &[0, 1]);
        assert_eq!(*ledger.weights(Over::Socket(1)), [0.0, 1.0, 0.25]);
        let totals: Vec<(usize, Vec<u64>)> =
            ledger.totals().map(|(i, j)| (i, j.to_vec())).collect();
        assert_eq!(totals, [(0, vec![10, 1]), (1, vec![0, 2]), (2, vec![0, 3])]);
        assert_eq!(ledger.tree().children[0], [1]);
        // The meter's sockets change: socket 2 is now metered.
        ledger.update(&third, &[2]);
        assert_eq!(*ledger.weights(Over::Socket(2)), [0.0, 0.0, 0.0]);
        assert_eq!(
            *ledger.weights(Over::Socket(0)),
            [0.0; 3],
            "no longer metered"
        );
    }
}
