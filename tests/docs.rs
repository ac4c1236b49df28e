//! The documentation against cgperf itself: README.md and every page under
//! docs/.
//!
//! - Every relative link resolves, to a file and, with `#anchor`, to one of
//!   its headings as GitHub names them.
//! - The configuration reference (docs/configuration.md) shows every key the
//!   parser accepts, at every level, and its example configs pass
//!   `cgperf check` (which rejects unknown keys: so every key they show is
//!   accepted).
//! - The metrics reference (docs/metrics.md) documents every family a live
//!   `/metrics` serves, with its type and labels, and nothing it does not.
//! - Every command the pages show is run as written: by a test of this file,
//!   in a sandbox, or by the test of another file named in [`RUN_ELSEWHERE`],
//!   which reads it from its page.
//! - docs/design/layout.md names every top-level module of `src/`, and every
//!   `src/` path it names exists.
//! - The messages of docs/troubleshooting.md are cgperf's own.
//!
//! Commands are marked so: each line of a ```` ```sh ```` block (a trailing
//! `\` joins the next line, ` # ` starts a comment), and each line starting
//! with `$ ` in any other block, whose following lines are its output. In a
//! ```` ```console ```` block that output is compared with what the command
//! prints (each line shown must be printed; `…` stands for anything); in a
//! plain block it is an illustration. A ```` ```yaml NAME ```` block is a
//! file named NAME that the commands after it on the same page use.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Commands of the pages that a test of another file runs, reading them
/// from the page they are on: (command as written, comment dropped; the
/// file that runs it; what that file holds: the test's name).
const RUN_ELSEWHERE: [(&str, &str, &str); 16] = [
    (
        "scripts/test",
        ".ci/run",
        // CI runs the README's test command: see ci_runs_the_readmes_test_command.
        "exec scripts/test",
    ),
    (
        "tar -xzf cgperf-0.1.0.linux-amd64.tar.gz",
        "tests/release.rs",
        "fn the_download_and_run_lines_serve_metrics(",
    ),
    (
        "cgperf-0.1.0.linux-amd64/cgperf",
        "tests/release.rs",
        "fn the_download_and_run_lines_serve_metrics(",
    ),
    (
        "dpkg -i cgperf_0.1.0_amd64.deb",
        "tests/release.rs",
        "fn the_deb_installs_runs_and_goes_on_debian_11(",
    ),
    (
        "scripts/run check --config.file=config/example.yaml",
        "tests/deploy.rs",
        "fn the_example_config_checks_under_the_units_privileges(",
    ),
    (
        "cd cgperf-0.1.0.linux-amd64",
        "tests/release.rs",
        "fn the_tarball_install_steps_run_as_written(",
    ),
    (
        "install -m 0755 cgperf /usr/local/bin/cgperf",
        "tests/release.rs",
        "fn the_tarball_install_steps_run_as_written(",
    ),
    (
        "install -D -m 0644 cgperf.yaml /etc/cgperf/cgperf.yaml",
        "tests/release.rs",
        "fn the_tarball_install_steps_run_as_written(",
    ),
    (
        "install -m 0644 cgperf.service /etc/systemd/system/",
        "tests/release.rs",
        "fn the_tarball_install_steps_run_as_written(",
    ),
    (
        "systemctl daemon-reload && systemctl enable --now cgperf",
        "tests/deploy.rs",
        "fn the_systemd_unit_runs_as_written_and_counts_exactly(",
    ),
    (
        "systemctl reload cgperf",
        "tests/deploy.rs",
        "fn the_systemd_unit_runs_as_written_and_counts_exactly(",
    ),
    (
        "kubectl apply -k deploy/kubernetes/base",
        "tests/deploy.rs",
        "fn kustomize_renders_the_base_and_the_operator_overlay(",
    ),
    (
        "kubectl apply -k deploy/kubernetes/prometheus-operator",
        "tests/deploy.rs",
        "fn kustomize_renders_the_base_and_the_operator_overlay(",
    ),
    (
        "cgperf --compat=cadvisor",
        "tests/cadvisor.rs",
        "fn the_migration_pages_commands_run_as_written(",
    ),
    (
        "scripts/verify-hardware",
        "tests/verify.rs",
        "fn verify_hardware_runs_as_written_and_fails_past_its_tolerance(",
    ),
    (
        "ctr -n k8s.io images import --base-name ghcr.io/cgperf/cgperf dist/cgperf-0.1.0.oci.tar",
        "tests/container.rs",
        "fn the_image_counts_a_workload_in_another_container_under_containerd(",
    ),
];

