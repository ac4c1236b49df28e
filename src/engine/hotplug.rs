//! Following CPUs as they go offline and come back.
//!
//! perf events of a CPU that goes offline are detached by the kernel and stay
//! dead when it comes back: they must be closed and opened again. Polling
//! the online list alone misses a CPU that went down and up within one
//! interval, so every online CPU also carries a canary: a system-wide
//! `cpu-clock` counter whose enabled time advances for as long as the CPU is
//! up. A canary whose time stood still has been through an offline period.

use crate::backend::budget::Held;
use crate::cpus::CpuChanges;
use crate::events::{EventAttr, PERF_COUNT_SW_CPU_CLOCK, PERF_TYPE_SOFTWARE};
use crate::perf::{CounterGroup, Target};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

#[derive(Debug)]
struct Canary {
    group: Option<Held>,
    last_enabled: u64,
}

/// The CPUs cgperf counts on.
#[derive(Debug)]
pub struct CpuTracker {
    cpus: BTreeMap<u32, Canary>,
    tally: Arc<AtomicU64>,
    canary_failure_logged: bool,
}

impl CpuTracker {
    /// No CPU yet: the first [`CpuTracker::update`] opens all online ones.
    /// The canaries' descriptors are counted in `tally`.
    pub fn new(tally: Arc<AtomicU64>) -> Self {
        Self {
            cpus: BTreeMap::new(),
            tally,
            canary_failure_logged: false,
        }
    }

    /// Where every perf descriptor is counted.
    pub fn tally(&self) -> Arc<AtomicU64> {
        self.tally.clone()
    }

    /// The CPUs known to be online.
    pub fn online(&self) -> Vec<u32> {
        self.cpus.keys().copied().collect()
    }

    /// Compares with `online` (the kernel's list now) and the canaries.
    pub fn update(&mut self, online: &[u32]) -> CpuChanges {
        let mut changes = CpuChanges::default();
        self.cpus.retain(|cpu, _| {
            let keep = online.contains(cpu);
            if !keep {
                changes.closed.push(*cpu);
            }
            keep
        });
        for &cpu in online {
            let fresh = match self.cpus.get_mut(&cpu) {
                None => true,
                Some(canary) => !canary.advanced(),
            };
            if fresh {
                let canary = self.open_canary(cpu);
                self.cpus.insert(cpu, canary);
                changes.open.push(cpu);
            }
        }
        changes
    }

    fn open_canary(&mut self, cpu: u32) -> Canary {
        let attr = EventAttr::new(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK);
        let group = CounterGroup::open(&[attr], Target::AllTasks, cpu)
            .map(|group| Held::new(group, &self.tally))
            .map_err(|e| {
                if !std::mem::replace(&mut self.canary_failure_logged, true) {
                    tracing::warn!(
                        cpu,
                        "cannot open the hotplug canary ({}); a CPU that goes offline and back within \
                         one interval will not be noticed",
                        e.errno
                    );
                }
            })
            .ok();
        Canary {
            group,
            last_enabled: 0,
        }
    }
}

impl Canary {
    /// True while the CPU has stayed up (or when there is no canary).
    fn advanced(&mut self) -> bool {
        let Some(group) = self.group.as_mut() else {
            return true;
        };
        match group.group.read() {
            Ok((read, _)) => {
                let advanced = read.time_enabled > self.last_enabled;
                self.last_enabled = read.time_enabled;
                advanced
            }
            Err(_) => false,
        }
    }
}
