//! Refs and pins of the [`Store`]: listing them, and writing them under a write lease so
//! that a gc expiring the commit they name cannot interleave (`docs/format/protocols.md`, "Garbage
//! collection").

use std::collections::{BTreeMap, HashMap};

use super::Store;
use crate::error::{Result, StoreError};
use crate::failpoint;
use crate::lock::{self, Held};
use crate::manifest::{now_secs, PinObject, RefObject};
use format::codec::{self, Kind};
use format::layout;
use format::names::{check_ref_name, CommitId, RepoId};

impl Store {
    /// The refs of a repository: name → commit.
    pub fn refs(&self, repo: &RepoId) -> Result<BTreeMap<String, CommitId>> {
        let mut out = BTreeMap::new();
        for obj in self.backend.list(&layout::refs_prefix(repo))? {
            let Some(name) = layout::ref_name_from_key(repo, &obj.key) else {
                continue;
            };
            let bytes = self.backend.get(&obj.key)?;
            let decode = |b: Vec<u8>| {
                codec::decode::<RefObject>(Kind::Ref, &b).map_err(|e| StoreError::CorruptObject {
                    key: obj.key.clone(),
                    reason: e.to_string(),
                })
            };
            let r = crate::again::decoded(self.backend.as_ref(), &obj.key, bytes, decode)?;
            out.insert(name, r.commit);
        }
        Ok(out)
    }

    /// Takes a write lease: held while a pin, ref or rm checks a commit and writes what
    /// names it, so that a gc expiring that commit waits for it before it lists refs and
    /// pins again (`docs/format/protocols.md`, "Garbage collection").
    pub(super) fn write_lease(&self) -> Result<Held> {
        Held::write_lease(self.backend.clone(), lock::WRITE_LEASE_TTL)
    }

    /// Points `name` at `commit` (which must have a manifest: data first, then the
    /// manifest, then the ref). Under a write lease: the commit is checked, the ref
    /// written, and the commit checked again; if gc expired it (or `rm` removed it)
    /// meanwhile, the ref is put back as it was and [`StoreError::RemovedMeanwhile`]
    /// returned.
    pub fn set_ref(&self, repo: &RepoId, name: &str, commit: &CommitId) -> Result<()> {
        let one = [(repo.clone(), name.to_string(), *commit)];
        self.set_refs(&one)?.pop().unwrap_or(Ok(()))
    }

