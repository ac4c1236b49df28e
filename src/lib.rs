//! cgperf counts CPU performance events per cgroup and exports them.
//!
//! Data flows one way: [`config`] (parse and validate) → [`plan`] (resolve
//! events on this machine; the counting [`backend`]'s probe judges support)
//! → [`perf`] (open and read groups in cgroup mode) → [`sampler`] (per-interval scaling, accumulation) →
//! [`snapshot`] → [`exporter`]. [`discovery`] finds the cgroups to count.

pub mod backend;
pub mod check;
pub mod cli;
pub mod config;
pub mod cpus;
pub mod cri;
pub mod deadline;
pub mod discovery;
pub mod events;
pub mod exporter;
pub mod ids;
pub mod labels;
pub mod list;
pub mod mountinfo;
pub mod perf;
pub mod plan;
pub mod privileges;
pub mod reload;
pub mod sampler;
pub mod snapshot;
pub mod stat;
pub mod tracefs;
pub mod userfile;
