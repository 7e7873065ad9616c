//! Process-wide metrics for Prometheus: what the mount, the caches, the object store,
//! ingest and gc did, in the one `prometheus-client` registry of the process ([`register`]
//! adds others to it: serve's), which `--metrics-listen`, `--metrics-file` and serve's
//! `/metrics` encode ([`render`], OpenMetrics text). Counters and gauges are atomics, cheap
//! enough to update on every read; durations are in seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds of latency histograms, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Object-store request kinds counted.
pub const BACKEND_OPS: [&str; 6] = ["get", "get_range", "put", "list", "delete", "head"];

/// The `op` label of the object-store metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

/// A gauge of seconds.
pub type SecondsGauge = Gauge<f64, AtomicU64>;

/// Every metric of the store, the mount and the commands.
pub struct Metrics {
    /// Bytes returned to FUSE reads.
    pub mount_read_bytes: Counter,
    /// FUSE read requests answered.
    pub mount_reads: Counter,
    /// FUSE reads that failed (EIO).
    pub mount_read_errors: Counter,
    /// Latency of FUSE reads.
    pub mount_read_seconds: Histogram,
    /// Files open through the mount.
    pub mount_open_files: Gauge,
    /// Requests the kernel sent the mount, by operation (`lookup`, `open`, `read`, ...).
    pub mount_requests: Family<OpLabel, Counter>,
    /// Chunk lookups served from decoded chunks in memory.
    pub cache_hits: Counter,
    /// Chunk lookups that found the chunk being fetched (by read-ahead or another reader).
    pub cache_inflight_hits: Counter,
    /// Chunk lookups that had to fetch.
    pub cache_misses: Counter,
    /// Chunks fetched ahead of the reader.
    pub readahead_chunks: Counter,
    /// Bytes of decoded chunks held in memory.
    pub cache_bytes: Gauge,
    /// Node-local cache hits.
    pub disk_cache_hits: Counter,
    /// Node-local cache misses.
    pub disk_cache_misses: Counter,
    /// Opens through the mount handed to the kernel (FUSE passthrough of a whole file).
    pub mount_passthrough_opens: Counter,
    /// Opens through the mount served from a whole file on the node without passthrough.
    pub mount_whole_file_opens: Counter,
    /// Files written whole into the node's file cache.
    pub file_cache_fills: Counter,
    /// Bytes written into the node's file cache.
    pub file_cache_fill_bytes: Counter,
    /// Fills of the node's file cache that failed.
    pub file_cache_fill_errors: Counter,
    /// Fills of the node's file cache that waited for the mount's reads to stop.
    pub file_cache_fills_deferred: Counter,
    /// Bytes in the node's file cache.
    pub file_cache_bytes: Gauge,
    /// Entries of the node's file cache read and checked against the manifest.
    pub file_cache_checks: Counter,
    /// Bytes of those entries.
    pub file_cache_check_bytes: Counter,
    /// Entries of the node's file cache found damaged (and removed).
    pub file_cache_damaged: Counter,
    /// Object-store requests by kind.
    pub backend_requests: Family<OpLabel, Counter>,
    /// Object-store requests that failed (after the client's own retries).
    pub backend_errors: Family<OpLabel, Counter>,
    /// Latency of object-store requests (retries included).
    pub backend_seconds: Histogram,
    /// S3 attempts beyond the first of each operation (kept up to date by [`render`] from
    /// [`objects::S3_REQUESTS`]).
    backend_retries: Counter,
    /// Bytes read by ingest.
    pub ingest_bytes: Counter,
    /// Of those, bytes of chunks that were new.
    pub ingest_new_bytes: Counter,
    /// Bytes of chunks already stored (deduplicated).
    pub ingest_dedup_bytes: Counter,
    /// Duration of the last ingest.
    pub ingest_duration: SecondsGauge,
    /// Bytes reclaimed by gc.
    pub gc_reclaimed_bytes: Counter,
    /// Bytes stored after the last gc.
    pub gc_stored_bytes: Gauge,
    /// Revisions expired by gc.
    pub gc_expired_revisions: Counter,
    /// Duration of the last gc.
    pub gc_duration: SecondsGauge,
}

