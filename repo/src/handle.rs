//! The [`Store`]: an object store plus its config, with the operations on repositories,
//! refs and manifests that every command shares (listing, resolving a revision).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chunker::ChunkParams;

use crate::backend::ObjectStore;
use crate::codec::{self, Kind};
use crate::disk_cache::DiskCache;
use crate::failpoint;
use crate::forward::{self, Dest, Forwards};
use crate::layout;
use crate::lock::{self, Held};
use crate::manifest::{now_secs, Manifest, PinObject, RefObject, StoreConfig};
use crate::names::{check_ref_name, CommitId, RepoId};
use crate::pack;
use crate::pack::{PackId, DEFAULT_PACK_TARGET};
use crate::{Result, StoreError};
use chunker::ChunkId;

/// Shortest commit prefix accepted as a revision.
pub const MIN_PREFIX: usize = 7;

/// An opened store.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn ObjectStore>,
    config: StoreConfig,
    disk_cache: Option<Arc<DiskCache>>,
    /// Forwarding records read by [`Store::read_chunk`] after a pack was gone: pack →
    /// (when read, its entries; `None` when it had none).
    moved: Arc<Mutex<MovedCache>>,
}

type MovedCache = HashMap<PackId, (Instant, Option<Arc<HashMap<u32, Dest>>>)>;

/// Options for creating a new store.
#[derive(Clone, Copy, Debug)]
pub struct CreateOptions {
    /// Chunking parameters.
    pub chunk: ChunkParams,
    /// Pack size target.
    pub pack_target: usize,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            chunk: ChunkParams::default(),
            pack_target: DEFAULT_PACK_TARGET,
        }
    }
}

impl Store {
    /// Opens an existing store; [`StoreError::NoStore`] when there is no config object.
    pub fn open(backend: Arc<dyn ObjectStore>) -> Result<Store> {
        let bytes = match backend.get(layout::CONFIG_KEY) {
            Ok(b) => b,
            Err(objects::ObjectError::NotFound(_)) => {
                return Err(StoreError::NoStore(backend.location()))
            }
            Err(e) => return Err(e.into()),
        };
        let config: StoreConfig =
            codec::decode(Kind::Config, &bytes).map_err(|e| StoreError::CorruptObject {
                key: layout::CONFIG_KEY.into(),
                reason: e.to_string(),
            })?;
        config
            .chunk_params()
            .validate()
            .map_err(|e| StoreError::CorruptObject {
                key: layout::CONFIG_KEY.into(),
                reason: e.to_string(),
            })?;
        crate::features::check(backend.as_ref(), false)?;
        Ok(Store {
            backend,
            config,
            disk_cache: None,
            moved: Arc::default(),
        })
    }

    /// Opens the store, creating it with `opts` if it has no config yet.
    pub fn open_or_create(backend: Arc<dyn ObjectStore>, opts: CreateOptions) -> Result<Store> {
        match Store::open(backend.clone()) {
            Err(StoreError::NoStore(_)) => {}
            other => return other,
        }
        opts.chunk
            .validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let mut store_id = [0u8; 16];
        let seed = format!(
            "{}-{}-{:?}",
            backend.location(),
            std::process::id(),
            std::time::SystemTime::now()
        );
        store_id.copy_from_slice(&blake3::hash(seed.as_bytes()).as_bytes()[..16]);
        let config = StoreConfig {
            store_id,
            created_at: now_secs(),
            chunk_min: opts.chunk.min,
            chunk_avg: opts.chunk.avg,
            chunk_max: opts.chunk.max,
            pack_target: opts.pack_target as u32,
        };
        backend.put(
            layout::CONFIG_KEY,
            &codec::encode(Kind::Config, &config, false),
        )?;
        // Another process may have created it at the same moment: whoever's config is
        // there now wins, and both use it.
        Store::open(backend)
    }

    /// Reads through a node-local chunk cache from now on.
    pub fn with_disk_cache(mut self, cache: DiskCache) -> Store {
        self.disk_cache = Some(Arc::new(cache));
        self
    }

    /// The node-local chunk cache, if any.
    pub fn disk_cache(&self) -> Option<&Arc<DiskCache>> {
        self.disk_cache.as_ref()
    }

