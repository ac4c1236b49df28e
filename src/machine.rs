//! This machine as cgperf sees it: where the cgroup2 tree, the PMUs and
//! tracefs are, and which CPUs are online. Found once by [`Machine::discover`]
//! at start (of the daemon, `cgperf check`, `list` and `stat`); plans are
//! built against the [`Machine`] it gives.

use crate::discovery::CgroupFs;
use crate::tracefs::Tracefs;
use crate::{cpus, events};
use anyhow::Context;
use std::path::PathBuf;

/// Where the machine-dependent inputs of a plan come from.
#[derive(Debug, Clone)]
pub struct Machine {
    /// `/sys/bus/event_source/devices`.
    pub pmu_root: PathBuf,
    /// tracefs, or why it is unavailable.
    pub tracefs: Result<Tracefs, String>,
    /// The directory of the root cgroup, used to probe groups.
    pub probe_cgroup: PathBuf,
    /// A CPU that is online, used to probe groups.
    pub probe_cpu: u32,
}

/// What [`Machine::discover`] finds.
#[derive(Debug)]
pub struct Discovered {
    /// The cgroup2 mount.
    pub cgroupfs: CgroupFs,
    /// The CPUs online now, ascending.
    pub cpus: Vec<u32>,
    /// The inputs of plans: PMUs, tracefs, and where to probe.
    pub machine: Machine,
}

impl Machine {
    /// Finds the cgroup2 mount, the online CPUs, the PMUs and tracefs.
    ///
    /// Fails without a cgroup2 mount or without an online CPU: nothing can
    /// be counted then. tracefs may be missing (its reason is kept).
    pub fn discover() -> anyhow::Result<Discovered> {
        let cgroupfs = CgroupFs::locate().map_err(anyhow::Error::msg)?;
        let cpus = cpus::online().map_err(anyhow::Error::msg)?;
        let probe_cpu = *cpus.first().context("no CPU is online")?;
        let machine = Machine {
            pmu_root: events::PMU_ROOT.into(),
            tracefs: Tracefs::locate(),
            probe_cgroup: cgroupfs.root().to_path_buf(),
            probe_cpu,
        };
        Ok(Discovered {
            cgroupfs,
            cpus,
            machine,
        })
    }
}
