//! The HTTP body that streams file bytes: a byte range of one file of a revision, read
//! through the one read path ([`read::source::FileSource`]: checked chunks of the shared
//! cache, the read plan, the retry after gc).
//!
//! A reader task takes chunks ahead of the socket, at most [`AHEAD`] in flight, so memory
//! stays bounded whatever the file size and decoding overlaps sending; each chunk is read on
//! the blocking pool, so a client that reads slowly holds no thread. Chunks are handed to
//! the socket without a copy (a [`Bytes`] over the cache's buffer).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use read::source::{FileSource, ReadError};
use tokio::sync::mpsc;

/// Chunks decoded ahead of the socket.
pub const AHEAD: usize = 4;

/// Reads `[from, to)` of `src` into `tx`: each chunk on the blocking pool (so a slow
/// client holds no thread), at most [`AHEAD`] chunks ahead of the socket.
async fn produce(
    src: Arc<FileSource>,
    from: u64,
    to: u64,
    tx: mpsc::Sender<Result<Bytes, ReadError>>,
) {
    let mut pos = from;
    while pos < to {
        let reader = src.clone();
        let step = tokio::task::spawn_blocking(move || reader.piece(pos, to)).await;
        let piece = match step {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::warn!("download of bytes {from}..{to} stopped at {pos}: {e}");
                let _ = tx.send(Err(e)).await;
                return;
            }
            Err(e) => {
                tracing::error!("chunk reader failed: {e}");
                return;
            }
        };
        pos += piece.len() as u64;
        // The client went away: stop reading.
        if tx.send(Ok(piece)).await.is_err() {
            return;
        }
    }
}

/// Called once when a streamed body ends or is dropped: the bytes handed to the socket.
pub type OnDone = Box<dyn FnOnce(u64) + Send>;

/// A response body: bytes in memory, or a file range streamed from the blocking pool.
pub enum Body {
    /// A whole body at once (JSON, errors, metrics; empty for HEAD).
    Full(Option<Bytes>),
    /// Pieces already read, handed to the socket in order without copying them together
    /// (a Xet xorb range: record headers between chunk bytes as the read path holds them).
    Parts(std::collections::VecDeque<Bytes>),
    /// `left` bytes from a reader task, started on the first poll (inside the runtime).
    Stream {
        /// The source and range the reader task reads (boxed: it is most of the size).
        start: Option<Box<(FileSource, u64, u64)>>,
        rx: Option<mpsc::Receiver<Result<Bytes, ReadError>>>,
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

    /// A body of these pieces, in order (empty pieces are left out).
    pub fn parts(parts: Vec<Bytes>) -> Body {
        Body::Parts(parts.into_iter().filter(|b| !b.is_empty()).collect())
    }

    /// No body (HEAD, errors without text).
    pub fn empty() -> Body {
        Body::Full(None)
    }

    /// Streams bytes `[from, to)` of `src`; `done` gets the number of bytes handed to the
    /// socket when the body ends or is dropped.
    pub fn stream(src: FileSource, from: u64, to: u64, done: OnDone) -> Body {
        Body::Stream {
            start: Some(Box::new((src, from, to))),
            rx: None,
            left: to.saturating_sub(from),
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
            Body::Parts(parts) => Poll::Ready(parts.pop_front().map(|b| Ok(Frame::data(b)))),
            Body::Stream {
                start,
                rx,
                left,
                sent,
                ..
            } => {
                if *left == 0 {
                    return Poll::Ready(None);
                }
                if let Some(started) = start.take() {
                    let (src, from, to) = *started;
                    let (tx, r) = mpsc::channel(AHEAD);
                    tokio::spawn(produce(Arc::new(src), from, to, tx));
                    *rx = Some(r);
                }
                let Some(rx) = rx else {
                    return Poll::Ready(None);
                };
                match rx.poll_recv(cx) {
                    Poll::Pending => Poll::Pending,
                    Poll::Ready(Some(Ok(b))) => {
                        let n = (b.len() as u64).min(*left);
                        *left -= n;
                        *sent += n;
                        Poll::Ready(Some(Ok(Frame::data(b.slice(..n as usize)))))
                    }
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                    // The reader ended early without an error: the body is short, which
                    // hyper reports by closing the connection.
                    Poll::Ready(None) => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Body::Full(b) => b.as_ref().is_none_or(|b| b.is_empty()),
            Body::Parts(parts) => parts.is_empty(),
            Body::Stream { left, .. } => *left == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Parts(parts) => SizeHint::with_exact(parts.iter().map(|b| b.len() as u64).sum()),
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
