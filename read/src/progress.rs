//! How long operations (ingest, import, checkout, verify) report progress: a trait the
//! caller implements (the CLI draws bars from it) and a no-op. Neither the read path nor
//! the write path owns it, so each depends only on this module.

/// Receives progress of long operations.
pub trait Progress: Send + Sync {
    /// Work of `total` bytes begins.
    fn start(&self, _label: &str, _total: u64) {}
    /// `n` more bytes are done.
    fn advance(&self, _n: u64) {}
    /// The work is finished.
    fn finish(&self) {}
    /// A warning worth showing to the user.
    fn warn(&self, _msg: &str) {}
}

/// Progress that goes nowhere.
pub struct NoProgress;
impl Progress for NoProgress {}
