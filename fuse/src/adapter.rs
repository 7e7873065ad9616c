//! The fuser `Filesystem` implementation: turns kernel requests into [`Namespace`] lookups
//! and reads of open files (`crate::handles`), and store errors into errno replies
//! (`crate::errno`).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
};
use read::cache::ChunkCache;
use read::file_cache::FileCache;
use read::readahead::ReadaheadConfig;
use read::tensor_plan::TensorOrder;

use crate::errno::eio;
use crate::handles::{read_whole, Handle, InodeOpen, Mode, OpenFiles};
use crate::namespace::{Attr, Kind, Namespace, Node};

/// Timeout for entries and attributes that never change (inside a commit).
const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Timeout for what can change: listings of repos and refs, entries under a ref.
const MUTABLE_TTL: Duration = Duration::from_secs(1);
/// Largest read the kernel may send (and read-ahead it may do): 16 MiB.
pub const MAX_READAHEAD: u32 = 16 * 1024 * 1024;

/// The filesystem handed to fuser.
pub struct ModelFs {
    ns: Namespace,
    open: OpenFiles,
    uid: u32,
    gid: u32,
}

impl ModelFs {
    /// A filesystem over `ns`, reading through `cache`.
    pub fn new(ns: Namespace, cache: Arc<ChunkCache>) -> ModelFs {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        ModelFs {
            ns,
            open: OpenFiles::new(cache),
            uid,
            gid,
        }
    }

    /// Serves files the node has whole from `files` (handed to the kernel when
    /// `passthrough` and the kernel allow), and fills it with the files read.
    pub fn with_file_cache(mut self, files: Arc<FileCache>, passthrough: bool) -> ModelFs {
        self.open.files = Some(files);
        self.open.passthrough = AtomicBool::new(passthrough);
        self
    }

    /// Streams files with the read-ahead of `config` (default: [`ReadaheadConfig::default`]).
    pub fn with_readahead(mut self, config: ReadaheadConfig) -> ModelFs {
        self.open.readahead = config;
        self
    }

    /// Follows safetensors loaders in `order` (default: name order, as vLLM loads).
    pub fn with_tensor_order(mut self, order: TensorOrder) -> ModelFs {
        self.open.tensor_order = order;
        self
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

    /// Lists directory `ino` for both listings: its entries, "." and ".." first, from
    /// `offset` on, each passed to `add` with the offset of the entry after it, until `add`
    /// says the reply is full.
    fn list(
        &self,
        ino: u64,
        offset: u64,
        mut add: impl FnMut(u64, &str, u64, Kind) -> Result<bool, Errno>,
    ) -> Result<(), Errno> {
        let entries = match self.ns.list(ino) {
            Ok(Some(e)) => e,
            Ok(None) => return Err(Errno::ENOTDIR),
            Err(e) => return Err(eio(e)),
        };
        let mut all = vec![(".".into(), ino, Kind::Dir), ("..".into(), ino, Kind::Dir)];
        all.extend(entries);
        for (i, (name, child, kind)) in all.into_iter().enumerate().skip(offset as usize) {
            if add((i + 1) as u64, &name, child, kind)? {
                break;
            }
        }
        Ok(())
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

impl Filesystem for ModelFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MAX_READAHEAD);
        let _ = config.set_max_background(64);
        // Listings carry attributes, always (not READDIRPLUS_AUTO, which sends plain
        // READDIRs after the first page and so a LOOKUP per name on them).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        if self.open.passthrough.load(Ordering::Relaxed) {
            // Depth 2: the file cache may itself be on a stacked filesystem (overlayfs).
            let offered = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(2).is_ok();
            if !offered {
                tracing::info!(
                    "this kernel has no FUSE passthrough (Linux 6.9+): whole files on the node \
                     are read through the mount"
                );
            }
            self.open.passthrough.store(offered, Ordering::Relaxed);
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
        // The node's whole file, checked (which can read the whole file) before the lock
        // that every open takes: only when no handle of the inode is open yet.
        let whole = self.open.whole_file(ino.0, &tree.manifest.files[i]);
        let mut inodes = self.open.inodes.lock().unwrap_or_else(|p| p.into_inner());
        let mode = match inodes.get(&ino.0) {
            Some(open) => open.mode.clone(),
            None => self.open.choose_mode(whole, &reply),
        };
        let handle = match &mode {
            Mode::Stream => match self.open.stream(&tree.manifest, i) {
                Ok(stream) => Handle::Stream {
                    stream: Arc::new(stream),
                    manifest: tree.manifest.clone(),
                    index: i,
                },
                Err(e) => return reply.error(eio(e)),
            },
            Mode::Whole(file) | Mode::Passthrough { file, .. } => Handle::Whole(file.clone()),
        };
        let fh = self.open.next_fh.fetch_add(1, Ordering::Relaxed);
        self.open
            .handles
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
        self.open.reply_open(fh, &mode, reply);
        // After the reply: the open records its revision's use (a moment later, from a
        // background thread) and holds it in use until the handle is released.
        let hold = self.ns.record_use(&tree);
        self.open
            .uses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, hold);
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
            .open
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned();
        let started = std::time::Instant::now();
        let result = match handle.as_deref() {
            None => return reply.error(Errno::EBADF),
            Some(Handle::Whole(file)) => read_whole(file, offset, size as usize),
            Some(Handle::Stream { stream, .. }) => self.open.noting_read(|| {
                self.open
                    .read_stream(&self.ns, ino, fh, stream, offset, size)
            }),
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
        self.open
            .uses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        let handle = self
            .open
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        if let Some(handle) = handle {
            repo::metrics::METRICS.mount_open_files.dec();
            self.open.forget_open(ino.0);
            if let (
                Handle::Stream {
                    manifest, index, ..
                },
                Some(files),
            ) = (&*handle, &self.open.files)
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
        let listed = self.list(ino.0, offset, |next, name, child, kind| {
            let kind = match kind {
                Kind::Dir => FileType::Directory,
                Kind::File => FileType::RegularFile,
            };
            Ok(reply.add(INodeNo(child), next, kind, name))
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        // The revisions of a repository: their attributes need each one's manifest, so
        // they are listed with stand-ins that expire at once (the kernel asks LOOKUP and
        // GETATTR as it would without READDIRPLUS).
        let views = matches!(self.ns.node(ino.0), Some(Node::Repo(_)));
        let entry_ttl = if self.ns.children_may_change(ino.0) {
            MUTABLE_TTL
        } else {
            IMMUTABLE_TTL
        };
        let listed = self.list(ino.0, offset, |next, name, child, kind| {
            // The kernel links no dentry for "." and ".."; their attributes are not used.
            let (attr, ttl) = if views || name == "." || name == ".." {
                (self.stand_in(child, kind), Duration::ZERO)
            } else {
                match self.ns.attr(child) {
                    Ok(Some(a)) => (a, entry_ttl.min(Self::ttl(&a))),
                    Ok(None) => return Ok(false),
                    Err(e) => return Err(eio(e)),
                }
            };
            let attr = self.file_attr(&attr);
            Ok(reply.add(INodeNo(child), next, name, &ttl, &attr, Generation(0)))
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
