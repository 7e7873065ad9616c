//! The wire format of transfer bundles (`docs/FORMAT.md`, "Bundles"): one stream holding
//! revisions' manifests, refs and chunks, for closed networks. Writing one from a store
//! and importing one (bounded memory, every chunk checked) is `store::bundle`.
//!
//! ```text
//! bundle  = "MCASBNDL" || version u16 LE (1) || flags u16 LE (0) || record* || end
//! record  = kind u8 || length u64 LE || payload
//!   1 manifest  the manifest object as stored (envelope MCASMANI)
//!   2 ref       envelope MCASBREF of BundleRef { repo, name, commit }
//!   3 chunk     chunk id (32) || raw length u32 LE || frame
//! end     = kind 0xFF || length 40 || records u64 LE || BLAKE3 of every byte before `end`
//! ```

use bincode::{Decode, Encode};

use crate::codec::{self, Kind};
use crate::error::{FormatError, Result};
use crate::names::{self, CommitId, RepoId};
use crate::{frame, ChunkId, MAX_CHUNK_LEN};

/// First bytes of a bundle.
pub const BUNDLE_MAGIC: &[u8; 8] = b"MCASBNDL";
/// Bundle format version.
pub const BUNDLE_VERSION: u16 = 1;
/// Length of the bundle header: magic, version, flags.
pub const HEADER_LEN: usize = 12;
/// Length of a record's head: kind, payload length.
pub const RECORD_HEAD_LEN: usize = 9;
/// Record kind: a manifest.
pub const KIND_MANIFEST: u8 = 1;
/// Record kind: a ref.
pub const KIND_REF: u8 = 2;
/// Record kind: a chunk.
pub const KIND_CHUNK: u8 = 3;
/// Record kind: the release labels of one revision ([`crate::release::BundleLabels`]),
/// after the refs, before the first chunk. Importers before it refuse the bundle ("unknown
/// record kind 4"); `export --no-labels` leaves them out.
pub const KIND_LABELS: u8 = 4;
/// Largest labels record: 64 labels of a 64-byte key and a 1 KiB value, with room.
pub const MAX_LABELS_RECORD: u64 = 128 << 10;
/// Record kind: the end record.
pub const KIND_END: u8 = 0xFF;
/// Payload length of the end record: record count, BLAKE3.
pub const END_LEN: usize = 40;
/// Bytes of a chunk record before its frame: chunk id, raw length.
pub const CHUNK_PREFIX_LEN: usize = 36;
/// Largest manifest record accepted (a manifest of a very large repository).
pub const MAX_MANIFEST_RECORD: u64 = 1 << 30;
/// Largest ref record: an envelope of a repo id (two parts of at most 96 bytes), a ref
/// name (at most 200 bytes) and a commit, with room to spare.
pub const MAX_REF_RECORD: u64 = 4096;
/// Largest chunk record: id, raw length, and a frame of the largest chunk (a frame's body
/// is never longer than its chunk: the encoder stores a chunk raw rather than grow it).
pub const MAX_CHUNK_RECORD: u64 =
    CHUNK_PREFIX_LEN as u64 + frame::HEADER_LEN as u64 + MAX_CHUNK_LEN as u64;

/// A ref carried by a bundle (`MCASBREF`).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct BundleRef {
    /// Repository.
    pub repo: RepoId,
    /// Ref name.
    pub name: String,
    /// Commit it points at.
    pub commit: CommitId,
}

/// The bundle header.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(BUNDLE_MAGIC);
    h[8..10].copy_from_slice(&BUNDLE_VERSION.to_le_bytes());
    h
}

/// Checks a bundle header (magic and version; the flags are ignored).
pub fn check_header(h: &[u8; HEADER_LEN]) -> Result<()> {
    if &h[..8] != BUNDLE_MAGIC {
        return Err(FormatError::Invalid(
            "not a modelcas bundle (bad magic)".into(),
        ));
    }
    let version = u16::from_le_bytes([h[8], h[9]]);
    if version != BUNDLE_VERSION {
        return Err(FormatError::Invalid(format!(
            "bundle format version {version}; this modelcas reads version {BUNDLE_VERSION}"
        )));
    }
    Ok(())
}