impl Metrics {
    fn new() -> Metrics {
        Metrics {
            mount_read_bytes: Counter::default(),
            mount_reads: Counter::default(),
            mount_read_errors: Counter::default(),
            mount_read_seconds: Histogram::new(BUCKETS),
            mount_open_files: Gauge::default(),
            mount_requests: Family::default(),
            cache_hits: Counter::default(),
            cache_inflight_hits: Counter::default(),
            cache_misses: Counter::default(),
            readahead_chunks: Counter::default(),
            cache_bytes: Gauge::default(),
            disk_cache_hits: Counter::default(),
            disk_cache_misses: Counter::default(),
            mount_passthrough_opens: Counter::default(),
            mount_whole_file_opens: Counter::default(),
            file_cache_fills: Counter::default(),
            file_cache_fill_bytes: Counter::default(),
            file_cache_fill_errors: Counter::default(),
            file_cache_fills_deferred: Counter::default(),
            file_cache_bytes: Gauge::default(),
            file_cache_checks: Counter::default(),
            file_cache_check_bytes: Counter::default(),
            file_cache_damaged: Counter::default(),
            backend_requests: Family::default(),
            backend_errors: Family::default(),
            backend_seconds: Histogram::new(BUCKETS),
            backend_retries: Counter::default(),
            ingest_bytes: Counter::default(),
            ingest_new_bytes: Counter::default(),
            ingest_dedup_bytes: Counter::default(),
            ingest_duration: SecondsGauge::default(),
            gc_reclaimed_bytes: Counter::default(),
            gc_stored_bytes: Gauge::default(),
            gc_expired_revisions: Counter::default(),
            gc_duration: SecondsGauge::default(),
        }
    }

    /// Registers every metric (counters get their `_total` suffix from the encoder).
    fn register(&self, r: &mut Registry) {
        self.register_mount(r);
        self.register_caches(r);
        self.register_commands(r);
        self.register_backend(r);
    }

    /// The mount's reads.
    fn register_mount(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "mount_read_bytes",
            "Bytes returned to reads through the mount.",
            m.mount_read_bytes.clone(),
        );
        r.register(
            "mount_reads",
            "Reads answered through the mount.",
            m.mount_reads.clone(),
        );
        r.register(
            "mount_read_errors",
            "Reads through the mount that failed (EIO).",
            m.mount_read_errors.clone(),
        );
        r.register(
            "mount_open_files",
            "Files open through the mount.",
            m.mount_open_files.clone(),
        );
        r.register(
            "mount_requests",
            "Requests the kernel sent the mount, by operation.",
            m.mount_requests.clone(),
        );
        r.register_with_unit(
            "mount_read",
            "Latency of reads through the mount.",
            Unit::Seconds,
            m.mount_read_seconds.clone(),
        );
    }

    /// The decoded-chunk cache, read-ahead and the node cache.
    fn register_caches(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "chunk_cache_hits",
            "Chunk lookups served from memory.",
            m.cache_hits.clone(),
        );
        r.register(
            "chunk_cache_inflight_hits",
            "Chunk lookups that found the chunk already being fetched (read-ahead hits).",
            m.cache_inflight_hits.clone(),
        );
        r.register(
            "chunk_cache_misses",
            "Chunk lookups that had to fetch.",
            m.cache_misses.clone(),
        );
        r.register(
            "readahead_chunks",
            "Chunks fetched ahead of the reader.",
            m.readahead_chunks.clone(),
        );
        r.register(
            "chunk_cache_bytes",
            "Bytes of decoded chunks held in memory.",
            m.cache_bytes.clone(),
        );
        r.register(
            "disk_cache_hits",
            "Node-local chunk cache hits.",
            m.disk_cache_hits.clone(),
        );
        r.register(
            "disk_cache_misses",
            "Node-local chunk cache misses.",
            m.disk_cache_misses.clone(),
        );
        r.register(
            "mount_passthrough_opens",
            "Opens through the mount handed to the kernel (passthrough of a whole file on the node).",
            m.mount_passthrough_opens.clone(),
        );
        r.register(
            "mount_whole_file_opens",
            "Opens through the mount served from a whole file on the node, without passthrough.",
            m.mount_whole_file_opens.clone(),
        );
        r.register(
            "file_cache_fills",
            "Files written whole and verified into the node's file cache.",
            m.file_cache_fills.clone(),
        );
        r.register(
            "file_cache_fill_bytes",
            "Bytes written into the node's file cache.",
            m.file_cache_fill_bytes.clone(),
        );
        r.register(
            "file_cache_fill_errors",
            "Fills of the node's file cache that failed.",
            m.file_cache_fill_errors.clone(),
        );
        r.register(
            "file_cache_fills_deferred",
            "Fills of the node's file cache that waited for the mount's reads to stop.",
            m.file_cache_fills_deferred.clone(),
        );
        r.register(
            "file_cache_bytes",
            "Bytes in the node's file cache.",
            m.file_cache_bytes.clone(),
        );
        r.register(
            "file_cache_checks",
            "Entries of the node's file cache read and checked against the manifest before use.",
            m.file_cache_checks.clone(),
        );
        r.register(
            "file_cache_check_bytes",
            "Bytes of the node's file cache entries checked before use.",
            m.file_cache_check_bytes.clone(),
        );
        r.register(
            "file_cache_damaged",
            "Entries of the node's file cache found damaged and removed (the file was read from the store).",
            m.file_cache_damaged.clone(),
        );
    }

    /// Ingest and gc.
    fn register_commands(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "ingest_bytes",
            "Bytes read by ingest.",
            m.ingest_bytes.clone(),
        );
        r.register(
            "ingest_new_bytes",
            "Bytes of new chunks stored by ingest.",
            m.ingest_new_bytes.clone(),
        );
        r.register(
            "ingest_dedup_bytes",
            "Bytes of chunks ingest found already stored.",
            m.ingest_dedup_bytes.clone(),
        );
        r.register_with_unit(
            "ingest_duration",
            "Duration of the last ingest.",
            Unit::Seconds,
            m.ingest_duration.clone(),
        );
        r.register(
            "gc_reclaimed_bytes",
            "Bytes of packs deleted by gc.",
            m.gc_reclaimed_bytes.clone(),
        );
        r.register(
            "gc_stored_bytes",
            "Bytes of packs stored after the last gc.",
            m.gc_stored_bytes.clone(),
        );
        r.register(
            "gc_expired_revisions",
            "Revisions expired by gc.",
            m.gc_expired_revisions.clone(),
        );
        r.register_with_unit(
            "gc_duration",
            "Duration of the last gc.",
            Unit::Seconds,
            m.gc_duration.clone(),
        );
    }

    /// Object-store requests.
    fn register_backend(&self, r: &mut Registry) {
        let m = self;
        r.register(
            "backend_retries",
            "S3 attempts beyond the first of each operation (throttling, 5xx, timeouts).",
            m.backend_retries.clone(),
        );
        r.register(
            "backend_requests",
            "Object-store requests by kind.",
            m.backend_requests.clone(),
        );
        r.register(
            "backend_errors",
            "Object-store requests that failed after retries.",
            m.backend_errors.clone(),
        );
        r.register_with_unit(
            "backend_request",
            "Latency of object-store requests.",
            Unit::Seconds,
            m.backend_seconds.clone(),
        );
    }

    /// Counts one object-store request of kind `op` (index into [`BACKEND_OPS`]).
    pub fn backend_request(&self, op: usize, took: Duration, failed: bool) {
        let label = OpLabel {
            op: BACKEND_OPS.get(op).copied().unwrap_or("other"),
        };
        self.backend_seconds.observe(took.as_secs_f64());
        self.backend_requests.get_or_create(&label).inc();
        if failed {
            self.backend_errors.get_or_create(&label).inc();
        }
    }
}

