//! Extra Prometheus labels derived from a cgroup's path: which Kubernetes
//! pod, which systemd unit, which container a cgroup belongs to.
//!
//! The `cgroup` label already identifies a series, but a raw path such as
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c…_…
//! .slice/cri-containerd-4f79….scope` cannot be joined with
//! `kube_pod_info{uid=…}` or grouped by container without regex gymnastics
//! in every query. The extractors here read the well-known names that
//! kubelet, systemd and the container runtimes give their cgroups and turn
//! them into plain labels.
//!
//! Everything is a pure function of the path: no cgroupfs, no runtime API,
//! no state. That keeps extraction cheap enough to run for every new cgroup
//! and makes it exactly testable. The price is that only what the names
//! encode can be known (a pod's UID, not its name).
//!
//! Rules shared by every extractor:
//!
//! * **Components are matched by their own name, not by their position**, so
//!   the same rules work when kubelet runs under another root
//!   (`/kubelet.slice/kubelet-kubepods.slice/…` in kind, `--cgroup-root`),
//!   inside a Docker scope (kind nodes seen from the host), or in rootless
//!   setups under `user@UID.service`.
//! * **The innermost match wins**: for `/a/docker-X.scope/docker/Y` the
//!   container is `Y`, the one actually running the tasks of that cgroup.
//! * **Only well-formed names match**: pod UIDs must be UUIDs (or the 32-hex
//!   hashes kubelet gives static pods), container IDs must be 64 lowercase
//!   hex digits, unit names must use systemd's character set. A look-alike
//!   (`kubepods-podfoo.slice`, `docker-abc.scope`, a `.mount` unit that
//!   embeds a container ID) yields no label rather than a wrong one.
//! * **Absent, not empty**: a label that does not apply is left out.
//!   Prometheus treats `label=""` as no label, so this is equivalent for
//!   queries and keeps the output small. [`Extractor::label_names`] gives
//!   the full set per extractor for exporters that want a fixed schema.
//! * Never panics, on any input; allocates only the returned labels.

use std::fmt;

/// A family of labels that can be enabled in the config (`labels:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Extractor {
    /// `pod_uid` and `qos_class`, from kubelet's pod cgroups (systemd and
    /// cgroupfs drivers).
    Kubernetes,
    /// `slice` and `unit`, from systemd's `.slice`, `.service` and `.scope`
    /// cgroups.
    Systemd,
    /// `container_id` and `container_runtime`, from the cgroups of
    /// containerd, CRI-O, Docker and Podman, inside Kubernetes or not.
    Containers,
}

impl Extractor {
    /// Every extractor, in the order their labels are emitted.
    pub const ALL: [Self; 3] = [Self::Kubernetes, Self::Systemd, Self::Containers];

    /// The name used in the config (`labels: [kubernetes]`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Kubernetes => "kubernetes",
            Self::Systemd => "systemd",
            Self::Containers => "containers",
        }
    }

    /// The extractor called `s` (exactly, lowercase), if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }

    /// The labels this extractor may produce, in the order [`extract`]
    /// emits them.
    pub fn label_names(self) -> &'static [&'static str] {
        match self {
            Self::Kubernetes => &[POD_UID, QOS_CLASS],
            Self::Systemd => &[SLICE, UNIT],
            Self::Containers => &[CONTAINER_ID, CONTAINER_RUNTIME],
        }
    }
}

impl fmt::Display for Extractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A pod's UID label.
pub const POD_UID: &str = "pod_uid";
const QOS_CLASS: &str = "qos_class";
const SLICE: &str = "slice";
const UNIT: &str = "unit";
/// A container's ID label.
pub const CONTAINER_ID: &str = "container_id";
/// The label naming the runtime that made a container.
pub const CONTAINER_RUNTIME: &str = "container_runtime";

/// Every label name [`extract`] may produce, in emission order (the
/// concatenation of [`Extractor::label_names`] over [`Extractor::ALL`]).
///
/// None of them is `cgroup`, `group`, `event`, `cpu` or `reason`, the labels
/// cgperf's own metrics use, so extra labels never collide with them.
pub const LABEL_NAMES: &[&str] = &[
    POD_UID,
    QOS_CLASS,
    SLICE,
    UNIT,
    CONTAINER_ID,
    CONTAINER_RUNTIME,
];

