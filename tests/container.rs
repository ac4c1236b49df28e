//! The container image, built from the repository's Dockerfile and run under
//! a real container runtime (containerd + runc) the way
//! deploy/kubernetes/base/daemonset.yaml runs it: its image, command, capability
//! set, read-only root and host mounts, read from the manifest.
//!
//! There is no registry and no Docker daemon here: the image is the one
//! scripts/release builds from the Dockerfile (its OCI archive, shared with
//! tests/release.rs through `common::release`). containerd runs on a
//! private socket and root.
//!
//! The same containerd, with its CRI plugin, is the runtime cgperf asks for
//! pod and container names: pods and containers are made through its CRI
//! API as kubelet makes them (cgroupfs driver, host network), and the
//! runtime is stopped while they run.
//!
//! Needs root, `buildah`, `containerd`, `runc`, `ctr` and a static C
//! toolchain (`gcc`, `libc6-dev`); scripts/test installs them.
mod common;

use common::manifest::{Volume, VolumeMount};
use common::{Exporter, release, require_root, run, value};
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, ImageSpec, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RunPodSandboxRequest,
    StartContainerRequest,
};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const WORKLOAD: &str = "localhost/cgperf-test-workload:latest";

/// A scratch directory of this test binary (the workload's build, image
/// archives).
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("container");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Whether `cmd` succeeds (its output discarded).
fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn buildah(args: &[&str]) -> String {
    run(Command::new("buildah").args(args))
}

/// `image` saved as `<scratch>/<file>.tar`.
fn oci_archive(image: &str, file: &str) -> PathBuf {
    let archive = scratch().join(format!("{file}.tar"));
    let _ = std::fs::remove_file(&archive);
    buildah(&[
        "push",
        "-q",
        image,
        &format!("oci-archive:{}:{image}", archive.display()),
    ]);
    archive
}

/// A static program for the other containers: at each SIGUSR1, makes
/// exactly N getppid system calls (N = argv[1]; none without it, which makes
/// it a pod's pause process). Nothing else in it calls getppid.
const WORKLOAD_C: &str = r#"
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile sig_atomic_t go;
static void on_usr1(int sig) { (void)sig; go = 1; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 0;
    sigset_t usr1, waiting;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &waiting);
    sigdelset(&waiting, SIGUSR1);
    signal(SIGUSR1, on_usr1);
    for (;;) {
        while (!go) sigsuspend(&waiting);
        go = 0;
        for (long i = 0; i < n; i++) syscall(SYS_getppid);
    }
}
"#;

