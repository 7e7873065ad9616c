//! Reading revisions back: random access into a file, streaming a whole file with its
//! sha256 checked, `checkout` of a revision into a directory, and `verify`.
//!
//! Every chunk read is checked against its BLAKE3 id before its bytes are used, and every
//! whole-file read is checked against the file's sha256, so corrupted or truncated packs
//! make reads fail instead of returning wrong bytes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::chunk_map::ChunkMap;
use crate::progress::Progress;
use repo::manifest::{FileEntry, Manifest};
use repo::Store;
use repo::{Result, StoreError};

/// Decoded bytes held at once per file stream: chunks are decoded in parallel in windows
/// of about this size, then written in order.
const WINDOW_BYTES: u64 = 32 * 1024 * 1024;

/// Random access to one file of a revision.
pub struct FileReader<'a> {
    store: &'a Store,
    file: &'a FileEntry,
    /// Where each chunk is and where it starts in the file.
    map: ChunkMap,
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
            file,
            map: ChunkMap::new(manifest, file)?,
        })
    }

    /// The file.
    pub fn file(&self) -> &FileEntry {
        self.file
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
                    &format!(
                        "{}: chunk {i} of {}",
                        self.file.path,
                        self.file.chunks.len()
                    ),
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
        let mut out = Vec::with_capacity(len.min(self.file.size.saturating_sub(offset) as usize));
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
        let mut sha = Sha256::new();
        let mut i = 0;
        let n = self.chunk_count();
        while i < n {
            let mut end = i;
            let mut bytes = 0u64;
            while end < n
                && (end == i || bytes + self.file.chunks[end].raw_len as u64 <= WINDOW_BYTES)
            {
                bytes += self.file.chunks[end].raw_len as u64;
                end += 1;
            }
            let decoded: Vec<Result<Vec<u8>>> = (i..end)
                .into_par_iter()
                .map(|j| self.read_chunk(j))
                .collect();
            for d in decoded {
                let d = d?;
                sha.update(&d);
                out.write_all(&d)
                    .map_err(|e| StoreError::io(PathBuf::from(&self.file.path), e))?;
                progress.advance(d.len() as u64);
            }
            i = end;
        }
        let got: [u8; 32] = sha.finalize().into();
        if got != self.file.sha256 {
            let mismatch = StoreError::Sha256Mismatch {
                path: self.file.path.clone(),
                expected: self.file.sha256_hex(),
                actual: hex::encode(got),
            };
            return Err(if check {
                mismatch
            } else {
                self.diagnose(mismatch)
            });
        }
        Ok(())
    }
}

/// Checks that a manifest path is a safe relative path.
fn safe_relative(path: &str) -> Result<&Path> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && path
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..");
    if ok {
        Ok(Path::new(path))
    } else {
        Err(StoreError::Invalid(format!(
            "refusing unsafe path {path:?} in manifest"
        )))
    }
}

/// What a checkout wrote.
#[derive(Clone, Debug, Default)]
pub struct CheckoutReport {
    /// Files written.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// Prefix of the hidden staging directory of a checkout (`<dir>/.modelcas-checkout-<hex>`).
const STAGING_PREFIX: &str = ".modelcas-checkout-";

/// Writes every file of `manifest` under `dir` as plain files (no symlinks), in parallel,
/// each checked against its sha256. `dir` must not exist or be an empty directory. Files
/// are written into a staging directory inside `dir` (see [`staging_dir`]) under their
/// index in the manifest, and renamed into place once verified, so no temporary name can
/// be one of the revision's own files. On an error the staging directory is removed and
/// the error names the file.
pub fn checkout(
    store: &Store,
    manifest: &Manifest,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<CheckoutReport> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(StoreError::BadSource {
                    path: dir.to_path_buf(),
                    reason: "checkout target exists and is not empty".into(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(StoreError::BadSource {
                path: dir.to_path_buf(),
                reason: "checkout target is not a directory".into(),
            })
        }
        Err(e) => return Err(StoreError::io(dir, e)),
    }
    for f in &manifest.files {
        safe_relative(&f.path)?;
    }
    let staging = staging_dir(dir, manifest)?;
    progress.start("checkout", manifest.total_size());
    // Largest files first so that the long ones start early.
    let mut order: Vec<(usize, &FileEntry)> = manifest.files.iter().enumerate().collect();
    order.sort_by(|a, b| b.1.size.cmp(&a.1.size));
    let results: Vec<Result<()>> = order
        .par_iter()
        .map(|(i, f)| {
            write_one(
                store,
                manifest,
                f,
                dir,
                &staging.join(i.to_string()),
                progress,
            )
        })
        .collect();
    progress.finish();
    let done = results.into_iter().collect::<Result<Vec<()>>>();
    let cleaned = match done {
        Ok(_) => fs::remove_dir(&staging),
        Err(_) => fs::remove_dir_all(&staging),
    };
    done?;
    cleaned.map_err(|e| StoreError::io(&staging, e))?;
    Ok(CheckoutReport {
        files: manifest.files.len(),
        bytes: manifest.total_size(),
    })
}

/// Creates `<dir>/.modelcas-checkout-<16 hex random>`: exclusively (`mkdir` fails if it
/// exists, so two checkouts never share one) and under a name that is not the first
/// component of any path in the revision (so nothing of the revision lives under it).
fn staging_dir(dir: &Path, manifest: &Manifest) -> Result<PathBuf> {
    for attempt in 0u32..16 {
        let seed = format!(
            "{}-{:?}-{:?}-{attempt}",
            std::process::id(),
            std::time::Instant::now(),
            std::time::SystemTime::now()
        );
        let name = format!(
            "{STAGING_PREFIX}{}",
            &blake3::hash(seed.as_bytes()).to_hex()[..16]
        );
        if manifest
            .files
            .iter()
            .any(|f| f.path.split('/').next() == Some(name.as_str()))
        {
            continue;
        }
        let path = dir.join(&name);
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(StoreError::io(&path, e)),
        }
    }
    Err(StoreError::BadSource {
        path: dir.to_path_buf(),
        reason: "no free name for the checkout's staging directory".into(),
    })
}

/// Writes `f` to `partial` (in the staging directory), then renames it to its place.
fn write_one(
    store: &Store,
    manifest: &Manifest,
    f: &FileEntry,
    dir: &Path,
    partial: &Path,
    progress: &dyn Progress,
) -> Result<()> {
    let dest = dir.join(safe_relative(&f.path)?);
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent).map_err(|e| StoreError::io(parent, e))?;
    }
    let result = (|| -> Result<()> {
        let file = fs::File::options()
            .write(true)
            .create_new(true)
            .open(partial)
            .map_err(|e| StoreError::io(partial, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        FileReader::new(store, manifest, f)?.copy_to_unchecked_chunks(&mut w, progress)?;
        let file = w
            .into_inner()
            .map_err(|e| StoreError::io(partial, e.into_error()))?;
        let mode = if f.executable { 0o755 } else { 0o644 };
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| StoreError::io(partial, e))?;
        fs::rename(partial, &dest).map_err(|e| StoreError::io(&dest, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(partial);
    }
    result
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

/// Re-reads every file of `manifest` through the store, checking every chunk's BLAKE3 and
/// every file's sha256.
pub fn verify(store: &Store, manifest: &Manifest, progress: &dyn Progress) -> VerifyReport {
    progress.start("verify", manifest.total_size());
    let problems: Vec<Problem> = manifest
        .files
        .par_iter()
        .filter_map(|f| {
            let r = FileReader::new(store, manifest, f)
                .and_then(|r| r.copy_to(&mut std::io::sink(), progress));
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
