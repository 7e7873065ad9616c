//! The node-local chunk cache: frames of chunks read from a remote store, kept on local disk
//! so that a restarted pod or a second reader on the node does not download them again.
//!
//! * One file per chunk: `<dir>/<2 hex>/<64 hex chunk id>`, holding the frame exactly as it
//!   is in its pack. An entry is checked when used, by decoding it and comparing the BLAKE3
//!   of the bytes with the chunk id (the same check as for a frame read from the store); a
//!   damaged entry is deleted and the frame fetched again.
//! * Stored in an [`LruDir`]: written to a temporary file and linked into place (never over
//!   an entry already there), so two processes sharing the directory never see a partial
//!   entry; least recently used first when the directory is over its limit.

use std::fs;
use std::path::Path;

use format::ChunkId;

use crate::error::Result;
use crate::lru_dir::LruDir;

/// A directory of cached frames with a size limit.
pub struct DiskCache {
    dir: LruDir,
}

impl DiskCache {
    /// Opens (creating) the cache directory.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<DiskCache> {
        Ok(DiskCache {
            dir: LruDir::open(dir, max_bytes)?,
        })
    }

    /// The cached frame of `id`, if any (touched as recently used).
    pub fn get(&self, id: &ChunkId) -> Option<Vec<u8>> {
        let p = self.dir.path(&id.to_hex());
        let data = fs::read(&p).ok()?;
        self.dir.touch(&p);
        Some(data)
    }

    /// Whether an entry of `id` is there (neither checked nor touched: a reader that finds
    /// it reads it with [`DiskCache::get`]).
    pub fn contains(&self, id: &ChunkId) -> bool {
        self.dir.path(&id.to_hex()).exists()
    }

    /// Removes the entry of `id` (after it failed its check).
    pub fn remove(&self, id: &ChunkId) {
        self.dir.remove(&id.to_hex());
    }

    /// Stores the frame of `id`. Errors are not fatal to readers: a cache that cannot be
    /// written is a cache that misses.
    pub fn put(&self, id: &ChunkId, frame: &[u8]) {
        let hex = id.to_hex();
        let Ok(tmp) = self.dir.temp(&hex) else { return };
        if fs::write(&tmp, frame).is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.dir.commit(&tmp, &hex, frame.len() as u64);
    }

    /// Records `n` chunks this cache did not serve, fetched from the store instead (by a
    /// reader that fetched them together), in `modelcas_disk_cache_misses_total`.
    pub fn missed(&self, n: u64) {
        crate::metrics::METRICS.disk_cache_misses.inc_by(n);
    }

    /// Bytes in the cache (as last counted).
    pub fn bytes(&self) -> u64 {
        self.dir.bytes()
    }
}
