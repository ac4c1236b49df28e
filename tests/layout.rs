//! The source layout's rules, checked on the text of `src/`:
//!
//! - no two modules import each other, directly or in a circle: neither the
//!   top-level modules of `src/` (a directory module counts as one), nor
//!   the submodules of each directory module among themselves, nested ones
//!   (`backend/bpf/`) included;
//! - no source file under `src/` holds more than [`MAX_LINES`] lines of
//!   code before its tests, but the event-syntax parsers of `src/events/`
//!   ([`PARSERS`]): one grammar reads best in one file.
//!
//! A cycle means neither module can be understood, tested or replaced
//! without the other; a long file is where the next feature would have to
//! be threaded through instead of added beside (the metric catalogue grew
//! to 1,058 lines before it was split by target).
//!
//! References are `crate::…`, `super::…` and `self::…` paths in code that
//! is not test code (inline `#[cfg(test)] mod … { … }` modules and `tests`
//! files are left out), comments stripped. Inside a directory module, the
//! nodes are its submodules: a reference to an item its `mod.rs` defines is
//! to the module's shared vocabulary, not an edge; one to an item `mod.rs`
//! re-exports counts as a reference to the submodule it comes from.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Lines of code (before the tests) a source file may hold.
const MAX_LINES: usize = 600;

/// The event-syntax parsers, which [`MAX_LINES`] does not bound: perf's
/// event names, tracepoint format files, probe locations.
const PARSERS: [&str; 3] = [
    "src/events/mod.rs",
    "src/events/format.rs",
    "src/events/probe.rs",
];

