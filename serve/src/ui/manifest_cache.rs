//! A manifest cache for `serve`'s pages: the object store under the page's [`Store`]
//! remembers the manifests it read, and answers a manifest again from memory only while
//! the store's latest listing still shows the object unchanged (same tag). Each page
//! lists before it reads (`ls`'s rows, `stats` and gc's decision all do), so a page shows
//! what the store holds now, and reading a repository of 1,000 revisions again costs its
//! listings, not 1,000 GETs per function.
//!
//! A read is kept only when a HEAD after it shows the tag the listing showed (an object
//! replaced between the listing and the read is not kept under the old tag). Bounded:
//! [`BUDGET`] bytes in all (a `quick_cache` weighed in bytes, in [`SHARDS`] parts); an
//! object larger than a part of it is never kept. The tags of the listings are one per
//! manifest the store lists, as the listings themselves are, and follow them (a key a
//! listing no longer shows is dropped).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use objects::{ObjectMeta, ObjectStore, Temporary};
use parking_lot::{Mutex, MutexGuard};
use quick_cache::sync::Cache;
use repo::Store;

/// Bytes of manifests kept in memory (with their keys and tags).
pub const BUDGET: usize = 64 << 20;

/// Parts of the budget: each holds a quarter of it, so an object larger than a quarter of
/// the budget is never kept.
pub const SHARDS: usize = 4;

/// A kept read: the tag it was read under and its bytes.
type Kept = (String, Arc<Vec<u8>>);

/// Weighs a kept read by its bytes, key and tag.
#[derive(Clone)]
struct Bytes;

impl quick_cache::Weighter<String, Kept> for Bytes {
    fn weight(&self, key: &String, (tag, bytes): &Kept) -> u64 {
        (key.len() + tag.len() + bytes.len()) as u64
    }
}

/// The reads kept, at most [`BUDGET`] bytes.
fn kept_cache() -> Cache<String, Kept, Bytes> {
    let options = quick_cache::OptionsBuilder::new()
        .shards(SHARDS)
        // Manifests of some tens of KB: a guess of their number, for the cache's tables.
        .estimated_items_capacity(BUDGET / (32 << 10))
        .weight_capacity(BUDGET as u64)
        .build()
        .unwrap_or_else(|e| unreachable!("constant options: {e}"));
    Cache::with_options(options, Bytes, Default::default(), Default::default())
}

/// Which keys are cached: manifests (`repos/ORG/NAME/manifests/<sha>`).
fn cached_key(key: &str) -> bool {
    key.starts_with("repos/") && key.contains("/manifests/")
}

/// What the wrapper knows, under one lock (a read compares the listing's tag with the
/// kept copy's, and a listing drops both, at once).
struct State {
    /// Key → tag at the latest listing that showed it (a key a later listing of its
    /// prefix no longer shows is dropped, with its copy).
    listed: BTreeMap<String, String>,
    /// Key → (tag, bytes) read, at most [`BUDGET`] bytes.
    kept: Cache<String, Kept, Bytes>,
}

impl Default for State {
    fn default() -> State {
        State {
            listed: BTreeMap::new(),
            kept: kept_cache(),
        }
    }
}

/// The wrapper; everything but `list` and `get` of manifests goes straight through.
pub struct ManifestCache {
    inner: Arc<dyn ObjectStore>,
    state: Mutex<State>,
}

/// `store` reading through a [`ManifestCache`].
pub fn cached(store: &Store) -> Store {
    let backend = Arc::new(ManifestCache {
        inner: store.backend().clone(),
        state: Mutex::default(),
    });
    store.with_backend(backend)
}

impl ManifestCache {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn keep(&self, key: &str, tag: String, bytes: &[u8]) {
        if tag.is_empty() || bytes.len() > BUDGET / SHARDS {
            return;
        }
        self.lock()
            .kept
            .insert(key.to_string(), (tag, Arc::new(bytes.to_vec())));
    }
}

impl ObjectStore for ManifestCache {
    fn put(&self, key: &str, data: &[u8]) -> objects::Result<()> {
        self.inner.put(key, data)
    }

    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> objects::Result<()> {
        self.inner.put_many(objects)
    }

    fn get(&self, key: &str) -> objects::Result<Vec<u8>> {
        if !cached_key(key) {
            return self.inner.get(key);
        }
        let listed = {
            let s = self.lock();
            let listed = s.listed.get(key).cloned();
            if let (Some(t), Some((kt, b))) = (&listed, s.kept.get(key)) {
                if *t == kt {
                    return Ok(b.as_ref().clone());
                }
            }
            listed
        };
        let bytes = self.inner.get(key)?;
        if let Some(tag) = listed {
            if self.inner.stat(key)?.is_some_and(|m| m.tag == tag) {
                self.keep(key, tag, &bytes);
            }
        }
        Ok(bytes)
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> objects::Result<Vec<u8>> {
        self.inner.get_range(key, offset, len)
    }

    fn list(&self, prefix: &str) -> objects::Result<Vec<ObjectMeta>> {
        let out = self.inner.list(prefix)?;
        let mut s = self.lock();
        let present: HashSet<&str> = out.iter().map(|o| o.key.as_str()).collect();
        let gone: Vec<String> = s
            .listed
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, _)| !present.contains(k.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            s.listed.remove(&k);
            s.kept.remove(&k);
        }
        for o in out.iter().filter(|o| cached_key(&o.key)) {
            s.listed.insert(o.key.clone(), o.tag.clone());
        }
        Ok(out)
    }

