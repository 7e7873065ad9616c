//! The process clock: every time modelcas derives from this host's clock (the informational
//! times in manifests, refs, pins, lock objects and last-use records; when a process last
//! wrote a last-use record) comes from here.
//!
//! Nothing that decides safety or retention compares this clock with another host's: lock
//! and lease ages, condemned-pack marks, last use and `gc --keep-within` are judged by the
//! object store's clock ([`objects::ObjectStore::now`] and objects' modification times), see
//! `docs/format/protocols.md`, "Locks and leases", and `docs/format/bytes.md`, "Manifests".
//!
//! Test hooks, only in builds with the `failpoints` feature (release binaries ignore the
//! variables, see [`crate::failpoint::test_var`]): `MODELCAS_TEST_CLOCK_OFFSET_SECS` (a
//! signed number of seconds, read once) shifts this clock, simulating a host whose clock is
//! wrong; `MODELCAS_TEST_CLOCK_FILE` names a file holding such a number, read again at every
//! call, so that a test can move the clock of a running process (time passing for a
//! long-lived serve or mount). Neither shifts the object store's clock (for the local
//! directory store: the file system's modification times and the kernel's clock).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::failpoint;

/// A signed number of seconds, as the test variables hold it.
fn parse_offset(v: &str) -> Option<i64> {
    v.trim().parse().ok()
}

/// The test offset: the fixed one, plus the one in the clock file if any. Always 0 in
/// builds without the test hooks.
fn offset_secs() -> i64 {
    static FIXED: OnceLock<i64> = OnceLock::new();
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    let fixed = *FIXED.get_or_init(|| {
        failpoint::test_var("MODELCAS_TEST_CLOCK_OFFSET_SECS")
            .and_then(|v| parse_offset(&v))
            .unwrap_or(0)
    });
    let file =
        FILE.get_or_init(|| failpoint::test_var("MODELCAS_TEST_CLOCK_FILE").map(PathBuf::from));
    let moved = file
        .as_ref()
        .and_then(|f| std::fs::read_to_string(f).ok())
        .and_then(|v| parse_offset(&v))
        .unwrap_or(0);
    fixed.saturating_add(moved)
}

/// This process's idea of the current time (the system clock, shifted by the test offset
/// in test builds).
pub fn now() -> SystemTime {
    shift(SystemTime::now(), offset_secs())
}

fn shift(real: SystemTime, off: i64) -> SystemTime {
    if off >= 0 {
        real.checked_add(Duration::from_secs(off as u64))
            .unwrap_or(real)
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

/// [`now_ms`], made strictly increasing within this process: each call returns more than
/// the one before, even within one millisecond or after this host's clock went back. A
/// sequence for ordering what one process publishes (see `Published::seq`).
pub fn sequence_ms() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = now_ms();
    let prev = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(0);
    now.max(prev + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_strictly_increases() {
        let mut prev = sequence_ms();
        for _ in 0..10_000 {
            let s = sequence_ms();
            assert!(s > prev, "{s} after {prev}");
            prev = s;
        }
        assert!(prev >= now_ms());
    }
}