/// The test of this file that runs `command`, if one does (none for those
/// [`RUN_ELSEWHERE`] lists).
fn runs_here(command: &str) -> Option<&'static str> {
    if RUN_ELSEWHERE.iter().any(|(c, _, _)| *c == command) {
        None
    } else if command.starts_with("cgperf --web.listen-address=") {
        Some("the_listen_address_lines_serve_there_only_and_the_default_everywhere")
    } else if command.starts_with("cgperf ") {
        Some("cgperf_commands_run_as_written_in_a_sandbox")
    } else if command == "scripts/run" || command == "scripts/build" || command.starts_with("curl ")
    {
        Some("scripts_run_serves_what_the_curl_lines_ask")
    } else if command.starts_with("perf stat ") {
        Some("perf_stat_agrees_with_cgperf_as_the_verifying_page_says")
    } else {
        None
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// `path` relative to the repository.
fn relative(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(repo().canonicalize().expect("the repository"))
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// README.md and every Markdown file below docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("readable docs")
            .map(|e| e.expect("an entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut pages);
    pages
}

/// One fenced block: its info string (`sh`, `yaml bad.yaml`, …), its
/// lines, and the page line its first line is on.
struct Block {
    info: String,
    lines: Vec<String>,
    line: usize,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            match open.take() {
                Some(block) => out.push(block),
                None => {
                    open = Some(Block {
                        info: info.trim().to_owned(),
                        lines: Vec::new(),
                        line: i + 2,
                    })
                }
            }
        } else if let Some(block) = &mut open {
            block.lines.push(line.to_owned());
        }
    }
    assert!(open.is_none(), "a code block is not closed");
    out
}

/// The text of a page outside its code blocks, one line per line.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push(line);
        }
    }
    out
}

// ---------------------------------------------------------------------
// Links

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation
/// other than `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings.
fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .into_iter()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The targets of a page's inline links `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        for (i, _) in line.match_indices("](") {
            let rest = &line[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
            }
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                page.parent().expect("a folder").join(path)
            };
            assert!(
                file.exists(),
                "{}: link to {target}: {} does not exist",
                page.display(),
                file.display()
            );
            if !anchor.is_empty() {
                let linked = std::fs::read_to_string(&file).expect("the linked page");
                assert!(
                    anchors(&linked).iter().any(|a| a == anchor),
                    "{}: link to {target}: no heading `#{anchor}` in {}",
                    page.display(),
                    file.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 50, "only {checked} links found");
}

#[test]
fn headings_are_named_as_github_names_them() {
    assert_eq!(
        slug(" Tracepoints: filters, counts by field value, uprobes and kprobes"),
        "tracepoints-filters-counts-by-field-value-uprobes-and-kprobes"
    );
    assert_eq!(
        slug(" Verifying against `perf stat -G`"),
        "verifying-against-perf-stat--g"
    );
}

#[test]
fn every_page_is_in_the_index_and_the_readme_is_short() {
    let index = read("docs/README.md");
    for page in pages() {
        let rel = relative(&page);
        let Some(inside) = rel.strip_prefix("docs/") else {
            continue;
        };
        if inside == "README.md" || inside.starts_with("runbooks/") {
            continue;
        }
        assert!(
            index.contains(&format!("]({inside})")),
            "docs/README.md does not link {rel}"
        );
    }
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines; move text to docs/"
    );
    assert!(
        readme.contains("](docs/README.md)"),
        "the README links the index"
    );
}

// ---------------------------------------------------------------------
// Configuration reference

/// docs/configuration.md's example configs: its ```yaml blocks (not the
/// named files of its commands).
fn reference_configs() -> Vec<(usize, String)> {
    blocks(&read("docs/configuration.md"))
        .into_iter()
        .filter(|b| b.info == "yaml")
        .map(|b| (b.line, b.lines.join("\n") + "\n"))
        .collect()
}

/// The keys the parser accepts where `config` has the unknown key `zzz`,
/// as its error lists them.
fn valid_keys(config: &str) -> Vec<String> {
    let file = config_file(config);
    let (code, _, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 1, "{err}");
    let listed = err
        .split("valid keys here: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no list of valid keys in:\n{err}"));
    listed.split(", ").map(str::to_owned).collect()
}

#[test]
fn every_key_the_parser_accepts_is_in_the_configuration_reference() {
    let shown = reference_configs()
        .into_iter()
        .map(|(_, c)| c)
        .collect::<Vec<_>>()
        .join("\n");
    let levels = [
        ("the top level", "zzz: 1\n"),
        (
            "a tracepoint entry",
            "tracepoints:\n  - {name: a:b, zzz: 1}\n",
        ),
        ("a probe", "probes:\n  - {zzz: 1}\n"),
        (
            "a cgroups selector",
            "groups: {a: [cs]}\ncgroups:\n  - {path: /, zzz: 1}\n",
        ),
        ("otlp", "otlp: {zzz: 1}\n"),
        ("a metric", "metrics:\n  - {zzz: 1}\n"),
        ("host", "host: {zzz: 1}\n"),
        ("a process", "processes:\n  - {zzz: 1}\n"),
    ];
    let mut keys = 0;
    for (level, config) in levels {
        for key in valid_keys(config) {
            keys += 1;
            let written = shown.lines().any(|l| {
                l.trim_start()
                    .trim_start_matches("- ")
                    .starts_with(&format!("{key}:"))
            });
            assert!(
                written,
                "`{key}:` ({level}) is accepted but docs/configuration.md's configs do not show it"
            );
        }
    }
    assert!(keys >= 30, "only {keys} keys found");
}

#[test]
fn the_configuration_references_configs_pass_cgperf_check() {
    require_root("probe the events of the reference's configs");
    let configs = reference_configs();
    assert!(configs.len() >= 2, "{} configs", configs.len());
    for (line, config) in configs {
        // As written: the backend the tests ask for is not added.
        let mut file = tempfile::Builder::new()
            .suffix(".yaml")
            .tempfile()
            .expect("temp file");
        std::io::Write::write_all(&mut file, config.as_bytes()).expect("write");
        let (code, out, err) =
            run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
        // 0: valid, and something counts here; 3: valid, nothing countable
        // on this machine. Never 1, an invalid config (an unknown key).
        assert!(
            code == 0 || code == 3,
            "docs/configuration.md:{line}: cgperf check exits {code}:\n{out}{err}"
        );
        assert!(
            !err.contains("invalid config") && out.starts_with("config:      valid"),
            "docs/configuration.md:{line}:\n{out}{err}"
        );
    }
}