/// The process's registry, with every metric of [`METRICS`] under the `modelcas_` prefix.
static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| {
    let mut r = Registry::with_prefix("modelcas");
    METRICS.register(&mut r);
    Mutex::new(r)
});

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Adds more metrics to the process's registry (names get the `modelcas_` prefix); each
/// caller registers once per process.
pub fn register(f: impl FnOnce(&mut Registry)) {
    f(&mut REGISTRY.lock().unwrap_or_else(|p| p.into_inner()));
}

/// Adds `n` to a counter.
pub fn add(c: &Counter, n: u64) {
    c.inc_by(n);
}

/// Counts one request of the kernel to the mount.
pub fn mount_request(op: &'static str) {
    METRICS.mount_requests.get_or_create(&OpLabel { op }).inc();
}

/// Sets a gauge.
pub fn set(g: &Gauge, n: u64) {
    g.set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// The OpenMetrics text exposition of every metric of the process.
pub fn render() -> String {
    let m = &*METRICS;
    let s3 = &objects::S3_REQUESTS;
    let retries = s3
        .attempts
        .load(Ordering::Relaxed)
        .saturating_sub(s3.operations.load(Ordering::Relaxed));
    let have = m.backend_retries.get();
    if retries > have {
        m.backend_retries.inc_by(retries - have);
    }
    let mut out = String::new();
    let r = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, &r);
    out
}

/// The same metrics in the Prometheus text format 0.0.4, for readers that do not take
/// OpenMetrics (node_exporter's textfile collector reads `--metrics-file`): no `# UNIT` and
/// `# EOF` lines, and a counter's `# HELP`/`# TYPE` name with the `_total` its samples carry.
pub fn render_text_format() -> String {
    to_text_format(&render())
}

fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
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

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_histograms_and_families() {
        // Metrics no other unit test of this crate touches (they run in one process).
        add(&METRICS.ingest_new_bytes, 3);
        set(&METRICS.gc_stored_bytes, 12345);
        METRICS.ingest_duration.set(1.5);
        METRICS.backend_request(0, Duration::from_millis(2), true);
        let text = render();
        for want in [
            "modelcas_ingest_new_bytes_total 3\n",
            "modelcas_gc_stored_bytes 12345\n",
            "modelcas_ingest_duration_seconds 1.5\n",
            "modelcas_backend_requests_total{op=\"get\"} 1\n",
            "modelcas_backend_errors_total{op=\"get\"} 1\n",
            "modelcas_backend_request_seconds_count 1\n",
            "modelcas_mount_read_seconds_bucket{le=\"0.0001\"} 0\n",
            "# EOF\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
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
