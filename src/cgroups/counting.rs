//! Which cgroups are counted, and with what: admission in priority order
//! within the limits, reconciling on reloads, and the totals that live
//! while a cgroup is counted. The mechanism is a [`Backend`]'s.

use super::keys::{SeriesKeys, Shown};
use crate::backend::{Backend, Cgroup, Outcome, Wanted};
use crate::config::MetricDef;
use crate::cpus::CpuChanges;
use crate::cri::Names;
use crate::discovery::{CgroupFs, Found};
use crate::ids::CgroupSlot;
use crate::labels::{Extractor, extract};
use crate::metrics::LastTotals;
use crate::plan::Plan;
use crate::snapshot::{Labels, SkipReason};
use crate::totals::Totals;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A counted cgroup.
#[derive(Debug)]
pub(super) struct Entry {
    pub slot: CgroupSlot,
    pub path: Arc<str>,
    ino: u64,
    selectors: Vec<usize>,
    /// The plan generation `wanted` was made from.
    generation: u64,
    labels: Labels,
    /// Its labels name a pod or container whose names the runtime has not
    /// given yet.
    pub unnamed: bool,
    /// What it counts.
    wanted: Wanted,
    /// The metrics computed from what it counts.
    pub metrics: Vec<Arc<MetricDef>>,
    /// Their inputs' totals at the last snapshot.
    pub last: LastTotals,
    /// When counting it began: the start of all its series.
    pub created: SystemTime,
    /// The same moment on the monotonic clock, from which its metrics'
    /// `duration_time` is measured.
    pub began: Instant,
    /// The keys of its series, kept across snapshots.
    pub keys: SeriesKeys,
    /// Its series in the last snapshot, while what names them (its
    /// labels, what it counts) stays the same.
    pub shown: Option<Shown>,
}

impl Entry {
    /// Its extra labels.
    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    /// Gives it other labels: its series are named anew.
    pub fn set_labels(&mut self, labels: Labels) {
        self.labels = labels;
        self.shown = None;
    }

    /// What it counts.
    pub fn wanted(&self) -> &Wanted {
        &self.wanted
    }

    /// Has it count something else: its series are made anew.
    fn set_wanted(&mut self, wanted: Wanted) {
        self.wanted = wanted;
        self.shown = None;
    }
}

/// The counted cgroups, their totals, and the backend that counts them.
#[derive(Debug)]
pub(super) struct Counting<B> {
    pub backend: B,
    pub totals: Totals,
    /// By path, so that every snapshot lists them in the same order.
    pub entries: BTreeMap<String, Entry>,
    next_slot: u64,
    /// cgroups not counted at the last scan, by reason.
    pub skipped: BTreeMap<SkipReason, u64>,
    /// Bumped by each reload: entries of an older one are reconciled.
    generation: u64,
    max_cgroups: Option<usize>,
    extractors: Vec<Extractor>,
}

impl<B: Backend> Counting<B> {
    pub fn new(backend: B, max_cgroups: Option<usize>, extractors: Vec<Extractor>) -> Self {
        Self {
            backend,
            totals: Totals::default(),
            entries: BTreeMap::new(),
            next_slot: 0,
            skipped: SkipReason::ALL.iter().map(|r| (*r, 0)).collect(),
            generation: 0,
            max_cgroups,
            extractors,
        }
    }

    /// A new plan is in force: every cgroup is reconciled with it at the
    /// next [`Counting::sync`]; labels follow the new extractors now.
    pub fn reloaded(
        &mut self,
        plan: &Plan,
        max_cgroups: Option<usize>,
        extractors: Vec<Extractor>,
        named: bool,
    ) {
        self.generation += 1;
        self.max_cgroups = max_cgroups;
        self.extractors = extractors;
        self.backend.configure(plan);
        for entry in self.entries.values_mut() {
            entry.set_labels(labels_for(&entry.path, &self.extractors));
            entry.unnamed = named && nameable(&entry.labels);
        }
    }

