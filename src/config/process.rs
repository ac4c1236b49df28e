//! Validation of `processes:`: processes selected by name, executable,
//! command line or pid, each counted with the groups, tracepoints and
//! probes of the top level it names, like a `cgroups:` entry.
//!
//! ```yaml
//! processes:
//!   - name: postgres              # the `process` label
//!     comm: postgres              # or exe: /usr/lib/postgresql/*/bin/postgres,
//!                                 #    cmdline: "*--config=/etc/app.conf*", pid: 1234
//!     groups: [sched]             # default: all groups
//!     tracepoints: []             # default: all counted (not `by:`) tracepoints
//!     labels: [comm]              # also split by comm; `pid` per process
//! max_processes: 1000             # processes counted at once, 1 ..= 1_000_000
//! ```

use globset::{GlobBuilder, GlobMatcher};
use serde_saphyr::{Location, Spanned};

use super::error::quote;
use super::schema::{RawProcess, Text};
use super::selector::Kind;
use super::validate::Validator;
use super::written::Written;
use super::{ConfigError, Origin, TracepointDef};

/// `max_processes` when the file does not set it.
pub const DEFAULT_MAX_PROCESSES: usize = 1000;

/// Largest `max_processes`.
pub const MAX_PROCESSES_LIMIT: usize = 1_000_000;

/// The kernel keeps this many bytes of a task's name (`comm`).
pub const COMM_LEN: usize = 15;

/// How a `processes:` entry picks processes.
#[derive(Debug, Clone)]
pub enum ProcessMatch {
    /// The task name the kernel keeps (`/proc/PID/comm`, 15 bytes),
    /// as a glob.
    Comm(Pattern),
    /// The path of the executable (`/proc/PID/exe`), as a glob.
    Exe(Pattern),
    /// The command line, arguments joined by one space, as a glob.
    Cmdline(Pattern),
    /// One process.
    Pid(u32),
}

/// A glob and its text.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// As written.
    pub text: String,
    /// Compiled: `*` matches any characters, `/` included.
    pub matcher: GlobMatcher,
}

impl PartialEq for ProcessMatch {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Comm(a), Self::Comm(b))
            | (Self::Exe(a), Self::Exe(b))
            | (Self::Cmdline(a), Self::Cmdline(b)) => a.text == b.text,
            (Self::Pid(a), Self::Pid(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for ProcessMatch {}

/// A label a `processes:` entry may split its series by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProcessLabel {
    /// The task name (`comm`).
    Comm,
    /// The process id: one series per process, capped by
    /// `max_processes`.
    Pid,
}

impl ProcessLabel {
    /// As written, and the label's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Comm => "comm",
            Self::Pid => "pid",
        }
    }
}

/// One `processes:` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSelector {
    /// The `process` label; unique among the entries.
    pub name: String,
    /// Which processes.
    pub matches: ProcessMatch,
    /// Names of the groups to count, in the order of the top level's.
    pub groups: Vec<String>,
    /// Labels of the (counted, not `by:`) tracepoints to count.
    pub tracepoints: Vec<String>,
    /// Labels of the probes to count.
    pub probes: Vec<String>,
    /// Names of the metrics to compute, each over what the entry counts.
    pub metrics: Vec<String>,
    /// Labels its series are also split by, in [`ProcessLabel`] order.
    pub labels: Vec<ProcessLabel>,
    /// Where the entry was written.
    pub origin: Origin,
}

