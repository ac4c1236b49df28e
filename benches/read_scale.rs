//! Cost of reading and scaling one group, against the floor: a bare `read()`
//! of the same group fd into the same buffer size, measured in the same run.
//!
//! Run: `cargo bench --bench read_scale` (as root: it opens perf events in
//! cgroup mode on the root cgroup).

use cgperf::discovery::CgroupFs;
use cgperf::events::{PMU_ROOT, parse_event};
use cgperf::ids::{CgroupSlot, EventId, GroupId};
use cgperf::perf::{CounterGroup, Target, read_buffer_words};
use cgperf::totals::{Baseline, GroupKey, Totals};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::os::fd::{AsFd, AsRawFd};

const EVENTS: [&str; 4] = [
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
];

fn open_group() -> CounterGroup {
    let attrs: Vec<_> = EVENTS
        .iter()
        .map(|e| {
            parse_event(e)
                .expect("known event")
                .resolve(
                    std::path::Path::new(PMU_ROOT),
                    &cgperf::events::EventTables::none(),
                )
                .expect("software events resolve")
        })
        .collect();
    let root = CgroupFs::locate().expect("cgroup2 is mounted");
    let dir = std::fs::File::open(root.root()).expect("root cgroup opens");
    CounterGroup::open(&attrs, Target::Cgroup(dir.as_fd()), 0)
        .expect("software group opens as root")
}

/// Runs the benchmark on CPU 0, where the group counts: a read from another
/// CPU costs a cross-CPU call whose price depends on what that CPU is doing,
/// which would drown the difference being measured.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            eprintln!(
                "could not pin to CPU 0: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    pin_to_cpu0();
    let mut group = open_group();
    let words = read_buffer_words(EVENTS.len());
    let mut raw = vec![0u64; words];
    let fd = group.leader_fd().as_raw_fd();
    c.bench_function("bare read() syscall", |b| {
        b.iter(|| {
            // SAFETY: the buffer holds `words` u64 and the fd is open.
            let n = unsafe { libc::read(fd, raw.as_mut_ptr().cast(), words * 8) };
            black_box(n)
        })
    });
    let events: Vec<EventId> = EVENTS
        .iter()
        .map(|e| EventId {
            label: (*e).into(),
            clock: false,
        })
        .collect();
    // Read into the totals store as the cgroup backend does.
    let mut totals = Totals::default();
    let handle = totals.group(&GroupKey {
        cgroup: CgroupSlot(0),
        group: GroupId::Named("bench".into()),
        cpu: 0,
    });
    let columns = totals.columns(handle, &events);
    let mut baseline = Baseline::new(EVENTS.len());
    c.bench_function("cgperf read + parse + scale", |b| {
        b.iter(|| {
            if let Ok((read, ids)) = group.read() {
                black_box(totals.add(handle, &columns, |delta| baseline.delta(&read, ids, delta)));
            }
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
