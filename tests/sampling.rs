//! Sampled tracepoints and tracepoint filters on the real kernel: a child in
//! a fresh cgroup makes a known number of `getpriority` calls with known
//! arguments, and the samples (decoded from the per-CPU rings) or the counts
//! must match exactly.

mod common;

use cgperf::events::{EventAttr, PERF_TYPE_TRACEPOINT, parse_tracepoint};
use cgperf::perf::{
    CounterGroup, DrainStats, Errno, OpenError, Readiness, Record, RingOwner, SAMPLE_TYPE,
    SampledEvent, Target, parse_record, wait_readable,
};
use cgperf::tracefs::Tracefs;
use common::{TestCgroup, in_child, join_or_exit, procs_of};
use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const TRACEPOINT: &str = "syscalls:sys_enter_getpriority";
/// `getpriority(PRIO_PROCESS, 0)` calls: `which == 0`.
const N: u64 = 1000;
/// `getpriority(PRIO_PGRP, 0)` calls: `which == 1`.
const M: u64 = 300;

fn tracefs() -> Tracefs {
    Tracefs::locate().expect("tracefs is mounted (these tests run as root)")
}

fn getpriority_attr() -> EventAttr {
    let tp = parse_tracepoint(TRACEPOINT).unwrap();
    EventAttr::new(PERF_TYPE_TRACEPOINT, tracefs().tracepoint_id(&tp).unwrap())
}

/// Offset and size of `field` in the tracepoint's raw entry, from its
/// `format` file (tab-separated lines like `field:int which; offset:16; size:8; ...`).
fn field_layout(field: &str) -> (usize, usize) {
    let path = tracefs()
        .root()
        .join("events/syscalls/sys_enter_getpriority/format");
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("field:") && l.contains(&format!(" {field};")))
        .unwrap_or_else(|| panic!("{} has no field {field}", path.display()));
    let number = |key: &str| -> usize {
        line.split(';')
            .find_map(|part| part.trim().strip_prefix(key))
            .unwrap()
            .parse()
            .unwrap()
    };
    (number("offset:"), number("size:"))
}

/// `which` of a raw `sys_enter_getpriority` entry.
fn which(raw: &[u8]) -> u64 {
    let (offset, size) = field_layout("which");
    assert_eq!(size, 8, "`which` is a long on this kernel");
    u64::from_ne_bytes(raw[offset..offset + 8].try_into().unwrap())
}

fn getpriority(which: libc::c_long) {
    // SAFETY: a raw syscall with integer arguments.
    unsafe { libc::syscall(libc::SYS_getpriority, which, 0) };
}

/// `N` calls with `which == 0` and `M` with `which == 1`, in `cgroup`.
fn workload(cgroup: &Path) {
    in_child(Some(cgroup), || {
        for _ in 0..N {
            getpriority(0);
        }
        for _ in 0..M {
            getpriority(1);
        }
    });
}

fn cpus() -> Vec<u32> {
    cgperf::cpus::online().unwrap()
}

/// One ring and one sampled `sys_enter_getpriority` per online CPU.
struct Sampler {
    rings: Vec<(RingOwner, SampledEvent)>,
}

impl Sampler {
    fn open(cgroup: &File, filter: Option<&CStr>, data_pages: usize) -> Self {
        let attr = getpriority_attr();
        let rings = cpus()
            .into_iter()
            .map(|cpu| {
                let owner = RingOwner::open(cpu, data_pages, 0).unwrap_or_else(|e| {
                    panic!("a system-wide dummy opens on cpu {cpu} (needs root): {e}")
                });
                let event =
                    SampledEvent::open(&attr, filter, Target::Cgroup(cgroup.as_fd()), cpu, &owner)
                        .unwrap_or_else(|e| {
                            panic!("SET_OUTPUT into the cpu {cpu} dummy's ring works: {e}")
                        });
                event.enable().expect("the event starts");
                (owner, event)
            })
            .collect();
        Self { rings }
    }

