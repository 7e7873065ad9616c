//! Packs in an object store: reading a pack's footer and its frames, checked. The format
//! itself (header, frames, footer, [`PackId`], [`PackBuilder`]) is `format::pack`,
//! re-exported here.

pub use format::pack::*;

use format::ChunkId;

use crate::error::{Result, StoreError};
use format::frame;
use objects::ObjectStore;

/// Reads and checks the footer of the pack at `key` (two ranged reads: the trailer, then
/// the footer).
pub fn read_footer(store: &dyn ObjectStore, key: &str) -> Result<PackFooter> {
    let size = store.size(key)?.ok_or_else(|| StoreError::not_found(key))?;
    // A pack too short to have a trailer is refused by decode_trailer before it is read.
    let t = PACK_TRAILER_LEN as u64;
    let footer_len = match size.checked_sub(t) {
        Some(at) if size >= PACK_HEADER_LEN as u64 + t => {
            let trailer = |b: Vec<u8>| Ok(decode_trailer(key, size, &b)?);
            crate::again::range_decoded(store, key, at, t, trailer)?
        }
        _ => decode_trailer(key, size, &[])?,
    };
    let footer_at = size - t - footer_len;
    let footer = |b: Vec<u8>| Ok(decode_footer(key, footer_at, &b)?);
    crate::again::range_decoded(store, key, footer_at, footer_len, footer)
}

/// Reads one frame and decodes it, checking the chunk's BLAKE3 against `id`.
pub fn read_chunk(
    store: &dyn ObjectStore,
    key: &str,
    id: &ChunkId,
    offset: u64,
    frame_len: u32,
) -> Result<Vec<u8>> {
    read_frame_checked(store, key, id, offset, frame_len).map(|(_, data)| data)
}

/// The frame and its decoded chunk, checked against `id`. A frame that fails its check (or
/// is cut short) is asked for again from the store's other sources
/// ([`crate::again::range_decoded`]: a hub's other addresses, past every cache) until one
/// passes; when none does (or the store has none, as a directory or the bucket itself),
/// the first error stands.
pub fn read_frame_checked(
    store: &dyn ObjectStore,
    key: &str,
    id: &ChunkId,
    offset: u64,
    frame_len: u32,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let check = |frame: Vec<u8>| {
        let data = decode_checked(&frame, id, key, offset)?;
        Ok((frame, data))
    };
    crate::again::range_decoded(store, key, offset, frame_len as u64, check).map_err(|e| match e {
        StoreError::Object(objects::ObjectError::CorruptObject { reason, .. }) => {
            corrupt_chunk(id, key, offset, reason)
        }
        other => other,
    })
}

/// Reads and decodes one frame without checking the chunk's hash: for callers that check
/// a whole-file sha256 instead (checkout), and look for the bad chunk only on a mismatch.
pub fn read_chunk_unchecked(
    store: &dyn ObjectStore,
    key: &str,
    id: &ChunkId,
    offset: u64,
    frame_len: u32,
) -> Result<Vec<u8>> {
    let frame = read_frame(store, key, id, offset, frame_len)?;
    frame::decode(&frame).map_err(|r| corrupt_chunk(id, key, offset, r))
}

/// The frame's bytes; a frame cut short by the end of the pack is a corrupt chunk.
pub fn read_frame(
    store: &dyn ObjectStore,
    key: &str,
    id: &ChunkId,
    offset: u64,
    frame_len: u32,
) -> Result<Vec<u8>> {
    store
        .get_range(key, offset, frame_len as u64)
        .map_err(|e| match e {
            objects::ObjectError::CorruptObject { reason, .. } => {
                corrupt_chunk(id, key, offset, reason)
            }
            other => other.into(),
        })
}

/// Decodes a frame already in memory, checking the chunk's BLAKE3 against `id`.
pub fn decode_checked(frame: &[u8], id: &ChunkId, key: &str, offset: u64) -> Result<Vec<u8>> {
    let data = frame::decode(frame).map_err(|r| corrupt_chunk(id, key, offset, r))?;
    if ChunkId::of(&data) != *id {
        return Err(corrupt_chunk(
            id,
            key,
            offset,
            "content does not match the chunk id".into(),
        ));
    }
    Ok(data)
}

fn corrupt_chunk(id: &ChunkId, key: &str, offset: u64, reason: String) -> StoreError {
    StoreError::CorruptChunk {
        chunk: id.to_hex(),
        pack: key.to_string(),
        offset,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objects::MemoryStore;

    #[test]
    fn a_frame_that_fails_its_check_is_read_again_elsewhere() {
        // Issue 43: a hub or a cache that answered a wrong byte; the store's other source
        // (another address, past every cache) gives the right one.
        let chunk = vec![7u8; 5000];
        let id = ChunkId::of(&chunk);
        let mut good = Vec::new();
        frame::encode(&chunk, &mut good);
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let len = good.len() as u32;
        let store = MemoryStore::new();
        store.put("p", &bad).unwrap();
        assert!(matches!(
            read_chunk(&store, "p", &id, 0, len),
            Err(StoreError::CorruptChunk { .. })
        ));
        store.elsewhere("p", good.clone());
        assert_eq!(read_chunk(&store, "p", &id, 0, len).unwrap(), chunk);
        assert_eq!(
            read_frame_checked(&store, "p", &id, 0, len).unwrap(),
            (good, chunk)
        );
        // Wrong there too: the first error stands.
        store.elsewhere("p", bad);
        assert!(matches!(
            read_chunk(&store, "p", &id, 0, len),
            Err(StoreError::CorruptChunk { .. })
        ));
    }

    #[test]
    fn build_and_read_back() {
        let mut b = PackBuilder::new();
        let chunks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1000 + i as usize]).collect();
        let mut frames = Vec::new();
        for c in &chunks {
            let mut f = Vec::new();
            frame::encode(c, &mut f);
            let off = b.add_frame(ChunkId::of(c), &f, c.len());
            frames.push((off, f.len() as u32));
        }
        let (id, bytes, entries) = b.finish();
        assert_eq!(&bytes[..8], PACK_MAGIC);
        assert_eq!(PackId(*blake3::hash(&bytes).as_bytes()), id);
        let store = MemoryStore::new();
        store.put("p", &bytes).unwrap();
        let footer = read_footer(&store, "p").unwrap();
        assert_eq!(footer.entries, entries);
        for (c, (off, len)) in chunks.iter().zip(frames) {
            assert_eq!(
                &read_chunk(&store, "p", &ChunkId::of(c), off as u64, len).unwrap(),
                c
            );
        }
        // a wrong id is refused
        assert!(matches!(
            read_chunk(
                &store,
                "p",
                &ChunkId::of(b"x"),
                frames_first(&entries),
                entries[0].frame_len
            ),
            Err(StoreError::CorruptChunk { .. })
        ));
        // truncation is detected
        store.put("t", &bytes[..bytes.len() - 3]).unwrap();
        assert!(matches!(
            read_footer(&store, "t"),
            Err(StoreError::CorruptObject { .. })
        ));
    }

    fn frames_first(e: &[FooterEntry]) -> u64 {
        e[0].offset as u64
    }
}
