//! Chunks as every persisted structure names them: the [`ChunkId`] (the BLAKE3 hash of a
//! chunk's uncompressed bytes) and [`MAX_CHUNK_LEN`], the largest chunk any reader accepts.
//! The chunker (`chunker`, FastCDC) makes chunks; this is what the bytes say about them.

use std::fmt;

use bincode::{Decode, Encode};

/// The largest chunk a store holds: 16 MiB, FastCDC 2020's upper bound for its maximum
/// size (the chunker checks that its bound is this one). Readers refuse a chunk, frame,
/// pack footer entry, manifest entry or bundle record claiming more, before allocating
/// for it.
pub const MAX_CHUNK_LEN: u32 = 16 << 20;

/// The BLAKE3-256 digest of a chunk's uncompressed bytes. Two chunks with the same id
/// are treated as the same chunk everywhere in modelcas. Encoded (bincode) as the bare
/// 32 bytes, as the `[u8; 32]` fields it replaced were.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode)]
pub struct ChunkId(pub [u8; 32]);

impl ChunkId {
    /// Hashes `data` (multi-threaded BLAKE3 is not used: chunks are small and the
    /// ingest pipeline already runs one chunk per core).
    pub fn of(data: &[u8]) -> ChunkId {
        ChunkId(*blake3::hash(data).as_bytes())
    }

    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<ChunkId, ParseChunkIdError> {
        if s.len() != 64 {
            return Err(ParseChunkIdError(s.to_string()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in s.as_bytes().chunks(2).enumerate() {
            let txt = std::str::from_utf8(pair).map_err(|_| ParseChunkIdError(s.to_string()))?;
            out[i] = u8::from_str_radix(txt, 16).map_err(|_| ParseChunkIdError(s.to_string()))?;
        }
        Ok(ChunkId(out))
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// A string that is not 64 hex digits.
#[derive(Debug, thiserror::Error)]
#[error("not a chunk id (64 hex digits): {0:?}")]
pub struct ParseChunkIdError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let id = ChunkId::of(b"hello");
        assert_eq!(ChunkId::from_hex(&id.to_hex()).unwrap(), id);
        assert_eq!(
            id.to_hex(),
            "ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f"
        );
        assert!(ChunkId::from_hex("zz").is_err());
    }
}