/// The head of a record of `kind` with a payload of `len` bytes.
pub fn record_head(kind: u8, len: u64) -> [u8; RECORD_HEAD_LEN] {
    let mut h = [0u8; RECORD_HEAD_LEN];
    h[0] = kind;
    h[1..].copy_from_slice(&len.to_le_bytes());
    h
}

/// The kind and payload length a record's head declares.
pub fn parse_record_head(h: &[u8; RECORD_HEAD_LEN]) -> (u8, u64) {
    let mut len = [0u8; 8];
    len.copy_from_slice(&h[1..]);
    (h[0], u64::from_le_bytes(len))
}

/// The largest payload a record of `kind` may declare; `None` for an unknown kind.
pub fn record_cap(kind: u8) -> Option<u64> {
    match kind {
        KIND_MANIFEST => Some(MAX_MANIFEST_RECORD),
        KIND_REF => Some(MAX_REF_RECORD),
        KIND_CHUNK => Some(MAX_CHUNK_RECORD),
        KIND_LABELS => Some(MAX_LABELS_RECORD),
        KIND_END => Some(END_LEN as u64),
        _ => None,
    }
}

/// The payload of a ref record.
pub fn encode_ref(r: &BundleRef) -> Vec<u8> {
    codec::encode(Kind::BundleRef, r, false)
}

/// Decodes the payload of a ref record: its envelope, and a valid ref name.
pub fn decode_ref(payload: &[u8]) -> Result<BundleRef> {
    let r: BundleRef =
        codec::decode(Kind::BundleRef, payload).map_err(|e| FormatError::Invalid(e.to_string()))?;
    names::check_ref_name(&r.name)?;
    Ok(r)
}

/// The payload of a labels record.
pub fn encode_labels(l: &crate::release::BundleLabels) -> Vec<u8> {
    codec::encode(Kind::BundleLabels, l, false)
}

/// Decodes the payload of a labels record: its envelope, and labels that follow the rules.
pub fn decode_labels(payload: &[u8]) -> Result<crate::release::BundleLabels> {
    let l: crate::release::BundleLabels = codec::decode(Kind::BundleLabels, payload)
        .map_err(|e| FormatError::Invalid(e.to_string()))?;
    l.check().map_err(FormatError::Invalid)?;
    Ok(l)
}

/// The bytes of a chunk record before its frame.
pub fn chunk_prefix(id: &ChunkId, raw_len: u32) -> [u8; CHUNK_PREFIX_LEN] {
    let mut p = [0u8; CHUNK_PREFIX_LEN];
    p[..32].copy_from_slice(&id.0);
    p[32..].copy_from_slice(&raw_len.to_le_bytes());
    p
}

/// The chunk id, raw length and frame of a chunk record's payload; `None` when it is too
/// short to hold an id and a length. Nothing is checked against the frame here.
pub fn parse_chunk(payload: &[u8]) -> Option<(ChunkId, u32, &[u8])> {
    if payload.len() < CHUNK_PREFIX_LEN {
        return None;
    }
    let mut id = [0u8; 32];
    id.copy_from_slice(&payload[..32]);
    let mut len = [0u8; 4];
    len.copy_from_slice(&payload[32..36]);
    Some((
        ChunkId(id),
        u32::from_le_bytes(len),
        &payload[CHUNK_PREFIX_LEN..],
    ))
}

/// The payload of the end record: the count of records before it and the BLAKE3 of every
/// byte before it (the end record is not part of its own checksum).
pub fn end_payload(records: u64, digest: &[u8; 32]) -> [u8; END_LEN] {
    let mut e = [0u8; END_LEN];
    e[..8].copy_from_slice(&records.to_le_bytes());
    e[8..].copy_from_slice(digest);
    e
}

