//! The deployment files are checked by the tools that will read them:
//! promtool, systemd-analyze, cgperf's own config validation; and the
//! systemd unit and the DaemonSet are run exactly as written (every
//! argument, the user, the capabilities, the config where they read it),
//! counting a workload exactly, with every port and probe they name asked.

mod common;

use common::manifest::{Volume, VolumeMount};
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

/// The commands of the `sh` blocks of a page of docs/ (comments dropped),
/// as the pages show them to users.
fn docs_commands(page: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("docs/{page}: {e}"));
    text.split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .flat_map(str::lines)
        .map(|l| l.split(" #").next().expect("a command").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
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
        said.contains("2 rule files found")
            && said.contains("6 rules found")
            && said.contains("10 rules found"),
        "the config loads the recording and alerting rules:\n{said}"
    );
    for (file, rules) in [
        ("prometheus/rules.yml", 6),
        ("prometheus/alerts.yml", 10),
        ("prometheus/workload-alerts.yml", 2),
    ] {
        let (ok, said) = tool(
            Command::new("promtool")
                .arg("check")
                .arg("rules")
                .arg(deploy(file)),
        );
        assert!(
            ok && said.contains(&format!("SUCCESS: {rules} rules found")),
            "promtool check rules {file}:\n{said}"
        );
    }
}

/// The rules' unit tests, run as `alerts.yml`'s header says: every alert
/// fires on the series made for it and stays quiet on the others (a PMU-less
/// VM's `not_supported` groups), and the recording rules keep the labels
/// that name a cgroup and give no NaN for an idle one.
#[test]
fn the_rules_unit_tests_pass_promtool() {
    let (ok, said) = tool(
        Command::new("promtool")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["test", "rules", "deploy/prometheus/rules_test.yml"]),
    );
    assert!(
        ok && said.contains("SUCCESS"),
        "promtool test rules:\n{said}"
    );
    // Every alert is tested, firing.
    let tests = read("prometheus/rules_test.yml");
    for alert in alert_names() {
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "{alert} is never tested firing in rules_test.yml"
        );
    }
}

/// The alerts cgperf ships: those of `alerts.yml`, then the example
/// ones on workloads of `workload-alerts.yml`, as written.
fn alert_files() -> String {
    read("prometheus/alerts.yml") + &read("prometheus/workload-alerts.yml")
}

/// The names of [`alert_files`]'s alerts, in order.
fn alert_names() -> Vec<String> {
    alert_files()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_owned)
        .collect()
}

