//! The labels of a point, borrowed from the snapshot, in the order the
//! exposition writes them: one shape per kind of series, so that a family
//! cannot show a label its target does not have.

use crate::snapshot::{EnergyScope, Scope};
use std::sync::Arc;

/// A label value: text, or a number (a CPU, socket or die).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Text.
    Str(&'a str),
    /// A number: the `cpu`, `socket` and `die` labels.
    Number(u32),
}

/// The labels of one point, borrowed from the snapshot.
#[derive(Debug, Clone, Copy)]
pub enum Labels<'a> {
    /// A per-cgroup series: `cgroup`, the labels from its path, `group`,
    /// `event` (counters only), the fields of `by:` tracepoint counts, and
    /// `cpu` (per-CPU output only).
    Series {
        /// cgroup path.
        cgroup: &'a str,
        /// Labels derived from the path.
        extra: &'a [(&'static str, Box<str>)],
        /// Group name.
        group: &'a str,
        /// Event, for counters.
        event: Option<&'a str>,
        /// Field values of a `by:` tracepoint count.
        fields: &'a [(Arc<str>, Box<str>)],
        /// CPU, for per-CPU output.
        cpu: Option<u32>,
    },
    /// A metric's value in a cgroup: `cgroup`, the labels from its path,
    /// `metric`.
    Metric {
        /// cgroup path.
        cgroup: &'a str,
        /// Labels derived from the path.
        extra: &'a [(&'static str, Box<str>)],
        /// The metric's name.
        metric: &'a str,
    },
    /// A series of cAdvisor's perf families (`--compat=cadvisor`), its
    /// labels in the order cAdvisor writes them.
    Cadvisor {
        /// The cgroup path.
        id: &'a str,
        /// The container ID, else empty.
        name: &'a str,
        /// The container's image, else empty.
        image: &'a str,
        /// The container's name in its pod, else empty.
        container: &'a str,
        /// The pod's name, else empty.
        pod: &'a str,
        /// The pod's namespace, else empty.
        namespace: &'a str,
        /// The CPU with per-CPU output; empty without.
        cpu: Option<u32>,
        /// The event.
        event: &'a str,
    },
    /// A series of `host:`: `group`, `event`, then what it covers
    /// (`cpu`, `socket`, or `socket` and `die`; nothing for the machine).
    Host {
        /// Group name.
        group: &'a str,
        /// Event, for counters (not group times).
        event: Option<&'a str>,
        /// What it covers.
        scope: Scope,
    },
    /// A series of `processes:`: its processes' labels, `group`, `event`
    /// (counters only).
    Process {
        /// Whose.
        of: ProcessLabels<'a>,
        /// Group name.
        group: &'a str,
        /// Event, for counters (not group times).
        event: Option<&'a str>,
    },
    /// A metric of a series of `processes:`: its processes' labels,
    /// `metric`.
    ProcessMetric {
        /// Whose.
        of: ProcessLabels<'a>,
        /// The metric's name.
        metric: &'a str,
    },
    /// A cgroup's energy: `cgroup`, the labels from its path, then the
    /// meter's `socket`, `domain` and `source`, and `weight`.
    Energy {
        /// cgroup path.
        cgroup: &'a str,
        /// Labels derived from the path.
        extra: &'a [(&'static str, Box<str>)],
        /// Which meter.
        scope: EnergyScope,
        /// What the share was weighed by.
        weight: &'a str,
    },
    /// A `processes:` series' energy: its processes' labels, then the
    /// meter's `socket`, `domain` and `source`, and `weight`.
    ProcessEnergy {
        /// Whose.
        of: ProcessLabels<'a>,
        /// Which meter.
        scope: EnergyScope,
        /// What the share was weighed by.
        weight: &'a str,
    },
    /// A meter's energy, or what of it no cgroup got: `socket`, `domain`,
    /// `source`, and `share` (`idle`, `system`) for the latter.
    Meter {
        /// Which meter.
        scope: EnergyScope,
        /// Which part, for what no cgroup got.
        share: Option<&'a str>,
    },
    /// Up to three fixed labels (`group`, `event`, `reason`, and
    /// `cgperf_build_info`'s `version`, `revision`, `rustversion`).
    Fixed([Option<(&'static str, &'a str)>; 3]),
}

impl<'a> Labels<'a> {
    /// No labels: a process-wide figure.
    pub const NONE: Labels<'static> = Labels::Fixed([None, None, None]);

    /// One fixed label, e.g. `reason`.
    pub fn one(name: &'static str, value: &'a str) -> Self {
        Self::Fixed([Some((name, value)), None, None])
    }

    /// Two fixed labels, e.g. `group` and `reason`.
    pub(super) fn two(a: (&'static str, &'a str), b: (&'static str, &'a str)) -> Self {
        Self::Fixed([Some(a), Some(b), None])
    }

