//! A kubelet stand-in for benchmarks and for poking a node's plugin by hand: one
//! NodePublishVolume or NodeUnpublishVolume over the plugin's unix socket, with the fields
//! kubelet sends for an inline read-only volume.
//!
//!     kubelet SOCKET publish VOLUME_ID TARGET REPO REVISION
//!     kubelet SOCKET unpublish VOLUME_ID TARGET
//!
//! Prints `ok`, or the gRPC code and message and exits 1.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use csi::proto::node_client::NodeClient;
use csi::proto::volume_capability::access_mode::Mode;
use csi::proto::volume_capability::{AccessMode, AccessType, MountVolume};
use csi::proto::{NodePublishVolumeRequest, NodeUnpublishVolumeRequest, VolumeCapability};
use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

const USAGE: &str = "usage: kubelet SOCKET publish VOLUME_ID TARGET REPO REVISION\n       \
                     kubelet SOCKET unpublish VOLUME_ID TARGET";

fn publish_request(id: &str, target: &str, repo: &str, revision: &str) -> NodePublishVolumeRequest {
    let volume_context: HashMap<String, String> = [
        ("repo", repo),
        ("revision", revision),
        ("csi.storage.k8s.io/ephemeral", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    NodePublishVolumeRequest {
        volume_id: id.into(),
        target_path: target.into(),
        volume_capability: Some(VolumeCapability {
            access_mode: Some(AccessMode {
                mode: Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Mount(MountVolume::default())),
        }),
        readonly: true,
        volume_context,
        ..Default::default()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let (socket, rest) = match argv.split_first() {
        Some((s, rest)) => (PathBuf::from(s), rest),
        None => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let endpoint = Endpoint::from_static("http://[::]:50051");
    let channel = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let socket = socket.clone();
        async move {
            Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?))
        }
    }));
    let mut node = match channel.await {
        Ok(c) => NodeClient::new(c),
        Err(e) => {
            eprintln!("cannot reach the plugin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match rest {
        ["publish", id, target, repo, revision] => node
            .node_publish_volume(publish_request(id, target, repo, revision))
            .await
            .map(|_| ()),
        ["unpublish", id, target] => node
            .node_unpublish_volume(NodeUnpublishVolumeRequest {
                volume_id: (*id).into(),
                target_path: (*target).into(),
            })
            .await
            .map(|_| ()),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match outcome {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(s) => {
            eprintln!("{:?}: {}", s.code(), s.message());
            ExitCode::FAILURE
        }
    }
}