fn workload_image() -> PathBuf {
    let dir = scratch().join("workload");
    std::fs::create_dir_all(&dir).expect("workload directory");
    std::fs::write(dir.join("workload.c"), WORKLOAD_C).expect("write workload.c");
    run(Command::new("gcc").current_dir(&dir).args([
        "-static",
        "-O2",
        "-o",
        "workload",
        "workload.c",
    ]));
    let c = buildah(&["from", "scratch"]);
    let c = c.trim();
    buildah(&[
        "copy",
        c,
        dir.join("workload").to_str().expect("UTF-8"),
        "/workload",
    ]);
    buildah(&["config", "--entrypoint", r#"["/workload"]"#, c]);
    let _ = Command::new("buildah")
        .args(["rmi", "--force", WORKLOAD])
        .output();
    buildah(&["commit", "-q", "--rm", c, WORKLOAD]);
    oci_archive(WORKLOAD, "workload")
}

/// The image scripts/release builds, named as the DaemonSet names it, and
/// its archive.
fn cgperf() -> (String, PathBuf) {
    let image = daemonset().image.clone();
    let archive = release::built().image.clone();
    (image, archive)
}

/// The workload image's archive, built once per test binary.
fn workload() -> &'static Path {
    static ARCHIVE: OnceLock<PathBuf> = OnceLock::new();
    ARCHIVE.get_or_init(workload_image)
}

/// containerd on a private socket, root and state directory, killed (after
/// its containers) when dropped.
struct Containerd {
    /// `None` while stopped.
    child: Option<std::process::Child>,
    dir: tempfile::TempDir,
    namespace: String,
    containers: Vec<String>,
}

impl Containerd {
    /// containerd for `ctr run` (a namespace of this test's own).
    fn start() -> Self {
        Self::start_in(&format!("cgperf-test-{}", std::process::id()), "")
    }

    /// containerd with its CRI plugin as kubelet uses it: namespace
    /// `k8s.io`, the workload image as the pod sandbox (pause) image.
    fn start_cri() -> Self {
        // restrict_oom_score_adj: the sandbox asks for -998, which only a
        // process allowed to lower its own score may set; the machines the
        // tests run on may not be.
        Self::start_in(
            "k8s.io",
            &format!(
                "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{WORKLOAD}\"\n  \
                 restrict_oom_score_adj = true\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  \
                 runtime_type = \"io.containerd.runc.v2\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  \
                 Root = \"{{runc_root}}\"\n"
            ),
        )
    }

    fn start_in(namespace: &str, extra_config: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cgperf-containerd-")
            .tempdir()
            .expect("containerd directory");
        let root = dir.path();
        let config = format!(
            "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n\
             [grpc]\n  address = \"{0}/containerd.sock\"\n\
             [ttrpc]\n  address = \"{0}/containerd.sock.ttrpc\"\n{1}",
            root.display(),
            extra_config.replace("{runc_root}", &root.join("runc").display().to_string())
        );
        std::fs::write(root.join("config.toml"), config).expect("containerd config");
        let mut containerd = Self {
            child: None,
            dir,
            namespace: namespace.to_string(),
            containers: Vec::new(),
        };
        containerd.restart();
        containerd
    }

    /// The CRI (and containerd) socket.
    fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    /// Starts the daemon (again) and waits until it answers.
    fn restart(&mut self) {
        let root = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("containerd.log"))
            .expect("log file");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(root.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("containerd starts (scripts/test installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !succeeds(&mut self.ctr(&["version"])) {
            assert!(
                Instant::now() < deadline,
                "containerd did not answer within 30 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the daemon (SIGTERM); its containers run on under their shims.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    fn ctr(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address")
            .arg(self.dir.path().join("containerd.sock"))
            .args(["--namespace", &self.namespace])
            .args(args);
        cmd
    }

    /// docs/kubernetes.md's `ctr -n k8s.io images import …` line, run as
    /// written but with this containerd's address and namespace for the
    /// kubelet's `k8s.io`, and the release's archive where it is.
    fn import_as_documented(&self, archive: &Path, image: &str) {
        let page =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/kubernetes.md"))
                .expect("docs/kubernetes.md");
        let line = page
            .lines()
            .find(|l| l.starts_with("ctr "))
            .expect("docs/kubernetes.md imports the image with ctr");
        let words: Vec<&str> = line
            .split(" #")
            .next()
            .expect("a command")
            .split_whitespace()
            .collect();
        let (file, words) = words.split_last().expect("an archive");
        assert_eq!(words[..3], ["ctr", "-n", "k8s.io"], "{line}");
        assert_eq!(
            Path::new(file).file_name(),
            archive.file_name(),
            "{line}: the release's archive"
        );
        let base = image.rsplit_once(':').map_or(image, |(base, _)| base);
        assert_eq!(
            words[3..],
            ["images", "import", "--base-name", base],
            "{line}"
        );
        let mut args = words[3..].to_vec();
        args.push(archive.to_str().expect("UTF-8"));
        run(&mut self.ctr(&args));
    }

    fn import(&self, archive: &Path, name: &str) {
        let base = name.rsplit_once(':').map_or(name, |(base, _)| base);
        run(&mut self.ctr(&[
            "images",
            "import",
            "--base-name",
            base,
            archive.to_str().expect("UTF-8"),
        ]));
    }

    /// `ctr run` for container `id` with `flags` (the flags come before the
    /// image, `command` after the id), in the foreground unless `detach`;
    /// the container is removed on drop.
    fn run_command(
        &mut self,
        id: &str,
        detach: bool,
        flags: &[String],
        image: &str,
        command: &[String],
    ) -> Command {
        self.containers.push(id.to_string());
        let mut cmd = self.ctr(&["run", if detach { "--detach" } else { "--rm" }]);
        cmd.arg(format!(
            "--runc-root={}",
            self.dir.path().join("runc").display()
        ))
        .arg(format!("--cgroup=/{}/{id}", self.namespace))
        .args(flags)
        .args([image, id])
        .args(command);
        cmd
    }

    /// The host pid of container `id`'s task.
    fn pid(&self, id: &str) -> String {
        let listing = run(&mut self.ctr(&["tasks", "list"]));
        listing
            .lines()
            .find_map(|l| {
                let mut fields = l.split_whitespace();
                (fields.next() == Some(id)).then(|| fields.next().unwrap_or_default().to_string())
            })
            .unwrap_or_else(|| panic!("task {id} in:\n{listing}"))
    }

    fn signal(&self, id: &str, signal: &str) {
        run(&mut self.ctr(&["tasks", "kill", "--signal", signal, id]));
    }
}

impl Drop for Containerd {
    /// Kills and removes every container of the namespace (those the CRI
    /// made too), stops the daemon, and unmounts what it left mounted.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("containerd's log:\n{}", self.log());
        }
        if self.child.is_none() {
            self.restart();
        }
        let listed = |what: &str| -> Vec<String> {
            self.ctr(&[what, "list", "--quiet"])
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut ids = listed("tasks");
        ids.extend(listed("containers"));
        ids.extend(self.containers.iter().cloned());
        ids.sort();
        ids.dedup();
        for id in &ids {
            let _ = self
                .ctr(&["tasks", "kill", "--all", "--signal", "SIGKILL", id])
                .output();
            let deadline = Instant::now() + Duration::from_secs(10);
            while succeeds(&mut self.ctr(&["tasks", "ps", id])) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.ctr(&["tasks", "delete", "--force", id]).output();
            let _ = self.ctr(&["containers", "delete", id]).output();
        }
        self.stop();
        let dir = self.dir.path().to_string_lossy().into_owned();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4))
            .filter(|p| p.starts_with(&dir))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for point in points {
            let _ = Command::new("umount").args(["--lazy", point]).status();
        }
        // Where `ctr run` put its containers' cgroups (`--cgroup` above).
        if self.namespace != "k8s.io" {
            drop(RuntimeCgroup(format!("/{}", self.namespace)));
        }
    }
}

