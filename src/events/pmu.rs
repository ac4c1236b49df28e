//! Resolution of `pmu/.../` events through sysfs, as perf does it: the PMU's
//! `type` file gives `perf_event_attr.type`, `events/<alias>` files expand to
//! terms, and `format/<term>` files (`config:0-7,32-35`) say which config bits
//! each term's value goes to. The events of the CPU's tables are aliases of
//! its core PMUs too, as in perf: `cpu/BR_INST_RETIRED.NEAR_TAKEN,cmask=1/`,
//! or written bare and found on whichever core PMU has them.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::events::{
    EventTables, OtherCore, PmuSpec, ResolveError, TableEvent, is_valid_name, parse_number,
};
use crate::suggest::did_you_mean;

/// The perf_event_attr fields a term can set, by name; terms with these names
/// set the whole field, with or without a format file.
const CONFIG_FIELDS: [&str; 3] = ["config", "config1", "config2"];

/// Files in `events/` that describe an alias rather than being one.
const ALIAS_SIDE_FILES: [&str; 4] = [".scale", ".unit", ".per-pkg", ".snapshot"];

/// Returns the PMU's type and `[config, config1, config2]` for `spec`.
/// Terms apply left to right; a later term overrides the bits of an earlier one.
pub(crate) fn resolve(
    root: &Path,
    pmu: &str,
    spec: &PmuSpec,
    tables: &EventTables,
) -> Result<(u32, [u64; 3]), ResolveError> {
    let dir = root.join(pmu);
    if !is_valid_name(pmu) || !dir.is_dir() {
        let known = list_dir(root);
        return Err(ResolveError::NoPmu {
            pmu: pmu.to_string(),
            root: root.to_path_buf(),
            suggestion: did_you_mean(pmu, known.iter().map(String::as_str)).map(str::to_owned),
        });
    }
    let type_path = dir.join("type");
    let content = read(&type_path)?;
    let type_ = content
        .trim()
        .parse::<u32>()
        .map_err(|_| bad_file(&type_path, &content, "expected a decimal PMU type number"))?;
    let mut builder = Builder {
        dir,
        pmu,
        tables,
        config: [0; 3],
        given: Vec::new(),
        needed: Vec::new(),
    };
    match spec {
        PmuSpec::Alias(name) => builder.bare(name)?,
        PmuSpec::Terms(terms) => {
            for (name, value) in terms {
                match value {
                    Some(value) => builder.user_term(name, *value)?,
                    None => builder.bare(name)?,
                }
            }
        }
    }
    if let Some((alias, term)) = builder
        .needed
        .iter()
        .find(|(_, t)| !builder.given.contains(t))
    {
        return Err(ResolveError::MissingValue {
            pmu: pmu.to_string(),
            alias: alias.clone(),
            term: term.clone(),
        });
    }
    Ok((type_, builder.config))
}

/// Resolves a vendor event name written bare: the event of that name in
/// this CPU's tables (on the PMU whose table has it, `cpu_core` first, with
/// its encoding on another core type whose table has it too), else an
/// event alias of a core PMU in sysfs whatever its case (`L1D_CACHE_REFILL`
/// is Arm's `l1d_cache_refill`), as perf finds them.
pub(crate) fn resolve_named(
    root: &Path,
    name: &str,
    tables: &EventTables,
) -> Result<(u32, [u64; 3], Option<OtherCore>), ResolveError> {
    let as_terms = |event: &TableEvent| {
        PmuSpec::Terms(
            event
                .terms
                .iter()
                .map(|(t, v)| (t.clone(), Some(*v)))
                .collect(),
        )
    };
    if let Some((pmu, event)) = tables.find(name) {
        let (type_, config) = resolve(root, pmu, &as_terms(event), tables)?;
        // An encoding the other core type's PMU refuses leaves the event
        // on the first type only, as written tables can disagree.
        let other = tables
            .tables()
            .iter()
            .filter(|t| t.pmu != pmu)
            .find_map(|t| Some((t.pmu.as_str(), tables.find_on(&t.pmu, name)?)))
            .and_then(|(pmu, event)| resolve(root, pmu, &as_terms(event), tables).ok())
            .map(|(type_, config)| OtherCore { type_, config });
        return Ok((type_, config, other));
    }
    for pmu in &super::cores::core_pmu_names(root) {
        if let Some(alias) = aliases(&root.join(pmu))
            .into_iter()
            .find(|a| a.eq_ignore_ascii_case(name))
        {
            let (type_, config) = resolve(root, pmu, &PmuSpec::Alias(alias), tables)?;
            return Ok((type_, config, None));
        }
    }
    let advice = if tables.tables().is_empty() {
        "give this CPU's tables with --event-tables DIR: perf's tools/perf/pmu-events/arch \
         from the kernel source, or a checkout of Intel's perfmon; or write the event's \
         encoding, e.g. `cpu/event=0xc0/`"
    } else {
        "`cgperf list` lists this CPU's events"
    };
    Err(ResolveError::NoNamedEvent {
        name: name.to_string(),
        tables: tables.describe(),
        suggestion: did_you_mean(name, tables.names()).map(str::to_owned),
        advice,
    })
}

