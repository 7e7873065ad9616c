//! Why an upload or a commit was refused ([`PublishError`]).

use repo::StoreError;

/// Why an upload or a commit was refused.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The request is malformed or names what cannot be (an unsafe path, an object never
    /// uploaded, a file and a folder of one name).
    #[error("{0}")]
    BadRequest(String),
    /// An uploaded object is not what it was declared to be (length, sha256).
    #[error("{0}")]
    BadObject(String),
    /// The request body ended or failed before it was whole.
    #[error("the upload did not arrive whole: {0}")]
    Body(String),
    /// Over a configured limit.
    #[error("{0}")]
    TooLarge(String),
    /// No room on the spool's disk.
    #[error("{0}")]
    NoRoom(String),
    /// Another commit to the same branch is being applied.
    #[error("{0}")]
    Conflict(String),
    /// The branch is no longer at the parent the commit names.
    #[error("{0}")]
    Moved(String),
    /// A file or folder to delete is not there.
    #[error("{0}")]
    EntryNotFound(String),
    /// The branch does not exist (and the repository has revisions).
    #[error("{0}")]
    RevisionNotFound(String),
    /// Local I/O (the spool).
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
