//! Energy in a snapshot: what each counted cgroup did on each socket (its
//! weight, which the cgroups target shows), and the energy shares the
//! engine's attribution (`crate::energy`) made of it.

use super::Labels;
use std::cmp::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

/// A counted cgroup whose activity is weighed and whose energy is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Weighed {
    /// cgroup path.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// When the cgroup began counting: a new start is a new cgroup.
    pub start_time: SystemTime,
}

impl Weighed {
    /// Where this one sorts against `other`: by path, then start; a path
    /// shared with it (as the engine's entries share theirs) is equal
    /// without a string compared.
    pub fn order(&self, other: &Self) -> Ordering {
        let path = if Arc::ptr_eq(&self.cgroup, &other.cgroup) {
            Ordering::Equal
        } else {
            self.cgroup.cmp(&other.cgroup)
        };
        path.then(self.start_time.cmp(&other.start_time))
    }

    /// Whether this is `cgroup` with `labels` since `start`, by the very
    /// path and labels the engine shares (no string compared).
    fn is(&self, cgroup: &Arc<str>, labels: &Labels, start: SystemTime) -> bool {
        Arc::ptr_eq(&self.cgroup, cgroup)
            && Arc::ptr_eq(&self.labels, labels)
            && self.start_time == start
    }
}

/// What each counted cgroup did on each socket since it was first
/// counted: the total of the weight event (`cycles`, or `task-clock` in
/// seconds) over the socket's CPUs, as the counters' totals hold it
/// (scaled where multiplexed). Per socket, not per CPU: attribution shares
/// a socket's energy, and a cgroup's few sockets cost it the same on 2
/// CPUs as on 128.
///
/// The cgroups come in path order, then start. Their list is shared from
/// one snapshot to the next while the cgroups and their labels stay the
/// same, and their sums are laid out in one array: an interval allocates
/// nothing per cgroup and touches no cgroup's reference count, so that
/// attribution at 10,000 cgroups stays within a millisecond
/// (benches/energy.rs).
#[derive(Debug, Default, PartialEq)]
pub struct Activity {
    cgroups: Arc<[Weighed]>,
    /// Where each cgroup's sums end in `sums`.
    ends: Vec<usize>,
    /// Each cgroup's sums, in socket order.
    sums: Vec<(u32, f64)>,
}

impl Clone for Activity {
    fn clone(&self) -> Self {
        Self {
            cgroups: self.cgroups.clone(),
            ends: self.ends.clone(),
            sums: self.sums.clone(),
        }
    }

    /// Into the room `self` has: the energy account keeps the last
    /// interval's activity this way without allocating.
    fn clone_from(&mut self, source: &Self) {
        self.cgroups.clone_from(&source.cgroups);
        self.ends.clone_from(&source.ends);
        self.sums.clone_from(&source.sums);
    }
}

impl Activity {
    /// Starts an activity that shares `last` (the previous interval's list
    /// of cgroups) if its cgroups come as they are in it.
    pub fn after(last: &Arc<[Weighed]>) -> ActivityBuilder {
        ActivityBuilder {
            last: last.clone(),
            fresh: None,
            same: 0,
            ends: Vec::with_capacity(last.len()),
            sums: Vec::with_capacity(last.len()),
        }
    }

    /// The cgroups, in path order, then start.
    pub fn cgroups(&self) -> &Arc<[Weighed]> {
        &self.cgroups
    }

    /// How many cgroups.
    pub fn len(&self) -> usize {
        self.cgroups.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty()
    }

    /// The sums per socket of the `i`-th cgroup, in socket order; none
    /// past the last.
    pub fn sockets(&self, i: usize) -> &[(u32, f64)] {
        let start = match i {
            0 => 0,
            _ => self.ends.get(i - 1).copied().unwrap_or(usize::MAX),
        };
        let end = self.ends.get(i).copied().unwrap_or(0);
        self.sums.get(start..end).unwrap_or_default()
    }

    /// Each cgroup and its sums per socket.
    pub fn iter(&self) -> impl Iterator<Item = (&Weighed, &[(u32, f64)])> {
        self.cgroups
            .iter()
            .enumerate()
            .map(|(i, c)| (c, self.sockets(i)))
    }
}

/// One cgroup's activity on its own: an [`Activity`] is collected from
/// them in any order (and sorted).
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupActivity {
    /// Who.
    pub of: Weighed,
    /// Its sums per socket, in socket order.
    pub sockets: Vec<(u32, f64)>,
}

