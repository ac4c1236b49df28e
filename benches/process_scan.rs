//! What finding processes costs at each collection when the config has
//! `processes:`: reading `/proc/PID/stat` of every process (`all_processes`),
//! against the floor of listing `/proc` alone, with this machine's
//! processes and with 1,000 more (idle children started for the run).
//!
//! Run: `cargo bench --bench process_scan`.

use cgperf::process::{PROC_ROOT, all_processes};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Idle processes, killed when dropped.
struct Idle(Vec<Child>);

impl Idle {
    fn start(n: usize) -> Self {
        let children = (0..n)
            .map(|_| {
                Command::new("sleep")
                    .arg("600")
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("sleep runs")
            })
            .collect();
        Self(children)
    }
}

impl Drop for Idle {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The floor: the names in `/proc`, which every scan lists first.
fn list_only(root: &Path) -> usize {
    std::fs::read_dir(root)
        .map(|dir| dir.flatten().count())
        .unwrap_or(0)
}

fn bench(c: &mut Criterion) {
    let root = Path::new(PROC_ROOT);
    for (name, extra) in [("this machine", 0), ("1,000 more", 1000)] {
        let _idle = Idle::start(extra);
        let n = all_processes(root).map(|p| p.len()).unwrap_or(0);
        let mut group = c.benchmark_group(format!("{name} ({n} processes)"));
        group.bench_function("list /proc only", |b| b.iter(|| black_box(list_only(root))));
        group.bench_function("all_processes", |b| {
            b.iter(|| black_box(all_processes(root).map(|p| p.len())))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
