//! `modelcas csi`: the CSI node plugin. The gRPC side is the `csi` crate; this is its
//! backend: resolve the revision once (pinned for the volume's life), make the target
//! directory, mount an empty connection there and hand it to the node's mountd, which
//! keeps it and has it served. The plugin itself holds nothing, so its death or upgrade
//! touches no volume; a restarted plugin learns the volumes from mountd.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use csi::{Published, Volume, VolumeBackend, VolumeError};
use parking_lot::Mutex;
use repo::{Store, StoreError};

use crate::args::CsiArgs;
use crate::cmd::mount;
use crate::ctx::Ctx;

pub fn run(ctx: &Ctx, a: &CsiArgs) -> Result<ExitCode> {
    let backend = Arc::new(Backend {
        store: Arc::new(StoreSlot {
            ctx: ctx.clone(),
            store: Mutex::new(None),
            deadline: a.resolve_timeout,
        }),
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
    store: Arc<StoreSlot>,
    mountd: PathBuf,
}

/// The store, opened at the first publish, and again after a failure.
struct StoreSlot {
    ctx: Ctx,
    store: Mutex<Option<Store>>,
    /// How long a publish waits for the store (`--resolve-timeout`): an endpoint that
    /// accepts and never answers would otherwise outlast kubelet's deadline, and kubelet
    /// would see DEADLINE_EXCEEDED rather than the cause.
    deadline: Duration,
}

/// mountd's id of a CSI volume published at `target`: a PersistentVolume used by two pods
/// on one node is published twice with one volume id, at two targets.
fn mountd_id(volume_id: &str, target: &Path) -> String {
    format!("{volume_id}@{}", target.display())
}

fn unavailable(e: impl std::fmt::Display) -> VolumeError {
    VolumeError::Unavailable(format!("the store is unreachable: {e}"))
}

impl StoreSlot {
    fn store(&self) -> Result<Store, VolumeError> {
        if let Some(s) = self.store.lock().as_ref() {
            return Ok(s.clone());
        }
        // Opened outside the lock: a slow open must not hold the next publish behind it.
        let s = self.ctx.open().map_err(|e| unavailable(format!("{e:#}")))?;
        Ok(self.store.lock().get_or_insert(s).clone())
    }

    /// The commit `v` asks for, now, within the deadline. Its release check is logged
    /// after (`mount::release_notice`), by the thread that resolved it: the publish does
    /// not wait for it.
    fn resolve(
        self: &Arc<Self>,
        v: &Volume,
    ) -> Result<(format::RepoId, format::CommitId), VolumeError> {
        let repo = format::RepoId::parse(&v.repo).map_err(|e| {
            VolumeError::InvalidArgument(format!("volumeAttributes repo {:?}: {e}", v.repo))
        })?;
        let (tx, rx) = std::sync::mpsc::channel();
        let (this, r, revision) = (self.clone(), repo.clone(), v.revision.clone());
        let volume = v.volume_id.clone();
        std::thread::Builder::new()
            .name("csi-resolve".into())
            .spawn(move || this.resolve_then_notice(&r, &revision, &volume, tx))
            .map_err(|e| VolumeError::Internal(format!("a thread to resolve with: {e}")))?;
        match rx.recv_timeout(self.deadline) {
            Ok(outcome) => outcome.map(|c| (repo, c)),
            Err(_) => {
                *self.store.lock() = None;
                Err(unavailable(format!(
                    "no answer within {:?} resolving {repo}@{} (--resolve-timeout)",
                    self.deadline, v.revision
                )))
            }
        }
    }

    /// Answers `tx` with the commit, then (when the publish still waits for it) logs the
    /// revision's release check: the publish goes on meanwhile.
    fn resolve_then_notice(
        &self,
        repo: &format::RepoId,
        revision: &str,
        volume: &str,
        tx: std::sync::mpsc::Sender<Result<format::CommitId, VolumeError>>,
    ) {
        let resolved = self
            .store()
            .and_then(|s| Ok((self.resolve_in(&s, repo, revision)?, s)));
        match resolved {
            Ok((c, s)) => {
                if tx.send(Ok(c)).is_ok() {
                    mount::release_notice(&s, repo, &c, Some(volume));
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    }

    fn resolve_in(
        &self,
        store: &Store,
        repo: &format::RepoId,
        revision: &str,
    ) -> Result<format::CommitId, VolumeError> {
        match store.resolve(repo, revision) {
            Ok(c) => Ok(c),
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
}

impl Backend {
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

/// Makes `target` ready to be mounted on: a stale modelcas mount there (one mountd does
/// not hold, under any spelling of the path) is detached; a mount of anything else, a
/// symlink or a file is refused. Returns whether the directory was created here (and is
/// removed on failure).
fn prepare_target(target: &Path, mountd: &Path) -> Result<bool, VolumeError> {
    match modelfs::mounts::mount_at(target) {
        Some(m) if m.is_modelcas() => {
            let at = modelfs::mounts::kernel_spelling(target);
            let listed = mountd::socket::list(mountd).map_err(|e| {
                VolumeError::Unavailable(format!(
                    "{}: a modelcas mount is there and mountd cannot say whether it holds \
                     it: {e}",
                    target.display()
                ))
            })?;
            if let Some(v) = listed
                .iter()
                .find(|v| modelfs::mounts::kernel_spelling(&v.target) == at)
            {
                return Err(VolumeError::InvalidArgument(format!(
                    "target_path {} is the mount of volume {} published at {}: the same \
                     directory spelled another way",
                    target.display(),
                    v.id,
                    v.target.display()
                )));
            }
            tracing::warn!("{}: a stale modelcas mount; detaching it", target.display());
            mount::lazy_unmount(target);
        }
        Some(m) => {
            return Err(VolumeError::InvalidArgument(format!(
                "target_path {} is a {} mount, not ours: refusing to mount over it",
                target.display(),
                m.fstype
            )))
        }
        None => {}
    }
    // Nothing is mounted there now: this asks no FUSE server.
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => Err(VolumeError::InvalidArgument(format!(
            "target_path {} is a symlink: a volume is mounted on a directory kubelet made, \
             never through a link",
            target.display()
        ))),
        Ok(m) if !m.is_dir() => Err(VolumeError::InvalidArgument(format!(
            "target_path {} exists and is not a directory",
            target.display()
        ))),
        Ok(_) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::create_dir(target) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(VolumeError::InvalidArgument(format!(
                    "the parent of target_path {} does not exist (kubelet creates it)",
                    target.display()
                )))
            }
            Err(e) => Err(VolumeError::Internal(format!(
                "mkdir {}: {e}",
                target.display()
            ))),
        },
        Err(e) => Err(VolumeError::Internal(format!(
            "target_path {}: {e}",
            target.display()
        ))),
    }
}

impl VolumeBackend for Backend {
    fn publish(&self, v: &Volume) -> Result<Published, VolumeError> {
        let (repo, commit) = self.store.resolve(v)?;
        let created = prepare_target(&v.target, &self.mountd)?;
        let undo = |created: bool| {
            if created {
                let _ = std::fs::remove_dir(&v.target);
            }
        };
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
            instance: None,
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
        match modelfs::mounts::mount_at(target) {
            Some(m) if m.is_modelcas() && mount::umount(target).is_err() => {
                mount::lazy_unmount(target);
            }
            Some(m) if m.is_modelcas() => {}
            Some(m) => {
                return Err(VolumeError::Internal(format!(
                    "target_path {} is a {} mount, not a modelcas volume: not unmounting it",
                    target.display(),
                    m.fstype
                )))
            }
            None => {}
        }
        if let Err(e) = mountd::socket::remove(&self.mountd, &mountd_id(volume_id, target)) {
            tracing::warn!("volume {volume_id}: {e}");
        }
        let removed = match std::fs::symlink_metadata(target) {
            Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(target),
            _ => std::fs::remove_dir(target),
        };
        match removed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(VolumeError::Internal(format!(
                "rmdir {}: {e}",
                target.display()
            ))),
        }
    }

    /// mountd's volumes whose target is a modelcas mount now; one it lists whose mount is
    /// gone (unmounted out of band) is removed from mountd, so that it is published again.
    fn published(&self) -> Result<Vec<Published>, VolumeError> {
        let listed = mountd::socket::list(&self.mountd).map_err(|e| self.mountd_error(e))?;
        let table = modelfs::mounts::table().unwrap_or_default();
        let (live, gone): (Vec<_>, Vec<_>) = listed.into_iter().partition(|v| {
            let at = modelfs::mounts::kernel_spelling(&v.target);
            table.iter().any(|m| m.path == at && m.is_modelcas())
        });
        for v in gone {
            tracing::warn!(
                "volume {}: mountd holds it but {} is not mounted; forgetting it",
                v.id,
                v.target.display()
            );
            if let Err(e) = mountd::socket::remove(&self.mountd, &v.id) {
                tracing::warn!("volume {}: {e}", v.id);
            }
        }
        Ok(live
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
