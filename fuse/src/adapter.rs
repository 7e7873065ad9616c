//! The fuser `Filesystem` implementation: turns kernel requests into [`Namespace`] lookups
//! and [`FileStream`] reads, and store errors into errno replies.
//!
//! How a file is opened (one way per inode while any handle of it is open, as the kernel
//! requires: it refuses a passthrough open of an inode open in the cached mode, and the
//! reverse):
//! * **passthrough**: the node's file cache ([`FileCache`]) has the file whole, and the
//!   kernel accepts it as a backing file: the kernel reads it itself, no request reaches us;
//! * **whole file**: the same, where passthrough is unavailable (older kernel, no
//!   `CAP_SYS_ADMIN`, or `--no-passthrough`): reads are `pread`s of that file;
//! * **stream**: chunks through the decoded-chunk cache with read-ahead; when the last
//!   handle of such a file is released, the file cache is asked to make it whole in the
//!   background, for the next open.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
};
use read::cache::ChunkCache;
use read::file_cache::FileCache;
use read::readahead::FileStream;
use read::tensor_plan::TensorOrder;
use repo::manifest::{FileEntry, Manifest};

use crate::namespace::{Attr, Kind, Namespace, Node};

/// Timeout for entries and attributes that never change (inside a commit).
const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Timeout for what can change: listings of repos and refs, entries under a ref.
const MUTABLE_TTL: Duration = Duration::from_secs(1);
/// Largest read the kernel may send (and read-ahead it may do): 16 MiB.
pub const MAX_READAHEAD: u32 = 16 * 1024 * 1024;

/// How the open handles of one inode read it.
#[derive(Clone)]
enum Mode {
    /// Through the chunk cache.
    Stream,
    /// From a whole file of the node's file cache, by `pread`.
    Whole(Arc<File>),
    /// By the kernel from that file (`id` registered with it); the file answers any read
    /// that still reaches us.
    Passthrough { id: Arc<BackingId>, file: Arc<File> },
}

/// One open file handle.
enum Handle {
    /// Chunks through the cache; on release, the file is asked for in the file cache.
    Stream {
        stream: Arc<FileStream>,
        manifest: Arc<Manifest>,
        index: usize,
    },
    /// A whole file on the node.
    Whole(Arc<File>),
}

/// The open handles of an inode and the way they read it.
struct InodeOpen {
    count: usize,
    mode: Mode,
}

/// The filesystem handed to fuser.
pub struct ModelFs {
    ns: Namespace,
    cache: Arc<ChunkCache>,
    files: Option<Arc<FileCache>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    inodes: Mutex<HashMap<u64, InodeOpen>>,
    next_fh: AtomicU64,
    uid: u32,
    gid: u32,
    tensor_order: TensorOrder,
    /// Asked for (`--no-passthrough` clears it), then whether the kernel offers it; cleared
    /// when the kernel refuses a backing file (said once in the log).
    passthrough: AtomicBool,
}

impl ModelFs {
    /// A filesystem over `ns`, reading through `cache`.
    pub fn new(ns: Namespace, cache: Arc<ChunkCache>) -> ModelFs {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        ModelFs {
            ns,
            cache,
            files: None,
            handles: Mutex::new(HashMap::new()),
            inodes: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            uid,
            gid,
            tensor_order: TensorOrder::Name,
            passthrough: AtomicBool::new(false),
        }
    }

    /// Serves files the node has whole from `files` (handed to the kernel when
    /// `passthrough` and the kernel allow), and fills it with the files read.
    pub fn with_file_cache(mut self, files: Arc<FileCache>, passthrough: bool) -> ModelFs {
        self.files = Some(files);
        self.passthrough = AtomicBool::new(passthrough);
        self
    }

    /// Follows safetensors loaders in `order` (default: name order, as vLLM loads).
    pub fn with_tensor_order(mut self, order: TensorOrder) -> ModelFs {
        self.tensor_order = order;
        self
    }

