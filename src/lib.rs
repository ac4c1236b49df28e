//! cgperf counts CPU performance events per cgroup and exports them.
//!
//! Data flows one way: [`config`] (parse and validate) → [`plan`] (resolve
//! events on this machine) → [`engine`] (when to read; drives every
//! [`target`]: the [`cgroups`], counted through a counting [`backend`]
//! (open, read, close; over [`perf`]), the [`host`] and each [`process`])
//! into [`totals`] → [`snapshot`] (with the [`metrics`] of each interval) →
//! [`exporter`]. [`discovery`] finds the cgroups to count.

pub mod backend;
pub mod cgroups;
pub mod check;
pub mod cli;
pub mod config;
pub mod cpus;
pub mod cri;
pub mod daemon;
pub mod deadline;
pub mod discovery;
pub mod energy;
pub mod engine;
pub mod escape;
pub mod events;
pub mod exporter;
pub mod host;
pub mod ids;
pub mod kallsyms;
pub mod labels;
pub mod list;
pub mod machine;
pub mod metrics;
pub mod mountinfo;
pub mod perf;
pub mod plan;
pub mod privileges;
pub mod process;
pub mod reload;
pub mod snapshot;
pub mod stat;
pub mod suggest;
pub mod target;
pub mod totals;
pub mod tracefs;
pub mod userfile;
