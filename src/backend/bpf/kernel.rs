//! One loaded counting program (`count.bpf.c`), its maps, and the
//! system-wide counters it reads: everything that lives and dies with one
//! [`Layout`] of counters.
//!
//! The program charges what each CPU's counters counted since its last run
//! to the cgroup running there and every monitored ancestor, into the
//! `totals` map; cgperf reads `totals` through a read-only mapping (no
//! syscall per cgroup) after flushing every CPU.

use super::Unavailable;
use crate::backend::budget::Held;
use crate::ids::GroupId;
use crate::perf::{CounterGroup, Errno, OpenError, Target};
use crate::plan::GroupSpec;
use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData};
use aya::programs::{RawTracePoint, RawTracePointRunOptions, TestRun};
use aya::{Ebpf, EbpfLoader, Pod};
use memmap2::{MmapOptions, MmapRaw};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The compiled program, aligned as the ELF parser requires.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);
static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!("count.bpf.o"));

/// Counters per CPU at most (`MAX_EVENTS` in `count.bpf.c`): one perf
/// event array each (aya caps a perf event array at one entry per CPU),
/// and the stride of the `last` map.
pub(super) const MAX_EVENTS: usize = 16;
/// The program, as named in `count.bpf.c`.
const PROGRAM: &str = "charge";
/// Where it runs: the task switched out is still `current` there.
const TRACEPOINT: &str = "sched_switch";
/// The descriptors a loaded program holds besides the perf events: its
/// maps (a perf event array per counter, and five), the program and its
/// attachment.
pub(super) const OWN_FDS: u64 = MAX_EVENTS as u64 + 7;

/// Chains cached per CPU (`CHAINS` in `count.bpf.c`).
const CHAINS: u32 = 64;

/// `struct config` of `count.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Config {
    events: u32,
    capacity: u32,
    cpus: u32,
    /// Bit `e` set: counter `e` leads its group.
    leaders: u32,
    /// Bumped after each change of `monitored`: the program's cached
    /// chains of monitored ancestors are stale.
    generation: u64,
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Config {}

/// `struct reading` of `count.bpf.c`: sums of deltas of a counter's value
/// and of its times enabled and running.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Reading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

/// `struct last` of `count.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Last {
    seen: Reading,
    delta: Reading,
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Last {}

/// Where each counted group's events sit among a CPU's counters: the
/// groups in plan order, one after the other.
#[derive(Debug, Clone, Default)]
pub(super) struct Layout {
    groups: Vec<(Arc<GroupSpec>, usize)>,
    events: usize,
}

impl Layout {
    /// The groups in this order, as many as fit in [`MAX_EVENTS`]; the
    /// others, returned second, cannot be counted through BPF.
    pub fn of(groups: Vec<Arc<GroupSpec>>) -> (Self, Vec<Arc<GroupSpec>>) {
        let mut layout = Self::default();
        let mut left = Vec::new();
        for spec in groups {
            let n = spec.events.len();
            if layout.events + n > MAX_EVENTS {
                left.push(spec);
                continue;
            }
            layout.groups.push((spec, layout.events));
            layout.events += n;
        }
        (layout, left)
    }

    /// Whether it counts exactly these groups, events and filters alike.
    pub fn is(&self, other: &Layout) -> bool {
        self.events == other.events
            && self.groups.len() == other.groups.len()
            && self
                .groups
                .iter()
                .zip(&other.groups)
                .all(|((a, _), (b, _))| a == b)
    }

    /// The position of a group's leader among a CPU's counters.
    pub fn offset(&self, group: &GroupId) -> Option<usize> {
        self.groups
            .iter()
            .find(|(spec, _)| spec.name == *group)
            .map(|(_, offset)| *offset)
    }

    /// A bit per counter that leads its group.
    fn leaders(&self) -> u32 {
        self.groups
            .iter()
            .filter(|(_, offset)| *offset < 32)
            .fold(0, |bits, (_, offset)| bits | 1 << offset)
    }

    /// The groups, in order.
    pub fn groups(&self) -> impl Iterator<Item = &Arc<GroupSpec>> {
        self.groups.iter().map(|(spec, _)| spec)
    }
}

