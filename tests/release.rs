//! The release artifacts as scripts/release builds them: what they hold,
//! their checksums, a binary that needs no shared library (so it runs on
//! any glibc, or none), and the `.deb` installed with `dpkg -i` into a
//! fresh Debian root made with debootstrap — Debian 11 (bullseye, glibc
//! 2.31, 2021), older than anything the binary was built on — where
//! `cgperf --version` and `cgperf check` run, then removed and purged.
//! tests/container.rs runs the release's image.
//!
//! Needs root, network access to deb.debian.org (debootstrap), buildah,
//! dpkg-deb and binutils; scripts/test and scripts/release install them.
//! The Debian root is made once and kept in the tests' scratch directory.
//!
//! These are the amd64 files, which `scripts/release` makes by default.
//! The arm64 ones (`scripts/release --arch amd64,arm64`) need a cross
//! toolchain and an arm64 machine to run on: `scripts/pmu-guest
//! release-check` checks them in an emulated one (docs/verifying.md).
mod common;

use common::release::{self, VERSION};
use common::{Exporter, run};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The tarball unpacked into a fresh directory: (directory, the release
/// folder inside it).
fn unpacked() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&release::built().tarball)
        .arg("-C")
        .arg(dir.path()));
    let inner = dir.path().join(format!("cgperf-{VERSION}.linux-amd64"));
    (dir, inner)
}

#[test]
fn the_tarball_holds_the_binary_config_unit_and_licence_and_the_sums_match() {
    let r = release::built();
    let listing = run(Command::new("tar").arg("-tzvf").arg(&r.tarball));
    let mut names: Vec<&str> = listing
        .lines()
        .map(|l| l.split_whitespace().last().expect("a name"))
        .collect();
    names.sort_unstable();
    let top = format!("cgperf-{VERSION}.linux-amd64");
    // What the getting-started page's table of release files says the
    // tarball holds, in its directory.
    let mut want: Vec<String> = release_table_files(&format!("{top}.tar.gz"))
        .iter()
        .map(|f| format!("{top}/{f}"))
        .collect();
    want.push(format!("{top}/"));
    want.sort_unstable();
    assert!(want.len() >= 7, "{want:?}");
    assert_eq!(names, want, "{listing}");
    for line in listing.lines() {
        assert!(line.contains("0/0"), "owned by root in the archive: {line}");
    }
    let (_dir, inner) = unpacked();
    assert_eq!(
        read(&inner.join("cgperf.yaml")),
        read(&repo("config/default.yaml"))
    );
    assert_eq!(
        read(&inner.join("cgperf.service")),
        read(&repo("deploy/systemd/cgperf.service"))
    );
    assert_eq!(read(&inner.join("LICENSE")), read(&repo("LICENSE")));
    assert_eq!(
        read(&inner.join("LICENSE.event-tables")),
        read(&repo("event-tables/LICENSE"))
    );
    // The README is the repository's, but its links to docs/ (not in the
    // tarball) point at the release's tag: none is left relative, and each
    // names a page the repository has.
    let text = |path: &Path| String::from_utf8(read(path)).expect("a UTF-8 README");
    let readme = text(&inner.join("README.md"));
    let tag = format!("https://github.com/cgperf/cgperf/blob/v{VERSION}/");
    let mut absolute = 0;
    for (at, _) in readme.match_indices("](") {
        let target = &readme[at + 2..];
        let target = &target[..target.find(')').expect("a closed link")];
        if let Some(path) = target.strip_prefix(&tag) {
            let path = path.split('#').next().expect("a path");
            assert!(repo(path).exists(), "the tarball's README links {target}");
            absolute += 1;
        } else {
            assert!(
                target.starts_with("https://"),
                "a relative link in the tarball's README: {target}"
            );
        }
    }
    assert!(absolute >= 10, "{absolute} links to the docs");
    assert_eq!(
        readme.replace(&tag, ""),
        text(&repo("README.md")),
        "the tarball's README is the repository's but for its links"
    );
    // Every artifact is in SHA256SUMS, and each sum holds.
    let sums = std::fs::read_to_string(r.dir.join("SHA256SUMS")).expect("SHA256SUMS");
    let mut listed: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().last().expect("a name"))
        .collect();
    listed.sort_unstable();
    let mut made: Vec<String> = [&r.tarball, &r.debug, &r.deb, &r.image]
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    made.sort_unstable();
    assert_eq!(listed, made);
    let checked = run(Command::new("sha256sum")
        .arg("--check")
        .arg("--strict")
        .arg("SHA256SUMS")
        .current_dir(&r.dir));
    assert_eq!(
        checked.lines().filter(|l| l.ends_with(": OK")).count(),
        4,
        "{checked}"
    );
}

