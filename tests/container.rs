//! The container image, built from the repository's Dockerfile and run under
//! a real container runtime (containerd + runc) the way
//! deploy/kubernetes/daemonset.yaml runs it: its image, command, capability
//! set, read-only root and host mounts, read from the manifest.
//!
//! There is no registry and no Docker daemon here: the Rust builder image is
//! made locally with debootstrap (Debian's packages) plus the toolchain this
//! test was built with, mounted into the build; the crates come from this
//! machine's cargo cache. containerd runs on a private socket and root.
//!
//! Needs root, `buildah`, `containerd`, `runc`, `ctr`, `debootstrap` and a
//! static C toolchain (`gcc`, `libc6-dev`); scripts/test installs them.
mod common;

use common::{Exporter, require_root, value};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Bump when the builder's package list changes, so that a cached builder
/// image is rebuilt.
const BUILDER: &str = "localhost/cgperf-rust-builder:bookworm-1";
/// Packages the Dockerfile's build stage needs besides a Rust toolchain.
const BUILDER_PACKAGES: &str = "gcc,libc6-dev,ca-certificates";
const WORKLOAD: &str = "localhost/cgperf-test-workload:latest";

/// A scratch directory of this test binary that survives between runs
/// (the builder's root filesystem, cargo's target directory of the image
/// build, image archives).
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("container");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Runs `cmd`, failing the test with its output unless it succeeds; returns
/// its stdout.
#[track_caller]
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e} (scripts/test installs it)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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

/// The Debian-based Rust builder image: debootstrap's minimal system with
/// the build stage's packages. The toolchain is not copied in: the build
/// mounts this test's own (`rustc --print sysroot`) at /usr/local/rust.
fn builder_image() {
    if succeeds(Command::new("buildah").args(["inspect", "--type", "image", BUILDER])) {
        return;
    }
    let rootfs = scratch().join("builder-rootfs");
    if rootfs.exists() {
        std::fs::remove_dir_all(&rootfs).expect("remove an old builder root");
    }
    run(Command::new("debootstrap").args([
        "--variant=minbase",
        &format!("--include={BUILDER_PACKAGES}"),
        "bookworm",
        rootfs.to_str().expect("UTF-8 path"),
        "http://deb.debian.org/debian",
    ]));
    for cache in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        let _ = std::fs::remove_dir_all(rootfs.join(cache));
    }
    let c = buildah(&["from", "scratch"]);
    let c = c.trim();
    buildah(&["add", c, rootfs.to_str().expect("UTF-8 path"), "/"]);
    buildah(&[
        "config",
        "--env",
        "PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--env",
        "CARGO_HOME=/usr/local/cargo",
        c,
    ]);
    buildah(&["commit", "-q", "--rm", c, BUILDER]);
    let _ = std::fs::remove_dir_all(&rootfs);
}

/// The image the Dockerfile builds, tagged as `image` and saved as an OCI
/// archive (containerd imports it from there).
fn cgperf_image(image: &str) -> PathBuf {
    builder_image();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sysroot = run(Command::new("rustc").args(["--print", "sysroot"]));
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let registry = cargo_home.join("registry");
    let target = scratch().join("cargo-target");
    std::fs::create_dir_all(&target).expect("target directory");
    let started = Instant::now();
    run(Command::new("buildah")
        .current_dir(repo)
        .args([
            "build",
            "--layers=false",
            "--network=host",
            "-f",
            "Dockerfile",
        ])
        .args(["--build-arg", &format!("RUST_IMAGE={BUILDER}")])
        .args(["--build-arg", "CARGO_NET_OFFLINE=true"])
        .arg(format!("--volume={}:/usr/local/rust:ro", sysroot.trim()))
        .arg(format!(
            "--volume={}:/usr/local/cargo/registry",
            registry.display()
        ))
        .arg(format!("--volume={}:/src/target", target.display()))
        .args(["-t", image, "."]));
    eprintln!(
        "built {image} from the Dockerfile in {:.0?}",
        started.elapsed()
    );
    oci_archive(image, "cgperf")
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

/// A static program for the other container: waits for SIGUSR1, then makes
/// exactly N getppid system calls (N = argv[1]), then waits to be killed.
/// Nothing else in it calls getppid.
const WORKLOAD_C: &str = r#"
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile sig_atomic_t go;
static void on_usr1(int sig) { (void)sig; go = 1; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 0;
    signal(SIGUSR1, on_usr1);
    while (!go) pause();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    for (;;) pause();
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
    buildah(&["commit", "-q", "--rm", c, WORKLOAD]);
    oci_archive(WORKLOAD, "workload")
}

/// Both images, built once per test binary.
struct Images {
    cgperf: String,
    cgperf_archive: PathBuf,
    workload_archive: PathBuf,
}

fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let cgperf = daemonset().image.clone();
        Images {
            cgperf_archive: cgperf_image(&cgperf),
            cgperf,
            workload_archive: workload_image(),
        }
    })
}