    /// Drains every ring: the `which` of each sample (checking it is ours),
    /// the records lost, and each ring's drain stats.
    fn drain(&mut self) -> (Vec<u64>, u64, Vec<DrainStats>) {
        let (mut whiches, mut lost, mut stats) = (Vec::new(), 0, Vec::new());
        for (owner, event) in &mut self.rings {
            let id = event.id();
            stats.push(owner.ring_mut().drain(|record| {
                match parse_record(SAMPLE_TYPE, record).unwrap() {
                    Record::Sample(sample) => {
                        assert_eq!(sample.identifier, Some(id));
                        whiches.push(which(sample.raw.unwrap()));
                    }
                    Record::Lost { id: of, lost: n } => {
                        assert_eq!(of, id);
                        lost += n;
                    }
                    Record::Other { type_ } => panic!("unexpected record type {type_}"),
                }
            }));
        }
        (whiches, lost, stats)
    }
}

fn open_dir(path: &Path) -> File {
    File::open(path).unwrap()
}

#[test]
fn every_call_in_the_cgroup_is_sampled_with_its_arguments() {
    let cg = TestCgroup::create("cgperf-sampling-test");
    let dir = open_dir(&cg.dir);
    let mut sampler = Sampler::open(&dir, None, 32);
    workload(&cg.dir);
    let (whiches, lost, stats) = sampler.drain();
    assert_eq!(lost, 0, "32 pages per CPU hold all {} samples", N + M);
    assert!(stats.iter().all(|s| !s.corrupt));
    assert_eq!(whiches.len() as u64, N + M);
    assert_eq!(whiches.iter().filter(|&&w| w == 0).count() as u64, N);
    assert_eq!(whiches.iter().filter(|&&w| w == 1).count() as u64, M);
    // Nothing more arrives once the workload is gone.
    assert_eq!(sampler.drain().0.len(), 0);
}

#[test]
fn an_event_counts_and_samples_nothing_until_it_is_enabled() {
    // The rings hold back the events of an entry handed over to them until
    // just before the cut they count from: calls before must leave neither
    // a count nor a sample.
    let cg = TestCgroup::create("cgperf-sampling-held");
    let dir = open_dir(&cg.dir);
    let owner = RingOwner::open(0, 32, 0).unwrap();
    let target = Target::Cgroup(dir.as_fd());
    let event = SampledEvent::open(&getpriority_attr(), None, target, 0, &owner).unwrap();
    let mut sampler = Sampler {
        rings: vec![(owner, event)],
    };
    rounds_in_child(&cg.dir, 0, &[300], || {});
    let event = &sampler.rings[0].1;
    assert_eq!(event.read_count(), Ok(0), "held: nothing counted");
    event.enable().unwrap();
    rounds_in_child(&cg.dir, 0, &[200], || {});
    assert_eq!(event.read_count(), Ok(200), "counted from the enable on");
    let (whiches, lost, _) = sampler.drain();
    assert_eq!(
        (whiches.len(), lost),
        (200, 0),
        "sampled from the enable on"
    );
}

#[test]
fn a_filter_keeps_only_matching_samples() {
    let cg = TestCgroup::create("cgperf-sampling-filter");
    let dir = open_dir(&cg.dir);
    let mut sampler = Sampler::open(&dir, Some(c"which == 1"), 32);
    workload(&cg.dir);
    let (whiches, lost, _) = sampler.drain();
    assert_eq!(lost, 0);
    assert_eq!(whiches, vec![1; M as usize]);
}

#[test]
fn a_bad_filter_fails_the_open_with_einval() {
    let cg = TestCgroup::create("cgperf-sampling-badfilter");
    let dir = open_dir(&cg.dir);
    let owner = RingOwner::open(0, 1, 0).unwrap();
    for filter in [c"which === 1", c"nosuchfield == 3"] {
        let got = SampledEvent::open(
            &getpriority_attr(),
            Some(filter),
            Target::Cgroup(dir.as_fd()),
            0,
            &owner,
        );
        assert_eq!(got.map(drop), Err(Errno(libc::EINVAL)), "{filter:?}");
    }
}

