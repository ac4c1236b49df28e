//! Finding the cgroups the config selects: locating the cgroup2 hierarchy and
//! expanding exact paths and globs against it.
//!
//! Discovery only finds; the sampler decides what to open for what it finds.

use crate::config::{CgroupPattern, CgroupSelector};
use crate::mountinfo;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

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

    /// Every existing cgroup chosen by `selectors`, sorted by path.
    pub fn expand(&self, selectors: &[CgroupSelector]) -> Vec<Found> {
        let mut found: Vec<Found> = Vec::new();
        let mut add = |path: String, ino: u64, selector: usize| match found
            .iter_mut()
            .find(|f| f.path == path)
        {
            Some(f) => f.selectors.push(selector),
            None => found.push(Found {
                path,
                ino,
                selectors: vec![selector],
            }),
        };
        let mut globs = Vec::new();
        for (i, selector) in selectors.iter().enumerate() {
            match &selector.pattern {
                CgroupPattern::Path(path) => {
                    if let Ok(meta) = std::fs::metadata(self.dir(path))
                        && meta.is_dir()
                    {
                        add(path.clone(), meta.ino(), i);
                    }
                }
                CgroupPattern::Match { pattern, .. } => {
                    globs.push((i, selector, glob_depth(pattern)))
                }
            }
        }
        if let Some(depth) = globs.iter().map(|g| g.2).max() {
            let mut dirs = Vec::new();
            if let Ok(meta) = std::fs::metadata(&self.root) {
                dirs.push(("/".to_string(), meta.ino()));
            }
            walk(&self.root, "", depth, &mut dirs);
            for (path, ino) in dirs {
                for (i, selector, _) in &globs {
                    if selector.pattern.matches(&path) {
                        add(path.clone(), ino, *i);
                    }
                }
            }
        }
        for f in &mut found {
            f.selectors.sort_unstable();
            f.selectors.dedup();
        }
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found
    }
}

/// How many levels below the root a glob can match.
fn glob_depth(pattern: &str) -> usize {
    if pattern.contains("**") {
        MAX_DEPTH
    } else {
        pattern.split('/').filter(|c| !c.is_empty()).count()
    }
}

/// Collects the sub-directories of `dir` down to `depth` levels. A directory
/// that vanishes during the walk is simply not found.
fn walk(dir: &Path, rel: &str, depth: usize, out: &mut Vec<(String, u64)>) {
    if depth == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = format!("{rel}/{name}");
        out.push((path.clone(), entry.ino()));
        walk(&entry.path(), &path, depth - 1, out);
    }
}
