//! The store's error type. Every variant names the object, file or argument involved,
//! so that the command line can print one line that says what is wrong.

use std::path::PathBuf;

/// Result alias for the store.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// What the object store reported (a missing key, a failed request, a truncated
    /// object, an invalid key), or an I/O error on a local path ([`StoreError::io`]).
    #[error(transparent)]
    Object(#[from] objects::ObjectError),
    /// No store config at the location.
    #[error("no modelcas store at {0} (run `modelcas ingest` to create one)")]
    NoStore(String),
    /// A persisted object that fails its magic, version, checksum or decoding.
    #[error("corrupt object {key}: {reason}")]
    CorruptObject { key: String, reason: String },
    /// A chunk whose bytes do not decode or do not hash to its id.
    #[error("corrupt chunk {chunk} in pack {pack} at offset {offset}: {reason}")]
    CorruptChunk {
        chunk: String,
        pack: String,
        offset: u64,
        reason: String,
    },
    /// A file whose content does not match its recorded sha256.
    #[error("{path}: sha256 mismatch (expected {expected}, got {actual})")]
    Sha256Mismatch {
        path: String,
        expected: String,
        actual: String,
    },
    /// A problem reading a file of a revision, with the file named.
    #[error("{path}: {source}")]
    InFile {
        path: String,
        #[source]
        source: Box<StoreError>,
    },
    /// An argument the user gave that is not valid.
    #[error("{0}")]
    Invalid(String),
    /// A snapshot directory that cannot be ingested.
    #[error("{}: {reason}", path.display())]
    BadSource { path: PathBuf, reason: String },
    /// An unknown repository.
    #[error("unknown repository {0}")]
    UnknownRepo(String),
    /// A revision that names nothing.
    #[error("unknown revision {rev} of {repo}")]
    UnknownRevision { repo: String, rev: String },
    /// A revision prefix that names several commits.
    #[error("ambiguous revision {rev} of {repo}: matches {}", candidates.join(", "))]
    AmbiguousRevision {
        repo: String,
        rev: String,
        candidates: Vec<String>,
    },
    /// A path that is not in a revision.
    #[error("{repo}@{commit} has no file {path}")]
    NoSuchFile {
        repo: String,
        commit: String,
        path: String,
    },
    /// The local index is open in another process (one ingest at a time per index).
    #[error("index {} is in use by another modelcas process", .0.display())]
    IndexBusy(PathBuf),
    /// Another gc holds the lock.
    #[error("another gc is running ({holder}); lock object {key}. It expires by itself if that run died")]
    LockHeld { key: String, holder: String },
    /// This process's lock or lease went unrefreshed too long by the store's clock (or was
    /// removed), so others may have considered it gone: stop before publishing anything.
    #[error("lost {key}: {reason}; nothing more was published, run again")]
    LockLost { key: String, reason: String },
    /// The commit a pin or ref was being written for was removed meanwhile (gc expired it,
    /// or `rm`); what was written has been taken back.
    #[error(
        "{repo}@{commit} was removed (expired by gc, or rm) while {what}; nothing was changed"
    )]
    RemovedMeanwhile {
        repo: String,
        commit: String,
        what: &'static str,
    },
    /// The store lists format features (its `features` object) this build does not
    /// implement; nothing was read or changed.
    #[error(
        "this store needs a newer modelcas to {action} it: it uses format features this version does not implement ({}); nothing was changed",
        features.join(", ")
    )]
    NeedsNewerVersion {
        action: &'static str,
        features: Vec<String>,
    },
    /// The local index failed.
    #[error("index {}: {reason}", path.display())]
    Index { path: PathBuf, reason: String },
}

impl StoreError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> StoreError {
        StoreError::Object(objects::ObjectError::io(path, source))
    }

    /// A missing object at `key`.
    pub fn not_found(key: impl Into<String>) -> StoreError {
        StoreError::Object(objects::ObjectError::NotFound(key.into()))
    }

    /// Whether this is (or wraps) a missing object.
    pub fn is_not_found(&self) -> bool {
        match self {
            StoreError::Object(e) => e.is_not_found(),
            StoreError::InFile { source, .. } => source.is_not_found(),
            _ => false,
        }
    }

    /// Whether this is (or wraps) bytes that are not what they should be: a chunk that
    /// does not match its id, or a file that does not match its sha256.
    pub fn is_wrong_bytes(&self) -> bool {
        match self {
            StoreError::CorruptChunk { .. } | StoreError::Sha256Mismatch { .. } => true,
            StoreError::InFile { source, .. } => source.is_wrong_bytes(),
            _ => false,
        }
    }

    /// Wraps an error with the name of the revision file it concerns.
    pub fn in_file(path: &str, e: StoreError) -> StoreError {
        StoreError::InFile {
            path: path.to_string(),
            source: Box::new(e),
        }
    }
}

impl From<format::FormatError> for StoreError {
    fn from(e: format::FormatError) -> StoreError {
        match e {
            format::FormatError::Invalid(s) => StoreError::Invalid(s),
            format::FormatError::Corrupt { key, reason } => {
                StoreError::CorruptObject { key, reason }
            }
        }
    }
}
