//! The release artifacts exactly as scripts/release builds them, once per
//! `cargo test` run, into the tests' scratch directory: tests/release.rs
//! checks and installs them, tests/container.rs runs the image.

use std::fs::File;
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
    /// The lock on the directory, held until the test binary exits: no
    /// other test binary rebuilds the artifacts while this one uses them.
    _lock: File,
}

/// The version every artifact carries: the crate's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs `scripts/release --out <scratch>/dist` (the first call of a test
/// binary) and names what it made, each checked to exist.
///
/// Both test binaries that call this run in one `cargo test`: the second
/// takes what the first built instead of building it again (15 s, the
/// image included, with the binary already compiled). Only within that
/// run: the artifacts are stamped with the `cargo` process that ran the
/// binary which built them ([`this_cargo_run`]), and anything else — an
/// earlier or another `cargo test`, a test binary run by hand — builds
/// them afresh, since the sources may have changed since.
pub fn built() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(|| {
        super::require_root("build the release: its image is built with buildah");
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let dir = scratch.join("dist");
        let lock_path = scratch.join("dist.lock");
        let lock =
            File::create(&lock_path).unwrap_or_else(|e| panic!("{}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("locking {}: {e}", lock_path.display()));
        let stamp = dir.join(".built-by");
        let run = this_cargo_run();
        let made = std::fs::read_to_string(&stamp).ok();
        if run.is_some() && made == run {
            eprintln!(
                "scripts/release: taking what an earlier test binary of this cargo run built in {}",
                dir.display()
            );
        } else {
            if let Err(e) = std::fs::remove_file(&stamp)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                panic!("{}: {e}", stamp.display());
            }
            let started = std::time::Instant::now();
            super::run(
                super::as_from_a_shell(&mut Command::new(repo.join("scripts/release")))
                    .arg("--out")
                    .arg(&dir),
            );
            eprintln!("scripts/release took {:.0?}", started.elapsed());
        }
        let at = |name: String| {
            let path = dir.join(&name);
            assert!(path.is_file(), "scripts/release made no {name}");
            path
        };
        let release = Release {
            tarball: at(format!("cgperf-{VERSION}.linux-amd64.tar.gz")),
            debug: at(format!("cgperf-{VERSION}.linux-amd64.debug")),
            deb: at(format!("cgperf_{VERSION}_amd64.deb")),
            image: at(format!("cgperf-{VERSION}.oci.tar")),
            dir,
            _lock: lock,
        };
        if let Some(run) = run {
            std::fs::write(&stamp, run).unwrap_or_else(|e| panic!("{}: {e}", stamp.display()));
        }
        release
    })
}

/// The `cargo` process that runs this test binary, as boot, pid and start
/// time (a pid is reused; the three together are not), or `None` when the
/// binary was not started by `cargo` (by hand, from a shell).
fn this_cargo_run() -> Option<String> {
    // SAFETY: getppid has no preconditions and cannot fail.
    let parent = unsafe { libc::getppid() };
    let comm = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
    if comm.trim_end() != "cargo" {
        return None;
    }
    // The fields after the command name, which is in parentheses and may
    // hold anything: the state is field 3, the start time field 22.
    let stat = std::fs::read_to_string(format!("/proc/{parent}/stat")).ok()?;
    let (_, fields) = stat.rsplit_once(')')?;
    let started = fields.split_whitespace().nth(22 - 3)?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(format!(
        "cargo pid {parent} started at tick {started} of boot {}\n",
        boot.trim()
    ))
}
