//! `modelcas csi`: the CSI node plugin. The gRPC side is the `csi` crate; this is its
//! backend: resolve the revision once (pinned for the volume's life), make the target
//! directory, mount an empty connection there and hand it to the node's mountd, which
//! keeps it and has it served. The plugin itself holds nothing, so its death or upgrade
//! touches no volume; a restarted plugin learns the volumes from mountd.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use csi::{Published, Volume, VolumeBackend, VolumeError};
use parking_lot::Mutex;
use repo::{Store, StoreError};

use crate::args::CsiArgs;
use crate::cmd::mount;
use crate::ctx::Ctx;

pub fn run(ctx: &Ctx, a: &CsiArgs) -> Result<ExitCode> {
    let backend = Arc::new(Backend {
        ctx: ctx.clone(),
        store: Mutex::new(None),
        mountd: a.mountd_socket.clone(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    rt.block_on(async {
        let shutdown = async {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return std::future::pending().await;
            };
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        };
        tracing::info!(
            "CSI node plugin {} for node {}",
            csi::DRIVER_NAME,
            a.node_id
        );
        csi::serve(&a.endpoint, a.node_id.clone(), backend, shutdown).await
    })?;
    Ok(ExitCode::SUCCESS)
}

struct Backend {
    ctx: Ctx,
    /// Opened at the first publish, and again after a failure.
    store: Mutex<Option<Store>>,
    mountd: PathBuf,
}

/// mountd's id of a CSI volume published at `target`: a PersistentVolume used by two pods
/// on one node is published twice with one volume id, at two targets.
fn mountd_id(volume_id: &str, target: &Path) -> String {
    format!("{volume_id}@{}", target.display())
}

fn unavailable(e: impl std::fmt::Display) -> VolumeError {
    VolumeError::Unavailable(format!("the store is unreachable: {e}"))
}

impl Backend {
    fn store(&self) -> Result<Store, VolumeError> {
        let mut slot = self.store.lock();
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let s = self.ctx.open().map_err(|e| unavailable(format!("{e:#}")))?;
        *slot = Some(s.clone());
        Ok(s)
    }

    /// The commit `v` asks for, now.
    fn resolve(&self, v: &Volume) -> Result<(format::RepoId, format::CommitId), VolumeError> {
        let repo = format::RepoId::parse(&v.repo).map_err(|e| {
            VolumeError::InvalidArgument(format!("volumeAttributes repo {:?}: {e}", v.repo))
        })?;
        let store = self.store()?;
        match store.resolve(&repo, &v.revision) {
            Ok(c) => Ok((repo, c)),
            Err(StoreError::UnknownRepo(r)) => {
                Err(VolumeError::NotFound(format!("unknown repository {r}")))
            }
            Err(e @ StoreError::UnknownRevision { .. }) => {
                Err(VolumeError::NotFound(e.to_string()))
            }
            Err(e @ StoreError::AmbiguousRevision { .. }) => {
                Err(VolumeError::InvalidArgument(e.to_string()))
            }
            Err(e @ StoreError::Invalid(_)) => Err(VolumeError::InvalidArgument(e.to_string())),
            Err(e) => {
                *self.store.lock() = None;
                Err(unavailable(e))
            }
        }
    }

    fn mountd_error(&self, e: mountd::socket::ClientError) -> VolumeError {
        match e {
            mountd::socket::ClientError::Connect { .. } => VolumeError::Unavailable(format!(
                "{e} (is the modelcas-mountd DaemonSet running on this node?)"
            )),
            // mountd took it, but its server could not serve it (it reads the store).
            mountd::socket::ClientError::Refused(m) => VolumeError::Unavailable(m),
            e => VolumeError::Internal(e.to_string()),
        }
    }
}

impl VolumeBackend for Backend {
    fn publish(&self, v: &Volume) -> Result<Published, VolumeError> {
        let (repo, commit) = self.resolve(v)?;
        let created = match std::fs::create_dir(&v.target) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => {
                return Err(VolumeError::Internal(format!(
                    "mkdir {}: {e}",
                    v.target.display()
                )))
            }
        };
        let undo = |created: bool| {
            if created {
                let _ = std::fs::remove_dir(&v.target);
            }
        };
        mount::clear_dead_mount(&v.target);
        let opts = modelfs::MountOptions {
            allow_other: true,
            ..Default::default()
        };
        let fuse = match modelfs::mount_connection(&v.target, &opts) {
            Ok(fd) => fd,
            Err(e) => {
                undo(created);
                return Err(VolumeError::Internal(e.to_string()));
            }
        };
        let mut labels = vec![("volume_id".to_string(), v.volume_id.clone())];
        if let Some(p) = &v.pod {
            labels.push(("pod".into(), format!("{}/{}", p.namespace, p.name)));
            labels.push(("pod.uid".into(), p.uid.clone()));
        }
        let volume = mountd::wire::Volume {
            id: mountd_id(&v.volume_id, &v.target),
            target: v.target.clone(),
            repo: repo.to_string(),
            revision: v.revision.clone(),
            commit: Some(commit.to_hex()),
            allow_other: true,
            labels,
        };
        if let Err(e) = mountd::socket::add(&self.mountd, &volume, &fuse) {
            drop(fuse);
            mount::lazy_unmount(&v.target);
            undo(created);
            return Err(self.mountd_error(e));
        }
        drop(fuse);
        modelfs::raise_readahead(&v.target);
        tracing::info!(
            "published {}@{} at {} (volume {})",
            repo,
            commit,
            v.target.display(),
            v.volume_id
        );
        Ok(Published {
            volume_id: v.volume_id.clone(),
            target: v.target.clone(),
            repo: v.repo.clone(),
            revision: v.revision.clone(),
            commit: commit.to_hex(),
        })
    }

    fn unpublish(&self, volume_id: &str, target: &Path) -> Result<(), VolumeError> {
        // From the kernel's table only: a stat of a mount whose server does not answer
        // would wait for it, and umount2 needs no server.
        if modelfs::is_mounted(target) && mount::umount(target).is_err() {
            mount::lazy_unmount(target);
        }
        if let Err(e) = mountd::socket::remove(&self.mountd, &mountd_id(volume_id, target)) {
            tracing::warn!("volume {volume_id}: {e}");
        }
        match std::fs::remove_dir(target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(VolumeError::Internal(format!(
                "rmdir {}: {e}",
                target.display()
            ))),
        }
    }

    fn published(&self) -> Result<Vec<Published>, VolumeError> {
        let volumes = mountd::socket::list(&self.mountd).map_err(|e| self.mountd_error(e))?;
        Ok(volumes
            .into_iter()
            .filter_map(|v| {
                let volume_id = v
                    .labels
                    .iter()
                    .find(|(k, _)| k == "volume_id")
                    .map(|(_, id)| id.clone())?;
                Some(Published {
                    commit: v.commit?,
                    volume_id,
                    target: v.target,
                    repo: v.repo,
                    revision: v.revision,
                })
            })
            .collect())
    }
}
