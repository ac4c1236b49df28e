//! Where event tables are read from: the tables built into cgperf (the
//! `event-tables/` directory of the source tree, embedded at build time) or
//! a directory a user names (`--event-tables`), in perf's pmu-events layout
//! (`x86/mapfile.csv`, ...) or Intel perfmon's (`mapfile.csv` at the top).

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use super::TableError;

// `FILES`: (path under event-tables/, contents), sorted by path; written by
// build.rs.
include!(concat!(env!("OUT_DIR"), "/event_tables.rs"));

/// Largest table file read from a user's directory: perf's and perfmon's
/// largest are under 2 MiB.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A tree of event tables.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The tables built into cgperf.
    Embedded,
    /// A directory named by the user.
    Dir(&'a Path),
}

impl Source<'_> {
    /// The directory (relative to the source) of `arch`'s mapfile, or
    /// `None` when the source has no tables for `arch`.
    pub fn base(&self, arch: &str) -> Result<Option<String>, TableError> {
        match self {
            Self::Embedded => Ok(self
                .exists(&format!("{arch}/mapfile.csv"))
                .then(|| arch.into())),
            Self::Dir(dir) => {
                if dir.join(arch).join("mapfile.csv").is_file() {
                    Ok(Some(arch.into()))
                } else if dir.join("mapfile.csv").is_file() {
                    Ok(Some(String::new()))
                } else {
                    Err(TableError::new(
                        dir.display().to_string(),
                        format!(
                            "no {arch}/mapfile.csv (perf's tools/perf/pmu-events/arch) nor \
                             mapfile.csv (Intel's perfmon) in this directory; give the directory \
                             that holds one"
                        ),
                    ))
                }
            }
        }
    }

    /// Whether `path` is a file of the source.
    fn exists(&self, path: &str) -> bool {
        match self {
            Self::Embedded => FILES.binary_search_by(|(p, _)| p.cmp(&path)).is_ok(),
            Self::Dir(dir) => dir.join(path).is_file(),
        }
    }

    /// The contents of `path`, or `None` if there is no such file.
    pub fn read(&self, path: &str) -> Result<Option<Cow<'static, str>>, TableError> {
        match self {
            Self::Embedded => Ok(FILES
                .binary_search_by(|(p, _)| p.cmp(&path))
                .ok()
                .and_then(|i| FILES.get(i))
                .map(|(_, text)| Cow::Borrowed(*text))),
            Self::Dir(dir) => {
                let full = dir.join(path);
                if !full.exists() {
                    return Ok(None);
                }
                let bytes = crate::userfile::read(&full, MAX_FILE_BYTES)
                    .map_err(|e| TableError::new(full.display().to_string(), e.to_string()))?;
                String::from_utf8(bytes)
                    .map(|text| Some(Cow::Owned(text)))
                    .map_err(|_| {
                        TableError::new(full.display().to_string(), "not UTF-8 text".into())
                    })
            }
        }
    }

    /// Whether `dir` (relative to the source) is a directory of it.
    pub fn has_dir(&self, dir: &str) -> bool {
        match self {
            Self::Embedded => {
                let prefix = format!("{dir}/");
                FILES.iter().any(|(p, _)| p.starts_with(&prefix))
            }
            Self::Dir(root) => root.join(dir).is_dir(),
        }
    }

    /// The `.json` files of `dir` (relative to the source), sorted: perf
    /// keeps a CPU's events in one directory of topic files.
    pub fn json_files(&self, dir: &str) -> Result<Vec<String>, TableError> {
        let mut files: Vec<String> = match self {
            Self::Embedded => {
                let prefix = format!("{dir}/");
                FILES
                    .iter()
                    .filter_map(|(p, _)| p.strip_prefix(&prefix))
                    .filter(|rest| !rest.contains('/'))
                    .map(|rest| format!("{prefix}{rest}"))
                    .collect()
            }
            Self::Dir(root) => {
                let full = root.join(dir);
                std::fs::read_dir(&full)
                    .map_err(|e| TableError::new(full.display().to_string(), e.to_string()))?
                    .flatten()
                    .filter_map(|entry| entry.file_name().into_string().ok())
                    .map(|name| {
                        if dir.is_empty() {
                            name
                        } else {
                            format!("{dir}/{name}")
                        }
                    })
                    .collect()
            }
        };
        files.retain(|f| f.ends_with(".json"));
        files.sort();
        Ok(files)
    }

    /// How a file of the source is named in messages.
    pub fn name(&self, path: &str) -> String {
        match self {
            Self::Embedded => format!("cgperf's {path}"),
            Self::Dir(dir) => PathBuf::from(dir).join(path).display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_files_are_sorted_and_have_a_mapfile() {
        assert!(
            FILES.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted for binary search"
        );
        assert_eq!(
            Source::Embedded.base("x86").unwrap().as_deref(),
            Some("x86")
        );
        assert_eq!(
            Source::Embedded.base("arm64").unwrap().as_deref(),
            Some("arm64")
        );
        assert_eq!(Source::Embedded.base("riscv").unwrap(), None);
        let spr = Source::Embedded.json_files("x86/SPR/events").unwrap();
        assert_eq!(spr, ["x86/SPR/events/sapphirerapids_core.json"]);
    }

    #[test]
    fn a_directory_without_a_mapfile_says_what_to_give() {
        let dir = tempfile::tempdir().unwrap();
        let e = Source::Dir(dir.path()).base("x86").unwrap_err().to_string();
        assert!(
            e.contains("no x86/mapfile.csv (perf's tools/perf/pmu-events/arch)"),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_in_a_directory_is_refused_not_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("mapfile.csv");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = Source::Dir(dir.path())
            .read("mapfile.csv")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FIFO") || e.contains("fifo"), "{e}");
    }
}
