//! What the pull-through mirror (`serve --upstream`) and `pull` record in the [`Store`]
//! (`docs/format/protocols.md`, "Mirror records"): which repositories the mirror brought from its
//! upstream, which refs its resolution set (the only refs it may move), which commits are
//! stored with only some of their files; and finding a repository whatever the case of its
//! name (the Hub compares ids without ASCII case).

use bincode::Decode;

use super::Store;
use crate::error::{Result, StoreError};
use crate::manifest::{now_secs, MirrorRefObject, MirrorRepoObject, PartialObject, RefObject};
use format::codec::{self, Kind};
use format::layout;
use format::names::{check_ref_name, CommitId, RepoId};

impl Store {
    /// The stored spelling of `repo`: `repo` itself when the store has objects under it,
    /// else the first stored id (in key order) that differs from it only in ASCII case,
    /// else `None`. One LIST of the repository's prefix, and of every repository when that
    /// finds nothing.
    pub fn find_repo(&self, repo: &RepoId) -> Result<Option<RepoId>> {
        if self.has_objects(repo)? {
            return Ok(Some(repo.clone()));
        }
        Ok(self.repos()?.into_iter().find(|r| r.same_repo(repo)))
    }

    /// Whether any object is stored under the repository's prefix (exact spelling).
    pub fn has_objects(&self, repo: &RepoId) -> Result<bool> {
        Ok(!self.backend.list(&layout::repo_prefix(repo))?.is_empty())
    }

    /// Whether the mirror brought `repo` from its upstream (its record exists).
    pub fn mirrored(&self, repo: &RepoId) -> Result<bool> {
        Ok(self.backend.size(&layout::mirror_repo_key(repo))?.is_some())
    }

    /// Records that the mirror brings `repo` from `upstream` (kept as it is if present).
    pub fn mark_mirrored(&self, repo: &RepoId, upstream: &str) -> Result<()> {
        if self.mirrored(repo)? {
            return Ok(());
        }
        let obj = MirrorRepoObject {
            upstream: upstream.to_string(),
            created_at: now_secs(),
        };
        let bytes = codec::encode(Kind::MirrorRepo, &obj, false);
        Ok(self.backend.put(&layout::mirror_repo_key(repo), &bytes)?)
    }

    /// Who set ref `name`: `None` when there is no such ref, `Some(true)` when the mirror's
    /// resolution set it last (its record equals the ref), `Some(false)` when anything
    /// else did (ingest, pull, sync, `modelcas ref`, an older mirror).
    pub fn ref_set_by_mirror(&self, repo: &RepoId, name: &str) -> Result<Option<bool>> {
        let Some(r) = self.decoded::<RefObject>(&layout::ref_key(repo, name), Kind::Ref)? else {
            return Ok(None);
        };
        Ok(Some(self.mirror_record(repo, name)? == Some(record_of(&r))))
    }

    fn mirror_record(&self, repo: &RepoId, name: &str) -> Result<Option<MirrorRefObject>> {
        self.decoded(&layout::mirror_ref_key(repo, name), Kind::MirrorRef)
    }

