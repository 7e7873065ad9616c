//! This crate's metrics: object-store requests (the [`crate::MeteredStore`]
//! wrapper, and the S3 retries that the `objects` crate counts, read at each scrape) and the
//! node-local chunk cache ([`crate::disk_cache`]). [`register`] adds them to the registry the
//! binary assembles; every crate that records metrics keeps its own the same way (`read`,
//! `modelfs`, `store`, `hubserve`), and only writes those. Counters and gauges are atomics,
//! cheap enough to update on every read; durations are in seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds of latency histograms, in seconds (the object store's here, the mount's in
/// `modelfs`).
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// Object-store request kinds counted.
pub const BACKEND_OPS: [&str; 6] = ["get", "get_range", "put", "list", "delete", "head"];

/// The `op` label of the object-store metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

/// The metrics of this crate.
pub(crate) struct Metrics {
    /// Object-store requests by kind.
    backend_requests: Family<OpLabel, Counter>,
    /// Object-store requests that failed (after the client's own retries).
    backend_errors: Family<OpLabel, Counter>,
    /// Latency of object-store requests (retries included).
    backend_seconds: Histogram,
    /// Node-local cache hits.
    pub(crate) disk_cache_hits: Counter,
    /// Node-local cache misses.
    pub(crate) disk_cache_misses: Counter,
}

/// This crate's metrics, recorded whether or not a registry shows them.
pub(crate) static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    backend_requests: Family::default(),
    backend_errors: Family::default(),
    backend_seconds: Histogram::new(LATENCY_BUCKETS),
    disk_cache_hits: Counter::default(),
    disk_cache_misses: Counter::default(),
});

impl Metrics {
    /// Counts one object-store request of kind `op` (index into [`BACKEND_OPS`]).
    pub(crate) fn backend_request(&self, op: usize, took: Duration, failed: bool) {
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

/// Registers this crate's metrics in `r` (the binary's registry, prefix `modelcas`):
/// `backend_*` and `disk_cache_*`. Counters get their `_total` suffix from the encoder.
pub fn register(r: &mut Registry) {
    let m = &*METRICS;
    let b = r.sub_registry_with_prefix("backend");
    b.register_collector(Box::new(S3Retries::default()));
    b.register(
        "requests",
        "Object-store requests by kind.",
        m.backend_requests.clone(),
    );
    b.register(
        "errors",
        "Object-store requests that failed after retries.",
        m.backend_errors.clone(),
    );
    b.register_with_unit(
        "request",
        "Latency of object-store requests.",
        Unit::Seconds,
        m.backend_seconds.clone(),
    );
    r.sub_registry_with_prefix("hub")
        .register_collector(Box::new(HubCounts));
    let d = r.sub_registry_with_prefix("disk_cache");
    d.register(
        "hits",
        "Node-local chunk cache hits.",
        m.disk_cache_hits.clone(),
    );
    d.register(
        "misses",
        "Node-local chunk cache misses.",
        m.disk_cache_misses.clone(),
    );
}

/// `backend_retries`: S3 attempts beyond the first of each operation, from the counts of
/// [`objects::S3_REQUESTS`] at each scrape, never going down (an operation is counted before
/// its first attempt).
#[derive(Debug, Default)]
struct S3Retries {
    /// The most shown so far.
    shown: AtomicU64,
}

impl Collector for S3Retries {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s3 = &objects::S3_REQUESTS;
        let now = s3
            .attempts
            .load(Ordering::Relaxed)
            .saturating_sub(s3.operations.load(Ordering::Relaxed));
        let value = self.shown.fetch_max(now, Ordering::Relaxed).max(now);
        let counter = ConstCounter::new(value);
        // `Registry::register` ends every help text with one more "."; this text was
        // registered that way before it was collected here, and dashboards show it.
        let metric = encoder.encode_descriptor(
            "retries",
            "S3 attempts beyond the first of each operation (throttling, 5xx, timeouts)..",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

/// The hub store's counts ([`objects::HUB_REQUESTS`]: a node reading through hubs), read
/// at each scrape: `hub_requests`, `hub_failovers`, `hub_bad_answers`,
/// `hub_recent_block_hits` (all zero where the store is not a hub).
#[derive(Debug, Default)]
struct HubCounts;

impl Collector for HubCounts {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let h = &objects::HUB_REQUESTS;
        let counts = [
            (
                "requests",
                "Requests sent to hubs (each address tried is one).",
                &h.requests,
            ),
            (
                "failovers",
                "Requests sent on to another hub address after one failed.",
                &h.failovers,
            ),
            (
                "bad_answers",
                "Hub answers whose bytes failed their check here (asked again elsewhere).",
                &h.bad_answers,
            ),
            (
                "recent_block_hits",
                "Pack block reads answered from the blocks kept in memory.",
                &h.recent_block_hits,
            ),
        ];
        for (name, help, c) in counts {
            let counter = ConstCounter::new(c.load(Ordering::Relaxed));
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render() -> String {
        let mut r = Registry::with_prefix("modelcas");
        register(&mut r);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn renders_counters_histograms_families_and_retries() {
        METRICS.backend_request(0, Duration::from_millis(2), true);
        let text = render();
        for want in [
            "# HELP modelcas_backend_retries S3 attempts beyond the first of each operation (throttling, 5xx, timeouts)..\n",
            "# TYPE modelcas_backend_retries counter\n",
            "\nmodelcas_backend_retries_total ",
            "modelcas_backend_requests_total{op=\"get\"} 1\n",
            "modelcas_backend_errors_total{op=\"get\"} 1\n",
            "# UNIT modelcas_backend_request_seconds seconds\n",
            "modelcas_backend_request_seconds_count 1\n",
            "# TYPE modelcas_disk_cache_misses counter\n",
            "# EOF\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }
}
