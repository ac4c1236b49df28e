//! Finding the cgroups the config selects: locating the cgroup2 hierarchy and
//! expanding exact paths and globs against it.
//!
//! Discovery only finds; the sampler decides what to open for what it finds.
//!
//! cgroup names are whatever bytes their creator chose. cgperf names a
//! cgroup by its path as text (the `cgroup` label, config paths, logs), so
//! a path that is not UTF-8 is written escaped ([`crate::escape`]) and read back
//! ([`CgroupFs::dir`]) wherever the directory itself is needed: a cgroup
//! must not hide its work from per-cgroup views by its name alone.

use crate::config::{CgroupPattern, CgroupSelector};
use crate::escape::{escape, unescape};
use crate::mountinfo;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cgroup2 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFs {
    root: PathBuf,
}

/// A cgroup that exists now and the selectors that chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Path relative to the cgroup2 root, `/` for the root itself.
    pub path: String,
    /// Inode of its directory: a cgroup removed and created again under the
    /// same path has a new one, and is a new series.
    pub ino: u64,
    /// Indices into the config's selectors, ascending.
    pub selectors: Vec<usize>,
    /// Its directory's path is longer than the kernel takes (`PATH_MAX`):
    /// it cannot be opened to be counted, nor listed for what is below it,
    /// so it is reported as skipped rather than left out unsaid.
    pub too_long: bool,
}

impl CgroupFs {
    /// The hierarchy mounted at `root`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Finds the cgroup2 mount through `/proc/self/mountinfo`: pure v2 at
    /// `/sys/fs/cgroup`, hybrid at `/sys/fs/cgroup/unified`, or anywhere else.
    pub fn locate() -> Result<Self, String> {
        let mounts = mountinfo::read().map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
        mountinfo::find(&mounts, "cgroup2", "/sys/fs/cgroup")
            .map(Self::at)
            .ok_or_else(|| {
                "no cgroup2 filesystem is mounted; cgperf counts per cgroup v2 (mount it with \
                 `mount -t cgroup2 none /sys/fs/cgroup`)"
                    .to_string()
            })
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the cgroup at relative `path`, as [`escape`] writes
    /// it.
    pub fn dir(&self, path: &str) -> PathBuf {
        let bytes = unescape(path.trim_start_matches('/'));
        self.root.join(OsStr::from_bytes(&bytes))
    }

    /// Every existing cgroup chosen by `selectors`, sorted by path, as far
    /// as the hierarchy could be listed.
    pub fn expand(&self, selectors: &[CgroupSelector]) -> Vec<Found> {
        self.expand_watching(selectors, &mut |_| {}).0
    }

    /// Like [`CgroupFs::expand`], calling `visit` on every directory before
    /// listing it, so that a watch added there sees every child created
    /// after the listing started; also says which directory, if any, exists
    /// but could not be listed, which makes the result incomplete.
    fn expand_watching(
        &self,
        selectors: &[CgroupSelector],
        visit: &mut dyn FnMut(&Path),
    ) -> (Vec<Found>, Option<Unlisted>) {
        let depth = selectors
            .iter()
            .map(|s| depth(&s.pattern))
            .max()
            .unwrap_or(0);
        let mut dirs = Vec::new();
        let mut unlisted = None;
        match std::fs::metadata(&self.root) {
            Ok(meta) => dirs.push(Dir {
                path: "/".to_string(),
                ino: meta.ino(),
                too_long: false,
            }),
            Err(e) => note_unlisted(&mut unlisted, &self.root, e),
        }
        walk(&self.root, depth, &mut dirs, visit, &mut unlisted);
        let mut found: Vec<Found> = dirs
            .into_iter()
            .filter_map(
                |Dir {
                     path,
                     ino,
                     too_long,
                 }| {
                    let chosen: Vec<usize> = selectors
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.pattern.matches(&path))
                        .map(|(i, _)| i)
                        .collect();
                    (!chosen.is_empty()).then_some(Found {
                        path,
                        ino,
                        selectors: chosen,
                        too_long,
                    })
                },
            )
            .collect();
        found.sort_by(|a, b| a.path.cmp(&b.path));
        (found, unlisted)
    }
}

