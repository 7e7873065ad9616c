//! The applied commit published through ingest: one snapshot whose sources are spooled
//! objects (read and chunked like any file) and stored files (taken by their chunk lists
//! unread where the index places every chunk, else read back and checked).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use format::Sha256;
use index::Index;
use read::chunk_map::ChunkMap;
use read::file_reader::FileReader;
use read::progress::NoProgress;
use repo::lock::Held;
use repo::{Store, StoreError};
use store::ingest::{ingest_from, IngestOptions, IngestReport, Opened, Opener};
use store::source::{Snapshot, SourceFile};

use crate::apply::{Applied, Source};
use crate::error::PublishError;
use crate::request::CommitRequest;

/// Where each source's bytes are, by the source name ingest gives back.
enum Plan<'a> {
    Spooled(&'a Path),
    Stored {
        path: &'a str,
        sha256: Sha256,
        map: ChunkMap,
    },
}

struct CommitOpener<'a> {
    store: &'a Store,
    plans: HashMap<PathBuf, Plan<'a>>,
    /// The branch's commit lock, confirmed just before the branch moves.
    lock: &'a Held,
}

impl Opener for CommitOpener<'_> {
    fn open(&self, source: &Path) -> repo::Result<Box<dyn Read + Send + '_>> {
        match self.open_source(source)? {
            Opened::Stream(r) | Opened::Stored { fallback: r, .. } => Ok(r),
            Opened::File(f) => Ok(Box::new(f)),
        }
    }

    fn before_refs(&self) -> repo::Result<()> {
        self.lock.check()
    }

    fn open_source(&self, source: &Path) -> repo::Result<Opened<'_>> {
        let unknown = || StoreError::Invalid(format!("commit: no source {}", source.display()));
        match self.plans.get(source).ok_or_else(unknown)? {
            // A stream, not a file: ingest records no stamp of a spool file (its name is reused).
            // Opened now, one at a time, whatever the number of files.
            Plan::Spooled(p) => {
                let f = std::fs::File::open(p).map_err(|e| {
                    StoreError::Invalid(format!(
                        "{}: the uploaded file is no longer in the spool ({e}); upload it again",
                        source.display()
                    ))
                })?;
                Ok(Opened::Stream(Box::new(f)))
            }
            Plan::Stored { path, sha256, map } => Ok(Opened::Stored {
                sha256: *sha256,
                chunks: map.sources.iter().map(|c| (c.id, c.raw_len)).collect(),
                fallback: Box::new(
                    FileReader::of_chunks(self.store, path, *sha256, map).into_read(),
                ),
            }),
        }
    }
}

/// Publishes `applied` as the new revision of `req.branch` through `index`.
pub(crate) fn publish(
    store: &Store,
    index: &Index,
    req: &CommitRequest,
    applied: &Applied,
    hold_failing_refs: bool,
    lock: &Held,
) -> Result<IngestReport, PublishError> {
    let mut plans = HashMap::new();
    let mut files = Vec::with_capacity(applied.files.len());
    for (path, (src, executable)) in &applied.files {
        // One source per file, named by its path in the revision (ingest's errors name it).
        let source = PathBuf::from(path);
        let (size, sha, plan) = match src {
            Source::Spooled {
                path: p,
                sha256,
                size,
            } => (*size, *sha256, Plan::Spooled(p)),
            Source::Stored { manifest, index } => {
                let f = &manifest.files[*index];
                let map = ChunkMap::new(manifest, f)?;
                (
                    f.size,
                    f.sha256,
                    Plan::Stored {
                        path: &f.path,
                        sha256: f.sha256,
                        map,
                    },
                )
            }
        };
        plans.insert(source.clone(), plan);
        files.push(SourceFile {
            path: path.clone(),
            source,
            size,
            executable: *executable,
            expected_sha256: Some(sha),
            expected_xet: None,
        });
    }
    let snapshot = Snapshot {
        repo: req.repo.clone(),
        commit: None,
        refs: vec![req.branch.clone()],
        files,
        origin: "upload",
        dir: PathBuf::from(format!("upload to {} {}", req.repo, req.branch)),
        labels: Vec::new(),
    };
    let opts = IngestOptions {
        hold_failing_refs,
        checked_by: "upload",
        ..Default::default()
    };
    let opener = CommitOpener { store, plans, lock };
    Ok(ingest_from(
        store,
        index,
        &[snapshot],
        opts,
        &opener,
        &NoProgress,
    )?)
}
