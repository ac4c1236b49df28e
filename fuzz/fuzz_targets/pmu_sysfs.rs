//! `Event::resolve` against PMU sysfs files whose *content* is fuzzed: the
//! `type` file, the `format/` files (`config:0-7,32-35`) and the `events/`
//! alias files (`event=0x3c,umask=?`) are written from the input into a
//! per-process directory (on /dev/shm when there is one, removed at exit),
//! then an event written from the input is parsed and resolved there. The
//! `event` target covers the event text against a fixed tree; this one covers
//! what a kernel, a container runtime or a test fixture may put in sysfs.
//!
//! The files are mostly shaped like the kernel's (`config<N>:<ranges>`,
//! `term=value,...` with decimal, hex, `?` and bare values) with bits past 63,
//! reversed ranges, unknown fields and free text mixed in.
//!
//! Asserts, besides "never panics":
//! - a resolved event has the type written in `type` (an unreadable type is
//!   an error) and sets only bits that the well-formed format files name,
//!   unless a `config*` term sets a whole field;
//! - an event made only of `format=value` terms resolves to exactly what an
//!   independent bit-by-bit model of perf's format deposit gives, and is
//!   rejected as too large exactly when the model says so.

#![no_main]

#[path = "perf_model.rs"]
mod perf_model;
use perf_model::{model_deposit, parse_format};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use cgperf::events::{EventKind, ResolveError, parse_event};
use libfuzzer_sys::fuzz_target;

const FORMATS: [&str; 5] = ["event", "umask", "edge", "ldlat", "fe"];
const ALIASES: [&str; 4] = ["a", "b", "c.scale", "d"];

#[derive(Debug, Arbitrary)]
enum Type {
    Number(u32),
    Text(String),
}

/// A `format/` file: usually shaped like the kernel's, sometimes not.
#[derive(Debug, Arbitrary)]
enum Format {
    /// `config<field>:<lo>-<hi>,<bit>,...`; field 3 does not exist, bits
    /// past 63 and `lo > hi` occur on purpose.
    Ranges {
        field: u8,
        ranges: Vec<(u8, Option<u8>)>,
        newline: bool,
    },
    Text(String),
}

/// An `events/` file: usually `term=value,...`, sometimes not.
#[derive(Debug, Arbitrary)]
enum Alias {
    Terms {
        terms: Vec<(Name, AliasValue)>,
        spaces: bool,
        trailing_comma: bool,
    },
    Text(String),
}

#[derive(Debug, Arbitrary)]
enum AliasValue {
    /// A bare term: 1.
    None,
    Decimal(u64),
    Hex(u64),
    /// `term=?`: the config must give it.
    Question,
    Text(String),
}

#[derive(Debug, Arbitrary)]
enum Name {
    Format(u8),
    Alias(u8),
    Config(u8),
    Text(String),
}

#[derive(Debug, Arbitrary)]
struct Input {
    type_: Type,
    /// Each `format/` file; `None`: no such file.
    formats: [Option<Format>; 5],
    /// Each `events/` file; `None`: no such file.
    aliases: [Option<Alias>; 4],
    /// The terms between the slashes, `name` or `name=value`.
    terms: Vec<(Name, Option<u64>)>,
    /// Written after the closing slash (modifiers, or junk).
    suffix: String,
}

fn name(name: &Name) -> String {
    match name {
        Name::Format(i) => FORMATS[usize::from(*i) % FORMATS.len()].to_string(),
        Name::Alias(i) => ALIASES[usize::from(*i) % ALIASES.len()].to_string(),
        Name::Config(i) => ["config", "config1", "config2"][usize::from(*i) % 3].to_string(),
        Name::Text(t) => t.clone(),
    }
}

fn render_format(format: &Format) -> String {
    match format {
        Format::Ranges {
            field,
            ranges,
            newline,
        } => {
            let field = ["config", "config1", "config2", "config3"][usize::from(*field) % 4];
            let ranges: Vec<String> = ranges
                .iter()
                .map(|(lo, hi)| match hi {
                    Some(hi) => format!("{}-{}", lo % 72, hi % 72),
                    None => format!("{}", lo % 72),
                })
                .collect();
            let newline = if *newline { "\n" } else { "" };
            format!("{field}:{}{newline}", ranges.join(","))
        }
        Format::Text(t) => t.clone(),
    }
}