/// The config being built for one PMU event.
struct Builder<'a> {
    dir: PathBuf,
    pmu: &'a str,
    tables: &'a EventTables,
    config: [u64; 3],
    /// Terms the config gave a value for.
    given: Vec<String>,
    /// `(alias, term)` for alias terms written `term=?`: the config must give them.
    needed: Vec<(String, String)>,
}

impl Builder<'_> {
    /// A name without `=value`: as in perf, a format term (or config field)
    /// set to 1 if there is one, else an event alias.
    fn bare(&mut self, name: &str) -> Result<(), ResolveError> {
        let valid = is_valid_name(name);
        if CONFIG_FIELDS.contains(&name) || (valid && self.dir.join("format").join(name).is_file())
        {
            return self.user_term(name, 1);
        }
        let path = self.dir.join("events").join(name);
        let is_alias = valid && !ALIAS_SIDE_FILES.iter().any(|s| name.ends_with(s));
        let content = if is_alias {
            read_optional(&path)?
        } else {
            None
        };
        if content.is_none()
            && let Some(event) = self.tables.find_on(self.pmu, name)
        {
            for (term, value) in &event.terms {
                self.set(term, *value)?;
            }
            return Ok(());
        }
        let Some(content) = content else {
            let known = aliases(&self.dir);
            let terms = list_dir(&self.dir.join("format"));
            let candidates = known.iter().chain(&terms).map(String::as_str);
            return Err(ResolveError::NoEvent {
                pmu: self.pmu.to_string(),
                event: name.to_string(),
                suggestion: did_you_mean(name, candidates).map(str::to_owned),
                known,
            });
        };
        self.expand(name, &path, &content)
    }

    /// Applies an alias file's `term=value,...` list (`term=?` must be given
    /// by the config; a bare term means 1).
    fn expand(&mut self, alias: &str, path: &Path, content: &str) -> Result<(), ResolveError> {
        for part in content
            .trim()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (term, value) = part.split_once('=').unwrap_or((part, "1"));
            if !is_valid_name(term) {
                return Err(bad_file(
                    path,
                    content,
                    "expected term=value pairs separated by commas",
                ));
            }
            if value == "?" {
                self.needed.push((alias.to_string(), term.to_string()));
                continue;
            }
            let value = parse_number(value).ok_or_else(|| {
                bad_file(path, content, "expected decimal or 0x-prefixed hex values")
            })?;
            self.set(term, value)?;
        }
        Ok(())
    }

    /// A `term=value` written in the config.
    fn user_term(&mut self, term: &str, value: u64) -> Result<(), ResolveError> {
        self.given.push(term.to_string());
        self.set(term, value)
    }

    /// Puts `value` into the bits the term's format file names.
    fn set(&mut self, term: &str, value: u64) -> Result<(), ResolveError> {
        if let Some(field) = CONFIG_FIELDS.iter().position(|f| *f == term) {
            if let Some(slot) = self.config.get_mut(field) {
                *slot = value;
            }
            return Ok(());
        }
        let path = self.dir.join("format").join(term);
        let content = if is_valid_name(term) {
            read_optional(&path)?
        } else {
            None
        };
        let Some(content) = content else {
            let mut known = list_dir(&self.dir.join("format"));
            known.extend(CONFIG_FIELDS.map(String::from));
            return Err(ResolveError::NoTerm {
                pmu: self.pmu.to_string(),
                term: term.to_string(),
                suggestion: did_you_mean(term, known.iter().map(String::as_str)).map(str::to_owned),
                known,
            });
        };
        let (field, mask) = parse_format(&content).ok_or_else(|| {
            bad_file(
                &path,
                &content,
                "expected `config:`, `config1:` or `config2:` and bit ranges like 0-7,32-35",
            )
        })?;
        let bits = mask.count_ones();
        if bits < 64 && value >> bits != 0 {
            return Err(ResolveError::ValueTooLarge {
                term: term.to_string(),
                value,
                format: content.trim().to_string(),
            });
        }
        if let Some(slot) = self.config.get_mut(field) {
            *slot = (*slot & !mask) | deposit(value, mask);
        }
        Ok(())
    }
}