/// Every alert links a runbook page that exists, and every runbook page
/// belongs to an alert.
#[test]
fn every_alert_has_its_runbook_page() {
    let alerts = alert_files();
    let names = alert_names();
    assert!(names.iter().any(|n| n == "WorkloadIpcLow"), "{names:?}");
    assert!(names.len() >= 10, "{names:?}");
    let base = "https://github.com/cgperf/cgperf/blob/main/";
    let urls: Vec<&str> = alerts
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
        .collect();
    assert_eq!(urls.len(), names.len(), "one runbook_url per alert");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, url) in names.iter().zip(&urls) {
        let path = url
            .strip_prefix(base)
            .unwrap_or_else(|| panic!("{name}: {url} is not under {base}"));
        assert_eq!(path, format!("docs/runbooks/{name}.md"), "{name}");
        let page = std::fs::read_to_string(repo.join(path))
            .unwrap_or_else(|e| panic!("{name}: {path}: {e}"));
        assert!(page.starts_with(&format!("# {name}\n")), "{path}: title");
        for part in ["## Meaning", "## Check", "## Fix"] {
            assert!(page.contains(part), "{path}: no {part}");
        }
    }
    let pages = std::fs::read_dir(repo.join("docs/runbooks")).expect("docs/runbooks");
    for page in pages {
        let name = page
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        let alert = name.strip_suffix(".md").unwrap_or(&name);
        assert!(
            names.iter().any(|n| n == alert),
            "docs/runbooks/{name} has no alert"
        );
    }
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
    // CAP_SYS_ADMIN for Debian's and Ubuntu's kernels at their default
    // kernel.perf_event_paranoid: cgperf drops it at start elsewhere.
    assert_eq!(
        unit_values(&unit, "AmbientCapabilities"),
        ["CAP_BPF CAP_PERFMON CAP_DAC_READ_SEARCH CAP_SYS_ADMIN"]
    );
    assert_eq!(
        unit_values(&unit, "CapabilityBoundingSet"),
        ["CAP_BPF CAP_PERFMON CAP_DAC_READ_SEARCH CAP_SYS_ADMIN"]
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
    // As root, make sure tracefs is mounted: the unit does not mount it.
    cgperf::tracefs::Tracefs::locate().expect("tracefs mounted");
    let cg = TestCgroup::create("cgperf-nobody");
    let config = config_file(&format!(
        "interval: 200ms\nbackend: auto\ngroups:\n  sched: [context-switches]\ntracepoints: [syscalls:sys_enter_getppid]\ncgroups:\n  - path: {}\n",
        cg.rel
    ));
    // Readable by nobody.
    std::fs::set_permissions(
        config.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    let mut cmd = as_the_unit();
    cmd.arg(format!("--config.file={}", config.path().display()));
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
    assert_eq!(total(&body, "cgperf_open_errors_total"), 0.0, "{body}");
    // The unit's capabilities are enough for `auto` to count through BPF.
    auto_backend(&body);
}

/// cgperf as nobody with exactly the systemd unit's capabilities (ambient,
/// inheritable and bounding sets), through setpriv.
fn as_the_unit() -> Command {
    let unit = read("systemd/cgperf.service");
    let caps = unit_values(&unit, "AmbientCapabilities").join(" ");
    let caps: Vec<String> = caps
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect();
    let caps = caps.join(",");
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps=-all,{caps}"))
        .arg(format!("--ambient-caps=-all,{caps}"))
        .arg(format!("--bounding-set=-all,{caps}"))
        .arg(env!("CARGO_BIN_EXE_cgperf"));
    cmd
}

/// The getting-started page's `check` of config/example.yaml, run with the unit's
/// privileges: the example uses nothing the shipped unit cannot give
/// (no uprobes, which need CAP_SYS_ADMIN; no OTLP push to a collector that
/// is not there), so nothing is refused for permission; what is disabled
/// is only what this machine lacks (hardware counters and RAPL in a VM).
#[test]
fn the_example_config_checks_under_the_units_privileges() {
    let line = docs_commands("getting-started.md")
        .into_iter()
        .find(|l| l.starts_with("scripts/run check "))
        .expect("docs/getting-started.md checks the example config");
    let args: Vec<&str> = line
        .trim_start_matches("scripts/run ")
        .split_whitespace()
        .collect();
    assert_eq!(args, ["check", "--config.file=config/example.yaml"]);
    cgperf::tracefs::Tracefs::locate().expect("tracefs mounted");
    let out = as_the_unit()
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cgperf check runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.to_lowercase().contains("permission"), "{said}");
    assert!(!said.contains("otlp") && !said.contains("uprobe"), "{said}");
    // The groups that are off here are off for want of a PMU (hardware
    // counters, and the host's energy counters without RAPL), said so.
    for line in said.lines().filter(|l| l.starts_with('[')) {
        let no_pmu = line.contains("no counter for the event")
            || line.contains("no PMU `power` on this machine");
        assert!(no_pmu, "{line}\n{said}");
    }
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

fn object(path: &str) -> Object {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn kubernetes_daemonset_uses_capabilities_and_read_only_host_mounts() {
    let ds = object("kubernetes/base/daemonset.yaml");
    assert_eq!(
        (ds.kind.as_str(), ds.metadata.namespace.as_deref()),
        ("DaemonSet", Some("cgperf"))
    );
    let pod = ds.spec.and_then(|s| s.template).expect("pod template").spec;
    let c = &pod.containers[0];
    let sc = &c.security_context;
    assert!(!sc.privileged && !sc.allow_privilege_escalation && sc.read_only_root_filesystem);
    assert_eq!(sc.capabilities.drop, ["ALL"]);
    assert_eq!(
        sc.capabilities.add,
        ["BPF", "PERFMON", "DAC_READ_SEARCH", "SYS_ADMIN"]
    );
    assert!(c.resources.requests.contains_key("cpu") && c.resources.limits.contains_key("memory"));
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
    // Pod Security: capabilities beyond baseline's list, or a hostPath
    // volume, need the `privileged` level on the namespace.
    const BASELINE_CAPS: [&str; 13] = [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ];
    let beyond_baseline = sc
        .capabilities
        .add
        .iter()
        .any(|c| !BASELINE_CAPS.contains(&c.as_str()))
        || pod.volumes.iter().any(|v| v.host_path.is_some());
    let ns: Namespace =
        serde_saphyr::from_str(&read("kubernetes/base/namespace.yaml")).expect("Namespace");
    let level = if beyond_baseline {
        "privileged"
    } else {
        "baseline"
    };
    for mode in ["enforce", "warn", "audit"] {
        assert_eq!(
            ns.metadata
                .labels
                .get(&format!("pod-security.kubernetes.io/{mode}"))
                .map(String::as_str),
            Some(level),
            "{mode}"
        );
    }
    for other in [
        "base/service.yaml",
        "prometheus-operator/podmonitor.yaml",
        "base/namespace.yaml",
    ] {
        let o = object(&format!("kubernetes/{other}"));
        assert_eq!(o.metadata.name, "cgperf", "{other}");
    }
}

#[test]
fn kubernetes_configmap_holds_a_valid_cgperf_config() {
    let cm = object("kubernetes/base/configmap.yaml");
    assert_eq!(cm.kind, "ConfigMap");
    let text = cm.data.get("cgperf.yaml").expect("cgperf.yaml key");
    let file = config_file(text);
    let (code, out, err) =
        run_cgperf(&["check", &format!("--config.file={}", file.path().display())]);
    assert_eq!(code, 0, "{out}{err}");
    let config = cgperf::config::parse("configmap", text).expect("valid");
    assert!(!config.labels.is_empty(), "pods' cgroups are labelled");
    let pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice";
    let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let guaranteed = "/kubepods.slice/kubepods-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice";
    let cgroupfs = "/kubepods/besteffort/pod1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    let pods = [
        pod,
        guaranteed,
        cgroupfs,
        "/kubepods/pod1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    ];
    // Containers under both kubelet drivers, as containerd, CRI-O and
    // Docker name them (k3s: containerd's names, cgroupfs by default).
    let containers = [
        format!("{pod}/cri-containerd-{id}.scope"),
        format!("{guaranteed}/crio-{id}.scope"),
        format!("{pod}/docker-{id}.scope"),
        format!("{cgroupfs}/{id}"),
        format!("/kubepods/burstable/pod1b4e28ba-2fa1-11d2-883f-0016d3cca427/{id}"),
        format!("/kubepods/pod1b4e28ba-2fa1-11d2-883f-0016d3cca427/{id}"),
    ];
    let counted = |path: &str| -> Vec<String> {
        let mut groups: Vec<String> = config
            .cgroups
            .iter()
            .filter(|s| s.pattern.matches(path))
            .flat_map(|s| s.groups.clone())
            .collect();
        groups.sort();
        groups.dedup();
        groups
    };
    for path in pods.iter().map(|p| p.to_string()).chain(containers) {
        // The headline: IPC and cache misses per pod and per container.
        let groups = counted(&path);
        for g in ["ipc", "cache", "sched"] {
            assert!(
                groups.iter().any(|x| x == g),
                "{path} counts {groups:?}, not {g}"
            );
        }
    }
    // Not every cgroup under the pods: a pod's container's own children
    // (none under kubelet) are not matched twice over.
    assert!(counted(&format!("{cgroupfs}/{id}/x")).is_empty());
}

/// `kubectl kustomize DIR`, split into its objects.
fn kustomize(dir: &str) -> Vec<String> {
    let (ok, said) = tool(Command::new("kubectl").arg("kustomize").arg(deploy(dir)));
    assert!(ok, "kubectl kustomize {dir}:\n{said}");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy(dir))
        .output()
        .expect("kubectl runs");
    String::from_utf8_lossy(&out.stdout)
        .split("\n---\n")
        .map(str::to_owned)
        .collect()
}

#[derive(Deserialize)]
struct Rendered {
    kind: String,
    metadata: RenderedMeta,
    #[serde(default)]
    spec: serde_json::Value,
}

#[derive(Deserialize)]
struct RenderedMeta {
    name: String,
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// The value at `path` (keys, or list indices) of `v`.
fn at<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a serde_json::Value {
    path.iter().fold(v, |v, key| match key.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[*key],
    })
}

fn text(v: &serde_json::Value) -> String {
    v.as_str().map(str::to_owned).unwrap_or_default()
}

/// `kubectl apply -k deploy/kubernetes/base` on any cluster: the objects a
/// node needs, every one in the `cgperf` namespace, the image of this
/// version, Linux nodes only, a quota for the critical priority class, the
/// node's name for OTLP; the overlay adds the Prometheus Operator's objects.
#[test]
fn kustomize_renders_the_base_and_the_operator_overlay() {
    // What docs/kubernetes.md applies: the base, or the overlay.
    let applied: Vec<String> = docs_commands("kubernetes.md")
        .iter()
        .filter_map(|l| l.strip_prefix("kubectl apply -k deploy/"))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        applied,
        ["kubernetes/base", "kubernetes/prometheus-operator"],
        "docs/kubernetes.md applies the base and the overlay"
    );
    let base = kustomize(&applied[0]);
    let objects: Vec<Rendered> = base
        .iter()
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .collect();
    let mut kinds: Vec<&str> = objects.iter().map(|o| o.kind.as_str()).collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "ConfigMap",
            "DaemonSet",
            "Namespace",
            "ResourceQuota",
            "Service"
        ]
    );
    for o in objects.iter().filter(|o| o.kind != "Namespace") {
        assert_eq!(
            o.metadata.namespace.as_deref(),
            Some("cgperf"),
            "{}",
            o.metadata.name
        );
    }
    let find = |kind: &str| objects.iter().find(|o| o.kind == kind).expect(kind);
    let ds = find("DaemonSet");
    let pod = at(&ds.spec, &["template", "spec"]);
    let container = at(pod, &["containers", "0"]);
    assert_eq!(
        text(&container["image"]),
        format!("ghcr.io/cgperf/cgperf:{}", env!("CARGO_PKG_VERSION")),
        "the manifests run this version's released image"
    );
    assert_eq!(
        text(at(pod, &["nodeSelector", "kubernetes.io/os"])),
        "linux"
    );
    assert_eq!(text(&pod["priorityClassName"]), "system-node-critical");
    let quota = find("ResourceQuota");
    let scope = at(&quota.spec, &["scopeSelector", "matchExpressions", "0"]);
    assert_eq!(text(&scope["scopeName"]), "PriorityClass");
    assert_eq!(text(&scope["operator"]), "In");
    assert_eq!(text(at(scope, &["values", "0"])), "system-node-critical");
    // The node's name reaches every OTLP resource.
    let env = container["env"].as_array().expect("env");
    let var = |name: &str| env.iter().find(|e| text(&e["name"]) == name).expect(name);
    assert_eq!(
        text(at(
            var("NODE_NAME"),
            &["valueFrom", "fieldRef", "fieldPath"]
        )),
        "spec.nodeName"
    );
    assert_eq!(
        text(&var("OTEL_RESOURCE_ATTRIBUTES")["value"]),
        "k8s.node.name=$(NODE_NAME)"
    );
    // Every CRI socket directory cgperf looks in is mounted, read-only.
    let mounts: Vec<String> = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .filter(|m| m["readOnly"].as_bool() == Some(true))
        .map(|m| text(&m["mountPath"]))
        .collect();
    for socket in cgperf::cri::DEFAULT_SOCKETS {
        let dir = Path::new(socket)
            .parent()
            .expect("a directory")
            .to_string_lossy()
            .into_owned();
        assert!(
            mounts.contains(&dir),
            "{socket}'s directory is not mounted: {mounts:?}"
        );
    }
    // The Service selects the pods, by the port the container names.
    let labels = at(&ds.spec, &["template", "metadata", "labels"]);
    let selects = |selector: &serde_json::Value| {
        selector
            .as_object()
            .expect("a selector")
            .iter()
            .all(|(k, v)| labels[k.as_str()] == *v)
    };
    let service = find("Service");
    assert!(selects(&service.spec["selector"]));
    let port = text(at(container, &["ports", "0", "name"]));
    assert_eq!(text(at(&service.spec, &["ports", "0", "targetPort"])), port);
    let dashboards = objects
        .iter()
        .find(|o| o.metadata.name == "cgperf-dashboards")
        .expect("the dashboards ConfigMap");
    assert_eq!(
        dashboards
            .metadata
            .labels
            .get("grafana_dashboard")
            .map(String::as_str),
        Some("1")
    );

    let overlay = kustomize(&applied[1]);
    assert_eq!(
        overlay.len(),
        base.len() + 2,
        "the base, a PodMonitor and a PrometheusRule"
    );
    let extra: Vec<Rendered> = overlay
        .iter()
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .filter(|o: &Rendered| o.kind == "PodMonitor" || o.kind == "PrometheusRule")
        .collect();
    assert_eq!(extra.len(), 2);
    let monitor = extra
        .iter()
        .find(|o| o.kind == "PodMonitor")
        .expect("PodMonitor");
    assert!(selects(&monitor.spec["selector"]["matchLabels"]));
    assert_eq!(
        text(at(&monitor.spec, &["podMetricsEndpoints", "0", "port"])),
        port
    );
}

