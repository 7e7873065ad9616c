//! The plugin's endpoint: parsing `--endpoint` / `CSI_ENDPOINT`, preparing the unix socket
//! (its directory, a stale socket of an earlier run), and serving the Identity and Node
//! services on it until the shutdown future completes.
//!
//! A socket file left by a dead plugin is removed before binding, but only when it is a
//! socket and nothing answers on it: a live plugin's socket, or any other file, is an
//! error rather than something to delete.

use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::backend::VolumeBackend;
use crate::identity::IdentityService;
use crate::node::NodeService;
use crate::proto::identity_server::IdentityServer;
use crate::proto::node_server::NodeServer;

/// The longest socket path the kernel takes: `sun_path` is 108 bytes with its NUL.
const MAX_SOCKET_PATH: usize = 107;

/// Why the plugin could not serve.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    /// The endpoint is not a unix socket path in a form the plugin reads.
    #[error(
        "CSI endpoint {endpoint:?}: {reason} (give unix:///path/to/csi.sock, \
         unix:/path/to/csi.sock or an absolute path)"
    )]
    Endpoint { endpoint: String, reason: String },
    /// No node id was given.
    #[error("the node id is empty: give the plugin its Kubernetes node's name")]
    EmptyNodeId,
    /// A file that is not a socket sits at the endpoint's path.
    #[error("CSI endpoint {path:?} exists and is not a socket: remove it or give another path")]
    NotASocket { path: PathBuf },
    /// Another process answers on the endpoint's socket.
    #[error("CSI endpoint {path:?} is in use: another plugin answers on it")]
    InUse { path: PathBuf },
    /// Preparing or binding the socket failed.
    #[error("CSI endpoint {path:?}: {what}: {source}")]
    Socket {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    /// The gRPC server stopped with an error.
    #[error("serving CSI on {path:?}: {source}")]
    Serve {
        path: PathBuf,
        source: tonic::transport::Error,
    },
}

/// The socket path of an endpoint: `unix:///path`, `unix:/path` or a bare absolute path.
pub fn parse_endpoint(endpoint: &str) -> Result<PathBuf, CsiError> {
    let bad = |reason: &str| CsiError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason: reason.to_owned(),
    };
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if let Some(rest) = endpoint.strip_prefix("unix:") {
        rest
    } else if endpoint.contains("://") {
        return Err(bad("only unix sockets are served"));
    } else {
        endpoint
    };
    if path.is_empty() {
        return Err(bad("no socket path"));
    }
    if !path.starts_with('/') {
        return Err(bad("the socket path is not absolute"));
    }
    if path.contains('\0') {
        return Err(bad("the socket path contains a NUL byte"));
    }
    if path.len() > MAX_SOCKET_PATH {
        return Err(bad(
            "the socket path is longer than the 107 bytes a unix socket takes",
        ));
    }
    Ok(PathBuf::from(path))
}

/// Creates the socket's directory and removes a dead plugin's socket.
fn prepare_socket(path: &Path) -> Result<(), CsiError> {
    let err = |what, source| CsiError::Socket {
        path: path.to_path_buf(),
        what,
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err("creating its directory", e))?;
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("reading what is there", e)),
    };
    if !meta.file_type().is_socket() {
        return Err(CsiError::NotASocket {
            path: path.to_path_buf(),
        });
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(CsiError::InUse {
            path: path.to_path_buf(),
        });
    }
    tracing::info!(socket = %path.display(), "removing the socket of an earlier run");
    std::fs::remove_file(path).map_err(|e| err("removing the stale socket", e))
}

/// Serves the CSI Identity and Node services on the unix socket `endpoint` for node
/// `node_id`, publishing through `backend`, until `shutdown` completes (then waits for the
/// calls in flight and removes the socket).
pub async fn serve(
    endpoint: &str,
    node_id: String,
    backend: Arc<dyn VolumeBackend>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), CsiError> {
    let path = parse_endpoint(endpoint)?;
    if node_id.is_empty() {
        return Err(CsiError::EmptyNodeId);
    }
    prepare_socket(&path)?;
    let listener = UnixListener::bind(&path).map_err(|source| CsiError::Socket {
        path: path.clone(),
        what: "binding",
        source,
    })?;
    tracing::info!(socket = %path.display(), node_id, "serving CSI Identity and Node");
    let served = Server::builder()
        .add_service(IdentityServer::new(IdentityService))
        .add_service(NodeServer::new(NodeService::new(node_id, backend)))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    if let Err(e) = std::fs::remove_file(&path) {
        tracing::warn!(socket = %path.display(), error = %e, "could not remove the socket");
    }
    served.map_err(|source| CsiError::Serve { path, source })?;
    tracing::info!("CSI server stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        for (e, p) in [
            ("unix:///csi/csi.sock", "/csi/csi.sock"),
            ("unix:/csi/csi.sock", "/csi/csi.sock"),
            (
                "/var/lib/kubelet/plugins/csi.modelcas.io/csi.sock",
                "/var/lib/kubelet/plugins/csi.modelcas.io/csi.sock",
            ),
        ] {
            assert_eq!(parse_endpoint(e).unwrap(), Path::new(p), "{e}");
        }
        for e in [
            "",
            "unix://",
            "unix:",
            "unix://csi.sock",
            "csi.sock",
            "tcp://127.0.0.1:10000",
            "127.0.0.1:10000",
            "unix:///a\0b",
        ] {
            let err = parse_endpoint(e).unwrap_err();
            assert!(matches!(err, CsiError::Endpoint { .. }), "{e:?}: {err}");
            assert!(err.to_string().contains("unix:///path"), "{err}");
        }
        let long = format!("unix:///{}", "a".repeat(120));
        assert!(parse_endpoint(&long)
            .unwrap_err()
            .to_string()
            .contains("107 bytes"));
    }

    #[test]
    fn a_file_that_is_not_a_socket_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("csi.sock");
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(matches!(
            prepare_socket(&path),
            Err(CsiError::NotASocket { .. })
        ));
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    }

    #[test]
    fn a_dead_socket_is_removed_and_a_live_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/csi.sock");
        prepare_socket(&path).unwrap();
        assert!(path.parent().unwrap().is_dir());
        let live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(matches!(prepare_socket(&path), Err(CsiError::InUse { .. })));
        drop(live);
        assert!(path.exists(), "a closed listener leaves its socket file");
        prepare_socket(&path).unwrap();
        assert!(!path.exists());
    }
}
