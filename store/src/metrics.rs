//! Process-wide counters for Prometheus (`--metrics-listen`): what the mount, the caches,
//! the object store, ingest and gc did. Plain atomics, cheap enough to update on every
//! read; [`render`] writes the text exposition format.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

/// Upper bounds of latency histograms, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A latency histogram.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in BUCKETS.iter().enumerate() {
            out.push_str(&format!(
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}\n",
                self.buckets[i].load(Ordering::Relaxed)
            ));
        }
        let count = self.count.load(Ordering::Relaxed);
        out.push_str(&format!(
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}\n"
        ));
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        out.push_str(&format!(
            "{name}_sum{braces} {}\n{name}_count{braces} {count}\n",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6
        ));
    }
}

/// Object-store request kinds counted.
pub const BACKEND_OPS: [&str; 6] = ["get", "get_range", "put", "list", "delete", "head"];

/// Every metric of the process.
#[derive(Default)]
pub struct Metrics {
    /// Bytes returned to FUSE reads.
    pub mount_read_bytes: AtomicU64,
    /// FUSE read requests answered.
    pub mount_reads: AtomicU64,
    /// FUSE reads that failed (EIO).
    pub mount_read_errors: AtomicU64,
    /// Latency of FUSE reads.
    pub mount_read_seconds: Histogram,
    /// Files open through the mount.
    pub mount_open_files: AtomicU64,
    /// Chunk lookups served from decoded chunks in memory.
    pub cache_hits: AtomicU64,
    /// Chunk lookups that found the chunk being fetched (by read-ahead or another reader).
    pub cache_inflight_hits: AtomicU64,
    /// Chunk lookups that had to fetch.
    pub cache_misses: AtomicU64,
    /// Chunks fetched ahead of the reader.
    pub readahead_chunks: AtomicU64,
    /// Bytes of decoded chunks held in memory.
    pub cache_bytes: AtomicU64,
    /// Node-local cache hits and misses.
    pub disk_cache_hits: AtomicU64,
    /// Node-local cache misses.
    pub disk_cache_misses: AtomicU64,
    /// Object-store requests by kind ([`BACKEND_OPS`] order).
    pub backend_requests: [AtomicU64; BACKEND_OPS.len()],
    /// Object-store requests that failed (after the client's own retries).
    pub backend_errors: [AtomicU64; BACKEND_OPS.len()],
    /// Latency of object-store requests (retries included).
    pub backend_seconds: Histogram,
    /// S3 operations started by the SDK (a multipart upload is several).
    pub s3_operations: AtomicU64,
    /// S3 attempts (operations plus their retries).
    pub s3_attempts: AtomicU64,
    /// Bytes read by ingest.
    pub ingest_bytes: AtomicU64,
    /// Of those, bytes of chunks that were new.
    pub ingest_new_bytes: AtomicU64,
    /// Bytes of chunks already stored (deduplicated).
    pub ingest_dedup_bytes: AtomicU64,
    /// Milliseconds of the last ingest.
    pub ingest_duration_ms: AtomicU64,
    /// Bytes reclaimed by gc.
    pub gc_reclaimed_bytes: AtomicU64,
    /// Bytes stored after the last gc.
    pub gc_stored_bytes: AtomicU64,
    /// Revisions expired by gc.
    pub gc_expired_revisions: AtomicU64,
    /// Milliseconds of the last gc.
    pub gc_duration_ms: AtomicU64,
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// Adds `n` to a counter.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Sets a gauge.
pub fn set(c: &AtomicU64, n: u64) {
    c.store(n, Ordering::Relaxed);
}

/// The text exposition of every metric.
pub fn render() -> String {
    let m = &*METRICS;
    let mut out = String::new();
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}\n"
        ));
    };
    one(
        "modelcas_mount_read_bytes_total",
        "counter",
        "Bytes returned to reads through the mount.",
        l(&m.mount_read_bytes),
    );
    one(
        "modelcas_mount_reads_total",
        "counter",
        "Read requests answered by the mount.",
        l(&m.mount_reads),
    );
    one(
        "modelcas_mount_read_errors_total",
        "counter",
        "Reads that failed with EIO.",
        l(&m.mount_read_errors),
    );
    one(
        "modelcas_mount_open_files",
        "gauge",
        "Files open through the mount.",
        l(&m.mount_open_files),
    );
    one(
        "modelcas_chunk_cache_hits_total",
        "counter",
        "Chunk lookups served from memory.",
        l(&m.cache_hits),
    );
    one(
        "modelcas_chunk_cache_inflight_hits_total",
        "counter",
        "Chunk lookups that found the chunk already being fetched (read-ahead hits).",
        l(&m.cache_inflight_hits),
    );
    one(
        "modelcas_chunk_cache_misses_total",
        "counter",
        "Chunk lookups that had to fetch.",
        l(&m.cache_misses),
    );
    one(
        "modelcas_readahead_chunks_total",
        "counter",
        "Chunks fetched ahead of the reader.",
        l(&m.readahead_chunks),
    );
    one(
        "modelcas_chunk_cache_bytes",
        "gauge",
        "Bytes of decoded chunks held in memory.",
        l(&m.cache_bytes),
    );
    one(
        "modelcas_disk_cache_hits_total",
        "counter",
        "Node-local chunk cache hits.",
        l(&m.disk_cache_hits),
    );
    one(
        "modelcas_disk_cache_misses_total",
        "counter",
        "Node-local chunk cache misses.",
        l(&m.disk_cache_misses),
    );
    one(
        "modelcas_ingest_bytes_total",
        "counter",
        "Bytes read by ingest.",
        l(&m.ingest_bytes),
    );
    one(
        "modelcas_ingest_new_bytes_total",
        "counter",
        "Bytes of new chunks stored by ingest.",
        l(&m.ingest_new_bytes),
    );
    one(
        "modelcas_ingest_dedup_bytes_total",
        "counter",
        "Bytes of chunks ingest found already stored.",
        l(&m.ingest_dedup_bytes),
    );
    one(
        "modelcas_ingest_duration_milliseconds",
        "gauge",
        "Duration of the last ingest.",
        l(&m.ingest_duration_ms),
    );
    one(
        "modelcas_gc_reclaimed_bytes_total",
        "counter",
        "Bytes of packs deleted by gc.",
        l(&m.gc_reclaimed_bytes),
    );
    one(
        "modelcas_gc_stored_bytes",
        "gauge",
        "Bytes of packs stored after the last gc.",
        l(&m.gc_stored_bytes),
    );
    one(
        "modelcas_gc_expired_revisions_total",
        "counter",
        "Revisions expired by gc.",
        l(&m.gc_expired_revisions),
    );
    one(
        "modelcas_gc_duration_milliseconds",
        "gauge",
        "Duration of the last gc.",
        l(&m.gc_duration_ms),
    );
    one(
        "modelcas_backend_retries_total",
        "counter",
        "S3 attempts beyond the first of each operation (throttling, 5xx, timeouts).",
        l(&m.s3_attempts).saturating_sub(l(&m.s3_operations)),
    );
    out.push_str("# HELP modelcas_backend_requests_total Object-store requests by kind.\n# TYPE modelcas_backend_requests_total counter\n");
    for (i, op) in BACKEND_OPS.iter().enumerate() {
        out.push_str(&format!(
            "modelcas_backend_requests_total{{op=\"{op}\"}} {}\n",
            l(&m.backend_requests[i])
        ));
    }
    out.push_str("# HELP modelcas_backend_errors_total Object-store requests that failed after retries.\n# TYPE modelcas_backend_errors_total counter\n");
    for (i, op) in BACKEND_OPS.iter().enumerate() {
        out.push_str(&format!(
            "modelcas_backend_errors_total{{op=\"{op}\"}} {}\n",
            l(&m.backend_errors[i])
        ));
    }
    m.mount_read_seconds.render(
        &mut out,
        "modelcas_mount_read_seconds",
        "Latency of reads through the mount.",
        "",
    );
    m.backend_seconds.render(
        &mut out,
        "modelcas_backend_request_seconds",
        "Latency of object-store requests.",
        "",
    );
    out
}
