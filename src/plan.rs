//! From config to what to open: events resolved against this machine's PMUs
//! and tracefs, each group probed once so that one that cannot be counted is
//! disabled (with its reason) instead of failing for every cgroup.

use crate::config::{CgroupSelector, Config, ConfigError, GroupDef, ProbeDef, TracepointDef};
use crate::deadline;
use crate::events::{Event, EventAttr, Field, HeldBinary, PERF_TYPE_TRACEPOINT, TracepointFormat};
use crate::ids::{EventId, GroupId, SampledId};
use crate::perf::{CounterGroup, Errno, Target, open_failure_reason};
use crate::snapshot::Support;
use crate::tracefs::Tracefs;
use std::ffi::{CStr, CString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use crate::config::{PROBE_GROUP, TRACEPOINT_GROUP};

/// What one entry of the group `group` is, for messages: a tracepoint, a
/// probe, or an event of a counter group.
pub fn entry_kind(group: &str) -> &'static str {
    match group {
        TRACEPOINT_GROUP => "tracepoint",
        PROBE_GROUP => "probe",
        _ => "event",
    }
}

/// Label names a `by:` field may not take, because every series of
/// `cgperf_events_total` already has them (the extractors' labels included);
/// a field with such a name is exported as `field_<name>`.
const RESERVED_LABELS: [&str; 10] = [
    "cgroup",
    "group",
    "event",
    "cpu",
    "pod_uid",
    "qos_class",
    "slice",
    "unit",
    "container_id",
    "container_runtime",
];

/// One event ready to open.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedEvent {
    /// The `event` label: [`Event::label`](crate::events::Event::label)
    /// (one name for perf's aliases), a tracepoint's name, or its `as:`.
    pub label: Arc<str>,
    /// What to pass to the kernel.
    pub attr: EventAttr,
    /// Counts nanoseconds (`task-clock`, `cpu-clock`), exported as seconds.
    pub clock: bool,
    /// A tracepoint filter, applied before the event is enabled.
    pub filter: Option<Arc<CStr>>,
    /// A uprobe's binary, which `attr` names through `/proc/self/fd`: held
    /// for as long as the event may be opened (by any group keeping this).
    pub binary: Option<Arc<HeldBinary>>,
}

impl PlannedEvent {
    /// The series it feeds.
    pub fn id(&self) -> EventId {
        EventId {
            label: self.label.clone(),
            clock: self.clock,
        }
    }
}

/// A group ready to open for any cgroup.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// The `group` label.
    pub name: Arc<str>,
    /// Leader first.
    pub events: Vec<PlannedEvent>,
}

impl GroupSpec {
    /// The attrs in group order.
    pub fn attrs(&self) -> Vec<EventAttr> {
        self.events.iter().map(|e| e.attr).collect()
    }

    /// The filters in group order.
    pub fn filters(&self) -> Vec<Option<&CStr>> {
        self.events.iter().map(|e| e.filter.as_deref()).collect()
    }

    /// The group's id.
    pub fn id(&self) -> GroupId {
        GroupId::from_label(&self.name)
    }

    /// Its events' ids, in group order.
    pub fn event_ids(&self) -> Vec<EventId> {
        self.events.iter().map(PlannedEvent::id).collect()
    }
}

/// A tracepoint counted by the values of some of its fields: every hit is a
/// sample in a ring buffer, decoded into label values.
#[derive(Debug, Clone, PartialEq)]
pub struct SampledSpec {
    /// The `event` label.
    pub label: Arc<str>,
    /// The tracepoint.
    pub attr: EventAttr,
    /// A tracepoint filter, applied before the event is enabled.
    pub filter: Option<Arc<CStr>>,
    /// The `by:` fields in the order written: label name and layout.
    pub fields: Vec<(Arc<str>, Field)>,
    /// Distinct value combinations per cgroup before the rest goes to
    /// `other`.
    pub max_series: usize,
}

impl SampledSpec {
    /// The series it feeds.
    pub fn id(&self) -> SampledId {
        SampledId {
            label: self.label.clone(),
            fields: self.fields.iter().map(|(name, _)| name.clone()).collect(),
        }
    }
}

/// Where the machine-dependent inputs of a plan come from.
#[derive(Debug, Clone)]
pub struct Machine {
    /// `/sys/bus/event_source/devices`.
    pub pmu_root: PathBuf,
    /// tracefs, or why it is unavailable.
    pub tracefs: Result<Tracefs, String>,
    /// The directory of the root cgroup, used to probe groups.
    pub probe_cgroup: PathBuf,
    /// A CPU that is online, used to probe groups.
    pub probe_cpu: u32,
}

