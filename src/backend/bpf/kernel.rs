//! The loaded counting program (`count.bpf.c`), its maps, and the
//! system-wide counters it reads. It stays loaded for cgperf's life: a
//! reload that changes the counted groups places their counters at free
//! indices and retires the old ones on each CPU in one run of the program
//! ([`Kernel::cut`]), so that nothing is lost or counted twice.
//!
//! The program charges what each CPU's counters counted since its last run
//! to the cgroup that ran there and every monitored ancestor, into the
//! `totals` chunks ([`Cells`]); cgperf reads them through read-only
//! mappings (no syscall per cgroup) after flushing every CPU.

use super::abi::{CHAINS, Config, MAX_EVENTS, Progress, Reading};
use super::chunks::{Cells, first_chunk};
use super::epochs::{Epochs, LAST_BYTES};
use super::ids::Ids;
use super::placement::{self, Layout, Phase, Placed};
use super::programs;
use super::sys::{failed, map_delete, map_update, perf_event_array};
use super::unavailable::Unavailable;
use crate::backend::budget::Held;
use crate::ids::GroupId;
use crate::perf::{CounterGroup, Errno, OpenError, Target};
use crate::plan::GroupSpec;
use aya::maps::{Array, Map, MapData};
use aya::{Btf, Ebpf, EbpfLoader};
use memmap2::{MmapOptions, MmapRaw};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The compiled program, aligned as the ELF parser requires.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);
static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!("count.bpf.o"));

/// A counter group that could not be opened on a CPU.
#[derive(Debug)]
pub(super) struct NotOpened {
    pub group: GroupId,
    pub cpu: u32,
    pub error: OpenError,
}

/// The program, its maps and counters.
#[derive(Debug)]
pub(super) struct Kernel {
    ebpf: Ebpf,
    cpus: u32,
    /// The array of perf event arrays the program reads counters from.
    counters: MapData,
    /// The perf event arrays of the positions placed so far, at their
    /// position: counter `e` of CPU `c` at index `c` of array `e`.
    arrays: Vec<OwnedFd>,
    /// The entries of each (the possible CPUs, as the loader counts them).
    array_entries: u32,
    /// The groups placed, live or changing.
    placed: Vec<Placed>,
    /// The CPUs counted on.
    online: std::collections::BTreeSet<u32>,
    /// `totals`, in chunks mapped read-only.
    cells: Cells,
    /// `monitored`.
    ids: Ids,
    /// Each CPU's epoch and the descriptions of its counters.
    epochs: Epochs,
    /// What the program's config holds.
    config: Config,
    /// Whether `moved_away` is attached.
    moves_away: bool,
    /// Where counts at a move differ from cgroup mode's on this kernel
    /// (`moved` or `moved_away` not attached), and how.
    inexact: Option<String>,
}

/// Maps a `BPF_F_MMAPABLE` array of the object read-write, `len` bytes.
fn map_array(ebpf: &Ebpf, name: &str, len: usize) -> Result<MmapRaw, Unavailable> {
    let Some(Map::Array(data)) = ebpf.map(name) else {
        return Err(Unavailable::broken(&format!(
            "the object has no {name} array"
        )));
    };
    let fd = data.fd().as_fd().as_raw_fd();
    MmapOptions::new()
        .len(len)
        .map_raw(fd)
        .map_err(|e| Unavailable::from_kernel(failed(&format!("mapping {name}"), &e)))
}

