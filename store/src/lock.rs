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
//! Both are refreshed by a background thread every quarter of their time to live. An
//! object is *stale* when its last refresh is older than its time to live, or when it was
//! written on this host by a process that no longer exists. A holder whose refreshes
//! failed for longer than half the time to live must stop before publishing anything
//! ([`Held::check`]): others may already consider it gone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bincode::{Decode, Encode};

use crate::backend::ObjectStore;
use crate::codec::{self, Kind};
use crate::layout;
use crate::{Result, StoreError};

/// Default time to live of gc locks and ingest leases.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// Time to live of write leases (pin, ref, rm): they last a few requests, and gc waits for
/// a live one, so a holder that died must not hold gc up for long.
pub const WRITE_LEASE_TTL: Duration = Duration::from_secs(60);

/// The kind (key prefix) of write leases.
pub const WRITE_KIND: &str = "write";

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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

/// The persisted lock or lease (`MCASLOCK`).
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct LockObject {
    /// `gc` or `ingest`.
    pub kind: String,
    /// Host name and pid namespace of the holder (see [`hostname`]).
    pub host: String,
    /// Process id of the holder.
    pub pid: u32,
    /// When it was taken (ms since the epoch).
    pub started_ms: u64,
    /// Last refresh (ms since the epoch).
    pub refreshed_ms: u64,
    /// Time to live after a refresh (ms).
    pub ttl_ms: u64,
}

