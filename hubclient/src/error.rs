//! The client's one error type. Each variant names what it is about (repository,
//! revision, file path, URL) so that a message printed by the CLI is enough to act on.
//! Errors raised while a [`crate::Download`] is read travel inside `std::io::Error`;
//! [`Error::from_io`] finds them again.

use std::io;

/// A failure of the Hub client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The options given to [`crate::HubClient::new`] or an argument are unusable.
    #[error("invalid argument: {0}")]
    Invalid(String),

    /// The endpoint answered 401.
    #[error("{url}: unauthorized (401): {message}; {hint}")]
    Unauthorized {
        url: String,
        message: String,
        hint: &'static str,
    },

    /// The endpoint answered 403 (a gated repository whose terms were not accepted, a
    /// token without access, an `--allow` list that excludes the repository).
    #[error("{url}: forbidden (403): {message}; {hint}")]
    Forbidden {
        url: String,
        message: String,
        hint: &'static str,
    },

    /// `X-Error-Code: RepoNotFound` (404, or 401 from the Hub for private repositories).
    #[error("repository {repo} not found: {message}{hint}")]
    RepoNotFound {
        repo: String,
        message: String,
        hint: &'static str,
    },

    /// `X-Error-Code: RevisionNotFound`.
    #[error("revision {revision:?} of {repo} not found: {message}")]
    RevisionNotFound {
        repo: String,
        revision: String,
        message: String,
    },

    /// `X-Error-Code: EntryNotFound`.
    #[error("{path:?} not found in {repo} at {revision}: {message}")]
    EntryNotFound {
        repo: String,
        revision: String,
        path: String,
        message: String,
    },

    /// Any other unexpected status, after retries where the status is retryable.
    #[error("{url}: HTTP {status} after {attempts} attempt(s): {message}")]
    Status {
        url: String,
        status: u16,
        attempts: u32,
        message: String,
    },

    /// The connection failed (DNS, TCP, TLS, timeouts, a cut), after retries.
    #[error("{url}: {source} (after {attempts} attempt(s))")]
    Transport {
        url: String,
        attempts: u32,
        #[source]
        source: Box<ureq::Error>,
    },

    /// The endpoint answered something that breaks the protocol or our limits: a bad
    /// JSON body, a hostile file path, a wrong `Content-Range`, too many files...
    #[error("{url}: invalid answer: {reason}")]
    Protocol { url: String, reason: String },

    /// A redirect (or a tree page's `Link`) the client will not follow: to an origin that
    /// is neither the endpoint's nor a configured redirect host, with user info, not
    /// http(s), or one hop too many.
    #[error("{from}: refused to follow the redirect to {to:?}: {reason}")]
    Redirect {
        from: String,
        to: String,
        reason: String,
    },

    /// A revision's file listing is over one of the client's caps
    /// ([`crate::ListingLimits`]).
    #[error("{url}: the file listing of {repo} is over the cap of {cap} {what} (raise the cap if the repository really is this large)")]
    ListingCap {
        url: String,
        repo: String,
        what: &'static str,
        cap: u64,
    },

    /// A download fell under the lowest average rate after its grace
    /// ([`crate::Timeouts`]): its total deadline passed.
    #[error("{path:?}: download too slow: {received} bytes in {seconds}s, under the deadline of {grace}s + 1s per {min_rate} bytes")]
    TooSlow {
        path: String,
        received: u64,
        seconds: u64,
        grace: u64,
        min_rate: u64,
    },

    /// A download delivered a different number of bytes than announced.
    #[error("{path:?}: {reason}")]
    Size { path: String, reason: String },

    /// A download kept failing: `attempts` consecutive requests without progress.
    #[error("{path:?}: download failed at byte {position} after {attempts} attempt(s): {last}")]
    Interrupted {
        path: String,
        position: u64,
        attempts: u32,
        last: String,
    },

    /// Downloaded bytes differ from what the Hub stated for the file.
    #[error("{path:?}: {what} mismatch: the Hub states {expected}, the bytes give {actual}")]
    Mismatch {
        path: String,
        what: &'static str,
        expected: String,
        actual: String,
    },

    /// Reading the local side of a copy failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl Error {
    /// The client error inside an `io::Error` returned by [`crate::Download`]'s `read`.
    pub fn from_io(e: &io::Error) -> Option<&Error> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<Error>())
    }

    /// Whether retrying the same call later may succeed (network trouble, 429, 5xx, a
    /// download interrupted too often), as opposed to a refusal or a bad answer.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport { .. } | Error::Interrupted { .. } | Error::TooSlow { .. } => true,
            Error::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    pub(crate) fn protocol(url: &str, reason: impl Into<String>) -> Error {
        Error::Protocol {
            url: url.to_string(),
            reason: reason.into(),
        }
    }

    /// Wraps the error for `io::Read` so that [`Error::from_io`] finds it again. An
    /// `Io` error is passed through unchanged.
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            Error::Io(e) => e,
            e => io::Error::other(e),
        }
    }
}

/// The hint added to 401/403 errors.
pub(crate) fn token_hint(token_sent: bool) -> &'static str {
    if token_sent {
        "the token sent was refused or lacks access to this repository"
    } else {
        "no token was sent: a token may be needed (set HF_TOKEN or pass --token)"
    }
}