// ---------------------------------------------------------------------
// Metrics reference

/// One documented family: its type and labels.
#[derive(Debug)]
struct Documented {
    kind: String,
    labels: BTreeSet<String>,
}

/// The backquoted words of a table cell.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// docs/metrics.md's table: family → its documented type and labels.
fn documented() -> BTreeMap<String, Documented> {
    let page = read("docs/metrics.md");
    let mut out = BTreeMap::new();
    for row in prose(&page).into_iter().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').skip(1).map(str::trim).collect();
        assert!(cells.len() >= 4, "{row}");
        let names = quoted(cells[0]);
        let kinds: Vec<&str> = cells[1].split(", ").collect();
        for (i, name) in names.iter().enumerate() {
            let kind = kinds.get(i).or(kinds.last()).expect("a type");
            let kind = if kind.contains("info") { "gauge" } else { kind };
            out.insert(
                name.clone(),
                Documented {
                    kind: kind.to_owned(),
                    labels: quoted(cells[2]).into_iter().collect(),
                },
            );
        }
    }
    out
}

/// The families of a scrape in the classic text format: name → (type,
/// every label name its samples have).
fn served(body: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("name and type");
            out.insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
        } else if !line.starts_with('#') {
            let (name, labels) = line.split_once('{').unwrap_or((line, ""));
            let name = name.split(' ').next().unwrap_or(name);
            let Some((_, names)) = out.get_mut(name) else {
                continue;
            };
            for pair in labels.split("\",") {
                if let Some((label, _)) = pair.split_once("=\"") {
                    names.insert(label.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn every_served_family_is_in_the_metrics_reference_with_its_type_and_labels_and_nothing_else_is() {
    require_root("count cgroups' events");
    // Every condition under which a family is served: a group, a
    // tracepoint counted by field (its losses), a tracepoint this kernel
    // lacks (a `reason`), a probe, the OTLP push (to nowhere) and
    // cAdvisor's families.
    let config = config_file(
        "interval: 200ms\ngroups:\n  sched: [task-clock, context-switches]\n\
         tracepoints:\n  - {name: raw_syscalls:sys_enter, by: [id], syscall_name: id, as: calls}\n\
         \x20 - sched:no_such_tracepoint\nprobes:\n  - {uprobe: /no/such/binary:main, as: nothing}\n\
         metrics:\n  - {name: busy, expr: task-clock * 5}\ncgroups:\n  - path: /\n",
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()))
        .arg("--compat=cadvisor")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1");
    let exporter = Exporter::spawn(cmd);
    exporter.wait_collections(2);
    let body = exporter.wait_for("every kind of series", |b| {
        b.contains("cgperf_events_lost_total{")
            && b.contains("container_perf_events_total{")
            && b.contains("cgperf_metric{")
    });
    let served = served(&body);
    let documented = documented();
    // The table and the scrape were both read (a parser that finds
    // nothing would pass the comparisons below).
    assert!(documented.len() >= 35, "{documented:?}");
    assert!(served.len() >= 35, "{served:?}");
    // Labels that are values of the config or the machine, not of the
    // family: `by:` fields and the syscall name.
    let variable: BTreeSet<&str> = ["id", "syscall", "cpu"].into();
    for (name, (kind, labels)) in &served {
        let doc = documented
            .get(name)
            .unwrap_or_else(|| panic!("{name} is served but not in docs/metrics.md"));
        assert_eq!(&doc.kind, kind, "{name}'s type in docs/metrics.md");
        for label in labels {
            assert!(
                doc.labels.contains(label)
                    || (name.starts_with("cgperf_events") && variable.contains(label.as_str())),
                "{name}'s label `{label}` is not in docs/metrics.md ({:?})",
                doc.labels
            );
        }
    }
    for name in documented.keys() {
        assert!(
            served.contains_key(name),
            "{name} is in docs/metrics.md but not served:\n{body}"
        );
    }
}

/// The `reason`s docs/metrics.md lists for an error counter `family`: the
/// backquoted words of its row's meaning, those of another error counter
/// it refers to included.
fn documented_reasons(family: &str) -> BTreeSet<String> {
    let page = read("docs/metrics.md");
    let row = prose(&page)
        .into_iter()
        .find(|l| l.starts_with(&format!("| `{family}` |")))
        .unwrap_or_else(|| panic!("docs/metrics.md has no row {family}"))
        .to_owned();
    let meaning = row.split('|').nth(4).expect("a meaning");
    let mut out = BTreeSet::new();
    for word in quoted(meaning) {
        if word.ends_with("_errors_total") {
            out.extend(documented_reasons(&word));
        } else if !word.is_empty()
            && !word.starts_with("cgperf_")
            && word.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            out.insert(word);
        }
    }
    out
}

/// The `reason`s of `family` in a scrape.
fn served_reasons(body: &str, family: &str) -> BTreeSet<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix(&format!("{family}{{reason=\"")))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// The first scrape of a daemon, before any error: every reason
/// docs/metrics.md lists for the error counters (OTLP's with OTLP on) is
/// there at 0, and no other; every flag a HELP text names is one of cgperf's, described as
/// `--help` describes it (a statistic off by default says so); and every
/// family `--help` says a flag that is off by default turns on says in its
/// HELP that it is off unless that flag.
#[test]
fn a_first_scrape_has_the_documented_error_reasons_and_help_texts_name_the_flags_as_they_are() {
    require_root("count the root cgroup");
    // OTLP runs, towards a collector that takes the connection and never
    // answers within the test: nothing has failed yet.
    let collector = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let exporter = Exporter::start(Some(&format!(
        "interval: 1h\ngroups:\n  sched: [task-clock]\ncgroups:\n  - path: /\n\
         otlp: {{endpoint: \"http://{}\", interval: 1h, timeout: 1h}}\n",
        collector.local_addr().expect("its address")
    )));
    let body = exporter.scrape();
    for (family, least) in [
        ("cgperf_read_errors_total", 8),
        ("cgperf_open_errors_total", 8),
        ("cgperf_otlp_export_failures_total", 5),
    ] {
        let documented = documented_reasons(family);
        let served = served_reasons(&body, family);
        assert!(served.len() >= least, "{family}: {served:?}");
        assert_eq!(
            documented, served,
            "{family}: docs/metrics.md against the scrape"
        );
        for reason in &served {
            assert_eq!(value(&body, family, &[("reason", reason)]), Some(0.0));
        }
    }
    let (code, help, _) = run_cgperf(&["--help"]);
    assert_eq!(code, 0, "{help}");
    // `--help`'s paragraph of each flag, joined.
    let paragraph = |flag: &str| -> String {
        let mut lines = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(flag));
        let first = lines
            .next()
            .unwrap_or_else(|| panic!("`cgperf --help` has no {flag}"));
        std::iter::once(first)
            .chain(lines.take_while(|l| !l.trim_start().starts_with("--")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut named = 0;
    for line in body.lines().filter(|l| l.starts_with("# HELP ")) {
        for flag in line.split_whitespace().filter_map(|w| {
            let w = w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '.');
            w.starts_with("--")
                .then(|| w.trim_end_matches('.').to_owned())
        }) {
            named += 1;
            let said = paragraph(&flag);
            if said.contains("Off by default") {
                assert!(
                    line.contains(&format!("off unless cgperf runs with {flag}"))
                        || line.contains(&format!("off unless {flag}")),
                    "{line}\nsays otherwise than `cgperf --help`: {said}"
                );
            }
        }
    }
    assert!(named >= 2, "no HELP text names a flag:\n{body}");
    // The other way round: every family a flag's paragraph of `--help`
    // names, where it says the flag is off by default, has a HELP text
    // that says it is off unless that flag.
    let lines: Vec<&str> = help.lines().collect();
    let mut held = 0;
    for (i, line) in lines.iter().enumerate() {
        if !line.trim_start().starts_with('-') {
            continue;
        }
        let Some(flag) = line
            .split_whitespace()
            .find(|w| w.starts_with("--"))
            .and_then(|w| w.split(['=', '<', ',']).next())
        else {
            continue;
        };
        let said = std::iter::once(*line)
            .chain(
                lines[i + 1..]
                    .iter()
                    .copied()
                    .take_while(|l| !l.trim_start().starts_with('-')),
            )
            .collect::<Vec<_>>()
            .join(" ");
        if !said.contains("Off by default") {
            continue;
        }
        for family in said
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .filter(|w| w.starts_with("cgperf_"))
        {
            let text = body
                .lines()
                .find(|l| l.starts_with(&format!("# HELP {family} ")))
                .unwrap_or_else(|| {
                    panic!(
                        "`cgperf --help` names {family} under {flag}; /metrics has no such family"
                    )
                });
            assert!(
                text.contains(&format!("off unless cgperf runs with {flag}"))
                    || text.contains(&format!("off unless {flag}")),
                "{text}\ndoes not say it is off unless {flag}, as `cgperf --help` does: {said}"
            );
            held += 1;
        }
    }
    assert!(
        held >= 2,
        "no family `cgperf --help` calls off by default:\n{help}"
    );
}

/// The series docs/troubleshooting.md shows for a tracepoint this kernel
/// does not have, as a daemon serves them: with that tracepoint alone
/// (the group takes its reason), and beside one that counts (the group
/// counts, the tracepoint's own series says 0).
#[test]
fn the_troubleshooting_pages_unknown_tracepoint_series_are_served() {
    require_root("read tracefs");
    let page = read("docs/troubleshooting.md");
    let mut shown = Vec::new();
    for line in prose(&page) {
        for word in line.split('`').skip(1).step_by(2) {
            let Some((series, value)) = word.rsplit_once("} ") else {
                continue;
            };
            let Some((name, labels)) = series.split_once('{') else {
                continue;
            };
            if name.ends_with("_supported") {
                let labels: Vec<(String, String)> = labels
                    .split(',')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                    .collect();
                shown.push((
                    name.to_owned(),
                    labels,
                    value.parse::<f64>().expect("a value"),
                ));
            }
        }
    }
    assert_eq!(shown.len(), 2, "{shown:?}");
    let unknown = shown
        .iter()
        .flat_map(|(_, labels, _)| labels)
        .find(|(k, _)| k == "event")
        .map(|(_, v)| v.clone())
        .expect("the unknown tracepoint");
    let scrape = |tracepoints: &str| {
        let exporter = Exporter::start(Some(&format!(
            "interval: 200ms\ntracepoints: [{tracepoints}]\ncgroups:\n  - path: /\n"
        )));
        exporter.wait_collections(1)
    };
    let alone = scrape(&unknown);
    for (name, labels, want) in &shown {
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (&**k, &**v)).collect();
        assert_eq!(
            value(&alone, name, &labels),
            Some(*want),
            "{name}{labels:?}:\n{alone}"
        );
    }
    let beside = scrape(&format!("sched:sched_switch, {unknown}"));
    let (name, labels, want) = &shown[0];
    assert_eq!(name, "cgperf_event_supported");
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (&**k, &**v)).collect();
    assert_eq!(value(&beside, name, &labels), Some(*want), "{beside}");
    assert_eq!(
        value(
            &beside,
            "cgperf_group_supported",
            &[("group", "tracepoints")]
        ),
        Some(1.0),
        "{beside}"
    );
    assert!(
        !beside.contains("reason=\"unknown_tracepoint\""),
        "{beside}"
    );
}

