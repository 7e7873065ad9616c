//! The process's count of S3 SDK operations and attempts, kept here (and not in `s3`) so
//! that it exists, at zero, where the `s3` feature is off.

/// SDK operations and attempts (every retry is one more attempt) of every S3 store of the
/// process (zero where the `s3` feature is off); the store's metrics report them.
#[derive(Debug, Default)]
pub struct S3Requests {
    /// Operations started (a GET, a PUT, ...).
    pub operations: std::sync::atomic::AtomicU64,
    /// Attempts made (operations plus retries).
    pub attempts: std::sync::atomic::AtomicU64,
}

/// The process's S3 request counts.
pub static S3_REQUESTS: S3Requests = S3Requests {
    operations: std::sync::atomic::AtomicU64::new(0),
    attempts: std::sync::atomic::AtomicU64::new(0),
};
