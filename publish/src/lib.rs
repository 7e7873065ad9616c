//! Publishing into a store through the hub: the write side of the Hub commit API
//! (`hf upload`, `HfApi.upload_folder`, `push_to_hub` pointed at `modelcas serve`).
//!
//! A client uploads the bytes of each large file first (an LFS `PUT`), then sends one
//! commit: a list of operations (add a file, inline or by the sha256 of an uploaded
//! object; delete a file or a folder) on a branch. [`Publisher`] owns both halves:
//!
//! - **Objects** go to the [`spool::Spool`] on this machine's disk, streamed and checked
//!   (length and sha256 as declared) before they are kept under their hash.
//! - **A commit** ([`Publisher::commit`]) is applied to the branch's head revision: the
//!   head's files that stay are taken by their chunk lists (never read or sent again),
//!   added files are read from the spool (or from any revision of the repository holding
//!   the same sha256). The resulting file list is published through `store::ingest`, so
//!   it is chunked, deduplicated against everything stored, release-checked and written
//!   as any ingest is: packs, then the manifest, then the branch's ref. A commit that
//!   fails at any point has published nothing; what it wrote before is unreferenced packs
//!   that gc reclaims.
//!
//! One commit per branch at a time in this process: a second commit to a branch while
//! one is being applied is refused ([`PublishError::Conflict`]), and a commit naming the
//! parent it was built on is refused when the branch has moved since
//! ([`PublishError::Moved`]). docs/FORMAT.md ("Uploads") states the protocol and its
//! safety argument.

pub mod spool;
pub mod xet;

mod apply;
mod error;
mod opener;
mod request;

use std::collections::HashSet;
use std::path::Path;

use format::{CommitId, RepoId, Sha256};
use index::Index;
use parking_lot::Mutex;
use repo::lock::Held;
use repo::{Store, StoreError};

pub use apply::Applied;
pub use error::PublishError;
pub use request::{CommitRequest, Content, Operation};

/// What a commit made.
#[derive(Clone, Debug)]
pub struct Committed {
    /// The revision the branch now names (the head itself when nothing changed).
    pub commit: CommitId,
    /// Files in it.
    pub files: usize,
    /// Whether the branch was left where it was because the revision's release check did
    /// not pass and the hub holds failing revisions' refs.
    pub held: bool,
    /// Files read to make it (added files; the head's are taken by chunk list).
    pub files_read: usize,
    /// Chunks new to the store, and their uncompressed bytes.
    pub new_chunks: u64,
    pub new_chunk_bytes: u64,
    /// Bytes of the packs written.
    pub pack_bytes_written: u64,
}

/// The write side of one hub: its spool, and the branches being committed to.
pub struct Publisher {
    store: Store,
    spool: spool::Spool,
    /// (repository, branch) of the commits being applied now.
    busy: Mutex<HashSet<(String, String)>>,
    /// Whether a revision whose release check does not pass leaves its branch unmoved.
    hold_failing_refs: bool,
    /// The Xet chunk lists of stored files, for the global dedup query (`None`: off).
    xet: Option<std::sync::Arc<xet::stored::StoredXet>>,
    /// Makes chunk lists of stored files in the background.
    indexer: Option<xet::indexer::Indexer>,
    /// The key of the chunk hashes in dedup answers.
    dedup_key: [u8; 32],
}

impl Publisher {
    /// A publisher into `store` spooling uploads in `spool`.
    pub fn new(store: Store, spool: spool::Spool) -> Publisher {
        Publisher {
            store,
            spool,
            busy: Mutex::new(HashSet::new()),
            hold_failing_refs: false,
            xet: None,
            indexer: None,
            dedup_key: [0; 32],
        }
    }

    /// The same publisher, answering Xet's global dedup query from the chunk lists of the
    /// files uploaded through Xet (kept in the spool's `xet-files/`), their chunk hashes
    /// keyed with `key`.
    pub fn with_global_dedup(mut self, key: [u8; 32]) -> Result<Publisher, PublishError> {
        let stored = std::sync::Arc::new(xet::stored::StoredXet::open(
            &self.spool.dir().join("xet-files"),
        )?);
        self.indexer = Some(xet::indexer::Indexer::start(
            self.store.clone(),
            stored.clone(),
        )?);
        self.xet = Some(stored);
        self.dedup_key = key;
        Ok(self)
    }

