//! The Xet chunk lists of stored files that came in another way (ingest, pull, an LFS
//! upload, a base revision), made in the background so that Xet's global dedup query can
//! answer for them too: a repository is queued when a client asks for a Xet write token
//! for it (its uploads are about to start) and after each commit to it; one thread reads
//! the files of its refs' revisions that have no record yet through the read path (every
//! chunk checked), cuts them as Xet does and records their chunk lists.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use format::{RepoId, Sha256, XetHash};
use parking_lot::Mutex;
use read::file_reader::FileReader;
use repo::manifest::{FileEntry, Manifest};
use repo::Store;

use super::stored::{FileRecord, StoredXet};
use crate::error::PublishError;

/// Repositories waiting; more are dropped (asked again at the next token or commit).
const QUEUE: usize = 64;

/// The background indexer of one hub.
pub struct Indexer {
    tx: SyncSender<RepoId>,
    queued: Arc<Mutex<HashSet<String>>>,
}

impl Indexer {
    /// Starts the thread indexing into `stored` from `store`.
    pub fn start(store: Store, stored: Arc<StoredXet>) -> Result<Indexer, PublishError> {
        let (tx, rx) = sync_channel::<RepoId>(QUEUE);
        let queued = Arc::new(Mutex::new(HashSet::new()));
        let q = queued.clone();
        std::thread::Builder::new()
            .name("xet-indexer".into())
            .spawn(move || {
                let mut failed = Failed::default();
                for repo in rx {
                    if let Err(e) = index_repo(&store, &stored, &repo, &mut failed) {
                        tracing::warn!("indexing {repo} for Xet dedup: {e}");
                    }
                    q.lock().remove(&repo.folded());
                }
            })
            .map_err(|e| PublishError::Io(format!("starting the Xet indexer: {e}")))?;
        Ok(Indexer { tx, queued })
    }

    /// Queues `repo` (once until it is done).
    pub fn queue(&self, repo: &RepoId) {
        if !self.queued.lock().insert(repo.folded()) {
            return;
        }
        if let Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) =
            self.tx.try_send(repo.clone())
        {
            self.queued.lock().remove(&r.folded());
        }
    }
}

/// How long a file whose chunk list could not be made is passed over: a damaged file is
/// not read again from its start at every token request.
const RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Most files remembered as failed (then forgotten all at once).
const MAX_FAILED: usize = 4096;

/// Files whose chunk list could not be made, and when.
#[derive(Default)]
struct Failed(HashMap<Sha256, Instant>);

impl Failed {
    fn recently(&self, sha: &Sha256) -> bool {
        self.0.get(sha).is_some_and(|t| t.elapsed() < RETRY_AFTER)
    }

    fn note(&mut self, sha: Sha256) {
        if self.0.len() >= MAX_FAILED {
            self.0.clear();
        }
        self.0.insert(sha, Instant::now());
    }
}

/// Records the chunk lists of the files of `repo`'s refs' revisions that have none. A file
/// that fails (damaged in the store) is logged, passed over for [`RETRY_AFTER`], and the
/// others are still indexed.
fn index_repo(
    store: &Store,
    stored: &StoredXet,
    repo: &RepoId,
    failed: &mut Failed,
) -> Result<(), PublishError> {
    let refs = match store.refs(repo) {
        Ok(r) => r,
        Err(repo::StoreError::UnknownRepo(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let commits: HashSet<_> = refs.values().copied().collect();
    for commit in commits {
        let m = store.manifest_resolved(repo, &commit)?;
        for f in &m.files {
            if f.size == 0 || stored.has(&f.sha256) || failed.recently(&f.sha256) {
                continue;
            }
            let chunks = match chunk_list(store, &m, f) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("indexing {repo}@{commit} {} for Xet dedup: {e}", f.path);
                    failed.note(f.sha256);
                    continue;
                }
            };
            let rec = FileRecord {
                repo: repo.clone(),
                commit,
                path: f.path.clone(),
                chunks,
            };
            stored.add(f.sha256, &rec)?;
        }
    }
    Ok(())
}

/// The Xet chunks (hash, length) of a stored file, read through the read path.
pub(crate) fn chunk_list(
    store: &Store,
    m: &Manifest,
    f: &FileEntry,
) -> Result<Vec<(XetHash, u32)>, PublishError> {
    let r = FileReader::new(store, m, f)?.into_read();
    chunks_of(r).map_err(|e| PublishError::Io(format!("{}: {e}", f.path)))
}

/// The Xet chunks (hash, length) of what `r` reads, cut as Xet cuts.
pub(crate) fn chunks_of(mut r: impl Read) -> std::io::Result<Vec<(XetHash, u32)>> {
    let mut list = xethash::ChunkList::default();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match r.read(&mut buf)? {
            0 => return Ok(list.finish()),
            n => list.update(&buf[..n]),
        }
    }
}
