//! The plugin as kubelet, node-driver-registrar and livenessprobe see it: `csi::serve` on
//! a unix socket, driven by a tonic client of the same generated code, over an in-memory
//! backend that records each call.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{capability, inline_request, pv_request, Call, MemoryBackend, Op, Plugin, NODE_ID};
use csi::proto::volume_capability::access_mode::Mode;
use csi::proto::volume_capability::{AccessType, BlockVolume};
use csi::proto::*;
use csi::{CsiError, PodInfo, VolumeBackend, VolumeError};
use tonic::Code;

const REPO: &str = "acme/tiny-llm";
const COMMIT_REV: &str = "0123456789abcdef0123456789abcdef01234567";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_and_node_info_answer_as_registration_expects() {
    let plugin = Plugin::start().await;
    let mut id = plugin.identity();
    let info = id
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "csi.modelcas.io");
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.name, csi::DRIVER_NAME);
    let caps = id
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(
        caps.capabilities.is_empty(),
        "no Controller service: {caps:?}"
    );
    let probe = id.probe(ProbeRequest {}).await.unwrap().into_inner();
    assert_eq!(probe.ready, Some(true));

    let mut node = plugin.node();
    let info = node
        .node_get_info(NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.node_id, NODE_ID);
    assert_eq!(info.max_volumes_per_node, 0);
    assert_eq!(info.accessible_topology, None);
    let caps = node
        .node_get_capabilities(NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(caps.capabilities.is_empty(), "no STAGE_UNSTAGE: {caps:?}");
    assert!(
        plugin.backend.calls().is_empty(),
        "info calls reach no backend"
    );
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_volume_as_kubelet_sends_it_is_published() {
    let plugin = Plugin::start().await;
    let target = plugin.target("6f1c2a4e-0000-4000-8000-000000000001", "model");
    let req = inline_request("csi-4b1d", &target, REPO, COMMIT_REV);
    plugin.node().node_publish_volume(req).await.unwrap();

    let published = plugin.backend.publishes();
    assert_eq!(published.len(), 1);
    let v = &published[0];
    assert_eq!(v.volume_id, "csi-4b1d");
    assert_eq!(v.target, target);
    assert_eq!((v.repo.as_str(), v.revision.as_str()), (REPO, COMMIT_REV));
    assert!(v.ephemeral);
    let pod = PodInfo {
        name: "llm-0".into(),
        namespace: "serving".into(),
        uid: "6f1c2a4e-0000-4000-8000-000000000001".into(),
        service_account: "default".into(),
    };
    assert_eq!(v.pod, Some(pod));
    assert_eq!(
        plugin.backend.calls(),
        vec![Call::Published, Call::Publish(v.clone())]
    );
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pv_reader_only_is_published_at_main() {
    let plugin = Plugin::start().await;
    let target = plugin.target("pod-2", "pvc-1");
    plugin
        .node()
        .node_publish_volume(pv_request("pv-weights", &target, REPO))
        .await
        .unwrap();
    let published = plugin.backend.publishes();
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].revision, "main");
    assert!(!published[0].ephemeral);
    assert_eq!(published[0].volume_id, "pv-weights");
    plugin.stop().await.unwrap();
}

/// One refused request: what to change in a good inline request, and a field its message
/// must name (with, where given, another piece of text).
struct Refusal {
    what: &'static str,
    change: fn(&mut NodePublishVolumeRequest),
    names: &'static [&'static str],
}

