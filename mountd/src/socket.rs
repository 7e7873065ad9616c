//! The holder's unix socket (`modelcas mountd`, default [`DEFAULT_SOCKET`]) and its
//! clients: `add` (a mounted, never served connection, its descriptor attached), `remove`,
//! `list`, and `handover` (a new holder takes every volume, then the old one exits). The
//! socket is mode 0600 in a directory of root's, and each peer must be root or the
//! holder's own user (SO_PEERCRED).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use crate::holder::{Held, Holder, HolderError};
use crate::wire::{self, Reply, Request, Volume, WireError};

/// Where `modelcas mountd` listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/modelcas/mountd.sock";

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("mountd at {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("mountd: {0}")]
    Refused(String),
}

fn connect(path: &Path) -> Result<UnixStream, ClientError> {
    UnixStream::connect(path).map_err(|source| ClientError::Connect {
        path: path.display().to_string(),
        source,
    })
}

fn call(path: &Path, req: &Request, fds: &[i32]) -> Result<Reply, ClientError> {
    let sock = connect(path)?;
    wire::send(&sock, req, fds)?;
    match wire::recv::<Reply>(&sock)?.0 {
        Reply::Error(e) => Err(ClientError::Refused(e)),
        r => Ok(r),
    }
}

/// Has the holder at `path` keep and serve `volume`, mounted connection `fuse`.
pub fn add(path: &Path, volume: &Volume, fuse: &OwnedFd) -> Result<(), ClientError> {
    call(path, &Request::Add(volume.clone()), &[fuse.as_raw_fd()]).map(|_| ())
}

/// Has the holder forget volume `id`.
pub fn remove(path: &Path, id: &str) -> Result<(), ClientError> {
    call(path, &Request::Remove { id: id.into() }, &[]).map(|_| ())
}

/// The volumes the holder at `path` keeps.
pub fn list(path: &Path) -> Result<Vec<Volume>, ClientError> {
    match call(path, &Request::List, &[])? {
        Reply::Volumes(v) => Ok(v),
        other => Err(ClientError::Refused(format!("unexpected answer {other:?}"))),
    }
}

/// Takes every volume of the holder at `path` (which stops its server and exits).
pub fn take_over(path: &Path) -> Result<Vec<Held>, ClientError> {
    let sock = connect(path)?;
    wire::send(&sock, &Request::Handover, &[])?;
    let mut out = Vec::new();
    loop {
        match wire::recv::<Reply>(&sock)? {
            (Reply::HandedOver { last: true, .. }, _) => break,
            (
                Reply::HandedOver {
                    volume: Some(volume),
                    ..
                },
                fds,
            ) => {
                let [fuse, state]: [OwnedFd; 2] = fds
                    .try_into()
                    .map_err(|_| ClientError::Refused("handover without 2 descriptors".into()))?;
                out.push(Held {
                    volume,
                    fuse,
                    state,
                });
            }
            (Reply::Error(e), _) => return Err(ClientError::Refused(e)),
            (other, _) => return Err(ClientError::Refused(format!("unexpected {other:?}"))),
        }
    }
    wire::send(&sock, &Reply::Ok, &[])?;
    Ok(out)
}

/// Listens on `path` (replacing a stale socket) and answers clients with `holder`;
/// returns after a handover, when the caller should exit.
pub fn listen(path: &Path, holder: &Holder) -> Result<(), HolderError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            if UnixStream::connect(path).is_ok() {
                return Err(HolderError::Io(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!(
                        "{}: another mountd answers there (use --take-over to replace it)",
                        path.display()
                    ),
                )));
            }
            std::fs::remove_file(path)?;
        }
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if !peer_allowed(&conn) {
            let _ = wire::send(&conn, &Reply::Error("permission denied".into()), &[]);
            continue;
        }
        let handed = {
            let holder = holder.clone();
            match wire::recv::<Request>(&conn) {
                Ok((Request::Handover, _)) => hand_over(&conn, &holder),
                Ok((req, fds)) => {
                    std::thread::spawn(move || answer(&conn, &holder, req, fds));
                    false
                }
                Err(e) => {
                    tracing::warn!("mountd: a client sent garbage: {e}");
                    false
                }
            }
        };
        if handed {
            return Ok(());
        }
    }
    Ok(())
}

fn peer_allowed(conn: &UnixStream) -> bool {
    match nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials) {
        // SAFETY: geteuid cannot fail.
        Ok(cred) => cred.uid() == 0 || cred.uid() == unsafe { libc::geteuid() },
        Err(_) => false,
    }
}

fn answer(conn: &UnixStream, holder: &Holder, req: Request, fds: Vec<OwnedFd>) {
    let reply = match req {
        Request::Add(volume) => match <[OwnedFd; 1]>::try_from(fds) {
            Ok([fuse]) => match holder.add(volume, fuse) {
                Ok(()) => Reply::Ok,
                Err(e) => Reply::Error(e.to_string()),
            },
            Err(_) => Reply::Error("add: expected the FUSE descriptor".into()),
        },
        Request::Remove { id } => {
            holder.remove(&id);
            Reply::Ok
        }
        Request::List => Reply::Volumes(holder.list()),
        other => Reply::Error(format!("not a client request: {other:?}")),
    };
    let _ = wire::send(conn, &reply, &[]);
}

/// Sends every volume to the new holder on `conn`; true once it acknowledged them all.
fn hand_over(conn: &UnixStream, holder: &Holder) -> bool {
    let Some(held) = holder.hand_over() else {
        let _ = wire::send(
            conn,
            &Reply::Error("the FUSE server did not stop".into()),
            &[],
        );
        return false;
    };
    for h in &held {
        let m = Reply::HandedOver {
            volume: Some(h.volume.clone()),
            last: false,
        };
        if wire::send(conn, &m, &[h.fuse.as_raw_fd(), h.state.as_raw_fd()]).is_err() {
            break;
        }
    }
    let done = Reply::HandedOver {
        volume: None,
        last: true,
    };
    // The new holder has the descriptors once it acknowledges.
    let acked = wire::send(conn, &done, &[]).is_ok()
        && matches!(wire::recv::<Reply>(conn), Ok((Reply::Ok, _)));
    if !acked {
        tracing::error!("mountd: the handover failed; serving the volumes again");
        holder.restore(held);
    }
    acked
}
