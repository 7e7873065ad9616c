//! Where the bytes of one file of a revision are: for each chunk, its pack key, frame and
//! length, and the offset in the file where it starts. Built once per open file from a
//! manifest, with the one check every reader relies on (chunks within the pack table, sizes
//! adding up); the range reader of the mount and serve ([`crate::readahead::FileStream`])
//! and the whole-file reader of cat, checkout and verify ([`crate::file_reader::FileReader`]) both
//! map offsets to chunks through it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cache::ChunkSource;
use format::layout;
use repo::manifest::{FileEntry, Manifest};
use repo::{Result, StoreError};

/// The chunks of one file, in order, with their offsets.
#[derive(Clone)]
pub struct ChunkMap {
    /// Where each chunk is.
    pub sources: Vec<ChunkSource>,
    /// `starts[i]`: offset of chunk `i` in the file; the last entry is the file's size.
    pub starts: Vec<u64>,
}

impl ChunkMap {
    /// The map of `file` (which must belong to `manifest`).
    pub fn new(manifest: &Manifest, file: &FileEntry) -> Result<ChunkMap> {
        let corrupt = |reason: String| StoreError::CorruptObject {
            key: layout::manifest_key(&manifest.repo, &manifest.commit),
            reason: format!("{}: {reason}", file.path),
        };
        // Keys of the packs this file uses only (a manifest may list hundreds).
        let mut keys: HashMap<u32, Arc<str>> = HashMap::new();
        let mut sources = Vec::with_capacity(file.chunks.len());
        let mut starts = Vec::with_capacity(file.chunks.len() + 1);
        let mut at = 0u64;
        for c in &file.chunks {
            let Some(pack) = manifest.packs.get(c.pack as usize) else {
                return Err(corrupt(format!(
                    "chunk points to pack #{} of {}",
                    c.pack,
                    manifest.packs.len()
                )));
            };
            let key = keys
                .entry(c.pack)
                .or_insert_with(|| Arc::from(layout::pack_key(pack)))
                .clone();
            sources.push(ChunkSource {
                key,
                id: c.id,
                offset: c.offset as u64,
                frame_len: c.frame_len,
                raw_len: c.raw_len,
            });
            starts.push(at);
            at += c.raw_len as u64;
        }
        starts.push(at);
        if at != file.size {
            return Err(corrupt(format!(
                "chunks add up to {at} bytes, the file has {}",
                file.size
            )));
        }
        Ok(ChunkMap { sources, starts })
    }

    /// The map of content known by its chunk list alone (a pull's stored copy, from the
    /// index's record of a file read before): offsets are the running sum of lengths.
    pub fn from_sources(sources: Vec<ChunkSource>) -> ChunkMap {
        let mut starts = Vec::with_capacity(sources.len() + 1);
        let mut at = 0u64;
        for c in &sources {
            starts.push(at);
            at += u64::from(c.raw_len);
        }
        starts.push(at);
        ChunkMap { sources, starts }
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// True for an empty file.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// The chunk holding byte `offset` (binary search); `None` at or past the end.
    pub fn chunk_at(&self, offset: u64) -> Option<usize> {
        if offset >= self.size() {
            return None;
        }
        Some(self.starts.partition_point(|&s| s <= offset) - 1)
    }
}
