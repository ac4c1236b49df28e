//! Structure-aware config fuzzing: an arbitrary *config-shaped* document
//! (the real keys, plausible and implausible values, block and flow styles,
//! every YAML quoting style, anchors and aliases, comments, stray keys) is
//! rendered to YAML and handed to `cgperf::config::parse`. Most inputs get
//! past the YAML layer into validation, which raw bytes rarely do.
//!
//! Asserts: never a panic; an accepted config is accepted again, equal; an
//! accepted config satisfies the documented invariants of `Config`.

#![no_main]

use std::fmt::Write;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;

const EVENTS: &[&str] = &[
    "cycles",
    "instructions",
    "cycles:u",
    "task-clock",
    "cpu-clock:k",
    "context-switches",
    "cs",
    "page-faults",
    "L1-dcache-load-misses",
    "LLC-load-misses",
    "dTLB-prefetches",
    "L1-icache-stores",
    "r003c",
    "r1ffffffffffffffff",
    "msr/tsc/",
    "cpu/event=0x3c,umask=0x1/u",
    "cpu//",
    "sched:sched_switch",
    "cylces",
    "",
    "cycles,instructions",
];
const TRACEPOINTS: &[&str] = &[
    "sched:sched_switch",
    "sched:sched_wakeup",
    "syscalls:sys_enter_openat",
    "xhci-hcd:xhci_urb_enqueue",
    "sched:*",
    "sched",
    ":x",
    "a:b:c",
];
const GROUP_NAMES: &[&str] = &[
    "ipc",
    "sched",
    "cache",
    "a",
    "_x-1",
    "tracepoints",
    "1bad",
    "a b",
];
const PATHS: &[&str] = &[
    "/",
    "/system.slice",
    "/system.slice/*.service",
    "/kubepods.slice/**/kubepods-{besteffort,burstable}-pod*.slice",
    "/user.slice/user-?.slice",
    "/a/[abc]/b",
    "/a/[",
    "/a/{b,c",
    "relative/path",
    "//double",
    "/trailing/",
    "/a/../b",
    "/**",
    "/x\\x2dy",
];
const DURATIONS: &[&str] = &[
    "1s",
    "100ms",
    "1.5s",
    "1h",
    "60m",
    "99ms",
    "2h",
    "0s",
    "-1s",
    "1",
    "1 s",
    "1e3ms",
    "0.0001s",
    "18446744073709551616s",
    "1.s",
    ".5s",
    "1sec",
];
const LABELS: &[&str] = &["kubernetes", "systemd", "containers", "kubernetes ", "pods"];
const TOP_KEYS: &[&str] = &[
    "interval",
    "per_cpu",
    "groups",
    "tracepoints",
    "cgroups",
    "max_cgroups",
    "labels",
    "otlp",
    "intreval",
    "group",
];
const OTLP_KEYS: &[&str] = &[
    "endpoint", "protocol", "interval", "timeout", "headers", "resource", "endpiont",
];
const OTLP_VALUES: &[&str] = &[
    "http://127.0.0.1:4317",
    "https://collector:4318/v1/metrics",
    "grpc",
    "http/protobuf",
    "http/json",
    "ftp://x",
    "10s",
    "500",
    "authorization",
    "Bearer x",
    "service.name",
    "",
];

/// A scalar: usually from the pool, sometimes arbitrary text.
#[derive(Debug, Arbitrary)]
enum Scalar {
    Pool(u8),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Null,
}

#[derive(Debug, Arbitrary, Clone, Copy)]
enum Quote {
    Plain,
    Single,
    Double,
}

#[derive(Debug, Arbitrary)]
enum Value {
    Scalar(Scalar, Quote),
    List(Vec<(Scalar, Quote)>, bool),
    /// Repeats the anchor of an earlier value (`*a0`), or an unknown one.
    Alias(u8),
}

#[derive(Debug, Arbitrary)]
struct Selector {
    path: Option<(Scalar, Quote)>,
    glob: Option<(Scalar, Quote)>,
    groups: Option<Value>,
    tracepoints: Option<Value>,
    extra: Option<(String, Value)>,
}

