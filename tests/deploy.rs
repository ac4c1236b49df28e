//! The deployment files are checked by the tools that will read them:
//! promtool, systemd-analyze, cgperf's own config validation, and a run of
//! cgperf with exactly the privileges the systemd unit grants.

mod common;

use common::*;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(deploy(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn tool(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?} runs: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn prometheus_config_and_rules_pass_promtool() {
    let (ok, said) = tool(
        Command::new("promtool")
            .arg("check")
            .arg("config")
            .arg(deploy("prometheus/prometheus.yml")),
    );
    assert!(ok, "promtool check config:\n{said}");
    assert!(
        said.contains("1 rule files found") && said.contains("4 rules found"),
        "the config loads the recording rules:\n{said}"
    );
    let (ok, said) = tool(
        Command::new("promtool")
            .arg("check")
            .arg("rules")
            .arg(deploy("prometheus/rules.yml")),
    );
    assert!(
        ok && said.contains("SUCCESS: 4 rules found"),
        "promtool check rules:\n{said}"
    );
}

/// The value of `key=` lines in a unit file's `[Service]` section.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

#[test]
fn systemd_unit_verifies_cleanly() {
    let unit = read("systemd/cgperf.service");
    // systemd-analyze checks that ExecStart exists: point it at the build.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cgperf.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/cgperf", env!("CARGO_BIN_EXE_cgperf")),
    )
    .expect("write");
    let (ok, said) = tool(Command::new("systemd-analyze").arg("verify").arg(&path));
    assert!(ok, "systemd-analyze verify:\n{said}");
    assert!(
        said.trim().is_empty(),
        "systemd-analyze has warnings:\n{said}"
    );
    assert_eq!(
        unit_values(&unit, "AmbientCapabilities"),
        ["CAP_PERFMON CAP_DAC_READ_SEARCH"]
    );
    assert_eq!(
        unit_values(&unit, "CapabilityBoundingSet"),
        ["CAP_PERFMON CAP_DAC_READ_SEARCH"]
    );
    for hardening in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
    ] {
        assert!(unit.lines().any(|l| l == hardening), "missing {hardening}");
    }
}