#[test]
fn a_filtered_counting_group_counts_only_matching_calls() {
    let cg = TestCgroup::create("cgperf-sampling-counting");
    let dir = open_dir(&cg.dir);
    let attrs = [getpriority_attr(), getpriority_attr()];
    let filters = [Some(c"which == 1")];
    let mut groups: Vec<CounterGroup> = cpus()
        .into_iter()
        .map(|cpu| {
            CounterGroup::open_filtered(&attrs, &filters, Target::Cgroup(dir.as_fd()), cpu).unwrap()
        })
        .collect();
    workload(&cg.dir);
    let (mut filtered, mut unfiltered) = (0, 0);
    for group in &mut groups {
        let (read, ids) = group.read().unwrap();
        filtered += read.value_of(ids[0], 0).unwrap();
        unfiltered += read.value_of(ids[1], 1).unwrap();
    }
    assert_eq!(filtered, M, "the leader's filter counts only which == 1");
    assert_eq!(unfiltered, N + M, "a missing filter entry means no filter");
}

#[test]
fn a_rejected_group_filter_names_its_event() {
    let cg = TestCgroup::create("cgperf-sampling-groupfilter");
    let dir = open_dir(&cg.dir);
    let got = CounterGroup::open_filtered(
        &[getpriority_attr(), getpriority_attr()],
        &[None, Some(c"nosuchfield == 3")],
        Target::Cgroup(dir.as_fd()),
        0,
    );
    assert_eq!(
        got.map(drop),
        Err(OpenError {
            index: 1,
            errno: Errno(libc::EINVAL)
        })
    );
}

/// A pipe: (read end, write end).
fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the kernel just returned these descriptors and nothing else owns them.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// Runs `rounds` of `which == 0` calls in a child pinned to `cpu` inside
/// `cgroup`, calling `between` after each round has fully completed (the
/// child acknowledges each round through a pipe before the next starts).
fn rounds_in_child(cgroup: &Path, cpu: u32, rounds: &[u32], mut between: impl FnMut()) {
    let procs = procs_of(cgroup);
    let (go_read, go_write) = pipe();
    let (done_read, done_write) = pipe();
    // SAFETY: the child only makes raw syscalls (no allocation, no locks)
    // and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: async-signal-safe calls on valid buffers and descriptors.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                libc::_exit(2);
            }
            join_or_exit(&procs, 3);
            let mut count = [0u8; 4];
            while libc::read(go_read.as_raw_fd(), count.as_mut_ptr().cast(), 4) == 4 {
                let n = u32::from_ne_bytes(count);
                if n == 0 {
                    libc::_exit(0);
                }
                for _ in 0..n {
                    libc::syscall(libc::SYS_getpriority, 0, 0);
                }
                libc::write(done_write.as_raw_fd(), b"!".as_ptr().cast(), 1);
            }
            libc::_exit(4);
        }
    }
    let send = |n: u32| {
        // SAFETY: writes 4 bytes from a local array to our pipe.
        let wrote =
            unsafe { libc::write(go_write.as_raw_fd(), n.to_ne_bytes().as_ptr().cast(), 4) };
        assert_eq!(wrote, 4);
    };
    for &n in rounds {
        send(n);
        let mut ack = [0u8; 1];
        // SAFETY: reads 1 byte into a local array from our pipe.
        let got = unsafe { libc::read(done_read.as_raw_fd(), ack.as_mut_ptr().cast(), 1) };
        assert_eq!(
            got, 1,
            "the child acknowledges the round (it needs root to join the cgroup)"
        );
        between();
    }
    send(0);
    let mut status = 0;
    // SAFETY: waiting for the child we just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
}

