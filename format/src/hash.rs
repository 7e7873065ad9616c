//! The named 32-byte hashes that are not chunk or pack ids: [`Sha256`] (a file's SHA-256),
//! [`XetHash`] (a Xet hash: chunk, Merkle node, file or xorb) and [`ChunkListDigest`] (the
//! BLAKE3 of a file's chunk list, [`crate::index::chunk_list_digest`]). The chunk id is
//! [`crate::ChunkId`], the pack id [`crate::pack::PackId`], the commit id
//! [`crate::CommitId`].
//!
//! Each is the 32 bytes its hash function outputs, in that order, in a public field, with
//! nothing else: its bincode encoding (manifests, index values) and its serde encoding are
//! exactly those of the `[u8; 32]` it wraps (bincode: the 32 bytes, no length; serde: a
//! tuple of 32 `u8`, in JSON an array of 32 numbers), so a type replaced a raw array in a
//! persisted structure without changing one byte (the tests below compare them). A type
//! says which hash a field holds; the bytes of the formats (`docs/format/`) do not change.
//!
//! Spelling, for people, URLs and index keys:
//!
//! * [`Sha256`] and [`ChunkListDigest`]: 64 lower-case hex digits, the bytes in order
//!   ([`Sha256::to_hex`], `Display`; [`Sha256::from_hex`] and `FromStr` take either case).
//! * [`XetHash`]: Xet's own spelling, each 8-byte word read little-endian and printed as 16
//!   hex digits ([`XetHash::hex`], `Display`; [`XetHash::parse`] and `FromStr`), as the Hub
//!   lists a file's `xetHash` and xet-core prints it (docs/format/xet.md). Where modelcas
//!   spells one in plain byte order (the xorb id in a signed fetch URL) it says so and uses
//!   the field's bytes.
//!
//! `Debug` shows the type and the same hex as `Display`.

use std::fmt;
use std::str::FromStr;

use bincode::{Decode, Encode};
use serde::{Deserialize, Serialize};

/// A string that is not the 64 hex digits of a hash: `what` it should have been, and the
/// string (its first 80 characters).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a {what} (64 hex digits): {input:?}")]
pub struct ParseHashError {
    /// The kind of hash expected: `sha256`, `Xet hash`, `chunk-list digest`.
    pub what: &'static str,
    /// The string refused, cut to 80 characters.
    pub input: String,
}

impl ParseHashError {
    fn new(what: &'static str, s: &str) -> ParseHashError {
        ParseHashError {
            what,
            input: s.chars().take(80).collect(),
        }
    }
}

/// 64 hex digits (either case) in byte order.
fn parse_plain(what: &'static str, s: &str) -> Result<[u8; 32], ParseHashError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).map_err(|_| ParseHashError::new(what, s))?;
    Ok(out)
}

/// The type, its derives (bincode and serde as the bare array) and conversions; the
/// spelling is each type's own.
macro_rules! named_hash {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Encode, Decode, Serialize,
            Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// The 32 bytes.
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }
        }

        impl From<[u8; 32]> for $name {
            fn from(bytes: [u8; 32]) -> $name {
                $name(bytes)
            }
        }

        impl From<$name> for [u8; 32] {
            fn from(h: $name) -> [u8; 32] {
                h.0
            }
        }
    };
}

/// Plain hex spelling (byte order, lower case) for a type of [`named_hash`].
macro_rules! plain_hex {
    ($name:ident, $what:literal) => {
        impl $name {
            /// 64 lower-case hex digits, the bytes in order.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            /// Parses 64 hex digits (either case), the bytes in order.
            pub fn from_hex(s: &str) -> Result<$name, ParseHashError> {
                parse_plain($what, s).map($name)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.to_hex())
            }
        }

        impl FromStr for $name {
            type Err = ParseHashError;
            fn from_str(s: &str) -> Result<$name, ParseHashError> {
                $name::from_hex(s)
            }
        }
    };
}

named_hash! {
    /// The SHA-256 of a file's whole content: a manifest's `FileEntry::sha256`, the Hub's
    /// LFS oid, the key of the index's chunk lists and Xet memo records.
    Sha256
}
plain_hex!(Sha256, "sha256");

named_hash! {
    /// The BLAKE3 of a file's `files/` index record ([`crate::index::chunk_list_digest`]):
    /// what a `stamps/` record names a file's chunk list by.
    ChunkListDigest
}
plain_hex!(ChunkListDigest, "chunk-list digest");

named_hash! {
    /// A 256-bit Xet hash (a chunk, Merkle node, file or xorb hash), as the 32 bytes BLAKE3
    /// outputs: a manifest's `xet_hashes`, the Hub's `xetHash`. Spelled Xet's way
    /// ([`XetHash::hex`]), not in byte order.
    XetHash
}

