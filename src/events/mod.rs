//! Perf event names as `perf` writes them (`cycles:u`, `L1-dcache-load-misses`,
//! `r003c`, `cpu/event=0x3c,umask=0x0/`, `msr/tsc/`, `sched:sched_switch`) and
//! their resolution against sysfs into the `perf_event_attr` fields the kernel
//! needs.
//!
//! Parsing ([`parse_event`], [`parse_tracepoint`]) is pure syntax, so a config
//! can be checked on any machine; [`Event::resolve`] then reads the PMU
//! descriptions under [`PMU_ROOT`] of the machine that will do the counting.

mod cores;
mod format;
mod hardware;
mod pmu;
mod probe;
mod syscall;
mod system_wide;
mod tables;
mod tracepoint;

use crate::suggest::did_you_mean;
use std::path::{Path, PathBuf};

pub use cores::{CorePmu, CorePmus};
pub use format::{DecodeError, Field, FieldKind, FormatError, MAX_VALUE_LEN, TracepointFormat};
pub(crate) use hardware::known_names;
pub(crate) use hardware::{
    PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK,
};
pub use probe::{
    HeldBinary, ProbeError, ProbeKind, ProbeProblem, ProbeSpec, ProbeSyntaxError, ResolvedProbe,
};
pub use syscall::{SYSCALL_LABEL, syscall_name};
pub use system_wide::{ScaleUnit, cpumask, scale_unit};
pub use tables::{
    CpuIdent, EventTables, PmuTable, TableError, TableEvent, TableMetric, read_metrics,
};
pub use tracepoint::{NAME_MAX, TracepointName, TracepointProblem, parse_tracepoint};

/// Where the kernel describes its PMUs (one directory per PMU, with `type`,
/// `format/` and `events/`); the usual `pmu_root` for [`Event::resolve`].
pub const PMU_ROOT: &str = "/sys/bus/event_source/devices";

// enum perf_type_id (include/uapi/linux/perf_event.h): perf_event_attr.type.
/// `perf_event_attr.type` of the generalized hardware events (`cycles`, ...).
pub const PERF_TYPE_HARDWARE: u32 = 0;
/// `perf_event_attr.type` of the kernel's software events (`task-clock`, ...).
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `perf_event_attr.type` of tracepoints (config is the tracefs event id).
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `perf_event_attr.type` of the generalized hardware cache events.
pub const PERF_TYPE_HW_CACHE: u32 = 3;
/// `perf_event_attr.type` of raw, CPU-specific events (`rNNNN`).
pub const PERF_TYPE_RAW: u32 = 4;
/// `perf_event_attr.type` of hardware breakpoints.
pub const PERF_TYPE_BREAKPOINT: u32 = 5;

/// An event as written in the config, parsed but not yet resolved against this machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Event {
    /// The text exactly as written, for labels and messages.
    pub text: String,
    /// Which event it names.
    pub kind: EventKind,
    /// Privilege levels to count, from the `:ukh` suffix.
    pub modifiers: Modifiers,
}

/// The event named by an [`Event`], in the terms perf uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A generalized hardware event: a `PERF_COUNT_HW_*` id (enum perf_hw_id).
    Hardware(u64),
    /// A generalized cache event: `PERF_COUNT_HW_CACHE_*` ids of the cache,
    /// the operation and the result.
    HardwareCache {
        /// enum perf_hw_cache_id (L1D = 0, ..., NODE = 6).
        cache: u64,
        /// enum perf_hw_cache_op_id (READ = 0, WRITE = 1, PREFETCH = 2).
        op: u64,
        /// enum perf_hw_cache_op_result_id (ACCESS = 0, MISS = 1).
        result: u64,
    },
    /// A kernel software event: a `PERF_COUNT_SW_*` id (enum perf_sw_ids).
    Software(u64),
    /// A raw CPU event `rNNNN`: the config value, written in hex.
    Raw(u64),
    /// An event of the CPU's own, by the name its vendor gives it
    /// (`BR_INST_RETIRED.NEAR_TAKEN`, `ex_ret_instr`, `STALL_BACKEND`):
    /// resolved on the machine, from the event tables of its CPU model or
    /// the event aliases of its core PMUs in sysfs.
    Named(String),
    /// A dynamic PMU event `pmu/term=v,.../` or `pmu/alias/`, resolved via sysfs.
    Pmu {
        /// The PMU's directory name under [`PMU_ROOT`], e.g. `cpu` or `msr`.
        pmu: String,
        /// What was written between the slashes.
        spec: PmuSpec,
    },
}

/// What was written between the slashes of a `pmu/.../` event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PmuSpec {
    /// `term=value` pairs in order; a term without `=value` means 1 (perf
    /// semantics), or, if the PMU has no such format term, an event alias.
    Terms(Vec<(String, Option<u64>)>),
    /// A single bare name, e.g. `tsc` in `msr/tsc/`: an event alias from
    /// `events/`, or (as in perf) a format term set to 1 if no alias exists.
    Alias(String),
}

/// What is excluded from counting, as perf's modifiers set it: the
/// privilege levels `u`, `k` and `h`, and `G` (guest) and `H` (host).
///
/// The default counts every privilege level of the host and nothing that
/// KVM guests run, as `perf stat` does: `exclude_guest` is set unless `G`
/// is written (and cleared for PMUs outside the cores, which refuse it:
/// see [`Event::resolve`]). On hosts whose KVM guests have a mediated (passed-through)
/// PMU, that is also what lets cgperf count at all while such a guest
/// runs: the kernel then refuses new events that would count the guest
/// (EOPNOTSUPP), and events that do keep such guests from starting (EBUSY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Modifiers {
    /// Do not count in user space.
    pub exclude_user: bool,
    /// Do not count in the kernel.
    pub exclude_kernel: bool,
    /// Do not count in the hypervisor.
    pub exclude_hv: bool,
    /// Do not count while a KVM guest runs (set unless `G` is written).
    pub exclude_guest: bool,
    /// Do not count on the host (set by `G` without `H`).
    pub exclude_host: bool,
}

impl Default for Modifiers {
    fn default() -> Self {
        Self {
            exclude_user: false,
            exclude_kernel: false,
            exclude_hv: false,
            exclude_guest: true,
            exclude_host: false,
        }
    }
}

