//! A listener that answers only `GET /metrics` (the registry the binary assembled, OpenMetrics
//! text), for the commands that are not `serve` (`mount`, long `ingest`s and gcs:
//! `--metrics-listen`). The same hyper stack and limits as the endpoint, on a thread of its
//! own with a small runtime, so it keeps answering while the command works.

use std::convert::Infallible;
use std::sync::Arc;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::sync::Semaphore;

use crate::body::Body;
use crate::server::Limits;
use crate::ServeError;

/// Binds `addr` and answers `/metrics` (the text of `registry`) from a background thread
/// until the process ends. Returns the bound address (useful with port 0).
pub fn spawn(addr: &str, registry: Arc<Registry>) -> Result<String, ServeError> {
    let listen_err = |e: std::io::Error| ServeError::Listen {
        addr: addr.to_string(),
        reason: e.to_string(),
    };
    let listener = std::net::TcpListener::bind(addr).map_err(listen_err)?;
    listener.set_nonblocking(true).map_err(listen_err)?;
    let bound = listener.local_addr().map_err(listen_err)?.to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => accept_loop(l, Limits::default(), registry).await,
                    Err(e) => tracing::error!("metrics listener: {e}"),
                }
            })
        })
        .map_err(ServeError::Runtime)?;
    Ok(bound)
}

async fn accept_loop(listener: tokio::net::TcpListener, limits: Limits, registry: Arc<Registry>) {
    // A scraper needs one or two connections; more only hold memory.
    let permits = Arc::new(Semaphore::new(16));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Ok((sock, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let header_timeout = limits.header_timeout;
        let registry = registry.clone();
        tokio::spawn(async move {
            let svc = service_fn(|req| {
                let registry = registry.clone();
                async move { Ok::<_, Infallible>(answer(&req, &registry)) }
            });
            let mut b = http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(16 * 1024);
            let _ = b.serve_connection(TokioIo::new(sock), svc).await;
            drop(permit);
        });
    }
}

/// The reply to one request: the metrics, or 404/405.
fn answer(req: &Request<Incoming>, registry: &Registry) -> Response<Body> {
    let (status, body, content_type) = match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => (
            StatusCode::OK,
            crate::exposition::render(registry),
            crate::exposition::CONTENT_TYPE,
        ),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "GET only\n".to_string(),
            "text/plain",
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "see /metrics\n".to_string(),
            "text/plain",
        ),
    };
    let mut resp = Response::new(Body::full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
