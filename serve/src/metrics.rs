//! Prometheus metrics of the endpoint, rendered in the text exposition format on
//! `/metrics`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds (seconds) of the download duration histogram.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0];

/// Every counter the endpoint keeps.
#[derive(Default)]
pub struct Metrics {
    /// (endpoint, status) → requests.
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    bytes_sent: AtomicU64,
    active: AtomicU64,
    /// Requests whose handler panicked (a bug; each got a 500).
    panics: AtomicU64,
    /// Cumulative bucket counts, then sum (µs) and count.
    hist: Mutex<([u64; BUCKETS.len()], u64, u64)>,
}

impl Metrics {
    /// Counts a request.
    pub fn request(&self, endpoint: &'static str, status: u16) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((endpoint, status))
            .or_default() += 1;
    }

    /// A request handler panicked.
    pub fn panic(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    /// Request handlers that panicked so far.
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// A download started.
    pub fn download_started(&self) {
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    /// A download ended after sending `bytes` in `secs`.
    pub fn download_finished(&self, bytes: u64, secs: f64) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
        let mut h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                h.0[i] += 1;
            }
        }
        h.1 += (secs * 1e6) as u64;
        h.2 += 1;
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP modelcas_serve_requests_total HTTP requests by endpoint and status.\n",
        );
        out.push_str("# TYPE modelcas_serve_requests_total counter\n");
        for ((ep, st), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            out.push_str(&format!(
                "modelcas_serve_requests_total{{endpoint=\"{ep}\",status=\"{st}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP modelcas_serve_bytes_sent_total File bytes sent by downloads.\n");
        out.push_str("# TYPE modelcas_serve_bytes_sent_total counter\n");
        out.push_str(&format!(
            "modelcas_serve_bytes_sent_total {}\n",
            self.bytes_sent.load(Ordering::Relaxed)
        ));
        out.push_str("# HELP modelcas_serve_active_downloads Downloads in progress.\n");
        out.push_str("# TYPE modelcas_serve_active_downloads gauge\n");
        out.push_str(&format!(
            "modelcas_serve_active_downloads {}\n",
            self.active.load(Ordering::Relaxed)
        ));
        out.push_str(
            "# HELP modelcas_serve_panics_total Requests whose handler panicked (answered 500).\n",
        );
        out.push_str("# TYPE modelcas_serve_panics_total counter\n");
        out.push_str(&format!("modelcas_serve_panics_total {}\n", self.panics()));
        let h = self.hist.lock().unwrap_or_else(|p| p.into_inner());
        out.push_str("# HELP modelcas_serve_download_seconds Duration of file downloads.\n");
        out.push_str("# TYPE modelcas_serve_download_seconds histogram\n");
        for (i, b) in BUCKETS.iter().enumerate() {
            out.push_str(&format!(
                "modelcas_serve_download_seconds_bucket{{le=\"{b}\"}} {}\n",
                h.0[i]
            ));
        }
        out.push_str(&format!(
            "modelcas_serve_download_seconds_bucket{{le=\"+Inf\"}} {}\n",
            h.2
        ));
        out.push_str(&format!(
            "modelcas_serve_download_seconds_sum {}\n",
            h.1 as f64 / 1e6
        ));
        out.push_str(&format!("modelcas_serve_download_seconds_count {}\n", h.2));
        out
    }
}
