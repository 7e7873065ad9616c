//! What ingest learns of a source file on disk without reading it: its stamp
//! ([`FileStamp`]), taken from the open file, and whether a stamp may be recorded, so that
//! a later ingest can take the file unread (docs/FORMAT.md, "Files taken unread").

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime};

use crate::index::FileStamp;

/// File systems known to move a file's ctime on every write, writes through a shared
/// mapping included (their first write to a clean page faults, and the fault moves the
/// times): ext4 (and ext2/3), xfs, btrfs. Elsewhere no stamp is taken: a tmpfs moves no
/// time on writes through a mapping, and network and FUSE file systems may serve cached
/// attributes.
const STAMPED_FILE_SYSTEMS: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];

/// The stamp of the open file `f`, on a file system in [`STAMPED_FILE_SYSTEMS`].
pub(super) fn stamp_of(f: &File) -> Option<FileStamp> {
    // SAFETY: fstatfs writes into the zeroed struct we own; the fd is open for `f`'s life.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut fs) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let kind = fs.f_type as i64;
    if !STAMPED_FILE_SYSTEMS.contains(&kind) {
        return None;
    }
    stamp_again(f)
}

/// The stamp of `f`, whose file system [`stamp_of`] accepted already.
pub(super) fn stamp_again(f: &File) -> Option<FileStamp> {
    f.metadata().ok().map(|m| FileStamp::of(&m))
}

/// The stamp to record for `f` if it is read whole now and still has it afterwards: None
/// unless the file has been still for `settle` and its dirty pages are written back. A
/// page written through a shared mapping takes further writes without a fault, so without
/// moving the file's times, until writeback cleans it; after this, any write moves them.
pub(super) fn before_read(f: &File, stamp: FileStamp, settle: Duration) -> Option<FileStamp> {
    if !stamp.settled(SystemTime::now(), settle) {
        return None;
    }
    let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a system call on an fd open for `f`'s life; no memory is passed.
    if unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, how) } != 0 {
        return None;
    }
    (stamp_again(f) == Some(stamp)).then_some(stamp)
}
