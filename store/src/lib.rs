//! The modelcas store: content-defined chunks, deduplicated and compressed into packs in
//! an object store, with an immutable manifest per commit and refs per repository.
//!
//! The store is several crates, each with one job; this one holds the writers and the
//! checks. Every caller imports each crate under its own name (`format::manifest`,
//! `repo::lock`, `read::file_reader`, `index::Index`, ...): nothing is re-exported here.
//! * `format` — every persisted byte, without I/O: objects, ids ([`format::ChunkId`]),
//!   locks, the condemned list, bundles' wire format, the local index's values.
//! * `chunker` — content-defined chunking (FastCDC).
//! * `objects` — the `ObjectStore` trait and its implementations: a local directory,
//!   memory, S3 (cargo feature `s3`, on by default).
//! * `repo` — `Store`, the handle on an opened store (`repo::handle`): the feature list,
//!   repositories, refs, pins and commits, locks and leases (`repo::lock`), reading packs,
//!   forwarding records and verified chunks, the node cache, the metrics, the process
//!   clock and pause points.
//! * `read` — the one read path: chunk maps, the shared chunk cache, read-ahead, whole-file
//!   reads, checkout and verify (`read::file_reader`), the mount's tree, progress reports.
//! * `index` — the local RocksDB cache used for dedup; rebuildable from the bucket.
//! * here: [`source`], [`ingest`] (finding snapshots on disk; the ingest pipeline),
//!   [`bundle`] (writing and reading transfer bundles for closed networks), [`gc`]
//!   (retention and reclaiming space beside running ingests and mounts), [`fsck`],
//!   [`stats`], [`listing`] (a repository's refs and commits as `ls` lists them), the
//!   [`metrics`] of ingest and gc, and the [`runs`] records.
//!
//! Dependencies point one way: format ← chunker; format ← objects ← repo ← read; repo ←
//! index; store uses them all. The mount (`fuse`) and `serve` use `repo` and `read` only,
//! without RocksDB or the AWS SDK.
//!
//! `docs/FORMAT.md` specifies every persisted byte.

pub mod bundle;
pub mod fsck;
pub mod gc;
pub mod ingest;
pub mod listing;
pub mod metrics;
pub mod release;
pub mod runs;
pub mod source;
pub mod stats;
