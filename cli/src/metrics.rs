//! The process's metrics: the registry this binary assembles from the metrics of each crate
//! (every crate defines, records and registers its own), an HTTP listener for `/metrics`
//! (`--metrics-listen`) and a text file written at exit (`--metrics-file`, for the
//! node_exporter textfile collector: batch jobs end before a scrape).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use prometheus_client::registry::Registry;

/// Every metric a command can record, under the `modelcas_` prefix; serve's only for
/// `serve` (`with_serve`), as no other command records them.
pub fn registry(with_serve: bool) -> Arc<Registry> {
    let mut r = Registry::with_prefix("modelcas");
    modelfs::metrics::register(&mut r);
    mountd::metrics::register(&mut r);
    read::metrics::register(&mut r);
    store::metrics::register(&mut r);
    repo::metrics::register(&mut r);
    if with_serve {
        hubserve::metrics::register(&mut r);
    }
    Arc::new(r)
}

/// Serves `/metrics` on `addr` from a background thread (serve's hyper stack).
pub fn serve(addr: &str, registry: Arc<Registry>) -> Result<()> {
    hubserve::metrics_listener::spawn(addr, registry).context("--metrics-listen")?;
    Ok(())
}

/// Writes the metrics to `path` atomically (a temporary file renamed into place).
pub fn write_file(path: &Path, registry: &Registry) -> Result<()> {
    let tmp = path.with_extension("prom.tmp");
    let text = to_text_format(&hubserve::exposition::render(registry));
    std::fs::write(&tmp, text).with_context(|| format!("--metrics-file {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("--metrics-file {}", path.display()))?;
    Ok(())
}

/// The metrics in the Prometheus text format 0.0.4, for readers that do not take
/// OpenMetrics (node_exporter's textfile collector reads `--metrics-file`): no `# UNIT` and
/// `# EOF` lines, and a counter's `# HELP`/`# TYPE` name with the `_total` its samples carry.
fn to_text_format(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# EOF") || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((p, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{p}{name}{suffix} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crate_registers_and_the_text_format_suits_node_exporter() {
        let text = hubserve::exposition::render(&registry(true));
        for want in [
            "# TYPE modelcas_mount_read_bytes counter\n",
            "# TYPE modelcas_chunk_cache_hits counter\n",
            "# TYPE modelcas_gc_stored_bytes gauge\n",
            "# UNIT modelcas_ingest_duration_seconds seconds\n",
            "# TYPE modelcas_backend_retries counter\n",
            "# TYPE modelcas_serve_bytes_sent counter\n",
            "# EOF\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
        let without = hubserve::exposition::render(&registry(false));
        assert!(!without.contains("modelcas_serve_"), "{without}");
        let plain = to_text_format(&text);
        assert!(
            plain.contains("# TYPE modelcas_chunk_cache_hits_total counter\n"),
            "{plain}"
        );
        assert!(
            plain.contains("# TYPE modelcas_gc_stored_bytes gauge\n"),
            "{plain}"
        );
        assert!(
            !plain.contains("# EOF") && !plain.contains("# UNIT"),
            "{plain}"
        );
    }
}