impl Validator<'_> {
    /// The `processes:` list, each entry with where it wrote `metrics:`
    /// (see [`Validator::selector_metrics`]); a broken entry is reported
    /// and left out.
    pub(super) fn processes(
        &self,
        list: Vec<Spanned<RawProcess>>,
        written: &Written,
        tracepoints: &[TracepointDef],
    ) -> Vec<(ProcessSelector, Option<Location>)> {
        let mut out: Vec<(ProcessSelector, Option<Location>)> = Vec::with_capacity(list.len());
        for (index, raw) in list.into_iter().enumerate() {
            let here = format!("`processes[{index}]`");
            let metrics_at = raw.value.metrics.as_ref().map(|m| m.referenced);
            if let Some(selector) = self.keep(self.process(&here, raw, written, tracepoints)) {
                if let Some((twin, _)) = out.iter().find(|(s, _)| s.name == selector.name) {
                    self.keep::<()>(Err(selector
                        .origin
                        .error(format!(
                            "{here} has the name `{}` of an entry before it (line {})",
                            selector.name, twin.origin.line
                        ))
                        .hint("each entry's `name` is its `process` label: make it unique")));
                    continue;
                }
                out.push((selector, metrics_at));
            }
        }
        out
    }

    fn process(
        &self,
        here: &str,
        raw: Spanned<RawProcess>,
        written: &Written,
        tracepoints: &[TracepointDef],
    ) -> Result<ProcessSelector, ConfigError> {
        let at = raw.referenced;
        let raw = raw.value;
        let Some(name) = &raw.name else {
            return Err(self
                .error(at, format!("{here} has no `name`"))
                .hint("add `name: postgres`: it is the `process` label of its series"));
        };
        process_name(name).map_err(|hint| {
            self.error(
                name.referenced,
                format!("invalid process name {}", quote(&name.value)),
            )
            .hint(hint)
        })?;
        let matches = self.process_match(here, at, &raw)?;
        // `by:` tracepoints sample every hit per cgroup: a process counts
        // hits only. Not named, they are left out of the default.
        let counted: Vec<&str> = tracepoints
            .iter()
            .filter(|t| t.by.is_empty())
            .map(|t| t.label.as_str())
            .collect();
        let before = self.mistakes();
        let groups = self.select(
            here,
            Kind::Group,
            raw.groups.as_ref(),
            &names(&written.groups),
        );
        let chosen_tracepoints = match &raw.tracepoints {
            None => counted.iter().map(|t| (*t).to_owned()).collect(),
            Some(list) => {
                for item in &list.value {
                    if written.tracepoints.contains(&item.value) && !counted.contains(&&*item.value)
                    {
                        self.keep::<()>(Err(self
                            .error(
                                item.referenced,
                                format!(
                                    "{here} names the `by:` tracepoint `{}`, which processes \
                                     do not count",
                                    item.value
                                ),
                            )
                            .hint(
                                "count it per cgroup, or list a counted (not `by:`) entry of \
                                 the same tracepoint here",
                            )));
                    }
                }
                self.select(
                    here,
                    Kind::Tracepoint,
                    raw.tracepoints.as_ref(),
                    &names(&written.tracepoints),
                )
            }
        };
        let probes = self.select(
            here,
            Kind::Probe,
            raw.probes.as_ref(),
            &names(&written.probes),
        );
        let metrics = self.select(
            here,
            Kind::Metric,
            raw.metrics.as_ref(),
            &names(&written.metrics),
        );
        let labels = match &raw.labels {
            None => Vec::new(),
            Some(list) => self.process_labels(here, list)?,
        };
        if self.mistakes() == before
            && groups.is_empty()
            && chosen_tracepoints.is_empty()
            && probes.is_empty()
            && metrics.is_empty()
        {
            return Err(self
                .error(
                    at,
                    format!("{here} selects no groups, tracepoints or probes"),
                )
                .hint(
                    "list at least one, or drop `groups:`/`tracepoints:`/`probes:` from the \
                     entry to count all of them",
                ));
        }
        Ok(ProcessSelector {
            name: name.value.clone(),
            matches,
            groups,
            tracepoints: chosen_tracepoints,
            probes,
            metrics,
            labels,
            origin: self.origin(at),
        })
    }

    /// Exactly one of `comm`, `exe`, `cmdline` and `pid`.
    fn process_match(
        &self,
        here: &str,
        at: serde_saphyr::Location,
        raw: &RawProcess,
    ) -> Result<ProcessMatch, ConfigError> {
        let given = [&raw.comm, &raw.exe, &raw.cmdline]
            .iter()
            .filter(|t| t.is_some())
            .count()
            + usize::from(raw.pid.is_some());
        if given != 1 {
            let message = match given {
                0 => format!("{here} says no process to match"),
                _ => format!("{here} gives more than one of `comm`, `exe`, `cmdline` and `pid`"),
            };
            return Err(self.error(at, message).hint(
                "give exactly one: `comm: postgres` (the task name), `exe: /usr/bin/*` (the \
                 executable), `cmdline: \"*--serve*\"` (the command line) or `pid: 1234`; \
                 write two entries to have both",
            ));
        }
        let pattern = |text: &Text| -> Result<Pattern, ConfigError> {
            GlobBuilder::new(&text.value)
                .literal_separator(false)
                .build()
                .map(|glob| Pattern {
                    text: text.value.clone(),
                    matcher: glob.compile_matcher(),
                })
                .map_err(|e| {
                    self.error(text.referenced, format!("invalid glob {}: {e}", quote(&text.value)))
                        .hint("`*` matches any characters, `?` one, `[abc]` one of a set, `{a,b}` alternatives")
                })
        };
        if let Some(comm) = &raw.comm {
            if let Some(kept) = past_comm_len(&comm.value) {
                return Err(self
                    .error(
                        comm.referenced,
                        format!(
                            "`comm: {}` is longer than the {COMM_LEN} bytes the kernel keeps of \
                         a task's name, so no process would match",
                            comm.value
                        ),
                    )
                    .hint(format!(
                        "write `comm: '{kept}'` (what the kernel keeps of it), or match the \
                     executable with `exe:`"
                    )));
            }
            return Ok(ProcessMatch::Comm(pattern(comm)?));
        }
        if let Some(exe) = &raw.exe {
            return Ok(ProcessMatch::Exe(pattern(exe)?));
        }
        if let Some(cmdline) = &raw.cmdline {
            return Ok(ProcessMatch::Cmdline(pattern(cmdline)?));
        }
        match &raw.pid {
            Some(pid) => match u32::try_from(pid.value) {
                Ok(n) if n > 0 && i32::try_from(n).is_ok() => Ok(ProcessMatch::Pid(n)),
                _ => Err(self
                    .error(
                        pid.referenced,
                        format!("`pid: {}` is no process id", pid.value),
                    )
                    .hint("a process id is a positive number, e.g. `pid: 1234`")),
            },
            None => Err(self.error(at, format!("{here} says no process to match"))),
        }
    }

    fn process_labels(
        &self,
        here: &str,
        list: &super::schema::TextList,
    ) -> Result<Vec<ProcessLabel>, ConfigError> {
        let mut labels = Vec::new();
        for item in &list.value {
            let label = match item.value.as_str() {
                "comm" => ProcessLabel::Comm,
                "pid" => ProcessLabel::Pid,
                other => {
                    return Err(self
                        .error(
                            item.referenced,
                            format!("{here}: unknown process label {}", quote(other)),
                        )
                        .hint("process labels: comm, pid"));
                }
            };
            if labels.contains(&label) {
                return Err(self
                    .error(
                        item.referenced,
                        format!("{here}: `{other}` is listed twice", other = item.value),
                    )
                    .hint("remove the duplicate"));
            }
            labels.push(label);
        }
        labels.sort_unstable();
        Ok(labels)
    }

    /// `max_processes`: within `1..=`[`MAX_PROCESSES_LIMIT`];
    /// [`DEFAULT_MAX_PROCESSES`] when absent (or wrong: the mistake is
    /// reported).
    pub(super) fn max_processes(&self, n: Option<&Spanned<i64>>) -> usize {
        let Some(n) = n else {
            return DEFAULT_MAX_PROCESSES;
        };
        match usize::try_from(n.value) {
            Ok(limit) if (1..=MAX_PROCESSES_LIMIT).contains(&limit) => limit,
            _ => {
                self.keep::<()>(Err(self
                    .error(
                        n.referenced,
                        format!(
                            "`max_processes` is {}; it must be within 1 and {MAX_PROCESSES_LIMIT}",
                            n.value
                        ),
                    )
                    .hint(format!(
                        "e.g. `max_processes: 1000`, or remove it for the default, \
                         {DEFAULT_MAX_PROCESSES}"
                    ))));
                DEFAULT_MAX_PROCESSES
            }
        }
    }
}

