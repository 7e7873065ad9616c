//! Last-use records: `repos/<org>/<name>/used/<commit>`, rewritten when a mount, serve,
//! checkout, cat or pull reads the revision, so that `gc --unused-for` can expire what
//! nobody has read for a while (refs, pins and version locks still protect).
//!
//! Cheap by construction: a process writes a revision's record at most once per day (the
//! first read of the day; later reads find it in memory and write nothing), readers that
//! must not wait (the mount, serve) hand it to one background thread (the mount's a moment
//! later, after the first reads, which it would slow down; flushed before the mount
//! exits), and a failed write
//! is a warning, never a failed read. What counts is the object's modification time by
//! the object store's clock (as for leases): gc compares it with the store's own clock,
//! never with a host's.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::{Condvar, LazyLock, Mutex, OnceLock};
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

/// How long the mount's records wait before they are written: the first reads of a
/// revision (a pod starting) do not share the disk, or the store's directories, with them.
pub const MOUNT_DELAY: Duration = Duration::from_secs(1);

/// A record to write from the background, and when.
struct Pending {
    store: Store,
    repo: RepoId,
    commit: CommitId,
    by: &'static str,
    due: Instant,
}

/// The background writer's queue: records in the order they are due (each caller uses one
/// delay), how many are being written, and whether [`flush_background`] is waiting.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Pending>,
    writing: usize,
    flush: bool,
}

static QUEUE: LazyLock<(Mutex<Queue>, Condvar)> = LazyLock::new(Default::default);

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.0.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`record`] from the one background thread, `delay` later, for readers that must not
/// wait on the bucket (the mount, serve): a failure is logged as a warning. A process that
/// exits calls [`flush_background`] first.
pub fn record_in_background(
    store: &Store,
    repo: &RepoId,
    commit: &CommitId,
    by: &'static str,
    delay: Duration,
) {
    if !claim(store, repo, commit) {
        return;
    }
    if !writer_started() {
        unclaim(store, repo, commit);
        tracing::warn!("cannot record last use: no background thread");
        return;
    }
    queue().jobs.push_back(Pending {
        store: store.clone(),
        repo: repo.clone(),
        commit: *commit,
        by,
        due: Instant::now() + delay,
    });
    QUEUE.1.notify_all();
}

/// Writes the records still waiting now, and returns once every one is written (or has
/// failed, with its warning).
pub fn flush_background() {
    let mut q = queue();
    q.flush = true;
    QUEUE.1.notify_all();
    while !q.jobs.is_empty() || q.writing > 0 {
        q = QUEUE.1.wait(q).unwrap_or_else(|p| p.into_inner());
    }
    q.flush = false;
}

/// Starts the background writer now rather than on the first record: a reader that
/// records uses (the mount, serve) calls it at start, so that the first open of a revision
/// does not also start a thread while its first read is being served.
pub fn start_background_writer() {
    if !writer_started() {
        tracing::warn!("cannot record last use: no background thread");
    }
}

/// Starts the background writer on first use; false when no thread could start.
fn writer_started() -> bool {
    static STARTED: OnceLock<bool> = OnceLock::new();
    *STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("last-use".into())
            .spawn(|| loop {
                let job = next_due();
                if let Err(e) = write(&job.store, &job.repo, &job.commit, job.by) {
                    unclaim(&job.store, &job.repo, &job.commit);
                    tracing::warn!(
                        repo = %job.repo, commit = %job.commit.to_hex(),
                        "cannot record last use: {e}"
                    );
                }
                queue().writing -= 1;
                QUEUE.1.notify_all();
            })
            .is_ok()
    })
}

/// Waits for the first record to be due (or a flush), takes it and counts it as being
/// written.
fn next_due() -> Pending {
    let mut q = queue();
    loop {
        let wait = q
            .jobs
            .front()
            .map(|j| j.due.saturating_duration_since(Instant::now()));
        match wait {
            Some(d) if d.is_zero() || q.flush => {
                if let Some(job) = q.jobs.pop_front() {
                    q.writing += 1;
                    return job;
                }
            }
            Some(d) => {
                q = QUEUE
                    .1
                    .wait_timeout(q, d)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => q = QUEUE.1.wait(q).unwrap_or_else(|p| p.into_inner()),
        }
    }
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