/// What the test takes from deploy/kubernetes/base/daemonset.yaml.
#[derive(Deserialize)]
struct Manifest {
    spec: ManifestSpec,
}

#[derive(Deserialize)]
struct ManifestSpec {
    template: Template,
}

#[derive(Deserialize)]
struct Template {
    spec: PodSpec,
}

#[derive(Deserialize)]
struct PodSpec {
    containers: Vec<ContainerSpec>,
    volumes: Vec<Volume>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerSpec {
    image: String,
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    args: Vec<String>,
    security_context: SecurityContext,
    volume_mounts: Vec<VolumeMount>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecurityContext {
    read_only_root_filesystem: bool,
    allow_privilege_escalation: bool,
    capabilities: Capabilities,
    seccomp_profile: SeccompProfile,
}

#[derive(Deserialize)]
struct Capabilities {
    drop: Vec<String>,
    add: Vec<String>,
}

#[derive(Deserialize)]
struct SeccompProfile {
    #[serde(rename = "type")]
    kind: String,
}

/// The DaemonSet's pod spec, as written.
fn pod() -> &'static PodSpec {
    static POD: OnceLock<PodSpec> = OnceLock::new();
    POD.get_or_init(|| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/base/daemonset.yaml");
        let text = std::fs::read_to_string(&path).expect("daemonset.yaml");
        let m: Manifest = serde_saphyr::from_str(&text).expect("daemonset.yaml parses");
        m.spec.template.spec
    })
}

/// The DaemonSet's (only) container.
fn daemonset() -> &'static ContainerSpec {
    &pod().containers[0]
}

