//! The CSI node plugin as kubelet drives it (issue 38): the real `modelcas csi` and
//! `modelcas mountd` binaries, gRPC on the plugin's unix socket (a tonic client of the
//! plugin's own bindings, with kubelet's exact fields), real FUSE mounts, and kill -9 of
//! each process under readers that check every byte.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::mount::{is_mounted, metric, scrape};
use common::{ingest_series, series, tree_hashes, wait_until, Env};
use csi::proto::identity_client::IdentityClient;
use csi::proto::node_client::NodeClient;
use csi::proto::volume_capability::access_mode::Mode;
use csi::proto::volume_capability::{AccessMode, AccessType, MountVolume};
use csi::proto::*;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Code;

use crate::takeover::{replace_server, server_of, Reader};

const REPO: &str = "demo-org/demo-llm";

/// A child process killed (SIGKILL) and reaped on drop.
struct Proc(Option<Child>);

impl Proc {
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A node: mountd, the plugin, the kubelet directory, and a client.
struct Node {
    env: Env,
    dir: PathBuf,
    mountd: Proc,
    plugin: Proc,
    rt: tokio::runtime::Runtime,
    channel: Channel,
}

impl Node {
    fn start(env: Env) -> Node {
        Node::start_with(env, &[])
    }

    /// A node whose mountd (and so its FUSE server) has `vars` in its environment.
    fn start_with(env: Env, vars: &[(&str, &str)]) -> Node {
        let dir = env.path("node");
        std::fs::create_dir_all(dir.join("kubelet")).unwrap();
        let mountd = start_mountd_with(&env, &dir, false, vars);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let plugin = start_plugin(&env, &dir);
        let channel = rt.block_on(connect(&dir.join("csi.sock")));
        Node {
            env,
            dir,
            mountd,
            plugin,
            rt,
            channel,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("mountd.sock")
    }

    /// What the plugin has logged (every start of it).
    fn plugin_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("plugin.log")).unwrap_or_default()
    }

    /// The target path kubelet gives for `volume` of pod `uid` (its parent made).
    fn target(&self, uid: &str, volume: &str) -> PathBuf {
        let parent = self.dir.join(format!(
            "kubelet/pods/{uid}/volumes/kubernetes.io~csi/{volume}"
        ));
        std::fs::create_dir_all(&parent).unwrap();
        parent.join("mount")
    }

    fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(self.channel.clone())
    }

    fn publish(&self, req: NodePublishVolumeRequest) -> Result<(), tonic::Status> {
        let mut c = self.node();
        self.rt.block_on(c.node_publish_volume(req)).map(|_| ())
    }

    fn unpublish(&self, id: &str, target: &Path) -> Result<(), tonic::Status> {
        let mut c = self.node();
        let req = NodeUnpublishVolumeRequest {
            volume_id: id.into(),
            target_path: target.to_str().unwrap().into(),
        };
        self.rt.block_on(c.node_unpublish_volume(req)).map(|_| ())
    }

    /// Kills the plugin (kill -9) and starts it again.
    fn restart_plugin(&mut self) {
        self.plugin.kill();
        self.plugin = start_plugin(&self.env, &self.dir);
        self.channel = self.rt.block_on(connect(&self.dir.join("csi.sock")));
    }
}

fn start_mountd(env: &Env, dir: &Path, take_over: bool) -> Proc {
    start_mountd_with(env, dir, take_over, &[])
}

fn start_mountd_with(env: &Env, dir: &Path, take_over: bool, vars: &[(&str, &str)]) -> Proc {
    let mut cmd = env.cmd();
    cmd.envs(vars.iter().copied());
    cmd.arg("mountd")
        .arg("--socket")
        .arg(dir.join("mountd.sock"))
        .stderr(Stdio::null());
    if take_over {
        cmd.arg("--take-over");
    }
    let p = Proc(Some(cmd.spawn().unwrap()));
    // Listening once its FUSE server runs (and, taking over, once it has every volume).
    server_of(p.pid());
    let sock = dir.join("mountd.sock");
    wait_until("mountd's socket", Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&sock).ok()
    });
    p
}

