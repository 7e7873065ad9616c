//! A directory of cache entries named by a 32-byte hash, with a size limit: the storage of
//! the node's caches (frames of chunks, [`crate::disk_cache`]; whole files,
//! `read::file_cache`).
//!
//! * One file per entry: `<dir>/<first 2 hex digits>/<64 hex digits>`.
//! * An entry is written to a temporary file beside its place ([`LruDir::temp`]) and
//!   linked into place ([`LruDir::commit`]), so no reader sees a partial entry, also
//!   across processes sharing the directory; an entry already there is never replaced
//!   (the second writer's file is dropped). Temporary files are named `.tmp-<pid>-<n>`;
//!   those an hour old (left by a process that died) are removed when the directory is
//!   opened. Subdirectories whose names begin with a dot hold no entries (the node file
//!   cache keeps its check records in `.checked/`) and are left alone.
//! * Least recently used first: a use touches the entry's modification time
//!   ([`LruDir::touch`]), or is noted in memory ([`LruDir::note_use`], for entries whose
//!   ctime must not move at every use: the node file cache's stamps); when the bytes
//!   committed by this process push the directory past its limit, the oldest entries (by
//!   the later of the two) are removed until it is under 90% of it. Removing an entry that
//!   is open elsewhere is safe: its readers keep the inode.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use quick_cache::sync::Cache;

use crate::error::{Result, StoreError};

/// Temporary files older than this are a dead writer's leftovers.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// Uses noted in memory at most (a path and a time: about 150 bytes each); past it the
/// least useful notes are forgotten (the modification times remain).
pub const MAX_NOTED: usize = 100_000;

/// Parts of [`noted_cache`]: a power of two that divides [`MAX_NOTED`].
const NOTED_SHARDS: usize = 32;
const _: () = assert!(MAX_NOTED.is_multiple_of(NOTED_SHARDS));

/// The uses noted in memory: at most [`MAX_NOTED`] on any machine. quick_cache splits its
/// bound into parts (by default four per core, rounded to a power of two) and rounds each
/// part up: 100,000 in 64 parts (a 16-core machine) would hold 100,032. 32 parts divide it.
fn noted_cache() -> Cache<PathBuf, SystemTime> {
    let options = quick_cache::OptionsBuilder::new()
        .shards(NOTED_SHARDS)
        .estimated_items_capacity(MAX_NOTED)
        .weight_capacity(MAX_NOTED as u64)
        .build()
        .unwrap_or_else(|e| unreachable!("constant options: {e}"));
    Cache::with_options(
        options,
        quick_cache::UnitWeighter,
        Default::default(),
        Default::default(),
    )
}

/// A directory of entries with a size limit.
pub struct LruDir {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes believed to be in the directory (recounted at each eviction).
    bytes: AtomicU64,
    evicting: Mutex<()>,
    counter: AtomicU64,
    /// Last uses noted in memory ([`LruDir::note_use`]), at most [`MAX_NOTED`].
    used: Cache<PathBuf, SystemTime>,
}

/// One entry found by a scan: its path, size and last use.
struct Entry {
    path: PathBuf,
    len: u64,
    used: SystemTime,
}