/// The dashboards ConfigMap and the PrometheusRule are what
/// scripts/gen-kubernetes makes of dashboards/ and deploy/prometheus/ now.
#[test]
fn generated_kubernetes_objects_match_their_sources() {
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (ok, said) = tool(Command::new(repo.join("scripts/gen-kubernetes")).arg(dir.path()));
    assert!(ok, "scripts/gen-kubernetes:\n{said}");
    for (file, committed) in [
        ("dashboards.yaml", "kubernetes/base/dashboards.yaml"),
        (
            "prometheusrule.yaml",
            "kubernetes/prometheus-operator/prometheusrule.yaml",
        ),
    ] {
        let made = std::fs::read_to_string(dir.path().join(file)).expect("written");
        assert!(
            made == read(committed),
            "deploy/{committed} is stale: run scripts/gen-kubernetes"
        );
    }
    // And they hold what their sources say, parsed.
    #[derive(Deserialize)]
    struct ConfigMap {
        data: BTreeMap<String, String>,
    }
    let cm: ConfigMap =
        serde_saphyr::from_str(&read("kubernetes/base/dashboards.yaml")).expect("ConfigMap");
    let json = std::fs::read_to_string(repo.join("dashboards/cgperf.json")).expect("dashboard");
    assert_eq!(cm.data.get("cgperf.json"), Some(&json));
    #[derive(Deserialize)]
    struct Rules {
        groups: Vec<serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct Rule {
        spec: Rules,
    }
    let rule: Rule =
        serde_saphyr::from_str(&read("kubernetes/prometheus-operator/prometheusrule.yaml"))
            .expect("PrometheusRule");
    let files: Vec<serde_json::Value> = ["prometheus/rules.yml", "prometheus/alerts.yml"]
        .iter()
        .flat_map(|f| {
            serde_saphyr::from_str::<Rules>(&read(f))
                .expect("rules")
                .groups
        })
        .collect();
    assert_eq!(rule.spec.groups, files);
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

#[test]
fn started_as_root_it_keeps_only_what_reload_and_hotplug_need() {
    // CAP_DAC_READ_SEARCH (2), CAP_IPC_LOCK (14), CAP_PERFMON (38); and
    // CAP_BPF (39) when the bpf backend counts: it loads its program again.
    const KEPT: u64 = 1 << 2 | 1 << 14 | 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
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
    // At a paranoid level of 3 or more cgperf keeps CAP_SYS_ADMIN
    // (tests/health.rs): this test is for the levels below.
    let _unchanged = sysctl::unchanged();
    let level = sysctl::paranoid();
    assert!(
        level <= 2,
        "this test needs kernel.perf_event_paranoid <= 2 (it is {level})"
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()));
    let exporter = Exporter::spawn(cmd);
    assert!(
        status_caps(exporter.pid(), "CapPrm:") & 1 << 21 == 0,
        "CAP_SYS_ADMIN must be gone"
    );
    let (backend, _) =
        backend_info(&exporter.wait_for("the backend", |b| b.contains("cgperf_backend_info{")));
    let kept = if backend == "bpf" {
        KEPT | CAP_BPF
    } else {
        KEPT
    };
    for key in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(status_caps(exporter.pid(), key), kept, "{key} ({backend})");
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
    assert_eq!(total(&body, "cgperf_open_errors_total"), 0.0, "{body}");
}

// ---------------------------------------------------------------------
// The shipped deployments, run exactly as written.
// ---------------------------------------------------------------------

/// Exactly `n` forks, each child exec'ing `/bin/true`, in `cgroup`: `n` on
/// `sched:sched_process_fork` and `n` on `sched:sched_process_exec`.
fn exec_workload(cgroup: &Path, n: u32) {
    let path = std::ffi::CString::new("/bin/true").expect("no NUL");
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null()];
    in_child(Some(cgroup), || {
        for _ in 0..n {
            // SAFETY: fork, execve, waitpid and _exit are async-signal-safe;
            // every pointer was made before the first fork.
            unsafe {
                let pid = libc::fork();
                if pid == 0 {
                    libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                    libc::_exit(127);
                }
                let mut status = 0;
                if pid < 0
                    || libc::waitpid(pid, &mut status, 0) != pid
                    || !libc::WIFEXITED(status)
                    || libc::WEXITSTATUS(status) != 0
                {
                    libc::_exit(4);
                }
            }
        }
    });
}