fn render_alias(alias: &Alias) -> String {
    match alias {
        Alias::Terms {
            terms,
            spaces,
            trailing_comma,
        } => {
            let sep = if *spaces { " , " } else { "," };
            let mut out: Vec<String> = terms
                .iter()
                .map(|(n, v)| {
                    let n = name(n);
                    match v {
                        AliasValue::None => n,
                        AliasValue::Decimal(v) => format!("{n}={v}"),
                        AliasValue::Hex(v) => format!("{n}={v:#x}"),
                        AliasValue::Question => format!("{n}=?"),
                        AliasValue::Text(t) => format!("{n}={t}"),
                    }
                })
                .collect();
            if *trailing_comma {
                out.push(String::new());
            }
            out.join(sep) + "\n"
        }
        Alias::Text(t) => t.clone(),
    }
}

fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("cgperf-fuzz-sysfs-{}", std::process::id()));
        extern "C" fn cleanup() {
            if let Some(dir) = DIR.get() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registering a plain `extern "C" fn()` with atexit.
        unsafe { libc::atexit(cleanup) };
        dir
    })
}

fn write(path: &Path, content: Option<&str>) {
    match content {
        Some(content) => std::fs::write(path, content).unwrap(),
        None => match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{}: {e}", path.display()),
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let root = dir();
    let pmu = root.join("p");
    std::fs::create_dir_all(pmu.join("format")).unwrap();
    std::fs::create_dir_all(pmu.join("events")).unwrap();
    let type_text = match &input.type_ {
        Type::Number(n) => format!("{n}\n"),
        Type::Text(t) => t.clone(),
    };
    write(&pmu.join("type"), Some(&type_text));
    let formats: Vec<Option<String>> = input
        .formats
        .iter()
        .map(|f| f.as_ref().map(render_format))
        .collect();
    for (name, content) in FORMATS.iter().zip(&formats) {
        write(&pmu.join("format").join(name), content.as_deref());
    }
    let aliases: Vec<Option<String>> = input
        .aliases
        .iter()
        .map(|a| a.as_ref().map(render_alias))
        .collect();
    for (name, content) in ALIASES.iter().zip(&aliases) {
        write(&pmu.join("events").join(name), content.as_deref());
    }

    let terms: Vec<(String, Option<u64>)> =
        input.terms.iter().map(|(n, v)| (name(n), *v)).collect();
    let mut text = String::from("p/");
    for (i, (name, value)) in terms.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(name);
        if let Some(v) = value {
            text.push_str(&format!("={v:#x}"));
        }
    }
    text.push('/');
    text.push_str(&input.suffix);

    let Ok(event) = parse_event(&text) else {
        return;
    };
    let EventKind::Pmu { .. } = &event.kind else {
        panic!("`{text}` parsed as {:?}", event.kind);
    };
    let result = event.resolve(root);
    match &result {
        Ok(attr) => drop(format!("{attr:?}")),
        Err(e) => drop(e.to_string()),
    }
    if let Err(ResolveError::NoPmu { .. }) = result {
        panic!("`{text}`: the PMU directory exists: {result:?}");
    }
    let Ok(type_) = type_text.trim().parse::<u32>() else {
        assert!(result.is_err(), "`{text}`: type `{type_text}`: {result:?}");
        return;
    };
    if let Ok(attr) = &result {
        assert_eq!(attr.type_, type_, "`{text}`");
        let mentions_config =
            text.contains("config") || aliases.iter().flatten().any(|a| a.contains("config"));
        if !mentions_config {
            let mut allowed = [0u64; 3];
            for content in formats.iter().flatten() {
                if let Some((field, mask)) = parse_format(content) {
                    allowed[field] |= mask;
                }
            }
            for (field, value) in [attr.config, attr.config1, attr.config2].iter().enumerate() {
                assert_eq!(
                    value & !allowed[field],
                    0,
                    "`{text}`: config{field} {value:#x} outside the formats {:#x}",
                    allowed[field]
                );
            }
        }
    }
    // The model, for events made only of `format=value` terms whose files
    // are well formed: exactly the deposited bits, or "too large".
    let mut config = [0u64; 3];
    for (name, value) in &terms {
        let Some(value) = value else { return };
        let Some(i) = FORMATS.iter().position(|f| f == name) else {
            return;
        };
        let Some((field, mask)) = formats[i].as_deref().and_then(parse_format) else {
            return;
        };
        match model_deposit(*value, mask) {
            Some(bits) => config[field] = (config[field] & !mask) | bits,
            None => {
                assert!(
                    matches!(result, Err(ResolveError::ValueTooLarge { .. })),
                    "`{text}`: {value:#x} does not fit {mask:#x}, yet {result:?}"
                );
                return;
            }
        }
    }
    match &result {
        Ok(attr) => assert_eq!(
            [attr.config, attr.config1, attr.config2],
            config,
            "`{text}`"
        ),
        Err(e) => panic!("`{text}`: the model resolves it to {config:x?}, cgperf says {e}"),
    }
});
