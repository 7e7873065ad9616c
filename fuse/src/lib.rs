//! The FUSE adapter of modelcas: presents the store's revisions as plain read-only
//! directories. It is thin on purpose: [`namespace`] maps inodes to repos, refs, commits and
//! paths, [`fs`] is the file system without the kernel (namespace, open files and their
//! modes, reads, listings, all plain values: tested by a reference model in
//! `tests/model.rs`), [`adapter`] only translates kernel requests into its calls (and counts
//! them in the mount's [`metrics`]), and the
//! read logic (offset → chunk, read-ahead, the decoded-chunk cache, the node's
//! whole-file cache) lives in the read crate (`read::readahead`, `read::cache`,
//! `read::file_cache`).

pub mod adapter;
pub mod cpu_quota;
mod errno;
pub mod fs;
mod handles;
pub mod metrics;
pub mod mounts;
pub mod namespace;
pub mod takeover;

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use format::{CommitId, RepoId};
use fuser::{BackgroundSession, BackingDevice, Config, MountOption, Session, SessionACL, Version};
use read::cache::ChunkCache;
use read::file_cache::FileCache;
use read::readahead::ReadaheadConfig;
use read::tensor_plan::TensorOrder;
use repo::Store;

use crate::adapter::ModelFs;
use crate::namespace::Namespace;
use crate::takeover::State;

/// Why a mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mountpoint {0} does not exist")]
    NoMountpoint(PathBuf),
    #[error("mountpoint {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("mountpoint {0} is busy: something is already mounted there")]
    Busy(PathBuf),
    #[error("/dev/fuse is missing: load the fuse module, or give the container the device (--device /dev/fuse)")]
    NoFuseDevice,
    #[error("mount {}: {source}", path.display())]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] repo::StoreError),
    #[error("FUSE connection: {0}")]
    Device(std::io::Error),
    #[error(transparent)]
    State(#[from] takeover::StateError),
}

/// [`MountOptions::spin_wait`] by default: 50 µs, a little more than the gap between one
/// small file's requests and the next file's open in a walk (docs/BENCHMARKS.md, issue 40).
pub const DEFAULT_SPIN_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// The longest [`MountOptions::spin_wait`] allowed: 1 ms (longer looks only spend a CPU
/// after each request; a health probe every half second would keep one busy).
pub const MAX_SPIN_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// [`MountOptions::spin_wait`] when none is given: [`DEFAULT_SPIN_WAIT`], or zero when this
/// process runs under a CPU quota ([`cpu_quota`]), whose time looking would spend.
pub fn default_spin_wait() -> std::time::Duration {
    if cpu_quota::under_cpu_quota() {
        std::time::Duration::ZERO
    } else {
        DEFAULT_SPIN_WAIT
    }
}

/// What to show and how.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// `Some((repo, commit))`: that revision at the root; `None`: every repository.
    pub single: Option<(RepoId, CommitId)>,
    /// Let other users (pods running as another uid) read the mount.
    pub allow_other: bool,
    /// FUSE worker threads.
    pub threads: usize,
    /// How long a worker that answered a request looks for the next before it sleeps (one
    /// worker at a time, yielding the CPU to any runnable thread; zero: never): a sleeping
    /// worker's wake-up, on another CPU, is most of what a small file's open and read cost.
    pub spin_wait: std::time::Duration,
    /// Bytes of decoded chunks kept in memory.
    pub cache_bytes: usize,
    /// Threads fetching and decoding chunks.
    pub fetch_threads: usize,
    /// The order safetensors loaders are followed in (`Off`: sequential read-ahead only).
    pub tensor_order: TensorOrder,
    /// Read-ahead windows of streamed files.
    pub readahead: ReadaheadConfig,
    /// Whole, verified files on the node: served from there, and filled with files read.
    pub file_cache: Option<Arc<FileCache>>,
    /// Hand whole files to the kernel (FUSE passthrough) where it allows.
    pub passthrough: bool,
    /// Also called with a revision's manifest the first time it is entered (after its
    /// small files are warmed), on the FUSE thread that entered it: it must not block.
    pub on_first_entry: Option<FirstEntry>,
}

/// A hook of [`MountOptions::on_first_entry`].
#[derive(Clone)]
pub struct FirstEntry(pub Arc<FirstEntryFn>);

