//! The node's whole-file cache: files of revisions kept whole on local disk once their
//! sha256 has been checked, so that later opens, in this process or after a restart, read
//! them at the disk's speed (the mount hands them to the kernel with FUSE passthrough)
//! instead of fetching and decoding chunks again.
//!
//! * Entries live in an [`LruDir`] named by the file's sha256 (`<dir>/<2 hex>/<64 hex>`)
//!   and hold the file's bytes exactly. Being named by content, an entry never goes stale:
//!   removing a revision from the store, or another revision of the same path, cannot
//!   change what an entry holds.
//! * An entry is made by [`FileCache::fill`]: the file is streamed from the store by the
//!   whole-file reader (every chunk decoded, the file's sha256 compared at the end) into a
//!   temporary file, which is synced to disk and then linked into place. An entry
//!   therefore exists only whole and verified, also after a crash; the directory is made
//!   private to the mount's user (mode 0700).
//! * An entry is handed out ([`FileCache::open_file`]) only once its bytes are known to be
//!   the file's under the stamp (`statx`: inode, size, ctime, birth time, mount) the file
//!   still has ([`verify`]): checked by this process (every chunk's BLAKE3, in parallel),
//!   or found right by an earlier process (its check or its fill) under exactly the stamp
//!   the file has now in this boot and mount ([`checked`]: a record on disk beside the
//!   entries). Otherwise the first open of the entry reads and checks it, and later opens
//!   compare the stamp. An entry that fails is removed and the file read from the store.
//! * Fills run in the background ([`FileCache::request`]): one thread at the lowest CPU
//!   priority, one file at a time, requests deduplicated and at most [`MAX_PENDING`]
//!   waiting, so that a load still running is not slowed by copies of the files it already
//!   read. A fill also waits until the mount has decoded no read for [`QUIET`] (the mount
//!   calls [`FileCache::note_read`]), at most [`MAX_DEFER`] after it was asked for: on 2
//!   cores the lowest priority was not enough, a fill running beside a load took the CPU
//!   the load left while it waited on the store (a cold read of r4 from S3: 2.26 s median
//!   with fills beside it, 1.93 s with them waiting; docs/BENCHMARKS.md). The wait is
//!   looked at before a fill starts: a load that begins during a long fill shares the CPU
//!   with that one fill. A file larger than half the cache is never filled, nor one
//!   smaller than [`MIN_FILE_BYTES`]: a small file costs one read through the mount, less than its fill
//!   (a write and a sync; a walk of 20,000 files of 1-16 KiB spent half the mount's CPU
//!   filling them, docs/BENCHMARKS.md), and opening it does not look for an entry.

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use format::node::{FILE_CACHE_MARK, FILE_CACHE_MARK_NAME};
use format::Sha256;
use parking_lot::{Condvar, Mutex};
use repo::lru_dir::LruDir;
use repo::manifest::{FileEntry, Manifest};
use repo::{Result, Store, StoreError};

use crate::file_reader::FileReader;
use crate::metrics::{self, METRICS};
use crate::progress::NoProgress;

pub mod checked;
pub mod verify;

use checked::CheckedRecords;
use verify::{Checks, Claim, Stamp, Verdict};

/// Files smaller than this are never kept whole (see the module's doc): configs,
/// tokenizer configs and indexes are read through the mount; weights are kept.
pub const MIN_FILE_BYTES: u64 = 1 << 20;

/// Fill requests waiting at most; more are dropped (a later open asks again).
pub const MAX_PENDING: usize = 4096;

/// A fill starts only after the mount has decoded no read for this long...
pub const QUIET: Duration = Duration::from_secs(1);

/// ...or once it has waited this long since it was asked for, whatever the reads: a node
/// that never stops reading still gets its files kept.
pub const MAX_DEFER: Duration = Duration::from_secs(30);

/// One file to make whole on the node.
struct Job {
    store: Store,
    manifest: Arc<Manifest>,
    index: usize,
    asked: Instant,
}

#[derive(Default)]
struct Pending {
    queue: VecDeque<Job>,
    /// sha256 of the files queued or being filled.
    queued: HashSet<Sha256>,
    /// Whether the fill thread was started.
    started: bool,
    /// Fills finished (done, failed or skipped), for [`FileCache::wait_idle`].
    finished: u64,
    /// Fills that waited for the reads to stop.
    deferred: u64,
}

