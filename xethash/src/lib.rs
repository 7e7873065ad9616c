//! The Xet file hash (huggingface/xet-core), computed over a stream of bytes with no I/O
//! and bounded memory: the hash the Hugging Face Hub lists as a file's `xetHash`, and the
//! key huggingface_hub's blob store uses, so it must be exactly Xet's (docs/format/xet.md
//! defines it and carries the vectors `tests/vectors.rs` checks).
//!
//! * Chunks: a gear hash (the `gearhash` crate's table) over each chunk, reset to 0 at
//!   every boundary and fed from the chunk's byte 8,127 on; a boundary after the byte where
//!   `hash & 0xFFFF_0000_0000_0000 == 0` once the chunk holds at least 8 KiB, or at 128 KiB.
//! * Chunk hash: BLAKE3 keyed with [`DATA_KEY`] over the chunk.
//! * Merkle aggregation ([`tree`]): nodes merged in content-defined groups of 2 to 9, a
//!   node hash being BLAKE3 keyed with [`INTERNAL_NODE_KEY`] over the lines
//!   `"{child hex} : {child size}\n"`.
//! * File hash: BLAKE3 keyed with 32 zero bytes over the root; the empty file's is zeros.
//! * Printed as four little-endian u64 words, each as 16 hex digits ([`XetHash::hex`]).
//!
//! The hash itself, [`XetHash`], is `format`'s (`format::hash`): manifests store it, and
//! every crate that names one names it there.

mod gear;
mod hash;
mod tree;

use format::XetHash;
pub use hash::{chunk_hash, file_hash_of_root, DATA_KEY, FILE_KEY, INTERNAL_NODE_KEY};
pub use tree::Tree;

/// Smallest chunk (except a file's last): 8 KiB.
pub const MIN_CHUNK: usize = 8 * 1024;
/// Largest chunk: 128 KiB.
pub const MAX_CHUNK: usize = 128 * 1024;
/// The boundary test: the gear hash's top 16 bits all zero (target 64 KiB).
const MASK: u64 = 0xFFFF_0000_0000_0000;
/// Where in a chunk the gear hash starts: its window is 64 bytes, so the first
/// `MIN_CHUNK - 64 - 1` bytes cannot influence a boundary and xet-core skips them.
const HASH_FROM: usize = MIN_CHUNK - 64 - 1;

/// Xet's content-defined chunker, as a boundary finder over a stream.
#[derive(Clone, Debug, Default)]
pub struct Chunker {
    gear: u64,
    len: usize,
}

impl Chunker {
    /// Consumes a prefix of `data` belonging to the current chunk: `(n, true)` when the chunk
    /// ends after `data[..n]`, `(data.len(), false)` when all of `data` belongs to it and it
    /// goes on.
    pub fn scan(&mut self, data: &[u8]) -> (usize, bool) {
        let mut at = 0;
        if self.len < HASH_FROM {
            at = (HASH_FROM - self.len).min(data.len());
        }
        // `at` is below the room left (HASH_FROM < MAX_CHUNK), so at <= end.
        let end = data.len().min(MAX_CHUNK - self.len);
        let (gear, cut) = scan_gear(self.gear, &data[..end], at, self.len);
        let n = cut.unwrap_or(end);
        self.len += n;
        if cut.is_some() || self.len == MAX_CHUNK {
            self.gear = 0;
            self.len = 0;
            (n, true)
        } else {
            self.gear = gear;
            (n, false)
        }
    }

    /// Bytes of the current (unfinished) chunk so far.
    pub fn pending(&self) -> usize {
        self.len
    }
}

