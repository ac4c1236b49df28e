//! The [`Config`] `cgperf stat` hands to the daemon's engine.

use crate::config::{self, CgroupPattern, CgroupSelector, Config, Origin, TracepointDef};
use crate::stat::args::Selection;

/// The backend `cgperf stat` counts with when no config names one: the
/// cgroup backend, as `perf stat -G` counts. `auto` would watch the bpf
/// backend's program for a second before trusting it (whether the kernel
/// hides switches from it), four times what counting a short command
/// takes, and the few cgroups `stat` counts are where the cgroup backend
/// costs least.
const STAT_BACKEND: config::BackendChoice = config::BackendChoice::Cgroup;

/// The config to count with: `file` (from `--config.file`) if given, else
/// `selection` with the daemon's defaults but the cgroup backend (see
/// [`STAT_BACKEND`]); counting `cgroups` (every group
/// and tracepoint in each) when there are any, else `file`'s cgroups.
/// With `energy`, energy is shared as `energy: {meter: auto}` would
/// where `file` has no `energy:` of its own.
///
/// The only place in `cgperf stat` that builds a [`Config`], so that a
/// change of its fields is one change here.
pub fn build(
    file: Option<Config>,
    selection: Selection,
    cgroups: &[CgroupPattern],
    per_cpu: bool,
    energy: bool,
) -> Config {
    let mut config = file.unwrap_or_else(|| Config {
        interval: config::DEFAULT_INTERVAL,
        per_cpu,
        groups: selection.groups,
        tracepoints: selection
            .tracepoints
            .into_iter()
            .map(|name| TracepointDef {
                label: name.to_string(),
                name,
                filter: None,
                by: Vec::new(),
                max_series: config::DEFAULT_MAX_SERIES,
                syscall_name: None,
                origin: Origin {
                    source: "-e".to_owned(),
                    line: 1,
                    column: 1,
                },
            })
            .collect(),
        probes: Vec::new(),
        ring_pages: config::DEFAULT_RING_PAGES,
        backend: STAT_BACKEND,
        cgroups: Vec::new(),
        max_cgroups: None,
        labels: Vec::new(),
        otlp: None,
        energy: None,
        metrics: Vec::new(),
        host: config::HostDef::default(),
        processes: Vec::new(),
        max_processes: config::DEFAULT_MAX_PROCESSES,
    });
    // `cgperf stat` counts its command's cgroups: what a config file
    // counts for the whole machine or for processes is no part of that.
    config.host = config::HostDef::default();
    config.processes = Vec::new();
    config.per_cpu |= per_cpu;
    if energy && config.energy.is_none() {
        config.energy = Some(config::EnergyDef {
            meter: config::MeterChoice::Auto,
            model: None,
            idle: config::IdlePolicy::None,
        });
    }
    if !cgroups.is_empty() {
        config.cgroups = cgroups
            .iter()
            .map(|pattern| CgroupSelector {
                pattern: pattern.clone(),
                groups: config.groups.iter().map(|g| g.name.clone()).collect(),
                tracepoints: config.tracepoints.iter().map(|t| t.label.clone()).collect(),
                probes: config.probes.iter().map(|p| p.label.clone()).collect(),
                metrics: config.metrics.iter().map(|m| m.name.clone()).collect(),
            })
            .collect();
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_config_stat_counts_with_the_cgroup_backend_and_a_config_keeps_its_own() {
        let selection = || Selection {
            groups: Vec::new(),
            tracepoints: Vec::new(),
        };
        let built = build(None, selection(), &[], false, false);
        assert_eq!(built.backend, config::BackendChoice::Cgroup);
        let mut file = build(None, selection(), &[], false, false);
        file.backend = config::BackendChoice::Bpf;
        let built = build(Some(file), selection(), &[], false, false);
        assert_eq!(built.backend, config::BackendChoice::Bpf);
    }
}
