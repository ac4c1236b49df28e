//! Finding the cgroups the config selects: locating the cgroup2 hierarchy and
//! expanding exact paths and globs against it.
//!
//! Discovery only finds; the sampler decides what to open for what it finds.

use crate::config::{CgroupPattern, CgroupSelector};
use crate::mountinfo;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How deep a `**` glob may descend; cgroup trees are far shallower.
const MAX_DEPTH: usize = 64;

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

    /// The directory of the cgroup at relative `path`.
    pub fn dir(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
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
            Ok(meta) => dirs.push(("/".to_string(), meta.ino())),
            Err(e) => note_unlisted(&mut unlisted, &self.root, e),
        }
        walk(&self.root, "", depth, &mut dirs, visit, &mut unlisted);
        let mut found: Vec<Found> = dirs
            .into_iter()
            .filter_map(|(path, ino)| {
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
                })
            })
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
/// vanished (`ENOENT`), a path longer than `PATH_MAX` that anyone allowed to
/// make cgroups can build. Were those incomplete scans, one such directory
/// would stop discovery for good.
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
                    "cannot watch {}: {e}; new cgroups there are found by the periodic rescan                      (raise fs.inotify.max_user_watches)",
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

/// How many levels below the root a selector can match.
fn depth(pattern: &CgroupPattern) -> usize {
    let text = pattern.as_str();
    if matches!(pattern, CgroupPattern::Match { .. }) && text.contains("**") {
        MAX_DEPTH
    } else {
        text.split('/').filter(|c| !c.is_empty()).count()
    }
}

/// Collects the sub-directories of `dir` down to `depth` levels, visiting
/// each directory before listing it. A directory that vanishes during the
/// walk is simply not found; one that cannot be listed for a moment is noted
/// in `unlisted` (see [`note_unlisted`]).
fn walk(
    dir: &Path,
    rel: &str,
    depth: usize,
    out: &mut Vec<(String, u64)>,
    visit: &mut dyn FnMut(&Path),
    unlisted: &mut Option<Unlisted>,
) {
    if depth == 0 {
        return;
    }
    visit(dir);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return note_unlisted(unlisted, dir, e),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return note_unlisted(unlisted, dir, e),
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => {}
            Ok(_) => continue,
            Err(e) => {
                note_unlisted(unlisted, &entry.path(), e);
                continue;
            }
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = format!("{rel}/{name}");
        out.push((path.clone(), entry.ino()));
        walk(&entry.path(), &path, depth - 1, out, visit, unlisted);
    }
}
