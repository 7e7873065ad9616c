//! The holder's metrics (`modelcas_mountd_*`), shown by its FUSE server (the process that
//! serves `--metrics-listen`): volumes served, takeovers, and how long the last takeover
//! left the volumes unanswered. The holder counts what outlives a server and passes it to
//! each server it starts in the environment ([`TAKEOVERS_ENV`], [`PREVIOUS_END_ENV`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Takeovers so far: servers the holder started after one ended (a decimal count).
pub const TAKEOVERS_ENV: &str = "MODELCAS_MOUNTD_TAKEOVERS";
/// When the previous server ended, in microseconds since the Unix epoch (absent for the
/// holder's first server).
pub const PREVIOUS_END_ENV: &str = "MODELCAS_MOUNTD_PREVIOUS_END_US";

struct Metrics {
    volumes: Gauge,
    takeovers: Counter,
    last_pause: Gauge<f64, AtomicU64>,
    serve_failures: Counter,
    /// The longest pause of this server's takeover, in microseconds.
    pause_us: AtomicU64,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    volumes: Gauge::default(),
    takeovers: Counter::default(),
    last_pause: Gauge::default(),
    serve_failures: Counter::default(),
    pause_us: AtomicU64::new(0),
});

/// Registers the metrics in `r` under `mountd_`.
pub fn register(r: &mut Registry) {
    let m = &*METRICS;
    let r = r.sub_registry_with_prefix("mountd");
    r.register(
        "volumes",
        "Volumes (CSI volumes, or the one mount of `modelcas mount`) this FUSE server serves.",
        m.volumes.clone(),
    );
    r.register(
        "takeovers",
        "FUSE servers started to take the volumes over from one that ended (killed, crashed, \
         upgraded); counted by the holder, so it goes on across servers.",
        m.takeovers.clone(),
    );
    r.register_with_unit(
        "last_takeover_pause",
        "From the end of the previous FUSE server to this one serving a volume it took \
         over, the longest over its volumes (0 before any takeover).",
        Unit::Seconds,
        m.last_pause.clone(),
    );
    r.register(
        "serve_failures",
        "Volumes this FUSE server could not serve (the store unreachable); the holder asks \
         again.",
        m.serve_failures.clone(),
    );
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The environment the holder gives the server it starts after `takeovers` takeovers,
/// the previous server having ended at `previous_end` (microseconds since the epoch).
pub(crate) fn server_env(takeovers: u64, previous_end: Option<u64>) -> Vec<(&'static str, String)> {
    let mut env = vec![(TAKEOVERS_ENV, takeovers.to_string())];
    if let Some(t) = previous_end {
        env.push((PREVIOUS_END_ENV, t.to_string()));
    }
    env
}

/// Microseconds since the epoch now, for [`server_env`].
pub(crate) fn end_stamp() -> u64 {
    now_us()
}

/// Reads the holder's counts from this server's environment.
pub(crate) fn init_server() {
    let takeovers = std::env::var(TAKEOVERS_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    METRICS.takeovers.inc_by(takeovers);
}

/// A volume is served; `taken_over`: from a previous server.
pub(crate) fn served(taken_over: bool) {
    METRICS.volumes.inc();
    if !taken_over {
        return;
    }
    let Some(end) = std::env::var(PREVIOUS_END_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let pause = now_us().saturating_sub(end);
    let longest = METRICS
        .pause_us
        .fetch_max(pause, Ordering::SeqCst)
        .max(pause);
    METRICS
        .last_pause
        .set(Duration::from_micros(longest).as_secs_f64());
}

/// A volume is no longer served.
pub(crate) fn unserved() {
    METRICS.volumes.dec();
}

/// A volume could not be served.
pub(crate) fn serve_failed() {
    METRICS.serve_failures.inc();
}
