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

/// The most volumes one holder keeps (their list must fit one frame of the socket).
pub const MAX_VOLUMES: usize = 1024;

/// How long an `add` waits for the server to answer the kernel's FUSE_INIT.
pub const ADD_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the holder refused something.
#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error("volume {0} is already held")]
    Exists(String),
    #[error("volume {0}: mountd is handing its volumes over to a new mountd; try again")]
    HandingOver(String),
    #[error(
        "mountd is handing its volumes over to a new mountd and cannot say which it holds; \
         ask again in a few seconds"
    )]
    Busy,
    #[error(
        "volume {0}: mountd holds {MAX_VOLUMES} volumes already, or as many as one answer to \
         a list can name, its most"
    )]
    Full(String),
    #[error("volume {0}: the descriptor is not a /dev/fuse connection")]
    NotFuse(String),
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

/// The server slot: the running server, and whether another may be started.
#[derive(Default)]
struct Slot {
    running: Option<Server>,
    /// Set by a handover: no server is started until [`Holder::restore`] (or ever).
    paused: bool,
}

struct Inner {
    argv: Vec<OsString>,
    /// Lock order: `slot`, then `volumes`, then `waiting`.
    volumes: Mutex<Vec<Kept>>,
    /// Held while volumes are sent, so a volume is sent to each server exactly once.
    slot: Mutex<Slot>,
    slot_changed: Condvar,
    waiting: Mutex<HashMap<String, mpsc::Sender<Option<String>>>>,
    /// Failed serves of volumes nobody waits for (taken over), by volume: tries so far.
    retries: Mutex<HashMap<String, u32>>,
    stopping: AtomicBool,
    /// Set once every volume went to a new holder: nothing is added any more.
    retired: AtomicBool,
    /// Servers started, the first included.
    starts: AtomicU64,
    /// When the last server ended (microseconds since the epoch; 0: none has).
    last_end: AtomicU64,
    /// The next [`Kept::instance`].
    instances: AtomicU64,
}

/// A volume held, and which keeping of it this is (a number the holder gives once: its
/// `Serve` carries it, and an answer that does not is about an earlier volume of the id).
struct Kept {
    held: Held,
    instance: u64,
}

impl Kept {
    fn new(inner: &Inner, held: Held) -> Kept {
        Kept {
            held,
            instance: inner.instances.fetch_add(1, Ordering::SeqCst),
        }
    }
}

