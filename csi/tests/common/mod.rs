//! The tests' plugin: `csi::serve` on a unix socket in a temporary directory, over an
//! in-memory backend that records every call, and a tonic client of the same generated
//! code connected as kubelet connects (a unix stream in hyper-util's `TokioIo`).

#![allow(dead_code, reason = "each test binary uses a part of the harness")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csi::proto::identity_client::IdentityClient;
use csi::proto::node_client::NodeClient;
use csi::proto::volume_capability::access_mode::Mode;
use csi::proto::volume_capability::{AccessMode, AccessType, MountVolume};
use csi::proto::{NodePublishVolumeRequest, VolumeCapability};
use csi::{CsiError, Published, Volume, VolumeBackend, VolumeError};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Uri};

pub const NODE_ID: &str = "node-1";

/// A backend call, as the in-memory backend saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Publish(Volume),
    Unpublish(String, PathBuf),
    Published,
}

/// Which backend call fails next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Publish,
    Unpublish,
    Published,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    published: Vec<Published>,
    fail_next: Option<(Op, VolumeError)>,
    publishes: u64,
}

/// Publishes into a list; records each call; fails the next call of one kind on demand.
#[derive(Default)]
pub struct MemoryBackend {
    state: Mutex<State>,
    /// How long a publish takes (to overlap two of them).
    pub publish_delay: Duration,
}

impl MemoryBackend {
    /// A backend whose publish takes `delay`.
    pub fn with_publish_delay(delay: Duration) -> Self {
        MemoryBackend {
            publish_delay: delay,
            ..Default::default()
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// The volumes of the publish calls made.
    pub fn publishes(&self) -> Vec<Volume> {
        let calls = self.calls();
        calls
            .into_iter()
            .filter_map(|c| match c {
                Call::Publish(v) => Some(v),
                _ => None,
            })
            .collect()
    }

    pub fn published_now(&self) -> Vec<Published> {
        self.state.lock().unwrap().published.clone()
    }

    pub fn fail_next(&self, op: Op, e: VolumeError) {
        self.state.lock().unwrap().fail_next = Some((op, e));
    }

    fn take_failure(state: &mut State, op: Op) -> Result<(), VolumeError> {
        match state.fail_next.take() {
            Some((o, e)) if o == op => Err(e),
            other => {
                state.fail_next = other;
                Ok(())
            }
        }
    }
}

impl VolumeBackend for MemoryBackend {
    fn publish(&self, v: &Volume) -> Result<Published, VolumeError> {
        {
            let mut s = self.state.lock().unwrap();
            s.calls.push(Call::Publish(v.clone()));
            Self::take_failure(&mut s, Op::Publish)?;
        }
        std::thread::sleep(self.publish_delay);
        let mut s = self.state.lock().unwrap();
        s.publishes += 1;
        let p = Published {
            volume_id: v.volume_id.clone(),
            target: v.target.clone(),
            repo: v.repo.clone(),
            revision: v.revision.clone(),
            commit: format!("{:040x}", s.publishes),
        };
        s.published.push(p.clone());
        Ok(p)
    }

    fn unpublish(&self, volume_id: &str, target: &Path) -> Result<(), VolumeError> {
        let mut s = self.state.lock().unwrap();
        s.calls
            .push(Call::Unpublish(volume_id.to_owned(), target.to_path_buf()));
        Self::take_failure(&mut s, Op::Unpublish)?;
        s.published.retain(|p| p.target != target);
        Ok(())
    }

    fn published(&self) -> Result<Vec<Published>, VolumeError> {
        let mut s = self.state.lock().unwrap();
        s.calls.push(Call::Published);
        Self::take_failure(&mut s, Op::Published)?;
        Ok(s.published.clone())
    }
}

/// A running plugin and a client channel to it.
pub struct Plugin {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub backend: Arc<MemoryBackend>,
    pub channel: Channel,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), CsiError>>>,
}

impl Plugin {
    pub async fn start() -> Self {
        Self::start_with(MemoryBackend::default()).await
    }

