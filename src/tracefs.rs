//! Finding tracefs (mounting it when absent and permitted) and looking up
//! tracepoint ids, which is all cgperf needs from it to count tracepoints.

use crate::events::{NAME_MAX, TracepointFormat, TracepointName, parse_tracepoint};
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let close = match self.closest(tp) {
                    Some(close) => format!("; did you mean `{close}`?"),
                    None => String::new(),
                };
                Err(format!(
                    "unknown tracepoint `{tp}`: {} does not exist{close} (list those of \
                     `{}` with `cgperf list {}:`)",
                    path.display(),
                    tp.subsystem,
                    tp.subsystem
                ))
            }
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

    /// Whether this tracefs has the tracepoint `tp` (this kernel may lack
    /// one that another has).
    pub fn has(&self, tp: &TracepointName) -> bool {
        self.event_file(tp, "").is_dir()
    }

    /// Whether this process may list `events/`: tracefs is root's (mode
    /// 0700), so without root or CAP_DAC_READ_SEARCH no tracepoint is
    /// found, though they are there.
    pub fn readable(&self) -> bool {
        std::fs::read_dir(self.root.join("events")).is_ok()
    }

    /// Every tracepoint under `events/`, in no particular order: the
    /// directories `events/SUBSYSTEM/NAME` whose `SUBSYSTEM:NAME` cgperf
    /// accepts.
    pub fn tracepoints(&self) -> Result<Vec<TracepointName>, String> {
        let events = self.root.join("events");
        let subsystems = std::fs::read_dir(&events).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                "; tracefs needs root or CAP_DAC_READ_SEARCH"
            } else {
                ""
            };
            format!("reading {}: {e}{hint}", events.display())
        })?;
        let mut found = Vec::new();
        for subsystem in subsystems.filter_map(Result::ok) {
            let Ok(sys_name) = subsystem.file_name().into_string() else {
                continue;
            };
            // Files such as `enable` and `header_page` sit beside the
            // directories; read_dir of a file fails and lists nothing.
            let Ok(names) = std::fs::read_dir(subsystem.path()) else {
                continue;
            };
            for entry in names.filter_map(Result::ok) {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if let (true, Ok(tp)) = (is_dir, parse_tracepoint(&format!("{sys_name}:{name}"))) {
                    found.push(tp);
                }
            }
        }
        Ok(found)
    }

    /// The existing tracepoint closest to `tp`, if one is close enough to
    /// be what was meant (`sched:sched_swtich` → `sched:sched_switch`).
    pub fn closest(&self, tp: &TracepointName) -> Option<String> {
        // No directory name is longer, so nothing can be close to a longer
        // one, and comparing it with every tracepoint would take long.
        if tp.subsystem.len() > NAME_MAX || tp.name.len() > NAME_MAX {
            return None;
        }
        let names: Vec<String> = self
            .tracepoints()
            .ok()?
            .iter()
            .map(|t| t.to_string())
            .collect();
        crate::suggest::did_you_mean(&tp.to_string(), names.iter().map(String::as_str))
            .map(String::from)
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
        assert!(!err.contains("did you mean"), "{err}");
        let typo = tfs
            .tracepoint_id(&tp("sched", "sched_swtich"))
            .expect_err("a typo");
        assert!(
            typo.contains("does not exist; did you mean `sched:sched_switch`?"),
            "{typo}"
        );
        assert!(tfs.has(&tp("sched", "sched_switch")));
        assert!(!tfs.has(&tp("sched", "sched_swtich")));
        let long = tp("sched", &"x".repeat(100_000));
        assert_eq!(tfs.closest(&long), None);
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
