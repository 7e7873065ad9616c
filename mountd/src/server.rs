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
use crate::metrics;
use crate::wire::{self, Reply, Request, Volume};

/// Serves one volume: returns something to keep while it is served (dropping it must not
/// unmount), or why it cannot be served.
pub type ServeFn = dyn Fn(&Volume, OwnedFd, OwnedFd) -> Result<Served, String> + Send + Sync;

/// A volume being served.
pub struct Served {
    /// Kept while it is served (dropping it must not unmount).
    pub session: Box<dyn Send>,
    /// Whether an earlier server served it (this one took it over).
    pub taken_over: bool,
}

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

/// A volume of this server: being set up (`serve` runs, on the Serve numbered `serial`;
/// `removed` if a remove came meanwhile), or served.
enum Session {
    Starting { serial: u64, removed: bool },
    Serving(Box<dyn Send>),
}

type Sessions = Arc<Mutex<HashMap<String, Session>>>;

/// Serves what the holder on `sock` sends with `serve`, until the holder closes it.
pub fn run(sock: UnixStream, serve: Arc<ServeFn>) -> Result<(), ServerError> {
    metrics::init_server();
    let sessions: Sessions = Arc::default();
    let mut serial = 0u64;
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
                            instance: volume.instance,
                        };
                        wire::send(&reply.lock(), &r, &[])?;
                        continue;
                    }
                };
                serial += 1;
                {
                    let mut sessions = sessions.lock();
                    // Served or being set up already: the first answer stands. (A new
                    // volume under the id of one removed while it was set up is started:
                    // that setup ends unanswered.)
                    if let Some(Session::Serving(_) | Session::Starting { removed: false, .. }) =
                        sessions.get(&volume.id)
                    {
                        continue;
                    }
                    let starting = Session::Starting {
                        serial,
                        removed: false,
                    };
                    sessions.insert(volume.id.clone(), starting);
                }
                // Each on its own thread: a new connection's FUSE_INIT handshake blocks.
                let (serve, sessions, reply) = (serve.clone(), sessions.clone(), reply.clone());
                std::thread::spawn(move || {
                    if let Some(error) = start(&serve, &sessions, &volume, serial, fuse, state) {
                        let r = Reply::Served {
                            id: volume.id,
                            error,
                            instance: volume.instance,
                        };
                        let _ = wire::send(&reply.lock(), &r, &[]);
                    }
                });
            }
            Request::Remove { id } => {
                let mut sessions = sessions.lock();
                match sessions.remove(&id) {
                    // Its mount is gone: the session's threads end on their own (ENODEV).
                    // Dropping a session joins its threads: off this loop.
                    Some(Session::Serving(s)) => {
                        metrics::unserved();
                        std::thread::spawn(move || drop(s));
                    }
                    // Dropped when its setup ends.
                    Some(Session::Starting { serial, .. }) => {
                        let removed = Session::Starting {
                            serial,
                            removed: true,
                        };
                        sessions.insert(id, removed);
                    }
                    None => {}
                }
            }
            other => tracing::warn!("mountd server: unexpected request {other:?}"),
        }
    }
}

/// Serves `volume` (the Serve numbered `serial`) and records its session: the answer to
/// send (`Some(None)`: served, `Some(Some(why))`: not). A volume removed while it was set
/// up is not kept and not answered: the holder waits for nothing of it, and may wait for
/// a new volume under the same id.
fn start(
    serve: &Arc<ServeFn>,
    sessions: &Sessions,
    volume: &Volume,
    serial: u64,
    fuse: OwnedFd,
    state: OwnedFd,
) -> Option<Option<String>> {
    let outcome = serve(volume, fuse, state);
    let mut sessions = sessions.lock();
    let current = matches!(
        sessions.get(&volume.id),
        Some(Session::Starting { serial: s, removed: false }) if *s == serial
    );
    let mine = matches!(
        sessions.get(&volume.id),
        Some(Session::Starting { serial: s, .. }) if *s == serial
    );
    if mine && !current {
        sessions.remove(&volume.id);
    }
    match outcome {
        Ok(s) if current => {
            metrics::served(s.taken_over);
            sessions.insert(volume.id.clone(), Session::Serving(s.session));
            Some(None)
        }
        Ok(s) => {
            // Joins its threads, which end when its mount goes: off this thread.
            std::thread::spawn(move || drop(s.session));
            None
        }
        Err(e) => {
            metrics::serve_failed();
            if current {
                sessions.remove(&volume.id);
                Some(Some(e))
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn volume(id: &str) -> Volume {
        Volume::for_test(id, std::path::Path::new("/nonexistent"))
    }

    #[test]
    fn a_volume_removed_while_it_is_set_up_is_not_kept() {
        // Failed before: the session was recorded after its setup, the remove had found
        // nothing to remove, and the session stayed for the server's life.
        let (holder, server) = UnixStream::pair().unwrap();
        let (go, wait) = mpsc::channel::<()>();
        let wait = Mutex::new(wait);
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        let serve: Arc<ServeFn> = Arc::new(move |_, _, _| {
            wait.lock().recv().map_err(|e| e.to_string())?;
            Ok(Served {
                session: Box::new(DropFlag(flag.clone())),
                taken_over: false,
            })
        });
        std::thread::spawn(move || run(server, serve));
        let (a, b) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
        let fds = [a.as_raw_fd(), b.as_raw_fd()];
        wire::send(&holder, &Request::Serve(volume("v1")), &fds).unwrap();
        wire::send(&holder, &Request::Remove { id: "v1".into() }, &[]).unwrap();
        // Answered in order on the loop: once this answer comes, the remove was handled.
        wire::send(&holder, &Request::Serve(volume("probe")), &[]).unwrap();
        let (r, _) = wire::recv::<Reply>(&holder).unwrap();
        assert!(matches!(r, Reply::Served { id, error: Some(_), .. } if id == "probe"));
        go.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dropped.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < deadline, "the session was kept");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // And not answered: the next answer is the next probe's.
        wire::send(&holder, &Request::Serve(volume("probe2")), &[]).unwrap();
        let (r, _) = wire::recv::<Reply>(&holder).unwrap();
        assert!(
            matches!(&r, Reply::Served { id, .. } if id == "probe2"),
            "{r:?}"
        );
    }
}
