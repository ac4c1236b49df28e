//! The configuration reference (the README's YAML blocks) against the
//! parser: every key the parser accepts, at every level, is shown there,
//! and the schema block is a config `cgperf check` accepts.

mod common;

use common::*;

/// The README's ```yaml blocks.
fn readme_yaml() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    readme
        .split("```yaml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next().map(str::to_owned))
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
fn every_key_the_parser_accepts_is_in_the_reference_and_the_schema_checks() {
    let blocks = readme_yaml();
    let shown = blocks.join("\n");
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
    ];
    let mut keys = 0;
    for (level, config) in levels {
        for key in valid_keys(config) {
            keys += 1;
            assert!(
                shown.contains(&format!("{key}:")),
                "`{key}:` ({level}) is accepted but shown in none of the README's configs"
            );
        }
    }
    assert!(keys >= 30, "only {keys} keys found");
    // The schema block is a whole config, valid, with software events that
    // count on any machine (exit 0).
    let schema = blocks
        .iter()
        .find(|b| b.starts_with("interval:"))
        .expect("the schema block");
    let file = config_file(schema);
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 0, "{out}{err}");
}
