//! `cgperf::events::parse_event` and `parse_tracepoint` on arbitrary text,
//! and `Event::resolve` of every event that parses against a fake PMU sysfs
//! tree (created once per process in a temporary directory, removed at exit):
//! split bit ranges, overlapping ranges, config1/config2 terms, an `events/`
//! alias directory with `.scale`/`.unit` side files and `term=?` aliases,
//! a PMU without `events/`, and PMUs whose files are broken.
//!
//! Asserts, besides "never panics":
//! - a parsed event keeps its text, which is non-empty and has no whitespace;
//! - modifiers resolve to the same exclude flags;
//! - generalized and raw events resolve without reading sysfs, to the
//!   `PERF_TYPE_*` their kind says;
//! - a resolved PMU event has the type from the PMU's `type` file and sets
//!   only bits that the PMU's format files name (unless a `config*` term, or
//!   an alias using one, sets a whole field);
//! - for events written as `term=value` terms only, the config equals an
//!   independent bit-by-bit model of perf's format deposit, and the event is
//!   rejected as too large exactly when the model says so;
//! - a parsed tracepoint prints back as the text, with path-safe parts;
//! - every error message renders.

#![no_main]

#[path = "perf_model.rs"]
mod perf_model;
use perf_model::{model_deposit, parse_format};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cgperf::events::{
    Event, EventKind, PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_RAW, PERF_TYPE_SOFTWARE,
    PmuSpec, ResolveError, parse_event, parse_tracepoint,
};
use libfuzzer_sys::fuzz_target;

/// One fake PMU: its directory name, `type` file, `format/` files (name,
/// field, bit ranges as written) and `events/` files.
struct FakePmu {
    name: &'static str,
    type_: &'static str,
    formats: &'static [(&'static str, &'static str)],
    events: &'static [(&'static str, &'static str)],
}

const PMUS: &[FakePmu] = &[
    FakePmu {
        name: "cpu",
        type_: "4\n",
        formats: &[
            ("event", "config:0-7,32-35\n"),
            ("umask", "config:8-15\n"),
            ("edge", "config:18\n"),
            ("inv", "config:23\n"),
            ("cmask", "config:24-31\n"),
            ("ldlat", "config1:0-15\n"),
            ("offcore", "config1:32-35,16-19,60-63\n"),
            ("fe", "config2:0-63\n"),
        ],
        events: &[
            ("cycles", "event=0x76\n"),
            ("cache-misses", "event=0x64,umask=0x09\n"),
            ("mem-loads", "event=0xcd,umask=0x1,ldlat=3\n"),
            ("mem-loads.scale", "1\n"),
            ("mem-loads.unit", "loads\n"),
            ("edgy", "event=0x1d,edge,inv=1\n"),
            ("big", "event=0xfff\n"),
            ("needs", "event=0x10,umask=?\n"),
            ("raw", "config=0x1234,config1=7\n"),
            ("spaced", " event=0x3c , umask=0x2 ,\n"),
            ("toolarge", "umask=0x100\n"),
            ("empty", "\n"),
            ("branches", "event=0xc2\n"),
        ],
    },
    // Formats but no `events/` directory, as some uncore PMUs have.
    FakePmu {
        name: "power",
        type_: "21\n",
        formats: &[("event", "config:0-7\n")],
        events: &[],
    },
    FakePmu {
        name: "msr",
        type_: "9\n",
        formats: &[("event", "config:0-63\n")],
        events: &[
            ("tsc", "event=0x00\n"),
            ("aperf", "event=0x01\n"),
            ("mperf", "event=0x02\n"),
        ],
    },
    FakePmu {
        name: "uncore_imc_0",
        type_: "17",
        formats: &[
            ("event", "config:0-7\n"),
            ("umask", "config:8-15\n"),
            ("overlap", "config:4-11,8-19\n"),
            ("hi", "config2:63\n"),
        ],
        events: &[
            ("cas_count_read", "event=0x04,umask=0x03\n"),
            ("cas_count_read.scale", "6.103515625e-5\n"),
            ("cas_count_read.unit", "MiB\n"),
            ("clockticks", "event=0x00,umask=0x00\n"),
        ],
    },
    FakePmu {
        name: "weird",
        type_: "nine\n",
        formats: &[],
        events: &[],
    },
    FakePmu {
        name: "weird2",
        type_: "11\n",
        formats: &[
            ("event", "config3:0-7\n"),
            ("range", "config:8-4\n"),
            ("wide", "config:0-64\n"),
            ("empty", ""),
            ("nocolon", "config\n"),
            ("comma", "config:0-7,\n"),
        ],
        events: &[
            ("bad", "event=zz\n"),
            ("slash", "ev/ent=1\n"),
            ("unknown", "nosuch=1\n"),
            ("loop", "loop\n"),
        ],
    },
];

/// The fake tree, built on first use; removed when the process exits.
fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("cgperf-fuzz-pmu-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let write = |path: PathBuf, content: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        };
        for pmu in PMUS {
            let dir = root.join(pmu.name);
            write(dir.join("type"), pmu.type_);
            for (name, content) in pmu.formats {
                write(dir.join("format").join(name), content);
            }
            for (name, content) in pmu.events {
                write(dir.join("events").join(name), content);
            }
        }
        // An alias that is a directory, a PMU without `type`, a file where a
        // PMU directory would be.
        std::fs::create_dir_all(root.join("weird2/events/dir")).unwrap();
        std::fs::create_dir_all(root.join("notype/format")).unwrap();
        write(root.join("notadir"), "4\n");
        extern "C" fn cleanup() {
            if let Some(root) = ROOT.get() {
                let _ = std::fs::remove_dir_all(root);
            }
        }
        // SAFETY: registering a plain `extern "C" fn()` with atexit.
        unsafe { libc::atexit(cleanup) };
        root
    })
}

