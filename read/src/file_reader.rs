//! Reading revisions back: random access into a file, streaming a whole file with its
//! sha256 checked, and `verify`; `checkout` of a revision into a directory is in
//! `crate::checkout`.
//!
//! Every chunk read is checked against its BLAKE3 id before its bytes are used, and every
//! whole-file read is checked against the file's sha256, so corrupted or truncated packs
//! make reads fail instead of returning wrong bytes.

use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use sha2::Digest;

use crate::cache::ChunkSource;
use crate::chunk_map::ChunkMap;
use crate::progress::Progress;
use format::frame;
use format::{ChunkId, Sha256, XetHash};
use repo::manifest::{FileEntry, Manifest};
use repo::Store;
use repo::{Result, StoreError};

/// Decoded bytes per window of a file stream: the chunks of a window are decoded in
/// parallel, then the window is written while the next one is decoded and hashed one
/// window behind (so up to three windows are held per file).
const WINDOW_BYTES: u64 = 4 * 1024 * 1024;
/// Bytes per `write` call: writes of a whole window at once were often slower here (the
/// kernel's copy into the page cache doubled in some runs), 1 MiB pieces were not.
const WRITE_BYTES: usize = 1024 * 1024;
/// The most bytes of one ranged read of frames (the request planner's bound).
const RUN_BYTES: u64 = 2 * 1024 * 1024;

/// Where the frame of chunk `c` lies, for the request planner.
fn frame_at(c: &ChunkSource) -> crate::plan::FrameAt<Arc<str>> {
    crate::plan::FrameAt {
        pack: c.key.clone(),
        offset: c.offset,
        len: c.frame_len as u64,
    }
}

/// Random access to one file of a revision, or to any stored content whose chunk list
/// and sha256 are known ([`FileReader::of_chunks`]).
pub struct FileReader<'a> {
    store: &'a Store,
    /// The file's path, to name it in errors.
    path: &'a str,
    /// The content's sha256, checked by every whole-file read.
    sha256: Sha256,
    /// Where each chunk is and where it starts in the file.
    map: std::borrow::Cow<'a, ChunkMap>,
}

