//! The storage side of the plugin: what a volume is once its request has been checked
//! (`Volume`), what is published on this node (`Published`), and the `VolumeBackend`
//! trait the binary implements with the store, mount(2) and the node's mount daemon.
//!
//! The trait is synchronous: the gRPC services call it through
//! `tokio::task::spawn_blocking`, so an implementation may block (resolve a revision over
//! the network, mount, talk to a daemon) without stalling the server. The services do the
//! validation, the idempotency and the mapping to gRPC codes; a backend only does the
//! work, and says with a `VolumeError` which kind of failure it met.

use std::path::{Path, PathBuf};

/// A volume to publish, as validated from a `NodePublishVolume` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Volume {
    /// The CO's volume id (`csi-<sha256>` for an inline volume, the PV's `volumeHandle`).
    pub volume_id: String,
    /// Where to mount: absolute, no `..`. Its parent exists (the CO made it); the target
    /// itself may not (the backend creates it).
    pub target: PathBuf,
    /// The repository, `org/name`.
    pub repo: String,
    /// The revision as asked (a branch, tag or commit); `main` when the volume gives none.
    pub revision: String,
    /// The pod the volume is published for, when kubelet sends it (`podInfoOnMount: true`).
    pub pod: Option<PodInfo>,
    /// An inline (ephemeral) volume of one pod, rather than a PersistentVolume.
    pub ephemeral: bool,
}

/// The pod a volume is published for, from kubelet's `csi.storage.k8s.io/*` keys of the
/// volume context. Kubelet sends the four together; a key it left out is empty here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodInfo {
    /// `csi.storage.k8s.io/pod.name`.
    pub name: String,
    /// `csi.storage.k8s.io/pod.namespace`.
    pub namespace: String,
    /// `csi.storage.k8s.io/pod.uid`.
    pub uid: String,
    /// `csi.storage.k8s.io/serviceAccount.name`.
    pub service_account: String,
}

/// A volume published on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The CO's volume id it was published under.
    pub volume_id: String,
    /// Where it is mounted.
    pub target: PathBuf,
    /// The repository, `org/name`.
    pub repo: String,
    /// The revision as asked when it was published.
    pub revision: String,
    /// The commit `revision` resolved to at publish, pinned for the volume's life.
    pub commit: String,
}

/// Why a backend call failed; the services answer each kind with its gRPC code. Each
/// message names the thing involved (the repository, revision, target or daemon).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The repository or revision does not exist (`NOT_FOUND`; kubelet gives up the
    /// attempt and removes its directory).
    #[error("not found: {0}")]
    NotFound(String),
    /// The request cannot be served as asked (`INVALID_ARGUMENT`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Something the backend needs is unreachable for now: the store, the mount daemon
    /// (`UNAVAILABLE`; kubelet keeps its directory and retries).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Anything else (`INTERNAL`).
    #[error("internal error: {0}")]
    Internal(String),
}

/// The storage and mount side of the node plugin, which the binary implements.
pub trait VolumeBackend: Send + Sync + 'static {
    /// Resolves the revision once, creates the target directory, mounts, hands the mount
    /// to the node's mount daemon. On error leaves no mount, no directory it created, no
    /// process.
    fn publish(&self, v: &Volume) -> Result<Published, VolumeError>;

    /// Unmounts what is mounted at target (if it is ours) and removes the directory.
    /// Missing target: Ok.
    fn unpublish(&self, volume_id: &str, target: &Path) -> Result<(), VolumeError>;

    /// The volumes published on this node now (survives a restart of the plugin: the
    /// backend asks the mount daemon).
    fn published(&self) -> Result<Vec<Published>, VolumeError>;
}
