//! Dynamic probes counted through the kernel's `uprobe` and `kprobe` PMUs:
//! `BINARY:SYMBOL[+OFFSET]`, `BINARY:0xOFFSET` (user space) and
//! `FUNCTION[+OFFSET]`, `0xADDRESS` (kernel), each optionally followed by
//! perf's `%return` to count returns instead of entries.
//!
//! These PMUs create the probe when the event is opened and remove it when
//! the last descriptor closes, so cgperf never writes `uprobe_events` or
//! `kprobe_events` in tracefs and leaves nothing behind if it dies.
//!
//! Parsing ([`ProbeSpec::parse_uprobe`], [`ProbeSpec::parse_kprobe`]) is pure
//! syntax, so a config can be checked on any machine. [`ProbeSpec::resolve`]
//! reads this machine's PMU descriptions and ELF files: the uprobe PMU wants
//! the probe's offset in the file, not a symbol, so cgperf looks the symbol
//! up itself, in the file it then holds for the kernel ([`HeldBinary`]).

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolFlags, SymbolKind};

use crate::events::{EventAttr, EventTables, Modifiers, PmuSpec, ResolveError, parse_number, pmu};
use crate::kallsyms::{self, KALLSYMS};
use crate::suggest::edit_distance;

/// perf's suffix for a probe on the function's return instead of its entry.
const RETURN_SUFFIX: &str = "%return";

/// The example every uprobe syntax error shows.
const UPROBE_EXAMPLE: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6:malloc";

/// How many close names an unknown symbol's error suggests.
const SUGGESTIONS: usize = 3;

/// Which kernel PMU counts a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// A user-space probe: an instruction in an executable or shared library.
    Uprobe,
    /// A kernel probe: an instruction in the running kernel.
    Kprobe,
}

impl ProbeKind {
    /// The PMU's directory name under the PMU root.
    fn pmu(self) -> &'static str {
        match self {
            Self::Uprobe => "uprobe",
            Self::Kprobe => "kprobe",
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.pmu())
    }
}

/// A probe resolved on this machine: what to pass to the kernel, and what
/// must stay alive for as long as it may be opened.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedProbe {
    /// The event; a uprobe's `config1` points into `binary`.
    pub attr: EventAttr,
    /// A uprobe's binary, which its `attr` names; `None` for a kprobe.
    pub binary: Option<Arc<HeldBinary>>,
}

/// A uprobe's binary, held open with `O_PATH` for as long as a plan (or an
/// open group) names it, and shared by every probe on the same file.
///
/// The uprobe PMU takes a path, which the kernel looks up at every
/// `perf_event_open`: when a new cgroup appears or a CPU comes back
/// online, on the sampling thread. cgperf gives it `/proc/self/fd/N` of
/// this descriptor rather than the path the user wrote: that link leads to
/// the held file without a lookup on its file system, so a hung network or
/// FUSE mount cannot stall the sampler, and every probe lands on the very
/// file whose symbols were resolved, even after the path was replaced by
/// another binary (an upgrade by rename), where the old offsets would be
/// wrong. A reload resolves the path again, and so moves to the new file.
pub struct HeldBinary {
    /// Kept open, never read: the kernel reaches the file through `link`.
    _fd: OwnedFd,
    /// `/proc/self/fd/N`, what `config1` points to.
    link: CString,
    /// Device and inode: unique while the file is held.
    id: (u64, u64),
}

impl HeldBinary {
    /// Holds the regular file at `binary`, or shares the descriptor of a
    /// live hold on the same file, so that probes on one binary share one
    /// descriptor and one `config1`, across reloads too (an unchanged probe
    /// then compares equal and stays open).
    fn hold(binary: &Path) -> std::io::Result<Arc<Self>> {
        static HELD: Mutex<Vec<Weak<HeldBinary>>> = Mutex::new(Vec::new());
        let (fd, meta) = crate::userfile::hold(binary)?;
        let id = (meta.dev(), meta.ino());
        // A panic elsewhere cannot leave the list half-updated.
        let mut held = HELD.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|h| h.strong_count() > 0);
        if let Some(same) = held.iter().filter_map(Weak::upgrade).find(|h| h.id == id) {
            return Ok(same);
        }
        let link = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let new = Arc::new(Self { _fd: fd, link, id });
        held.push(Arc::downgrade(&new));
        Ok(new)
    }

    /// The path that reaches the held file: `/proc/self/fd/N`.
    pub fn link(&self) -> &Path {
        as_path(&self.link)
    }

    /// `config1` for the uprobe PMU: the address of [`HeldBinary::link`],
    /// valid while `self` lives.
    fn pointer(&self) -> u64 {
        self.link.as_ptr() as u64
    }
}

impl PartialEq for HeldBinary {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl fmt::Debug for HeldBinary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldBinary")
            .field("link", &self.link)
            .field("id", &self.id)
            .finish()
    }
}

/// A probe as written in the config, checked for syntax but not yet
/// resolved against this machine.
///
/// Its fields are private so that every value has been through a parser:
/// paths are absolute and no string holds a NUL, which is what the kernel
/// needs from the strings it is handed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProbeSpec {
    text: String,
    location: Location,
    retprobe: bool,
}

/// Where a probe goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Location {
    /// `BINARY:SYMBOL+OFFSET`: `offset` bytes into a function of the binary.
    UserSymbol {
        binary: CString,
        symbol: String,
        offset: u64,
    },
    /// `BINARY:0xOFFSET`: an offset in the file, given to the kernel as is.
    UserOffset { binary: CString, offset: u64 },
    /// `FUNCTION+OFFSET`: `offset` bytes into a kernel function.
    KernelFunction { function: CString, offset: u64 },
    /// `0xADDRESS`: a kernel address.
    KernelAddress(u64),
}