/// Parses a format file such as `config:0-7,32-35` or `config1:21` into the
/// config field index and the mask of its bits.
fn parse_format(content: &str) -> Option<(usize, u64)> {
    let (field, ranges) = content.trim().split_once(':')?;
    let field = CONFIG_FIELDS.iter().position(|f| *f == field)?;
    let mut mask = 0u64;
    for range in ranges.split(',') {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        let (low, high): (u32, u32) = (low.parse().ok()?, high.parse().ok()?);
        if low > high || high > 63 {
            return None;
        }
        mask |= (u64::MAX >> (63 - (high - low))) << low;
    }
    Some((field, mask))
}

/// Scatters the low bits of `value` into the set bits of `mask`, lowest
/// first, as the kernel and perf do for split formats.
fn deposit(value: u64, mask: u64) -> u64 {
    let (mut out, mut rest, mut value) = (0, mask, value);
    while rest != 0 {
        let bit = rest & rest.wrapping_neg();
        if value & 1 == 1 {
            out |= bit;
        }
        value >>= 1;
        rest &= !bit;
    }
    out
}

/// The PMU's event aliases, without the `.scale`-style side files.
fn aliases(dir: &Path) -> Vec<String> {
    let mut names = list_dir(&dir.join("events"));
    names.retain(|n| !ALIAS_SIDE_FILES.iter().any(|s| n.ends_with(s)));
    names
}