/// docs/metrics.md's figure for gzip, "N to M times smaller", measured:
/// the embedded default config's scrape, plain and with
/// `Accept-Encoding: gzip` as Prometheus asks for it.
#[test]
fn the_gzip_figure_of_the_metrics_reference_is_what_a_scrape_measures() {
    require_root("count the default config's cgroups");
    let page = read("docs/metrics.md");
    let figure = page
        .split("default config's scrape is ")
        .nth(1)
        .and_then(|rest| rest.split(" times smaller").next())
        .expect("docs/metrics.md states how much gzip saves");
    let (low, high) = figure.split_once(" to ").expect("N to M");
    let (low, high): (f64, f64) = (
        low.parse().expect("a number"),
        high.parse().expect("a number"),
    );
    let exporter = Exporter::start(None);
    exporter.wait_collections(2);
    let plain = http_request(&exporter.addr, "/metrics", &[("Accept", "text/plain")]).1;
    let (head, packed) = http_request(
        &exporter.addr,
        "/metrics",
        &[("Accept", "text/plain"), ("Accept-Encoding", "gzip")],
    );
    assert!(
        head.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{head}"
    );
    let ratio = plain.len() as f64 / packed.len() as f64;
    eprintln!(
        "gzip: {} bytes -> {} bytes, {ratio:.2} times smaller",
        plain.len(),
        packed.len()
    );
    assert!(
        (low..=high).contains(&ratio),
        "docs/metrics.md says {low} to {high} times; measured {} -> {} bytes, {ratio:.2}",
        plain.len(),
        packed.len()
    );
}

