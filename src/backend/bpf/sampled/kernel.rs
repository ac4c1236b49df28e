//! The loaded `by:` program (`sampled.bpf.c`): its maps, the attachment
//! of each tracepoint, and the layout of the C structs they hold.

use super::super::sys::{link_create, map_delete, map_update, read_all, recursion_misses};
use super::rules::{self, EntryConfig, KEY_WORDS};
use super::{Entry, settle_runs};
use crate::backend::budget::Tally;
use crate::perf::open_attach_point;
use crate::plan::SampledSpec;
use aya::maps::{Array, HashMap as BpfHashMap, IterableMap, Map, MapData, PerCpuArray};
use aya::programs::TracePoint;
use aya::{Ebpf, EbpfLoader, Pod};
use memmap2::{MmapOptions, MmapRaw};
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The compiled program, aligned as the ELF parser requires.
#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);
static OBJECT: &Aligned<[u8]> = &Aligned(*include_bytes!("../sampled.bpf.o"));

/// The program, as named in `sampled.bpf.c`.
const PROGRAM: &str = "by_fields";
/// `MAX_ENTRIES` and `TP_ENTRIES` of `sampled.bpf.c`.
pub(super) const MAX_ENTRIES: u32 = 64;
pub(super) const TP_ENTRIES: usize = 8;
/// `SPILLS` of `sampled.bpf.c`: keys hashes a home's chain holds at most.
pub(super) const SPILLS: usize = 4;
/// Keys one hash of a home's chain holds at most, whatever `max_series` × cgroups
/// asks: its buckets (16 bytes each, rounded up to a power of two) are
/// allocated when the entry is created.
pub(super) const MAX_KEYS: u32 = 1 << 22;
/// `BPF_F_NO_PREALLOC`: a hash's elements are allocated as used.
const NO_PREALLOC: u32 = 1;
/// Descriptors the loaded program holds besides its links and its
/// entries' hashes: its eight maps and itself.
const OWN_FDS: u64 = 9;
/// `struct attached` of `sampled.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Attached {
    n: u32,
    entries: [u32; TP_ENTRIES],
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Attached {}

/// `struct key` of `sampled.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub(super) slot: u32,
    pub(super) entry: u32,
    pub(super) words: [u64; KEY_WORDS],
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Key {}

/// What a key's value in the counts map says (`UNDECIDED` and `OTHER` of
/// `sampled.bpf.c`): its hits, and whether they go to `other` (its values
/// came past `max_series`); `None` while the hit that created it has not
/// yet decided (an instant: every key is decided once no run is in
/// progress).
pub(super) fn decode(value: u64) -> Option<(u64, bool)> {
    const UNDECIDED: u64 = 1 << 63;
    const OTHER: u64 = 1 << 62;
    if value & UNDECIDED != 0 {
        return None;
    }
    Some((value & !OTHER, value & OTHER != 0))
}

/// What the copies of one key in a home's chain say together: `merged`,
/// what those read before it say, with one more copy's `value`. Their
/// hits, all under the value if any copy took a place, else under
/// `other`; `None` while a copy is undecided. (Two copies come of a rare
/// race, with a deletion, between the first hits of a value on two CPUs:
/// it may then hold two places, one wasted; hits a collection read while
/// only a copy that went to `other` existed stay there.)
pub(super) fn merge(merged: Option<(u64, bool)>, value: u64) -> Option<(u64, bool)> {
    let ((hits, other), (more, beyond)) = (merged?, decode(value)?);
    Some((hits + more, other && beyond))
}

/// `struct cell` of `sampled.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cell {
    pub(super) series: u64,
    pub(super) other: u64,
    pub(super) refused: u64,
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Cell {}

/// The hashes of one home (`keys_of` and `cells_of` of `sampled.bpf.c`):
/// its chain of keys hashes, each twice the size of the one before, and
/// its cells.
#[derive(Debug)]
struct Room {
    keys: Vec<(u32, BpfHashMap<MapData, Key, u64>)>,
    cells: BpfHashMap<MapData, u32, Cell>,
}

impl Room {
    /// The keys its chain holds.
    fn size(&self) -> u64 {
        self.keys.iter().map(|(size, _)| u64::from(*size)).sum()
    }
}