#[test]
fn the_units_capabilities_are_enough_to_count_exactly_as_nobody() {
    let unit = read("systemd/cgperf.service");
    let caps = unit_values(&unit, "AmbientCapabilities").join(" ");
    let caps: Vec<String> = caps
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect();
    let caps = caps.join(",");
    // As root, make sure tracefs is mounted: the unit does not mount it.
    cgperf::tracefs::Tracefs::locate().expect("tracefs mounted");
    let cg = TestCgroup::create("cgperf-nobody");
    let config = config_file(&format!(
        "interval: 200ms\ngroups:\n  sched: [context-switches]\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {}\n",
        cg.rel
    ));
    // Readable by nobody.
    std::fs::set_permissions(
        config.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg(env!("CARGO_BIN_EXE_cgperf"))
        .arg(format!("--config.file={}", config.path().display()));
    let exporter = Exporter::spawn(cmd);
    let tp = [
        ("cgroup", cg.rel.as_str()),
        ("event", "syscalls:sys_enter_getppid"),
    ];
    let body = exporter.wait_for("the cgroup", |b| {
        value(b, "cgperf_events_total", &tp).is_some()
    });
    assert_eq!(
        value(&body, "cgperf_group_supported", &[("group", "sched")]),
        Some(1.0),
        "{body}"
    );
    getppid_workload(Some(&cg.dir), 2500);
    let body = exporter.wait_collections(2);
    assert_eq!(
        value(&body, "cgperf_events_total", &tp),
        Some(2500.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "cgperf_open_errors_total", &[]),
        None,
        "{body}"
    );
}

#[derive(Deserialize)]
struct Object {
    kind: String,
    metadata: Metadata,
    #[serde(default)]
    data: BTreeMap<String, String>,
    spec: Option<DaemonSetSpec>,
}

#[derive(Deserialize)]
struct Metadata {
    name: String,
    namespace: Option<String>,
}

#[derive(Deserialize)]
struct DaemonSetSpec {
    template: Option<PodTemplate>,
}

#[derive(Deserialize)]
struct PodTemplate {
    spec: PodSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    containers: Vec<Container>,
    volumes: Vec<Volume>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    args: Vec<String>,
    security_context: SecurityContext,
    resources: Resources,
    readiness_probe: Probe,
    liveness_probe: Probe,
    volume_mounts: Vec<VolumeMount>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecurityContext {
    privileged: bool,
    allow_privilege_escalation: bool,
    read_only_root_filesystem: bool,
    capabilities: Capabilities,
}

#[derive(Deserialize)]
struct Capabilities {
    drop: Vec<String>,
    add: Vec<String>,
}

#[derive(Deserialize)]
struct Resources {
    requests: BTreeMap<String, String>,
    limits: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    http_get: HttpGet,
}

#[derive(Deserialize)]
struct HttpGet {
    path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeMount {
    name: String,
    mount_path: String,
    read_only: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Volume {
    name: String,
    host_path: Option<HostPath>,
}

#[derive(Deserialize)]
struct HostPath {
    path: String,
}

fn object(path: &str) -> Object {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn kubernetes_daemonset_uses_capabilities_and_read_only_host_mounts() {
    let ds = object("kubernetes/daemonset.yaml");
    assert_eq!(
        (ds.kind.as_str(), ds.metadata.namespace.as_deref()),
        ("DaemonSet", Some("cgperf"))
    );
    let pod = ds.spec.and_then(|s| s.template).expect("pod template").spec;
    let c = &pod.containers[0];
    let sc = &c.security_context;
    assert!(!sc.privileged && !sc.allow_privilege_escalation && sc.read_only_root_filesystem);
    assert_eq!(sc.capabilities.drop, ["ALL"]);
    assert_eq!(sc.capabilities.add, ["PERFMON", "DAC_READ_SEARCH"]);
    assert!(c.resources.requests.contains_key("cpu") && c.resources.limits.contains_key("memory"));
    assert_eq!(
        (
            c.readiness_probe.http_get.path.as_str(),
            c.liveness_probe.http_get.path.as_str()
        ),
        ("/", "/")
    );
    for (host, mount) in [
        ("/sys/fs/cgroup", "/sys/fs/cgroup"),
        ("/sys/kernel/tracing", "/sys/kernel/tracing"),
    ] {
        let volume = pod
            .volumes
            .iter()
            .find(|v| v.host_path.as_ref().is_some_and(|h| h.path == host))
            .unwrap_or_else(|| panic!("no hostPath volume for {host}"));
        let m = c
            .volume_mounts
            .iter()
            .find(|m| m.name == volume.name)
            .expect("mounted");
        assert!(
            m.read_only && m.mount_path == mount,
            "{host} mounted read-only at {mount}"
        );
    }
    let config_mount = c
        .volume_mounts
        .iter()
        .find(|m| m.name == "config")
        .expect("config mounted");
    let config_arg = format!("--config.file={}/cgperf.yaml", config_mount.mount_path);
    assert!(c.args.contains(&config_arg), "{:?}", c.args);
    for other in ["service.yaml", "podmonitor.yaml", "namespace.yaml"] {
        let o = object(&format!("kubernetes/{other}"));
        assert_eq!(o.metadata.name, "cgperf", "{other}");
    }
}

#[test]
fn kubernetes_configmap_holds_a_valid_cgperf_config() {
    let cm = object("kubernetes/configmap.yaml");
    assert_eq!(cm.kind, "ConfigMap");
    let text = cm.data.get("cgperf.yaml").expect("cgperf.yaml key");
    let file = config_file(text);
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 0, "{out}{err}");
    let config = cgperf::config::parse("configmap", text).expect("valid");
    assert!(!config.labels.is_empty(), "pods' cgroups are labelled");
    let pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice";
    for path in [
        pod,
        "/kubepods/besteffort/pod1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    ] {
        assert!(
            config.cgroups.iter().any(|s| s.pattern.matches(path)),
            "{path} is selected"
        );
    }
}

#[derive(Deserialize)]
struct Collector {
    receivers: BTreeMap<String, serde::de::IgnoredAny>,
    processors: BTreeMap<String, serde::de::IgnoredAny>,
    exporters: BTreeMap<String, serde::de::IgnoredAny>,
    service: CollectorService,
}

#[derive(Deserialize)]
struct CollectorService {
    pipelines: BTreeMap<String, Pipeline>,
}

#[derive(Deserialize)]
struct Pipeline {
    receivers: Vec<String>,
    processors: Vec<String>,
    exporters: Vec<String>,
}

#[test]
fn otel_collector_config_names_real_components_consistently() {
    let c: Collector =
        serde_saphyr::from_str(&read("otel-collector/config.yaml")).expect("valid YAML");
    // Component types of the Collector distributions (core and contrib).
    const KNOWN: &[&str] = &[
        "otlp",
        "batch",
        "memory_limiter",
        "prometheusremotewrite",
        "prometheus",
        "debug",
    ];
    let kind = |name: &str| name.split('/').next().unwrap_or(name).to_string();
    for name in c
        .receivers
        .keys()
        .chain(c.processors.keys())
        .chain(c.exporters.keys())
    {
        assert!(
            KNOWN.contains(&kind(name).as_str()),
            "unknown component {name}"
        );
    }
    let metrics = c
        .service
        .pipelines
        .get("metrics")
        .expect("a metrics pipeline");
    assert!(
        metrics
            .receivers
            .iter()
            .all(|r| c.receivers.contains_key(r))
    );
    assert!(
        metrics
            .processors
            .iter()
            .all(|p| c.processors.contains_key(p))
    );
    assert!(
        metrics
            .exporters
            .iter()
            .all(|e| c.exporters.contains_key(e))
    );
    assert!(metrics.receivers.contains(&"otlp".to_string()));
}

/// A capability set from a `/proc/PID/status` line (`CapEff:\t...`).
fn status_caps(pid: i32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in status"))
        .trim();
    u64::from_str_radix(hex, 16).expect("hex capability set")
}

#[test]
fn started_as_root_it_keeps_only_what_reload_and_hotplug_need() {
    // CAP_DAC_READ_SEARCH (2), CAP_IPC_LOCK (14), CAP_PERFMON (38).
    const KEPT: u64 = 1 << 2 | 1 << 14 | 1 << 38;
    let name = format!("cgperf-caps-{}", std::process::id());
    let rel = format!("/{name}");
    let first = format!(
        "interval: 200ms
tracepoints:
  - name: syscalls:sys_enter_getpriority
    by: [which]
    as: by_which
cgroups:
  - path: {rel}
"
    );
    let config = config_file(&first);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()));
    let exporter = Exporter::spawn(cmd);
    assert!(
        status_caps(exporter.pid(), "CapPrm:") & 1 << 21 == 0,
        "CAP_SYS_ADMIN must be gone"
    );
    for key in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(status_caps(exporter.pid(), key), KEPT, "{key}");
    }
    assert_eq!(status_caps(exporter.pid(), "CapInh:"), 0);

    // A cgroup that appears after the drop: found, opened, counted.
    let cg = TestCgroup::create_under("", &name);
    let by_which = [
        ("cgroup", rel.as_str()),
        ("event", "by_which"),
        ("which", "1"),
    ];
    exporter.wait_collections(2);
    in_child(Some(&cg.dir), || {
        for _ in 0..250 {
            // SAFETY: a raw syscall with integer arguments.
            unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PGRP, 0) };
        }
    });
    let body = exporter.wait_for("the new cgroup's samples", |b| {
        value(b, "cgperf_events_total", &by_which).is_some()
    });
    let body = if value(&body, "cgperf_events_total", &by_which) == Some(250.0) {
        body
    } else {
        exporter.wait_collections(2)
    };
    assert_eq!(
        value(&body, "cgperf_events_total", &by_which),
        Some(250.0),
        "{body}"
    );

    // A reload that adds a tracepoint: tracefs is read and a new event
    // opened with only the kept capabilities.
    let second = first.replace(
        "tracepoints:\n",
        "tracepoints:\n  - syscalls:sys_enter_getppid\n",
    );
    std::fs::write(config.path(), second).expect("rewrite config");
    // SAFETY: sending a signal to our own child.
    assert_eq!(unsafe { libc::kill(exporter.pid(), libc::SIGHUP) }, 0);
    let getppid = [
        ("cgroup", rel.as_str()),
        ("event", "syscalls:sys_enter_getppid"),
    ];
    exporter.wait_for("the reloaded tracepoint", |b| {
        value(b, "cgperf_events_total", &getppid).is_some()
    });
    getppid_workload(Some(&cg.dir), 1234);
    let body = exporter.wait_collections(3);
    assert_eq!(
        value(&body, "cgperf_events_total", &getppid),
        Some(1234.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "cgperf_events_total", &by_which),
        Some(250.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "cgperf_open_errors_total", &[]),
        None,
        "{body}"
    );
}
