//! The fuser `Filesystem` implementation: turns kernel requests into [`Namespace`] lookups
//! and [`FileStream`] reads, and store errors into errno replies. No logic of its own.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
};
use read::cache::ChunkCache;
use read::readahead::FileStream;
use read::tensor_plan::TensorOrder;
use repo::manifest::Manifest;

use crate::namespace::{Attr, Kind, Namespace};

/// Timeout for entries and attributes that never change (inside a commit).
const IMMUTABLE_TTL: Duration = Duration::from_secs(24 * 3600);
/// Timeout for what can change: listings of repos and refs, entries under a ref.
const MUTABLE_TTL: Duration = Duration::from_secs(1);
/// Largest read the kernel may send (and read-ahead it may do): 16 MiB.
pub const MAX_READAHEAD: u32 = 16 * 1024 * 1024;

/// The filesystem handed to fuser.
pub struct ModelFs {
    ns: Namespace,
    cache: Arc<ChunkCache>,
    handles: Mutex<HashMap<u64, Arc<FileStream>>>,
    next_fh: AtomicU64,
    uid: u32,
    gid: u32,
    tensor_order: TensorOrder,
}

impl ModelFs {
    /// A filesystem over `ns`, reading through `cache`.
    pub fn new(ns: Namespace, cache: Arc<ChunkCache>) -> ModelFs {
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        ModelFs {
            ns,
            cache,
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            uid,
            gid,
            tensor_order: TensorOrder::Name,
        }
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
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
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
        match self.ns.attr(ino.0) {
            Ok(Some(a)) => reply.attr(&Self::ttl(&a), &self.file_attr(&a)),
            Ok(None) => reply.error(Errno::ENOENT),
            Err(e) => reply.error(eio(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        match self.ns.file(ino.0) {
            Ok(Some((tree, i))) => match self.stream(&tree.manifest, i) {
                Ok(stream) => {
                    let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                    self.handles
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(fh, Arc::new(stream));
                    repo::metrics::METRICS.mount_open_files.inc();
                    self.ns.record_use(&tree);
                    reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
                }
                Err(e) => reply.error(eio(e)),
            },
            Ok(None) => reply.error(Errno::EISDIR),
            Err(e) => reply.error(eio(e)),
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
        let stream = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned();
        let Some(stream) = stream else {
            return reply.error(Errno::EBADF);
        };
        let started = std::time::Instant::now();
        let m = &*repo::metrics::METRICS;
        let ok = |data: &[u8]| {
            repo::metrics::add(&m.mount_reads, 1);
            repo::metrics::add(&m.mount_read_bytes, data.len() as u64);
            m.mount_read_seconds
                .observe(started.elapsed().as_secs_f64());
        };
        match stream.read(offset, size as usize) {
            Ok(data) => {
                ok(&data);
                reply.data(&data)
            }
            Err(e) if e.is_not_found() => {
                // A pack is gone: gc may have repacked this revision. Read its manifest
                // again and retry once with the new locations.
                let fresh = match self.ns.reload_file(ino.0) {
                    Ok(Some((tree, i))) => self.stream(&tree.manifest, i).ok(),
                    _ => None,
                };
                let Some(fresh) = fresh else {
                    return reply.error(eio(e));
                };
                let fresh = Arc::new(fresh);
                self.handles
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(fh.0, fresh.clone());
                match fresh.read(offset, size as usize) {
                    Ok(data) => {
                        ok(&data);
                        reply.data(&data)
                    }
                    Err(e) => reply.error(eio(e)),
                }
            }
            Err(e) => reply.error(eio(e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0)
            .is_some()
        {
            repo::metrics::METRICS.mount_open_files.dec();
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
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
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
        let entries = match self.ns.list(ino.0) {
            Ok(Some(e)) => e,
            Ok(None) => return reply.error(Errno::ENOTDIR),
            Err(e) => return reply.error(eio(e)),
        };
        let mut all: Vec<(String, u64, FileType)> = vec![
            (".".into(), ino.0, FileType::Directory),
            ("..".into(), ino.0, FileType::Directory),
        ];
        all.extend(entries.into_iter().map(|(n, i, k)| {
            (
                n,
                i,
                if k == Kind::Dir {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                },
            )
        }));
        for (i, (name, child, kind)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 1024 * 1024, 255, 1024 * 1024);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
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
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
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
