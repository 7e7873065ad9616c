//! The streamed bodies of uploads: `PUT /upload/lfs/{org}/{name}/{sha256}/{size}/{exp}/
//! {sig}`, the URL an LFS batch hands out (`hub/upload.rs`), and Xet's `POST
//! /v1/xorbs/{prefix}/{hash}` and `POST /v1/shards`. The LFS client sends its object
//! without a token, so the URL carries its authorization: a keyed BLAKE3 over the
//! repository, object, size and expiry ([`crate::uploads::UploadOptions::sign`]); the Xet
//! routes take a Xet write token (`xet-write-token`). Either is checked before a byte of
//! the body is read. The body then goes frame by frame (a bounded
//! channel, never the whole object in memory) to a blocking thread that spools it
//! ([`crate::uploads::Uploads`]), which keeps it only if it is what it was declared:
//! an object of the signed length and sha256, a xorb whose chunks hash to its name, a
//! shard whose every file checks. A body that stalls for the server's body timeout, or
//! comes slower than 16 KiB/s on average after its first 30 s, is cut off.

use std::io::{self, Read};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use format::{RepoId, Sha256, XetHash};
use http::{HeaderMap, Method, StatusCode};
use http_body::Body as _;
use hyper::body::Incoming;
use tokio::sync::{mpsc, Semaphore};

use crate::hub::{Hub, Reply};

/// Objects received at once; another gets 503 at once.
const UPLOADS_AT_ONCE: usize = 16;
static UPLOADS: Semaphore = Semaphore::const_new(UPLOADS_AT_ONCE);

/// The slowest an upload's body may come, on average, once [`rate_grace`] has passed: a
/// body trickled to hold one of the [`UPLOADS_AT_ONCE`] places is cut off.
const MIN_RATE: u64 = 16 << 10;

/// How long a body may come slower than [`MIN_RATE`] (a slow start): 30 s, or in test builds
/// `MODELCAS_TEST_UPLOAD_GRACE_SECS`.
fn rate_grace() -> Duration {
    repo::failpoint::test_var("MODELCAS_TEST_UPLOAD_GRACE_SECS")
        .and_then(|v| v.trim().parse().ok())
        .map_or(Duration::from_secs(30), Duration::from_secs)
}

/// Body frames in flight between the connection and the spooling thread.
const FRAMES_IN_FLIGHT: usize = 8;

/// What a request uploads, its authorization checked.
pub(crate) enum Target {
    /// An LFS object for a repository (the URL's signature checked).
    Lfs {
        repo: RepoId,
        sha256: Sha256,
        size: u64,
    },
    /// A Xet xorb (a Xet write token).
    Xorb(XetHash),
    /// A Xet shard for the repository of the Xet write token.
    Shard(RepoId),
}

/// Most bytes of a xorb's body: 64 MiB of chunks stored at most twice their size, and
/// their headers.
const MAX_XORB_BODY: u64 = (128 << 20) + 8 * 8192;
/// Most bytes of a shard's body.
const MAX_SHARD_BODY: u64 = 64 << 20;

