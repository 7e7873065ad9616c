//! The persisted formats of modelcas, with no I/O: what `docs/FORMAT.md` specifies, as
//! types with encoders and validating decoders over bytes in memory. A third-party reader
//! (or a tool that inspects a bucket) links this crate alone: no object store, no index,
//! no RocksDB, no AWS SDK.
//!
//! * [`chunk`] — [`ChunkId`], the name of a chunk everywhere, and [`MAX_CHUNK_LEN`].
//! * [`hash`] — the other named hashes: [`Sha256`] (a file's), [`XetHash`] (Xet's, spelled
//!   its own way), [`ChunkListDigest`] (a file's chunk list's); each encoded as the bare
//!   32 bytes.
//! * [`codec`] — the one envelope (magic, version, checksum) around every persisted object.
//! * [`frame`] — how one chunk is compressed (raw, zstd, or the bf16 byte-plane codec).
//! * [`pack`] — packs: frames grouped into one object with a self-describing footer.
//! * [`manifest`] — a commit's file tree, each file a list of chunk locations, and the
//!   invariants every reader relies on ([`manifest::Manifest::check`]).
//! * [`forward`] — forwarding records: where gc copied the chunks of packs it rewrote.
//! * [`names`] — repository ids, commit ids and ref names, checked when parsed or decoded.
//! * [`features`] — the store's feature list, which a binary checks before it reads or
//!   writes a store.
//! * [`lock`] — lock and lease objects (`locks/`); [`gc`] — gc's condemned list.
//! * [`bundle`] — the wire format of transfer bundles and the refs they carry.
//! * [`index`] — the values of a node's local index (a cache, rebuildable from the bucket):
//!   chunk locations, pack records, files' chunk lists, stamp records.
//! * [`runs`] — run records (`runs/gc`, `runs/sync`): when a maintenance command last ran.
//! * [`node`] — node-local state beside the index: the node file cache's marker.
//! * [`layout`] — the object keys of everything above.

pub mod bundle;
pub mod chunk;
pub mod codec;
mod error;
pub mod features;
pub mod forward;
pub mod frame;
pub mod gc;
pub mod hash;
pub mod index;
pub mod layout;
pub mod lock;
pub mod manifest;
pub mod names;
pub mod node;
pub mod pack;
pub mod release;
pub mod runs;

pub use chunk::{ChunkId, ParseChunkIdError, MAX_CHUNK_LEN};
pub use error::{FormatError, Result};
pub use hash::{ChunkListDigest, ParseHashError, Sha256, XetHash};
pub use names::{CommitId, RepoId};
