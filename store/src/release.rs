//! The release check of stored revisions: feeds the pure rules of the `release` crate the
//! files of a manifest through the read path (every chunk checked against its BLAKE3, a
//! whole-file read against its sha256), turns the report into the stored record
//! ([`format::release::CheckObject`]) and keeps it current. docs/OPERATIONS.md "Release
//! check" says what each problem means.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use format::release::{clip, files_digest, CheckObject, Problem, SEVERITY_ERROR, SEVERITY_WARNING};
use read::file_reader::FileReader;
use repo::handle::Store;
use repo::manifest::{now_secs, Manifest};
use repo::StoreError;

pub use release::RULES;

/// The files of one manifest, read through the store.
pub struct StoredFiles<'a> {
    store: &'a Store,
    manifest: &'a Manifest,
    list: Vec<release::FileInfo>,
    /// Bytes read so far (for the metrics).
    read: AtomicU64,
}

impl<'a> StoredFiles<'a> {
    /// The files of `manifest`.
    pub fn new(store: &'a Store, manifest: &'a Manifest) -> StoredFiles<'a> {
        let list = manifest
            .files
            .iter()
            .map(|f| release::FileInfo {
                path: f.path.clone(),
                size: f.size,
            })
            .collect();
        StoredFiles {
            store,
            manifest,
            list,
            read: AtomicU64::new(0),
        }
    }

    fn reader_of(&self, path: &str) -> io::Result<FileReader<'a>> {
        let file = self
            .manifest
            .files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .map(|i| &self.manifest.files[i])
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{path}: not in the revision"),
                )
            })?;
        FileReader::new(self.store, self.manifest, file).map_err(to_io)
    }
}

impl release::Files for StoredFiles<'_> {
    fn list(&self) -> &[release::FileInfo] {
        &self.list
    }

    fn read_at(&self, path: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let bytes = self.reader_of(path)?.read_at(offset, len).map_err(to_io)?;
        self.read.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    fn reader(&self, path: &str) -> io::Result<Box<dyn Read + '_>> {
        let inner = self.reader_of(path)?.into_read();
        Ok(Box::new(Counted {
            inner,
            read: &self.read,
        }))
    }
}

/// A reader counting the bytes it hands out.
struct Counted<'a, R> {
    inner: R,
    read: &'a AtomicU64,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

fn to_io(e: StoreError) -> io::Error {
    io::Error::other(e.to_string())
}

/// Checks the revision `manifest` describes (its packs must be durable). `by` names the
/// command, for the record. A read failure is an error, not a problem of the release.
pub fn check_revision(
    store: &Store,
    manifest: &Manifest,
    by: &str,
) -> Result<CheckObject, release::CheckError> {
    let started = Instant::now();
    let partial = store
        .partial(&manifest.repo, &manifest.commit)
        .ok()
        .flatten()
        // A partial commit completed by this very pull still has its record (cleared after).
        .filter(|p| (manifest.files.len() as u64) < p.upstream_files)
        .map(|p| release::Partial {
            stored: manifest.files.len() as u64,
            upstream: p.upstream_files,
        });
    let files = StoredFiles::new(store, manifest);
    let report = release::check(&files, &release::Options { partial })?;
    let obj = to_object(&report, manifest, by);
    crate::metrics::release_checked(
        obj.verdict().as_str(),
        started.elapsed(),
        files.read.load(Ordering::Relaxed),
    );
    Ok(obj)
}

/// The record of `report` for `manifest`.
pub fn to_object(report: &release::Report, manifest: &Manifest, by: &str) -> CheckObject {
    let problems = report.problems.iter().map(stored_problem).collect();
    CheckObject {
        commit: manifest.commit,
        files: files_digest(manifest),
        rules: RULES,
        checked_at: now_secs(),
        by: clip(by, format::release::MAX_BY),
        problems,
        omitted: report.omitted,
    }
}

/// A problem as the stored record holds it (clipped to the record's caps).
pub fn stored_problem(p: &release::Problem) -> Problem {
    Problem {
        severity: match p.severity {
            release::Severity::Warning => SEVERITY_WARNING,
            release::Severity::Error => SEVERITY_ERROR,
        },
        code: clip(&p.code, format::release::MAX_CODE),
        path: clip(&p.path, format::release::MAX_PATH),
        message: clip(&p.message, format::release::MAX_MESSAGE),
    }
}

/// The current record of `manifest`'s revision: the stored one when it judged these files
/// under the current rules, else a new check, recorded. `None` (after `warn`) when the
/// check could not be made: no record is written, the revision stays *not checked*.
pub fn ensure_checked(
    store: &Store,
    manifest: &Manifest,
    by: &str,
    warn: &dyn Fn(String),
) -> repo::Result<Option<CheckObject>> {
    if let Some(c) = store.current_check(manifest)? {
        if c.rules >= RULES {
            return Ok(Some(c));
        }
    }
    match check_revision(store, manifest, by) {
        Ok(obj) => {
            store.put_check(&manifest.repo, &obj)?;
            Ok(Some(obj))
        }
        Err(e) => {
            warn(not_made(manifest, &e));
            Ok(None)
        }
    }
}

/// The warning for a check that could not be made.
pub fn not_made(manifest: &Manifest, e: &release::CheckError) -> String {
    format!(
        "release check of {}@{} not made: {e}; run modelcas check {}@{}",
        manifest.repo,
        manifest.commit.to_hex(),
        manifest.repo,
        manifest.commit.to_hex()
    )
}