/// What the servers of the holders before this one did, carried across a handover so that
/// the takeover metrics go on counting where the old holder's stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// Servers started so far (each after the first took the volumes over).
    pub servers_started: u64,
    /// When the last of them ended (microseconds since the epoch).
    pub last_end_us: Option<u64>,
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
        Holder::start_after(argv, History::default())
    }

    /// [`Holder::start`] for a holder that took over from another with `history`: its
    /// first server counts as one more takeover, whose pause runs from the old one's end.
    pub fn start_after(argv: Vec<OsString>, history: History) -> Result<Holder, HolderError> {
        let inner = Arc::new(Inner {
            argv,
            volumes: Mutex::new(Vec::new()),
            slot: Mutex::new(Slot::default()),
            slot_changed: Condvar::new(),
            waiting: Mutex::new(HashMap::new()),
            retries: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            starts: AtomicU64::new(history.servers_started),
            last_end: AtomicU64::new(history.last_end_us.unwrap_or(0)),
            instances: AtomicU64::new(1),
        });
        let sup = inner.clone();
        std::thread::Builder::new()
            .name("mountd-supervisor".into())
            .spawn(move || supervise(&sup))?;
        let pruned = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name("mountd-pruner".into())
            .spawn(move || prune_unmounted(&pruned))?;
        Ok(Holder { inner })
    }

    /// Takes back volumes a failed handover had taken out, and serves them again.
    pub fn restore(&self, held: Vec<Held>) {
        self.inner
            .volumes
            .lock()
            .extend(held.into_iter().map(|held| Kept::new(&self.inner, held)));
        self.resume();
    }

    fn resume(&self) {
        self.inner.slot.lock().paused = false;
        self.inner.slot_changed.notify_all();
    }

    /// Marks the holder as having handed everything over: it adds nothing any more.
    pub fn retire(&self) {
        self.inner.retired.store(true, Ordering::SeqCst);
    }

    /// Keeps `volume` (mounted connection `fuse`, never served) with a new takeover state,
    /// and returns once the server has answered its FUSE_INIT. On error nothing is kept.
    pub fn add(&self, volume: Volume, fuse: OwnedFd) -> Result<(), HolderError> {
        check_fuse_device(&volume, &fuse)?;
        let state = State::create(now_secs())?;
        let state = OwnedFd::from(state.file().try_clone()?);
        let held = Held {
            volume,
            fuse,
            state,
        };
        let id = held.volume.id.clone();
        let (tx, rx) = mpsc::channel();
        self.keep(held, Some(tx))?;
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

    /// Keeps a volume handed over by another holder (its state as that holder's server
    /// left it) and has it served, without waiting: its readers wait for it already, and a
    /// server that cannot serve it now (the store unreachable) is asked again, and again,
    /// until it does or the volume is removed.
    pub fn adopt(&self, held: Held) -> Result<(), HolderError> {
        self.keep(held, None)
    }

    /// Puts `held` in the list and sends it to the running server (`waiter`, if any, is
    /// told the server's answer).
    fn keep(
        &self,
        held: Held,
        waiter: Option<mpsc::Sender<Option<String>>>,
    ) -> Result<(), HolderError> {
        let id = held.volume.id.clone();
        let slot = self.inner.slot.lock();
        if slot.paused || self.inner.retired.load(Ordering::SeqCst) {
            return Err(HolderError::HandingOver(id));
        }
        let mut volumes = self.inner.volumes.lock();
        if volumes.iter().any(|k| k.held.volume.id == id) {
            return Err(HolderError::Exists(id));
        }
        // A new volume must leave the list answerable; a handed-over one is never refused
        // (the old holder has let it go).
        if waiter.is_some() && !room_for(&volumes, &held.volume) {
            return Err(HolderError::Full(id));
        }
        if let Some(tx) = waiter {
            self.inner.waiting.lock().insert(id.clone(), tx);
        }
        let kept = Kept::new(&self.inner, held);
        if let Some(s) = slot.running.as_ref() {
            // A failed send means the server is going (or made to go): the next one gets
            // every volume.
            let _ = send_serve(s, &kept);
        }
        volumes.push(kept);
        Ok(())
    }

    /// Forgets volume `id` (closing its descriptors); false if not held.
    pub fn remove(&self, id: &str) -> bool {
        remove(&self.inner, id)
    }

    /// The volumes held; [`HolderError::Busy`] while a handover has them out (an empty
    /// list then would tell the plugin that their live mounts are stale).
    pub fn list(&self) -> Result<Vec<Volume>, HolderError> {
        let slot = self.inner.slot.lock();
        if slot.paused || self.inner.retired.load(Ordering::SeqCst) {
            return Err(HolderError::Busy);
        }
        let volumes = self.inner.volumes.lock();
        drop(slot);
        Ok(volumes.iter().map(|k| k.held.volume.clone()).collect())
    }

    /// How many volumes are held now.
    pub fn count(&self) -> usize {
        self.inner.volumes.lock().len()
    }

    /// Every volume, taken out (for a new holder), after the server was stopped and
    /// reaped; `None` (and serving on) when it could not be reaped: two servers must
    /// never serve one connection. Until [`Holder::restore`], no server is started and no
    /// volume added; an add still waiting for its server is told to try again.
    pub fn hand_over(&self) -> Option<Vec<Held>> {
        self.inner.slot.lock().paused = true;
        self.kill_server_and_wait();
        if self.inner.slot.lock().running.is_some() {
            tracing::error!("mountd: the FUSE server did not end; refusing the handover");
            self.resume();
            return None;
        }
        for (id, tx) in self.inner.waiting.lock().iter() {
            let _ = tx.send(Some(format!(
                "mountd handed volume {id} over to a new mountd before a server answered it; \
                 publish it again"
            )));
        }
        let kept = std::mem::take(&mut *self.inner.volumes.lock());
        Some(kept.into_iter().map(|k| k.held).collect())
    }

    /// Ends the running server (SIGKILL) and lets the supervisor start the binary on disk
    /// again: an upgrade, or a test of a crash. Returns once the new server is running.
    pub fn restart_server(&self) {
        let before = self.inner.starts.load(Ordering::SeqCst);
        self.kill_server();
        let mut slot = self.inner.slot.lock();
        while slot.running.is_none() || self.inner.starts.load(Ordering::SeqCst) == before {
            self.inner
                .slot_changed
                .wait_for(&mut slot, Duration::from_millis(200));
            if slot.paused || self.inner.stopping.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// The pid of the running server, if one runs.
    pub fn server_pid(&self) -> Option<u32> {
        self.inner.slot.lock().running.as_ref().map(|s| s.pid)
    }

    /// Servers started so far.
    pub fn starts(&self) -> u64 {
        self.inner.starts.load(Ordering::SeqCst)
    }

    /// The servers so far, for the holder that takes the volumes over.
    pub fn history(&self) -> History {
        let end = self.inner.last_end.load(Ordering::SeqCst);
        History {
            servers_started: self.starts(),
            last_end_us: (end != 0).then_some(end),
        }
    }

    /// Stops the server for good (the volumes' descriptors stay held until dropped): its
    /// socket is shut, so it writes what it still has to write (last-use records) and
    /// exits; killed if it has not within 10 s.
    pub fn stop(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let mut slot = self.inner.slot.lock();
        self.inner.slot_changed.notify_all();
        if let Some(s) = slot.running.as_ref() {
            let _ = s.sock.shutdown(std::net::Shutdown::Both);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while slot.running.is_some() && Instant::now() < deadline {
            self.inner
                .slot_changed
                .wait_for(&mut slot, Duration::from_millis(100));
        }
        drop(slot);
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
        let mut slot = self.inner.slot.lock();
        let deadline = Instant::now() + Duration::from_secs(10);
        while slot.running.is_some() && Instant::now() < deadline {
            self.inner
                .slot_changed
                .wait_for(&mut slot, Duration::from_millis(100));
        }
    }
}

fn remove(inner: &Inner, id: &str) -> bool {
    remove_if(inner, id, |_| true)
}

/// Forgets volume `id` if `pred` holds for it. The slot is locked throughout (then the
/// list: the lock order), so no `Add` of the same id comes between the check, the removal
/// and the `Remove` to the server: it is the volume checked that goes, never a new one.
fn remove_if(inner: &Inner, id: &str, pred: impl Fn(&Kept) -> bool) -> bool {
    let slot = inner.slot.lock();
    let kept = {
        let mut volumes = inner.volumes.lock();
        let Some(i) = volumes
            .iter()
            .position(|k| k.held.volume.id == id && pred(k))
        else {
            return false;
        };
        volumes.remove(i)
    };
    inner.retries.lock().remove(id);
    if let Some(s) = slot.running.as_ref() {
        let _ = to_server(s, &Request::Remove { id: id.into() }, &[]);
    }
    drop(slot);
    drop(kept);
    true
}

/// Whether the kernel ended the FUSE connection `fd` (the last unmount of its mount, or
/// an abort): `/dev/fuse` then polls as an error. Read from the descriptor itself, not the
/// mount table, so it holds wherever the mount is (another mount namespace: mountd's
/// container does not see kubelet's directory) and whenever it went (before a handover).
fn connection_ended(fd: &OwnedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::empty())];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL)),
        Err(_) => false,
    }
}

