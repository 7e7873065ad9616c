//! What the node file cache knows about its entries' bytes: an entry is handed out only
//! once this process has checked its content, and only while the file is, by its stamp,
//! the one that was checked.
//!
//! * **Check.** [`content_matches`] reads the entry and compares every chunk with the
//!   manifest's BLAKE3 id of that chunk (the ids the store's own reads are checked
//!   against; the chunk lengths must add up to the file's size). Runs of chunks are hashed
//!   in parallel on the rayon pool, so a check runs at several GB/s where one SHA-256 of
//!   the whole file would run on one core.
//! * **Stamp.** [`Stamp::of`] takes `statx` of the open file: device, mount id, inode,
//!   size, birth time and ctime. Any write, truncation, `chmod`, link or rename of the file
//!   moves its ctime, which userspace cannot set; another file renamed into the entry's
//!   place has another inode or birth time. The stamp is taken before the check and again
//!   after it, and the verdict holds only if both are the same: a file written while it
//!   was read is not trusted. (Kernels before 6.13 keep ctime to a coarse clock tick: a
//!   write in the very tick of the check's first stamp, after the check read those bytes,
//!   would leave the stamp as it was; from 6.13, a ctime that was looked at moves on any
//!   change.)
//! * **Records.** [`Checks`] keeps, per entry (by the file's sha256), the stamp it was
//!   checked under and the verdict, in memory only: a process that starts checks each
//!   entry again at its first open. One entry is checked by one caller at a time; the
//!   others wait for its verdict instead of reading the file a second time.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use format::{ChunkId, Sha256};
use parking_lot::{Condvar, Mutex};
use quick_cache::sync::Cache;
use rayon::prelude::*;
use repo::manifest::FileEntry;

/// Most records kept (a sha256 and a stamp: about 150 bytes each); past it the least
/// useful are forgotten (their entries are checked again at their next open).
pub const MAX_RECORDS: usize = 100_000;

/// Parts of [`records_cache`]: a power of two that divides [`MAX_RECORDS`].
const RECORDS_SHARDS: usize = 32;
const _: () = assert!(MAX_RECORDS.is_multiple_of(RECORDS_SHARDS));

/// The records: at most [`MAX_RECORDS`] on any machine. quick_cache splits its bound into
/// parts (by default four per core, rounded to a power of two) and rounds each part up:
/// 100,000 in 64 parts (a 16-core machine) would hold 100,032. 32 parts divide it.
fn records_cache() -> Cache<Sha256, (Stamp, Verdict)> {
    let options = quick_cache::OptionsBuilder::new()
        .shards(RECORDS_SHARDS)
        .estimated_items_capacity(MAX_RECORDS)
        .weight_capacity(MAX_RECORDS as u64)
        .build()
        .unwrap_or_else(|e| unreachable!("constant options: {e}"));
    Cache::with_options(
        options,
        quick_cache::UnitWeighter,
        Default::default(),
        Default::default(),
    )
}

/// Bytes read and hashed by one task of a check (whole chunks, at least one, so at most
/// this plus `format::MAX_CHUNK_LEN`): the buffer each of the pool's threads holds while a
/// check runs.
const RUN_BYTES: u64 = 2 << 20;

/// What `statx` says of an open file, enough to know it is the file that was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: (u32, u32),
    mnt_id: u64,
    ino: u64,
    /// The file's size in bytes.
    pub size: u64,
    btime: (i64, u32),
    ctime: (i64, u32),
}

