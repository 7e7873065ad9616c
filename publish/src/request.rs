//! What a commit asks: its repository, branch, parent and operations.

use format::{CommitId, RepoId, Sha256};

/// What a commit adds: bytes sent inline, or an object uploaded before (or stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    Inline(Vec<u8>),
    Object { sha256: Sha256, size: u64 },
}

/// One operation of a commit, applied in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Adds or replaces the file at `path`.
    Add { path: String, content: Content },
    /// Deletes the file at `path` (which must exist).
    DeleteFile { path: String },
    /// Deletes every file under `path/` (at least one must exist).
    DeleteFolder { path: String },
}

/// A commit to apply.
#[derive(Clone, Debug)]
pub struct CommitRequest {
    pub repo: RepoId,
    /// The branch (a ref name) the commit goes on; it moves to the new revision.
    pub branch: String,
    /// The head the client built the commit on, when it names one.
    pub parent: Option<CommitId>,
    pub operations: Vec<Operation>,
}