/// A counter group that could not be opened on a CPU.
#[derive(Debug)]
pub(super) struct NotOpened {
    pub group: GroupId,
    pub cpu: u32,
    pub error: OpenError,
}

/// The program, its maps and counters for one layout.
#[derive(Debug)]
pub(super) struct Kernel {
    ebpf: Ebpf,
    layout: Layout,
    capacity: u32,
    cpus: u32,
    /// The perf event arrays the program reads counters from: counter `e`
    /// of CPU `c` at index `c` of array `e`.
    counters: Vec<MapData>,
    /// Per CPU, per group of the layout: its counters while open.
    open: BTreeMap<u32, Vec<Option<Held>>>,
    /// `totals`, mapped read-only.
    totals: MmapRaw,
    totals_len: usize,
    /// What the program's config holds.
    config: Config,
}

/// The error of a failed step with the errno it carries, if any.
fn failed(step: &str, e: &(dyn std::error::Error + 'static)) -> (String, Option<i32>) {
    let mut errno = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut text = format!("{step}: {e}");
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            errno = errno.or(io.raw_os_error());
        }
        if !text.contains(&s.to_string()) {
            text.push_str(&format!(": {s}"));
        }
        source = s.source();
    }
    (text, errno)
}

impl Kernel {
    /// Loads and attaches the program for `layout`, with room for
    /// `capacity` cgroups on `cpus` possible CPUs. No counter is open yet
    /// ([`Kernel::open_cpu`]).
    pub fn load(layout: Layout, capacity: u32, cpus: u32) -> Result<Self, Unavailable> {
        let per_cpu = cpus.saturating_mul(MAX_EVENTS as u32);
        let names: Vec<String> = (0..MAX_EVENTS).map(|e| format!("counters{e}")).collect();
        let cells = (cpus as usize)
            .saturating_mul(capacity as usize)
            .saturating_mul(layout.events)
            .max(1);
        let cells_u32 = u32::try_from(cells).map_err(|_| Unavailable {
            missing: format!("room for {capacity} cgroups × {} counters", layout.events),
            fix: "lower max_cgroups or count fewer events".into(),
        })?;
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("last", per_cpu)
            .map_max_entries("monitored", capacity.max(1))
            .map_max_entries("totals", cells_u32)
            .map_max_entries("chains", cpus.saturating_mul(CHAINS))
            .load(&OBJECT.0)
            .map_err(|e| Unavailable::from_kernel(failed("loading the BPF maps", &e)))?;
        let program: &mut RawTracePoint = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| Unavailable::broken("the object has no program"))?
            .try_into()
            .map_err(|e| Unavailable::from_kernel(failed("the BPF program", &e)))?;
        program
            .load()
            .map_err(|e| Unavailable::from_kernel(failed("loading the BPF program", &e)))?;
        program
            .attach(TRACEPOINT)
            .map_err(|e| Unavailable::from_kernel(failed("attaching to sched_switch", &e)))?;
        let mut counters = Vec::with_capacity(MAX_EVENTS);
        for name in &names {
            match ebpf.take_map(name) {
                Some(Map::PerfEventArray(data)) => counters.push(data),
                _ => return Err(Unavailable::broken("the object lacks a perf event array")),
            }
        }
        let totals_len = cells * std::mem::size_of::<Reading>();
        let totals = match ebpf.map("totals") {
            Some(Map::Array(data)) => MmapOptions::new()
                .len(totals_len)
                .map_raw_read_only(data.fd().as_fd().as_raw_fd())
                .map_err(|e| Unavailable::from_kernel(failed("mapping the totals", &e)))?,
            _ => return Err(Unavailable::broken("the object has no totals array")),
        };
        let mut kernel = Self {
            ebpf,
            capacity,
            cpus,
            counters,
            open: BTreeMap::new(),
            totals,
            totals_len: cells,
            config: Config {
                events: layout.events as u32,
                capacity,
                cpus,
                leaders: layout.leaders(),
                generation: 1,
            },
            layout,
        };
        kernel
            .configure()
            .map_err(|e| Unavailable::broken(&format!("configuring the program: {e}")))?;
        Ok(kernel)
    }

    /// Hands the program its config.
    fn configure(&mut self) -> Result<(), String> {
        let config = self.config;
        self.array::<Config>("config")
            .and_then(|mut a| a.set(0, config, 0).map_err(|e| e.to_string()))
    }

    /// Makes the program walk the hierarchy again at its next switch out
    /// of any cgroup: `monitored` changed.
    fn invalidate_chains(&mut self) -> Result<(), String> {
        self.config.generation += 1;
        self.configure()
    }

    fn array<V: Pod>(&mut self, name: &str) -> Result<Array<&mut MapData, V>, String> {
        let map = self.ebpf.map_mut(name).ok_or("no such map")?;
        Array::try_from(map).map_err(|e| e.to_string())
    }

    fn monitored(&mut self) -> Result<BpfHashMap<&mut MapData, u64, u32>, String> {
        let map = self.ebpf.map_mut("monitored").ok_or("no such map")?;
        BpfHashMap::try_from(map).map_err(|e| e.to_string())
    }

    /// The layout it counts.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Opens every group of the layout system-wide on `cpu` and hands the
    /// counters to the program, each starting from zero. What was open
    /// there before is closed first (a CPU back online: its old counters
    /// are dead). Returns what failed to open.
    pub fn open_cpu(&mut self, cpu: u32, tally: &Arc<AtomicU64>) -> Vec<NotOpened> {
        self.close_cpu(cpu);
        let mut failures = Vec::new();
        let groups = self.layout.groups.clone();
        let mut held = Vec::with_capacity(groups.len());
        for (spec, offset) in &groups {
            let opened =
                CounterGroup::open_filtered(&spec.attrs(), &spec.filters(), Target::AllTasks, cpu);
            match opened {
                Ok(group) => {
                    for (i, fd) in group.fds().enumerate() {
                        if let Err(errno) = self.install(cpu, offset + i, fd) {
                            failures.push(NotOpened {
                                group: spec.id(),
                                cpu,
                                error: OpenError { index: i, errno },
                            });
                        }
                    }
                    held.push(Some(Held::new(group, tally)));
                }
                Err(error) => {
                    failures.push(NotOpened {
                        group: spec.id(),
                        cpu,
                        error,
                    });
                    held.push(None);
                }
            }
        }
        self.open.insert(cpu, held);
        failures
    }

    /// Takes `cpu`'s counters from the program and closes them.
    pub fn close_cpu(&mut self, cpu: u32) {
        if self.open.remove(&cpu).is_some() {
            for array in self.counters.iter().take(self.layout.events) {
                // Absent already when its group failed to open.
                let _ = map_delete(array.fd().as_fd(), cpu);
            }
        }
    }

    /// The CPUs counters are open on.
    pub fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.open.keys().copied()
    }

    /// Makes `fd` counter `event` of `cpu`, its last reading zero: the
    /// program never sees the new counter with the old one's reading (the
    /// old one is taken out first, and a missing counter changes nothing).
    fn install(&mut self, cpu: u32, event: usize, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let array = self.counters.get(event).ok_or(Errno(libc::E2BIG))?;
        let _ = map_delete(array.fd().as_fd(), cpu);
        let index = cpu
            .saturating_mul(MAX_EVENTS as u32)
            .saturating_add(event as u32);
        self.array::<Last>("last")
            .and_then(|mut a| a.set(index, Last::default(), 0).map_err(|e| e.to_string()))
            .map_err(|_| Errno(libc::EINVAL))?;
        let value = u32::try_from(fd.as_raw_fd()).map_err(|_| Errno(libc::EBADF))?;
        let array = self.counters.get(event).ok_or(Errno(libc::E2BIG))?;
        map_update(array.fd().as_fd(), cpu, value)
    }

    /// Charges the interval in progress on each of `cpus` to what runs
    /// there: a cgroup that never switches out is counted all the same.
    /// Also waits for runs in progress there to end (the test run is
    /// queued behind them), which makes a slot taken out of `monitored`
    /// safe to reuse. Returns the errnos of the CPUs that failed (a CPU gone
    /// offline is not a failure).
    pub fn flush(&self, cpus: impl Iterator<Item = u32>) -> Vec<Errno> {
        let Some(program) = self.ebpf.program(PROGRAM) else {
            return vec![Errno(libc::ENOENT)];
        };
        let Ok(program) = <&RawTracePoint>::try_from(program) else {
            return vec![Errno(libc::EINVAL)];
        };
        let mut failed = Vec::new();
        for cpu in cpus {
            let opts = RawTracePointRunOptions {
                cpu: Some(cpu),
                ..RawTracePointRunOptions::new()
            };
            if let Err(e) = program.test_run(opts) {
                match failed_errno(&e).1 {
                    // Gone offline since the last collection: what it
                    // counted was charged at its last switch, and the
                    // engine follows the CPU going offline next.
                    Some(libc::ENXIO) => {}
                    errno => failed.push(Errno(errno.unwrap_or(libc::EIO))),
                }
            }
        }
        failed
    }

    /// Counts cgroup `id` (a cgroup directory's inode) in `slot`.
    pub fn monitor(&mut self, id: u64, slot: u32) -> Result<(), String> {
        self.monitored()?
            .insert(id, slot, 0)
            .map_err(|e| e.to_string())?;
        self.invalidate_chains().inspect_err(|_| {
            // Not charged at all rather than charged to only some of the
            // cgroups that run beneath it.
            if let Ok(mut map) = self.monitored() {
                let _ = map.remove(&id);
            }
        })
    }

    /// Stops charging cgroup `id`. The program's cached chains are stale
    /// from here on; a run in progress may still charge its slot, hence
    /// the flush before the slot is reused.
    pub fn unmonitor(&mut self, id: u64) {
        if let Ok(mut map) = self.monitored() {
            let _ = map.remove(&id);
        }
        if let Err(e) = self.invalidate_chains() {
            tracing::warn!("cannot update the BPF program's config: {e}");
        }
    }

    /// What `slot` was charged on `cpu` for counter `event` so far.
    pub fn reading(&self, cpu: u32, slot: u32, event: usize) -> Reading {
        let index = (cpu as usize * self.capacity as usize + slot as usize)
            .saturating_mul(self.layout.events)
            .saturating_add(event);
        if cpu >= self.cpus || slot >= self.capacity || index >= self.totals_len {
            return Reading::default();
        }
        let cell = self.totals.as_ptr().cast::<u64>();
        // SAFETY: `index` is within the mapping (checked above), which
        // holds `totals_len` readings of three u64s, page-aligned; the
        // program writes these words concurrently, so each is read once,
        // volatile: a word is never torn, and a reading whose words come
        // from two runs is only split differently between intervals.
        unsafe {
            let at = cell.add(index * 3);
            Reading {
                value: at.read_volatile(),
                enabled: at.add(1).read_volatile(),
                running: at.add(2).read_volatile(),
            }
        }
    }

    /// The program's run time and run count so far (while statistics are
    /// enabled).
    pub fn runs(&self) -> (u64, u64) {
        self.ebpf
            .program(PROGRAM)
            .and_then(|p| p.info().ok())
            .map_or((0, 0), |info| {
                (info.run_time().as_nanos() as u64, info.run_count())
            })
    }
}

