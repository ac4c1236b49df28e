//! `max_processes` lowered by a reload: what is counted beyond it stops.

use super::{Key, Processes};
use crate::snapshot::Errors;
use std::collections::HashSet;

impl Processes {
    /// Stops counting the matched processes started last while more are
    /// counted than `max_processes` allows now (a reload lowered it), with
    /// what counts through them: the scan after this finds them skipped,
    /// and says so in `cgperf_processes_skipped{reason="max_processes"}`.
    /// Children given groups of their own for a reload's sake are not
    /// matched processes, and take no place under the cap.
    pub(super) fn shed_over_max(&mut self, errors: &mut Errors) {
        let mut matched: Vec<Key> = self
            .counted
            .iter()
            .filter(|(_, c)| c.through.is_none())
            .map(|(key, _)| key.clone())
            .collect();
        let over = matched.len().saturating_sub(self.max);
        if over == 0 {
            return;
        }
        matched.sort_by_key(|(_, pid, start)| std::cmp::Reverse((*start, *pid)));
        let newest: HashSet<Key> = matched.into_iter().take(over).collect();
        self.stop_counting(&newest, errors);
    }

    /// Reads what counts each of `keys` a last time and closes it, with
    /// the processes that counted through them first (what they inherited
    /// goes with them; their reads go into the same series), and drops the
    /// series of those counted by pid.
    pub(super) fn stop_counting(&mut self, keys: &HashSet<Key>, errors: &mut Errors) {
        let through: Vec<Key> = self
            .counted
            .iter()
            .filter(|(key, c)| {
                !keys.contains(*key) && c.through.as_ref().is_some_and(|t| keys.contains(t))
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in through.iter().chain(keys) {
            let Some(mut counted) = self.counted.remove(key) else {
                continue;
            };
            counted.read(&mut self.totals, errors);
            if counted.through.is_none()
                && counted.series.pid.is_some()
                && let Some(series) = self.series.remove(&counted.series)
            {
                self.totals.remove(series.slot);
            }
        }
    }
}
