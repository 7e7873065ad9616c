//! Prometheus metrics of the endpoint (`modelcas_serve_*`). The binary adds them
//! ([`register`]) to the registry it assembles from every crate's metrics, which `/metrics`
//! shows in one OpenMetrics exposition ([`crate::exposition`]).

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Upper bounds (seconds) of the download duration histogram.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0];

/// The labels of a counted request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: &'static str,
    status: u16,
}

/// The labels of an upstream failure: what was asked, and how it failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamErrorLabels {
    op: &'static str,
    kind: &'static str,
}

/// The labels of a pull's outcome, and of a lookup's (hit: stored; miss: pulled).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Every metric the endpoint keeps.
pub struct Metrics {
    /// Upstream pulls (mirror) by result.
    upstream_pulls: Family<ResultLabels, Counter>,
    /// Bytes received from the upstream by pulls.
    upstream_bytes: Counter,
    upstream_errors: Family<UpstreamErrorLabels, Counter>,
    /// Revisions looked up by file downloads: stored (hit) or pulled first (miss).
    lookups: Family<ResultLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    bytes_sent: Counter,
    active: Gauge,
    /// Requests whose handler panicked (a bug; each got a 500).
    panics: Counter,
    downloads: Histogram,
    /// The store API's frames, by what it took to serve them (`crate::nodes`).
    store_frames: Family<ResultLabels, Counter>,
    /// Bytes of pack blocks and objects sent to nodes.
    store_bytes_sent: Counter,
    /// Bytes received by uploads: object bodies and commit bodies.
    upload_bytes: Counter,
}

/// The endpoint's metrics, recorded whether or not a registry shows them.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    upstream_pulls: Family::default(),
    upstream_bytes: Counter::default(),
    upstream_errors: Family::default(),
    lookups: Family::default(),
    requests: Family::default(),
    bytes_sent: Counter::default(),
    active: Gauge::default(),
    panics: Counter::default(),
    downloads: Histogram::new(BUCKETS),
    store_frames: Family::default(),
    store_bytes_sent: Counter::default(),
    upload_bytes: Counter::default(),
});

/// Registers the endpoint's metrics in `r` (the binary's registry, prefix `modelcas`), under
/// `serve_`: the names below are without it.
pub fn register(r: &mut Registry) {
    let m = &*METRICS;
    let r = r.sub_registry_with_prefix("serve");
    r.register(
        "requests",
        "HTTP requests by endpoint and status.",
        m.requests.clone(),
    );
    r.register(
        "bytes_sent",
        "File bytes sent by downloads.",
        m.bytes_sent.clone(),
    );
    r.register(
        "active_downloads",
        "Downloads in progress.",
        m.active.clone(),
    );
    r.register(
        "panics",
        "Requests whose handler panicked (answered 500).",
        m.panics.clone(),
    );
    r.register(
        "upstream_pulls",
        "Revisions pulled from the upstream (serve --upstream), by result.",
        m.upstream_pulls.clone(),
    );
    r.register(
        "upstream_bytes",
        "Bytes received from the upstream by pulls.",
        m.upstream_bytes.clone(),
    );
    r.register(
        "upstream_errors",
        "Upstream failures by operation (resolve, pull) and kind.",
        m.upstream_errors.clone(),
    );
    r.register(
        "cache_lookups",
        "File downloads whose revision was stored (hit) or pulled first (miss).",
        m.lookups.clone(),
    );
    r.register(
        "store_frames",
        "Frames of pack blocks served to nodes, by result: fetched (from the bucket), \
         cache_hit (the hub's chunk cache), flight_wait (another request's fetch), checked \
         (decoded and hashed here).",
        m.store_frames.clone(),
    );
    r.register(
        "store_bytes_sent",
        "Bytes of pack blocks and objects sent to nodes (the store API).",
        m.store_bytes_sent.clone(),
    );
    r.register(
        "upload_bytes_received",
        "Bytes received by uploads: uploaded objects (LFS PUT bodies) and commit bodies.",
        m.upload_bytes.clone(),
    );
    r.register_with_unit(
        "download",
        "Duration of file downloads.",
        Unit::Seconds,
        m.downloads.clone(),
    );
}

impl Metrics {
    /// Counts bytes received by an upload.
    pub fn upload_received(&self, bytes: u64) {
        self.upload_bytes.inc_by(bytes);
    }

    /// Counts a request.
    pub fn request(&self, endpoint: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels { endpoint, status })
            .inc();
    }

    /// A pull from the upstream ended (`bytes` received).
    pub fn upstream_pull(&self, ok: bool, bytes: u64) {
        let result = if ok { "ok" } else { "error" };
        self.upstream_pulls
            .get_or_create(&ResultLabels { result })
            .inc();
        self.upstream_bytes.inc_by(bytes);
    }

    /// An upstream request (`op`) failed, in the way `kind` names.
    pub fn upstream_error(&self, op: &'static str, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&UpstreamErrorLabels { op, kind })
            .inc();
    }

    /// A download found its revision stored (`hit`) or pulled it first.
    pub fn lookup(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.lookups.get_or_create(&ResultLabels { result }).inc();
    }

    /// `n` frames of the store API's blocks, served as `result` says.
    pub fn store_frames(&self, result: &'static str, n: u64) {
        self.store_frames
            .get_or_create(&ResultLabels { result })
            .inc_by(n);
    }

    /// Bytes sent to nodes by the store API.
    pub fn store_sent(&self, bytes: u64) {
        self.store_bytes_sent.inc_by(bytes);
    }

    /// A request handler panicked.
    pub fn panic(&self) {
        self.panics.inc();
    }

    /// Request handlers that panicked so far.
    pub fn panics(&self) -> u64 {
        self.panics.get()
    }

    /// A download started.
    pub fn download_started(&self) {
        self.active.inc();
    }

    /// A download ended after sending `bytes` in `secs`.
    pub fn download_finished(&self, bytes: u64, secs: f64) {
        self.active.dec();
        self.bytes_sent.inc_by(bytes);
        self.downloads.observe(secs);
    }
}