/// Keys a chain of hashes needs for an entry of `max_series` in
/// `capacity` cgroups: its series in each, plus one per possible CPU whose
/// hit created a key as the last place was taken (it counts under
/// `other`), rounded up to a power of two (a hash's buckets are, whatever
/// its size), at most [`MAX_KEYS`].
pub(super) fn keys_for(capacity: u32, max_series: usize) -> u32 {
    let cpus = aya::util::nr_cpus().map_or(1, |n| n as u64);
    let keys = (max_series as u64)
        .saturating_add(cpus)
        .saturating_mul(capacity.max(1) as u64)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX);
    keys.min(MAX_KEYS as u64) as u32
}

/// One attachment: the perf event of a tracepoint and the link that runs
/// the program at its every hit, on every CPU.
#[derive(Debug)]
struct Link {
    cookie: u64,
    _event: OwnedFd,
    _fd: Tally,
    _link: OwnedFd,
}

/// The loaded program and its maps.
#[derive(Debug)]
pub(super) struct Loaded {
    ebpf: Ebpf,
    /// `settings`, mapped read-write.
    settings: MmapRaw,
    table: u64,
    watch: u64,
    /// By tracepoint id.
    links: BTreeMap<u64, Link>,
    /// `counts` and `cells`: at each entry's index, its [`Room`].
    counts: MapData,
    cells: MapData,
    capacity: u32,
    /// By entry index.
    rooms: BTreeMap<u32, Room>,
}

/// The error of a failed step, as text.
fn failed(step: &str, e: impl std::fmt::Display) -> String {
    format!("{step}: {e}")
}

impl Loaded {
    /// Descriptors held (each link holds its perf event, counted in the
    /// tally, and itself), and the program's run time and count.
    pub(super) fn stats(&self) -> (u64, u64, u64) {
        let (ns, runs) = self
            .ebpf
            .program(PROGRAM)
            .and_then(|p| p.info().ok())
            .map_or((0, 0), |info| {
                (info.run_time().as_nanos() as u64, info.run_count())
            });
        let hashes: usize = self.rooms.values().map(|r| 1 + r.keys.len()).sum();
        let fds = OWN_FDS + self.links.len() as u64 + hashes as u64;
        (fds, ns, runs)
    }

    /// Hits at which the kernel did not run the program because another
    /// BPF program was running on that CPU (a tracepoint hit in an
    /// interrupt during one): not counted, so reported lost.
    pub(super) fn missed(&self) -> u64 {
        let fd = self
            .ebpf
            .program(PROGRAM)
            .and_then(|p| p.fd().ok())
            .map(|fd| fd.as_fd().as_raw_fd());
        fd.and_then(|fd| recursion_misses(fd).ok()).unwrap_or(0)
    }

    /// Loads the program with room for `capacity` cgroups; each entry
    /// gets its own room when it is first counted ([`Loaded::make_room`]).
    pub(super) fn load(capacity: u32) -> Result<Self, String> {
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("watched", capacity)
            .load(&OBJECT.0)
            .map_err(|e| failed("loading the maps", e))?;
        let (Some(Map::ArrayOfMaps(counts)), Some(Map::ArrayOfMaps(cells))) =
            (ebpf.take_map("counts"), ebpf.take_map("cells"))
        else {
            return Err("the object lacks its arrays of maps".into());
        };
        let program: &mut TracePoint = ebpf
            .program_mut(PROGRAM)
            .ok_or("the object has no program")?
            .try_into()
            .map_err(|e| failed("the program", e))?;
        program
            .load()
            .map_err(|e| failed("loading the program", e))?;
        let settings = match ebpf.map("settings") {
            Some(Map::Array(data)) => MmapOptions::new()
                .len(page())
                .map_raw(data.fd().as_fd().as_raw_fd())
                .map_err(|e| failed("mapping the settings", e))?,
            _ => return Err("the object has no settings array".into()),
        };
        Ok(Self {
            ebpf,
            settings,
            table: 0,
            watch: 0,
            links: BTreeMap::new(),
            counts,
            cells,
            capacity,
            rooms: BTreeMap::new(),
        })
    }