/// `(field, mask)` of a fake format file, for the well-formed ones.
fn format_of(pmu: &FakePmu, term: &str) -> Option<(usize, u64)> {
    let (_, content) = pmu.formats.iter().find(|(n, _)| *n == term)?;
    parse_format(content)
}

fn check_pmu(event: &Event, pmu_name: &str, spec: &PmuSpec) {
    let result = event.resolve(root());
    let rendered = match &result {
        Ok(attr) => format!("{attr:?}"),
        Err(e) => e.to_string(),
    };
    drop(rendered);
    let Some(pmu) = PMUS.iter().find(|p| p.name == pmu_name) else {
        // Not in the tree (or not a directory there): always NoPmu.
        if pmu_name != "notype" {
            assert!(
                matches!(result, Err(ResolveError::NoPmu { .. })),
                "{}: {result:?}",
                event.text
            );
        }
        return;
    };
    let Ok(type_) = pmu.type_.trim().parse::<u32>() else {
        assert!(
            matches!(result, Err(ResolveError::BadSysfsFile { .. })),
            "{}: {result:?}",
            event.text
        );
        return;
    };
    let terms: Vec<(&str, Option<u64>)> = match spec {
        PmuSpec::Alias(name) => vec![(name.as_str(), None)],
        PmuSpec::Terms(terms) => terms.iter().map(|(n, v)| (n.as_str(), *v)).collect(),
    };
    let whole_field = terms
        .iter()
        .any(|(n, _)| n.starts_with("config") || *n == "raw");
    // Bits that format files may set, per field.
    let mut allowed = [0u64; 3];
    for (name, _) in pmu.formats {
        if let Some((field, mask)) = format_of(pmu, name) {
            allowed[field] |= mask;
        }
    }
    if let Ok(attr) = &result {
        assert_eq!(attr.type_, type_, "{}", event.text);
        assert_eq!(
            (attr.exclude_user, attr.exclude_kernel, attr.exclude_hv),
            (
                event.modifiers.exclude_user,
                event.modifiers.exclude_kernel,
                event.modifiers.exclude_hv
            ),
            "{}",
            event.text
        );
        if !whole_field {
            for (field, value) in [attr.config, attr.config1, attr.config2].iter().enumerate() {
                assert_eq!(
                    value & !allowed[field],
                    0,
                    "{}: config{field} {value:#x} sets bits outside the formats {:#x}",
                    event.text,
                    allowed[field]
                );
            }
        }
    }
    // The model, for events made only of `term=value` with well-formed formats.
    let mut config = [0u64; 3];
    for (name, value) in &terms {
        let Some(value) = value else { return };
        let Some((field, mask)) = format_of(pmu, name) else {
            return;
        };
        match model_deposit(*value, mask) {
            Some(bits) => config[field] = (config[field] & !mask) | bits,
            None => {
                assert!(
                    matches!(result, Err(ResolveError::ValueTooLarge { .. })),
                    "{}: {value:#x} does not fit {mask:#x}, yet {result:?}",
                    event.text
                );
                return;
            }
        }
    }
    match &result {
        Ok(attr) => assert_eq!(
            [attr.config, attr.config1, attr.config2],
            config,
            "{}",
            event.text
        ),
        Err(e) => panic!(
            "{}: the model resolves it to {config:x?}, cgperf says {e}",
            event.text
        ),
    }
}

fn check_event(text: &str) {
    let event = match parse_event(text) {
        Ok(event) => event,
        Err(e) => {
            drop(e.to_string());
            return;
        }
    };
    assert_eq!(event.text, text);
    assert!(
        !text.is_empty() && !text.contains(char::is_whitespace),
        "{text:?}"
    );
    let expected_type = match &event.kind {
        EventKind::Hardware(_) => PERF_TYPE_HARDWARE,
        EventKind::Software(_) => PERF_TYPE_SOFTWARE,
        EventKind::HardwareCache { .. } => PERF_TYPE_HW_CACHE,
        EventKind::Raw(_) => PERF_TYPE_RAW,
        EventKind::Pmu { pmu, spec } => {
            assert!(text.starts_with(pmu.as_str()) && text[pmu.len()..].starts_with('/'));
            check_pmu(&event, pmu, spec);
            return;
        }
    };
    // Not a PMU event: resolves without sysfs.
    let attr = event
        .resolve(Path::new("/nonexistent"))
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(attr.type_, expected_type, "{text}");
    assert_eq!((attr.config1, attr.config2), (0, 0), "{text}");
    if let EventKind::Raw(value) = event.kind {
        assert_eq!(attr.config, value, "{text}");
    }
    let m = event.modifiers;
    assert_eq!(
        (attr.exclude_user, attr.exclude_kernel, attr.exclude_hv),
        (m.exclude_user, m.exclude_kernel, m.exclude_hv)
    );
    let _ = event.is_clock();
}

fn check_tracepoint(text: &str) {
    match parse_tracepoint(text) {
        Ok(tp) => {
            assert_eq!(tp.to_string(), text);
            for part in [&tp.subsystem, &tp.name] {
                assert!(!part.is_empty(), "{text}");
                assert!(
                    part.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                    "{text}"
                );
            }
        }
        Err(e) => drop(e.to_string()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check_event(text);
    check_tracepoint(text);
});
