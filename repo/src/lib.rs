//! A modelcas store opened for use: everything a reader or a small writer (`ref`, `pin`,
//! `rm`) needs, and nothing of ingest, gc or the local index.
//!
//! * [`backend`] — the object stores (the `objects` crate) and [`backend::MeteredStore`],
//!   which records every request in the metrics.
//! * the `format` crate, re-exported as [`codec`], [`frame`], [`layout`], [`names`], and
//!   inside [`pack`], [`manifest`], [`forward`] — every persisted byte, without I/O.
//! * [`pack`], [`forward`] — reading pack footers, frames and forwarding records.
//! * [`handle`] — [`Store`]: open or create, the feature list, repositories, refs, pins
//!   and commits, resolving revisions, reading one verified chunk (through the node cache,
//!   [`disk_cache`]); [`lru_dir`] — the size-limited directory of entries behind the node's
//!   caches.
//! * [`lock`] — locks and leases, judged by the object store's clock; [`clock`] — this
//!   process's clock; [`features`] — the store's feature list.
//! * [`usage`] — last-use records of revisions (for `gc --unused-for`).
//! * [`metrics`] — this crate's metrics (object-store requests, the node cache), which the
//!   binary registers beside the other crates'; [`failpoint`] — pause points and
//!   crash steps (cargo feature `failpoints`, absent from release binaries).
//!
//! `docs/FORMAT.md` specifies every persisted byte.

pub mod clock;
pub mod disk_cache;
mod error;
pub mod failpoint;
pub mod features;
pub mod forward;
pub mod handle;
pub mod lock;
pub mod lru_dir;
pub mod manifest;
mod metered;
pub mod metrics;
pub mod pack;
pub mod usage;

/// The object stores (the `objects` crate), and the metered wrapper.
pub mod backend {
    pub use crate::metered::MeteredStore;
    pub use objects::*;
}

/// The persisted formats (the `format` crate), under the paths the rest of the code uses.
pub use format::{codec, frame, layout, names};

pub use backend::{LocalStore, MemoryStore, ObjectStore};
pub use chunker::{ChunkId, ChunkParams};
pub use error::{Result, StoreError};
pub use handle::{CreateOptions, Store};
pub use names::{CommitId, RepoId};