/// What the kernel needs: perf_event_attr fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventAttr {
    /// `perf_event_attr.type`: a `PERF_TYPE_*` value or a dynamic PMU's type.
    pub type_: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// `perf_event_attr.config1`.
    pub config1: u64,
    /// `perf_event_attr.config2`.
    pub config2: u64,
    /// `perf_event_attr.exclude_user`.
    pub exclude_user: bool,
    /// `perf_event_attr.exclude_kernel`.
    pub exclude_kernel: bool,
    /// `perf_event_attr.exclude_hv`.
    pub exclude_hv: bool,
    /// `perf_event_attr.exclude_guest`.
    pub exclude_guest: bool,
    /// `perf_event_attr.exclude_host`.
    pub exclude_host: bool,
    /// On a hybrid CPU, the encoding of the same event of the CPU's own on
    /// the other core type's PMU, where that type's table defines it too
    /// (Intel's `cpu_atom` encodes `BR_INST_RETIRED.NEAR_TAKEN` otherwise
    /// than `cpu_core`): opened there instead, so that a bare name counts
    /// on every core, as a generalized event does. Not a kernel field.
    pub other_core: Option<OtherCore>,
}

/// An event's type and `[config, config1, config2]` on another core PMU
/// (see [`EventAttr::other_core`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherCore {
    /// The other core PMU's `type`.
    pub type_: u32,
    /// The event's config fields there.
    pub config: [u64; 3],
}

impl EventAttr {
    /// The event `config` of PMU `type_`, counted as an event written
    /// without modifiers is (see [`Modifiers`]).
    pub fn new(type_: u32, config: u64) -> Self {
        Self::with_modifiers(type_, [config, 0, 0], Modifiers::default())
    }

    /// The event `[config, config1, config2]` of PMU `type_`, with what
    /// `modifiers` exclude.
    pub fn with_modifiers(type_: u32, config: [u64; 3], modifiers: Modifiers) -> Self {
        let Modifiers {
            exclude_user,
            exclude_kernel,
            exclude_hv,
            exclude_guest,
            exclude_host,
        } = modifiers;
        Self {
            type_,
            config: config[0],
            config1: config[1],
            config2: config[2],
            exclude_user,
            exclude_kernel,
            exclude_hv,
            exclude_guest,
            exclude_host,
            other_core: None,
        }
    }
}

/// Why an event or tracepoint name is not valid syntax; the message says how
/// to fix it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum EventSyntaxError {
    /// The name is the empty string.
    #[error("empty event name; write an event such as `cycles` (see `cgperf list`)")]
    Empty,
    /// The name contains spaces or other whitespace.
    #[error("event `{0}` contains whitespace; write it without spaces, e.g. `cycles:u`")]
    Whitespace(String),
    /// Several events separated by commas where one was expected.
    #[error("`{0}` lists several events; give each event as its own entry")]
    SeveralEvents(String),
    /// Not a name perf knows.
    #[error("unknown event `{name}`{} (see `cgperf list`)", hint(.suggestion))]
    UnknownEvent {
        /// The unknown name, without modifiers.
        name: String,
        /// The closest known name, if one is close.
        suggestion: Option<String>,
    },
    /// A cache event whose cache has no such operation (perf rejects it too).
    #[error("`{name}`: the {cache} cache has no {op} events (it has: {supported})")]
    UnsupportedCacheOp {
        /// The event name as written.
        name: String,
        /// The cache's canonical name.
        cache: String,
        /// The operation's canonical name.
        op: String,
        /// The operations the cache does have.
        supported: String,
    },
    /// `r` followed by something that is not 1 to 16 hex digits.
    #[error("invalid raw event `{0}`: write `r` followed by 1 to 16 hex digits, e.g. `r003c`")]
    BadRaw(String),
    /// A `:` with nothing after it.
    #[error(
        "empty modifier in `{0}`: remove the trailing `:` or add u, k, h, G or H, e.g. `cycles:u`"
    )]
    EmptyModifier(String),
    /// A modifier letter other than `u`, `k`, `h`, `G` or `H`.
    #[error(
        "unsupported modifier `{modifier}` in `{text}`: only u (user), k (kernel), h (hypervisor), G (KVM guests) and H (host) are supported, e.g. `cycles:u`"
    )]
    BadModifier {
        /// The event text as written.
        text: String,
        /// The offending character.
        modifier: char,
    },
    /// The same modifier letter twice.
    #[error(
        "modifier `{modifier}` repeated in `{text}`; give each of u, k, h, G and H at most once"
    )]
    RepeatedModifier {
        /// The event text as written.
        text: String,
        /// The repeated letter.
        modifier: char,
    },
    /// Malformed `pmu/.../` event.
    #[error("invalid PMU event `{text}`: {problem}")]
    BadPmuEvent {
        /// The event text as written.
        text: String,
        /// What is wrong with it.
        problem: PmuProblem,
    },
    /// `subsystem:event` given where a counter event was expected.
    #[error(
        "`{0}` looks like a tracepoint (subsystem:event), not a counter event; list it as a tracepoint instead (see `cgperf list`)"
    )]
    LooksLikeTracepoint(String),
    /// Malformed tracepoint name.
    #[error("invalid tracepoint `{text}`: {problem}")]
    BadTracepoint {
        /// The tracepoint text as written.
        text: String,
        /// What is wrong with it.
        problem: TracepointProblem,
    },
}

/// What is wrong inside a `pmu/.../` event.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PmuProblem {
    /// Only one `/`.
    #[error("missing the closing `/`; write e.g. `cpu/event=0x3c/` or `msr/tsc/`")]
    Unterminated,
    /// Nothing before the first `/`.
    #[error("missing the PMU name before the first `/`; write e.g. `cpu/event=0x3c/`")]
    MissingPmu,
    /// `pmu//`.
    #[error("nothing between the slashes; write e.g. `msr/tsc/` or `cpu/event=0x3c,umask=0x1/`")]
    NoTerms,
    /// `a,,b` or a trailing comma.
    #[error("empty term (a stray `,`); separate terms with single commas")]
    EmptyTerm,
    /// A PMU, term or alias name with characters sysfs names never have.
    #[error("`{0}` is not a valid name; use only letters, digits, `_`, `.` and `-`")]
    BadName(String),
    /// `term=value` whose value is not a number.
    #[error(
        "value `{value}` of term `{term}` is not a number; write decimal (e.g. 10) or hex (e.g. 0x1f), at most 64 bits"
    )]
    BadValue {
        /// The term name.
        term: String,
        /// The value as written.
        value: String,
    },
    /// More text with `/` after the closing `/`.
    #[error("unexpected `/` after the closing `/`; only modifiers such as `u` or `:u` may follow")]
    ExtraSlash,
}