    /// Reads everything into the totals.
    pub fn read(&mut self) {
        self.backend.read(&mut self.totals);
    }

    /// Follows CPUs going offline and coming (back) online.
    pub fn cpus_changed(&mut self, changes: &CpuChanges) {
        self.backend.cpus_changed(changes, &mut self.totals);
    }

    /// Drops cgroups that are gone (or were recreated), reconciles the
    /// others with the plan, and admits new ones within the limits, in
    /// priority order: the config's selector order, then shallower paths,
    /// then by name.
    pub fn sync(
        &mut self,
        found: Vec<Found>,
        plan: &Plan,
        fs: &CgroupFs,
        online: &[u32],
        names: Option<&Names>,
    ) {
        let alive: HashSet<(&str, u64)> = found.iter().map(|f| (f.path.as_str(), f.ino)).collect();
        let gone: Vec<String> = self
            .entries
            .iter()
            .filter(|(path, e)| !alive.contains(&(path.as_str(), e.ino)))
            .map(|(path, _)| path.clone())
            .collect();
        for path in gone {
            self.remove(&path);
        }
        let mut skipped: BTreeMap<SkipReason, Vec<String>> = BTreeMap::new();
        let (too_long, mut found): (Vec<Found>, Vec<Found>) =
            found.into_iter().partition(|f| f.too_long);
        skipped.insert(
            SkipReason::PathTooLong,
            too_long.into_iter().map(|f| f.path).collect(),
        );
        found.sort_by(|a, b| {
            let key = |f: &Found| (f.selectors.first().copied(), f.path.matches('/').count());
            key(a).cmp(&key(b)).then_with(|| a.path.cmp(&b.path))
        });
        // Cgroups already counted keep their place: those whose plan or
        // selectors changed are reconciled first, all together (the
        // backend then moves between CPUs once, not once per cgroup).
        // Those unchanged need nothing.
        let mut changed = Vec::new();
        let mut new = Vec::new();
        for f in found {
            let Some(entry) = self.entries.get_mut(&f.path) else {
                new.push(f);
                continue;
            };
            if entry.generation != self.generation || entry.selectors != f.selectors {
                entry.generation = self.generation;
                entry.selectors = f.selectors;
                let cgroup = Cgroup {
                    slot: entry.slot,
                    path: entry.path.clone(),
                    dir: fs.dir(&f.path),
                    ino: f.ino,
                };
                entry.metrics = plan.metrics_for(&entry.selectors);
                changed.push((cgroup, Wanted::of(plan, &entry.selectors)));
            }
        }
        let outcomes = self.backend.apply(&changed, online, &mut self.totals);
        for ((cgroup, wanted), outcome) in changed.into_iter().zip(outcomes) {
            match outcome {
                Outcome::Counted => {
                    self.keep_totals_of(cgroup.slot, &wanted);
                    if let Some(entry) = self.entries.get_mut(&*cgroup.path) {
                        entry.set_wanted(wanted);
                    }
                }
                Outcome::Skipped(reason) => {
                    self.remove(&cgroup.path);
                    skipped
                        .entry(reason)
                        .or_default()
                        .push(cgroup.path.to_string());
                }
                // Left as it was: the next scan drops it.
                Outcome::Gone => {}
            }
        }
        self.backend.expect(new.len());
        for f in new {
            if let Err(reason) = self.admit(f, plan, fs, online, names) {
                let (reason, path) = *reason;
                skipped.entry(reason).or_default().push(path);
            }
        }
        self.note_skipped(skipped);
    }

