//! The HTTP body that streams file bytes: a byte range of one file of a revision (or, for a
//! Xet xorb, its record headers between such ranges), read through the one read path
//! ([`read::source::FileSource`]: checked chunks of the shared cache, the read plan, the
//! retry after gc).
//!
//! A reader task takes the bytes ahead of the socket in batches of about [`BATCH`], at most
//! [`AHEAD`] batches in flight, so memory stays bounded per download whatever the file or
//! xorb size, and decoding overlaps sending; each batch is read on the blocking pool, so a
//! client that reads slowly holds no thread. Chunks are handed to the socket without a copy
//! (a [`Bytes`] over the cache's buffer).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use read::source::{FileSource, ReadError};
use tokio::sync::mpsc;

/// Batches read ahead of the socket.
pub const AHEAD: usize = 2;
/// File bytes one blocking step reads before handing its batch over (the last piece may
/// take it past: a piece is at most one chunk).
pub const BATCH: u64 = 512 << 10;

/// A part of a streamed body: bytes given, or bytes `[from, to)` of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Bytes(Bytes),
    File { from: u64, to: u64 },
}

impl Segment {
    fn len(&self) -> u64 {
        match self {
            Segment::Bytes(b) => b.len() as u64,
            Segment::File { from, to } => to.saturating_sub(*from),
        }
    }
}

/// Reads `segs` from segment `*at` (`*off` bytes into it) into a batch, until the batch
/// holds [`BATCH`] file bytes or the segments end; moves `*at` and `*off` past what it read.
fn read_batch(
    src: &FileSource,
    segs: &[Segment],
    at: &mut usize,
    off: &mut u64,
) -> Result<Vec<Bytes>, ReadError> {
    let (mut batch, mut file_bytes) = (Vec::new(), 0u64);
    while *at < segs.len() && file_bytes < BATCH {
        match &segs[*at] {
            Segment::Bytes(b) => {
                batch.push(b.clone());
                (*at, *off) = (*at + 1, 0);
            }
            Segment::File { from, to } => {
                let pos = from + *off;
                if pos >= *to {
                    (*at, *off) = (*at + 1, 0);
                    continue;
                }
                let piece = src.piece(pos, *to)?;
                *off += piece.len() as u64;
                file_bytes += piece.len() as u64;
                batch.push(piece);
            }
        }
    }
    Ok(batch)
}

/// Reads `segs` of `src` into `tx`: each batch on the blocking pool (so a slow client holds
/// no thread), at most [`AHEAD`] batches ahead of the socket.
async fn produce(
    src: Arc<FileSource>,
    segs: Vec<Segment>,
    tx: mpsc::Sender<Result<Vec<Bytes>, ReadError>>,
) {
    let segs = Arc::new(segs);
    let (mut at, mut off) = (0usize, 0u64);
    while at < segs.len() {
        let (reader, s) = (src.clone(), segs.clone());
        let step = tokio::task::spawn_blocking(move || {
            let r = read_batch(&reader, &s, &mut at, &mut off);
            (r, at, off)
        })
        .await;
        let batch = match step {
            Ok((Ok(b), a, o)) => {
                (at, off) = (a, o);
                b
            }
            Ok((Err(e), a, o)) => {
                tracing::warn!("a download stopped in its part {a}, {o} bytes in: {e}");
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(e) => {
                tracing::error!("chunk reader failed: {e}");
                return;
            }
        };
        // The client went away: stop reading.
        if tx.send(Ok(batch)).await.is_err() {
            return;
        }
    }
}

/// Called once when a streamed body ends or is dropped: the bytes handed to the socket.
pub type OnDone = Box<dyn FnOnce(u64) + Send>;

/// A response body: bytes in memory, or file ranges streamed from the blocking pool.
pub enum Body {
    /// A whole body at once (JSON, errors, metrics; empty for HEAD).
    Full(Option<Bytes>),
    /// `left` bytes from a reader task, started on the first poll (inside the runtime).
    Stream {
        /// The source and segments the reader task reads (boxed: most of the size).
        start: Option<Box<(FileSource, Vec<Segment>)>>,
        rx: Option<mpsc::Receiver<Result<Vec<Bytes>, ReadError>>>,
        /// The batch being handed to the socket.
        batch: VecDeque<Bytes>,
        left: u64,
        sent: u64,
        done: Option<OnDone>,
    },
}

impl Body {
    /// A body of these bytes.
    pub fn full(b: impl Into<Bytes>) -> Body {
        Body::Full(Some(b.into()))
    }

    /// No body (HEAD, errors without text).
    pub fn empty() -> Body {
        Body::Full(None)
    }

    /// Streams bytes `[from, to)` of `src`; `done` gets the number of bytes handed to the
    /// socket when the body ends or is dropped.
    pub fn stream(src: FileSource, from: u64, to: u64, done: OnDone) -> Body {
        Body::segments(src, vec![Segment::File { from, to }], done)
    }

    /// Streams `segs` in order (file ranges of `src`, and bytes given between them).
    pub fn segments(src: FileSource, segs: Vec<Segment>, done: OnDone) -> Body {
        let segs: Vec<Segment> = segs.into_iter().filter(|s| s.len() > 0).collect();
        Body::Stream {
            left: segs.iter().map(Segment::len).sum(),
            start: Some(Box::new((src, segs))),
            rx: None,
            batch: VecDeque::new(),
            sent: 0,
            done: Some(done),
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = ReadError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ReadError>>> {
        match &mut *self {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream {
                start,
                rx,
                batch,
                left,
                sent,
                ..
            } => {
                if *left == 0 {
                    return Poll::Ready(None);
                }
                if let Some(started) = start.take() {
                    let (src, segs) = *started;
                    let (tx, r) = mpsc::channel(AHEAD);
                    tokio::spawn(produce(Arc::new(src), segs, tx));
                    *rx = Some(r);
                }
                while batch.is_empty() {
                    let Some(rx) = rx else {
                        return Poll::Ready(None);
                    };
                    match rx.poll_recv(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Some(Ok(b))) => batch.extend(b),
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                        // The reader ended early without an error: the body is short,
                        // which hyper reports by closing the connection.
                        Poll::Ready(None) => return Poll::Ready(None),
                    }
                }
                let Some(b) = batch.pop_front() else {
                    return Poll::Ready(None);
                };
                let n = (b.len() as u64).min(*left);
                *left -= n;
                *sent += n;
                Poll::Ready(Some(Ok(Frame::data(b.slice(..n as usize)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            Body::Stream { left, .. } => *left == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Stream { left, .. } => SizeHint::with_exact(*left),
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Body::Stream { sent, done, .. } = self {
            if let Some(f) = done.take() {
                f(*sent);
            }
        }
    }
}
