//! The local RocksDB index: a cache that makes dedup and lookups fast on one machine.
//! Opening it, its identity and discarding a damaged one are `db`'s; each concern is a
//! module: [`packs`] (chunk → pack, learning packs from the bucket, rebuilding), [`files`] (file → chunks),
//! [`stamps`] (files taken unread), [`object_cache`] (gc's cache of small objects). The
//! bytes of every value are `format::index`.
//!
//! The bucket is the source of truth; this index can always be rebuilt from it
//! ([`Index::rebuild`]) because every pack carries a footer listing its chunks. Column
//! families (values documented in `docs/FORMAT.md`, "Local index"):
//!
//! * `chunks`: chunk id (32 bytes) → pack id (32) ‖ frame offset u32 ‖ frame length u32 ‖
//!   raw length u32, little endian (44 bytes).
//! * `packs`: pack id (32 bytes) → envelope `MCASIPAK` of `format::index::IndexedPack`
//!   (size and the chunk ids, so entries can be dropped when a pack disappears).
//! * `manifests`: object key → u16 tag length ‖ tag ‖ the object's bytes: a cache of small
//!   objects (manifests) that gc reads every run, valid while the listing shows the same
//!   tag; and `files/<64 hex sha256>` → the chunks (id, length) of a file ingest read, so a
//!   later pull reads it back instead of downloading it ([`Index::file_chunks`]); and
//!   `stamps/<dev>/<ino>` → a file's stamp and content when ingest read it, so a later
//!   ingest takes it unread ([`Index::stamped_file`], `format::index::FileStamp`).
//! * `meta`: `store_id` → the 16-byte id of the store this index belongs to; `version`.
//!
//! Before an ingest trusts the index it calls [`Index::sync`], which lists the bucket's
//! packs, reads the footers of packs it has not seen (written by another machine or by an
//! interrupted run) and forgets packs that are gone **or condemned by gc**
//! (`gc/condemned`): an ingest never deduplicates against a pack gc may delete. A known pack
//! whose listed size differs from the size recorded when it was learned (cut short by a
//! power loss after the index recorded it) is forgotten and learned again from its footer.

mod db;
pub mod files;
pub mod object_cache;
pub mod packs;
pub mod stamps;

pub use db::Index;
pub use packs::SyncReport;
pub use stamps::StampedFile;
