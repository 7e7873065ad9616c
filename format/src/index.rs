//! The values of a node's local index (`docs/FORMAT.md`, "Local index"): a cache of the
//! bucket on one machine, rebuildable from it, kept in RocksDB by the `index` crate. Here
//! are their bytes only:
//!
//! * `chunks`: chunk id → [`ChunkLoc`] (pack id ‖ frame offset u32 ‖ frame length u32 ‖
//!   raw length u32, little endian: 44 bytes).
//! * `packs`: pack id → envelope `MCASIPAK` of [`IndexedPack`].
//! * `manifests`: key → u16 tag length ‖ tag ‖ bytes ([`tagged`]), holding cached objects
//!   under their listing tag, `files/<64 hex sha256>` → a file's chunk list
//!   ([`file_record`]), `stamps/<dev>/<ino>` → a [`FileStamp`]'s record
//!   ([`FileStamp::record`]), `xet-hash/<64 hex sha256>` → that content's Xet file hash
//!   ([`xet_hash_record`]) and `xet-first/<size>/<first chunk id>` → the sha256 of a file
//!   read with that size and first chunk ([`xet_first_record`]).
//! * `meta`: `store_id` (16 bytes) and `version` ([`LAYOUT_VERSION`], u32 LE).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bincode::{Decode, Encode};

use crate::codec::{self, CodecError, Kind};
use crate::hash::{ChunkListDigest, Sha256, XetHash};
use crate::pack::PackId;
use crate::ChunkId;

/// Version of the index layout; an index of another version is rebuilt.
pub const LAYOUT_VERSION: u32 = 2;

/// Bytes of a [`ChunkLoc`] value.
pub const CHUNK_LOC_LEN: usize = 44;

/// Where a chunk is stored (a value of the `chunks` family).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLoc {
    /// The pack holding the frame.
    pub pack: PackId,
    /// Offset of the frame in the pack.
    pub offset: u32,
    /// Frame length.
    pub frame_len: u32,
    /// Uncompressed length.
    pub raw_len: u32,
}

impl ChunkLoc {
    /// The value's bytes.
    pub fn to_bytes(self) -> [u8; CHUNK_LOC_LEN] {
        let mut b = [0u8; CHUNK_LOC_LEN];
        b[..32].copy_from_slice(&self.pack.0);
        b[32..36].copy_from_slice(&self.offset.to_le_bytes());
        b[36..40].copy_from_slice(&self.frame_len.to_le_bytes());
        b[40..44].copy_from_slice(&self.raw_len.to_le_bytes());
        b
    }

    /// Decodes a value; `None` unless it is exactly [`CHUNK_LOC_LEN`] bytes.
    pub fn from_bytes(b: &[u8]) -> Option<ChunkLoc> {
        if b.len() != CHUNK_LOC_LEN {
            return None;
        }
        let u = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut pack = [0u8; 32];
        pack.copy_from_slice(&b[..32]);
        Some(ChunkLoc {
            pack: PackId(pack),
            offset: u(32),
            frame_len: u(36),
            raw_len: u(40),
        })
    }
}

/// What the index remembers of a pack (a value of the `packs` family, `MCASIPAK`).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct IndexedPack {
    /// Object size in bytes.
    pub size: u64,
    /// The chunk ids in the pack.
    pub chunks: Vec<ChunkId>,
}

impl IndexedPack {
    /// The value's bytes.
    pub fn encode(&self) -> Vec<u8> {
        codec::encode(Kind::IndexPack, self, false)
    }

    /// Decodes a value, checking its envelope.
    pub fn decode(bytes: &[u8]) -> Result<IndexedPack, CodecError> {
        codec::decode(Kind::IndexPack, bytes)
    }
}

/// A value of the `manifests` family: `bytes` under `tag` (u16 LE length, tag, bytes);
/// `None` when the tag is longer than a u16 counts.
pub fn tagged(tag: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    let tag = tag.as_bytes();
    let len = u16::try_from(tag.len()).ok()?;
    let mut v = Vec::with_capacity(2 + tag.len() + bytes.len());
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(tag);
    v.extend_from_slice(bytes);
    Some(v)
}

/// The bytes of a `manifests` value, if it was stored under `tag`.
pub fn untagged<'a>(v: &'a [u8], tag: &str) -> Option<&'a [u8]> {
    if v.len() < 2 {
        return None;
    }
    let len = u16::from_le_bytes([v[0], v[1]]) as usize;
    if v.len() < 2 + len || &v[2..2 + len] != tag.as_bytes() {
        return None;
    }
    Some(&v[2 + len..])
}

/// Key of a file's chunk list in the `manifests` family (never an object key).
pub fn file_key(sha256: &Sha256) -> String {
    format!("files/{}", sha256.to_hex())
}

