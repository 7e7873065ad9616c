//! The one error of the format crate: a value that does not parse, or bytes that do not
//! decode.

/// A value that does not parse, or bytes that do not decode as the format says.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A name, id or argument that is not valid.
    #[error("{0}")]
    Invalid(String),
    /// An object whose bytes fail their magic, version, checksum, decoding or invariants.
    #[error("corrupt object {key}: {reason}")]
    Corrupt { key: String, reason: String },
}

/// The result of parsing or decoding.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;
