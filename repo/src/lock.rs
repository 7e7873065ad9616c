//! Locks and leases: small objects under `locks/` that tell other processes who is working.
//!
//! * A **gc lock** (`locks/gc-<id>`) makes gc runs exclusive. S3 has no reliable
//!   put-if-absent (Garage ignores `If-None-Match`), so a gc writes its own lock object,
//!   then lists `locks/gc-`: if any *other* live gc lock is there it removes its own and
//!   backs off. With read-after-write consistent listings, of two gc runs starting
//!   together at least one sees the other, so two never work at once (both may back off).
//! * An **ingest lease** (`locks/ingest-<id>`) says "an ingest started at this time and may
//!   deduplicate against any pack that was not condemned then". gc never deletes a pack
//!   condemned after a live lease started (see `gc`).
//! * A **write lease** (`locks/write-<id>`) is held by `pin`, `ref` and `rm` while they
//!   check that a commit exists and write or delete what names it. gc, after deleting
//!   expired manifests, waits until the write leases live then are released before it
//!   lists refs and pins again (see `gc`).
//!
//! * A **commit lock** (`locks/commit.<16 hex>-<id>`) makes commits to one branch of one
//!   repository exclusive across hubs, as the gc lock makes gc runs (see
//!   [`Held::commit_lock`]).
//!
//! All are refreshed (re-PUT) by a background thread every quarter of their time to live.
//! **Age is the store's**: an object's age is the object store's current time
//! ([`ObjectStore::now`], read *before* listing) minus the object's modification time, both
//! by the store's clock, so no host's clock is compared with another's. An object is
//! *stale* when that age reaches its time to live, or when it was written on this host by
//! a process that no longer exists.
//!
//! A holder *confirms* before it publishes ([`Held::check`]): it re-reads its object from
//! the store and stops if the object is gone, is not its own, or if by the store's clock
//! its object ever went more than half the time to live without a refresh (it was paused,
//! or the store was unreachable): a gc may already have judged it stale.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use format::lock::{self as lock_object, LockObject};
use parking_lot::{Condvar, Mutex};

use crate::clock;
use crate::error::{Result, StoreError};
use format::layout;
use objects::ObjectStore;

/// Default time to live of gc locks and ingest leases.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// The time to live new locks and leases get: [`DEFAULT_TTL`], or in test builds (the
/// `failpoints` feature; release binaries ignore it) `MODELCAS_TEST_LEASE_TTL_SECS`
/// seconds.
pub fn default_ttl() -> Duration {
    crate::failpoint::test_var("MODELCAS_TEST_LEASE_TTL_SECS")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_TTL, Duration::from_secs)
}

/// Time to live of write leases (pin, ref, rm): they last a few requests, and gc waits for
/// a live one, so a holder that died must not hold gc up for long.
pub const WRITE_LEASE_TTL: Duration = Duration::from_secs(60);

/// The kind (key prefix) of write leases.
pub const WRITE_KIND: &str = "write";

/// Milliseconds since the Unix epoch, by this process's clock ([`crate::clock`]).
pub fn now_ms() -> u64 {
    clock::now_ms()
}

/// Who this process is, for lock objects: the host name and the pid namespace
/// (`node-1 pid:[4026531836]`). Stale-lock detection by process id only applies to locks
/// with the same identity: containers sharing a host name (host networking) but not a pid
/// namespace cannot see each other's processes.
pub fn hostname() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    match std::fs::read_link("/proc/self/ns/pid") {
        Ok(ns) => format!("{host} {}", ns.display()),
        Err(_) => host,
    }
}

/// A lock object as listed: its key, its content and when the store last wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// `locks/<kind>-<id>`.
    pub key: String,
    /// The object.
    pub lock: LockObject,
    /// Its modification time by the store's clock (ms since the epoch): its last refresh.
    pub modified_ms: u64,
}

impl Listed {
    /// When it was taken, by the store's clock.
    pub fn started_ms(&self) -> u64 {
        match self.lock.started_ms {
            0 => self.modified_ms,
            s => s.min(self.modified_ms),
        }
    }