    /// One chunk's bytes: from the node-local cache when it holds a frame that passes its
    /// check, else from the pack (and then into the cache). With `check` false a frame read
    /// from the pack is only decoded, not hashed (the caller checks a whole-file sha256);
    /// cached frames are always checked.
    ///
    /// When the pack is gone, the chunk is looked for where gc's forwarding records say it
    /// was copied (`moved/`, see [`crate::forward`]): every reader that reads through here
    /// (cat, checkout, verify, the mount, serve) keeps reading a kept revision whose packs
    /// were rewritten and deleted, without reloading its manifest.
    pub fn read_chunk(
        &self,
        key: &str,
        id: &ChunkId,
        offset: u64,
        frame_len: u32,
        check: bool,
    ) -> Result<Vec<u8>> {
        let started = Instant::now();
        let err = match self.read_chunk_at(key, id, offset, frame_len, check) {
            Err(e) if e.is_not_found() => e,
            other => return other,
        };
        let (Some(pack), Ok(off)) = (layout::parse_pack_key(key), u32::try_from(offset)) else {
            return Err(err);
        };
        let mut lookup = |p: &PackId, o: u32| self.moved_entry(p, o, started);
        let (to, to_off) =
            forward::follow_with(pack, off, &id.0, frame_len, &mut lookup, &mut |_| {})?;
        if to == pack {
            return Err(err);
        }
        self.read_chunk_at(&layout::pack_key(&to), id, to_off as u64, frame_len, check)
    }

