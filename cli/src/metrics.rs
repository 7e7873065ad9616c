//! Exposing the process metrics (`repo::metrics`): an HTTP listener for `/metrics`
//! (`--metrics-listen`) and a text file written at exit (`--metrics-file`, for the
//! node_exporter textfile collector: batch jobs end before a scrape).

use std::path::Path;

use anyhow::{Context, Result};

/// Serves `/metrics` on `addr` from a background thread (serve's hyper stack).
pub fn serve(addr: &str) -> Result<()> {
    hubserve::metrics_listener::spawn(addr).context("--metrics-listen")?;
    Ok(())
}

/// Writes the metrics to `path` atomically (a temporary file renamed into place).
pub fn write_file(path: &Path) -> Result<()> {
    let tmp = path.with_extension("prom.tmp");
    std::fs::write(&tmp, repo::metrics::render_text_format())
        .with_context(|| format!("--metrics-file {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("--metrics-file {}", path.display()))?;
    Ok(())
}