/// The value of a `files/` record (after its tag): count u32 LE, then each chunk's id
/// and length (u32 LE).
pub fn file_record(chunks: &[(ChunkId, u32)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + chunks.len() * 36);
    v.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    for (id, len) in chunks {
        v.extend_from_slice(&id.0);
        v.extend_from_slice(&len.to_le_bytes());
    }
    v
}

/// The chunks a `files/` record lists; `None` unless its length is the one its count
/// declares.
pub fn parse_file_record(v: &[u8]) -> Option<Vec<(ChunkId, u32)>> {
    let n = v
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))?;
    if v.len() != 4 + n as usize * 36 {
        return None;
    }
    let mut out = Vec::with_capacity(n as usize);
    for e in v[4..].chunks_exact(36) {
        let mut id = [0u8; 32];
        id.copy_from_slice(&e[..32]);
        out.push((
            ChunkId(id),
            u32::from_le_bytes([e[32], e[33], e[34], e[35]]),
        ));
    }
    Some(out)
}

/// The BLAKE3 of the `files/` record of `chunks` (its value after the tag): what a
/// `stamps/` record names a file's chunk list by.
pub fn chunk_list_digest(chunks: &[(ChunkId, u32)]) -> ChunkListDigest {
    ChunkListDigest(*blake3::hash(&file_record(chunks)).as_bytes())
}

/// Tag of the Xet memo records (`xet-hash/` and `xet-first/` keys).
pub const XET_MEMO_TAG: &str = "xet1";

/// Key of the Xet hash of the content with `sha256` in the `manifests` family.
pub fn xet_hash_key(sha256: &Sha256) -> String {
    format!("xet-hash/{}", sha256.to_hex())
}

/// The value of a `xet-hash/` record (after its tag): the Xet file hash, then the first 8
/// bytes of BLAKE3 `derive_key("modelcas index xet-hash memo v1")` over the sha256 and
/// the hash, so that a damaged or misplaced record reads as none.
pub fn xet_hash_record(sha256: &Sha256, xet: &XetHash) -> [u8; 40] {
    let mut h = blake3::Hasher::new_derive_key("modelcas index xet-hash memo v1");
    h.update(&sha256.0);
    h.update(&xet.0);
    let mut out = [0u8; 40];
    out[..32].copy_from_slice(&xet.0);
    out[32..].copy_from_slice(&h.finalize().as_bytes()[..8]);
    out
}

/// The Xet hash a `xet-hash/<sha256>` record holds, if it checks.
pub fn parse_xet_hash_record(sha256: &Sha256, v: &[u8]) -> Option<XetHash> {
    let xet = XetHash(v.get(..32)?.try_into().ok()?);
    (v == xet_hash_record(sha256, &xet)).then_some(xet)
}

/// Key of the hint that a file of `size` bytes whose first chunk is `first` was read
/// before (`xet-first/<16 hex size>/<64 hex chunk id>`).
pub fn xet_first_key(size: u64, first: &ChunkId) -> String {
    format!("xet-first/{size:016x}/{}", hex::encode(first.0))
}

/// The value of a `xet-first/` record (after its tag): the sha256 of the content read,
/// then the first 8 bytes of BLAKE3 `derive_key("modelcas index xet-first hint v1")` over
/// the size (u64 LE), the chunk id and the sha256.
pub fn xet_first_record(size: u64, first: &ChunkId, sha256: &Sha256) -> [u8; 40] {
    let mut h = blake3::Hasher::new_derive_key("modelcas index xet-first hint v1");
    h.update(&size.to_le_bytes());
    h.update(&first.0);
    h.update(&sha256.0);
    let mut out = [0u8; 40];
    out[..32].copy_from_slice(&sha256.0);
    out[32..].copy_from_slice(&h.finalize().as_bytes()[..8]);
    out
}

/// The sha256 a `xet-first/` record names, if it checks.
pub fn parse_xet_first_record(size: u64, first: &ChunkId, v: &[u8]) -> Option<Sha256> {
    let sha = Sha256(v.get(..32)?.try_into().ok()?);
    (v == xet_first_record(size, first, &sha)).then_some(sha)
}

