//! The streamed body of an uploaded object: `PUT /upload/lfs/{org}/{name}/{sha256}/{size}/
//! {exp}/{sig}`, the URL an LFS batch hands out (`hub/upload.rs`). The client sends it
//! without a token, so the URL carries its authorization: a keyed BLAKE3 over the
//! repository, object, size and expiry ([`crate::uploads::UploadOptions::sign`]), checked
//! before a byte of the body is read. The body then goes frame by frame (a bounded
//! channel, never the whole object in memory) to a blocking thread that spools it
//! ([`crate::uploads::Uploads::receive`]), which keeps it only if its length and sha256
//! are the ones signed. A body that stalls for [`crate::Limits::body_timeout`] is cut off.

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use format::Sha256;
use http::{HeaderMap, Method, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use tokio::sync::{mpsc, Semaphore};

use crate::hub::{Hub, Reply};
use crate::Limits;

/// Objects received at once; another gets 503 at once.
const UPLOADS_AT_ONCE: usize = 16;
static UPLOADS: Semaphore = Semaphore::const_new(UPLOADS_AT_ONCE);

/// Body frames in flight between the connection and the spooling thread.
const FRAMES_IN_FLIGHT: usize = 8;

/// An object the request may upload, its URL checked.
pub(crate) struct Target {
    sha256: Sha256,
    size: u64,
}

/// The object a request uploads: `None` when it is not an upload URL, an error reply when
/// it is one that is not valid (bad or expired signature, uploads off, not a `PUT`).
pub(crate) fn target(hub: &Hub, parts: &http::request::Parts) -> Option<Result<Target, Reply>> {
    let segs = crate::decode::segments(parts.uri.path()).ok()?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let ["upload", "lfs", org, name, oid, size, exp, sig] = segs.as_slice() else {
        return None;
    };
    let refuse = |status, msg: &str| Some(Err(Reply::error(status, "", msg, None)));
    if parts.method != Method::PUT {
        return refuse(StatusCode::METHOD_NOT_ALLOWED, "an upload URL takes PUT");
    }
    let Some(up) = hub.upload_options() else {
        return refuse(StatusCode::FORBIDDEN, "this hub takes no uploads");
    };
    let (Ok(sha256), Ok(size), Ok(exp)) = (
        Sha256::from_hex(oid),
        size.parse::<u64>(),
        exp.parse::<u64>(),
    ) else {
        return refuse(StatusCode::FORBIDDEN, "not a valid upload URL");
    };
    let repo = format!("{org}/{name}");
    if !up.check(
        &repo,
        &sha256.to_hex(),
        size,
        exp,
        sig,
        repo::manifest::now_secs(),
    ) {
        let msg = "the upload URL's signature is not valid or has expired: ask the LFS batch again";
        return refuse(StatusCode::FORBIDDEN, msg);
    }
    Some(Ok(Target { sha256, size }))
}

/// Receives the object of `target` from the request body.
pub(crate) async fn receive(
    hub: Arc<Hub>,
    target: Result<Target, Reply>,
    headers: &HeaderMap,
    incoming: Incoming,
    limits: &Limits,
) -> Reply {
    let reply = match target {
        Ok(t) => receive_checked(&hub, t, headers, incoming, limits).await,
        Err(r) => r,
    };
    hub.count("lfs-upload", reply.status.as_u16());
    reply
}

async fn receive_checked(
    hub: &Arc<Hub>,
    t: Target,
    headers: &HeaderMap,
    incoming: Incoming,
    limits: &Limits,
) -> Reply {
    let bad = |msg: &str| Reply::error(StatusCode::BAD_REQUEST, "", msg, None);
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n != t.size) {
        return bad(&format!(
            "Content-Length is not the {} bytes this URL is for",
            t.size
        ));
    }
    let Some(up) = hub.upload_options().cloned() else {
        return Reply::error(StatusCode::FORBIDDEN, "", "this hub takes no uploads", None);
    };
    if let Err(e) = up.uploads.check_room(t.size) {
        return crate::hub::upload_error(e);
    }
    let Ok(_permit) = UPLOADS.try_acquire() else {
        let msg = "too many uploads at once; try again";
        return Reply::error(StatusCode::SERVICE_UNAVAILABLE, "", msg, None);
    };
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT);
    let (sha256, size) = (t.sha256, t.size);
    let spooling = tokio::task::spawn_blocking(move || {
        let mut body = ChannelReader {
            rx,
            buf: Bytes::new(),
        };
        up.uploads.receive(&sha256, size, &mut body)
    });
    forward(incoming, tx, limits).await;
    match spooling.await {
        Ok(Ok(())) => Reply::json(
            StatusCode::OK,
            &serde_json::json!({ "oid": sha256.to_hex(), "size": size }),
        ),
        Ok(Err(e)) => crate::hub::upload_error(e),
        Err(e) => {
            tracing::error!("upload handler failed: {e}");
            Reply::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "",
                "internal error",
                None,
            )
        }
    }
}

/// Sends the body's data frames to the spooling thread, then an error if the body failed
/// or stalled; stops when that thread has stopped reading.
async fn forward(mut incoming: Incoming, tx: mpsc::Sender<Result<Bytes, String>>, limits: &Limits) {
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx));
        let frame = match tokio::time::timeout(limits.body_timeout, next).await {
            Ok(None) => return,
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(format!("reading the body: {e}"))).await;
                return;
            }
            Err(_) => {
                let msg = format!("no byte of the body for {:?}", limits.body_timeout);
                let _ = tx.send(Err(msg)).await;
                return;
            }
        };
        if let Ok(data) = frame.into_data() {
            crate::metrics::METRICS.upload_received(data.len() as u64);
            if tx.send(Ok(data)).await.is_err() {
                return;
            }
        }
    }
}

/// The body as the spooling thread reads it.
struct ChannelReader {
    rx: mpsc::Receiver<Result<Bytes, String>>,
    buf: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.buf.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.buf = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf.advance(n);
        Ok(n)
    }
}