/// `ctr run` flags for the DaemonSet's container: its security context and
/// its volumes (hostPath volumes bound from the host; every other volume —
/// the ConfigMap — from `config_dir`), host network for the scrape.
fn daemonset_flags(config_dir: &Path) -> Vec<String> {
    let c = daemonset();
    let sc = &c.security_context;
    let mut flags = vec!["--net-host".to_string()];
    if sc.read_only_root_filesystem {
        flags.push("--read-only".into());
    }
    if sc.allow_privilege_escalation {
        flags.push("--allow-new-privs".into());
    }
    assert_eq!(sc.seccomp_profile.kind, "RuntimeDefault", "seccomp profile");
    flags.push("--seccomp".into());
    // `ctr run` starts from containerd's default capability set, knows no
    // `ALL`, and applies its drops after its adds: drop by name every
    // capability the DaemonSet does not add.
    let add: Vec<String> = sc
        .capabilities
        .add
        .iter()
        .map(|c| format!("CAP_{c}"))
        .collect();
    let drop: Vec<String> = if sc.capabilities.drop == ["ALL"] {
        caps::all().iter().map(|c| c.to_string()).collect()
    } else {
        sc.capabilities
            .drop
            .iter()
            .map(|c| format!("CAP_{c}"))
            .collect()
    };
    for cap in drop.iter().filter(|c| !add.contains(c)) {
        flags.push(format!("--cap-drop={cap}"));
    }
    for cap in &add {
        flags.push(format!("--cap-add={cap}"));
    }
    for m in &c.volume_mounts {
        let volume = pod()
            .volumes
            .iter()
            .find(|v| v.name == m.name)
            .unwrap_or_else(|| panic!("volume {} of the DaemonSet", m.name));
        let src = match &volume.host_path {
            Some(h) => {
                if h.kind == "DirectoryOrCreate" {
                    std::fs::create_dir_all(&h.path).expect("hostPath directory");
                }
                PathBuf::from(&h.path)
            }
            None => config_dir.to_path_buf(),
        };
        let mode = if m.read_only { "ro" } else { "rw" };
        flags.push(format!(
            "--mount=type=bind,src={},dst={},options=rbind:{mode}",
            src.display(),
            m.mount_path
        ));
    }
    flags
}

/// The image's entrypoint, which Kubernetes runs with the DaemonSet's
/// `args` when it gives no `command` (`ctr run` takes the whole command).
fn entrypoint(image: &str) -> Vec<String> {
    // Printed as Go prints a []string: `[/usr/bin/cgperf]`.
    let printed = buildah(&[
        "inspect",
        "--type",
        "image",
        "--format",
        "{{.OCIv1.Config.Entrypoint}}",
        image,
    ]);
    printed
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A 64-hex container id, unique per call.
fn container_id(tag: u8) -> String {
    let mut bytes = [0u8; 32];
    for b in bytes.iter_mut() {
        *b = fastrand::u8(..);
    }
    bytes[0] = tag;
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Removes `rel` (relative to the cgroup roots) and whatever the runtime
/// left below it, from the cgroup2 tree and, on hybrid machines, from every
/// v1 hierarchy runc also created it in.
struct RuntimeCgroup(String);

impl Drop for RuntimeCgroup {
    fn drop(&mut self) {
        fn remove_tree(dir: &Path) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        remove_tree(&e.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
        let rel = self.0.trim_start_matches('/');
        remove_tree(&common::cgroup2_root().join(rel));
        if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in hierarchies.flatten() {
                remove_tree(&h.path().join(rel));
            }
        }
    }
}

/// The task `pid` runs confined as the DaemonSet says: exactly its added
/// capabilities (cgperf keeps all but `CAP_BPF`, which the test's config,
/// naming the cgroup backend, does not use, and `CAP_SYS_ADMIN` where
/// `kernel.perf_event_paranoid` is 2 or less: the caller holds the sysctl
/// as it is), no privilege gain, the runtime's seccomp filter, a read-only
/// root filesystem.
fn assert_confined(pid: &str) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("task status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name} in\n{status}"))
            .to_string()
    };
    let want = daemonset()
        .security_context
        .capabilities
        .add
        .iter()
        .map(|c| {
            let cap: caps::Capability = format!("CAP_{c}").parse().expect("capability name");
            1u64 << cap.index()
        })
        .fold(0, |a, b| a | b);
    let mut kept = want & !caps::Capability::CAP_BPF.bitmask();
    if common::sysctl::paranoid() <= 2 {
        kept &= !caps::Capability::CAP_SYS_ADMIN.bitmask();
    }
    for (set, want) in [("CapBnd:", want), ("CapPrm:", kept), ("CapEff:", kept)] {
        assert_eq!(
            u64::from_str_radix(&field(set), 16).expect("hex capability set"),
            want,
            "{set} of cgperf in its container"
        );
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    assert_eq!(field("Seccomp:"), "2", "a seccomp filter");
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    let root = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("root mount");
    let options = root.split_whitespace().nth(5).unwrap_or_default();
    assert!(
        options.split(',').any(|o| o == "ro"),
        "read-only root: {root}"
    );
}