impl<'a> FileReader<'a> {
    /// A reader of `file` (which must belong to `manifest`).
    pub fn new(
        store: &'a Store,
        manifest: &'a Manifest,
        file: &'a FileEntry,
    ) -> Result<FileReader<'a>> {
        Ok(FileReader {
            store,
            path: &file.path,
            sha256: file.sha256,
            map: std::borrow::Cow::Owned(ChunkMap::new(manifest, file)?),
        })
    }

    /// A reader of stored content known by its chunks (`map`) and sha256, named `path` in
    /// errors: a pull reads back a file another revision holds through it.
    pub fn of_chunks(
        store: &'a Store,
        path: &'a str,
        sha256: Sha256,
        map: &'a ChunkMap,
    ) -> FileReader<'a> {
        FileReader {
            store,
            path,
            sha256,
            map: std::borrow::Cow::Borrowed(map),
        }
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.map.size()
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.map.len()
    }

    /// Offset of chunk `i` in the file.
    pub fn chunk_start(&self, i: usize) -> u64 {
        self.map.starts[i]
    }

    /// Index of the chunk containing `offset` (binary search); `None` at or past the end.
    pub fn chunk_at(&self, offset: u64) -> Option<usize> {
        self.map.chunk_at(offset)
    }

    /// Reads and checks chunk `i`.
    pub fn read_chunk(&self, i: usize) -> Result<Vec<u8>> {
        self.read_chunk_with(i, true)
    }

    fn read_chunk_with(&self, i: usize, check: bool) -> Result<Vec<u8>> {
        let c = &self.map.sources[i];
        self.store
            .read_chunk(&c.key, &c.id, c.offset, c.frame_len, check)
            .map_err(|e| {
                StoreError::in_file(
                    &format!("{}: chunk {i} of {}", self.path, self.chunk_count()),
                    e,
                )
            })
    }

    /// After a sha256 mismatch: the first chunk whose bytes do not match its id, as an
    /// error naming it, or the mismatch itself if every chunk is intact.
    fn diagnose(&self, mismatch: StoreError) -> StoreError {
        for i in 0..self.chunk_count() {
            if let Err(e) = self.read_chunk(i) {
                return e;
            }
        }
        mismatch
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len.min(self.size().saturating_sub(offset) as usize));
        let mut pos = offset;
        while out.len() < len {
            let Some(i) = self.chunk_at(pos) else { break };
            let data = self.read_chunk(i)?;
            let skip = (pos - self.map.starts[i]) as usize;
            let take = (data.len() - skip).min(len - out.len());
            out.extend_from_slice(&data[skip..skip + take]);
            pos += take as u64;
        }
        Ok(out)
    }

    /// Streams the whole file into `out`, decoding windows of chunks in parallel and
    /// checking every chunk's BLAKE3 before its bytes are written, then the file's sha256.
    pub fn copy_to(&self, out: &mut dyn Write, progress: &dyn Progress) -> Result<()> {
        self.copy_checked(out, progress, true)
    }

    /// Like [`FileReader::copy_to`] but relying on the file's sha256 alone while streaming
    /// (on a mismatch the chunks are checked one by one to name the bad one). Faster; the
    /// bytes written before the error are wrong, so the caller must write to a temporary
    /// place and discard it on error (checkout does).
    pub fn copy_to_unchecked_chunks(
        &self,
        out: &mut dyn Write,
        progress: &dyn Progress,
    ) -> Result<()> {
        self.copy_checked(out, progress, false)
    }

    fn copy_checked(
        &self,
        out: &mut dyn Write,
        progress: &dyn Progress,
        check: bool,
    ) -> Result<()> {
        let n = self.chunk_count();
        let got = if n == 0 || self.window_end(0) == n {
            // One window: nothing to overlap, and no thread to start per small file.
            let mut buf = vec![0; self.size() as usize];
            self.decode_window(0..n, &mut buf, check)?;
            out.write_all(&buf)
                .map_err(|e| StoreError::io(PathBuf::from(self.path), e))?;
            progress.advance(buf.len() as u64);
            Sha256(sha2::Sha256::digest(&buf).into())
        } else {
            self.copy_windows(out, progress, check)?
        };
        if got != self.sha256 {
            let mismatch = StoreError::Sha256Mismatch {
                path: self.path.to_string(),
                expected: self.sha256.to_hex(),
                actual: got.to_hex(),
            };
            return Err(if check {
                mismatch
            } else {
                self.diagnose(mismatch)
            });
        }
        Ok(())
    }

    /// The whole content as a [`std::io::Read`], decoded window by window as
    /// [`FileReader::copy_to`] does (every chunk checked); the end of the stream is an
    /// `InvalidData` error if the content's sha256 is not the one expected.
    pub fn into_read(self) -> Sequential<'a> {
        Sequential {
            reader: self,
            next: 0,
            buf: Vec::new(),
            pos: 0,
            sha: Some(sha2::Sha256::new()),
            failed: None,
        }
    }

    /// Streams the file window by window into `out`; returns its sha256. The sha256 runs
    /// on a thread of its own, one window behind the decoding, so that hashing a window
    /// overlaps writing it and decoding the next.
    fn copy_windows(
        &self,
        out: &mut dyn Write,
        progress: &dyn Progress,
        check: bool,
    ) -> Result<Sha256> {
        let n = self.chunk_count();
        std::thread::scope(|s| -> Result<Sha256> {
            // A window goes to the hasher as its buffer and its length: the buffer may be
            // longer than the window (see below).
            let (to_hash, hash_rx) = std::sync::mpsc::sync_channel::<(Arc<Vec<u8>>, usize)>(1);
            let (done_tx, done) = std::sync::mpsc::channel::<Arc<Vec<u8>>>();
            let hasher = s.spawn(move || {
                let mut sha = sha2::Sha256::new();
                for (w, len) in hash_rx {
                    sha.update(&w[..len]);
                    // The buffer goes back for reuse (ignored once the sender is gone).
                    let _ = done_tx.send(w);
                }
                Sha256(sha.finalize().into())
            });
            let mut i = 0;
            while i < n {
                let end = self.window_end(i);
                let len = (self.map.starts[end] - self.map.starts[i]) as usize;
                // A buffer is made once, zeroed by the allocator (calloc: fresh pages, no
                // memset), at least a whole window long, and then reused as it is: only its
                // first `len` bytes are decoded into, hashed and written. Resizing a reused
                // buffer to each window's length made `realloc` copy the old buffer into
                // new pages and `resize` zero its tail, about 8% of a checkout's CPU with
                // the page faults (a profile of a checkout, issue 40).
                let mut buf = reuse(&done)
                    .filter(|b| b.len() >= len)
                    .unwrap_or_else(|| vec![0; len.max(WINDOW_BYTES as usize)]);
                self.decode_window(i..end, &mut buf[..len], check)?;
                let buf = Arc::new(buf);
                if to_hash.send((buf.clone(), len)).is_err() {
                    break; // the hasher is gone: its join below says why
                }
                buf[..len]
                    .chunks(WRITE_BYTES)
                    .try_for_each(|p| out.write_all(p))
                    .map_err(|e| StoreError::io(PathBuf::from(self.path), e))?;
                progress.advance(len as u64);
                i = end;
            }
            drop(to_hash);
            hasher.join().map_err(|_| {
                StoreError::Invalid(format!("{}: the sha256 thread panicked", self.path))
            })
        })
    }

    /// The end of the window that starts at chunk `i`: at most [`WINDOW_BYTES`] of decoded
    /// bytes, and at least one chunk.
    fn window_end(&self, i: usize) -> usize {
        let mut end = i + 1;
        while end < self.chunk_count()
            && self.map.starts[end + 1] - self.map.starts[i] <= WINDOW_BYTES
        {
            end += 1;
        }
        end
    }

    /// Decodes chunks `range` into `out` (exactly their bytes), in parallel: the chunks are
    /// grouped by the request planner ([`crate::plan`]) into ranged reads of at most
    /// [`RUN_BYTES`]; with a node-local chunk cache (a remote store), a chunk the cache
    /// holds is read from there on its own.
    fn decode_window(&self, range: Range<usize>, out: &mut [u8], check: bool) -> Result<()> {
        let cache = self.store.disk_cache();
        let runs = crate::plan::ranged_reads(
            &self.map.sources[range.clone()],
            frame_at,
            |c| cache.is_some_and(|d| d.contains(&c.id)),
            RUN_BYTES,
        );
        let mut tasks: Vec<(Range<usize>, &mut [u8])> = Vec::new();
        let mut rest = out;
        for run in runs {
            let run = run.start + range.start..run.end + range.start;
            let len = (self.map.starts[run.end] - self.map.starts[run.start]) as usize;
            let (head, tail) = std::mem::take(&mut rest).split_at_mut(len);
            tasks.push((run, head));
            rest = tail;
        }
        tasks
            .into_par_iter()
            .try_for_each(|(run, out)| self.decode_run(run, out, check))
    }

    /// Decodes the chunks of one run into `out`. The run's frames are read at once and
    /// decoded in place (with a node-local chunk cache each frame is checked and kept
    /// there, as a frame fetched alone is); anything unexpected (a pack moved by gc, a short read, a frame
    /// that does not decode or, with `check`, match its id) is left to the chunk-by-chunk
    /// path, which follows forwarding records and names the bad chunk.
    fn decode_run(&self, run: Range<usize>, out: &mut [u8], check: bool) -> Result<()> {
        let base = self.map.starts[run.start];
        let cache = self.store.disk_cache();
        let sources = &self.map.sources[run.clone()];
        let span = crate::plan::span(sources.iter().map(frame_at));
        let frames = if run.len() > 1 || cache.is_none() {
            self.store
                .backend()
                .get_range(&sources[0].key, span.start, span.end - span.start)
                .ok()
        } else {
            None
        };
        if let (Some(cache), Some(_)) = (cache, &frames) {
            // Fetched from the store, not the node cache: misses, as a frame fetched alone is.
            cache.missed(run.len() as u64);
        }
        for i in run {
            let c = &self.map.sources[i];
            let at = (self.map.starts[i] - base) as usize;
            let dst = &mut out[at..at + c.raw_len as usize];
            let fast = frames.as_deref().and_then(|f| {
                let from = (c.offset - span.start) as usize;
                let frame = f.get(from..from + c.frame_len as usize)?;
                frame::decode_into(frame, dst).ok()?;
                match cache {
                    Some(cache) => (ChunkId::of(dst) == c.id).then(|| cache.put(&c.id, frame)),
                    None => (!check || ChunkId::of(dst) == c.id).then_some(()),
                }
            });
            if fast.is_none() {
                self.read_chunk_into(i, dst, check)?;
            }
        }
        Ok(())
    }

    /// Chunk `i` read through [`Store::read_chunk`], copied into `dst` (its length).
    fn read_chunk_into(&self, i: usize, dst: &mut [u8], check: bool) -> Result<()> {
        let data = self.read_chunk_with(i, check)?;
        if data.len() != dst.len() {
            let c = &self.map.sources[i];
            let e = StoreError::CorruptChunk {
                chunk: c.id.to_hex(),
                pack: c.key.to_string(),
                offset: c.offset,
                reason: format!("decoded to {} bytes, expected {}", data.len(), dst.len()),
            };
            return Err(StoreError::in_file(self.path, e));
        }
        dst.copy_from_slice(&data);
        Ok(())
    }
}

