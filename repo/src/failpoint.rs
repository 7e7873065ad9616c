//! Test hooks: pause points and crash steps, as fail points of the `fail` crate. They exist
//! only in builds with the `failpoints` cargo feature (the test suite and the reliability
//! benchmark build with it, through `scripts/test.sh` and `bench/lib.sh`); release and
//! container binaries (`cargo build --release -p modelcas`) carry none, and there every
//! function here is empty.
//!
//! Pause points, for tests that interleave processes deliberately (a gc between two steps
//! of an ingest, and so on): with `MODELCAS_PAUSE_AT=point[,point...]` the process creates
//! `<MODELCAS_PAUSE_DIR>/<point>.reached` at each named point and waits (up to ten minutes)
//! until `<point>.go` appears there.
//!
//! Crash steps, for tests that kill a process at every moment that matters rather than at
//! a moment guessed from a timer: each object-store mutation (put, deferred put, sync of
//! deferred puts, delete; see `MeteredStore`) passes the fail point
//! [`MUTATION`], a numbered step. With `MODELCAS_CRASH_AT_STEP=N` the process kills itself
//! with SIGKILL just before step N (counting from 1), exactly as `kill -9` would; with
//! `MODELCAS_STEP_COUNT=FILE` it writes the number of steps taken so far to FILE after each
//! one, so a test learns how many steps a full run has.
//!
//! Power loss, for the checks that SIGKILL cannot make (a killed process leaves its writes
//! in the page cache, where the kernel still writes them out; a power loss does not):
//! with `MODELCAS_CRASH_SHUTDOWN=PATH` as well, the crash at step N first shuts down the
//! file system holding PATH without flushing its log (`EXT4_IOC_SHUTDOWN` with
//! `EXT4_GOING_FLAGS_NOLOGFLUSH`; XFS answers the same ioctl), which drops every write
//! not yet committed to the journal, and then kills the process. What was synced survives,
//! nothing else: remounting the file system shows it as it would be after the power came
//! back (`bench/reliability.py --power-loss` does this on an ext4 on a loop device). When
//! the file system cannot be shut down (not ext4 or XFS, not root) the process aborts
//! (SIGABRT) instead, so that no caller takes a plain kill for a power loss.
//!
//! [`setup`] (called once by the binary at start) turns those variables into callbacks on
//! the named fail points.

/// The fail point every object-store mutation passes.
pub const MUTATION: &str = "object-store-mutation";

/// Whether this build has the hooks (the `failpoints` feature).
pub const ENABLED: bool = cfg!(feature = "failpoints");

/// Waits at `point` if the environment asked for it (see the module doc).
#[inline]
pub fn pause(point: &str) {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(point);
    #[cfg(not(feature = "failpoints"))]
    let _ = point;
}

/// Counts one crash step (an object-store mutation is about to happen); kills the process
/// here if the environment asks for it.
#[inline]
pub fn step() {
    #[cfg(feature = "failpoints")]
    fail::fail_point!(MUTATION);
}

/// The value of test variable `var`, read only in builds with the test hooks: without the
/// `failpoints` feature it is `None` whatever the environment says, so a stray variable in
/// production (a test script's export, a copied pod spec) changes nothing. Every test hook
/// read from the environment goes through here.
pub fn test_var(var: &str) -> Option<String> {
    gated_var(ENABLED, var)
}

/// [`test_var`] with the build's switch as a parameter, so that a test build can check
/// what a release build does.
fn gated_var(enabled: bool, var: &str) -> Option<String> {
    if !enabled {
        return None;
    }
    std::env::var(var).ok()
}

/// How long ingest waits for a file to stand still before it records the file's stamp
/// (`store::ingest::SETTLE`), as a test sets it with `MODELCAS_TEST_SETTLE_MS` (files a
/// test has just written are never two seconds old). None without the `failpoints`
/// feature, whatever the environment says.
pub fn settle_override() -> Option<std::time::Duration> {
    let ms: u64 = test_var("MODELCAS_TEST_SETTLE_MS")?.parse().ok()?;
    Some(std::time::Duration::from_millis(ms))
}