/// What the sampler opens, derived from a config on this machine.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Sampling interval.
    pub interval: Duration,
    /// Export a `cpu` label.
    pub per_cpu: bool,
    /// Data pages of each CPU's ring buffer for sampled tracepoints.
    pub ring_pages: usize,
    /// The config's cgroup selectors.
    pub selectors: Vec<CgroupSelector>,
    /// One per config group, `None` when this machine cannot count it.
    groups: Vec<(String, Option<Arc<GroupSpec>>)>,
    /// One per counted (not `by:`) tracepoint, by label; `None` when it
    /// cannot be counted.
    tracepoints: Vec<(String, Option<PlannedEvent>)>,
    /// One per probe, by label; `None` when it cannot be counted.
    probes: Vec<(String, Option<PlannedEvent>)>,
    /// One per `by:` tracepoint, by label; `None` when it cannot be counted.
    sampled: Vec<(String, Option<Arc<SampledSpec>>)>,
    /// The verdict on every group, tracepoint and probe.
    pub support: Vec<Support>,
}

impl Plan {
    /// Resolves and probes everything `config` asks for.
    ///
    /// What this machine cannot count is disabled with its reason in
    /// [`Plan::support`]. A filter the kernel rejects, or a `by:` field the
    /// tracepoint does not have, is a mistake in the config: that is the
    /// error, positioned at the entry.
    pub fn build(config: &Config, machine: &Machine) -> Result<Self, ConfigError> {
        let mut support = Vec::new();
        let groups = config
            .groups
            .iter()
            .map(|def| {
                let status = resolve_group(def, &machine.pmu_root).and_then(|spec| {
                    probe(&spec, &machine.probe_cgroup, machine.probe_cpu)?;
                    Ok(spec)
                });
                support.push(verdict(&def.name, None, &status));
                (def.name.clone(), status.ok().map(Arc::new))
            })
            .collect();
        let mut tracepoints = Vec::new();
        let mut sampled = Vec::new();
        for def in &config.tracepoints {
            let status = plan_tracepoint(def, machine)?;
            support.push(verdict(TRACEPOINT_GROUP, Some(&def.label), &status));
            match status {
                Ok(Planned::Counted(event)) => tracepoints.push((def.label.clone(), Some(event))),
                Ok(Planned::Sampled(spec)) => {
                    sampled.push((def.label.clone(), Some(Arc::new(spec))));
                }
                Err(_) if def.by.is_empty() => tracepoints.push((def.label.clone(), None)),
                Err(_) => sampled.push((def.label.clone(), None)),
            }
        }
        group_verdict(
            &mut support,
            TRACEPOINT_GROUP,
            config.tracepoints.len(),
            "none of the configured tracepoints can be counted",
        );
        let probes = config
            .probes
            .iter()
            .map(|def| {
                let status = plan_probe(def, machine);
                support.push(verdict(PROBE_GROUP, Some(&def.label), &status));
                (def.label.clone(), status.ok())
            })
            .collect();
        group_verdict(
            &mut support,
            PROBE_GROUP,
            config.probes.len(),
            "none of the configured probes can be counted",
        );
        Ok(Self {
            interval: config.interval,
            per_cpu: config.per_cpu,
            ring_pages: config.ring_pages,
            selectors: config.cgroups.clone(),
            groups,
            tracepoints,
            probes,
            sampled,
            support,
        })
    }

    /// [`Plan::build`] on a worker given [`deadline::FILES`]: the plan reads
    /// uprobe binaries (files a user names) and tracefs, which a file system
    /// that does not answer would block for good. Start-up and `cgperf
    /// check` build their plan so; reloads build theirs on such a worker.
    pub fn build_in_time(config: &Config, machine: &Machine) -> anyhow::Result<Self> {
        let binaries: Vec<String> = config
            .probes
            .iter()
            .filter_map(|p| p.spec.binary())
            .map(|b| b.display().to_string())
            .collect();
        let (config, machine) = (config.clone(), machine.clone());
        match deadline::with_deadline(deadline::FILES, move || Self::build(&config, &machine)) {
            Ok(built) => Ok(built?),
            Err(stuck) if binaries.is_empty() => Err(anyhow::anyhow!(
                "building the plan (tracefs formats, a trial open of every group): {stuck}"
            )),
            Err(stuck) => Err(anyhow::anyhow!(
                "building the plan (tracefs formats, the uprobe binaries {}, a trial open of \
                 every group): {stuck}",
                binaries.join(", ")
            )),
        }
    }

