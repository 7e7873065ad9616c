//! The CSI Node service: NodeGetInfo and NodeGetCapabilities (none), and
//! NodePublishVolume / NodeUnpublishVolume over a `VolumeBackend`. It owns the request
//! checks (through `validate`), the idempotency the spec asks for, one lock per target
//! path, and the mapping of backend errors to gRPC codes; the backend does the work.
//!
//! Publish with a target that the backend already lists under the same volume id,
//! repository and revision answers OK without publishing again (the commit stays the one
//! pinned at the first publish); the same target with other arguments is
//! `ALREADY_EXISTS`. Stage, Unstage, GetVolumeStats and Expand are `UNIMPLEMENTED`: the
//! plugin advertises none of their capabilities, so kubelet never calls them.

use std::path::PathBuf;
use std::sync::Arc;

use tonic::{Code, Request, Response, Status};

use crate::backend::{Published, Volume, VolumeBackend, VolumeError};
use crate::identity::DRIVER_NAME;
use crate::locks::{TargetGuard, TargetLocks};
use crate::proto::node_server::Node;
use crate::proto::{
    NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesRequest,
    NodeGetCapabilitiesResponse, NodeGetInfoRequest, NodeGetInfoResponse,
    NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse, NodePublishVolumeRequest,
    NodePublishVolumeResponse, NodeStageVolumeRequest, NodeStageVolumeResponse,
    NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse, NodeUnstageVolumeRequest,
    NodeUnstageVolumeResponse,
};
use crate::validate;

/// Answers the Node RPCs for one node.
pub(crate) struct NodeService {
    node_id: String,
    backend: Arc<dyn VolumeBackend>,
    locks: TargetLocks,
}

/// What a publish did.
enum Publish {
    /// The backend published it now.
    New(Published),
    /// It was published already, with the same arguments.
    Again(Published),
}

impl NodeService {
    pub(crate) fn new(node_id: String, backend: Arc<dyn VolumeBackend>) -> Self {
        Self {
            node_id,
            backend,
            locks: TargetLocks::default(),
        }
    }

    /// Runs `f` on the blocking pool, holding `guard` until `f` returns, even when the
    /// caller gives up first (its future dropped: kubelet's deadline passed).
    async fn locked<T: Send + 'static>(
        &self,
        guard: TargetGuard,
        f: impl FnOnce(&dyn VolumeBackend) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let backend = Arc::clone(&self.backend);
        let work = move || {
            let _guard = guard;
            f(backend.as_ref())
        };
        match tokio::task::spawn_blocking(work).await {
            Ok(result) => result,
            Err(e) => Err(Status::internal(format!(
                "the volume backend's call did not finish: {e}"
            ))),
        }
    }

    /// Publishes `v` unless its target has it already.
    async fn publish(&self, v: Volume) -> Result<Publish, Status> {
        let guard = self.locks.lock(&v.target).await;
        self.locked(guard, move |b| publish_once(b, v)).await
    }

    async fn unpublish(&self, volume_id: String, target: PathBuf) -> Result<(), Status> {
        let guard = self.locks.lock(&target).await;
        self.locked(guard, move |b| {
            b.unpublish(&volume_id, &target).map_err(status)
        })
        .await
    }
}

/// Publishes `v` through `b` unless its target has it: with the same volume id, repository
/// and revision that is done (the commit stays pinned); with others, `ALREADY_EXISTS`.
fn publish_once(b: &dyn VolumeBackend, v: Volume) -> Result<Publish, Status> {
    let published = b.published().map_err(status)?;
    if let Some(p) = published.into_iter().find(|p| p.target == v.target) {
        if p.volume_id == v.volume_id && p.repo == v.repo && p.revision == v.revision {
            return Ok(Publish::Again(p));
        }
        return Err(Status::already_exists(format!(
            "target_path {:?} has volume {:?} ({}@{}) published; this request asks volume \
             {:?} ({}@{}) there: unpublish it first, or publish at another target",
            v.target, p.volume_id, p.repo, p.revision, v.volume_id, v.repo, v.revision
        )));
    }
    b.publish(&v).map(Publish::New).map_err(status)
}