    /// Whether nobody holds this any more: `store_now_ms` (the store's clock, read before
    /// the listing) is at least its time to live past its last refresh, or it was written
    /// on this host, in this pid namespace, by a process that has exited.
    pub fn is_stale(&self, store_now_ms: u64) -> bool {
        if store_now_ms.saturating_sub(self.modified_ms) >= self.lock.ttl_ms {
            return true;
        }
        self.lock.host == hostname()
            && self.lock.pid != std::process::id()
            && !std::path::Path::new(&format!("/proc/{}", self.lock.pid)).exists()
    }

    /// One line for error messages and reports (ages by the store's clock).
    pub fn describe(&self, store_now_ms: u64) -> String {
        format!(
            "{} by {} pid {}, started {} s ago, refreshed {} s ago",
            self.lock.kind,
            self.lock.host,
            self.lock.pid,
            store_now_ms.saturating_sub(self.started_ms()) / 1000,
            store_now_ms.saturating_sub(self.modified_ms) / 1000
        )
    }
}

/// The store's current time in ms since the epoch. Read it *before* listing locks: an
/// object listed afterwards was then at least as old as it looks.
pub fn store_now_ms(store: &dyn ObjectStore) -> Result<u64> {
    Ok(clock::to_ms(store.now()?))
}

fn modified_ms(store: &dyn ObjectStore, key: &str, listed: Option<SystemTime>) -> Result<u64> {
    let t = match listed {
        Some(t) => Some(t),
        None => store.stat(key)?.and_then(|m| m.modified),
    };
    t.map(clock::to_ms).ok_or_else(|| {
        StoreError::from(objects::ObjectError::Backend {
            op: "list",
            key: key.to_string(),
            reason: "the object store reports no modification time: cannot tell a lock's age"
                .into(),
        })
    })
}

/// Every lock object under `locks/<kind>-`. An object that cannot be read is returned as
/// an error: nobody can tell whether it is held.
pub fn list(store: &dyn ObjectStore, kind: &str) -> Result<Vec<Listed>> {
    let (out, damaged) = list_with_damaged(store, kind)?;
    match damaged.into_iter().next() {
        None => Ok(out),
        Some(d) => Err(StoreError::CorruptObject {
            key: d.key,
            reason: format!("{} (remove it if no modelcas process is running)", d.reason),
        }),
    }
}

/// A lock object that does not decode: its key, why, and its store time (ms).
struct Damaged {
    key: String,
    reason: String,
    modified_ms: u64,
}

/// [`list`], with the objects that do not decode apart.
fn list_with_damaged(store: &dyn ObjectStore, kind: &str) -> Result<(Vec<Listed>, Vec<Damaged>)> {
    let (mut out, mut damaged) = (Vec::new(), Vec::new());
    for obj in store.list(&format!("{}{kind}-", layout::LOCKS_PREFIX))? {
        let bytes = match store.get(&obj.key) {
            Ok(b) => b,
            Err(objects::ObjectError::NotFound(_)) => continue, // released meanwhile
            Err(e) => return Err(e.into()),
        };
        let modified_ms = modified_ms(store, &obj.key, obj.modified)?;
        match lock_object::decode(&bytes) {
            Ok(lock) => out.push(Listed {
                key: obj.key,
                lock,
                modified_ms,
            }),
            Err(e) => damaged.push(Damaged {
                key: obj.key,
                reason: e.to_string(),
                modified_ms,
            }),
        }
    }
    Ok((out, damaged))
}

/// What the holder and its refresh thread share.
struct Shared {
    store: Arc<dyn ObjectStore>,
    key: String,
    ttl: Duration,
    /// The object as refreshes write it (`started_ms` by the store's clock).
    template: LockObject,
    /// Store time of the last write of the object this process observed (ms).
    last_write_ms: AtomicU64,
    /// When (monotonic) the last refresh succeeded.
    last_ok: Mutex<Instant>,
    /// Why the lock was lost, once it was.
    lost: Mutex<Option<String>>,
}

impl Shared {
    fn half_ttl_ms(&self) -> u64 {
        self.ttl.as_millis() as u64 / 2
    }

    fn lose(&self, why: String) {
        let mut l = self.lost.lock();
        l.get_or_insert(why);
    }

    fn lost(&self) -> Option<String> {
        self.lost.lock().clone()
    }

