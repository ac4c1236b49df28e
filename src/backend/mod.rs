//! Counting backends: the mechanisms that make the kernel count what the
//! engine asks for, and read it back.
//!
//! The engine (which cgroups, which groups, admission, totals, snapshot)
//! decides; a backend opens, reads and closes. Everything the engine asks of
//! a mechanism goes through [`Probe`] and [`Backend`], so a second mechanism
//! is one new module beside [`cgroup`].

pub mod cgroup;