/// What [`FileCache::reuse_held`] found of a file held open for an earlier open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldFile {
    /// The file that was checked (same stamp), or checked again and right.
    Good,
    /// Found damaged, written again from the store and right now: what was read from it
    /// before (pages the kernel may keep) may have been wrong.
    Repaired,
    /// Damaged, and not made right: not to be handed out.
    Bad,
}

/// Whole, verified files of revisions on the node's disk.
pub struct FileCache {
    dir: LruDir,
    pending: Mutex<Pending>,
    wake: Condvar,
    /// When the cache was opened: the origin of `last_read_ms`.
    born: Instant,
    /// Milliseconds after `born` of the mount's last decoded read, plus one (0: none yet).
    last_read_ms: AtomicU64,
    /// [`QUIET`] and [`MAX_DEFER`] in milliseconds, unless changed with
    /// [`FileCache::set_deferral`].
    quiet_ms: AtomicU64,
    max_defer_ms: AtomicU64,
    /// What this process checked of its entries.
    checks: Checks,
    /// What earlier processes (and this one) found, kept on disk under the entries' stamps.
    checked: CheckedRecords,
    /// Entries checked (read and hashed) so far.
    checks_run: AtomicU64,
}

impl std::fmt::Debug for FileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileCache")
            .field("dir", &self.dir.dir())
            .field("bytes", &self.dir.bytes())
            .field("max_bytes", &self.dir.max_bytes())
            .finish()
    }
}

