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
