//! The modelcas store: content-defined chunks, deduplicated and compressed into packs in
//! an object store, with an immutable manifest per commit and refs per repository.
//!
//! Layers, bottom up:
//! * [`backend`] — the [`ObjectStore`] trait (put, ranged get, list, delete) and its
//!   local-directory and in-memory implementations.
//! * the `format` crate (re-exported as [`codec`], [`frame`], [`layout`], [`names`], and
//!   inside [`pack`], [`manifest`], [`forward`]) — every persisted byte, without I/O: the
//!   envelope, frames, packs, manifests, forwarding records, names and object keys.
//! * [`pack`], [`forward`] — reading pack footers, frames and forwarding records from an
//!   object store.
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
//!   by the mount and serve (the one range reader).
//!
//! `docs/FORMAT.md` specifies every persisted byte.

pub mod backend;
pub mod bundle;
pub mod cache;
pub mod chunk_map;
pub mod clock;
pub mod disk_cache;
mod error;
pub mod failpoint;
pub mod features;
pub mod forward;
pub mod fsck;
pub mod gc;
pub mod index;
pub mod ingest;
pub mod lock;
pub mod manifest;
pub mod metrics;
pub mod pack;
pub mod progress;
pub mod read;
pub mod readahead;
pub mod repo;
pub mod source;
pub mod stats;
#[cfg(test)]
mod test_pack;
pub mod tree;

/// The persisted formats (the `format` crate), under the paths the rest of the code uses.
pub use format::{codec, frame, layout, names};

pub use backend::{LocalStore, MemoryStore, ObjectStore};
pub use chunker::{ChunkId, ChunkParams};
pub use error::{Result, StoreError};
pub use index::Index;
pub use names::{CommitId, RepoId};
pub use repo::{CreateOptions, Store};
