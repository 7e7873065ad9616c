//! File bytes for a response: a byte range of one file of a revision, read through the
//! store's one range reader ([`FileStream`] over the shared [`ChunkCache`]: decoded chunks
//! shared with every other download, read-ahead while the reads stay sequential, node
//! cache, then pack, hash checked), and the HTTP body that streams them.
//!
//! A reader task takes chunks ahead of the socket, at most [`AHEAD`] in flight, so memory
//! stays bounded whatever the file size and decoding overlaps sending; each chunk is read on
//! the blocking pool, so a client that reads slowly holds no thread. Chunks are handed to
//! the socket without a copy (a [`Bytes`] over the cache's buffer).
//! When a chunk's pack is gone (gc rewrote the revision's packs after we loaded its
//! manifest) the manifest is loaded again and the read retried once from the same byte,
//! as the mount does: the file must be the same (sha256 and size), only its chunks'
//! places may have moved.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use format::{CommitId, RepoId};
use http_body::{Frame, SizeHint};
use read::cache::ChunkCache;
use read::readahead::{FileStream, ReadaheadConfig};
use repo::manifest::{FileEntry, Manifest};
use repo::{Store, StoreError};
use tokio::sync::mpsc;

/// Chunks decoded ahead of the socket.
pub const AHEAD: usize = 4;

/// Why file bytes could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The store failed (a missing pack after the one reload, a corrupt chunk, I/O).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// After a reload the revision's manifest no longer has this file as it was.
    #[error("{path} changed in {commit} while it was being read")]
    Changed { path: String, commit: String },
    /// The manifest contradicts itself (no such file, or a chunk that ends before the
    /// byte asked for).
    #[error("manifest of {commit}: {what}")]
    Inconsistent { commit: String, what: String },
}

/// A decoded chunk held by the cache, as the owner of a [`Bytes`].
struct Chunk(Arc<Vec<u8>>);

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// One file of one revision, with the manifest it is read through; the manifest is
/// replaced by a freshly loaded one when a pack turns out to be gone.
pub struct FileSource {
    store: Store,
    cache: Arc<ChunkCache>,
    readahead: ReadaheadConfig,
    repo: RepoId,
    commit: CommitId,
    manifest: Arc<Manifest>,
    file: usize,
    /// The reader of the file through `manifest`, opened on the first read.
    stream: Option<FileStream>,
    reloaded: Option<Box<dyn Fn(Arc<Manifest>) + Send>>,
    /// Whether the manifest was already loaded again once.
    retried: bool,
}

impl FileSource {
    /// File `file` of `manifest`, read through `cache`.
    pub fn new(
        store: Store,
        cache: Arc<ChunkCache>,
        repo: RepoId,
        commit: CommitId,
        manifest: Arc<Manifest>,
        file: usize,
    ) -> FileSource {
        FileSource {
            store,
            cache,
            readahead: ReadaheadConfig::default(),
            repo,
            commit,
            manifest,
            file,
            stream: None,
            reloaded: None,
            retried: false,
        }
    }

    /// Reads with the read-ahead of `config` (default: [`ReadaheadConfig::default`]).
    pub fn with_readahead(mut self, config: ReadaheadConfig) -> FileSource {
        self.readahead = config;
        self
    }

    /// Calls `f` with the manifest loaded again after a missing pack (to refresh a cache).
    pub fn on_reload(mut self, f: impl Fn(Arc<Manifest>) + Send + 'static) -> FileSource {
        self.reloaded = Some(Box::new(f));
        self
    }

    fn entry(&self) -> Result<&FileEntry, ReadError> {
        self.manifest
            .files
            .get(self.file)
            .ok_or_else(|| self.inconsistent("no such file"))
    }

    fn inconsistent(&self, what: &str) -> ReadError {
        ReadError::Inconsistent {
            commit: self.commit.to_hex(),
            what: what.to_string(),
        }
    }

    /// Loads the manifest again ([`read::reload::same_file`]); the file must be unchanged.
    fn reload(&mut self) -> Result<(), ReadError> {
        let old = self.entry()?;
        let (fresh, i) = read::reload::same_file(&self.store, &self.repo, &self.commit, old)?
            .ok_or_else(|| ReadError::Changed {
                path: old.path.clone(),
                commit: self.commit.to_hex(),
            })?;
        self.file = i;
        self.manifest = fresh.clone();
        self.stream = None;
        if let Some(f) = &self.reloaded {
            f(fresh);
        }
        Ok(())
    }

    /// The chunk holding byte `pos`, through the range reader: (its offset in the file,
    /// its bytes).
    fn chunk_at(&mut self, pos: u64, to: u64) -> Result<(u64, Arc<Vec<u8>>), ReadError> {
        if self.stream.is_none() {
            let f = self.entry()?;
            let stream = FileStream::new(self.cache.clone(), self.readahead, &self.manifest, f)?;
            self.stream = Some(stream);
        }
        match &self.stream {
            Some(s) => Ok(s.chunk_containing(pos, to)?),
            None => Err(self.inconsistent("no reader")),
        }
    }

    /// The next piece of the file from byte `pos` (at most one chunk, never past `to`). A
    /// missing pack reloads the manifest and retries, once per source.
    pub fn piece(&mut self, pos: u64, to: u64) -> Result<Bytes, ReadError> {
        let (start, data) = match self.chunk_at(pos, to) {
            Err(ReadError::Store(e)) if e.is_not_found() && !self.retried => {
                self.retried = true;
                self.reload()?;
                self.chunk_at(pos, to)?
            }
            r => r?,
        };
        let a = (pos - start) as usize;
        let b = ((to - start).min(data.len() as u64)) as usize;
        if a >= b {
            return Err(self.inconsistent("empty chunk"));
        }
        Ok(Bytes::from_owner(Chunk(data)).slice(a..b))
    }

    /// Reads bytes `[from, to)`, handing each piece to `sink` in order; stops early (Ok)
    /// when `sink` returns false.
    pub fn copy_range(
        &mut self,
        from: u64,
        to: u64,
        sink: &mut dyn FnMut(Bytes) -> bool,
    ) -> Result<(), ReadError> {
        let mut pos = from;
        while pos < to {
            let piece = self.piece(pos, to)?;
            pos += piece.len() as u64;
            if !sink(piece) {
                break;
            }
        }
        Ok(())
    }
}

/// Reads `[from, to)` of `src` into `tx`: each chunk on the blocking pool (so a slow
/// client holds no thread), at most [`AHEAD`] chunks ahead of the socket.
async fn produce(
    mut src: FileSource,
    from: u64,
    to: u64,
    tx: mpsc::Sender<Result<Bytes, ReadError>>,
) {
    let mut pos = from;
    while pos < to {
        let step = tokio::task::spawn_blocking(move || {
            let r = src.piece(pos, to);
            (src, r)
        })
        .await;
        let piece = match step {
            Ok((s, Ok(b))) => {
                src = s;
                b
            }
            Ok((_, Err(e))) => {
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
                    tokio::spawn(produce(src, from, to, tx));
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
