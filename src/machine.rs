//! This machine as cgperf sees it: where the cgroup2 tree, the PMUs and
//! tracefs are, and which CPUs are online. Found once by [`Machine::discover`]
//! at start (of the daemon, `cgperf check`, `list` and `stat`); plans are
//! built against the [`Machine`] it gives.

use crate::discovery::CgroupFs;
use crate::tracefs::Tracefs;
use crate::{cpus, events};
use anyhow::Context;
use std::path::{Path, PathBuf};

/// Where the kernel describes each CPU (the MIDR of Arm cores).
const CPU_SYSFS: &str = "/sys/devices/system/cpu";
use std::sync::Arc;

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
    /// The core PMUs of a hybrid CPU (none otherwise): where each event of
    /// the CPU is opened.
    pub cores: Arc<events::CorePmus>,
    /// The event tables of this CPU's model: the vendor's event names.
    pub tables: Arc<events::EventTables>,
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
    /// `event_tables` (`--event-tables`) is searched for this CPU's event
    /// tables before the embedded ones; a table there that cannot be read
    /// is an error naming the file.
    pub fn discover(dir: Option<&Path>) -> anyhow::Result<Discovered> {
        let cgroupfs = CgroupFs::locate().map_err(anyhow::Error::msg)?;
        let cpus = cpus::online().map_err(anyhow::Error::msg)?;
        let probe_cpu = *cpus.first().context("no CPU is online")?;
        let pmu_root = PathBuf::from(events::PMU_ROOT);
        let cores = events::CorePmus::discover(&pmu_root).unwrap_or_else(|e| {
            tracing::warn!(
                "cannot tell the core types of this hybrid CPU apart ({e}): events of the CPU \
                 are opened as on a CPU with one core type, and the kernel may refuse them on \
                 some CPUs"
            );
            events::CorePmus::default()
        });
        let tables = event_tables(&pmu_root, dir)?;
        let machine = Machine {
            tables: Arc::new(tables),
            pmu_root,
            tracefs: Tracefs::locate(),
            probe_cgroup: cgroupfs.root().to_path_buf(),
            probe_cpu,
            cores: Arc::new(cores),
        };
        Ok(Discovered {
            cgroupfs,
            cpus,
            machine,
        })
    }
}

/// The event tables of this machine's CPU, for the core PMUs under
/// `pmu_root`: from `dir` (`--event-tables`) where it has them, else the
/// embedded ones.
pub fn event_tables(pmu_root: &Path, dir: Option<&Path>) -> anyhow::Result<events::EventTables> {
    let ident = events::CpuIdent::read(Path::new("/proc/cpuinfo"), Path::new(CPU_SYSFS));
    events::EventTables::load(pmu_root, &ident, dir)
        .context("reading the event tables (--event-tables)")
}