/// One source file: where it is, its module path, its code without tests
/// and comments.
struct Source {
    path: PathBuf,
    module: Vec<String>,
    /// Lines before its inline test module.
    code_lines: usize,
    code: String,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`;
/// `lib.rs` and `main.rs` are the crate root (empty).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The code of `text` before its inline test module, and how many lines
/// that is.
fn before_tests(text: &str) -> (&str, usize) {
    let lines: Vec<&str> = text.lines().collect();
    let mut offset = 0;
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", |l| l.trim());
        // `mod tests {`, `pub(crate) mod tests {`
        let item = next.split_once("mod ").map_or("", |(vis, _)| vis.trim());
        let module = item.is_empty() || item.starts_with("pub");
        if line.trim() == "#[cfg(test)]" && next.contains("mod ") && module && next.ends_with('{') {
            return (&text[..offset], i);
        }
        offset += line.len() + 1;
    }
    (text, lines.len())
}

/// `text` without `//` and `/* */` comments; string literals are kept as
/// they are (a `//` inside one cuts the rest of its line, which never hides
/// a path in this code base's style).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |n| &after[n..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |n| &after[n + 2..]);
            out.push(' ');
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn sources() -> Vec<Source> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut sources = Vec::new();
    for path in files {
        let relative = path.strip_prefix(&root).expect("under src/").to_path_buf();
        let module = module_of(&relative);
        if module.last().is_some_and(|m| m == "tests") {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (code, code_lines) = before_tests(&text);
        sources.push(Source {
            path: Path::new("src").join(relative),
            module,
            code_lines,
            code: strip_comments(code),
        });
    }
    sources
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn skip_space(s: &[u8], i: &mut usize) {
    while *i < s.len() && s[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

/// The paths of the use tree (or plain path) starting at `s[*i]`: `a::b`,
/// `a::{b, c::d}`, `a::*`, `a as b`.
fn use_tree(s: &[u8], i: &mut usize) -> Vec<Vec<String>> {
    skip_space(s, i);
    if s.get(*i) == Some(&b'{') {
        *i += 1;
        let mut out = Vec::new();
        loop {
            skip_space(s, i);
            match s.get(*i) {
                None => return out,
                Some(b'}') => {
                    *i += 1;
                    return out;
                }
                Some(b',') => *i += 1,
                Some(_) => {
                    let before = *i;
                    out.extend(use_tree(s, i));
                    if *i == before {
                        // Something this reader does not know: skip it.
                        *i += 1;
                    }
                }
            }
        }
    }
    let start = *i;
    if s.get(*i) == Some(&b'*') {
        *i += 1;
    } else {
        while *i < s.len() && is_ident(s[*i]) {
            *i += 1;
        }
    }
    let ident = String::from_utf8_lossy(&s[start..*i]).into_owned();
    if ident.is_empty() {
        return vec![Vec::new()];
    }
    if s[*i..].starts_with(b"::") {
        *i += 2;
        return use_tree(s, i)
            .into_iter()
            .map(|mut rest| {
                rest.insert(0, ident.clone());
                rest
            })
            .collect();
    }
    let mut after = *i;
    skip_space(s, &mut after);
    if s[after..].starts_with(b"as ") {
        after += 3;
        skip_space(s, &mut after);
        while after < s.len() && is_ident(s[after]) {
            after += 1;
        }
        *i = after;
    }
    vec![vec![ident]]
}

/// Every path of `code` that starts with `crate::`, `super::` or `self::`,
/// resolved to an absolute module path from `module` (the file's).
fn references(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let s = code.as_bytes();
    let mut out = Vec::new();
    for (prefix, base) in [
        ("crate::", Some(Vec::new())),
        ("super::", module.split_last().map(|(_, up)| up.to_vec())),
        ("self::", Some(module.to_vec())),
    ] {
        let Some(base) = base else { continue };
        let mut from = 0;
        while let Some(found) = code[from..].find(prefix) {
            let at = from + found;
            from = at + prefix.len();
            if at > 0 && (is_ident(s[at - 1]) || s[at - 1] == b'$' || s[at - 1] == b':') {
                continue;
            }
            let mut i = from;
            for mut path in use_tree(s, &mut i) {
                // `super::super::x`
                let mut base = base.clone();
                while path.first().is_some_and(|p| p == "super") {
                    path.remove(0);
                    base.pop();
                }
                base.extend(path);
                out.push(base);
            }
        }
    }
    out
}

/// What `pub use child::…` in a directory module's `mod.rs` re-exports:
/// name → child.
fn reexports(code: &str, children: &BTreeSet<String>) -> BTreeMap<String, String> {
    let s = code.as_bytes();
    let mut map = BTreeMap::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("use ") {
        let at = from + found;
        from = at + 4;
        if at > 0 && is_ident(s[at - 1]) {
            continue;
        }
        let mut i = from;
        for path in use_tree(s, &mut i) {
            let path: Vec<&String> = path.iter().filter(|p| *p != "self").collect();
            if let (Some(first), Some(last)) = (path.first(), path.last())
                && path.len() > 1
                && children.contains(*first)
            {
                map.insert((*last).clone(), (*first).clone());
            }
        }
    }
    map
}

/// Module graph: for each edge, one place that makes it (file and path).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn graphs(sources: &[Source]) -> Vec<(String, Graph)> {
    let top: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| s.module.first().cloned())
        .collect();
    let mut graphs = vec![("top-level modules of src/".to_owned(), Graph::new())];
    let mut split = Vec::new();
    // Every directory module: each proper prefix of a file's module path.
    let dirs: BTreeSet<Vec<String>> = sources
        .iter()
        .flat_map(|s| (1..s.module.len()).map(|n| s.module[..n].to_vec()))
        .collect();
    for prefix in dirs {
        let dir = prefix.join("/");
        let depth = prefix.len();
        let children: BTreeSet<String> = sources
            .iter()
            .filter(|s| s.module.len() > depth && s.module.starts_with(&prefix))
            .map(|s| s.module[depth].clone())
            .collect();
        let reexported = sources
            .iter()
            .find(|s| s.module == prefix)
            .map(|s| reexports(&s.code, &children))
            .unwrap_or_default();
        split.push((dir, prefix, children, reexported, Graph::new()));
    }
    for source in sources {
        let Some(own) = source.module.first() else {
            continue;
        };
        for path in references(&source.code, &source.module) {
            let place = || format!("{}: {}", source.path.display(), path.join("::"));
            let Some(to) = path.first() else { continue };
            if to != own && top.contains(to) {
                graphs[0]
                    .1
                    .entry(own.clone())
                    .or_default()
                    .entry(to.clone())
                    .or_insert_with(place);
            }
            for (_, prefix, children, reexported, graph) in &mut split {
                let depth = prefix.len();
                if source.module.len() <= depth
                    || !source.module.starts_with(prefix)
                    || !path.starts_with(prefix)
                {
                    continue;
                }
                let from = &source.module[depth];
                let target = path.get(depth).and_then(|name| {
                    if children.contains(name) {
                        Some(name.clone())
                    } else {
                        reexported.get(name).cloned()
                    }
                });
                if let Some(target) = target
                    && &target != from
                {
                    let at = prefix.join("::");
                    graph
                        .entry(format!("{at}::{from}"))
                        .or_default()
                        .entry(format!("{at}::{target}"))
                        .or_insert_with(place);
                }
            }
        }
    }
    graphs.extend(
        split
            .into_iter()
            .map(|(dir, _, _, _, graph)| (format!("submodules of src/{dir}/"), graph)),
    );
    graphs
}

/// The strongly connected components of `graph` with more than one node.
fn tangles(graph: &Graph) -> Vec<BTreeSet<String>> {
    let nodes: BTreeSet<&String> = graph
        .iter()
        .flat_map(|(from, to)| std::iter::once(from).chain(to.keys()))
        .collect();
    let reaches = |from: &String| {
        let mut seen = BTreeSet::from([from.clone()]);
        let mut queue = VecDeque::from([from.clone()]);
        while let Some(node) = queue.pop_front() {
            for next in graph.get(&node).into_iter().flat_map(|t| t.keys()) {
                if seen.insert(next.clone()) {
                    queue.push_back(next.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reaches(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for node in &nodes {
        let component: BTreeSet<String> = nodes
            .iter()
            .filter(|other| reach[*node].contains(**other) && reach[*other].contains(*node))
            .map(|n| (*n).clone())
            .collect();
        if component.len() > 1 && !out.contains(&component) {
            out.push(component);
        }
    }
    out
}

/// A shortest cycle through the first node of `component`, with the place
/// that makes each step.
fn describe(graph: &Graph, component: &BTreeSet<String>) -> String {
    let start = component.first().expect("not empty");
    let mut previous: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([start.clone()]);
    'search: while let Some(node) = queue.pop_front() {
        for next in graph.get(&node).into_iter().flat_map(|t| t.keys()) {
            if !component.contains(next) || previous.contains_key(next) {
                continue;
            }
            previous.insert(next.clone(), node.clone());
            if next == start {
                break 'search;
            }
            queue.push_back(next.clone());
        }
    }
    let mut cycle = vec![start.clone()];
    let mut at = start.clone();
    while let Some(before) = previous.get(&at) {
        cycle.push(before.clone());
        at = before.clone();
        if at == *start {
            break;
        }
    }
    cycle.reverse();
    let steps: Vec<String> = cycle
        .windows(2)
        .map(|w| format!("    {} → {} ({})", w[0], w[1], graph[&w[0]][&w[1]]))
        .collect();
    let inside: Vec<String> = component
        .iter()
        .flat_map(|from| {
            graph
                .get(from)
                .into_iter()
                .flatten()
                .filter(|(to, _)| component.contains(*to))
                .map(move |(to, place)| format!("    {from} → {to} ({place})"))
        })
        .collect();
    format!(
        "{}\n{}\n  all of {{{}}} reach each other through:\n{}",
        cycle.join(" → "),
        steps.join("\n"),
        component.iter().cloned().collect::<Vec<_>>().join(", "),
        inside.join("\n")
    )
}

fn cycles() -> Vec<String> {
    let sources = sources();
    assert!(
        sources.iter().any(|s| s.module == ["daemon"]),
        "src/ was not read"
    );
    let mut found = Vec::new();
    for (name, graph) in graphs(&sources) {
        for component in tangles(&graph) {
            found.push(format!("{name}: {}", describe(&graph, &component)));
        }
    }
    found
}

#[test]
fn no_module_imports_another_that_imports_it() {
    let found = cycles();
    assert!(
        found.is_empty(),
        "import cycles between modules:\n{}",
        found.join("\n")
    );
}

#[test]
fn source_files_are_short() {
    let mut long = Vec::new();
    for source in sources() {
        let path = source.path.display().to_string();
        if PARSERS.contains(&path.as_str()) {
            continue;
        }
        if source.code_lines > MAX_LINES {
            long.push((path, source.code_lines));
        }
    }
    assert!(
        long.is_empty(),
        "files with more than {MAX_LINES} lines of code before their tests \
         (path, lines): {long:?}"
    );
}

/// A parser of [`PARSERS`] that is renamed would otherwise leave an
/// exemption behind.
#[test]
fn the_exemptions_are_still_needed() {
    let sources = sources();
    let lines = |path: &str| {
        sources
            .iter()
            .find(|s| s.path == Path::new(path))
            .map(|s| s.code_lines)
    };
    for path in PARSERS {
        assert!(lines(path).is_some(), "{path} is gone: update PARSERS");
    }
}

#[test]
fn the_reader_finds_what_the_layout_rules_need() {
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        module_of(Path::new("exporter/otlp/mod.rs")),
        module(&["exporter", "otlp"])
    );
    assert_eq!(module_of(Path::new("lib.rs")), module(&[]));
    let code = strip_comments(
        "use crate::{a, b::{c, d as e}, f::*};\n\
         // crate::commented\n\
         /// [`crate::doc`]\n\
         let x = crate::g::h(super::i::J, self::k, $crate::m, other::crate::n);\n\
         use super::super::p;",
    );
    let found = references(&code, &module(&["x", "y"]));
    let expected: Vec<Vec<String>> = [
        &["a"][..],
        &["b", "c"],
        &["b", "d"],
        &["f", "*"],
        &["g", "h"],
        &["x", "i", "J"],
        &["p"],
        &["x", "y", "k"],
    ]
    .iter()
    .map(|p| module(p))
    .collect();
    assert_eq!(found, expected);
    let (code, lines) = before_tests(
        "fn a() {}\n#[cfg(test)]\nmod tests;\nfn b() {}\n#[cfg(test)]\npub(crate) mod tests {\n}\n",
    );
    assert_eq!(
        (code, lines),
        ("fn a() {}\n#[cfg(test)]\nmod tests;\nfn b() {}\n", 4)
    );
    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph
            .entry(from.into())
            .or_default()
            .insert(to.into(), format!("{from}.rs"));
    }
    let tangled = tangles(&graph);
    assert_eq!(tangled.len(), 1);
    assert!(describe(&graph, &tangled[0]).starts_with("a → b → c → a"));
}
