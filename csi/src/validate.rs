//! The checks of a `NodePublishVolume` request, turning it into a `Volume` or refusing
//! it with a message that names the field and says what to write instead. Pure: no I/O,
//! no backend.
//!
//! The access-mode rule follows what kubelet sends (docs/design/csi-and-takeover.md, §3):
//! an inline volume always arrives with a writer mode (`SINGLE_NODE_WRITER`, from the
//! `ReadWriteOnce` kubelet assumes), so a single-node writer mode is accepted for an
//! ephemeral volume (the mount is read-only whatever the mode); a PV must ask a reader
//! mode. `readonly` must be true in every case, so that the pod's spec says what it gets.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use crate::backend::{PodInfo, Volume};
use crate::proto::volume_capability::access_mode::Mode;
use crate::proto::volume_capability::AccessType;
use crate::proto::{NodePublishVolumeRequest, VolumeCapability};

/// The volume context key naming the repository (`org/name`).
pub const KEY_REPO: &str = "repo";
/// The volume context key naming the revision (a branch, tag or commit).
pub const KEY_REVISION: &str = "revision";
/// The revision of a volume whose context gives none.
pub const DEFAULT_REVISION: &str = "main";
/// The prefix of the keys kubelet adds to the volume context (`podInfoOnMount: true`).
pub const POD_INFO_PREFIX: &str = "csi.storage.k8s.io/";
const KEY_POD_NAME: &str = "csi.storage.k8s.io/pod.name";
const KEY_POD_NAMESPACE: &str = "csi.storage.k8s.io/pod.namespace";
const KEY_POD_UID: &str = "csi.storage.k8s.io/pod.uid";
const KEY_SERVICE_ACCOUNT: &str = "csi.storage.k8s.io/serviceAccount.name";
/// `"true"` for an inline volume, `"false"` for a PV; present only with `podInfoOnMount`.
const KEY_EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";

/// CSI's size limit of a string field, which `volume_id` keeps ("Size Limits" in the
/// spec): kubelet's inline ids are 68 bytes.
pub const MAX_VOLUME_ID: usize = 128;
/// CSI's size limit of a map field (keys and values together): the volume context.
pub const MAX_CONTEXT: usize = 4096;
/// The longest path Linux takes (`PATH_MAX`, with its NUL).
pub const MAX_PATH: usize = 4095;

/// A refused request: the message names the field and what to write instead.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Invalid(pub(crate) String);

fn refuse<T>(message: String) -> Result<T, Invalid> {
    Err(Invalid(message))
}

/// Checks a publish request and returns the volume it asks for.
pub(crate) fn publish_request(req: &NodePublishVolumeRequest) -> Result<Volume, Invalid> {
    if req.volume_id.is_empty() {
        return refuse(
            "volume_id is empty: send the volume's id (an inline volume's generated id, \
             or the PV's spec.csi.volumeHandle)"
                .into(),
        );
    }
    if req.volume_id.len() > MAX_VOLUME_ID {
        return refuse(format!(
            "volume_id is {} bytes, over CSI's limit of {MAX_VOLUME_ID} bytes: give the PV a \
             shorter spec.csi.volumeHandle",
            req.volume_id.len()
        ));
    }
    let target = target_path("target_path", &req.target_path)?;
    let ephemeral = req.volume_context.get(KEY_EPHEMERAL).map(String::as_str) == Some("true");
    capability(req.volume_capability.as_ref(), ephemeral)?;
    if !req.readonly {
        return refuse(
            "readonly is false, and modelcas volumes are read-only: set `readOnly: true` on \
             the pod's csi volume, or on the persistentVolumeClaim volume for a PV"
                .into(),
        );
    }
    let context = context(&req.volume_context)?;
    Ok(Volume {
        volume_id: req.volume_id.clone(),
        target,
        repo: context.repo,
        revision: context.revision,
        pod: context.pod,
        ephemeral,
    })
}

/// Checks a target path (`field` names it in the message): non-empty, absolute, no `..`
/// and no NUL.
pub(crate) fn target_path(field: &str, path: &str) -> Result<PathBuf, Invalid> {
    if path.is_empty() {
        return refuse(format!(
            "{field} is empty: send the absolute path of the directory to mount at"
        ));
    }
    if path.len() > MAX_PATH {
        return refuse(format!(
            "{field} is {} bytes, longer than a path can be ({MAX_PATH} bytes)",
            path.len()
        ));
    }
    if path.chars().any(char::is_control) {
        return refuse(format!(
            "{field} {path:?} contains a control character: send a plain absolute path"
        ));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return refuse(format!(
            "{field} {path:?} is not absolute: send an absolute path (kubelet's is \
             /var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount)"
        ));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return refuse(format!(
            "{field} {path:?} contains `..`: send the path with no `..` component"
        ));
    }
    Ok(p.to_path_buf())
}

/// The access type must be `mount`; the access mode a reader one, or a single-node writer
/// one for an ephemeral (inline) volume.
fn capability(cap: Option<&VolumeCapability>, ephemeral: bool) -> Result<(), Invalid> {
    let Some(cap) = cap else {
        return refuse(
            "volume_capability is missing: send one with access type `mount` and a reader \
             access mode"
                .into(),
        );
    };
    match cap.access_type {
        Some(AccessType::Mount(_)) => {}
        Some(AccessType::Block(_)) => {
            return refuse(
                "volume_capability.access_type is `block`, and modelcas volumes are \
                 filesystems: use `volumeMode: Filesystem` (access type `mount`)"
                    .into(),
            )
        }
        None => {
            return refuse(
                "volume_capability.access_type is missing: send access type `mount`".into(),
            )
        }
    }
    let Some(mode) = cap.access_mode.as_ref() else {
        return refuse(
            "volume_capability.access_mode is missing: send MULTI_NODE_READER_ONLY \
             (`accessModes: [ReadOnlyMany]` on the PV)"
                .into(),
        );
    };
    access_mode(mode.mode, ephemeral)
}