fn start_plugin(env: &Env, dir: &Path) -> Proc {
    let child = env
        .cmd()
        .arg("csi")
        .arg("--endpoint")
        .arg(format!("unix://{}", dir.join("csi.sock").display()))
        .args(["--node-id", "gpu-node-1", "--mountd-socket"])
        .arg(dir.join("mountd.sock"))
        .stderr(plugin_log_file(dir))
        .spawn()
        .unwrap();
    Proc(Some(child))
}

/// The plugin's log (`plugin.log` in the node's directory), appended to by each start.
fn plugin_log_file(dir: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("plugin.log"))
        .unwrap()
}

async fn connect(socket: &Path) -> Channel {
    let path = socket.to_path_buf();
    wait_until("the plugin's socket", Duration::from_secs(20), || {
        std::os::unix::net::UnixStream::connect(&path).ok()
    });
    let socket = socket.to_path_buf();
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .unwrap()
}

/// NodePublishVolume as kubelet sends an inline volume with `podInfoOnMount: true`.
fn inline(id: &str, target: &Path, repo: &str, revision: &str) -> NodePublishVolumeRequest {
    let ctx: HashMap<String, String> = [
        ("repo", repo),
        ("revision", revision),
        ("csi.storage.k8s.io/pod.name", "vllm-0"),
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
    .collect();
    NodePublishVolumeRequest {
        volume_id: id.into(),
        publish_context: HashMap::new(),
        staging_target_path: String::new(),
        target_path: target.to_str().unwrap().into(),
        volume_capability: Some(VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }),
        readonly: true,
        secrets: HashMap::new(),
        volume_context: ctx,
    }
}

#[test]
fn kubelet_publishes_a_pinned_revision_that_outlives_the_plugin() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    env.ok(&["ref", REPO, "main", &s.commit("r1")]);
    let mut node = Node::start(env);
    // Registration: GetPluginInfo, then NodeGetInfo (kubelet unregisters a driver whose
    // NodeGetInfo fails), NodeGetCapabilities on each publish.
    let mut id = IdentityClient::new(node.channel.clone());
    let info = node
        .rt
        .block_on(id.get_plugin_info(GetPluginInfoRequest {}))
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "csi.modelcas.io");
    let mut n = node.node();
    let ni = node
        .rt
        .block_on(n.node_get_info(NodeGetInfoRequest {}))
        .unwrap()
        .into_inner();
    assert_eq!(ni.node_id, "gpu-node-1");

    let t1 = node.target("pod-a", "model");
    node.publish(inline("csi-a", &t1, REPO, "main")).unwrap();
    assert!(is_mounted(&t1));
    assert_eq!(
        tree_hashes(&t1),
        s.files("r1"),
        "the revision at the volume's root"
    );
    // The ref moves: the running volume keeps its commit; a new one gets the new one.
    node.env.ok(&["ref", REPO, "main", &s.commit("r2")]);
    let t2 = node.target("pod-b", "model");
    node.publish(inline("csi-b", &t2, REPO, "main")).unwrap();
    assert_eq!(tree_hashes(&t2), s.files("r2"));
    assert_eq!(tree_hashes(&t1), s.files("r1"), "pinned at publish");
    // kill -9 of the plugin: the volumes serve on; the new plugin knows them.
    let reader = Reader::start(t1.clone(), s.files("r1"));
    reader.wait_passes(1);
    node.restart_plugin();
    reader.wait_passes(1);
    reader.finish();
    // A repeated publish (kubelet retries) answers OK and changes nothing.
    node.publish(inline("csi-a", &t1, REPO, "main")).unwrap();
    assert_eq!(
        tree_hashes(&t1),
        s.files("r1"),
        "still pinned after a republish"
    );
    let err = node.publish(inline("csi-a", &t1, REPO, "r3")).unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err}");
    // Unpublish: unmounted, the directory gone, mountd holds nothing of it; twice is OK.
    node.unpublish("csi-a", &t1).unwrap();
    assert!(!is_mounted(&t1));
    assert!(!t1.exists(), "the plugin removes the target it made");
    node.unpublish("csi-a", &t1).unwrap();
    let held = mountd_list(&node);
    assert_eq!(held, vec!["csi-b".to_string()]);
    node.unpublish("csi-b", &t2).unwrap();
    assert!(mountd_list(&node).is_empty());
}

