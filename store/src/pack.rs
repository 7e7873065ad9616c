//! Pack objects: many chunk frames in one object, with a footer listing them.
//!
//! ```text
//! pack    = header || frame* || footer || footer_len (u32 LE) || "MCASPEND"
//! header  = "MCASPACK" || version (u16 LE, 1) || reserved (u16, 0) || reserved (u32, 0)
//! footer  = envelope(PackFooter)   (see codec.rs: magic "MCASPFTR", BLAKE3 trailer)
//! ```
//!
//! A pack is named by the BLAKE3 hash of its complete bytes ([`PackId`]), so a pack key
//! can never name two different contents. The footer makes every pack self-describing:
//! `modelcas index rebuild` reads only the last bytes of each pack.

use bincode::{Decode, Encode};
use chunker::ChunkId;

use crate::backend::ObjectStore;
use crate::codec::{self, Kind};
use crate::frame;
use crate::{Result, StoreError};

/// Magic at the start of every pack.
pub const PACK_MAGIC: &[u8; 8] = b"MCASPACK";
/// Magic at the very end of every pack.
pub const PACK_END: &[u8; 8] = b"MCASPEND";
/// Pack format version.
pub const PACK_VERSION: u16 = 1;
/// Bytes of the pack header.
pub const PACK_HEADER_LEN: usize = 16;
/// Bytes of the trailer (footer length + end magic).
pub const PACK_TRAILER_LEN: usize = 12;
/// Default pack size target: a pack is closed once its frames pass this size. 32 MiB keeps
/// objects "tens of MiB" (few objects, efficient S3 requests) while bounding the memory
/// of the pack being built.
pub const DEFAULT_PACK_TARGET: usize = 32 * 1024 * 1024;

/// The BLAKE3 of a pack's bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Encode, Decode)]
pub struct PackId(pub [u8; 32]);

impl PackId {
    /// 64 lower-case hex digits.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<PackId> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out)
            .map_err(|_| StoreError::Invalid(format!("not a pack id: {s:?}")))?;
        Ok(PackId(out))
    }
}

/// One chunk in a pack footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct FooterEntry {
    /// The chunk id (BLAKE3 of the uncompressed chunk).
    pub id: [u8; 32],
    /// Offset of the frame from the start of the pack.
    pub offset: u32,
    /// Length of the frame, header included.
    pub frame_len: u32,
    /// Length of the uncompressed chunk.
    pub raw_len: u32,
}

/// The footer of a pack.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct PackFooter {
    /// Every frame in the pack, in order.
    pub entries: Vec<FooterEntry>,
}

/// Builds one pack in memory.
pub struct PackBuilder {
    buf: Vec<u8>,
    entries: Vec<FooterEntry>,
}

impl Default for PackBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PackBuilder {
    /// An empty pack (header only).
    pub fn new() -> PackBuilder {
        let mut buf = Vec::with_capacity(1024 * 1024);
        buf.extend_from_slice(PACK_MAGIC);
        buf.extend_from_slice(&PACK_VERSION.to_le_bytes());
        buf.extend_from_slice(&[0u8; 6]);
        PackBuilder {
            buf,
            entries: Vec::new(),
        }
    }

    /// Appends an already encoded frame; returns its offset.
    pub fn add_frame(&mut self, id: ChunkId, frame: &[u8], raw_len: usize) -> u32 {
        let offset = self.buf.len() as u32;
        self.buf.extend_from_slice(frame);
        self.entries.push(FooterEntry {
            id: id.0,
            offset,
            frame_len: frame.len() as u32,
            raw_len: raw_len as u32,
        });
        offset
    }

    /// Bytes so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when no frame was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the footer and returns the pack's id, bytes and entries.
    pub fn finish(mut self) -> (PackId, Vec<u8>, Vec<FooterEntry>) {
        let footer = codec::encode(
            Kind::PackFooter,
            &PackFooter {
                entries: self.entries.clone(),
            },
            false,
        );
        self.buf.extend_from_slice(&footer);
        self.buf
            .extend_from_slice(&(footer.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(PACK_END);
        let id = PackId(*blake3::hash(&self.buf).as_bytes());
        (id, self.buf, self.entries)
    }
}

/// Reads and checks the footer of the pack at `key` (two ranged reads: the trailer, then
/// the footer).
pub fn read_footer(store: &dyn ObjectStore, key: &str) -> Result<PackFooter> {
    let corrupt = |reason: String| StoreError::CorruptObject {
        key: key.to_string(),
        reason,
    };
    let size = store
        .size(key)?
        .ok_or_else(|| StoreError::NotFound(key.to_string()))?;
    if size < (PACK_HEADER_LEN + PACK_TRAILER_LEN) as u64 {
        return Err(corrupt(format!("pack of {size} bytes is too short")));
    }
    let trailer = store.get_range(key, size - PACK_TRAILER_LEN as u64, PACK_TRAILER_LEN as u64)?;
    if &trailer[4..] != PACK_END {
        return Err(corrupt("no pack end magic (truncated pack?)".into()));
    }
    let footer_len = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) as u64;
    if footer_len > size - (PACK_HEADER_LEN + PACK_TRAILER_LEN) as u64 {
        return Err(corrupt(format!(
            "footer length {footer_len} exceeds the pack"
        )));
    }
    let footer_at = size - PACK_TRAILER_LEN as u64 - footer_len;
    let bytes = store.get_range(key, footer_at, footer_len)?;
    let footer: PackFooter =
        codec::decode(Kind::PackFooter, &bytes).map_err(|e| corrupt(format!("footer: {e}")))?;
    for e in &footer.entries {
        if (e.offset as u64) < PACK_HEADER_LEN as u64
            || e.offset as u64 + e.frame_len as u64 > footer_at
        {
            return Err(corrupt(format!(
                "footer entry at offset {} lies outside the frames",
                e.offset
            )));
        }
        if e.raw_len > chunker::MAX_CHUNK_LEN || (e.frame_len as usize) < frame::HEADER_LEN {
            return Err(corrupt(format!(
                "footer entry at offset {} claims a frame of {} bytes for {} bytes of chunk",
                e.offset, e.frame_len, e.raw_len
            )));
        }
    }
    Ok(footer)
}

/// Reads one frame and decodes it, checking the chunk's BLAKE3 against `id`.
pub fn read_chunk(
    store: &dyn ObjectStore,
    key: &str,
    id: &ChunkId,
    offset: u64,
    frame_len: u32,
) -> Result<Vec<u8>> {
    decode_checked(
        &read_frame(store, key, id, offset, frame_len)?,
        id,
        key,
        offset,
    )
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
            StoreError::CorruptObject { reason, .. } => corrupt_chunk(id, key, offset, reason),
            other => other,
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
    use crate::backend::MemoryStore;

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
