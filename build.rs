//! Build information for `cgperf_build_info`: the git revision and the
//! Rust toolchain, fixed at build time.
//!
//! `CGPERF_REVISION` set in the build's environment wins (an image build
//! without `.git`); otherwise `git` is asked; without either the revision
//! is `unknown`. The toolchain is what `$RUSTC --version` says.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CGPERF_REVISION");
    let revision = std::env::var("CGPERF_REVISION")
        .ok()
        .filter(|r| !r.trim().is_empty())
        .or_else(git_revision)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CGPERF_REVISION={}", revision.trim());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = output(Command::new(rustc).arg("--version"))
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CGPERF_RUSTC_VERSION={version}");
}

/// The commit checked out, when this is a git work tree; asks git to be
/// rerun when HEAD or the branch it names moves.
fn git_revision() -> Option<String> {
    let git_dir = output(Command::new("git").args(["rev-parse", "--git-dir"]))?;
    let common = output(Command::new("git").args(["rev-parse", "--git-common-dir"]))?;
    let mut watched = vec![format!("{}/HEAD", git_dir.trim())];
    if let Some(branch) = output(Command::new("git").args(["symbolic-ref", "-q", "HEAD"])) {
        watched.push(format!("{}/{}", common.trim(), branch.trim()));
    }
    watched.push(format!("{}/packed-refs", common.trim()));
    // A path that does not exist would make cargo rerun this every build.
    for path in watched.iter().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
    output(Command::new("git").args(["rev-parse", "--short=12", "HEAD"]))
}

/// Standard output of a command that succeeded.
fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}
