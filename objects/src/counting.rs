//! A wrapper that counts requests by kind, for reports and benchmarks (how many LISTs,
//! GETs, PUTs and DELETEs a command cost).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::error::Result;
use crate::store::{ObjectMeta, ObjectStore, Temporary};

/// Requests made so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Requests {
    /// LIST calls (one per listed prefix, whatever the pages).
    pub list: u64,
    /// Whole-object GETs.
    pub get: u64,
    /// Ranged GETs.
    pub get_range: u64,
    /// Size lookups (HEAD).
    pub head: u64,
    /// PUTs.
    pub put: u64,
    /// DELETEs.
    pub delete: u64,
    /// Bytes received by GETs.
    pub bytes_read: u64,
    /// Bytes sent by PUTs.
    pub bytes_written: u64,
}

#[derive(Default)]
struct Counters {
    list: AtomicU64,
    get: AtomicU64,
    get_range: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    delete: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// An object store that counts what passes through it.
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    c: Counters,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> CountingStore {
        CountingStore {
            inner,
            c: Counters::default(),
        }
    }

    /// The counts so far.
    pub fn requests(&self) -> Requests {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Requests {
            list: l(&self.c.list),
            get: l(&self.c.get),
            get_range: l(&self.c.get_range),
            head: l(&self.c.head),
            put: l(&self.c.put),
            delete: l(&self.c.delete),
            bytes_read: l(&self.c.bytes_read),
            bytes_written: l(&self.c.bytes_written),
        }
    }
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

impl ObjectStore for CountingStore {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        add(&self.c.put, 1);
        add(&self.c.bytes_written, data.len() as u64);
        self.inner.put(key, data)
    }
    fn put_deferred(&self, key: &str, data: &[u8]) -> Result<()> {
        add(&self.c.put, 1);
        add(&self.c.bytes_written, data.len() as u64);
        self.inner.put_deferred(key, data)
    }
    fn sync_deferred(&self) -> Result<()> {
        self.inner.sync_deferred()
    }
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        for (_, data) in objects {
            add(&self.c.put, 1);
            add(&self.c.bytes_written, data.len() as u64);
        }
        self.inner.put_many(objects)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        add(&self.c.get, 1);
        let b = self.inner.get(key)?;
        add(&self.c.bytes_read, b.len() as u64);
        Ok(b)
    }
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        add(&self.c.get_range, 1);
        let b = self.inner.get_range(key, offset, len)?;
        add(&self.c.bytes_read, b.len() as u64);
        Ok(b)
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        add(&self.c.list, 1);
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<()> {
        add(&self.c.delete, 1);
        self.inner.delete(key)
    }
    fn size(&self, key: &str) -> Result<Option<u64>> {
        add(&self.c.head, 1);
        self.inner.size(key)
    }
    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        add(&self.c.head, 1);
        self.inner.stat(key)
    }
    fn now(&self) -> Result<std::time::SystemTime> {
        add(&self.c.list, 1);
        self.inner.now()
    }
    fn temporaries(&self, min_age: std::time::Duration) -> Result<Vec<Temporary>> {
        add(&self.c.list, 1);
        self.inner.temporaries(min_age)
    }
    fn remove_temporary(&self, t: &Temporary) -> Result<()> {
        add(&self.c.delete, 1);
        self.inner.remove_temporary(t)
    }
    // Written out: the crate's own macro (`forward_asking_again!`, for the wrappers of
    // other crates) would make this module import the crate root.
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn get_again(&self, key: &str, attempt: u32) -> Result<Option<Vec<u8>>> {
        self.inner.get_again(key, attempt)
    }
    fn get_range_again(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        attempt: u32,
    ) -> Result<Option<Vec<u8>>> {
        self.inner.get_range_again(key, offset, len, attempt)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
}