/// Extra labels for the cgroup at `path` (relative to the cgroup2 root, e.g.
/// `/system.slice/nginx.service`), from the `enabled` extractors.
///
/// The order is fixed — [`LABEL_NAMES`] order, whatever the order of
/// `enabled` — with no duplicates, and only labels that apply are present:
///
/// | extractor | label | value |
/// |---|---|---|
/// | kubernetes | `pod_uid` | the pod's UID with dashes (`1b2c3d4e-…`), as in the Kubernetes API |
/// | kubernetes | `qos_class` | `guaranteed`, `burstable` or `besteffort` |
/// | systemd | `slice` | innermost `*.slice`, escapes decoded (`system-getty.slice`); not kubelet's `kubepods*` slices of a pod when `kubernetes` is on |
/// | systemd | `unit` | innermost `*.service` or `*.scope`, escapes decoded; not a container's scope when `containers` is on |
/// | containers | `container_id` | the 64-hex container ID |
/// | containers | `container_runtime` | `containerd`, `crio`, `docker`, `podman`, `crio-conmon`, `podman-conmon`; absent when the name does not say |
pub fn extract(path: &str, enabled: &[Extractor]) -> Vec<(&'static str, String)> {
    let on = |e: Extractor| enabled.contains(&e);
    // Each parse once: the systemd labels also ask whether the path is a
    // pod's or a container's.
    let pod = on(Extractor::Kubernetes)
        .then(|| kubernetes_pod(path))
        .flatten();
    let container = on(Extractor::Containers).then(|| container(path)).flatten();
    let mut labels = Vec::new();
    if let Some(pod) = &pod {
        labels.reserve_exact(2);
        labels.push((POD_UID, pod.uid()));
        labels.push((QOS_CLASS, pod.qos.name().to_owned()));
    }
    if on(Extractor::Systemd) {
        let units = systemd_units(path);
        // kubelet's slices of a pod and a runtime's scope of a container
        // say again what pod_uid and container_id say: with those
        // extractors on, they are left out rather than copied.
        let pod_slice = |slice: &str| pod.is_some() && slice.starts_with("kubepods");
        let container_scope = |unit: &str| container.as_ref().is_some_and(|c| unit.contains(c.id));
        if let Some(slice) = units.slice.filter(|s| !pod_slice(s)) {
            labels.push((SLICE, unescape(slice)));
        }
        if let Some(unit) = units.unit.filter(|u| !container_scope(u)) {
            labels.push((UNIT, unescape(unit)));
        }
    }
    if let Some(container) = container {
        labels.push((CONTAINER_ID, container.id.to_owned()));
        if let Some(runtime) = container.runtime {
            labels.push((CONTAINER_RUNTIME, runtime.to_owned()));
        }
    }
    labels
}

/// The non-empty components of `path`: leading, trailing and doubled `/`
/// do not matter.
fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty())
}

// ---- Kubernetes -----------------------------------------------------------

/// A pod's Quality of Service class, which kubelet encodes in the cgroup
/// hierarchy: guaranteed pods sit directly under `kubepods`, the others
/// under a `burstable` or `besteffort` tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    /// Lowercase, as Prometheus label values usually are (the API spells
    /// them `Guaranteed`, `Burstable`, `BestEffort`).
    fn name(self) -> &'static str {
        match self {
            Self::Guaranteed => "guaranteed",
            Self::Burstable => "burstable",
            Self::BestEffort => "besteffort",
        }
    }
}

/// A pod cgroup found in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pod<'a> {
    /// The UID as written in the path (`_` for `-` with the systemd driver).
    raw_uid: &'a str,
    qos: Qos,
}

impl Pod<'_> {
    /// The UID as the Kubernetes API spells it: the systemd driver escapes
    /// `-` as `_` (a `-` means nesting in a slice name); undo that.
    fn uid(&self) -> String {
        self.raw_uid.replace('_', "-")
    }
}

/// The innermost pod cgroup on `path`, in either driver's layout:
///
/// * systemd driver: `kubepods.slice/kubepods-burstable.slice/
///   kubepods-burstable-pod<uid>.slice`, `kubepods-besteffort-pod<uid>.slice`,
///   `kubepods-pod<uid>.slice` (guaranteed); with `--cgroup-root=/kubelet`,
///   `kubelet-kubepods-…-pod<uid>.slice`. The slice name alone carries the
///   whole chain (systemd names a slice after its ancestors), so it is
///   matched on its own.
/// * cgroupfs driver: `kubepods/pod<uid>` (guaranteed),
///   `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>`, under
///   any root. `pod<uid>` alone is too generic, so its parents must be the
///   QoS tier and `kubepods`.
fn kubernetes_pod(path: &str) -> Option<Pod<'_>> {
    let mut found = None;
    let (mut grandparent, mut parent) = ("", "");
    for component in components(path) {
        if let Some(pod) =
            systemd_pod(component).or_else(|| cgroupfs_pod(grandparent, parent, component))
        {
            found = Some(pod);
        }
        (grandparent, parent) = (parent, component);
    }
    found
}

/// `[<prefix>-]kubepods[-burstable|-besteffort]-pod<uid>.slice`, where the
/// UID uses `_` for `-`.
fn systemd_pod(component: &str) -> Option<Pod<'_>> {
    let stem = component.strip_suffix(".slice")?;
    // The escaped UID contains no `-`, so the last `-` starts `pod<uid>`.
    let (tier, pod) = stem.rsplit_once('-')?;
    let raw_uid = pod.strip_prefix("pod")?;
    if !is_pod_uid(raw_uid, b'_') {
        return None;
    }
    let (kubepods, qos) = if let Some(rest) = tier.strip_suffix("-burstable") {
        (rest, Qos::Burstable)
    } else if let Some(rest) = tier.strip_suffix("-besteffort") {
        (rest, Qos::BestEffort)
    } else {
        (tier, Qos::Guaranteed)
    };
    // `kubepods` must be a whole dash-separated word: not `mykubepods`.
    let is_kubepods = kubepods == "kubepods" || kubepods.ends_with("-kubepods");
    is_kubepods.then_some(Pod { raw_uid, qos })
}