#[test]
fn two_pods_of_one_persistent_volume_on_a_node_each_get_it() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let node = Node::start(env);
    let pv = |target: &Path| {
        let mut r = inline("pv-llm", target, REPO, &s.commit("r3"));
        r.volume_capability.as_mut().unwrap().access_mode = Some(AccessMode {
            mode: Mode::MultiNodeReaderOnly as i32,
        });
        r.volume_context
            .insert("csi.storage.k8s.io/ephemeral".into(), "false".into());
        r
    };
    let (a, b) = (
        node.target("pod-a", "pv-llm"),
        node.target("pod-b", "pv-llm"),
    );
    node.publish(pv(&a)).unwrap();
    node.publish(pv(&b)).unwrap();
    assert_eq!(tree_hashes(&a), s.files("r3"));
    assert_eq!(tree_hashes(&b), s.files("r3"));
    node.unpublish("pv-llm", &a).unwrap();
    assert!(!is_mounted(&a) && !a.exists());
    assert_eq!(
        tree_hashes(&b),
        s.files("r3"),
        "the other pod's mount stays"
    );
    assert_eq!(mountd_list(&node), vec!["pv-llm".to_string()]);
    node.unpublish("pv-llm", &b).unwrap();
    assert!(mountd_list(&node).is_empty());
}

fn mountd_list(node: &Node) -> Vec<String> {
    let mut ids: Vec<String> = mountd_ids(&node.socket());
    ids.sort();
    ids
}

fn mountd_ids(socket: &Path) -> Vec<String> {
    let v = mountd_list_reply(socket);
    // The CSI volume id, from the label the plugin gives it (mountd's own id names the
    // target too: two pods of one PV share a volume id).
    v["Volumes"]
        .as_array()
        .unwrap_or_else(|| panic!("mountd answered {v}"))
        .iter()
        .map(|v| {
            let labels = v["labels"].as_array().unwrap();
            let id = labels.iter().find(|l| l[0] == "volume_id").unwrap();
            id[1].as_str().unwrap().to_string()
        })
        .collect()
}

/// The error mountd answers a list with (panics if it lists).
fn mountd_list_error(socket: &Path) -> String {
    let v = mountd_list_reply(socket);
    v["Error"]
        .as_str()
        .unwrap_or_else(|| panic!("mountd answered {v}"))
        .to_string()
}

fn mountd_list_reply(socket: &Path) -> serde_json::Value {
    let sock = std::os::unix::net::UnixStream::connect(socket).unwrap();
    use std::io::{Read, Write};
    let body = br#""List""#;
    (&sock)
        .write_all(&(body.len() as u32).to_le_bytes())
        .unwrap();
    (&sock).write_all(body).unwrap();
    let mut len = [0u8; 4];
    (&sock).read_exact(&mut len).unwrap();
    let mut buf = vec![0u8; u32::from_le_bytes(len) as usize];
    (&sock).read_exact(&mut buf).unwrap();
    serde_json::from_slice(&buf).unwrap()
}

