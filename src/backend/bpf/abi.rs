//! What cgperf and `count.bpf.c` agree on: the counter positions per CPU
//! and the layout of a reading. Every file that lays out or reads the
//! program's maps takes them from here, so that none of them needs the
//! loaded program ([`super::kernel`]) to know a size.

use aya::Pod;

/// Counters per CPU at most (`MAX_EVENTS` in `count.bpf.c`): the stride
/// of the `counters` and `last` maps. Each live counter is read at every
/// context switch between cgroups, which bounds how many are worth
/// counting this way long before the maps' memory does.
pub(super) const MAX_EVENTS: usize = 256;
/// Counters per CPU a config may count through BPF: half the positions.
/// Then every reload places each new or changed group beside the groups it
/// keeps and those it replaces (kept + old and kept + new take at most half
/// each), so that one run per CPU hands every change over exactly.
pub(super) const MAX_COUNTED: usize = MAX_EVENTS / 2;

/// `struct reading` of `count.bpf.c`: sums of deltas of a counter's value
/// and of its times enabled and running.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Reading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Reading {}

/// `struct progress` of `count.bpf.c`, of which cgperf reads one field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Progress {
    /// `done`, `switches`, `busy`, `task`: the program's own.
    _before: [u64; 4],
    /// Times the program found there that the kernel had switched out of
    /// a task without the `sched_switch` tracepoint (a run of such
    /// switches once).
    pub unseen: u64,
    /// `part`, `tail_switches`, `tail_clock`: the program's own.
    _after: [u64; 3],
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Progress {}

/// Chains cached per CPU (`CHAINS` in `count.bpf.c`).
pub(super) const CHAINS: u32 = 64;

/// `struct config` of `count.bpf.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Config {
    pub capacity: u32,
    pub cpus: u32,
    /// Bumped after each change of `monitored`: the program's chains of
    /// monitored ancestors are stale.
    pub generation: u64,
    /// The slots of `totals`' first chunk, as a shift.
    pub chunk0: u32,
    /// Counter positions in use are below it; it never goes down.
    pub top: u32,
}
// SAFETY: plain integers, no padding.
unsafe impl Pod for Config {}

/// Where the program takes a counter's readings from (`FROM_*` in
/// `count.bpf.c`, the `source` of its `last` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(super) enum Source {
    /// A perf counter cgperf opens on the CPU.
    Counter = 0,
    /// The context switches the program sees there.
    Switches = 1,
    /// The clock, in nanoseconds.
    Clock = 2,
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// `count.bpf.c`, which the program is built from.
    pub(in super::super) const COUNT_BPF_C: &str = include_str!("count.bpf.c");

    /// The value of `#define name` in `count.bpf.c`.
    pub(in super::super) fn defined(name: &str) -> u64 {
        let line = COUNT_BPF_C
            .lines()
            .find_map(|l| {
                l.strip_prefix("#define ")?
                    .strip_prefix(name)?
                    .strip_prefix(' ')
            })
            .unwrap_or_else(|| panic!("count.bpf.c defines {name}"));
        let value = line.split_whitespace().next().expect("a value");
        let value = value.trim_end_matches(['u', 'U', 'l', 'L']);
        match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse(),
        }
        .unwrap_or_else(|e| panic!("{name} is a number: {value}: {e}"))
    }

    /// The members of `struct name` of `count.bpf.c`, in order, as
    /// (type, name).
    pub(in super::super) fn members(name: &str) -> Vec<(String, String)> {
        let start = format!("struct {name} {{");
        let body = COUNT_BPF_C
            .split_once(&start)
            .unwrap_or_else(|| panic!("count.bpf.c declares struct {name}"))
            .1;
        let body = body.split_once("};").expect("the struct ends").0;
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(|l| {
                let l = l.trim_end_matches(';');
                let (ty, name) = l.rsplit_once(' ').expect("a type and a name");
                (ty.trim().to_string(), name.to_string())
            })
            .collect()
    }

    #[test]
    fn the_positions_per_cpu_are_those_of_count_bpf_c() {
        assert_eq!(defined("MAX_EVENTS"), MAX_EVENTS as u64);
        assert_eq!(MAX_EVENTS, 256);
    }

    #[test]
    fn a_config_counts_at_most_half_the_positions() {
        assert_eq!(MAX_COUNTED, 128);
        assert_eq!(2 * MAX_COUNTED, MAX_EVENTS, "kept + old and kept + new fit");
    }

    #[test]
    fn a_reading_is_laid_out_as_struct_reading_of_count_bpf_c() {
        assert_eq!(size_of::<Reading>(), 24);
        assert_eq!(align_of::<Reading>(), 8);
        assert_eq!(
            [
                offset_of!(Reading, value),
                offset_of!(Reading, enabled),
                offset_of!(Reading, running),
            ],
            [0, 8, 16]
        );
        let c: Vec<_> = members("reading");
        let want = ["value", "enabled", "running"].map(|n| ("__u64".to_string(), n.to_string()));
        assert_eq!(c, want);
    }

    #[test]
    fn the_config_is_laid_out_as_struct_config_of_count_bpf_c() {
        assert_eq!(defined("CHAINS"), u64::from(CHAINS));
        assert_eq!(size_of::<Config>(), 24);
        assert_eq!(
            [
                offset_of!(Config, capacity),
                offset_of!(Config, cpus),
                offset_of!(Config, generation),
                offset_of!(Config, chunk0),
                offset_of!(Config, top),
            ],
            [0, 4, 8, 16, 20]
        );
        let c: Vec<_> = members("config")
            .into_iter()
            .map(|(t, n)| t + " " + &n)
            .collect();
        assert_eq!(
            c,
            [
                "__u32 capacity",
                "__u32 cpus",
                "__u64 generation",
                "__u32 chunk0",
                "__u32 top"
            ]
        );
    }

    #[test]
    fn the_sources_are_those_of_count_bpf_c() {
        for (source, name) in [
            (Source::Counter, "FROM_COUNTER"),
            (Source::Switches, "FROM_SWITCHES"),
            (Source::Clock, "FROM_CLOCK"),
        ] {
            assert_eq!(source as u64, defined(name), "{name}");
        }
    }

    #[test]
    fn the_defines_of_count_bpf_c_are_read_as_written() {
        assert_eq!(defined("FOREVER"), 0x7fff_ffff, "hex with a suffix");
        assert_eq!(defined("CHUNKS"), 32);
        assert_eq!(defined("CACHED_SLOTS"), 8);
    }
}
