//! This crate's metrics: the decoded-chunk cache ([`crate::cache`]), read-ahead, and the
//! node's file cache ([`crate::file_cache`]). [`register`] adds them to the registry the
//! binary assembles. Counters and gauges are atomics, cheap enough to update on every read.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The metrics of this crate.
pub(crate) struct Metrics {
    /// Chunk lookups served from decoded chunks in memory.
    pub(crate) cache_hits: Counter,
    /// Chunk lookups that found the chunk being fetched (by read-ahead or another reader).
    pub(crate) cache_inflight_hits: Counter,
    /// Chunk lookups that had to fetch.
    pub(crate) cache_misses: Counter,
    /// Bytes of decoded chunks held in memory.
    pub(crate) cache_bytes: Gauge,
    /// Chunks fetched ahead of the reader.
    pub(crate) readahead_chunks: Counter,
    /// Files written whole into the node's file cache.
    pub(crate) file_cache_fills: Counter,
    /// Bytes written into the node's file cache.
    pub(crate) file_cache_fill_bytes: Counter,
    /// Fills of the node's file cache that failed.
    pub(crate) file_cache_fill_errors: Counter,
    /// Fills of the node's file cache that waited for the mount's reads to stop.
    pub(crate) file_cache_fills_deferred: Counter,
    /// Bytes in the node's file cache.
    pub(crate) file_cache_bytes: Gauge,
    /// Entries of the node's file cache read and checked against the manifest.
    pub(crate) file_cache_checks: Counter,
    /// Bytes of those entries.
    pub(crate) file_cache_check_bytes: Counter,
    /// Entries of the node's file cache found damaged (and removed).
    pub(crate) file_cache_damaged: Counter,
}

/// This crate's metrics, recorded whether or not a registry shows them.
pub(crate) static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    cache_hits: Counter::default(),
    cache_inflight_hits: Counter::default(),
    cache_misses: Counter::default(),
    cache_bytes: Gauge::default(),
    readahead_chunks: Counter::default(),
    file_cache_fills: Counter::default(),
    file_cache_fill_bytes: Counter::default(),
    file_cache_fill_errors: Counter::default(),
    file_cache_fills_deferred: Counter::default(),
    file_cache_bytes: Gauge::default(),
    file_cache_checks: Counter::default(),
    file_cache_check_bytes: Counter::default(),
    file_cache_damaged: Counter::default(),
});

/// Sets a gauge to a byte count.
pub(crate) fn set(g: &Gauge, n: u64) {
    g.set(i64::try_from(n).unwrap_or(i64::MAX));
}

/// Registers this crate's metrics in `r` (the binary's registry, prefix `modelcas`):
/// `chunk_cache_*`, `readahead_chunks` and `file_cache_*`.
pub fn register(r: &mut Registry) {
    let m = &*METRICS;
    r.register(
        "readahead_chunks",
        "Chunks fetched ahead of the reader.",
        m.readahead_chunks.clone(),
    );
    register_chunk_cache(r.sub_registry_with_prefix("chunk_cache"), m);
    register_file_cache(r.sub_registry_with_prefix("file_cache"), m);
}

/// The decoded-chunk cache (`chunk_cache_*`).
fn register_chunk_cache(r: &mut Registry, m: &Metrics) {
    r.register(
        "hits",
        "Chunk lookups served from memory.",
        m.cache_hits.clone(),
    );
    r.register(
        "inflight_hits",
        "Chunk lookups that found the chunk already being fetched (read-ahead hits).",
        m.cache_inflight_hits.clone(),
    );
    r.register(
        "misses",
        "Chunk lookups that had to fetch.",
        m.cache_misses.clone(),
    );
    r.register(
        "bytes",
        "Bytes of decoded chunks held in memory.",
        m.cache_bytes.clone(),
    );
}

/// The node's file cache (`file_cache_*`).
fn register_file_cache(r: &mut Registry, m: &Metrics) {
    r.register(
        "fills",
        "Files written whole and verified into the node's file cache.",
        m.file_cache_fills.clone(),
    );
    r.register(
        "fill_bytes",
        "Bytes written into the node's file cache.",
        m.file_cache_fill_bytes.clone(),
    );
    r.register(
        "fill_errors",
        "Fills of the node's file cache that failed.",
        m.file_cache_fill_errors.clone(),
    );
    r.register(
        "fills_deferred",
        "Fills of the node's file cache that waited for the mount's reads to stop.",
        m.file_cache_fills_deferred.clone(),
    );
    r.register(
        "bytes",
        "Bytes in the node's file cache.",
        m.file_cache_bytes.clone(),
    );
    r.register(
        "checks",
        "Entries of the node's file cache read and checked against the manifest before use.",
        m.file_cache_checks.clone(),
    );
    r.register(
        "check_bytes",
        "Bytes of the node's file cache entries checked before use.",
        m.file_cache_check_bytes.clone(),
    );
    r.register(
        "damaged",
        "Entries of the node's file cache found damaged and removed (the file was read from the store).",
        m.file_cache_damaged.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_prefixes() {
        let mut r = Registry::with_prefix("modelcas");
        register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for want in [
            "# TYPE modelcas_readahead_chunks counter\n",
            "# TYPE modelcas_chunk_cache_inflight_hits counter\n",
            "# TYPE modelcas_chunk_cache_bytes gauge\n",
            "# TYPE modelcas_file_cache_fills_deferred counter\n",
            "# TYPE modelcas_file_cache_bytes gauge\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }
}
