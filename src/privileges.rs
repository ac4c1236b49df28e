//! Giving up, once the exporter is set up, every capability it no longer
//! needs, so that a compromise of the running daemon (it parses HTTP and
//! YAML from outside) is worth as little as possible.
//!
//! Start-up may need more than the daemon's steady state: `CAP_SYS_ADMIN` to
//! mount tracefs, `CAP_NET_BIND_SERVICE` for a port below 1024,
//! `CAP_SYS_RESOURCE` for the open-files limit. What stays is what reloads,
//! new cgroups and CPUs coming back online need: opening perf events
//! (`CAP_PERFMON`), walking cgroupfs and reading tracefs
//! (`CAP_DAC_READ_SEARCH`), and mapping ring buffers beyond the kernel's
//! `perf_event_mlock_kb` (`CAP_IPC_LOCK`). A capability the process does
//! not have is not gained.
//!
//! One more stays where the kernel asks for it: `CAP_SYS_ADMIN` when
//! `kernel.perf_event_paranoid` is 3 or more, the level at which Debian's
//! and Ubuntu's kernels refuse `perf_event_open` to any process without it
//! (their default levels are 3 and 4). Dropping it there would leave a
//! daemon that opens nothing after start-up.
//!
//! Capabilities are per thread: this runs before cgperf starts any thread,
//! so every thread inherits the reduced sets.

use caps::{CapSet, Capability, CapsHashSet};

/// What the running daemon keeps (where it had them).
pub const KEPT: [Capability; 3] = [
    Capability::CAP_PERFMON,
    Capability::CAP_DAC_READ_SEARCH,
    Capability::CAP_IPC_LOCK,
];

/// What the running daemon will need beyond [`KEPT`], as the config and
/// the kernel say at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// The config has `probes:`: the kernel's uprobe and kprobe PMUs refuse
    /// `CAP_PERFMON` alone (EACCES, measured on Linux 6.18), and a CPU
    /// coming back online reopens them.
    pub probes: bool,
    /// The bpf backend counts: it loads its program again when a reload
    /// changes the groups.
    pub bpf: bool,
    /// A `processes:` entry matches on the executable: `/proc/PID/exe` of a
    /// process holding capabilities cgperf gave up is readable only with
    /// `CAP_SYS_PTRACE`.
    pub exe: bool,
    /// `kernel.perf_event_paranoid` at start (see
    /// [`crate::perf::sys_admin_only`]): from 3 on, every later
    /// `perf_event_open` (reloads, new cgroups, CPUs coming online) needs
    /// `CAP_SYS_ADMIN` on Debian's and Ubuntu's kernels.
    pub paranoid: Option<i32>,
}

/// The outcome of [`drop_unneeded`], for the start-up log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Capabilities removed from the permitted set, sorted.
    pub dropped: Vec<String>,
    /// Capabilities still permitted, sorted.
    pub kept: Vec<String>,
    /// Whether the bounding set was reduced too (needs `CAP_SETPCAP`), so
    /// that nothing cgperf might execute could regain them.
    pub bounding: bool,
    /// The level of `kernel.perf_event_paranoid` for which `CAP_SYS_ADMIN`
    /// was kept (`Some` only where it was permitted: the log says why).
    pub sys_admin_for_paranoid: Option<i32>,
}

