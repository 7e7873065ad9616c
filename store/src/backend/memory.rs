//! An in-memory object store, for tests and for fault injection.
//!
//! Besides holding objects in a map, it can be told to fail the Nth `put` from now
//! ([`MemoryStore::fail_put_after`]), which tests use to interrupt an ingest at a chosen
//! point and check that nothing half-written becomes visible.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use super::{check_key, ObjectMeta, ObjectStore};
use crate::{Result, StoreError};

/// Objects in a map; counts puts and bytes put.
#[derive(Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    /// Puts left before every put fails; negative: never fail.
    fail_after: AtomicI64,
    puts: AtomicU64,
    bytes_put: AtomicU64,
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
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), data);
    }
}

impl ObjectStore for MemoryStore {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        check_key(key)?;
        let left = self.fail_after.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::Backend {
                op: "put",
                key: key.into(),
                reason: "injected failure".into(),
            });
        }
        if left > 0 {
            self.fail_after.fetch_sub(1, Ordering::SeqCst);
        }
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), data.to_vec());
        self.puts.fetch_add(1, Ordering::SeqCst);
        self.bytes_put
            .fetch_add(data.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::NotFound(key.into()))
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let map = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        let obj = map
            .get(key)
            .ok_or_else(|| StoreError::NotFound(key.into()))?;
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= obj.len() as u64)
            .ok_or_else(|| StoreError::CorruptObject {
                key: key.into(),
                reason: format!("truncated: wanted {len} bytes at offset {offset}"),
            })?;
        Ok(obj[offset as usize..end as usize].to_vec())
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let map = self.objects.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| ObjectMeta {
                key: k.clone(),
                size: v.len() as u64,
                tag: blake3::hash(v).to_hex()[..16].to_string(),
            })
            .collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        Ok(())
    }

    fn size(&self, key: &str) -> Result<Option<u64>> {
        Ok(self
            .objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map(|v| v.len() as u64))
    }

    fn location(&self) -> String {
        "memory:".into()
    }
}
