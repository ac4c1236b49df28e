//! Names of Kubernetes pods and containers — `pod`, `namespace`,
//! `container`, `image` — from the container runtime's CRI API.
//!
//! cgroup paths carry only a pod's UID and a container's ID
//! ([`crate::labels`]); the runtime that created them knows the names users
//! query by. A resolver thread asks the runtime's CRI socket (containerd,
//! CRI-O) for its pod sandboxes and containers and keeps a table from IDs
//! to names. The sampler only reads that table: it never waits on the
//! runtime. When the runtime is slow or gone, a refresh gives up after a
//! bounded wait, the failure is counted and logged, the names already known
//! stay, and cgroups that appear meanwhile keep their UID labels until a
//! refresh succeeds.

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{ListContainersRequest, ListPodSandboxRequest, VersionRequest};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Where containerd, CRI-O and k3s's containerd put their CRI sockets; the
/// default of `--cri.socket`.
pub const DEFAULT_SOCKETS: &[&str] = &[
    "/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/run/k3s/containerd/containerd.sock",
];

/// The longest a refresh waits for one runtime (connect and every call).
const TIMEOUT: Duration = Duration::from_secs(2);
/// Refresh this often even when no cgroup appears, so that a runtime that
/// comes back is noticed.
const PERIOD: Duration = Duration::from_secs(30);

/// The names of one pod, or of one container and its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    pod: Box<str>,
    namespace: Box<str>,
    /// `None` for a pod; `POD` for a pod's sandbox (pause) container, as
    /// cAdvisor names it.
    container: Option<Box<str>>,
    image: Option<Box<str>>,
    runtime: Box<str>,
}

/// IDs to names, as of the last successful refresh of each socket.
#[derive(Debug, Default)]
struct Table {
    /// By container ID (sandbox IDs included).
    containers: HashMap<Box<str>, Entry>,
    /// By pod UID.
    pods: HashMap<Box<str>, Entry>,
}

#[derive(Debug, Default)]
struct Shared {
    /// One table per socket, replaced whole by each successful refresh.
    tables: RwLock<Vec<Table>>,
    failures: AtomicU64,
}

/// The names the runtimes know, shared with the resolver thread.
#[derive(Debug, Clone)]
pub struct Names {
    shared: Arc<Shared>,
    wake: SyncSender<()>,
}

impl Names {
    /// Starts the resolver thread for `sockets` (tried in order; one that
    /// does not exist is skipped) and asks for a first refresh.
    pub fn start(sockets: Vec<PathBuf>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            tables: RwLock::new(sockets.iter().map(|_| Table::default()).collect()),
            failures: AtomicU64::new(0),
        });
        // One pending wake-up is enough: a refresh reads everything.
        let (wake, woken) = std::sync::mpsc::sync_channel(1);
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("cgperf-cri".into())
            .spawn(move || resolve(&thread_shared, &sockets, &woken))?;
        let names = Self { shared, wake };
        names.refresh();
        Ok(names)
    }

    /// Asks the resolver for a refresh (a cgroup appeared), without waiting.
    pub fn refresh(&self) {
        match self.wake.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }

    /// Refreshes that failed so far (runtime unreachable, slow or erring).
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// The name labels of the cgroup whose path labels are `labels`: by its
    /// `container_id`, else its `pod_uid`. `None` when neither is known
    /// (yet); then the cgroup keeps its ID labels.
    pub fn lookup(
        &self,
        labels: &[(&'static str, Box<str>)],
    ) -> Option<Vec<(&'static str, Box<str>)>> {
        let get = |name: &str| labels.iter().find(|(k, _)| *k == name).map(|(_, v)| &**v);
        let tables = self.shared.tables.read().ok()?;
        let entry = match get(crate::labels::CONTAINER_ID) {
            Some(id) => tables.iter().find_map(|t| t.containers.get(id)),
            None => get(crate::labels::POD_UID)
                .and_then(|uid| tables.iter().find_map(|t| t.pods.get(uid))),
        }?;
        let mut out = vec![
            (POD, entry.pod.clone()),
            (NAMESPACE, entry.namespace.clone()),
        ];
        if let Some(container) = &entry.container {
            out.push((CONTAINER, container.clone()));
        }
        if let Some(image) = &entry.image {
            out.push((IMAGE, image.clone()));
        }
        if entry.container.is_some() && get(crate::labels::CONTAINER_RUNTIME).is_none() {
            out.push((crate::labels::CONTAINER_RUNTIME, entry.runtime.clone()));
        }
        Some(out)
    }
}

/// Label names the runtime's names are exported under (cAdvisor's).
pub const POD: &str = "pod";
/// See [`POD`].
pub const NAMESPACE: &str = "namespace";
/// See [`POD`].
pub const CONTAINER: &str = "container";
/// See [`POD`].
pub const IMAGE: &str = "image";

/// The resolver thread: refreshes when woken or every [`PERIOD`], until
/// every [`Names`] is dropped.
fn resolve(shared: &Shared, sockets: &[PathBuf], woken: &Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("CRI names disabled: cannot start the resolver's runtime: {e}");
            return;
        }
    };
    let mut state = vec![Reach::Never; sockets.len()];
    let mut told_absent = false;
    loop {
        match woken.recv_timeout(PERIOD) {
            Ok(()) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        for (i, socket) in sockets.iter().enumerate() {
            // A socket that never existed is a runtime this node does not
            // run; one that did and is gone is a runtime that stopped.
            let result = if socket.exists() {
                runtime.block_on(async {
                    tokio::time::timeout(TIMEOUT, list(socket))
                        .await
                        .unwrap_or_else(|_| Err(format!("no answer within {TIMEOUT:?}")))
                })
            } else if state[i] == Reach::Never {
                continue;
            } else {
                Err("the socket is gone".to_string())
            };
            match result {
                Ok(table) => {
                    if state[i] == Reach::Failing {
                        tracing::info!(socket = %socket.display(), "CRI runtime reachable again");
                    }
                    state[i] = Reach::Ok;
                    if let Ok(mut tables) = shared.tables.write() {
                        tables[i] = table;
                    }
                }
                Err(e) => {
                    shared.failures.fetch_add(1, Ordering::Relaxed);
                    if state[i] != Reach::Failing {
                        tracing::warn!(
                            socket = %socket.display(),
                            "CRI runtime unreachable; pods and containers that appear keep their ID labels: {e}"
                        );
                    }
                    state[i] = Reach::Failing;
                }
            }
        }
        if !told_absent && state.iter().all(|s| *s == Reach::Never) {
            tracing::info!(
                sockets = ?sockets,
                "no CRI socket found; pods and containers keep their ID labels"
            );
            told_absent = true;
        }
    }
}