/// `pod<uid>` under `kubepods` or `kubepods/{burstable,besteffort}`.
fn cgroupfs_pod<'a>(grandparent: &str, parent: &str, component: &'a str) -> Option<Pod<'a>> {
    let raw_uid = component.strip_prefix("pod")?;
    if !is_pod_uid(raw_uid, b'-') {
        return None;
    }
    let qos = match (grandparent, parent) {
        (_, "kubepods") => Qos::Guaranteed,
        ("kubepods", "burstable") => Qos::Burstable,
        ("kubepods", "besteffort") => Qos::BestEffort,
        _ => return None,
    };
    Some(Pod { raw_uid, qos })
}

/// A pod UID as kubelet writes it into cgroup names: a lowercase UUID with
/// `separator` between its groups (`-`, or `_` with the systemd driver), or
/// 32 lowercase hex digits — the UID kubelet derives for static pods from a
/// hash of their manifest.
fn is_pod_uid(uid: &str, separator: u8) -> bool {
    let bytes = uid.as_bytes();
    match bytes.len() {
        32 => bytes.iter().all(|&b| is_lower_hex(b)),
        36 => bytes.iter().enumerate().all(|(i, &b)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                b == separator
            } else {
                is_lower_hex(b)
            }
        }),
        _ => false,
    }
}

fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

// ---- systemd --------------------------------------------------------------

/// The innermost slice and the innermost service or scope on a path; each
/// is the innermost of its own kind, independently of the other.
#[derive(Debug, Default, PartialEq, Eq)]
struct Units<'a> {
    slice: Option<&'a str>,
    unit: Option<&'a str>,
}

/// Slices group units and say *where* a cgroup sits (`system.slice`, a pod's
/// slice); services and scopes are *what* runs (`nginx.service`,
/// `session-3.scope`, a container's scope). Both are useful, so both are
/// labels. Components below a unit that are not units themselves (a
/// service's own sub-cgroups) keep the unit's labels.
fn systemd_units(path: &str) -> Units<'_> {
    let mut units = Units::default();
    for component in components(path) {
        if is_unit_name(component, ".slice") {
            units.slice = Some(component);
        } else if is_unit_name(component, ".service") || is_unit_name(component, ".scope") {
            units.unit = Some(component);
        }
    }
    units
}

/// A systemd unit name with `suffix`: a non-empty stem of the characters
/// systemd allows in unit names (ASCII letters and digits, `:-_.\@`; other
/// characters are `\xNN`-escaped), at most 255 bytes in all.
fn is_unit_name(name: &str, suffix: &str) -> bool {
    name.len() <= 255
        && name.strip_suffix(suffix).is_some_and(|stem| {
            !stem.is_empty()
                && stem
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b))
        })
}

/// Decodes systemd's `\xNN` escapes (`system-systemd\x2dcoredump.slice` →
/// `system-systemd-coredump.slice`), so that label values read as the
/// names people type into `systemctl`-free contexts (dashboards, alerts).
///
/// If the decoded bytes are not UTF-8, or spell a control character
/// (`\x0a`, or `\xc2\x80`: U+0080), the name is kept as written, so that a
/// label value never holds one.
fn unescape(name: &str) -> String {
    if !name.contains("\\x") {
        return name.to_owned();
    }
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let [b'\\', b'x', hi, lo, ..] = bytes[i..]
            && let (Some(hi), Some(lo)) = (hex_value(hi), hex_value(lo))
        {
            out.push(hi << 4 | lo);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(decoded) if !decoded.chars().any(char::is_control) => decoded,
        _ => name.to_owned(),
    }
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

// ---- containers -----------------------------------------------------------

/// A container cgroup found in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Container<'a> {
    id: &'a str,
    runtime: Option<&'static str>,
}

/// Name prefixes of container cgroups, each followed by the 64-hex ID and,
/// with a systemd cgroup manager, `.scope`:
///
/// * `cri-containerd-<id>.scope`: containerd's CRI plugin (Kubernetes).
/// * `nerdctl-<id>.scope`: containerd through nerdctl.
/// * `crio-<id>.scope`, or `crio-<id>` with CRI-O's cgroupfs manager.
/// * `crio-conmon-<id>.scope`: CRI-O's per-container monitor (conmon), when
///   `conmon_cgroup = "pod"` puts it next to the container. It is labelled
///   with the ID of the container it monitors, and a distinct runtime, so
///   that `container_runtime="crio"` selects exactly the containers while
///   `sum by (container_id)` still charges the monitor to its container.
/// * `docker-<id>.scope`: Docker (and cri-dockerd) with the systemd driver.
/// * `libpod-<id>.scope`, or `libpod-<id>` with cgroupfs: Podman.
/// * `libpod-conmon-<id>.scope`: Podman's conmon, as for CRI-O.
///
/// Longer prefixes first, although the ID check alone keeps `crio-` from
/// taking `crio-conmon-…` (`conmon-…` is not hex).
const CONTAINER_PREFIXES: [(&str, &str); 7] = [
    ("cri-containerd-", "containerd"),
    ("nerdctl-", "containerd"),
    ("crio-conmon-", "crio-conmon"),
    ("crio-", "crio"),
    ("docker-", "docker"),
    ("libpod-conmon-", "podman-conmon"),
    ("libpod-", "podman"),
];