/// A buffer the sha256 thread is done with, if one came back.
/// A whole stored file read in order ([`FileReader::into_read`]).
pub struct Sequential<'a> {
    reader: FileReader<'a>,
    /// The first chunk not yet decoded.
    next: usize,
    buf: Vec<u8>,
    pos: usize,
    /// The sha256 of the bytes decoded so far; None once checked at the end.
    sha: Option<sha2::Sha256>,
    /// The error a read answered, answered again by every later read: after a failure
    /// the stream has no end and no more bytes (a retry would hand out the window that
    /// failed to decode, or the end without the sha256 check).
    failed: Option<(std::io::ErrorKind, String)>,
}

impl Sequential<'_> {
    /// Decodes the next window into `buf`; false at the end (after checking the sha256).
    fn refill(&mut self) -> Result<bool> {
        let r = &self.reader;
        if self.next == r.chunk_count() {
            let Some(sha) = self.sha.take() else {
                return Ok(false);
            };
            let got = Sha256(sha.finalize().into());
            if got != r.sha256 {
                return Err(StoreError::Sha256Mismatch {
                    path: r.path.to_string(),
                    expected: r.sha256.to_hex(),
                    actual: got.to_hex(),
                });
            }
            return Ok(false);
        }
        let end = r.window_end(self.next);
        let len = (r.map.starts[end] - r.map.starts[self.next]) as usize;
        self.buf.resize(len, 0);
        r.decode_window(self.next..end, &mut self.buf, true)?;
        if let Some(sha) = &mut self.sha {
            sha.update(&self.buf);
        }
        self.pos = 0;
        self.next = end;
        Ok(true)
    }
}