/// The gRPC code of a backend error (kubelet retries UNAVAILABLE, keeping its directory;
/// the others are final for that attempt).
fn status(e: VolumeError) -> Status {
    match e {
        VolumeError::NotFound(m) => Status::not_found(m),
        VolumeError::InvalidArgument(m) => Status::invalid_argument(m),
        VolumeError::Unavailable(m) => Status::unavailable(m),
        VolumeError::Internal(m) => Status::internal(m),
    }
}

/// Logs a refused or failed call once, at a level by its code.
fn log_failure(rpc: &str, volume_id: &str, target: &str, s: &Status) {
    let (code, message) = (s.code(), s.message());
    match code {
        Code::Internal | Code::Unknown => {
            tracing::error!(rpc, volume_id, target, ?code, message, "failed");
        }
        _ => tracing::warn!(rpc, volume_id, target, ?code, message, "refused or failed"),
    }
}

fn unimplemented(rpc: &str, why: &str) -> Status {
    tracing::warn!(rpc, "called, but not implemented");
    Status::unimplemented(format!("{rpc} is not implemented by {DRIVER_NAME}: {why}"))
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        let (id, target) = (req.volume_id.as_str(), req.target_path.as_str());
        let outcome = match validate::publish_request(&req) {
            Ok(v) => self.publish(v).await,
            Err(e) => Err(Status::invalid_argument(e.0)),
        };
        let (p, what) = match outcome {
            Ok(Publish::New(p)) => (p, "published"),
            Ok(Publish::Again(p)) => (p, "published already, with the same arguments"),
            Err(s) => {
                log_failure("NodePublishVolume", id, target, &s);
                return Err(s);
            }
        };
        tracing::info!(
            rpc = "NodePublishVolume",
            volume_id = id,
            target,
            repo = p.repo,
            revision = p.revision,
            commit = p.commit,
            "{what}"
        );
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        let (id, target) = (req.volume_id.as_str(), req.target_path.as_str());
        let outcome = if id.is_empty() {
            Err(Status::invalid_argument(
                "volume_id is empty: send the id the volume was published under",
            ))
        } else {
            match validate::target_path("target_path", target) {
                Ok(path) => self.unpublish(id.to_owned(), path).await,
                Err(e) => Err(Status::invalid_argument(e.0)),
            }
        };
        if let Err(s) = outcome {
            log_failure("NodeUnpublishVolume", id, target, &s);
            return Err(s);
        }
        tracing::info!(
            rpc = "NodeUnpublishVolume",
            volume_id = id,
            target,
            "unpublished"
        );
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_info(
        &self,
        _request: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        tracing::info!(rpc = "NodeGetInfo", node_id = self.node_id, "answered");
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            // No limit of ours: each volume is one FUSE connection of the node's daemon.
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }

    async fn node_get_capabilities(
        &self,
        _request: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        tracing::debug!(rpc = "NodeGetCapabilities", "none");
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: Vec::new(),
        }))
    }

    async fn node_stage_volume(
        &self,
        _request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        Err(unimplemented("NodeStageVolume", NO_STAGE))
    }

    async fn node_unstage_volume(
        &self,
        _request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        Err(unimplemented("NodeUnstageVolume", NO_STAGE))
    }

    async fn node_get_volume_stats(
        &self,
        _request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        Err(unimplemented(
            "NodeGetVolumeStats",
            "the plugin advertises no GET_VOLUME_STATS capability",
        ))
    }

    async fn node_expand_volume(
        &self,
        _request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        Err(unimplemented(
            "NodeExpandVolume",
            "its volumes are read-only snapshots of a revision and never grow",
        ))
    }
}

const NO_STAGE: &str = "the plugin advertises no STAGE_UNSTAGE_VOLUME capability (kubelet \
                        publishes each volume directly)";
