//! The metrics of ingest and gc (`modelcas_ingest_*`, `modelcas_gc_*`), recorded when a run
//! ends. [`register`] adds them to the registry the binary assembles, which shows them to
//! `--metrics-file` and `--metrics-listen`.

use std::sync::atomic::AtomicU64;
use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::gc::report::GcReport;
use crate::ingest::report::IngestReport;

/// A gauge of seconds.
type SecondsGauge = Gauge<f64, AtomicU64>;

/// The metrics of ingest and gc.
struct Metrics {
    /// Bytes read by ingest.
    ingest_bytes: Counter,
    /// Of those, bytes of chunks that were new.
    ingest_new_bytes: Counter,
    /// Bytes of chunks already stored (deduplicated).
    ingest_dedup_bytes: Counter,
    /// Duration of the last ingest.
    ingest_duration: SecondsGauge,
    /// Bytes reclaimed by gc.
    gc_reclaimed_bytes: Counter,
    /// Bytes stored after the last gc.
    gc_stored_bytes: Gauge,
    /// Revisions expired by gc.
    gc_expired_revisions: Counter,
    /// Duration of the last gc.
    gc_duration: SecondsGauge,
    /// Release checks made, by verdict.
    release_checks: Family<Vec<(String, String)>, Counter>,
    /// Seconds spent in release checks.
    release_seconds: Counter<f64, AtomicU64>,
    /// Bytes release checks read through the store.
    release_bytes: Counter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    ingest_bytes: Counter::default(),
    ingest_new_bytes: Counter::default(),
    ingest_dedup_bytes: Counter::default(),
    ingest_duration: SecondsGauge::default(),
    gc_reclaimed_bytes: Counter::default(),
    gc_stored_bytes: Gauge::default(),
    gc_expired_revisions: Counter::default(),
    gc_duration: SecondsGauge::default(),
    release_checks: Family::default(),
    release_seconds: Counter::default(),
    release_bytes: Counter::default(),
});

/// Records a release check that gave `verdict` after `took`, reading `bytes`.
pub(crate) fn release_checked(verdict: &str, took: Duration, bytes: u64) {
    let m = &*METRICS;
    m.release_checks
        .get_or_create(&vec![("verdict".to_string(), verdict.to_string())])
        .inc();
    m.release_seconds.inc_by(took.as_secs_f64());
    m.release_bytes.inc_by(bytes);
}

/// Records an ingest that ended well after `took`.
pub(crate) fn ingest_finished(report: &IngestReport, took: Duration) {
    let m = &*METRICS;
    m.ingest_bytes.inc_by(report.bytes_read);
    m.ingest_new_bytes.inc_by(report.new_chunk_bytes);
    m.ingest_dedup_bytes
        .inc_by(report.bytes_read.saturating_sub(report.new_chunk_bytes));
    m.ingest_duration.set(took.as_secs_f64());
}

/// Records a gc that ended well.
pub(crate) fn gc_finished(report: &GcReport) {
    let m = &*METRICS;
    m.gc_reclaimed_bytes.inc_by(report.bytes_reclaimed);
    m.gc_expired_revisions.inc_by(report.expired.len() as u64);
    m.gc_stored_bytes
        .set(i64::try_from(report.bytes_stored).unwrap_or(i64::MAX));
    m.gc_duration.set(report.duration_ms as f64 / 1000.0);
}

/// Registers the metrics of ingest and gc in `r` (the binary's registry, prefix
/// `modelcas`), under `ingest_` and `gc_`.
pub fn register(r: &mut Registry) {
    let m = &*METRICS;
    let i = r.sub_registry_with_prefix("ingest");
    i.register("bytes", "Bytes read by ingest.", m.ingest_bytes.clone());
    i.register(
        "new_bytes",
        "Bytes of new chunks stored by ingest.",
        m.ingest_new_bytes.clone(),
    );
    i.register(
        "dedup_bytes",
        "Bytes of chunks ingest found already stored.",
        m.ingest_dedup_bytes.clone(),
    );
    i.register_with_unit(
        "duration",
        "Duration of the last ingest.",
        Unit::Seconds,
        m.ingest_duration.clone(),
    );
    let g = r.sub_registry_with_prefix("gc");
    g.register(
        "reclaimed_bytes",
        "Bytes of packs deleted by gc.",
        m.gc_reclaimed_bytes.clone(),
    );
    g.register(
        "stored_bytes",
        "Bytes of packs stored after the last gc.",
        m.gc_stored_bytes.clone(),
    );
    g.register(
        "expired_revisions",
        "Revisions expired by gc.",
        m.gc_expired_revisions.clone(),
    );
    g.register_with_unit(
        "duration",
        "Duration of the last gc.",
        Unit::Seconds,
        m.gc_duration.clone(),
    );
    let c = r.sub_registry_with_prefix("release_check");
    c.register(
        "runs",
        "Release checks made, by verdict (passed, warnings, failed).",
        m.release_checks.clone(),
    );
    c.register_with_unit(
        "time",
        "Time spent in release checks.",
        Unit::Seconds,
        m.release_seconds.clone(),
    );
    c.register(
        "read_bytes",
        "Bytes release checks read through the store (headers and small files).",
        m.release_bytes.clone(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_run_shows_under_its_prefix() {
        let report = IngestReport {
            bytes_read: 10,
            new_chunk_bytes: 3,
            ..Default::default()
        };
        ingest_finished(&report, Duration::from_millis(1500));
        let mut r = Registry::with_prefix("modelcas");
        register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for want in [
            "modelcas_ingest_dedup_bytes_total 7\n",
            "modelcas_ingest_duration_seconds 1.5\n",
            "# UNIT modelcas_gc_duration_seconds seconds\n",
            "# TYPE modelcas_gc_stored_bytes gauge\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }
}
