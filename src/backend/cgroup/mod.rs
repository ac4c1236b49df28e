//! The cgroup backend: one perf event per (cgroup, event, CPU), opened in
//! cgroup mode, so that the kernel counts only while a task of that cgroup
//! (or of a descendant) runs on the CPU.

mod probe;

pub use probe::CgroupProbe;