    fn delete(&self, key: &str) -> objects::Result<()> {
        self.inner.delete(key)
    }

    fn size(&self, key: &str) -> objects::Result<Option<u64>> {
        self.inner.size(key)
    }

    fn stat(&self, key: &str) -> objects::Result<Option<ObjectMeta>> {
        self.inner.stat(key)
    }

    fn now(&self) -> objects::Result<SystemTime> {
        self.inner.now()
    }

    fn temporaries(&self, min_age: std::time::Duration) -> objects::Result<Vec<Temporary>> {
        self.inner.temporaries(min_age)
    }

    fn remove_temporary(&self, t: &Temporary) -> objects::Result<()> {
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

    const KEY: &str = "repos/o/m/manifests/0123456789012345678901234567890123456789";

    #[test]
    fn the_cache_passes_asking_again_on() {
        let mem = Arc::new(objects::MemoryStore::new());
        mem.elsewhere(KEY, b"right".to_vec());
        let c = ManifestCache {
            inner: mem,
            state: Mutex::default(),
        };
        assert_eq!(c.get_again(KEY, 1).unwrap().unwrap(), b"right");
        assert_eq!(c.get_range_again(KEY, 0, 2, 1).unwrap().unwrap(), b"ri");
        assert!(!c.read_only());
    }

    #[test]
    fn kept_manifests_stay_within_the_budget() {
        let c = ManifestCache {
            inner: Arc::new(objects::MemoryStore::new()),
            state: Mutex::default(),
        };
        assert_eq!(c.lock().kept.capacity(), BUDGET as u64);
        let object = vec![7u8; 1 << 20];
        let n = 10 * BUDGET / object.len();
        let (mut most_len, mut most_weight) = (0, 0);
        for i in 0..n {
            c.keep(&format!("{KEY}{i}"), format!("tag{i}"), &object);
            {
                let s = c.lock();
                most_len = most_len.max(s.kept.len());
                most_weight = most_weight.max(s.kept.weight());
            }
            assert!(c.lock().kept.weight() <= BUDGET as u64);
            assert!(
                c.lock().kept.peek(&format!("{KEY}{i}")).is_some(),
                "read {i} just kept"
            );
        }
        // The last read kept is answered from memory under its tag.
        let last = c.lock().kept.get(&format!("{KEY}{}", n - 1));
        assert_eq!(last.map(|(tag, _)| tag), Some(format!("tag{}", n - 1)));
        let (len, weight) = {
            let s = c.lock();
            (s.kept.len(), s.kept.weight())
        };
        assert!(weight > BUDGET as u64 / 2, "{weight}");
        println!(
            "cache-bound serve ui manifest_cache: bound {BUDGET} bytes; after {n} inserts of 1 MiB: \
             {len} entries, {weight} bytes (at most {most_len} entries, {most_weight} bytes)"
        );
        // Larger than a part of the budget: never kept.
        c.keep(KEY, "big".into(), &vec![0u8; BUDGET / SHARDS + 1]);
        assert!(c.lock().kept.peek(KEY).is_none());
    }

    #[test]
    fn a_manifest_is_read_again_only_when_the_listing_shows_it_changed() {
        let mem: Arc<dyn ObjectStore> = Arc::new(objects::MemoryStore::new());
        let c = ManifestCache {
            inner: mem.clone(),
            state: Mutex::default(),
        };
        mem.put(KEY, b"one").unwrap();
        // Never listed: read through, not kept.
        assert_eq!(c.get(KEY).unwrap(), b"one");
        assert!(c.lock().kept.is_empty());
        c.list("repos/").unwrap();
        assert_eq!(c.get(KEY).unwrap(), b"one");
        assert_eq!(c.lock().kept.len(), 1);
        // Replaced: the kept copy answers until a listing shows the new tag.
        mem.put(KEY, b"two!").unwrap();
        c.list("repos/o/").unwrap();
        assert_eq!(c.get(KEY).unwrap(), b"two!");
        // Replaced between the listing and the read: read, but not kept under the old tag.
        c.list("repos/").unwrap();
        mem.put(KEY, b"three").unwrap();
        assert_eq!(
            c.get(KEY).unwrap(),
            b"two!",
            "the kept copy matches the listing"
        );
        c.list("repos/").unwrap();
        mem.put(KEY, b"four").unwrap();
        assert_eq!(c.get(KEY).unwrap(), b"four");
        assert_ne!(c.lock().kept.peek(KEY).unwrap().1.as_slice(), b"four");
        // Gone: the listing no longer shows it, its entries go, the read says so.
        mem.delete(KEY).unwrap();
        c.list("repos/").unwrap();
        assert!(c.lock().listed.is_empty() && c.lock().kept.is_empty());
        assert_eq!(c.lock().kept.weight(), 0);
        assert!(c.get(KEY).is_err());
    }
}