    /// Creates the hashes of `entry`'s home, if it has none yet, for its
    /// `max_series`; or, if its chain lacks room for that, adds spill
    /// hashes to it (as many as needed, up to [`SPILLS`]). Called before
    /// any table names the entry, so that every run of the home, whatever
    /// its definition, sees the same chain; a home gets hashes again only
    /// once [`Loaded::drop_room`] took the old ones, when no entry counted
    /// there any more and no run could still reach them.
    pub(super) fn make_room(&mut self, entry: &Entry) -> Result<(), String> {
        let wanted = keys_for(self.capacity, entry.spec.max_series);
        if !self.rooms.contains_key(&entry.home) {
            let cells = BpfHashMap::<MapData, u32, Cell>::create(self.capacity, NO_PREALLOC)
                .map_err(|e| failed(&format!("a hash of {} cells", self.capacity), e))?;
            hand_over(&self.cells, entry.home, cells.map())?;
            let room = Room {
                keys: Vec::new(),
                cells,
            };
            self.rooms.insert(entry.home, room);
        }
        let counts = &self.counts;
        let room = self.rooms.get_mut(&entry.home).ok_or("no hashes")?;
        while room.size() < u64::from(wanted) && room.keys.len() < SPILLS {
            let size = room
                .keys
                .last()
                .map_or(wanted, |(last, _)| last.saturating_mul(2).min(MAX_KEYS));
            let keys = BpfHashMap::<MapData, Key, u64>::create(size, NO_PREALLOC)
                .map_err(|e| failed(&format!("a hash of {size} keys"), e))?;
            let at = entry.home * SPILLS as u32 + room.keys.len() as u32;
            hand_over(counts, at, keys.map())?;
            room.keys.push((size, keys));
        }
        Ok(())
    }

    /// Takes the hashes at `home` away, with every key and cell in them:
    /// once no entry counts there and they were read one last time.
    pub(super) fn drop_room(&mut self, home: u32) {
        let Some(room) = self.rooms.remove(&home) else {
            return;
        };
        for at in 0..room.keys.len() as u32 {
            let _ = map_delete(self.counts.fd().as_fd(), home * SPILLS as u32 + at);
        }
        let _ = map_delete(self.cells.fd().as_fd(), home);
    }