// ---------------------------------------------------------------------
// Commands

/// A command shown on a page.
#[derive(Debug, Clone)]
struct Shown {
    /// `README.md`, `docs/….md`.
    page: String,
    line: usize,
    /// As written, comment dropped, continuations joined.
    command: String,
    /// The output shown after it in a ```console block, to compare.
    output: Option<Vec<String>>,
    /// The output shown after it in another block, an illustration.
    illustration: Vec<String>,
    /// Files named by ```yaml NAME blocks before it on its page, as they
    /// stand at that point.
    files: BTreeMap<String, String>,
}

/// `line` without a trailing ` # comment`.
fn uncommented(line: &str) -> &str {
    line.split(" #").next().expect("a command").trim()
}

fn commands_of(page: &str, text: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut files = BTreeMap::new();
    for block in blocks(text) {
        let mut words = block.info.split_whitespace();
        let lang = words.next().unwrap_or("");
        if lang == "yaml"
            && let Some(name) = words.next()
        {
            files.insert(name.to_owned(), block.lines.join("\n") + "\n");
            continue;
        }
        if lang == "sh" {
            let mut joined = String::new();
            let mut first = block.line;
            for (i, line) in block.lines.iter().enumerate() {
                if joined.is_empty() {
                    first = block.line + i;
                }
                let line = uncommented(line);
                if let Some(head) = line.strip_suffix('\\') {
                    joined.push_str(head.trim());
                    joined.push(' ');
                    continue;
                }
                joined.push_str(line);
                if !joined.trim().is_empty() {
                    out.push(Shown {
                        page: page.to_owned(),
                        line: first,
                        command: joined.trim().to_owned(),
                        output: None,
                        illustration: Vec::new(),
                        files: files.clone(),
                    });
                }
                joined.clear();
            }
            continue;
        }
        for (i, line) in block.lines.iter().enumerate() {
            if let Some(command) = line.strip_prefix("$ ") {
                let shown: Vec<String> = block.lines[i + 1..]
                    .iter()
                    .take_while(|l| !l.starts_with("$ "))
                    .filter(|l| !l.trim().is_empty())
                    .cloned()
                    .collect();
                let console = lang == "console";
                out.push(Shown {
                    page: page.to_owned(),
                    line: block.line + i,
                    command: command.trim().to_owned(),
                    output: console.then(|| shown.clone()),
                    illustration: if console { Vec::new() } else { shown },
                    files: files.clone(),
                });
            }
        }
    }
    out
}

/// Every command shown on every page.
fn commands() -> Vec<Shown> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        out.extend(commands_of(&relative(&page), &text));
    }
    out
}

