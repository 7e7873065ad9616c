//! `stubfs SRC_DIR MOUNTPOINT`: a no-op FUSE filesystem, the baseline of `bench/mount.sh`.
//!
//! It shows `SRC_DIR` read-only at `MOUNTPOINT` and answers every read with one `pread` of
//! the underlying file, nothing else: no cache, no read-ahead of its own, no decoding. What a
//! read through it costs beyond the plain directory is the cost of FUSE itself on this
//! kernel, so `modelcas mount` / stub isolates what modelcas adds.
//!
//! To make that ratio fair it mounts with the settings of the real mount (`fuse/src/lib.rs`,
//! `fuse/src/adapter.rs`): `FOPEN_KEEP_CACHE` on open, `max_readahead` 16 MiB,
//! `max_background` 64, attribute and entry timeouts of a day (the files do not change),
//! 8 worker threads with `clone_fd`, and the bdi `read_ahead_kb` raised to 16 MiB.
//! Runs in the foreground until SIGINT or SIGTERM, then unmounts.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, Request, SessionACL,
};
use parking_lot::Mutex;

/// Entries and attributes never change under the stub, as inside a modelcas commit.
const TTL: Duration = Duration::from_secs(24 * 3600);
/// Largest read the kernel may send and read-ahead it may do, as the real mount: 16 MiB.
const MAX_READAHEAD: u32 = 16 * 1024 * 1024;

/// Inode numbers handed out for paths under the source directory (the root is inode 1).
struct Inodes {
    paths: Vec<PathBuf>,
    ids: HashMap<PathBuf, u64>,
}

impl Inodes {
    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        let i = usize::try_from(ino.0).map_err(|_| Errno::ENOENT)?;
        self.paths
            .get(i.wrapping_sub(1))
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn id(&mut self, path: PathBuf) -> INodeNo {
        if let Some(&i) = self.ids.get(&path) {
            return INodeNo(i);
        }
        self.paths.push(path.clone());
        let i = self.paths.len() as u64;
        self.ids.insert(path, i);
        INodeNo(i)
    }
}

/// The filesystem: paths by inode and open files by handle.
struct StubFs {
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, Arc<File>>>,
    next_fh: AtomicU64,
}

fn kind(m: &Metadata) -> FileType {
    let t = m.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else if t.is_fifo() {
        FileType::NamedPipe
    } else {
        FileType::RegularFile
    }
}

/// The attributes of `m`, read-only and with the real mount's 1 MiB block size.
fn attr(ino: INodeNo, m: &Metadata) -> FileAttr {
    let t = UNIX_EPOCH + Duration::from_secs(m.mtime().max(0) as u64);
    FileAttr {
        ino,
        size: m.size(),
        blocks: m.blocks(),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: kind(m),
        perm: (m.mode() & 0o7555) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: 0,
        flags: 0,
        blksize: 1024 * 1024,
    }
}

/// Reads up to `size` bytes at `offset` with one `pread` (more only if it returns short).
fn pread(file: &File, offset: u64, size: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::<u8>::with_capacity(size);
    while buf.len() < size {
        let at = offset + buf.len() as u64;
        let spare = buf.spare_capacity_mut();
        // SAFETY: the destination is the vector's spare capacity, `spare.len()` bytes long;
        // pread writes at most that many and reports how many it wrote.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                spare.as_mut_ptr().cast(),
                spare.len(),
                at as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            break;
        }
        // SAFETY: pread initialised the first n bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n as usize) };
    }
    Ok(buf)
}

impl StubFs {
    fn new(root: PathBuf) -> StubFs {
        let mut inodes = Inodes {
            paths: Vec::new(),
            ids: HashMap::new(),
        };
        inodes.id(root);
        StubFs {
            inodes: Mutex::new(inodes),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.inodes.lock().path(ino)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<(INodeNo, Metadata), Errno> {
        let path = self.path(parent)?.join(name);
        let meta = std::fs::symlink_metadata(&path)?;
        Ok((self.inodes.lock().id(path), meta))
    }

    fn list(&self, ino: INodeNo) -> Result<Vec<(INodeNo, FileType, std::ffi::OsString)>, Errno> {
        let dir = self.path(ino)?;
        let mut all = vec![
            (ino, FileType::Directory, ".".into()),
            (ino, FileType::Directory, "..".into()),
        ];
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let meta = e.metadata()?;
            let child = self.inodes.lock().id(e.path());
            all.push((child, kind(&meta), e.file_name()));
        }
        Ok(all)
    }
}

impl Filesystem for StubFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(MAX_READAHEAD);
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name) {
            Ok((ino, meta)) => reply.entry(&TTL, &attr(ino, &meta), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self
            .path(ino)
            .and_then(|p| std::fs::symlink_metadata(p).map_err(Errno::from))
        {
            Ok(meta) => reply.attr(&TTL, &attr(ino, &meta)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        match self
            .path(ino)
            .and_then(|p| File::open(p).map_err(Errno::from))
        {
            Ok(file) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.files.lock().insert(fh, Arc::new(file));
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(file) = self.files.lock().get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        match pread(&file, offset, size as usize) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e.into()),
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
        self.files.lock().remove(&fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let all = match self.list(ino) {
            Ok(all) => all,
            Err(e) => return reply.error(e),
        };
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(child, (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

/// Raises the mount's bdi `read_ahead_kb` to 16 MiB, as the real mount does (best effort).
fn raise_readahead(path: &Path) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    let _ = std::fs::write(knob, format!("{}", MAX_READAHEAD / 1024));
}

/// Blocks SIGINT and SIGTERM in this thread and the ones it starts, so that they are waited
/// for below instead of killing the process with the mount still up.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset operations on a local, zero-initialised set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Whether one of `set` arrived within 200 ms.
fn signalled(set: &libc::sigset_t) -> bool {
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000_000,
    };
    // SAFETY: set and ts are valid for the call; info may be null.
    unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) > 0 }
}

fn run() -> Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [src, mountpoint] = args.as_slice() else {
        bail!("usage: stubfs SRC_DIR MOUNTPOINT");
    };
    let src = src
        .canonicalize()
        .with_context(|| format!("source {}", src.display()))?;
    if !src.is_dir() {
        bail!("source {} is not a directory", src.display());
    }
    let signals = block_signals();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::FSName("stubfs".into()),
        MountOption::Subtype("stubfs".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::Owner;
    config.n_threads = Some(8);
    config.clone_fd = true;
    let session = fuser::spawn_mount(StubFs::new(src), mountpoint, &config)
        .with_context(|| format!("mount {}", mountpoint.display()))?;
    raise_readahead(mountpoint);
    while !session.guard.is_finished() && !signalled(&signals) {}
    session
        .umount_and_join()
        .with_context(|| format!("unmount {}", mountpoint.display()))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stubfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