/// Why a probe is not valid syntax.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{kind} `{text}`: {problem}")]
pub struct ProbeSyntaxError {
    /// Which kind of probe was being parsed.
    pub kind: ProbeKind,
    /// The probe as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: ProbeProblem,
}

/// What is wrong with a probe's text; the message says how to fix it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ProbeProblem {
    /// No `:SYMBOL` or `:0xOFFSET` after a uprobe's binary.
    ///
    /// The text after the last `:` is always taken as the symbol or offset
    /// (ELF symbol names never contain `:`; C++ names are stored mangled), so
    /// a binary whose path contains `:` works as long as a symbol or offset
    /// follows it. A tail containing `/` shows the colon belonged to the path.
    #[error(
        "missing `:SYMBOL` or `:0xOFFSET` after the binary, e.g. {UPROBE_EXAMPLE}; the text after the last `:` is always the symbol or offset, so a path containing `:` still needs one"
    )]
    MissingLocation,
    /// A uprobe binary given as a relative path or a bare file name.
    #[error("the binary must be an absolute path, e.g. {UPROBE_EXAMPLE}")]
    RelativeBinary,
    /// A NUL byte, which the kernel would take as the end of the string.
    #[error("contains a NUL byte, which no path or symbol has; remove it")]
    NulByte,
    /// Nothing where a kernel function or address should be.
    #[error("no kernel function given; write FUNCTION[+OFFSET] or 0xADDRESS, e.g. do_sys_openat2")]
    MissingFunction,
    /// A symbol with characters symbol tables do not have.
    #[error(
        "`{0}` is not a symbol name; write it as the symbol table has it (letters, digits, `_`, `.`, `$`, `@`; C++ names mangled), optionally followed by +OFFSET"
    )]
    BadSymbol(String),
    /// An offset or address that is not a number.
    #[error(
        "`{0}` is not an offset or address; write decimal (e.g. 16) or hex (e.g. 0x10), at most 64 bits"
    )]
    BadOffset(String),
    /// `%return` together with `+OFFSET`.
    #[error(
        "a return probe (`%return`) fires when the function returns, so it takes no +OFFSET; remove one of them"
    )]
    ReturnWithOffset,
}

/// Why a probe cannot be counted on this machine.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The PMU root has no `uprobe` directory.
    #[error(
        "this kernel has no uprobe PMU (built without CONFIG_UPROBE_EVENTS): uprobe `{text}` cannot be counted; tracepoints still work"
    )]
    NoUprobePmu {
        /// The probe as written.
        text: String,
    },
    /// The PMU root has no `kprobe` directory.
    #[error(
        "this kernel has no kprobe PMU (built without CONFIG_KPROBE_EVENTS): kprobe `{text}` cannot be counted; uprobes and tracepoints still work"
    )]
    NoKprobePmu {
        /// The probe as written.
        text: String,
    },
    /// The PMU's `type` or `format/retprobe` file is missing or unreadable.
    #[error("{kind} `{text}`: {source}")]
    Pmu {
        /// Which PMU.
        kind: ProbeKind,
        /// The probe as written.
        text: String,
        /// What was wrong with its sysfs files (boxed: it is large and rare).
        source: Box<ResolveError>,
    },
    /// The binary cannot be opened.
    #[error(
        "uprobe `{text}`: cannot open {}: {source}; give the absolute path of an existing executable or shared library",
        .binary.display()
    )]
    Unreadable {
        /// The probe as written.
        text: String,
        /// The binary.
        binary: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The binary is not an ELF file.
    #[error(
        "uprobe `{text}`: {} is not an ELF executable or shared library ({reason})",
        .binary.display()
    )]
    NotElf {
        /// The probe as written.
        text: String,
        /// The binary.
        binary: PathBuf,
        /// What the ELF parser said.
        reason: object::Error,
    },
    /// Neither `.symtab` nor `.dynsym` defines any function.
    #[error(
        "uprobe `{text}`: {binary} has no symbol table; give a file offset instead: {binary}:0xOFFSET",
        binary = .binary.display()
    )]
    NoSymbolTable {
        /// The probe as written.
        text: String,
        /// The binary.
        binary: PathBuf,
    },
    /// No defined function of that name.
    #[error(
        "uprobe `{text}`: no function `{symbol}` in {}{}",
        .binary.display(),
        did_you_mean_any(.suggestions)
    )]
    NoSuchFunction {
        /// The probe as written.
        text: String,
        /// The binary.
        binary: PathBuf,
        /// The symbol as written.
        symbol: String,
        /// Up to three close names the binary does define.
        suggestions: Vec<String>,
    },
    /// The symbol is a GNU indirect function: its address is the resolver
    /// that picks an implementation when the binary is loaded, which runs
    /// once, not the code that callers run.
    #[error(
        "uprobe `{text}`: `{symbol}` in {} is an indirect function (IFUNC): its address is the resolver that picks an implementation at load time, not the code that runs; probe the implementation instead{}",
        .binary.display(),
        did_you_mean_any(.suggestions)
    )]
    IndirectFunction {
        /// The probe as written.
        text: String,
        /// The binary.
        binary: PathBuf,
        /// The symbol as written.
        symbol: String,
        /// Up to three names containing the symbol's, often its implementations.
        suggestions: Vec<String>,
    },
    /// `+OFFSET` at or past the end of the function.
    #[error("uprobe `{text}`: +{offset:#x} is past the end of `{symbol}` ({size} bytes)")]
    PastEnd {
        /// The probe as written.
        text: String,
        /// The symbol.
        symbol: String,
        /// The offset into it.
        offset: u64,
        /// The symbol's size in the symbol table.
        size: u64,
    },
    /// The probe's address is in no `PT_LOAD` segment, so it has no place in
    /// the file (e.g. an object file that was never linked).
    #[error(
        "uprobe `{text}`: `{symbol}` (address {address:#x}) lies in no loadable segment of {binary}; give a file offset instead: {binary}:0xOFFSET",
        binary = .binary.display()
    )]
    NotLoaded {
        /// The probe as written.
        text: String,
        /// The binary.
        binary: PathBuf,
        /// The symbol.
        symbol: String,
        /// Its address plus the offset.
        address: u64,
    },
    /// `/proc/kallsyms` lists no kernel function of that name.
    #[error(
        "kprobe `{text}`: the kernel has no function `{function}` (none in {KALLSYMS}){}",
        did_you_mean_any(.suggestions)
    )]
    NoSuchKernelFunction {
        /// The probe as written.
        text: String,
        /// The function as written.
        function: String,
        /// Up to three close kernel function names.
        suggestions: Vec<String>,
    },
}