/// A directory of the hierarchy that exists but could not be listed for a
/// moment: out of file descriptors or memory. What lies below it is unknown,
/// not gone.
#[derive(Debug)]
pub struct Unlisted {
    /// The directory.
    pub dir: PathBuf,
    /// Why it could not be listed.
    pub error: std::io::Error,
}

impl std::fmt::Display for Unlisted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Debug: cgroup names are chosen by whoever creates them, and may
        // hold control characters that must not reach a terminal raw.
        write!(f, "listing {:?}: {}", self.dir, self.error)
    }
}

/// Keeps the first directory that could not be listed for want of a
/// resource that comes back (descriptors, memory). Any other failure is the
/// directory's own and lasting, and it is skipped as before: one that
/// vanished (`ENOENT`), say. Were those incomplete scans, one such
/// directory would stop discovery for good. (A path longer than `PATH_MAX`
/// is never listed: the walk reports it, see [`Found::too_long`].)
fn note_unlisted(unlisted: &mut Option<Unlisted>, dir: &Path, error: std::io::Error) {
    if error
        .raw_os_error()
        .is_some_and(|e| crate::perf::Errno(e).passes())
    {
        unlisted.get_or_insert(Unlisted {
            dir: dir.to_path_buf(),
            error,
        });
    } else {
        tracing::debug!("skipping {}: {error}", dir.display());
    }
}

/// Finds the cgroups the selectors choose and notices when that may have
/// changed: inotify watches on every directory walked (cgroups are created
/// and removed with mkdir/rmdir, which inotify reports), plus a periodic full
/// rescan as a safety net for anything a watch could miss (watch limits,
/// events dropped on queue overflow).
#[derive(Debug)]
pub struct Discovery {
    fs: CgroupFs,
    inotify: Option<inotify::Inotify>,
    buffer: Vec<u8>,
    last_scan: Option<Instant>,
    rescan_every: Duration,
    watch_failure_logged: bool,
    /// The last scan could not list a directory: scan again at the next
    /// poll, whatever inotify says.
    incomplete: bool,
}

impl Discovery {
    /// Discovery on `fs`, rescanning fully at least every `rescan_every`.
    pub fn new(fs: CgroupFs, rescan_every: Duration) -> Self {
        let inotify = inotify::Inotify::init()
            .map_err(|e| {
                tracing::warn!(
                    "inotify unavailable ({e}); new cgroups are found by periodic rescans only"
                )
            })
            .ok();
        Self {
            fs,
            inotify,
            buffer: vec![0; 16 * 1024],
            last_scan: None,
            rescan_every,
            watch_failure_logged: false,
            incomplete: false,
        }
    }

    /// The hierarchy.
    pub fn fs(&self) -> &CgroupFs {
        &self.fs
    }

    /// The cgroups chosen now, when the tree may have changed since the last
    /// scan (or `force`); `None` when nothing changed.
    ///
    /// A scan that could not list some directory is an error, not a smaller
    /// set: a cgroup cgperf cannot see for a moment (descriptors exhausted
    /// by a burst of connections, memory pressure) has not been removed, and
    /// dropping it would lose its series. The next poll scans again.
    pub fn poll(
        &mut self,
        selectors: &[CgroupSelector],
        force: bool,
    ) -> Option<Result<Vec<Found>, Unlisted>> {
        let due = self.incomplete
            || self
                .last_scan
                .is_none_or(|t| t.elapsed() >= self.rescan_every);
        if !(self.drain() || due || force) {
            return None;
        }
        self.last_scan = Some(Instant::now());
        let mask = inotify::WatchMask::CREATE
            | inotify::WatchMask::DELETE
            | inotify::WatchMask::MOVED_FROM
            | inotify::WatchMask::MOVED_TO
            | inotify::WatchMask::ONLYDIR
            | inotify::WatchMask::DONT_FOLLOW;
        let (inotify, logged) = (&mut self.inotify, &mut self.watch_failure_logged);
        let mut visit = |dir: &Path| {
            if let Some(inotify) = inotify.as_mut()
                && let Err(e) = inotify.watches().add(dir, mask)
                && e.raw_os_error() != Some(libc::ENOENT)
                && !std::mem::replace(logged, true)
            {
                tracing::warn!(
                    "cannot watch {}: {e}; new cgroups there are found by the periodic rescan \
                     (raise fs.inotify.max_user_watches)",
                    dir.display()
                );
            }
        };
        let (found, unlisted) = self.fs.expand_watching(selectors, &mut visit);
        let was_incomplete = std::mem::replace(&mut self.incomplete, unlisted.is_some());
        match unlisted {
            Some(unlisted) => {
                if !was_incomplete {
                    tracing::warn!(
                        "{unlisted}; keeping the cgroups found before and scanning again at the \
                         next collection"
                    );
                }
                Some(Err(unlisted))
            }
            None => {
                if was_incomplete {
                    tracing::info!("the cgroup hierarchy can be listed again");
                }
                Some(Ok(found))
            }
        }
    }