impl std::io::Read for Sequential<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if let Some((kind, msg)) = &self.failed {
            return Err(std::io::Error::new(*kind, msg.clone()));
        }
        while self.pos == self.buf.len() {
            let more = match self.refill() {
                Ok(more) => more,
                Err(e) => {
                    let kind = if e.is_wrong_bytes() {
                        std::io::ErrorKind::InvalidData
                    } else {
                        std::io::ErrorKind::Other
                    };
                    self.buf.clear();
                    self.pos = 0;
                    self.failed = Some((kind, e.to_string()));
                    return Err(std::io::Error::new(kind, e.to_string()));
                }
            };
            if !more {
                self.buf.clear();
                self.pos = 0;
                return Ok(0);
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn reuse(done: &std::sync::mpsc::Receiver<Arc<Vec<u8>>>) -> Option<Vec<u8>> {
    done.try_iter().find_map(|b| Arc::try_unwrap(b).ok())
}

/// Checks that a manifest path is a safe relative path ([`format::manifest::check_path`],
/// the one rule), before it is joined to a directory.
pub(crate) fn safe_relative(path: &str) -> Result<&Path> {
    match format::manifest::check_path(path) {
        Ok(()) => Ok(Path::new(path)),
        Err(_) => Err(StoreError::Invalid(format!(
            "refusing unsafe path {path:?} in manifest"
        ))),
    }
}

/// One problem found by [`verify`].
#[derive(Clone, Debug)]
pub struct Problem {
    /// The file of the revision.
    pub path: String,
    /// What is wrong, starting with the file's path (and naming the chunk and pack when a
    /// chunk is at fault).
    pub error: String,
}

/// The result of [`verify`].
#[derive(Clone, Debug, Default)]
pub struct VerifyReport {
    /// Files checked.
    pub files: usize,
    /// Bytes re-read.
    pub bytes: u64,
    /// Chunks checked.
    pub chunks: u64,
    /// Everything wrong; empty when the revision is intact.
    pub problems: Vec<Problem>,
}

/// Re-reads every file of `manifest` through the store, checking every chunk's BLAKE3,
/// every file's sha256 and, where the manifest records them, every file's Xet hash
/// (computed again from the bytes read: a wrong recorded hash is a problem).
pub fn verify(store: &Store, manifest: &Manifest, progress: &dyn Progress) -> VerifyReport {
    progress.start("verify", manifest.total_size());
    let problems: Vec<Problem> = manifest
        .files
        .par_iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let r = FileReader::new(store, manifest, f).and_then(|r| {
                let mut xet = XetSink(xethash::Hasher::new());
                match manifest.xet_hashes.get(i) {
                    Some(want) => {
                        r.copy_to(&mut xet, progress)?;
                        check_xet(xet.0.finalize(), *want)
                    }
                    None => r.copy_to(&mut std::io::sink(), progress),
                }
            });
            r.err().map(|e| {
                // Chunk errors already name the file; others get it added.
                let error = match e {
                    StoreError::InFile { .. } => e.to_string(),
                    other => format!("{}: {other}", f.path),
                };
                Problem {
                    path: f.path.clone(),
                    error,
                }
            })
        })
        .collect();
    progress.finish();
    VerifyReport {
        files: manifest.files.len(),
        bytes: manifest.total_size(),
        chunks: manifest.files.iter().map(|f| f.chunks.len() as u64).sum(),
        problems,
    }
}