    /// Records a write observed at store time `at_ms`; a gap over half the time to live
    /// since the previous one loses the lock (a gc may have judged it stale meanwhile).
    fn observe_write(&self, at_ms: u64) {
        let prev = self.last_write_ms.fetch_max(at_ms, Ordering::SeqCst);
        let gap = at_ms.saturating_sub(prev);
        if gap > self.half_ttl_ms() {
            self.lose(format!(
                "not refreshed for {} s by the object store's clock (process paused or store unreachable)",
                gap / 1000
            ));
        }
    }

    /// Rewrites the object and learns its new modification time.
    fn refresh(&self) {
        if self.lost().is_some() {
            return; // lost for good: leave the object to go stale
        }
        let mut obj = self.template.clone();
        obj.refreshed_ms = now_ms();
        let written = self
            .store
            .put(&self.key, &lock_object::encode(&obj))
            .and_then(|()| self.store.stat(&self.key));
        match written {
            Ok(Some(meta)) => {
                if let Some(t) = meta.modified {
                    self.observe_write(clock::to_ms(t));
                }
                *self.last_ok.lock() = Instant::now();
            }
            Ok(None) | Err(_) => {
                let since = self.last_ok.lock().elapsed();
                if since.as_millis() as u64 > self.half_ttl_ms() {
                    self.lose(format!(
                        "refreshes failed for {} s (object store unreachable?)",
                        since.as_secs()
                    ));
                }
            }
        }
    }

    fn lost_err(&self, reason: String) -> StoreError {
        StoreError::LockLost {
            key: self.key.clone(),
            reason,
        }
    }

    /// See [`Held::check`].
    fn confirm(&self) -> Result<()> {
        if let Some(why) = self.lost() {
            return Err(self.lost_err(why));
        }
        let since = self.last_ok.lock().elapsed();
        if since.as_millis() as u64 > self.half_ttl_ms() {
            return Err(self.lost_err(format!("not refreshed for {} s", since.as_secs())));
        }
        let gone = || self.lost_err("its object was removed (judged stale)".into());
        let meta = self.store.stat(&self.key)?.ok_or_else(gone)?;
        let bytes = match self.store.get(&self.key) {
            Err(objects::ObjectError::NotFound(_)) => return Err(gone()),
            other => other?,
        };
        let obj: LockObject =
            lock_object::decode(&bytes).map_err(|e| StoreError::CorruptObject {
                key: self.key.clone(),
                reason: e.to_string(),
            })?;
        let t = &self.template;
        if obj.host != t.host || obj.pid != t.pid || obj.kind != t.kind {
            return Err(self.lost_err(format!("its object now names {} pid {}", obj.host, obj.pid)));
        }
        let written = modified_ms(self.store.as_ref(), &self.key, meta.modified)?;
        self.observe_write(written);
        // The store's clock after the stat: the age is at least what gc would see now.
        let age = store_now_ms(self.store.as_ref())?.saturating_sub(written);
        if age > self.half_ttl_ms() {
            self.lose(format!(
                "not refreshed for {} s by the object store's clock",
                age / 1000
            ));
        }
        match self.lost() {
            Some(why) => Err(self.lost_err(why)),
            None => Ok(()),
        }
    }
}

