//! What cgperf counts for. Each kind of target — the cgroups discovery
//! finds (`crate::cgroups`), the processes of `processes:`
//! (`crate::process`), the whole machine (`crate::host`) — is one module
//! that implements [`Target`]; the engine composes them from one table and
//! drives each the same way at every collection, reload and change of
//! CPUs. A target owns what counts for it (the cgroups the backend chosen
//! for them; processes and the host perf events of their own) and its
//! totals, and shows its own series in each snapshot.

use crate::cpus::CpuChanges;
use crate::plan::Plan;
use crate::snapshot::{Errors, Snapshot};
use std::time::{Duration, Instant};

/// A kind of target, as the engine drives it. Within one collection the
/// engine reads every target, then tells each of CPUs that changed, then
/// applies the plan (the first collection, once the CPUs are known) or has
/// it follow what it counts (every later one), then asks it for its series.
pub trait Target: std::fmt::Debug + Send {
    /// Counts what `plan` asks on the `online` CPUs: at the first
    /// collection and at each reload. What did not change keeps counting
    /// and its totals; what changes is read before it is closed.
    fn apply(&mut self, plan: &Plan, online: &[u32], errors: &mut Errors);

    /// Reads everything it counts into its totals.
    fn read(&mut self, errors: &mut Errors);

    /// Follows CPUs that went offline (read a last time, closed) and came
    /// (back) online (opened).
    fn cpus_changed(&mut self, changes: &CpuChanges, online: &[u32], errors: &mut Errors);

    /// Follows what it counts coming and going (cgroups created and
    /// removed, processes started and exited) under `plan`, and opens
    /// again what a passing failure left unopened.
    fn follow(&mut self, plan: &Plan, online: &[u32], errors: &mut Errors);

    /// Adds its series, and the figures about itself, to `snapshot`, as of
    /// `now` (the end of the interval).
    fn show(&mut self, plan: &Plan, now: Instant, snapshot: &mut Snapshot);

    /// Whether it has work between collections ([`Target::wait`],
    /// [`Target::drain`]): counts handed over through rings.
    fn drains(&self) -> bool {
        false
    }

    /// Waits up to `timeout`, or until it asks to be drained.
    fn wait(&mut self, timeout: Duration) {
        std::thread::sleep(timeout);
    }

    /// Takes in what was handed over since the last drain.
    fn drain(&mut self) {}
}
