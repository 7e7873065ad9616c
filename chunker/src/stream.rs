//! Streaming FastCDC: chunk boundaries over any `Read`, with a fixed-size buffer.
//!
//! The boundary of a chunk depends only on the bytes from its start up to at most
//! `max` bytes later. The chunker therefore only cuts while at least `max` bytes are
//! buffered (or the stream has ended), which makes boundaries independent of how the
//! reader delivers the bytes: 1 byte at a time or 8 MiB at a time gives the same chunks.
//! The buffer is refilled by moving the unconsumed tail (less than `max` bytes) to the
//! front, so each byte is copied at most once more than it is read.

use std::io::{self, Read};

use fastcdc::v2020::{cut, select_masks, Normalization};

use format::ChunkId;

use crate::params::ChunkParams;

/// The smallest buffer used, so that reads from files are large.
const MIN_BUFFER: usize = 8 * 1024 * 1024;

/// One chunk of a stream: its offset in the stream and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Offset of the first byte in the stream.
    pub offset: u64,
    /// The chunk's bytes (between `min` and `max` long, except the last chunk).
    pub data: Vec<u8>,
}

impl Chunk {
    /// The chunk's id (BLAKE3 of its bytes).
    pub fn id(&self) -> ChunkId {
        ChunkId::of(&self.data)
    }
}

/// An iterator over the chunks of a reader. Memory: one buffer of at most
/// `max(8 MiB, 2 * params.max)` bytes plus the chunk handed out; a chunker made with a
/// size hint ([`StreamChunker::with_size_hint`]) starts with a buffer that holds the
/// whole stream when it is smaller, and grows it only if the stream turns out longer.
pub struct StreamChunker<R: Read> {
    source: R,
    params: ChunkParams,
    /// The most the buffer grows to.
    limit: usize,
    masks: (u64, u64),
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    offset: u64,
}

impl<R: Read> StreamChunker<R> {
    /// A chunker over `source`. `params` must be valid (see [`ChunkParams::validate`]);
    /// the store validates them when it loads its config.
    pub fn new(source: R, params: ChunkParams) -> Self {
        Self::with_buffer(source, params, MIN_BUFFER)
    }

    /// Like [`StreamChunker::new`] with a chosen buffer size (at least `2 * max` is used);
    /// tests use small buffers to exercise refills.
    pub fn with_buffer(source: R, params: ChunkParams, buffer: usize) -> Self {
        let cap = buffer.max(2 * params.max as usize);
        Self::with_capacity(source, params, cap, cap)
    }

    /// Like [`StreamChunker::new`] for a stream of about `size` bytes (a file's length):
    /// the buffer starts at what that needs (the bytes and one more read to see the end;
    /// at least 4 KiB) and grows to the usual size only if the stream is longer. Chunks are
    /// the same whatever the hint; a small file costs a small buffer, not 8 MiB mapped,
    /// faulted in and unmapped again (on 20,000 small files, the unmapping alone was a
    /// twentieth of an ingest: TLB shootdowns to the other threads).
    pub fn with_size_hint(source: R, params: ChunkParams, size: u64) -> Self {
        let limit = MIN_BUFFER.max(2 * params.max as usize);
        let want = usize::try_from(size)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        Self::with_capacity(source, params, want.clamp(4096, limit), limit)
    }

    fn with_capacity(source: R, params: ChunkParams, cap: usize, limit: usize) -> Self {
        StreamChunker {
            source,
            params,
            limit,
            masks: select_masks(params.avg as usize, Normalization::Level1),
            buf: vec![0u8; cap],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
        }
    }