/// A lock or lease this process holds; refreshed until dropped, then deleted.
pub struct Held {
    shared: Arc<Shared>,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Held {
    /// Takes the exclusive gc lock, or fails with [`StoreError::LockHeld`] naming the
    /// holder. Stale gc locks left by dead runs are ignored (and removed).
    pub fn gc_lock(store: Arc<dyn ObjectStore>, ttl: Duration) -> Result<Held> {
        Held::exclusive(store, "gc", ttl)
    }

    /// Takes the commit lock of `branch` of `repo` ([`layout::commit_lock_kind`]), held by a
    /// hub from reading the branch's head until the branch has moved; fails with
    /// [`StoreError::LockHeld`] while another live process holds it.
    pub fn commit_lock(
        store: Arc<dyn ObjectStore>,
        repo: &format::names::RepoId,
        branch: &str,
    ) -> Result<Held> {
        Held::exclusive(
            store,
            &layout::commit_lock_kind(repo, branch),
            WRITE_LEASE_TTL,
        )
    }

    /// Takes a lock of `kind` no other live process holds: writes its own object, then
    /// lists the kind's objects; a live other one makes it remove its own and fail (both
    /// may back off), stale ones are removed.
    ///
    /// An object of the kind that does not decode holds it too until it is `ttl` old by the
    /// store's clock: a live holder rewrites its own every quarter of that, so one
    /// unchanged that long is nobody's; it is then removed.
    fn exclusive(store: Arc<dyn ObjectStore>, kind: &str, ttl: Duration) -> Result<Held> {
        let held = Held::write_new(store.clone(), kind, ttl)?;
        let others = store_now_ms(store.as_ref())
            .and_then(|now| Ok((now, list_with_damaged(store.as_ref(), kind)?)));
        let (now, (others, damaged)) = match others {
            Ok(v) => v,
            Err(e) => {
                held.release();
                return Err(e);
            }
        };
        for d in damaged {
            let age = now.saturating_sub(d.modified_ms);
            if age >= ttl.as_millis() as u64 {
                let _ = store.delete(&d.key);
                continue;
            }
            held.release();
            return Err(StoreError::LockHeld {
                holder: format!(
                    "an object that does not decode ({}), taken as held until it is {} s old (now {} s)",
                    d.reason,
                    ttl.as_secs(),
                    age / 1000
                ),
                key: d.key,
            });
        }
        for other in others {
            if other.key == held.shared.key {
                continue;
            }
            if other.is_stale(now) {
                let _ = store.delete(&other.key);
                continue;
            }
            held.release();
            return Err(StoreError::LockHeld {
                holder: other.describe(now),
                key: other.key,
            });
        }
        Ok(held.start())
    }

    /// Takes an ingest lease (never exclusive).
    pub fn ingest_lease(store: Arc<dyn ObjectStore>, ttl: Duration) -> Result<Held> {
        Ok(Held::write_new(store, "ingest", ttl)?.start())
    }

    /// Takes a write lease (never exclusive) for a pin, ref or rm.
    pub fn write_lease(store: Arc<dyn ObjectStore>, ttl: Duration) -> Result<Held> {
        Ok(Held::write_new(store, WRITE_KIND, ttl)?.start())
    }

    /// Writes the object (with `started_ms` 0), then learns its store time. Every writer
    /// comes here first, so this is where the store's feature list is checked for writing.
    fn write_new(store: Arc<dyn ObjectStore>, kind: &str, ttl: Duration) -> Result<Held> {
        crate::features::check(store.as_ref(), true)?;
        let seed = format!(
            "{}-{}-{:?}-{:?}",
            hostname(),
            std::process::id(),
            Instant::now(),
            std::thread::current().id()
        );
        let h = blake3::hash(seed.as_bytes());
        let id = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or([0; 8]));
        let key = layout::lock_key(kind, id);
        let mut template = LockObject {
            kind: kind.to_string(),
            host: hostname(),
            pid: std::process::id(),
            started_ms: 0,
            refreshed_ms: now_ms(),
            ttl_ms: ttl.as_millis() as u64,
        };
        store.put(&key, &lock_object::encode(&template))?;
        let started = store
            .stat(&key)
            .map_err(StoreError::from)
            .and_then(|m| modified_ms(store.as_ref(), &key, m.and_then(|m| m.modified)));
        let started = match started {
            Ok(s) => s,
            Err(e) => {
                let _ = store.delete(&key);
                return Err(e);
            }
        };
        template.started_ms = started;
        Ok(Held {
            shared: Arc::new(Shared {
                store,
                key,
                ttl,
                template,
                last_write_ms: AtomicU64::new(started),
                last_ok: Mutex::new(Instant::now()),
                lost: Mutex::new(None),
            }),
            stop: Arc::new((Mutex::new(false), Condvar::new())),
            thread: None,
        })
    }

    fn start(mut self) -> Held {
        let shared = self.shared.clone();
        let stop = self.stop.clone();
        let interval = self.shared.ttl / 4;
        self.thread = Some(std::thread::spawn(move || loop {
            {
                let (m, cv) = &*stop;
                let mut guard = m.lock();
                cv.wait_while_for(&mut guard, |stopped| !*stopped, interval);
                if *guard {
                    return;
                }
            }
            shared.refresh();
        }));
        self
    }

    /// Refreshes the object now (the background thread does this every quarter of the
    /// time to live); for tests that step a store's clock by hand.
    pub fn refresh_now(&self) {
        self.shared.refresh();
    }

    /// When this lock or lease was taken, by the store's clock (ms since the epoch).
    pub fn started_ms(&self) -> u64 {
        self.shared.template.started_ms
    }

