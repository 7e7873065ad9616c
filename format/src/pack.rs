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
//! `modelcas index rebuild` reads only the last bytes of each pack. Reading them from an
//! object store is the store crate's job; this module decodes and checks the bytes.

use crate::ChunkId;
use bincode::{Decode, Encode};

use crate::codec::{self, Kind};
use crate::error::{FormatError, Result};
use crate::frame;

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
            .map_err(|_| FormatError::Invalid(format!("not a pack id: {s:?}")))?;
        Ok(PackId(out))
    }
}

/// One chunk in a pack footer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct FooterEntry {
    /// The chunk id (BLAKE3 of the uncompressed chunk).
    pub id: ChunkId,
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
            id,
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

/// The footer's length, from the pack's last [`PACK_TRAILER_LEN`] bytes, checked against
/// the pack's `size`; `key` names the pack in errors.
pub fn decode_trailer(key: &str, size: u64, trailer: &[u8]) -> Result<u64> {
    let corrupt = |reason: String| FormatError::Corrupt {
        key: key.to_string(),
        reason,
    };
    if size < (PACK_HEADER_LEN + PACK_TRAILER_LEN) as u64 {
        return Err(corrupt(format!("pack of {size} bytes is too short")));
    }
    if trailer.len() != PACK_TRAILER_LEN || &trailer[4..] != PACK_END {
        return Err(corrupt("no pack end magic (truncated pack?)".into()));
    }
    let footer_len = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) as u64;
    if footer_len > size - (PACK_HEADER_LEN + PACK_TRAILER_LEN) as u64 {
        return Err(corrupt(format!(
            "footer length {footer_len} exceeds the pack"
        )));
    }
    Ok(footer_len)
}

/// Decodes and checks a footer that starts at byte `footer_at` of the pack: every entry
/// must lie within the frames and describe a possible chunk.
pub fn decode_footer(key: &str, footer_at: u64, bytes: &[u8]) -> Result<PackFooter> {
    let corrupt = |reason: String| FormatError::Corrupt {
        key: key.to_string(),
        reason,
    };
    let footer: PackFooter =
        codec::decode(Kind::PackFooter, bytes).map_err(|e| corrupt(format!("footer: {e}")))?;
    for e in &footer.entries {
        if (e.offset as u64) < PACK_HEADER_LEN as u64
            || e.offset as u64 + e.frame_len as u64 > footer_at
        {
            return Err(corrupt(format!(
                "footer entry at offset {} lies outside the frames",
                e.offset
            )));
        }
        if e.raw_len > crate::MAX_CHUNK_LEN || (e.frame_len as usize) < frame::HEADER_LEN {
            return Err(corrupt(format!(
                "footer entry at offset {} claims a frame of {} bytes for {} bytes of chunk",
                e.offset, e.frame_len, e.raw_len
            )));
        }
    }
    Ok(footer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_decode_the_footer() {
        let mut b = PackBuilder::new();
        let chunks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 1000 + i as usize]).collect();
        for c in &chunks {
            let mut f = Vec::new();
            frame::encode(c, &mut f);
            b.add_frame(ChunkId::of(c), &f, c.len());
        }
        let (id, bytes, entries) = b.finish();
        assert_eq!(&bytes[..8], PACK_MAGIC);
        assert_eq!(PackId(*blake3::hash(&bytes).as_bytes()), id);
        let size = bytes.len() as u64;
        let trailer = &bytes[bytes.len() - PACK_TRAILER_LEN..];
        let footer_len = decode_trailer("p", size, trailer).unwrap();
        let footer_at = size - PACK_TRAILER_LEN as u64 - footer_len;
        let footer = decode_footer(
            "p",
            footer_at,
            &bytes[footer_at as usize..][..footer_len as usize],
        )
        .unwrap();
        assert_eq!(footer.entries, entries);
        // a cut pack has no end magic
        let cut = &bytes[..bytes.len() - 3];
        assert!(matches!(
            decode_trailer("p", cut.len() as u64, &cut[cut.len() - PACK_TRAILER_LEN..]),
            Err(FormatError::Corrupt { .. })
        ));
        // a footer that claims frames past its own start is refused
        assert!(decode_footer(
            "p",
            PACK_HEADER_LEN as u64,
            &bytes[footer_at as usize..][..footer_len as usize]
        )
        .is_err());
    }
}
