//! A wrapper that records every request in the process metrics ([`crate::metrics`]):
//! counts and errors by kind, and latency. Each mutation is also a crash step
//! ([`crate::failpoint::step`]).

use std::sync::Arc;
use std::time::Instant;

use crate::metrics::METRICS;
use objects::Result;
use objects::{ObjectError, ObjectMeta, ObjectStore, Temporary};

/// An object store whose requests show up in `/metrics`.
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
}

impl MeteredStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ObjectStore>) -> MeteredStore {
        MeteredStore { inner }
    }
}

/// Times `f` as request kind `op` (index into [`crate::metrics::BACKEND_OPS`]).
fn timed<T>(op: usize, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let r = f();
    let failed = matches!(&r, Err(e) if !matches!(e, ObjectError::NotFound(_)));
    METRICS.backend_request(op, t.elapsed(), failed);
    r
}

impl ObjectStore for MeteredStore {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        crate::failpoint::step();
        timed(2, || self.inner.put(key, data))
    }
    fn put_deferred(&self, key: &str, data: &[u8]) -> Result<()> {
        crate::failpoint::step();
        timed(2, || self.inner.put_deferred(key, data))
    }
    fn sync_deferred(&self) -> Result<()> {
        crate::failpoint::step();
        self.inner.sync_deferred()
    }
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        crate::failpoint::step();
        // Counted as one put per object, the batch's time shared among them.
        let t = Instant::now();
        let r = self.inner.put_many(objects);
        let failed = r.is_err();
        let each = t.elapsed() / objects.len().max(1) as u32;
        for _ in 0..objects.len() {
            METRICS.backend_request(2, each, failed);
        }
        r
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        timed(0, || self.inner.get(key))
    }
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        timed(1, || self.inner.get_range(key, offset, len))
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        timed(3, || self.inner.list(prefix))
    }
    fn delete(&self, key: &str) -> Result<()> {
        crate::failpoint::step();
        timed(4, || self.inner.delete(key))
    }
    fn size(&self, key: &str) -> Result<Option<u64>> {
        timed(5, || self.inner.size(key))
    }
    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        timed(5, || self.inner.stat(key))
    }
    fn now(&self) -> Result<std::time::SystemTime> {
        timed(3, || self.inner.now())
    }
    fn temporaries(&self, min_age: std::time::Duration) -> Result<Vec<Temporary>> {
        self.inner.temporaries(min_age)
    }
    fn remove_temporary(&self, t: &Temporary) -> Result<()> {
        self.inner.remove_temporary(t)
    }
    objects::forward_asking_again!(inner);
    fn location(&self) -> String {
        self.inner.location()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metered_wrapper_passes_asking_again_on() {
        let mem = Arc::new(objects::MemoryStore::new());
        mem.elsewhere("k", b"right".to_vec());
        let m = MeteredStore::new(mem);
        assert_eq!(m.get_again("k", 1).unwrap().unwrap(), b"right");
        assert_eq!(m.get_range_again("k", 1, 3, 1).unwrap().unwrap(), b"igh");
        assert!(!m.read_only());
    }
}