/// The upload a request makes: `None` when it is not one, an error reply when it is one
/// that may not be made (bad or expired signature or token, uploads off, wrong method), or
/// a Xet route this hub answers without a body (no grants, no v2 shards, no telemetry: each
/// 404, which hf_xet takes as "not offered"). The global dedup query is the router's
/// (`hub/upload.rs`).
pub(crate) fn target(
    hub: &Hub,
    parts: &http::request::Parts,
) -> Option<Result<Target, Box<Reply>>> {
    let segs = crate::decode::segments(parts.uri.path()).ok()?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let up = hub.upload_options();
    let refuse = |status, msg: &str| Some(Err(Box::new(Reply::error(status, "", msg, None))));
    let post = parts.method == Method::POST;
    match segs.as_slice() {
        ["upload", "lfs", org, name, oid, size, exp, sig] => {
            if parts.method != Method::PUT {
                return refuse(StatusCode::METHOD_NOT_ALLOWED, "an upload URL takes PUT");
            }
            let Some(up) = up else {
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
            let Ok(repo_id) = RepoId::parse(&repo) else {
                return refuse(StatusCode::FORBIDDEN, "not a valid upload URL");
            };
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
            Some(Ok(Target::Lfs {
                repo: repo_id,
                sha256,
                size,
            }))
        }
        ["v1", "xorbs", _, hash] if post && up.is_some() => {
            Some(xet_auth(up?, parts).and_then(|_| {
                XetHash::parse(hash).map(Target::Xorb).map_err(|e| {
                    Box::new(Reply::error(
                        StatusCode::BAD_REQUEST,
                        "",
                        &e.to_string(),
                        None,
                    ))
                })
            }))
        }
        ["v1", "shards"] if post && up.is_some() => Some(xet_auth(up?, parts).map(Target::Shard)),
        ["v1", "xorb-grants", ..] | ["v2", "shards"] | ["v1", "telemetry"]
            if post && up.is_some() =>
        {
            refuse(StatusCode::NOT_FOUND, "not offered here")
        }
        _ => None,
    }
}

/// Whether the request carries a Xet write token of this hub.
/// The repository of the request's Xet write token, if it carries one of this hub's.
fn xet_auth(
    up: &crate::uploads::UploadOptions,
    parts: &http::request::Parts,
) -> Result<RepoId, Box<Reply>> {
    let token = crate::auth::bearer(&parts.headers).unwrap_or("");
    match up
        .open_xet_token(token, repo::manifest::now_secs())
        .and_then(|r| RepoId::parse(&r).ok())
    {
        Some(repo) => Ok(repo),
        None => Err(Box::new(Reply::error(
            StatusCode::UNAUTHORIZED,
            "",
            "a Xet write token is needed (xet-write-token), or it expired",
            None,
        ))),
    }
}

/// Receives the upload of `target` from the request body.
pub(crate) async fn receive(
    hub: Arc<Hub>,
    target: Result<Target, Box<Reply>>,
    headers: &HeaderMap,
    incoming: Incoming,
    stall: Duration,
) -> Reply {
    let (endpoint, reply) = match target {
        Ok(t) => {
            let endpoint = match t {
                Target::Lfs { .. } => "lfs-upload",
                Target::Xorb(_) => "xet-xorb-upload",
                Target::Shard(_) => "xet-shard-upload",
            };
            (
                endpoint,
                receive_checked(&hub, t, headers, incoming, stall).await,
            )
        }
        Err(r) => ("upload-refused", *r),
    };
    hub.count(endpoint, reply.status.as_u16());
    reply
}

async fn receive_checked(
    hub: &Arc<Hub>,
    t: Target,
    headers: &HeaderMap,
    incoming: Incoming,
    stall: Duration,
) -> Reply {
    let bad = |status, msg: &str| Reply::error(status, "", msg, None);
    let announced = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let Some(up) = hub.upload_options().cloned() else {
        return bad(StatusCode::FORBIDDEN, "this hub takes no uploads");
    };
    let cap = match &t {
        Target::Lfs { size, .. } => {
            if announced.is_some_and(|n| n != *size) {
                return bad(
                    StatusCode::BAD_REQUEST,
                    &format!("Content-Length is not the {size} bytes this URL is for"),
                );
            }
            if let Err(e) = up.uploads.check_room(*size) {
                return e.reply();
            }
            *size
        }
        Target::Xorb(_) => MAX_XORB_BODY,
        Target::Shard(_) => MAX_SHARD_BODY,
    };
    if announced.is_some_and(|n| n > cap) {
        return bad(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("a body of more than {cap} bytes"),
        );
    }
    let Ok(_permit) = UPLOADS.try_acquire() else {
        return bad(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many uploads at once; try again",
        );
    };
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT);
    let (done_tx, done) = tokio::sync::oneshot::channel();
    // A thread of its own, not one of the router's pool: uploads as slow as their clients
    // never take the threads downloads and every other request need.
    let policy = hub.clone();
    let spawned = std::thread::Builder::new()
        .name("serve-upload".into())
        .spawn(move || {
            let visible = |r: &RepoId| policy.allows(r);
            let mut body = ChannelReader {
                rx,
                buf: Bytes::new(),
            };
            let mut body = (&mut body).take(cap.saturating_add(1));
            let _ = done_tx.send(spool(&up, t, &mut body, &visible));
        });
    if let Err(e) = spawned {
        tracing::error!("cannot start an upload thread: {e}");
        return bad(
            StatusCode::SERVICE_UNAVAILABLE,
            "cannot start an upload thread; try again",
        );
    }
    forward(incoming, tx, stall).await;
    match done.await {
        Ok(Ok(v)) => Reply::json(StatusCode::OK, &v),
        Ok(Err(e)) => e.reply(),
        Err(_) => {
            tracing::error!("an upload thread ended without an answer");
            bad(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
        }
    }
}

/// Spools the upload `t` from `body`; the JSON the client expects.
fn spool(
    up: &crate::uploads::UploadOptions,
    t: Target,
    body: &mut dyn Read,
    visible: &dyn Fn(&RepoId) -> bool,
) -> Result<serde_json::Value, crate::uploads::UploadError> {
    match t {
        Target::Lfs { repo, sha256, size } => up
            .uploads
            .receive(&repo, &sha256, size, body)
            .map(|()| serde_json::json!({ "oid": sha256.to_hex(), "size": size })),
        Target::Xorb(hash) => up
            .uploads
            .receive_xorb(&hash, body)
            .map(|new| serde_json::json!({ "was_inserted": new })),
        Target::Shard(repo) => up
            .uploads
            .receive_shard(&repo, body, visible)
            .map(|_| serde_json::json!({ "result": 1 })),
    }
}

/// Sends the body's data frames to the spooling thread, then an error if the body failed,
/// stalled, or came slower than [`MIN_RATE`] past [`rate_grace`]; stops when that thread
/// has stopped reading.
async fn forward(mut incoming: Incoming, tx: mpsc::Sender<Result<Bytes, String>>, stall: Duration) {
    let (started, grace) = (std::time::Instant::now(), rate_grace());
    let mut got = 0u64;
    loop {
        let late = started.elapsed().saturating_sub(grace);
        if got < MIN_RATE.saturating_mul(late.as_secs()) {
            let msg = format!(
                "the body came at under {} KiB/s ({got} bytes in {:?})",
                MIN_RATE >> 10,
                started.elapsed()
            );
            let _ = tx.send(Err(msg)).await;
            return;
        }
        let next = std::future::poll_fn(|cx| Pin::new(&mut incoming).poll_frame(cx));
        let frame = match tokio::time::timeout(stall, next).await {
            Ok(None) => return,
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(format!("reading the body: {e}"))).await;
                return;
            }
            Err(_) => {
                let msg = format!("no byte of the body for {stall:?}");
                let _ = tx.send(Err(msg)).await;
                return;
            }
        };
        if let Ok(data) = frame.into_data() {
            got += data.len() as u64;
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
