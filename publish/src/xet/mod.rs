//! Xet uploads (hf_xet's CAS protocol, docs/format/xet.md "Uploads"): xorbs checked and
//! kept in the spool under their hash ([`xorb`]), then shards whose file blocks name chunk
//! ranges of those xorbs, each file checked and made whole in the spool under its SHA-256
//! ([`shard`]). From there a commit's `lfsFile` takes it as it takes an LFS upload: the
//! store chunks and deduplicates it as any file.

pub mod full_shard;
pub mod indexer;
pub mod shard;
pub mod stored;
pub(crate) mod stored_read;
pub mod xorb;