/// Feeds `data[at..]` to the gear hash `gear` of a chunk that held `len` bytes before
/// `data`: the hash after the last byte fed, and where the chunk ends if it does (just after
/// the first byte whose hash has its top 16 bits zero, once the chunk holds at least
/// [`MIN_CHUNK`] bytes).
///
/// Eight bytes at a time where no boundary is near: the eight hashes come from the hash
/// before them and a sum over the eight bytes alone, so the bytes' work does not wait on
/// the previous hash (a byte at a time, each step waits on the one before), and one
/// comparison of their minimum tells whether any has its top 16 bits zero.
fn scan_gear(mut gear: u64, data: &[u8], mut at: usize, len: usize) -> (u64, Option<usize>) {
    let step = |g: u64, b: u8| (g << 1).wrapping_add(gear::GEAR[b as usize]);
    // Bytes before MIN_CHUNK (at most the first 65 hashed) need the length test.
    let fast_from = MIN_CHUNK.saturating_sub(len).max(at);
    while at < data.len() {
        if at >= fast_from && at + 8 <= data.len() {
            let b = &data[at..at + 8];
            let mut p = [0u64; 8];
            let mut acc = 0u64;
            for k in 0..8 {
                acc = step(acc, b[k]);
                p[k] = acc;
            }
            let mut low = u64::MAX;
            for (k, pk) in p.iter().enumerate() {
                low = low.min((gear << (k + 1)).wrapping_add(*pk));
            }
            if low & MASK != 0 {
                gear = (gear << 8).wrapping_add(p[7]);
                at += 8;
                continue;
            }
            // A boundary among these eight: find it a byte at a time.
            for _ in 0..8 {
                gear = step(gear, data[at]);
                at += 1;
                if gear & MASK == 0 {
                    return (gear, Some(at));
                }
            }
            continue;
        }
        gear = step(gear, data[at]);
        at += 1;
        if gear & MASK == 0 && len + at >= MIN_CHUNK {
            return (gear, Some(at));
        }
    }
    (gear, None)
}

/// The lengths of the chunks Xet cuts `data` into (for tests and tools).
pub fn chunk_lengths(data: &[u8]) -> Vec<usize> {
    let mut c = Chunker::default();
    let mut out = Vec::new();
    let mut rest = data;
    let mut len = 0;
    while !rest.is_empty() {
        let (n, cut) = c.scan(rest);
        len += n;
        rest = &rest[n..];
        if cut {
            out.push(len);
            len = 0;
        }
    }
    if len > 0 {
        out.push(len);
    }
    out
}

/// Cuts a stream into Xet chunks and hashes each as it passes (one BLAKE3 state, no chunk
/// buffered): what [`Hasher`] and [`ChunkList`] share.
#[derive(Clone)]
struct Cutter {
    chunker: Chunker,
    chunk: blake3::Hasher,
}

impl Default for Cutter {
    fn default() -> Self {
        Cutter {
            chunker: Chunker::default(),
            chunk: blake3::Hasher::new_keyed(&DATA_KEY),
        }
    }
}

impl Cutter {
    /// Feeds the next bytes; `done` gets each chunk completed (hash, length).
    fn update(&mut self, mut data: &[u8], done: &mut impl FnMut(XetHash, u64)) {
        while !data.is_empty() {
            let (n, cut) = self.chunker.scan(data);
            self.chunk.update(&data[..n]);
            data = &data[n..];
            if cut {
                self.end_chunk(done);
            }
        }
    }

    /// Ends the last chunk, if any bytes are in it.
    fn finish(&mut self, done: &mut impl FnMut(XetHash, u64)) {
        if self.chunk.count() > 0 {
            self.end_chunk(done);
        }
    }

    fn end_chunk(&mut self, done: &mut impl FnMut(XetHash, u64)) {
        let len = self.chunk.count();
        let hash = XetHash(*self.chunk.finalize().as_bytes());
        self.chunk.reset();
        done(hash, len);
    }
}

/// The Xet chunks of a stream, in order: feed it with [`ChunkList::update`] in pieces of
/// any size, then [`ChunkList::finish`]. Memory: 36 bytes a chunk.
#[derive(Clone, Default)]
pub struct ChunkList {
    cutter: Cutter,
    chunks: Vec<(XetHash, u32)>,
}

impl ChunkList {
    /// Feeds the next bytes of the file.
    pub fn update(&mut self, data: &[u8]) {
        let chunks = &mut self.chunks;
        self.cutter
            .update(data, &mut |h, len| chunks.push((h, len as u32)));
    }