/// What a resolver knows of one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Never found.
    Never,
    /// The last refresh succeeded.
    Ok,
    /// The last refresh failed (logged once per outage).
    Failing,
}

/// Every pod sandbox and container one runtime knows.
async fn list(socket: &Path) -> Result<Table, String> {
    let path = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let mut client = RuntimeServiceClient::new(channel);
    let status = |what: &str, e: tonic::Status| format!("{what}: {}", e.message());
    let runtime: Box<str> = client
        .version(VersionRequest {
            version: "v1".into(),
        })
        .await
        .map_err(|e| status("Version", e))?
        .into_inner()
        .runtime_name
        .into();
    let pods = client
        .list_pod_sandbox(ListPodSandboxRequest { filter: None })
        .await
        .map_err(|e| status("ListPodSandbox", e))?
        .into_inner()
        .items;
    let containers = client
        .list_containers(ListContainersRequest { filter: None })
        .await
        .map_err(|e| status("ListContainers", e))?
        .into_inner()
        .containers;
    let mut table = Table::default();
    let mut sandboxes = HashMap::new();
    for pod in pods {
        let Some(meta) = pod.metadata else { continue };
        let entry = Entry {
            pod: meta.name.into(),
            namespace: meta.namespace.into(),
            container: None,
            image: None,
            runtime: runtime.clone(),
        };
        table.containers.insert(
            pod.id.as_str().into(),
            Entry {
                container: Some("POD".into()),
                ..entry.clone()
            },
        );
        sandboxes.insert(pod.id, entry.clone());
        table.pods.insert(meta.uid.into(), entry);
    }
    for c in containers {
        let (Some(pod), Some(meta)) = (sandboxes.get(&c.pod_sandbox_id), c.metadata) else {
            continue;
        };
        // kubelet passes the image's ID and, apart, the name the user
        // wrote: prefer a name.
        let is_name = |s: &String| !s.is_empty() && !s.starts_with("sha256:");
        let image = c
            .image
            .and_then(|i| [i.user_specified_image, i.image].into_iter().find(is_name))
            .or_else(|| Some(c.image_ref).filter(is_name));
        table.containers.insert(
            c.id.into(),
            Entry {
                container: Some(meta.name.into()),
                image: image.map(Into::into),
                ..pod.clone()
            },
        );
    }
    Ok(table)
}