/// The names of `list`, borrowed.
fn names(list: &[String]) -> Vec<&str> {
    list.iter().map(String::as_str).collect()
}

/// A `process` label value: `[A-Za-z_][A-Za-z0-9_.-]*`.
fn process_name(name: &Text) -> Result<(), &'static str> {
    let mut chars = name.value.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    match ok {
        true => Ok(()),
        false => Err(
            "a process name starts with a letter or `_` and has letters, digits, \
                      `_`, `.` and `-`, e.g. `name: postgres`",
        ),
    }
}

/// What the kernel keeps of the name a literal `comm:` glob matches, as
/// the glob to write instead, when that name is longer than it keeps
/// ([`COMM_LEN`] bytes, cut wherever they fall, even inside a character);
/// `None` for a glob with wildcards, or a name that fits. The name is
/// counted in bytes after the glob's `\` escapes and then cgperf's `\xHH`
/// ones ([`crate::escape`]), as it is compared with the kernel's.
fn past_comm_len(glob: &str) -> Option<String> {
    let mut name = String::with_capacity(glob.len());
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' | '[' | '{' => return None,
            '\\' => name.extend(chars.next()),
            c => name.push(c),
        }
    }
    let bytes = crate::escape::unescape(&name);
    let kept = bytes.get(..COMM_LEN).filter(|_| bytes.len() > COMM_LEN)?;
    let mut glob = String::new();
    for c in crate::escape::escape(kept).chars() {
        if matches!(c, '\\' | '*' | '?' | '[' | ']' | '{' | '}') {
            glob.push('\\');
        }
        glob.push(c);
    }
    Some(glob)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, parse};

    const TOP: &str = "groups:\n  sched: [cs]\n  ipc: [cycles]\ntracepoints:\n  - sched:sched_switch\n  \
                       - {name: raw_syscalls:sys_enter, by: [id], as: by_id}\n";

    fn ok(entries: &str) -> Config {
        let yaml = format!("{TOP}processes:\n{entries}");
        parse("p.yaml", &yaml).unwrap_or_else(|e| panic!("{yaml}\n{e}"))
    }

    fn err(entries: &str) -> ConfigError {
        let yaml = format!("{TOP}processes:\n{entries}");
        parse("p.yaml", &yaml).expect_err(&yaml)
    }

    #[test]
    fn a_literal_comm_is_measured_in_the_bytes_the_kernel_keeps() {
        // 15 bytes, however they are written: escaped bytes, multi-byte
        // characters and glob escapes each count as what they stand for.
        ok("  - {name: a, comm: 'cgpt-nu\\\\xFF\\\\xFE'}\n");
        ok("  - {name: b, comm: 'ééééééé1'}\n");
        ok("  - {name: c, comm: 'a\\*bcdefghijklmn'}\n");
        ok("  - {name: d, comm: 'a-long-name-and-so-on*'}\n");
        // Past 15: the hint gives what the kernel keeps, cut inside a
        // character where the cut falls, as the glob to write.
        let e = err("  - {name: e, comm: 'éééééééé'}\n").to_string();
        assert!(e.contains("longer than the 15 bytes"), "{e}");
        assert!(e.contains("write `comm: 'ééééééé\\\\xC3'`"), "{e}");
        let e = err("  - {name: f, comm: 'postgres: walwriter'}\n").to_string();
        assert!(e.contains("write `comm: 'postgres: walwr'`"), "{e}");
        assert!(e.contains("p.yaml:"), "{e}");
        assert_eq!(past_comm_len("x\\\\xFF"), None);
        assert_eq!(
            past_comm_len("0123456789abcde\\\\xFF").as_deref(),
            Some("0123456789abcde")
        );
    }

    #[test]
    fn entries_select_by_comm_exe_cmdline_or_pid_with_what_they_count() {
        let config = ok("  - {name: pg, comm: postgres}\n  \
                         - {name: java, exe: /usr/lib/jvm/*/bin/java, groups: [ipc], labels: [pid, comm]}\n  \
                         - {name: batch, cmdline: \"*--batch*\", tracepoints: []}\n  \
                         - {name: one, pid: 4242, probes: []}\n");
        let [pg, java, batch, one] = &config.processes[..] else {
            panic!("{:?}", config.processes)
        };
        assert!(matches!(&pg.matches, ProcessMatch::Comm(p) if p.matcher.is_match("postgres")));
        assert_eq!(pg.groups, ["sched", "ipc"]);
        // `by:` entries are left out of the default.
        assert_eq!(pg.tracepoints, ["sched:sched_switch"]);
        assert!(pg.labels.is_empty());
        let ProcessMatch::Exe(exe) = &java.matches else {
            panic!("{java:?}")
        };
        assert!(
            exe.matcher
                .is_match("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
        );
        assert!(!exe.matcher.is_match("/usr/bin/java"));
        assert_eq!(java.groups, ["ipc"]);
        assert_eq!(java.labels, [ProcessLabel::Comm, ProcessLabel::Pid]);
        assert!(matches!(&batch.matches, ProcessMatch::Cmdline(p)
            if p.matcher.is_match("/opt/job --batch --fast")));
        assert!(batch.tracepoints.is_empty());
        assert_eq!(one.matches, ProcessMatch::Pid(4242));
        assert_eq!(config.max_processes, DEFAULT_MAX_PROCESSES);
        assert_eq!(config.processes[0].origin.line, 8);
    }

    #[test]
    fn an_entry_matches_exactly_one_way() {
        let e = err("  - {name: a}\n");
        assert!(e.to_string().contains("no process to match"), "{e}");
        let e = err("  - {name: a, comm: x, pid: 3}\n");
        assert!(e.to_string().contains("more than one"), "{e}");
        assert_eq!(e.line, Some(8));
    }

    #[test]
    fn mistakes_name_the_entry_and_the_fix() {
        let e = err("  - {comm: x}\n");
        assert!(e.to_string().contains("has no `name`"), "{e}");
        let e = err("  - {name: 9lives, comm: x}\n");
        assert!(e.to_string().contains("invalid process name"), "{e}");
        let e = err("  - {name: a, comm: x}\n  - {name: a, comm: y}\n");
        assert!(
            e.to_string().contains("of an entry before it (line 8)"),
            "{e}"
        );
        let e = err("  - {name: a, comm: a_name_longer_than_fifteen}\n");
        assert!(e.to_string().contains("comm: 'a_name_longer_t'`"), "{e}");
        let e = err("  - {name: a, pid: 0}\n");
        assert!(e.to_string().contains("no process id"), "{e}");
        let e = err("  - {name: a, pid: 99999999999}\n");
        assert!(e.to_string().contains("no process id"), "{e}");
        let e = err("  - {name: a, comm: x, tracepoints: [by_id]}\n");
        assert!(e.to_string().contains("`by:` tracepoint `by_id`"), "{e}");
        let e = err("  - {name: a, comm: x, groups: [nope]}\n");
        assert!(e.to_string().contains("nope"), "{e}");
        let e = err("  - {name: a, comm: x, labels: [uid]}\n");
        assert!(e.to_string().contains("process labels: comm, pid"), "{e}");
        let e = err("  - {name: a, comm: x, labels: [pid, pid]}\n");
        assert!(e.to_string().contains("twice"), "{e}");
        let e = err("  - {name: a, comm: x, groups: [], tracepoints: [], probes: []}\n");
        assert!(e.to_string().contains("selects no groups"), "{e}");
        let e = err("  - {name: a, comm: \"[x\"}\n");
        assert!(e.to_string().contains("invalid glob"), "{e}");
        let e = err("  - {name: a, comm: x, metrics: [ipc]}\n");
        assert_eq!(e.line, Some(8), "{e}");
    }

    #[test]
    fn entries_compute_the_metrics_over_what_they_count() {
        let top = "groups:\n  sched: [cs]\n  ipc: [cycles, instructions]\n\
                   metrics:\n  - {name: ipc, expr: instructions / cycles}\n  \
                   - {name: switches, expr: cs}\nprocesses:\n";
        let ok = |entries: &str| {
            let yaml = format!("{top}{entries}");
            parse("p.yaml", &yaml).unwrap_or_else(|e| panic!("{yaml}\n{e}"))
        };
        // By default: every metric whose inputs the entry counts.
        let config = ok("  - {name: a, comm: x}\n  - {name: b, comm: y, groups: [sched]}\n");
        assert_eq!(config.processes[0].metrics, ["ipc", "switches"]);
        assert_eq!(config.processes[1].metrics, ["switches"]);
        // Named, a metric whose inputs the entry does not count is a mistake.
        let yaml = format!("{top}  - {{name: b, comm: y, groups: [sched], metrics: [ipc]}}\n");
        let e = parse("p.yaml", &yaml).expect_err("ipc without its group");
        assert!(
            e.to_string().contains("`processes[0]` computes metric"),
            "{e}"
        );
        assert!(e.to_string().contains("\"instructions\""), "{e}");
    }

    #[test]
    fn max_processes_is_bounded() {
        let yaml = format!("{TOP}max_processes: 0\n");
        let e = parse("p.yaml", &yaml).expect_err("0");
        assert!(e.to_string().contains("within 1 and"), "{e}");
        let yaml = format!("{TOP}max_processes: 5\n");
        assert_eq!(parse("p.yaml", &yaml).expect("5").max_processes, 5);
    }
}