#[derive(Debug, Arbitrary)]
enum Entry {
    Interval(Scalar, Quote),
    PerCpu(Scalar),
    Groups(Vec<(Scalar, Quote, Value)>, bool),
    Tracepoints(Value),
    Cgroups(Vec<Selector>),
    MaxCgroups(Scalar),
    Labels(Value),
    Otlp(Vec<(u8, Value)>),
    Other(u8, Value),
    Comment(String),
    /// An anchored value, so that later aliases can refer to it.
    Anchored(u8, Value),
}

#[derive(Debug, Arbitrary)]
struct Doc {
    entries: Vec<Entry>,
    /// `---` start marker, trailing `...`.
    markers: (bool, bool),
}

struct Renderer<'p> {
    out: String,
    pool: &'p [&'p str],
    anchors: usize,
}

fn pick<'a>(pool: &[&'a str], i: u8) -> &'a str {
    pool[usize::from(i) % pool.len()]
}

impl Renderer<'_> {
    fn scalar(&mut self, s: &Scalar, q: Quote) {
        let text = match s {
            Scalar::Pool(i) => pick(self.pool, *i).to_string(),
            Scalar::Text(t) => t.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Null => "~".to_string(),
        };
        match q {
            // Plain: written as is, YAML decides what it means.
            Quote::Plain => self.out.push_str(&text),
            Quote::Single => {
                let _ = write!(self.out, "'{}'", text.replace('\'', "''"));
            }
            Quote::Double => {
                let _ = write!(self.out, "{text:?}");
            }
        }
    }

    fn value(&mut self, v: &Value, indent: usize) {
        match v {
            Value::Scalar(s, q) => self.scalar(s, *q),
            Value::List(items, flow) if *flow || items.is_empty() => {
                self.out.push('[');
                for (i, (s, q)) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.scalar(s, *q);
                }
                self.out.push(']');
            }
            Value::List(items, _) => {
                for (s, q) in items {
                    self.out.push('\n');
                    self.out.push_str(&" ".repeat(indent + 2));
                    self.out.push_str("- ");
                    self.scalar(s, *q);
                }
            }
            Value::Alias(i) => {
                let n = usize::from(*i) % (self.anchors + 1);
                let _ = write!(self.out, "*a{n}");
            }
        }
    }

    fn with_pool<'q>(&mut self, pool: &'q [&'q str], f: impl FnOnce(&mut Renderer<'q>)) {
        let mut inner = Renderer {
            out: std::mem::take(&mut self.out),
            pool,
            anchors: self.anchors,
        };
        f(&mut inner);
        self.out = inner.out;
        self.anchors = inner.anchors;
    }
}

