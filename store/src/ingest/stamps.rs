//! What ingest learns of a source file on disk without reading it: its stamp
//! ([`FileStamp`]), taken from the open file, and whether a stamp may be recorded, so that
//! a later ingest can take the file unread (docs/FORMAT.md, "Files taken unread").

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::index::FileStamp;

/// File systems known to move a file's ctime on every write, writes through a shared
/// mapping included (their first write to a clean page faults, and the fault moves the
/// times): ext4 (and ext2/3), xfs, btrfs. Elsewhere no stamp is taken: a tmpfs moves no
/// time on writes through a mapping, and network and FUSE file systems may serve cached
/// attributes.
const STAMPED_FILE_SYSTEMS: [i64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];

/// Stamps files, asking each file system (by device) once whether it is one of
/// [`STAMPED_FILE_SYSTEMS`].
#[derive(Default)]
pub(super) struct Stamper {
    stamped_devices: Mutex<HashMap<u64, bool>>,
}

impl Stamper {
    /// The stamp of the open file `f`, on a file system in [`STAMPED_FILE_SYSTEMS`].
    pub(super) fn stamp_of(&self, f: &File) -> Option<FileStamp> {
        let stamp = stamp_again(f)?;
        let mut devices = self
            .stamped_devices
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let stamped = *devices
            .entry(stamp.dev)
            .or_insert_with(|| on_a_stamped_file_system(f));
        stamped.then_some(stamp)
    }
}

fn on_a_stamped_file_system(f: &File) -> bool {
    // SAFETY: fstatfs writes into the zeroed struct we own; the fd is open for `f`'s life.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut fs) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let kind = fs.f_type as i64;
    STAMPED_FILE_SYSTEMS.contains(&kind)
}

/// The stamp of `f`, whose file system [`Stamper::stamp_of`] accepted already.
pub(super) fn stamp_again(f: &File) -> Option<FileStamp> {
    f.metadata().ok().map(|m| FileStamp::of(&m))
}

/// Whether `stamp`, taken from `f` just now, may be recorded if `f` is read whole now and
/// still has it afterwards: the file has been still for `settle`, and its dirty pages are
/// written back. A page written through a shared mapping takes further writes without a
/// fault, so without moving the file's times, until writeback cleans it; after this, any
/// write moves them, and so the stamp after the read tells.
pub(super) fn may_record(f: &File, stamp: &FileStamp, settle: Duration) -> bool {
    if !stamp.settled(SystemTime::now(), settle) {
        return false;
    }
    let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a system call on an fd open for `f`'s life; no memory is passed.
    unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, how) == 0 }
}
