//! The names a config's selectors may refer to, as written: what a
//! selector naming a broken entry is checked against, so that it is not
//! blamed for the entry's own mistake.

use super::schema::{RawConfig, RawTracepoint};

/// The names a config's selectors may refer to, as written.
pub(super) struct Written {
    pub(super) groups: Vec<String>,
    pub(super) tracepoints: Vec<String>,
    pub(super) probes: Vec<String>,
    pub(super) metrics: Vec<String>,
}

impl Written {
    /// Every group name, tracepoint label (`as:`, else the name) and probe
    /// `as:` written in `raw`, valid or not.
    pub(super) fn of(raw: &RawConfig) -> Self {
        let groups = raw.groups.as_ref().map_or_else(Vec::new, |g| {
            g.value
                .0
                .iter()
                .map(|(name, _)| name.value.clone())
                .collect()
        });
        let tracepoints = raw.tracepoints.as_ref().map_or_else(Vec::new, |list| {
            list.value
                .iter()
                .map(|item| match &item.value {
                    RawTracepoint::Name(name) => name.clone(),
                    RawTracepoint::Entry(entry) => {
                        entry.label.as_ref().unwrap_or(&entry.name).value.clone()
                    }
                })
                .collect()
        });
        let probes = raw.probes.as_ref().map_or_else(Vec::new, |list| {
            list.value
                .iter()
                .filter_map(|item| item.value.label.as_ref().map(|l| l.value.clone()))
                .collect()
        });
        let metrics = raw.metrics.as_ref().map_or_else(Vec::new, |list| {
            list.value
                .iter()
                .map(|item| item.value.name().to_owned())
                .collect()
        });
        Self {
            groups,
            tracepoints,
            probes,
            metrics,
        }
    }
}