/// Cgroups in any order: sorted by path, then start.
impl FromIterator<CgroupActivity> for Activity {
    fn from_iter<I: IntoIterator<Item = CgroupActivity>>(rows: I) -> Self {
        let mut rows: Vec<CgroupActivity> = rows.into_iter().collect();
        rows.sort_by(|a, b| a.of.order(&b.of));
        let mut sums = Vec::new();
        let ends = rows
            .iter()
            .map(|r| {
                sums.extend_from_slice(&r.sockets);
                sums.len()
            })
            .collect();
        Self {
            cgroups: rows.into_iter().map(|r| r.of).collect(),
            ends,
            sums,
        }
    }
}

/// An [`Activity`] being made, one cgroup at a time in path order (then
/// start), as the engine goes through its cgroups.
#[derive(Debug)]
pub struct ActivityBuilder {
    /// The last interval's cgroups.
    last: Arc<[Weighed]>,
    /// The list of cgroups, made from the first that is not the same as
    /// in `last`.
    fresh: Option<Vec<Weighed>>,
    /// How many cgroups came as in `last`, before `fresh`.
    same: usize,
    ends: Vec<usize>,
    sums: Vec<(u32, f64)>,
}

impl ActivityBuilder {
    /// Adds the cgroup at `cgroup` with `labels`, counted since `start`,
    /// and its sums per socket (in socket order).
    pub fn push(
        &mut self,
        cgroup: &Arc<str>,
        labels: &Labels,
        start: SystemTime,
        sockets: &[(u32, f64)],
    ) {
        self.sums.extend_from_slice(sockets);
        self.ends.push(self.sums.len());
        let who = || Weighed {
            cgroup: cgroup.clone(),
            labels: labels.clone(),
            start_time: start,
        };
        match &mut self.fresh {
            Some(fresh) => fresh.push(who()),
            None if self
                .last
                .get(self.same)
                .is_some_and(|w| w.is(cgroup, labels, start)) =>
            {
                self.same += 1
            }
            None => {
                let mut fresh = Vec::with_capacity(self.last.len() + 1);
                fresh.extend_from_slice(&self.last[..self.same]);
                fresh.push(who());
                self.fresh = Some(fresh);
            }
        }
    }

    /// The activity: with the last interval's list where every cgroup
    /// came as in it. A list made anew is checked for order, and sorted
    /// (with its sums) if it was not given in order.
    pub fn finish(self) -> Activity {
        let (cgroups, ordered): (Arc<[Weighed]>, bool) = match self.fresh {
            // As they were: in order.
            None if self.same == self.last.len() => (self.last, true),
            None => (self.last[..self.same].into(), true),
            Some(fresh) => {
                let ordered = fresh
                    .windows(2)
                    .all(|w| w[0].order(&w[1]) == Ordering::Less);
                (fresh.into(), ordered)
            }
        };
        let activity = Activity {
            cgroups,
            ends: self.ends,
            sums: self.sums,
        };
        match ordered {
            true => activity,
            false => activity
                .iter()
                .map(|(of, sockets)| CgroupActivity {
                    of: of.clone(),
                    sockets: sockets.to_vec(),
                })
                .collect(),
        }
    }
}

/// Where a share of energy was measured, and how it was shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnergyScope {
    /// The socket (package) the meter covers.
    pub socket: u32,
    /// `pkg`, `cores`, `ram` or `psys`.
    pub domain: &'static str,
    /// `perf`, `powercap` or `model`.
    pub source: &'static str,
}

/// Each counted cgroup's energy on each socket and domain since it was
/// first counted: a table of the cgroups of the activity it was shared by
/// (their list shared with it) and their joules on each meter scope, so
/// that showing 10,000 cgroups' energy writes numbers, not series.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupEnergy {
    cgroups: Arc<[Weighed]>,
    /// When the account that made these shares began: no series began
    /// before it.
    since: SystemTime,
    /// What the shares were weighed by: `cycles` or `task-clock`.
    weight: &'static str,
    /// Which meters, in the order of each row's joules.
    scopes: Vec<EnergyScope>,
    /// The cgroups that got a share so far (their index in `cgroups`).
    rows: Vec<usize>,
    /// Each row's joules on each of `scopes`.
    joules: Vec<f64>,
}