/// Whether `volumes` and `new` are at most [`MAX_VOLUMES`] and their list fits one frame
/// (a volume's JSON can be several times its fields' bytes: escapes).
fn room_for(volumes: &[Kept], new: &Volume) -> bool {
    let size = |v: &Volume| serde_json::to_vec(v).map_or(usize::MAX / 2, |b| b.len() + 1);
    let listed: usize = volumes.iter().map(|k| size(&k.held.volume)).sum();
    volumes.len() < MAX_VOLUMES && listed + size(new) + 64 <= wire::MAX_FRAME
}

/// Whether `fd` is of `/dev/fuse` (the character device 10:229).
pub(crate) fn is_fuse_device(fd: &OwnedFd) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(meta) = fd
        .try_clone()
        .and_then(|f| std::fs::File::from(f).metadata())
    else {
        return false;
    };
    meta.file_type().is_char_device() && meta.rdev() == libc::makedev(10, 229)
}

/// Refuses a descriptor that is not of `/dev/fuse` (a pipe, a file, another device): a
/// server would wait on it for a FUSE_INIT that never comes.
fn check_fuse_device(v: &Volume, fd: &OwnedFd) -> Result<(), HolderError> {
    if is_fuse_device(fd) {
        Ok(())
    } else {
        Err(HolderError::NotFuse(v.id.clone()))
    }
}

/// How often the holder looks for volumes whose mount is gone.
const PRUNE_EVERY: Duration = Duration::from_secs(5);