#[test]
fn the_fuse_server_and_mountd_itself_are_replaced_under_readers() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let mut node = Node::start(env);
    let targets: Vec<(PathBuf, &str)> = ["r1", "r4"]
        .iter()
        .map(|r| {
            let t = node.target(&format!("pod-{r}"), "model");
            node.publish(inline(&format!("csi-{r}"), &t, REPO, r))
                .unwrap();
            (t, *r)
        })
        .collect();
    let readers: Vec<Reader> = targets
        .iter()
        .map(|(t, r)| Reader::start(t.clone(), s.files(r)))
        .collect();
    readers[0].wait_passes(1);
    // kill -9 of the server of every volume, three times.
    for i in 0..3 {
        replace_server(node.mountd.pid(), None);
        readers[i % 2].wait_passes(1);
    }
    // An upgrade of mountd itself: a new one takes every volume over its socket.
    let old_mountd = node.mountd.pid();
    let old_server = server_of(old_mountd);
    let new = start_mountd(&node.env, &node.dir, true);
    let new_server = server_of(new.pid());
    assert_ne!(new_server, old_server);
    for r in &readers {
        r.wait_passes(1);
    }
    // The old one serves nothing now and stays until told to go (as a pod being replaced).
    assert!(
        crate::takeover::children(old_mountd).is_empty(),
        "old server stopped"
    );
    node.mountd.kill();
    node.mountd = new;
    for r in &readers {
        r.wait_passes(1);
    }
    for r in readers {
        let gap = r.finish();
        assert!(gap < Duration::from_secs(10), "a read waited {gap:?}");
    }
    // The plugin finds the volumes through the new mountd.
    for (t, r) in &targets {
        node.publish(inline(&format!("csi-{r}"), t, REPO, r))
            .unwrap();
        node.unpublish(&format!("csi-{r}"), t).unwrap();
        assert!(!is_mounted(t) && !t.exists());
    }
}

#[test]
fn refused_publishes_name_the_problem_and_leave_nothing() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let mut node = Node::start(env);
    let t = node.target("pod-x", "model");
    let cases: Vec<(NodePublishVolumeRequest, Code, &str)> = vec![
        (
            inline("v", &t, "demo-org/nothing", "main"),
            Code::NotFound,
            "demo-org/nothing",
        ),
        (
            inline("v", &t, REPO, "no-such-ref"),
            Code::NotFound,
            "no-such-ref",
        ),
        (
            inline("v", &t, REPO, "ffffffffff"),
            Code::NotFound,
            "ffffffffff",
        ),
        (
            NodePublishVolumeRequest {
                readonly: false,
                ..inline("v", &t, REPO, "main")
            },
            Code::InvalidArgument,
            "readOnly",
        ),
        (
            {
                let mut r = inline("v", &t, REPO, "main");
                r.volume_context.remove("repo");
                r
            },
            Code::InvalidArgument,
            "repo",
        ),
        (
            {
                let mut r = inline("v", &t, REPO, "main");
                r.volume_context.insert("revison".into(), "r2".into());
                r
            },
            Code::InvalidArgument,
            "revison",
        ),
        // Failed before (second hostile review, finding 02): published, and the list of
        // the node's volumes grew past one frame of mountd's socket, so that every later
        // publish of the node failed.
        (
            inline(&"v".repeat(129), &t, REPO, "main"),
            Code::InvalidArgument,
            "128 bytes",
        ),
        (
            {
                let mut r = inline("v", &t, REPO, "main");
                r.volume_context
                    .insert("csi.storage.k8s.io/pod.name".into(), "p".repeat(5000));
                r
            },
            Code::InvalidArgument,
            "4 KiB",
        ),
    ];
    for (req, code, names) in cases {
        let err = node.publish(req).unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(err.message().contains(names), "{names} in {err}");
        assert!(!t.exists(), "nothing left after {err}");
    }
    // A node whose mountd is down: UNAVAILABLE, and again nothing left.
    node.mountd.kill();
    let err = node.publish(inline("v", &t, REPO, "main")).unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.message().contains("mountd"), "{err}");
    assert!(!t.exists() && !is_mounted(&t));
    let _ = s;
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) with plain integers.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Runs `f` on a thread; its result, or `None` if it has not returned within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn targets_that_are_links_files_or_foreign_mounts_are_refused_and_left_alone() {
    // Failed before (hostile review, finding 07): a symlinked target was followed and the
    // volume mounted over its destination, and unpublish unmounted any mount at a target.
    let env = Env::new();
    ingest_series(&env);
    let node = Node::start(env);
    let elsewhere = node.env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let link = node.target("pod-l", "model");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let err = node.publish(inline("v", &link, REPO, "r1")).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("symlink"), "{err}");
    assert!(!is_mounted(&elsewhere) && link.is_symlink());

    let file = node.target("pod-f", "model");
    std::fs::write(&file, b"x").unwrap();
    let err = node.publish(inline("v", &file, REPO, "r1")).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("not a directory"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");

    let orphan = node.dir.join("kubelet/pods/pod-n/volumes/none/mount");
    let err = node.publish(inline("v", &orphan, REPO, "r1")).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("parent"), "{err}");

    // Somebody else's mount at a target: neither mounted over nor unmounted.
    let foreign = node.target("pod-t", "model");
    std::fs::create_dir(&foreign).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&foreign)
        .status()
        .unwrap();
    assert!(ok.success(), "mount -t tmpfs (the suite runs as root)");
    let err = node.publish(inline("v", &foreign, REPO, "r1")).unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("tmpfs"), "{err}");
    let err = node.unpublish("v", &foreign).unwrap_err();
    assert!(err.message().contains("tmpfs"), "{err}");
    assert!(is_mounted(&foreign), "the foreign mount stays");
    let _ = std::process::Command::new("umount").arg(&foreign).status();
    assert!(mountd_list(&node).is_empty());
}

