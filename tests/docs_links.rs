//! Every relative link of the README and of `docs/` resolves: to a file
//! that exists and, with `#anchor`, to one of its headings (as GitHub
//! names them).

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file below docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("readable docs") {
            let path = entry.expect("an entry").path();
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

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a page's inline links `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
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
    assert!(checked >= 10, "only {checked} links found");
}

#[test]
fn headings_are_named_as_github_names_them() {
    assert_eq!(
        slug(" Filters, counts by field value, uprobes and kprobes"),
        "filters-counts-by-field-value-uprobes-and-kprobes"
    );
    assert_eq!(
        slug(" Verifying against `perf stat -G`"),
        "verifying-against-perf-stat--g"
    );
}
