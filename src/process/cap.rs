//! `max_processes` lowered by a reload: what is counted beyond it stops.

use super::{Key, Processes, read_all};
use crate::snapshot::Errors;

impl Processes {
    /// Stops counting the processes started last while more are counted
    /// than `max_processes` allows now (a reload lowered it): the scan
    /// after this finds them skipped, and says so in
    /// `cgperf_processes_skipped{reason="max_processes"}`.
    pub(super) fn shed_over_max(&mut self, errors: &mut Errors) {
        let over = self.counted.len().saturating_sub(self.max);
        if over == 0 {
            return;
        }
        let mut newest: Vec<Key> = self.counted.keys().cloned().collect();
        newest.sort_by_key(|(_, pid, start)| std::cmp::Reverse((*start, *pid)));
        for key in newest.into_iter().take(over) {
            self.stop_counting(&key, errors);
        }
    }

    /// Reads what counts `key` a last time and closes it, dropping its
    /// series if it is the process's own (by pid).
    pub(super) fn stop_counting(&mut self, key: &Key, errors: &mut Errors) {
        let Some(mut counted) = self.counted.remove(key) else {
            return;
        };
        read_all(&mut self.totals, &mut counted.readers, errors);
        drop(counted.readers);
        if counted.series.pid.is_some()
            && let Some(series) = self.series.remove(&counted.series)
        {
            self.totals.remove(series.slot);
        }
    }
}
