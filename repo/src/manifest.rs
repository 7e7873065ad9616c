//! Manifests (`format::manifest`, re-exported here), with the two helpers that need this
//! process: the time a manifest, ref or pin is stamped with, and how times are printed.

pub use format::manifest::*;

/// Seconds since the Unix epoch, by this process's clock ([`crate::clock`]).
pub fn now_secs() -> u64 {
    crate::clock::now_secs()
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC, RFC 3339 through `humantime`);
/// times past the year 9999 (only a damaged or hostile manifest has them) print as its
/// last second.
pub fn utc_string(secs: u64) -> String {
    const LAST: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.min(LAST));
    humantime::format_rfc3339_seconds(t).to_string()
}
