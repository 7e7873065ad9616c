//! The modelcas store: content-defined chunks, deduplicated and compressed into packs in
//! an object store, with an immutable manifest per commit and refs per repository.
//!
//! The store is several crates, each with one job; this one holds the writers and the
//! checks, and re-exports the others under one roof (`store::…`) for the command line:
//! * `format` — every persisted byte, without I/O (re-exported as [`codec`], [`frame`],
//!   [`layout`], [`names`], and inside [`pack`], [`manifest`], [`forward`]).
//! * `objects` — the [`ObjectStore`] trait and its implementations: a local directory,
//!   memory, S3 (cargo feature `s3`, on by default) ([`backend`]).
//! * `repo` — [`Store`], the handle on an opened store: the feature list, repositories,
//!   refs, pins and commits, locks and leases ([`lock`]), reading packs, forwarding records
//!   and verified chunks, the node cache ([`disk_cache`]), the metrics ([`metrics`]), the
//!   process clock ([`clock`]) and pause points ([`failpoint`]).
//! * `read` — the one read path: chunk maps, the shared chunk cache ([`cache`]), read-ahead
//!   ([`readahead`]), whole-file reads, checkout and verify ([`read`]), the mount's tree
//!   ([`tree`]), progress reports ([`progress`]).
//! * `index` — the local RocksDB cache used for dedup; rebuildable from the bucket.
//! * here: [`source`], [`ingest`] (finding snapshots on disk; the ingest pipeline),
//!   [`bundle`] (transfer bundles for closed networks), [`gc`] (retention and reclaiming
//!   space beside running ingests and mounts), [`fsck`], [`stats`].
//!
//! Dependencies point one way: format ← objects ← repo ← read ← index ← store; the mount
//! (`fuse`) and `serve` use `repo` and `read` only, without RocksDB or the AWS SDK.
//!
//! `docs/FORMAT.md` specifies every persisted byte.

pub mod bundle;
pub mod fsck;
pub mod gc;
pub mod ingest;
pub mod runs;
pub mod source;
pub mod stats;

pub use ::index;
pub use ::read::file_reader as read;
pub use ::read::{cache, chunk_map, file_cache, progress, readahead, tree};
pub use ::repo::handle as repo;
pub use ::repo::{
    backend, clock, codec, disk_cache, failpoint, features, forward, frame, layout, lock, manifest,
    metrics, names, pack, usage,
};

pub use ::index::Index;
pub use ::repo::{
    ChunkId, ChunkParams, CommitId, CreateOptions, LocalStore, MemoryStore, ObjectStore, RepoId,
    Result, Store, StoreError,
};