    /// True for a point without labels (a process-wide self-metric).
    pub fn is_empty(&self) -> bool {
        matches!(self, Self::Fixed([None, None, None]))
    }

    /// Calls `f` with every label, in exposition order.
    pub fn for_each<E>(
        &self,
        mut f: impl FnMut(&'a str, Value<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        match *self {
            Self::Series {
                cgroup,
                extra,
                group,
                event,
                fields,
                cpu,
            } => {
                f("cgroup", Value::Str(cgroup))?;
                for (name, value) in extra {
                    f(name, Value::Str(value))?;
                }
                f("group", Value::Str(group))?;
                if let Some(event) = event {
                    f("event", Value::Str(event))?;
                }
                for (name, value) in fields {
                    f(name, Value::Str(value))?;
                }
                if let Some(cpu) = cpu {
                    f("cpu", Value::Number(cpu))?;
                }
            }
            Self::Metric {
                cgroup,
                extra,
                metric,
            } => {
                f("cgroup", Value::Str(cgroup))?;
                for (name, value) in extra {
                    f(name, Value::Str(value))?;
                }
                f("metric", Value::Str(metric))?;
            }
            Self::Cadvisor {
                id,
                name,
                image,
                container,
                pod,
                namespace,
                cpu,
                event,
            } => {
                f("container", Value::Str(container))?;
                match cpu {
                    Some(cpu) => f("cpu", Value::Number(cpu))?,
                    None => f("cpu", Value::Str(""))?,
                }
                f("event", Value::Str(event))?;
                f("id", Value::Str(id))?;
                f("image", Value::Str(image))?;
                f("name", Value::Str(name))?;
                f("namespace", Value::Str(namespace))?;
                f("pod", Value::Str(pod))?;
            }
            Self::Host {
                group,
                event,
                scope,
            } => {
                f("group", Value::Str(group))?;
                if let Some(event) = event {
                    f("event", Value::Str(event))?;
                }
                match scope {
                    Scope::Machine => {}
                    Scope::Cpu(cpu) => f("cpu", Value::Number(cpu))?,
                    Scope::Socket(socket) => f("socket", Value::Number(socket))?,
                    Scope::Die { socket, die } => {
                        f("socket", Value::Number(socket))?;
                        f("die", Value::Number(die))?;
                    }
                }
            }
            Self::Process { of, group, event } => {
                of.for_each(&mut f)?;
                f("group", Value::Str(group))?;
                if let Some(event) = event {
                    f("event", Value::Str(event))?;
                }
            }
            Self::ProcessMetric { of, metric } => {
                of.for_each(&mut f)?;
                f("metric", Value::Str(metric))?;
            }
            Self::Energy {
                cgroup,
                extra,
                scope,
                weight,
            } => {
                f("cgroup", Value::Str(cgroup))?;
                for (name, value) in extra {
                    f(name, Value::Str(value))?;
                }
                meter(scope, &mut f)?;
                f("weight", Value::Str(weight))?;
            }
            Self::ProcessEnergy { of, scope, weight } => {
                of.for_each(&mut f)?;
                meter(scope, &mut f)?;
                f("weight", Value::Str(weight))?;
            }
            Self::Meter { scope, share } => {
                meter(scope, &mut f)?;
                if let Some(share) = share {
                    f("share", Value::Str(share))?;
                }
            }
            Self::Fixed(pairs) => {
                for (name, value) in pairs.into_iter().flatten() {
                    f(name, Value::Str(value))?;
                }
            }
        }
        Ok(())
    }
}

/// The labels of the meter of an energy series: `socket`, `domain`,
/// `source`.
fn meter<'a, E>(
    scope: EnergyScope,
    f: &mut impl FnMut(&'a str, Value<'a>) -> Result<(), E>,
) -> Result<(), E> {
    f("socket", Value::Number(scope.socket))?;
    f("domain", Value::Str(scope.domain))?;
    f("source", Value::Str(scope.source))
}

/// Which processes a series of `processes:` counts: the entry (`process`),
/// and the `comm` and `pid` where the entry splits its series by them.
#[derive(Debug, Clone, Copy)]
pub struct ProcessLabels<'a> {
    /// The entry's name.
    pub process: &'a str,
    /// The comm, on request.
    pub comm: Option<&'a str>,
    /// The pid, on request.
    pub pid: Option<u32>,
}

impl<'a> ProcessLabels<'a> {
    /// Calls `f` with each of them, in exposition order.
    fn for_each<E>(
        &self,
        f: &mut impl FnMut(&'a str, Value<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        f("process", Value::Str(self.process))?;
        if let Some(comm) = self.comm {
            f("comm", Value::Str(comm))?;
        }
        if let Some(pid) = self.pid {
            f("pid", Value::Number(pid))?;
        }
        Ok(())
    }
}