fn refusals() -> Vec<Refusal> {
    fn mode(m: Mode) -> impl Fn(&mut NodePublishVolumeRequest) {
        move |r| r.volume_capability = Some(capability(m))
    }
    fn ctx(r: &mut NodePublishVolumeRequest, k: &str, v: Option<&str>) {
        match v {
            Some(v) => r.volume_context.insert(k.into(), v.into()),
            None => r.volume_context.remove(k),
        };
    }
    vec![
        Refusal {
            what: "empty volume_id",
            change: |r| r.volume_id.clear(),
            names: &["volume_id"],
        },
        Refusal {
            what: "empty target",
            change: |r| r.target_path.clear(),
            names: &["target_path"],
        },
        Refusal {
            what: "relative target",
            change: |r| r.target_path = "pods/x/mount".into(),
            names: &["target_path", "absolute"],
        },
        Refusal {
            what: "target with ..",
            change: |r| r.target_path = "/var/lib/kubelet/../etc/mount".into(),
            names: &["target_path", ".."],
        },
        Refusal {
            what: "no capability",
            change: |r| r.volume_capability = None,
            names: &["volume_capability"],
        },
        Refusal {
            what: "block",
            change: |r| {
                r.volume_capability.as_mut().unwrap().access_type =
                    Some(AccessType::Block(BlockVolume {}))
            },
            names: &["volume_capability.access_type", "block", "Filesystem"],
        },
        Refusal {
            what: "no access type",
            change: |r| r.volume_capability.as_mut().unwrap().access_type = None,
            names: &["volume_capability.access_type"],
        },
        Refusal {
            what: "no access mode",
            change: |r| r.volume_capability.as_mut().unwrap().access_mode = None,
            names: &["volume_capability.access_mode"],
        },
        Refusal {
            what: "readonly false",
            change: |r| r.readonly = false,
            names: &[
                "readonly",
                "set `readOnly: true` on the pod's csi volume",
                "persistentVolumeClaim",
            ],
        },
        Refusal {
            what: "writer mode, not ephemeral",
            change: |r| {
                mode(Mode::SingleNodeWriter)(r);
                ctx(r, "csi.storage.k8s.io/ephemeral", Some("false"));
            },
            names: &[
                "volume_capability.access_mode",
                "SINGLE_NODE_WRITER",
                "ReadOnlyMany",
            ],
        },
        Refusal {
            what: "single writer mode, no ephemeral key",
            change: |r| {
                mode(Mode::SingleNodeSingleWriter)(r);
                ctx(r, "csi.storage.k8s.io/ephemeral", None);
            },
            names: &["volume_capability.access_mode", "SINGLE_NODE_SINGLE_WRITER"],
        },
        Refusal {
            what: "multi-node multi-writer",
            change: |r| mode(Mode::MultiNodeMultiWriter)(r),
            names: &["volume_capability.access_mode", "MULTI_NODE_MULTI_WRITER"],
        },
        Refusal {
            what: "multi-node single-writer",
            change: |r| mode(Mode::MultiNodeSingleWriter)(r),
            names: &["volume_capability.access_mode", "MULTI_NODE_SINGLE_WRITER"],
        },
        Refusal {
            what: "unknown mode",
            change: |r| mode(Mode::Unknown)(r),
            names: &["volume_capability.access_mode", "UNKNOWN"],
        },
        Refusal {
            what: "mode out of range",
            change: |r| {
                r.volume_capability
                    .as_mut()
                    .unwrap()
                    .access_mode
                    .as_mut()
                    .unwrap()
                    .mode = 42
            },
            names: &["volume_capability.access_mode", "42"],
        },
        Refusal {
            what: "no repo",
            change: |r| ctx(r, "repo", None),
            names: &["volume_context", "repo", "org/name"],
        },
        Refusal {
            what: "repo without org",
            change: |r| ctx(r, "repo", Some("tiny-llm")),
            names: &["volume_context", "repo", "org/name"],
        },
        Refusal {
            what: "repo with two slashes",
            change: |r| ctx(r, "repo", Some("a/b/c")),
            names: &["volume_context", "repo"],
        },
        Refusal {
            what: "repo with an empty part",
            change: |r| ctx(r, "repo", Some("acme/")),
            names: &["volume_context", "repo"],
        },
        Refusal {
            what: "repo with ..",
            change: |r| ctx(r, "repo", Some("../etc")),
            names: &["volume_context", "repo"],
        },
        Refusal {
            what: "empty revision",
            change: |r| ctx(r, "revision", Some("")),
            names: &["volume_context", "revision", "main"],
        },
        Refusal {
            what: "misspelt revision",
            change: |r| {
                ctx(r, "revision", None);
                ctx(r, "revison", Some("v2"));
            },
            names: &["volume_context", "\"revison\"", "`revision`", "`repo`"],
        },
        Refusal {
            what: "unknown key",
            change: |r| ctx(r, "fsGroup", Some("1000")),
            names: &["volume_context", "\"fsGroup\""],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_invalid_argument_naming_the_field() {
    let plugin = Plugin::start().await;
    let target = plugin.target("pod", "vol");
    let mut node = plugin.node();
    // The unchanged request is accepted (so each refusal is the change's doing).
    let good = inline_request("csi-1", &target, REPO, "main");
    let refusals = refusals();
    for r in &refusals {
        let mut req = good.clone();
        (r.change)(&mut req);
        let status = node.node_publish_volume(req).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{}: {status:?}",
            r.what
        );
        for name in r.names {
            assert!(
                status.message().contains(name),
                "{}: {:?} lacks {name:?}",
                r.what,
                status.message()
            );
        }
    }
    assert!(
        plugin.backend.calls().is_empty(),
        "a refused request reaches no backend"
    );
    node.node_publish_volume(good).await.unwrap();
    assert_eq!(plugin.backend.publishes().len(), 1);
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_errors_map_to_codes() {
    let plugin = Plugin::start().await;
    let target = plugin.target("pod", "vol");
    let mut node = plugin.node();
    type Make = fn(String) -> VolumeError;
    let cases: [(Make, Code, &str); 4] = [
        (
            VolumeError::NotFound,
            Code::NotFound,
            "revision v9 of acme/tiny-llm",
        ),
        (
            VolumeError::InvalidArgument,
            Code::InvalidArgument,
            "revision `x y`",
        ),
        (
            VolumeError::Unavailable,
            Code::Unavailable,
            "store s3://bucket unreachable",
        ),
        (
            VolumeError::Internal,
            Code::Internal,
            "mount daemon answered garbage",
        ),
    ];
    for (op, rpc) in [
        (Op::Publish, "publish"),
        (Op::Published, "published"),
        (Op::Unpublish, "unpublish"),
    ] {
        for (make, code, text) in cases {
            let err = make(text.to_owned());
            plugin.backend.fail_next(op, err);
            let status = if op == Op::Unpublish {
                let req = NodeUnpublishVolumeRequest {
                    volume_id: "csi-1".into(),
                    target_path: target.to_str().unwrap().into(),
                };
                node.node_unpublish_volume(req).await.unwrap_err()
            } else {
                let req = inline_request("csi-1", &target, REPO, "v9");
                node.node_publish_volume(req).await.unwrap_err()
            };
            assert_eq!(status.code(), code, "{rpc}: {status:?}");
            assert!(status.message().contains(text), "{rpc}: {status:?}");
        }
    }
    assert!(
        plugin.backend.published_now().is_empty(),
        "no failed publish is listed"
    );
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_is_ok_once_and_other_arguments_already_exist() {
    let plugin = Plugin::start().await;
    let target = plugin.target("pod", "vol");
    let mut node = plugin.node();
    let req = inline_request("csi-1", &target, REPO, "main");
    node.node_publish_volume(req.clone()).await.unwrap();
    let commit = plugin.backend.published_now()[0].commit.clone();
    node.node_publish_volume(req.clone()).await.unwrap();
    assert_eq!(plugin.backend.publishes().len(), 1, "published once");
    assert_eq!(
        plugin.backend.published_now()[0].commit,
        commit,
        "commit stays pinned"
    );

    let other_revision = inline_request("csi-1", &target, REPO, "v2");
    let other_repo = inline_request("csi-1", &target, "acme/other", "main");
    let other_id = inline_request("csi-2", &target, REPO, "main");
    for r in [other_revision, other_repo, other_id] {
        let status = node.node_publish_volume(r).await.unwrap_err();
        assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
        assert!(status.message().contains("target_path"), "{status:?}");
        assert!(
            status.message().contains(target.to_str().unwrap()),
            "{status:?}"
        );
    }
    assert_eq!(plugin.backend.publishes().len(), 1);

    // The same PV at a second target (a second pod of it on this node) is published.
    let second = plugin.target("pod-b", "vol");
    node.node_publish_volume(pv_request("csi-1", &second, REPO))
        .await
        .unwrap();
    assert_eq!(plugin.backend.publishes().len(), 2);
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishes_of_one_target_publish_once() {
    let backend = MemoryBackend::with_publish_delay(Duration::from_millis(300));
    let plugin = Plugin::start_with(backend).await;
    let target = plugin.target("pod", "vol");
    let req = inline_request("csi-1", &target, REPO, "main");
    let (mut a, mut b) = (plugin.node(), plugin.node());
    let (ra, rb) = tokio::join!(
        a.node_publish_volume(req.clone()),
        b.node_publish_volume(req)
    );
    ra.unwrap();
    rb.unwrap();
    assert_eq!(
        plugin.backend.publishes().len(),
        1,
        "{:?}",
        plugin.backend.calls()
    );
    plugin.stop().await.unwrap();
}

/// Kubelet gives up on a slow publish (its deadline) and retries: the retry waits for the
/// first publish, still running in the backend, and finds it done instead of mounting again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_deadline_waits_for_the_publish_in_flight() {
    let backend = MemoryBackend::with_publish_delay(Duration::from_millis(1500));
    let plugin = Plugin::start_with(backend).await;
    let target = plugin.target("pod", "vol");
    let req = inline_request("csi-1", &target, REPO, "main");
    let mut node = plugin.node();
    let mut first = tonic::Request::new(req.clone());
    first.set_timeout(Duration::from_millis(100));
    let status = node.node_publish_volume(first).await.unwrap_err();
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{status:?}"
    );
    assert_eq!(
        plugin.backend.published_now().len(),
        0,
        "the first is still running"
    );
    node.node_publish_volume(req).await.unwrap();
    assert_eq!(
        plugin.backend.publishes().len(),
        1,
        "{:?}",
        plugin.backend.calls()
    );
    assert_eq!(plugin.backend.published_now().len(), 1);
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpublish_calls_the_backend_and_checks_its_fields() {
    let plugin = Plugin::start().await;
    let target = plugin.target("pod", "vol");
    let mut node = plugin.node();
    node.node_publish_volume(inline_request("csi-1", &target, REPO, "main"))
        .await
        .unwrap();
    let unpublish = |id: &str, t: &str| NodeUnpublishVolumeRequest {
        volume_id: id.into(),
        target_path: t.into(),
    };
    let t = target.to_str().unwrap();
    node.node_unpublish_volume(unpublish("csi-1", t))
        .await
        .unwrap();
    assert!(plugin.backend.published_now().is_empty());
    // Again (kubelet retries): the backend answers OK for what is not mounted.
    node.node_unpublish_volume(unpublish("csi-1", t))
        .await
        .unwrap();
    let unpublishes: Vec<_> = plugin
        .backend
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Unpublish(..)))
        .collect();
    assert_eq!(
        unpublishes,
        vec![Call::Unpublish("csi-1".into(), target.clone()); 2]
    );

    let before = plugin.backend.calls().len();
    for (id, t, field) in [
        ("", t, "volume_id"),
        ("csi-1", "", "target_path"),
        ("csi-1", "rel/mount", "target_path"),
        ("csi-1", "/a/../b", "target_path"),
    ] {
        let status = node
            .node_unpublish_volume(unpublish(id, t))
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{id:?} {t:?}: {status:?}"
        );
        assert!(status.message().starts_with(field), "{status:?}");
    }
    assert_eq!(
        plugin.backend.calls().len(),
        before,
        "refusals reach no backend"
    );
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_unstage_stats_and_expand_are_unimplemented() {
    let plugin = Plugin::start().await;
    let mut node = plugin.node();
    let stage = node
        .node_stage_volume(NodeStageVolumeRequest::default())
        .await
        .unwrap_err();
    let unstage = node
        .node_unstage_volume(NodeUnstageVolumeRequest::default())
        .await
        .unwrap_err();
    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest::default())
        .await
        .unwrap_err();
    let expand = node
        .node_expand_volume(NodeExpandVolumeRequest::default())
        .await
        .unwrap_err();
    for (status, rpc) in [
        (stage, "NodeStageVolume"),
        (unstage, "NodeUnstageVolume"),
        (stats, "NodeGetVolumeStats"),
        (expand, "NodeExpandVolume"),
    ] {
        assert_eq!(status.code(), Code::Unimplemented, "{rpc}");
        assert!(status.message().contains(rpc), "{status:?}");
    }
    // The Controller service is not served at all.
    let mut controller = controller_client::ControllerClient::new(plugin.channel.clone());
    let status = controller
        .controller_get_capabilities(ControllerGetCapabilitiesRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert!(plugin.backend.calls().is_empty());
    plugin.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_socket_is_kept_and_serve_removes_its_own() {
    let plugin = Plugin::start().await;
    let socket = plugin.socket.clone();
    let backend: Arc<dyn VolumeBackend> = Arc::new(MemoryBackend::default());
    let endpoint = socket.to_str().unwrap().to_owned();
    let err = csi::serve(&endpoint, NODE_ID.into(), backend, async {})
        .await
        .unwrap_err();
    assert!(matches!(err, CsiError::InUse { .. }), "{err}");
    assert!(err.to_string().contains(&endpoint), "{err}");
    // The first plugin still answers.
    let mut id = plugin.identity();
    assert_eq!(
        id.probe(ProbeRequest {}).await.unwrap().into_inner().ready,
        Some(true)
    );
    drop(id);
    plugin.stop().await.unwrap();
    assert!(!socket.exists(), "serve removes its socket when it stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_plugins_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("csi.sock");
    // Bound and closed without removing the file, as a killed plugin leaves it.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists());
    let backend: Arc<dyn VolumeBackend> = Arc::new(MemoryBackend::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let endpoint = format!("unix:{}", socket.display());
    let server = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        csi::serve(&endpoint, NODE_ID.into(), backend, shutdown).await
    });
    let channel = common::connect(&socket).await;
    let mut id = identity_client::IdentityClient::new(channel);
    assert_eq!(
        id.probe(ProbeRequest {}).await.unwrap().into_inner().ready,
        Some(true)
    );
    drop(id);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn bad_endpoints_and_an_empty_node_id_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn VolumeBackend> = Arc::new(MemoryBackend::default());
    for bad in ["tcp://127.0.0.1:1", "csi.sock", "unix://relative.sock", ""] {
        let err = csi::serve(bad, NODE_ID.into(), backend.clone(), async {})
            .await
            .unwrap_err();
        assert!(matches!(err, CsiError::Endpoint { .. }), "{bad:?}: {err}");
    }
    let socket = dir.path().join("x.sock");
    let err = csi::serve(
        socket.to_str().unwrap(),
        String::new(),
        backend.clone(),
        async {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, CsiError::EmptyNodeId), "{err}");
    // A regular file where the socket goes is neither removed nor served over.
    std::fs::write(&socket, b"keep").unwrap();
    let err = csi::serve(socket.to_str().unwrap(), NODE_ID.into(), backend, async {})
        .await
        .unwrap_err();
    assert!(matches!(err, CsiError::NotASocket { .. }), "{err}");
    assert_eq!(std::fs::read(&socket).unwrap(), b"keep");
}
