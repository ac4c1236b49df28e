//! Every script under `scripts/` (and `.ci/run`) parses: a shell script
//! as its interpreter reads it (`bash -n`, `sh -n`), a Python one as
//! `python3` compiles it. Most are run by other tests, but not all of them
//! on every machine (`scripts/pmu-guest`'s in-guest suite runs only in its
//! arm64 guest), and a syntax error there would otherwise show only when
//! someone runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The files directly in `dir` that start with `#!`.
fn scripts_in(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read the scripts directory") {
        let path = entry.expect("a directory entry").path();
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read(&path).expect("read a script");
        if let Some(line) = text.strip_prefix(b"#!") {
            let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
            found.push((path, String::from_utf8_lossy(line).trim().to_string()));
        }
    }
    found.sort();
    found
}

#[test]
fn every_script_parses_as_its_interpreter_reads_it() {
    let root = root();
    let mut scripts = scripts_in(&root.join("scripts"));
    scripts.extend(scripts_in(&root.join("scripts/pmu-guest.d")));
    scripts.extend(scripts_in(&root.join(".ci")));
    assert!(scripts.len() >= 14, "found only {scripts:?}");
    for (path, shebang) in &scripts {
        let interpreter = shebang.rsplit(['/', ' ']).next().unwrap_or_default();
        let check = match interpreter {
            "bash" => Command::new("bash").arg("-n").arg(path).output(),
            "sh" => Command::new("sh").arg("-n").arg(path).output(),
            "python3" => Command::new("python3")
                .args(["-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())"])
                .arg(path)
                .output(),
            other => panic!("{}: no check for the interpreter `{other}`", path.display()),
        }
        .expect("run the interpreter's check");
        assert!(
            check.status.success(),
            "{} does not parse:\n{}",
            path.display(),
            String::from_utf8_lossy(&check.stderr)
        );
    }
}
