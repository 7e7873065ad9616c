//! The modelcas store: content-defined chunks, deduplicated and compressed into packs in
//! an object store, with an immutable manifest per commit and refs per repository.
//!
//! Layers, bottom up:
//! * [`backend`] — the [`ObjectStore`] trait (put, ranged get, list, delete) and its
//!   local-directory and in-memory implementations.
//! * [`codec`] — the one envelope (magic, version, checksum) around every persisted object.
//! * [`frame`], [`pack`] — how chunks are compressed and grouped into self-describing packs.
//! * [`manifest`], [`layout`], [`names`] — manifests, refs, config, and their keys.
//! * [`forward`] — forwarding records: where gc copied the chunks of packs it rewrote, and
//!   how a manifest's chunk locations are resolved through them.
//! * [`index`] — the local RocksDB cache used for dedup; rebuildable from the bucket.
//! * [`repo`] — [`Store`]: open/create, list repos, refs and commits, resolve revisions.
//! * [`source`], [`ingest`] — finding snapshots on disk and the ingest pipeline.
//! * [`bundle`] — transfer bundles for closed networks (export, checked import).
//! * [`read`], [`stats`] — reading revisions back (checkout, verify) and store figures.
//! * [`progress`] — the progress reports of long operations (read and write alike).
//! * [`clock`] — this process's clock (with a test offset); safety never compares it
//!   with another host's.
//! * [`gc`], [`lock`], [`fsck`] — retention, reclaiming space beside running ingests and
//!   mounts, the locks and leases that make it safe, and the consistency check.
//! * [`cache`], [`readahead`] — the shared decoded-chunk cache and per-file read-ahead used
//!   by the FUSE mount.
//!
//! `docs/FORMAT.md` specifies every persisted byte.

pub mod backend;
pub mod bundle;
pub mod cache;
pub mod clock;
pub mod codec;
pub mod disk_cache;
mod error;
pub mod failpoint;
pub mod forward;
pub mod frame;
pub mod fsck;
pub mod gc;
pub mod index;
pub mod ingest;
pub mod layout;
pub mod lock;
pub mod manifest;
pub mod metrics;
pub mod names;
pub mod pack;
pub mod progress;
pub mod read;
pub mod readahead;
pub mod repo;
pub mod source;
pub mod stats;
pub mod tree;

pub use backend::{LocalStore, MemoryStore, ObjectStore};
pub use chunker::{ChunkId, ChunkParams};
pub use error::{Result, StoreError};
pub use index::Index;
pub use names::{CommitId, RepoId};
pub use repo::{CreateOptions, Store};