impl XetHash {
    /// Xet's spelling: each 8-byte word read little-endian, printed as 16 hex digits.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for w in self.0.chunks_exact(8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            s.push_str(&format!("{:016x}", u64::from_le_bytes(word)));
        }
        s
    }

    /// Parses [`XetHash::hex`]'s spelling (lower or upper case).
    pub fn parse(s: &str) -> Result<XetHash, ParseHashError> {
        let bad = || ParseHashError::new("Xet hash", s);
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, w) in out.chunks_exact_mut(8).enumerate() {
            let word = u64::from_str_radix(&s[i * 16..i * 16 + 16], 16).map_err(|_| bad())?;
            w.copy_from_slice(&word.to_le_bytes());
        }
        Ok(XetHash(out))
    }
}

impl fmt::Display for XetHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Debug for XetHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "XetHash({})", self.hex())
    }
}

impl FromStr for XetHash {
    type Err = ParseHashError;
    fn from_str(s: &str) -> Result<XetHash, ParseHashError> {
        XetHash::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ChunkId;

    fn bytes() -> [u8; 32] {
        std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(200))
    }

    /// The old raw array and the named type encode to the same bytes, and each decodes the
    /// other's bytes, in bincode (the formats' configuration) and in serde (JSON).
    #[test]
    fn encodings_are_the_raw_arrays() {
        let raw = bytes();
        let cfg = bincode::config::standard();
        let old = bincode::encode_to_vec(raw, cfg).unwrap();
        assert_eq!(old, raw.to_vec(), "a bare array: its 32 bytes");
        let json = serde_json::to_string(&raw).unwrap();
        macro_rules! same {
            ($t:ident) => {{
                let h = $t(raw);
                assert_eq!(bincode::encode_to_vec(h, cfg).unwrap(), old);
                let (back, n): ($t, usize) = bincode::decode_from_slice(&old, cfg).unwrap();
                assert_eq!((back, n), (h, 32));
                assert_eq!(serde_json::to_string(&h).unwrap(), json);
                assert_eq!(serde_json::from_str::<$t>(&json).unwrap(), h);
                // Inside containers too (a manifest's Vec and Option of them).
                let v = vec![raw, [0; 32]];
                let hv = vec![$t(raw), $t([0; 32])];
                assert_eq!(
                    bincode::encode_to_vec(&hv, cfg).unwrap(),
                    bincode::encode_to_vec(&v, cfg).unwrap()
                );
                assert_eq!(
                    bincode::encode_to_vec(Some($t(raw)), cfg).unwrap(),
                    bincode::encode_to_vec(Some(raw), cfg).unwrap()
                );
                assert_eq!(
                    serde_json::to_string(&hv).unwrap(),
                    serde_json::to_string(&v).unwrap()
                );
            }};
        }
        same!(Sha256);
        same!(XetHash);
        same!(ChunkListDigest);
        // The chunk id (bincode only: no JSON carries one).
        let id = ChunkId(raw);
        assert_eq!(bincode::encode_to_vec(id, cfg).unwrap(), old);
        let (back, _): (ChunkId, usize) = bincode::decode_from_slice(&old, cfg).unwrap();
        assert_eq!(back, id);
    }