/// Reduces the calling thread's permitted, effective and inheritable sets
/// (and, when allowed, the bounding set) to [`KEPT`], plus what `needs`
/// asks for: `CAP_SYS_ADMIN` for probes or a paranoid level of 3 or more,
/// `CAP_BPF` for the bpf backend, `CAP_SYS_PTRACE` to match processes by
/// executable (see [`Needs`]).
///
/// The kernel lets `CAP_SYS_ADMIN` stand in for `CAP_PERFMON` and `CAP_BPF`
/// (container runtimes that predate them grant only it): where one of those
/// is needed but not permitted, `CAP_SYS_ADMIN` is what grants it, and is
/// kept.
///
/// On a kernel older than `CAP_PERFMON` (5.8) perf needs `CAP_SYS_ADMIN`,
/// so nothing is dropped there.
pub fn drop_unneeded(needs: Needs) -> Result<Dropped, String> {
    if !perfmon_known() {
        return Err(
            "this kernel predates CAP_PERFMON (Linux 5.8), so perf still needs \
                    CAP_SYS_ADMIN; keeping every capability"
                .into(),
        );
    }
    let fail = |what: &str, e: caps::errors::CapsError| format!("{what}: {e}");
    let mut kept: CapsHashSet = KEPT.into_iter().collect();
    let paranoid = crate::perf::sys_admin_only(needs.paranoid);
    if needs.probes || paranoid {
        kept.insert(Capability::CAP_SYS_ADMIN);
    }
    if needs.bpf {
        kept.insert(Capability::CAP_BPF);
    }
    if needs.exe {
        kept.insert(Capability::CAP_SYS_PTRACE);
    }
    let permitted = caps::read(None, CapSet::Permitted).map_err(|e| fail("reading", e))?;
    let standing_in = |cap| kept.contains(&cap) && !permitted.contains(&cap);
    if standing_in(Capability::CAP_PERFMON) || standing_in(Capability::CAP_BPF) {
        kept.insert(Capability::CAP_SYS_ADMIN);
    }
    let effective = caps::read(None, CapSet::Effective).map_err(|e| fail("reading", e))?;
    // The bounding set can only be reduced with CAP_SETPCAP in effect, so
    // before anything else is dropped.
    let bounding = effective.contains(&Capability::CAP_SETPCAP);
    if bounding {
        let bound = caps::read(None, CapSet::Bounding).map_err(|e| fail("reading", e))?;
        for cap in bound.difference(&kept) {
            caps::drop(None, CapSet::Bounding, *cap).map_err(|e| fail("bounding set", e))?;
        }
    }
    let inheritable = caps::read(None, CapSet::Inheritable).map_err(|e| fail("reading", e))?;
    let keep = |set: &CapsHashSet| -> CapsHashSet { set.intersection(&kept).copied().collect() };
    // Effective must stay within permitted at every step: shrink it first.
    caps::set(None, CapSet::Effective, &keep(&effective)).map_err(|e| fail("effective set", e))?;
    caps::set(None, CapSet::Inheritable, &keep(&inheritable))
        .map_err(|e| fail("inheritable set", e))?;
    caps::set(None, CapSet::Permitted, &keep(&permitted)).map_err(|e| fail("permitted set", e))?;
    let names = |set: CapsHashSet| {
        let mut names: Vec<String> = set.into_iter().map(|c| c.to_string()).collect();
        names.sort();
        names
    };
    Ok(Dropped {
        dropped: names(permitted.difference(&kept).copied().collect()),
        kept: names(keep(&permitted)),
        bounding,
        sys_admin_for_paranoid: needs
            .paranoid
            .filter(|_| paranoid && permitted.contains(&Capability::CAP_SYS_ADMIN)),
    })
}

