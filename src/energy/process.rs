//! Energy of `processes:` entries: a view, not a share. A process runs in
//! some cgroup, so its joules are already in that cgroup's share (or in
//! `system`); adding them to the meter's total again would count them
//! twice. Each series is given what its work cost in the interval at the
//! cgroups' own rate: on a socket whose active energy `A` was shared over
//! a total weight `D` (the top-level cgroups' and the system's), a unit of
//! weight cost `A / D`, and a series that did `w` gets `A × w / D`: what
//! a counted cgroup holding exactly its processes would get.
//!
//! A process's counters are per thread, not per CPU: on a machine of
//! several sockets its work is taken as spread over them as the machine's
//! was, `A(socket) × w / ΣD` over the sockets. A series never gets more
//! than the active energy of an interval (weights read moments apart).

use crate::snapshot::{EnergyScope, ProcessEnergy, ProcessSample};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

/// Which series: a series ended and begun again is another.
type SeriesKey = (Arc<str>, Option<Arc<str>>, Option<u32>, SystemTime);

/// The process series' energy across intervals.
#[derive(Debug, Default)]
pub struct Views {
    /// Each series' weight total at the last interval.
    last: HashMap<SeriesKey, f64>,
    /// Each series' micro-Joules per channel (fractions kept, so nothing
    /// is lost to rounding and the total never goes back).
    totals: HashMap<SeriesKey, Vec<f64>>,
    /// This interval's weight per series, from [`Views::weigh`].
    now: Vec<(SeriesKey, f64)>,
}

impl Views {
    /// Takes each series' weight since the last call from `samples` (the
    /// first group of each series counting `weight`; a total that went
    /// back counts whole); series gone are forgotten.
    pub fn weigh(&mut self, samples: &[ProcessSample], weight: &str) {
        self.now.clear();
        let mut kept = HashMap::with_capacity(self.last.len());
        for s in samples.iter().filter(|s| &*s.event == weight) {
            let key = (s.process.clone(), s.comm.clone(), s.pid, s.start_time);
            if kept.contains_key(&key) {
                continue;
            }
            let was = self.last.get(&key).copied().unwrap_or(0.0);
            let delta = if s.value >= was {
                s.value - was
            } else {
                s.value
            };
            kept.insert(key.clone(), s.value);
            self.now.push((key, delta));
        }
        self.last = kept;
        self.totals.retain(|key, _| self.last.contains_key(key));
    }

    /// Adds the share of the meter scope at `at` (of `scopes`) to every
    /// series weighed: `active` µJ over `whole`, the total weight it was
    /// shared over.
    pub fn add(&mut self, at: usize, scopes: usize, active: u64, whole: f64) {
        for (key, w) in &self.now {
            let part = match whole > 0.0 && w.is_finite() && *w > 0.0 {
                true => active as f64 * (w / whole).min(1.0),
                false => 0.0,
            };
            let total = self.totals.entry(key.clone()).or_default();
            total.resize(scopes, 0.0);
            total[at] += part;
        }
    }

    /// Every series' energy in each of `scopes` (where its totals are,
    /// and which), each begun no earlier than `since` (when the account
    /// that keeps these views began).
    pub fn show(
        &self,
        scopes: &[(usize, EnergyScope)],
        weight: &'static str,
        since: SystemTime,
    ) -> Vec<ProcessEnergy> {
        let mut out = Vec::new();
        for (key, _) in &self.now {
            let Some(totals) = self.totals.get(key) else {
                continue;
            };
            let (process, comm, pid, start_time) = key;
            for (at, scope) in scopes {
                let uj = totals.get(*at).copied().unwrap_or(0.0);
                out.push(ProcessEnergy {
                    process: process.clone(),
                    comm: comm.clone(),
                    pid: *pid,
                    scope: *scope,
                    weight,
                    joules: uj / 1e6,
                    start_time: (*start_time).max(since),
                });
            }
        }
        out
    }
}
