//! The publish checks on requests built in memory; tests/grpc.rs drives the same refusals
//! through the socket. The proptest throws arbitrary fields at the checks.

use super::*;
use crate::proto::volume_capability::{AccessMode, BlockVolume, MountVolume};
use proptest::prelude::*;

fn request(mode: Mode, ctx: &[(&str, &str)]) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: "vol".into(),
        target_path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/v/mount".into(),
        volume_capability: Some(VolumeCapability {
            access_mode: Some(AccessMode { mode: mode as i32 }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }),
        readonly: true,
        volume_context: ctx
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

#[test]
fn a_pv_without_pod_info() {
    let v = publish_request(&request(Mode::MultiNodeReaderOnly, &[("repo", "org/name")])).unwrap();
    assert_eq!((v.repo.as_str(), v.revision.as_str()), ("org/name", "main"));
    assert_eq!((v.pod, v.ephemeral), (None, false));
}

#[test]
fn pod_info_from_some_keys() {
    let v = publish_request(&request(
        Mode::SingleNodeReaderOnly,
        &[("repo", "o/n"), (KEY_POD_UID, "u-1"), (KEY_POD_NAME, "p")],
    ))
    .unwrap();
    let pod = v.pod.unwrap();
    assert_eq!((pod.name.as_str(), pod.uid.as_str()), ("p", "u-1"));
    assert_eq!(
        (pod.namespace.as_str(), pod.service_account.as_str()),
        ("", "")
    );
}

#[test]
fn repo_ids() {
    for ok in ["org/name", "a/b", "Org-1/name.v2_x", "o/.hidden", "o/a.b.c"] {
        assert!(is_repo_id(ok), "{ok}");
    }
    for bad in [
        "", "/", "org", "org/", "/name", "a/b/c", "a//b", "../x", "a/..", "a/b..c", ".", "./x",
        "o/.", "a b/c", "a/b\n", "a/\tb",
    ] {
        assert!(!is_repo_id(bad), "{bad:?}");
    }
}

#[test]
fn target_paths() {
    for bad in ["", "rel/path", "./x", "/a/../b", "/a/..", "/a\0b"] {
        let e = target_path("target_path", bad).unwrap_err();
        assert!(e.0.starts_with("target_path"), "{bad:?}: {e}");
    }
    assert_eq!(target_path("t", "/a/./b/").unwrap(), Path::new("/a/b"));
}

#[test]
fn every_mode_by_ephemeral() {
    use Mode::*;
    for (mode, ok_pv, ok_inline) in [
        (Unknown, false, false),
        (SingleNodeWriter, false, true),
        (SingleNodeReaderOnly, true, true),
        (MultiNodeReaderOnly, true, true),
        (MultiNodeSingleWriter, false, false),
        (MultiNodeMultiWriter, false, false),
        (SingleNodeSingleWriter, false, true),
        (SingleNodeMultiWriter, false, true),
    ] {
        for (eph, ok) in [("false", ok_pv), ("true", ok_inline)] {
            let r = publish_request(&request(mode, &[("repo", "o/n"), (KEY_EPHEMERAL, eph)]));
            assert_eq!(r.is_ok(), ok, "{mode:?} ephemeral={eph}: {r:?}");
            if let Err(e) = r {
                assert!(e.0.contains("volume_capability.access_mode"), "{e}");
                assert!(e.0.contains(mode.as_str_name()), "{e}");
            }
        }
    }
    let e = access_mode(99, true).unwrap_err();
    assert!(e.0.contains("access_mode 99"), "{e}");
}

fn arb_mode() -> impl Strategy<Value = i32> {
    prop_oneof![0..8i32, any::<i32>()]
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(KEY_REPO.to_owned()),
        Just(KEY_REVISION.to_owned()),
        Just(KEY_EPHEMERAL.to_owned()),
        Just(KEY_POD_NAME.to_owned()),
        "csi\\.storage\\.k8s\\.io/.{0,12}",
        ".{0,12}",
    ]
}

