//! Last-use records: `repos/<org>/<name>/used/<commit>`, rewritten when a mount, serve,
//! checkout, cat or pull uses the revision, so that `gc --unused-for` can expire what
//! nobody has used for a while (refs, pins and version locks still protect).
//!
//! **Fresh enough for gc.** A process rewrites a revision's record whenever it uses the
//! revision and its own last write of that record is [`REFRESH`] old or older (by this
//! process's clock; a clock that went back counts as due). So a revision in use has a
//! record at most about [`REFRESH`] old (plus the mount's [`MOUNT_DELAY`] and the write
//! itself), and gc refuses an `unused_for` shorter than [`MIN_UNUSED_FOR`], which leaves a
//! wide margin for a slow bucket or a backed-up writer.
//!
//! **Cheap by construction.** At most one write per revision, process and [`REFRESH`],
//! whatever the number of requests: later uses find the claim in memory and write nothing.
//! Readers that must not wait (the mount, serve) hand the write to one background thread
//! (the mount's a moment later, after the first reads, which it would slow down; flushed
//! before the mount exits), and a failed write is a warning, never a failed read (the
//! claim is dropped, so the next use tries again).
//!
//! **The store's clock.** What counts is the object's modification time by the object
//! store's clock (as for leases), compared by gc with the store's own clock, never with a
//! host's. The time is not in the payload, so a late or slow write can never replace a newer
//! time by an older one: whichever write lands last stamps the store's time of that moment,
//! and many processes (mounts on many nodes, several serves) may write one record.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::{LazyLock, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex, MutexGuard};
use quick_cache::sync::{Cache, EntryAction, EntryResult};

use crate::clock;
use crate::error::Result;
use crate::handle::Store;
use crate::manifest::UsedObject;
use format::codec::{self, Kind};
use format::layout;
use format::names::{CommitId, RepoId};

/// How often a process rewrites the record of a revision it keeps using.
pub const REFRESH: Duration = Duration::from_secs(600);

/// The shortest `unused_for` gc accepts: six refresh periods, so that a revision in use
/// never looks unused to gc even when a record's write is late (a slow bucket, a queue of
/// writes, the mount's delay).
pub const MIN_UNUSED_FOR: Duration = Duration::from_secs(3600);

/// Revisions whose last write this process remembers (a location, a repository and a
/// commit: about 150 bytes each). One evicted is written again at its next use, before
/// [`REFRESH`] is over: one PUT more.
pub const WRITTEN_MAX: usize = 16_384;

/// (store location, repository, commit) → when (process clock, ms) this process last
/// claimed the record's write; at most [`WRITTEN_MAX`].
type Written = Cache<(String, RepoId, CommitId), u64>;

static WRITTEN: LazyLock<Written> = LazyLock::new(|| Cache::new(WRITTEN_MAX));

/// Whether a record last written at `last_ms` must be written again at `now_ms`: never
/// written, [`REFRESH`] or more ago, or in the future (this host's clock went back).
fn due(last_ms: Option<u64>, now_ms: u64) -> bool {
    match last_ms {
        None => true,
        Some(last) => now_ms < last || now_ms - last >= REFRESH.as_millis() as u64,
    }
}

/// Claims the write of the record; false when this process wrote it less than
/// [`REFRESH`] ago.
fn claim(store: &Store, repo: &RepoId, commit: &CommitId) -> bool {
    let key = (store.backend().location(), repo.clone(), *commit);
    claim_key(&WRITTEN, &key, clock::now_ms())
}

/// Claims the write of `key` at `now_ms`, looking at its last claim and replacing it in
/// one step (of concurrent callers, one claims).
fn claim_key(written: &Written, key: &(String, RepoId, CommitId), now_ms: u64) -> bool {
    let found = written.entry(key, None, |_, last| {
        if !due(Some(*last), now_ms) {
            return EntryAction::Retain(false);
        }
        *last = now_ms;
        EntryAction::Retain(true)
    });
    match found {
        EntryResult::Retained(claimed) => claimed,
        EntryResult::Vacant(guard) => {
            let _ = guard.insert(now_ms);
            true
        }
        // Not asked for (the callback only retains, and there is no timeout).
        EntryResult::Removed(..) | EntryResult::Replaced(..) | EntryResult::Timeout => false,
    }
}