#[test]
fn the_image_counts_a_workload_in_another_container_under_containerd() {
    require_root("run containerd and open perf events in cgroup mode");
    let (image, archive) = cgperf();
    let c = daemonset();
    assert_eq!(
        c.image,
        format!("ghcr.io/cgperf/cgperf:{}", env!("CARGO_PKG_VERSION")),
        "the DaemonSet runs the released image of this version, which the Dockerfile builds"
    );
    assert_eq!(entrypoint(&c.image), ["/usr/bin/cgperf"]);
    // The DaemonSet mounts the host's tracefs: have one to mount.
    cgperf::tracefs::Tracefs::locate().expect("tracefs");
    assert!(Path::new("/sys/kernel/tracing/events").is_dir());

    // The workload container's cgroup, named as containerd's CRI names it
    // under kubelet's systemd cgroup driver (there is no systemd here, so
    // the path is given to ctr). Removed after containerd's containers.
    let parent = format!("/cgperf-container-{}", std::process::id());
    let _parent = RuntimeCgroup(parent.clone());

    let mut containerd = Containerd::start();
    containerd.import_as_documented(&archive, &image);
    containerd.import(workload(), WORKLOAD);
    let work_id = container_id(0xc0);
    let work_cgroup = format!("{parent}/cri-containerd-{work_id}.scope");

    let config_dir = tempfile::tempdir().expect("config directory");
    std::fs::write(
        config_dir.path().join("cgperf.yaml"),
        format!(
            "interval: 200ms\nbackend: cgroup\ntracepoints: [syscalls:sys_enter_getppid]\nlabels: [containers]\n\
             cgroups:\n  - match: {parent}/*\n"
        ),
    )
    .expect("config");

    // cgperf as the DaemonSet runs it; only the listen address is the
    // test's (a free loopback port instead of :9810, which may be taken).
    let mut command = if c.command.is_empty() {
        entrypoint(&c.image)
    } else {
        c.command.clone()
    };
    command.extend(
        c.args
            .iter()
            .filter(|a| !a.starts_with("--web.listen-address"))
            .cloned(),
    );
    let exporter_id = format!("cgperf-{}", container_id(0xe0));
    let cmd = containerd.run_command(
        &exporter_id,
        false,
        &daemonset_flags(config_dir.path()),
        &c.image,
        &command,
    );
    // What cgperf keeps depends on the paranoid level: held as it is.
    let _unchanged = common::sysctl::unchanged();
    let exporter = Exporter::spawn(cmd);
    assert_confined(&containerd.pid(&exporter_id));

    run(&mut containerd.run_command(
        &work_id,
        true,
        &[format!("--cgroup={work_cgroup}")],
        WORKLOAD,
        &["/workload".into(), "1234".into()],
    ));

    let want = [
        ("cgroup", work_cgroup.as_str()),
        ("event", "syscalls:sys_enter_getppid"),
        ("container_id", work_id.as_str()),
        ("container_runtime", "containerd"),
    ];
    exporter.wait_for("the workload container's series", |body| {
        value(body, "cgperf_events_total", &want) == Some(0.0)
    });
    containerd.signal(&work_id, "SIGUSR1");
    exporter.wait_for("1234 getppid calls", |body| {
        value(body, "cgperf_events_total", &want) == Some(1234.0)
    });
    let body = exporter.wait_collections(3);
    assert_eq!(
        value(&body, "cgperf_events_total", &want),
        Some(1234.0),
        "exactly the workload's calls"
    );
    drop(containerd);
    drop(exporter);
}