/// What a [`FirstEntry`] calls: with the manifest of the revision entered.
pub type FirstEntryFn = dyn Fn(&Arc<repo::manifest::Manifest>) + Send + Sync;

impl std::fmt::Debug for FirstEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstEntry(..)")
    }
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            single: None,
            allow_other: false,
            threads: 8,
            spin_wait: default_spin_wait(),
            cache_bytes: 64 << 20,
            fetch_threads: 4,
            tensor_order: TensorOrder::Name,
            readahead: ReadaheadConfig::default(),
            file_cache: None,
            passthrough: true,
            on_first_entry: None,
        }
    }
}

/// A live mount; unmounted when dropped or by [`Mounted::unmount`].
pub struct Mounted {
    session: BackgroundSession,
    path: PathBuf,
}

impl Mounted {
    /// Whether the session ended (unmounted from outside).
    pub fn is_finished(&self) -> bool {
        self.session.guard.is_finished()
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Unmounts and waits for the worker threads.
    pub fn unmount(self) -> std::io::Result<()> {
        self.session.umount_and_join()
    }
}

fn is_mountpoint(path: &Path) -> std::io::Result<bool> {
    let me = std::fs::metadata(path)?;
    let parent = std::fs::metadata(path.join(".."))?;
    Ok(me.dev() != parent.dev() || me.ino() == parent.ino())
}

/// Checks the mountpoint and `/dev/fuse`, then mounts `store` at `path` in the background.
pub fn mount(store: Store, path: &Path, opts: &MountOptions) -> Result<Mounted, MountError> {
    check_mountpoint(path)?;
    let cache = Arc::new(ChunkCache::new(
        store.clone(),
        opts.cache_bytes,
        opts.fetch_threads,
    )?);
    let ns = namespace(store, opts, &cache)?;
    let mut config = Config::default();
    config.mount_options = mount_options();
    config.acl = acl(opts);
    config.n_threads = Some(opts.threads.max(1));
    config.spin_wait = opts.spin_wait;
    config.clone_fd = true;
    let fs = model_fs(ns, cache, opts);
    repo::usage::start_background_writer();
    let session = fuser::spawn_mount(fs, path, &config).map_err(|source| MountError::Mount {
        path: path.to_path_buf(),
        source,
    })?;
    raise_readahead(path);
    Ok(Mounted {
        session,
        path: path.to_path_buf(),
    })
}

fn check_mountpoint(path: &Path) -> Result<(), MountError> {
    let meta = std::fs::metadata(path).map_err(|_| MountError::NoMountpoint(path.to_path_buf()))?;
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(path.to_path_buf()));
    }
    if is_mountpoint(path).unwrap_or(false) {
        return Err(MountError::Busy(path.to_path_buf()));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(MountError::NoFuseDevice);
    }
    Ok(())
}

fn mount_options() -> Vec<MountOption> {
    vec![
        MountOption::RO,
        MountOption::FSName("modelcas".into()),
        MountOption::Subtype("modelcas".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::DefaultPermissions,
    ]
}

fn acl(opts: &MountOptions) -> SessionACL {
    if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    }
}

/// What the mount shows (one revision or every repository), failing now when that one
/// revision is not there; with the small files a loader reads first fetched when a
/// revision is first entered.
fn namespace(
    store: Store,
    opts: &MountOptions,
    cache: &Arc<ChunkCache>,
) -> Result<Namespace, MountError> {
    let ns = match &opts.single {
        Some((repo, commit)) => {
            store.manifest(repo, commit)?; // fail now, not on the first lookup
            Namespace::single(store, repo.clone(), *commit)
        }
        None => Namespace::full(store),
    };
    let warm = cache.clone();
    let also = opts.on_first_entry.clone();
    Ok(ns.on_first_entry(Box::new(move |tree| {
        read::warm::warm_small_files(&warm, &tree.manifest);
        if let Some(FirstEntry(hook)) = &also {
            hook(&tree.manifest);
        }
    })))
}

fn model_fs(ns: Namespace, cache: Arc<ChunkCache>, opts: &MountOptions) -> ModelFs {
    let mut fs = ModelFs::new(ns, cache)
        .with_tensor_order(opts.tensor_order)
        .with_readahead(opts.readahead);
    if let Some(files) = &opts.file_cache {
        fs = fs.with_file_cache(files.clone(), opts.passthrough);
    }
    fs
}

