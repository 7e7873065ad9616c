//! The server side: a process started by a holder, that serves every volume the holder
//! sends it (`Request::Serve` with the FUSE descriptor and the takeover state) until the
//! holder goes. How a volume is served (the store, the caches, the options) is the
//! caller's function; one server keeps one file cache and one chunk cache for all.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::holder::SERVER_FD_ENV;
use crate::wire::{self, Reply, Request, Volume};

/// Serves one volume: returns something to keep while it is served (dropping it must not
/// unmount), or why it cannot be served.
pub type ServeFn = dyn Fn(&Volume, OwnedFd, OwnedFd) -> Result<Box<dyn Send>, String> + Send + Sync;

/// Why the server cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("not started by a holder: {SERVER_FD_ENV} is missing or not a descriptor number")]
    NoHolder,
    #[error(transparent)]
    Wire(#[from] wire::WireError),
}

/// The socket to the holder that started this process.
pub fn holder_socket() -> Result<UnixStream, ServerError> {
    let fd: i32 = std::env::var(SERVER_FD_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or(ServerError::NoHolder)?;
    // SAFETY: the holder passed this descriptor to us and nothing else here uses it.
    let sock = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok(sock)
}

/// Serves what the holder on `sock` sends with `serve`, until the holder closes it.
pub fn run(sock: UnixStream, serve: Arc<ServeFn>) -> Result<(), ServerError> {
    let sessions: Arc<Mutex<HashMap<String, Box<dyn Send>>>> = Arc::default();
    let reply = Arc::new(Mutex::new(sock.try_clone().map_err(wire::WireError::Io)?));
    loop {
        let (req, fds) = match wire::recv::<Request>(&sock) {
            Ok(m) => m,
            Err(wire::WireError::Closed) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        match req {
            Request::Serve(volume) => {
                let [fuse, state]: [OwnedFd; 2] = match fds.try_into() {
                    Ok(fds) => fds,
                    Err(_) => {
                        let r = Reply::Served {
                            id: volume.id,
                            error: Some("serve: expected 2 descriptors".into()),
                        };
                        wire::send(&reply.lock(), &r, &[])?;
                        continue;
                    }
                };
                // Each on its own thread: a new connection's FUSE_INIT handshake blocks.
                let (serve, sessions, reply) = (serve.clone(), sessions.clone(), reply.clone());
                std::thread::spawn(move || {
                    let error = if sessions.lock().contains_key(&volume.id) {
                        None
                    } else {
                        match serve(&volume, fuse, state) {
                            Ok(s) => {
                                sessions.lock().insert(volume.id.clone(), s);
                                None
                            }
                            Err(e) => Some(e),
                        }
                    };
                    let r = Reply::Served {
                        id: volume.id,
                        error,
                    };
                    let _ = wire::send(&reply.lock(), &r, &[]);
                });
            }
            Request::Remove { id } => {
                // Its mount is gone: the session's threads end on their own (ENODEV).
                if let Some(s) = sessions.lock().remove(&id) {
                    // Dropping a session joins its threads: off this loop.
                    std::thread::spawn(move || drop(s));
                }
            }
            other => tracing::warn!("mountd server: unexpected request {other:?}"),
        }
    }
}
