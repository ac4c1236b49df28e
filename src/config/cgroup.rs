//! Cgroup selectors: exact paths and globs, relative to the cgroup2 root.
//!
//! Paths and patterns are normalized once here (leading `/`, single `/`
//! separators, no trailing `/`) so that the daemon can compare them with the
//! paths it builds while walking the hierarchy, without re-normalizing.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};

use super::error::{quote, shorten};

/// Which cgroups a selector applies to.
#[derive(Clone)]
pub enum CgroupPattern {
    /// Exactly this cgroup, e.g. `/` (the whole machine) or `/system.slice`.
    Path(String),
    /// Every cgroup whose path matches the glob: `*` and `?` stay within one
    /// path level, `**` spans levels, `[abc]` and `{a,b}` work as in shells.
    /// A glob never matches the root `/`; select it with `path: /`.
    Match {
        /// The normalized pattern text, as shown to users.
        pattern: String,
        /// The compiled `pattern`.
        matcher: GlobMatcher,
    },
}

/// Compares the pattern text; the matcher is derived from it.
impl PartialEq for CgroupPattern {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Path(a), Self::Path(b)) => a == b,
            (Self::Match { pattern: a, .. }, Self::Match { pattern: b, .. }) => a == b,
            _ => false,
        }
    }
}

impl Eq for CgroupPattern {}

/// Shows the pattern text only: the compiled matcher's Debug output is
/// pages of regex internals, useless in logs.
impl fmt::Debug for CgroupPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Path(path) => f.debug_tuple("Path").field(path).finish(),
            Self::Match { pattern, .. } => f
                .debug_struct("Match")
                .field("pattern", pattern)
                .finish_non_exhaustive(),
        }
    }
}

impl fmt::Display for CgroupPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a path or pattern is unusable; the hint is the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PatternError {
    pub message: String,
    pub hint: String,
}

const GLOB_HINT: &str = "`*` and `?` match within one path level, `**` across levels, \
                         `[abc]` one of a set, `{a,b}` alternatives; escape special characters with `\\`";

impl CgroupPattern {
    /// Builds `Path` from a `path:` value.
    pub(crate) fn exact(text: &str) -> Result<Self, PatternError> {
        let path = normalize("path", text)?;
        // A cgroup name with glob characters is almost certainly a `match:`
        // written as `path:`, which would silently select nothing.
        if path.contains(['*', '?', '[', '{']) {
            return Err(PatternError {
                message: format!("path {} contains glob characters", quote(text)),
                hint: format!(
                    "`path:` selects exactly one cgroup; use `match: {}` to select by glob",
                    shorten(&path)
                ),
            });
        }
        Ok(Self::Path(path))
    }

    /// Builds `Match` from a `match:` value.
    pub(crate) fn glob(text: &str) -> Result<Self, PatternError> {
        let pattern = normalize("match pattern", text)?;
        let glob = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| PatternError {
                message: format!("invalid glob {}: {}", quote(text), e.kind()),
                hint: GLOB_HINT.to_owned(),
            })?;
        Ok(Self::Match {
            matcher: glob.compile_matcher(),
            pattern,
        })
    }

    /// Whether the cgroup at `path` is selected.
    ///
    /// `path` must be in the normalized form the daemon builds: relative to
    /// the cgroup2 root, leading `/`, no trailing `/` (the root is `/`).
    pub fn matches(&self, path: &str) -> bool {
        match self {
            Self::Path(exact) => exact == path,
            // globset lets `/*` match `/` (an empty name); the root has no
            // name, so keep it out and make `path: /` the one way to select it.
            Self::Match { matcher, .. } => path != "/" && matcher.is_match(path),
        }
    }

    /// The normalized path or pattern text.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Path(path) => path,
            Self::Match { pattern, .. } => pattern,
        }
    }
}