fn render(doc: &Doc) -> String {
    let mut r = Renderer {
        out: String::new(),
        pool: EVENTS,
        anchors: 0,
    };
    if doc.markers.0 {
        r.out.push_str("---\n");
    }
    for entry in &doc.entries {
        match entry {
            Entry::Interval(s, q) => {
                r.out.push_str("interval: ");
                r.with_pool(DURATIONS, |r| r.scalar(s, *q));
            }
            Entry::PerCpu(s) => {
                r.out.push_str("per_cpu: ");
                r.scalar(s, Quote::Plain);
            }
            Entry::Groups(groups, flow) => {
                r.out.push_str("groups:");
                if *flow {
                    r.out.push_str(" {");
                }
                for (i, (name, q, events)) in groups.iter().enumerate() {
                    if *flow {
                        if i > 0 {
                            r.out.push_str(", ");
                        }
                    } else {
                        r.out.push_str("\n  ");
                    }
                    r.with_pool(GROUP_NAMES, |r| r.scalar(name, *q));
                    r.out.push_str(": ");
                    r.value(events, 2);
                }
                if *flow {
                    r.out.push('}');
                }
            }
            Entry::Tracepoints(v) => {
                r.out.push_str("tracepoints: ");
                r.with_pool(TRACEPOINTS, |r| r.value(v, 0));
            }
            Entry::Cgroups(selectors) => {
                r.out.push_str("cgroups:");
                if selectors.is_empty() {
                    r.out.push_str(" []");
                }
                for sel in selectors {
                    r.out.push_str("\n  -");
                    let mut first = true;
                    let mut key = |r: &mut Renderer<'_>, k: &str| {
                        if first {
                            r.out.push(' ');
                            first = false;
                        } else {
                            r.out.push_str("\n    ");
                        }
                        r.out.push_str(k);
                        r.out.push_str(": ");
                    };
                    if let Some((s, q)) = &sel.path {
                        key(&mut r, "path");
                        r.with_pool(PATHS, |r| r.scalar(s, *q));
                    }
                    if let Some((s, q)) = &sel.glob {
                        key(&mut r, "match");
                        r.with_pool(PATHS, |r| r.scalar(s, *q));
                    }
                    if let Some(v) = &sel.groups {
                        key(&mut r, "groups");
                        r.with_pool(GROUP_NAMES, |r| r.value(v, 4));
                    }
                    if let Some(v) = &sel.tracepoints {
                        key(&mut r, "tracepoints");
                        r.with_pool(TRACEPOINTS, |r| r.value(v, 4));
                    }
                    if let Some((k, v)) = &sel.extra {
                        key(&mut r, if k.is_empty() { "x" } else { k });
                        r.value(v, 4);
                    }
                    if first {
                        r.out.push_str(" {}");
                    }
                }
            }
            Entry::MaxCgroups(s) => {
                r.out.push_str("max_cgroups: ");
                r.scalar(s, Quote::Plain);
            }
            Entry::Labels(v) => {
                r.out.push_str("labels: ");
                r.with_pool(LABELS, |r| r.value(v, 0));
            }
            Entry::Otlp(keys) => {
                r.out.push_str("otlp:");
                if keys.is_empty() {
                    r.out.push_str(" {}");
                }
                for (k, v) in keys {
                    r.out.push_str("\n  ");
                    r.out.push_str(pick(OTLP_KEYS, *k));
                    r.out.push_str(": ");
                    r.with_pool(OTLP_VALUES, |r| r.value(v, 2));
                }
            }
            Entry::Other(k, v) => {
                r.out.push_str(pick(TOP_KEYS, *k));
                r.out.push_str(": ");
                r.value(v, 0);
            }
            Entry::Comment(c) => {
                r.out.push_str("# ");
                r.out.push_str(&c.replace(['\n', '\r'], " "));
            }
            Entry::Anchored(k, v) => {
                r.out.push_str(pick(TOP_KEYS, *k));
                let _ = write!(r.out, ": &a{} ", r.anchors);
                r.anchors += 1;
                r.value(v, 0);
            }
        }
        r.out.push('\n');
    }
    if doc.markers.1 {
        r.out.push_str("...\n");
    }
    r.out
}

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = Doc::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let text = render(&doc);
    match cgperf::config::parse("fuzz", &text) {
        Ok(config) => {
            let again =
                cgperf::config::parse("fuzz", &text).expect("accepted once, accepted twice");
            assert_eq!(config, again, "parsing is deterministic");
            // The invariants `Config` documents.
            assert!(config.interval >= cgperf::config::MIN_INTERVAL, "{text}");
            assert!(config.interval <= cgperf::config::MAX_INTERVAL, "{text}");
            assert!(!config.cgroups.is_empty(), "{text}");
            if let Some(max) = config.max_cgroups {
                assert!(
                    (1..=cgperf::config::MAX_CGROUPS_LIMIT).contains(&max),
                    "{text}"
                );
            }
            for (i, g) in config.groups.iter().enumerate() {
                assert!(!g.events.is_empty(), "{text}");
                assert_ne!(g.name, "tracepoints", "{text}");
                assert!(
                    config.groups[..i].iter().all(|h| h.name != g.name),
                    "{text}"
                );
            }
            for sel in &config.cgroups {
                assert!(
                    !(sel.groups.is_empty() && sel.tracepoints.is_empty()),
                    "{text}"
                );
                for g in &sel.groups {
                    assert!(config.groups.iter().any(|h| &h.name == g), "{text}");
                }
                for t in &sel.tracepoints {
                    assert!(config.tracepoints.contains(t), "{text}");
                }
            }
        }
        Err(e) => drop(e.to_string()),
    }
});