fn arb_request() -> impl Strategy<Value = NodePublishVolumeRequest> {
    let access_type = prop_oneof![
        Just(None),
        Just(Some(AccessType::Block(BlockVolume {}))),
        (".{0,8}", proptest::collection::vec(".{0,8}", 0..3)).prop_map(|(fs_type, mount_flags)| {
            Some(AccessType::Mount(MountVolume {
                fs_type,
                mount_flags,
                volume_mount_group: String::new(),
            }))
        }),
    ];
    let cap = proptest::option::of((proptest::option::of(arb_mode()), access_type).prop_map(
        |(mode, access_type)| VolumeCapability {
            access_mode: mode.map(|mode| AccessMode { mode }),
            access_type,
        },
    ));
    let path = prop_oneof!["/[a-z./]{0,20}", ".{0,20}"];
    let value = prop_oneof!["[a-z]{1,4}/[a-z.]{1,4}", "true", "false", ".{0,12}"];
    (
        ".{0,10}",
        path,
        cap,
        any::<bool>(),
        proptest::collection::hash_map(arb_key(), value, 0..6),
    )
        .prop_map(
            |(volume_id, target_path, volume_capability, readonly, volume_context)| {
                NodePublishVolumeRequest {
                    volume_id,
                    target_path,
                    volume_capability,
                    readonly,
                    volume_context,
                    ..Default::default()
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Never panics; an accepted request gives a volume that keeps every rule, and a
    /// refusal names a field of the request.
    #[test]
    fn publish_checks_never_panic(req in arb_request()) {
        match publish_request(&req) {
            Ok(v) => {
                prop_assert!(!v.volume_id.is_empty());
                prop_assert!(v.target.is_absolute());
                prop_assert!(!v.target.components().any(|c| c == Component::ParentDir));
                prop_assert!(req.readonly);
                prop_assert!(is_repo_id(&v.repo));
                prop_assert!(!v.revision.is_empty());
                prop_assert!(req.volume_context.keys().all(|k| k == KEY_REPO
                    || k == KEY_REVISION || k.starts_with(POD_INFO_PREFIX)));
            }
            Err(e) => {
                let fields = ["volume_id", "target_path", "volume_capability", "readonly",
                    "volume_context"];
                prop_assert!(fields.iter().any(|f| e.0.starts_with(f)), "{}", e);
            }
        }
    }
}

#[test]
fn sizes_over_csis_limits() {
    // Second hostile review, finding 02: an id of any size was published, and the node's
    // list outgrew one frame of mountd's socket.
    let mut r = request(Mode::MultiNodeReaderOnly, &[("repo", "org/name")]);
    r.volume_id = "v".repeat(MAX_VOLUME_ID);
    assert!(publish_request(&r).is_ok());
    r.volume_id.push('v');
    let e = publish_request(&r).unwrap_err().0;
    assert!(e.contains("volume_id is 129 bytes"), "{e}");
    let mut r = request(Mode::MultiNodeReaderOnly, &[("repo", "org/name")]);
    r.target_path = format!("/{}", "d/".repeat(MAX_PATH / 2 + 1));
    let e = publish_request(&r).unwrap_err().0;
    assert!(e.contains("target_path is"), "{e}");
    let big = "x".repeat(MAX_CONTEXT);
    let r = request(
        Mode::MultiNodeReaderOnly,
        &[("repo", "org/name"), ("csi.storage.k8s.io/pod.name", &big)],
    );
    let e = publish_request(&r).unwrap_err().0;
    assert!(e.contains("volume_context is"), "{e}");
}

#[test]
fn control_characters_anywhere_are_refused() {
    // Third hostile review, finding 01: escaped in JSON, each one took 6 bytes of mountd's
    // list.
    let r = request(
        Mode::MultiNodeReaderOnly,
        &[
            ("repo", "org/name"),
            ("csi.storage.k8s.io/pod.name", "a\u{1}b"),
        ],
    );
    let e = publish_request(&r).unwrap_err().0;
    assert!(e.contains("control character"), "{e}");
    let mut r = request(Mode::MultiNodeReaderOnly, &[("repo", "org/name")]);
    r.target_path = "/var/lib/kubelet/pods/u/\u{1}/mount".into();
    let e = publish_request(&r).unwrap_err().0;
    assert!(e.contains("control character"), "{e}");
}
