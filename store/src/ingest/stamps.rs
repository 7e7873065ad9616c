//! What ingest learns of a source file on disk without reading it: its stamp
//! ([`FileStamp`], taken by [`Stamper`] from the open file: `repo::file_stamp`), and
//! whether a stamp may be recorded, so that a later ingest can take the file unread
//! (docs/format/node.md, "Files taken unread"). Where no stamp can be taken, every file is
//! read.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime};

use format::index::FileStamp;
pub(super) use repo::file_stamp::Stamper;

/// `fcntl`'s command that sets the signal sent for a lease break (Linux, `<fcntl.h>`;
/// not in the libc crate).
const F_SETSIG: libc::c_int = 10;

/// Whether `stamp`, taken from `f` just now, may be recorded if `f` is read whole now and
/// still has it afterwards: the file has been still for `settle`, its dirty pages are
/// written back, and no one has it open for writing. A page written through a shared
/// mapping takes further writes without a fault, so without moving the file's times, until
/// writeback cleans it; after this, any write moves them, and so the stamp after the read
/// tells.
///
/// And no one has the file open for writing ([`open_for_writing`]): a single `write(2)`
/// sets the times when it starts and copies its bytes afterwards, so while a long write is
/// still copying, the times look settled over content that is still changing, and they stay
/// as they are when the write ends. A writer that opens the file after this check moves
/// the times with its first write, after the stamp, so the stamp after the read tells.
pub(super) fn may_record(f: &File, stamp: &FileStamp, settle: Duration) -> bool {
    if !stamp.settled(SystemTime::now(), settle) {
        return false;
    }
    let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a system call on an fd open for `f`'s life; no memory is passed.
    if unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, how) } != 0 {
        return false;
    }
    open_for_writing(f) == Some(false)
}

/// Whether any process has the file of `f` (open read-only here) open for writing, a
/// writable shared mapping included: asked of the kernel by taking a read lease, which it
/// refuses (`EAGAIN`) exactly then, and giving it back at once. `None` where it cannot
/// tell: leases off (`fs.leases-enable = 0`), a file this user does not own without
/// `CAP_LEASE`, or a file system without leases; no stamp is recorded then.
///
/// While the lease is held (two system calls), a writer's `open` waits for it to be given
/// back; the kernel tells the lease holder with a signal, `SIGIO` by default, whose default
/// action ends the process. The descriptor's lease signal is therefore set to `SIGURG`
/// first, which is ignored unless a process asks for it.
pub(super) fn open_for_writing(f: &File) -> Option<bool> {
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on an fd open for `f`'s life, with integer arguments only.
    if unsafe { libc::fcntl(fd, F_SETSIG, libc::SIGURG) } != 0 {
        return None;
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) } == 0 {
        // SAFETY: as above; gives back the lease just taken.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(false);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lease asks the kernel whether anyone has the file open for writing: a writer's
    /// descriptor, or a shared writable mapping outliving its descriptor.
    #[test]
    fn open_for_writing_sees_writers_and_mappings() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        let reader = File::open(&p).unwrap();
        assert_eq!(open_for_writing(&reader), Some(false));
        let writer = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert_eq!(open_for_writing(&reader), Some(true));
        drop(writer);
        assert_eq!(open_for_writing(&reader), Some(false));
        let rw = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        // SAFETY: a new shared mapping of an open fd, unmapped below.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                rw.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        drop(rw);
        assert_eq!(
            open_for_writing(&reader),
            Some(true),
            "a mapping outlives its fd"
        );
        // SAFETY: the mapping made above, unmapped once.
        unsafe { libc::munmap(at, 8192) };
        assert_eq!(open_for_writing(&reader), Some(false));
    }
}
