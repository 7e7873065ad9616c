//! Connections: the accept loop, the connection limit, HTTP/1.1 on hyper, and the timeouts
//! that keep slow or idle clients from holding the endpoint.
//!
//! - **Connection limit**: a connection is accepted only with a permit; beyond
//!   [`Limits::max_connections`] new clients wait in the kernel's accept queue.
//! - **Header timeout**: a request head (request line and headers) must arrive whole within
//!   [`Limits::header_timeout`]. hyper starts that clock whenever it waits for a head, so it
//!   also bounds how long a kept-alive connection may sit idle between requests.
//! - **Request timeout**: the reply's head must be ready within [`Limits::request_timeout`]
//!   (else 503); the body then streams as fast as the client reads.
//! - **Request bodies**: read only for the routes that take one
//!   ([`crate::hub::reads_body`]: `paths-info` and the write routes' JSON; commits, at most
//!   [`Limits::max_commit_body`], 4 at once) and only once the request is authorized,
//!   at most [`Limits::max_body`] bytes (413 beyond, without reading further) within
//!   [`Limits::body_timeout`] (408), and at most `BODIES_AT_ONCE` at a time (503 beyond);
//!   every other body is left unread, and hyper closes the connection after the reply.
//! - **Uploaded objects** (`PUT /upload/lfs/...`, [`crate::upload_stream`]) are streamed to
//!   the spool, never buffered whole.
//! - **Write stall timeout**: a response write that makes no progress for
//!   [`Limits::write_timeout`] (a client that stopped reading) closes the connection.
//!
//! The router runs on the blocking pool; a panic there (a bug: [`Hub::route`] is total)
//! becomes a 500 for that request only, and is counted. A request that needs the
//! upstream (mirror) does not wait on that pool: its routing stops, gives the thread
//! back, and the request awaits the upstream operation here, then is routed again
//! ([`crate::upstream::flight`]), so `--threads` stay free for stored data and
//! `/metrics` however slow the upstream is.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use crate::body::Body;
use crate::hub::{BodyKind, Head, Hub, Reply};
use crate::upstream::Waits;

/// The limits every connection is held to.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Concurrent connections.
    pub max_connections: usize,
    /// Time to send a whole request head, and to start one on an idle connection.
    pub header_timeout: Duration,
    /// Time to produce a reply's head.
    pub request_timeout: Duration,
    /// Time a response write may make no progress.
    pub write_timeout: Duration,
    /// Most bytes of a request body read (`paths-info`, the JSON of the write routes); a
    /// longer one gets 413.
    pub max_body: usize,
    /// Most bytes of a commit's body (NDJSON with the inline files; 413 beyond), read
    /// within ten times [`Limits::body_timeout`].
    pub max_commit_body: usize,
    /// Time to send a whole request body.
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(300),
            write_timeout: Duration::from_secs(60),
            max_body: 1 << 20,
            max_commit_body: 32 << 20,
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// Accepts connections on `listener` until the process ends.
pub async fn accept_loop(listener: TcpListener, hub: Arc<Hub>, limits: Limits) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors, say: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let (hub, limits) = (hub.clone(), limits.clone());
        tokio::spawn(async move {
            serve_connection(hub, limits, sock, peer.to_string()).await;
            drop(permit);
        });
    }
}

/// Serves HTTP/1.1 on one connection (any byte stream: tests use in-memory pipes).
pub async fn serve_connection<IO>(hub: Arc<Hub>, limits: Limits, io: IO, client: String)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(WriteStall::new(io, limits.write_timeout));
    let body_limits = limits.clone();
    let svc = service_fn(move |req| {
        let (hub, client, limits) = (hub.clone(), client.clone(), body_limits.clone());
        async move { Ok::<_, Infallible>(respond(hub, req, client, &limits).await) }
    });
    let mut b = http1::Builder::new();
    // half_close: a client that shuts its write side after the request still gets the reply.
    b.timer(TokioTimer::new())
        .half_close(true)
        // Header names as the tiny_http endpoint wrote them (`X-Error-Code`), for clients
        // and scripts that match them case-sensitively.
        .title_case_headers(true)
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(64 * 1024);
    if let Err(e) = b.serve_connection(io, svc).await {
        tracing::debug!("connection closed: {e}");
    }
}

/// Most routings of one request: each but the last stopped at an upstream operation in
/// flight (a resolution, then a pull, then maybe one more), which it awaited first.
const MAX_ROUTINGS: u32 = 4;