impl Stamp {
    /// The stamp of `file` now. Fails where `statx` cannot say the inode, size and ctime.
    pub fn of(file: &File) -> io::Result<Stamp> {
        let mask = libc::STATX_INO
            | libc::STATX_SIZE
            | libc::STATX_CTIME
            | libc::STATX_BTIME
            | libc::STATX_MNT_ID;
        // SAFETY: statx writes into the zeroed struct we own (all-zero is a valid statx);
        // the path is an empty C string, and AT_EMPTY_PATH makes it describe the open
        // descriptor itself.
        let (rc, sx) = unsafe {
            let mut sx: libc::statx = std::mem::zeroed();
            let rc = libc::statx(
                file.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_EMPTY_PATH,
                mask,
                &mut sx,
            );
            (rc, sx)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let need = libc::STATX_INO | libc::STATX_SIZE | libc::STATX_CTIME;
        if sx.stx_mask & need != need {
            return Err(io::Error::other("statx gives no inode, size or ctime"));
        }
        let time = |t: libc::statx_timestamp| (t.tv_sec, t.tv_nsec);
        let has = |bit| sx.stx_mask & bit != 0;
        Ok(Stamp {
            dev: (sx.stx_dev_major, sx.stx_dev_minor),
            mnt_id: if has(libc::STATX_MNT_ID) {
                sx.stx_mnt_id
            } else {
                0
            },
            ino: sx.stx_ino,
            size: sx.stx_size,
            btime: if has(libc::STATX_BTIME) {
                time(sx.stx_btime)
            } else {
                (0, 0)
            },
            ctime: time(sx.stx_ctime),
        })
    }

    /// The same inode (device and inode number) as `other`.
    pub fn same_inode(&self, other: &Stamp) -> bool {
        self.dev == other.dev && self.ino == other.ino
    }
}

/// Whether `file` holds exactly the bytes of `f`: its length, and each chunk's BLAKE3.
/// An I/O error is an error, not a mismatch.
pub fn content_matches(file: &File, f: &FileEntry) -> io::Result<bool> {
    // Chunks no chunker makes are refused unread (they also bound a task's buffer).
    if f.chunks.iter().any(|c| c.raw_len > format::MAX_CHUNK_LEN) {
        return Ok(false);
    }
    let total: u64 = f.chunks.iter().map(|c| u64::from(c.raw_len)).sum();
    if total != f.size || file.metadata()?.len() != f.size {
        return Ok(false);
    }
    let runs = runs(f);
    let bad = runs
        .par_iter()
        .map(|r| run_matches(file, f, r))
        .find_any(|r| !matches!(r, Ok(true)));
    match bad {
        None => Ok(true),
        Some(r) => r,
    }
}

/// One task of a check: chunks `first..end` of a file, starting at byte `offset`.
struct Run {
    first: usize,
    end: usize,
    offset: u64,
    len: u64,
}

/// The chunks of `f` cut into runs of about [`RUN_BYTES`].
fn runs(f: &FileEntry) -> Vec<Run> {
    let mut out = Vec::new();
    let (mut first, mut offset, mut len) = (0, 0u64, 0u64);
    for (i, c) in f.chunks.iter().enumerate() {
        len += u64::from(c.raw_len);
        if len >= RUN_BYTES || i + 1 == f.chunks.len() {
            out.push(Run {
                first,
                end: i + 1,
                offset,
                len,
            });
            offset += len;
            (first, len) = (i + 1, 0);
        }
    }
    out
}

fn run_matches(file: &File, f: &FileEntry, r: &Run) -> io::Result<bool> {
    thread_local! {
        /// The run's buffer, kept by each thread of the pool between runs: a fresh one
        /// costs a page fault per page (more CPU than the hashing, measured).
        static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let len = usize::try_from(r.len).map_err(io::Error::other)?;
    BUF.with_borrow_mut(|buf| {
        buf.resize(len, 0);
        let matched = hash_run(file, f, r, &mut buf[..len]);
        if buf.capacity() > 2 * RUN_BYTES as usize {
            *buf = Vec::new(); // a run of one huge chunk is not kept
        }
        matched
    })
}

fn hash_run(file: &File, f: &FileEntry, r: &Run, buf: &mut [u8]) -> io::Result<bool> {
    file.read_exact_at(buf, r.offset)?;
    let mut at = 0usize;
    for c in &f.chunks[r.first..r.end] {
        let n = c.raw_len as usize;
        if ChunkId::of(&buf[at..at + n]) != c.id {
            return Ok(false);
        }
        at += n;
    }
    Ok(true)
}

/// The verdict on an entry checked under a stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its bytes are the file's.
    Good,
    /// Its bytes are not (it was dropped).
    Damaged,
}

/// The records and the checks running, under one lock (a claim looks at both at once).
struct State {
    /// Per entry (file sha256): the stamp it was last checked under, and the verdict; at
    /// most [`MAX_RECORDS`].
    records: Cache<Sha256, (Stamp, Verdict)>,
    /// Entries being checked now (not a cache: one per check running).
    busy: HashSet<Sha256>,
}

/// The checks of this process (see the module doc).
pub struct Checks {
    state: Mutex<State>,
    done: Condvar,
}

impl Default for Checks {
    fn default() -> Checks {
        Checks {
            state: Mutex::new(State {
                records: records_cache(),
                busy: HashSet::new(),
            }),
            done: Condvar::new(),
        }
    }
}

/// What [`Checks::claim`] found.
pub enum Claim<'a> {
    /// The entry was checked under this very stamp.
    Known(Verdict),
    /// The caller checks it now and ends with [`Pending::finish`] (dropped unfinished, as
    /// by a panic, it records nothing and lets a waiter check).
    Mine(Pending<'a>),
    /// Another caller's check of the entry has just ended: stamp the file again and ask
    /// again.
    Waited,
}

/// A check in progress.
pub struct Pending<'a> {
    checks: &'a Checks,
    sha: Sha256,
    record: Option<(Stamp, Verdict)>,
}