/// Why a parsed [`Event`] cannot be turned into an [`EventAttr`] on this machine.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// No directory for the PMU under the PMU root.
    #[error("no PMU `{pmu}` on this machine (none in {}){}", .root.display(), hint(.suggestion))]
    NoPmu {
        /// The PMU name as written.
        pmu: String,
        /// The PMU root searched.
        root: PathBuf,
        /// The closest existing PMU, if one is close.
        suggestion: Option<String>,
    },
    /// Neither an alias in `events/` nor a format term of that name.
    #[error("PMU `{pmu}` has no event `{event}`{} (known: {})", hint(.suggestion), known_list(.known))]
    NoEvent {
        /// The PMU name.
        pmu: String,
        /// The alias as written.
        event: String,
        /// The closest alias or format term, if one is close.
        suggestion: Option<String>,
        /// The PMU's aliases.
        known: Vec<String>,
    },
    /// A vendor name that is neither in this CPU's event tables nor an
    /// event alias of its core PMUs in sysfs.
    #[error("no event `{name}` in {tables}, nor among the events of its core PMUs in sysfs{} ({advice})", hint(.suggestion))]
    NoNamedEvent {
        /// The name as written.
        name: String,
        /// Which tables were searched ([`EventTables::describe`]).
        tables: String,
        /// The closest table event, if one is close.
        suggestion: Option<String>,
        /// What to do.
        advice: &'static str,
    },
    /// No file in `format/` for a `term=value`.
    #[error("PMU `{pmu}` has no format term `{term}`{} (known: {})", hint(.suggestion), known_list(.known))]
    NoTerm {
        /// The PMU name.
        pmu: String,
        /// The term as written.
        term: String,
        /// The closest format term, if one is close.
        suggestion: Option<String>,
        /// The PMU's format terms, plus `config`, `config1` and `config2`.
        known: Vec<String>,
    },
    /// The value has more bits than the term's format provides.
    #[error("value {value:#x} does not fit term `{term}` ({format})")]
    ValueTooLarge {
        /// The term name.
        term: String,
        /// The value given.
        value: u64,
        /// The format file's content, e.g. `config:8-15`.
        format: String,
    },
    /// An alias with `term=?` whose value the config did not give.
    #[error(
        "event `{alias}` of PMU `{pmu}` needs a value for `{term}`; write e.g. `{pmu}/{alias},{term}=1/`"
    )]
    MissingValue {
        /// The PMU name.
        pmu: String,
        /// The alias.
        alias: String,
        /// The term that needs a value.
        term: String,
    },
    /// A sysfs file whose content is not what the kernel documents.
    #[error("cannot understand {} (content `{content}`): {problem}", .path.display())]
    BadSysfsFile {
        /// The file.
        path: PathBuf,
        /// Its content, trimmed.
        content: String,
        /// What was expected.
        problem: &'static str,
    },
    /// A sysfs file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// An event as perf's metric formulas write it, in the form `perf stat -e`
/// takes: `cpu@INST_RETIRED.ANY,cmask=1@k` (escapes already removed) is
/// `cpu/INST_RETIRED.ANY,cmask=1/k`, because `/` divides in a formula.
/// Any other name is itself.
pub fn from_metric_name(name: &str) -> std::borrow::Cow<'_, str> {
    if let Some((pmu, rest)) = name.split_once('@')
        && let Some((terms, modifiers)) = rest.rsplit_once('@')
        && !pmu.is_empty()
        && pmu.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return format!("{pmu}/{terms}/{modifiers}").into();
    }
    name.into()
}

/// Parses an event as `perf stat -e` accepts it: a generalized hardware,
/// software or cache event name, `rNNNN`, or `pmu/terms/`, each optionally
/// followed by `:` and modifiers (`pmu/terms/` also takes them directly, as in
/// `cpu/event=0x3c/u`). Pure syntax: no file is read.
pub fn parse_event(text: &str) -> Result<Event, EventSyntaxError> {
    check_blank(text)?;
    let (kind, modifiers) = if text.contains('/') {
        parse_pmu_event(text)?
    } else {
        if text.contains(',') {
            return Err(EventSyntaxError::SeveralEvents(text.to_string()));
        }
        let (name, mods) = match text.split_once(':') {
            Some((name, mods)) => (name, Some(mods)),
            None => (text, None),
        };
        let kind = match symbolic_or_raw(name)? {
            Some(kind) => kind,
            None if is_vendor_name(name)
                && mods.is_none_or(|m| parse_modifiers(text, m).is_ok()) =>
            {
                EventKind::Named(name.to_string())
            }
            None => return Err(unknown_event(text, name, mods)),
        };
        let modifiers = match mods {
            Some(mods) => parse_modifiers(text, mods)?,
            None => Modifiers::default(),
        };
        (kind, modifiers)
    };
    Ok(Event {
        text: text.to_string(),
        kind,
        modifiers,
    })
}

impl ResolveError {
    /// Whether this names a PMU of the CPU's cores (`cpu`, `cpu_core`,
    /// `armv8_pmuv3_0`, ...) on a machine under `pmu_root` that has none:
    /// a VM without a hardware PMU, where the event cannot count whatever
    /// the config says, as `cycles` cannot.
    pub fn is_missing_hardware_pmu(&self, pmu_root: &Path) -> bool {
        let Self::NoPmu { pmu, .. } = self else {
            return false;
        };
        let cpu_like = pmu == "cpu" || pmu.starts_with("cpu_") || pmu.starts_with("armv");
        cpu_like && cores::core_pmu_names(pmu_root).is_empty()
    }
}