/// Normalizes `text`: must be absolute; `//` collapses; a trailing `/` goes;
/// `.` and `..` are errors because cgroup paths are never resolved through
/// the filesystem here, so they could only be mistakes.
fn normalize(what: &str, text: &str) -> Result<String, PatternError> {
    // A NUL ends a path where the kernel reads it, so `/a\0b` would count
    // `/a`; the other control characters name no cgroup anyone made on
    // purpose, and would reach terminals and logs raw.
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(PatternError {
            message: format!(
                "the {what} {} contains the control character {}",
                quote(text),
                c.escape_debug()
            ),
            hint: "cgroup paths are directory names under the cgroup2 root, without \
                   control characters; remove it"
                .to_owned(),
        });
    }
    if text.is_empty() {
        return Err(PatternError {
            message: format!("the {what} is empty"),
            hint: "cgroup paths start with `/`; use `/` for the root cgroup (the whole machine)"
                .to_owned(),
        });
    }
    if !text.starts_with('/') {
        return Err(PatternError {
            message: format!("the {what} {} is relative", quote(text)),
            hint: format!(
                "cgroup paths are relative to the cgroup2 root but start with `/`: write `/{}`",
                shorten(text)
            ),
        });
    }
    let mut out = String::with_capacity(text.len());
    for component in text.split('/').filter(|c| !c.is_empty()) {
        if component == "." || component == ".." {
            return Err(PatternError {
                message: format!(
                    "the {what} {} contains a `{component}` component",
                    quote(text)
                ),
                hint: "write the path from the cgroup2 root without `.` or `..`".to_owned(),
            });
        }
        out.push('/');
        out.push_str(component);
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized() {
        let table = [
            ("/", "/"),
            ("//", "/"),
            ("/system.slice/", "/system.slice"),
            ("//system.slice//cron.service", "/system.slice/cron.service"),
            ("/a/b/c", "/a/b/c"),
        ];
        for (text, want) in table {
            let pattern = CgroupPattern::exact(text).expect(text);
            assert_eq!(pattern, CgroupPattern::Path(want.to_owned()));
            assert_eq!(pattern.as_str(), want);
        }
    }

    #[test]
    fn bad_paths_are_rejected() {
        let table = [
            ("", "is empty"),
            ("system.slice", "is relative"),
            ("./a", "is relative"),
            ("/a/../b", "contains a `..` component"),
            ("/a/./b", "contains a `.` component"),
            ("/..", "contains a `..` component"),
            ("/system.slice/*.service", "contains glob characters"),
            ("/a\0b", "\"/a\\0b\" contains the control character \\0"),
            ("/a\x1b[31m", "contains the control character \\u{1b}"),
            ("a\nb", "contains the control character \\n"),
        ];
        for (text, want) in table {
            let err = CgroupPattern::exact(text).expect_err(text);
            assert!(err.message.contains(want), "{text}: {}", err.message);
        }
        let err = CgroupPattern::exact("system.slice").expect_err("relative");
        assert!(err.hint.contains("`/system.slice`"), "{}", err.hint);
    }

    #[test]
    fn exact_path_matches_only_itself() {
        let p = CgroupPattern::exact("/system.slice/").expect("valid");
        assert!(p.matches("/system.slice"));
        assert!(!p.matches("/system.slice/cron.service"));
        assert!(!p.matches("/"));
    }

    fn glob(text: &str) -> CgroupPattern {
        CgroupPattern::glob(text).expect(text)
    }

    #[test]
    fn star_stays_within_one_level() {
        let p = glob("/*");
        assert!(p.matches("/system.slice"));
        assert!(p.matches("/kubepods.slice"));
        assert!(!p.matches("/system.slice/cron.service"));
        assert!(!p.matches("/"), "globs never match the root");

        let p = glob("/system.slice/*.service");
        assert!(p.matches("/system.slice/cron.service"));
        assert!(!p.matches("/system.slice/cron.service/child.service"));
        assert!(!p.matches("/system.slice/user.slice"));
    }

    #[test]
    fn double_star_crosses_levels() {
        let p = glob("/kubepods.slice/**");
        assert!(p.matches("/kubepods.slice/a"));
        assert!(p.matches("/kubepods.slice/a/b/c"));
        assert!(!p.matches("/kubepods.slice"));

        let p = glob("/**/cri-containerd-*.scope");
        assert!(p.matches("/cri-containerd-1.scope"));
        assert!(p.matches("/kubepods.slice/x/cri-containerd-1.scope"));

        let p = glob("/**");
        assert!(p.matches("/a/b"));
        assert!(!p.matches("/"));
    }

    #[test]
    fn other_glob_syntax() {
        let p = glob("/{system,user}.slice/?ron.service");
        assert!(p.matches("/system.slice/cron.service"));
        assert!(p.matches("/user.slice/cron.service"));
        assert!(!p.matches("/init.scope/cron.service"));
        let p = glob("/[ab]*");
        assert!(p.matches("/a1") && p.matches("/b") && !p.matches("/c"));
        let p = glob("/system-systemd\\\\x2dfsck.slice");
        assert!(p.matches("/system-systemd\\x2dfsck.slice"));
    }

    #[test]
    fn debug_shows_the_pattern_only() {
        assert_eq!(
            format!("{:?}", glob("/a/*")),
            "Match { pattern: \"/a/*\", .. }"
        );
        assert_eq!(
            format!("{:?}", CgroupPattern::Path("/".into())),
            "Path(\"/\")"
        );
        assert_eq!(glob("/a/*").to_string(), "/a/*");
    }

    #[test]
    fn globs_are_normalized_and_validated() {
        assert_eq!(glob("//system.slice//*/").as_str(), "/system.slice/*");
        let err = CgroupPattern::glob("/a/[b").expect_err("unclosed class");
        assert!(
            err.message.contains("invalid glob \"/a/[b\""),
            "{}",
            err.message
        );
        assert!(err.message.contains("unclosed character class"));
        let err = CgroupPattern::glob("/a/../*").expect_err("dot-dot");
        assert!(err.message.contains("`..`"));
        let err = CgroupPattern::glob("/a/*\0").expect_err("NUL");
        assert!(err.message.contains("control character \\0"), "{err:?}");
        let err = CgroupPattern::glob("*.service").expect_err("relative");
        assert!(err.message.contains("is relative"));
    }
}
