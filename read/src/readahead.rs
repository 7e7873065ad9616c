//! Per-open-file reads with sequential detection and a growing read-ahead window, on top of
//! the shared [`ChunkCache`].
//!
//! How model servers read (see `shared/notes/read-path.md`): `safe_open` memory-maps a
//! shard and faults pages in roughly sequential order with jumps; the `eager`/`prefetch`
//! strategies read whole files sequentially, sometimes from several threads in 16 MiB
//! blocks; tokenizer and config files are small reads. The kernel's own read-ahead reorders
//! requests a little. So:
//!
//! * A read counts as sequential when it starts no more than [`BACK_SLACK`] before or
//!   [`FORWARD_SLACK`] after where the previous read ended; small reorderings do not reset
//!   the stream.
//! * While reads stay sequential the window doubles from [`INITIAL_WINDOW`] up to
//!   [`MAX_WINDOW`] (bounded further by half the cache budget); a random read resets it.
//! * Chunks in the window ahead are handed to the cache as prefetches, fetched and decoded
//!   by the cache's workers while the reader consumes earlier ones.
//! * Offset → chunk is a binary search over the chunks' start offsets.

use std::sync::{Arc, Mutex};

use crate::cache::ChunkCache;
use crate::chunk_map::ChunkMap;
use repo::manifest::{FileEntry, Manifest};
use repo::{Result, StoreError};

/// Window after the first sequential read: 8 MiB (a few default chunks).
pub const INITIAL_WINDOW: u64 = 8 * 1024 * 1024;
/// Largest window: 256 MiB; on 2 cores the decoder saturates well before.
pub const MAX_WINDOW: u64 = 256 * 1024 * 1024;
/// A read starting this far before the previous end still counts as sequential.
pub const BACK_SLACK: u64 = 1024 * 1024;
/// A read starting this far after the previous end still counts as sequential.
pub const FORWARD_SLACK: u64 = 16 * 1024 * 1024;

struct State {
    last_end: u64,
    window: u64,
    prefetched_to: u64,
}

/// One open file of a revision.
pub struct FileStream {
    cache: Arc<ChunkCache>,
    map: ChunkMap,
    state: Mutex<State>,
}

impl FileStream {
    /// A stream over `file` of `manifest`, reading through `cache`.
    pub fn new(
        cache: Arc<ChunkCache>,
        manifest: &Manifest,
        file: &FileEntry,
    ) -> Result<FileStream> {
        Ok(FileStream {
            cache,
            map: ChunkMap::new(manifest, file)?,
            state: Mutex::new(State {
                last_end: 0,
                window: 0,
                prefetched_to: 0,
            }),
        })
    }

    /// File size.
    pub fn size(&self) -> u64 {
        self.map.size()
    }

