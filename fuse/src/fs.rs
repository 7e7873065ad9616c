//! The mount's file system without the kernel: [`MountCore`] owns the namespace
//! (`crate::namespace`), the open files and their modes (`crate::handles`), reads and
//! listings, and takes and returns plain values (inode numbers, offsets, sizes, [`Attr`],
//! [`DirEntry`], [`Opened`], [`FsError`]). The fuser adapter (`crate::adapter`) only turns
//! kernel requests into these calls and their answers into replies, so everything here is
//! tested without `/dev/fuse` (`tests/model.rs`).
//!
//! The errors answered, besides `EIO` for a store that fails (`crate::errno`):
//! * lookup: `ENOENT` for a name that is not there (a removed revision, a ref deleted, a
//!   path absent from the commit) or a parent inode never handed out; `ESTALE` in a
//!   directory inode of a revision removed or replaced since it was handed out;
//! * getattr: `ENOENT` for an inode never handed out;
//! * listings: `ENOTDIR` for a file or an unknown inode, `ESTALE` for a directory inode no
//!   longer current;
//! * open: `EROFS` for write or truncate flags, `EISDIR` for what is not a file, `ESTALE`
//!   for a file inode no longer current (its revision removed, or ingested again with
//!   other content at that path);
//! * read: `EBADF` for a handle not open.
//!
//! On `ESTALE` the kernel walks the path again, asking each name anew: a commit removed
//! and ingested again with other files shows them (new inodes: see `crate::namespace`),
//! never the kernel's cached pages of the old ones. An inode once handed out keeps its
//! attributes, and an open handle reads the bytes it opened while the store or the chunk
//! cache still has them, else `EIO` (never other bytes).
//!
//! The kernel's part of an open in passthrough (registering the backing file) is a
//! function given to [`MountCore::open`]: it runs under the lock that settles the inode's
//! mode, as the kernel requires one mode per open inode.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use read::cache::ChunkCache;
use read::file_cache::FileCache;
use read::readahead::ReadaheadConfig;
use read::tensor_plan::TensorOrder;

use crate::errno::eio;
pub use crate::errno::FsError;
pub use crate::handles::Backing;
use crate::handles::{read_whole, Handle, InodeOpen, Mode, OpenFiles, FH_GENERATION_SHIFT};
pub use crate::namespace::{Attr, Kind};
use crate::namespace::{Namespace, Node};
use crate::takeover::{OpenMode, State};

/// Timeout for entries and attributes that never change: a file inode's attributes (its
/// content is part of it), the entries of a revision's subdirectories (a directory of other
/// content is another inode).
pub const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Timeout for what can change: listings of repos and refs, the entries at the top of a
/// revision (a ref moves; a commit may be removed and ingested again with other files).
pub const MUTABLE_TTL: Duration = Duration::from_secs(1);

/// The timeout of attributes `a`: long for what never changes (inside a commit).
pub fn attr_ttl(a: &Attr) -> Duration {
    if a.immutable {
        IMMUTABLE_TTL
    } else {
        MUTABLE_TTL
    }
}

/// What a request answers, or why not.
pub type FsResult<T> = Result<T, FsError>;

/// A name found by a lookup: its attributes and the kernel's timeouts for them and for
/// the name itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub attr: Attr,
    pub attr_ttl: Duration,
    pub entry_ttl: Duration,
}

/// One entry of a listing: `next` is the offset of the entry after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    pub next: u64,
    pub name: String,
    pub kind: Kind,
}

/// How an open file is read, for the kernel's reply.
#[derive(Debug)]
pub enum OpenHow<B> {
    /// By the kernel from the backing file registered as `B`.
    Passthrough(Arc<B>),
    /// By us from a whole file on the node (the kernel may keep its pages).
    Whole,
    /// By us through the chunk cache (the kernel may keep its pages).
    Stream,
}

/// An open file: its handle and how it is read.
#[derive(Debug)]
pub struct Opened<B> {
    pub fh: u64,
    pub how: OpenHow<B>,
    /// Whether the kernel may keep the pages it has of the inode (`FOPEN_KEEP_CACHE`):
    /// not when this open found the file held for another handle damaged, since pages read
    /// from it before may be wrong.
    pub keep_cache: bool,
}

/// The mount's file system; `B` is the kernel's backing-file id (`fuser::BackingId`).
pub struct MountCore<B> {
    ns: Arc<Namespace>,
    open: OpenFiles<B>,
}

impl<B: Backing> MountCore<B> {
    /// A file system over `ns`, reading through `cache`.
    pub fn new(ns: Namespace, cache: Arc<ChunkCache>) -> MountCore<B> {
        MountCore {
            ns: Arc::new(ns),
            open: OpenFiles::new(cache),
        }
    }

