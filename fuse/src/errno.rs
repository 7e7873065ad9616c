//! The errors the mount answers, as plain values ([`FsError`], its `errno` for the
//! kernel), and store errors turned into `EIO`: counted in the mount's read errors and
//! logged.

/// Why a request of the mount fails; [`FsError::errno`] is what the kernel is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsError {
    /// `ENOENT`: no such name or inode.
    NotFound,
    /// `ENOTDIR`: a listing of something that is not a directory.
    NotDir,
    /// `EISDIR`: an open of something that is not a file.
    IsDir,
    /// `EROFS`: an open for writing, or any change.
    ReadOnly,
    /// `EBADF`: a read of a handle that is not open.
    BadHandle,
    /// `EIO`: the store failed (logged and counted).
    Io,
    /// `ESTALE`: an inode of a revision removed or replaced by other content since it was
    /// handed out (the kernel then looks the path up again).
    Stale,
    /// `ENFILE`: the takeover state's open table is full (`crate::takeover::OPEN_SLOTS`
    /// inodes open at once).
    TooManyOpen,
}

impl FsError {
    /// The errno the kernel is given.
    pub fn errno(self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::ReadOnly => libc::EROFS,
            FsError::BadHandle => libc::EBADF,
            FsError::Io => libc::EIO,
            FsError::Stale => libc::ESTALE,
            FsError::TooManyOpen => libc::ENFILE,
        }
    }
}

/// `EIO` for a store or read error, counted and logged.
pub(crate) fn eio(e: impl std::fmt::Display) -> FsError {
    crate::metrics::METRICS.read_errors.inc();
    tracing::error!("mount: {e}");
    FsError::Io
}