    /// Points ref `name` at `commit` for the mirror's resolution, with its record, unless
    /// the ref exists and was set otherwise (then nothing is written: `Ok(false)`). Under
    /// a write lease, like [`Store::set_ref`], so that no other ref write interleaves: the
    /// ref first, then the record; a crash between them leaves a ref its record does not
    /// match, which counts as set inside (never moved again: the safe side).
    pub fn follow_ref(&self, repo: &RepoId, name: &str, commit: &CommitId) -> Result<bool> {
        check_ref_name(name)?;
        let lease = self.write_lease()?;
        if !self.has_commit(repo, commit)? {
            return Err(StoreError::Invalid(format!(
                "cannot point {repo} ref {name} at {commit}: no such commit"
            )));
        }
        let key = layout::ref_key(repo, name);
        let before = match self.backend.get(&key) {
            Ok(b) => Some(b),
            Err(objects::ObjectError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        if let Some(b) = &before {
            let r: RefObject = decode_at(&key, Kind::Ref, b)?;
            if self.mirror_record(repo, name)? != Some(record_of(&r)) {
                return Ok(false);
            }
            if r.commit == *commit {
                return Ok(true);
            }
        }
        let obj = RefObject {
            commit: *commit,
            updated_at: now_secs(),
        };
        lease.check()?;
        self.backend
            .put(&key, &codec::encode(Kind::Ref, &obj, false))?;
        let record = codec::encode(Kind::MirrorRef, &record_of(&obj), false);
        self.backend
            .put(&layout::mirror_ref_key(repo, name), &record)?;
        if !self.has_commit(repo, commit)? {
            match before {
                Some(b) => self.backend.put(&key, &b)?,
                None => self.backend.delete(&key)?,
            }
            return Err(StoreError::RemovedMeanwhile {
                repo: repo.to_string(),
                commit: commit.to_hex(),
                what: "the ref was set",
            });
        }
        drop(lease);
        Ok(true)
    }

    /// The record of a partially stored commit, if it is one.
    pub fn partial(&self, repo: &RepoId, commit: &CommitId) -> Result<Option<PartialObject>> {
        self.decoded(&layout::partial_key(repo, commit), Kind::Partial)
    }

    /// Records that `commit` is (about to be) stored with only some of the
    /// `upstream_files` files the upstream lists: written before its manifest.
    pub fn mark_partial(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        upstream_files: u64,
    ) -> Result<()> {
        let obj = PartialObject {
            commit: *commit,
            upstream_files,
            recorded_at: now_secs(),
        };
        let bytes = codec::encode(Kind::Partial, &obj, false);
        Ok(self
            .backend
            .put(&layout::partial_key(repo, commit), &bytes)?)
    }

    /// Removes the record of a partial commit (once every file is stored).
    pub fn clear_partial(&self, repo: &RepoId, commit: &CommitId) -> Result<()> {
        match self.backend.delete(&layout::partial_key(repo, commit)) {
            Ok(()) | Err(objects::ObjectError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The object at `key` decoded as `kind`, `None` when there is none.
    fn decoded<T: Decode<()>>(&self, key: &str, kind: Kind) -> Result<Option<T>> {
        match self.backend.get(key) {
            Ok(b) => decode_at(key, kind, &b).map(Some),
            Err(objects::ObjectError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

fn record_of(r: &RefObject) -> MirrorRefObject {
    MirrorRefObject {
        commit: r.commit,
        updated_at: r.updated_at,
    }
}

fn decode_at<T: Decode<()>>(key: &str, kind: Kind, bytes: &[u8]) -> Result<T> {
    codec::decode(kind, bytes).map_err(|e| StoreError::CorruptObject {
        key: key.to_string(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::handle::CreateOptions;
    use objects::{MemoryStore, ObjectStore};

    fn store() -> (Store, Arc<MemoryStore>, RepoId, CommitId, CommitId) {
        let backend = Arc::new(MemoryStore::new());
        let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
        let repo = RepoId::parse("Org/Model").unwrap();
        let (a, b) = (CommitId([1; 20]), CommitId([2; 20]));
        for c in [&a, &b] {
            backend.put(&layout::manifest_key(&repo, c), b"m").unwrap();
        }
        (store, backend, repo, a, b)
    }

    #[test]
    fn the_mirror_moves_only_the_refs_it_set() {
        let (store, _, repo, a, b) = store();
        assert_eq!(store.ref_set_by_mirror(&repo, "main").unwrap(), None);
        assert!(store.follow_ref(&repo, "main", &a).unwrap());
        assert_eq!(store.ref_set_by_mirror(&repo, "main").unwrap(), Some(true));
        assert!(store.follow_ref(&repo, "main", &b).unwrap());
        assert_eq!(store.resolve(&repo, "main").unwrap(), b);
        // Set inside (even to the same commit, in another second or the same): never moved.
        store.set_ref(&repo, "stable", &a).unwrap();
        assert_eq!(
            store.ref_set_by_mirror(&repo, "stable").unwrap(),
            Some(false)
        );
        assert!(!store.follow_ref(&repo, "stable", &b).unwrap());
        assert_eq!(store.resolve(&repo, "stable").unwrap(), a);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        store.set_ref(&repo, "main", &b).unwrap();
        assert_eq!(store.ref_set_by_mirror(&repo, "main").unwrap(), Some(false));
        assert!(!store.follow_ref(&repo, "main", &a).unwrap());
        assert_eq!(store.resolve(&repo, "main").unwrap(), b);
    }

    #[test]
    fn repositories_are_found_whatever_the_case() {
        let (store, _, repo, _, _) = store();
        let other = RepoId::parse("org/MODEL").unwrap();
        assert_eq!(store.find_repo(&other).unwrap(), Some(repo.clone()));
        assert_eq!(store.find_repo(&repo).unwrap(), Some(repo.clone()));
        let absent = RepoId::parse("org/model2").unwrap();
        assert_eq!(store.find_repo(&absent).unwrap(), None);
        assert!(!store.mirrored(&repo).unwrap());
        store.mark_mirrored(&repo, "http://up").unwrap();
        assert!(store.mirrored(&repo).unwrap());
    }

    #[test]
    fn partial_records_come_and_go() {
        let (store, _, repo, a, _) = store();
        assert_eq!(store.partial(&repo, &a).unwrap(), None);
        store.mark_partial(&repo, &a, 3).unwrap();
        assert_eq!(store.partial(&repo, &a).unwrap().unwrap().upstream_files, 3);
        store.clear_partial(&repo, &a).unwrap();
        store.clear_partial(&repo, &a).unwrap();
        assert_eq!(store.partial(&repo, &a).unwrap(), None);
    }
}