fn unclaim(store: &Store, repo: &RepoId, commit: &CommitId) {
    let key = (store.backend().location(), repo.clone(), *commit);
    WRITTEN.remove(&key);
}

fn write(store: &Store, repo: &RepoId, commit: &CommitId, by: &str) -> Result<()> {
    let obj = UsedObject {
        commit: *commit,
        used_at: clock::now_secs(),
        by: by.to_string(),
    };
    let bytes = codec::encode(Kind::Used, &obj, false);
    store
        .backend()
        .put(&layout::used_key(repo, commit), &bytes)?;
    Ok(())
}

/// Records that `by` used `repo@commit`, now, unless this process did less than
/// [`REFRESH`] ago.
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

fn queue() -> MutexGuard<'static, Queue> {
    QUEUE.0.lock()
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
    enqueue(store, repo, commit, by, delay);
}

fn enqueue(store: &Store, repo: &RepoId, commit: &CommitId, by: &'static str, delay: Duration) {
    queue().jobs.push_back(Pending {
        store: store.clone(),
        repo: repo.clone(),
        commit: *commit,
        by,
        due: Instant::now() + delay,
    });
    QUEUE.1.notify_all();
}

/// How often the background writer looks at the revisions held in use ([`hold`]).
const HELD_CHECK: Duration = Duration::from_secs(5);

/// (store location, repository, commit) of a revision held in use.
type HeldKey = (String, RepoId, CommitId);

/// A revision held in use: its store, who uses it, and how many holds there are.
struct HeldUse {
    store: Store,
    by: &'static str,
    count: usize,
}

static HELD: LazyLock<Mutex<HashMap<HeldKey, HeldUse>>> = LazyLock::new(Default::default);

fn held() -> MutexGuard<'static, HashMap<HeldKey, HeldUse>> {
    HELD.lock()
}

/// A use that lasts, such as a file a mount holds open (its reads may never reach the
/// mount: passthrough, the page cache, a memory map): while any hold of a revision lives,
/// the background writer rewrites its record every [`REFRESH`]. Dropping it ends the use.
pub struct Hold {
    key: HeldKey,
}

/// Holds `repo@commit` in use by `by` until the returned [`Hold`] is dropped. The first
/// record is written by [`record_in_background`], as for any use; this only keeps it fresh.
pub fn hold(store: &Store, repo: &RepoId, commit: &CommitId, by: &'static str) -> Hold {
    let key = (store.backend().location(), repo.clone(), *commit);
    held()
        .entry(key.clone())
        .or_insert_with(|| HeldUse {
            store: store.clone(),
            by,
            count: 0,
        })
        .count += 1;
    Hold { key }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut h = held();
        if let Some(u) = h.get_mut(&self.key) {
            u.count = u.count.saturating_sub(1);
            if u.count == 0 {
                h.remove(&self.key);
            }
        }
    }
}

/// Queues the records of held revisions that are due (see [`claim`]).
fn renew_held() {
    let due: Vec<(Store, RepoId, CommitId, &'static str)> = held()
        .iter()
        .map(|((_, r, c), u)| (u.store.clone(), r.clone(), *c, u.by))
        .collect();
    for (store, repo, commit, by) in due {
        if claim(&store, &repo, &commit) {
            enqueue(&store, &repo, &commit, by, Duration::ZERO);
        }
    }
}

/// Writes the records still waiting now, and returns once every one is written (or has
/// failed, with its warning).
pub fn flush_background() {
    let mut q = queue();
    q.flush = true;
    QUEUE.1.notify_all();
    while !q.jobs.is_empty() || q.writing > 0 {
        QUEUE.1.wait(&mut q);
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
            .spawn(writer_loop)
            .is_ok()
    })
}