    /// Makes, in the background, the Xet chunk lists of the files of `repo`'s revisions
    /// that have none (a client is about to upload to it through Xet).
    pub fn prepare(&self, repo: &RepoId) {
        if let Some(i) = &self.indexer {
            i.queue(repo);
        }
    }

    /// The answer to Xet's global dedup query for `chunk`: the repository of a revision
    /// holding it and the shard to send (`None`: nothing known, 404).
    ///
    /// A record whose revision is gone (`rm`, gc) answers nothing: it is forgotten and its
    /// repository indexed again (another of its revisions may hold the file), so that the
    /// client sends the chunks instead of naming a stored xorb the store no longer has.
    pub fn dedup(&self, chunk: &format::XetHash) -> Option<(RepoId, Vec<u8>)> {
        let now = repo::manifest::now_secs();
        let xet = self.xet.as_ref()?;
        let a = xet.dedup_shard(chunk, &self.dedup_key, now, now + 3600)?;
        match self.store.has_commit(&a.repo, &a.commit) {
            Ok(true) => Some((a.repo, a.shard)),
            Ok(false) => {
                tracing::info!(
                    "the Xet chunk list of {} names {}@{}, which is gone: forgotten",
                    a.sha,
                    a.repo,
                    a.commit
                );
                xet.forget(&a.sha);
                self.prepare(&a.repo);
                None
            }
            Err(e) => {
                tracing::warn!(
                    "global dedup: cannot tell whether {}@{} is stored: {e}",
                    a.repo,
                    a.commit
                );
                None
            }
        }
    }

    /// The same publisher, leaving a branch unmoved when its new revision's release check
    /// does not pass.
    pub fn hold_failing_refs(mut self, hold: bool) -> Publisher {
        self.hold_failing_refs = hold;
        self
    }

    /// The spool.
    pub fn spool(&self) -> &spool::Spool {
        &self.spool
    }

    /// For each content (sha256, size), whether it need not be uploaded for a commit to
    /// `repo`: the spool holds it, or a revision of `repo` has a file with it. Content held
    /// only by other repositories is uploaded again (its chunks are still stored once): a
    /// hash alone is no proof that the uploader has the bytes.
    pub fn present(
        &self,
        repo: &RepoId,
        objects: &[(Sha256, u64)],
    ) -> Result<Vec<bool>, PublishError> {
        let mut stored = None;
        let mut out = Vec::with_capacity(objects.len());
        for (sha256, size) in objects {
            if self.spool.object(repo, sha256, *size).is_some() {
                out.push(true);
                continue;
            }
            let stored = match &mut stored {
                Some(s) => s,
                None => stored.insert(apply::stored_files(&self.store, repo)?),
            };
            out.push(
                stored
                    .get(sha256)
                    .is_some_and(|(m, i)| m.files[*i].size == *size),
            );
        }
        Ok(out)
    }

    /// Receives an object uploaded for `repo` (streamed from `body`, checked, spooled).
    pub fn receive(
        &self,
        repo: &RepoId,
        sha256: &Sha256,
        size: u64,
        body: &mut dyn std::io::Read,
    ) -> Result<(), PublishError> {
        self.spool.receive(repo, sha256, size, body).map(|_| ())
    }

    /// Receives a Xet xorb (checked, spooled); whether it was new.
    pub fn receive_xorb(
        &self,
        hash: &format::XetHash,
        body: &mut dyn std::io::Read,
    ) -> Result<bool, PublishError> {
        self.spool.receive_xorb(hash, body)
    }

