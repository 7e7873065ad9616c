//! Pause points for tests that interleave processes deliberately (a gc between two steps
//! of an ingest, and so on). Inert unless `MODELCAS_PAUSE_AT` names the point: then the
//! process creates `<MODELCAS_PAUSE_DIR>/<point>.reached` and waits (up to ten minutes)
//! until `<point>.go` appears there.
//!
//! Crash steps, for tests that kill a process at every moment that matters rather than at
//! a moment guessed from a timer: each object-store mutation (put, deferred put, sync of
//! deferred puts, delete; see `backend::MeteredStore`) is a numbered step. With
//! `MODELCAS_CRASH_AT_STEP=N` the process kills itself with SIGKILL just before step N
//! (counting from 1), exactly as `kill -9` would; with `MODELCAS_STEP_COUNT=FILE` it writes
//! the number of steps taken so far to FILE after each one, so a test learns how many
//! steps a full run has.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Waits at `point` if the environment asks for it.
pub fn pause(point: &str) {
    let Ok(at) = std::env::var("MODELCAS_PAUSE_AT") else {
        return;
    };
    if !at.split(',').any(|p| p == point) {
        return;
    }
    let dir = PathBuf::from(std::env::var("MODELCAS_PAUSE_DIR").unwrap_or_else(|_| ".".into()));
    let _ = std::fs::write(dir.join(format!("{point}.reached")), b"");
    let go = dir.join(format!("{point}.go"));
    let start = Instant::now();
    while !go.exists() && start.elapsed() < Duration::from_secs(600) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Crash-step settings, read once.
struct CrashSteps {
    at: Option<u64>,
    count_file: Option<PathBuf>,
}

fn crash_steps() -> &'static CrashSteps {
    static S: OnceLock<CrashSteps> = OnceLock::new();
    S.get_or_init(|| CrashSteps {
        at: std::env::var("MODELCAS_CRASH_AT_STEP")
            .ok()
            .and_then(|v| v.parse().ok()),
        count_file: std::env::var_os("MODELCAS_STEP_COUNT").map(PathBuf::from),
    })
}

static STEPS: AtomicU64 = AtomicU64::new(0);

/// Counts one crash step (an object-store mutation is about to happen); kills the process
/// here if the environment asks for it.
pub fn step() {
    let s = crash_steps();
    if s.at.is_none() && s.count_file.is_none() {
        return;
    }
    let n = STEPS.fetch_add(1, Ordering::SeqCst) + 1;
    if s.at == Some(n) {
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    if let Some(f) = &s.count_file {
        let _ = std::fs::write(f, n.to_string());
    }
}
