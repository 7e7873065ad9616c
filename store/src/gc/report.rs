//! What a gc run did, or with `dry_run` would do ([`GcReport`]), as `modelcas gc` prints
//! it and `--json` writes it.

use serde::Serialize;

use format::manifest::Manifest;
use objects::Requests;

/// A revision gc expired.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ExpiredRevision {
    /// `org/name`.
    pub repo: String,
    /// Commit sha.
    pub commit: String,
    /// When it was ingested (seconds since the epoch).
    pub ingested_at: u64,
    /// Total size of its files.
    pub bytes: u64,
}

/// What a run did (or, with `dry_run`, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    /// Nothing was changed.
    pub dry_run: bool,
    /// Repositories seen.
    pub repos: usize,
    /// Revisions kept.
    pub revisions_kept: usize,
    /// Revisions expired this run.
    pub expired: Vec<ExpiredRevision>,
    /// Expired manifests put back because a ref or pin appeared meanwhile.
    pub restored: Vec<ExpiredRevision>,
    /// Pin, ref and rm commands gc waited for before listing refs and pins again.
    pub writers_waited_for: usize,
    /// Manifests fetched from the bucket.
    pub manifests_fetched: usize,
    /// Manifests taken from the local cache.
    pub manifests_cached: usize,
    /// Bytes of chunk frames kept revisions reference.
    pub live_bytes: u64,
    /// Packs condemned this run (nothing references them).
    pub packs_condemned: usize,
    /// Their bytes.
    pub bytes_condemned: u64,
    /// Packs rewritten this run (their live chunks copied, the old pack condemned).
    pub packs_rewritten: usize,
    /// Bytes of the packs rewritten.
    pub bytes_rewritten: u64,
    /// Bytes of the new packs written by rewrites.
    pub rewrite_bytes_written: u64,
    /// Chunks copied by rewrites.
    pub chunks_copied: u64,
    /// Forwarding records in the store when the run started.
    pub forwards: usize,
    /// Forwarding records written (one per rewritten pack).
    pub forwards_written: usize,
    /// Forwarding records deleted (their old pack gone, no kept revision follows them).
    pub forwards_deleted: usize,
    /// Condemned packs referenced again (by an ingest that started before the mark).
    pub packs_rescued: usize,
    /// Packs deleted this run.
    pub packs_deleted: usize,
    /// Dead chunks in the packs deleted.
    pub chunks_deleted: u64,
    /// Bytes freed by deleting packs this run.
    pub bytes_reclaimed: u64,
    /// Condemned packs still waiting (grace period or a running ingest).
    pub packs_waiting: usize,
    /// Their bytes.
    pub bytes_waiting: u64,
    /// Of those, packs held back by a live ingest lease.
    pub packs_waiting_on_ingest: usize,
    /// Leftover temporaries removed.
    pub temporaries_removed: usize,
    /// Stale locks and leases removed.
    pub stale_locks_removed: usize,
    /// Packs in the bucket after the run.
    pub packs_stored: usize,
    /// Bytes of packs in the bucket after the run.
    pub bytes_stored: u64,
    /// Requests made to the object store.
    pub requests: Requests,
    /// Wall time.
    pub duration_ms: u64,
}

/// A manifest as the report names it.
pub(super) fn expired_revision(m: &Manifest) -> ExpiredRevision {
    ExpiredRevision {
        repo: m.repo.to_string(),
        commit: m.commit.to_hex(),
        ingested_at: m.ingested_at,
        bytes: m.total_size(),
    }
}
