//! Chunks of a stored xorb read back from the store: the file its record names (the
//! revision recorded, else any revision of that repository holding the same content), the
//! byte range of the chunks read in windows of at most 8 MiB, each chunk hashed and
//! compared with the record's slice before it is handed on.

use format::Sha256;
use read::file_reader::FileReader;
use repo::{Store, StoreError};

use super::shard::ChunkSink;
use super::stored::Slice;
use crate::error::PublishError;

/// Bytes read from the store at a time.
const WINDOW: usize = 8 << 20;

/// Hands chunks `[from, to)` of `rec` (a stored xorb's chunks of content `sha`, its first
/// byte at `offset` of the file) to `sink`.
pub(crate) fn read(
    store: &Store,
    sha: &Sha256,
    rec: &Slice,
    offset: u64,
    (from, to): (usize, usize),
    sink: &mut ChunkSink<'_>,
) -> Result<(), PublishError> {
    let gone = || {
        PublishError::BadObject(format!(
            "shard: the stored file {sha} a xorb names is no longer stored"
        ))
    };
    let manifest = match store.manifest_resolved(&rec.repo, &rec.commit) {
        Ok(m) if m.files.iter().any(|f| f.sha256 == *sha) => m,
        Ok(_) | Err(StoreError::UnknownRevision { .. } | StoreError::UnknownRepo(_)) => {
            let all = crate::apply::stored_files(store, &rec.repo)?;
            let (m, _) = all.get(sha).ok_or_else(gone)?;
            (**m).clone()
        }
        Err(e) => return Err(e.into()),
    };
    let file = manifest
        .files
        .iter()
        .find(|f| f.sha256 == *sha)
        .ok_or_else(gone)?;
    let reader = FileReader::new(store, &manifest, file)?;
    let mut at: u64 = offset
        + rec.chunks[..from]
            .iter()
            .map(|c| u64::from(c.1))
            .sum::<u64>();
    let mut i = from;
    while i < to {
        let (mut win, mut j) = (0usize, i);
        while j < to && (win == 0 || win + rec.chunks[j].1 as usize <= WINDOW) {
            win += rec.chunks[j].1 as usize;
            j += 1;
        }
        let bytes = reader.read_at(at, win)?;
        let mut p = 0;
        for (h, len) in &rec.chunks[i..j] {
            let data = bytes.get(p..p + *len as usize).ok_or_else(gone)?;
            if xethash::chunk_hash(data) != *h {
                return Err(PublishError::BadObject(format!(
                    "the stored file {sha} does not match its Xet chunk list"
                )));
            }
            sink(data, *h)?;
            p += *len as usize;
        }
        at += win as u64;
        i = j;
    }
    Ok(())
}
