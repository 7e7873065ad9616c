//! What an ingest did ([`IngestReport`]), per snapshot ([`SnapshotOutcome`]) and in all.

use format::names::{CommitId, RepoId};
use index::SyncReport;

/// The result for one snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotOutcome {
    /// Repository.
    pub repo: RepoId,
    /// Commit stored.
    pub commit: CommitId,
    /// Files in it.
    pub files: usize,
    /// Logical bytes.
    pub bytes: u64,
    /// False when the store already had this commit with the same content.
    pub new_manifest: bool,
    /// Refs set.
    pub refs: Vec<String>,
    /// Refs not moved because the revision's release check did not pass
    /// ([`IngestOptions::hold_failing_refs`](super::options::IngestOptions::hold_failing_refs)).
    pub refs_held: Vec<String>,
    /// The revision's release check (`None`: off, or it could not be made).
    pub check: Option<format::release::CheckObject>,
}

/// What an ingest did.
#[derive(Clone, Debug, Default)]
pub struct IngestReport {
    /// Per snapshot.
    pub snapshots: Vec<SnapshotOutcome>,
    /// Distinct source files ingested (read, or taken unread: `files_unchanged`).
    pub files_read: usize,
    /// Their bytes.
    pub bytes_read: u64,
    /// Of those, files taken unread: the index knew them unchanged since an earlier read
    /// (docs/format/node.md, "Files taken unread"), and every chunk of theirs is still stored.
    pub files_unchanged: usize,
    /// Bytes of those files.
    pub bytes_unchanged: u64,
    /// Bytes read whose Xet hash was not computed: their content's was recorded
    /// (docs/format/xet.md, "When it is computed").
    pub xet_bytes_reused: u64,
    /// Bytes read a second time to compute a Xet hash (a file that began as one read
    /// before and turned out not to be it).
    pub xet_bytes_reread: u64,
    /// Chunks seen (with repeats).
    pub chunks: u64,
    /// Chunks not yet in the store, written now.
    pub new_chunks: u64,
    /// Uncompressed bytes of the new chunks.
    pub new_chunk_bytes: u64,
    /// Packs written.
    pub packs_written: usize,
    /// Bytes of the packs written.
    pub pack_bytes_written: u64,
    /// What the index learned from the bucket first.
    pub sync: SyncReport,
}
