//! Test helpers (compiled in tests and with the `test-util` feature): an object store that
//! injects faults into reads, for property tests of the read path under failures.
//!
//! [`FaultyStore`] wraps another store (as `objects`' `CountingStore` does) and, on each
//! `get` and `get_range` while it is switched on, draws from a seeded generator whether to
//! fail the call, return fewer bytes than asked (a backend breaking its contract), flip a
//! byte of what it returns, or sleep first. Writes, listings and deletes pass through
//! untouched, so a test can move packs as gc does while readers run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use objects::{ObjectError, ObjectMeta, ObjectStore, Result, Temporary};

/// How often each fault is injected, in parts per thousand of read calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The call fails with a backend error.
    pub error: u32,
    /// The call returns a strict prefix of the bytes asked for, as `Ok`.
    pub short: u32,
    /// One byte of the returned bytes is flipped.
    pub flip: u32,
    /// The call sleeps up to `max_delay` before answering.
    pub delay: u32,
    /// The longest delay.
    pub max_delay: Duration,
}

impl Faults {
    /// Whether any fault that changes an answer (not only delays it) can be injected.
    pub fn alters_answers(&self) -> bool {
        self.error > 0 || self.short > 0 || self.flip > 0
    }
}

/// Counts of the faults injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Calls failed.
    pub errors: u64,
    /// Calls answered short.
    pub short: u64,
    /// Calls answered with a flipped byte.
    pub flips: u64,
    /// Calls delayed.
    pub delays: u64,
}

/// An object store whose reads fail now and then.
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Faults,
    seed: u64,
    on: AtomicBool,
    calls: AtomicU64,
    errors: AtomicU64,
    short: AtomicU64,
    flips: AtomicU64,
    delays: AtomicU64,
}

/// One step of splitmix64: a well-mixed 64-bit value from `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl FaultyStore {
    /// Wraps `inner`, injecting `faults` (switched on) drawn from `seed`.
    pub fn new(inner: Arc<dyn ObjectStore>, faults: Faults, seed: u64) -> FaultyStore {
        FaultyStore {
            inner,
            faults,
            seed,
            on: AtomicBool::new(true),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            short: AtomicU64::new(0),
            flips: AtomicU64::new(0),
            delays: AtomicU64::new(0),
        }
    }

    /// Switches the faults on or off (off: every call passes through).
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// The faults injected so far.
    pub fn injected(&self) -> Injected {
        let l = |a: &AtomicU64| a.load(Ordering::SeqCst);
        Injected {
            errors: l(&self.errors),
            short: l(&self.short),
            flips: l(&self.flips),
            delays: l(&self.delays),
        }
    }

    /// The next call's random draws (each call its own, whatever the threads' order).
    fn draws(&self) -> impl FnMut() -> u64 {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let mut state = mix(self.seed ^ mix(call));
        move || {
            state = mix(state);
            state
        }
    }

    /// A read of `key` through the faults: `read` gives the true answer.
    fn read(
        &self,
        op: &'static str,
        key: &str,
        read: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        if !self.on.load(Ordering::SeqCst) {
            return read();
        }
        let f = self.faults;
        let mut draw = self.draws();
        let mut hit = |per_mille: u32| draw() % 1000 < per_mille as u64;
        let (error, short, flip, delay) = (hit(f.error), hit(f.short), hit(f.flip), hit(f.delay));
        let (d1, d2) = (draw(), draw());
        if delay && !f.max_delay.is_zero() {
            self.delays.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(f.max_delay.mul_f64((d1 % 1000) as f64 / 1000.0));
        }
        if error {
            self.errors.fetch_add(1, Ordering::SeqCst);
            return Err(ObjectError::Backend {
                op,
                key: key.to_string(),
                reason: "injected fault".into(),
            });
        }
        let mut bytes = read()?;
        if short && !bytes.is_empty() {
            self.short.fetch_add(1, Ordering::SeqCst);
            bytes.truncate((d1 % bytes.len() as u64) as usize);
        } else if flip && !bytes.is_empty() {
            self.flips.fetch_add(1, Ordering::SeqCst);
            let at = (d2 % bytes.len() as u64) as usize;
            bytes[at] ^= 1 << (d1 % 8);
        }
        Ok(bytes)
    }
}

impl ObjectStore for FaultyStore {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        self.inner.put(key, data)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.read("GET", key, || self.inner.get(key))
    }
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.read("GET range", key, || self.inner.get_range(key, offset, len))
    }
    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn size(&self, key: &str) -> Result<Option<u64>> {
        self.inner.size(key)
    }
    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.inner.stat(key)
    }
    fn now(&self) -> Result<std::time::SystemTime> {
        self.inner.now()
    }
    fn temporaries(&self, min_age: Duration) -> Result<Vec<Temporary>> {
        self.inner.temporaries(min_age)
    }
    fn remove_temporary(&self, t: &Temporary) -> Result<()> {
        self.inner.remove_temporary(t)
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    /// A second source without faults (the first try only): the store underneath, as a
    /// hub's other address would answer.
    fn get_again(&self, key: &str, attempt: u32) -> Result<Option<Vec<u8>>> {
        if attempt > 1 {
            return Ok(None);
        }
        self.inner.get(key).map(Some)
    }
    fn get_range_again(
        &self,
        key: &str,
        offset: u64,
        len: u64,
        attempt: u32,
    ) -> Result<Option<Vec<u8>>> {
        if attempt > 1 {
            return Ok(None);
        }
        self.inner.get_range(key, offset, len).map(Some)
    }
    fn location(&self) -> String {
        format!("faulty:{}", self.inner.location())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asked_again_it_answers_without_faults_once() {
        let mem = Arc::new(objects::MemoryStore::new());
        mem.put("k", b"clean bytes").unwrap();
        let every_call = Faults {
            flip: 1000,
            ..Faults::default()
        };
        let f = FaultyStore::new(mem, every_call, 7);
        assert_ne!(f.get("k").unwrap(), b"clean bytes", "a fault on every read");
        assert_eq!(f.get_again("k", 1).unwrap().unwrap(), b"clean bytes");
        assert_eq!(f.get_range_again("k", 6, 5, 1).unwrap().unwrap(), b"bytes");
        assert_eq!(f.get_again("k", 2).unwrap(), None);
        assert!(!f.read_only());
    }
}