    /// Each chunk's hash and length.
    pub fn finish(mut self) -> Vec<(XetHash, u32)> {
        let chunks = &mut self.chunks;
        self.cutter
            .finish(&mut |h, len| chunks.push((h, len as u32)));
        self.chunks
    }
}

/// The Xet file hash of a stream: feed it with [`Hasher::update`] in pieces of any size,
/// then [`Hasher::finalize`]. Memory: one BLAKE3 state and a few Merkle nodes per tree level.
#[derive(Clone, Default)]
pub struct Hasher {
    cutter: Cutter,
    tree: Tree,
}

impl Hasher {
    /// A hasher at the start of a file.
    pub fn new() -> Hasher {
        Hasher::default()
    }

    /// Feeds the next bytes of the file.
    pub fn update(&mut self, data: &[u8]) {
        let tree = &mut self.tree;
        self.cutter.update(data, &mut |h, len| tree.push(h, len));
    }

    /// The file hash of everything fed.
    pub fn finalize(mut self) -> XetHash {
        let tree = &mut self.tree;
        self.cutter.finish(&mut |h, len| tree.push(h, len));
        match self.tree.root() {
            Some(root) => file_hash_of_root(&root),
            None => XetHash::default(),
        }
    }
}

/// The Xet file hash of `data`.
pub fn file_hash(data: &[u8]) -> XetHash {
    let mut h = Hasher::new();
    h.update(data);
    h.finalize()
}
#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn step(g: u64, b: u8) -> u64 {
        (g << 1).wrapping_add(gear::GEAR[b as usize])
    }

    /// The chunk lengths by the definition, a byte at a time (docs/format/xet.md).
    fn reference(data: &[u8]) -> Vec<usize> {
        let (mut out, mut len, mut h) = (Vec::new(), 0usize, 0u64);
        for b in data {
            if len >= HASH_FROM {
                h = step(h, *b);
            }
            len += 1;
            if (len >= MIN_CHUNK && h & MASK == 0) || len == MAX_CHUNK {
                out.push(len);
                (len, h) = (0, 0);
            }
        }
        if len > 0 {
            out.push(len);
        }
        out
    }

    fn bytes(seed: u64, n: usize, period: usize) -> Vec<u8> {
        let mut x = seed | 1;
        let mut v: Vec<u8> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8
            })
            .collect();
        if period > 0 {
            for i in period..n {
                v[i] = v[i % period];
            }
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// The eight-at-a-time scan cuts where the definition cuts: random bytes, and
        /// periodic ones (whose hash repeats: cuts at every period or none).
        #[test]
        fn the_fast_scan_cuts_where_the_definition_cuts(
            seed in any::<u64>(),
            n in 0usize..1_500_000,
            period in prop_oneof![Just(0usize), 1usize..300, 60_000usize..200_000],
        ) {
            let d = bytes(seed, n, period);
            prop_assert_eq!(chunk_lengths(&d), reference(&d));
        }
    }

    /// A chunk list fed in pieces of any size names the chunks the definition cuts, each
    /// by its own hash.
    #[test]
    fn chunk_lists_are_the_cut_chunks_hashed() {
        let d = bytes(5, 700_000, 0);
        for piece in [1usize, 4093, 1 << 20] {
            let mut list = ChunkList::default();
            for p in d.chunks(piece) {
                list.update(p);
            }
            let got = list.finish();
            let mut at = 0;
            let want: Vec<(XetHash, u32)> = reference(&d)
                .into_iter()
                .map(|n| {
                    at += n;
                    (chunk_hash(&d[at - n..at]), n as u32)
                })
                .collect();
            assert_eq!(got, want, "pieces of {piece}");
        }
        assert!(ChunkList::default().finish().is_empty());
    }

    /// Long random inputs (about 48 cuts each), many seeds.
    #[test]
    fn long_inputs_cut_where_the_definition_cuts() {
        for seed in 0..64u64 {
            let d = bytes(seed, 3 << 20, 0);
            assert_eq!(chunk_lengths(&d), reference(&d), "seed {seed}");
        }
    }
}