/// The files docs/getting-started.md's table of release files lists for
/// the artifact `name`: the backquoted words of its row's second cell,
/// sorted, each once.
fn release_table_files(name: &str) -> Vec<String> {
    let page = std::fs::read_to_string(repo("docs/getting-started.md")).expect("the page");
    let row = page
        .lines()
        .skip_while(|l| !l.starts_with("| file | what |"))
        .take_while(|l| l.starts_with('|'))
        .find(|l| l.starts_with(&format!("| `{name}`")))
        .unwrap_or_else(|| panic!("docs/getting-started.md's release table has no row {name}"));
    let what = row.split('|').nth(2).expect("a second cell");
    let mut files: Vec<String> = what
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// The binary needs no shared library and no file of the machine it runs
/// on: it runs in a root that holds nothing but itself, and its debug info
/// is in the `.debug` artifact it points at.
#[test]
fn the_binary_is_static_stripped_and_runs_in_an_empty_root() {
    let (_dir, inner) = unpacked();
    let binary = inner.join("cgperf");
    let dynamic = run(Command::new("readelf").arg("-d").arg(&binary));
    assert!(
        !dynamic.contains("NEEDED"),
        "shared libraries needed:\n{dynamic}"
    );
    let program = run(Command::new("readelf").arg("-lW").arg(&binary));
    assert!(!program.contains("INTERP"), "no dynamic loader:\n{program}");
    let sections = run(Command::new("readelf").arg("-SW").arg(&binary));
    assert!(sections.contains(".gnu_debuglink"), "{sections}");
    assert!(!sections.contains(".debug_info"), "stripped:\n{sections}");
    let debug = run(Command::new("readelf")
        .arg("-SW")
        .arg(&release::built().debug));
    assert!(debug.contains(".debug_info"), "{debug}");
    let link = run(Command::new("readelf")
        .arg("--string-dump=.gnu_debuglink")
        .arg(&binary));
    assert!(
        link.contains(&format!("cgperf-{VERSION}.linux-amd64.debug")),
        "{link}"
    );

    let root = tempfile::tempdir().expect("temp dir");
    std::fs::copy(&binary, root.path().join("cgperf")).expect("copy");
    let version = run(Command::new("chroot")
        .arg(root.path())
        .arg("/cgperf")
        .arg("--version"));
    assert_eq!(version.trim(), format!("cgperf {VERSION}"));
}

/// A copy of [`bullseye`]'s root for one test to install into, removed
/// with it.
fn bullseye_copy() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    run(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", bullseye().display()))
        .arg(root.path()));
    root
}

/// A minimal Debian 11 root (glibc 2.31), made with debootstrap once and
/// kept; each test installs into a copy of it.
fn bullseye() -> PathBuf {
    // Made by one test at a time: the others wait for it.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bullseye");
    let done = dir.join(".complete");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("debootstrap").args([
            "--variant=minbase",
            "bullseye",
            dir.to_str().expect("UTF-8 path"),
            "http://deb.debian.org/debian",
        ]));
        for cache in ["var/cache/apt/archives", "var/lib/apt/lists"] {
            let _ = std::fs::remove_dir_all(dir.join(cache));
        }
        std::fs::write(&done, "").expect("mark complete");
    }
    dir
}

