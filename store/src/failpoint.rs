//! Pause points for tests that interleave processes deliberately (a gc between two steps
//! of an ingest, and so on). Inert unless `MODELCAS_PAUSE_AT` names the point: then the
//! process creates `<MODELCAS_PAUSE_DIR>/<point>.reached` and waits (up to ten minutes)
//! until `<point>.go` appears there.

use std::path::PathBuf;
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
