//! A manifest cache for `serve`'s pages: the object store under the page's [`Store`]
//! remembers the manifests it read, and answers a manifest again from memory only while
//! the store's latest listing still shows the object unchanged (same tag). Each page
//! lists before it reads (`ls`'s rows, `stats` and gc's decision all do), so a page shows
//! what the store holds now, and reading a repository of 1,000 revisions again costs its
//! listings, not 1,000 GETs per function.
//!
//! A read is kept only when a HEAD after it shows the tag the listing showed (an object
//! replaced between the listing and the read is not kept under the old tag). Bounded:
//! [`BUDGET`] bytes in all; an object larger than a quarter of it is never kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use objects::{ObjectMeta, ObjectStore, Temporary};
use repo::Store;

/// Bytes of manifests kept in memory.
pub const BUDGET: usize = 64 << 20;

/// Which keys are cached: manifests (`repos/ORG/NAME/manifests/<sha>`).
fn cached_key(key: &str) -> bool {
    key.starts_with("repos/") && key.contains("/manifests/")
}

#[derive(Default)]
struct State {
    /// Key → tag at the latest listing that showed it (a key a later listing of its
    /// prefix no longer shows is dropped, with its copy).
    listed: BTreeMap<String, String>,
    /// Key → (tag, bytes) read.
    kept: HashMap<String, (String, Arc<Vec<u8>>)>,
    bytes: usize,
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
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn keep(&self, key: &str, tag: String, bytes: &[u8]) {
        if tag.is_empty() || bytes.len() > BUDGET / 4 {
            return;
        }
        let mut s = self.lock();
        if s.bytes + bytes.len() > BUDGET {
            s.kept.clear();
            s.bytes = 0;
        }
        s.bytes += bytes.len();
        if let Some((_, old)) = s
            .kept
            .insert(key.to_string(), (tag, Arc::new(bytes.to_vec())))
        {
            s.bytes -= old.len();
        }
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
                if t == kt {
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
            if let Some((_, b)) = s.kept.remove(&k) {
                s.bytes -= b.len();
            }
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

    fn location(&self) -> String {
        self.inner.location()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "repos/o/m/manifests/0123456789012345678901234567890123456789";

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
        assert_ne!(c.lock().kept[KEY].1.as_slice(), b"four");
        // Gone: the listing no longer shows it, its entries go, the read says so.
        mem.delete(KEY).unwrap();
        c.list("repos/").unwrap();
        assert!(c.lock().listed.is_empty() && c.lock().kept.is_empty());
        assert_eq!(c.lock().bytes, 0);
        assert!(c.get(KEY).is_err());
    }
}