    /// The groups to open for a cgroup chosen by `selectors` (indices into
    /// [`Plan::selectors`]): the union of what they ask for, supported groups
    /// only, then counted tracepoints as one group and probes as another.
    pub fn groups_for(&self, selectors: &[usize]) -> Vec<Arc<GroupSpec>> {
        let chosen = self.chosen(selectors);
        let mut out: Vec<Arc<GroupSpec>> = self
            .groups
            .iter()
            .filter(|(name, _)| chosen.iter().any(|s| s.groups.contains(name)))
            .filter_map(|(_, spec)| spec.clone())
            .collect();
        let lists = [
            (TRACEPOINT_GROUP, &self.tracepoints, false),
            (PROBE_GROUP, &self.probes, true),
        ];
        for (name, events, probes) in lists {
            let events: Vec<PlannedEvent> = events
                .iter()
                .filter(|(label, _)| {
                    chosen.iter().any(|s| {
                        let list = if probes { &s.probes } else { &s.tracepoints };
                        list.contains(label)
                    })
                })
                .filter_map(|(_, event)| event.clone())
                .collect();
            if !events.is_empty() {
                out.push(Arc::new(GroupSpec {
                    name: name.into(),
                    events,
                }));
            }
        }
        out
    }

    /// The `by:` tracepoints to sample for a cgroup chosen by `selectors`.
    pub fn sampled_for(&self, selectors: &[usize]) -> Vec<Arc<SampledSpec>> {
        let chosen = self.chosen(selectors);
        self.sampled
            .iter()
            .filter(|(label, _)| chosen.iter().any(|s| s.tracepoints.contains(label)))
            .filter_map(|(_, spec)| spec.clone())
            .collect()
    }

    fn chosen(&self, selectors: &[usize]) -> Vec<&CgroupSelector> {
        selectors
            .iter()
            .filter_map(|&i| self.selectors.get(i))
            .collect()
    }
}

/// A tracepoint ready to open, counted or sampled.
enum Planned {
    Counted(PlannedEvent),
    Sampled(SampledSpec),
}

fn verdict<T>(group: &str, event: Option<&str>, status: &Result<T, String>) -> Support {
    Support {
        group: group.into(),
        event: event.map(Into::into),
        status: status.as_ref().map(|_| ()).map_err(Clone::clone),
    }
}

/// The verdict on the `tracepoints` or `probes` group as a whole: it counts
/// when any of its `n` events can.
fn group_verdict(support: &mut Vec<Support>, group: &str, n: usize, none: &str) {
    if n == 0 {
        return;
    }
    let any = support
        .iter()
        .any(|s| &*s.group == group && s.event.is_some() && s.status.is_ok());
    support.push(Support {
        group: group.into(),
        event: None,
        status: if any { Ok(()) } else { Err(none.into()) },
    });
}

/// Resolves and probes one tracepoint entry. `Err(ConfigError)` for a
/// mistake in the entry (filter, fields); `Ok(Err(reason))` when this
/// machine cannot count it.
fn plan_tracepoint(
    def: &TracepointDef,
    machine: &Machine,
) -> Result<Result<Planned, String>, ConfigError> {
    let tracefs = match machine.tracefs.as_ref() {
        Ok(tracefs) => tracefs,
        Err(reason) => return Ok(Err(reason.clone())),
    };
    let (id, format) = match tracefs
        .tracepoint_id(&def.name)
        .and_then(|id| Ok((id, tracefs.format(&def.name)?)))
    {
        Ok(found) => found,
        // Perhaps a typo, perhaps a tracepoint of another kernel: not an
        // error, but located, with the closest name, in check and the log.
        Err(reason) if !tracefs.has(&def.name) => {
            return Ok(Err(def.origin.error(reason).to_string()));
        }
        Err(reason) => return Ok(Err(reason)),
    };
    let filter = match &def.filter {
        Some(text) => Some(check_filter(def, text, &format)?),
        None => None,
    };
    let mut event = PlannedEvent {
        label: def.label.as_str().into(),
        attr: tracepoint_attr(id),
        clock: false,
        filter: None,
        binary: None,
    };
    // First without the filter: whether this machine can count the
    // tracepoint at all. Then with it: a failure is then the filter's.
    let mut spec = GroupSpec {
        name: TRACEPOINT_GROUP.into(),
        events: vec![event.clone()],
    };
    if let Err(e) = open_once(&spec, &machine.probe_cgroup, machine.probe_cpu) {
        return Ok(Err(e.reason(&spec)));
    }
    if let (Some(text), Some(filter)) = (&def.filter, &filter) {
        event.filter = Some(filter.clone());
        spec.events = vec![event.clone()];
        match open_once(&spec, &machine.probe_cgroup, machine.probe_cpu) {
            Ok(()) => {}
            Err(ProbeFailure::Open(errno, _)) => {
                return Err(rejected_filter(def, text, errno, &format));
            }
            Err(e) => return Ok(Err(e.reason(&spec))),
        }
    }
    if def.by.is_empty() {
        return Ok(Ok(Planned::Counted(event)));
    }
    let fields = def
        .by
        .iter()
        .map(|name| match format.field(name) {
            Some(field) => Ok((field_label(name), field.clone())),
            None => Err(unknown_field(def, name, &format)),
        })
        .collect::<Result<_, _>>()?;
    Ok(Ok(Planned::Sampled(SampledSpec {
        label: event.label,
        attr: event.attr,
        filter,
        fields,
        max_series: def.max_series,
    })))
}