/// A CRI v1 client on `socket`, and the runtime to drive it.
struct Cri {
    runtime: tokio::runtime::Runtime,
    client: RuntimeServiceClient<tonic::transport::Channel>,
}

impl Cri {
    fn connect(socket: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let path = socket.to_path_buf();
        let channel = runtime
            .block_on(
                tonic::transport::Endpoint::from_static("http://localhost").connect_with_connector(
                    tower::service_fn(move |_| {
                        let path = path.clone();
                        async move {
                            tokio::net::UnixStream::connect(path)
                                .await
                                .map(hyper_util::rt::TokioIo::new)
                        }
                    }),
                ),
            )
            .expect("connect to the CRI socket");
        Self {
            runtime,
            client: RuntimeServiceClient::new(channel),
        }
    }

    /// A pod on the host network whose cgroup is `cgroup_parent`.
    fn run_pod(&mut self, sandbox: &PodSandboxConfig) -> String {
        let request = RunPodSandboxRequest {
            config: Some(sandbox.clone()),
            ..Default::default()
        };
        self.runtime
            .block_on(self.client.run_pod_sandbox(request))
            .expect("RunPodSandbox")
            .into_inner()
            .pod_sandbox_id
    }

    fn run_container(
        &mut self,
        pod: &str,
        sandbox: &PodSandboxConfig,
        name: &str,
        image: &str,
        args: &[&str],
    ) -> String {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            args: args.iter().map(|a| a.to_string()).collect(),
            linux: Some(LinuxContainerConfig {
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(host_network()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = self
            .runtime
            .block_on(self.client.create_container(CreateContainerRequest {
                pod_sandbox_id: pod.into(),
                config: Some(config),
                sandbox_config: Some(sandbox.clone()),
            }))
            .expect("CreateContainer")
            .into_inner()
            .container_id;
        self.runtime
            .block_on(self.client.start_container(StartContainerRequest {
                container_id: id.clone(),
            }))
            .expect("StartContainer");
        id
    }
}

fn host_network() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        ..Default::default()
    }
}

/// kubelet's pod sandbox config for pod `name` in `namespace` with `uid`,
/// under kubelet's cgroupfs-driver pod cgroup below `root`.
fn sandbox_config(root: &str, name: &str, namespace: &str, uid: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            attempt: 0,
        }),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{root}/kubepods/besteffort/pod{uid}"),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(host_network()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A random pod UID in the Kubernetes API's form.