/// Routes one request on the blocking pool. A routing that stops at an upstream
/// operation in flight gives its thread back; the request awaits the operation here,
/// holding no thread, and is routed again ([`crate::upstream::flight`]).
async fn respond(
    hub: Arc<Hub>,
    req: Request<Incoming>,
    client: String,
    limits: &Limits,
) -> Response<Body> {
    // A body is read only for the route that takes one; any other is left unread, and
    // hyper closes the connection after the reply.
    // An unauthorized request's body is never read (the router answers 401), and at most
    // BODIES_AT_ONCE bodies are buffered at once: memory for bodies stays under
    // BODIES_AT_ONCE x max_body whatever the clients send.
    let (parts, incoming) = req.into_parts();
    if let Some(target) = crate::upload_stream::target(&hub, &parts) {
        return response(
            crate::upload_stream::receive(
                hub,
                target,
                &parts.headers,
                incoming,
                limits.body_timeout,
            )
            .await,
        );
    }
    // A write route's body is read only for a token that may write there: others are
    // answered (401, 403) from the head alone.
    let kind = crate::hub::reads_body(&parts.method, parts.uri.path()).filter(|_| {
        hub.authorized(&parts.headers) && hub.may_send_body(parts.uri.path(), &parts.headers)
    });
    // A commit's permit is held until it is answered: commits (each an ingest on a thread
    // of the router's pool) are at most COMMIT_BODIES_AT_ONCE at a time.
    let mut _commit_permit = None;
    let body = match kind {
        None => Bytes::new(),
        Some(kind) => {
            let (sem, cap, timeout) = match kind {
                BodyKind::Small => (&BODIES, limits.max_body, limits.body_timeout),
                BodyKind::Commit => (
                    &COMMIT_BODIES,
                    limits.max_commit_body,
                    limits.body_timeout * 10,
                ),
            };
            let Ok(permit) = sem.try_acquire() else {
                let msg = "too many request bodies at once; try again";
                return response(Reply::error(StatusCode::SERVICE_UNAVAILABLE, "", msg, None));
            };
            let body = match read_body(&parts.headers, incoming, cap, timeout).await {
                Ok(b) => b,
                Err(reply) => return response(*reply),
            };
            if kind == BodyKind::Commit {
                _commit_permit = Some(permit);
            }
            body
        }
    };
    let (parts, client) = (Arc::new(parts), Arc::new(client));
    // A commit runs as long as its files take to store (an ingest), not a request's time.
    let deadline = tokio::time::Instant::now()
        + match kind {
            Some(BodyKind::Commit) => limits.request_timeout.max(COMMIT_TIMEOUT),
            _ => limits.request_timeout,
        };
    let mut waits = Waits::default();
    let reply = loop {
        let task = {
            let (hub, parts, client) = (hub.clone(), parts.clone(), client.clone());
            let body = body.clone();
            tokio::task::spawn_blocking(move || {
                let head = Head {
                    method: &parts.method,
                    path: parts.uri.path(),
                    query: parts.uri.query().unwrap_or(""),
                    headers: &parts.headers,
                    client: &client,
                };
                waits.route(|| hub.route_with_body(&head, &body))
            })
        };
        let (reply, mut w) = match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                hub.metrics().panic();
                tracing::error!("request handler failed: {e}");
                let msg = "internal error";
                break Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "", msg, None);
            }
            Err(_) => break timed_out("request timed out"),
        };
        let Some(wait) = w.pending() else {
            break reply;
        };
        if w.rounds() >= MAX_ROUTINGS {
            break reply;
        }
        if tokio::time::timeout_at(deadline, wait.done())
            .await
            .is_err()
        {
            break timed_out("request timed out waiting for the upstream");
        }
        waits = w;
    };
    response(reply)
}

fn response(reply: Reply) -> Response<Body> {
    let mut resp = Response::new(reply.body);
    *resp.status_mut() = reply.status;
    *resp.headers_mut() = reply.headers;
    resp
}

/// Request bodies buffered at once, across connections (each at most
/// [`Limits::max_body`]); another gets 503 at once.
const BODIES_AT_ONCE: usize = 32;
static BODIES: Semaphore = Semaphore::const_new(BODIES_AT_ONCE);

/// Commit bodies buffered at once (each at most [`Limits::max_commit_body`]).
const COMMIT_BODIES_AT_ONCE: usize = 2;
static COMMIT_BODIES: Semaphore = Semaphore::const_new(COMMIT_BODIES_AT_ONCE);

/// Longest a commit's reply may take (its files are stored meanwhile).
const COMMIT_TIMEOUT: Duration = Duration::from_secs(6 * 3600);

/// A request body, whole: at most `cap` bytes (413 beyond: a `Content-Length` over it is
/// refused unread), within `timeout` (408).
async fn read_body(
    headers: &http::HeaderMap,
    mut incoming: Incoming,
    cap: usize,
    timeout: Duration,
) -> Result<Bytes, Box<Reply>> {
    let too_large = || {
        let msg = format!("request body over {cap} bytes");
        Box::new(Reply::error(StatusCode::PAYLOAD_TOO_LARGE, "", &msg, None))
    };
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    let read = async {
        let mut out = Vec::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| {
                let msg = format!("cannot read the request body: {e}");
                Box::new(Reply::error(StatusCode::BAD_REQUEST, "", &msg, None))
            })?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > cap {
                    return Err(too_large());
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(out))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => {
            let msg = "request body not received in time";
            Err(Box::new(Reply::error(
                StatusCode::REQUEST_TIMEOUT,
                "",
                msg,
                None,
            )))
        }
    }
}

fn timed_out(msg: &str) -> Reply {
    Reply::error(StatusCode::SERVICE_UNAVAILABLE, "", msg, None)
}

/// A byte stream whose writes fail with `TimedOut` once one has made no progress for the
/// limit (reads are bounded by hyper's header timeout instead).
struct WriteStall<IO> {
    io: IO,
    limit: Duration,
    sleep: Pin<Box<Sleep>>,
    armed: bool,
}

impl<IO> WriteStall<IO> {
    fn new(io: IO, limit: Duration) -> WriteStall<IO> {
        WriteStall {
            io,
            limit,
            sleep: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// After a write op: pending arms (or checks) the deadline, anything else disarms it.
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.armed = false;
            return r;
        }
        if !self.armed {
            let at = tokio::time::Instant::now() + self.limit;
            self.sleep.as_mut().reset(at);
            self.armed = true;
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client stopped reading",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for WriteStall<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for WriteStall<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, r)
    }
}