#[test]
fn every_command_shown_is_run_by_a_test() {
    let shown = commands();
    assert!(shown.len() >= 20, "only {} commands found", shown.len());
    let mut elsewhere_used = BTreeSet::new();
    for s in &shown {
        if runs_here(&s.command).is_some() {
            continue;
        }
        let Some((_, file, test)) = RUN_ELSEWHERE.iter().find(|(c, _, _)| *c == s.command) else {
            panic!(
                "{}:{}: `{}` is run by no test: run it in tests/docs.rs, or list in RUN_ELSEWHERE the test that reads it from {} and runs it",
                s.page, s.line, s.command, s.page
            );
        };
        let runner = read(file);
        assert!(
            runner.contains(test),
            "{file} has no `{test}`, which should run `{}`",
            s.command
        );
        // The test reads the command from its page (the README is read
        // by its name too).
        let page_name = Path::new(&s.page).file_name().expect("a name");
        assert!(
            *file == ".ci/run" || runner.contains(&*page_name.to_string_lossy()),
            "{file} does not read {}, where `{}` is",
            s.page,
            s.command
        );
        elsewhere_used.insert(s.command.clone());
    }
    for (command, file, _) in RUN_ELSEWHERE {
        assert!(
            elsewhere_used.contains(command),
            "RUN_ELSEWHERE lists `{command}` ({file}), which no page shows any more"
        );
    }
}

/// CI (.ci/run) runs the README's test command, its second command.
#[test]
fn ci_runs_the_readmes_test_command() {
    let readme = commands_of("README.md", &read("README.md"));
    assert_eq!(
        readme[0].command, "scripts/run",
        "the README's first command"
    );
    assert_eq!(
        readme[1].command, "scripts/test",
        "the README's second command"
    );
    let ci = read(".ci/run");
    let exec = ci
        .lines()
        .find_map(|l| l.strip_prefix("exec "))
        .expect(".ci/run execs the test command");
    assert_eq!(exec, readme[1].command);
}

/// Collapses runs of white space, so that aligned columns compare.
fn collapsed(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a printed line is the line shown, `…` standing for anything.
fn matches(shown: &str, printed: &str) -> bool {
    let shown = collapsed(shown);
    let printed = collapsed(printed);
    let parts: Vec<&str> = shown.split('…').collect();
    if parts.len() == 1 {
        return shown == printed;
    }
    let mut at = 0;
    for (i, part) in parts.iter().enumerate() {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some(found) = printed[at..].find(part) else {
            return false;
        };
        if i == 0 && found != 0 {
            return false;
        }
        at += found + part.len();
    }
    parts.last().is_some_and(|p| p.trim().is_empty()) || at == printed.len()
}

#[test]
fn shown_output_matches_with_ellipses() {
    assert!(matches("a  b", "a b"));
    assert!(matches("a …; c", "a b; c"));
    assert!(!matches("a …; c", "a b; d"));
    assert!(!matches("x", "y"));
}

/// A directory where commands run: files of the page written into it,
/// `cgperf` on the PATH as the binary under test.
struct Sandbox {
    dir: tempfile::TempDir,
    path: String,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = dir.path().join(".bin");
        std::fs::create_dir(&bin).expect("bin dir");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cgperf"), bin.join("cgperf"))
            .expect("cgperf on the PATH");
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Self { dir, path }
    }

    /// Runs `shown` as written with `sh -c`, its page's files in place:
    /// (exit code, stdout and stderr).
    fn run(&self, shown: &Shown) -> (i32, String) {
        for (name, content) in &shown.files {
            std::fs::write(self.dir.path().join(name), content).expect("write a page's file");
        }
        let out = Command::new("sh")
            .arg("-c")
            .arg(&shown.command)
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .stdin(Stdio::null())
            .output()
            .expect("sh runs");
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

#[test]
fn cgperf_commands_run_as_written_in_a_sandbox() {
    require_root("count events and read tracefs as the pages' commands do");
    let sandbox = Sandbox::new();
    let mine: Vec<Shown> = commands()
        .into_iter()
        .filter(|s| runs_here(&s.command) == Some("cgperf_commands_run_as_written_in_a_sandbox"))
        .collect();
    assert!(mine.len() >= 6, "{mine:?}");
    for s in &mine {
        let at = format!("{}:{}: `{}`", s.page, s.line, s.command);
        let (code, printed) = sandbox.run(s);
        let shown = s.output.clone().unwrap_or_default();
        // A check of an invalid config exits 1; a check of a valid one 0,
        // or 3 where this machine can count none of it; anything else 0.
        let invalid = shown.iter().any(|l| l.contains("invalid config"));
        let ok = if invalid {
            code == 1
        } else if s.command.starts_with("cgperf check") {
            code == 0 || code == 3
        } else {
            code == 0
        };
        assert!(ok, "{at} exits {code}:\n{printed}");
        for line in &shown {
            assert!(
                printed.lines().any(|p| matches(line, p)),
                "{at} does not print, as its page shows:\n{line}\nbut:\n{printed}"
            );
        }
        // A workload of N getppid() calls is counted N, as shown.
        if let Some(n) = s.command.split("for 1..").nth(1) {
            let n: u64 = n
                .trim_end_matches('\'')
                .parse()
                .unwrap_or_else(|_| panic!("{at}: a count"));
            let grouped = n
                .to_string()
                .as_bytes()
                .rchunks(3)
                .rev()
                .map(|c| std::str::from_utf8(c).expect("digits"))
                .collect::<Vec<_>>()
                .join(",");
            let want = format!("{grouped} syscalls:sys_enter_getppid");
            let is_counted = |l: &String| collapsed(l).starts_with(&want);
            assert!(
                s.illustration.iter().any(is_counted),
                "{at}: its page shows {want}"
            );
            assert!(
                printed.lines().any(|l| collapsed(l).starts_with(&want)),
                "{at}: not {want}:\n{printed}"
            );
        }
    }
}

/// The security page's listen-address line, as written, in a network
/// namespace whose loopback has a second, node-like address: it serves on
/// the address it names and the other address refuses the connection;
/// `cgperf` without the flag serves on both, as the security page, the
/// getting-started page and the unit's comment (which give the same flag)
/// say.
#[test]
fn the_listen_address_lines_serve_there_only_and_the_default_everywhere() {
    require_root("make network namespaces");
    let lines: Vec<Shown> = commands()
        .into_iter()
        .filter(|s| {
            runs_here(&s.command)
                == Some("the_listen_address_lines_serve_there_only_and_the_default_everywhere")
        })
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let shown = &lines[0];
    let flag = shown.command.split_whitespace().nth(1).expect("the flag");
    let (host, port) = flag
        .trim_start_matches("--web.listen-address=")
        .rsplit_once(':')
        .expect("HOST:PORT");
    assert!(
        read("docs/getting-started.md").contains(&format!("`{flag}`")),
        "docs/getting-started.md gives another flag than {}",
        shown.page
    );
    assert!(
        read("deploy/systemd/cgperf.service").contains(&format!("# write {flag} ")),
        "the unit's comment gives another flag than {}",
        shown.page
    );
    let node = "10.98.76.5";
    // `command` as written, cgperf on the PATH, in a network namespace of
    // its own (every `sh` execs the next, so the exporter is the process).
    let sandbox = Sandbox::new();
    let serve = |command: &str| {
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--net",
            "sh",
            "-ec",
            &format!("ip link set lo up\nip addr add {node}/32 dev lo\nexec sh -c \"exec $0\""),
            command,
        ])
        .env("PATH", &sandbox.path)
        .current_dir(sandbox.dir.path());
        Exporter::spawn_as_given(cmd, true)
    };
    // The HTTP status of GET /metrics on `host`, from the exporter's
    // network namespace; curl's exit code when none.
    let status = |exporter: &Exporter, host: &str| {
        let out = Command::new("nsenter")
            .arg(format!("--net=/proc/{}/ns/net", exporter.pid()))
            .args(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["--max-time", "10"])
            .arg(format!("http://{host}:{port}/metrics"))
            .output()
            .expect("curl runs");
        match out.status.code() {
            Some(0) => String::from_utf8_lossy(&out.stdout).into_owned(),
            code => format!("curl exit {code:?}"),
        }
    };
    let there = serve(&shown.command);
    assert_eq!(there.addr, format!("{host}:{port}"), "{}", shown.command);
    assert_eq!(status(&there, host), "200", "{}", shown.command);
    // Connection refused (curl's 7) on the node address.
    assert_eq!(
        status(&there, node),
        "curl exit Some(7)",
        "{}",
        shown.command
    );
    drop(there);
    let everywhere = serve("cgperf");
    assert_eq!(everywhere.addr, format!("[::]:{port}"), "the default");
    assert_eq!(status(&everywhere, host), "200");
    assert_eq!(status(&everywhere, node), "200");
}