    /// Counts a cgroup found for the first time, if it fits; if not, why
    /// (and its path).
    fn admit(
        &mut self,
        f: Found,
        plan: &Plan,
        fs: &CgroupFs,
        online: &[u32],
        names: Option<&Names>,
    ) -> Result<(), Box<(SkipReason, String)>> {
        if self
            .max_cgroups
            .is_some_and(|max| self.entries.len() >= max)
        {
            return Err(Box::new((SkipReason::MaxCgroups, f.path)));
        }
        let wanted = Wanted::of(plan, &f.selectors);
        if let Err(reason) = self.backend.admits(&wanted, online.len()) {
            return Err(Box::new((reason, f.path)));
        }
        let cgroup = Cgroup {
            slot: CgroupSlot(self.next_slot),
            path: f.path.as_str().into(),
            dir: fs.dir(&f.path),
            ino: f.ino,
        };
        self.next_slot += 1;
        let one = [(cgroup, wanted)];
        let outcome = self.backend.apply(&one, online, &mut self.totals);
        let [(cgroup, wanted)] = one;
        match outcome.first().copied().unwrap_or(Outcome::Gone) {
            Outcome::Counted => {
                let labels = labels_for(&f.path, &self.extractors);
                let unnamed = names.is_some() && nameable(&labels);
                if unnamed && let Some(names) = names {
                    names.refresh();
                }
                let entry = Entry {
                    slot: cgroup.slot,
                    path: cgroup.path,
                    ino: f.ino,
                    metrics: plan.metrics_for(&f.selectors),
                    selectors: f.selectors,
                    generation: self.generation,
                    labels,
                    unnamed,
                    wanted,
                    last: LastTotals::default(),
                    created: SystemTime::now(),
                    began: Instant::now(),
                    keys: SeriesKeys::default(),
                    shown: None,
                };
                self.entries.insert(f.path, entry);
                Ok(())
            }
            Outcome::Skipped(reason) => {
                self.totals.remove(cgroup.slot);
                Err(Box::new((reason, f.path)))
            }
            Outcome::Gone => {
                self.totals.remove(cgroup.slot);
                Ok(()) // Removed since the scan.
            }
        }
    }

    /// Stops counting a cgroup: its series vanish.
    fn remove(&mut self, path: &str) {
        if let Some(entry) = self.entries.remove(path) {
            self.backend.remove(entry.slot);
            self.totals.remove(entry.slot);
        }
    }

    /// Keeps the totals of what a reconciled cgroup still counts.
    fn keep_totals_of(&mut self, slot: CgroupSlot, wanted: &Wanted) {
        let groups: Vec<_> = wanted
            .groups
            .iter()
            .map(|g| (g.id(), g.event_ids()))
            .collect();
        let sampled: Vec<_> = wanted.sampled.iter().map(|s| s.id()).collect();
        self.totals.keep_only(slot, &groups, &sampled);
    }

    /// Records this scan's skipped cgroups, and logs when more are skipped
    /// for a reason than at the last scan.
    fn note_skipped(&mut self, mut skipped: BTreeMap<SkipReason, Vec<String>>) {
        for reason in SkipReason::ALL {
            let paths = skipped.remove(&reason).unwrap_or_default();
            let before = self.skipped.insert(reason, paths.len() as u64).unwrap_or(0);
            if paths.len() as u64 > before {
                tracing::warn!(
                    reason = reason.label(),
                    skipped = paths.len(),
                    first = ?paths.iter().take(5).collect::<Vec<_>>(),
                    "cgroups not counted: {}",
                    reason.explain()
                );
            }
        }
    }
}

/// Whether the runtime may know names for a cgroup with these labels.
pub(super) fn nameable(labels: &Labels) -> bool {
    labels
        .iter()
        .any(|(k, _)| *k == crate::labels::CONTAINER_ID || *k == crate::labels::POD_UID)
}

/// The extra labels of a cgroup, from the enabled extractors.
fn labels_for(path: &str, extractors: &[Extractor]) -> Labels {
    extract(path, extractors)
        .into_iter()
        .map(|(k, v)| (k, Box::from(v)))
        .collect()
}
