//! The process's count of S3 SDK operations and attempts and of hub requests, kept here
//! (and not in `s3` or `hub`) so that they exist, at zero, where those features are off.

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

/// The process's hub requests (every hub store; zero where the `hub` feature is off), shown by the store's metrics.
#[derive(Debug, Default)]
pub struct HubRequests {
    /// Requests sent (each address tried is one).
    pub requests: std::sync::atomic::AtomicU64,
    /// Requests sent on to another address after one failed.
    pub failovers: std::sync::atomic::AtomicU64,
    /// Answers whose bytes failed their check on this node (asked again elsewhere).
    pub bad_answers: std::sync::atomic::AtomicU64,
    /// Block reads answered from the blocks kept in memory.
    pub recent_block_hits: std::sync::atomic::AtomicU64,
}

/// The process's hub request counts.
pub static HUB_REQUESTS: HubRequests = HubRequests {
    requests: std::sync::atomic::AtomicU64::new(0),
    failovers: std::sync::atomic::AtomicU64::new(0),
    bad_answers: std::sync::atomic::AtomicU64::new(0),
    recent_block_hits: std::sync::atomic::AtomicU64::new(0),
};