    /// Bytes consumed from the source and handed out as chunks so far.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// Moves the unconsumed tail to the front and reads until the buffer is full or the
    /// source ends.
    fn refill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Full with less than a chunk's worth: the size hint was short (a file that grew,
        // a download longer than announced): the usual buffer from now on.
        if self.end == self.buf.len() && self.buf.len() < self.limit {
            self.buf.resize(self.limit, 0);
        }
        while self.end < self.buf.len() {
            match self.source.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl<R: Read> Iterator for StreamChunker<R> {
    type Item = io::Result<Chunk>;

    fn next(&mut self) -> Option<io::Result<Chunk>> {
        loop {
            let avail = self.end - self.start;
            if avail >= self.params.max as usize || (self.eof && avail > 0) {
                let (mask_s, mask_l) = self.masks;
                let (_, n) = cut(
                    &self.buf[self.start..self.end],
                    self.params.min as usize,
                    self.params.avg as usize,
                    self.params.max as usize,
                    mask_s,
                    mask_l,
                    mask_s << 1,
                    mask_l << 1,
                );
                let n = n.clamp(1, avail);
                let data = self.buf[self.start..self.start + n].to_vec();
                let chunk = Chunk {
                    offset: self.offset,
                    data,
                };
                self.start += n;
                self.offset += n as u64;
                return Some(Ok(chunk));
            }
            if self.eof {
                return None;
            }
            if let Err(e) = self.refill() {
                return Some(Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A portable SplitMix64 so golden boundaries do not depend on a crate's RNG.
    fn splitmix(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed;
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            s = s.wrapping_add(0x9E3779B97F4A7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^= z >> 31;
            out.extend_from_slice(&z.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Delivers at most `step` bytes per read call.
    struct Dribble<'a> {
        data: &'a [u8],
        step: usize,
    }
    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn boundaries(
        data: &[u8],
        params: ChunkParams,
        step: usize,
        buffer: usize,
    ) -> Vec<(u64, usize)> {
        StreamChunker::with_buffer(Dribble { data, step }, params, buffer)
            .map(|c| {
                let c = c.unwrap();
                (c.offset, c.data.len())
            })
            .collect()
    }

    #[test]
    fn a_size_hint_sizes_the_buffer_and_a_short_one_grows_it() {
        let p = ChunkParams::default();
        let data = splitmix(3 * p.max as usize, 3);
        let small = StreamChunker::with_size_hint(&data[..10], p, 10);
        assert_eq!(small.buf.len(), 4096);
        let c: Vec<Chunk> = small.map(|c| c.unwrap()).collect();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].data, &data[..10]);
        // A hint of 10 bytes for a stream of three maximal chunks: grown, same chunks.
        let mut short = StreamChunker::with_size_hint(&data[..], p, 10);
        let first = short.next().unwrap().unwrap();
        assert_eq!(short.buf.len(), MIN_BUFFER.max(2 * p.max as usize));
        let reference: Vec<Chunk> = StreamChunker::new(&data[..], p)
            .map(|c| c.unwrap())
            .collect();
        let rest: Vec<Chunk> = short.map(|c| c.unwrap()).collect();
        assert_eq!([vec![first], rest].concat(), reference);
        let big = StreamChunker::with_size_hint(&data[..], p, u64::MAX);
        assert_eq!(big.buf.len(), MIN_BUFFER.max(2 * p.max as usize));
    }

    #[test]
    fn golden_boundaries_tiny_params() {
        // If these change, chunk boundaries changed: that is a format change
        // (docs/format/bytes.md, "Chunking").
        let data = splitmix(64 * 1024, 7);
        let b = boundaries(&data, ChunkParams::tiny(), 1 << 20, 0);
        let lens: Vec<usize> = b.iter().map(|x| x.1).collect();
        assert_eq!(lens.iter().sum::<usize>(), data.len());
        let golden = GOLDEN_TINY;
        assert_eq!(lens, golden, "chunk boundaries changed");
    }

    const GOLDEN_TINY: &[usize] = &[
        10041, 3108, 5874, 7972, 4176, 8311, 7262, 8242, 4603, 1037, 3045, 1865,
    ];

    #[test]
    fn same_boundaries_as_fastcdc_reference() {
        let data = splitmix(3 << 20, 11);
        for p in [
            ChunkParams::tiny(),
            ChunkParams::around(65536),
            ChunkParams::default(),
        ] {
            let reference: Vec<(u64, usize)> = fastcdc::v2020::StreamCDC::new(
                &data[..],
                p.min as usize,
                p.avg as usize,
                p.max as usize,
            )
            .map(|c| {
                let c = c.unwrap();
                (c.offset, c.length)
            })
            .collect();
            assert_eq!(boundaries(&data, p, 1 << 20, 0), reference);
        }
    }

    #[test]
    fn empty_stream_has_no_chunks() {
        assert!(boundaries(&[], ChunkParams::tiny(), 10, 0).is_empty());
    }

    #[test]
    fn sizes_respect_params() {
        let p = ChunkParams::tiny();
        let data = splitmix(1 << 20, 1);
        let b = boundaries(&data, p, 1 << 16, 0);
        for (i, (_, len)) in b.iter().enumerate() {
            assert!(*len <= p.max as usize);
            if i + 1 < b.len() {
                assert!(*len >= p.min as usize);
            }
        }
    }

    #[test]
    fn insert_changes_only_nearby_chunks() {
        let p = ChunkParams::tiny();
        let data = splitmix(2 << 20, 3);
        let mut edited = data.clone();
        let at = data.len() / 2;
        edited.splice(at..at, splitmix(100, 99));
        let ids = |d: &[u8]| -> Vec<ChunkId> {
            StreamChunker::new(d, p).map(|c| c.unwrap().id()).collect()
        };
        let a = ids(&data);
        let b = ids(&edited);
        let set_a: std::collections::HashSet<_> = a.iter().collect();
        let new_in_b = b.iter().filter(|id| !set_a.contains(id)).count();
        assert!(a.len() > 200, "want many chunks, got {}", a.len());
        assert!(
            new_in_b <= 3,
            "an insert of 100 bytes changed {new_in_b} chunks"
        );
    }

    proptest! {
        #[test]
        fn boundaries_independent_of_feed_size(len in 0usize..200_000, seed: u64, step in 1usize..70_000) {
            let data = splitmix(len, seed);
            let p = ChunkParams::tiny();
            let reference = boundaries(&data, p, 1 << 22, 0);
            prop_assert_eq!(boundaries(&data, p, step, 0), reference.clone());
            // a buffer of the minimum size forces many refills
            prop_assert_eq!(boundaries(&data, p, step, 1), reference);
        }

        /// A size hint, right or wrong (a file that grew or shrank meanwhile), changes
        /// no boundary and no byte.
        #[test]
        fn a_size_hint_changes_no_chunk(len in 0usize..300_000, seed: u64, step in 1usize..70_000, hint in 0u64..400_000) {
            let data = splitmix(len, seed);
            let p = ChunkParams::tiny();
            let reference: Vec<Chunk> = StreamChunker::new(&data[..], p).map(|c| c.unwrap()).collect();
            for h in [hint, len as u64, 0, u64::MAX] {
                let got: Vec<Chunk> = StreamChunker::with_size_hint(Dribble { data: &data, step }, p, h)
                    .map(|c| c.unwrap())
                    .collect();
                prop_assert_eq!(&got, &reference, "hint {}", h);
            }
        }

        #[test]
        fn chunks_concatenate_to_input(len in 0usize..100_000, seed: u64) {
            let data = splitmix(len, seed);
            let mut out = Vec::new();
            let mut expect_off = 0u64;
            for c in StreamChunker::new(&data[..], ChunkParams::tiny()) {
                let c = c.unwrap();
                prop_assert_eq!(c.offset, expect_off);
                expect_off += c.data.len() as u64;
                out.extend_from_slice(&c.data);
            }
            prop_assert_eq!(out, data);
        }
    }
}