/// The innermost container cgroup on `path`.
fn container(path: &str) -> Option<Container<'_>> {
    let mut found = None;
    let mut parent = "";
    for component in components(path) {
        if let Some(container) = container_component(parent, component) {
            found = Some(container);
        }
        parent = component;
    }
    found
}

/// A container cgroup name: a known prefix with an ID, or a bare ID.
///
/// A bare 64-hex name is what Docker's cgroupfs driver (`/docker/<id>`) and
/// containerd or Docker under kubelet's cgroupfs driver
/// (`/kubepods/burstable/pod<uid>/<id>`) create; nothing else names cgroups
/// that way. Only the `docker` parent tells the runtime; otherwise it is
/// left out rather than guessed.
fn container_component<'a>(parent: &str, component: &'a str) -> Option<Container<'a>> {
    if is_container_id(component) {
        let runtime = (parent == "docker").then_some("docker");
        return Some(Container {
            id: component,
            runtime,
        });
    }
    let name = component.strip_suffix(".scope").unwrap_or(component);
    CONTAINER_PREFIXES.iter().find_map(|&(prefix, runtime)| {
        let id = name.strip_prefix(prefix)?;
        is_container_id(id).then_some(Container {
            id,
            runtime: Some(runtime),
        })
    })
}

/// Every runtime above names cgroups with the full 256-bit container ID in
/// lowercase hex. Short IDs (12 hex) are a CLI display convention and never
/// appear in cgroup names; accepting them would let names like
/// `docker-cafebabecafe.scope` through.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(is_lower_hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    use Extractor::{Containers, Kubernetes, Systemd};

    const ID: &str = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970";
    const ID2: &str = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d";
    const UID: &str = "07fc7cef-656b-48a7-929d-2734c2b4498e";
    const UID_SYSTEMD: &str = "07fc7cef_656b_48a7_929d_2734c2b4498e";
    /// kubelet's UID for a static pod: a hash, not a UUID.
    const STATIC_UID: &str = "d76e26fba3bf2bfd215eb29011d55250";

    fn labels(path: &str, enabled: &[Extractor]) -> Vec<(&'static str, String)> {
        extract(path, enabled)
    }

    /// `extract` with every extractor, as `name=value` strings for terse
    /// assertions.
    #[track_caller]
    fn all(path: &str) -> Vec<String> {
        let labels = extract(path, &Extractor::ALL);
        check_invariants(&labels);
        labels.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    #[track_caller]
    fn check_invariants(labels: &[(&'static str, String)]) {
        // Names from the fixed set, in its order, each at most once, no
        // empty values, no control characters.
        let positions: Vec<usize> = labels
            .iter()
            .map(|(name, _)| {
                LABEL_NAMES
                    .iter()
                    .position(|n| n == name)
                    .unwrap_or_else(|| panic!("unexpected label {name}"))
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{labels:?}");
        assert!(labels.iter().all(|(_, v)| !v.is_empty()), "{labels:?}");
        assert!(
            labels.iter().all(|(_, v)| !v.chars().any(char::is_control)),
            "{labels:?}"
        );
    }

    // ---- API ------------------------------------------------------------

    #[test]
    fn names_round_trip() {
        for e in Extractor::ALL {
            assert_eq!(Extractor::parse(e.name()), Some(e));
            assert_eq!(e.to_string(), e.name());
        }
        assert_eq!(Extractor::parse("Kubernetes"), None);
        assert_eq!(Extractor::parse("k8s"), None);
        assert_eq!(Extractor::parse(""), None);
    }

    #[test]
    fn label_names_are_the_union_in_order_and_never_collide() {
        let concatenated: Vec<&str> = Extractor::ALL
            .iter()
            .flat_map(|e| e.label_names().iter().copied())
            .collect();
        assert_eq!(concatenated, LABEL_NAMES);
        for reserved in [
            "cgroup", "group", "event", "cpu", "reason", "le", "quantile",
        ] {
            assert!(!LABEL_NAMES.contains(&reserved), "{reserved}");
        }
        for name in LABEL_NAMES {
            // Valid Prometheus label names, not reserved (`__`).
            let mut chars = name.chars();
            assert!(chars.next().is_some_and(|c| c.is_ascii_lowercase()));
            assert!(chars.all(|c| c.is_ascii_lowercase() || c == '_'));
            assert!(!name.starts_with("__"));
        }
    }

    #[test]
    fn nothing_enabled_nothing_extracted() {
        let path =
            format!("/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/cri-containerd-{ID}.scope");
        assert!(labels(&path, &[]).is_empty());
    }

    #[test]
    fn order_is_fixed_whatever_the_enabled_order() {
        let path =
            format!("/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/cri-containerd-{ID}.scope");
        let forward = labels(&path, &[Kubernetes, Systemd, Containers]);
        let backward = labels(&path, &[Containers, Systemd, Kubernetes, Containers]);
        assert_eq!(forward, backward);
        check_invariants(&forward);
        // No slice or unit: they would copy pod_uid and container_id.
        assert_eq!(forward.len(), 4);
    }

    #[test]
    fn each_extractor_alone() {
        let path = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{ID}.scope"
        );
        let names = |enabled: &[Extractor]| -> Vec<&str> {
            labels(&path, enabled).iter().map(|(k, _)| *k).collect()
        };
        assert_eq!(names(&[Kubernetes]), ["pod_uid", "qos_class"]);
        assert_eq!(names(&[Systemd]), ["slice", "unit"]);
        assert_eq!(names(&[Containers]), ["container_id", "container_runtime"]);
    }

    // ---- Kubernetes, systemd driver --------------------------------------

    #[test]
    fn kubernetes_systemd_driver_containerd() {
        let pod = format!("kubepods-burstable-pod{UID_SYSTEMD}.slice");
        assert_eq!(
            all(&format!(
                "/kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{ID}.scope"
            )),
            [
                format!("pod_uid={UID}"),
                "qos_class=burstable".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=containerd".to_owned(),
            ]
        );
        // The pod cgroup itself: no container, no unit.
        assert_eq!(
            all(&format!("/kubepods.slice/kubepods-burstable.slice/{pod}")),
            [format!("pod_uid={UID}"), "qos_class=burstable".to_owned()]
        );
    }

    #[test]
    fn kubernetes_qos_classes_systemd() {
        let table = [
            (
                format!("/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice"),
                "guaranteed",
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice"
                ),
                "burstable",
            ),
            (
                format!(
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_SYSTEMD}.slice/crio-{ID}.scope"
                ),
                "besteffort",
            ),
        ];
        for (path, qos) in table {
            assert_eq!(
                labels(&path, &[Kubernetes]),
                [("pod_uid", UID.to_owned()), ("qos_class", qos.to_owned())],
                "{path}"
            );
        }
    }

    #[test]
    fn kubernetes_systemd_driver_crio_and_conmon() {
        let base = format!(
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_SYSTEMD}.slice"
        );
        let container = |path: String| labels(&path, &[Containers]);
        assert_eq!(
            container(format!("{base}/crio-{ID}.scope")),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "crio".to_owned())
            ]
        );
        // crun on cgroup v2 runs the payload in a `container` sub-cgroup.
        assert_eq!(
            container(format!("{base}/crio-{ID}.scope/container")),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "crio".to_owned())
            ]
        );
        assert_eq!(
            container(format!("{base}/crio-conmon-{ID}.scope")),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "crio-conmon".to_owned())
            ]
        );
        // conmon_cgroup = "system.slice": no pod, still the container's ID.
        assert_eq!(
            all(&format!("/system.slice/crio-conmon-{ID}.scope")),
            [
                "slice=system.slice".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=crio-conmon".to_owned(),
            ]
        );
    }

    #[test]
    fn kubernetes_systemd_driver_docker() {
        let path = format!("/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/docker-{ID}.scope");
        assert_eq!(
            all(&path),
            [
                format!("pod_uid={UID}"),
                "qos_class=guaranteed".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=docker".to_owned(),
            ]
        );
    }

    #[test]
    fn kubernetes_under_another_root() {
        // kind and `--cgroup-root=/kubelet`: every slice name is prefixed.
        let path = format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{ID}.scope"
        );
        let got = labels(&path, &[Kubernetes, Containers]);
        assert_eq!(
            got,
            [
                ("pod_uid", UID.to_owned()),
                ("qos_class", "burstable".to_owned()),
                ("container_id", ID.to_owned()),
                ("container_runtime", "containerd".to_owned()),
            ]
        );
        // A kind node seen from the host: the node is itself a Docker
        // container; the innermost container is the pod's.
        let nested = format!("/system.slice/docker-{ID2}.scope{path}");
        assert_eq!(labels(&nested, &[Kubernetes, Containers]), got);
        let guaranteed = format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{UID_SYSTEMD}.slice"
        );
        assert_eq!(
            labels(&guaranteed, &[Kubernetes]),
            [
                ("pod_uid", UID.to_owned()),
                ("qos_class", "guaranteed".to_owned())
            ]
        );
        // cgroupfs driver with --cgroup-root=/kubelet.
        let cgroupfs = format!("/kubelet/kubepods/besteffort/pod{UID}/{ID}");
        assert_eq!(
            labels(&cgroupfs, &[Kubernetes]),
            [
                ("pod_uid", UID.to_owned()),
                ("qos_class", "besteffort".to_owned())
            ]
        );
    }

    #[test]
    fn kubernetes_static_pod_uid() {
        assert_eq!(
            all(&format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice"
            )),
            [
                format!("pod_uid={STATIC_UID}"),
                "qos_class=burstable".to_owned(),
            ]
        );
        assert_eq!(
            all(&format!("/kubepods/besteffort/pod{STATIC_UID}/{ID}")),
            [
                format!("pod_uid={STATIC_UID}"),
                "qos_class=besteffort".to_owned(),
                format!("container_id={ID}"),
            ]
        );
    }

    // ---- Kubernetes, cgroupfs driver -------------------------------------

    #[test]
    fn kubernetes_cgroupfs_driver() {
        let table = [
            (format!("/kubepods/pod{UID}/{ID}"), "guaranteed"),
            (format!("/kubepods/burstable/pod{UID}/{ID}"), "burstable"),
            (format!("/kubepods/besteffort/pod{UID}/{ID}"), "besteffort"),
        ];
        for (path, qos) in table {
            assert_eq!(
                all(&path),
                [
                    format!("pod_uid={UID}"),
                    format!("qos_class={qos}"),
                    // The runtime is not in the name.
                    format!("container_id={ID}"),
                ],
                "{path}"
            );
        }
        // CRI-O with its cgroupfs manager prefixes the ID, without `.scope`.
        assert_eq!(
            all(&format!("/kubepods/burstable/pod{UID}/crio-{ID}")),
            [
                format!("pod_uid={UID}"),
                "qos_class=burstable".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=crio".to_owned(),
            ]
        );
        assert_eq!(
            labels(
                &format!("/kubepods/pod{UID}/crio-conmon-{ID}"),
                &[Containers]
            ),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "crio-conmon".to_owned())
            ]
        );
    }

    #[test]
    fn kubernetes_look_alikes() {
        let none = [
            // UID not a UUID, wrong separators, uppercase, truncated.
            "/kubepods.slice/kubepods-podfoo.slice".to_owned(),
            format!("/kubepods.slice/kubepods-pod{UID}.slice"),
            format!(
                "/kubepods.slice/kubepods-pod{}.slice",
                UID_SYSTEMD.to_uppercase()
            ),
            format!("/kubepods.slice/kubepods-pod{}.slice", &UID_SYSTEMD[1..]),
            format!("/kubepods.slice/kubepods-pod{STATIC_UID}0.slice"),
            format!("/kubepods/pod{UID_SYSTEMD}"),
            // `kubepods` not a whole word, unknown tier, missing `pod`.
            format!("/mykubepods-pod{UID_SYSTEMD}.slice"),
            format!("/kubepods-guaranteed-pod{UID_SYSTEMD}.slice"),
            format!("/kubepods-burstable-{UID_SYSTEMD}.slice"),
            format!("/kubepods-burstable-pods{UID_SYSTEMD}.slice"),
            // Not a slice.
            format!("/kubepods-pod{UID_SYSTEMD}.scope"),
            format!("/kubepods-pod{UID_SYSTEMD}"),
            // cgroupfs: `pod<uid>` outside `kubepods`, or under a wrong tier.
            format!("/pod{UID}"),
            format!("/system.slice/pod{UID}"),
            format!("/kubepods/guaranteed/pod{UID}"),
            format!("/other/burstable/pod{UID}"),
            format!("/kubepods/burstable/x/pod{UID}"),
            // The tiers themselves carry no pod.
            "/kubepods.slice/kubepods-burstable.slice".to_owned(),
            "/kubepods/burstable".to_owned(),
            "/kubepods.slice".to_owned(),
        ];
        for path in none {
            assert_eq!(labels(&path, &[Kubernetes]), [], "{path}");
        }
    }

    // ---- systemd -------------------------------------------------------

    #[test]
    fn systemd_units_and_slices() {
        let table: [(&str, &[&str]); 10] = [
            (
                "/system.slice/nginx.service",
                &["slice=system.slice", "unit=nginx.service"],
            ),
            (
                "/user.slice/user-1000.slice/session-3.scope",
                &["slice=user-1000.slice", "unit=session-3.scope"],
            ),
            (
                "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1f2e.scope",
                &[
                    "slice=app-org.gnome.Terminal.slice",
                    "unit=vte-spawn-1f2e.scope",
                ],
            ),
            (
                // The user manager's own slices: the unit is still the manager.
                "/user.slice/user-1000.slice/user@1000.service/app.slice",
                &["slice=app.slice", "unit=user@1000.service"],
            ),
            ("/init.scope", &["unit=init.scope"]),
            ("/system.slice", &["slice=system.slice"]),
            (
                "/system.slice/system-getty.slice/getty@tty1.service",
                &["slice=system-getty.slice", "unit=getty@tty1.service"],
            ),
            (
                // A service's own sub-cgroups keep the service's labels.
                "/system.slice/containerd.service/workers/w1",
                &["slice=system.slice", "unit=containerd.service"],
            ),
            ("/", &[]),
            ("", &[]),
        ];
        for (path, want) in table {
            assert_eq!(all(path), want, "{path}");
        }
    }

    #[test]
    fn systemd_escapes_are_decoded() {
        assert_eq!(
            all(
                "/system.slice/system-systemd\\x2dcoredump.slice/systemd-coredump@0-1234-0.service"
            ),
            [
                "slice=system-systemd-coredump.slice",
                "unit=systemd-coredump@0-1234-0.service"
            ]
        );
        assert_eq!(
            all("/system.slice/dev-disk-by\\x2duuid-1234.swap/x\\x2dy.service"),
            ["slice=system.slice", "unit=x-y.service"]
        );
        // Non-ASCII names, escaped byte by byte as UTF-8.
        assert_eq!(
            all("/system.slice/caf\\xc3\\xa9.service"),
            ["slice=system.slice", "unit=café.service"]
        );
        assert_eq!(unescape("a\\x5cb.service"), "a\\b.service");
        // Control characters stay escaped; broken escapes stay as written.
        assert_eq!(unescape("a\\x0ab.service"), "a\\x0ab.service");
        assert_eq!(unescape("a\\x7f.service"), "a\\x7f.service");
        assert_eq!(unescape("a\\xzz.service"), "a\\xzz.service");
        assert_eq!(unescape("a\\x2"), "a\\x2");
        assert_eq!(unescape("a\\x"), "a\\x");
        assert_eq!(unescape("\\"), "\\");
        // Invalid UTF-8 after decoding: keep the name as written.
        assert_eq!(unescape("a\\xff.service"), "a\\xff.service");
    }

    #[test]
    fn systemd_look_alikes() {
        let none = [
            "/.service",
            "/.scope",
            "/.slice",
            "/system.slicex",
            "/foo.services",
            "/my service.service",
            "/über.service",
            "/a/b.mount",
            "/a/dev-sda.swap",
            "/a/sockets.target",
        ];
        for path in none {
            assert_eq!(labels(path, &[Systemd]), [], "{path}");
        }
        let long = format!("/{}.service", "a".repeat(248));
        assert_eq!(labels(&long, &[Systemd]), [], "256 bytes");
        let longest = format!("/{}.service", "a".repeat(247));
        assert_eq!(labels(&longest, &[Systemd]).len(), 1, "255 bytes");
        // The root slice is a slice.
        assert_eq!(all("/-.slice"), ["slice=-.slice"]);
    }

    /// A pod's slice and a container's scope are what pod_uid and
    /// container_id say: copied as slice and unit only when those
    /// extractors are off.
    #[test]
    fn systemd_labels_do_not_copy_pod_and_container_identity() {
        let path = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{ID}.scope"
        );
        let names = |enabled: &[Extractor]| -> Vec<&str> {
            extract(&path, enabled).iter().map(|(k, _)| *k).collect()
        };
        assert_eq!(names(&[Systemd]), ["slice", "unit"]);
        assert_eq!(
            names(&[Systemd, Kubernetes]),
            ["pod_uid", "qos_class", "unit"]
        );
        assert_eq!(
            names(&[Systemd, Containers]),
            ["slice", "container_id", "container_runtime"]
        );
        assert_eq!(
            names(&Extractor::ALL),
            ["pod_uid", "qos_class", "container_id", "container_runtime"]
        );
        // A service is no container: its unit stays.
        assert_eq!(
            all("/system.slice/containerd.service"),
            ["slice=system.slice", "unit=containerd.service"]
        );
    }

    // ---- containers outside Kubernetes -----------------------------------

    #[test]
    fn docker() {
        assert_eq!(
            all(&format!("/system.slice/docker-{ID}.scope")),
            [
                "slice=system.slice".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=docker".to_owned(),
            ]
        );
        // cgroupfs driver.
        assert_eq!(
            all(&format!("/docker/{ID}")),
            [
                format!("container_id={ID}"),
                "container_runtime=docker".to_owned()
            ]
        );
        // Rootless Docker, under the user's manager.
        assert_eq!(
            labels(
                &format!("/user.slice/user-1000.slice/user@1000.service/docker-{ID}.scope"),
                &[Containers]
            ),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "docker".to_owned())
            ]
        );
        // Docker in Docker: the innermost container.
        assert_eq!(
            labels(
                &format!("/system.slice/docker-{ID2}.scope/docker/{ID}"),
                &[Containers]
            ),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "docker".to_owned())
            ]
        );
        // A container running systemd: its init.scope is the unit, the
        // container is still the enclosing one.
        assert_eq!(
            all(&format!("/system.slice/docker-{ID}.scope/init.scope")),
            [
                "slice=system.slice".to_owned(),
                "unit=init.scope".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=docker".to_owned(),
            ]
        );
    }

    #[test]
    fn podman() {
        assert_eq!(
            all(&format!("/machine.slice/libpod-{ID}.scope")),
            [
                "slice=machine.slice".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=podman".to_owned(),
            ]
        );
        assert_eq!(
            labels(
                &format!("/machine.slice/libpod-{ID}.scope/container"),
                &[Containers]
            ),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "podman".to_owned())
            ]
        );
        assert_eq!(
            labels(
                &format!("/machine.slice/libpod-conmon-{ID}.scope"),
                &[Containers]
            ),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "podman-conmon".to_owned())
            ]
        );
        // Rootless, and in a pod (`machine-libpod_pod_<id>.slice`).
        assert_eq!(
            all(&format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"
            )),
            [
                "slice=user.slice".to_owned(),
                format!("container_id={ID}"),
                "container_runtime=podman".to_owned(),
            ]
        );
        assert_eq!(
            all(&format!(
                "/machine.slice/machine-libpod_pod_{ID2}.slice/libpod-{ID}.scope"
            )),
            [
                format!("slice=machine-libpod_pod_{ID2}.slice"),
                format!("container_id={ID}"),
                "container_runtime=podman".to_owned(),
            ]
        );
        // cgroupfs manager.
        assert_eq!(
            all(&format!("/libpod_parent/libpod-{ID}")),
            [
                format!("container_id={ID}"),
                "container_runtime=podman".to_owned()
            ]
        );
    }

    #[test]
    fn containerd_and_crio_outside_kubernetes() {
        assert_eq!(
            labels(&format!("/system.slice/nerdctl-{ID}.scope"), &[Containers]),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "containerd".to_owned())
            ]
        );
        assert_eq!(
            labels(
                &format!("/system.slice/cri-containerd-{ID}.scope"),
                &[Containers]
            ),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "containerd".to_owned())
            ]
        );
        assert_eq!(
            labels(&format!("/crio-{ID}.scope"), &[Containers]),
            [
                ("container_id", ID.to_owned()),
                ("container_runtime", "crio".to_owned())
            ]
        );
        // A bare ID anywhere is a container, runtime unknown.
        assert_eq!(
            all(&format!("/default/{ID}")),
            [format!("container_id={ID}")]
        );
    }

    #[test]
    fn container_look_alikes() {
        let none = [
            // Short, long, uppercase or non-hex IDs.
            format!("/system.slice/docker-{}.scope", &ID[..12]),
            format!("/system.slice/docker-{}.scope", &ID[..63]),
            format!("/system.slice/docker-{ID}0.scope"),
            format!("/system.slice/docker-{}.scope", ID.to_uppercase()),
            format!("/system.slice/docker-{}g.scope", &ID[..63]),
            format!("/docker/{}", &ID[..12]),
            // Mount units and other names that embed an ID.
            format!(
                "/system.slice/run-containerd-io.containerd.runtime.v2.task-k8s.io-{ID}-rootfs.mount"
            ),
            format!("/system.slice/var-lib-docker-overlay2-{ID}-merged.mount"),
            format!("/system.slice/docker-{ID}.mount"),
            format!("/system.slice/docker-{ID}.service"),
            format!("/system.slice/docker-{ID}.scope.scope"),
            // Unknown or misspelt runtime prefixes.
            format!("/system.slice/containerd-{ID}.scope"),
            format!("/system.slice/cri-o-{ID}.scope"),
            format!("/system.slice/podman-{ID}.scope"),
            format!("/system.slice/docker{ID}.scope"),
            format!("/system.slice/docker-conmon-{ID}.scope"),
            format!("/no-crio-conmon-{ID}"),
            format!("/crio-conmon-{}", &ID[..60]),
            // Docker's parent but not an ID.
            "/docker/abc".to_owned(),
            "/docker".to_owned(),
        ];
        for path in none {
            assert_eq!(labels(&path, &[Containers]), [], "{path}");
        }
    }

    // ---- robustness ------------------------------------------------------

    #[test]
    fn path_shapes_do_not_matter() {
        let want = all(&format!("/system.slice/docker-{ID}.scope"));
        for path in [
            format!("system.slice/docker-{ID}.scope"),
            format!("//system.slice//docker-{ID}.scope/"),
        ] {
            assert_eq!(all(&path), want, "{path}");
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        let odd = [
            "/",
            "//",
            "\\",
            "\\x",
            "/\\xf0\\x9f.service",
            "/é/ü.slice/\u{0}.scope",
            "/kubepods-pod.slice",
            "/-pod.slice",
            "/pod",
            "/kubepods/pod",
            "/.scope/.slice/.service",
            "/crio-.scope",
            "/\u{202e}.service",
            "/\\xc2\\x80.scope/",
        ];
        for path in odd {
            check_invariants(&extract(path, &Extractor::ALL));
        }
        // Every prefix of a real path, cut at every byte boundary.
        let real = format!(
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_SYSTEMD}.slice/crio-conmon-{ID}.scope/x\\x2dy.service"
        );
        for end in 0..=real.len() {
            check_invariants(&extract(&real[..end], &Extractor::ALL));
        }
    }

    #[test]
    fn arbitrary_paths_never_panic() {
        use proptest::prelude::*;
        let config = ProptestConfig {
            cases: 2_000,
            ..ProptestConfig::default()
        };
        proptest!(config, |(path in "(/|[a-f0-9_-]{0,70}|\\\\x[0-9a-f]{0,2}|kubepods|pod|crio-|docker-|\\.scope|\\.slice|\\.service|.){0,16}")| {
            check_invariants(&extract(&path, &Extractor::ALL));
        });
    }
}
