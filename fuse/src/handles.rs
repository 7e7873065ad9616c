//! How open files are served. Each inode is opened one way while any handle of it is open,
//! as the kernel requires (it refuses a passthrough open of an inode open in the cached mode,
//! and the reverse):
//! * **passthrough**: the node's file cache (`read::file_cache::FileCache`) has the file whole
//!   and its bytes checked (by this process, under the stamp the file still has; the check
//!   runs outside the lock on open inodes, and a concurrent open of the same entry waits for
//!   it), and the kernel accepts it as a backing file: the kernel reads it itself, no
//!   request reaches us. A later open while a handle is open shares the backing file only
//!   once it is checked again for that open (`FileCache::reuse_held`: its stamp, else its
//!   bytes; a damaged one is written again from the store), else fails (EIO);
//! * **whole file**: the same, where passthrough is unavailable (older kernel, no
//!   `CAP_SYS_ADMIN`, or `--no-passthrough`): reads are `pread`s of that file (a later open
//!   checks it again the same way, and streams where it is still bad);
//! * **stream**: chunks through the decoded-chunk cache with read-ahead; when the last
//!   handle of such a file is released, the file cache is asked to make it whole in the
//!   background, for the next open.
//!
//! [`OpenFiles`] owns the handle table, each open inode's mode and each handle's hold on
//! its revision; the core (`crate::fs`) calls it. No kernel types here: the kernel's
//! backing-file id is a type parameter `B`, registered through a function the adapter
//! gives to an open.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use read::cache::ChunkCache;
use read::file_cache::{FileCache, HeldFile};
use read::source::{FileSource, ReadPlan, Reload};
use repo::manifest::{FileEntry, Manifest};

use crate::errno::FsError;
use crate::takeover::OpenMode;

/// The kernel's id of a backing file, as the takeover state records it.
pub trait Backing {
    fn raw_id(&self) -> u32;
}

impl Backing for () {
    fn raw_id(&self) -> u32 {
        0
    }
}

/// How the open handles of one inode read it; `B` is the kernel's backing-file id.
pub(crate) enum Mode<B> {
    /// Through the chunk cache.
    Stream,
    /// From a whole file of the node's file cache, by `pread`.
    Whole(Arc<File>),
    /// By the kernel from that file (`id` registered with it); the file answers any read
    /// that still reaches us.
    Passthrough { id: Arc<B>, file: Arc<File> },
    /// By the kernel from a backing file an earlier server of the connection registered
    /// (`id`, adopted at takeover): the next open checks the node's file again and shares it.
    Adopted(Arc<B>),
}

impl<B> Clone for Mode<B> {
    fn clone(&self) -> Self {
        match self {
            Mode::Stream => Mode::Stream,
            Mode::Whole(file) => Mode::Whole(file.clone()),
            Mode::Passthrough { id, file } => Mode::Passthrough {
                id: id.clone(),
                file: file.clone(),
            },
            Mode::Adopted(id) => Mode::Adopted(id.clone()),
        }
    }
}

/// What an open found in the node's file cache before choosing its mode
/// ([`OpenFiles::prepare`]).
pub(crate) enum Prepared {
    /// No handle of the inode was open: the node's whole file, checked (None: none).
    Fresh(Option<File>),
    /// A handle was open on this whole file: what checking it again found.
    Held { file: Arc<File>, found: HeldFile },
}

impl Prepared {
    /// Whether pages the kernel kept for the inode may stay: not when the held file was
    /// found damaged (the pages may hold what was read from it before).
    pub(crate) fn keeps_cache(&self) -> bool {
        !matches!(
            self,
            Prepared::Held {
                found: HeldFile::Repaired | HeldFile::Bad,
                ..
            }
        )
    }

    /// The checked whole file for an inode that has no open handle now (a held file is
    /// not: its inode was closed since, and the open streams).
    pub(crate) fn fresh(self) -> Option<File> {
        match self {
            Prepared::Fresh(file) => file,
            Prepared::Held { .. } => None,
        }
    }
}

/// One open file handle.
pub(crate) enum Handle {
    /// Chunks through the cache; on release, the file is asked for in the file cache.
    Stream(Arc<FileSource>),
    /// A whole file on the node.
    Whole(Arc<File>),
}

/// The open handles of an inode and the way they read it.
pub(crate) struct InodeOpen<B> {
    pub(crate) count: usize,
    pub(crate) mode: Mode<B>,
}