/// The decoded-chunk cache of `opts`, for [`serve_connection`]: one server shares one
/// between all the connections it serves.
pub fn chunk_cache(store: &Store, opts: &MountOptions) -> Result<Arc<ChunkCache>, MountError> {
    Ok(Arc::new(ChunkCache::new(
        store.clone(),
        opts.cache_bytes,
        opts.fetch_threads,
    )?))
}

/// Whether something is mounted at `path` now, from `/proc/self/mountinfo` (asks the
/// mount nothing: a FUSE mount whose server is being replaced would make a `stat` wait).
pub fn is_mounted(path: &Path) -> bool {
    match mounts::table() {
        Some(table) => {
            let want = mounts::kernel_spelling(path);
            table.iter().any(|m| m.path == want)
        }
        None => is_mountpoint(path).unwrap_or(false),
    }
}

/// Mounts an empty FUSE connection at `path` (read-only, as every modelcas mount) and
/// returns its /dev/fuse descriptor: nothing serves it yet, and nothing here unmounts it.
/// The caller hands it (with a [`takeover::State`]) to a holder process, and the holder to
/// [`serve_connection`]. Until a server answers FUSE_INIT, anything that touches the
/// mountpoint waits.
pub fn mount_connection(path: &Path, opts: &MountOptions) -> Result<OwnedFd, MountError> {
    check_mountpoint(path)?;
    fuser::mount_device(path, &mount_options(), acl(opts)).map_err(|source| MountError::Mount {
        path: path.to_path_buf(),
        source,
    })
}

/// Serves the mounted connection `fuse` in the background, with takeover state `state`:
/// a connection never served before is initialised (FUSE_INIT) before this returns; one an
/// earlier server served (the state says so) is taken over: its inode numbers, open
/// inodes and passthrough backing files, and (Linux 6.9+) the requests that server had
/// read and not answered, which the kernel sends again. Worker threads read the one
/// descriptor (no cloned descriptors: a clone dies with its server, and the requests read
/// through it would fail instead of being sent again).
pub fn serve_connection(
    store: Store,
    cache: Arc<ChunkCache>,
    fuse: OwnedFd,
    state: Arc<State>,
    opts: &MountOptions,
) -> Result<BackgroundSession, MountError> {
    let header = state.header();
    let resumed = header.initialized();
    let ns = namespace(store, opts, &cache)?.with_journal(state.clone());
    if resumed {
        let n = ns.restore(&state)?;
        tracing::info!(
            "taking over a live mount: {n} inodes, generation {}",
            header.generation + 1
        );
    }
    let device = BackingDevice::new(fuse.try_clone().map_err(MountError::Device)?);
    let fs = model_fs(ns, cache, opts).with_takeover(state.clone(), device)?;
    let mut config = Config::default();
    config.acl = acl(opts);
    config.n_threads = Some(opts.threads.max(1));
    config.spin_wait = opts.spin_wait;
    config.clone_fd = false;
    repo::usage::start_background_writer();
    let resend = fuse.try_clone().map_err(MountError::Device)?;
    let session = if resumed {
        let v = Version(header.proto_major, header.proto_minor);
        Session::resume(fs, fuse, config.acl, config, v)
    } else {
        Session::from_fd(fs, fuse, config.acl, config.clone()).map_err(MountError::Device)?
    };
    let session = session.spawn().map_err(MountError::Device)?;
    if resumed && header.flags & takeover::HAS_RESEND != 0 {
        if let Err(e) = takeover::notify_resend(&std::fs::File::from(resend)) {
            tracing::warn!(
                "FUSE_NOTIFY_RESEND failed ({e}): requests the last server had read wait"
            );
        }
    }
    Ok(session)
}

/// The kernel gives a FUSE mount 128 KiB of read-ahead; model files are read in large
/// sequential runs, so raise it to [`adapter::MAX_READAHEAD`] (needs root; best effort).
pub fn raise_readahead(path: &Path) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let _ = std::fs::write(knob, format!("{}", adapter::MAX_READAHEAD / 1024));
}
