//! Build information for `cgperf_build_info`: the git revision and the
//! Rust toolchain, fixed at build time; and the list of the event tables
//! under `event-tables/` that the binary embeds.
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
    embed_event_tables();
}

/// Writes `$OUT_DIR/event_tables.rs`: `FILES`, every file under
/// `event-tables/` (but its LICENSE) as `(relative path, include_str!)`,
/// sorted by path so that the tables can binary-search it.
fn embed_event_tables() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("event-tables");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect_files(&root, &root, &mut files);
    files.sort();
    let mut code =
        String::from("/// The embedded event tables: (path, contents), sorted by path.\n");
    code.push_str("static FILES: &[(&str, &str)] = &[\n");
    for relative in &files {
        let full = root.join(relative);
        println!("cargo:rerun-if-changed={}", full.display());
        code.push_str(&format!(
            "    ({relative:?}, include_str!({:?})),\n",
            full.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("event_tables.rs"), code).expect("writing event_tables.rs");
}

/// The files under `dir`, relative to `root`, with `/` separators.
fn collect_files(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            println!("cargo:rerun-if-changed={}", path.display());
            collect_files(root, &path, out);
        } else if path.file_name().is_some_and(|n| n != "LICENSE")
            && let Ok(relative) = path.strip_prefix(root)
        {
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
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