/// What tells a file on this machine has not changed since it was read, without reading
/// it: the boot and the mount it was seen through, the device and inode it lives on, its
/// size, and its modification and status-change times to the nanosecond. Any write to a
/// file moves its ctime, which no user can set, so a file with the same stamp as a
/// recorded one has the recorded content, provided the record was taken when the file had
/// been still for a while ([`FileStamp::settled`]: on file systems whose clock ticks
/// coarsely, a write in the same tick as the read leaves the times as they were). The
/// times a write sets may stay in memory only (a crash then leaves the new bytes under the
/// old times, if the data was made durable); every crash ends the mount, so a record
/// taken in another boot or through another mount is never trusted (docs/FORMAT.md,
/// "Files taken unread").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    /// `/proc/sys/kernel/random/boot_id`, as 16 bytes.
    pub boot_id: [u8; 16],
    /// `statx`'s `STATX_MNT_ID_UNIQUE`: the mount the file was opened through, an id never
    /// given to another mount in the same boot.
    pub mount_id: u64,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mtime` in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// `st_ctime` in nanoseconds since the epoch.
    pub ctime_ns: i64,
}

/// Magic of a `stamps/` record.
pub const STAMP_MAGIC: &[u8; 8] = b"MCASSTMP";
/// Version of a `stamps/` record. (Records of 56 bytes, with no magic, were written before
/// there was one, and are never trusted: they are not bound to a boot and a mount.)
pub const STAMP_VERSION: u32 = 1;
/// Bytes of a `stamps/` record's fields that must equal the stamp: magic, version, boot id,
/// mount id, device, inode, size, mtime, ctime.
const STAMP_FIELDS_LEN: usize = 8 + 4 + 16 + 6 * 8;
/// Bytes of a `stamps/` record: the stamp's fields, sha256, chunk-list digest, checksum.
pub const STAMP_RECORD_LEN: usize = STAMP_FIELDS_LEN + 32 + 32 + 32;

impl FileStamp {
    /// Whether the file had been still for `quiet` at `now`: its mtime and ctime are both at
    /// least that far in the past. Only such a stamp may be recorded.
    pub fn settled(&self, now: SystemTime, quiet: Duration) -> bool {
        let Ok(now) = now.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let limit = i64::try_from(now.saturating_sub(quiet).as_nanos()).unwrap_or(i64::MAX);
        self.mtime_ns <= limit && self.ctime_ns <= limit
    }

    /// Key of this file's stamp record in the `manifests` family (never an object key).
    pub fn key(&self) -> String {
        format!("stamps/{:016x}/{:016x}", self.dev, self.ino)
    }

    /// The `stamps/` record of this stamp for content `sha256` cut into chunks whose
    /// `files/` record has the BLAKE3 `chunks` (see [`chunk_list_digest`]).
    pub fn record(&self, sha256: &Sha256, chunks: &ChunkListDigest) -> Vec<u8> {
        let mut v = Vec::with_capacity(STAMP_RECORD_LEN);
        v.extend_from_slice(STAMP_MAGIC);
        v.extend_from_slice(&STAMP_VERSION.to_le_bytes());
        v.extend_from_slice(&self.boot_id);
        for n in [self.mount_id, self.dev, self.ino, self.size] {
            v.extend_from_slice(&n.to_le_bytes());
        }
        v.extend_from_slice(&self.mtime_ns.to_le_bytes());
        v.extend_from_slice(&self.ctime_ns.to_le_bytes());
        v.extend_from_slice(&sha256.0);
        v.extend_from_slice(&chunks.0);
        let sum = blake3::hash(&v);
        v.extend_from_slice(sum.as_bytes());
        v
    }

    /// The sha256 and chunk-list digest of record `v`, if it is an intact record (its
    /// checksum holds) of this very stamp; `None` for any other record, a damaged one, or
    /// one of another version.
    pub fn recorded(&self, v: &[u8]) -> Option<(Sha256, ChunkListDigest)> {
        if v.len() != STAMP_RECORD_LEN {
            return None;
        }
        let (body, sum) = v.split_at(STAMP_RECORD_LEN - 32);
        if blake3::hash(body).as_bytes()[..] != sum[..] {
            return None;
        }
        let zero = (Sha256::default(), ChunkListDigest::default());
        if body[..STAMP_FIELDS_LEN] != self.record(&zero.0, &zero.1)[..STAMP_FIELDS_LEN] {
            return None;
        }
        let sha256 = Sha256(
            body[STAMP_FIELDS_LEN..STAMP_FIELDS_LEN + 32]
                .try_into()
                .ok()?,
        );
        let chunks = ChunkListDigest(body[STAMP_FIELDS_LEN + 32..].try_into().ok()?);
        Some((sha256, chunks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taken from the code before the records moved here (store/tests/golden_records.rs).
    const GOLDEN_FILE_RECORD: &str = "0200000022896bcbc3d1c76a0b90c4c3523dbea532ad63196fafdbd52cced52200d3dae405000000cd85637651ec7a557bddd61c5ddd1df21ad8bbbaf6c3c098482b3ed1c101496406000000";
    const GOLDEN_STAMP_RECORD: &str = "4d43415353544d5001000000b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0000000000200000001080000000000004d000000000000000b0000000000000015cd853dfe9c9717fbffffffffffffff5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5ab57ca4f4a784c9474d287d19048306a43632cbad8e2a000e87d79c367da74d210674c5db4ac76e271acf85e57aa73a4f98e9f0d8e0c16d75e516bcf98889ade7";
    const GOLDEN_CHUNK_LIST_DIGEST: &str =
        "b57ca4f4a784c9474d287d19048306a43632cbad8e2a000e87d79c367da74d21";

    fn chunks() -> Vec<(ChunkId, u32)> {
        vec![(ChunkId::of(b"first"), 5), (ChunkId::of(b"second"), 6)]
    }

    fn stamp() -> FileStamp {
        FileStamp {
            boot_id: [0xB0; 16],
            mount_id: 1 << 33,
            dev: 2049,
            ino: 77,
            size: 11,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: -5,
        }
    }

    #[test]
    fn file_and_stamp_records_are_the_ones_written_before_the_move() {
        let files = file_record(&chunks());
        assert_eq!(hex::encode(&files), GOLDEN_FILE_RECORD);
        assert_eq!(parse_file_record(&files), Some(chunks()));
        assert_eq!(parse_file_record(&files[..files.len() - 1]), None);
        assert_eq!(parse_file_record(&files[..3]), None);
        let digest = chunk_list_digest(&chunks());
        assert_eq!(digest.to_hex(), GOLDEN_CHUNK_LIST_DIGEST);
        let rec = stamp().record(&Sha256([0x5A; 32]), &digest);
        assert_eq!(hex::encode(&rec), GOLDEN_STAMP_RECORD);
        assert_eq!(rec.len(), STAMP_RECORD_LEN);
        assert_eq!(stamp().recorded(&rec), Some((Sha256([0x5A; 32]), digest)));
        let other = FileStamp { ino: 78, ..stamp() };
        assert_eq!(other.recorded(&rec), None);
        assert_eq!(stamp().key(), "stamps/0000000000000801/000000000000004d");
        assert_eq!(
            file_key(&Sha256([0xAB; 32])),
            format!("files/{}", "ab".repeat(32))
        );
    }

    #[test]
    fn chunk_locations_and_pack_records() {
        let loc = ChunkLoc {
            pack: PackId([7; 32]),
            offset: 0x0102_0304,
            frame_len: 16,
            raw_len: 1 << 20,
        };
        let b = loc.to_bytes();
        // Pack id, then offset, frame length and raw length, u32 little endian.
        let want = format!("{}04030201{}{}", "07".repeat(32), "10000000", "00001000");
        assert_eq!(hex::encode(b), want);
        assert_eq!(ChunkLoc::from_bytes(&b), Some(loc));
        assert_eq!(ChunkLoc::from_bytes(&b[..43]), None);
        let p = IndexedPack {
            size: 300,
            chunks: vec![ChunkId([1; 32])],
        };
        let bytes = p.encode();
        assert_eq!(&bytes[..8], b"MCASIPAK");
        // size varint 300 (0xfb 0x2c 0x01), one chunk id.
        let payload = &bytes[12..bytes.len() - 32];
        assert_eq!(payload, [&[0xfb, 0x2c, 0x01, 1][..], &[1; 32][..]].concat());
        assert_eq!(IndexedPack::decode(&bytes).unwrap(), p);
    }

    #[test]
    fn tags() {
        let v = tagged("etag-1", b"bytes").unwrap();
        assert_eq!(&v[..8], b"\x06\x00etag-1");
        assert_eq!(untagged(&v, "etag-1"), Some(&b"bytes"[..]));
        assert_eq!(untagged(&v, "etag-2"), None);
        assert_eq!(untagged(&v[..1], ""), None);
        assert_eq!(tagged("", b"x").unwrap(), b"\x00\x00x");
        assert_eq!(tagged(&"t".repeat(70_000), b"x"), None);
    }

    #[test]
    fn a_stamp_is_settled_once_both_times_are_old_enough() {
        let at = |ns: i64| UNIX_EPOCH + Duration::from_nanos(ns as u64);
        let st = FileStamp {
            boot_id: [0; 16],
            mount_id: 1,
            dev: 1,
            ino: 1,
            size: 1,
            mtime_ns: 10_000_000_000,
            ctime_ns: 20_000_000_000,
        };
        let two = Duration::from_secs(2);
        assert!(!st.settled(at(21_999_999_999), two), "ctime 1.99 s ago");
        assert!(st.settled(at(22_000_000_000), two));
        let future = FileStamp {
            mtime_ns: 30_000_000_000,
            ..st
        };
        assert!(
            !future.settled(at(23_000_000_000), two),
            "mtime in the future"
        );
        assert!(st.settled(at(20_000_000_000), Duration::ZERO));
        assert!(!st.settled(UNIX_EPOCH, Duration::ZERO));
    }
}