    /// The entry of `moved/<pack>` for `offset`: from the records already read, unless the
    /// entry is not there and the record was read before `since` (gc may have added to it).
    fn moved_entry(&self, pack: &PackId, offset: u32, since: Instant) -> Result<Option<Dest>> {
        {
            let cache = self.moved.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, entries)) = cache.get(pack) {
                let hit = entries.as_ref().and_then(|e| e.get(&offset)).copied();
                if hit.is_some() || *at >= since {
                    return Ok(hit);
                }
            }
        }
        let entries =
            forward::read(self.backend.as_ref(), pack)?.map(|r| Arc::new(forward::entries(&r)));
        let hit = entries.as_ref().and_then(|e| e.get(&offset)).copied();
        self.moved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(*pack, (Instant::now(), entries));
        Ok(hit)
    }

    fn read_chunk_at(
        &self,
        key: &str,
        id: &ChunkId,
        offset: u64,
        frame_len: u32,
        check: bool,
    ) -> Result<Vec<u8>> {
        let Some(cache) = &self.disk_cache else {
            return if check {
                pack::read_chunk(self.backend.as_ref(), key, id, offset, frame_len)
            } else {
                pack::read_chunk_unchecked(self.backend.as_ref(), key, id, offset, frame_len)
            };
        };
        if let Some(frame) = cache.get(id) {
            match pack::decode_checked(&frame, id, key, offset) {
                Ok(data) => {
                    crate::metrics::add(&crate::metrics::METRICS.disk_cache_hits, 1);
                    return Ok(data);
                }
                Err(_) => cache.remove(id),
            }
        }
        crate::metrics::add(&crate::metrics::METRICS.disk_cache_misses, 1);
        let frame = pack::read_frame(self.backend.as_ref(), key, id, offset, frame_len)?;
        let data = pack::decode_checked(&frame, id, key, offset)?;
        cache.put(id, &frame);
        Ok(data)
    }

    /// The same store reached through another backend (a wrapper of this one, such as
    /// [`crate::backend::CountingStore`]).
    pub fn with_backend(&self, backend: Arc<dyn ObjectStore>) -> Store {
        Store {
            backend,
            config: self.config.clone(),
            disk_cache: self.disk_cache.clone(),
            moved: self.moved.clone(),
        }
    }

    /// The object store.
    pub fn backend(&self) -> &Arc<dyn ObjectStore> {
        &self.backend
    }

    /// The config.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Every repository with at least one manifest or ref.
    pub fn repos(&self) -> Result<Vec<RepoId>> {
        let mut out = std::collections::BTreeSet::new();
        for obj in self.backend.list(layout::REPOS_PREFIX)? {
            let mut parts = obj.key[layout::REPOS_PREFIX.len()..].split('/');
            if let (Some(org), Some(name)) = (parts.next(), parts.next()) {
                if let Ok(r) = RepoId::parse(&format!("{org}/{name}")) {
                    out.insert(r);
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// The commits of a repository (those with a manifest), sorted.
    pub fn commits(&self, repo: &RepoId) -> Result<Vec<CommitId>> {
        self.commits_under(&layout::manifests_prefix(repo))
    }

    /// The commit ids named by the keys under `prefix` (`.../<40 hex>`).
    fn commits_under(&self, prefix: &str) -> Result<Vec<CommitId>> {
        Ok(self
            .backend
            .list(prefix)?
            .into_iter()
            .filter_map(|o| CommitId::parse(&o.key[prefix.len()..]).ok())
            .collect())
    }

    /// The refs of a repository: name → commit.
    pub fn refs(&self, repo: &RepoId) -> Result<BTreeMap<String, CommitId>> {
        let mut out = BTreeMap::new();
        for obj in self.backend.list(&layout::refs_prefix(repo))? {
            let Some(name) = layout::ref_name_from_key(repo, &obj.key) else {
                continue;
            };
            let bytes = self.backend.get(&obj.key)?;
            let r: RefObject =
                codec::decode(Kind::Ref, &bytes).map_err(|e| StoreError::CorruptObject {
                    key: obj.key.clone(),
                    reason: e.to_string(),
                })?;
            out.insert(name, r.commit);
        }
        Ok(out)
    }

    /// Takes a write lease: held while a pin, ref or rm checks a commit and writes what
    /// names it, so that a gc expiring that commit waits for it before it lists refs and
    /// pins again (`docs/FORMAT.md`, "Garbage collection").
    fn write_lease(&self) -> Result<Held> {
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
    /// the refs are written together ([`ObjectStore::put_many`]: one batch of syncs on the
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

    /// Removes a commit's manifest (its data goes at the next gc runs). Refuses a commit
    /// that a ref points to or that is pinned, unless `force`, which deletes those refs and
    /// the pin first (so that no ref ever points at a missing commit). Returns the refs
    /// deleted.
    pub fn remove_commit(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        force: bool,
    ) -> Result<Vec<String>> {
        let lease = self.write_lease()?;
        if !self.has_commit(repo, commit)? {
            return Err(StoreError::UnknownRevision {
                repo: repo.to_string(),
                rev: commit.to_hex(),
            });
        }
        let refs: Vec<String> = self
            .refs(repo)?
            .into_iter()
            .filter(|(_, c)| c == commit)
            .map(|(n, _)| n)
            .collect();
        let pinned = self.backend.size(&layout::pin_key(repo, commit))?.is_some();
        if !force && (!refs.is_empty() || pinned) {
            let mut why = Vec::new();
            if !refs.is_empty() {
                why.push(format!("refs {} point to it", refs.join(", ")));
            }
            if pinned {
                why.push("it is pinned".to_string());
            }
            return Err(StoreError::Invalid(format!(
                "refusing to remove {repo}@{commit}: {} (use --force to remove them too)",
                why.join(" and ")
            )));
        }
        lease.check()?;
        for r in &refs {
            self.backend.delete(&layout::ref_key(repo, r))?;
        }
        if pinned {
            self.backend.delete(&layout::pin_key(repo, commit))?;
        }
        self.backend.delete(&layout::manifest_key(repo, commit))?;
        // Its last-use record goes with it (a reader racing with the removal may write it
        // again; an orphan record is ignored and removed by the next gc).
        self.backend.delete(&layout::used_key(repo, commit))?;
        Ok(refs)
    }

    /// Reads a manifest.
    pub fn manifest(&self, repo: &RepoId, commit: &CommitId) -> Result<Manifest> {
        let key = layout::manifest_key(repo, commit);
        let bytes = match self.backend.get(&key) {
            Err(objects::ObjectError::NotFound(_)) => {
                return Err(StoreError::UnknownRevision {
                    repo: repo.to_string(),
                    rev: commit.to_hex(),
                })
            }
            other => other?,
        };
        decode_manifest(&key, &bytes)
    }

    /// Reads a manifest with its chunk locations resolved through gc's forwarding records
    /// (`moved/`): one LIST of `moved/`, and a GET per record reachable from its packs.
    /// For readers that found a pack gone, and for whole-revision readers (fsck, export).
    pub fn manifest_resolved(&self, repo: &RepoId, commit: &CommitId) -> Result<Manifest> {
        self.resolved(self.manifest(repo, commit)?)
    }

    /// `m` with its chunk locations resolved through the forwarding records reachable
    /// from its pack table (see [`Store::manifest_resolved`]).
    pub fn resolved(&self, m: Manifest) -> Result<Manifest> {
        let fw: Forwards = forward::load_reachable(self.backend.as_ref(), &m.packs)?;
        Ok(forward::resolve_locations(&m, &fw))
    }

    /// Whether a manifest exists for the commit.
    pub fn has_commit(&self, repo: &RepoId, commit: &CommitId) -> Result<bool> {
        Ok(self
            .backend
            .size(&layout::manifest_key(repo, commit))?
            .is_some())
    }

    /// Resolves a revision: a ref name, a full commit sha, or a unique prefix of at least
    /// [`MIN_PREFIX`] hex digits. A ref name wins over a prefix.
    pub fn resolve(&self, repo: &RepoId, rev: &str) -> Result<CommitId> {
        Ok(self.resolve_tagged(repo, rev)?.0)
    }

    /// [`Store::resolve`], with the tag ([`crate::backend::ObjectMeta::tag`]) of the commit's manifest
    /// object from the same listing ("" when the manifest is missing). The tag changes when
    /// a commit is removed and ingested again, so a cache of manifests that keeps the tag
    /// with each never serves a replaced one.
    pub fn resolve_tagged(&self, repo: &RepoId, rev: &str) -> Result<(CommitId, String)> {
        let prefix = layout::manifests_prefix(repo);
        let listed: Vec<(CommitId, String)> = self
            .backend
            .list(&prefix)?
            .into_iter()
            .filter_map(|o| Some((CommitId::parse(&o.key[prefix.len()..]).ok()?, o.tag)))
            .collect();
        let tag_of = |c: CommitId| {
            let tag = listed.iter().find(|(l, _)| *l == c).map(|(_, t)| t.clone());
            (c, tag.unwrap_or_default())
        };
        let commits: Vec<CommitId> = listed.iter().map(|(c, _)| *c).collect();
        let refs = self.refs(repo)?;
        if commits.is_empty() && refs.is_empty() {
            return Err(StoreError::UnknownRepo(repo.to_string()));
        }
        if let Some(c) = refs.get(rev) {
            return Ok(tag_of(*c));
        }
        let unknown = || StoreError::UnknownRevision {
            repo: repo.to_string(),
            rev: rev.to_string(),
        };
        let lower = rev.to_ascii_lowercase();
        if lower.len() < MIN_PREFIX
            || lower.len() > 40
            || !lower.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(unknown());
        }
        let matches: Vec<&CommitId> = commits
            .iter()
            .filter(|c| c.to_hex().starts_with(&lower))
            .collect();
        match matches.as_slice() {
            [one] => Ok(tag_of(**one)),
            [] => Err(unknown()),
            many => Err(StoreError::AmbiguousRevision {
                repo: repo.to_string(),
                rev: rev.to_string(),
                candidates: many.iter().map(|c| c.to_hex()).collect(),
            }),
        }
    }
}

/// Decodes a manifest read from `key` and checks it: [`format::manifest::decode`], the one
/// way any reader gets a [`Manifest`] from bytes.
pub fn decode_manifest(key: &str, bytes: &[u8]) -> Result<Manifest> {
    Ok(format::manifest::decode(key, bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{MemoryStore, ObjectMeta};
    use objects::Result as ObjResult;

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
            if let Some(key) = self.remove.lock().unwrap().take() {
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
        *backend.remove.lock().unwrap() = Some(layout::manifest_key(&repo, &b));
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
        *backend.remove.lock().unwrap() = Some(layout::manifest_key(&repo, &c));
        let batch = [
            (repo.clone(), "stable".to_string(), a),
            (repo.clone(), "stable".to_string(), c),
        ];
        let outcomes = store.set_refs(&batch).unwrap();
        assert!(outcomes.iter().all(|o| o.is_err()), "{outcomes:?}");
        assert_eq!(store.refs(&repo).unwrap().get("stable"), Some(&a));
    }
}