/// A one-page ring on `cpu` waking its poller every `wakeup` bytes (0: the
/// kernel's default), and getpriority sampled into it for the cgroup `dir`.
fn one_page_ring(cpu: u32, wakeup: u32, dir: &File) -> (RingOwner, SampledEvent) {
    let owner = RingOwner::open(cpu, 1, wakeup).unwrap();
    let event = SampledEvent::open(
        &getpriority_attr(),
        None,
        Target::Cgroup(dir.as_fd()),
        cpu,
        &owner,
    )
    .unwrap();
    event.enable().unwrap();
    (owner, event)
}

/// A one-page ring wraps many times; records split by its end come out
/// whole; a round larger than the ring loses samples, and the kernel's lost
/// records account for exactly those: samples + lost == calls made.
#[test]
fn a_small_ring_wraps_and_accounts_for_every_call() {
    let cg = TestCgroup::create("cgperf-sampling-ring");
    let dir = open_dir(&cg.dir);
    let cpu = cpus()[0];
    let (mut owner, event) = one_page_ring(cpu, 0, &dir);
    let ring_size = owner.ring_mut().data_size() as u64;
    // Each round but the 400-call one fits the ring; the round after it
    // carries the lost record.
    let rounds = [50, 60, 70, 33, 50, 400, 5, 50, 61, 50, 70, 1, 50, 50, 50];
    let (mut samples, mut lost, mut position, mut split) = (0u64, 0u64, 0u64, 0u64);
    rounds_in_child(&cg.dir, cpu, &rounds, || {
        let stats = owner.ring_mut().drain(|record| {
            let len = record.len() as u64;
            if position / ring_size != (position + len - 1) / ring_size {
                split += 1;
            }
            position += len;
            match parse_record(SAMPLE_TYPE, record).unwrap() {
                Record::Sample(sample) => {
                    assert_eq!(sample.identifier, Some(event.id()));
                    assert_eq!(which(sample.raw.unwrap()), 0);
                    samples += 1;
                }
                Record::Lost { lost: n, .. } => lost += n,
                Record::Other { type_ } => panic!("unexpected record type {type_}"),
            }
        });
        assert!(!stats.corrupt);
    });
    let calls: u64 = rounds.iter().map(|&n| u64::from(n)).sum();
    assert_eq!(samples + lost, calls);
    assert!(lost > 0, "the 400-call round overflowed the ring");
    // The event counts every call, the dropped samples' included, and
    // says how many it dropped (this kernel is 6.0 or later).
    let read = event.read().unwrap();
    assert_eq!((read.count, read.lost), (calls, Some(lost)));
    event.disable().unwrap();
    rounds_in_child(&cg.dir, cpu, &[10], || {});
    assert_eq!(
        event.read_count(),
        Ok(calls),
        "a disabled event counts nothing"
    );
    assert!(position > 3 * ring_size, "the ring wrapped several times");
    assert!(split > 0, "some records were split by the end of the ring");
}

/// The ring owner's descriptor becomes readable once the samples written
/// cross its wakeup watermark, and only then; the kernel reports each
/// crossing once.
#[test]
fn a_ring_wakes_its_poller_at_the_watermark() {
    let cg = TestCgroup::create("cgperf-sampling-wakeup");
    let dir = open_dir(&cg.dir);
    let cpu = cpus()[0];
    let (mut owner, _event) = one_page_ring(cpu, 1024, &dir);
    let mut ready = Vec::new();
    let now = std::time::Duration::ZERO;
    // A sample is some 50 bytes: 3 stay under 1 KiB, 40 more cross it
    // and still fit the 4 KiB ring.
    let mut seen = Vec::new();
    rounds_in_child(&cg.dir, cpu, &[3, 40], || {
        wait_readable(&[&owner], now, &mut ready).unwrap();
        seen.push(ready[0]);
        wait_readable(&[&owner], now, &mut ready).unwrap();
        seen.push(ready[0]);
    });
    assert_eq!(
        seen,
        [
            Readiness::Idle,
            Readiness::Idle,
            Readiness::Data,
            Readiness::Idle
        ]
    );
    let mut samples = 0;
    owner.ring_mut().drain(|_| samples += 1);
    assert_eq!(samples, 43);
}
