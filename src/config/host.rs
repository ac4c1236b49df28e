//! Validation of the `host:` section: groups and tracepoints counted once
//! for the whole machine (system-wide, as `perf stat -a` counts), never per
//! cgroup. That is the only way to count the PMUs outside the cores
//! (uncore, `power/`, `cstate_*`), which the kernel counts system-wide only.
//! Its `metrics:` are formulas over what it counts, written and scheduled
//! as the top-level ones are (the same validation), computed for the whole
//! machine.
//!
//! ```yaml
//! host:
//!   groups:
//!     energy: [power/energy-pkg/]
//!     machine: [cpu-clock, context-switches]
//!   tracepoints: [irq:irq_handler_entry]
//!   metrics:
//!     - name: switches_per_cpu_second
//!       expr: context-switches / cpu-clock
//! ```

use serde_saphyr::Spanned;

use super::schema::RawHost;
use super::validate::Validator;
use super::{ConfigError, GroupDef, MetricDef, TracepointDef};

/// What `host:` counts for the whole machine.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostDef {
    /// Its groups, in the order written; their names are unique among all
    /// the config's groups, so that a group name says which one it is in
    /// logs, `cgperf check` and `cgperf_host_group_supported`.
    pub groups: Vec<GroupDef>,
    /// Its tracepoints, counted (never `by:`), in the order written.
    pub tracepoints: Vec<TracepointDef>,
    /// Its metrics, over what it counts: the groups and tracepoints their
    /// events and tracepoints were scheduled in are among the two above.
    pub metrics: Vec<MetricDef>,
}

impl HostDef {
    /// Whether it counts nothing (its metrics schedule what they need).
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.tracepoints.is_empty()
    }
}

impl Validator<'_> {
    /// The `host:` section; `others` are the top-level groups, whose names
    /// its groups may not take. A broken entry is reported and left out.
    pub(super) fn host(&self, raw: Spanned<RawHost>, others: &[GroupDef]) -> HostDef {
        let raw = raw.value;
        let groups = raw.groups.map(|g| self.groups(g.value)).unwrap_or_default();
        let mut groups: Vec<GroupDef> = groups
            .into_iter()
            .filter(|g| self.keep(own_name(g, others)).is_some())
            .collect();
        let mut tracepoints: Vec<TracepointDef> = raw
            .tracepoints
            .map(|list| self.tracepoints(list.value))
            .unwrap_or_default()
            .into_iter()
            .filter(|t| self.keep(counted(t)).is_some())
            .collect();
        let written = raw.metrics.map(|list| list.value).unwrap_or_default();
        let (metrics, scheduled) = self.metrics(written, (&groups, &tracepoints, &[]));
        groups.extend(scheduled.groups);
        tracepoints.extend(scheduled.tracepoints);
        HostDef {
            groups,
            tracepoints,
            metrics,
        }
    }
}

/// A host group whose name no top-level group has.
fn own_name(group: &GroupDef, others: &[GroupDef]) -> Result<(), ConfigError> {
    let (Some(origin), true) = (&group.origin, others.iter().any(|o| o.name == group.name)) else {
        return Ok(());
    };
    Err(origin
        .error(format!(
            "`host:` group `{}` has the name of a group of the top-level `groups:`",
            group.name
        ))
        .hint(format!(
            "give the host group a name of its own, e.g. `host_{}`",
            group.name
        )))
}