    /// [`Store::set_ref`] for several refs under one write lease: every commit is checked,
    /// the refs are written together ([`ObjectStore::put_many`](objects::ObjectStore::put_many): one batch of syncs on the
    /// local store, concurrent PUTs on S3), and every commit is checked again. Returns one
    /// outcome per entry, in order: `Ok`, or [`StoreError::RemovedMeanwhile`] for a ref
    /// whose commit went meanwhile (that ref is put back as it was, and every entry naming
    /// it fails). Of several entries naming one ref the last is written, as calls one after
    /// the other would leave it. A
    /// refused name or a commit missing at the first check fails the whole call before any
    /// ref is written.
    pub fn set_refs(&self, refs: &[(RepoId, String, CommitId)]) -> Result<Vec<Result<()>>> {
        for (_, name, _) in refs {
            check_ref_name(name)?;
        }
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let lease = self.write_lease()?;
        for (repo, name, commit) in refs {
            if !self.has_commit(repo, commit)? {
                return Err(StoreError::Invalid(format!(
                    "cannot point {repo} ref {name} at {commit}: no such commit"
                )));
            }
        }
        let keys: Vec<String> = refs.iter().map(|(r, n, _)| layout::ref_key(r, n)).collect();
        let last: HashMap<&str, usize> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let writes: Vec<usize> = (0..refs.len())
            .filter(|&i| last[keys[i].as_str()] == i)
            .collect();
        let mut before = Vec::with_capacity(writes.len());
        for &i in &writes {
            before.push(match self.backend.get(&keys[i]) {
                Ok(b) => Some(b),
                Err(objects::ObjectError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            });
        }
        failpoint::pause("ref-after-check");
        let updated_at = now_secs();
        let objects: Vec<(String, Vec<u8>)> = writes
            .iter()
            .map(|&i| {
                let obj = RefObject {
                    commit: refs[i].2,
                    updated_at,
                };
                (keys[i].clone(), codec::encode(Kind::Ref, &obj, false))
            })
            .collect();
        lease.check()?;
        self.backend.put_many(&objects)?;
        let mut outcomes: Vec<Result<()>> = refs.iter().map(|_| Ok(())).collect();
        for (&i, before) in writes.iter().zip(before) {
            let (repo, _, commit) = &refs[i];
            if self.has_commit(repo, commit)? {
                continue;
            }
            match before {
                Some(b) => self.backend.put(&keys[i], &b)?,
                None => self.backend.delete(&keys[i])?,
            }
            // The ref is as it was before the call: no entry naming it stands, the earlier
            // ones of the same name included.
            for (j, key) in keys.iter().enumerate() {
                if *key == keys[i] {
                    outcomes[j] = Err(StoreError::RemovedMeanwhile {
                        repo: repo.to_string(),
                        commit: refs[j].2.to_hex(),
                        what: "the ref was set",
                    });
                }
            }
        }
        drop(lease);
        Ok(outcomes)
    }

    /// Deletes a ref; [`StoreError::UnknownRevision`] when there is no such ref.
    pub fn delete_ref(&self, repo: &RepoId, name: &str) -> Result<CommitId> {
        let _lease = self.write_lease()?;
        let Some(commit) = self.refs(repo)?.get(name).copied() else {
            return Err(StoreError::UnknownRevision {
                repo: repo.to_string(),
                rev: name.to_string(),
            });
        };
        self.backend.delete(&layout::ref_key(repo, name))?;
        Ok(commit)
    }

    /// The pinned commits of a repository.
    pub fn pins(&self, repo: &RepoId) -> Result<Vec<CommitId>> {
        self.commits_under(&layout::pins_prefix(repo))
    }

    /// Pins a commit: no retention policy expires it. Returns false if it was pinned
    /// already.
    ///
    /// Under a write lease, like [`Store::set_ref`]: if the commit is removed between the
    /// check and the pin, the pin is deleted again and [`StoreError::RemovedMeanwhile`]
    /// returned.
    pub fn pin(&self, repo: &RepoId, commit: &CommitId) -> Result<bool> {
        let lease = self.write_lease()?;
        if !self.has_commit(repo, commit)? {
            return Err(StoreError::UnknownRevision {
                repo: repo.to_string(),
                rev: commit.to_hex(),
            });
        }
        let key = layout::pin_key(repo, commit);
        if self.backend.size(&key)?.is_some() {
            return Ok(false);
        }
        failpoint::pause("pin-after-check");
        let obj = PinObject {
            commit: *commit,
            pinned_at: now_secs(),
        };
        lease.check()?;
        self.backend
            .put(&key, &codec::encode(Kind::Pin, &obj, false))?;
        if !self.has_commit(repo, commit)? {
            self.backend.delete(&key)?;
            return Err(StoreError::RemovedMeanwhile {
                repo: repo.to_string(),
                commit: commit.to_hex(),
                what: "it was pinned",
            });
        }
        drop(lease);
        Ok(true)
    }

    /// Unpins a commit; [`StoreError::Invalid`] if it was not pinned.
    pub fn unpin(&self, repo: &RepoId, commit: &CommitId) -> Result<()> {
        let key = layout::pin_key(repo, commit);
        if self.backend.size(&key)?.is_none() {
            return Err(StoreError::Invalid(format!(
                "{repo}@{commit} is not pinned"
            )));
        }
        Ok(self.backend.delete(&key)?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use super::*;
    use crate::handle::CreateOptions;
    use objects::Result as ObjResult;
    use objects::{MemoryStore, ObjectMeta, ObjectStore};

    /// A memory store where a "gc" removes one key just before the next batch of puts
    /// lands: a commit that goes between `set_refs`'s first check and its writes.
    struct GcDuringPut {
        inner: MemoryStore,
        remove: Mutex<Option<String>>,
    }

    impl ObjectStore for GcDuringPut {
        fn put(&self, key: &str, data: &[u8]) -> ObjResult<()> {
            self.inner.put(key, data)
        }
        fn put_many(&self, objects: &[(String, Vec<u8>)]) -> ObjResult<()> {
            if let Some(key) = self.remove.lock().take() {
                self.inner.delete(&key)?;
            }
            self.inner.put_many(objects)
        }
        fn get(&self, key: &str) -> ObjResult<Vec<u8>> {
            self.inner.get(key)
        }
        fn get_range(&self, key: &str, offset: u64, len: u64) -> ObjResult<Vec<u8>> {
            self.inner.get_range(key, offset, len)
        }
        fn list(&self, prefix: &str) -> ObjResult<Vec<ObjectMeta>> {
            self.inner.list(prefix)
        }
        fn delete(&self, key: &str) -> ObjResult<()> {
            self.inner.delete(key)
        }
        fn size(&self, key: &str) -> ObjResult<Option<u64>> {
            self.inner.size(key)
        }
        fn stat(&self, key: &str) -> ObjResult<Option<ObjectMeta>> {
            self.inner.stat(key)
        }
        fn now(&self) -> ObjResult<std::time::SystemTime> {
            self.inner.now()
        }
        fn location(&self) -> String {
            self.inner.location()
        }
    }

    fn store() -> (Store, Arc<GcDuringPut>, RepoId, [CommitId; 3]) {
        let backend = Arc::new(GcDuringPut {
            inner: MemoryStore::new(),
            remove: Mutex::new(None),
        });
        let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
        let repo = RepoId::parse("org/model").unwrap();
        let commits = [CommitId([1; 20]), CommitId([2; 20]), CommitId([3; 20])];
        for c in &commits {
            // set_refs only asks whether the manifest object exists.
            backend.put(&layout::manifest_key(&repo, c), b"m").unwrap();
        }
        (store, backend, repo, commits)
    }

    #[test]
    fn set_refs_writes_every_ref_and_the_last_of_a_name_wins() {
        let (store, _, repo, [a, b, c]) = store();
        let batch = [
            (repo.clone(), "main".to_string(), a),
            (repo.clone(), "dev".to_string(), b),
            (repo.clone(), "main".to_string(), c),
        ];
        let outcomes = store.set_refs(&batch).unwrap();
        assert!(outcomes.iter().all(|o| o.is_ok()));
        let refs = store.refs(&repo).unwrap();
        assert_eq!(refs.get("main"), Some(&c));
        assert_eq!(refs.get("dev"), Some(&b));
        assert_eq!(refs.len(), 2);
    }

    #[test]
    fn set_refs_with_a_missing_commit_or_a_bad_name_writes_nothing() {
        let (store, _, repo, [a, _, _]) = store();
        let missing = CommitId([9; 20]);
        let batch = [
            (repo.clone(), "main".to_string(), a),
            (repo.clone(), "dev".to_string(), missing),
        ];
        assert!(store.set_refs(&batch).is_err());
        let bad = [
            (repo.clone(), "main".to_string(), a),
            (repo.clone(), "../x".to_string(), a),
        ];
        assert!(store.set_refs(&bad).is_err());
        assert!(store.refs(&repo).unwrap().is_empty());
        assert!(store.set_refs(&[]).unwrap().is_empty());
    }

    /// A commit removed between the first check and the write: its ref is put back as it
    /// was (restored or deleted) and reported RemovedMeanwhile; the others stand.
    #[test]
    fn set_refs_takes_back_the_refs_of_a_commit_removed_meanwhile() {
        let (store, backend, repo, [a, b, c]) = store();
        store.set_ref(&repo, "stable", &a).unwrap();
        *backend.remove.lock() = Some(layout::manifest_key(&repo, &b));
        let batch = [
            (repo.clone(), "stable".to_string(), b),
            (repo.clone(), "new".to_string(), b),
            (repo.clone(), "main".to_string(), c),
        ];
        let outcomes = store.set_refs(&batch).unwrap();
        assert!(matches!(
            outcomes[0],
            Err(StoreError::RemovedMeanwhile { .. })
        ));
        assert!(matches!(
            outcomes[1],
            Err(StoreError::RemovedMeanwhile { .. })
        ));
        assert!(outcomes[2].is_ok());
        let refs = store.refs(&repo).unwrap();
        assert_eq!(refs.get("stable"), Some(&a), "put back as it was");
        assert_eq!(refs.get("new"), None, "deleted again");
        assert_eq!(refs.get("main"), Some(&c));
        // Two entries for one name, the last one's commit removed: the ref is put back,
        // and neither entry reports success.
        *backend.remove.lock() = Some(layout::manifest_key(&repo, &c));
        let batch = [
            (repo.clone(), "stable".to_string(), a),
            (repo.clone(), "stable".to_string(), c),
        ];
        let outcomes = store.set_refs(&batch).unwrap();
        assert!(outcomes.iter().all(|o| o.is_err()), "{outcomes:?}");
        assert_eq!(store.refs(&repo).unwrap().get("stable"), Some(&a));
    }
}
