//! The Xet hash as a value: the 256-bit [`XetHash`], its spelling, and the three BLAKE3
//! keys that make a chunk hash, a Merkle node hash and a file hash of it.

use std::fmt;

/// The BLAKE3 key of chunk hashes (xet-core `merklehash::DATA_KEY`).
pub const DATA_KEY: [u8; 32] = [
    102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28, 157, 228, 33, 16,
    155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41,
];
/// The BLAKE3 key of Merkle nodes (xet-core `merklehash::INTERNAL_NODE_HASH`).
pub const INTERNAL_NODE_KEY: [u8; 32] = [
    1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230, 93, 221, 83, 111, 55,
    199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63,
];
/// The BLAKE3 key of the file hash over the Merkle root (xet-core: a zero salt).
pub const FILE_KEY: [u8; 32] = [0; 32];

/// A 256-bit Xet hash (chunk, node or file), as the 32 bytes BLAKE3 outputs.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XetHash(pub [u8; 32]);

/// A string that is not a Xet hash.
#[derive(Debug, thiserror::Error)]
#[error("not a Xet hash (64 hex digits): {0:?}")]
pub struct ParseError(String);

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
    pub fn parse(s: &str) -> Result<XetHash, ParseError> {
        let bad = || ParseError(s.chars().take(80).collect());
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

    /// The word the Merkle grouping tests (`% 4 == 0`): bytes 24..32, little-endian.
    pub(crate) fn last_word(&self) -> u64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.0[24..]);
        u64::from_le_bytes(word)
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

/// The chunk hash of `data` (BLAKE3 keyed with [`DATA_KEY`]).
pub fn chunk_hash(data: &[u8]) -> XetHash {
    XetHash(*blake3::keyed_hash(&DATA_KEY, data).as_bytes())
}

/// The file hash of a Merkle root (BLAKE3 keyed with [`FILE_KEY`]).
pub fn file_hash_of_root(root: &XetHash) -> XetHash {
    XetHash(*blake3::keyed_hash(&FILE_KEY, &root.0).as_bytes())
}