#[test]
fn a_volume_unmounted_behind_the_plugins_back_is_published_again() {
    // Failed before (finding 18): a repeated publish answered OK from mountd's list alone,
    // over an empty directory.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let node = Node::start(env);
    let (a, b) = (node.target("pod-a", "model"), node.target("pod-b", "model"));
    node.publish(inline("csi-a", &a, REPO, "r1")).unwrap();
    node.publish(inline("csi-b", &b, REPO, "r2")).unwrap();
    for t in [&a, &b] {
        unmount_by_hand(t);
    }
    node.publish(inline("csi-a", &a, REPO, "r1")).unwrap();
    assert!(is_mounted(&a));
    assert_eq!(tree_hashes(&a), s.files("r1"), "published again");
    // The other one, never published again, is forgotten by mountd on its own.
    wait_until("mountd forgets csi-b", Duration::from_secs(20), || {
        (mountd_list(&node) == vec!["csi-a".to_string()]).then_some(())
    });
    node.unpublish("csi-a", &a).unwrap();
    node.unpublish("csi-b", &b).unwrap();
    assert!(!a.exists() && !b.exists());
}

#[test]
fn unpublish_does_not_wait_for_a_server_that_does_not_answer() {
    // The server stopped (SIGSTOP): unpublish reads the mount table and unmounts, and
    // asks the mount nothing (finding 26).
    let env = Env::new();
    ingest_series(&env);
    let node = Node::start(env);
    let t = node.target("pod-a", "model");
    node.publish(inline("csi-a", &t, REPO, "r1")).unwrap();
    let server = server_of(node.mountd.pid());
    signal(server, libc::SIGSTOP);
    let (channel, target) = (node.channel.clone(), t.clone());
    let done = within(Duration::from_secs(20), move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let req = NodeUnpublishVolumeRequest {
            volume_id: "csi-a".into(),
            target_path: target.to_str().unwrap().into(),
        };
        rt.block_on(NodeClient::new(channel).node_unpublish_volume(req))
            .map(|_| ())
    });
    signal(server, libc::SIGCONT);
    done.expect("unpublish answered").unwrap();
    assert!(!is_mounted(&t) && !t.exists());
    assert!(mountd_list(&node).is_empty());
}

#[test]
fn a_publish_caught_in_a_mountd_rollout_is_refused_and_published_again() {
    // Failed before (finding 24): the old mountd handed the waiting volume over but never
    // told its waiter, which answered after 60 s; the plugin then unmounted a volume the
    // new mountd served, and kubelet's retry was answered OK over an empty directory.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let mut node = Node::start(env);
    let t = node.target("pod-a", "model");
    // The server stopped: the publish's Add waits for its FUSE_INIT.
    signal(server_of(node.mountd.pid()), libc::SIGSTOP);
    let (channel, req) = (node.channel.clone(), inline("csi-a", &t, REPO, "r1"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(NodeClient::new(channel).node_publish_volume(req)));
    });
    wait_until("the add reaches mountd", Duration::from_secs(20), || {
        (mountd_list(&node) == vec!["csi-a".to_string()]).then_some(())
    });
    let new = start_mountd(&node.env, &node.dir, true);
    let answer = rx.recv_timeout(Duration::from_secs(30)).expect("an answer");
    let err = answer.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.message().contains("handed"), "{err}");
    node.mountd.kill();
    node.mountd = new;
    // kubelet retries: published, served by the new mountd.
    node.publish(inline("csi-a", &t, REPO, "r1")).unwrap();
    assert_eq!(tree_hashes(&t), s.files("r1"));
    assert_eq!(mountd_list(&node), vec!["csi-a".to_string()]);
    node.unpublish("csi-a", &t).unwrap();
    assert!(!is_mounted(&t) && !t.exists());
}