/// The background writer: writes records as they fall due, and every [`HELD_CHECK`]
/// queues those of held revisions that are due again.
fn writer_loop() {
    let mut checked = Instant::now();
    loop {
        if let Some(job) = next_due(HELD_CHECK) {
            if let Err(e) = write(&job.store, &job.repo, &job.commit, job.by) {
                unclaim(&job.store, &job.repo, &job.commit);
                tracing::warn!(
                    repo = %job.repo, commit = %job.commit.to_hex(),
                    "cannot record last use: {e}"
                );
            }
            queue().writing -= 1;
            QUEUE.1.notify_all();
        }
        if checked.elapsed() >= HELD_CHECK {
            checked = Instant::now();
            renew_held();
        }
    }
}

/// Waits (at most `max_wait`) for the first record to be due (or a flush), takes it and
/// counts it as being written; `None` when nothing fell due in time.
fn next_due(max_wait: Duration) -> Option<Pending> {
    let until = Instant::now() + max_wait;
    let mut q = queue();
    loop {
        let now = Instant::now();
        let left = until.saturating_duration_since(now);
        let wait = q.jobs.front().map(|j| j.due.saturating_duration_since(now));
        match wait {
            Some(d) if d.is_zero() || q.flush => {
                if let Some(job) = q.jobs.pop_front() {
                    q.writing += 1;
                    return Some(job);
                }
            }
            _ if left.is_zero() => return None,
            Some(d) => {
                QUEUE.1.wait_for(&mut q, d.min(left));
            }
            None => {
                QUEUE.1.wait_for(&mut q, left);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_due_again_after_the_refresh_period_or_when_the_clock_went_back() {
        let r = REFRESH.as_millis() as u64;
        let t = 1_000_000_000;
        assert!(due(None, t));
        assert!(!due(Some(t), t));
        assert!(!due(Some(t), t + r - 1));
        assert!(due(Some(t), t + r));
        // 13 hours of reads within one UTC day: rewritten, not left 13 hours old.
        assert!(due(Some(t), t + 13 * 3600 * 1000));
        assert!(due(Some(t), t - 1));
        // gc's floor leaves room for several refreshes.
        assert!(MIN_UNUSED_FOR >= 4 * REFRESH);
    }

    #[test]
    fn claims_are_remembered_once_per_refresh_within_their_bound() {
        let written: Written = Cache::new(WRITTEN_MAX);
        let repo = RepoId::parse("org/model").unwrap();
        let key = |i: usize| {
            let mut c = [0u8; 20];
            c[..8].copy_from_slice(&(i as u64).to_le_bytes());
            ("/store".to_string(), repo.clone(), CommitId(c))
        };
        let t = 1_000_000_000;
        assert!(claim_key(&written, &key(0), t));
        assert!(
            !claim_key(&written, &key(0), t + 1),
            "claimed within the refresh"
        );
        let r = REFRESH.as_millis() as u64;
        assert!(claim_key(&written, &key(0), t + r), "due again");
        assert_eq!(written.capacity(), WRITTEN_MAX as u64);
        let n = WRITTEN_MAX * 10;
        let mut most = 0;
        for i in 1..n {
            assert!(claim_key(&written, &key(i), t));
            most = most.max(written.len());
            assert!(written.len() <= WRITTEN_MAX);
        }
        assert!(written.len() > WRITTEN_MAX / 2);
        // The last claim is remembered: claimed again within the refresh, it is refused.
        assert!(!claim_key(&written, &key(n - 1), t + 1));
        println!(
            "cache-bound repo usage written: bound {WRITTEN_MAX} entries; after {n} inserts: {} entries \
             (at most {most})",
            written.len()
        );
    }
}