/// Runs `script` with `sh` in `root` (chroot), in a mount namespace of its
/// own where the host's /proc and /sys are mounted into `root`: gone when
/// it exits. Returns (exit code, stdout + stderr).
fn in_root(root: &Path, script: &str) -> (i32, String) {
    let r = root.to_str().expect("UTF-8 path");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t proc proc {r}/proc && mount --rbind /sys {r}/sys && exec chroot {r} sh -c \"$0\""
        ))
        .arg(script)
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("unshare runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn the_deb_installs_runs_and_goes_on_debian_11() {
    let r = release::built();
    // The package's files are those the getting-started page's table of
    // release files lists.
    let contents = run(Command::new("dpkg-deb").arg("--contents").arg(&r.deb));
    let mut files: Vec<&str> = contents
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|f| f.trim_start_matches('.'))
        .collect();
    files.sort_unstable();
    assert_eq!(
        files,
        release_table_files(&format!("cgperf_{VERSION}_amd64.deb")),
        "{contents}"
    );
    let info = run(Command::new("dpkg-deb").arg("--field").arg(&r.deb));
    assert!(info.contains("Package: cgperf\n"), "{info}");
    assert!(info.contains(&format!("Version: {VERSION}\n")), "{info}");
    assert!(info.contains("Architecture: amd64\n"), "{info}");
    assert!(
        !info.contains("Depends:"),
        "static: no dependencies\n{info}"
    );

    let root = bullseye_copy();
    let r_path = root.path();
    let glibc = in_root(r_path, "ldd --version | head -n 1");
    assert!(glibc.1.contains("2.31"), "an old glibc: {}", glibc.1);
    let deb_name = r.deb.file_name().expect("name");
    std::fs::copy(&r.deb, r_path.join(deb_name)).expect("copy the .deb");

    // The line of the README and the getting-started page, as written,
    // where the file is.
    let install = install_block("dpkg -i ");
    assert_eq!(install.len(), 1, "{install:?}");
    let (code, said) = in_root(r_path, &format!("cd / && {}", install[0]));
    assert_eq!(code, 0, "{}:\n{said}", install[0]);
    // No systemd runs in the root: the install says what it did not do,
    // and how to start cgperf.
    assert!(
        said.contains("systemd is not running here: cgperf.service is installed but neither enabled nor started; start cgperf with /usr/bin/cgperf --config.file=/etc/cgperf/cgperf.yaml"),
        "{}:\n{said}",
        install[0]
    );
    let (code, said) = in_root(r_path, "dpkg-query -W -f '${Status} ${Version}' cgperf");
    assert_eq!(
        (code, said.as_str()),
        (0, format!("install ok installed {VERSION}").as_str())
    );
    // Where the package puts things, as the unit and config expect.
    assert_eq!(
        read(&r_path.join("etc/cgperf/cgperf.yaml")),
        read(&repo("config/default.yaml"))
    );
    let unit = std::fs::read_to_string(r_path.join("lib/systemd/system/cgperf.service"))
        .expect("the installed unit");
    // The shipped unit, run from /usr/bin, its comment's install steps
    // (the tarball's) the package's work.
    let shipped = std::fs::read_to_string(repo("deploy/systemd/cgperf.service")).expect("unit");
    let mut want = String::new();
    let mut steps = false;
    for line in shipped.lines() {
        if line.starts_with("# Install, as root,") {
            steps = true;
            want.push_str("# Installed by the cgperf package, which enables and starts it.\n");
        } else if steps {
            steps = !line.contains("systemctl daemon-reload");
        } else {
            want.push_str(&line.replace(
                "ExecStart=/usr/local/bin/cgperf",
                "ExecStart=/usr/bin/cgperf",
            ));
            want.push('\n');
        }
    }
    assert_eq!(unit, want);
    assert!(!unit.contains("install -m"), "{unit}");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let (binary, args) = exec.split_once(' ').expect("arguments");
    assert_eq!(binary, "/usr/bin/cgperf");
    let conffiles = in_root(r_path, "cat /var/lib/dpkg/info/cgperf.conffiles");
    assert_eq!(conffiles.1.trim(), "/etc/cgperf/cgperf.yaml");

    let (code, said) = in_root(r_path, "cgperf --version");
    assert_eq!(
        (code, said.trim()),
        (0, format!("cgperf {VERSION}").as_str())
    );
    // `check` of the config the unit names: it counts here, exit 0.
    let config = args
        .split(' ')
        .find(|a| a.starts_with("--config.file="))
        .expect("the unit names its config");
    assert_eq!(config, "--config.file=/etc/cgperf/cgperf.yaml");
    let (code, said) = in_root(r_path, &format!("cgperf check {config}"));
    assert_eq!(code, 0, "cgperf check {config}:\n{said}");

    // Removed: the binary goes, the edited config stays; purged: it goes.
    std::fs::write(r_path.join("etc/cgperf/cgperf.yaml"), "interval: 5s\n").expect("edit");
    let (code, said) = in_root(r_path, "dpkg -r cgperf");
    assert_eq!(code, 0, "dpkg -r:\n{said}");
    assert!(!r_path.join("usr/bin/cgperf").exists());
    assert!(!r_path.join("lib/systemd/system/cgperf.service").exists());
    assert!(
        r_path.join("etc/cgperf/cgperf.yaml").exists(),
        "a conffile stays"
    );
    let (code, said) = in_root(r_path, "dpkg -P cgperf");
    assert_eq!(code, 0, "dpkg -P:\n{said}");
    assert!(!r_path.join("etc/cgperf/cgperf.yaml").exists(), "purged");
}

