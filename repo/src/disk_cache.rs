//! The node-local chunk cache: frames of chunks read from a remote store, kept on local disk
//! so that a restarted pod or a second reader on the node does not download them again.
//!
//! * One file per chunk: `<dir>/<2 hex>/<64 hex chunk id>`, holding the frame exactly as it
//!   is in its pack. An entry is checked when used, by decoding it and comparing the BLAKE3
//!   of the bytes with the chunk id (the same check as for a frame read from the store); a
//!   damaged entry is deleted and the frame fetched again.
//! * Writes go to a temporary file in the same directory and are renamed into place, so two
//!   processes sharing the directory never see a partial entry; deletions of a file another
//!   process already removed are ignored.
//! * LRU by modification time: a hit touches the file; when the bytes written by this process
//!   push the directory past `max_bytes`, the oldest entries are removed until it is under
//!   90% of it.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use chunker::ChunkId;

use crate::{Result, StoreError};

/// A directory of cached frames with a size limit.
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes believed to be in the directory (rescanned at each eviction).
    bytes: AtomicU64,
    evicting: Mutex<()>,
    counter: AtomicU64,
}

impl DiskCache {
    /// Opens (creating) the cache directory.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<DiskCache> {
        fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        let cache = DiskCache {
            dir: dir.to_path_buf(),
            max_bytes,
            bytes: AtomicU64::new(0),
            evicting: Mutex::new(()),
            counter: AtomicU64::new(0),
        };
        let total: u64 = cache.entries().iter().map(|e| e.1).sum();
        cache.bytes.store(total, Ordering::Relaxed);
        Ok(cache)
    }

    fn path(&self, id: &ChunkId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(hex)
    }

    /// The cached frame of `id`, if any (touched as recently used).
    pub fn get(&self, id: &ChunkId) -> Option<Vec<u8>> {
        let p = self.path(id);
        let data = fs::read(&p).ok()?;
        let f = fs::File::options().write(true).open(&p).ok();
        if let Some(f) = f {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
        Some(data)
    }

    /// Removes the entry of `id` (after it failed its check).
    pub fn remove(&self, id: &ChunkId) {
        if let Ok(m) = fs::metadata(self.path(id)) {
            if fs::remove_file(self.path(id)).is_ok() {
                self.bytes.fetch_sub(
                    m.len().min(self.bytes.load(Ordering::Relaxed)),
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Stores the frame of `id`. Errors are not fatal to readers: a cache that cannot be
    /// written is a cache that misses.
    pub fn put(&self, id: &ChunkId, frame: &[u8]) {
        let p = self.path(id);
        let Some(parent) = p.parent() else { return };
        if fs::create_dir_all(parent).is_err() {
            return;
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let tmp = parent.join(format!(".tmp-{}-{n}", std::process::id()));
        if fs::write(&tmp, frame)
            .and_then(|_| fs::rename(&tmp, &p))
            .is_err()
        {
            let _ = fs::remove_file(&tmp);
            return;
        }
        let total =
            self.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed) + frame.len() as u64;
        if total > self.max_bytes {
            self.evict();
        }
    }

    /// Every entry with its size and modification time.
    fn entries(&self) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
        let mut out = Vec::new();
        let Ok(dirs) = fs::read_dir(&self.dir) else {
            return out;
        };
        for d in dirs.flatten() {
            let Ok(files) = fs::read_dir(d.path()) else {
                continue;
            };
            for f in files.flatten() {
                if f.file_name().to_string_lossy().starts_with(".tmp-") {
                    continue;
                }
                if let Ok(m) = f.metadata() {
                    out.push((
                        f.path(),
                        m.len(),
                        m.modified().unwrap_or(std::time::UNIX_EPOCH),
                    ));
                }
            }
        }
        out
    }

    /// Removes the least recently used entries until the cache is under 90% of its limit.
    fn evict(&self) {
        let Ok(_guard) = self.evicting.try_lock() else {
            return;
        };
        let mut entries = self.entries();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort_by_key(|e| e.2);
        let target = self.max_bytes / 10 * 9;
        for (path, len, _) in entries {
            if total <= target {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
        self.bytes.store(total, Ordering::Relaxed);
    }

    /// Bytes in the cache (as last counted).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