    /// One word of the mapped settings.
    fn word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the mapping is at least a page, page-aligned, and holds
        // `struct settings` (three u64s) at its start; the program reads
        // these words while cgperf writes them, so they are only accessed
        // atomically.
        unsafe { &*self.settings.as_ptr().cast::<AtomicU64>().add(i) }
    }

    /// Writes `entries`' configs and table into the idle generation,
    /// attaches tracepoints that need it, switches tables, and detaches
    /// tracepoints that no longer count anything.
    pub(super) fn publish(
        &mut self,
        entries: &[Entry],
        tally: &Arc<AtomicU64>,
    ) -> Result<(), String> {
        for entry in entries {
            let config = rules::compile(&entry.spec)?.within(entry.window, entry.home);
            let mut array: Array<&mut MapData, EntryConfig> =
                Array::try_from(self.ebpf.map_mut("entries").ok_or("no entries map")?)
                    .map_err(|e| e.to_string())?;
            array
                .set(entry.index, config, 0)
                .map_err(|e| failed("configuring an entry", e))?;
        }
        let mut tables: BTreeMap<u64, Attached> = BTreeMap::new();
        let mut error = Ok(());
        for entry in entries {
            let tp = entry.spec.attr.config;
            if let Err(e) = self.ensure_attached(&entry.spec, tally) {
                error = Err(e);
                continue;
            }
            let table = tables.entry(tp).or_default();
            if (table.n as usize) < TP_ENTRIES {
                table.entries[table.n as usize] = entry.index;
                table.n += 1;
            }
        }
        let idle = (self.table + 1) & 1;
        let links: Vec<(u64, u64)> = self.links.iter().map(|(&tp, l)| (tp, l.cookie)).collect();
        // Runs that saw the idle table when it was in force have ended:
        // it is written in place.
        settle_runs();
        {
            let mut map: Array<&mut MapData, Attached> =
                Array::try_from(self.ebpf.map_mut("attached").ok_or("no attached map")?)
                    .map_err(|e| e.to_string())?;
            for (tp, cookie) in &links {
                let at = u32::try_from(cookie * 2 + idle).map_err(|_| "too many tracepoints")?;
                let table = tables.get(tp).copied().unwrap_or_default();
                map.set(at, table, 0)
                    .map_err(|e| failed("publishing the entries", e))?;
            }
        }
        self.table += 1;
        self.word(0).store(self.table, Ordering::Release);
        // Tracepoints nothing counts any more: once no run uses them.
        let unused: Vec<u64> = links
            .iter()
            .filter(|(tp, _)| !tables.contains_key(tp))
            .map(|(tp, _)| *tp)
            .collect();
        if !unused.is_empty() {
            settle_runs();
            for tp in unused {
                self.links.remove(&tp);
            }
        }
        error
    }

    /// Runs the program at every hit of `spec`'s tracepoint, if it does
    /// not yet.
    pub(super) fn ensure_attached(
        &mut self,
        spec: &SampledSpec,
        tally: &Arc<AtomicU64>,
    ) -> Result<(), String> {
        let tp = spec.attr.config;
        if !self.links.contains_key(&tp) {
            let link = self.attach(spec, tally)?;
            self.links.insert(tp, link);
        }
        Ok(())
    }

    /// Runs the program at every hit of `spec`'s tracepoint, its cookie the
    /// lowest one free.
    fn attach(&mut self, spec: &SampledSpec, tally: &Arc<AtomicU64>) -> Result<Link, String> {
        let cookie = (0..MAX_ENTRIES as u64)
            .find(|c| !self.links.values().any(|l| l.cookie == *c))
            .ok_or("more tracepoints than the program has room for")?;
        // One event, on one CPU, never enabled: the program attached
        // through it is the tracepoint's, run at its hits on every CPU.
        let cpu = crate::cpus::online()
            .ok()
            .and_then(|cpus| cpus.first().copied())
            .unwrap_or(0);
        let event =
            open_attach_point(&spec.attr, cpu).map_err(|e| failed("opening the tracepoint", e))?;
        let program: &TracePoint = self
            .ebpf
            .program(PROGRAM)
            .ok_or("the object has no program")?
            .try_into()
            .map_err(|e| failed("the program", e))?;
        let prog_fd = program
            .fd()
            .map_err(|e| failed("the program", e))?
            .as_fd()
            .as_raw_fd();
        let link = link_create(prog_fd, event.as_raw_fd(), cookie)
            .map_err(|e| failed("attaching the program", e))?;
        Ok(Link {
            cookie,
            _event: event,
            _fd: Tally::new(tally, 1),
            _link: link,
        })
    }

    fn map<K: Pod, V: Pod>(&mut self, name: &str) -> Option<BpfHashMap<&mut MapData, K, V>> {
        BpfHashMap::try_from(self.ebpf.map_mut(name)?).ok()
    }

    fn room(&mut self, home: u32) -> Result<&mut Room, String> {
        self.rooms
            .get_mut(&home)
            .ok_or_else(|| format!("no hashes at {home}"))
    }

    /// Sets the cut of a reload moving entries in or out (0: none), as
    /// `sampled.bpf.c` describes it.
    pub(super) fn set_cut(&self, at: u64) {
        self.word(2).store(at, Ordering::Release);
    }

    /// By tracepoint id, per possible CPU: the time of the first hit at or
    /// past the cut `at` there, if one came.
    pub(super) fn firsts(&self, at: u64) -> std::collections::HashMap<u64, Vec<Option<u64>>> {
        let mut out = std::collections::HashMap::new();
        let Some(map) = self.ebpf.map("firsts") else {
            return out;
        };
        let Ok(array) = PerCpuArray::<&MapData, u64>::try_from(map) else {
            return out;
        };
        for (&tp, link) in &self.links {
            let Ok(cookie) = u32::try_from(link.cookie) else {
                continue;
            };
            if let Ok(values) = array.get(&cookie, 0) {
                let per_cpu = values.iter().map(|&t| (t >= at).then_some(t)).collect();
                out.insert(tp, per_cpu);
            }
        }
        out
    }

    pub(super) fn watch(&mut self, id: u64, slot: u32) -> Result<(), String> {
        self.map::<u64, u32>("watched")
            .ok_or("no watched map")?
            .insert(id, slot, 0)
            .map_err(|e| e.to_string())?;
        self.watch += 1;
        self.word(1).store(self.watch, Ordering::Release);
        Ok(())
    }

    pub(super) fn unwatch(&mut self, id: u64) {
        if let Some(mut map) = self.map::<u64, u32>("watched") {
            let _ = map.remove(&id);
        }
        self.watch += 1;
        self.word(1).store(self.watch, Ordering::Release);
    }

    pub(super) fn insert_cell(&mut self, slot: u32, index: u32, cell: Cell) -> Result<(), String> {
        self.room(index)?
            .cells
            .insert(slot, cell, 0)
            .map_err(|e| e.to_string())
    }

    pub(super) fn drop_cell(&mut self, slot: u32, index: u32) {
        if let Ok(room) = self.room(index) {
            let _ = room.cells.remove(&slot);
        }
    }

    /// Every (cgroup slot, entry) cell now.
    pub(super) fn cells(&mut self) -> std::collections::HashMap<(u32, u32), Cell> {
        let mut out = std::collections::HashMap::new();
        for (&index, room) in &self.rooms {
            for (slot, cell) in read_all(&room.cells) {
                out.insert((slot, index), cell);
            }
        }
        out
    }

    /// Deletes `key` from every hash of its home's chain.
    pub(super) fn remove_key(&mut self, key: &Key) {
        if let Ok(room) = self.room(key.entry) {
            for (_, keys) in &mut room.keys {
                let _ = keys.remove(key);
            }
        }
    }

    /// Every key now, its copies in the hashes of its home's chain merged
    /// ([`merge`]).
    pub(super) fn keys(&mut self) -> std::collections::HashMap<Key, Option<(u64, bool)>> {
        let mut keys = std::collections::HashMap::new();
        let chains = self.rooms.values().flat_map(|room| &room.keys);
        for (key, value) in chains.flat_map(|(_, keys)| read_all(keys)) {
            keys.entry(key)
                .and_modify(|merged| *merged = merge(*merged, value))
                .or_insert_with(|| decode(value));
        }
        keys
    }
}

