//! The object stores' error type: what went wrong on which key or local path.

use std::path::PathBuf;

/// Result alias for object-store operations.
pub type Result<T, E = ObjectError> = std::result::Result<T, E>;

/// Everything an object store can report.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// An I/O error on a local path.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The object store failed on a key.
    #[error("object store: {op} {key}: {reason}")]
    Backend {
        op: &'static str,
        key: String,
        reason: String,
    },
    /// A key that does not exist.
    #[error("object not found: {0}")]
    NotFound(String),
    /// An object shorter than the range asked for (truncated).
    #[error("corrupt object {key}: {reason}")]
    CorruptObject { key: String, reason: String },
    /// An invalid key, location or setting.
    #[error("{0}")]
    Invalid(String),
    /// A write to a store that only reads (a hub): run commands that write against the
    /// bucket itself.
    #[error(
        "{location} is a modelcas hub, which only reads: cannot {op} {key}; run commands that \
         write against the bucket itself"
    )]
    ReadOnly {
        location: String,
        op: &'static str,
        key: String,
    },
}

impl ObjectError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ObjectError {
        ObjectError::Io {
            path: path.into(),
            source,
        }
    }

    /// Whether this is a missing object.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ObjectError::NotFound(_))
    }
}