/// The label name of a `by:` field: its own name unless that would clash
/// with a label every series has, or is reserved by Prometheus (`__`).
fn field_label(name: &str) -> Arc<str> {
    if RESERVED_LABELS.contains(&name) || name.starts_with("__") {
        format!("field_{name}").into()
    } else {
        name.into()
    }
}

/// Checks the field names of a filter against the format (the kernel only
/// says EINVAL), and turns it into the C string the kernel takes.
fn check_filter(
    def: &TracepointDef,
    text: &str,
    format: &TracepointFormat,
) -> Result<Arc<CStr>, ConfigError> {
    if let Some(unknown) = filter_fields(text).find(|name| format.field(name).is_none()) {
        return Err(unknown_field(def, unknown, format));
    }
    CString::new(text)
        .map(Arc::from)
        .map_err(|_| def.origin.error("the filter contains a NUL character"))
}

/// The identifiers of a filter that are compared with a value: the fields
/// it names (`which == 1 && comm ~ "bash*"` names `which` and `comm`).
fn filter_fields(text: &str) -> impl Iterator<Item = &str> {
    const OPERATORS: [&str; 8] = ["==", "!=", "<=", ">=", "<", ">", "&", "~"];
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut quoted = false;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'"' {
                quoted = !quoted;
                i += 1;
                continue;
            }
            if quoted || !(c.is_ascii_alphabetic() || c == b'_') {
                i += 1;
                continue;
            }
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let rest = text[i..].trim_start();
            if OPERATORS.iter().any(|op| rest.starts_with(op)) {
                return Some(word);
            }
        }
        None
    })
}

fn field_listing(format: &TracepointFormat) -> String {
    let names: Vec<&str> = format.field_names().collect();
    format!("fields of this tracepoint: {}", names.join(", "))
}

fn unknown_field(def: &TracepointDef, name: &str, format: &TracepointFormat) -> ConfigError {
    let listing = field_listing(format);
    let hint = match crate::config::did_you_mean(name, format.field_names()) {
        Some(close) => format!("did you mean `{close}`? {listing}"),
        None => listing,
    };
    def.origin
        .error(format!("tracepoint {} has no field `{name}`", def.name))
        .hint(hint)
}

fn rejected_filter(
    def: &TracepointDef,
    text: &str,
    errno: Errno,
    format: &TracepointFormat,
) -> ConfigError {
    // The kernel explains a rejected filter only by its errno.
    let why = match errno.0 {
        libc::EINVAL => {
            "a comparison does not parse, or compares a field with a value of the \
                         wrong type"
        }
        libc::ENOENT => {
            "the expression is incomplete, e.g. an unbalanced parenthesis or an \
                         operator without a field"
        }
        libc::ENOMEM | libc::E2BIG | libc::ENOSPC => "the expression is too long or too complex",
        _ => "the kernel gave no other reason",
    };
    def.origin
        .error(format!(
            "the kernel rejected the filter \"{text}\" of tracepoint {} ({errno}: {why})",
            def.name
        ))
        .hint(format!(
            "write `field op value` joined by && and ||, with ==, !=, <, <=, >, >=, & for \
             numbers and ==, !=, ~ (glob) for strings in double quotes; {}",
            field_listing(format)
        ))
}