/// A host tracepoint without `by:`: its hits are counted, not sampled.
fn counted(def: &TracepointDef) -> Result<(), ConfigError> {
    if def.by.is_empty() {
        return Ok(());
    }
    Err(def
        .origin
        .error(format!(
            "`by:` is not supported for `host:` tracepoints ({})",
            def.name
        ))
        .hint(
            "count it by field value per cgroup under the top-level `tracepoints:` \
             (the cgroup `/` holds every task of the machine), or remove `by:` to count \
             its hits for the whole machine",
        ))
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, parse};

    fn ok(yaml: &str) -> Config {
        parse("h.yaml", yaml).unwrap_or_else(|e| panic!("{yaml}\n{e}"))
    }

    fn err(yaml: &str) -> ConfigError {
        parse("h.yaml", yaml).expect_err(yaml)
    }

    #[test]
    fn host_groups_and_tracepoints_are_kept_in_the_order_written() {
        let config = ok(
            "host:\n  groups:\n    b: [msr/tsc/]\n    a: [cpu-clock, cs]\n  \
                         tracepoints: [irq:irq_handler_entry, {name: sched:sched_switch, as: sw}]\n",
        );
        let names: Vec<&str> = config.host.groups.iter().map(|g| &*g.name).collect();
        assert_eq!(names, ["b", "a"]);
        let origin = config.host.groups[0].origin.as_ref().unwrap();
        assert_eq!((origin.line, origin.column), (3, 5));
        let labels: Vec<&str> = config.host.tracepoints.iter().map(|t| &*t.label).collect();
        assert_eq!(labels, ["irq:irq_handler_entry", "sw"]);
        // Nothing for cgroups: the default selector counts nothing.
        assert!(config.groups.is_empty() && config.tracepoints.is_empty());
    }

    #[test]
    fn without_host_nothing_is_counted_for_the_machine() {
        assert!(ok("groups:\n  a: [cs]\n").host.is_empty());
        assert!(ok("groups:\n  a: [cs]\nhost:\n").host.is_empty());
    }

    #[test]
    fn an_empty_host_section_and_nothing_else_counts_nothing() {
        let e = err("host:\n  groups: {}\n");
        assert!(e.to_string().contains("nothing to count"), "{e}");
    }

    #[test]
    fn a_host_group_may_not_take_a_top_level_groups_name() {
        let e = err("groups:\n  sched: [cs]\nhost:\n  groups:\n    sched: [cpu-clock]\n");
        assert_eq!((e.line, e.column), (Some(5), Some(5)), "{e}");
        assert!(e.to_string().contains("host_sched"), "{e}");
    }

    #[test]
    fn host_tracepoints_are_counted_not_split_by_field() {
        let e = err("host:\n  tracepoints:\n    - {name: sched:sched_switch, by: [prev_pid]}\n");
        assert_eq!(e.line, Some(3), "{e}");
        assert!(e.to_string().contains("`by:` is not supported"), "{e}");
        assert!(e.to_string().contains("remove `by:`"), "{e}");
    }

    #[test]
    fn host_metrics_are_over_what_the_host_counts_and_schedule_the_rest_for_it() {
        let config = ok("groups:\n  sw: [cs]\n\
                         host:\n  groups:\n    machine: [cpu-clock]\n  \
                         tracepoints: [{name: irq:irq_handler_entry, as: irqs}]\n  \
                         metrics:\n    - {name: irqs_per_cpu_second, expr: irqs / cpu-clock}\n    \
                         - {name: migrations, expr: cpu-migrations}\n");
        let host = &config.host;
        let names: Vec<&str> = host.metrics.iter().map(|m| &*m.name).collect();
        assert_eq!(names, ["irqs_per_cpu_second", "migrations"]);
        let inputs: Vec<(&str, &str)> = host.metrics[0]
            .inputs
            .iter()
            .map(|i| (&*i.group, &*i.event))
            .collect();
        assert_eq!(inputs, [("tracepoints", "irqs"), ("machine", "cpu-clock")]);
        // What the host does not count is scheduled for the host, in a
        // group of the metric's own; the top level is left alone.
        let scheduled: Vec<&str> = host.groups.iter().map(|g| &*g.name).collect();
        assert_eq!(scheduled, ["machine", "metric:migrations"]);
        let top: Vec<&str> = config.groups.iter().map(|g| &*g.name).collect();
        assert_eq!(top, ["sw"]);
        assert!(config.metrics.is_empty());
    }

    #[test]
    fn a_host_metric_sees_only_what_the_host_counts() {
        // `sw` is a top-level group, not an event: nothing the host can use.
        let e = err("groups:\n  sw: [cs]\nhost:\n  metrics:\n    - {name: m, expr: sw / 2}\n");
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("\"sw\""), "{e}");
        let e = err(
            "host:\n  groups:\n    machine: [cpu-clock]\n  metrics:\n    \
                     - {name: m, expr: cpu-clokc / 2}\n",
        );
        assert_eq!(e.line, Some(5), "{e}");
        assert!(e.to_string().contains("cpu-clock"), "did you mean: {e}");
        // A host section of metrics alone counts what they need.
        let alone = ok("host:\n  metrics:\n    - {name: m, expr: cs}\n");
        assert_eq!(alone.host.groups.len(), 1);
    }

    #[test]
    fn mistakes_inside_host_are_positioned_like_anywhere_else() {
        let e = err("host:\n  grups: {a: [cs]}\n");
        assert_eq!(e.line, Some(2), "{e}");
        let e = err("host:\n  groups:\n    a: [cs, nosuchevent]\n");
        assert_eq!((e.line, e.column), (Some(3), Some(13)), "{e}");
        let e = err("host:\n  tracepoints: [notatracepoint]\n");
        assert_eq!(e.line, Some(2), "{e}");
    }
}