/// Takes the volumes of the mountd at `socket` as a new mountd would, but stops after
/// `frames` frames (then closes), or, with `None`, reads them all and never acknowledges
/// (the returned socket keeps the exchange open).
fn half_handover(socket: &Path, frames: Option<usize>) -> std::os::unix::net::UnixStream {
    let sock = std::os::unix::net::UnixStream::connect(socket).unwrap();
    mountd::wire::send(&sock, &mountd::wire::Request::Handover, &[]).unwrap();
    let mut n = 0;
    loop {
        let (reply, _fds) = mountd::wire::recv::<mountd::wire::Reply>(&sock).unwrap();
        n += 1;
        let last = matches!(reply, mountd::wire::Reply::HandedOver { last: true, .. });
        if last || frames == Some(n) {
            return sock;
        }
    }
}

#[test]
fn a_handover_the_new_mountd_does_not_finish_leaves_the_old_one_serving() {
    // Failed before (findings 05, 06): a new mountd that died midway could leave the old
    // one's supervisor and socket stuck, and one that never acknowledged left every
    // volume unserved and the socket unanswered for as long as it lived.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let node = Node::start(env);
    let (a, b) = (node.target("pod-a", "model"), node.target("pod-b", "model"));
    node.publish(inline("csi-a", &a, REPO, "r1")).unwrap();
    node.publish(inline("csi-b", &b, REPO, "r2")).unwrap();
    let readers = [
        Reader::start(a.clone(), s.files("r1")),
        Reader::start(b.clone(), s.files("r2")),
    ];
    readers[0].wait_passes(1);
    // Just after an upgrade of the server (SIGHUP), a new mountd takes one volume and dies.
    replace_server(node.mountd.pid(), Some(libc::SIGHUP));
    drop(half_handover(&node.socket(), Some(1)));
    for r in &readers {
        r.wait_passes(1);
    }
    assert_eq!(mountd_list(&node), vec!["csi-a", "csi-b"]);
    // One that takes them all and never acknowledges: given them back after its time
    // (10 s), and meanwhile the list is refused, not answered empty.
    let stalled = half_handover(&node.socket(), None);
    assert!(mountd_list_error(&node.socket()).contains("handing"));
    for r in &readers {
        r.wait_passes(1);
    }
    assert_eq!(mountd_list(&node), vec!["csi-a", "csi-b"]);
    drop(stalled);
    for r in readers {
        let gap = r.finish();
        assert!(gap < Duration::from_secs(20), "a read waited {gap:?}");
    }
    // Still adding volumes: neither paused nor retired.
    let c = node.target("pod-c", "model");
    node.publish(inline("csi-c", &c, REPO, "r3")).unwrap();
    assert_eq!(tree_hashes(&c), s.files("r3"));
    for (id, t) in [("csi-a", &a), ("csi-b", &b), ("csi-c", &c)] {
        node.unpublish(id, t).unwrap();
    }
}

