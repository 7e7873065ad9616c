//! The three BLAKE3 keys that make a chunk hash, a Merkle node hash and a file hash, and
//! the functions that apply them. The value, [`XetHash`] with its spelling, is `format`'s
//! (`format::hash`), where the manifests that store it are.

use format::XetHash;

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

/// The word the Merkle grouping tests (`% 4 == 0`): bytes 24..32, little-endian.
pub(crate) fn last_word(h: &XetHash) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&h.0[24..]);
    u64::from_le_bytes(word)
}

/// The chunk hash of `data` (BLAKE3 keyed with [`DATA_KEY`]).
pub fn chunk_hash(data: &[u8]) -> XetHash {
    XetHash(*blake3::keyed_hash(&DATA_KEY, data).as_bytes())
}

/// The file hash of a Merkle root (BLAKE3 keyed with [`FILE_KEY`]).
pub fn file_hash_of_root(root: &XetHash) -> XetHash {
    XetHash(*blake3::keyed_hash(&FILE_KEY, &root.0).as_bytes())
}