impl FileCache {
    /// Opens (creating, mode 0700) the cache directory, limited to `max_bytes`. A directory
    /// marked with another layout (`FORMAT`) is refused, naming what it holds.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Arc<FileCache>> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| StoreError::io(dir, e))?;
        let mark = dir.join(FILE_CACHE_MARK_NAME);
        match fs::read(&mark) {
            Ok(m) if m == FILE_CACHE_MARK => {}
            Ok(m) => {
                return Err(StoreError::BadSource {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "not a file cache of this version (FORMAT holds {:?}, expected {:?}); \
                         point --file-cache elsewhere or empty the directory",
                        String::from_utf8_lossy(&m[..m.len().min(32)]),
                        String::from_utf8_lossy(FILE_CACHE_MARK),
                    ),
                })
            }
            Err(_) => fs::write(&mark, FILE_CACHE_MARK).map_err(|e| StoreError::io(&mark, e))?,
        }
        let lru = LruDir::open(dir, max_bytes)?;
        metrics::set(&METRICS.file_cache_bytes, lru.bytes());
        let checked = CheckedRecords::open(dir);
        checked.prune_in_background(dir);
        Ok(Arc::new(FileCache {
            dir: lru,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            born: Instant::now(),
            last_read_ms: AtomicU64::new(0),
            quiet_ms: AtomicU64::new(millis(QUIET)),
            max_defer_ms: AtomicU64::new(millis(MAX_DEFER)),
            checks: Checks::default(),
            checked,
            checks_run: AtomicU64::new(0),
        }))
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        self.dir.dir()
    }

    /// The whole file of `f`, opened for reading, if the cache has it and its bytes are
    /// known to be `f`'s: checked by this process under the stamp the file has now (see
    /// [`verify`]), or checked now (a concurrent open of the same entry waits for that
    /// check). An entry that fails (wrong length, other bytes, changed while it was
    /// checked, unreadable) is removed, counted and logged; the caller reads the store.
    pub fn open_file(&self, f: &FileEntry) -> Option<fs::File> {
        if !self.fits(f) {
            return None;
        }
        let hex = f.sha256_hex();
        let path = self.dir.path(&hex);
        // Only a regular file, not through a link (a FIFO put there would block the open).
        if !fs::symlink_metadata(&path).ok()?.is_file() {
            self.drop_entry(&hex, None, "is not a regular file");
            return None;
        }
        let file = fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .ok()?;
        if self.verdict(f, &hex, &file, true) != Some(Verdict::Good) {
            return None;
        }
        self.dir.note_use(&path);
        Some(file)
    }

    /// Whether the entry `file` of `f`, which this process holds open for an earlier open
    /// still in use, may serve another open: by its stamp it is the file that was checked,
    /// or it is checked again now. A held file found damaged is written again in place
    /// from `store` (file `f` of `manifest`: every byte the reader gives is checked, and
    /// the file is then checked again under a new stamp). [`HeldFile::Bad`]: it could not
    /// be made right, and the caller does not hand it out.
    pub fn reuse_held(
        &self,
        store: &Store,
        manifest: &Manifest,
        f: &FileEntry,
        file: &fs::File,
    ) -> HeldFile {
        let hex = f.sha256_hex();
        if self.verdict(f, &hex, file, false) == Some(Verdict::Good) {
            return HeldFile::Good;
        }
        if let Err(e) = rewrite(store, manifest, f, file) {
            tracing::warn!("file cache: {}: a held file not written again: {e}", f.path);
            return HeldFile::Bad;
        }
        tracing::warn!(
            "file cache: {}: a held file written again from the store",
            f.path
        );
        match self.verdict(f, &hex, file, false) {
            Some(Verdict::Good) => HeldFile::Repaired,
            _ => HeldFile::Bad,
        }
    }

    /// The verdict on the open entry `file` of `f` under the stamp it has now: recorded by
    /// this process under that very stamp, or on disk by an earlier one ([`checked`]), or
    /// checked now (a concurrent check of the entry is waited for). `mark`: the entry is
    /// marked as used before a check. None: no stamp, no check ended, the file is open for
    /// writing, or it kept changing under checks.
    fn verdict(&self, f: &FileEntry, hex: &str, file: &fs::File, mark: bool) -> Option<Verdict> {
        let path = self.dir.path(hex);
        // A concurrent check of this entry moves its ctime: ask again with a fresh stamp
        // (a file that keeps changing under checks is not used).
        for _ in 0..3 {
            let stamp = self.stamp(file, &path)?;
            if stamp.size != f.size {
                self.drop_entry(hex, Some(&stamp), "has the wrong length");
                return Some(Verdict::Damaged);
            }
            match self.checks.claim(&f.sha256, &stamp) {
                Claim::Known(v) => return Some(v),
                Claim::Waited => continue,
                Claim::Mine(pending) => {
                    if self.checked.trusted(file, f) && self.stamp(file, &path) == Some(stamp) {
                        pending.finish(Some((stamp, Verdict::Good)));
                        return Some(Verdict::Good);
                    }
                    // Marked as used first: the mark moves the ctime, which the check's
                    // stamps must already hold.
                    if mark {
                        let _ = file.set_modified(std::time::SystemTime::now());
                    }
                    let verdict = self.check(f, hex, file);
                    let v = verdict.map(|(_, v)| v);
                    pending.finish(verdict);
                    return v;
                }
            }
        }
        None
    }

    /// Checks the entry `file` of `f` (see [`verify`]): the stamp it was checked under and
    /// the verdict, or None when the file could not be stamped.
    fn check(&self, f: &FileEntry, hex: &str, file: &fs::File) -> Option<(Stamp, Verdict)> {
        let path = self.dir.path(hex);
        let before = self.stamp(file, &path)?;
        // An entry someone holds open for writing (a descriptor, or a writable shared
        // mapping: its dirty pages take writes that move no time) is not used this time.
        let writers = repo::file_stamp::open_for_writing(file);
        if writers == Some(true) {
            tracing::warn!(
                "file cache: {} is open for writing; not used",
                path.display()
            );
            return None;
        }
        // Recorded for the next process only where the kernel says no one writes it, after
        // its dirty pages were written back (then any later write moves the stamp).
        let on_disk = self
            .checked
            .stamp(file)
            .filter(|_| repo::file_stamp::no_writers(file));
        repo::failpoint::pause("file-cache-check");
        let matched = verify::content_matches(file, f);
        self.checks_run.fetch_add(1, Ordering::Relaxed);
        METRICS.file_cache_checks.inc();
        METRICS.file_cache_check_bytes.inc_by(f.size);
        let after = self.stamp(file, &path)?;
        let why = match matched {
            Ok(true) if after == before => {
                // Recorded for the next process only under a stamp that held throughout.
                if let Some(s) = on_disk.filter(|s| self.checked.stamp(file) == Some(*s)) {
                    self.checked.record(&s, f);
                }
                return Some((before, Verdict::Good));
            }
            // Right bytes, but the stamp moved (another mount marking it used, say): not
            // used this time, not dropped; the next open checks it again.
            Ok(true) => return None,
            Ok(false) => "does not hold the file's bytes".to_string(),
            Err(e) => format!("could not be read ({e})"),
        };
        self.drop_entry(hex, Some(&before), &why);
        Some((before, Verdict::Damaged))
    }

    /// The stamp of the entry `file` at `path`; None (logged) when statx fails.
    fn stamp(&self, file: &fs::File, path: &Path) -> Option<Stamp> {
        match Stamp::of(file) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!("file cache: {}: no stamp ({e}); not used", path.display());
                None
            }
        }
    }

    /// Removes entry `hex`, if its path still names the file stamped `stamp` (not a newer
    /// fill; None: whatever it names), counting and logging why.
    fn drop_entry(&self, hex: &str, stamp: Option<&Stamp>, why: &str) {
        let path = self.dir.path(hex);
        let same = match stamp {
            None => true,
            Some(stamp) => fs::File::open(&path)
                .ok()
                .and_then(|f| Stamp::of(&f).ok())
                .is_some_and(|now| now.same_inode(stamp)),
        };
        if same {
            self.checked.forget(hex);
            self.dir.remove(hex);
            metrics::set(&METRICS.file_cache_bytes, self.dir.bytes());
        }
        METRICS.file_cache_damaged.inc();
        tracing::warn!(
            "file cache: {} {why}; removed, the file is read from the store",
            path.display()
        );
    }

    /// Entries checked since the cache was opened (tests).
    pub fn checks_run(&self) -> u64 {
        self.checks_run.load(Ordering::Relaxed)
    }

    /// Whether `f` could be kept: at least [`MIN_FILE_BYTES`] and at most half the cache.
    pub fn fits(&self, f: &FileEntry) -> bool {
        f.size >= MIN_FILE_BYTES && f.size <= self.dir.max_bytes() / 2
    }

    /// Makes `f` (of `manifest`) whole in the cache now, unless it is there already or does
    /// not fit. Returns whether an entry was written.
    pub fn fill(&self, store: &Store, manifest: &Manifest, f: &FileEntry) -> Result<bool> {
        let hex = f.sha256_hex();
        if !self.fits(f) || self.dir.path(&hex).exists() {
            return Ok(false);
        }
        let tmp = self.dir.temp(&hex)?;
        let written = (|| -> Result<()> {
            let file = fs::File::create_new(&tmp).map_err(|e| StoreError::io(&tmp, e))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
            FileReader::new(store, manifest, f)?.copy_to_unchecked_chunks(&mut w, &NoProgress)?;
            w.flush().map_err(|e| StoreError::io(&tmp, e))?;
            let file = w
                .into_inner()
                .map_err(|e| StoreError::io(&tmp, e.into_error()))?;
            file.sync_all().map_err(|e| StoreError::io(&tmp, e))
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        // Tests kill the mount here: a fill synced, not yet linked into place.
        repo::failpoint::pause("file-cache-fill-synced");
        let ok = self.dir.commit(&tmp, &hex, f.size);
        metrics::set(&METRICS.file_cache_bytes, self.dir.bytes());
        if ok {
            // What the fill compared with the sha256 is what it streamed, not what the
            // file holds now (another writer of the temporary file would go unseen): the
            // entry is checked now, read back from the page cache, which records the
            // verdict for this process and, with no writer, for the next ones; a check
            // that fails drops the entry.
            let path = self.dir.path(&hex);
            if let Ok(entry) = fs::File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
            {
                self.verdict(f, &hex, &entry, false);
            }
            METRICS.file_cache_fills.inc();
            METRICS.file_cache_fill_bytes.inc_by(f.size);
        }
        Ok(ok)
    }

    /// Asks for file `index` of `manifest` to be made whole in the background (nothing if
    /// it is there, queued, does not fit, or too many requests wait).
    pub fn request(self: &Arc<Self>, store: &Store, manifest: Arc<Manifest>, index: usize) {
        let Some(f) = manifest.files.get(index) else {
            return;
        };
        if !self.fits(f) || self.dir.path(&f.sha256_hex()).exists() {
            return;
        }
        let mut p = self.pending.lock();
        if p.queue.len() >= MAX_PENDING || !p.queued.insert(f.sha256) {
            return;
        }
        p.queue.push_back(Job {
            store: store.clone(),
            manifest,
            index,
            asked: Instant::now(),
        });
        if !p.started {
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("modelcas-file-fill".into())
                .spawn(move || me.fill_loop());
            match spawned {
                Ok(_) => p.started = true,
                Err(e) => tracing::warn!("file cache: cannot start the fill thread: {e}"),
            }
        }
        self.wake.notify_all();
    }

    /// Records that the mount is serving a read it decodes from the store: fills wait until
    /// such reads have stopped for [`QUIET`]. Cheap (one clock read and one store).
    pub fn note_read(&self) {
        let ms = millis(self.born.elapsed()).saturating_add(1);
        self.last_read_ms.store(ms, Ordering::Relaxed);
    }

    /// Sets how long reads must have stopped before a fill starts and how long a fill
    /// waits at most ([`QUIET`] and [`MAX_DEFER`] by default; tests change them), and wakes
    /// a fill waiting on the old values.
    pub fn set_deferral(&self, quiet: Duration, max_defer: Duration) {
        self.quiet_ms.store(millis(quiet), Ordering::Relaxed);
        self.max_defer_ms
            .store(millis(max_defer), Ordering::Relaxed);
        let _p = self.pending.lock();
        self.wake.notify_all();
    }

    /// Fills that had to wait for the mount's reads to stop.
    pub fn fills_deferred(&self) -> u64 {
        self.pending.lock().deferred
    }

    /// How much longer a fill asked for at `asked` waits: zero once the reads have been
    /// quiet for the quiet period or the fill has waited its longest.
    fn still_to_wait(&self, asked: Instant) -> Duration {
        let last = self.last_read_ms.load(Ordering::Relaxed);
        if last == 0 {
            return Duration::ZERO;
        }
        let quiet = Duration::from_millis(self.quiet_ms.load(Ordering::Relaxed));
        let since_read = self
            .born
            .elapsed()
            .saturating_sub(Duration::from_millis(last - 1));
        let for_quiet = quiet.saturating_sub(since_read);
        let max_defer = Duration::from_millis(self.max_defer_ms.load(Ordering::Relaxed));
        let for_cap = max_defer.saturating_sub(asked.elapsed());
        for_quiet.min(for_cap)
    }

    /// Waits (on `wake`, so [`FileCache::set_deferral`] cuts it short) until the fill asked
    /// for at `asked` may start.
    fn wait_for_quiet(&self, asked: Instant) {
        let mut p = self.pending.lock();
        let mut counted = false;
        loop {
            let wait = self.still_to_wait(asked);
            if wait.is_zero() {
                return;
            }
            if !counted {
                counted = true;
                p.deferred += 1;
                METRICS.file_cache_fills_deferred.inc();
                self.wake.notify_all();
            }
            self.wake.wait_for(&mut p, wait);
        }
    }

    /// Waits until no fill is queued or running (tests and benchmarks).
    pub fn wait_idle(&self) {
        let mut p = self.pending.lock();
        while !p.queued.is_empty() {
            self.wake.wait(&mut p);
        }
    }

    /// Fills finished since the cache was opened (done, failed or skipped).
    pub fn fills_finished(&self) -> u64 {
        self.pending.lock().finished
    }

    /// The fill thread: lowest priority, and a pool of one thread of its own for the
    /// whole-file reader (started from here, so it inherits the priority).
    fn fill_loop(self: Arc<Self>) {
        lower_priority();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "modelcas-file-fill-io".into())
            .build();
        let pool = match pool {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("file cache: no fill pool: {e}");
                return;
            }
        };
        loop {
            let job = {
                let mut p = self.pending.lock();
                loop {
                    if let Some(j) = p.queue.pop_front() {
                        break j;
                    }
                    self.wake.wait(&mut p);
                }
            };
            self.wait_for_quiet(job.asked);
            let f = &job.manifest.files[job.index];
            if let Err(e) = pool.install(|| self.fill(&job.store, &job.manifest, f)) {
                METRICS.file_cache_fill_errors.inc();
                tracing::warn!("file cache: {}: {e}", f.path);
            }
            let mut p = self.pending.lock();
            p.queued.remove(&f.sha256);
            p.finished += 1;
            self.wake.notify_all();
        }
    }
}

/// Writes `f`'s bytes (file `f` of `manifest`, from `store`) over the entry `file`, open
/// for reading, in place (through `/proc/self/fd`: the same inode, wherever its name went),
/// then syncs it. Bytes written before an error may be wrong: the caller checks the file
/// again before any use.
fn rewrite(store: &Store, manifest: &Manifest, f: &FileEntry, file: &fs::File) -> Result<()> {
    let fd = std::path::PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let out = fs::File::options()
        .write(true)
        .open(&fd)
        .map_err(|e| StoreError::io(&fd, e))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, &out);
    FileReader::new(store, manifest, f)?.copy_to_unchecked_chunks(&mut w, &NoProgress)?;
    w.flush().map_err(|e| StoreError::io(&fd, e))?;
    drop(w);
    out.set_len(f.size).map_err(|e| StoreError::io(&fd, e))?;
    out.sync_all().map_err(|e| StoreError::io(&fd, e))
}

/// `d` in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Puts the calling thread at the lowest CPU priority (nice 19; best effort).
fn lower_priority() {
    // SAFETY: gettid and setpriority take plain integers and touch no memory of ours; on
    // Linux, PRIO_PROCESS with a thread id changes that thread only.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
}

#[cfg(test)]
mod tests;
