//! File → chunks: the chunk list of a file ingest read, by the file's sha256
//! (`files/<64 hex>` in the `manifests` family), so that a later pull or ingest takes the
//! file from the store instead of reading or downloading it again.

use format::index::{self as values, ChunkLoc};
use format::{ChunkId, Sha256};
use repo::Result;

use crate::db::Index;

impl Index {
    /// Records the chunks of a file whose content has `sha256` (chunk id and length, in
    /// order), under `files/<64 hex>` in the `manifests` family. Its chunks may still be in
    /// a pack not yet written: [`Index::file_chunks`] answers only when every chunk is in
    /// a known pack.
    pub fn remember_file(&self, sha256: &Sha256, chunks: &[(ChunkId, u32)]) -> Result<()> {
        self.cache_object(&values::file_key(sha256), "", &values::file_record(chunks))
    }

    /// Where every chunk of a file with content `sha256` is, in order, if the index
    /// recorded the file and still knows a pack for each of its chunks.
    pub fn file_chunks(&self, sha256: &Sha256) -> Result<Option<Vec<(ChunkId, ChunkLoc)>>> {
        match self.cached_object(&values::file_key(sha256), "")? {
            Some(v) => self.locate_file_record(&v),
            None => Ok(None),
        }
    }

    /// The chunks (id and length, in order) the index recorded for a file with content
    /// `sha256`, wherever they are (or are not) stored.
    pub fn file_chunk_list(&self, sha256: &Sha256) -> Result<Option<Vec<(ChunkId, u32)>>> {
        Ok(self
            .cached_object(&values::file_key(sha256), "")?
            .and_then(|v| values::parse_file_record(&v)))
    }

    /// The chunks a `files/` record lists, each with where it is, if every one is in a
    /// known pack with the recorded length.
    pub(crate) fn locate_file_record(&self, v: &[u8]) -> Result<Option<Vec<(ChunkId, ChunkLoc)>>> {
        let Some(list) = values::parse_file_record(v) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity(list.len());
        for (id, len) in list {
            match self.chunk(&id)? {
                Some(loc) if loc.raw_len == len => out.push((id, loc)),
                _ => return Ok(None),
            }
        }
        Ok(Some(out))
    }
}