    /// Every persisted structure whose `[u8; 32]` fields became named hashes encodes to the
    /// bytes the raw fields gave: each old layout written out again here, field for field.
    #[test]
    fn persisted_structures_encode_as_before() {
        use crate::forward::MovedFrame;
        use crate::index::IndexedPack;
        use crate::manifest::{ChunkRef, FileEntry, Manifest, Published};
        use crate::pack::{FooterEntry, PackFooter, PackId};
        use crate::{CommitId, RepoId};

        #[derive(Encode)]
        struct OldChunkRef {
            id: [u8; 32],
            pack: u32,
            offset: u32,
            frame_len: u32,
            raw_len: u32,
        }
        #[derive(Encode)]
        struct OldFileEntry {
            path: String,
            size: u64,
            sha256: [u8; 32],
            executable: bool,
            chunks: Vec<OldChunkRef>,
        }
        #[derive(Encode)]
        struct OldManifest {
            repo: RepoId,
            commit: CommitId,
            ingested_at: u64,
            source: String,
            packs: Vec<PackId>,
            files: Vec<OldFileEntry>,
            published: Option<Published>,
            xet_hashes: Vec<[u8; 32]>,
        }
        #[derive(Encode)]
        struct OldFooterEntry {
            id: [u8; 32],
            offset: u32,
            frame_len: u32,
            raw_len: u32,
        }
        #[derive(Encode)]
        struct OldMovedFrame {
            offset: u32,
            id: [u8; 32],
            target: u32,
            new_offset: u32,
            frame_len: u32,
        }
        #[derive(Encode)]
        struct OldIndexedPack {
            size: u64,
            chunks: Vec<[u8; 32]>,
        }

        let cfg = bincode::config::standard();
        let b = |i: u8| -> [u8; 32] { std::array::from_fn(|k| i.wrapping_add(k as u8)) };
        let new = Manifest {
            repo: RepoId::parse("org/name").unwrap(),
            commit: CommitId([9; 20]),
            ingested_at: 1_796_091_248,
            source: "plain".into(),
            packs: vec![PackId(b(1))],
            files: vec![FileEntry {
                path: "a.bin".into(),
                size: 300,
                sha256: Sha256(b(2)),
                executable: true,
                chunks: vec![ChunkRef {
                    id: ChunkId(b(3)),
                    pack: 0,
                    offset: 16,
                    frame_len: 316,
                    raw_len: 300,
                }],
            }],
            published: Some(Published {
                store_ms: 5,
                seq: 6,
            }),
            xet_hashes: vec![XetHash(b(4))],
        };
        let old = OldManifest {
            repo: new.repo.clone(),
            commit: new.commit,
            ingested_at: new.ingested_at,
            source: new.source.clone(),
            packs: new.packs.clone(),
            files: vec![OldFileEntry {
                path: "a.bin".into(),
                size: 300,
                sha256: b(2),
                executable: true,
                chunks: vec![OldChunkRef {
                    id: b(3),
                    pack: 0,
                    offset: 16,
                    frame_len: 316,
                    raw_len: 300,
                }],
            }],
            published: new.published,
            xet_hashes: vec![b(4)],
        };
        let bytes = bincode::encode_to_vec(&old, cfg).unwrap();
        assert_eq!(bincode::encode_to_vec(&new, cfg).unwrap(), bytes);
        let (back, _): (Manifest, usize) = bincode::decode_from_slice(&bytes, cfg).unwrap();
        assert_eq!(back, new);

        let footer = PackFooter {
            entries: vec![FooterEntry {
                id: ChunkId(b(5)),
                offset: 16,
                frame_len: 20,
                raw_len: 4,
            }],
        };
        let old_footer = vec![OldFooterEntry {
            id: b(5),
            offset: 16,
            frame_len: 20,
            raw_len: 4,
        }];
        assert_eq!(
            bincode::encode_to_vec(&footer, cfg).unwrap(),
            bincode::encode_to_vec(&old_footer, cfg).unwrap()
        );
        let frame = MovedFrame {
            offset: 16,
            id: ChunkId(b(6)),
            target: 0,
            new_offset: 32,
            frame_len: 20,
        };
        let old_frame = OldMovedFrame {
            offset: 16,
            id: b(6),
            target: 0,
            new_offset: 32,
            frame_len: 20,
        };
        assert_eq!(
            bincode::encode_to_vec(frame, cfg).unwrap(),
            bincode::encode_to_vec(&old_frame, cfg).unwrap()
        );
        let pack = IndexedPack {
            size: 300,
            chunks: vec![ChunkId(b(7)), ChunkId(b(8))],
        };
        let old_pack = OldIndexedPack {
            size: 300,
            chunks: vec![b(7), b(8)],
        };
        assert_eq!(
            bincode::encode_to_vec(&pack, cfg).unwrap(),
            bincode::encode_to_vec(&old_pack, cfg).unwrap()
        );
    }

    #[test]
    fn plain_hex_round_trips_and_refuses_others() {
        let s = Sha256(bytes());
        let hex = hex::encode(bytes());
        assert_eq!(s.to_hex(), hex);
        assert_eq!(s.to_string(), hex);
        assert_eq!(format!("{s:?}"), format!("Sha256({hex})"));
        assert_eq!(Sha256::from_hex(&hex).unwrap(), s);
        assert_eq!(hex.to_uppercase().parse::<Sha256>().unwrap(), s);
        let d = ChunkListDigest(bytes());
        assert_eq!(d.to_string(), hex);
        assert_eq!(format!("{d:?}"), format!("ChunkListDigest({hex})"));
        assert_eq!(hex.parse::<ChunkListDigest>().unwrap(), d);
        for bad in [
            "",
            "00",
            &hex[1..],
            &format!("{hex}0"),
            &hex.replace('a', "g"),
        ] {
            let e = Sha256::from_hex(bad).unwrap_err();
            assert_eq!(e.what, "sha256");
            assert!(
                e.to_string().starts_with("not a sha256 (64 hex digits)"),
                "{e}"
            );
            assert!(bad.parse::<ChunkListDigest>().is_err());
        }
    }

    /// Xet's spelling, as xethash printed it before the type moved here: four words, each
    /// read little-endian.
    #[test]
    fn xet_spelling_is_little_endian_words() {
        let mut b = [0u8; 32];
        b[0] = 1;
        b[8..16].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
        b[31] = 0xff;
        let h = XetHash(b);
        let want = "0000000000000001\
                    0123456789abcdef\
                    0000000000000000\
                    ff00000000000000";
        assert_eq!(h.hex(), want);
        assert_eq!(h.to_string(), want);
        assert_eq!(format!("{h:?}"), format!("XetHash({want})"));
        assert_eq!(XetHash::parse(want).unwrap(), h);
        assert_eq!(want.to_uppercase().parse::<XetHash>().unwrap(), h);
        assert_ne!(h.hex(), hex::encode(b), "not byte order");
        let long = "x".repeat(100);
        let e = XetHash::parse(&long).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("not a Xet hash (64 hex digits): {:?}", "x".repeat(80))
        );
        assert!(XetHash::parse(&want[1..]).is_err());
        assert!(XetHash::parse(&format!("+{}", &want[1..])).is_err());
    }
}