/// containerd on a private socket, root and state directory, killed (after
/// its containers) when dropped.
struct Containerd {
    child: std::process::Child,
    dir: tempfile::TempDir,
    namespace: String,
    containers: Vec<String>,
}

impl Containerd {
    fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("cgperf-containerd-")
            .tempdir()
            .expect("containerd directory");
        let root = dir.path();
        let config = format!(
            "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n\
             [grpc]\n  address = \"{0}/containerd.sock\"\n\
             [ttrpc]\n  address = \"{0}/containerd.sock.ttrpc\"\n",
            root.display()
        );
        std::fs::write(root.join("config.toml"), config).expect("containerd config");
        let log = std::fs::File::create(root.join("containerd.log")).expect("log file");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(root.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("containerd starts (scripts/test installs it)");
        let containerd = Self {
            child,
            dir,
            namespace: format!("cgperf-test-{}", std::process::id()),
            containers: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !succeeds(&mut containerd.ctr(&["version"])) {
            assert!(
                Instant::now() < deadline,
                "containerd did not answer within 30 s: {}",
                containerd.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        containerd
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
        cmd.args(flags).args([image, id]).args(command);
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
    fn drop(&mut self) {
        for id in self.containers.iter().rev() {
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
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// What the test takes from deploy/kubernetes/daemonset.yaml.
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeMount {
    name: String,
    mount_path: String,
    #[serde(default)]
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

/// The DaemonSet's pod spec, as written.
fn pod() -> &'static PodSpec {
    static POD: OnceLock<PodSpec> = OnceLock::new();
    POD.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/daemonset.yaml");
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
            Some(h) => PathBuf::from(&h.path),
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

/// Removes `rel` (relative to the cgroup roots) from the cgroup2 tree and,
/// on hybrid machines, from every v1 hierarchy runc also created it in.
struct RuntimeCgroup(String);

impl Drop for RuntimeCgroup {
    fn drop(&mut self) {
        let rel = self.0.trim_start_matches('/');
        let _ = std::fs::remove_dir(common::cgroup2_root().join(rel));
        if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in hierarchies.flatten() {
                let _ = std::fs::remove_dir(h.path().join(rel));
            }
        }
    }
}

/// The task `pid` runs confined as the DaemonSet says: exactly its added
/// capabilities (cgperf keeps both), no privilege gain, the runtime's
/// seccomp filter, a read-only root filesystem.
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
    for set in ["CapBnd:", "CapPrm:", "CapEff:"] {
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
    let images = images();
    let c = daemonset();
    assert_eq!(
        c.image,
        format!("localhost/cgperf:{}", env!("CARGO_PKG_VERSION")),
        "the DaemonSet runs the image the Dockerfile builds, tagged with this version"
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
    containerd.import(&images.cgperf_archive, &images.cgperf);
    containerd.import(&images.workload_archive, WORKLOAD);
    let work_id = container_id(0xc0);
    let work_cgroup = format!("{parent}/cri-containerd-{work_id}.scope");

    let config_dir = tempfile::tempdir().expect("config directory");
    std::fs::write(
        config_dir.path().join("cgperf.yaml"),
        format!(
            "interval: 200ms\ntracepoints: [syscalls:sys_enter_getppid]\nlabels: [containers]\n\
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
