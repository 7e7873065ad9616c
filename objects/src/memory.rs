//! An in-memory object store, for tests and for fault injection.
//!
//! Besides holding objects in a map, it can be told to fail the Nth `put` from now
//! ([`MemoryStore::fail_put_after`]), which tests use to interrupt an ingest at a chosen
//! point and check that nothing half-written becomes visible. Its clock (the `modified`
//! time of objects and [`ObjectStore::now`]) is the system clock, or, after
//! [`MemoryStore::freeze_clock`], a manual one that moves only with
//! [`MemoryStore::advance`]: tests of time-dependent rules need no sleeps.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::error::{ObjectError, Result};
use crate::store::{check_key, ObjectMeta, ObjectStore};

/// Objects in a map; counts puts and bytes put.
#[derive(Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, (Vec<u8>, SystemTime)>>,
    /// `Some`: the manual clock; `None`: the system clock.
    clock: Mutex<Option<SystemTime>>,
    /// Puts left before every put fails; negative: never fail.
    fail_after: AtomicI64,
    puts: AtomicU64,
    bytes_put: AtomicU64,
    /// What [`ObjectStore::get_again`] answers, by key: another source's copy.
    elsewhere: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryStore {
    /// An empty store that never fails.
    pub fn new() -> MemoryStore {
        MemoryStore {
            fail_after: AtomicI64::new(-1),
            ..Default::default()
        }
    }

    /// After `n` more successful puts, every put fails.
    pub fn fail_put_after(&self, n: i64) {
        self.fail_after.store(n, Ordering::SeqCst);
    }

    /// Number of successful puts.
    pub fn puts(&self) -> u64 {
        self.puts.load(Ordering::SeqCst)
    }

    /// Bytes written by successful puts.
    pub fn bytes_put(&self) -> u64 {
        self.bytes_put.load(Ordering::SeqCst)
    }

    /// Replaces an object's bytes directly (to simulate corruption).
    pub fn overwrite(&self, key: &str, data: Vec<u8>) {
        let now = self.time();
        self.objects.lock().insert(key.to_string(), (data, now));
    }

    /// From now on the store's clock stands still at its current time until
    /// [`MemoryStore::advance`] moves it.
    pub fn freeze_clock(&self) {
        let mut c = self.clock.lock();
        c.get_or_insert_with(SystemTime::now);
    }

    /// Moves the frozen clock forward (freezing it first if needed).
    pub fn advance(&self, d: Duration) {
        let mut c = self.clock.lock();
        let t = c.get_or_insert_with(SystemTime::now);
        *t += d;
    }

    /// Gives the store a second source of `key` with `data`, which
    /// [`ObjectStore::get_again`] and [`ObjectStore::get_range_again`] answer from (to test
    /// readers that ask again, and the wrappers that must pass the question on).
    pub fn elsewhere(&self, key: &str, data: Vec<u8>) {
        self.elsewhere.lock().insert(key.to_string(), data);
    }

    fn time(&self) -> SystemTime {
        self.clock.lock().unwrap_or_else(SystemTime::now)
    }
}

impl ObjectStore for MemoryStore {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        check_key(key)?;
        let left = self.fail_after.load(Ordering::SeqCst);
        if left == 0 {
            return Err(ObjectError::Backend {
                op: "put",
                key: key.into(),
                reason: "injected failure".into(),
            });
        }
        if left > 0 {
            self.fail_after.fetch_sub(1, Ordering::SeqCst);
        }
        let now = self.time();
        self.objects
            .lock()
            .insert(key.to_string(), (data.to_vec(), now));
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.bytes_put
            .fetch_add(data.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.objects
            .lock()
            .get(key)
            .map(|(v, _)| v.clone())
            .ok_or_else(|| ObjectError::NotFound(key.into()))
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let map = self.objects.lock();
        let (obj, _) = map
            .get(key)
            .ok_or_else(|| ObjectError::NotFound(key.into()))?;
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= obj.len() as u64)
            .ok_or_else(|| ObjectError::CorruptObject {
                key: key.into(),
                reason: format!("truncated: wanted {len} bytes at offset {offset}"),
            })?;
        Ok(obj[offset as usize..end as usize].to_vec())
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let map = self.objects.lock();
        Ok(map
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (v, t))| meta(k, v, *t))
            .collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.objects.lock().remove(key);
        Ok(())
    }

    fn size(&self, key: &str) -> Result<Option<u64>> {
        Ok(self.objects.lock().get(key).map(|(v, _)| v.len() as u64))
    }

    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        Ok(self.objects.lock().get(key).map(|(v, t)| meta(key, v, *t)))
    }

    fn now(&self) -> Result<SystemTime> {
        Ok(self.time())
    }

    fn location(&self) -> String {
        "memory:".into()
    }
    fn get_again(&self, key: &str, _attempt: u32) -> Result<Option<Vec<u8>>> {
        Ok(self.elsewhere.lock().get(key).cloned())
    }
    fn get_range_again(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        _attempt: u32,
    ) -> Result<Option<Vec<u8>>> {
        let elsewhere = self.elsewhere.lock();
        let Some(data) = elsewhere.get(key) else {
            return Ok(None);
        };
        let end = offset.checked_add(len).filter(|e| *e <= data.len() as u64);
        match end {
            Some(end) => Ok(Some(data[offset as usize..end as usize].to_vec())),
            None => Err(ObjectError::CorruptObject {
                key: key.into(),
                reason: format!("{len} bytes at {offset} of {}", data.len()),
            }),
        }
    }
}

fn meta(key: &str, v: &[u8], modified: SystemTime) -> ObjectMeta {
    ObjectMeta {
        key: key.to_string(),
        size: v.len() as u64,
        tag: blake3::hash(v).to_hex()[..16].to_string(),
        modified: Some(modified),
    }
}
