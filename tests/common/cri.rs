//! A container runtime's CRI API that knows only names: a fixed list of
//! pod sandboxes and containers, served on a Unix socket, for tests that
//! need cgperf's `namespace`, `pod` and `container` labels without a real
//! runtime. Every call but the three cgperf makes answers UNIMPLEMENTED.

use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_server::{RuntimeService, RuntimeServiceServer};
use std::path::PathBuf;
use tonic::{Request, Response, Status};

/// A pod and its containers, as the runtime names them.
#[derive(Debug, Clone)]
pub struct FakePod {
    /// The sandbox's ID (any string).
    pub sandbox: String,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// (container ID, name in the pod spec).
    pub containers: Vec<(String, String)>,
}

#[derive(Debug, Clone)]
struct Runtime {
    pods: Vec<FakePod>,
}

/// The fake runtime, serving until dropped.
pub struct FakeCri {
    /// Its socket: cgperf's `--cri.socket`.
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

impl FakeCri {
    /// Serves `pods` on a socket of a new temporary directory.
    pub fn serve(pods: Vec<FakePod>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("cri.sock");
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let listener = {
            let _entered = runtime.enter();
            tokio::net::UnixListener::bind(&socket).expect("bind the CRI socket")
        };
        let incoming = tonic::codegen::tokio_stream::wrappers::UnixListenerStream::new(listener);
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(RuntimeServiceServer::new(Runtime { pods }))
                .serve_with_incoming(incoming),
        );
        Self {
            socket,
            _dir: dir,
            _runtime: runtime,
        }
    }

    /// `--cri.socket=` this socket.
    pub fn flag(&self) -> String {
        format!("--cri.socket={}", self.socket.display())
    }
}

/// An UNIMPLEMENTED answer, as a runtime gives for a call it lacks.
fn lacks<T>(call: &str) -> Result<Response<T>, Status> {
    Err(Status::unimplemented(call.to_owned()))
}

#[tonic::async_trait]
impl RuntimeService for Runtime {
    type GetContainerEventsStream = std::pin::Pin<
        Box<
            dyn tonic::codegen::tokio_stream::Stream<
                    Item = Result<cri::ContainerEventResponse, Status>,
                > + Send,
        >,
    >;