impl Event {
    /// Turns the event into `perf_event_attr` fields; `pmu_root` (normally
    /// [`PMU_ROOT`]) is only read for `pmu/.../` and named events, and
    /// `tables` (this CPU's, see [`EventTables::load`]) only asked for
    /// named events.
    pub fn resolve(
        &self,
        pmu_root: &Path,
        tables: &EventTables,
    ) -> Result<EventAttr, ResolveError> {
        let mut other_core = None;
        let (type_, config) = match &self.kind {
            EventKind::Hardware(id) => (PERF_TYPE_HARDWARE, [*id, 0, 0]),
            EventKind::Software(id) => (PERF_TYPE_SOFTWARE, [*id, 0, 0]),
            EventKind::HardwareCache { cache, op, result } => (
                PERF_TYPE_HW_CACHE,
                [cache | (op << 8) | (result << 16), 0, 0],
            ),
            EventKind::Raw(config) => (PERF_TYPE_RAW, [*config, 0, 0]),
            EventKind::Pmu { pmu, spec } => pmu::resolve(pmu_root, pmu, spec, tables)?,
            EventKind::Named(name) => {
                let (type_, config, other) = pmu::resolve_named(pmu_root, name, tables)?;
                other_core = other;
                (type_, config)
            }
        };
        let mut modifiers = self.modifiers;
        if let EventKind::Pmu { pmu, .. } = &self.kind
            && !cores::is_core_pmu(pmu_root, pmu)
        {
            // PMUs outside the cores (msr, power, uncore) refuse every
            // exclude bit (EINVAL) and count no guest apart anyway: the
            // default leaves guests in there, as perf ends up doing.
            modifiers.exclude_guest = false;
        }
        Ok(EventAttr {
            other_core,
            ..EventAttr::with_modifiers(type_, config, modifiers)
        })
    }

    /// The `event` label: perf's own name of a generalized event whatever
    /// alias was written (`cs` is `context-switches`), with the modifiers
    /// as written; raw and PMU events as written. One event, one series
    /// name, so that queries and dashboards find it under any config.
    pub fn label(&self) -> String {
        match hardware::canonical_name(&self.kind) {
            Some(name) => match self.text.split_once(':') {
                Some((_, modifiers)) => format!("{name}:{modifiers}"),
                None => name,
            },
            None => self.text.clone(),
        }
    }

    /// True for task-clock and cpu-clock (their value is nanoseconds, exported as seconds).
    pub fn is_clock(&self) -> bool {
        matches!(
            self.kind,
            EventKind::Software(
                hardware::PERF_COUNT_SW_CPU_CLOCK | hardware::PERF_COUNT_SW_TASK_CLOCK
            )
        )
    }
}

/// Rejects empty text and text with whitespace, which no event name has.
fn check_blank(text: &str) -> Result<(), EventSyntaxError> {
    if text.is_empty() {
        Err(EventSyntaxError::Empty)
    } else if text.contains(char::is_whitespace) {
        Err(EventSyntaxError::Whitespace(text.to_string()))
    } else {
        Ok(())
    }
}

/// A generalized event name or `rNNNN`; `None` if it is neither.
fn symbolic_or_raw(name: &str) -> Result<Option<EventKind>, EventSyntaxError> {
    if let Some(kind) = hardware::lookup(name)? {
        return Ok(Some(kind));
    }
    let Some(hex) = name.strip_prefix('r') else {
        return Ok(None);
    };
    let all_hex = !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    if all_hex && hex.len() <= 16 {
        return u64::from_str_radix(hex, 16)
            .map(|v| Some(EventKind::Raw(v)))
            .map_err(|_| EventSyntaxError::BadRaw(name.to_string()));
    }
    // `r` then a digit (`r0x3c`, `r12g`) or too many hex digits: meant as raw.
    if all_hex || hex.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(EventSyntaxError::BadRaw(name.to_string()));
    }
    Ok(None)
}

/// Whether a name that is no generalized event may be one of the CPU's own
/// (resolved later, on the machine, from its tables or its core PMUs'
/// sysfs aliases): vendors join words with `.` or `_` (`INST_RETIRED.ANY`,
/// `ex_ret_instr`, `STALL_BACKEND`), which generalized names never do;
/// Intel's top-down events are `topdown-*`, as perf's metrics write them.
/// A lowercase near-miss of a generalized name (`task_clock`) stays the
/// typo it is, caught here with its did-you-mean; capitals are the
/// vendor's (Arm's `CPU_CYCLES`).
fn is_vendor_name(name: &str) -> bool {
    const SEPARATORS: [char; 2] = ['.', '_'];
    let joined =
        name.contains(SEPARATORS) && !name.starts_with(SEPARATORS) && !name.ends_with(SEPARATORS);
    let topdown = name.len() > "topdown-".len() && name.starts_with("topdown-");
    let near_generic = || {
        let known = hardware::known_names();
        did_you_mean(name, known.iter().map(String::as_str)).is_some()
    };
    let lowercase = !name.chars().any(|c| c.is_ascii_uppercase());
    is_valid_name(name) && (joined || topdown) && !(lowercase && near_generic())
}

impl Event {
    /// For one of Intel's top-down events (`topdown-retiring`,
    /// `cpu_core/topdown-be-bound/`), the `slots` event of the same PMU:
    /// the kernel counts top-down events only in a group that `slots`
    /// leads. `None` for every other event.
    pub fn topdown_slots(&self) -> Option<Event> {
        let modifiers = self.modifiers;
        match &self.kind {
            EventKind::Named(name) if name.to_ascii_lowercase().starts_with("topdown-") => {
                Some(Event {
                    text: "slots".into(),
                    kind: EventKind::Named("slots".into()),
                    modifiers,
                })
            }
            EventKind::Pmu {
                pmu,
                spec: PmuSpec::Alias(alias),
            } if alias.to_ascii_lowercase().starts_with("topdown-") => Some(Event {
                text: format!("{pmu}/slots/"),
                kind: EventKind::Pmu {
                    pmu: pmu.clone(),
                    spec: PmuSpec::Alias("slots".into()),
                },
                modifiers,
            }),
            _ => None,
        }
    }
}