    /// Receives a Xet shard sent for `repo`: each file it describes is checked against the
    /// spooled (or stored) xorbs and kept whole in the spool, as `repo`'s, under its
    /// SHA-256. Returns their SHA-256s.
    ///
    /// Its terms may name the stored xorbs of content recorded for repositories `visible`
    /// accepts; any other reads as a xorb this hub does not have (no answer tells a writer
    /// what a repository hidden from it holds).
    pub fn receive_shard(
        &self,
        repo: &RepoId,
        body: &mut dyn std::io::Read,
        visible: &dyn Fn(&RepoId) -> bool,
    ) -> Result<Vec<Sha256>, PublishError> {
        let stored = VisibleStored {
            publisher: self,
            visible,
        };
        Ok(xet::shard::receive(&self.spool, repo, &stored, body)?.sha256s)
    }

    /// Applies `req` to its branch and publishes the result through `index`.
    pub fn commit(&self, index: &Index, req: &CommitRequest) -> Result<Committed, PublishError> {
        format::names::check_ref_name(&req.branch)
            .map_err(|e| PublishError::BadRequest(format!("branch {:?}: {e}", req.branch)))?;
        let key = (
            req.repo.to_string().to_ascii_lowercase(),
            req.branch.clone(),
        );
        if !self.busy.lock().insert(key.clone()) {
            return Err(PublishError::Conflict(format!(
                "another commit to {} branch {} is being applied; try again when it is done",
                req.repo, req.branch
            )));
        }
        let out = self.commit_locked(index, req);
        self.busy.lock().remove(&key);
        out
    }

    /// Takes the branch's commit lock in the store (other hubs over the store commit to
    /// it one at a time, as this process's commits do), then applies the commit.
    fn commit_locked(&self, index: &Index, req: &CommitRequest) -> Result<Committed, PublishError> {
        let lock = match Held::commit_lock(self.store.backend().clone(), &req.repo, &req.branch) {
            Ok(l) => l,
            Err(StoreError::LockHeld { holder, .. }) => {
                return Err(PublishError::Conflict(format!(
                    "another hub ({holder}) is applying a commit to {} branch {}; try again when it is done",
                    req.repo, req.branch
                )))
            }
            Err(e) => return Err(e.into()),
        };
        repo::failpoint::pause("publish-commit-start");
        // Under the lock: a tag made of the branch's name since the hub looked is refused.
        if self.store.is_tag(&req.repo, &req.branch)? {
            return Err(PublishError::BadRequest(format!(
                "{} is a tag of {}: tags do not move; commit to a branch",
                req.branch, req.repo
            )));
        }
        let applied = apply::apply(&self.store, &self.spool, req)?;
        let report =
            match opener::publish(&self.store, index, req, &applied, self.hold_failing_refs, &lock) {
                Ok(r) => r,
                Err(PublishError::Store(StoreError::LockLost { reason, .. })) => {
                    return Err(PublishError::Conflict(format!(
                        "the commit lock of {} branch {} was lost ({reason}); the branch was not moved; try again",
                        req.repo, req.branch
                    )))
                }
                Err(e) => {
                    self.drop_damaged(&req.repo, &applied);
                    return Err(e);
                }
            };
        let outcome = report.snapshots.first().ok_or_else(|| {
            PublishError::Io("internal error: the commit's ingest reported no revision".into())
        })?;
        self.record_chunk_lists(req, outcome.commit, &applied);
        self.prepare(&req.repo);
        for sha in applied.spooled() {
            self.spool.remove(&req.repo, sha);
        }
        self.spool.maybe_prune();
        Ok(Committed {
            commit: outcome.commit,
            files: outcome.files,
            held: !outcome.refs_held.is_empty(),
            files_read: report.files_read.saturating_sub(report.files_unchanged),
            new_chunks: report.new_chunks,
            new_chunk_bytes: report.new_chunk_bytes,
            pack_bytes_written: report.pack_bytes_written,
        })
    }
}