fn failed_errno(e: &(dyn std::error::Error + 'static)) -> (String, Option<i32>) {
    failed("", e)
}

/// `union bpf_attr` for the element commands.
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn map_elem(
    cmd: libc::c_long,
    map: BorrowedFd<'_>,
    key: &u32,
    value: Option<&u32>,
) -> Result<(), Errno> {
    let attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: std::ptr::from_ref(key) as u64,
        value: value.map_or(0, |v| std::ptr::from_ref(v) as u64),
        flags: 0,
    };
    // SAFETY: `attr` is a valid bpf_attr prefix for this command; the
    // kernel reads the key and value it points at, which outlive the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<ElemAttr>(),
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(Errno::last()),
    }
}

/// `BPF_MAP_UPDATE_ELEM` of a perf event array: aya's own type for it
/// only takes the perf buffers it opens itself.
fn map_update(map: BorrowedFd<'_>, index: u32, fd: u32) -> Result<(), Errno> {
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    map_elem(BPF_MAP_UPDATE_ELEM, map, &index, Some(&fd))
}

/// `BPF_MAP_DELETE_ELEM` of a perf event array.
fn map_delete(map: BorrowedFd<'_>, index: u32) -> Result<(), Errno> {
    const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
    map_elem(BPF_MAP_DELETE_ELEM, map, &index, None)
}