impl ProbeSpec {
    /// Parses `BINARY:SYMBOL`, `BINARY:SYMBOL+OFFSET` or `BINARY:OFFSET`
    /// (offsets decimal or `0x` hex), optionally followed by `%return`.
    ///
    /// BINARY must be absolute, because the daemon's working directory says
    /// nothing about where the user's programs are. The split is on the last
    /// `:`, so a path containing `:` works when a symbol or offset follows
    /// (`/opt/a:b/app:main`). A text after the colon that starts with a digit
    /// is a file offset and goes to the kernel unchanged. Pure syntax: no
    /// file is read.
    pub fn parse_uprobe(text: &str) -> Result<Self, ProbeSyntaxError> {
        let bad = |problem| syntax_error(ProbeKind::Uprobe, text, problem);
        let (body, retprobe) = strip_return(text);
        let Some((path, tail)) = body.rsplit_once(':') else {
            return Err(bad(ProbeProblem::MissingLocation));
        };
        if !path.starts_with('/') {
            return Err(bad(ProbeProblem::RelativeBinary));
        }
        if tail.is_empty() || tail.contains('/') {
            return Err(bad(ProbeProblem::MissingLocation));
        }
        let binary = CString::new(path).map_err(|_| bad(ProbeProblem::NulByte))?;
        let location = match parse_place(tail).map_err(bad)? {
            Place::Number(offset) => Location::UserOffset { binary, offset },
            Place::Symbol(symbol, offset) => Location::UserSymbol {
                binary,
                symbol: symbol.to_string(),
                offset,
            },
        };
        Self::new(ProbeKind::Uprobe, text, location, retprobe)
    }

    /// Parses `FUNCTION`, `FUNCTION+OFFSET` or `0xADDRESS` (a kernel
    /// address), optionally followed by `%return`. Pure syntax: whether the
    /// function exists is checked by [`ProbeSpec::resolve`].
    pub fn parse_kprobe(text: &str) -> Result<Self, ProbeSyntaxError> {
        let bad = |problem| syntax_error(ProbeKind::Kprobe, text, problem);
        let (body, retprobe) = strip_return(text);
        if body.is_empty() {
            return Err(bad(ProbeProblem::MissingFunction));
        }
        let location = match parse_place(body).map_err(bad)? {
            Place::Number(address) => Location::KernelAddress(address),
            Place::Symbol(function, offset) => Location::KernelFunction {
                function: CString::new(function).map_err(|_| bad(ProbeProblem::NulByte))?,
                offset,
            },
        };
        Self::new(ProbeKind::Kprobe, text, location, retprobe)
    }

    /// Builds a parsed probe, rejecting `%return` with a non-zero `+OFFSET`
    /// (the kernel only places return probes on a function's entry).
    fn new(
        kind: ProbeKind,
        text: &str,
        location: Location,
        retprobe: bool,
    ) -> Result<Self, ProbeSyntaxError> {
        let offset_into_function = match &location {
            Location::UserSymbol { offset, .. } | Location::KernelFunction { offset, .. } => {
                *offset
            }
            Location::UserOffset { .. } | Location::KernelAddress(_) => 0,
        };
        if retprobe && offset_into_function != 0 {
            return Err(syntax_error(kind, text, ProbeProblem::ReturnWithOffset));
        }
        Ok(Self {
            text: text.to_string(),
            location,
            retprobe,
        })
    }

    /// The probe exactly as written, for labels and messages.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Which PMU counts this probe.
    pub fn kind(&self) -> ProbeKind {
        match self.location {
            Location::UserSymbol { .. } | Location::UserOffset { .. } => ProbeKind::Uprobe,
            Location::KernelFunction { .. } | Location::KernelAddress(_) => ProbeKind::Kprobe,
        }
    }

    /// A uprobe's binary as written; `None` for a kprobe.
    pub fn binary(&self) -> Option<&Path> {
        match &self.location {
            Location::UserSymbol { binary, .. } | Location::UserOffset { binary, .. } => {
                Some(as_path(binary))
            }
            Location::KernelFunction { .. } | Location::KernelAddress(_) => None,
        }
    }

    /// Whether the probe counts returns (`%return`) rather than entries.
    pub fn is_return(&self) -> bool {
        self.retprobe
    }

