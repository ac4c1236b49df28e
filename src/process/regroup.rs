//! Giving the processes of an entry groups anew: after a reload that
//! changed some of its groups, and once there is room for groups that did
//! not fit the descriptor budget.
//!
//! The kernel passes a group on to a thread or process when it is created,
//! from what its parent holds then: a child that ran before its counted
//! ancestor's group was opened never counts with it. So a changed group
//! is opened on every process that counts through the entry, each on its
//! own — the matched processes and every live descendant that inherited
//! their groups — while the groups that did not change stay open
//! untouched, and go on counting parent and children alike. The old
//! version of a changed group is read a last time before it closes (its
//! read holds what the children it was passed on to counted).
//!
//! Each process gets them as a scan's find does (see [`super::fence`]):
//! at a moment none of its threads runs, so that its children listed
//! then, made before the open, hold the old groups only, and every later
//! one inherits the new. Those of them that appeared since `/proc` was
//! listed get groups of their own, as the listed ones do.

use super::fence::enable_all;
use super::{Counted, Groups, Key, Processes, Seen, Selected, Start, read_all, scan};
use crate::ids::GroupId;
use crate::plan::GroupSpec;
use crate::snapshot::{ErrorReason, Errors, Operation};
use std::collections::HashMap;
use std::sync::Arc;

/// A process whose groups are opened anew: its key, name and threads.
struct Member {
    key: Key,
    comm: String,
    threads: Vec<u32>,
}

impl Processes {
    /// After a reload, for every entry that kept its match and labels:
    /// closes the groups it no longer counts (read a last time), and opens
    /// those that are new or changed anew on every process counting
    /// through it (see [`Processes::regroup`]). `old` is the entries
    /// before the reload.
    pub(super) fn regroup_changed(&mut self, old: &[Selected], errors: &mut Errors) {
        let mut seen = None;
        for at in 0..self.selected.len() {
            let name = self.selected[at].name.clone();
            let Some(before) = old.iter().find(|s| s.name == name) else {
                continue;
            };
            let now = &self.selected[at].groups;
            let changed: Vec<GroupId> = now
                .iter()
                .filter(|spec| !before.groups.contains(spec))
                .map(|spec| spec.name.clone())
                .collect();
            let removed: Vec<GroupId> = before
                .groups
                .iter()
                .filter(|b| !now.iter().any(|spec| spec.name == b.name))
                .map(|b| b.name.clone())
                .collect();
            let totals = &mut self.totals;
            for counted in self
                .counted
                .iter_mut()
                .filter(|(key, _)| key.0 == name)
                .map(|(_, c)| c)
            {
                for group in &removed {
                    if let Some(mut readers) = counted.groups.remove(group) {
                        read_all(totals, &mut readers, errors);
                    }
                }
                counted.missing.retain(|g| !removed.contains(g));
            }
            let holders: Vec<Key> = self
                .counted
                .keys()
                .filter(|key| key.0 == name)
                .cloned()
                .collect();
            if !changed.is_empty() && !holders.is_empty() {
                let seen = seen.get_or_insert_with(|| self.list(errors));
                self.regroup(at, (&holders, seen), &changed, errors);
            }
        }
    }

    /// Opens again the groups that did not fit the descriptor budget, on
    /// each process that misses some and on the descendants that count
    /// through it; returns how many processes still miss some.
    pub(super) fn open_missing(&mut self, errors: &mut Errors) -> u64 {
        let missing: Vec<(Key, Vec<GroupId>)> = self
            .counted
            .iter()
            .filter(|(_, c)| !c.missing.is_empty())
            .map(|(key, c)| (key.clone(), c.missing.clone()))
            .collect();
        if !missing.is_empty() {
            let seen = self.list(errors);
            for (key, groups) in missing {
                if let Some(at) = self.selected.iter().position(|s| s.name == key.0) {
                    self.regroup(at, (&[key], &seen), &groups, errors);
                }
            }
        }
        self.counted
            .values()
            .filter(|c| !c.missing.is_empty())
            .count() as u64
    }