    async fn version(
        &self,
        _: Request<cri::VersionRequest>,
    ) -> Result<Response<cri::VersionResponse>, Status> {
        Ok(Response::new(cri::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: "fake".into(),
            runtime_version: "1".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn list_pod_sandbox(
        &self,
        _: Request<cri::ListPodSandboxRequest>,
    ) -> Result<Response<cri::ListPodSandboxResponse>, Status> {
        let items = self
            .pods
            .iter()
            .map(|p| cri::PodSandbox {
                id: p.sandbox.clone(),
                metadata: Some(cri::PodSandboxMetadata {
                    name: p.name.clone(),
                    uid: p.uid.clone(),
                    namespace: p.namespace.clone(),
                    attempt: 0,
                }),
                ..Default::default()
            })
            .collect();
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    async fn list_containers(
        &self,
        _: Request<cri::ListContainersRequest>,
    ) -> Result<Response<cri::ListContainersResponse>, Status> {
        let containers = self
            .pods
            .iter()
            .flat_map(|p| {
                p.containers.iter().map(|(id, name)| cri::Container {
                    id: id.clone(),
                    pod_sandbox_id: p.sandbox.clone(),
                    metadata: Some(cri::ContainerMetadata {
                        name: name.clone(),
                        attempt: 0,
                    }),
                    ..Default::default()
                })
            })
            .collect();
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn run_pod_sandbox(
        &self,
        _: Request<cri::RunPodSandboxRequest>,
    ) -> Result<Response<cri::RunPodSandboxResponse>, Status> {
        lacks("run_pod_sandbox")
    }

    async fn stop_pod_sandbox(
        &self,
        _: Request<cri::StopPodSandboxRequest>,
    ) -> Result<Response<cri::StopPodSandboxResponse>, Status> {
        lacks("stop_pod_sandbox")
    }

    async fn remove_pod_sandbox(
        &self,
        _: Request<cri::RemovePodSandboxRequest>,
    ) -> Result<Response<cri::RemovePodSandboxResponse>, Status> {
        lacks("remove_pod_sandbox")
    }

    async fn pod_sandbox_status(
        &self,
        _: Request<cri::PodSandboxStatusRequest>,
    ) -> Result<Response<cri::PodSandboxStatusResponse>, Status> {
        lacks("pod_sandbox_status")
    }

    async fn create_container(
        &self,
        _: Request<cri::CreateContainerRequest>,
    ) -> Result<Response<cri::CreateContainerResponse>, Status> {
        lacks("create_container")
    }

    async fn start_container(
        &self,
        _: Request<cri::StartContainerRequest>,
    ) -> Result<Response<cri::StartContainerResponse>, Status> {
        lacks("start_container")
    }

    async fn stop_container(
        &self,
        _: Request<cri::StopContainerRequest>,
    ) -> Result<Response<cri::StopContainerResponse>, Status> {
        lacks("stop_container")
    }

    async fn remove_container(
        &self,
        _: Request<cri::RemoveContainerRequest>,
    ) -> Result<Response<cri::RemoveContainerResponse>, Status> {
        lacks("remove_container")
    }

    async fn container_status(
        &self,
        _: Request<cri::ContainerStatusRequest>,
    ) -> Result<Response<cri::ContainerStatusResponse>, Status> {
        lacks("container_status")
    }

    async fn update_container_resources(
        &self,
        _: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Result<Response<cri::UpdateContainerResourcesResponse>, Status> {
        lacks("update_container_resources")
    }

    async fn reopen_container_log(
        &self,
        _: Request<cri::ReopenContainerLogRequest>,
    ) -> Result<Response<cri::ReopenContainerLogResponse>, Status> {
        lacks("reopen_container_log")
    }

    async fn exec_sync(
        &self,
        _: Request<cri::ExecSyncRequest>,
    ) -> Result<Response<cri::ExecSyncResponse>, Status> {
        lacks("exec_sync")
    }

    async fn exec(
        &self,
        _: Request<cri::ExecRequest>,
    ) -> Result<Response<cri::ExecResponse>, Status> {
        lacks("exec")
    }

    async fn attach(
        &self,
        _: Request<cri::AttachRequest>,
    ) -> Result<Response<cri::AttachResponse>, Status> {
        lacks("attach")
    }

    async fn port_forward(
        &self,
        _: Request<cri::PortForwardRequest>,
    ) -> Result<Response<cri::PortForwardResponse>, Status> {
        lacks("port_forward")
    }

    async fn container_stats(
        &self,
        _: Request<cri::ContainerStatsRequest>,
    ) -> Result<Response<cri::ContainerStatsResponse>, Status> {
        lacks("container_stats")
    }

    async fn list_container_stats(
        &self,
        _: Request<cri::ListContainerStatsRequest>,
    ) -> Result<Response<cri::ListContainerStatsResponse>, Status> {
        lacks("list_container_stats")
    }

    async fn pod_sandbox_stats(
        &self,
        _: Request<cri::PodSandboxStatsRequest>,
    ) -> Result<Response<cri::PodSandboxStatsResponse>, Status> {
        lacks("pod_sandbox_stats")
    }

    async fn list_pod_sandbox_stats(
        &self,
        _: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Result<Response<cri::ListPodSandboxStatsResponse>, Status> {
        lacks("list_pod_sandbox_stats")
    }

    async fn update_runtime_config(
        &self,
        _: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<cri::UpdateRuntimeConfigResponse>, Status> {
        lacks("update_runtime_config")
    }

    async fn status(
        &self,
        _: Request<cri::StatusRequest>,
    ) -> Result<Response<cri::StatusResponse>, Status> {
        lacks("status")
    }

    async fn checkpoint_container(
        &self,
        _: Request<cri::CheckpointContainerRequest>,
    ) -> Result<Response<cri::CheckpointContainerResponse>, Status> {
        lacks("checkpoint_container")
    }

    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        lacks("get_container_events")
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Result<Response<cri::ListMetricDescriptorsResponse>, Status> {
        lacks("list_metric_descriptors")
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<cri::ListPodSandboxMetricsResponse>, Status> {
        lacks("list_pod_sandbox_metrics")
    }

    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> Result<Response<cri::RuntimeConfigResponse>, Status> {
        lacks("runtime_config")
    }
}
