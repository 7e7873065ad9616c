//! The one read path of modelcas: from a file's offsets to its chunks, to verified,
//! decoded bytes.
//!
//! * [`chunk_map`] — a file's chunks as offsets into it, built and checked once.
//! * [`cache`] — the shared cache of decoded, verified chunks and the workers that fill it
//!   (every reader of a process shares it: the mount's files, serve's downloads).
//! * [`plan`] — the one request planner: which frames are fetched with one ranged read
//!   (the cache's prefetches, the whole-file reader, bundles).
//! * [`readahead`] — [`readahead::FileStream`]: ranged reads of one file through the cache,
//!   with read-ahead while the reader is sequential (the mount and serve).
//! * [`source`] — [`source::FileSource`]: one file's byte ranges as the mount and serve
//!   hand them out (the read plan, the retry after gc), over [`readahead::FileStream`].
//! * [`safetensors`] — the header of a `.safetensors` file: its tensors' byte ranges.
//! * [`tensor_plan`] — the order a loader walks those ranges in, for read-ahead.
//! * [`file_reader`] — whole files with their sha256 checked: `cat`, `checkout`, `verify`.
//! * [`file_cache`] — whole, verified files on the node's disk, filled in the background,
//!   for the mount to hand to the kernel (FUSE passthrough).
//! * [`reload`] — reading a manifest again after a pack was gone (the mount and serve).
//! * [`tree`] — a revision's files as a directory tree (the mount's namespace).
//! * [`warm`] — the small files a loader reads first, fetched when a revision is resolved.
//! * [`progress`] — progress reports of long operations.
//! * [`metrics`] — this crate's metrics (the caches, read-ahead), registered by the binary.
//!
//! Chunks come from [`repo::Store::read_chunk`] (pack, forwarding records, node cache).

pub mod cache;
pub mod checkout;
pub mod chunk_map;
#[cfg(test)]
mod fault_tests;
pub mod file_cache;
pub mod file_reader;
pub mod metrics;
pub mod plan;
pub mod progress;
pub mod readahead;
pub mod reload;
pub mod safetensors;
pub mod source;
pub mod tensor_plan;
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod test_faults;
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod test_pack;
pub mod tree;
pub mod warm;
