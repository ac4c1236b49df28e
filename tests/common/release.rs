//! The release artifacts exactly as scripts/release builds them, once per
//! test binary, into the tests' scratch directory: tests/release.rs checks
//! and installs them, tests/container.rs runs the image.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What one run of scripts/release left.
pub struct Release {
    /// The directory holding them all (and SHA256SUMS).
    pub dir: PathBuf,
    /// `cgperf-VERSION.linux-amd64.tar.gz`.
    pub tarball: PathBuf,
    /// `cgperf-VERSION.linux-amd64.debug`.
    pub debug: PathBuf,
    /// `cgperf_VERSION_amd64.deb`.
    pub deb: PathBuf,
    /// `cgperf-VERSION.oci.tar`, the image `ghcr.io/cgperf/cgperf:VERSION`.
    pub image: PathBuf,
}

/// The version every artifact carries: the crate's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs `scripts/release --out <scratch>/dist` (the first call of a test
/// binary) and names what it made, each checked to exist.
pub fn built() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(|| {
        super::require_root("build the release: its image is built with buildah");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dist");
        let started = std::time::Instant::now();
        super::run(
            Command::new(repo.join("scripts/release"))
                .arg("--out")
                .arg(&dir),
        );
        eprintln!("scripts/release took {:.0?}", started.elapsed());
        let at = |name: String| {
            let path = dir.join(&name);
            assert!(path.is_file(), "scripts/release made no {name}");
            path
        };
        Release {
            tarball: at(format!("cgperf-{VERSION}.linux-amd64.tar.gz")),
            debug: at(format!("cgperf-{VERSION}.linux-amd64.debug")),
            deb: at(format!("cgperf_{VERSION}_amd64.deb")),
            image: at(format!("cgperf-{VERSION}.oci.tar")),
            dir,
        }
    })
}
