//! Checks that outlive the process: for each entry of the node file cache checked (or
//! filled) by a mount, a record of the entry's stamp and what its bytes were found to be,
//! so that the next mount process on the node hands the entry out without reading and
//! hashing it again (a pod's second start reads its weights at the disk's speed).
//!
//! * **Where.** `<dir>/.checked/<64 hex sha256>`, one record per entry, written to a
//!   temporary name in the same directory and renamed into place (docs/format/node.md,
//!   "Node file cache").
//! * **What.** The bytes of a [`FileStamp`] record (`MCASSTMP`, version 1: boot id, unique
//!   mount id, device, inode, size, mtime, ctime, the entry's sha256, the digest of the
//!   chunk list it was checked against, a BLAKE3 checksum): the record ingest writes for
//!   files taken unread, with the same rules of trust.
//! * **Trust.** A record is believed only when it is intact and its stamp equals, field for
//!   field, the stamp the entry has now, and its sha256 and chunk-list digest are those of
//!   the file asked for. Any write, truncation, rename over the entry or `chmod` moves the
//!   ctime, which no process but root's (setting the clock) can set back; a record of another boot or another mount of
//!   the file system (every crash ends both) is never believed, so a power cut that left
//!   bytes on disk other than the ones checked cannot be covered by a record. Where no
//!   stamp can be taken (a kernel without `STATX_MNT_ID_UNIQUE`, a file system that is not
//!   ext4, xfs or btrfs), nothing is recorded and every process checks.
//! * **When.** Recorded after a check found the bytes right under the same stamp before
//!   and after reading them, with no process holding the entry open for writing (asked of
//!   the kernel with a read lease, after the entry's dirty pages were written back: a page
//!   dirtied through a shared mapping takes writes that move no time). A fill checks the
//!   entry it linked into place this way (what it hashed is what it streamed, not what the
//!   file holds). Records are not synced: a record made in this boot is worth nothing after
//!   the next one.
//! * **Root.** Root can set the clock back and write in the very nanosecond of a recorded
//!   ctime, or write a record (its checksum has no key); a node's root is trusted with its
//!   file cache as with everything else on it.
//! * **Cleaning.** A record is removed with its entry when the cache drops it; records
//!   whose entry is gone (evicted) are removed, on a thread of their own, when a cache is
//!   opened on the directory. A `.checked` that is not a directory (a symbolic link put
//!   there) turns the records off: nothing is followed into it.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use format::index::{chunk_list_digest, FileStamp, STAMP_RECORD_LEN};
use format::ChunkListDigest;
use repo::file_stamp::Stamper;
use repo::manifest::FileEntry;

/// Name of the records' directory inside the cache directory.
pub const DIR_NAME: &str = ".checked";

/// Temporary records older than this were left by a process that died.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// The records of one cache directory.
pub struct CheckedRecords {
    /// `<cache>/.checked`; None where it is not a directory of its own (a symbolic link
    /// put there, say): no record is then read, written or removed.
    dir: Option<PathBuf>,
    stamper: Stamper,
    counter: AtomicU64,
}

impl CheckedRecords {
    /// The records of the cache at `cache_dir` (their directory is made when missing; a
    /// directory that cannot be made means records are neither read nor written).
    pub fn open(cache_dir: &Path) -> CheckedRecords {
        let dir = cache_dir.join(DIR_NAME);
        let _ = fs::create_dir(&dir);
        let own = fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir());
        if !own {
            tracing::warn!(
                "file cache: {} is not a directory; entries are checked by each process",
                dir.display()
            );
        }
        CheckedRecords {
            dir: own.then_some(dir),
            stamper: Stamper::new(),
            counter: AtomicU64::new(0),
        }
    }

    /// The stamp of the entry `file`, where one can be taken (see the module doc).
    pub fn stamp(&self, file: &File) -> Option<FileStamp> {
        self.stamper.stamp_of(file)
    }

    /// Whether a record says that the entry `file` holds the bytes of `f`: intact, of the
    /// stamp `file` has now, for `f`'s sha256 and chunk list.
    pub fn trusted(&self, file: &File, f: &FileEntry) -> bool {
        let Some(stamp) = self.stamp(file) else {
            return false;
        };
        let Some(v) = self.read(&f.sha256_hex()) else {
            return false;
        };
        stamp.recorded(&v) == Some((f.sha256, digest(f)))
    }

    /// Records that the entry of `f` with `stamp` holds `f`'s bytes (best effort: a record
    /// not written means a check by the next process).
    pub fn record(&self, stamp: &FileStamp, f: &FileEntry) {
        let Some(dir) = &self.dir else {
            return;
        };
        let hex = f.sha256_hex();
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".tmp-{}-{n}", std::process::id()));
        let written = fs::write(&tmp, stamp.record(&f.sha256, &digest(f)))
            .and_then(|()| fs::rename(&tmp, dir.join(&hex)));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            tracing::debug!("file cache: no check record for {hex}: {e}");
        }
    }

    /// Removes the record of entry `hex` (the entry was dropped).
    pub fn forget(&self, hex: &str) {
        if let Some(dir) = &self.dir {
            let _ = fs::remove_file(dir.join(hex));
        }
    }

    /// [`CheckedRecords::prune`] on a thread of its own (a directory of many stale records
    /// must not hold up the mount's start), for the entries of the cache at `cache_dir`
    /// (`<2 hex>/<64 hex>`).
    pub fn prune_in_background(&self, cache_dir: &Path) {
        let Some(dir) = self.dir.clone() else {
            return;
        };
        let cache = cache_dir.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("modelcas-file-prune".into())
            .spawn(move || {
                let records = CheckedRecords {
                    dir: Some(dir),
                    stamper: Stamper::new(),
                    counter: AtomicU64::new(0),
                };
                records.prune(|hex| cache.join(&hex[..2]).join(hex).is_file())
            });
        if let Err(e) = spawned {
            tracing::debug!("file cache: no pruning of check records: {e}");
        }
    }

    /// Removes records whose entry is gone (`has_entry(hex)` false) and temporary records
    /// a dead process left; returns how many records were removed.
    pub fn prune(&self, has_entry: impl Fn(&str) -> bool) -> usize {
        let Some(dir) = &self.dir else {
            return 0;
        };
        let Ok(names) = fs::read_dir(dir) else {
            return 0;
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for e in names.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let orphan = if name.starts_with(".tmp-") {
                let age = e.metadata().ok().and_then(|m| m.modified().ok());
                age.is_some_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TEMP)
            } else {
                !is_sha256_hex(&name) || !has_entry(&name)
            };
            if orphan && fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// The record of entry `hex`, if it is a regular file of a record's length.
    fn read(&self, hex: &str) -> Option<Vec<u8>> {
        let mut file = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.dir.as_ref()?.join(hex))
            .ok()?;
        let m = file.metadata().ok()?;
        if !m.is_file() || m.len() != STAMP_RECORD_LEN as u64 {
            return None;
        }
        let mut v = Vec::with_capacity(STAMP_RECORD_LEN);
        io::Read::read_to_end(
            &mut io::Read::take(&mut file, STAMP_RECORD_LEN as u64 + 1),
            &mut v,
        )
        .ok()?;
        Some(v)
    }
}

/// The digest of `f`'s chunk list, as ingest's stamp records carry it.
fn digest(f: &FileEntry) -> ChunkListDigest {
    let chunks: Vec<_> = f.chunks.iter().map(|c| (c.id, c.raw_len)).collect();
    chunk_list_digest(&chunks)
}

fn is_sha256_hex(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
