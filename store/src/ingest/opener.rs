//! Where the bytes of a source file come from ([`Opener`]): the file system
//! ([`FileSystem`], opening without following links put in place since discovery), or any
//! other stream (a download, for `pull`).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use repo::{Result, StoreError};

/// Where the bytes of a source file come from. Ingest names each distinct source by its
/// [`crate::source::SourceFile::source`] path and reads it once through this: from the file
/// system ([`FileSystem`]), or from elsewhere (a download streamed as it arrives: `pull`).
/// A reader that fails (an I/O error, a download whose bytes do not match what its origin
/// stated) fails the ingest before any manifest is written.
pub trait Opener: Sync {
    /// A reader of the whole content of `source`.
    fn open(&self, source: &Path) -> Result<Box<dyn Read + Send + '_>>;

    /// Opens `source` for ingest: as a file where it is one on this machine (ingest then
    /// stamps the very file it reads, before and after), else as a stream. The default:
    /// the stream of [`Opener::open`].
    fn open_source(&self, source: &Path) -> Result<Opened<'_>> {
        Ok(Opened::Stream(self.open(source)?))
    }

    /// Called once every manifest is written, just before the refs are set: an error fails
    /// the ingest with every ref as it was. A caller that holds a lock of its own over the
    /// refs (a hub's commit lock) confirms it here. The default: nothing to confirm.
    fn before_refs(&self) -> Result<()> {
        Ok(())
    }
}

/// A source opened for ingest ([`Opener::open_source`]).
pub enum Opened<'a> {
    /// A file on this machine.
    File(File),
    /// Any other stream of the content.
    Stream(Box<dyn Read + Send + 'a>),
    /// Content the store already holds (a pull of a file a stored revision has): its
    /// sha256 and chunk list (id and length, in order). Ingest takes the chunk list as it
    /// is when the index places every chunk in a known pack and knows the content's Xet
    /// hash, as it takes a file it knows unchanged; else it reads `fallback` (the stored
    /// bytes, each chunk checked) like any stream.
    Stored {
        sha256: format::Sha256,
        chunks: Vec<(format::ChunkId, u32)>,
        fallback: Box<dyn Read + Send + 'a>,
    },
}

impl Opened<'_> {
    /// The file, where the source is one.
    pub(super) fn file(&self) -> Option<&File> {
        match self {
            Opened::File(f) => Some(f),
            Opened::Stream(_) | Opened::Stored { .. } => None,
        }
    }

    /// A reader of the content, and the file where the source is one (to read back from).
    pub(super) fn reader(&mut self) -> (Box<dyn Read + Send + '_>, Option<&File>) {
        match self {
            Opened::File(f) => {
                let f: &File = f;
                (Box::new(f), Some(f))
            }
            Opened::Stream(r) | Opened::Stored { fallback: r, .. } => (Box::new(r), None),
        }
    }
}

/// Source files are files on this machine.
pub struct FileSystem;

impl Opener for FileSystem {
    fn open(&self, source: &Path) -> Result<Box<dyn Read + Send + '_>> {
        Ok(Box::new(open_resolved(source)?))
    }

    fn open_source(&self, source: &Path) -> Result<Opened<'_>> {
        Ok(Opened::File(open_resolved(source)?))
    }
}

/// Opens a source file, named by the canonical path discovery found, for reading without
/// following any link on the way (`openat2` with `RESOLVE_NO_SYMLINKS`): a link put in
/// place of the file or of any directory above it since discovery is refused rather than
/// followed. Where the kernel has no `openat2` (before Linux 5.6, or a sandbox that
/// forbids it), only a link in the last component is refused (`O_NOFOLLOW`). Anything but a
/// regular file is refused (a FIFO put in place is not waited on).
fn open_resolved(source: &Path) -> Result<File> {
    let refused = |why: &str| StoreError::BadSource {
        path: source.to_path_buf(),
        reason: why.into(),
    };
    let file = match openat2_no_symlinks(source) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(source)
        }
        other => other,
    };
    let file = file.map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => refused(
            "it, or a directory above it, became a symbolic link after it was found; refusing to follow it",
        ),
        _ => StoreError::io(source, e),
    })?;
    let meta = file.metadata().map_err(|e| StoreError::io(source, e))?;
    if !meta.is_file() {
        return Err(refused("is no longer a regular file"));
    }
    Ok(file)
}

/// `openat2(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC, RESOLVE_NO_SYMLINKS)`.
fn openat2_no_symlinks(path: &Path) -> std::io::Result<File> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: open_how is plain old data, for which all zero bytes are valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS;
    let how_ptr: *const libc::open_how = &how;
    // SAFETY: `c` is a NUL-terminated path and `how` ours, both outliving the call, whose
    // size argument is `how`'s size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            how_ptr,
            size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the call returned, owned by the File alone.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}