/// The mount's open files: how they are read, and their handles.
pub(crate) struct OpenFiles<B> {
    pub(crate) cache: Arc<ChunkCache>,
    pub(crate) files: Option<Arc<FileCache>>,
    pub(crate) handles: Mutex<HashMap<u64, Arc<Handle>>>,
    pub(crate) inodes: Mutex<HashMap<u64, InodeOpen<B>>>,
    pub(crate) next_fh: AtomicU64,
    /// How streamed files are read ahead (sequentially; safetensors along the loader's walk).
    pub(crate) plan: ReadPlan,
    /// Asked for (`--no-passthrough` clears it), then whether the kernel offers it; cleared
    /// when the kernel refuses a backing file (said once in the log).
    pub(crate) passthrough: AtomicBool,
    /// Each open file handle holds its revision in use (its last-use record kept fresh
    /// while it is open: `repo::usage::hold`).
    pub(crate) uses: Mutex<HashMap<u64, repo::usage::Hold>>,
    /// Where each inode's kernel mode and open count are recorded for a server taking the
    /// connection over (`crate::takeover`), and this server's generation: the top bits of
    /// its file handles ([`FH_GENERATION_SHIFT`]), so that no handle of a predecessor
    /// the kernel still holds is ever handed out again.
    pub(crate) state: Option<Arc<crate::takeover::State>>,
    pub(crate) generation: u64,
}

/// File handles are `generation << FH_GENERATION_SHIFT | n`.
pub(crate) const FH_GENERATION_SHIFT: u32 = 40;

impl<B: Backing> OpenFiles<B> {
    /// No open files; reads go through `cache`, safetensors files are followed in name
    /// order, and there is no file cache (nor passthrough).
    pub(crate) fn new(cache: Arc<ChunkCache>) -> OpenFiles<B> {
        OpenFiles {
            cache,
            files: None,
            handles: Mutex::new(HashMap::new()),
            inodes: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            plan: ReadPlan::default(),
            passthrough: AtomicBool::new(false),
            uses: Mutex::new(HashMap::new()),
            state: None,
            generation: 0,
        }
    }

    /// Whether `fh` was handed out by an earlier server of the connection.
    pub(crate) fn is_predecessors(&self, fh: u64) -> bool {
        fh >> FH_GENERATION_SHIFT != self.generation
    }

    /// File `i` of `manifest` read through the chunk cache with the mount's read plan,
    /// manifests read again through `reload` after a pack was gone.
    pub(crate) fn source(
        &self,
        reload: Arc<dyn Reload>,
        manifest: Arc<Manifest>,
        i: usize,
    ) -> FileSource {
        FileSource::new(self.cache.clone(), self.plan, reload, manifest, i)
    }

    /// What an open of inode `ino` (file `f` of `manifest`, in `store`) may read from the
    /// node's file cache, found before the lock that every open takes (a check can read the
    /// whole file): with no handle of the inode open, the entry checked; with one open on a
    /// whole file, that held file checked again (or written again from the store).
    pub(crate) fn prepare(
        &self,
        ino: u64,
        store: &repo::Store,
        manifest: &Manifest,
        f: &FileEntry,
    ) -> Prepared {
        let Some(files) = self.files.as_ref() else {
            return Prepared::Fresh(None);
        };
        let held = match self.inodes.lock().get(&ino).map(|open| &open.mode) {
            None | Some(Mode::Adopted(_)) => None,
            Some(Mode::Stream) => return Prepared::Fresh(None),
            Some(Mode::Whole(file) | Mode::Passthrough { file, .. }) => Some(file.clone()),
        };
        match held {
            None => Prepared::Fresh(files.open_file(f)),
            Some(file) => {
                let found = files.reuse_held(store, manifest, f, &file);
                Prepared::Held { file, found }
            }
        }
    }

    /// The mode of an open of an inode whose handles are open in `mode`, given what
    /// [`OpenFiles::prepare`] found. A held whole file found bad: this handle streams
    /// (checked chunks from the store), or, in passthrough, where the kernel takes no other
    /// way while the inode has a backing file, the open fails (EIO). A mode set by an open
    /// that began after `prepared` was taken is shared: its check is as recent as ours.
    pub(crate) fn shared_mode(mode: &Mode<B>, prepared: &Prepared) -> Result<Mode<B>, FsError> {
        let held = match mode {
            Mode::Stream => return Ok(Mode::Stream),
            Mode::Adopted(id) => {
                // The kernel reads the backing file it has; this open shares it once the
                // node's file (the same checked content) is there, else fails as a held
                // file found bad does.
                // Without the node's file (evicted since), a cached open: the kernel
                // refuses it (EIO) only if it really still holds the inode in passthrough
                // (a count left too high by a server killed mid-open is not).
                return match prepared {
                    Prepared::Fresh(Some(file)) => Ok(Mode::Passthrough {
                        id: id.clone(),
                        file: Arc::new(file.try_clone().map_err(|_| FsError::Io)?),
                    }),
                    _ => Ok(Mode::Stream),
                };
            }
            Mode::Whole(file) | Mode::Passthrough { file, .. } => file,
        };
        match (prepared, mode) {
            (
                Prepared::Held {
                    file,
                    found: HeldFile::Bad,
                },
                Mode::Whole(_),
            ) if Arc::ptr_eq(file, held) => Ok(Mode::Stream),
            (
                Prepared::Held {
                    file,
                    found: HeldFile::Bad,
                },
                _,
            ) if Arc::ptr_eq(file, held) => Err(FsError::Io),
            _ => Ok(mode.clone()),
        }
    }