/// The error for a name that is not known: a did-you-mean if one is close,
/// else a hint if the whole text looks like a tracepoint.
fn unknown_event(text: &str, name: &str, mods: Option<&str>) -> EventSyntaxError {
    let known = hardware::known_names();
    let suggestion = did_you_mean(name, known.iter().map(String::as_str)).map(str::to_owned);
    let modifier_like = mods.is_some_and(|m| m.chars().all(|c| matches!(c, 'u' | 'k' | 'h')));
    let tracepoint_like = match parse_tracepoint(text) {
        Ok(_) => true,
        Err(EventSyntaxError::BadTracepoint { problem, .. }) => {
            problem == TracepointProblem::Wildcard
        }
        Err(_) => false,
    };
    if suggestion.is_none() && !modifier_like && tracepoint_like {
        return EventSyntaxError::LooksLikeTracepoint(text.to_string());
    }
    EventSyntaxError::UnknownEvent {
        name: name.to_string(),
        suggestion,
    }
}

/// Parses perf's modifiers. Listing privilege levels counts only those,
/// e.g. `u` sets exclude_kernel and exclude_hv, `uk` sets exclude_hv only;
/// `G` counts guests and `H` the host: `G` alone sets exclude_host, `GH`
/// counts both, neither (or `H`) counts the host only.
fn parse_modifiers(text: &str, mods: &str) -> Result<Modifiers, EventSyntaxError> {
    if mods.is_empty() {
        return Err(EventSyntaxError::EmptyModifier(text.to_string()));
    }
    let (mut user, mut kernel, mut hv, mut guest, mut host) = (false, false, false, false, false);
    for modifier in mods.chars() {
        let seen = match modifier {
            'u' => &mut user,
            'k' => &mut kernel,
            'h' => &mut hv,
            'G' => &mut guest,
            'H' => &mut host,
            _ => {
                let text = text.to_string();
                return Err(EventSyntaxError::BadModifier { text, modifier });
            }
        };
        if *seen {
            let text = text.to_string();
            return Err(EventSyntaxError::RepeatedModifier { text, modifier });
        }
        *seen = true;
    }
    let privileged = user || kernel || hv;
    Ok(Modifiers {
        exclude_user: privileged && !user,
        exclude_kernel: privileged && !kernel,
        exclude_hv: privileged && !hv,
        exclude_guest: !guest,
        exclude_host: guest && !host,
    })
}

/// Parses `pmu/term=v,.../` or `pmu/alias/`, then `u`, `:u` or nothing.
fn parse_pmu_event(text: &str) -> Result<(EventKind, Modifiers), EventSyntaxError> {
    let bad = |problem| EventSyntaxError::BadPmuEvent {
        text: text.to_string(),
        problem,
    };
    let (pmu, rest) = text
        .split_once('/')
        .ok_or_else(|| bad(PmuProblem::Unterminated))?;
    let (inner, suffix) = rest
        .split_once('/')
        .ok_or_else(|| bad(PmuProblem::Unterminated))?;
    if pmu.is_empty() {
        return Err(bad(PmuProblem::MissingPmu));
    }
    if !is_valid_name(pmu) {
        return Err(bad(PmuProblem::BadName(pmu.to_string())));
    }
    if suffix.contains('/') {
        return Err(bad(PmuProblem::ExtraSlash));
    }
    if inner.is_empty() {
        return Err(bad(PmuProblem::NoTerms));
    }
    let mut terms = Vec::new();
    for term in inner.split(',') {
        let (name, value) = match term.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (term, None),
        };
        if term.is_empty() {
            return Err(bad(PmuProblem::EmptyTerm));
        }
        if !is_valid_name(name) {
            return Err(bad(PmuProblem::BadName(name.to_string())));
        }
        let value = match value {
            Some(v) => Some(parse_number(v).ok_or_else(|| {
                bad(PmuProblem::BadValue {
                    term: name.to_string(),
                    value: v.to_string(),
                })
            })?),
            None => None,
        };
        terms.push((name.to_string(), value));
    }
    let spec = match terms.as_slice() {
        [(name, None)] => PmuSpec::Alias(name.clone()),
        _ => PmuSpec::Terms(terms),
    };
    let modifiers = match suffix.strip_prefix(':') {
        Some(mods) => parse_modifiers(text, mods)?,
        None if suffix.is_empty() => Modifiers::default(),
        None => parse_modifiers(text, suffix)?,
    };
    let pmu = pmu.to_string();
    Ok((EventKind::Pmu { pmu, spec }, modifiers))
}