/// Wraps a deployment's command line the way its runtime would start it:
/// in network and mount namespaces of its own (a pod has its own network;
/// for the unit, it keeps the files' fixed port from colliding with
/// anything else on the machine), with `config_dir` mounted at `mount_at`
/// (the ConfigMap volume; `/etc/cgperf` of the unit's install steps), the
/// `read_only` paths made read-only (each a mount point, or bound onto
/// itself first, with the mounts below it: a plain bind would hide them,
/// and their own remount would then fail, as `/proc/sys/fs/binfmt_misc`
/// once something mounts it), `lo` up, then `launch` (limits, user,
/// capabilities) and `argv`.
fn deployed(
    config_dir: &Path,
    mount_at: &str,
    read_only: &[String],
    launch: &[String],
    argv: &[String],
) -> Command {
    // The mount point must exist on the host; what is mounted on it stays
    // in the private mount namespace.
    std::fs::create_dir_all(mount_at).unwrap_or_else(|e| panic!("mkdir {mount_at}: {e}"));
    // Readable by the unit's unprivileged user once mounted.
    std::fs::set_permissions(
        config_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--net",
        "--mount",
        "--propagation=private",
        "sh",
        "-ec",
        r#"ip link set lo up
mount --bind "$1" "$2"
IFS='
'
for m in $3; do
    mountpoint -q "$m" || mount --rbind "$m" "$m"
    mount -o remount,bind,ro "$m"
done
shift 3
exec "$@""#,
        "sh",
    ])
    .arg(config_dir)
    .arg(mount_at)
    .arg(read_only.join("\n"))
    .args(launch)
    .args(argv);
    cmd
}

/// Every mount point at or below one of `roots` but not below one of
/// `except`, and the roots themselves: what a recursive read-only mount of
/// `roots` makes read-only.
fn mounts_under(roots: &[&str], except: &[&str]) -> Vec<String> {
    let below = |path: &str, dir: &str| {
        path == dir || dir == "/" || path.starts_with(&format!("{}/", dir.trim_end_matches('/')))
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let mut paths: Vec<String> = roots.iter().map(|r| r.to_string()).collect();
    for line in mountinfo.lines() {
        let Some(point) = line.split(' ').nth(4) else {
            continue;
        };
        // mountinfo escapes spaces and the like in octal.
        if point.contains('\\') || paths.iter().any(|p| p == point) {
            continue;
        }
        // A mount that cannot even be looked at (a FUSE mount whose server
        // died: ENOTCONN) cannot be remounted either; nothing reads it.
        if std::fs::symlink_metadata(point).is_err() {
            continue;
        }
        if roots.iter().any(|r| below(point, r)) && !except.iter().any(|e| below(point, e)) {
            paths.push(point.to_string());
        }
    }
    paths
}

/// Asserts that every one of `paths` is a read-only mount for `pid`.
fn assert_read_only(pid: i32, paths: &[String]) {
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    for path in paths {
        // The last mount on a path is the one seen there.
        let options = mountinfo
            .lines()
            .rev()
            .filter(|l| l.split(' ').nth(4) == Some(path.as_str()))
            .find_map(|l| l.split(' ').nth(5))
            .unwrap_or_else(|| panic!("{path} is not a mount point of cgperf"));
        assert!(options.split(',').any(|o| o == "ro"), "{path} is {options}");
    }
}

/// `config` written as `dir/name`, readable by anyone.
fn config_dir(name: &str, config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, config).expect("write config");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    dir
}

/// The value of `--config.file=` in `argv`.
fn config_arg(argv: &[String]) -> &str {
    argv.iter()
        .find_map(|a| a.strip_prefix("--config.file="))
        .expect("the deployment names its config file")
}