impl LruDir {
    /// Opens (creating) the directory, counts its entries and removes stale temporary files.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<LruDir> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let d = LruDir {
            dir: dir.to_path_buf(),
            max_bytes,
            bytes: AtomicU64::new(0),
            evicting: Mutex::new(()),
            counter: AtomicU64::new(0),
            used: noted_cache(),
        };
        let total: u64 = d.scan(true).iter().map(|e| e.len).sum();
        d.bytes.store(total, Ordering::Relaxed);
        Ok(d)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the entry named `hex` (64 hex digits) lives.
    pub fn path(&self, hex: &str) -> PathBuf {
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Marks `path` as just used.
    pub fn touch(&self, path: &Path) {
        if let Ok(f) = fs::File::options().write(true).open(path) {
            let _ = f.set_modified(SystemTime::now());
        }
    }

    /// Notes that `path` was just used, in memory only: the entry's times stay as they are.
    pub fn note_use(&self, path: &Path) {
        self.used.insert(path.to_path_buf(), SystemTime::now());
    }

    /// A fresh temporary path beside the place of entry `hex`, for [`LruDir::commit`].
    pub fn temp(&self, hex: &str) -> Result<PathBuf> {
        let parent = self.dir.join(&hex[..2]);
        fs::create_dir_all(&parent).map_err(|e| StoreError::io(&parent, e))?;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        Ok(parent.join(format!(".tmp-{}-{n}", std::process::id())))
    }

    /// Puts the finished temporary file `tmp` (of `len` bytes) in the place of entry `hex`
    /// with a hard link, never over an entry already there, then removes `tmp` and evicts if
    /// the directory is over its limit. Returns whether this call put the entry in place
    /// (and counted its bytes). An entry already there (another process or thread committed
    /// the same content first) is kept as it is: a reader may have it open, or be checking
    /// it under its stamp, and its bytes are counted already. On any failure `tmp` is removed
    /// too: a cache that cannot be written is a cache that misses.
    pub fn commit(&self, tmp: &Path, hex: &str, len: u64) -> bool {
        let linked = fs::hard_link(tmp, self.path(hex));
        let _ = fs::remove_file(tmp);
        if let Err(e) = linked {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                tracing::debug!("cache entry {hex} not kept: {e}");
            }
            return false;
        }
        let total = self.bytes.fetch_add(len, Ordering::Relaxed) + len;
        if total > self.max_bytes {
            self.evict();
        }
        true
    }

    /// Removes entry `hex` (after it failed a check).
    pub fn remove(&self, hex: &str) {
        let p = self.path(hex);
        if let Ok(m) = fs::symlink_metadata(&p) {
            if fs::remove_file(&p).is_ok() {
                let have = self.bytes.load(Ordering::Relaxed);
                self.bytes.fetch_sub(m.len().min(have), Ordering::Relaxed);
            }
        }
    }

    /// Bytes in the directory (as last counted).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Every entry; with `clean`, temporary files older than [`STALE_TEMP`] are removed.
    fn scan(&self, clean: bool) -> Vec<Entry> {
        let mut out = Vec::new();
        let Ok(dirs) = fs::read_dir(&self.dir) else {
            return out;
        };
        let now = SystemTime::now();
        for d in dirs.flatten() {
            // Directories of dot-names are not entries' (the file cache's `.checked`).
            if d.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(files) = fs::read_dir(d.path()) else {
                continue;
            };
            for f in files.flatten() {
                let Ok(m) = f.metadata() else { continue };
                let used = m.modified().unwrap_or(UNIX_EPOCH);
                if f.file_name().to_string_lossy().starts_with(".tmp-") {
                    let old = now.duration_since(used).unwrap_or_default() > STALE_TEMP;
                    if clean && old {
                        let _ = fs::remove_file(f.path());
                    }
                    continue;
                }
                out.push(Entry {
                    path: f.path(),
                    len: m.len(),
                    used,
                });
            }
        }
        out
    }

    /// Removes the least recently used entries until the directory is under 90% of its
    /// limit (one eviction at a time per process).
    fn evict(&self) {
        let Some(_guard) = self.evicting.try_lock() else {
            return;
        };
        let mut entries = self.scan(false);
        for e in &mut entries {
            if let Some(t) = self.used.peek(&e.path) {
                e.used = e.used.max(t);
            }
        }
        let mut total: u64 = entries.iter().map(|e| e.len).sum();
        entries.sort_by_key(|e| e.used);
        let target = self.max_bytes / 10 * 9;
        for e in entries {
            if total <= target {
                break;
            }
            if fs::remove_file(&e.path).is_ok() {
                total -= e.len;
            }
        }
        self.bytes.store(total, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(n: u8) -> String {
        hex_of(&[n; 32])
    }

    fn hex_of(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn put(d: &LruDir, h: &str, data: &[u8]) -> bool {
        let tmp = d.temp(h).unwrap();
        fs::write(&tmp, data).unwrap();
        d.commit(&tmp, h, data.len() as u64)
    }

    #[test]
    fn evicts_least_recently_used_to_ninety_percent() {
        let t = tempfile::tempdir().unwrap();
        let d = LruDir::open(t.path(), 1000).unwrap();
        for n in 0..4u8 {
            assert!(put(&d, &hex(n), &[n; 300]));
            let f = fs::File::options()
                .write(true)
                .open(d.path(&hex(n)))
                .unwrap();
            f.set_modified(UNIX_EPOCH + Duration::from_secs(1000 + n as u64))
                .unwrap();
        }
        // The fourth commit made 1200 bytes > 1000: evicted down to <= 900, oldest first.
        let left: Vec<u8> = (0..4u8).filter(|n| d.path(&hex(*n)).exists()).collect();
        assert!(d.bytes() <= 900, "{} bytes left", d.bytes());
        assert!(
            !left.contains(&0),
            "the oldest entry must go first: {left:?}"
        );
        assert_eq!(d.bytes(), left.len() as u64 * 300);
    }

    #[test]
    fn a_use_noted_in_memory_counts_for_eviction_and_leaves_the_entry_alone() {
        let t = tempfile::tempdir().unwrap();
        let d = LruDir::open(t.path(), 1000).unwrap();
        for n in 0..3u8 {
            assert!(put(&d, &hex(n), &[n; 300]));
            let f = fs::File::options()
                .write(true)
                .open(d.path(&hex(n)))
                .unwrap();
            f.set_modified(UNIX_EPOCH + Duration::from_secs(1000 + n as u64))
                .unwrap();
        }
        // Entry 0, the oldest by its time on disk, is used: noted, its times unchanged.
        let before = fs::metadata(d.path(&hex(0))).unwrap();
        d.note_use(&d.path(&hex(0)));
        let after = fs::metadata(d.path(&hex(0))).unwrap();
        assert_eq!(before.modified().unwrap(), after.modified().unwrap());
        assert_eq!(
            std::os::unix::fs::MetadataExt::ctime_nsec(&before),
            std::os::unix::fs::MetadataExt::ctime_nsec(&after)
        );
        // A fourth entry makes 1200 bytes: entry 1 goes first, not the used entry 0.
        assert!(put(&d, &hex(3), &[3; 300]));
        assert!(d.path(&hex(0)).exists(), "the used entry was evicted");
        assert!(!d.path(&hex(1)).exists());
    }

    /// Two writers commit the same content (another process or thread came first): the
    /// entry already there stays as it is (a reader may have it open, or be checking it
    /// under its stamp: inode, ctime), the second temporary file is removed, and its bytes
    /// are not counted.
    #[test]
    fn a_commit_never_replaces_an_entry_already_there() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().unwrap();
        let d = LruDir::open(t.path(), 1 << 20).unwrap();
        let h = hex(7);
        assert!(put(&d, &h, b"first"));
        let before = fs::metadata(d.path(&h)).unwrap();
        // The second writer's bytes differ, so that a replaced entry shows.
        let tmp = d.temp(&h).unwrap();
        fs::write(&tmp, b"other").unwrap();
        let committed = d.commit(&tmp, &h, 5);
        let after = fs::metadata(d.path(&h)).unwrap();
        assert_eq!(before.ino(), after.ino(), "the entry was replaced");
        assert_eq!(
            (before.ctime(), before.ctime_nsec()),
            (after.ctime(), after.ctime_nsec()),
            "the entry was changed"
        );
        assert_eq!(fs::read(d.path(&h)).unwrap(), b"first");
        assert!(!tmp.exists(), "the temporary file is left");
        assert!(!committed, "nothing was put in place");
        assert_eq!(d.bytes(), 5, "counted twice");
        let files: Vec<_> = fs::read_dir(t.path().join(&h[..2]))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(LruDir::open(t.path(), 1 << 20).unwrap().bytes(), 5);
    }

    #[test]
    fn stale_temporaries_are_removed_on_open_and_fresh_ones_kept() {
        let t = tempfile::tempdir().unwrap();
        let sub = t.path().join("ab");
        fs::create_dir_all(&sub).unwrap();
        let old = sub.join(".tmp-1-0");
        let fresh = sub.join(".tmp-1-1");
        fs::write(&old, b"x").unwrap();
        fs::write(&fresh, b"y").unwrap();
        fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
        let d = LruDir::open(t.path(), 1 << 20).unwrap();
        assert!(!old.exists());
        assert!(fresh.exists());
        assert_eq!(d.bytes(), 0, "temporaries are not entries");
    }

    #[test]
    fn dot_directories_hold_no_entries_and_are_never_evicted() {
        let t = tempfile::tempdir().unwrap();
        let side = t.path().join(".checked");
        fs::create_dir_all(&side).unwrap();
        fs::write(side.join(hex(9)), [1u8; 600]).unwrap();
        let d = LruDir::open(t.path(), 1000).unwrap();
        assert_eq!(d.bytes(), 0, "a dot-directory's files are not entries");
        for n in 0..4u8 {
            assert!(put(&d, &hex(n), &[n; 300]));
        }
        assert!(d.bytes() <= 900);
        assert_eq!(fs::read(side.join(hex(9))).unwrap(), [1u8; 600]);
    }

    #[test]
    fn uses_noted_in_memory_keep_to_their_bound() {
        let t = tempfile::tempdir().unwrap();
        let d = LruDir::open(t.path(), 1000).unwrap();
        assert_eq!(d.used.capacity(), MAX_NOTED as u64);
        let n = MAX_NOTED * 4;
        let path = |i: usize| d.path(&hex_of(&(i as u64).to_le_bytes().repeat(4)));
        let mut most = 0;
        for i in 0..n {
            d.note_use(&path(i));
            most = most.max(d.used.len());
            assert!(d.used.len() <= MAX_NOTED);
            assert!(d.used.peek(&path(i)).is_some(), "use {i} just noted");
        }
        assert!(d.used.len() > MAX_NOTED / 2);
        assert!(d.used.get(&path(n - 1)).is_some(), "the last use noted");
        println!(
            "cache-bound repo lru_dir used: bound {MAX_NOTED} entries; after {n} inserts: {} entries \
             (at most {most})",
            d.used.len()
        );
    }
}
