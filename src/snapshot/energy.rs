//! Energy in a snapshot: what each counted cgroup did on each socket (its
//! weight, which the cgroups target shows), and the energy shares the
//! engine's attribution (`crate::energy`) made of it.

use super::Labels;
use std::sync::Arc;
use std::time::SystemTime;

/// What one counted cgroup did on each socket since it was first counted:
/// the total of the weight event (`cycles`, or `task-clock` in seconds)
/// over the socket's CPUs, as the counters' totals hold it (scaled where
/// multiplexed). Per socket, not per CPU: attribution shares a socket's
/// energy, and a cgroup's few sockets cost it the same on 2 CPUs as on
/// 128.
#[derive(Debug, Clone, PartialEq)]
pub struct CgroupActivity {
    /// cgroup path.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// When the cgroup began counting: a new start is a new cgroup.
    pub start_time: SystemTime,
    /// The weight event's total on each socket whose CPUs it counted on,
    /// in socket order.
    pub sockets: Arc<[(u32, f64)]>,
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

/// A counted cgroup's energy on one socket and domain since it was first
/// counted.
#[derive(Debug, Clone, PartialEq)]
pub struct EnergySample {
    /// cgroup path.
    pub cgroup: Arc<str>,
    /// Extra labels derived from the cgroup path.
    pub labels: Labels,
    /// Which meter.
    pub scope: EnergyScope,
    /// What its share was weighed by: `cycles` or `task-clock`.
    pub weight: &'static str,
    /// Joules.
    pub joules: f64,
    /// When the series began.
    pub start_time: SystemTime,
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
}