/// The backend a shipped config asks for (`auto`: see [`auto_backend`]),
/// under capabilities that allow BPF (the deployments grant CAP_BPF).
fn deployed_backend(config: &str) -> &'static str {
    use cgperf::config::BackendChoice;
    match cgperf::config::parse("shipped config", config)
        .expect("the shipped config is valid")
        .backend
    {
        BackendChoice::Cgroup => "cgroup",
        BackendChoice::Auto => "auto",
        BackendChoice::Bpf => "bpf",
    }
}

/// The port of `--web.listen-address=` in `argv`.
fn listen_port(argv: &[String]) -> u16 {
    argv.iter()
        .find_map(|a| a.strip_prefix("--web.listen-address="))
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .expect("the deployment names its listen address")
}

/// Checks that cgperf, deployed as shipped, warned of nothing but what
/// this machine lacks: the groups whose events it has no counter for (a VM
/// without a hardware PMU), and the switches its kernel makes without the
/// tracepoint the bpf backend counts by (a VM guest kernel's own threads).
/// Whatever else it warns of is something the deployment denies it (a
/// capability, a file) that the tests would not otherwise see, as they
/// count as root.
fn warns_only_of_counters_this_machine_lacks(log: &str) {
    let of_this_machine = |l: &str| {
        (l.contains(" disabled: ") && l.contains("this machine has no counter for"))
            || l.contains("switched out of tasks without the sched_switch tracepoint")
    };
    let other: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN "))
        .filter(|l| !of_this_machine(l))
        .collect();
    assert!(
        other.is_empty(),
        "deployed as shipped, cgperf warns:\n{}",
        other.join("\n")
    );
}