    /// Turns the probe into `perf_event_attr` fields for this machine:
    /// `type` from `<pmu_root>/<uprobe|kprobe>/type`, the `%return` bit where
    /// `format/retprobe` puts it, a pointer to the path or function name in
    /// `config1` (`uprobe_path`, `kprobe_func`) and the offset or address in
    /// `config2` (`probe_offset`, `kprobe_addr`).
    ///
    /// A uprobe's symbol is looked up in `.symtab`, then `.dynsym` (defined
    /// functions only) and its address translated through the `PT_LOAD`
    /// segment holding it into a file offset, which is what the uprobe PMU
    /// takes; this is right for executables (PIE or not) and shared libraries
    /// alike. A kprobe's function is checked against `/proc/kallsyms` when
    /// that file can be read; otherwise the kernel judges it at open.
    ///
    /// A uprobe's binary is held ([`HeldBinary`]), and its symbols are read
    /// from the held file: `config1` names that file, not the path.
    pub fn resolve(&self, pmu_root: &Path) -> Result<ResolvedProbe, ProbeError> {
        let (type_, config) = self.pmu_config(pmu_root)?;
        let (config1, config2, binary) = match &self.location {
            Location::UserSymbol {
                binary,
                symbol,
                offset,
            } => {
                let held = self.hold(as_path(binary))?;
                let file_offset = self.file_offset(&held, as_path(binary), symbol, *offset)?;
                (held.pointer(), file_offset, Some(held))
            }
            Location::UserOffset { binary, offset } => {
                let held = self.hold(as_path(binary))?;
                (held.pointer(), *offset, Some(held))
            }
            Location::KernelFunction { function, offset } => {
                self.check_kernel_function(&function.to_string_lossy())?;
                (kernel_pointer(function), *offset, None)
            }
            // With no function name the kprobe PMU reads the address from config2.
            Location::KernelAddress(address) => (0, *address, None),
        };
        let attr =
            EventAttr::with_modifiers(type_, [config, config1, config2], Modifiers::default());
        Ok(ResolvedProbe { attr, binary })
    }

    /// Holds `binary`; never blocks on a FIFO or device named as the binary.
    fn hold(&self, binary: &Path) -> Result<Arc<HeldBinary>, ProbeError> {
        HeldBinary::hold(binary).map_err(|source| ProbeError::Unreadable {
            text: self.text.clone(),
            binary: binary.to_path_buf(),
            source,
        })
    }

    /// The PMU's type and `config` with the retprobe bit set or clear, as the
    /// PMU's `format/retprobe` file (e.g. `config:0`) places it.
    fn pmu_config(&self, pmu_root: &Path) -> Result<(u32, u64), ProbeError> {
        let kind = self.kind();
        if !pmu_root.join(kind.pmu()).is_dir() {
            let text = self.text.clone();
            return Err(match kind {
                ProbeKind::Uprobe => ProbeError::NoUprobePmu { text },
                ProbeKind::Kprobe => ProbeError::NoKprobePmu { text },
            });
        }
        let spec = PmuSpec::Terms(vec![(
            "retprobe".to_string(),
            Some(u64::from(self.retprobe)),
        )]);
        let (type_, [config, _, _]) =
            pmu::resolve(pmu_root, kind.pmu(), &spec, &EventTables::none()).map_err(|source| {
                ProbeError::Pmu {
                    kind,
                    text: self.text.clone(),
                    source: Box::new(source),
                }
            })?;
        Ok((type_, config))
    }

    /// The file offset of `symbol` + `offset` in the ELF file `held`, which
    /// the user named `binary`.
    fn file_offset(
        &self,
        held: &HeldBinary,
        binary: &Path,
        symbol: &str,
        offset: u64,
    ) -> Result<u64, ProbeError> {
        let text = || self.text.clone();
        // The held file itself, whatever `binary` names by now.
        let file = crate::userfile::open(held.link(), crate::userfile::MAX_BINARY_BYTES).map_err(
            |source| ProbeError::Unreadable {
                text: text(),
                binary: binary.to_path_buf(),
                source,
            },
        )?;
        // Reads only the headers and symbol tables, not the whole binary.
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache).map_err(|reason| ProbeError::NotElf {
            text: text(),
            binary: binary.to_path_buf(),
            reason,
        })?;
        let function = match find_function(&elf, symbol) {
            Lookup::Found(function) => function,
            Lookup::Indirect(suggestions) => {
                return Err(ProbeError::IndirectFunction {
                    text: text(),
                    binary: binary.to_path_buf(),
                    symbol: symbol.to_string(),
                    suggestions,
                });
            }
            Lookup::Missing(suggestions) => {
                return Err(ProbeError::NoSuchFunction {
                    text: text(),
                    binary: binary.to_path_buf(),
                    symbol: symbol.to_string(),
                    suggestions,
                });
            }
            Lookup::NoFunctions => {
                return Err(ProbeError::NoSymbolTable {
                    text: text(),
                    binary: binary.to_path_buf(),
                });
            }
        };
        if function.size != 0 && offset >= function.size {
            return Err(ProbeError::PastEnd {
                text: text(),
                symbol: symbol.to_string(),
                offset,
                size: function.size,
            });
        }
        let address = function.address.saturating_add(offset);
        file_offset_of(&elf, address).ok_or_else(|| ProbeError::NotLoaded {
            text: text(),
            binary: binary.to_path_buf(),
            symbol: symbol.to_string(),
            address,
        })
    }

    /// Checks that `/proc/kallsyms` lists `function` as code. A kernel that
    /// hides the file (or a read that fails midway) is not an error: the
    /// kernel itself rejects an unknown function when the event is opened.
    fn check_kernel_function(&self, function: &str) -> Result<(), ProbeError> {
        let mut near = Suggestions::new(function);
        let mut found = false;
        let read = kallsyms::each_code_symbol(|name| {
            if name == function {
                found = true;
                return ControlFlow::Break(());
            }
            near.offer(name);
            ControlFlow::Continue(())
        });
        if found || read.is_err() {
            return Ok(());
        }
        Err(ProbeError::NoSuchKernelFunction {
            text: self.text.clone(),
            function: function.to_string(),
            suggestions: near.into_names(),
        })
    }
}

/// A syntax error of `kind` for `text`.
fn syntax_error(kind: ProbeKind, text: &str, problem: ProbeProblem) -> ProbeSyntaxError {
    ProbeSyntaxError {
        kind,
        text: text.to_string(),
        problem,
    }
}

/// The text without perf's `%return` suffix, and whether it had one.
fn strip_return(text: &str) -> (&str, bool) {
    match text.strip_suffix(RETURN_SUFFIX) {
        Some(body) => (body, true),
        None => (text, false),
    }
}