impl Publisher {
    /// After a commit failed: removes the spooled objects it took that no longer hold the
    /// bytes their name says (damaged on disk), so that the client's next try uploads them
    /// again instead of failing the same way until they expire.
    fn drop_damaged(&self, repo: &RepoId, applied: &Applied) {
        for (path, (src, _)) in &applied.files {
            let apply::Source::Spooled {
                path: p, sha256, ..
            } = src
            else {
                continue;
            };
            let right = std::fs::File::open(p).ok().and_then(|mut f| {
                let mut h = <sha2::Sha256 as sha2::Digest>::new();
                std::io::copy(&mut f, &mut h).ok()?;
                Some(Sha256(sha2::Digest::finalize(h).into()) == *sha256)
            });
            if right == Some(false) {
                tracing::warn!(
                    "{repo} {path}: the spooled upload is damaged; dropped (upload it again)"
                );
                self.spool.remove(repo, sha256);
            }
        }
    }

    /// Records the Xet chunk lists of the spooled files a commit stored (those a shard
    /// made), for the global dedup query. A failure only costs dedup: it is logged.
    fn record_chunk_lists(&self, req: &CommitRequest, commit: CommitId, applied: &Applied) {
        let Some(xet) = &self.xet else { return };
        for (path, (src, _)) in &applied.files {
            let apply::Source::Spooled { sha256, .. } = src else {
                continue;
            };
            let Some(chunks) = self.spool.chunks(&req.repo, sha256) else {
                continue;
            };
            let rec = xet::stored::FileRecord {
                repo: req.repo.clone(),
                commit,
                path: path.clone(),
                chunks,
            };
            if let Err(e) = xet.add(*sha256, &rec) {
                tracing::warn!("recording the Xet chunk list of {path}: {e}");
            }
        }
    }
}

/// The stored xorbs a shard may name: those of content recorded for a repository
/// `visible` accepts.
struct VisibleStored<'a> {
    publisher: &'a Publisher,
    visible: &'a dyn Fn(&RepoId) -> bool,
}

impl xet::shard::StoredXorbs for VisibleStored<'_> {
    fn read(
        &self,
        xorb: &format::XetHash,
        start: usize,
        end: usize,
        sink: &mut xet::shard::ChunkSink<'_>,
    ) -> Result<bool, PublishError> {
        let me = self.publisher;
        let Some((sha, g, rec)) = me.xet.as_ref().and_then(|x| x.xorb(xorb)) else {
            return Ok(false);
        };
        if !(self.visible)(&rec.repo) {
            return Ok(false);
        }
        let n = rec.chunks.len();
        if end > n {
            return Err(PublishError::BadObject(format!(
                "shard: a term names chunks [{start}, {end}) of stored xorb {xorb}, which has {n}"
            )));
        }
        let mut in_sink = false;
        let read = xet::stored_read::read(
            &me.store,
            &sha,
            &rec,
            g.offset,
            (start, end),
            &mut |data: &[u8], h| {
                let r = sink(data, h);
                in_sink = r.is_err();
                r
            },
        );
        match read {
            Ok(()) => Ok(true),
            Err(e) if in_sink || transient(&e) => Err(e),
            Err(e) => {
                // Gone or damaged in the store: forgotten, so the dedup query stops naming
                // it and the client's next try sends the chunks.
                tracing::error!(
                    "stored xorb {xorb} (content {sha} of {}@{}) does not read back: {e}; its Xet chunk list is forgotten",
                    rec.repo,
                    rec.commit
                );
                if let Some(x) = &me.xet {
                    x.forget(&sha);
                }
                Err(PublishError::BadObject(format!(
                    "shard: stored xorb {xorb} cannot be read back ({e}); this hub has forgotten it: upload again, sending its chunks"
                )))
            }
        }
    }
}

/// Whether `e` may pass by itself (the object store unreachable), rather than say that
/// the bytes are gone or damaged.
fn transient(e: &PublishError) -> bool {
    matches!(e, PublishError::Store(StoreError::Object(o)) if !o.is_not_found())
}

/// The default spool directory for a store: `<cache>/modelcas/uploads/<store id>`.
pub fn default_spool_dir(cache: &Path, store_id: &[u8; 16]) -> std::path::PathBuf {
    cache.join("modelcas/uploads").join(hex::encode(store_id))
}

#[cfg(test)]
mod tests;