/// Whether the running kernel knows `CAP_PERFMON` (it lists the highest
/// capability number it knows).
fn perfmon_known() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok())
        .is_some_and(|last| last >= Capability::CAP_PERFMON.index())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_knows_perfmon() {
        assert!(perfmon_known(), "Linux 5.8+ is required by the tests");
    }

    #[test]
    fn drops_all_but_the_kept_set_in_a_thread_of_its_own() {
        // Capabilities are per thread: a thread of its own leaves the test
        // harness's alone.
        let result = std::thread::spawn(|| {
            let had = caps::read(None, CapSet::Permitted).expect("read");
            assert!(
                had.contains(&Capability::CAP_SYS_ADMIN),
                "this test must run as root (it checks that CAP_SYS_ADMIN is dropped)"
            );
            let dropped = drop_unneeded(Needs::default()).expect("drop");
            let now = caps::read(None, CapSet::Permitted).expect("read");
            let effective = caps::read(None, CapSet::Effective).expect("read");
            (dropped, now, effective)
        })
        .join()
        .expect("thread");
        let (dropped, now, effective) = result;
        let kept: CapsHashSet = KEPT.into_iter().collect();
        assert_eq!(now, kept);
        assert_eq!(effective, kept);
        assert!(
            dropped.dropped.contains(&"CAP_SYS_ADMIN".to_owned()),
            "{dropped:?}"
        );
        assert_eq!(
            dropped.kept,
            ["CAP_DAC_READ_SEARCH", "CAP_IPC_LOCK", "CAP_PERFMON"]
        );
        assert!(dropped.bounding);
    }

    #[test]
    fn probes_keep_cap_sys_admin() {
        let (dropped, now) = std::thread::spawn(|| {
            let dropped = drop_unneeded(Needs {
                probes: true,
                ..Needs::default()
            })
            .expect("drop");
            (dropped, caps::read(None, CapSet::Permitted).expect("read"))
        })
        .join()
        .expect("thread");
        assert!(now.contains(&Capability::CAP_SYS_ADMIN), "{dropped:?}");
        assert!(!now.contains(&Capability::CAP_SYS_PTRACE), "{dropped:?}");
        assert_eq!(now.len(), KEPT.len() + 1);
    }

    #[test]
    fn the_bpf_backend_keeps_cap_bpf_and_nothing_else_more() {
        let (dropped, now) = std::thread::spawn(|| {
            let dropped = drop_unneeded(Needs {
                bpf: true,
                ..Needs::default()
            })
            .expect("drop");
            (dropped, caps::read(None, CapSet::Permitted).expect("read"))
        })
        .join()
        .expect("thread");
        assert!(now.contains(&Capability::CAP_BPF), "{dropped:?}");
        assert!(!now.contains(&Capability::CAP_SYS_ADMIN), "{dropped:?}");
        assert_eq!(now.len(), KEPT.len() + 1);
    }

    #[test]
    fn matching_processes_by_executable_keeps_cap_sys_ptrace_and_nothing_else_more() {
        let (dropped, now) = std::thread::spawn(|| {
            let dropped = drop_unneeded(Needs {
                exe: true,
                ..Needs::default()
            })
            .expect("drop");
            (dropped, caps::read(None, CapSet::Permitted).expect("read"))
        })
        .join()
        .expect("thread");
        assert!(now.contains(&Capability::CAP_SYS_PTRACE), "{dropped:?}");
        assert!(!now.contains(&Capability::CAP_SYS_ADMIN), "{dropped:?}");
        assert_eq!(now.len(), KEPT.len() + 1);
    }

    /// The kept set after a thread of its own gives up `missing` first.
    fn kept_without(missing: Capability, bpf: bool) -> (Dropped, CapsHashSet) {
        std::thread::spawn(move || {
            caps::drop(None, CapSet::Effective, missing).expect("drop from effective");
            caps::drop(None, CapSet::Permitted, missing).expect("drop from permitted");
            let dropped = drop_unneeded(Needs {
                bpf,
                ..Needs::default()
            })
            .expect("drop");
            (dropped, caps::read(None, CapSet::Permitted).expect("read"))
        })
        .join()
        .expect("thread")
    }

    #[test]
    fn cap_sys_admin_is_kept_where_it_stands_in_for_cap_bpf() {
        let (dropped, now) = kept_without(Capability::CAP_BPF, true);
        assert!(now.contains(&Capability::CAP_SYS_ADMIN), "{dropped:?}");
        assert_eq!(now.len(), KEPT.len() + 1, "{dropped:?}");
        // The cgroup backend loads no program: CAP_BPF is not needed.
        let (dropped, now) = kept_without(Capability::CAP_BPF, false);
        assert!(!now.contains(&Capability::CAP_SYS_ADMIN), "{dropped:?}");
    }

    #[test]
    fn cap_sys_admin_is_kept_where_it_stands_in_for_cap_perfmon() {
        let (dropped, now) = kept_without(Capability::CAP_PERFMON, false);
        assert!(now.contains(&Capability::CAP_SYS_ADMIN), "{dropped:?}");
        assert!(!now.contains(&Capability::CAP_PERFMON), "{dropped:?}");
        assert_eq!(now.len(), KEPT.len(), "{dropped:?}");
    }

    #[test]
    fn a_paranoid_level_of_3_or_more_keeps_cap_sys_admin_and_says_so() {
        for (level, keeps) in [
            (Some(2), false),
            (None, false),
            (Some(3), true),
            (Some(4), true),
        ] {
            let (dropped, now) = std::thread::spawn(move || {
                let dropped = drop_unneeded(Needs {
                    paranoid: level,
                    ..Needs::default()
                })
                .expect("drop");
                (dropped, caps::read(None, CapSet::Permitted).expect("read"))
            })
            .join()
            .expect("thread");
            assert_eq!(
                now.contains(&Capability::CAP_SYS_ADMIN),
                keeps,
                "{level:?}: {dropped:?}"
            );
            assert_eq!(
                dropped.sys_admin_for_paranoid,
                level.filter(|_| keeps),
                "{dropped:?}"
            );
            assert_eq!(now.len(), KEPT.len() + usize::from(keeps), "{dropped:?}");
        }
    }

    #[test]
    fn a_paranoid_level_keeps_no_cap_sys_admin_that_was_not_permitted() {
        let dropped = std::thread::spawn(|| {
            caps::drop(None, CapSet::Effective, Capability::CAP_SYS_ADMIN).expect("drop");
            caps::drop(None, CapSet::Permitted, Capability::CAP_SYS_ADMIN).expect("drop");
            drop_unneeded(Needs {
                paranoid: Some(3),
                ..Needs::default()
            })
            .expect("drop")
        })
        .join()
        .expect("thread");
        assert_eq!(dropped.sys_admin_for_paranoid, None, "{dropped:?}");
        assert!(!dropped.kept.contains(&"CAP_SYS_ADMIN".to_owned()));
    }
}