/// `scripts/build`, then `scripts/run` (the README's first
/// command), in a network namespace of its own where `:9810` is free; then
/// the getting-started page's `curl` lines, as written, from inside it.
#[test]
fn scripts_run_serves_what_the_curl_lines_ask() {
    require_root("run the exporter on the embedded default config");
    let shown = commands();
    let find = |command: &str| {
        shown
            .iter()
            .find(|s| s.command == command)
            .unwrap_or_else(|| panic!("no page shows `{command}`"))
            .clone()
    };
    let build = find("scripts/build");
    let out = as_from_a_shell(&mut Command::new("sh"))
        .arg("-c")
        .arg(&build.command)
        .current_dir(repo())
        .stdin(Stdio::null())
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}:{}: {}:\n{}",
        build.page,
        build.line,
        build.command,
        String::from_utf8_lossy(&out.stderr)
    );
    let run = find("scripts/run");
    assert_eq!(run.page, "README.md");
    let mut cmd = Command::new("unshare");
    as_from_a_shell(&mut cmd)
        .args(["--net", "sh", "-ec", "ip link set lo up\nexec \"$@\"", "sh"])
        .arg(&run.command)
        .current_dir(repo());
    let exporter = Exporter::spawn_as_given(cmd, true);
    assert_eq!(exporter.addr, "[::]:9810", "the default listen address");
    let curls: Vec<&Shown> = shown
        .iter()
        .filter(|s| s.command.starts_with("curl "))
        .collect();
    assert!(curls.len() >= 2, "{curls:?}");
    for s in curls {
        // Ready once the first collection has finished.
        let deadline = Instant::now() + Duration::from_secs(20);
        let printed = loop {
            let out = Command::new("nsenter")
                .arg(format!("--net=/proc/{}/ns/net", exporter.pid()))
                .args(["sh", "-c", &s.command])
                .stdin(Stdio::null())
                .output()
                .expect("nsenter runs");
            let printed = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() && !printed.contains("Not ready") {
                break printed;
            }
            assert!(
                Instant::now() < deadline,
                "{}:{}: `{}`: {}{printed}{}",
                s.page,
                s.line,
                s.command,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        if s.command.contains("/-/ready") {
            assert_eq!(printed.trim(), "Ready", "{}", s.command);
        } else {
            assert!(
                printed.contains("cgperf_group_supported{group=\"sched\"} 1"),
                "{}: {printed}",
                s.command
            );
        }
    }
}

/// docs/verifying.md's `perf stat -G` line, as written, on the cgroup it
/// names, while a workload runs there and cgperf counts it too: perf and
/// cgperf count the workload's getppid() calls exactly.
#[test]
fn perf_stat_agrees_with_cgperf_as_the_verifying_page_says() {
    require_root("create the cgroup the page names and run perf stat -a");
    const N: u64 = 54_321;
    let s = commands()
        .into_iter()
        .find(|s| s.command.starts_with("perf stat "))
        .expect("a perf stat command");
    let cgroup = s
        .command
        .split(" -G ")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ']).next())
        .expect("-G names a cgroup")
        .to_owned();
    let root = cgroup2_root();
    let parent = root.join(cgroup.split('/').next().expect("a parent"));
    let made_parent = !parent.exists();
    let dir = root.join(&cgroup);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    struct Remove(Vec<PathBuf>);
    impl Drop for Remove {
        fn drop(&mut self) {
            for dir in &self.0 {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
    let mut made = vec![dir.clone()];
    if made_parent {
        made.push(parent);
    }
    let _remove = Remove(made);
    let rel = format!("/{cgroup}");
    let exporter = Exporter::start(Some(&format!(
        "interval: 200ms\ngroups:\n  sched: [task-clock, context-switches]\n\
         tracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {rel}\n"
    )));
    let before = exporter.wait_for("the cgroup's series", |b| getppid_of(b, &rel).is_some());
    let perf = Command::new("sh")
        .arg("-c")
        .arg(&s.command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("perf stat starts (scripts/test installs linux-perf)");
    std::thread::sleep(Duration::from_millis(700));
    getppid_workload(Some(&dir), N);
    let out = perf.wait_with_output().expect("perf stat ends");
    let printed = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}: {}\n{printed}",
        s.command,
        out.status
    );
    let perf_count: f64 = printed
        .lines()
        .find(|l| l.contains(",syscalls:sys_enter_getppid,"))
        .and_then(|l| l.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no getppid count in:\n{printed}"));
    assert_eq!(perf_count, N as f64, "perf stat:\n{printed}");
    let after = exporter.wait_collections(2);
    let counted =
        getppid_of(&after, &rel).expect("counted") - getppid_of(&before, &rel).expect("0");
    assert_eq!(counted, N as f64, "cgperf");
}

// ---------------------------------------------------------------------
// Layout and messages

#[test]
fn the_layout_page_names_every_module_and_only_paths_that_exist() {
    let page = read("docs/design/layout.md");
    let mut named = BTreeSet::new();
    for word in page.split('`').skip(1).step_by(2) {
        if word.starts_with("src/") {
            assert!(
                repo().join(word).exists(),
                "docs/design/layout.md names {word}, which does not exist"
            );
            named.insert(word.trim_end_matches('/').to_owned());
        }
    }
    let mut modules = 0;
    for entry in std::fs::read_dir(repo().join("src")).expect("src") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() || name.ends_with(".rs") {
            modules += 1;
            assert!(
                named.contains(&format!("src/{name}")),
                "docs/design/layout.md does not name src/{name}{}",
                if path.is_dir() { "/" } else { "" }
            );
        }
    }
    assert!(modules >= 20, "{modules} modules");
}

/// cgperf's source, with strings continued by `\\` joined as they print
/// (the next line's leading white space is not part of the string).
fn source_text() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).expect("src") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                let mut continued = false;
                for line in text.lines() {
                    let line = if continued { line.trim_start() } else { line };
                    match line.strip_suffix('\\') {
                        Some(head) => {
                            out.push_str(head);
                            continued = true;
                        }
                        None => {
                            out.push_str(line);
                            out.push('\n');
                            continued = false;
                        }
                    }
                }
            }
        }
    }
    let mut out = String::new();
    walk(&repo().join("src"), &mut out);
    out
}

#[test]
fn the_troubleshooting_messages_are_cgperfs_own() {
    let page = read("docs/troubleshooting.md");
    let source = source_text();
    let mut messages = 0;
    for block in blocks(&page).into_iter().filter(|b| b.info.is_empty()) {
        for (i, line) in block.lines.iter().enumerate() {
            // The longest stretch of the message that no value interrupts:
            // 20 characters of it at least are in the source as written.
            let fragment = line
                .split(['…', '`', '"'])
                .map(str::trim)
                .max_by_key(|f| f.len())
                .unwrap_or("");
            assert!(
                fragment.len() >= 12,
                "docs/troubleshooting.md:{}: too little of the message to find: {line}",
                block.line + i
            );
            let window = fragment.len().min(20);
            let found = (0..=fragment.len() - window)
                .filter(|&at| {
                    fragment.is_char_boundary(at) && fragment.is_char_boundary(at + window)
                })
                .any(|at| source.contains(&fragment[at..at + window]));
            assert!(
                found,
                "docs/troubleshooting.md:{}: cgperf prints no such message: {line}",
                block.line + i
            );
            messages += 1;
        }
    }
    assert!(messages >= 20, "only {messages} messages");
}
