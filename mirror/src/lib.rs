//! Bringing revisions from an upstream Hub into the store, without a local copy: each
//! file streams from the upstream ([`hubclient`]) through the ingest pipeline as it
//! arrives, is checked against what the Hub states (sha256 of LFS files, the git blob id of
//! the others) before the revision becomes visible, and files whose sha256 the store
//! already holds are read back from the store instead of downloaded.
//!
//! * [`pull`] — `modelcas pull ORG/NAME[@REV]`.
//! * [`slots`] — a limit on downloads shared by concurrent pulls (serve --upstream).
//! * [`select`] — `--include`/`--exclude` globs, as `hf download` matches them.
//! * [`sync`] — `modelcas sync LIST.toml`: a prefetch list, each entry pulled in turn.

pub mod pull;
pub mod select;
pub mod slots;
pub mod sync;

pub use pull::{pull, PullError, PullOptions, PullReport};
pub use sync::{sync, EntryReport, ListError, Status, SyncEntry, SyncList, SyncReport};
