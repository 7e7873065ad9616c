//! The fuser `Filesystem` implementation: only translates kernel requests into calls of
//! the mount's core ([`MountCore`]: namespace, open files, reads, listings) and its plain
//! answers into kernel replies; it owns the kernel's side alone (init, the `stat` layout,
//! the passthrough registration of backing files).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    BackingDevice, BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    Request,
};
use read::cache::ChunkCache;
use read::file_cache::FileCache;
use read::readahead::ReadaheadConfig;
use read::tensor_plan::TensorOrder;

use crate::fs::{attr_ttl, Attr, Backing, FsError, Kind, MountCore, OpenHow};
use crate::namespace::Namespace;
use crate::takeover::State;

/// Largest read the kernel may send (and read-ahead it may do): 16 MiB.
pub const MAX_READAHEAD: u32 = 16 * 1024 * 1024;

/// The filesystem handed to fuser.
pub struct ModelFs {
    core: MountCore<BackingId>,
    uid: u32,
    gid: u32,
    /// The connection's takeover state: FUSE_INIT's outcome is written there.
    state: Option<Arc<State>>,
    /// Keeps adopted backing ids closable (they refer to it weakly).
    _device: Option<Arc<BackingDevice>>,
}

impl Backing for BackingId {
    fn raw_id(&self) -> u32 {
        self.id()
    }
}

/// The kernel's errno for a core error.
fn errno(e: FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}

impl ModelFs {
    /// A filesystem over `ns`, reading through `cache`.
    pub fn new(ns: Namespace, cache: Arc<ChunkCache>) -> ModelFs {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        ModelFs {
            core: MountCore::new(ns, cache),
            uid,
            gid,
            state: None,
            _device: None,
        }
    }

    /// Serves a connection with takeover state `state` ([`MountCore::with_takeover`]);
    /// `device` is a descriptor of the connection, for the backing ids an earlier server
    /// registered. When `state` says the connection was initialised, passthrough is as
    /// that FUSE_INIT negotiated it.
    pub fn with_takeover(
        mut self,
        state: Arc<State>,
        device: BackingDevice,
    ) -> Result<ModelFs, crate::takeover::StateError> {
        let header = state.header();
        let resumed = header.initialized();
        let device = Arc::new(device);
        let adopt = device.clone();
        // SAFETY: the ids come from the state's open table: live ids of this connection
        // that the server which registered them can no longer close (it is gone), and
        // each is adopted once.
        self.core = self
            .core
            .with_takeover(state.clone(), resumed, |id| unsafe { adopt.adopt(id) })?;
        if resumed {
            self.core.set_passthrough(
                self.core.passthrough() && header.flags & crate::takeover::PASSTHROUGH != 0,
            );
        }
        self.state = Some(state);
        self._device = Some(device);
        Ok(self)
    }

    /// Serves files the node has whole from `files` (handed to the kernel when
    /// `passthrough` and the kernel allow), and fills it with the files read.
    pub fn with_file_cache(mut self, files: Arc<FileCache>, passthrough: bool) -> ModelFs {
        self.core = self.core.with_file_cache(files, passthrough);
        self
    }

    /// Streams files with the read-ahead of `config` (default: [`ReadaheadConfig::default`]).
    pub fn with_readahead(mut self, config: ReadaheadConfig) -> ModelFs {
        self.core = self.core.with_readahead(config);
        self
    }

    /// Follows safetensors loaders in `order` (default: name order, as vLLM loads).
    pub fn with_tensor_order(mut self, order: TensorOrder) -> ModelFs {
        self.core = self.core.with_tensor_order(order);
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
}

impl Filesystem for ModelFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MAX_READAHEAD);
        let _ = config.set_max_background(64);
        // Listings carry attributes, always (not READDIRPLUS_AUTO, which sends plain
        // READDIRs after the first page and so a LOOKUP per name on them).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        if self.core.passthrough() {
            // Depth 2: the file cache may itself be on a stacked filesystem (overlayfs).
            let offered = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(2).is_ok();
            if !offered {
                tracing::info!(
                    "this kernel has no FUSE passthrough (Linux 6.9+): whole files on the node \
                     are read through the mount"
                );
            }
            self.core.set_passthrough(offered);
        }
        if let Some(state) = &self.state {
            let mut flags = 0;
            if config.capabilities().contains(InitFlags::FUSE_HAS_RESEND) {
                flags |= crate::takeover::HAS_RESEND;
            }
            if self.core.passthrough() {
                flags |= crate::takeover::PASSTHROUGH;
            }
            let v = config.kernel_abi();
            // Before the reply: a successor must not wait for an INIT that was answered.
            state.set_initialized(flags, (v.0, v.1))?;
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        crate::metrics::request("lookup");
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        match self.core.lookup(parent.0, name) {
            // fuser's argument order: attribute timeout, then entry timeout.
            Ok(e) => reply.entry_with_ttls(
                &e.attr_ttl,
                &e.entry_ttl,
                &self.file_attr(&e.attr),
                Generation(0),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        crate::metrics::request("getattr");
        match self.core.getattr(ino.0) {
            Ok(a) => reply.attr(&attr_ttl(&a), &self.file_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        crate::metrics::request("open");
        let opened = match self.core.open(ino.0, flags.0, |f| reply.open_backing(f)) {
            Ok(opened) => opened,
            Err(e) => return reply.error(errno(e)),
        };
        let fh = FileHandle(opened.fh);
        match &opened.how {
            OpenHow::Passthrough(id) => reply.opened_passthrough(fh, FopenFlags::empty(), id),
            OpenHow::Whole | OpenHow::Stream if opened.keep_cache => {
                reply.opened(fh, FopenFlags::FOPEN_KEEP_CACHE)
            }
            // Without KEEP_CACHE the kernel drops the inode's pages at this open.
            OpenHow::Whole | OpenHow::Stream => reply.opened(fh, FopenFlags::empty()),
        }
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
        crate::metrics::request("read");
        match self.core.read(ino.0, fh.0, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(e)),
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
        crate::metrics::request("release");
        // Answered first: a server killed between the two leaves the open counted (the
        // inode keeps its mode until unmount), never a RELEASE the kernel sends again
        // counted twice (an inode closed under an open handle).
        reply.ok();
        self.core.release(ino.0, fh.0);
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
        crate::metrics::request("flush");
        reply.error(Errno::ENOSYS);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        crate::metrics::request("opendir");
        match self.core.opendir(ino.0, flags.0) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
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
        crate::metrics::request("readdir");
        let listed = self.core.readdir(ino.0, offset, |e| {
            Ok(reply.add(INodeNo(e.ino), e.next, file_type(e.kind), &e.name))
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
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
        crate::metrics::request("readdirplus");
        let listed = self.core.readdirplus(ino.0, offset, |e, attr, ttl| {
            let attr = self.file_attr(&attr);
            reply.add(INodeNo(e.ino), e.next, &e.name, &ttl, &attr, Generation(0))
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        crate::metrics::request("statfs");
        reply.statfs(0, 0, 0, 0, 0, 1024 * 1024, 255, 1024 * 1024);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        crate::metrics::request("access");
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
        crate::metrics::request("getxattr");
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        crate::metrics::request("listxattr");
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
