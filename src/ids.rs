//! Typed identities, from plan to snapshot: what a series counts is named by
//! these, never by a bare string, and turned into label values only where a
//! snapshot is presented ([`GroupId::label`]).

use crate::config::{PROBE_GROUP, TRACEPOINT_GROUP};
use std::fmt;
use std::sync::{Arc, OnceLock};

/// A counter group: one of the config's `groups:`, or the counted
/// tracepoints or the probes, each counted as one group of their own.
///
/// Config validation refuses a `groups:` entry named like the last two
/// ([`crate::config::RESERVED_GROUPS`]), so two ids never share a label.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GroupId {
    /// A group of the config's `groups:`, by its name.
    Named(Arc<str>),
    /// The `tracepoints:` entries counted without `by:`.
    Tracepoints,
    /// The `probes:` entries.
    Probes,
}

impl GroupId {
    /// The id of a config group named `name`, or of the tracepoints or
    /// probes when `name` is their label.
    pub fn from_label(name: &str) -> Self {
        match name {
            TRACEPOINT_GROUP => Self::Tracepoints,
            PROBE_GROUP => Self::Probes,
            _ => Self::Named(name.into()),
        }
    }

    /// The `group` label of its series.
    pub fn label(&self) -> &str {
        match self {
            Self::Named(name) => name,
            Self::Tracepoints => TRACEPOINT_GROUP,
            Self::Probes => PROBE_GROUP,
        }
    }

    /// The `group` label as a shared string, for the many series that carry
    /// it: no copy per series.
    pub fn shared_label(&self) -> Arc<str> {
        static TRACEPOINTS: OnceLock<Arc<str>> = OnceLock::new();
        static PROBES: OnceLock<Arc<str>> = OnceLock::new();
        match self {
            Self::Named(name) => name.clone(),
            Self::Tracepoints => TRACEPOINTS.get_or_init(|| TRACEPOINT_GROUP.into()).clone(),
            Self::Probes => PROBES.get_or_init(|| PROBE_GROUP.into()).clone(),
        }
    }

    /// What one entry of this group is, for messages: a tracepoint, a
    /// probe, or an event of a counter group.
    pub fn entry_kind(&self) -> &'static str {
        match self {
            Self::Named(_) => "event",
            Self::Tracepoints => "tracepoint",
            Self::Probes => "probe",
        }
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One event of a group, by the series it feeds: its `event` label, and
/// whether it counts nanoseconds (exported as seconds). A reload that
/// changes a group keeps the totals of every event whose id it keeps.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    /// The `event` label.
    pub label: Arc<str>,
    /// Counts nanoseconds (`task-clock`, `cpu-clock`).
    pub clock: bool,
}

/// A tracepoint counted by field values (`by:`), by the series it feeds:
/// its `event` label (its `as:`, or its name) and the label names of its
/// fields. A reload that changes its filter or `max_series` keeps its
/// counts; one that changes its fields starts new series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SampledId {
    /// The `event` label.
    pub label: Arc<str>,
    /// The field label names, in the order written.
    pub fields: Arc<[Arc<str>]>,
}

impl fmt::Display for SampledId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// A counted cgroup, as long as it is counted: given by the engine when it
/// admits a cgroup and never given again, so that a cgroup removed and
/// created again under the same path starts new series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CgroupSlot(pub u64);