/// Forgets the volumes whose FUSE connection the kernel ended (unmounted without a
/// `remove`: an admin's umount, a plugin that died between the two, a remove sent to the
/// old holder during a handover, a mount gone before a handover), until the holder goes.
fn prune_unmounted(inner: &std::sync::Weak<Inner>) {
    loop {
        std::thread::sleep(PRUNE_EVERY);
        let Some(inner) = inner.upgrade() else { return };
        let gone: Vec<String> = inner
            .volumes
            .lock()
            .iter()
            .filter(|k| connection_ended(&k.held.fuse))
            .map(|k| k.held.volume.id.clone())
            .collect();
        for id in gone {
            // Checked again under the locks: the id may name a new volume by now.
            if remove_if(&inner, &id, |k| connection_ended(&k.held.fuse)) {
                tracing::warn!("mountd: volume {id} is no longer mounted; forgetting it");
            }
        }
    }
}

fn send_serve(s: &Server, kept: &Kept) -> Result<(), wire::WireError> {
    let volume = Volume {
        instance: Some(kept.instance),
        ..kept.held.volume.clone()
    };
    to_server(
        s,
        &Request::Serve(volume),
        &[kept.held.fuse.as_raw_fd(), kept.held.state.as_raw_fd()],
    )
}

/// Sends `req` to the server. It blocks while the socket's buffer is full: a server reads
/// its socket once it has set up (opened the store), which may take long, and must not be
/// taken for a stuck one (docs/FORMAT.md, "Known gaps": a server that never reads holds
/// the holder up until it dies).
fn to_server(s: &Server, req: &Request, fds: &[i32]) -> Result<(), wire::WireError> {
    wire::send(&s.sock, req, fds)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Runs servers one after another for as long as the holder lives (none while paused).
fn supervise(inner: &Arc<Inner>) {
    let mut quick_failures = 0u32;
    loop {
        let started = Instant::now();
        let spawned = {
            let mut slot = inner.slot.lock();
            while slot.paused && !inner.stopping.load(Ordering::SeqCst) {
                inner.slot_changed.wait(&mut slot);
            }
            if inner.stopping.load(Ordering::SeqCst) {
                return;
            }
            spawn_server(inner, &mut slot)
        };
        let mut served = false;
        match spawned {
            Ok((mut child, sock, pid)) => {
                served = read_replies(inner, &sock, pid);
                let status = child.wait();
                inner
                    .last_end
                    .store(crate::metrics::end_stamp(), Ordering::SeqCst);
                let paused = {
                    let mut slot = inner.slot.lock();
                    slot.running = None;
                    slot.paused
                };
                inner.slot_changed.notify_all();
                if !inner.stopping.load(Ordering::SeqCst) && !paused {
                    tracing::warn!(
                        "mountd: the FUSE server ended ({status:?}); starting another, which takes the mounts over"
                    );
                }
            }
            Err(e) => tracing::error!("mountd: cannot start the FUSE server: {e}"),
        }
        // A server that keeps dying at once without serving anything (a broken binary, a
        // bad config, out of memory at its start) is started again after a growing pause,
        // up to 5 s, from its third such death on; one that served a volume, or ran a
        // while, or died so once or twice, at once: readers are waiting. (A server killed
        // again and again right after it took the volumes over is started each time.)
        if !served && started.elapsed() < Duration::from_secs(2) {
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
fn spawn_server(
    inner: &Arc<Inner>,
    slot: &mut Slot,
) -> Result<(Child, UnixStream, u32), HolderError> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(&inner.argv[0]);
    cmd.args(&inner.argv[1..])
        .env(SERVER_FD_ENV, theirs_fd.to_string());
    let last_end = inner.last_end.load(Ordering::SeqCst);
    // Every server after the first takes the volumes over.
    let takeovers = inner.starts.load(Ordering::SeqCst);
    let env = crate::metrics::server_env(takeovers, (last_end != 0).then_some(last_end));
    cmd.envs(env);
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
    let child = cmd.spawn()?;
    drop(theirs);
    let conn = Server {
        sock: ours.try_clone()?,
        pid: child.id(),
    };
    for kept in inner.volumes.lock().iter() {
        let _ = send_serve(&conn, kept);
    }
    let pid = conn.pid;
    slot.running = Some(conn);
    inner.starts.fetch_add(1, Ordering::SeqCst);
    inner.slot_changed.notify_all();
    Ok((child, ours, pid))
}

/// Passes the answers of server `pid` to those waiting for them, until it goes; a volume
/// it could not serve that nobody waits for is sent to it again later. Whether it served
/// any volume.
fn read_replies(inner: &Arc<Inner>, sock: &UnixStream, pid: u32) -> bool {
    let mut served = false;
    loop {
        match wire::recv::<Reply>(sock) {
            Ok((
                Reply::Served {
                    id,
                    error,
                    instance,
                },
                _,
            )) => {
                // An answer about a volume of this id that has gone since (removed, added
                // again) is nobody's: a waiting `Add` must not take it for its own.
                let waiter = {
                    let volumes = inner.volumes.lock();
                    let current = volumes.iter().any(|k| {
                        k.held.volume.id == id && instance.is_none_or(|i| k.instance == i)
                    });
                    if !current {
                        tracing::info!("mountd: volume {id}: an answer about an earlier keeping");
                        continue;
                    }
                    // Under the list's lock (then the waiters': the lock order), so that no
                    // Remove and Add of the id comes between the check and the waiter.
                    inner.waiting.lock().get(&id).cloned()
                };
                if let Some(e) = &error {
                    tracing::error!("mountd: volume {id}: {e}");
                }
                served |= error.is_none();
                match (waiter, error) {
                    (Some(tx), error) => {
                        let _ = tx.send(error);
                    }
                    (None, None) => {
                        inner.retries.lock().remove(&id);
                    }
                    (None, Some(_)) => retry_later(inner, id, instance, pid),
                }
            }
            Ok((other, _)) => {
                tracing::warn!("mountd: unexpected message from the server: {other:?}")
            }
            Err(_) => return served,
        }
    }
}

/// The longest wait before a volume that could not be served is sent again.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Sends volume `id` (the keeping `instance` of it) to server `pid` again after a pause that
/// doubles with each try (from 0.5 s to [`RETRY_MAX`]), if both are still there (a new
/// server is sent every volume).
fn retry_later(inner: &Arc<Inner>, id: String, instance: Option<u64>, pid: u32) {
    let tries = {
        let mut retries = inner.retries.lock();
        let n = retries.entry(id.clone()).or_insert(0);
        *n += 1;
        *n
    };
    let delay = (Duration::from_millis(500) * 2u32.pow(tries.min(7) - 1)).min(RETRY_MAX);
    tracing::warn!("mountd: volume {id}: serving it again in {delay:?} (try {tries})");
    let (inner, name) = (inner.clone(), id.clone());
    let spawned = std::thread::Builder::new()
        .name("mountd-retry".into())
        .spawn(move || {
            std::thread::sleep(delay);
            let slot = inner.slot.lock();
            let Some(s) = slot.running.as_ref().filter(|s| s.pid == pid) else {
                return;
            };
            // The same keeping of the volume only: a new one of the id has its own answer.
            let volumes = inner.volumes.lock();
            let same =
                |k: &&Kept| k.held.volume.id == id && instance.is_none_or(|i| k.instance == i);
            if let Some(k) = volumes.iter().find(same) {
                let _ = send_serve(s, k);
            }
        });
    if let Err(e) = spawned {
        tracing::error!("mountd: volume {name}: cannot schedule another try: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_answer_about_an_earlier_volume_of_the_id_is_not_a_waiting_adds() {
        // Seen in CI (csi::a_publish_caught_in_a_mountd_rollout_is_refused_and_published_again):
        // the server's failure to serve a volume handed over and then unmounted reached
        // the holder after the plugin had removed it and added it again, and the new add
        // took it for its own answer. Answers are matched by the keeping's instance now.
        let holder = Holder::start(vec!["sleep".into(), "1000".into()]).unwrap();
        let inner = holder.inner.clone();
        let devnull = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let volume = Volume::for_test("v", std::path::Path::new("/nonexistent"));
        let earlier = Kept::new(
            &inner,
            Held {
                volume: volume.clone(),
                fuse: devnull(),
                state: devnull(),
            },
        );
        let now = Kept::new(
            &inner,
            Held {
                volume,
                fuse: devnull(),
                state: devnull(),
            },
        );
        let (earlier, instance) = (earlier.instance, now.instance);
        assert_ne!(earlier, instance);
        inner.volumes.lock().push(now);
        let (tx, rx) = mpsc::channel();
        inner.waiting.lock().insert("v".into(), tx);
        let (ours, theirs) = UnixStream::pair().unwrap();
        let reader = inner.clone();
        std::thread::spawn(move || read_replies(&reader, &ours, 0));
        for (error, instance) in [(Some("stale".to_string()), earlier), (None, instance)] {
            let r = Reply::Served {
                id: "v".into(),
                error,
                instance: Some(instance),
            };
            wire::send(&theirs, &r, &[]).unwrap();
        }
        let answer = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(answer, None, "the earlier volume's answer was taken");
    }
}
