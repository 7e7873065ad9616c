//! What ingest learns of a source file on disk without reading it: its stamp
//! ([`FileStamp`], taken by [`Stamper`] from the open file: `repo::file_stamp`), and
//! whether a stamp may be recorded, so that a later ingest can take the file unread
//! (docs/format/node.md, "Files taken unread"). Where no stamp can be taken, every file is
//! read.

use std::fs::File;
use std::time::{Duration, SystemTime};

use format::index::FileStamp;
pub(super) use repo::file_stamp::Stamper;

/// Whether `stamp`, taken from `f` just now, may be recorded if `f` is read whole now and
/// still has it afterwards: the file has been still for `settle`, its dirty pages are
/// written back, and no one has it open for writing. A page written through a shared
/// mapping takes further writes without a fault, so without moving the file's times, until
/// writeback cleans it; after this, any write moves them, and so the stamp after the read
/// tells.
///
/// And no one has the file open for writing (`repo::file_stamp::open_for_writing`): a
/// single `write(2)` sets the times when it starts and copies its bytes afterwards, so while a long write is
/// still copying, the times look settled over content that is still changing, and they stay
/// as they are when the write ends. A writer that opens the file after this check moves
/// the times with its first write, after the stamp, so the stamp after the read tells.
pub(super) fn may_record(f: &File, stamp: &FileStamp, settle: Duration) -> bool {
    if !stamp.settled(SystemTime::now(), settle) {
        return false;
    }
    repo::file_stamp::no_writers(f)
}