/// One counted cgroup's energy on one socket and domain since it was
/// first counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EnergySample<'a> {
    /// cgroup path.
    pub cgroup: &'a str,
    /// Extra labels derived from the cgroup path.
    pub labels: &'a Labels,
    /// Which meter.
    pub scope: EnergyScope,
    /// What its share was weighed by: `cycles` or `task-clock`.
    pub weight: &'static str,
    /// Joules.
    pub joules: f64,
    /// When the series began.
    pub start_time: SystemTime,
}

/// No cgroup's energy (a snapshot without `energy:`).
impl Default for CgroupEnergy {
    fn default() -> Self {
        Self::new(Arc::from([]), "", Vec::new(), SystemTime::UNIX_EPOCH)
    }
}

impl CgroupEnergy {
    /// No cgroup's energy yet, of `cgroups` on `scopes`, weighed by
    /// `weight`, shared by an account that began `since`: a cgroup
    /// counted before its series began when the account did (an account
    /// made anew, as when a reload turns `energy:` off and on again,
    /// counts from 0: its series are new ones).
    pub fn new(
        cgroups: Arc<[Weighed]>,
        weight: &'static str,
        scopes: Vec<EnergyScope>,
        since: SystemTime,
    ) -> Self {
        Self {
            since,
            rows: Vec::with_capacity(cgroups.len()),
            joules: Vec::with_capacity(cgroups.len() * scopes.len()),
            cgroups,
            weight,
            scopes,
        }
    }

    /// Shows the `i`-th cgroup's `joules` on each scope (in their order;
    /// 0 for any not given). Nothing for a cgroup past the last.
    pub fn push(&mut self, i: usize, joules: impl IntoIterator<Item = f64>) {
        if i >= self.cgroups.len() {
            return;
        }
        self.rows.push(i);
        let width = self.scopes.len();
        self.joules
            .extend(joules.into_iter().chain(std::iter::repeat(0.0)).take(width));
    }

    /// How many series.
    pub fn len(&self) -> usize {
        self.rows.len() * self.scopes.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every series: each cgroup's on each scope, in path order.
    pub fn iter(&self) -> impl Iterator<Item = EnergySample<'_>> {
        let width = self.scopes.len();
        self.rows.iter().enumerate().flat_map(move |(row, &i)| {
            let who = &self.cgroups[i];
            self.scopes
                .iter()
                .enumerate()
                .map(move |(s, scope)| EnergySample {
                    cgroup: &who.cgroup,
                    labels: &who.labels,
                    scope: *scope,
                    weight: self.weight,
                    joules: self.joules.get(row * width + s).copied().unwrap_or(0.0),
                    start_time: who.start_time.max(self.since),
                })
        })
    }
}

/// The energy of one series of a `processes:` entry on one socket and
/// domain since the series began: a view of the same shares the cgroups
/// get (each unit of weight costs what it cost them in the interval), not
/// a part of the meter besides them: its processes' work is in the
/// cgroups they ran in, or in `system`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessEnergy {
    /// The entry's name (the `process` label).
    pub process: Arc<str>,
    /// The comm, where the entry asks for it.
    pub comm: Option<Arc<str>>,
    /// The pid, where the entry asks for it.
    pub pid: Option<u32>,
    /// Which meter.
    pub scope: EnergyScope,
    /// What its share was weighed by: `cycles` or `task-clock`.
    pub weight: &'static str,
    /// Joules.
    pub joules: f64,
    /// When the series began.
    pub start_time: SystemTime,
}

/// What no cgroup got of a meter's energy: its idle part, and the activity
/// outside every counted cgroup (`system`: kernel threads, interrupts,
/// processes of cgroups not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unattributed {
    /// The idle power over the interval.
    Idle,
    /// Activity outside the counted top-level cgroups.
    System,
}

impl Unattributed {
    /// The `share` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::System => "system",
        }
    }
}

/// The meters and what of them no cgroup got, per socket and domain, since
/// cgperf started.
#[derive(Debug, Clone, PartialEq)]
pub struct HostEnergy {
    /// Which meter.
    pub scope: EnergyScope,
    /// What the meter counted, in Joules.
    pub meter_joules: f64,
    /// Its idle part, in Joules.
    pub idle_joules: f64,
    /// Its part of activity outside the counted cgroups, in Joules.
    pub system_joules: f64,
    /// When the account that keeps these totals began (they count from
    /// 0 there).
    pub since: SystemTime,
}