/// Whether `name` may be a sysfs PMU, term or alias name: `[A-Za-z0-9_.-]+`,
/// and never `.` or `..`, so joining it to a directory stays inside it.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Parses a decimal or `0x` hex number of at most 64 bits, as perf and sysfs
/// write term values.
fn parse_number(text: &str) -> Option<u64> {
    let (digits, radix) = match text.strip_prefix("0x") {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// "; did you mean `x`?" or nothing, for error messages.
fn hint(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!("; did you mean `{s}`?"),
        None => String::new(),
    }
}

/// A short comma-separated list of known names for error messages.
fn known_list(known: &[String]) -> String {
    const SHOWN: usize = 12;
    if known.is_empty() {
        return "none".to_string();
    }
    let mut list = known
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if known.len() > SHOWN {
        list.push_str(", ...");
    }
    list
}

#[cfg(test)]
pub(crate) mod tests {
    use super::hardware::*;
    use super::*;
    use proptest::prelude::*;

    /// The kind of an event that must parse.
    pub(crate) fn kind(text: &str) -> EventKind {
        match parse_event(text) {
            Ok(event) => event.kind,
            Err(e) => panic!("`{text}` should parse: {e}"),
        }
    }

    fn err(text: &str) -> EventSyntaxError {
        match parse_event(text) {
            Ok(event) => panic!("`{text}` should not parse, got {event:?}"),
            Err(e) => e,
        }
    }

    fn mods(user: bool, kernel: bool, hv: bool) -> Modifiers {
        Modifiers {
            exclude_user: !user,
            exclude_kernel: !kernel,
            exclude_hv: !hv,
            ..Modifiers::default()
        }
    }

    #[test]
    fn keeps_text_and_defaults_to_no_exclusion() {
        let event = parse_event("cycles").unwrap();
        assert_eq!(event.text, "cycles");
        assert_eq!(event.modifiers, Modifiers::default());
        assert_eq!(parse_event("cycles:u").unwrap().text, "cycles:u");
    }

    #[test]
    fn guests_are_left_out_unless_g_is_written_as_perf_does() {
        let of = |text: &str| {
            let m = parse_event(text).unwrap().modifiers;
            (m.exclude_guest, m.exclude_host)
        };
        // Host only: no modifier, a privilege level, or H.
        for text in [
            "cycles",
            "cycles:u",
            "cycles:H",
            "cycles:uH",
            "cpu/event=0x3c/k",
        ] {
            assert_eq!(of(text), (true, false), "{text}");
        }
        // Guests only, or both.
        assert_eq!(of("cycles:G"), (false, true));
        assert_eq!(of("cycles:Gu"), (false, true));
        assert_eq!(of("cycles:GH"), (false, false));
        assert_eq!(of("cpu/event=0x3c/HG"), (false, false));
        // G and H leave the privilege levels alone.
        let g = parse_event("cycles:G").unwrap().modifiers;
        assert!(!g.exclude_user && !g.exclude_kernel && !g.exclude_hv);
        let gu = parse_event("cycles:Gu").unwrap().modifiers;
        assert!(!gu.exclude_user && gu.exclude_kernel && gu.exclude_hv);
        assert!(matches!(
            err("cycles:GG"),
            EventSyntaxError::RepeatedModifier { modifier: 'G', .. }
        ));
        assert!(matches!(
            err("cycles:g"),
            EventSyntaxError::BadModifier { modifier: 'g', .. }
        ));
        // Every way of writing an event asks the kernel for the same.
        let attr = parse_event("cycles:G")
            .unwrap()
            .resolve(Path::new("/nonexistent"), &EventTables::none())
            .unwrap();
        assert!(!attr.exclude_guest && attr.exclude_host);
        assert!(EventAttr::new(PERF_TYPE_SOFTWARE, 0).exclude_guest);
    }

    #[test]
    fn modifiers_follow_perf() {
        assert_eq!(
            parse_event("cycles:u").unwrap().modifiers,
            mods(true, false, false)
        );
        assert_eq!(
            parse_event("cycles:k").unwrap().modifiers,
            mods(false, true, false)
        );
        assert_eq!(
            parse_event("cycles:h").unwrap().modifiers,
            mods(false, false, true)
        );
        assert_eq!(
            parse_event("cycles:uk").unwrap().modifiers,
            mods(true, true, false)
        );
        assert_eq!(
            parse_event("cycles:ku").unwrap().modifiers,
            mods(true, true, false)
        );
        assert_eq!(
            parse_event("cycles:ukh").unwrap().modifiers,
            Modifiers::default()
        );
        let u = parse_event("instructions:u").unwrap().modifiers;
        assert!(!u.exclude_user && u.exclude_kernel && u.exclude_hv);
        for text in ["task-clock:k", "r003c:u", "L1-dcache-load-misses:u", "cs:h"] {
            assert_ne!(
                parse_event(text).unwrap().modifiers,
                Modifiers::default(),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_modifiers() {
        assert_eq!(
            err("cycles:"),
            EventSyntaxError::EmptyModifier("cycles:".into())
        );
        assert_eq!(
            err("cycles:p"),
            EventSyntaxError::BadModifier {
                text: "cycles:p".into(),
                modifier: 'p'
            }
        );
        assert_eq!(
            err("cycles:uu"),
            EventSyntaxError::RepeatedModifier {
                text: "cycles:uu".into(),
                modifier: 'u'
            }
        );
        assert!(matches!(
            err("cycles:u:k"),
            EventSyntaxError::BadModifier { modifier: ':', .. }
        ));
        assert!(matches!(
            err("msr/tsc/x"),
            EventSyntaxError::BadModifier { modifier: 'x', .. }
        ));
        assert_eq!(
            err("msr/tsc/:"),
            EventSyntaxError::EmptyModifier("msr/tsc/:".into())
        );
        let msg = err("cycles:P").to_string();
        assert!(
            msg.contains("only u (user), k (kernel), h (hypervisor), G (KVM guests) and H (host)"),
            "{msg}"
        );
    }

    #[test]
    fn raw_events() {
        assert_eq!(kind("r0"), EventKind::Raw(0));
        assert_eq!(kind("r003c"), EventKind::Raw(0x3c));
        assert_eq!(kind("r1A2b"), EventKind::Raw(0x1a2b));
        assert_eq!(kind("rffffffffffffffff"), EventKind::Raw(u64::MAX));
        assert_eq!(
            parse_event("r01c4:k").unwrap().modifiers,
            mods(false, true, false)
        );
        for bad in [
            "r",
            "r0x3c",
            "r12g4",
            "r1ffffffffffffffff",
            "r00000000000000000",
        ] {
            let e = err(bad);
            if bad == "r" {
                assert!(
                    matches!(e, EventSyntaxError::UnknownEvent { .. }),
                    "{bad}: {e:?}"
                );
            } else {
                assert_eq!(e, EventSyntaxError::BadRaw(bad.into()));
            }
        }
        // Names starting with `r` are still names.
        assert_eq!(
            kind("ref-cycles"),
            EventKind::Hardware(PERF_COUNT_HW_REF_CPU_CYCLES)
        );
        assert!(matches!(err("rxyz"), EventSyntaxError::UnknownEvent { .. }));
        assert!(err("r0x3c").to_string().contains("e.g. `r003c`"));
    }

    #[test]
    fn pmu_events() {
        let terms = |t: &[(&str, Option<u64>)]| {
            PmuSpec::Terms(t.iter().map(|(n, v)| (n.to_string(), *v)).collect())
        };
        let pmu = |pmu: &str, spec| EventKind::Pmu {
            pmu: pmu.into(),
            spec,
        };
        assert_eq!(kind("msr/tsc/"), pmu("msr", PmuSpec::Alias("tsc".into())));
        assert_eq!(
            kind("cpu/event=0x3c,umask=0,edge/"),
            pmu(
                "cpu",
                terms(&[("event", Some(0x3c)), ("umask", Some(0)), ("edge", None)])
            )
        );
        assert_eq!(
            kind("cpu/event=60/"),
            pmu("cpu", terms(&[("event", Some(60))]))
        );
        assert_eq!(
            kind("cpu/mem-loads,ldlat=30/"),
            pmu("cpu", terms(&[("mem-loads", None), ("ldlat", Some(30))]))
        );
        assert_eq!(
            kind("uncore_imc_0/cas_count_read/"),
            pmu("uncore_imc_0", PmuSpec::Alias("cas_count_read".into()))
        );
        assert_eq!(
            kind("cpu/config=0xffffffffffffffff/"),
            pmu("cpu", terms(&[("config", Some(u64::MAX))]))
        );
        assert_eq!(
            parse_event("msr/tsc/u").unwrap().modifiers,
            mods(true, false, false)
        );
        assert_eq!(
            parse_event("msr/tsc/:k").unwrap().modifiers,
            mods(false, true, false)
        );
        assert_eq!(
            parse_event("msr/tsc/").unwrap().modifiers,
            Modifiers::default()
        );
    }

    #[test]
    fn malformed_pmu_events() {
        let problem = |text: &str| match err(text) {
            EventSyntaxError::BadPmuEvent { problem, .. } => problem,
            other => panic!("`{text}`: {other:?}"),
        };
        assert_eq!(problem("cpu/event=1"), PmuProblem::Unterminated);
        assert_eq!(problem("cpu/"), PmuProblem::Unterminated);
        assert_eq!(problem("/event=1/"), PmuProblem::MissingPmu);
        assert_eq!(problem("cpu//"), PmuProblem::NoTerms);
        assert_eq!(problem("cpu/event=1,/"), PmuProblem::EmptyTerm);
        assert_eq!(problem("cpu/,event=1/"), PmuProblem::EmptyTerm);
        assert_eq!(problem("cpu/a,,b/"), PmuProblem::EmptyTerm);
        assert_eq!(problem("c@u/event=1/"), PmuProblem::BadName("c@u".into()));
        assert_eq!(problem("../event=1/"), PmuProblem::BadName("..".into()));
        assert_eq!(problem("cpu/../"), PmuProblem::BadName("..".into()));
        assert_eq!(problem("cpu/=1/"), PmuProblem::BadName("".into()));
        assert_eq!(
            problem("cpu/ev:ent=1/"),
            PmuProblem::BadName("ev:ent".into())
        );
        for (text, value) in [
            ("cpu/event=/", ""),
            ("cpu/event=0x/", "0x"),
            ("cpu/event=12a/", "12a"),
            ("cpu/event=-1/", "-1"),
            ("cpu/event=+1/", "+1"),
            ("cpu/event=0x1g/", "0x1g"),
            ("cpu/event=1=2/", "1=2"),
            ("cpu/event=18446744073709551616/", "18446744073709551616"),
            ("cpu/event=0x10000000000000000/", "0x10000000000000000"),
        ] {
            let expected = PmuProblem::BadValue {
                term: "event".into(),
                value: value.into(),
            };
            assert_eq!(problem(text), expected, "{text}");
        }
        assert_eq!(problem("cpu/event=1/u/"), PmuProblem::ExtraSlash);
        assert_eq!(problem("cpu/event=1//"), PmuProblem::ExtraSlash);
        let msg = err("cpu//").to_string();
        assert!(
            msg.contains("invalid PMU event `cpu//`") && msg.contains("msr/tsc/"),
            "{msg}"
        );
    }

    #[test]
    fn blank_and_listed_text() {
        assert_eq!(err(""), EventSyntaxError::Empty);
        for text in [
            " cycles",
            "cycles ",
            "cycles\n",
            "cpu/event=1, umask=2/",
            "\t",
        ] {
            assert_eq!(err(text), EventSyntaxError::Whitespace(text.into()));
        }
        assert_eq!(
            err("cycles,instructions"),
            EventSyntaxError::SeveralEvents("cycles,instructions".into())
        );
        assert!(err("").to_string().contains("cgperf list"));
    }

    #[test]
    fn did_you_mean_suggestions() {
        let unknown = |text: &str| match err(text) {
            EventSyntaxError::UnknownEvent { suggestion, .. } => suggestion,
            other => panic!("`{text}`: {other:?}"),
        };
        assert_eq!(
            err("cylces").to_string(),
            "unknown event `cylces`; did you mean `cycles`? (see `cgperf list`)"
        );
        assert_eq!(unknown("Cycles").as_deref(), Some("cycles"));
        assert_eq!(unknown("instrucions:u").as_deref(), Some("instructions"));
        assert_eq!(unknown("task-clok").as_deref(), Some("task-clock"));
        assert_eq!(
            unknown("L1-dcache-load-mises").as_deref(),
            Some("L1-dcache-load-misses")
        );
        assert_eq!(
            unknown("llc-load-misses").as_deref(),
            Some("LLC-load-misses")
        );
        assert_eq!(
            unknown("context-switch").as_deref(),
            Some("context-switches")
        );
        assert_eq!(unknown("frobnicate"), None);
        assert_eq!(
            err("frobnicate").to_string(),
            "unknown event `frobnicate` (see `cgperf list`)"
        );
    }

    #[test]
    fn labels_name_one_event_one_way() {
        let label = |text: &str| parse_event(text).expect(text).label();
        assert_eq!(label("cs"), "context-switches");
        assert_eq!(label("cs:u"), "context-switches:u");
        assert_eq!(label("cpu-cycles:uk"), "cycles:uk");
        assert_eq!(label("faults"), "page-faults");
        assert_eq!(label("l1d-misses"), "L1-dcache-load-misses");
        // Raw and PMU events: as written.
        assert_eq!(label("r003c"), "r003c");
        assert_eq!(label("msr/tsc/"), "msr/tsc/");
        // What opens is what the label says.
        let machine = crate::machine::Machine {
            pmu_root: PMU_ROOT.into(),
            tracefs: Err("not needed".into()),
            probe_cgroup: "/nonexistent".into(),
            probe_cpu: 0,
            cores: Default::default(),
            tables: Default::default(),
            metrics: Default::default(),
        };
        let migrations = parse_event("migrations").expect("parses");
        let planned = crate::plan::resolve_event(&migrations, &machine).expect("resolves");
        assert_eq!(&*planned.label, "cpu-migrations");
    }

    #[test]
    fn perfs_metric_event_syntax_is_the_pmu_event_it_writes() {
        assert_eq!(
            from_metric_name("cpu@INST_RETIRED.ANY,cmask=1,edge@k"),
            "cpu/INST_RETIRED.ANY,cmask=1,edge/k"
        );
        assert_eq!(from_metric_name("msr@tsc@"), "msr/tsc/");
        assert_eq!(from_metric_name("INST_RETIRED.ANY"), "INST_RETIRED.ANY");
        assert_eq!(from_metric_name("@x@"), "@x@");
        assert_eq!(from_metric_name("a b@x@"), "a b@x@");
        assert_eq!(from_metric_name("cpu@x"), "cpu@x");
    }

    #[test]
    fn tracepoints_are_not_counter_events() {
        for text in ["sched:sched_switch", "raw_syscalls:sys_enter", "sched:*"] {
            assert_eq!(
                err(text),
                EventSyntaxError::LooksLikeTracepoint(text.into())
            );
        }
        assert!(err("sched:sched_switch").to_string().contains("tracepoint"));
        // A typo with modifiers stays a typo.
        assert!(matches!(
            err("cylces:u"),
            EventSyntaxError::UnknownEvent { .. }
        ));
    }

    #[test]
    fn is_clock_only_for_clocks() {
        assert!(parse_event("task-clock").unwrap().is_clock());
        assert!(parse_event("cpu-clock:u").unwrap().is_clock());
        for text in ["cycles", "page-faults", "r1", "msr/tsc/", "dummy"] {
            assert!(!parse_event(text).unwrap().is_clock(), "{text}");
        }
    }

    #[test]
    fn resolves_generalized_events_without_sysfs() {
        let nowhere = Path::new("/nonexistent");
        let attr = |text: &str| {
            parse_event(text)
                .unwrap()
                .resolve(nowhere, &EventTables::none())
                .unwrap()
        };
        let expect = |type_, config, (u, k, h)| EventAttr {
            exclude_user: u,
            exclude_kernel: k,
            exclude_hv: h,
            ..EventAttr::new(type_, config)
        };
        assert_eq!(attr("cycles"), expect(0, 0, (false, false, false)));
        assert_eq!(attr("instructions:u"), expect(0, 1, (false, true, true)));
        assert_eq!(attr("task-clock"), expect(1, 1, (false, false, false)));
        assert_eq!(
            attr("cgroup-switches:k"),
            expect(1, 11, (true, false, true))
        );
        assert_eq!(
            attr("L1-dcache-load-misses"),
            expect(3, 0x10000, (false, false, false))
        );
        assert_eq!(
            attr("LLC-store-misses"),
            expect(3, 0x10102, (false, false, false))
        );
        assert_eq!(
            attr("dTLB-prefetches"),
            expect(3, 0x0203, (false, false, false))
        );
        assert_eq!(attr("node-loads"), expect(3, 0x0006, (false, false, false)));
        assert_eq!(attr("r01c4:uk"), expect(4, 0x1c4, (false, false, true)));
    }

    #[test]
    fn number_and_name_helpers() {
        assert_eq!(parse_number("0"), Some(0));
        assert_eq!(parse_number("0x0"), Some(0));
        assert_eq!(parse_number("0xFf"), Some(255));
        assert_eq!(parse_number("18446744073709551615"), Some(u64::MAX));
        for bad in ["", "0x", "x1", "0X1", "1.0", "+1", "-1", " 1"] {
            assert_eq!(parse_number(bad), None, "{bad}");
        }
        assert!(
            is_valid_name("uncore_cha_0") && is_valid_name("mem-loads.x") && is_valid_name("..a")
        );
        for bad in ["", ".", "..", "a/b", "a b", "é"] {
            assert!(!is_valid_name(bad), "{bad}");
        }
        assert_eq!(known_list(&[]), "none");
        let many: Vec<String> = (0..20).map(|i| format!("e{i}")).collect();
        assert!(known_list(&many).ends_with("e11, ..."));
    }

    /// The machine's own sysfs: `msr/tsc/` and the `software` PMU.
    #[test]
    fn resolves_against_real_sysfs() {
        let root = Path::new(PMU_ROOT);
        let read_type = |pmu: &str| -> Option<u32> {
            std::fs::read_to_string(root.join(pmu).join("type"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let software = read_type("software")
            .expect("every Linux kernel with perf events has the software PMU");
        assert_eq!(software, PERF_TYPE_SOFTWARE);
        let attr = parse_event("software/config=1/")
            .unwrap()
            .resolve(root, &EventTables::none())
            .unwrap();
        assert_eq!((attr.type_, attr.config), (PERF_TYPE_SOFTWARE, 1));
        let e = parse_event("nosuchpmu/x/")
            .unwrap()
            .resolve(root, &EventTables::none())
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no PMU `nosuchpmu` on this machine (none in /sys"),
            "{e}"
        );

        let msr = read_type("msr")
            .expect("the machines cgperf is built on have the msr PMU (x86); this test needs it");
        let attr = parse_event("msr/tsc/u")
            .unwrap()
            .resolve(root, &EventTables::none())
            .unwrap();
        assert_eq!(attr.type_, msr);
        assert_eq!(
            attr.config, 0,
            "events/tsc is event=0x00 and format/event is config:0-63"
        );
        assert!(attr.exclude_kernel && attr.exclude_hv && !attr.exclude_user);
        // msr is no core PMU: the kernel would refuse exclude_guest.
        assert!(!attr.exclude_guest && !attr.exclude_host);
        let e = parse_event("msr/tscx/")
            .unwrap()
            .resolve(root, &EventTables::none())
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("PMU `msr` has no event `tscx`; did you mean `tsc`?"),
            "{msg}"
        );
        assert!(msg.contains("tsc"), "{msg}");
    }

    proptest! {
        #[test]
        fn parse_event_never_panics(text in "\\PC{0,40}") {
            let _ = parse_event(&text);
        }

        #[test]
        fn parse_event_never_panics_on_event_like_text(text in "[a-zA-Z0-9/:=,._*-]{0,40}") {
            if let Ok(event) = parse_event(&text) {
                prop_assert_eq!(event.text, text);
            }
        }

        #[test]
        fn every_raw_value_round_trips(value: u64, width in 1usize..=16) {
            let text = format!("r{value:0width$x}");
            prop_assert_eq!(kind(&text), EventKind::Raw(value));
        }
    }
}