/// Resolves and probes one probe.
fn plan_probe(def: &ProbeDef, machine: &Machine) -> Result<PlannedEvent, String> {
    let resolved = def
        .spec
        .resolve(&machine.pmu_root)
        .map_err(|e| e.to_string())?;
    let event = PlannedEvent {
        label: def.label.as_str().into(),
        attr: resolved.attr,
        clock: false,
        filter: None,
        binary: resolved.binary,
    };
    let spec = GroupSpec {
        name: PROBE_GROUP.into(),
        events: vec![event.clone()],
    };
    match open_once(&spec, &machine.probe_cgroup, machine.probe_cpu) {
        Ok(()) => Ok(event),
        Err(ProbeFailure::Open(errno, _)) if matches!(errno.0, libc::EACCES | libc::EPERM) => {
            Err(format!(
                "{} `{}`: permission denied: the kernel's {} PMU needs CAP_SYS_ADMIN \
                 (CAP_PERFMON is not enough) ({errno})",
                def.spec.kind(),
                def.spec.text(),
                def.spec.kind()
            ))
        }
        Err(e) => Err(e.reason(&spec)),
    }
}

/// Resolves every event of a group, or says which one cannot be resolved.
pub fn resolve_group(def: &GroupDef, pmu_root: &Path) -> Result<GroupSpec, String> {
    let events = def
        .events
        .iter()
        .map(|e| resolve_event(e, pmu_root))
        .collect::<Result<_, _>>()?;
    Ok(GroupSpec {
        name: def.name.as_str().into(),
        events,
    })
}

/// Resolves one event against the PMUs of this machine.
pub fn resolve_event(event: &Event, pmu_root: &Path) -> Result<PlannedEvent, String> {
    let attr = event
        .resolve(pmu_root)
        .map_err(|e| format!("event `{}`: {e}", event.text))?;
    Ok(PlannedEvent {
        label: event.label().into(),
        attr,
        clock: event.is_clock(),
        filter: None,
        binary: None,
    })
}

/// The attr of a tracepoint, by its tracefs id.
fn tracepoint_attr(id: u64) -> EventAttr {
    EventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        config: id,
        config1: 0,
        config2: 0,
        exclude_user: false,
        exclude_kernel: false,
        exclude_hv: false,
    }
}

/// Why a probe open failed.
enum ProbeFailure {
    /// The cgroup directory could not be opened.
    Cgroup(String),
    /// Event `index` was refused with this errno.
    Open(Errno, usize),
}

impl ProbeFailure {
    fn reason(&self, spec: &GroupSpec) -> String {
        match self {
            Self::Cgroup(reason) => reason.clone(),
            Self::Open(errno, index) => {
                let event = spec.events.get(*index).map_or("?", |ev| &*ev.label);
                format!("event `{event}`: {}", open_failure_reason(*errno))
            }
        }
    }
}

fn open_once(spec: &GroupSpec, cgroup_dir: &Path, cpu: u32) -> Result<(), ProbeFailure> {
    let dir = std::fs::File::open(cgroup_dir).map_err(|e| {
        ProbeFailure::Cgroup(format!("opening cgroup {}: {e}", cgroup_dir.display()))
    })?;
    CounterGroup::open_filtered(
        &spec.attrs(),
        &spec.filters(),
        Target::Cgroup(dir.as_fd()),
        cpu,
    )
    .map(drop)
    .map_err(|e| ProbeFailure::Open(e.errno, e.index))
}

/// Why the kernel would not count one event here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why, for people.
    pub reason: String,
    /// The kernel refused for want of privileges (EACCES, EPERM): it did
    /// not say whether the machine could count the event.
    pub permission: bool,
}

/// Resolves `event` and opens it alone, once, in cgroup mode on the probe
/// cgroup and CPU of `machine`: whether this machine can count it (what
/// `cgperf check` shows per event and `cgperf list` leaves out).
pub fn probe_event(event: &Event, machine: &Machine) -> Result<(), Refusal> {
    let resolved = resolve_event(event, &machine.pmu_root).map_err(|reason| Refusal {
        reason,
        permission: false,
    })?;
    let single = GroupSpec {
        name: event.text.as_str().into(),
        events: vec![resolved],
    };
    open_once(&single, &machine.probe_cgroup, machine.probe_cpu).map_err(|e| Refusal {
        reason: e.reason(&single),
        permission: matches!(e, ProbeFailure::Open(Errno(libc::EACCES | libc::EPERM), _)),
    })
}

/// Opens the group once in cgroup mode and closes it again: the kernel is the
/// only reliable judge of whether this machine can count it.
pub fn probe(spec: &GroupSpec, cgroup_dir: &Path, cpu: u32) -> Result<(), String> {
    open_once(spec, cgroup_dir, cpu).map_err(|e| e.reason(spec))
}