/// setpriv's spelling of a list of capabilities (`CAP_PERFMON`, or
/// Kubernetes' `PERFMON`): `+perfmon,+...`.
fn setpriv_caps<S: AsRef<str>>(caps: &[S]) -> String {
    caps.iter()
        .map(|c| {
            let c = c.as_ref();
            format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase())
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The keys of a unit section, in order, with their values.
fn unit_section(unit: &str, section: &str) -> Vec<(String, String)> {
    let header = format!("[{section}]");
    unit.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not key=value: {l}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Splits a command line of the unit. The unit uses no quoting or
/// specifiers (the test says so rather than mis-splitting them).
fn unit_command(line: &str) -> Vec<String> {
    assert!(
        !line.contains(['"', '\'', '\\', '%']),
        "quoting and specifiers in `{line}`: teach this test to split them"
    );
    line.split_whitespace().map(str::to_string).collect()
}

/// The install steps' `install ... SOURCE TARGET`: the SOURCE of `target`.
fn installed_from(steps: &[String], target: &str) -> String {
    steps
        .iter()
        .find_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            (words.first() == Some(&"install") && words.last() == Some(&target))
                .then(|| words[words.len() - 2].to_string())
        })
        .unwrap_or_else(|| panic!("the install steps do not say what goes to {target}"))
}

/// `wanted` as an open-files limit, or the tests' own hard limit where they
/// lack CAP_SYS_RESOURCE to raise it (systemd, which sets the unit's limit,
/// always has it), saying so.
fn nofile_limit_settable(wanted: u64) -> u64 {
    const CAP_SYS_RESOURCE: u32 = 24;
    if status_caps(std::process::id() as i32, "CapEff:") & 1 << CAP_SYS_RESOURCE != 0 {
        return wanted;
    }
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: writes into the local struct.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    let limit = wanted.min(hard.rlim_max);
    if limit < wanted {
        eprintln!(
            "NOTE: these tests lack CAP_SYS_RESOURCE: LimitNOFILE={wanted} is applied as {limit}, their hard limit"
        );
    }
    limit
}

#[test]
fn the_systemd_unit_runs_as_written_and_counts_exactly() {
    require_root("run the unit's command line with its user and capabilities");
    let unit = read("systemd/cgperf.service");
    // docs/getting-started.md's steps in the unpacked release tarball: the
    // installs and systemctl lines of the unit's own comment, then
    // `systemctl reload`. Done here as they and systemd would: the binary
    // of this build where ExecStart runs it, the installed config mounted
    // where ExecStart reads it, ExecStart run as the unit says, ExecReload
    // for the reload. (tests/release.rs runs the install lines as written
    // on the tarball itself.)
    let steps = docs_commands("getting-started.md");
    let unpacked = steps
        .iter()
        .position(|l| l.starts_with("cd cgperf-"))
        .expect("docs/getting-started.md goes into the unpacked tarball");
    let steps = &steps[unpacked + 1..];
    let commented: Vec<String> = unit
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| l.trim().trim_start_matches("Install:").trim().to_owned())
        .filter(|l| l.starts_with("install ") || l.starts_with("systemctl "))
        .collect();
    assert_eq!(commented.len(), 4, "{commented:?}");
    assert_eq!(
        steps[..4],
        commented[..],
        "docs/getting-started.md installs as the unit's comment says"
    );
    assert_eq!(steps[4], "systemctl reload cgperf", "{steps:?}");
    let mut exec_start = None;
    let mut exec_reload = None;
    let mut launch: Vec<String> = Vec::new();
    let mut setpriv: Vec<String> = Vec::new();
    let mut nofile = None;
    let mut read_only_roots: Vec<&str> = Vec::new();
    for (key, value) in unit_section(&unit, "Service") {
        match key.as_str() {
            "ExecStart" => exec_start = Some(unit_command(&value)),
            "ExecReload" => exec_reload = Some(unit_command(&value)),
            // A transient unprivileged user: nobody is one.
            "DynamicUser" => {
                assert_eq!(value, "yes");
                setpriv.extend(
                    ["--reuid=nobody", "--regid=nogroup", "--clear-groups"].map(String::from),
                );
            }
            "AmbientCapabilities" => {
                let caps = setpriv_caps(&value.split_whitespace().collect::<Vec<_>>());
                setpriv.push(format!("--inh-caps=-all,{caps}"));
                setpriv.push(format!("--ambient-caps=-all,{caps}"));
            }
            "CapabilityBoundingSet" => {
                let caps = setpriv_caps(&value.split_whitespace().collect::<Vec<_>>());
                setpriv.push(format!("--bounding-set=-all,{caps}"));
            }
            "NoNewPrivileges" => {
                assert_eq!(value, "yes");
                setpriv.push("--no-new-privs".into());
            }
            "LimitNOFILE" => {
                let limit = nofile_limit_settable(value.parse().expect("a number"));
                launch.extend(["prlimit".into(), format!("--nofile={limit}:{limit}")]);
                nofile = Some(limit);
            }
            // The whole file system read-only but /dev, /proc and /sys ...
            "ProtectSystem" => {
                assert_eq!(value, "strict");
                read_only_roots.push("/");
            }
            // ... and /sys and /proc/sys read-only too.
            "ProtectKernelTunables" => {
                assert_eq!(value, "yes");
                read_only_roots.extend(["/sys", "/proc/sys"]);
            }
            "ProtectControlGroups" => {
                assert_eq!(value, "yes");
                read_only_roots.push("/sys/fs/cgroup");
            }
            // What systemd itself does around the process; checked by
            // `systemd-analyze verify` (systemd_unit_verifies_cleanly).
            "Type"
            | "Restart"
            | "RestartSec"
            | "UMask"
            | "ProtectHome"
            | "PrivateTmp"
            | "PrivateDevices"
            | "ProtectKernelModules"
            | "ProtectKernelLogs"
            | "ProtectClock"
            | "ProtectHostname"
            | "ProtectProc"
            | "RestrictAddressFamilies"
            | "RestrictNamespaces"
            | "RestrictRealtime"
            | "RestrictSUIDSGID"
            | "LockPersonality"
            | "MemoryDenyWriteExecute"
            | "SystemCallArchitectures" => {}
            other => panic!("[Service] {other}= is new: make this test run with it"),
        }
    }
    launch.push("setpriv".into());
    launch.extend(setpriv);
    let mut argv = exec_start.expect("ExecStart");
    assert_eq!(
        argv[0], "/usr/local/bin/cgperf",
        "installed where the unit's install steps put it"
    );
    assert_eq!(installed_from(steps, &argv[0]), "cgperf");
    argv[0] = env!("CARGO_BIN_EXE_cgperf").into();
    // The config the install steps put where ExecStart reads it: the
    // tarball's, which scripts/release copies from the repository.
    let config_path = Path::new(config_arg(&argv)).to_path_buf();
    let source = installed_from(steps, &config_path.display().to_string());
    assert_eq!(source, "cgperf.yaml");
    let source = "config/default.yaml";
    let config = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(source))
        .unwrap_or_else(|e| panic!("{source}: {e}"));
    let mount_at = config_path
        .parent()
        .expect("a directory")
        .display()
        .to_string();
    let file_name = config_path
        .file_name()
        .expect("a file")
        .to_string_lossy()
        .into_owned();
    let dir = config_dir(&file_name, &config);
    // As root, make sure tracefs is mounted: the unit does not mount it.
    cgperf::tracefs::Tracefs::locate().expect("tracefs mounted");
    // A top-level cgroup: the shipped default counts every one.
    let cg = TestCgroup::create("cgperf-unit");
    // ProtectSystem=strict leaves /dev and /proc writable (but /proc/sys).
    let mut read_only = mounts_under(&read_only_roots, &["/dev", "/proc"]);
    read_only.extend(mounts_under(&["/proc/sys"], &[]));
    read_only.push(mount_at.clone());
    // What cgperf keeps depends on the paranoid level: held as it is.
    let _unchanged = sysctl::unchanged();
    let paranoid = sysctl::paranoid();
    let exporter = Exporter::spawn_as_given(
        deployed(dir.path(), &mount_at, &read_only, &launch, &argv),
        true,
    );
    assert_read_only(exporter.pid(), &read_only);
    // The unit grants CAP_SYS_ADMIN for kernels whose paranoid level asks
    // for it; below 3, cgperf has dropped it after start-up.
    assert_eq!(
        status_caps(exporter.pid(), "CapEff:") & 1 << 21 != 0,
        paranoid >= 3,
        "CAP_SYS_ADMIN kept at kernel.perf_event_paranoid {paranoid}: only from 3 on"
    );
    assert!(
        exporter.addr.starts_with("[::]:"),
        "{}: `:PORT` is every address, IPv4 and IPv6",
        exporter.addr
    );
    assert_eq!(exporter.addr, format!("[::]:{}", listen_port(&argv)));
    let nofile = nofile.expect("LimitNOFILE");
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", exporter.pid())).expect("limits");
    assert!(
        limits.lines().any(|l| l.starts_with("Max open files")
            && l.split_whitespace()
                .filter(|w| *w == nofile.to_string())
                .count()
                == 2),
        "{limits}"
    );
    let counted = |event| [("cgroup", cg.rel.as_str()), ("event", event)];
    exporter.wait_for("the test cgroup", |b| {
        value(
            b,
            "cgperf_events_total",
            &counted("sched:sched_process_exec"),
        )
        .is_some()
    });
    exec_workload(&cg.dir, 321);
    let body = exporter.wait_collections(2);
    // The backend the shipped config asks for, under the unit's
    // capabilities.
    match deployed_backend(&config) {
        "auto" => drop(auto_backend(&body)),
        asked => assert_eq!(backend_info(&body), (asked.into(), String::new())),
    }
    warns_only_of_counters_this_machine_lacks(&exporter.log());
    for event in ["sched:sched_process_exec", "sched:sched_process_fork"] {
        assert_eq!(
            value(&body, "cgperf_events_total", &counted(event)),
            Some(321.0),
            "{event}\n{body}"
        );
    }
    assert_eq!(
        value(&body, "cgperf_group_supported", &[("group", "sched")]),
        Some(1.0),
        "{body}"
    );

    // ExecReload, as written, with $MAINPID: the config is reloaded.
    let reloads = |b: &str| {
        value(
            b,
            "cgperf_config_last_reload_success_timestamp_seconds",
            &[],
        )
    };
    let before = reloads(&body).expect("reload timestamp");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let reload: Vec<String> = exec_reload
        .expect("ExecReload")
        .into_iter()
        .map(|a| a.replace("$MAINPID", &exporter.pid().to_string()))
        .collect();
    let (ok, said) = tool(Command::new(&reload[0]).args(&reload[1..]));
    assert!(ok, "{reload:?}: {said}");
    exporter.wait_for("the reload", |b| reloads(b).is_some_and(|t| t > before));
    // The reload is made with what cgperf kept of the unit's privileges.
    exporter.wait_collections(1);
    warns_only_of_counters_this_machine_lacks(&exporter.log());
}

#[derive(Deserialize)]
struct Namespace {
    metadata: Labelled,
}

