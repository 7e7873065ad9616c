//! What `/metrics` answers: the OpenMetrics text of the registry the binary assembled from
//! every crate's metrics (the endpoint's [`crate::metrics`] among them), and its content
//! type.

use prometheus_client::registry::Registry;

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text exposition of every metric in `registry`.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// A registry with the endpoint's metrics alone (under the `modelcas` prefix): what
/// `/metrics` shows when the binary gave none.
pub fn own_registry() -> Registry {
    let mut r = Registry::with_prefix("modelcas");
    crate::metrics::register(&mut r);
    r
}