    /// Reads pending inotify events; true if there were any.
    fn drain(&mut self) -> bool {
        let Some(inotify) = self.inotify.as_mut() else {
            return false;
        };
        let mut any = false;
        loop {
            match inotify.read_events(&mut self.buffer) {
                Ok(mut events) => {
                    if events.next().is_none() {
                        return any;
                    }
                    any = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return any,
                Err(e) => {
                    tracing::warn!("reading inotify events failed: {e}; rescanning");
                    return true;
                }
            }
        }
    }
}

/// How many levels below the root a selector can match: a `**` glob,
/// any number, as nesting cgroups deeper must not hide them from it.
fn depth(pattern: &CgroupPattern) -> usize {
    let text = pattern.as_str();
    if matches!(pattern, CgroupPattern::Match { .. }) && text.contains("**") {
        usize::MAX
    } else {
        text.split('/').filter(|c| !c.is_empty()).count()
    }
}

/// A directory of the hierarchy the walk found.
struct Dir {
    /// Its path relative to the root, escaped.
    path: String,
    ino: u64,
    /// See [`Found::too_long`].
    too_long: bool,
}

/// Collects the sub-directories of `root` down to `depth` levels, visiting
/// each directory before listing it. A directory that vanishes during the
/// walk is simply not found; one that cannot be listed for a moment is noted
/// in `unlisted` (see [`note_unlisted`]). Iterative, so that however deep
/// a hierarchy is nested, the walk does not run out of stack.
fn walk(
    root: &Path,
    depth: usize,
    out: &mut Vec<Dir>,
    visit: &mut dyn FnMut(&Path),
    unlisted: &mut Option<Unlisted>,
) {
    // The longest path the kernel takes, its terminating NUL included.
    let path_max = libc::PATH_MAX as usize;
    let mut pending = vec![(root.to_path_buf(), String::new(), depth)];
    while let Some((dir, rel, depth)) = pending.pop() {
        if depth == 0 {
            continue;
        }
        visit(&dir);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                note_unlisted(unlisted, &dir, e);
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    note_unlisted(unlisted, &dir, e);
                    break;
                }
            };
            match entry.file_type() {
                Ok(t) if t.is_dir() => {}
                Ok(_) => continue,
                Err(e) => {
                    note_unlisted(unlisted, &entry.path(), e);
                    continue;
                }
            }
            let path = format!("{rel}/{}", escape(entry.file_name().as_bytes()));
            let full = entry.path();
            let too_long = full.as_os_str().len() >= path_max;
            out.push(Dir {
                path: path.clone(),
                ino: entry.ino(),
                too_long,
            });
            if !too_long {
                pending.push((full, path, depth - 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_of_an_escaped_path_is_the_named_one() {
        let fs = CgroupFs::at("/cg");
        assert_eq!(
            fs.dir("/caf\\xE9/x").as_os_str().as_bytes(),
            b"/cg/caf\xe9/x"
        );
        assert_eq!(fs.dir("/a\\x2d").as_os_str().as_bytes(), b"/cg/a\\x2d");
    }
}