impl Kernel {
    /// Loads and attaches the program with room for `capacity` cgroups on
    /// `cpus` possible CPUs. No group is placed yet ([`Kernel::place`]).
    pub fn load(capacity: u32, cpus: u32) -> Result<Self, Unavailable> {
        let per_cpu = cpus.max(1).saturating_mul(MAX_EVENTS as u32);
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("last", per_cpu)
            .map_max_entries("state", cpus.max(1))
            .map_max_entries("running", cpus.max(1))
            .map_max_entries("progress", cpus.max(1))
            .map_max_entries("chains", cpus.saturating_mul(CHAINS))
            .load(&OBJECT.0)
            .map_err(|e| Unavailable::from_kernel(failed("loading the BPF maps", &e)))?;
        // The loader kept its own parse of the kernel's BTF until here,
        // without a way to lend it: parsed again (about 17 ms), once that
        // one is gone, so that the two never take memory together.
        let btf = Btf::from_sys_fs()
            .map_err(|e| Unavailable::from_kernel(failed("reading the kernel's BTF", &e)))?;
        let realtime = programs::realtime();
        programs::attach(&mut ebpf, &btf, !realtime)?;
        let mut inexact = realtime.then(|| {
            "a task that moves itself to another cgroup while it runs has what its CPU counted \
             from its last reading to its next charged to the cgroup it left (this kernel is \
             PREEMPT_RT, whose tracepoints may be preempted in the middle of that reading)"
                .to_string()
        });
        let moves_away = programs::watch_moves_away(&mut ebpf, &btf)
            .map_err(|why| {
                // A verifier's refusal comes with its whole log: that is
                // for debugging.
                tracing::debug!("{why}");
                inexact.get_or_insert(format!(
                    "a task moved to another cgroup by a process on another CPU while it runs \
                     has what its CPU counted from its last reading to its next charged to the \
                     cgroup it left: {}",
                    why.lines().next().unwrap_or_default()
                ));
            })
            .is_ok();
        let Some(Map::ArrayOfMaps(counters)) = ebpf.take_map("counters") else {
            return Err(Unavailable::broken("the object lacks its counters"));
        };
        let array_entries = aya::util::nr_cpus()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| Unavailable::broken("cannot count the possible CPUs"))?;
        let Some(Map::ArrayOfMaps(outer)) = ebpf.take_map("totals") else {
            return Err(Unavailable::broken("the object lacks its totals"));
        };
        let Some(Map::ArrayOfMaps(monitored)) = ebpf.take_map("monitored") else {
            return Err(Unavailable::broken(
                "the object lacks its monitored cgroups",
            ));
        };
        let ids = Ids::new(monitored, capacity)
            .map_err(|e| Unavailable::from_kernel((e, Some(libc::ENOMEM))))?;
        let state = map_array(&ebpf, "state", cpus.max(1) as usize * 8)?;
        let last = map_array(&ebpf, "last", per_cpu as usize * LAST_BYTES)?;
        let epochs = Epochs::new(state, last, cpus);
        let mut kernel = Self {
            ebpf,
            cpus,
            counters,
            arrays: Vec::new(),
            array_entries,
            placed: Vec::new(),
            online: Default::default(),
            cells: Cells::new(outer, cpus, capacity),
            ids,
            epochs,
            config: Config {
                capacity,
                cpus,
                generation: 1,
                chunk0: first_chunk(cpus),
                top: 0,
            },
            moves_away,
            inexact,
        };
        kernel
            .configure()
            .map_err(|e| Unavailable::broken(&format!("configuring the program: {e}")))?;
        Ok(kernel)
    }

    /// Hands the program its config.
    fn configure(&mut self) -> Result<(), String> {
        let config = self.config;
        let map = self.ebpf.map_mut("config").ok_or("no such map")?;
        let mut array: Array<&mut MapData, Config> =
            Array::try_from(map).map_err(|e| e.to_string())?;
        array.set(0, config, 0).map_err(|e| e.to_string())
    }

    /// Makes the program walk the hierarchy again at its next charge:
    /// `monitored` changed.
    fn invalidate_chains(&mut self) -> Result<(), String> {
        self.config.generation += 1;
        self.configure()
    }

    /// The placed group `spec`, if any (live, new or retiring).
    pub fn placement(&self, spec: &Arc<GroupSpec>) -> Option<&Placed> {
        self.placed
            .iter()
            .find(|p| Arc::ptr_eq(&p.spec, spec))
            .or_else(|| self.placed.iter().find(|p| p.spec == *spec))
    }

    /// Starts changing the placed groups to `wanted` (see
    /// [`placement::place`]); then, per CPU, [`Kernel::open_new`],
    /// [`Kernel::cut`] and [`Kernel::close_retiring`], and
    /// [`Kernel::settle`] at the end. Returns whether anything changes.
    ///
    /// Each new group's positions get their cells in `totals` first; a
    /// group whose cells cannot be made is not placed (logged), and is
    /// tried again at the next change.
    pub fn place(&mut self, wanted: &Layout) -> bool {
        let changed = placement::place(&mut self.placed, wanted);
        let positions = self.positions();
        if let Err(e) = self.make_arrays(positions.iter().max().map_or(0, |&e| e + 1)) {
            tracing::error!("cannot place counters: {e}");
        }
        let (cells, arrays) = (&mut self.cells, self.arrays.len());
        self.placed.retain(|p| {
            if p.phase != Phase::New {
                return true;
            }
            if p.at.iter().any(|&e| e >= arrays) {
                tracing::error!(group = %p.spec.name, "not counted: no counters array");
                return false;
            }
            match cells.cover(&p.at) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(group = %p.spec.name, "not counted: {e}");
                    false
                }
            }
        });
        let top = self.positions().into_iter().max().map_or(0, |e| e + 1) as u32;
        if top > self.config.top {
            // Before any counter there is described: a run that sees the
            // epoch that makes one live reads it.
            self.config.top = top;
            if let Err(e) = self.configure() {
                tracing::error!("cannot update the BPF program's config: {e}");
                self.placed.retain(|p| p.phase != Phase::New);
            }
        }
        changed
    }

    /// Gives the program the perf event arrays of positions up to `top`
    /// that it lacks, before a counter there is installed.
    fn make_arrays(&mut self, top: usize) -> Result<(), String> {
        for e in self.arrays.len()..top.min(MAX_EVENTS) {
            let array = perf_event_array(self.array_entries)
                .map_err(|errno| format!("creating the counters array {e}: {errno}"))?;
            let fd = u32::try_from(array.as_raw_fd()).map_err(|_| "a descriptor".to_string())?;
            map_update(self.counters.fd().as_fd(), e as u32, fd).map_err(|errno| {
                format!("handing the counters array {e} to the program: {errno}")
            })?;
            self.arrays.push(array);
        }
        Ok(())
    }

    /// The descriptors the programs hold besides the perf events: their
    /// maps (nine, the hash of monitored cgroups in use and a perf event
    /// array per counter position placed so far), the three programs and
    /// the two attachments, and `moved_away` and its attachment.
    pub fn own_fds(&self) -> u64 {
        15 + 2 * u64::from(self.moves_away) + self.arrays.len() as u64
    }

    /// Opens the new groups on `cpu` and hands their counters to the
    /// program, not yet read there (until [`Kernel::cut`]). Returns what
    /// failed to open.
    pub fn open_new(&mut self, cpu: u32, tally: &Arc<AtomicU64>) -> Vec<NotOpened> {
        self.open_where(cpu, tally, |p| p.phase == Phase::New)
    }

    /// Opens the placed groups `pick` chooses that are not open on `cpu`.
    fn open_where(
        &mut self,
        cpu: u32,
        tally: &Arc<AtomicU64>,
        pick: impl Fn(&Placed) -> bool,
    ) -> Vec<NotOpened> {
        let mut failures = Vec::new();
        for i in 0..self.placed.len() {
            let p = &self.placed[i];
            if !pick(p) || p.held.contains_key(&cpu) {
                continue;
            }
            let spec = p.spec.clone();
            // A group of another core type than this CPU's is not opened
            // here: its slots stay empty, and the program reads nothing.
            let Some(attrs) = spec.attrs_on(cpu) else {
                continue;
            };
            // Only the events read from perf counters are opened (the
            // first of them leads the perf group).
            let opened: Vec<usize> = (0..attrs.len()).filter(|&k| p.opened(k)).collect();
            if opened.is_empty() {
                self.placed[i].held.insert(cpu, None);
                continue;
            }
            let at: Vec<usize> = opened.iter().map(|&k| p.at[k]).collect();
            let attrs: Vec<_> = opened.iter().map(|&k| attrs[k]).collect();
            let filters = spec.filters();
            let filters: Vec<_> = opened.iter().map(|&k| filters[k]).collect();
            let in_group = |index: usize| opened.get(index).copied().unwrap_or(index);
            match CounterGroup::open_filtered(&attrs, &filters, Target::AllTasks, cpu) {
                Ok(group) => {
                    let mut installed = true;
                    for (index, (fd, &e)) in group.fds().zip(&at).enumerate() {
                        if let Err(errno) = self.install(cpu, e, fd) {
                            installed = false;
                            failures.push(NotOpened {
                                group: spec.id(),
                                cpu,
                                error: OpenError {
                                    index: in_group(index),
                                    errno,
                                },
                            });
                        }
                    }
                    if installed {
                        self.placed[i]
                            .held
                            .insert(cpu, Some(Held::new(group, tally)));
                    } else {
                        for &e in &at {
                            self.uninstall(cpu, e);
                        }
                    }
                }
                Err(error) => failures.push(NotOpened {
                    group: spec.id(),
                    cpu,
                    error: OpenError {
                        index: in_group(error.index),
                        errno: error.errno,
                    },
                }),
            }
        }
        self.online.insert(cpu);
        failures
    }

    /// The change on `cpu`, in one run of the program there: the new
    /// groups' counters start counting for the cgroups (their first
    /// reading a baseline), the retiring groups' counters are read one last
    /// time and no more. Every moment is counted by exactly one of them,
    /// whatever runs there meanwhile, if the calling thread runs on `cpu`
    /// (then the run is not an interrupt, which could come between the new
    /// and the old counter counting one tracepoint hit). `Err` when the
    /// program could not be run there (its next run there makes the
    /// change).
    pub fn cut(&self, cpu: u32) -> Result<(), Errno> {
        let mut news = Vec::new();
        let mut gone = Vec::new();
        for p in self.placed.iter().filter(|p| p.held.contains_key(&cpu)) {
            match p.phase {
                Phase::New => news.extend(p.described()),
                Phase::Retiring => gone.extend(p.at.iter().copied()),
                Phase::Live => {}
            }
        }
        self.epochs.next(cpu, &news, &gone);
        self.flush_one(cpu)
    }

    /// Takes the retiring groups' counters on `cpu` from the program and
    /// closes them: after [`Kernel::cut`], they are no longer read there.
    pub fn close_retiring(&mut self, cpu: u32) {
        let mut gone = Vec::new();
        for p in &mut self.placed {
            if p.phase == Phase::Retiring && p.held.remove(&cpu).is_some() {
                gone.extend(p.at.iter().copied());
            }
        }
        for e in gone {
            self.uninstall(cpu, e);
        }
    }

    /// Ends a change: retiring groups are gone (their indices free), new
    /// ones are live.
    pub fn settle(&mut self) {
        self.placed.retain(|p| p.phase != Phase::Retiring);
        for p in &mut self.placed {
            p.phase = Phase::Live;
        }
    }

    /// Opens every live group on `cpu` (coming online, or at start) and
    /// hands the counters to the program, each read first as a baseline.
    /// What was open there before is closed first (a CPU back online: its
    /// old counters are dead). Returns what failed to open.
    pub fn open_cpu(&mut self, cpu: u32, tally: &Arc<AtomicU64>) -> Vec<NotOpened> {
        self.close_cpu(cpu);
        self.reopen(cpu, tally)
    }

    /// Opens the live groups that are not open on `cpu` (failed before),
    /// each read first as a baseline. Returns what failed again.
    pub fn reopen(&mut self, cpu: u32, tally: &Arc<AtomicU64>) -> Vec<NotOpened> {
        let before: Vec<bool> = self
            .placed
            .iter()
            .map(|p| p.held.contains_key(&cpu))
            .collect();
        let failures = self.open_where(cpu, tally, |p| p.phase == Phase::Live);
        let mut news = Vec::new();
        for (p, before) in self.placed.iter().zip(before) {
            if !before && p.held.contains_key(&cpu) {
                news.extend(p.described());
            }
        }
        if !news.is_empty() {
            self.epochs.next(cpu, &news, &[]);
            // A CPU just online may not run it yet: its first switch will.
            let _ = self.flush_one(cpu);
        }
        failures
    }

    /// Takes `cpu`'s counters from the program and closes them.
    pub fn close_cpu(&mut self, cpu: u32) {
        self.epochs.forget(cpu, self.config.top as usize);
        let mut gone = Vec::new();
        for p in &mut self.placed {
            if p.held.remove(&cpu).is_some() {
                gone.extend(p.at.iter().copied());
            }
        }
        for e in gone {
            self.uninstall(cpu, e);
        }
        self.online.remove(&cpu);
    }

    /// Where counts at a move differ from cgroup mode's on this kernel,
    /// and how (`None`: nowhere).
    pub fn inexact(&self) -> Option<&str> {
        self.inexact.as_deref()
    }

    /// The possible CPUs its maps are laid out for.
    pub fn possible_cpus(&self) -> u32 {
        self.cpus
    }

    /// The CPUs counters are open on.
    pub fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.online.iter().copied()
    }

    /// Makes `fd` counter `event` of `cpu`. The program does not read it
    /// until its bit is live, and reads it first as a baseline (fresh).
    fn install(&mut self, cpu: u32, event: usize, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let array = self.arrays.get(event).ok_or(Errno(libc::E2BIG))?;
        let value = u32::try_from(fd.as_raw_fd()).map_err(|_| Errno(libc::EBADF))?;
        map_update(array.as_fd(), cpu, value)
    }

    /// Takes counter `event` of `cpu` from the program (absent already
    /// when it failed to install).
    fn uninstall(&mut self, cpu: u32, event: usize) {
        if let Some(array) = self.arrays.get(event) {
            let _ = map_delete(array.as_fd(), cpu);
        }
    }

    /// Runs the program on `cpu`: it charges the interval in progress
    /// there, makes any change pending there, and waits for runs in
    /// progress there to end (the test run is queued behind them). A CPU
    /// gone offline is not a failure: what it counted was charged at its
    /// last switch.
    fn flush_one(&self, cpu: u32) -> Result<(), Errno> {
        programs::flush_one(&self.ebpf, cpu)
    }

    /// Charges the interval in progress on each of `cpus` to what runs
    /// there: a cgroup that never switches out is counted all the same.
    /// Also waits for runs in progress there to end, which makes a slot
    /// taken out of `monitored` safe to reuse. Returns the errnos of the
    /// CPUs that failed.
    pub fn flush(&self, cpus: impl Iterator<Item = u32>) -> Vec<Errno> {
        cpus.filter_map(|cpu| self.flush_one(cpu).err()).collect()
    }

    /// Makes room, at once, for `more` cgroups in slots up to `last`
    /// (each growth waits for the runs of the program in progress: some
    /// milliseconds).
    pub fn reserve(&mut self, last: u32, more: u32) -> Result<(), String> {
        let positions = self.positions();
        self.cells.room(last, &positions)?;
        let (ebpf, cpus) = (&self.ebpf, self.cpus);
        self.ids.reserve(more, || programs::wait_all(ebpf, cpus))
    }

    /// The counter positions placed (no two groups share one).
    fn positions(&self) -> Vec<usize> {
        self.placed
            .iter()
            .flat_map(|p| p.at.iter().copied())
            .collect()
    }

    /// Counts cgroup `id` (a cgroup directory's inode) in `slot` from
    /// nothing (what a cgroup before it left there is cleared), once the
    /// slot has its cells in `totals` at every position placed. No run of
    /// the program may still charge the slot (see `BpfCounters::take_slot`).
    pub fn monitor(&mut self, id: u64, slot: u32) -> Result<(), String> {
        let positions = self.positions();
        self.cells.room(slot, &positions)?;
        self.cells.clear(slot);
        let (ebpf, cpus) = (&self.ebpf, self.cpus);
        self.ids
            .insert(id, slot, || programs::wait_all(ebpf, cpus))?;
        self.invalidate_chains().inspect_err(|_| {
            // Not charged at all rather than charged to only some of the
            // cgroups that run beneath it.
            self.ids.remove(id);
        })
    }

    /// Stops charging cgroup `id`. The program's chains are stale from
    /// here on; a run in progress may still charge its slot, hence the
    /// flush before the slot is reused.
    pub fn unmonitor(&mut self, id: u64) {
        self.ids.remove(id);
        if let Err(e) = self.invalidate_chains() {
            tracing::warn!("cannot update the BPF program's config: {e}");
        }
    }

    /// What `slot` was charged on `cpu` for counter `index` so far.
    pub fn reading(&self, cpu: u32, slot: u32, index: usize) -> Reading {
        self.cells.reading(cpu, slot, index)
    }

    /// Times the program found, on every CPU since it loaded, that the
    /// kernel had switched out of a task without the `sched_switch`
    /// tracepoint (a run of such switches once; see `run` in
    /// `count.bpf.c`): where there are any, what
    /// the perf counters counted while such a task ran is charged to the
    /// cgroup of the task that ran next (`docs/backends.md`).
    pub fn unseen_switches(&self) -> u64 {
        let Some(map) = self.ebpf.map("progress") else {
            return 0;
        };
        let Ok(progress) = Array::<&MapData, Progress>::try_from(map) else {
            return 0;
        };
        // Every possible CPU's, online or not: the sum never goes down.
        progress
            .iter()
            .filter_map(Result::ok)
            .map(|p| p.unseen)
            .sum()
    }

    /// The programs' run time and run count so far (while statistics are
    /// enabled).
    pub fn runs(&self) -> (u64, u64) {
        programs::NAMES
            .iter()
            .filter_map(|name| self.ebpf.program(name)?.info().ok())
            .fold((0, 0), |(ns, n), info| {
                (ns + info.run_time().as_nanos() as u64, n + info.run_count())
            })
    }
}
