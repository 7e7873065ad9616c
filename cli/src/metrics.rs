//! Exposing the process metrics (`store::metrics`): an HTTP listener for `/metrics`
//! (`--metrics-listen`) and a text file written at exit (`--metrics-file`, for the
//! node_exporter textfile collector: batch jobs end before a scrape).

use std::path::Path;

use anyhow::{Context, Result};

/// Serves `/metrics` on `addr` from a background thread.
pub fn serve(addr: &str) -> Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| anyhow::anyhow!("--metrics-listen {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            while let Ok(req) = server.recv() {
                let resp = if req.url() == "/metrics" {
                    tiny_http::Response::from_string(store::metrics::render()).with_header(
                        tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            store::metrics::CONTENT_TYPE.as_bytes(),
                        )
                        .expect("static header"),
                    )
                } else {
                    tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        })
        .context("starting the metrics thread")?;
    Ok(())
}

/// Writes the metrics to `path` atomically (a temporary file renamed into place).
pub fn write_file(path: &Path) -> Result<()> {
    let tmp = path.with_extension("prom.tmp");
    std::fs::write(&tmp, store::metrics::render_text_format())
        .with_context(|| format!("--metrics-file {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("--metrics-file {}", path.display()))?;
    Ok(())
}