    /// Opens `groups` of entry `at` anew on the counted processes
    /// `holders` and on every live process of `seen` that counts through
    /// one of them (which is counted from now on, through the holder's matching
    /// process). Where all the new groups fit the budget beside the old,
    /// they open paused, the old are read a last time and the new start
    /// at once: only what happens between that read and those starts is
    /// not seen, and nothing twice. Where they do not, the old are read
    /// and closed first, and each process whose new groups do not fit
    /// misses them (`fd_budget`) until a scan finds room.
    fn regroup(
        &mut self,
        at: usize,
        (holders, seen): (&[Key], &[Seen]),
        groups: &[GroupId],
        errors: &mut Errors,
    ) {
        let specs: Vec<Arc<GroupSpec>> = self.selected[at]
            .groups
            .iter()
            .filter(|spec| groups.contains(&spec.name))
            .cloned()
            .collect();
        let members = self.members(holders, seen);
        let cost: u64 = members
            .iter()
            .map(|m| Self::cost(&specs, m.threads.len()))
            .sum();
        let beside = self.fits(cost);
        if !beside {
            self.close(&members, groups, errors);
        }
        let start = if beside { Start::Paused } else { Start::Now };
        // Each process's children as the listing found them.
        let mut found: HashMap<u32, Vec<u32>> = HashMap::new();
        for s in seen.iter().filter(|s| !s.dead) {
            found.entry(s.ppid).or_default().push(s.pid);
        }
        let mut opened: Vec<(Key, Groups)> = Vec::new();
        let mut given: Vec<Key> = Vec::new();
        for member in &members {
            let Some(slot) = self
                .counted
                .get(&member.key)
                .and_then(|c| self.series.get(&c.series))
                .map(|series| series.slot)
            else {
                continue;
            };
            // With counters watching each thread while they open (see
            // [`super::watch`]).
            let threads = member.threads.len();
            let cost = Self::cost(&specs, threads).saturating_add(self.watch_cost(threads));
            let fits = self.fits(cost);
            let mut readers = Groups::new();
            if fits {
                let pid = member.key.1;
                let children = found.get(&pid).map_or(&[][..], Vec::as_slice);
                let quiet = self.open_quiet((pid, children), &specs, slot, start, errors);
                if let Some(unsure) = &quiet.unsure {
                    self.note_unsure(at, (pid, &member.comm), unsure);
                }
                // Those that appeared since the listing hold the old
                // groups, not these: they get their own.
                let through =
                    self.count_through((at, &specs), &member.key, quiet.during, start, errors);
                given.extend(through);
                readers = quiet.groups;
            }
            if let Some(counted) = self.counted.get_mut(&member.key) {
                counted.missing.retain(|g| !groups.contains(g));
                if !fits {
                    counted.missing.extend(groups.iter().cloned());
                }
                counted.admitted = self.generation;
            }
            opened.push((member.key.clone(), readers));
        }
        if beside {
            // Every old group's last read before any new one starts: an
            // old one holds what the children it was passed on to counted.
            for member in &members {
                if let Some(counted) = self.counted.get_mut(&member.key) {
                    for group in groups {
                        if let Some(readers) = counted.groups.get_mut(group) {
                            read_all(&mut self.totals, readers, errors);
                        }
                    }
                }
            }
            for (_, groups) in opened.iter_mut() {
                enable_all(groups, errors);
            }
            for key in &given {
                if let Some(counted) = self.counted.get_mut(key) {
                    enable_all(&mut counted.groups, errors);
                }
            }
        }
        self.starting.clear();
        for (key, new) in opened {
            if let Some(counted) = self.counted.get_mut(&key) {
                // The old ones close here, after their last read (also
                // where the new ones could not open).
                counted.groups.retain(|group, _| !groups.contains(group));
                counted.groups.extend(new);
            }
        }
    }

    /// Every process now; none where `/proc` cannot be listed (counted as
    /// a read error).
    fn list(&self, errors: &mut Errors) -> Vec<Seen> {
        scan::all_processes(&self.root).unwrap_or_else(|e| {
            errors.count(Operation::Read, ErrorReason::ProcessList);
            tracing::debug!("listing {}: {e}", self.root.display());
            Vec::new()
        })
    }

    /// The live processes among `holders`, and every live process of
    /// `seen` that counts through one of them and is not counted yet,
    /// which is from now on (with the holder's series, through its
    /// matching process).
    fn members(&mut self, holders: &[Key], seen: &[Seen]) -> Vec<Member> {
        let Some((name, _, _)) = holders.first().cloned() else {
            return Vec::new();
        };
        let alive: HashMap<u32, &Seen> = seen
            .iter()
            .filter(|s| !s.dead)
            .map(|s| (s.pid, s))
            .collect();
        let live = |key: &Key| alive.get(&key.1).is_some_and(|s| s.start == key.2);
        let mut members: Vec<Key> = holders.iter().filter(|k| live(k)).cloned().collect();
        let name = &name;
        let through: Vec<(Key, Key)> = seen
            .iter()
            .filter(|s| !s.dead)
            .filter(|s| !self.counted.contains_key(&(name.clone(), s.pid, s.start)))
            .filter_map(|s| {
                let ancestor = self.counted_ancestor(name, s, &alive)?;
                holders
                    .contains(&ancestor)
                    .then(|| ((name.clone(), s.pid, s.start), ancestor))
            })
            .collect();
        for (key, ancestor) in through {
            let Some(of) = self.counted.get(&ancestor) else {
                continue;
            };
            let counted = Counted {
                admitted: self.generation,
                series: of.series.clone(),
                groups: Groups::new(),
                missing: Vec::new(),
                through: Some(of.through.clone().unwrap_or(ancestor)),
            };
            self.counted.insert(key.clone(), counted);
            members.push(key);
        }
        members
            .into_iter()
            .map(|key| Member {
                threads: scan::threads(&self.root, key.1),
                comm: alive.get(&key.1).map_or(String::new(), |s| s.comm.clone()),
                key,
            })
            .collect()
    }

    /// Reads `groups` of `members` a last time and closes them.
    fn close(&mut self, members: &[Member], groups: &[GroupId], errors: &mut Errors) {
        for member in members {
            if let Some(counted) = self.counted.get_mut(&member.key) {
                for group in groups {
                    if let Some(mut readers) = counted.groups.remove(group) {
                        read_all(&mut self.totals, &mut readers, errors);
                    }
                }
            }
        }
    }
}