/// A writer that computes the Xet hash of what it is given.
struct XetSink(xethash::Hasher);

impl Write for XetSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The Xet hash of the bytes read against the one the manifest records.
fn check_xet(got: XetHash, want: XetHash) -> Result<()> {
    if got == want {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "its bytes have the Xet hash {got}, but the manifest records {want}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;
    use crate::test_pack::{noise, one_pack};
    use format::names::{CommitId, RepoId};
    use repo::manifest::ChunkRef;

    fn sha256(data: &[u8]) -> Sha256 {
        Sha256(sha2::Sha256::digest(data).into())
    }

    /// A revision of one file made of `chunks` (in one pack), with the chunk ids and the
    /// file's sha256 as given.
    fn manifest(p: &crate::test_pack::OnePack, ids: &[ChunkId], sha256: Sha256) -> Manifest {
        let chunks = p
            .entries
            .iter()
            .zip(ids)
            .map(|(e, id)| ChunkRef {
                id: *id,
                pack: 0,
                offset: e.offset,
                frame_len: e.frame_len,
                raw_len: e.raw_len,
            })
            .collect::<Vec<_>>();
        let size = chunks.iter().map(|c| c.raw_len as u64).sum();
        Manifest {
            repo: RepoId::parse("o/r").unwrap(),
            commit: CommitId::parse(&"ab".repeat(20)).unwrap(),
            ingested_at: 0,
            source: "plain".into(),
            packs: vec![p.pack],
            files: vec![FileEntry {
                path: "f".into(),
                size,
                sha256,
                executable: false,
                chunks,
            }],
            published: None,
            xet_hashes: Vec::new(),
        }
    }

    fn copy(m: &Manifest, store: &Store, check: bool) -> Result<Vec<u8>> {
        let r = FileReader::new(store, m, &m.files[0])?;
        let mut out = Vec::new();
        if check {
            r.copy_to(&mut out, &NoProgress)?;
        } else {
            r.copy_to_unchecked_chunks(&mut out, &NoProgress)?;
        }
        Ok(out)
    }

    #[test]
    fn whole_file_reads_check_what_they_promise() {
        let chunks: Vec<Vec<u8>> = (0..6u64)
            .map(|i| noise(1_000_000 + i as usize, i))
            .collect();
        let p = one_pack(&chunks);
        let all = chunks.concat();
        let sha = sha256(&all);
        let ids: Vec<ChunkId> = chunks.iter().map(|c| ChunkId::of(c)).collect();
        let m = manifest(&p, &ids, sha);
        assert!(all.len() as u64 > WINDOW_BYTES, "want several windows");
        assert_eq!(copy(&m, &p.store, true).unwrap(), all);
        assert_eq!(copy(&m, &p.store, false).unwrap(), all);
        // A file of one window (read without a sha256 thread).
        let one = manifest(&p, &ids[..1], sha256(&chunks[0]));
        assert_eq!(copy(&one, &p.store, true).unwrap(), chunks[0]);
        // A chunk id that does not match its bytes: the checked read refuses it; the
        // unchecked one relies on the file's sha256 alone, which matches.
        let mut wrong = ids.clone();
        wrong[4] = ChunkId::of(b"something else");
        let m = manifest(&p, &wrong, sha);
        let err = copy(&m, &p.store, true).unwrap_err().to_string();
        assert!(
            err.contains("corrupt chunk") && err.contains("chunk 4 of 6"),
            "{err}"
        );
        assert_eq!(copy(&m, &p.store, false).unwrap(), all);
        // A wrong sha256: both refuse; the unchecked read names the bad chunk if there is one.
        let m = manifest(&p, &ids, Sha256([7; 32]));
        for check in [true, false] {
            let err = copy(&m, &p.store, check).unwrap_err().to_string();
            assert!(err.contains("sha256 mismatch"), "{err}");
        }
        let m = manifest(&p, &wrong, Sha256([7; 32]));
        let err = copy(&m, &p.store, false).unwrap_err().to_string();
        assert!(err.contains("chunk 4 of 6"), "{err}");
    }

    /// A sequential read that failed stays failed: every later `read` answers the error
    /// again, never the end of the file nor bytes of the window that failed to decode.
    #[test]
    fn a_sequential_read_that_failed_never_answers_bytes_or_the_end_after() {
        use std::io::Read;
        let chunks: Vec<Vec<u8>> = (0..6u64)
            .map(|i| noise(1_000_000 + i as usize, i))
            .collect();
        let p = one_pack(&chunks);
        let all = chunks.concat();
        let ids: Vec<ChunkId> = chunks.iter().map(|c| ChunkId::of(c)).collect();
        let sha = sha256(&all);
        fn read_all<'a>(
            store: &'a Store,
            m: &'a Manifest,
        ) -> (Sequential<'a>, Vec<u8>, Option<std::io::Error>) {
            let mut r = FileReader::new(store, m, &m.files[0]).unwrap().into_read();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            let err = loop {
                match r.read(&mut buf) {
                    Ok(0) => break None,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => break Some(e),
                }
            };
            (r, got, err)
        }
        let good = manifest(&p, &ids, sha);
        let (_, got, err) = read_all(&p.store, &good);
        assert!(err.is_none());
        assert_eq!(got, all);
        // A chunk of the second window that is not what its id says, then a wrong sha256.
        let mut wrong = ids.clone();
        wrong[5] = ChunkId::of(b"something else");
        for m in [
            manifest(&p, &wrong, sha),
            manifest(&p, &ids, Sha256([7; 32])),
        ] {
            let (mut r, got, err) = read_all(&p.store, &m);
            let err = err.expect("the read fails");
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
            assert!(all.starts_with(&got) && got.len() < all.len() + 1);
            let mut buf = vec![0u8; 64 * 1024];
            for _ in 0..3 {
                let again = r
                    .read(&mut buf)
                    .expect_err("a read after the failure fails");
                assert_eq!(again.kind(), err.kind());
                assert_eq!(again.to_string(), err.to_string());
            }
        }
    }

    #[test]
    fn verify_checks_the_recorded_xet_hash_against_the_bytes() {
        let chunks: Vec<Vec<u8>> = (0..3u64).map(|i| noise(200_000, i)).collect();
        let p = one_pack(&chunks);
        let all = chunks.concat();
        let ids: Vec<ChunkId> = chunks.iter().map(|c| ChunkId::of(c)).collect();
        let mut m = manifest(&p, &ids, sha256(&all));
        // Without Xet hashes (a store written before them): the bytes and sha256 only.
        assert!(verify(&p.store, &m, &NoProgress).problems.is_empty());
        m.xet_hashes = vec![xethash::file_hash(&all)];
        assert!(verify(&p.store, &m, &NoProgress).problems.is_empty());
        // A recorded hash that is not the bytes' (one bit off): named.
        m.xet_hashes[0].0[31] ^= 1;
        let r = verify(&p.store, &m, &NoProgress);
        assert_eq!(r.problems.len(), 1);
        assert!(
            r.problems[0].error.starts_with("f: ") && r.problems[0].error.contains("Xet hash"),
            "{}",
            r.problems[0].error
        );
    }

    #[test]
    fn with_a_node_cache_adjacent_missing_frames_are_fetched_together_and_kept() {
        use objects::{CountingStore, ObjectStore};
        use repo::disk_cache::DiskCache;
        let chunks: Vec<Vec<u8>> = (0..12u64).map(|i| noise(100_000, i)).collect();
        let p = one_pack(&chunks);
        let all = chunks.concat();
        let ids: Vec<ChunkId> = chunks.iter().map(|c| ChunkId::of(c)).collect();
        let m = manifest(&p, &ids, sha256(&all));
        let t = tempfile::tempdir().unwrap();
        let backend: Arc<dyn ObjectStore> = p.backend.clone();
        let counting = Arc::new(CountingStore::new(backend));
        let store = p
            .store
            .with_backend(counting.clone())
            .with_disk_cache(DiskCache::open(t.path(), 1 << 30).unwrap());
        let cache = store.disk_cache().unwrap().clone();
        // Chunk 5 is on the node already: the others come in two ranged reads around it.
        let f5 = p.backend.get_range(
            &p.key,
            p.entries[5].offset as u64,
            p.entries[5].frame_len as u64,
        );
        cache.put(&ids[5], &f5.unwrap());
        for check in [true, false] {
            let before = counting.requests().get_range;
            assert_eq!(copy(&m, &store, check).unwrap(), all);
            let gets = counting.requests().get_range - before;
            assert_eq!(gets, if check { 2 } else { 0 }, "check {check}");
        }
        assert!(ids.iter().all(|id| cache.contains(id)), "every frame kept");
        // A frame that does not match its id is not kept, and the read fails naming it.
        let t2 = tempfile::tempdir().unwrap();
        let store = p
            .store
            .with_backend(counting.clone())
            .with_disk_cache(DiskCache::open(t2.path(), 1 << 30).unwrap());
        let mut wrong = ids.clone();
        wrong[3] = ChunkId::of(b"something else");
        let bad = manifest(&p, &wrong, sha256(&all));
        let err = copy(&bad, &store, true).unwrap_err().to_string();
        assert!(err.contains("chunk 3 of 12"), "{err}");
        assert!(!store.disk_cache().unwrap().contains(&wrong[3]));
    }
}
