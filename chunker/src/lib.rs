//! Content-defined chunking for modelcas.
//!
//! This crate knows nothing of storage: it turns a byte stream into a sequence of
//! chunks whose boundaries depend only on the content (FastCDC, 2020 variant, from the
//! `fastcdc` crate) and names each chunk by its BLAKE3 hash.
//!
//! * [`ChunkParams`] — the min/avg/max sizes, validated; the store persists them in its
//!   config so that every writer of one store cuts identical boundaries.
//! * [`StreamChunker`] — streams any [`std::io::Read`] with a fixed-size buffer (memory is
//!   bounded by the buffer, whatever the input size) and yields [`Chunk`]s.
//!
//! A chunk is named by its [`format::ChunkId`] (a 32-byte BLAKE3 digest of the
//! uncompressed chunk) and is at most [`format::MAX_CHUNK_LEN`] long: both belong to the
//! persisted format, which this crate depends on, not the reverse.

mod params;
mod stream;

pub use params::{ChunkParams, ParamsError};
pub use stream::{Chunk, StreamChunker};