#[test]
fn a_store_that_never_answers_is_unavailable_before_kubelets_deadline() {
    // Failed before (finding 08): an S3 endpoint that accepts and never answers held the
    // publish past kubelet's deadline (DEADLINE_EXCEEDED, no cause).
    let env = Env::new();
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", blackhole.local_addr().unwrap());
    let dir = env.path("node");
    std::fs::create_dir_all(dir.join("kubelet/pods/p")).unwrap();
    let _mountd = start_mountd(&env, &dir, false);
    let child = env
        .cmd()
        .env("MODELCAS_STORE", "s3://models/prefix")
        .env("MODELCAS_ENDPOINT_URL", &endpoint)
        .env("AWS_ACCESS_KEY_ID", "x")
        .env("AWS_SECRET_ACCESS_KEY", "y")
        .arg("csi")
        .arg("--endpoint")
        .arg(format!("unix://{}", dir.join("csi.sock").display()))
        .args([
            "--node-id",
            "n1",
            "--resolve-timeout",
            "2s",
            "--mountd-socket",
        ])
        .arg(dir.join("mountd.sock"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _plugin = Proc(Some(child));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let channel = rt.block_on(connect(&dir.join("csi.sock")));
    let t = dir.join("kubelet/pods/p/mount");
    let started = std::time::Instant::now();
    let err = rt
        .block_on(NodeClient::new(channel).node_publish_volume(inline("v", &t, REPO, "main")))
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.message().contains("no answer within"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!t.exists() && !is_mounted(&t));
}

/// The kernel's id of the mount at `t`, if any.
fn mount_id_of(t: &Path) -> Option<u64> {
    modelfs::mounts::mount_at(t).map(|m| m.id)
}

/// A node with the series ingested and r1 published as volume `csi-a` of pod `pod-a`.
fn node_with_csi_a() -> (Node, PathBuf) {
    let env = Env::new();
    ingest_series(&env);
    let node = Node::start(env);
    let a = node.target("pod-a", "model");
    node.publish(inline("csi-a", &a, REPO, "r1")).unwrap();
    (node, a)
}

/// Unmounts `t` behind the plugin's back, as an admin's `umount` would.
fn unmount_by_hand(t: &Path) {
    let ok = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(t)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn a_publish_retried_during_a_handover_leaves_the_live_volume_mounted() {
    // Failed before (second hostile review, finding 06): mountd answered a list with no
    // volumes while a handover had them out, and the plugin took the live mount for a
    // stale one and detached it under its reader.
    let s = series();
    let (node, a) = node_with_csi_a();
    let mounted = mount_id_of(&a);
    assert!(mounted.is_some());
    let reader = Reader::start(a.clone(), s.files("r1"));
    reader.wait_passes(1);
    // A new mountd that takes every volume and has not acknowledged yet.
    let stalled = half_handover(&node.socket(), None);
    // kubelet publishes again (its reconciler does): told to try again, the mount kept.
    let err = node.publish(inline("csi-a", &a, REPO, "r1")).unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(err.message().contains("handing"), "{err}");
    assert_eq!(mount_id_of(&a), mounted, "the live mount stays");
    drop(stalled);
    // Given back: served again, the same mount, published already.
    reader.wait_passes(1);
    node.publish(inline("csi-a", &a, REPO, "r1")).unwrap();
    assert_eq!(mount_id_of(&a), mounted);
    let gap = reader.finish();
    assert!(gap < Duration::from_secs(20), "a read waited {gap:?}");
    node.unpublish("csi-a", &a).unwrap();
    assert!(!a.exists());
}

#[test]
fn a_volume_unmounted_while_a_handover_had_it_out_is_forgotten() {
    // Failed before (second hostile review, finding 01): a volume given back (or taken
    // over) after its mount was gone was kept for good, and listed as published.
    let (node, a) = node_with_csi_a();
    let stalled = half_handover(&node.socket(), None);
    unmount_by_hand(&a);
    drop(stalled);
    wait_until("mountd forgets csi-a", Duration::from_secs(30), || {
        mountd_volumes(&node.socket()).filter(Vec::is_empty)
    });
    node.unpublish("csi-a", &a).unwrap();
    assert!(!a.exists());
}

/// mountd's volumes, when it answers a list.
fn mountd_volumes(socket: &Path) -> Option<Vec<serde_json::Value>> {
    mountd_list_reply(socket)["Volumes"].as_array().cloned()
}

#[test]
fn takeover_metrics_go_on_across_a_mountd_upgrade() {
    // Failed before (second hostile review, finding 03): the new mountd's server counted
    // takeovers from zero and gave no pause for the takeover it made.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let addr = common::local_addr();
    let vars = [("MODELCAS_METRICS_LISTEN", addr.as_str())];
    let mut node = Node::start_with(env, &vars);
    let a = node.target("pod-a", "model");
    node.publish(inline("csi-a", &a, REPO, "r1")).unwrap();
    let reader = Reader::start(a.clone(), s.files("r1"));
    reader.wait_passes(1);
    for _ in 0..2 {
        replace_server(node.mountd.pid(), None);
        reader.wait_passes(1);
    }
    let new = start_mountd_with(&node.env, &node.dir, true, &vars);
    reader.wait_passes(1);
    node.mountd.kill();
    node.mountd = new;
    let page = wait_until("the new server's metrics", Duration::from_secs(20), || {
        std::net::TcpStream::connect(&addr)
            .ok()
            .map(|_| scrape(&addr))
            .filter(|p| metric(p, "modelcas_mountd_volumes") == 1.0)
    });
    assert_eq!(metric(&page, "modelcas_mountd_takeovers_total"), 3.0);
    let pause = metric(&page, "modelcas_mountd_last_takeover_pause_seconds");
    assert!(pause > 0.0 && pause < 10.0, "last takeover pause {pause}");
    let gap = reader.finish();
    assert!(gap < Duration::from_secs(10), "a read waited {gap:?}");
    node.unpublish("csi-a", &a).unwrap();
}

#[test]
fn a_live_volume_published_again_under_another_spelling_stays_mounted() {
    // Failed before (third hostile review, finding 05): a publish of the target through a
    // symlinked parent did not match mountd's list, and the plugin detached the live mount
    // as a stale one.
    let s = series();
    let (node, a) = node_with_csi_a();
    let mounted = mount_id_of(&a);
    let link = node.dir.join("kubelet/link-to-pod-a");
    std::os::unix::fs::symlink(a.parent().unwrap(), &link).unwrap();
    let err = node
        .publish(inline("csi-b", &link.join("mount"), REPO, "r1"))
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("spelled another way"), "{err}");
    assert_eq!(mount_id_of(&a), mounted, "the live mount stays");
    assert_eq!(tree_hashes(&a), s.files("r1"));
    node.unpublish("csi-a", &a).unwrap();
}

#[test]
fn a_volume_reads_through_a_hub_and_a_publish_without_one_is_unavailable() {
    // Issue 43: the node plugin and mountd's server read the store through a hub, with a
    // node token and no bucket credentials.
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let hub = common::hub::start_hub(&env, &[], &[]);
    let node = Node::start(common::hub::node(&common::hub::url(&hub)));
    let t = node.target("pod-a", "model");
    node.publish(inline("csi-a", &t, REPO, "r2")).unwrap();
    assert_eq!(tree_hashes(&t), s.files("r2"));
    node.unpublish("csi-a", &t).unwrap();
    drop(hub);
    let t2 = node.target("pod-b", "model");
    let err = node.publish(inline("csi-b", &t2, REPO, "r3")).unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    assert!(!t2.exists() && !is_mounted(&t2));
}

#[test]
fn a_revision_that_failed_its_release_check_is_published_with_a_warning() {
    use crate::mount::{ingest_failing, FAILING, FAILING_CONFIG};
    let env = Env::new();
    ingest_failing(&env, "o/failing");
    let node = Node::start(env);
    let t = node.target("pod-a", "model");
    node.publish(inline("csi-f", &t, "o/failing", FAILING))
        .unwrap();
    assert_eq!(
        std::fs::read(t.join("config.json")).unwrap(),
        FAILING_CONFIG
    );
    assert_eq!(
        std::fs::metadata(t.join("model.safetensors"))
            .unwrap()
            .len(),
        28
    );
    let want = format!(
        "volume csi-f: o/failing@{FAILING} failed its release check: model.safetensors: \
         header of 64 bytes in a 28-byte file"
    );
    wait_until(
        "the warning in the plugin's log",
        Duration::from_secs(20),
        || node.plugin_log().contains(&want).then_some(()),
    );
    node.unpublish("csi-f", &t).unwrap();
}