#[derive(Deserialize)]
struct Labelled {
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RunDaemonSet {
    spec: RunDaemonSetSpec,
}

#[derive(Deserialize)]
struct RunDaemonSetSpec {
    template: RunTemplate,
}

#[derive(Deserialize)]
struct RunTemplate {
    metadata: Annotated,
    spec: RunPodSpec,
}

#[derive(Deserialize)]
struct Annotated {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunPodSpec {
    #[serde(default)]
    host_network: bool,
    containers: Vec<RunContainer>,
    volumes: Vec<RunVolume>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunContainer {
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    #[serde(default)]
    ports: Vec<ContainerPort>,
    security_context: RunSecurityContext,
    readiness_probe: Option<RunProbe>,
    liveness_probe: Option<RunProbe>,
    startup_probe: Option<RunProbe>,
    volume_mounts: Vec<VolumeMount>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvVar {
    name: String,
    value: Option<String>,
    value_from: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerPort {
    name: Option<String>,
    container_port: u16,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunSecurityContext {
    run_as_user: Option<u32>,
    allow_privilege_escalation: Option<bool>,
    #[serde(default)]
    read_only_root_filesystem: bool,
    capabilities: Capabilities,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunProbe {
    http_get: RunHttpGet,
}

#[derive(Deserialize)]
struct RunHttpGet {
    path: String,
    port: PortRef,
}

/// A port by number or by the name of a container port.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum PortRef {
    Number(u16),
    Name(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunVolume {
    name: String,
    config_map: Option<ConfigMapRef>,
    host_path: Option<common::manifest::HostPath>,
}

#[derive(Deserialize)]
struct ConfigMapRef {
    name: String,
}

#[derive(Deserialize)]
struct Service {
    metadata: Annotated,
    spec: ServiceSpec,
}

#[derive(Deserialize)]
struct ServiceSpec {
    ports: Vec<ServicePort>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServicePort {
    port: u16,
    target_port: PortRef,
}

#[derive(Deserialize)]
struct PodMonitor {
    spec: PodMonitorSpec,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodMonitorSpec {
    pod_metrics_endpoints: Vec<PodMetricsEndpoint>,
}

#[derive(Deserialize)]
struct PodMetricsEndpoint {
    port: String,
}

/// Linux capability numbers of the names the manifests use.
fn capability_bit(name: &str) -> u64 {
    let number = match name {
        "DAC_READ_SEARCH" => 2,
        "IPC_LOCK" => 14,
        "SYS_ADMIN" => 21,
        "PERFMON" => 38,
        "BPF" => 39,
        other => panic!("capability {other}: add its number here"),
    };
    1 << number
}

impl RunContainer {
    /// The container port `port` names.
    fn port(&self, port: &PortRef) -> u16 {
        match port {
            PortRef::Number(n) => *n,
            PortRef::Name(name) => {
                self.ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name))
                    .unwrap_or_else(|| panic!("no container port named {name}"))
                    .container_port
            }
        }
    }
}

#[test]
fn the_daemonset_runs_as_written_with_the_pods_capabilities_and_counts_exactly() {
    require_root("run the DaemonSet's command line with the pod's capabilities");
    let ds: RunDaemonSet =
        serde_saphyr::from_str(&read("kubernetes/base/daemonset.yaml")).expect("DaemonSet");
    let pod = ds.spec.template;
    assert!(
        !pod.spec.host_network,
        "the pod has its own network, as the test gives it"
    );
    let [c] = pod.spec.containers.as_slice() else {
        panic!("one container");
    };
    // The image's entrypoint is the binary; a `command` names it.
    let mut argv: Vec<String> = match c.command.split_first() {
        Some((_, rest)) => rest.to_vec(),
        None => Vec::new(),
    };
    argv.insert(0, env!("CARGO_BIN_EXE_cgperf").into());
    argv.extend(c.args.iter().cloned());

    // The pod's capabilities: root (runAsUser 0) with the bounding,
    // permitted and effective sets reduced to `add`.
    let sc = &c.security_context;
    assert_eq!(
        sc.run_as_user,
        Some(0),
        "the test runs the container as root, as the manifest says"
    );
    assert_eq!(sc.capabilities.drop, ["ALL"], "drop: [ALL], then add");
    let caps = setpriv_caps(&sc.capabilities.add);
    let mut launch = vec![
        "setpriv".to_string(),
        format!("--bounding-set=-all,{caps}"),
        "--inh-caps=-all".into(),
        "--ambient-caps=-all".into(),
    ];
    if sc.allow_privilege_escalation == Some(false) {
        launch.push("--no-new-privs".into());
    }
    launch.push("env".into());
    // As the kubelet makes them: `$(NAME)` is an earlier variable's value,
    // the node's name is this host's.
    let mut vars: Vec<(String, String)> = Vec::new();
    for var in &c.env {
        let value = match &var.value_from {
            None => var.value.clone().unwrap_or_default(),
            Some(from) if from["fieldRef"]["fieldPath"] == "spec.nodeName" => {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .expect("hostname")
                    .trim()
                    .to_owned()
            }
            Some(from) => panic!("{}: valueFrom {from}: make this test resolve it", var.name),
        };
        let value = vars.iter().fold(value, |v, (name, earlier)| {
            v.replace(&format!("$({name})"), earlier)
        });
        assert!(
            !value.contains("$("),
            "{}: {value} names an unknown variable",
            var.name
        );
        launch.push(format!("{}={value}", var.name));
        vars.push((var.name.clone(), value));
    }

    // The ConfigMap volume, mounted where the manifest mounts it.
    let config_volume = pod
        .spec
        .volumes
        .iter()
        .find(|v| v.config_map.is_some())
        .expect("a ConfigMap volume");
    let mount = c
        .volume_mounts
        .iter()
        .find(|m| m.name == config_volume.name)
        .expect("the ConfigMap volume is mounted");
    let cm = object("kubernetes/base/configmap.yaml");
    assert_eq!(
        Some(cm.metadata.name.as_str()),
        config_volume.config_map.as_ref().map(|r| r.name.as_str())
    );
    let dir = tempfile::tempdir().expect("temp dir");
    for (key, text) in &cm.data {
        std::fs::write(dir.path().join(key), text).expect("write ConfigMap key");
    }
    let config = Path::new(config_arg(&argv));
    assert_eq!(
        config.parent(),
        Some(Path::new(&mount.mount_path)),
        "--config.file is in the ConfigMap volume"
    );
    let key = config.file_name().expect("a file").to_string_lossy();
    let asked = deployed_backend(cm.data.get(key.as_ref()).expect("the ConfigMap key read"));

    cgperf::tracefs::Tracefs::locate().expect("tracefs mounted");
    // A pod cgroup of kubelet's cgroupfs driver (the systemd driver's
    // needs the slice names, which systemd would own).
    let uid = format!("1b4e28ba-2fa1-11d2-883f-{:012}", std::process::id());
    let kubepods = TestCgroup::create_under("", "kubepods");
    let qos = TestCgroup::create_under(&kubepods.rel, "besteffort");
    let cg = TestCgroup::create_under(&qos.rel, &format!("pod{uid}"));

    // hostPath volumes of type DirectoryOrCreate: the kubelet makes the
    // directory when the node lacks it (a runtime that is not installed).
    for v in &pod.spec.volumes {
        if let Some(host) = v
            .host_path
            .as_ref()
            .filter(|h| h.kind == "DirectoryOrCreate")
        {
            std::fs::create_dir_all(&host.path)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", host.path));
        }
    }
    // The container's root filesystem and its readOnly volumes, read-only
    // (recursively, as cgperf would meet them at worst).
    let mut read_only: Vec<&str> = Vec::new();
    if sc.read_only_root_filesystem {
        read_only.push("/");
    }
    read_only.extend(
        c.volume_mounts
            .iter()
            .filter(|m| m.read_only)
            .map(|m| m.mount_path.as_str()),
    );
    let mut read_only = mounts_under(&read_only, &["/dev", "/proc"]);
    read_only.push(mount.mount_path.clone());
    // What cgperf keeps depends on the paranoid level: held as it is.
    let _unchanged = sysctl::unchanged();
    let paranoid = sysctl::paranoid();
    let exporter = Exporter::spawn_as_given(
        deployed(dir.path(), &mount.mount_path, &read_only, &launch, &argv),
        true,
    );
    assert_read_only(exporter.pid(), &read_only);
    let pid = exporter.pid();
    let backend = match asked {
        "auto" => {
            auto_backend(&exporter.wait_for("the backend", |b| b.contains("cgperf_backend_info{")))
        }
        asked => asked.to_string(),
    };
    let want = sc
        .capabilities
        .add
        .iter()
        .map(|c| capability_bit(c))
        .fold(0, |a, b| a | b);
    // cgperf keeps what it needs of what it was given.
    for key in ["CapBnd:", "CapPrm:", "CapEff:"] {
        assert_eq!(
            status_caps(pid, key) & !want,
            0,
            "{key} beyond the pod's capabilities"
        );
    }
    // The cgroup backend loads no BPF program: cgperf drops CAP_BPF. Below
    // a paranoid level of 3, no event needs CAP_SYS_ADMIN: cgperf drops it.
    let unused = if backend == "bpf" {
        0
    } else {
        capability_bit("BPF")
    } | if paranoid <= 2 {
        capability_bit("SYS_ADMIN")
    } else {
        0
    };
    assert_eq!(
        status_caps(pid, "CapEff:"),
        want & !unused,
        "cgperf uses all the pod's capabilities that its backend ({backend}) needs"
    );

    let port = listen_port(&argv);
    assert_eq!(
        exporter.addr,
        format!("[::]:{port}"),
        "`:PORT` is every address"
    );
    let counted = |event| {
        [
            ("cgroup", cg.rel.as_str()),
            ("event", event),
            ("pod_uid", uid.as_str()),
        ]
    };
    exporter.wait_for("the pod's cgroup", |b| {
        value(
            b,
            "cgperf_events_total",
            &counted("sched:sched_process_exec"),
        )
        .is_some()
    });
    exec_workload(&cg.dir, 123);
    let body = exporter.wait_collections(2);
    // The backend the ConfigMap asks for, under the pod's capabilities
    // (`auto`'s reason to fall back checked above).
    let (counting, fallback) = backend_info(&body);
    assert_eq!(counting, backend, "{body}");
    assert!(asked == "auto" || fallback.is_empty(), "{fallback}");
    warns_only_of_counters_this_machine_lacks(&exporter.log());
    assert_eq!(
        value(
            &body,
            "cgperf_events_total",
            &counted("sched:sched_process_exec")
        ),
        Some(123.0),
        "{body}"
    );

    // The probes answer on the port they name.
    for (what, probe) in [
        ("readinessProbe", &c.readiness_probe),
        ("livenessProbe", &c.liveness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        let Some(probe) = probe else { continue };
        assert_eq!(
            c.port(&probe.http_get.port),
            port,
            "{what} probes the port cgperf serves"
        );
        let (head, _) = exporter.get(&probe.http_get.path, None);
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "{what} {}: {head}",
            probe.http_get.path
        );
    }
    assert!(c.readiness_probe.is_some() && c.liveness_probe.is_some());

    // Who scrapes it: the pod's annotations (or the Service's, never both:
    // Prometheus would scrape every pod twice) and the PodMonitor name the
    // port cgperf serves, and the path.
    let service: Service =
        serde_saphyr::from_str(&read("kubernetes/base/service.yaml")).expect("Service");
    let scraped =
        |a: &BTreeMap<String, String>| a.get("prometheus.io/scrape").is_some_and(|v| v == "true");
    assert!(
        scraped(&pod.metadata.annotations) != scraped(&service.metadata.annotations),
        "exactly one of the pods and the Service is annotated for scraping"
    );
    let annotations = if scraped(&pod.metadata.annotations) {
        &pod.metadata.annotations
    } else {
        &service.metadata.annotations
    };
    assert_eq!(
        annotations.get("prometheus.io/port"),
        Some(&port.to_string())
    );
    let path = annotations
        .get("prometheus.io/path")
        .map_or("/metrics", String::as_str);
    let (head, body) = exporter.get(path, None);
    assert!(
        head.starts_with("HTTP/1.1 200") && body.contains("cgperf_events_total"),
        "{path}: {head}"
    );
    for p in &service.spec.ports {
        assert_eq!(c.port(&p.target_port), port, "the Service's targetPort");
        assert_eq!(p.port, port, "the Service's port is cgperf's");
    }
    let monitor: PodMonitor =
        serde_saphyr::from_str(&read("kubernetes/prometheus-operator/podmonitor.yaml"))
            .expect("PodMonitor");
    for e in &monitor.spec.pod_metrics_endpoints {
        assert_eq!(
            c.port(&PortRef::Name(e.port.clone())),
            port,
            "the PodMonitor's port"
        );
    }
    drop(exporter);
    cg.remove();
    qos.remove();
}