/// Checks the end record's payload against the checksum of every byte before it and the
/// count of the records before it.
pub fn check_end(payload: &[u8], digest: &[u8; 32], records: u64) -> Result<()> {
    if payload.len() != END_LEN {
        return Err(FormatError::Invalid("malformed end record".into()));
    }
    let mut count = [0u8; 8];
    count.copy_from_slice(&payload[..8]);
    let count = u64::from_le_bytes(count);
    if &payload[8..] != digest {
        return Err(FormatError::Invalid(
            "checksum mismatch: the bundle was altered".into(),
        ));
    }
    if count != records {
        return Err(FormatError::Invalid(format!(
            "the end record counts {count} records, the bundle has {records}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taken from the code before the type moved here (store/tests/golden_records.rs).
    const GOLDEN_REF: &str = "4d4341534252454601000000036f7267056d6f64656c046d61696e1111111111111111111111111111111111111111a035ee924af4e9e1cd72d6419ec8ea89a2e8adb548bb8358a5e22974703300fb";
    /// An empty bundle as export wrote it before the move: header, then the end record.
    const GOLDEN_EMPTY: &str = "4d434153424e444c01000000ff28000000000000000000000000000000b4d9f1006c61215750453242e8b6c185454b5b43b21633d86411f2deb1fb7f39";

    #[test]
    fn ref_bytes_are_the_ones_written_before_the_move() {
        let r = BundleRef {
            repo: RepoId::parse("org/model").unwrap(),
            name: "main".into(),
            commit: CommitId([0x11; 20]),
        };
        let bytes = encode_ref(&r);
        assert_eq!(hex::encode(&bytes), GOLDEN_REF);
        assert_eq!(decode_ref(&bytes).unwrap(), r);
        let bad = encode_ref(&BundleRef {
            name: "../x".into(),
            ..r
        });
        assert!(decode_ref(&bad).is_err());
        assert!(decode_ref(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn an_empty_bundle_is_the_one_written_before_the_move() {
        let h = header();
        let digest = blake3::hash(&h);
        let mut b = h.to_vec();
        b.extend_from_slice(&record_head(KIND_END, END_LEN as u64));
        b.extend_from_slice(&end_payload(0, digest.as_bytes()));
        assert_eq!(hex::encode(&b), GOLDEN_EMPTY);
        check_header(&h).unwrap();
        let (kind, len) = parse_record_head(b[HEADER_LEN..][..RECORD_HEAD_LEN].try_into().unwrap());
        assert_eq!((kind, len, record_cap(kind)), (KIND_END, 40, Some(40)));
        let end = &b[HEADER_LEN + RECORD_HEAD_LEN..];
        check_end(end, digest.as_bytes(), 0).unwrap();
        assert!(check_end(end, digest.as_bytes(), 1).is_err());
        assert!(check_end(end, &[0; 32], 0).is_err());
        assert!(check_end(&end[1..], digest.as_bytes(), 0).is_err());
    }

    #[test]
    fn headers_and_chunk_records() {
        let mut h = header();
        h[8] = 2;
        let e = check_header(&h).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
        h[0] = b'X';
        assert!(check_header(&h)
            .unwrap_err()
            .to_string()
            .contains("bad magic"));
        let id = ChunkId::of(b"x");
        let mut rec = chunk_prefix(&id, 7).to_vec();
        rec.extend_from_slice(b"frame");
        assert_eq!(parse_chunk(&rec), Some((id, 7, &b"frame"[..])));
        assert_eq!(parse_chunk(&rec[..35]), None);
        assert_eq!(record_cap(4), Some(MAX_LABELS_RECORD));
        assert_eq!(record_cap(5), None);
        assert_eq!(MAX_CHUNK_RECORD, 36 + 16 + (16 << 20));
    }
}