impl Pending<'_> {
    /// Ends the check: records `verdict` under `stamp` when given (None: nothing is
    /// recorded, and the next open checks again).
    pub fn finish(mut self, record: Option<(Stamp, Verdict)>) {
        self.record = record;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut s = self.checks.state.lock();
        s.busy.remove(&self.sha);
        match self.record.take() {
            Some(r) => s.records.insert(self.sha, r),
            None => {
                s.records.remove(&self.sha);
            }
        }
        self.checks.done.notify_all();
    }
}

impl Checks {
    /// The verdict recorded for entry `sha` under `stamp`, or the right to check it. When
    /// another caller is checking the entry, waits until that check ends and says so: the
    /// caller stamps its file again (the check marks the file as used, which moves its
    /// ctime) and asks again.
    pub fn claim(&self, sha: &Sha256, stamp: &Stamp) -> Claim<'_> {
        let mut s = self.state.lock();
        if let Some((st, v)) = s.records.get(sha) {
            if st == *stamp {
                return Claim::Known(v);
            }
        }
        if s.busy.insert(*sha) {
            return Claim::Mine(Pending {
                checks: self,
                sha: *sha,
                record: None,
            });
        }
        // Tests hold a second opener here, known to wait for the first one's check.
        drop(s);
        repo::failpoint::pause("file-cache-check-wait");
        s = self.state.lock();
        while s.busy.contains(sha) {
            self.done.wait(&mut s);
        }
        Claim::Waited
    }

    /// The verdict recorded for `sha`, whatever its stamp (tests).
    pub fn recorded(&self, sha: &Sha256) -> Option<Verdict> {
        let s = self.state.lock();
        s.records.get(sha).map(|r| r.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use repo::manifest::ChunkRef;

    fn entry(lens: &[u32]) -> FileEntry {
        FileEntry {
            path: "f".into(),
            size: lens.iter().map(|&n| u64::from(n)).sum(),
            sha256: Sha256([0; 32]),
            executable: false,
            chunks: lens
                .iter()
                .map(|&raw_len| ChunkRef {
                    id: ChunkId([0; 32]),
                    pack: 0,
                    offset: 0,
                    frame_len: 0,
                    raw_len,
                })
                .collect(),
        }
    }

    #[test]
    fn runs_cover_every_chunk_once_in_order() {
        let big = (RUN_BYTES / 3 + 1) as u32;
        let f = entry(&[big, big, big, 5, big, 1]);
        let r = runs(&f);
        assert_eq!(r.len(), 2);
        let (mut next, mut at) = (0, 0);
        for run in &r {
            assert_eq!((run.first, run.offset), (next, at));
            let len: u64 = f.chunks[run.first..run.end]
                .iter()
                .map(|c| u64::from(c.raw_len))
                .sum();
            assert_eq!(run.len, len);
            (next, at) = (run.end, at + len);
        }
        assert_eq!((next, at), (f.chunks.len(), f.size));
        assert!(runs(&entry(&[])).is_empty());
    }

    #[test]
    fn chunk_lengths_that_do_not_add_up_to_the_size_fail() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("e");
        std::fs::write(&p, b"abcd").unwrap();
        let mut f = entry(&[4]);
        f.chunks[0].id = ChunkId::of(b"abcd");
        let file = File::open(&p).unwrap();
        assert!(content_matches(&file, &f).unwrap());
        f.size = 3;
        assert!(!content_matches(&file, &f).unwrap());
        f.size = 4;
        f.chunks[0].id.0[0] ^= 1;
        assert!(!content_matches(&file, &f).unwrap());
    }

    #[test]
    fn a_stamp_moves_with_a_write_and_with_a_rename_over_the_file() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("e");
        std::fs::write(&p, b"abcd").unwrap();
        let s0 = Stamp::of(&File::open(&p).unwrap()).unwrap();
        assert_eq!(s0, Stamp::of(&File::open(&p).unwrap()).unwrap());
        // Written in place (the ctime moves too, unless the kernel's coarse clock has not
        // ticked since the file was made: not asserted here).
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(b"e", 4)
            .unwrap();
        let s1 = Stamp::of(&File::open(&p).unwrap()).unwrap();
        assert_ne!(s0, s1);
        assert_eq!(s1.size, 5);
        assert!(s0.same_inode(&s1));
        // The same bytes renamed over it: another inode.
        let q = t.path().join("q");
        std::fs::write(&q, b"abcde").unwrap();
        std::fs::rename(&q, &p).unwrap();
        let s2 = Stamp::of(&File::open(&p).unwrap()).unwrap();
        assert!(!s1.same_inode(&s2));
    }

    #[test]
    fn records_keep_to_their_bound() {
        let checks = Checks::default();
        let stamp = Stamp {
            dev: (8, 1),
            mnt_id: 1,
            ino: 2,
            size: 3,
            btime: (4, 0),
            ctime: (5, 0),
        };
        assert_eq!(checks.state.lock().records.capacity(), MAX_RECORDS as u64);
        let n = MAX_RECORDS * 4;
        let mut most = 0;
        for i in 0..n {
            let sha = Sha256(*blake3::hash(&(i as u64).to_le_bytes()).as_bytes());
            let Claim::Mine(p) = checks.claim(&sha, &stamp) else {
                panic!("entry {i} was known before it was checked");
            };
            p.finish(Some((stamp, Verdict::Good)));
            let s = checks.state.lock();
            most = most.max(s.records.len());
            assert!(s.records.len() <= MAX_RECORDS);
            assert!(s.records.peek(&sha).is_some(), "record {i} just made");
        }
        let kept = checks.state.lock().records.len();
        assert!(kept > MAX_RECORDS / 2, "{kept}");
        println!(
            "cache-bound read file_cache verify records: bound {MAX_RECORDS} entries; after {n} inserts: \
             {kept} entries (at most {most})"
        );
        // The last one checked is known under its stamp.
        let last = Sha256(*blake3::hash(&(n as u64 - 1).to_le_bytes()).as_bytes());
        assert!(matches!(
            checks.claim(&last, &stamp),
            Claim::Known(Verdict::Good)
        ));
    }
}
