//! The process clock: every time modelcas derives from this host's clock (manifest
//! `ingested_at`, ref and pin timestamps, the informational times in lock objects,
//! retention's "now") comes from here.
//!
//! Nothing that decides safety compares this clock with another host's: lock and lease
//! ages and condemned-pack marks are judged by the object store's clock
//! ([`crate::ObjectStore::now`] and objects' modification times), see `docs/FORMAT.md`,
//! "Locks and leases".
//!
//! For tests, `MODELCAS_TEST_CLOCK_OFFSET_SECS` (a signed number of seconds) shifts this
//! clock, simulating a host whose clock is wrong. It does not shift the object store's
//! clock (for the local directory store: the file system's modification times and the
//! kernel's clock).

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The test offset, read once.
fn offset_secs() -> i64 {
    static OFFSET: OnceLock<i64> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        std::env::var("MODELCAS_TEST_CLOCK_OFFSET_SECS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    })
}

/// This process's idea of the current time (the system clock, shifted by the test offset).
pub fn now() -> SystemTime {
    let real = SystemTime::now();
    let off = offset_secs();
    if off >= 0 {
        real + Duration::from_secs(off as u64)
    } else {
        real.checked_sub(Duration::from_secs(off.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before the epoch).
pub fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// [`now`] in milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    to_ms(now())
}

/// [`now`] in seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    now_ms() / 1000
}