    /// A stream over file `i` of `manifest`; for a `.safetensors` file, one that reads its
    /// header and prefetches along the loader's walk (a header it refuses is logged, and the
    /// file is read with sequential read-ahead).
    fn stream(&self, manifest: &Manifest, i: usize) -> repo::Result<FileStream> {
        let file = &manifest.files[i];
        let stream = FileStream::new(self.cache.clone(), manifest, file)?;
        if self.tensor_order != TensorOrder::Off && file.path.ends_with(".safetensors") {
            if let Err(e) = stream.follow_safetensors(self.tensor_order) {
                tracing::debug!("{}: sequential read-ahead only: {e}", file.path);
            }
        }
        Ok(stream)
    }

    /// How to open an inode that has no open handle: from the node's file cache when it
    /// has the file whole (handed to the kernel when it takes it), else by streaming.
    fn choose_mode(&self, f: &FileEntry, reply: &ReplyOpen) -> Mode {
        let Some(file) = self.files.as_ref().and_then(|c| c.open_file(f)) else {
            return Mode::Stream;
        };
        let file = Arc::new(file);
        if self.passthrough.load(Ordering::Relaxed) {
            match reply.open_backing(&*file) {
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

    /// One handle of `ino` fewer; the inode's mode (and its backing file) goes with the last.
    fn forget_open(&self, ino: u64) {
        let mut inodes = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = inodes.get_mut(&ino) {
            open.count = open.count.saturating_sub(1);
            if open.count == 0 {
                inodes.remove(&ino);
            }
        }
    }

    /// A read through the chunk cache. A pack gone (gc may have repacked this revision):
    /// the manifest is read again and the read retried once with the new locations.
    fn read_stream(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        stream: &FileStream,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, Errno> {
        match stream.read(offset, size as usize) {
            Ok(data) => Ok(data),
            Err(e) if e.is_not_found() => {
                let Ok(Some((tree, i))) = self.ns.reload_file(ino.0) else {
                    return Err(eio(e));
                };
                let fresh = match self.stream(&tree.manifest, i) {
                    Ok(s) => Arc::new(s),
                    Err(_) => return Err(eio(e)),
                };
                let data = fresh.read(offset, size as usize).map_err(eio)?;
                self.handles
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(
                        fh.0,
                        Arc::new(Handle::Stream {
                            stream: fresh,
                            manifest: tree.manifest.clone(),
                            index: i,
                        }),
                    );
                Ok(data)
            }
            Err(e) => Err(eio(e)),
        }
    }

    fn file_attr(&self, a: &Attr) -> FileAttr {
        let t = UNIX_EPOCH + Duration::from_secs(a.mtime);
        let (kind, perm, nlink) = match a.kind {
            Kind::Dir => (FileType::Directory, 0o555, 2),
            Kind::File => (
                FileType::RegularFile,
                if a.executable { 0o555 } else { 0o444 },
                1,
            ),
        };
        FileAttr {
            ino: INodeNo(a.ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: 1024 * 1024,
        }
    }

    fn ttl(a: &Attr) -> Duration {
        if a.immutable {
            IMMUTABLE_TTL
        } else {
            MUTABLE_TTL
        }
    }

    /// Answers an open in `mode`.
    fn reply_open(&self, fh: u64, mode: &Mode, reply: ReplyOpen) {
        match mode {
            Mode::Passthrough { id, .. } => {
                repo::metrics::add(&repo::metrics::METRICS.mount_passthrough_opens, 1);
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), id)
            }
            Mode::Whole(_) => {
                repo::metrics::add(&repo::metrics::METRICS.mount_whole_file_opens, 1);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
            }
            Mode::Stream => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
        }
    }

    /// The entries of directory `ino`, "." and ".." first, as both listings give them.
    fn entries(&self, ino: u64) -> Result<Vec<(String, u64, Kind)>, Errno> {
        let entries = match self.ns.list(ino) {
            Ok(Some(e)) => e,
            Ok(None) => return Err(Errno::ENOTDIR),
            Err(e) => return Err(eio(e)),
        };
        let mut all = vec![(".".into(), ino, Kind::Dir), ("..".into(), ino, Kind::Dir)];
        all.extend(entries);
        Ok(all)
    }

    /// Attributes that say only what an inode is, for entries listed with a zero timeout.
    fn stand_in(&self, ino: u64, kind: Kind) -> Attr {
        Attr {
            ino,
            kind,
            size: 0,
            executable: true,
            mtime: 0,
            immutable: false,
        }
    }
}

/// Up to `size` bytes at `offset` of a whole file on the node.
fn read_whole(file: &File, offset: u64, size: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; size];
    let mut got = 0;
    while got < size {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                repo::metrics::add(&repo::metrics::METRICS.mount_read_errors, 1);
                tracing::error!("mount: reading a whole file of the node's file cache: {e}");
                return Err(Errno::EIO);
            }
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn eio(e: repo::StoreError) -> Errno {
    repo::metrics::add(&repo::metrics::METRICS.mount_read_errors, 1);
    tracing::error!("mount: {e}");
    Errno::EIO
}

impl Filesystem for ModelFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MAX_READAHEAD);
        let _ = config.set_max_background(64);
        // Listings carry attributes, always (not READDIRPLUS_AUTO, which sends plain
        // READDIRs after the first page and so a LOOKUP per name on them).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        if self.passthrough.load(Ordering::Relaxed) {
            // Depth 2: the file cache may itself be on a stacked filesystem (overlayfs).
            let offered = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(2).is_ok();
            if !offered {
                tracing::info!(
                    "this kernel has no FUSE passthrough (Linux 6.9+): whole files on the node \
                     are read through the mount"
                );
            }
            self.passthrough.store(offered, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        repo::metrics::mount_request("lookup");
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        match self
            .ns
            .lookup(parent.0, name)
            .and_then(|i| i.map(|i| self.ns.attr(i)).transpose())
        {
            Ok(Some(Some(a))) => {
                let entry_ttl = if self.ns.children_may_change(parent.0) {
                    MUTABLE_TTL
                } else {
                    IMMUTABLE_TTL
                };
                // fuser's argument order: attribute timeout, then entry timeout.
                reply.entry_with_ttls(
                    &Self::ttl(&a),
                    &entry_ttl,
                    &self.file_attr(&a),
                    Generation(0),
                )
            }
            Ok(_) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(eio(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        repo::metrics::mount_request("getattr");
        match self.ns.attr(ino.0) {
            Ok(Some(a)) => reply.attr(&Self::ttl(&a), &self.file_attr(&a)),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(eio(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        repo::metrics::mount_request("open");
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        let (tree, i) = match self.ns.file(ino.0) {
            Ok(Some(found)) => found,
            Ok(None) => return reply.error(Errno::EISDIR),
            Err(e) => return reply.error(eio(e)),
        };
        let mut inodes = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        let mode = match inodes.get(&ino.0) {
            Some(open) => open.mode.clone(),
            None => self.choose_mode(&tree.manifest.files[i], &reply),
        };
        let handle = match &mode {
            Mode::Stream => match self.stream(&tree.manifest, i) {
                Ok(stream) => Handle::Stream {
                    stream: Arc::new(stream),
                    manifest: tree.manifest.clone(),
                    index: i,
                },
                Err(e) => return reply.error(eio(e)),
            },
            Mode::Whole(file) | Mode::Passthrough { file, .. } => Handle::Whole(file.clone()),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, Arc::new(handle));
        inodes
            .entry(ino.0)
            .or_insert(InodeOpen {
                count: 0,
                mode: mode.clone(),
            })
            .count += 1;
        drop(inodes);
        repo::metrics::METRICS.mount_open_files.inc();
        self.reply_open(fh, &mode, reply);
        // After the reply: the first open of a revision records its use (a moment later,
        // from a background thread).
        self.ns.record_use(&tree);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        repo::metrics::mount_request("read");
        let handle = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned();
        let started = std::time::Instant::now();
        let result = match handle.as_deref() {
            None => return reply.error(Errno::EBADF),
            Some(Handle::Whole(file)) => read_whole(file, offset, size as usize),
            Some(Handle::Stream { stream, .. }) => self.read_stream(ino, fh, stream, offset, size),
        };
        match result {
            Ok(data) => {
                let m = &*repo::metrics::METRICS;
                repo::metrics::add(&m.mount_reads, 1);
                repo::metrics::add(&m.mount_read_bytes, data.len() as u64);
                m.mount_read_seconds
                    .observe(started.elapsed().as_secs_f64());
                reply.data(&data)
            }
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        repo::metrics::mount_request("release");
        let handle = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        if let Some(handle) = handle {
            repo::metrics::METRICS.mount_open_files.dec();
            self.forget_open(ino.0);
            if let (
                Handle::Stream {
                    manifest, index, ..
                },
                Some(files),
            ) = (&*handle, &self.files)
            {
                files.request(self.ns.store(), manifest.clone(), *index);
            }
        }
        reply.ok();
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to flush on a read-only mount: ENOSYS tells the kernel to send no FLUSH
        // again on this mount (one request fewer per close).
        repo::metrics::mount_request("flush");
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        repo::metrics::mount_request("opendir");
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        match self.ns.attr(ino.0) {
            Ok(Some(a)) if a.kind == Kind::Dir => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(Some(_)) => reply.error(Errno::ENOTDIR),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(eio(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        repo::metrics::mount_request("readdir");
        let all = match self.entries(ino.0) {
            Ok(all) => all,
            Err(e) => return reply.error(e),
        };
        for (i, (name, child, kind)) in all.into_iter().enumerate().skip(offset as usize) {
            let kind = match kind {
                Kind::Dir => FileType::Directory,
                Kind::File => FileType::RegularFile,
            };
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    /// A listing with each entry's attributes, so that the kernel asks no LOOKUP for the
    /// names it lists (a walk of many small files is one request fewer per file).
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        repo::metrics::mount_request("readdirplus");
        let all = match self.entries(ino.0) {
            Ok(all) => all,
            Err(e) => return reply.error(e),
        };
        // The revisions of a repository: their attributes need each one's manifest, so
        // they are listed with stand-ins that expire at once (the kernel asks LOOKUP and
        // GETATTR as it would without READDIRPLUS).
        let views = matches!(self.ns.node(ino.0), Some(Node::Repo(_)));
        let entry_ttl = if self.ns.children_may_change(ino.0) {
            MUTABLE_TTL
        } else {
            IMMUTABLE_TTL
        };
        for (i, (name, child, kind)) in all.into_iter().enumerate().skip(offset as usize) {
            // The kernel links no dentry for "." and ".."; their attributes are not used.
            let (attr, ttl) = if views || name == "." || name == ".." {
                (self.stand_in(child, kind), Duration::ZERO)
            } else {
                match self.ns.attr(child) {
                    Ok(Some(a)) => (a, entry_ttl.min(Self::ttl(&a))),
                    Ok(None) => continue,
                    Err(e) => return reply.error(eio(e)),
                }
            };
            let attr = self.file_attr(&attr);
            if reply.add(
                INodeNo(child),
                (i + 1) as u64,
                name,
                &ttl,
                &attr,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        repo::metrics::mount_request("statfs");
        reply.statfs(0, 0, 0, 0, 0, 1024 * 1024, 255, 1024 * 1024);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        repo::metrics::mount_request("access");
        if mask.bits() & libc::W_OK != 0 {
            reply.error(Errno::EROFS)
        } else {
            reply.ok()
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        repo::metrics::mount_request("getxattr");
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        repo::metrics::mount_request("listxattr");
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    // Everything that would change the tree is refused with EROFS.

    fn setattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mknod(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _m: u32,
        _u: u32,
        _r: u32,
        reply: ReplyEntry,
    ) {
        reply.error(Errno::EROFS);
    }

    fn mkdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _m: u32, _u: u32, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn unlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn rmdir(&self, _req: &Request, _p: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn symlink(&self, _req: &Request, _p: INodeNo, _n: &OsStr, _t: &Path, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn rename(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _np: INodeNo,
        _nn: &OsStr,
        _f: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn link(&self, _req: &Request, _i: INodeNo, _np: INodeNo, _nn: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::EROFS);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _wf: fuser::WriteFlags,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::EROFS);
    }

    fn create(
        &self,
        _req: &Request,
        _p: INodeNo,
        _n: &OsStr,
        _m: u32,
        _u: u32,
        _f: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::EROFS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _i: INodeNo,
        _n: &OsStr,
        _v: &[u8],
        _f: i32,
        _p: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }

    fn removexattr(&self, _req: &Request, _i: INodeNo, _n: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::EROFS);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _i: INodeNo,
        _fh: FileHandle,
        _o: u64,
        _l: u64,
        _m: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EROFS);
    }
}
