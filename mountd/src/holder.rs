//! The holder: keeps each volume's FUSE descriptor and takeover state open, and runs the
//! one server process that answers them all, started again at once whenever it ends.
//!
//! Invariant: at most one server serves a connection at any moment (two would hand out
//! inode numbers from the same journal independently). The supervisor starts a server only
//! after the previous one was reaped, and a restart (an upgrade: the binary on disk is run
//! again) kills the running one first. The holder never reads the store: it has nothing
//! to crash on but its own socket.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use modelfs::takeover::State;
use parking_lot::{Condvar, Mutex};

use crate::wire::{self, Reply, Request, Volume};

/// The environment variable that gives a server the descriptor of its holder's socket.
pub const SERVER_FD_ENV: &str = "MODELCAS_MOUNTD_SERVER_FD";

/// How long an `add` waits for the server to answer the kernel's FUSE_INIT.
pub const ADD_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the holder refused something.
#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error("volume {0} is already held")]
    Exists(String),
    #[error("volume {id}: the server could not serve it: {error}")]
    Serve { id: String, error: String },
    #[error("volume {0}: no server answered within {1:?}")]
    Timeout(String, Duration),
    #[error(transparent)]
    State(#[from] modelfs::takeover::StateError),
    #[error(transparent)]
    Wire(#[from] wire::WireError),
    #[error("mountd: {0}")]
    Io(#[from] std::io::Error),
}

/// One volume kept.
pub struct Held {
    pub volume: Volume,
    pub fuse: OwnedFd,
    pub state: OwnedFd,
}

struct Server {
    sock: UnixStream,
    pid: u32,
}

struct Inner {
    argv: Vec<OsString>,
    volumes: Mutex<Vec<Held>>,
    /// The running server (None between one and the next); held while volumes are sent,
    /// so a volume is sent to each server exactly once.
    server: Mutex<Option<Server>>,
    server_changed: Condvar,
    waiting: Mutex<HashMap<String, mpsc::Sender<Option<String>>>>,
    stopping: AtomicBool,
    /// Servers started, the first included.
    starts: AtomicU64,
    /// Whether a supervisor thread runs.
    supervising: AtomicBool,
}

/// The holder of a node's (or one mount's) volumes.
#[derive(Clone)]
pub struct Holder {
    inner: Arc<Inner>,
}

impl Holder {
    /// A holder whose server is `argv` (a program and its arguments, run again as it is on
    /// disk at each start), started now and kept running.
    pub fn start(argv: Vec<OsString>) -> Result<Holder, HolderError> {
        let inner = Arc::new(Inner {
            argv,
            volumes: Mutex::new(Vec::new()),
            server: Mutex::new(None),
            server_changed: Condvar::new(),
            waiting: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            starts: AtomicU64::new(0),
            supervising: AtomicBool::new(false),
        });
        let holder = Holder { inner };
        holder.supervise()?;
        Ok(holder)
    }

    fn supervise(&self) -> std::io::Result<()> {
        if self.inner.supervising.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let sup = self.inner.clone();
        std::thread::Builder::new()
            .name("mountd-supervisor".into())
            .spawn(move || {
                supervise(&sup);
                sup.supervising.store(false, Ordering::SeqCst);
            })?;
        Ok(())
    }

    /// Takes back volumes a failed handover had taken out, and serves them again.
    pub fn restore(&self, held: Vec<Held>) {
        self.inner.volumes.lock().extend(held);
        self.inner.stopping.store(false, Ordering::SeqCst);
        while self.inner.supervising.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Err(e) = self.supervise() {
            tracing::error!("mountd: cannot restart the supervisor: {e}");
        }
    }

    /// Keeps `volume` (mounted connection `fuse`, never served) with a new takeover state,
    /// and returns once the server has answered its FUSE_INIT. On error nothing is kept.
    pub fn add(&self, volume: Volume, fuse: OwnedFd) -> Result<(), HolderError> {
        let state = State::create(now_secs())?;
        let state = OwnedFd::from(state.file().try_clone()?);
        self.add_held(Held {
            volume,
            fuse,
            state,
        })
    }

    /// Keeps a volume handed over by another holder (its state as that holder's server
    /// left it) and waits until it is served.
    pub fn add_held(&self, held: Held) -> Result<(), HolderError> {
        let id = held.volume.id.clone();
        let (tx, rx) = mpsc::channel();
        {
            let server = self.inner.server.lock();
            let mut volumes = self.inner.volumes.lock();
            if volumes.iter().any(|h| h.volume.id == id) {
                return Err(HolderError::Exists(id));
            }
            self.inner.waiting.lock().insert(id.clone(), tx);
            if let Some(s) = server.as_ref() {
                // A failed send means the server is going: the next one gets every volume.
                let _ = send_serve(s, &held);
            }
            volumes.push(held);
        }
        let answer = rx.recv_timeout(ADD_TIMEOUT);
        self.inner.waiting.lock().remove(&id);
        match answer {
            Ok(None) => Ok(()),
            Ok(Some(error)) => {
                self.remove(&id);
                Err(HolderError::Serve { id, error })
            }
            Err(_) => {
                self.remove(&id);
                Err(HolderError::Timeout(id, ADD_TIMEOUT))
            }
        }
    }

    /// Forgets volume `id` (closing its descriptors); false if not held.
    pub fn remove(&self, id: &str) -> bool {
        let held = {
            let mut volumes = self.inner.volumes.lock();
            let Some(i) = volumes.iter().position(|h| h.volume.id == id) else {
                return false;
            };
            volumes.remove(i)
        };
        if let Some(s) = self.inner.server.lock().as_ref() {
            let _ = wire::send(&s.sock, &Request::Remove { id: id.into() }, &[]);
        }
        drop(held);
        true
    }

    /// The volumes held.
    pub fn list(&self) -> Vec<Volume> {
        self.inner
            .volumes
            .lock()
            .iter()
            .map(|h| h.volume.clone())
            .collect()
    }

    /// Every volume, taken out (for a new holder), after the server was stopped and
    /// reaped; `None` (and serving on) when it could not be reaped: two servers must
    /// never serve one connection.
    pub fn hand_over(&self) -> Option<Vec<Held>> {
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.kill_server_and_wait();
        if self.inner.server.lock().is_some() {
            tracing::error!("mountd: the FUSE server did not end; refusing the handover");
            self.inner.stopping.store(false, Ordering::SeqCst);
            return None;
        }
        Some(std::mem::take(&mut *self.inner.volumes.lock()))
    }

    /// Ends the running server (SIGKILL) and lets the supervisor start the binary on disk
    /// again: an upgrade, or a test of a crash. Returns once the new server is running.
    pub fn restart_server(&self) {
        let before = self.inner.starts.load(Ordering::SeqCst);
        self.kill_server();
        let mut server = self.inner.server.lock();
        while server.is_none() || self.inner.starts.load(Ordering::SeqCst) == before {
            self.inner
                .server_changed
                .wait_for(&mut server, Duration::from_millis(200));
            if self.inner.stopping.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// The pid of the running server, if one runs.
    pub fn server_pid(&self) -> Option<u32> {
        self.inner.server.lock().as_ref().map(|s| s.pid)
    }

    /// Servers started so far.
    pub fn starts(&self) -> u64 {
        self.inner.starts.load(Ordering::SeqCst)
    }

    /// Stops the server for good (the volumes' descriptors stay held until dropped): its
    /// socket is shut, so it writes what it still has to write (last-use records) and
    /// exits; killed if it has not within 10 s.
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let mut server = self.inner.server.lock();
        if let Some(s) = server.as_ref() {
            let _ = s.sock.shutdown(std::net::Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.is_some() && Instant::now() < deadline {
            self.inner
                .server_changed
                .wait_for(&mut server, Duration::from_millis(100));
        }
        drop(server);
        self.kill_server_and_wait();
    }

    fn kill_server(&self) {
        if let Some(pid) = self.server_pid() {
            // SAFETY: kill(2) with a pid of our own child; no memory is touched.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }

    fn kill_server_and_wait(&self) {
        self.kill_server();
        let mut server = self.inner.server.lock();
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.is_some() && Instant::now() < deadline {
            self.inner
                .server_changed
                .wait_for(&mut server, Duration::from_millis(100));
        }
    }
}

fn send_serve(s: &Server, held: &Held) -> Result<(), wire::WireError> {
    wire::send(
        &s.sock,
        &Request::Serve(held.volume.clone()),
        &[held.fuse.as_raw_fd(), held.state.as_raw_fd()],
    )
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Runs servers one after another for as long as the holder lives.
fn supervise(inner: &Arc<Inner>) {
    let mut quick_failures = 0u32;
    while !inner.stopping.load(Ordering::SeqCst) {
        let started = Instant::now();
        match spawn_server(inner) {
            Ok((mut child, sock)) => {
                read_replies(inner, &sock);
                let status = child.wait();
                *inner.server.lock() = None;
                inner.server_changed.notify_all();
                if !inner.stopping.load(Ordering::SeqCst) {
                    tracing::warn!(
                        "mountd: the FUSE server ended ({status:?}); starting another, which takes the mounts over"
                    );
                }
            }
            Err(e) => tracing::error!("mountd: cannot start the FUSE server: {e}"),
        }
        // A server that keeps dying at once (a broken binary, a bad config) is started
        // again after a growing pause, up to 5 s, from its third quick death on; one that
        // ran a while, or died quickly once or twice (killed again soon after a takeover),
        // at once: readers are waiting.
        if started.elapsed() < Duration::from_secs(2) {
            quick_failures += 1;
            if quick_failures > 2 {
                let n = u64::from((quick_failures - 2).min(25));
                std::thread::sleep(Duration::from_millis(200 * n));
            }
        } else {
            quick_failures = 0;
        }
    }
}

/// Starts a server with one end of a socket pair, sends it every volume held.
fn spawn_server(inner: &Arc<Inner>) -> Result<(Child, UnixStream), HolderError> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(&inner.argv[0]);
    cmd.args(&inner.argv[1..])
        .env(SERVER_FD_ENV, theirs_fd.to_string());
    // SAFETY: between fork and exec only async-signal-safe calls: fcntl and prctl.
    unsafe {
        cmd.pre_exec(move || {
            // The server's end crosses exec; it dies with the holder.
            if libc::fcntl(theirs_fd, libc::F_SETFD, 0) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut server = inner.server.lock();
    let child = cmd.spawn()?;
    drop(theirs);
    let conn = Server {
        sock: ours.try_clone()?,
        pid: child.id(),
    };
    for held in inner.volumes.lock().iter() {
        let _ = send_serve(&conn, held);
    }
    *server = Some(conn);
    inner.starts.fetch_add(1, Ordering::SeqCst);
    inner.server_changed.notify_all();
    drop(server);
    Ok((child, ours))
}

/// Passes the server's answers to those waiting for them, until it goes.
fn read_replies(inner: &Arc<Inner>, sock: &UnixStream) {
    loop {
        match wire::recv::<Reply>(sock) {
            Ok((Reply::Served { id, error }, _)) => {
                if let Some(e) = &error {
                    tracing::error!("mountd: volume {id}: {e}");
                }
                if let Some(tx) = inner.waiting.lock().get(&id) {
                    let _ = tx.send(error);
                }
            }
            Ok((other, _)) => {
                tracing::warn!("mountd: unexpected message from the server: {other:?}")
            }
            Err(_) => return,
        }
    }
}