/// Hands `inner` to the program at `at` of the array of maps `outer`.
fn hand_over(outer: &MapData, at: u32, inner: &MapData) -> Result<(), String> {
    let fd = u32::try_from(inner.fd().as_fd().as_raw_fd()).map_err(|_| "a negative descriptor")?;
    map_update(outer.fd().as_fd(), at, fd)
        .map_err(|e| failed("handing an entry's hash to the program", e))
}

fn page() -> usize {
    crate::perf::page_size().unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_counted_once_decided_as_a_series_or_as_other() {
        assert_eq!(decode(1 << 63 | 5), None);
        assert_eq!(decode(7), Some((7, false)));
        assert_eq!(decode(1 << 62 | 7), Some((7, true)));
        // Deciding is one addition to what other CPUs keep adding to.
        assert_eq!(
            decode((1 << 63 | 5u64).wrapping_add(1 << 63)),
            Some((5, false))
        );
        let other = (1u64 << 63 | 5).wrapping_add(1 << 63 | 1 << 62);
        assert_eq!(decode(other), Some((5, true)));
    }

    #[test]
    fn a_chain_holds_the_series_and_a_racing_key_per_cpu_in_every_cgroup() {
        let cpus = aya::util::nr_cpus().expect("possible CPUs");
        let keys = keys_for(4096, 100);
        assert!(keys.is_power_of_two(), "{keys}");
        assert!((100 + cpus) * 4096 <= keys as usize, "{keys}");
        assert!((100 + cpus) * 4096 > keys as usize / 2, "{keys}");
        assert_eq!(keys_for(1_000_000, 100), MAX_KEYS);
    }

    #[test]
    fn the_copies_of_a_key_in_a_chain_count_under_the_value_if_one_took_a_place() {
        const OTHER: u64 = 1 << 62;
        let all = |values: &[u64]| {
            let first = decode(values[0]);
            values[1..].iter().fold(first, |m, v| merge(m, *v))
        };
        assert_eq!(all(&[3]), Some((3, false)));
        assert_eq!(all(&[OTHER | 3, 4]), Some((7, false)));
        assert_eq!(all(&[4, OTHER | 3]), Some((7, false)));
        assert_eq!(all(&[OTHER | 3, OTHER | 1]), Some((4, true)));
        assert_eq!(all(&[5, 1 << 63 | 1]), None);
        assert_eq!(all(&[1 << 63 | 1, 5]), None);
    }

    #[test]
    fn the_c_structs_have_the_sizes_of_sampled_bpf_c() {
        assert_eq!(std::mem::size_of::<Key>(), 8 + 8 * KEY_WORDS);
        assert_eq!(std::mem::size_of::<Cell>(), 24);
        assert_eq!(std::mem::size_of::<Attached>(), 4 + 4 * TP_ENTRIES);
    }
}