fn pod_uid() -> String {
    let hex = container_id(0x5e);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[test]
fn pods_and_containers_get_their_names_from_the_runtime_and_counting_survives_its_stop() {
    require_root("run containerd and open perf events in cgroup mode");
    let root = format!("/cgperf-cri-{}", std::process::id());
    let _root = RuntimeCgroup(root.clone());
    let mut containerd = Containerd::start_cri();
    containerd.import(workload(), WORKLOAD);

    let config = common::config_file(&format!(
        "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\n\
         labels: [kubernetes, containers]\ncgroups:\n\
         \x20 - match: {root}/kubepods/besteffort/*\n\
         \x20 - match: {root}/kubepods/besteffort/*/*\n"
    ));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cgperf"));
    cmd.arg(format!("--config.file={}", config.path().display()))
        .arg(format!("--cri.socket={}", containerd.socket().display()))
        .arg("--compat=cadvisor");
    let exporter = Exporter::spawn(cmd);

    let mut cri = Cri::connect(&containerd.socket());
    let uid = pod_uid();
    let sandbox = sandbox_config(&root, "counter", "cgperf-test", &uid);
    let pod = cri.run_pod(&sandbox);
    let work = cri.run_container(&pod, &sandbox, "work", WORKLOAD, &["1234"]);

    let pod_cgroup = format!("{root}/kubepods/besteffort/pod{uid}");
    let work_cgroup = format!("{pod_cgroup}/{work}");
    let event = ("event", "syscalls:sys_enter_getppid");
    let work_series = [
        ("cgroup", work_cgroup.as_str()),
        event,
        ("pod_uid", uid.as_str()),
        ("container_id", work.as_str()),
        ("container_runtime", "containerd"),
        ("pod", "counter"),
        ("namespace", "cgperf-test"),
        ("container", "work"),
        ("image", WORKLOAD),
    ];
    let pod_series = [
        ("cgroup", pod_cgroup.as_str()),
        event,
        ("pod_uid", uid.as_str()),
        ("pod", "counter"),
        ("namespace", "cgperf-test"),
    ];
    let sandbox_series = [
        ("cgroup", &*format!("{pod_cgroup}/{pod}")),
        event,
        ("container_id", pod.as_str()),
        ("pod", "counter"),
        ("container", "POD"),
    ];
    exporter.wait_for("the named series of the pod and its containers", |body| {
        [&work_series[..], &pod_series, &sandbox_series]
            .iter()
            .all(|s| value(body, "cgperf_events_total", s).is_some())
    });
    // What the runtime's own processes did in the pod's cgroups while
    // setting them up (runc calls getppid) is counted too: measure from a
    // settled baseline.
    let body = exporter.wait_collections(3);
    let work_before = value(&body, "cgperf_events_total", &work_series).expect("work series");
    let pod_before = value(&body, "cgperf_events_total", &pod_series).expect("pod series");
    containerd.signal(&work, "SIGUSR1");
    exporter.wait_for("1234 calls in the container and its pod", |body| {
        value(body, "cgperf_events_total", &work_series) == Some(work_before + 1234.0)
            && value(body, "cgperf_events_total", &pod_series) == Some(pod_before + 1234.0)
    });
    let body = exporter.scrape();
    assert_eq!(value(&body, "cgperf_cri_failures_total", &[]), Some(0.0));
    // cAdvisor's series of the container carry the same names under its
    // labels, and the same count.
    let cadvisor = [
        ("id", work_cgroup.as_str()),
        ("name", work.as_str()),
        ("image", WORKLOAD),
        ("container", "work"),
        ("pod", "counter"),
        ("namespace", "cgperf-test"),
        ("cpu", ""),
        event,
    ];
    let counted = value(&body, "cgperf_events_total", &work_series).expect("work series");
    assert_eq!(
        value(&body, "container_perf_events_total", &cadvisor),
        Some(counted),
        "{body}"
    );

    // The runtime stops; its containers run on. A pod cgroup that appears
    // now cannot be named: the failure is counted and it keeps its UID.
    let work_pid = containerd.pid(&work);
    containerd.stop();
    let orphan_uid = pod_uid();
    let orphan = common::TestCgroup::create_under(
        &format!("{root}/kubepods/besteffort"),
        &format!("pod{orphan_uid}"),
    );
    let body = exporter.wait_for("a counted CRI failure", |body| {
        value(body, "cgperf_cri_failures_total", &[]).is_some_and(|n| n >= 1.0)
            && value(
                body,
                "cgperf_events_total",
                &[
                    ("cgroup", orphan.rel.as_str()),
                    ("pod_uid", orphan_uid.as_str()),
                ],
            ) == Some(0.0)
    });
    let orphan_line = body
        .lines()
        .find(|l| l.starts_with("cgperf_events_total{") && l.contains(&orphan_uid))
        .expect("the new pod's series");
    assert!(!orphan_line.contains("pod=\""), "{orphan_line}");
    // SAFETY: signalling the workload by its host pid.
    let pid: i32 = work_pid.parse().expect("pid");
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    exporter.wait_for("1234 more calls, still named", |body| {
        value(body, "cgperf_events_total", &work_series) == Some(work_before + 2468.0)
            && value(body, "cgperf_events_total", &pod_series) == Some(pod_before + 2468.0)
    });
    drop(orphan);
    drop(containerd);
}
