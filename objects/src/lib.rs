//! The object stores: the only way modelcas touches its bucket. The [`ObjectStore`] trait
//! (put, ranged get, list, delete, the store's clock) and its implementations: a local
//! directory, memory, a request-counting wrapper, and S3 (cargo feature `s3`, which pulls
//! in the AWS SDK; the mount and serve crates build without it). `hub_wire` names the
//! routes of a hub's store API (docs/format/hub-protocol.md), and the hub store (cargo
//! feature `hub`, ureq) reads a store through them.
//!
//! Keys are `/`-separated relative names (see `docs/format/bucket.md`, "Bucket layout"). The
//! contract every implementation keeps:
//! * `put` is atomic: a reader sees either no object or the whole object, never a prefix
//!   (the local store writes a temporary file and renames it; S3 PUT is atomic).
//! * Objects are never modified in place; some are replaced whole under the same key
//!   (refs, pins, last-use and mirror records, manifests when a partial commit is
//!   completed or a removed commit ingested again, forwarding records, the config in a
//!   creation race). Only packs, named by the BLAKE3 of their bytes, never get other bytes
//!   under their key: a cache may keep a pack's bytes by key alone, anything else only with
//!   the object's tag.
//! * `list` returns every key under a prefix with its size, in lexicographic order.
//! * Time is the store's: an object's `modified` is when the store wrote it, by the
//!   store's clock (S3: `Last-Modified`; local: the file's mtime), and [`ObjectStore::now`]
//!   reads that same clock (S3: the `Date` of a response; local: the kernel's clock). Lock
//!   and lease ages compare only these two, never one host's clock with another's.

mod counting;
mod error;
#[cfg(feature = "hub")]
mod hub;
#[cfg(feature = "hub")]
mod hub_client;
pub mod hub_wire;
mod local;
mod memory;
mod open_files;
mod requests;
#[cfg(feature = "s3")]
mod s3;
mod store;

pub use counting::{CountingStore, Requests};
pub use error::{ObjectError, Result};
#[cfg(feature = "hub")]
pub use hub::HubStore;
#[cfg(feature = "hub")]
pub use hub_client::{read_token_file, HubOptions};
pub use local::LocalStore;
pub use memory::MemoryStore;
pub use requests::{HubRequests, S3Requests, HUB_REQUESTS, S3_REQUESTS};
#[cfg(feature = "s3")]
pub use s3::S3Options;

#[cfg(feature = "s3")]
pub use s3::S3Store;
pub use store::{check_key, check_prefix, ObjectMeta, ObjectStore, Temporary};