/// Configures the fail points from `MODELCAS_PAUSE_AT`, `MODELCAS_CRASH_AT_STEP`,
/// `MODELCAS_CRASH_SHUTDOWN` and `MODELCAS_STEP_COUNT`. Without the `failpoints` feature it does nothing.
pub fn setup() {
    #[cfg(feature = "failpoints")]
    hooks::setup(MUTATION);
}

/// The callbacks of the `failpoints` feature: waiting for a pause point's go file, counting
/// crash steps and crashing (or losing power) at the chosen one.
#[cfg(feature = "failpoints")]
mod hooks {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    /// The callbacks on the pause points, and on `mutation` (the crash steps' fail point).
    pub fn setup(mutation: &'static str) {
        if let Ok(at) = std::env::var("MODELCAS_PAUSE_AT") {
            let dir =
                PathBuf::from(std::env::var("MODELCAS_PAUSE_DIR").unwrap_or_else(|_| ".".into()));
            for point in at.split(',').filter(|p| !p.is_empty()) {
                let (name, dir) = (point.to_string(), dir.clone());
                let _ = fail::cfg_callback(point, move || wait_for_go(&dir, &name));
            }
        }
        let crash_at: Option<u64> = std::env::var("MODELCAS_CRASH_AT_STEP")
            .ok()
            .and_then(|v| v.parse().ok());
        let count_file = std::env::var_os("MODELCAS_STEP_COUNT").map(PathBuf::from);
        let shutdown = std::env::var_os("MODELCAS_CRASH_SHUTDOWN").map(PathBuf::from);
        if crash_at.is_some() || count_file.is_some() {
            let _ = fail::cfg_callback(mutation, move || {
                count_step(crash_at, count_file.as_ref(), shutdown.as_deref())
            });
        }
    }

    fn wait_for_go(dir: &Path, point: &str) {
        let _ = std::fs::write(dir.join(format!("{point}.reached")), b"");
        let go = dir.join(format!("{point}.go"));
        let start = Instant::now();
        while !go.exists() && start.elapsed() < Duration::from_secs(600) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    static STEPS: AtomicU64 = AtomicU64::new(0);

    fn count_step(crash_at: Option<u64>, count_file: Option<&PathBuf>, shutdown: Option<&Path>) {
        let n = STEPS.fetch_add(1, Ordering::SeqCst) + 1;
        if crash_at == Some(n) {
            if let Some(path) = shutdown {
                if let Err(e) = power_loss(path) {
                    eprintln!("MODELCAS_CRASH_SHUTDOWN {}: {e}", path.display());
                    std::process::abort();
                }
            }
            // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
        if let Some(f) = count_file {
            let _ = std::fs::write(f, n.to_string());
        }
    }

    /// `_IOR('X', 125, __u32)`: `EXT4_IOC_SHUTDOWN`, the same number as XFS's
    /// `XFS_IOC_GOINGDOWN`.
    const FS_IOC_SHUTDOWN: u32 = 0x8004_587d;
    /// `EXT4_GOING_FLAGS_NOLOGFLUSH` (`XFS_FSOP_GOING_FLAGS_NOLOGFLUSH`): stop at once,
    /// neither the data nor the journal written out.
    const GOING_FLAGS_NOLOGFLUSH: u32 = 2;

    /// Shuts down the file system holding `path` as a power loss would leave it.
    fn power_loss(path: &Path) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path)?;
        let flags: u32 = GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: the ioctl reads one u32 through the pointer, which outlives the call; the
        // fd is open for `f`'s life.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), FS_IOC_SHUTDOWN as _, &raw const flags) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_the_hooks_reads_no_test_variable() {
        // The one switch every environment hook goes through: off, a set variable is
        // not seen (what release binaries do); on, it is.
        std::env::set_var("MODELCAS_TEST_GATE_PROBE", "42");
        assert_eq!(gated_var(false, "MODELCAS_TEST_GATE_PROBE"), None);
        assert_eq!(
            gated_var(true, "MODELCAS_TEST_GATE_PROBE").as_deref(),
            Some("42")
        );
        assert_eq!(test_var("MODELCAS_TEST_GATE_PROBE").is_some(), ENABLED);
    }
}