/// What follows a uprobe's binary, or a whole kprobe.
enum Place<'a> {
    /// A number: a file offset (uprobe) or a kernel address (kprobe).
    Number(u64),
    /// A symbol and the offset into it (0 without `+OFFSET`).
    Symbol(&'a str, u64),
}

/// Parses `SYMBOL`, `SYMBOL+OFFSET` or a number. Symbols never start with a
/// digit, so a leading digit means a number.
fn parse_place(text: &str) -> Result<Place<'_>, ProbeProblem> {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_number(text)
            .map(Place::Number)
            .ok_or_else(|| ProbeProblem::BadOffset(text.to_string()));
    }
    let (symbol, offset) = match text.rsplit_once('+') {
        Some((symbol, offset)) => {
            let value =
                parse_number(offset).ok_or_else(|| ProbeProblem::BadOffset(offset.to_string()))?;
            (symbol, value)
        }
        None => (text, 0),
    };
    if !is_symbol_name(symbol) {
        return Err(ProbeProblem::BadSymbol(symbol.to_string()));
    }
    Ok(Place::Symbol(symbol, offset))
}

/// Whether `name` can be a symbol as ELF symbol tables and kallsyms write
/// them: C identifiers plus `.` (`foo.cold`, `foo.isra.0`), `$` (Rust's
/// legacy mangling) and `@` (symbol versions), never starting with a digit.
fn is_symbol_name(name: &str) -> bool {
    !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '@'))
}

/// The path a uprobe's binary names.
fn as_path(binary: &CStr) -> &Path {
    Path::new(OsStr::from_bytes(binary.to_bytes()))
}

/// The address of a process-wide copy of `text` for the kernel to read.
///
/// The kernel copies a kprobe's function name from a user pointer in
/// `config1` during every `perf_event_open`. [`EventAttr`] is
/// `Copy` and carries that pointer as a plain u64, and cgperf reopens events
/// long after resolving them (reloads, CPUs coming back online), so the
/// string must live as long as the process. Each distinct string is leaked
/// once and reused by every later probe naming it: the memory is bounded by
/// the distinct functions ever configured, not by reloads.
fn kernel_pointer(text: &CStr) -> u64 {
    static INTERNED: Mutex<BTreeSet<&'static CStr>> = Mutex::new(BTreeSet::new());
    // A panic elsewhere cannot leave the set half-updated: insert is the only write.
    let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
    let kept = match interned.get(text) {
        Some(kept) => *kept,
        None => {
            let kept: &'static CStr = Box::leak(text.to_owned().into_boxed_c_str());
            interned.insert(kept);
            kept
        }
    };
    kept.as_ptr() as u64
}

/// A function found in a symbol table.
struct Function {
    address: u64,
    size: u64,
}

/// The outcome of looking a function up in an ELF file.
enum Lookup {
    Found(Function),
    /// Only an IFUNC of that name; names containing it are suggested.
    Indirect(Vec<String>),
    /// Not defined; close names are suggested.
    Missing(Vec<String>),
    /// No defined function at all: the binary is stripped.
    NoFunctions,
}

/// Looks `wanted` up among the defined functions of `.symtab`, then `.dynsym`.
fn find_function<'data, R: object::ReadRef<'data>>(
    elf: &object::File<'data, R>,
    wanted: &str,
) -> Lookup {
    let mut near = Suggestions::new(wanted);
    let mut any_function = false;
    let mut indirect = false;
    let functions = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined());
    for symbol in functions {
        any_function = true;
        let Ok(name) = symbol.name() else {
            continue;
        };
        if name != wanted {
            near.offer(name);
        } else if is_indirect(symbol.flags()) {
            indirect = true;
        } else {
            return Lookup::Found(Function {
                address: symbol.address(),
                size: symbol.size(),
            });
        }
    }
    match (indirect, any_function) {
        (true, _) => Lookup::Indirect(near.into_names()),
        (false, true) => Lookup::Missing(near.into_names()),
        (false, false) => Lookup::NoFunctions,
    }
}

/// Whether ELF symbol flags say `STT_GNU_IFUNC`.
fn is_indirect<S, T>(flags: SymbolFlags<S, T>) -> bool {
    matches!(flags, SymbolFlags::Elf { st_info, .. } if st_info & 0xf == object::elf::STT_GNU_IFUNC)
}

/// Translates a virtual address into a file offset through the `PT_LOAD`
/// segment whose file-backed part holds it: `address - p_vaddr + p_offset`.
fn file_offset_of<'data, R: object::ReadRef<'data>>(
    elf: &object::File<'data, R>,
    address: u64,
) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let (file_start, file_size) = segment.file_range();
        let into = address.checked_sub(segment.address())?;
        (into < file_size).then(|| file_start.saturating_add(into))
    })
}

/// Up to [`SUGGESTIONS`] names close to a wanted one, kept while streaming
/// through a symbol table so that no list of all names is built: names within
/// a small edit distance first, then names containing the wanted one.
struct Suggestions<'a> {
    wanted: &'a str,
    /// Edit distances up to this count as typos.
    limit: usize,
    /// `(score, name)`, best first.
    best: Vec<(usize, String)>,
}

impl<'a> Suggestions<'a> {
    fn new(wanted: &'a str) -> Self {
        Self {
            wanted,
            limit: (wanted.chars().count() / 3).max(1),
            best: Vec::with_capacity(SUGGESTIONS + 1),
        }
    }

    /// Considers `name`; cheap for the many names that are not close.
    fn offer(&mut self, name: &str) {
        let Some(score) = self.score(name) else {
            return;
        };
        let full = self.best.len() == SUGGESTIONS;
        let known = self.best.iter().any(|(_, n)| n == name);
        let worse = |(s, n): &(usize, String)| rank(*s, n) <= rank(score, name);
        if known || (full && self.best.last().is_some_and(worse)) {
            return;
        }
        self.best.push((score, name.to_string()));
        self.best
            .sort_by(|(s1, n1), (s2, n2)| rank(*s1, n1).cmp(&rank(*s2, n2)));
        self.best.truncate(SUGGESTIONS);
    }

