//! Last-use records: `repos/<org>/<name>/used/<commit>`, rewritten when a mount, serve,
//! checkout, cat or pull reads the revision, so that `gc --unused-for` can expire what
//! nobody has read for a while (refs, pins and version locks still protect).
//!
//! Cheap by construction: a process writes a revision's record at most once per day (the
//! first read of the day; later reads find it in memory and write nothing), readers that
//! must not wait (the mount, serve) hand it to one background thread that writes it a
//! moment later (after the first reads, which it would slow down), and a failed write
//! is a warning, never a failed read. What counts is the object's modification time by
//! the object store's clock (as for leases): gc compares it with the store's own clock,
//! never with a host's.

use std::collections::HashMap;
use std::sync::{mpsc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use crate::codec::{self, Kind};
use crate::handle::Store;
use crate::layout;
use crate::manifest::UsedObject;
use crate::names::{CommitId, RepoId};
use crate::{clock, Result};

/// (store location, repository, commit) → the day (process clock) its record was written.
type Written = HashMap<(String, RepoId, CommitId), u64>;

static WRITTEN: LazyLock<Mutex<Written>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn today() -> u64 {
    clock::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0)
}

/// Claims today's write of the record; false when this process already wrote it today.
fn claim(store: &Store, repo: &RepoId, commit: &CommitId) -> bool {
    let key = (store.backend().location(), repo.clone(), *commit);
    let day = today();
    let mut w = WRITTEN.lock().unwrap_or_else(|p| p.into_inner());
    if w.get(&key) == Some(&day) {
        return false;
    }
    w.insert(key, day);
    true
}

fn unclaim(store: &Store, repo: &RepoId, commit: &CommitId) {
    let key = (store.backend().location(), repo.clone(), *commit);
    WRITTEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
}

fn write(store: &Store, repo: &RepoId, commit: &CommitId, by: &str) -> Result<()> {
    let obj = UsedObject {
        commit: *commit,
        used_at: crate::manifest::now_secs(),
        by: by.to_string(),
    };
    let bytes = codec::encode(Kind::Used, &obj, false);
    store
        .backend()
        .put(&layout::used_key(repo, commit), &bytes)?;
    Ok(())
}

/// Records that `by` read `repo@commit`, now, unless this process already did today.
/// Returns whether a record was written.
pub fn record(store: &Store, repo: &RepoId, commit: &CommitId, by: &str) -> Result<bool> {
    if !claim(store, repo, commit) {
        return Ok(false);
    }
    match write(store, repo, commit, by) {
        Ok(()) => Ok(true),
        Err(e) => {
            unclaim(store, repo, commit);
            Err(e)
        }
    }
}

/// How long a reader's record waits before it is written: the first reads of a revision
/// (a pod starting) do not share the disk, or the store's directories, with it.
pub const BACKGROUND_DELAY: Duration = Duration::from_secs(1);

/// A record to write from the background, and when.
struct Pending {
    store: Store,
    repo: RepoId,
    commit: CommitId,
    by: &'static str,
    due: Instant,
}

/// [`record`] from a background thread, [`BACKGROUND_DELAY`] later, for readers that must
/// not wait on the bucket (the mount, serve): a failure is logged as a warning.
pub fn record_in_background(store: &Store, repo: &RepoId, commit: &CommitId, by: &'static str) {
    if !claim(store, repo, commit) {
        return;
    }
    let job = Pending {
        store: store.clone(),
        repo: repo.clone(),
        commit: *commit,
        by,
        due: Instant::now() + BACKGROUND_DELAY,
    };
    let sent = background()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|tx| tx.send(job).is_ok());
    if sent != Some(true) {
        unclaim(store, repo, commit);
        tracing::warn!("cannot record last use: no background thread");
    }
}

/// The queue of the one thread that writes background records, started on first use.
fn background() -> &'static Mutex<Option<mpsc::Sender<Pending>>> {
    static TX: OnceLock<Mutex<Option<mpsc::Sender<Pending>>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Pending>();
        let spawned = std::thread::Builder::new()
            .name("last-use".into())
            .spawn(move || {
                for job in rx {
                    std::thread::sleep(job.due.saturating_duration_since(Instant::now()));
                    if let Err(e) = write(&job.store, &job.repo, &job.commit, job.by) {
                        unclaim(&job.store, &job.repo, &job.commit);
                        tracing::warn!(
                            repo = %job.repo, commit = %job.commit.to_hex(),
                            "cannot record last use: {e}"
                        );
                    }
                }
            });
        Mutex::new(spawned.ok().map(|_| tx))
    })
}

/// When each commit of `repo` was last read, by the store's clock (one LIST). Commits
/// never read since this feature exists are absent.
pub fn last_used(store: &Store, repo: &RepoId) -> Result<HashMap<CommitId, SystemTime>> {
    let prefix = layout::used_prefix(repo);
    let mut out = HashMap::new();
    for o in store.backend().list(&prefix)? {
        if let (Ok(c), Some(at)) = (CommitId::parse(&o.key[prefix.len()..]), o.modified) {
            out.insert(c, at);
        }
    }
    Ok(out)
}
