//! A modelcas store opened for use: everything a reader or a small writer (`ref`, `pin`,
//! `rm`) needs, and nothing of ingest, gc or the local index.
//!
//! * [`MeteredStore`] — an object store (the `objects` crate) that records every request
//!   in the metrics.
//! * [`pack`], [`forward`], [`manifest`] — reading pack footers, frames and forwarding
//!   records; each also re-exports its `format` module (`format::pack`, ...), whose types
//!   it reads. Everything else of `format` (every persisted byte, without I/O) and of
//!   `objects` is imported from those crates under their own names.
//! * [`handle`] — [`Store`]: open or create, the feature list, repositories, refs, pins
//!   and commits, resolving revisions, reading one verified chunk (through the node cache,
//!   [`disk_cache`]); [`lru_dir`] — the size-limited directory of entries behind the node's
//!   caches.
//! * [`lock`] — locks and leases, judged by the object store's clock; [`clock`] — this
//!   process's clock; [`features`] — the store's feature list.
//! * [`file_stamp`] — the stamp of a file on the node's disk, bound to the boot and the
//!   mount (what ingest's files taken unread and the node file cache's checks rest on).
//! * [`usage`] — last-use records of revisions (for `gc --unused-for`).
//! * [`metrics`] — this crate's metrics (object-store requests, the node cache), which the
//!   binary registers beside the other crates'; [`failpoint`] — pause points and
//!   crash steps (cargo feature `failpoints`, absent from release binaries).
//!
//! `docs/FORMAT.md` specifies every persisted byte.

pub mod again;
pub mod clock;
pub mod disk_cache;
mod error;
pub mod failpoint;
pub mod features;
pub mod file_stamp;
pub mod forward;
pub mod handle;
pub mod lock;
pub mod lru_dir;
pub mod manifest;
mod metered;
pub mod metrics;
pub mod pack;
pub mod usage;

pub use error::{Result, StoreError};
pub use handle::{CreateOptions, FilesBySha256, Store};
pub use metered::MeteredStore;