fn access_mode(mode: i32, ephemeral: bool) -> Result<(), Invalid> {
    let fix = "give the PV `accessModes: [ReadOnlyMany]` (MULTI_NODE_READER_ONLY)";
    let Ok(known) = Mode::try_from(mode) else {
        return refuse(format!(
            "volume_capability.access_mode {mode} is not a CSI v1 access mode: {fix}"
        ));
    };
    let name = known.as_str_name();
    match known {
        Mode::SingleNodeReaderOnly | Mode::MultiNodeReaderOnly => Ok(()),
        Mode::SingleNodeWriter | Mode::SingleNodeSingleWriter | Mode::SingleNodeMultiWriter
            if ephemeral =>
        {
            Ok(())
        }
        Mode::SingleNodeWriter | Mode::SingleNodeSingleWriter | Mode::SingleNodeMultiWriter => {
            refuse(format!(
                "volume_capability.access_mode is {name}, a writer mode, which only an \
                 inline volume ({KEY_EPHEMERAL}=\"true\") may ask: {fix}"
            ))
        }
        Mode::MultiNodeSingleWriter | Mode::MultiNodeMultiWriter => refuse(format!(
            "volume_capability.access_mode is {name}, and modelcas volumes are read-only: \
             {fix}"
        )),
        Mode::Unknown => refuse(format!("volume_capability.access_mode is {name}: {fix}")),
    }
}

/// What the volume context gives.
struct Context {
    repo: String,
    revision: String,
    pod: Option<PodInfo>,
}

fn context(ctx: &HashMap<String, String>) -> Result<Context, Invalid> {
    if let Some((k, _)) = ctx
        .iter()
        .find(|(k, v)| k.chars().chain(v.chars()).any(char::is_control))
    {
        return refuse(format!(
            "volume_context {k:?} has a control character in its key or value: \
             volumeAttributes and pod information are plain text"
        ));
    }
    let size: usize = ctx.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_CONTEXT {
        return refuse(format!(
            "volume_context is {size} bytes (keys and values), over CSI's limit of 4 KiB: \
             volumeAttributes take `{KEY_REPO}` and `{KEY_REVISION}`"
        ));
    }
    let mut unknown: Vec<&str> = ctx
        .keys()
        .map(String::as_str)
        .filter(|k| *k != KEY_REPO && *k != KEY_REVISION && !k.starts_with(POD_INFO_PREFIX))
        .collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        return refuse(format!(
            "volume_context has unknown key(s) {unknown:?}: volumeAttributes take \
             `{KEY_REPO}` (org/name) and `{KEY_REVISION}` (optional, default \
             `{DEFAULT_REVISION}`), besides kubelet's {POD_INFO_PREFIX}* keys"
        ));
    }
    let Some(repo) = ctx.get(KEY_REPO) else {
        return refuse(format!(
            "volume_context has no `{KEY_REPO}`: set volumeAttributes.{KEY_REPO} to the \
             repository, as org/name"
        ));
    };
    if !is_repo_id(repo) {
        return refuse(format!(
            "volume_context `{KEY_REPO}` {repo:?} is not of the form org/name: set \
             volumeAttributes.{KEY_REPO} to two non-empty parts joined by one `/`, with no \
             `..`, no space and no control character"
        ));
    }
    let revision = match ctx.get(KEY_REVISION) {
        None => DEFAULT_REVISION.to_owned(),
        Some(r) if r.is_empty() || r.chars().any(char::is_control) => {
            return refuse(format!(
                "volume_context `{KEY_REVISION}` {r:?} is empty or has a control \
                 character: set volumeAttributes.{KEY_REVISION} to a branch, tag or commit, \
                 or leave it out for `{DEFAULT_REVISION}`"
            ))
        }
        Some(r) => r.clone(),
    };
    Ok(Context {
        repo: repo.clone(),
        revision,
        pod: pod_info(ctx),
    })
}

/// `org/name`: exactly one `/`, both parts non-empty and not `.`, no `..`, no whitespace
/// or control character.
fn is_repo_id(repo: &str) -> bool {
    let Some((org, name)) = repo.split_once('/') else {
        return false;
    };
    let part_ok = |p: &str| !p.is_empty() && p != "." && !p.contains('/');
    part_ok(org)
        && part_ok(name)
        && !repo.contains("..")
        && !repo.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The pod, when kubelet sent any of its keys.
fn pod_info(ctx: &HashMap<String, String>) -> Option<PodInfo> {
    let get = |k: &str| ctx.get(k).cloned();
    let (name, namespace, uid, service_account) = (
        get(KEY_POD_NAME),
        get(KEY_POD_NAMESPACE),
        get(KEY_POD_UID),
        get(KEY_SERVICE_ACCOUNT),
    );
    if name.is_none() && namespace.is_none() && uid.is_none() && service_account.is_none() {
        return None;
    }
    Some(PodInfo {
        name: name.unwrap_or_default(),
        namespace: namespace.unwrap_or_default(),
        uid: uid.unwrap_or_default(),
        service_account: service_account.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;
