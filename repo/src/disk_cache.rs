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
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use format::ChunkId;

use crate::error::Result;
use crate::lru_dir::LruDir;

/// What identifies one version of an entry's file: a verdict on its bytes holds while the
/// stamp is the same (a file replaced, rewritten or touched gets another: its inode, size,
/// or change time differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryStamp {
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl EntryStamp {
    fn of(m: &fs::Metadata) -> EntryStamp {
        EntryStamp {
            ino: m.ino(),
            len: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        }
    }
}

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

    /// The cached frame of `id` with the stamp of the file it was read from, its use
    /// noted in memory only ([`LruDir::note_use`]): the entry's times stay as they are, so
    /// a verdict kept under its stamp stays valid (the hub's frames, `hubserve::nodes`).
    pub fn get_stamped(&self, id: &ChunkId) -> Option<(Vec<u8>, EntryStamp)> {
        let p = self.dir.path(&id.to_hex());
        let read = || -> std::io::Result<(Vec<u8>, EntryStamp, EntryStamp)> {
            let mut f = fs::File::open(&p)?;
            let before = EntryStamp::of(&f.metadata()?);
            let mut data = Vec::with_capacity(before.len.min(1 << 30) as usize);
            f.read_to_end(&mut data)?;
            Ok((data, before, EntryStamp::of(&f.metadata()?)))
        };
        match read() {
            Ok((data, before, after)) => {
                self.dir.note_use(&p);
                (before == after && after.len == data.len() as u64).then_some((data, after))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                // Something that is not a readable entry (a directory, a file the process
                // may not read) would stand in the entry's place for ever: removed, so the
                // next fetch can keep the frame.
                tracing::warn!("chunk cache entry {}: {e}; removed", p.display());
                self.remove(id);
                if p.is_dir() {
                    let _ = fs::remove_dir_all(&p);
                }
                None
            }
        }
    }

    /// Stores the frame of `id` as [`DiskCache::put`] does; the stamp of the entry when
    /// this call linked it (`None`: not written, or an entry was already there).
    pub fn put_stamped(&self, id: &ChunkId, frame: &[u8]) -> Option<EntryStamp> {
        let hex = id.to_hex();
        let tmp = self.dir.temp(&hex).ok()?;
        let written = fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(frame)?;
            f.metadata()
        });
        let Ok(meta) = written else {
            let _ = fs::remove_file(&tmp);
            return None;
        };
        let linked = self.dir.commit(&tmp, &hex, frame.len() as u64);
        // Linking and removing the temporary name moved the change time: the stamp is the
        // entry's now, if it is still the file this call wrote (its inode).
        let now = fs::metadata(self.dir.path(&hex))
            .ok()
            .map(|m| EntryStamp::of(&m));
        now.filter(|n| linked && n.ino == meta.ino() && n.len == frame.len() as u64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_hold_across_uses_and_change_with_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 1 << 20).unwrap();
        let id = ChunkId::of(b"chunk");
        let linked = cache.put_stamped(&id, b"frame bytes").unwrap();
        assert_eq!(
            cache.put_stamped(&id, b"frame bytes"),
            None,
            "already there"
        );
        let (bytes, stamp) = cache.get_stamped(&id).unwrap();
        assert_eq!((bytes.as_slice(), stamp), (&b"frame bytes"[..], linked));
        // Used again: the same stamp (a use is noted in memory, not in the file's times).
        assert_eq!(cache.get_stamped(&id).unwrap().1, linked);
        // Rewritten in place (a damaged disk, another hand): another stamp.
        let path = dir.path().join(&id.to_hex()[..2]).join(id.to_hex());
        std::thread::sleep(std::time::Duration::from_millis(5));
        fs::write(&path, b"frame bytez").unwrap();
        assert_ne!(cache.get_stamped(&id).unwrap().1, linked);
        // A directory in the entry's place (hostile review of issue 43, helper-26, 03):
        // removed at the first read, so that the next fetch keeps its frame there.
        fs::remove_file(&path).unwrap();
        fs::create_dir_all(path.join("x")).unwrap();
        assert!(cache.get_stamped(&id).is_none());
        assert!(cache.put_stamped(&id, b"frame bytes").is_some());
        assert_eq!(cache.get_stamped(&id).unwrap().0, b"frame bytes");
    }
}