    /// How to open an inode that has no open handle: from `whole`, the node's whole file
    /// (handed to the kernel by `register` when it takes it), else by streaming.
    pub(crate) fn choose_mode(
        &self,
        whole: Option<File>,
        register: impl FnOnce(&File) -> std::io::Result<B>,
    ) -> Mode<B> {
        let Some(file) = whole else {
            return Mode::Stream;
        };
        let file = Arc::new(file);
        if self.passthrough.load(Ordering::Relaxed) {
            match register(&file) {
                Ok(id) => {
                    return Mode::Passthrough {
                        id: Arc::new(id),
                        file,
                    }
                }
                Err(e) => {
                    if self.passthrough.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            "the kernel refused a passthrough file ({e}; it needs \
                             CAP_SYS_ADMIN): whole files on the node are read through the mount"
                        );
                    }
                }
            }
        }
        Mode::Whole(file)
    }

    /// The handle table.
    pub(crate) fn lock_handles(&self) -> MutexGuard<'_, HashMap<u64, Arc<Handle>>> {
        self.handles.lock()
    }

    /// One handle of `ino` fewer; the inode's mode (and its backing file) goes with the last.
    pub(crate) fn forget_open(&self, ino: u64) {
        let mut inodes = self.inodes.lock();
        if let Some(open) = inodes.get_mut(&ino) {
            open.count = open.count.saturating_sub(1);
            let (count, mode) = (open.count, open.mode.clone());
            if count == 0 {
                // Off the table before the backing id closes (when `mode` drops): a
                // successor never adopts a closed id.
                self.record(ino, &mode, 0);
                inodes.remove(&ino);
            } else {
                self.record(ino, &mode, count);
            }
        }
    }

    /// Writes inode `ino`'s kernel mode and open count to the takeover state, if any.
    pub(crate) fn record(&self, ino: u64, mode: &Mode<B>, count: usize) -> bool {
        let Some(state) = &self.state else {
            return true;
        };
        let kernel = match mode {
            Mode::Passthrough { id, .. } | Mode::Adopted(id) => OpenMode::Passthrough(id.raw_id()),
            Mode::Stream | Mode::Whole(_) => OpenMode::Cached,
        };
        match state.set_open(ino, kernel, u32::try_from(count).unwrap_or(u32::MAX)) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!("takeover state: inode {ino}: {e}");
                false
            }
        }
    }

    /// Runs `read` (a read the mount decodes from the store), noting it for the node file
    /// cache when it starts and when it ends: the cache's fills wait until such reads stop,
    /// and a cold read can outlast their quiet period.
    pub(crate) fn noting_read<T>(&self, read: impl FnOnce() -> T) -> T {
        let note = || {
            if let Some(files) = &self.files {
                files.note_read();
            }
        };
        note();
        let result = read();
        note();
        result
    }

    /// Counts an open in `mode` in the mount's metrics.
    pub(crate) fn count_open(mode: &Mode<B>) {
        let m = &crate::metrics::METRICS;
        match mode {
            Mode::Passthrough { .. } | Mode::Adopted(_) => m.passthrough_opens.inc(),
            Mode::Whole(_) => m.whole_file_opens.inc(),
            Mode::Stream => return,
        };
    }
}

/// Up to `size` bytes at `offset` of a whole file on the node.
pub(crate) fn read_whole(file: &File, offset: u64, size: usize) -> Result<Vec<u8>, FsError> {
    let mut buf = vec![0u8; size];
    let mut got = 0;
    while got < size {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                crate::metrics::METRICS.read_errors.inc();
                tracing::error!("mount: reading a whole file of the node's file cache: {e}");
                return Err(FsError::Io);
            }
        }
    }
    buf.truncate(got);
    Ok(buf)
}
