//! Finding tracefs (mounting it when absent and permitted) and looking up
//! tracepoint ids, which is all cgperf needs from it to count tracepoints.

use crate::events::{TracepointFormat, TracepointName};
use crate::mountinfo::{self, Mount};
use std::path::{Path, PathBuf};

/// Where tracefs lives on current kernels.
const CANONICAL: &str = "/sys/kernel/tracing";

/// A located tracefs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// A tracefs rooted at `root` (for tests and explicit configuration).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Finds tracefs through mountinfo: a tracefs mount, else `tracing/` in a
    /// debugfs mount, else mounts tracefs at `/sys/kernel/tracing` when this
    /// process may.
    pub fn locate() -> Result<Self, String> {
        let mounts = mountinfo::read().map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
        if let Some(found) = Self::from_mounts(&mounts) {
            return Ok(found);
        }
        mount_tracefs(Path::new(CANONICAL))?;
        Ok(Self::at(CANONICAL))
    }

    /// Finds an already mounted tracefs in `mounts`.
    pub fn from_mounts(mounts: &[Mount]) -> Option<Self> {
        if let Some(root) = mountinfo::find(mounts, "tracefs", CANONICAL) {
            return Some(Self::at(root));
        }
        mountinfo::find(mounts, "debugfs", "/sys/kernel/debug")
            .map(|debugfs| debugfs.join("tracing"))
            .filter(|p| p.join("events").is_dir())
            .map(Self::at)
    }

    /// The mount point.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The kernel's id of a tracepoint, used as `config` of a
    /// `PERF_TYPE_TRACEPOINT` event.
    pub fn tracepoint_id(&self, tp: &TracepointName) -> Result<u64, String> {
        let path = self.event_file(tp, "id");
        match std::fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse()
                .map_err(|_| format!("{}: not a tracepoint id: {:?}", path.display(), text.trim())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "unknown tracepoint `{tp}`: {} does not exist (list them with `cgperf list`)",
                path.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
                "reading {}: permission denied; tracefs needs root or CAP_DAC_READ_SEARCH",
                path.display()
            )),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// The layout of a tracepoint's records, from its `format` file.
    pub fn format(&self, tp: &TracepointName) -> Result<TracepointFormat, String> {
        let path = self.event_file(tp, "format");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        TracepointFormat::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `events/SUBSYSTEM/NAME/file` under the mount point.
    fn event_file(&self, tp: &TracepointName, file: &str) -> PathBuf {
        self.root
            .join("events")
            .join(&tp.subsystem)
            .join(&tp.name)
            .join(file)
    }
}

/// Mounts tracefs at `at`.
fn mount_tracefs(at: &Path) -> Result<(), String> {
    let fail = |why: String| {
        format!(
            "tracefs is not mounted and mounting it at {} failed: {why}; mount it with `mount -t \
             tracefs nodev {}` or run cgperf with CAP_SYS_ADMIN once",
            at.display(),
            at.display()
        )
    };
    let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes())
        .map_err(|_| fail("path contains NUL".into()))?;
    // SAFETY: all pointers are valid NUL-terminated strings; data is null.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(fail(std::io::Error::last_os_error().to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(s: &str, n: &str) -> TracepointName {
        TracepointName {
            subsystem: s.into(),
            name: n.into(),
        }
    }

    #[test]
    fn reads_ids_from_a_tracefs_tree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ev = dir.path().join("events/sched/sched_switch");
        std::fs::create_dir_all(&ev).expect("mkdir");
        std::fs::write(ev.join("id"), "316\n").expect("write");
        let tfs = Tracefs::at(dir.path());
        assert_eq!(tfs.tracepoint_id(&tp("sched", "sched_switch")), Ok(316));
        let err = tfs
            .tracepoint_id(&tp("sched", "nope"))
            .expect_err("unknown");
        assert!(err.contains("unknown tracepoint `sched:nope`"), "{err}");
    }

    #[test]
    fn locates_tracefs_on_this_machine() {
        let tfs = Tracefs::locate().expect("tracefs is mounted or mountable as root");
        let id = tfs
            .tracepoint_id(&tp("sched", "sched_switch"))
            .expect("sched_switch exists");
        assert!(id > 0);
    }
}
