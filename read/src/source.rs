//! One file of one revision as the mount and serve hand it out: the one ranged read path.
//!
//! A [`FileSource`] owns the three rules every reader of a file's byte ranges shares:
//! * **checked bytes**: chunks come through the shared [`ChunkCache`] (BLAKE3 checked, the
//!   length the manifest records checked), never from anywhere else;
//! * **the read plan** ([`ReadPlan`]): read-ahead while the reads are sequential and, for a
//!   `.safetensors` file, prefetching along the loader's walk of its tensors (a header the
//!   plan refuses is logged, and the file keeps its sequential read-ahead);
//! * **the retry after gc**: gc may repack a kept revision and delete the old packs after
//!   its grace period. A read that finds a pack gone reads the manifest again through the
//!   source's [`Reload`] (resolved through gc's forwarding records, [`crate::reload`]) and is
//!   retried once with the new places, only if the file is still there with the same
//!   content; else it fails ([`ReadError::Changed`]): never another content's bytes.
//!
//! The source is shared by the readers of one open file (the mount's threads answering one
//! handle; serve's reader task): reads take `&self`, and a reload by one is used by all.

use std::sync::Arc;

use bytes::Bytes;
use format::{CommitId, RepoId};
use parking_lot::RwLock;
use repo::manifest::{FileEntry, Manifest};
use repo::{Store, StoreError};

use crate::cache::ChunkCache;
use crate::readahead::{FileStream, ReadaheadConfig};
use crate::tensor_plan::TensorOrder;

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

/// How a file is read ahead.
#[derive(Clone, Copy, Debug)]
pub struct ReadPlan {
    /// The sequential read-ahead.
    pub readahead: ReadaheadConfig,
    /// The order a loader walks a `.safetensors` file's tensors in (`Off`: no plan).
    pub tensor_order: TensorOrder,
}

impl Default for ReadPlan {
    /// Default read-ahead; safetensors files followed in name order (vLLM's).
    fn default() -> Self {
        ReadPlan {
            readahead: ReadaheadConfig::default(),
            tensor_order: TensorOrder::Name,
        }
    }
}

/// How a reader reads a revision's manifest again after a pack was found gone.
pub trait Reload: Send + Sync {
    /// The commit's manifest read again, with the index of the file `was` in it, if that
    /// file is still there with the same content ([`crate::reload::same_file`]); `None`
    /// when it changed or is gone.
    fn same_file(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        was: &FileEntry,
    ) -> repo::Result<Option<(Arc<Manifest>, usize)>>;
}

impl Reload for Store {
    fn same_file(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        was: &FileEntry,
    ) -> repo::Result<Option<(Arc<Manifest>, usize)>> {
        crate::reload::same_file(self, repo, commit, was)
    }
}

/// The manifest a source reads through, and its stream once opened.
struct Current {
    manifest: Arc<Manifest>,
    file: usize,
    stream: Option<Arc<FileStream>>,
}

/// One file of one revision, read through the chunk cache with the read plan and the
/// retry after gc.
pub struct FileSource {
    cache: Arc<ChunkCache>,
    plan: ReadPlan,
    reload: Arc<dyn Reload>,
    current: RwLock<Current>,
}

/// A decoded chunk held by the cache, as the owner of a [`Bytes`].
struct Chunk(Arc<Vec<u8>>);

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl FileSource {
    /// File `file` of `manifest`, read through `cache` with `plan`; manifests are read
    /// again through `reload`.
    pub fn new(
        cache: Arc<ChunkCache>,
        plan: ReadPlan,
        reload: Arc<dyn Reload>,
        manifest: Arc<Manifest>,
        file: usize,
    ) -> FileSource {
        FileSource {
            cache,
            plan,
            reload,
            current: RwLock::new(Current {
                manifest,
                file,
                stream: None,
            }),
        }
    }

    /// The manifest the source reads through now, and the file's index in it (a newer
    /// manifest of the same commit after a reload).
    pub fn file(&self) -> (Arc<Manifest>, usize) {
        let c = self.current.read();
        (c.manifest.clone(), c.file)
    }

    /// Opens the file's stream now (else the first read does): a manifest that does not
    /// describe its file's chunks is refused here.
    pub fn open(&self) -> Result<(), ReadError> {
        self.stream().map(|_| ())
    }

    /// Up to `len` bytes at `offset` (fewer at the end of the file).
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        self.with_retry(|s| s.read(offset, len))
    }

    /// The next piece of the file from byte `pos` (at most one chunk, never past `to`),
    /// without copying it out of the cache.
    pub fn piece(&self, pos: u64, to: u64) -> Result<Bytes, ReadError> {
        let (start, data) = self.with_retry(|s| s.chunk_containing(pos, to))?;
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
        &self,
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

    fn inconsistent(&self, what: &str) -> ReadError {
        ReadError::Inconsistent {
            commit: self.current.read().manifest.commit.to_hex(),
            what: what.to_string(),
        }
    }

    /// The stream through the current manifest, opened on first use.
    fn stream(&self) -> Result<Arc<FileStream>, ReadError> {
        if let Some(s) = &self.current.read().stream {
            return Ok(s.clone());
        }
        let mut c = self.current.write();
        if let Some(s) = &c.stream {
            return Ok(s.clone());
        }
        let s = Arc::new(self.open_stream(&c.manifest, c.file)?);
        c.stream = Some(s.clone());
        Ok(s)
    }

    /// A stream over file `i` of `manifest` with the read plan applied.
    fn open_stream(&self, manifest: &Manifest, i: usize) -> Result<FileStream, ReadError> {
        let file = manifest
            .files
            .get(i)
            .ok_or_else(|| self.inconsistent("no such file"))?;
        let stream = FileStream::new(self.cache.clone(), self.plan.readahead, manifest, file)?;
        let order = self.plan.tensor_order;
        if order != TensorOrder::Off && file.path.ends_with(".safetensors") {
            if let Err(e) = stream.follow_safetensors(order) {
                tracing::debug!("{}: sequential read-ahead only: {e}", file.path);
            }
        }
        Ok(stream)
    }

    /// Runs `read` on the stream; a missing pack reloads the manifest (unless another
    /// reader of this source already did since) and runs it once more.
    fn with_retry<T>(&self, read: impl Fn(&FileStream) -> repo::Result<T>) -> Result<T, ReadError> {
        let stream = self.stream()?;
        match read(&stream) {
            Err(e) if e.is_not_found() => {
                let fresh = self.reloaded(&stream)?;
                Ok(read(&fresh)?)
            }
            r => Ok(r?),
        }
    }

    /// The stream to retry with after `failed` found a pack gone: a newer one another
    /// reader already opened, else one through the manifest read again.
    fn reloaded(&self, failed: &Arc<FileStream>) -> Result<Arc<FileStream>, ReadError> {
        let (manifest, i) = self.file();
        let was = manifest
            .files
            .get(i)
            .ok_or_else(|| self.inconsistent("no such file"))?;
        let mut c = self.current.write();
        if let Some(s) = c.stream.as_ref().filter(|s| !Arc::ptr_eq(s, failed)) {
            return Ok(s.clone());
        }
        let (fresh, j) = self
            .reload
            .same_file(&manifest.repo, &manifest.commit, was)?
            .ok_or_else(|| ReadError::Changed {
                path: was.path.clone(),
                commit: manifest.commit.to_hex(),
            })?;
        let s = Arc::new(self.open_stream(&fresh, j)?);
        *c = Current {
            manifest: fresh,
            file: j,
            stream: Some(s.clone()),
        };
        Ok(s)
    }
}
