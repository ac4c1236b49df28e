//! A `cgroups:` entry, and the lists by which an entry (of `cgroups:` or
//! `processes:`) selects groups, tracepoints, probes and metrics from the
//! top level: every name it lists must be defined there, once.

use serde_saphyr::Location;

use super::CgroupSelector;
use super::cgroup::{CgroupPattern, PatternError};
use super::error::{ConfigError, quote};
use super::schema::{RawSelector, Text, TextList};
use super::validate::{Listed, Validator};
use super::written::Written;
use crate::suggest::did_you_mean;
use std::collections::HashSet;

impl Validator<'_> {
    /// Validates one `cgroups:` entry; `here` names it (`` `cgroups[2]` ``).
    pub(super) fn selector(
        &self,
        here: &str,
        at: Location,
        raw: RawSelector,
        written: &Written,
    ) -> Result<(CgroupSelector, Option<Location>), ConfigError> {
        let pattern_error =
            |text: &Text, e: PatternError| self.error(text.referenced, e.message).hint(e.hint);
        let pattern = match (&raw.path, &raw.glob) {
            (Some(path), None) => {
                CgroupPattern::exact(&path.value).map_err(|e| pattern_error(path, e))?
            }
            (None, Some(glob)) => {
                CgroupPattern::glob(&glob.value).map_err(|e| pattern_error(glob, e))?
            }
            (Some(_), Some(glob)) => {
                return Err(self
                    .error(
                        glob.referenced,
                        format!("{here} has both `path` and `match`"),
                    )
                    .hint(
                        "use `path:` for exactly one cgroup or `match:` for a glob; \
                         write two entries to have both",
                    ));
            }
            (None, None) => {
                return Err(self
                    .error(at, format!("{here} has neither `path` nor `match`"))
                    .hint(
                        "add `path: /system.slice` (exactly one cgroup) \
                         or `match: /system.slice/*` (a glob)",
                    ));
            }
        };
        fn names(list: &[String]) -> Vec<&str> {
            list.iter().map(String::as_str).collect()
        }
        let before = self.mistakes();
        let selected_groups = self.select(
            here,
            Kind::Group,
            raw.groups.as_ref(),
            &names(&written.groups),
        );
        let selected_tracepoints = self.select(
            here,
            Kind::Tracepoint,
            raw.tracepoints.as_ref(),
            &names(&written.tracepoints),
        );
        let selected_probes = self.select(
            here,
            Kind::Probe,
            raw.probes.as_ref(),
            &names(&written.probes),
        );
        let selected_metrics = self.select(
            here,
            Kind::Metric,
            raw.metrics.as_ref(),
            &names(&written.metrics),
        );
        if self.mistakes() == before
            && selected_groups.is_empty()
            && selected_tracepoints.is_empty()
            && selected_probes.is_empty()
            && selected_metrics.is_empty()
        {
            return Err(self
                .error(
                    at,
                    format!(
                        "{here} selects no groups, tracepoints or probes, so it would count nothing"
                    ),
                )
                .hint(
                    "list at least one group, tracepoint or probe, or drop \
                     `groups:`/`tracepoints:`/`probes:` from the entry to count all of them",
                ));
        }
        let selector = CgroupSelector {
            pattern,
            groups: selected_groups,
            tracepoints: selected_tracepoints,
            probes: selected_probes,
            metrics: selected_metrics,
        };
        Ok((selector, raw.metrics.map(|list| list.referenced)))
    }

    /// Resolves a selector's `groups:`, `tracepoints:` or `probes:` to names
    /// defined at the top level, in their order; absent means all of them.
    /// Each name that is not defined, or listed twice, is reported.
    pub(super) fn select(
        &self,
        here: &str,
        kind: Kind,
        list: Option<&TextList>,
        defined: &[&str],
    ) -> Vec<String> {
        let Some(list) = list else {
            return defined.iter().map(|name| (*name).to_owned()).collect();
        };
        let known: HashSet<&str> = defined.iter().copied().collect();
        let mut wanted: Listed<&str> = Listed::with_capacity(list.value.len());
        for item in &list.value {
            self.keep(self.wanted(here, kind, item, (defined, &known), &mut wanted));
        }
        defined
            .iter()
            .filter(|name| wanted.contains(*name))
            .map(|name| (*name).to_owned())
            .collect()
    }

    /// One name of a selector's list, appended to `wanted` unless it is not
    /// defined or already there.
    fn wanted<'a>(
        &self,
        here: &str,
        kind: Kind,
        item: &'a Text,
        (defined, known): (&[&str], &HashSet<&str>),
        wanted: &mut Listed<&'a str>,
    ) -> Result<(), ConfigError> {
        let name = item.value.as_str();
        if !known.contains(name) {
            let listing = if defined.is_empty() {
                format!("no {}s are defined under `{}:`", kind.noun(), kind.key())
            } else {
                format!("defined {}s: {}", kind.noun(), defined.join(", "))
            };
            let hint = match did_you_mean(name, defined.iter().copied()) {
                Some(close) => format!("did you mean `{close}`? {listing}"),
                None => format!("{}; {listing}", kind.fix()),
            };
            let message = match kind {
                Kind::Group => format!("{here} refers to undefined group {}", quote(name)),
                _ => format!(
                    "{here} refers to {} {}, which is not in the top-level `{}:` list",
                    kind.noun(),
                    quote(name),
                    kind.key()
                ),
            };
            return Err(self.error(item.referenced, message).hint(hint));
        }
        self.unique(kind.noun(), &format!(" in {here}"), wanted, name, item)
    }
}

/// What a selector's list refers to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Group,
    Tracepoint,
    Probe,
    Metric,
}

impl Kind {
    pub(super) fn noun(self) -> &'static str {
        match self {
            Self::Group => "group",
            Self::Tracepoint => "tracepoint",
            Self::Probe => "probe",
            Self::Metric => "metric",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Self::Group => "groups",
            Self::Tracepoint => "tracepoints",
            Self::Probe => "probes",
            Self::Metric => "metrics",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Self::Group => "define it under `groups:`",
            Self::Tracepoint => {
                "add it to the top-level `tracepoints:` list (or use its `as:` name) or remove it here"
            }
            Self::Probe => "use the `as:` name of an entry of the top-level `probes:` list",
            Self::Metric => "define it under the top-level `metrics:` list",
        }
    }
}
