//! The parts of the Kubernetes manifests (deploy/kubernetes/) that more than
//! one test reads, as the manifests write them.

use serde::Deserialize;

/// A container's `volumeMounts` entry.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(default)]
    pub read_only: bool,
}

/// A pod's `volumes` entry (hostPath ones; others have `host_path: None`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    pub host_path: Option<HostPath>,
}

/// A hostPath volume's path and `type` (empty when not given).
#[derive(Deserialize)]
pub struct HostPath {
    pub path: String,
    #[serde(rename = "type", default)]
    pub kind: String,
}
