//! The mount's metrics (`modelcas_mount_*`): reads, open files, opens by path, and the
//! kernel's requests by operation. [`register`] adds them to the registry the binary
//! assembles. Counters and gauges are atomics, cheap enough to update on every request.

use std::sync::LazyLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The `op` label of the kernel's requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

/// The metrics of the mount.
pub(crate) struct Metrics {
    /// Bytes returned to FUSE reads.
    pub(crate) read_bytes: Counter,
    /// FUSE read requests answered.
    pub(crate) reads: Counter,
    /// FUSE reads that failed (EIO).
    pub(crate) read_errors: Counter,
    /// Latency of FUSE reads.
    pub(crate) read_seconds: Histogram,
    /// Files open through the mount.
    pub(crate) open_files: Gauge,
    /// Requests the kernel sent the mount, by operation (`lookup`, `open`, `read`, ...).
    requests: Family<OpLabel, Counter>,
    /// Opens handed to the kernel (FUSE passthrough of a whole file).
    pub(crate) passthrough_opens: Counter,
    /// Opens served from a whole file on the node without passthrough.
    pub(crate) whole_file_opens: Counter,
}

/// The mount's metrics, recorded whether or not a registry shows them.
pub(crate) static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    read_bytes: Counter::default(),
    reads: Counter::default(),
    read_errors: Counter::default(),
    read_seconds: Histogram::new(repo::metrics::LATENCY_BUCKETS),
    open_files: Gauge::default(),
    requests: Family::default(),
    passthrough_opens: Counter::default(),
    whole_file_opens: Counter::default(),
});

/// Counts one request of the kernel to the mount.
pub(crate) fn request(op: &'static str) {
    METRICS.requests.get_or_create(&OpLabel { op }).inc();
}

/// Registers the mount's metrics in `r` (the binary's registry, prefix `modelcas`), under
/// `mount_`. Counters get their `_total` suffix from the encoder.
pub fn register(r: &mut Registry) {
    let m = &*METRICS;
    let r = r.sub_registry_with_prefix("mount");
    r.register(
        "read_bytes",
        "Bytes returned to reads through the mount.",
        m.read_bytes.clone(),
    );
    r.register(
        "reads",
        "Reads answered through the mount.",
        m.reads.clone(),
    );
    r.register(
        "read_errors",
        "Reads through the mount that failed (EIO).",
        m.read_errors.clone(),
    );
    r.register(
        "open_files",
        "Files open through the mount.",
        m.open_files.clone(),
    );
    r.register(
        "requests",
        "Requests the kernel sent the mount, by operation.",
        m.requests.clone(),
    );
    r.register_with_unit(
        "read",
        "Latency of reads through the mount.",
        Unit::Seconds,
        m.read_seconds.clone(),
    );
    r.register(
        "passthrough_opens",
        "Opens through the mount handed to the kernel (passthrough of a whole file on the node).",
        m.passthrough_opens.clone(),
    );
    r.register(
        "whole_file_opens",
        "Opens through the mount served from a whole file on the node, without passthrough.",
        m.whole_file_opens.clone(),
    );
    r.register_collector(Box::new(FoundLooking));
}

/// `requests_found_looking`: requests a FUSE worker looking for the next one saw pending
/// (`MountOptions::spin_wait`), from fuser's count at each scrape.
#[derive(Debug)]
struct FoundLooking;

impl Collector for FoundLooking {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counter = ConstCounter::new(fuser::requests_found_looking());
        let metric = encoder.encode_descriptor(
            "requests_found_looking",
            "Requests a FUSE worker looking for the next one (--spin-us) saw pending: read without waking a sleeping worker.",
            None,
            counter.metric_type(),
        )?;
        counter.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_mount_prefix() {
        request("statfs");
        let mut r = Registry::with_prefix("modelcas");
        register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for want in [
            "modelcas_mount_requests_total{op=\"statfs\"} ",
            "# UNIT modelcas_mount_read_seconds seconds\n",
            "# TYPE modelcas_mount_whole_file_opens counter\n",
            "# TYPE modelcas_mount_open_files gauge\n",
            "# TYPE modelcas_mount_requests_found_looking counter\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }
}