    /// The object's key.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// Confirms, just before publishing, that this process still holds the lock or lease:
    /// re-reads its object from the store and fails with [`StoreError::LockLost`] when it
    /// is gone or not ours, when it is more than half its time to live old by the store's
    /// clock, or when it ever went that long without a refresh (a gc may have judged it
    /// stale meanwhile). A lost lock stays lost.
    pub fn check(&self) -> Result<()> {
        self.shared.confirm()
    }

    fn release(&self) {
        let _ = self.shared.store.delete(&self.shared.key);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.stop;
            *m.lock() = true;
            cv.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objects::MemoryStore;

    /// A memory store whose clock moves only when told.
    fn frozen() -> (Arc<MemoryStore>, Arc<dyn ObjectStore>) {
        let mem = Arc::new(MemoryStore::new());
        mem.freeze_clock();
        let store: Arc<dyn ObjectStore> = mem.clone();
        (mem, store)
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_branch_is_committed_to_by_one_holder_at_a_time() {
        let (mem, store) = frozen();
        let repo = |s: &str| format::names::RepoId::parse(s).unwrap();
        let a = Held::commit_lock(store.clone(), &repo("Team/M"), "main").unwrap();
        // The same branch of the same repository, spelled in another case: held.
        let err = Held::commit_lock(store.clone(), &repo("team/m"), "main")
            .err()
            .unwrap();
        assert!(matches!(err, StoreError::LockHeld { .. }), "{err}");
        // Another branch, or another repository: free.
        let _other = Held::commit_lock(store.clone(), &repo("team/m"), "dev").unwrap();
        let _another = Held::commit_lock(store.clone(), &repo("team/n"), "main").unwrap();
        // Its holder gone silent past the time to live (another host): taken over.
        mem.advance(WRITE_LEASE_TTL + secs(1));
        let b = Held::commit_lock(store.clone(), &repo("team/m"), "main").unwrap();
        assert!(
            a.check().is_err(),
            "the silent holder learns it lost the lock"
        );
        drop(a);
        drop(b);
        let kind = layout::commit_lock_kind(&repo("team/m"), "main");
        assert!(list(store.as_ref(), &kind).unwrap().is_empty());
    }

    #[test]
    fn a_damaged_commit_lock_holds_the_branch_only_until_it_is_stale() {
        // Hostile review (helper-45, 3): a lock object that did not decode answered every
        // commit to its branch 500, forever.
        let (mem, store) = frozen();
        let repo = format::names::RepoId::parse("team/m").unwrap();
        let kind = layout::commit_lock_kind(&repo, "main");
        let junk = format!("{}{kind}-deadbeefdeadbeef", layout::LOCKS_PREFIX);
        store.put(&junk, b"garbage").unwrap();
        let err = Held::commit_lock(store.clone(), &repo, "main")
            .err()
            .unwrap();
        assert!(matches!(err, StoreError::LockHeld { .. }), "{err}");
        assert!(err.to_string().contains("does not decode"), "{err}");
        mem.advance(WRITE_LEASE_TTL);
        let held = Held::commit_lock(store.clone(), &repo, "main").unwrap();
        assert!(store.get(&junk).is_err(), "the stale junk is removed");
        drop(held);
        // The other kinds still refuse to guess: gc stops on an ingest lease it cannot read.
        let bad = format!("{}ingest-00000000000000aa", layout::LOCKS_PREFIX);
        store.put(&bad, b"garbage").unwrap();
        assert!(list(store.as_ref(), "ingest").is_err());
    }

    #[test]
    fn second_gc_lock_is_refused_until_released() {
        let (_, store) = frozen();
        let a = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
        let err = Held::gc_lock(store.clone(), DEFAULT_TTL).err().unwrap();
        assert!(matches!(err, StoreError::LockHeld { .. }), "{err}");
        assert_eq!(list(store.as_ref(), "gc").unwrap().len(), 1);
        drop(a);
        assert!(list(store.as_ref(), "gc").unwrap().is_empty());
        let _b = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
    }

    fn put_lock(store: &dyn ObjectStore, key: &str, obj: &LockObject) {
        store.put(key, &lock_object::encode(obj)).unwrap();
    }

    #[test]
    fn age_is_the_stores_whatever_the_holders_clock_says() {
        let (mem, store) = frozen();
        // Written just now by a host whose clock is far behind (or ahead): live.
        let skewed = LockObject {
            kind: "gc".into(),
            host: "elsewhere".into(),
            pid: 1,
            started_ms: 0,
            refreshed_ms: 1000,
            ttl_ms: 60_000,
        };
        put_lock(store.as_ref(), "locks/gc-00000000000000aa", &skewed);
        let err = Held::gc_lock(store.clone(), DEFAULT_TTL).err().unwrap();
        assert!(matches!(err, StoreError::LockHeld { .. }), "{err}");
        put_lock(
            store.as_ref(),
            "locks/gc-00000000000000aa",
            &LockObject {
                refreshed_ms: u64::MAX / 2,
                ..skewed.clone()
            },
        );
        // One millisecond short of its time to live by the store's clock: still held.
        mem.advance(Duration::from_millis(59_999));
        let err = Held::gc_lock(store.clone(), DEFAULT_TTL).err().unwrap();
        assert!(matches!(err, StoreError::LockHeld { .. }), "{err}");
        // At its time to live: stale, removed, and the lock is taken.
        mem.advance(Duration::from_millis(1));
        let held = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
        let keys: Vec<_> = list(store.as_ref(), "gc")
            .unwrap()
            .into_iter()
            .map(|l| l.key)
            .collect();
        assert_eq!(keys, vec![held.key().to_string()]);
    }

    #[test]
    fn a_lock_of_a_dead_process_here_is_stale_at_once() {
        let (_, store) = frozen();
        let dead_here = LockObject {
            kind: "gc".into(),
            host: hostname(),
            pid: u32::MAX - 1,
            started_ms: 0,
            refreshed_ms: now_ms(),
            ttl_ms: 60_000,
        };
        put_lock(store.as_ref(), "locks/gc-00000000000000bb", &dead_here);
        let now = store_now_ms(store.as_ref()).unwrap();
        assert!(list(store.as_ref(), "gc").unwrap()[0].is_stale(now));
        let _held = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
        assert_eq!(list(store.as_ref(), "gc").unwrap().len(), 1);
    }

    #[test]
    fn refreshes_keep_the_lease_alive_and_record_the_stores_start() {
        let (mem, store) = frozen();
        let t0 = store_now_ms(store.as_ref()).unwrap();
        let lease = Held::ingest_lease(store.clone(), secs(600)).unwrap();
        assert_eq!(lease.started_ms(), t0);
        let first = list(store.as_ref(), "ingest").unwrap().remove(0);
        assert_eq!(
            first.lock.started_ms, 0,
            "the first write cannot know its time"
        );
        assert_eq!(first.started_ms(), t0);
        for _ in 0..8 {
            mem.advance(secs(150));
            lease.refresh_now();
            lease.check().unwrap();
        }
        let now = store_now_ms(store.as_ref()).unwrap();
        let l = list(store.as_ref(), "ingest").unwrap().remove(0);
        assert_eq!(l.lock.started_ms, t0);
        assert_eq!(l.started_ms(), t0);
        assert_eq!(l.modified_ms, now);
        assert!(!l.is_stale(now));
    }

    #[test]
    fn a_holder_paused_past_half_its_ttl_has_lost_it_even_after_refreshing() {
        let (mem, store) = frozen();
        let lease = Held::ingest_lease(store.clone(), secs(600)).unwrap();
        mem.advance(secs(301));
        let err = lease.check().unwrap_err();
        assert!(matches!(err, StoreError::LockLost { .. }), "{err}");

        // Paused (the refresher too) past the whole time to live; it then refreshes at
        // once: the object looks fresh again, but a gc may have judged it stale.
        let lease = Held::ingest_lease(store.clone(), secs(600)).unwrap();
        mem.advance(secs(600));
        lease.refresh_now();
        let err = lease.check().unwrap_err().to_string();
        assert!(err.contains("not refreshed for 600 s"), "{err}");
        mem.advance(secs(1));
        lease.refresh_now();
        assert!(lease.check().is_err(), "a lost lease stays lost");
    }

    #[test]
    fn a_lease_removed_by_gc_is_lost() {
        let (_, store) = frozen();
        let lease = Held::ingest_lease(store.clone(), secs(600)).unwrap();
        lease.check().unwrap();
        store.delete(lease.key()).unwrap();
        let err = lease.check().unwrap_err().to_string();
        assert!(err.contains("removed"), "{err}");
    }
}