/// Sorted names in a directory, or none if it cannot be read (only used to
/// make error messages helpful).
fn list_dir(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Reads a sysfs file that must exist.
fn read(path: &Path) -> Result<String, ResolveError> {
    std::fs::read_to_string(path).map_err(|source| ResolveError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a sysfs file that may legitimately be missing.
fn read_optional(path: &Path) -> Result<Option<String>, ResolveError> {
    match std::fs::read_to_string(path) {
        Ok(content) => Ok(Some(content)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ResolveError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The error for a sysfs file whose content is not as documented.
fn bad_file(path: &Path, content: &str, problem: &'static str) -> ResolveError {
    ResolveError::BadSysfsFile {
        path: path.to_path_buf(),
        content: content.trim().to_string(),
        problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventAttr, PERF_TYPE_SOFTWARE, parse_event};
    use proptest::prelude::*;
    use std::fs;

    /// A fake PMU root with a `cpu` PMU shaped like an AMD core PMU, an `msr`
    /// PMU and a `weird` PMU with broken files.
    fn fake_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let write = |path: &str, content: &str| {
            let path = root.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        };
        write("cpu/type", "4\n");
        write("cpu/format/event", "config:0-7,32-35\n");
        write("cpu/format/umask", "config:8-15\n");
        write("cpu/format/edge", "config:18\n");
        write("cpu/format/inv", "config:23\n");
        write("cpu/format/cmask", "config:24-31\n");
        write("cpu/format/ldlat", "config1:0-15\n");
        write("cpu/format/fe", "config2:0-63\n");
        write("cpu/events/cycles", "event=0x76\n");
        write("cpu/events/cache-misses", "event=0x64,umask=0x09\n");
        write("cpu/events/mem-loads", "event=0xcd,umask=0x1,ldlat=3\n");
        write("cpu/events/mem-loads.scale", "1\n");
        write("cpu/events/mem-loads.unit", "loads\n");
        write("cpu/events/edgy", "event=0x1d,edge,inv=1\n");
        write("cpu/events/big", "event=0xfff\n");
        write("cpu/events/needs", "event=0x10,umask=?\n");
        write("cpu/events/raw", "config=0x1234,config1=7\n");
        write("msr/type", "9\n");
        write("msr/format/event", "config:0-63\n");
        write("msr/events/tsc", "event=0x00\n");
        write("msr/events/aperf", "event=0x01\n");
        write("msr/events/mperf", "event=0x02\n");
        write("weird/type", "nine\n");
        write("weird2/type", "11\n");
        write("weird2/format/event", "config3:0-7\n");
        write("weird2/format/range", "config:8-4\n");
        write("weird2/format/wide", "config:0-64\n");
        write("weird2/events/bad", "event=zz\n");
        write("weird2/events/slash", "ev/ent=1\n");
        write("weird2/events/unknown", "nosuch=1\n");
        fs::create_dir_all(root.path().join("weird2/events/dir")).unwrap();
        fs::create_dir_all(root.path().join("notype")).unwrap();
        root
    }

    fn resolve(root: &Path, text: &str) -> Result<EventAttr, ResolveError> {
        parse_event(text)
            .unwrap()
            .resolve(root, &EventTables::none())
    }

    fn config(root: &Path, text: &str) -> (u32, u64, u64, u64) {
        match resolve(root, text) {
            Ok(a) => (a.type_, a.config, a.config1, a.config2),
            Err(e) => panic!("`{text}`: {e}"),
        }
    }

    fn message(root: &Path, text: &str) -> String {
        match resolve(root, text) {
            Ok(a) => panic!("`{text}` should not resolve: {a:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn terms_go_to_their_bits() {
        let root = fake_root();
        let r = root.path();
        assert_eq!(config(r, "cpu/event=0x3c/"), (4, 0x3c, 0, 0));
        assert_eq!(config(r, "cpu/event=0x3c,umask=0x1/"), (4, 0x013c, 0, 0));
        // Split range: low 8 bits to 0-7, the next 4 to 32-35.
        assert_eq!(config(r, "cpu/event=0xfff/"), (4, 0xf_0000_00ff, 0, 0));
        assert_eq!(config(r, "cpu/event=0x123/"), (4, 0x1_0000_0023, 0, 0));
        assert_eq!(
            config(r, "cpu/edge,inv,cmask=2/"),
            (4, (1 << 18) | (1 << 23) | (2 << 24), 0, 0)
        );
        assert_eq!(config(r, "cpu/edge/"), (4, 1 << 18, 0, 0));
        assert_eq!(config(r, "cpu/ldlat=30/"), (4, 0, 30, 0));
        assert_eq!(config(r, "cpu/fe=0xffffffffffffffff/"), (4, 0, 0, u64::MAX));
        assert_eq!(
            config(r, "cpu/config=0x1234,config1=5,config2=6/"),
            (4, 0x1234, 5, 6)
        );
        assert_eq!(config(r, "cpu/config/"), (4, 1, 0, 0));
        // Later terms override earlier bits.
        assert_eq!(config(r, "cpu/umask=0xff,umask=0x2/"), (4, 0x200, 0, 0));
        assert_eq!(config(r, "cpu/config=0xffff,event=0/"), (4, 0xff00, 0, 0));
    }

    #[test]
    fn values_that_do_not_fit() {
        let root = fake_root();
        let r = root.path();
        assert_eq!(
            message(r, "cpu/umask=0x1ff/"),
            "value 0x1ff does not fit term `umask` (config:8-15)"
        );
        assert_eq!(
            message(r, "cpu/event=0x1000/"),
            "value 0x1000 does not fit term `event` (config:0-7,32-35)"
        );
        assert_eq!(
            message(r, "cpu/edge=2/"),
            "value 0x2 does not fit term `edge` (config:18)"
        );
        assert!(resolve(r, "cpu/edge=1/").is_ok() && resolve(r, "cpu/edge=0/").is_ok());
        assert!(
            resolve(r, "cpu/big/").is_ok(),
            "0xfff fits the 12 bits of config:0-7,32-35"
        );
        assert!(matches!(
            resolve(r, "cpu/ldlat=0x10000/"),
            Err(ResolveError::ValueTooLarge { value: 0x10000, .. })
        ));
    }

    #[test]
    fn aliases_expand_through_formats() {
        let root = fake_root();
        let r = root.path();
        assert_eq!(config(r, "cpu/cycles/"), (4, 0x76, 0, 0));
        assert_eq!(config(r, "cpu/cache-misses/"), (4, 0x0964, 0, 0));
        assert_eq!(config(r, "cpu/mem-loads/"), (4, 0x01cd, 3, 0));
        assert_eq!(
            config(r, "cpu/edgy/"),
            (4, 0x1d | (1 << 18) | (1 << 23), 0, 0)
        );
        assert_eq!(config(r, "cpu/big/"), (4, 0xf_0000_00ff, 0, 0));
        assert_eq!(config(r, "cpu/raw/"), (4, 0x1234, 7, 0));
        assert_eq!(config(r, "msr/tsc/"), (9, 0, 0, 0));
        assert_eq!(config(r, "msr/mperf/"), (9, 2, 0, 0));
        // Mixed with terms, applied in order.
        assert_eq!(config(r, "cpu/mem-loads,ldlat=30/"), (4, 0x01cd, 30, 0));
        assert_eq!(config(r, "cpu/cache-misses,umask=0x2/"), (4, 0x0264, 0, 0));
        assert_eq!(config(r, "cpu/umask=0x2,cache-misses/"), (4, 0x0964, 0, 0));
        // `term=?` must be supplied, in any order.
        assert_eq!(config(r, "cpu/needs,umask=3/"), (4, 0x0310, 0, 0));
        assert_eq!(config(r, "cpu/umask=3,needs/"), (4, 0x0310, 0, 0));
        assert_eq!(
            message(r, "cpu/needs/"),
            "event `needs` of PMU `cpu` needs a value for `umask`; write e.g. `cpu/needs,umask=1/`"
        );
        let attr = resolve(r, "msr/tsc/k").unwrap();
        assert!(attr.exclude_user && !attr.exclude_kernel && attr.exclude_hv);
    }

    #[test]
    fn unknown_pmus_events_and_terms() {
        let root = fake_root();
        let r = root.path();
        assert_eq!(
            message(r, "foo/event=1/"),
            format!("no PMU `foo` on this machine (none in {})", r.display())
        );
        assert_eq!(
            message(r, "mrs/tsc/"),
            format!(
                "no PMU `mrs` on this machine (none in {}); did you mean `msr`?",
                r.display()
            )
        );
        assert_eq!(
            message(r, "msr/tscx/"),
            "PMU `msr` has no event `tscx`; did you mean `tsc`? (known: aperf, mperf, tsc)"
        );
        let msg = message(r, "cpu/mem-load/");
        assert!(
            msg.starts_with("PMU `cpu` has no event `mem-load`; did you mean `mem-loads`?"),
            "{msg}"
        );
        assert!(!msg.contains(".scale") && !msg.contains(".unit"), "{msg}");
        assert!(matches!(
            resolve(r, "cpu/mem-loads.scale/"),
            Err(ResolveError::NoEvent { .. })
        ));
        assert!(matches!(
            resolve(r, "cpu/event=1,nosuch/"),
            Err(ResolveError::NoEvent { .. })
        ));
        assert_eq!(
            message(r, "cpu/evnt=1/"),
            "PMU `cpu` has no format term `evnt`; did you mean `event`? \
             (known: cmask, edge, event, fe, inv, ldlat, umask, config, config1, config2)"
        );
        assert!(message(r, "msr/umask=1/").contains("(known: event, config, config1, config2)"));
        assert_eq!(
            message(r, "weird2/unknown/"),
            "PMU `weird2` has no format term `nosuch` (known: event, range, wide, config, config1, config2)"
        );
    }

    #[test]
    fn broken_sysfs_files() {
        let root = fake_root();
        let r = root.path();
        let bad = |text: &str| match resolve(r, text) {
            Err(ResolveError::BadSysfsFile { path, .. }) => path,
            other => panic!("`{text}`: {other:?}"),
        };
        assert_eq!(bad("weird/x/"), r.join("weird/type"));
        assert_eq!(bad("weird2/event=1/"), r.join("weird2/format/event"));
        assert_eq!(bad("weird2/range=1/"), r.join("weird2/format/range"));
        assert_eq!(bad("weird2/wide=1/"), r.join("weird2/format/wide"));
        assert_eq!(bad("weird2/bad/"), r.join("weird2/events/bad"));
        assert_eq!(bad("weird2/slash/"), r.join("weird2/events/slash"));
        let msg = message(r, "weird/x/");
        assert!(
            msg.contains("weird/type") && msg.contains("`nine`"),
            "{msg}"
        );
        match resolve(r, "notype/x/") {
            Err(e @ ResolveError::Io { .. }) => {
                assert!(e.to_string().contains("notype/type"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        // A directory where an alias file should be is an I/O error with its path.
        match resolve(r, "weird2/dir/") {
            Err(e @ ResolveError::Io { .. }) => {
                assert!(e.to_string().contains("weird2/events/dir"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hand_built_events_cannot_escape_the_root() {
        let root = fake_root();
        let r = root.path();
        let escape = |pmu: &str, spec: PmuSpec| resolve_spec(r, pmu, &spec);
        assert!(matches!(
            escape("..", PmuSpec::Alias("x".into())),
            Err(ResolveError::NoPmu { .. })
        ));
        assert!(matches!(
            escape("cpu/../msr", PmuSpec::Alias("tsc".into())),
            Err(ResolveError::NoPmu { .. })
        ));
        assert!(matches!(
            escape("cpu", PmuSpec::Alias("../type".into())),
            Err(ResolveError::NoEvent { .. })
        ));
        let terms = PmuSpec::Terms(vec![("../type".into(), Some(1))]);
        assert!(matches!(
            escape("cpu", terms),
            Err(ResolveError::NoTerm { .. })
        ));
        assert_eq!(escape("cpu", PmuSpec::Terms(vec![])).unwrap(), (4, [0; 3]));
    }

    fn resolve_spec(
        root: &Path,
        pmu: &str,
        spec: &PmuSpec,
    ) -> Result<(u32, [u64; 3]), ResolveError> {
        super::resolve(root, pmu, spec, &EventTables::none())
    }

    #[test]
    fn real_software_pmu() {
        let root = Path::new(crate::events::PMU_ROOT);
        assert_eq!(
            config(root, "software/config=3/"),
            (PERF_TYPE_SOFTWARE, 3, 0, 0)
        );
    }

    #[test]
    fn format_parsing() {
        assert_eq!(parse_format("config:0-7"), Some((0, 0xff)));
        assert_eq!(parse_format("config:0-7,32-35\n"), Some((0, 0xf_0000_00ff)));
        assert_eq!(parse_format("config1:0-15"), Some((1, 0xffff)));
        assert_eq!(parse_format("config2:21"), Some((2, 1 << 21)));
        assert_eq!(parse_format("config:0-63"), Some((0, u64::MAX)));
        assert_eq!(parse_format("config:63"), Some((0, 1 << 63)));
        for bad in [
            "",
            "config",
            "config:",
            "config:64",
            "config:7-0",
            "config3:1",
            "config:a-b",
            "config:0-7,",
        ] {
            assert_eq!(parse_format(bad), None, "{bad}");
        }
    }

    /// The lowest `n` bits set.
    fn low_bits(n: u32) -> u64 {
        if n == 0 { 0 } else { u64::MAX >> (64 - n) }
    }

    proptest! {
        #[test]
        fn deposit_stays_in_mask_and_keeps_bits(value: u64, mask: u64) {
            let out = deposit(value, mask);
            prop_assert_eq!(out & !mask, 0);
            prop_assert_eq!(out.count_ones(), (value & low_bits(mask.count_ones())).count_ones());
        }

        #[test]
        fn contiguous_mask_is_a_shift(value: u64, low in 0u32..64, len in 1u32..=64) {
            let high = (low + len - 1).min(63);
            let mask = (u64::MAX >> (63 - (high - low))) << low;
            let fitted = value & (u64::MAX >> (63 - (high - low)));
            prop_assert_eq!(deposit(fitted, mask), fitted << low);
        }

    }

    /// Arbitrary terms against the fake tree (built once) never panic.
    #[test]
    fn resolve_never_panics() {
        let root = fake_root();
        let term = ("[a-z0-9./-]{0,8}", proptest::option::of(any::<u64>()));
        let pmu = "(cpu|msr|weird|weird2|notype|[a-z./]{0,5})";
        let strategy = (proptest::collection::vec(term, 0..4), pmu);
        let mut runner = proptest::test_runner::TestRunner::default();
        let outcome = runner.run(&strategy, |(terms, pmu)| {
            let _ = super::resolve(
                root.path(),
                &pmu,
                &PmuSpec::Terms(terms),
                &EventTables::none(),
            );
            Ok(())
        });
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}