    pub async fn start_with(backend: MemoryBackend) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("plugins/csi.modelcas.io/csi.sock");
        let backend = Arc::new(backend);
        let (stop, stopped) = oneshot::channel::<()>();
        let endpoint = format!("unix://{}", socket.display());
        let b: Arc<dyn VolumeBackend> = backend.clone();
        let task = tokio::spawn(async move {
            csi::serve(&endpoint, NODE_ID.to_owned(), b, async {
                let _ = stopped.await;
            })
            .await
        });
        let channel = connect(&socket).await;
        Plugin {
            dir,
            socket,
            backend,
            channel,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(self.channel.clone())
    }

    pub fn identity(&self) -> IdentityClient<Channel> {
        IdentityClient::new(self.channel.clone())
    }

    /// A target path as kubelet makes it: under the pod's directory, whose parent exists.
    pub fn target(&self, pod_uid: &str, volume: &str) -> PathBuf {
        let parent = self
            .dir
            .path()
            .join(format!("pods/{pod_uid}/volumes/kubernetes.io~csi/{volume}"));
        std::fs::create_dir_all(&parent).unwrap();
        parent.join("mount")
    }

    /// Stops the server (dropping the client first) and returns what `serve` returned.
    pub async fn stop(mut self) -> Result<(), CsiError> {
        drop(self.channel);
        let _ = self.stop.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap()
    }
}

/// A channel over the unix socket at `socket`, once a server answers there (a stale
/// socket file may be there before the server binds).
pub async fn connect(socket: &Path) -> Channel {
    let path = socket.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let what = format!("a server answering on {}", path.display());
        testutil::wait_until(what, Duration::from_secs(10), || {
            std::os::unix::net::UnixStream::connect(&path).ok()
        });
    })
    .await
    .unwrap();
    let socket = socket.to_path_buf();
    // The URI is not used (the connector ignores it), but must parse.
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(socket).await?)) }
        }))
        .await
        .unwrap()
}

/// The volume context of an inline volume as kubelet sends it with `podInfoOnMount: true`.
pub fn inline_context(repo: &str, revision: &str) -> HashMap<String, String> {
    [
        ("repo", repo),
        ("revision", revision),
        ("csi.storage.k8s.io/pod.name", "llm-0"),
        ("csi.storage.k8s.io/pod.namespace", "serving"),
        (
            "csi.storage.k8s.io/pod.uid",
            "6f1c2a4e-0000-4000-8000-000000000001",
        ),
        ("csi.storage.k8s.io/serviceAccount.name", "default"),
        ("csi.storage.k8s.io/ephemeral", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// NodePublishVolume exactly as kubelet sends an inline volume (`csi:` in the pod spec,
/// `readOnly: true`): SINGLE_NODE_WRITER, fsType "", no mount flags.
pub fn inline_request(
    volume_id: &str,
    target: &Path,
    repo: &str,
    revision: &str,
) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: volume_id.to_owned(),
        publish_context: HashMap::new(),
        staging_target_path: String::new(),
        target_path: target.to_str().unwrap().to_owned(),
        volume_capability: Some(capability(Mode::SingleNodeWriter)),
        readonly: true,
        secrets: HashMap::new(),
        volume_context: inline_context(repo, revision),
    }
}

/// NodePublishVolume as kubelet sends a PV's (`accessModes: [ReadOnlyMany]`, the claim
/// mounted `readOnly: true`, `podInfoOnMount: true`).
pub fn pv_request(volume_id: &str, target: &Path, repo: &str) -> NodePublishVolumeRequest {
    let mut ctx = inline_context(repo, "");
    ctx.remove("revision");
    ctx.insert("csi.storage.k8s.io/ephemeral".into(), "false".into());
    NodePublishVolumeRequest {
        volume_capability: Some(capability(Mode::MultiNodeReaderOnly)),
        volume_context: ctx,
        ..inline_request(volume_id, target, repo, "main")
    }
}

pub fn capability(mode: Mode) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(AccessType::Mount(MountVolume::default())),
    }
}