    /// Serves files the node has whole from `files` (handed to the kernel when
    /// `passthrough` and the kernel allow), and fills it with the files read.
    pub fn with_file_cache(mut self, files: Arc<FileCache>, passthrough: bool) -> Self {
        self.open.files = Some(files);
        self.open.passthrough = AtomicBool::new(passthrough);
        self
    }

    /// Streams files with the read-ahead of `config`.
    pub fn with_readahead(mut self, config: ReadaheadConfig) -> Self {
        self.open.plan.readahead = config;
        self
    }

    /// Follows safetensors loaders in `order`.
    pub fn with_tensor_order(mut self, order: TensorOrder) -> Self {
        self.open.plan.tensor_order = order;
        self
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// Whether opens may hand files to the kernel (asked for, and not refused yet).
    pub fn passthrough(&self) -> bool {
        self.open.passthrough.load(Ordering::Relaxed)
    }

    /// Sets whether the kernel offers passthrough (from its init).
    pub fn set_passthrough(&self, offered: bool) {
        self.open.passthrough.store(offered, Ordering::Relaxed);
    }

    /// The timeout of the names found in directory `ino`.
    fn entry_ttl(&self, ino: u64) -> Duration {
        if self.ns.children_may_change(ino) {
            MUTABLE_TTL
        } else {
            IMMUTABLE_TTL
        }
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &str) -> FsResult<Entry> {
        let found = self
            .ns
            .lookup(parent, name)
            .and_then(|i| i.map(|i| self.ns.attr(i)).transpose());
        match found {
            Ok(Some(Some(attr))) => Ok(Entry {
                attr,
                attr_ttl: attr_ttl(&attr),
                entry_ttl: self.entry_ttl(parent),
            }),
            Ok(_) => Err(self.missing(parent, FsError::NotFound)),
            Err(e) => Err(eio(e)),
        }
    }

    /// `otherwise` for an inode that answered nothing, `ESTALE` if it is no longer current.
    fn missing(&self, ino: u64, otherwise: FsError) -> FsError {
        match self.ns.current(ino) {
            Ok(true) => otherwise,
            Ok(false) if self.ns.node(ino).is_some() => FsError::Stale,
            Ok(false) => otherwise,
            Err(e) => eio(e),
        }
    }

    /// The attributes of inode `ino`.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        match self.ns.attr(ino) {
            Ok(Some(a)) => Ok(a),
            Ok(None) => Err(FsError::NotFound),
            Err(e) => Err(eio(e)),
        }
    }

    /// Whether directory `ino` can be opened (for reading: `flags` without write access).
    pub fn opendir(&self, ino: u64, flags: i32) -> FsResult<()> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(FsError::ReadOnly);
        }
        match self.getattr(ino)? {
            a if a.kind == Kind::Dir => Ok(()),
            _ => Err(FsError::NotDir),
        }
    }

    /// Lists directory `ino`: its entries, "." and ".." first, from `offset` on, each
    /// passed to `add` until it says the reply is full.
    pub fn readdir(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(DirEntry) -> FsResult<bool>,
    ) -> FsResult<()> {
        let entries = match self.ns.list(ino) {
            Ok(Some(e)) => e,
            Ok(None) => return Err(self.missing(ino, FsError::NotDir)),
            Err(e) => return Err(eio(e)),
        };
        let mut all = vec![(".".into(), ino, Kind::Dir), ("..".into(), ino, Kind::Dir)];
        all.extend(entries);
        for (i, (name, child, kind)) in all.into_iter().enumerate().skip(offset as usize) {
            let next = (i + 1) as u64;
            if add(DirEntry {
                ino: child,
                next,
                name,
                kind,
            })? {
                break;
            }
        }
        Ok(())
    }

    /// The whole listing of directory `ino` from `offset` (what [`MountCore::readdir`]
    /// gives to a reply that never fills).
    pub fn listing(&self, ino: u64, offset: u64) -> FsResult<Vec<DirEntry>> {
        let mut out = Vec::new();
        self.readdir(ino, offset, |e| {
            out.push(e);
            Ok(false)
        })?;
        Ok(out)
    }

    /// A listing with each entry's attributes and their timeout, so that the kernel asks
    /// no LOOKUP for the names it lists. The revisions of a repository are listed with
    /// stand-ins that expire at once (their attributes need each one's manifest), as are
    /// "." and ".." (the kernel links no dentry for them); an entry whose attributes are
    /// gone meanwhile is left out.
    pub fn readdirplus(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(DirEntry, Attr, Duration) -> bool,
    ) -> FsResult<()> {
        let views = matches!(self.ns.node(ino), Some(Node::Repo(_)));
        if offset == 0 && !views {
            self.warm_dir(ino);
        }
        let entry_ttl = self.entry_ttl(ino);
        self.readdir(ino, offset, |e| {
            let (attr, ttl) = if views || e.name == "." || e.name == ".." {
                (stand_in(e.ino, e.kind), Duration::ZERO)
            } else {
                match self.ns.attr(e.ino) {
                    Ok(Some(a)) => (a, entry_ttl.min(attr_ttl(&a))),
                    Ok(None) => return Ok(false),
                    Err(err) => return Err(eio(err)),
                }
            };
            Ok(add(e, attr, ttl))
        })
    }

    /// Hands the small files of directory `ino` (inside a revision) to the chunk cache as
    /// prefetches, in pack order, when it is listed: a walk then reads them from memory
    /// instead of one cold random `pread` of a pack per file on the FUSE thread (issue 40).
    fn warm_dir(&self, ino: u64) {
        if let Ok(Some((tree, files))) = self.ns.dir_files(ino) {
            read::warm::warm_dir_files(&self.open.cache, &tree.manifest, &files);
        }
    }

    /// Opens file `ino` (`flags` as open(2) gives them). The first open of an inode
    /// chooses how it is read: the node's whole file, handed to the kernel when
    /// passthrough is on and `register` (the kernel's backing-file registration) takes
    /// it, else read by `pread`; or streamed. Later opens share that mode until the last
    /// handle is released, a whole file only once checked again for them. The handle holds
    /// its revision in use until released.
    pub fn open(
        &self,
        ino: u64,
        flags: i32,
        register: impl FnOnce(&File) -> std::io::Result<B>,
    ) -> FsResult<Opened<B>> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Err(FsError::ReadOnly);
        }
        let (tree, i) = match self.ns.file(ino) {
            Ok(Some(found)) => found,
            Ok(None) if matches!(self.ns.node(ino), Some(Node::File { .. })) => {
                return Err(FsError::Stale)
            }
            Ok(None) => return Err(FsError::IsDir),
            Err(e) => return Err(eio(e)),
        };
        // The node's whole file, checked (which can read the whole file) before the lock
        // that every open takes; an inode open on a whole file has that file checked again.
        let prepared = self.open.prepare(
            ino,
            self.ns.store(),
            &tree.manifest,
            &tree.manifest.files[i],
        );
        let keep_cache = prepared.keeps_cache();
        let mut inodes = self.open.inodes.lock();
        let mode = match inodes.get(&ino) {
            Some(open) => OpenFiles::shared_mode(&open.mode, &prepared)?,
            None => self.open.choose_mode(prepared.fresh(), register),
        };
        let handle = match &mode {
            Mode::Stream => {
                let reload = Arc::new(crate::namespace::Reloading(self.ns.clone()));
                let source = self.open.source(reload, tree.manifest.clone(), i);
                source.open().map_err(eio)?;
                Handle::Stream(Arc::new(source))
            }
            Mode::Whole(file) | Mode::Passthrough { file, .. } => Handle::Whole(file.clone()),
            Mode::Adopted(_) => return Err(FsError::Io), // shared_mode never answers it
        };
        let open = inodes.entry(ino).or_insert(InodeOpen {
            count: 0,
            mode: mode.clone(),
        });
        if matches!(open.mode, Mode::Adopted(_)) {
            open.mode = mode.clone();
        }
        // Recorded before the kernel hears of this open: a successor must know its mode.
        if !self.open.record(ino, &open.mode, open.count + 1) {
            if open.count == 0 {
                inodes.remove(&ino);
            }
            return Err(FsError::TooManyOpen);
        }
        open.count += 1;
        let fh = self.open.next_fh.fetch_add(1, Ordering::Relaxed);
        self.open.lock_handles().insert(fh, Arc::new(handle));
        drop(inodes);
        crate::metrics::METRICS.open_files.inc();
        OpenFiles::count_open(&mode);
        self.hold(fh, &tree);
        Ok(Opened {
            fh,
            how: match mode {
                Mode::Passthrough { id, .. } | Mode::Adopted(id) => OpenHow::Passthrough(id),
                Mode::Whole(_) => OpenHow::Whole,
                Mode::Stream => OpenHow::Stream,
            },
            keep_cache,
        })
    }

    /// A handle for `fh`, opened on inode `ino` by an earlier server of the connection (the
    /// kernel still reads through it): streamed through the chunk cache, under that same
    /// `fh`. Its inode's open count already counts it (from the takeover state).
    fn adopt_handle(&self, ino: u64, fh: u64) -> FsResult<Arc<Handle>> {
        let (tree, i) = match self.ns.file(ino) {
            Ok(Some(found)) => found,
            Ok(None) => return Err(FsError::Stale),
            Err(e) => return Err(eio(e)),
        };
        let reload = Arc::new(crate::namespace::Reloading(self.ns.clone()));
        let source = self.open.source(reload, tree.manifest.clone(), i);
        source.open().map_err(eio)?;
        let handle = Arc::new(Handle::Stream(Arc::new(source)));
        let mut handles = self.open.lock_handles();
        let handle = handles.entry(fh).or_insert(handle).clone();
        drop(handles);
        crate::metrics::METRICS.open_files.inc();
        self.hold(fh, &tree);
        Ok(handle)
    }

    /// Serves a connection whose state is `state`: records every open and node there from
    /// now on, hands out file handles of a new generation, and, when an earlier server
    /// served it (`resumed`), takes over the inodes the kernel holds open (their modes and
    /// counts; passthrough backing ids through `adopt`). Call before serving.
    pub fn with_takeover(
        mut self,
        state: Arc<State>,
        resumed: bool,
        adopt: impl Fn(u32) -> B,
    ) -> Result<Self, crate::takeover::StateError> {
        let generation = u64::from(state.next_generation()?);
        self.open.generation = generation;
        self.open.next_fh =
            std::sync::atomic::AtomicU64::new((generation << FH_GENERATION_SHIFT) | 1);
        if resumed {
            let mut inodes = self.open.inodes.lock();
            for o in state.opens()? {
                let mode = match o.mode {
                    OpenMode::Cached => Mode::Stream,
                    OpenMode::Passthrough(id) => Mode::Adopted(Arc::new(adopt(id))),
                };
                inodes.insert(
                    o.ino,
                    InodeOpen {
                        count: o.count as usize,
                        mode,
                    },
                );
            }
        }
        self.open.state = Some(state);
        Ok(self)
    }

    /// The open of `fh` records its revision's use (a moment later, from a background
    /// thread) and holds it in use until the handle is released.
    fn hold(&self, fh: u64, tree: &read::tree::Tree) {
        let hold = self.ns.record_use(tree);
        self.open.uses.lock().insert(fh, hold);
    }

    /// Up to `size` bytes at `offset` of file `_ino` through its open handle `fh` (the
    /// handle knows its file: the bytes it opened, whatever the inode shows since).
    pub fn read(&self, _ino: u64, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let mut handle = self.open.lock_handles().get(&fh).cloned();
        if handle.is_none() && self.open.is_predecessors(fh) {
            handle = Some(self.adopt_handle(_ino, fh)?);
        }
        let started = std::time::Instant::now();
        let data = match handle.as_deref() {
            None => return Err(FsError::BadHandle),
            Some(Handle::Whole(file)) => read_whole(file, offset, size as usize),
            Some(Handle::Stream(source)) => self
                .open
                .noting_read(|| source.read(offset, size as usize).map_err(eio)),
        }?;
        let m = &*crate::metrics::METRICS;
        m.reads.inc();
        m.read_bytes.inc_by(data.len() as u64);
        m.read_seconds.observe(started.elapsed().as_secs_f64());
        Ok(data)
    }

    /// Releases handle `fh` of file `ino` (a handle not open: nothing). The last handle
    /// of an inode ends its mode; a streamed file is then asked for in the file cache.
    pub fn release(&self, ino: u64, fh: u64) {
        self.open.uses.lock().remove(&fh);
        let Some(handle) = self.open.lock_handles().remove(&fh) else {
            if self.open.is_predecessors(fh) {
                // Opened by an earlier server and never read through this one.
                self.open.forget_open(ino);
            }
            return;
        };
        crate::metrics::METRICS.open_files.dec();
        self.open.forget_open(ino);
        if let (Handle::Stream(source), Some(files)) = (&*handle, &self.open.files) {
            let (manifest, index) = source.file();
            files.request(self.ns.store(), manifest, index);
        }
    }

    /// The number of open handles.
    pub fn open_handles(&self) -> usize {
        self.open.lock_handles().len()
    }
}

/// Attributes that say only what an inode is, for entries listed with a zero timeout.
fn stand_in(ino: u64, kind: Kind) -> Attr {
    Attr {
        ino,
        kind,
        size: 0,
        executable: true,
        mtime: 0,
        immutable: false,
    }
}