    /// The edit distance if it is small, else one more than the limit if
    /// `name` contains the wanted name, else `None`.
    ///
    /// Symbol tables hold up to hundreds of thousands of names, so the
    /// distance is only computed for names of a close length (the distance is
    /// at least the difference) that begin with the same character, ignoring
    /// case: a typo in the first character goes unsuggested, and the search
    /// stays fast.
    fn score(&self, name: &str) -> Option<usize> {
        const LONGEST_COMPARED: usize = 64;
        let close_length = name.len().abs_diff(self.wanted.len()) <= self.limit;
        let same_start = match (name.bytes().next(), self.wanted.bytes().next()) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(&b),
            _ => false,
        };
        if close_length && same_start && name.len() <= LONGEST_COMPARED {
            let distance = edit_distance(self.wanted, name);
            if distance <= self.limit {
                return Some(distance);
            }
        }
        name.contains(self.wanted).then_some(self.limit + 1)
    }

    fn into_names(self) -> Vec<String> {
        self.best.into_iter().map(|(_, name)| name).collect()
    }
}

/// Orders suggestions best first: lower score, then shorter, then alphabetical.
fn rank(score: usize, name: &str) -> (usize, usize, &str) {
    (score, name.len(), name)
}

/// "; did you mean `a`, `b` or `c`?" or nothing, for error messages.
fn did_you_mean_any(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => format!("; did you mean {last}?"),
        Some((last, rest)) => format!("; did you mean {} or {last}?", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn uprobe(text: &str) -> ProbeSpec {
        ProbeSpec::parse_uprobe(text).unwrap_or_else(|e| panic!("`{text}` should parse: {e}"))
    }

    fn kprobe(text: &str) -> ProbeSpec {
        ProbeSpec::parse_kprobe(text).unwrap_or_else(|e| panic!("`{text}` should parse: {e}"))
    }

    fn user_symbol(binary: &str, symbol: &str, offset: u64) -> Location {
        Location::UserSymbol {
            binary: CString::new(binary).unwrap(),
            symbol: symbol.into(),
            offset,
        }
    }

    fn uprobe_problem(text: &str) -> ProbeProblem {
        match ProbeSpec::parse_uprobe(text) {
            Ok(spec) => panic!("`{text}` should not parse: {spec:?}"),
            Err(e) => {
                assert_eq!((e.kind, e.text.as_str()), (ProbeKind::Uprobe, text));
                e.problem
            }
        }
    }

    fn kprobe_problem(text: &str) -> ProbeProblem {
        match ProbeSpec::parse_kprobe(text) {
            Ok(spec) => panic!("`{text}` should not parse: {spec:?}"),
            Err(e) => {
                assert_eq!((e.kind, e.text.as_str()), (ProbeKind::Kprobe, text));
                e.problem
            }
        }
    }

    /// A PMU root with a `uprobe` PMU and, if asked, a `kprobe` PMU whose
    /// retprobe bit is not bit 0 (so the format file is what places it).
    fn fake_root(with_kprobe: bool) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let write = |path: &str, content: &str| {
            let path = root.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        };
        write("uprobe/type", "8\n");
        write("uprobe/format/retprobe", "config:0\n");
        if with_kprobe {
            write("kprobe/type", "7\n");
            write("kprobe/format/retprobe", "config:3\n");
        }
        root
    }

    /// The string a resolved `config1` points to.
    fn pointed_to(config1: u64) -> String {
        // SAFETY: config1 comes from kernel_pointer, which returns the address
        // of a NUL-terminated string that is never freed.
        let text = unsafe { CStr::from_ptr(config1 as *const std::ffi::c_char) };
        text.to_str().unwrap().to_string()
    }

    #[test]
    fn uprobe_syntax() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        let spec = uprobe(&format!("{libc}:malloc"));
        assert_eq!(spec.location, user_symbol(libc, "malloc", 0));
        assert_eq!(
            (spec.kind(), spec.is_return(), spec.text()),
            (ProbeKind::Uprobe, false, format!("{libc}:malloc").as_str())
        );
        assert_eq!(
            uprobe("/bin/app:main+16").location,
            user_symbol("/bin/app", "main", 16)
        );
        assert_eq!(
            uprobe("/bin/app:main+0x10").location,
            user_symbol("/bin/app", "main", 16)
        );
        assert_eq!(
            uprobe("/bin/app:_ZN3foo3barEv").location,
            user_symbol("/bin/app", "_ZN3foo3barEv", 0)
        );
        assert_eq!(
            uprobe("/bin/app:foo.cold").location,
            user_symbol("/bin/app", "foo.cold", 0)
        );
        let offset = |offset| Location::UserOffset {
            binary: CString::new("/bin/app").unwrap(),
            offset,
        };
        assert_eq!(uprobe("/bin/app:0x1130").location, offset(0x1130));
        assert_eq!(uprobe("/bin/app:4400").location, offset(4400));
        // The split is on the last colon: a path may contain colons.
        assert_eq!(
            uprobe("/opt/a:b/app:main").location,
            user_symbol("/opt/a:b/app", "main", 0)
        );
        assert_eq!(
            uprobe("/opt/my app/bin:main").location,
            user_symbol("/opt/my app/bin", "main", 0)
        );
        let ret = uprobe("/bin/app:main%return");
        assert!(ret.is_return());
        assert_eq!(ret.location, user_symbol("/bin/app", "main", 0));
        assert!(uprobe("/bin/app:0x1130%return").is_return());
        assert!(uprobe("/bin/app:main+0%return").is_return());
    }

    #[test]
    fn uprobe_syntax_errors() {
        assert_eq!(
            ProbeSpec::parse_uprobe("libc.so.6:malloc")
                .unwrap_err()
                .to_string(),
            "uprobe `libc.so.6:malloc`: the binary must be an absolute path, e.g. /usr/lib/x86_64-linux-gnu/libc.so.6:malloc"
        );
        for relative in ["./app:main", ":main", "app:0x10", "~/app:main"] {
            assert_eq!(uprobe_problem(relative), ProbeProblem::RelativeBinary);
        }
        for missing in ["", "/bin/app", "/bin/app:", "/opt/a:b/app", "%return"] {
            assert_eq!(uprobe_problem(missing), ProbeProblem::MissingLocation);
        }
        let msg = ProbeSpec::parse_uprobe("/opt/a:b/app")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("a path containing `:` still needs one"),
            "{msg}"
        );
        for (text, symbol) in [
            ("/bin/app:ma in", "ma in"),
            ("/bin/app:+0x10", ""),
            ("/bin/app:ma-in", "ma-in"),
            ("/bin/app:main%ret", "main%ret"),
        ] {
            assert_eq!(
                uprobe_problem(text),
                ProbeProblem::BadSymbol(symbol.into()),
                "{text}"
            );
        }
        for (text, offset) in [
            ("/bin/app:main+", ""),
            ("/bin/app:0x", "0x"),
            ("/bin/app:12ab", "12ab"),
            ("/bin/app:main+0x1g", "0x1g"),
            ("/bin/app:main+-1", "-1"),
            ("/bin/app:main+18446744073709551616", "18446744073709551616"),
        ] {
            assert_eq!(
                uprobe_problem(text),
                ProbeProblem::BadOffset(offset.into()),
                "{text}"
            );
        }
        assert_eq!(
            uprobe_problem("/bin/app:main+4%return"),
            ProbeProblem::ReturnWithOffset
        );
        assert_eq!(uprobe_problem("/bin/a\0pp:main"), ProbeProblem::NulByte);
        assert_eq!(
            uprobe_problem("/bin/app:ma\0in"),
            ProbeProblem::BadSymbol("ma\0in".into())
        );
    }

    #[test]
    fn kprobe_syntax() {
        let function = |name: &str, offset| Location::KernelFunction {
            function: CString::new(name).unwrap(),
            offset,
        };
        let spec = kprobe("do_sys_openat2");
        assert_eq!(spec.location, function("do_sys_openat2", 0));
        assert_eq!((spec.kind(), spec.is_return()), (ProbeKind::Kprobe, false));
        assert_eq!(kprobe("vfs_read+0x1c").location, function("vfs_read", 0x1c));
        assert_eq!(kprobe("vfs_read+28").location, function("vfs_read", 28));
        assert_eq!(kprobe("foo.isra.0").location, function("foo.isra.0", 0));
        assert_eq!(
            kprobe("0xffffffff81000000").location,
            Location::KernelAddress(0xffff_ffff_8100_0000)
        );
        let ret = kprobe("do_sys_openat2%return");
        assert!(ret.is_return());
        assert_eq!(ret.location, function("do_sys_openat2", 0));
    }

    #[test]
    fn kprobe_syntax_errors() {
        assert_eq!(kprobe_problem(""), ProbeProblem::MissingFunction);
        assert_eq!(kprobe_problem("%return"), ProbeProblem::MissingFunction);
        assert_eq!(
            kprobe_problem("ext4:ext4_file_open"),
            ProbeProblem::BadSymbol("ext4:ext4_file_open".into())
        );
        assert_eq!(
            kprobe_problem("/bin/app:main"),
            ProbeProblem::BadSymbol("/bin/app:main".into())
        );
        assert_eq!(
            kprobe_problem("0xfffffffg"),
            ProbeProblem::BadOffset("0xfffffffg".into())
        );
        assert_eq!(
            kprobe_problem("vfs_read+x"),
            ProbeProblem::BadOffset("x".into())
        );
        assert_eq!(
            kprobe_problem("vfs_read+1%return"),
            ProbeProblem::ReturnWithOffset
        );
        assert_eq!(
            ProbeSpec::parse_kprobe("").unwrap_err().to_string(),
            "kprobe ``: no kernel function given; write FUNCTION[+OFFSET] or 0xADDRESS, e.g. do_sys_openat2"
        );
    }

    #[test]
    fn missing_pmus_are_named() {
        let root = tempfile::tempdir().unwrap();
        let e = uprobe("/bin/app:main").resolve(root.path()).unwrap_err();
        assert!(matches!(e, ProbeError::NoUprobePmu { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "this kernel has no uprobe PMU (built without CONFIG_UPROBE_EVENTS): uprobe `/bin/app:main` cannot be counted; tracepoints still work"
        );
        let root = fake_root(false);
        let e = kprobe("do_sys_openat2").resolve(root.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "this kernel has no kprobe PMU (built without CONFIG_KPROBE_EVENTS): kprobe `do_sys_openat2` cannot be counted; uprobes and tracepoints still work"
        );
    }

    #[test]
    fn broken_pmu_files_are_reported() {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("uprobe/format")).unwrap();
        fs::write(root.path().join("uprobe/type"), "8\n").unwrap();
        let e = uprobe("/bin/app:0x10").resolve(root.path()).unwrap_err();
        let ProbeError::Pmu {
            kind: ProbeKind::Uprobe,
            source,
            ..
        } = &e
        else {
            panic!("{e:?}");
        };
        assert!(
            matches!(&**source, ResolveError::NoTerm { term, .. } if term == "retprobe"),
            "{source:?}"
        );
        assert!(
            e.to_string()
                .starts_with("uprobe `/bin/app:0x10`: PMU `uprobe` has no format term `retprobe`"),
            "{e}"
        );
    }

    /// A file `app` holding `content` in a new temporary directory.
    fn temp_file(content: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app");
        fs::write(&app, content).unwrap();
        (dir, app)
    }

    /// A file offset needs no symbol table: it goes to the kernel as
    /// written, with the path of the held binary, which is the file named.
    #[test]
    fn file_offsets_resolve_without_reading_the_binary() {
        let root = fake_root(false);
        let (_dir, app) = temp_file(b"not even ELF");
        let text = format!("{}:0x1130", app.display());
        let resolved = uprobe(&text).resolve(root.path()).unwrap();
        let attr = resolved.attr;
        assert_eq!((attr.type_, attr.config, attr.config2), (8, 0, 0x1130));
        let held = resolved.binary.expect("a uprobe holds its binary");
        let link = pointed_to(attr.config1);
        assert_eq!(Path::new(&link), held.link());
        assert!(link.starts_with("/proc/self/fd/"), "{link}");
        assert_eq!(fs::read_link(&link).unwrap(), app);
        let ret = uprobe(&format!("{text}%return"))
            .resolve(root.path())
            .unwrap();
        assert_eq!(
            (ret.attr.config, ret.attr.config1, ret.attr.config2),
            (1, attr.config1, 0x1130),
            "one hold per file"
        );
        assert!(!attr.exclude_user && !attr.exclude_kernel && !attr.exclude_hv);
        // A missing binary is refused when resolved, with its path.
        let e = uprobe("/nonexistent/app:0x1130")
            .resolve(root.path())
            .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "uprobe `/nonexistent/app:0x1130`: cannot open /nonexistent/app: No such file"
            ),
            "{e}"
        );
    }

    /// The held file stays what the probe names when its path is replaced
    /// by rename; resolving again holds the new file, and the old hold
    /// closes with the last probe naming it.
    #[test]
    fn a_binary_replaced_by_rename_stays_held_until_resolved_again() {
        let root = fake_root(false);
        let (dir, app) = temp_file(b"old");
        let spec = uprobe(&format!("{}:0x10", app.display()));
        let old = spec.resolve(root.path()).unwrap();
        let old_link = old.binary.as_ref().unwrap().link().to_path_buf();
        let tmp = dir.path().join("app.new");
        fs::write(&tmp, b"new").unwrap();
        fs::rename(&tmp, &app).unwrap();
        assert_eq!(fs::read(&old_link).unwrap(), b"old");
        let deleted = app.with_file_name("app (deleted)");
        assert_eq!(fs::read_link(&old_link).unwrap(), deleted);
        let new = spec.resolve(root.path()).unwrap();
        assert_ne!(new, old, "another file, another probe");
        assert_eq!(
            fs::read(new.binary.as_ref().unwrap().link()).unwrap(),
            b"new"
        );
        drop(old);
        assert!(
            fs::read_link(&old_link).map_or(true, |l| l != deleted),
            "the old file is no longer held"
        );
    }

    /// Against the running kernel's symbols, with a fake kprobe PMU (this
    /// machine may have none): names are checked, the retprobe bit goes
    /// where the format file says.
    #[test]
    fn kprobes_resolve_through_kallsyms() {
        let root = fake_root(true);
        let attr = kprobe("do_sys_openat2").resolve(root.path()).unwrap().attr;
        assert_eq!((attr.type_, attr.config, attr.config2), (7, 0, 0));
        assert_eq!(pointed_to(attr.config1), "do_sys_openat2");
        let ret = kprobe("do_sys_openat2%return")
            .resolve(root.path())
            .unwrap()
            .attr;
        assert_eq!((ret.config, ret.config1), (1 << 3, attr.config1));
        let inside = kprobe("do_sys_openat2+4")
            .resolve(root.path())
            .unwrap()
            .attr;
        assert_eq!((inside.config1, inside.config2), (attr.config1, 4));
        let address = kprobe("0xffffffff81000000")
            .resolve(root.path())
            .unwrap()
            .attr;
        assert_eq!(
            (address.config1, address.config2),
            (0, 0xffff_ffff_8100_0000)
        );

        let e = kprobe("do_sys_opnat2").resolve(root.path()).unwrap_err();
        let ProbeError::NoSuchKernelFunction { suggestions, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(
            suggestions.first().map(String::as_str),
            Some("do_sys_openat2"),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(
                "kprobe `do_sys_opnat2`: the kernel has no function `do_sys_opnat2` (none in /proc/kallsyms); did you mean `do_sys_openat2`"
            ),
            "{e}"
        );
    }

    #[test]
    fn each_string_is_kept_once() {
        let a = kernel_pointer(c"/usr/bin/a");
        assert_eq!(kernel_pointer(c"/usr/bin/a"), a);
        assert_eq!(kernel_pointer(&CString::new("/usr/bin/a").unwrap()), a);
        let b = kernel_pointer(c"/usr/bin/b");
        assert_ne!(a, b);
        assert_eq!(
            (pointed_to(a), pointed_to(b)),
            ("/usr/bin/a".into(), "/usr/bin/b".into())
        );
    }

    #[test]
    fn suggestions_prefer_typos_then_containing_names() {
        let mut near = Suggestions::new("malloc");
        for name in [
            "free",
            "calloc",
            "__libc_malloc",
            "mallocx",
            "malloc_trim",
            "realloc",
            "mall0c",
            "xmalloc_usable_size",
        ] {
            near.offer(name);
        }
        assert_eq!(near.into_names(), ["mall0c", "mallocx", "malloc_trim"]);
        let mut near = Suggestions::new("strlen");
        for name in ["__strlen_evex", "__strlen_avx2", "__strlen_avx2", "puts"] {
            near.offer(name);
        }
        assert_eq!(near.into_names(), ["__strlen_avx2", "__strlen_evex"]);
        assert_eq!(did_you_mean_any(&[]), "");
        assert_eq!(did_you_mean_any(&["a".into()]), "; did you mean `a`?");
        assert_eq!(
            did_you_mean_any(&["a".into(), "b".into(), "c".into()]),
            "; did you mean `a`, `b` or `c`?"
        );
    }
}