    /// The chunk holding `offset` (below the size), or the last one.
    fn chunk_at(&self, offset: u64) -> usize {
        self.map
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file), prefetching ahead
    /// when the reads are sequential.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset >= self.size() || len == 0 {
            return Ok(Vec::new());
        }
        let end = (offset + len as u64).min(self.size());
        self.plan_prefetch(offset, end);
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut i = self.chunk_at(offset);
        while i < self.map.sources.len() && self.map.starts[i] < end {
            let data = self.chunk(i)?;
            let from = offset.max(self.map.starts[i]) - self.map.starts[i];
            let to = end.min(self.map.starts[i + 1]) - self.map.starts[i];
            out.extend_from_slice(&data[from as usize..to as usize]);
            i += 1;
        }
        Ok(out)
    }

    /// The chunk holding byte `pos` (which must lie below the file's size), prefetching
    /// ahead as a read of `[pos, to)` would: its offset in the file and its decoded bytes,
    /// shared with the cache. For readers that hand bytes on without copying them (serve).
    pub fn chunk_containing(&self, pos: u64, to: u64) -> Result<(u64, Arc<Vec<u8>>)> {
        if pos >= self.size() {
            return Err(StoreError::Invalid(format!(
                "read at {pos}, past the end of a {}-byte file",
                self.size()
            )));
        }
        let i = self.chunk_at(pos);
        self.plan_prefetch(pos, to.clamp(pos + 1, self.map.starts[i + 1]));
        Ok((self.map.starts[i], self.chunk(i)?))
    }

    /// Chunk `i` through the cache, checked to have the length the manifest records (so
    /// slicing it by the recorded offsets cannot go out of bounds).
    fn chunk(&self, i: usize) -> Result<Arc<Vec<u8>>> {
        let src = &self.map.sources[i];
        let data = self.cache.get(src)?;
        if data.len() != src.raw_len as usize {
            return Err(StoreError::CorruptChunk {
                chunk: src.id.to_hex(),
                pack: src.key.to_string(),
                offset: src.offset,
                reason: format!(
                    "{} bytes where the manifest records {}",
                    data.len(),
                    src.raw_len
                ),
            });
        }
        Ok(data)
    }

    fn plan_prefetch(&self, offset: u64, end: u64) {
        let (from, to) = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let sequential = (offset == 0 && st.last_end == 0)
                || (offset + BACK_SLACK >= st.last_end && offset <= st.last_end + FORWARD_SLACK);
            let cap = MAX_WINDOW.min(self.cache.budget() as u64 / 2).max(1);
            if sequential {
                st.window = if st.window == 0 {
                    INITIAL_WINDOW.min(cap)
                } else {
                    (st.window * 2).min(cap)
                };
            } else {
                st.window = 0;
                st.prefetched_to = 0;
            }
            st.last_end = st.last_end.max(end);
            if !sequential {
                st.last_end = end;
            }
            let from = end.max(st.prefetched_to);
            let to = (end + st.window).min(self.size());
            if to > from {
                st.prefetched_to = to;
            }
            (from, to)
        };
        if to <= from {
            return;
        }
        let first = self.chunk_at(from);
        let mut last = first;
        while last < self.map.sources.len() && self.map.starts[last] < to {
            last += 1;
        }
        let accepted = self.cache.prefetch_run(&self.map.sources[first..last]);
        if first + accepted < last {
            // Budget taken by loads in flight: remember where we stopped.
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.prefetched_to = st.prefetched_to.min(self.map.starts[first + accepted]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pack::{noise, one_pack};
    use repo::manifest::{ChunkRef, FileEntry};
    use repo::names::{CommitId, RepoId};

    /// A file made of `chunks` in one pack, and a stream over it.
    fn stream(chunks: &[Vec<u8>], budget: usize) -> (FileStream, Vec<u8>) {
        let p = one_pack(chunks);
        let file = FileEntry {
            path: "f".into(),
            size: chunks.iter().map(|c| c.len() as u64).sum(),
            sha256: [0; 32],
            executable: false,
            chunks: p
                .entries
                .iter()
                .map(|e| ChunkRef {
                    id: e.id,
                    pack: 0,
                    offset: e.offset,
                    frame_len: e.frame_len,
                    raw_len: e.raw_len,
                })
                .collect(),
        };
        let m = Manifest {
            repo: RepoId::parse("a/b").unwrap(),
            commit: CommitId([1; 20]),
            ingested_at: 0,
            source: "test".into(),
            packs: vec![p.pack],
            files: vec![file.clone()],
        };
        let cache = Arc::new(ChunkCache::new(p.store.clone(), budget, 2).unwrap());
        (FileStream::new(cache, &m, &file).unwrap(), chunks.concat())
    }

    #[test]
    fn reads_any_range_byte_exact() {
        let chunks: Vec<Vec<u8>> = (0..5).map(|i| noise(10_000 + i * 777, i as u64)).collect();
        let (s, all) = stream(&chunks, 1 << 20);
        assert_eq!(s.size(), all.len() as u64);
        for (off, len) in [
            (0, 1),
            (0, all.len()),
            (9_999, 3),
            (12_345, 20_000),
            (all.len() - 1, 10),
        ] {
            let end = (off + len).min(all.len());
            assert_eq!(
                s.read(off as u64, len).unwrap(),
                &all[off..end],
                "{off}+{len}"
            );
        }
        assert!(s.read(all.len() as u64, 10).unwrap().is_empty());
        // chunk_containing: the chunk's start and its whole bytes.
        let (start, data) = s.chunk_containing(10_500, 11_000).unwrap();
        assert_eq!(start, 10_000);
        assert_eq!(&**data, &chunks[1]);
        assert!(s
            .chunk_containing(all.len() as u64, all.len() as u64 + 1)
            .is_err());
    }

    #[test]
    fn sequential_reads_prefetch_ahead() {
        let chunks: Vec<Vec<u8>> = (0..12).map(|i| noise(20_000, i as u64)).collect();
        let (s, all) = stream(&chunks, 1 << 20);
        let mut got = Vec::new();
        let mut off = 0u64;
        while off < all.len() as u64 {
            let d = s.read(off, 4096).unwrap();
            off += d.len() as u64;
            got.extend(d);
        }
        assert!(got == all);
        // After the first reads, chunks ahead were handed to the cache.
        assert!(s.state.lock().unwrap().prefetched_to > 20_000);
    }
}