impl LockObject {
    /// Whether nobody holds this any more: not refreshed within its time to live, or
    /// written on this host, in this pid namespace, by a process that has exited.
    pub fn is_stale(&self, now_ms: u64) -> bool {
        if now_ms > self.refreshed_ms.saturating_add(self.ttl_ms) {
            return true;
        }
        self.host == hostname()
            && self.pid != std::process::id()
            && !std::path::Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    /// One line for error messages and reports.
    pub fn describe(&self, now_ms: u64) -> String {
        format!(
            "{} by {} pid {}, started {} s ago, refreshed {} s ago",
            self.kind,
            self.host,
            self.pid,
            now_ms.saturating_sub(self.started_ms) / 1000,
            now_ms.saturating_sub(self.refreshed_ms) / 1000
        )
    }
}

/// Every lock object under `locks/<kind>-`, with its key. An object that cannot be read
/// is returned as an error: nobody can tell whether it is held.
pub fn list(store: &dyn ObjectStore, kind: &str) -> Result<Vec<(String, LockObject)>> {
    let mut out = Vec::new();
    for obj in store.list(&format!("{}{kind}-", layout::LOCKS_PREFIX))? {
        let bytes = match store.get(&obj.key) {
            Ok(b) => b,
            Err(StoreError::NotFound(_)) => continue, // released meanwhile
            Err(e) => return Err(e),
        };
        let lock: LockObject =
            codec::decode(Kind::Lock, &bytes).map_err(|e| StoreError::CorruptObject {
                key: obj.key.clone(),
                reason: format!("{e} (remove it if no modelcas process is running)"),
            })?;
        out.push((obj.key, lock));
    }
    Ok(out)
}

/// A lock or lease this process holds; refreshed until dropped, then deleted.
pub struct Held {
    store: Arc<dyn ObjectStore>,
    key: String,
    started_ms: u64,
    ttl: Duration,
    last_ok_ms: Arc<AtomicU64>,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    lost: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Held {
    /// Takes the exclusive gc lock, or fails with [`StoreError::LockHeld`] naming the
    /// holder. Stale gc locks left by dead runs are ignored (and removed).
    pub fn gc_lock(store: Arc<dyn ObjectStore>, ttl: Duration) -> Result<Held> {
        let held = Held::write_new(store.clone(), "gc", ttl)?;
        let now = now_ms();
        let others = match list(store.as_ref(), "gc") {
            Ok(l) => l,
            Err(e) => {
                held.release();
                return Err(e);
            }
        };
        for (key, lock) in others {
            if key == held.key {
                continue;
            }
            if lock.is_stale(now) {
                let _ = store.delete(&key);
                continue;
            }
            held.release();
            return Err(StoreError::LockHeld {
                key,
                holder: lock.describe(now),
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

    fn write_new(store: Arc<dyn ObjectStore>, kind: &str, ttl: Duration) -> Result<Held> {
        let started_ms = now_ms();
        let seed = format!(
            "{}-{}-{:?}",
            hostname(),
            std::process::id(),
            std::time::Instant::now()
        );
        let h = blake3::hash(seed.as_bytes());
        let id = u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or([0; 8]));
        let key = layout::lock_key(kind, id);
        let held = Held {
            store,
            key,
            started_ms,
            ttl,
            last_ok_ms: Arc::new(AtomicU64::new(started_ms)),
            stop: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
            lost: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        held.store.put(&held.key, &held.object(kind, started_ms))?;
        Ok(held)
    }

    fn object(&self, kind: &str, refreshed_ms: u64) -> Vec<u8> {
        let obj = LockObject {
            kind: kind.to_string(),
            host: hostname(),
            pid: std::process::id(),
            started_ms: self.started_ms,
            refreshed_ms,
            ttl_ms: self.ttl.as_millis() as u64,
        };
        codec::encode(Kind::Lock, &obj, false)
    }

    fn start(mut self) -> Held {
        let store = self.store.clone();
        let key = self.key.clone();
        let last_ok = self.last_ok_ms.clone();
        let stop = self.stop.clone();
        let lost = self.lost.clone();
        let interval = self.ttl / 4;
        let kind = key
            .trim_start_matches(layout::LOCKS_PREFIX)
            .split('-')
            .next()
            .unwrap_or("lock")
            .to_string();
        let template = LockObject {
            kind,
            host: hostname(),
            pid: std::process::id(),
            started_ms: self.started_ms,
            refreshed_ms: 0,
            ttl_ms: self.ttl.as_millis() as u64,
        };
        self.thread = Some(std::thread::spawn(move || loop {
            {
                let (m, cv) = &*stop;
                let guard = m.lock().unwrap_or_else(|p| p.into_inner());
                let (guard, _) = cv
                    .wait_timeout_while(guard, interval, |stopped| !*stopped)
                    .unwrap_or_else(|p| p.into_inner());
                if *guard {
                    return;
                }
            }
            let now = now_ms();
            let mut obj = template.clone();
            obj.refreshed_ms = now;
            if store
                .put(&key, &codec::encode(Kind::Lock, &obj, false))
                .is_ok()
            {
                last_ok.store(now, Ordering::SeqCst);
            } else if now.saturating_sub(last_ok.load(Ordering::SeqCst)) > obj.ttl_ms / 2 {
                lost.store(true, Ordering::SeqCst);
            }
        }));
        self
    }

    /// When this lock or lease was taken (ms since the epoch).
    pub fn started_ms(&self) -> u64 {
        self.started_ms
    }

    /// The object's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Fails with [`StoreError::LockLost`] when the last successful refresh is older than
    /// half the time to live: another process may already treat it as stale.
    pub fn check(&self) -> Result<()> {
        let age = now_ms().saturating_sub(self.last_ok_ms.load(Ordering::SeqCst));
        if self.lost.load(Ordering::SeqCst) || age > self.ttl.as_millis() as u64 / 2 {
            return Err(StoreError::LockLost {
                key: self.key.clone(),
                age_secs: age / 1000,
            });
        }
        Ok(())
    }

    fn release(&self) {
        let _ = self.store.delete(&self.key);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.stop;
            *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
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
    use crate::backend::MemoryStore;

    #[test]
    fn second_gc_lock_is_refused_until_released() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let a = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
        let err = Held::gc_lock(store.clone(), DEFAULT_TTL).err().unwrap();
        assert!(matches!(err, StoreError::LockHeld { .. }), "{err}");
        assert_eq!(list(store.as_ref(), "gc").unwrap().len(), 1);
        drop(a);
        assert!(list(store.as_ref(), "gc").unwrap().is_empty());
        let _b = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
    }

    #[test]
    fn stale_locks_are_ignored_and_removed() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let old = LockObject {
            kind: "gc".into(),
            host: "elsewhere".into(),
            pid: 1,
            started_ms: 1000,
            refreshed_ms: 1000,
            ttl_ms: 60_000,
        };
        store
            .put(
                "locks/gc-00000000000000aa",
                &codec::encode(Kind::Lock, &old, false),
            )
            .unwrap();
        let dead_here = LockObject {
            host: hostname(),
            pid: u32::MAX - 1,
            started_ms: now_ms(),
            refreshed_ms: now_ms(),
            ..old.clone()
        };
        assert!(dead_here.is_stale(now_ms()));
        let live = LockObject {
            refreshed_ms: now_ms(),
            ..old
        };
        assert!(!live.is_stale(now_ms()));
        let held = Held::gc_lock(store.clone(), DEFAULT_TTL).unwrap();
        let keys: Vec<_> = list(store.as_ref(), "gc")
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, vec![held.key().to_string()]);
    }

    #[test]
    fn refresh_keeps_the_lease_alive() {
        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let lease = Held::ingest_lease(store.clone(), Duration::from_millis(400)).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        lease.check().unwrap();
        let (_, obj) = list(store.as_ref(), "ingest").unwrap().remove(0);
        assert!(obj.refreshed_ms > obj.started_ms, "{obj:?}");
        assert!(!obj.is_stale(now_ms()));
    }
}