/// The pages that show the download-and-run and install lines: the README
/// and the getting-started page, which must show the same.
const INSTALL_PAGES: [&str; 2] = ["README.md", "docs/getting-started.md"];

/// The commands of `page`'s first `sh` block whose first line starts with
/// `first`, comments dropped.
fn page_block(page: &str, first: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
    let block = text
        .split("```sh\n")
        .skip(1)
        .find(|b| b.starts_with(first))
        .unwrap_or_else(|| panic!("no {page} block starting with {first:?}"));
    let block = block.split("```").next().expect("a block");
    block
        .lines()
        .map(|l| l.split(" #").next().expect("a command").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The block starting with `first`, the same on every page of
/// [`INSTALL_PAGES`].
fn install_block(first: &str) -> Vec<String> {
    let lines = page_block(INSTALL_PAGES[0], first);
    for page in &INSTALL_PAGES[1..] {
        assert_eq!(
            page_block(page, first),
            lines,
            "{page} and {} show different lines",
            INSTALL_PAGES[0]
        );
    }
    lines
}

/// The "download and run" lines of the README and the getting-started
/// page, run as written in a directory
/// holding the release's tarball: the exporter serves the default
/// config's counts on :9810 (in a network namespace of its own, where the
/// port is free).
#[test]
fn the_download_and_run_lines_serve_metrics() {
    let lines = install_block("tar -xzf ");
    assert_eq!(lines.len(), 2, "{lines:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let tarball = &release::built().tarball;
    std::fs::copy(tarball, dir.path().join(tarball.file_name().expect("name")))
        .expect("copy the tarball");
    run(Command::new("sh")
        .arg("-ec")
        .arg(&lines[0])
        .current_dir(dir.path()));
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "sh", "-ec", "ip link set lo up\nexec \"$@\"", "sh"])
        .args(lines[1].split_whitespace())
        .current_dir(dir.path());
    let exporter = Exporter::spawn_as_given(cmd, true);
    assert_eq!(exporter.addr, "[::]:9810", "the default listen address");
    let (head, _) = exporter.get("/metrics", None);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    exporter.wait_for("the root cgroup's context switches", |body| {
        common::value(
            body,
            "cgperf_events_total",
            &[
                ("cgroup", "/"),
                ("group", "sched"),
                ("event", "context-switches"),
            ],
        )
        .is_some_and(|n| n > 0.0)
    });
}

/// docs/getting-started.md's install steps from the release tarball, as
/// written, in the directory the page's `tar` line unpacks it to, in a
/// fresh Debian 11 root: each install line puts the tarball's own file
/// where the unit's `ExecStart` runs and reads it (the lines are the
/// unit's comment's), and the installed binary serves the installed
/// config's counts as the installed unit starts it. The `systemctl` lines
/// need systemd running, which no test root has: tests/deploy.rs runs the
/// unit's `ExecStart` and `ExecReload` as systemd does.
#[test]
fn the_tarball_install_steps_run_as_written() {
    let unpack = install_block("tar -xzf ");
    let steps = page_block("docs/getting-started.md", "cd cgperf-");
    assert_eq!(steps.len(), 6, "{steps:?}");
    let (installs, systemctl): (Vec<&String>, Vec<&String>) =
        steps.iter().partition(|l| !l.starts_with("systemctl "));
    assert_eq!(installs.len(), 4, "{steps:?}");
    // The unit's comment gives the same install lines.
    let (_dir, inner) = unpacked();
    let unit = String::from_utf8(read(&inner.join("cgperf.service"))).expect("UTF-8 unit");
    let commented: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(str::trim)
        .filter(|l| l.starts_with("install ") || l.starts_with("systemctl "))
        .collect();
    assert_eq!(commented, steps[1..5], "the tarball's unit's comment");
    for word in ["target/", "config/", "deploy/", "scripts/"] {
        assert!(
            !unit.contains(word),
            "the tarball's unit names {word}:\n{unit}"
        );
    }

    let root = bullseye_copy();
    let r_path = root.path();
    let tarball = &release::built().tarball;
    std::fs::copy(
        tarball,
        r_path.join("root").join(tarball.file_name().expect("name")),
    )
    .expect("copy the tarball");
    let script = format!(
        "set -e\ncd /root\n{}\n{}",
        unpack[0],
        installs
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let (code, said) = in_root(r_path, &script);
    assert_eq!(code, 0, "{script}\n{said}");
    for (file, installed) in [
        ("cgperf", "usr/local/bin/cgperf"),
        ("cgperf.yaml", "etc/cgperf/cgperf.yaml"),
        ("cgperf.service", "etc/systemd/system/cgperf.service"),
    ] {
        assert_eq!(
            read(&r_path.join(installed)),
            read(&inner.join(file)),
            "/{installed}"
        );
    }
    // What `systemctl enable --now` starts: the installed unit's ExecStart,
    // in the root, in a network namespace of its own where :9810 is free.
    assert!(
        systemctl[0].contains("enable --now cgperf"),
        "{systemctl:?}"
    );
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let binary = exec.split(' ').next().expect("a binary");
    assert_eq!(binary, "/usr/local/bin/cgperf");
    let root_path = r_path.to_str().expect("UTF-8 path");
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "--mount", "--propagation", "private", "sh", "-ec"])
        .arg(format!(
            "ip link set lo up\nmount -t proc proc {root_path}/proc\nmount --rbind /sys {root_path}/sys\nexec chroot {root_path} \"$0\" \"$@\""
        ))
        .args(exec.split(' '));
    let exporter = Exporter::spawn_as_given(cmd, true);
    assert_eq!(exporter.addr, "[::]:9810", "the unit's listen address");
    exporter.wait_for("the root cgroup's context switches", |body| {
        common::value(
            body,
            "cgperf_events_total",
            &[("cgroup", "/"), ("event", "context-switches")],
        )
        .is_some_and(|n| n > 0.0)
    });
}

/// The forge's release workflow runs the script these tests run, with the
/// flags it has, for both architectures, and checks the arm64 files with
/// the script that can run them.
#[test]
fn the_release_workflow_runs_scripts_release() {
    let text = std::fs::read_to_string(repo(".github/workflows/release.yml")).expect("workflow");
    let workflow: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    let steps = workflow["jobs"]["release"]["steps"]
        .as_array()
        .expect("steps");
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    assert!(
        runs.contains(&"scripts/release --out dist --arch amd64,arm64"),
        "{runs:?}"
    );
    assert!(
        runs.contains(&"scripts/pmu-guest release-check dist"),
        "{runs:?}"
    );
    assert_eq!(workflow["on"]["push"]["tags"][0], "v*");
    let help = run(Command::new(repo("scripts/release")).arg("--help"));
    assert!(help.contains("--out"), "{help}");
    assert!(help.contains("--arch"), "{help}");
    let check = run(Command::new(repo("scripts/pmu-guest")).arg("--help"));
    assert!(check.contains("release-check"), "{check}");
}
