//! The [`Store`]: an object store plus its config, with the operations on repositories,
//! refs and manifests that every command shares (listing, resolving a revision), and the
//! reading of one chunk (the node chunk cache, gc's forwarding records). Refs and pins are
//! written in `handle/refs.rs`; the mirror's records and case-blind lookups are in
//! `handle/mirror.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use chunker::ChunkParams;
use quick_cache::sync::Cache;

use crate::disk_cache::DiskCache;
use crate::error::{Result, StoreError};
use crate::forward::{self, Dest, Forwards};
use crate::manifest::{now_secs, Manifest, StoreConfig};
use crate::pack;
use crate::pack::{PackId, DEFAULT_PACK_TARGET};
use format::codec::{self, Kind};
use format::layout;
use format::names::{CommitId, RepoId};
use format::{ChunkId, Sha256};
use objects::ObjectStore;

/// A repository's files by SHA-256: a manifest holding each and its position there.
pub type FilesBySha256 = HashMap<Sha256, (Arc<Manifest>, usize)>;

mod mirror;
mod refs;
mod release;
mod tags;

/// Shortest commit prefix accepted as a revision.
pub const MIN_PREFIX: usize = 7;

/// An opened store.
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn ObjectStore>,
    config: StoreConfig,
    disk_cache: Option<Arc<DiskCache>>,
    /// Forwarding records read by [`Store::read_chunk`] after a pack was gone: pack →
    /// (when read, its entries; `None` when it had none), at most [`MOVED_BUDGET`] bytes.
    moved: Arc<MovedCache>,
}

/// Bytes of forwarding records kept in memory (a record evicted is read again, one GET).
pub const MOVED_BUDGET: u64 = 16 << 20;

/// A forwarding record read: when, and its entries by offset (`None`: it had none).
type Moved = (Instant, Option<Arc<HashMap<u32, Dest>>>);

type MovedCache = Cache<PackId, Moved, MovedBytes>;

/// Weighs a forwarding record by the memory of its entries (an offset, a [`Dest`] and the
/// table's own word each) and a fixed part.
#[derive(Clone)]
struct MovedBytes;

impl quick_cache::Weighter<PackId, Moved> for MovedBytes {
    fn weight(&self, _: &PackId, (_, entries): &Moved) -> u64 {
        let each = size_of::<(u32, Dest)>() + size_of::<usize>();
        (64 + entries.as_ref().map_or(0, |e| e.len()) * each) as u64
    }
}

fn moved_cache() -> MovedCache {
    let options = quick_cache::OptionsBuilder::new()
        // Few parts, each large enough for a record of a full pack of small chunks.
        .shards(4)
        .estimated_items_capacity(4096)
        .weight_capacity(MOVED_BUDGET)
        .build()
        .unwrap_or_else(|e| unreachable!("constant options: {e}"));
    Cache::with_options(options, MovedBytes, Default::default(), Default::default())
}

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
        ChunkParams::of_config(&config)
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
            moved: Arc::new(moved_cache()),
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
            forward::follow_with(pack, off, id, frame_len, &mut lookup, &mut |_| {})?;
        if to == pack {
            return Err(err);
        }
        self.read_chunk_at(&layout::pack_key(&to), id, to_off as u64, frame_len, check)
    }

    /// The entry of `moved/<pack>` for `offset`: from the records already read, unless the
    /// entry is not there and the record was read before `since` (gc may have added to it).
    fn moved_entry(&self, pack: &PackId, offset: u32, since: Instant) -> Result<Option<Dest>> {
        if let Some((at, entries)) = self.moved.get(pack) {
            let hit = entries.as_ref().and_then(|e| e.get(&offset)).copied();
            if hit.is_some() || at >= since {
                return Ok(hit);
            }
        }
        let entries =
            forward::read(self.backend.as_ref(), pack)?.map(|r| Arc::new(forward::entries(&r)));
        let hit = entries.as_ref().and_then(|e| e.get(&offset)).copied();
        self.moved.insert(*pack, (Instant::now(), entries));
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
                    crate::metrics::METRICS.disk_cache_hits.inc();
                    return Ok(data);
                }
                Err(_) => cache.remove(id),
            }
        }
        cache.missed(1);
        let (frame, data) =
            pack::read_frame_checked(self.backend.as_ref(), key, id, offset, frame_len)?;
        cache.put(id, &frame);
        Ok(data)
    }

    /// The same store reached through another backend (a wrapper of this one, such as
    /// [`objects::CountingStore`]).
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
        // So does a partial record (the commit may come back whole).
        self.backend.delete(&layout::partial_key(repo, commit))?;
        // And its release records (a record written after this is an orphan, ignored).
        self.delete_release_records(repo, commit)?;
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
        let decode = |b: Vec<u8>| decode_manifest(&key, &b);
        crate::again::decoded(self.backend.as_ref(), &key, bytes, decode)
    }

    /// Reads a manifest with its chunk locations resolved through gc's forwarding records
    /// (`moved/`): one LIST of `moved/`, and a GET per record reachable from its packs.
    /// For readers that found a pack gone, and for whole-revision readers (fsck, export).
    pub fn manifest_resolved(&self, repo: &RepoId, commit: &CommitId) -> Result<Manifest> {
        self.resolved(self.manifest(repo, commit)?)
    }

    /// Every file of `repo`'s revisions by its SHA-256: a manifest holding it (locations
    /// resolved when `resolved`, see [`Store::manifest_resolved`]) and the file's position
    /// there. A revision removed meanwhile is passed over; a repository the store lacks has
    /// no files.
    pub fn files_by_sha256(&self, repo: &RepoId, resolved: bool) -> Result<FilesBySha256> {
        let mut out = HashMap::new();
        let commits = match self.commits(repo) {
            Ok(c) => c,
            Err(StoreError::UnknownRepo(_)) => return Ok(out),
            Err(e) => return Err(e),
        };
        for c in commits {
            let m = match self.manifest(repo, &c) {
                Ok(m) if resolved => Arc::new(self.resolved(m)?),
                Ok(m) => Arc::new(m),
                Err(StoreError::UnknownRevision { .. }) => continue,
                Err(e) => return Err(e),
            };
            for (i, f) in m.files.iter().enumerate() {
                out.entry(f.sha256).or_insert_with(|| (m.clone(), i));
            }
        }
        Ok(out)
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

    /// [`Store::resolve`], with the tag ([`objects::ObjectMeta::tag`]) of the commit's manifest
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
    use quick_cache::Weighter;

    #[test]
    fn forwarding_records_kept_stay_within_their_budget() {
        let cache = moved_cache();
        let dest = |i: u32| Dest {
            id: ChunkId([0; 32]),
            pack: PackId([1; 32]),
            offset: i,
            frame_len: 100,
        };
        // A record of a pack of 1,000 chunks (shared here: weighed each time).
        let entries: Arc<HashMap<u32, Dest>> = Arc::new((0..1000).map(|i| (i, dest(i))).collect());
        let record = (Instant::now(), Some(entries));
        let each = MovedBytes.weight(&PackId([0; 32]), &record);
        assert_eq!(cache.capacity(), MOVED_BUDGET);
        let n = 10 * MOVED_BUDGET / each;
        let pack = |i: u64| {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&i.to_le_bytes());
            PackId(id)
        };
        let (mut most_len, mut most_weight) = (0, 0);
        for i in 0..n {
            cache.insert(pack(i), record.clone());
            most_len = most_len.max(cache.len());
            most_weight = most_weight.max(cache.weight());
            assert!(cache.weight() <= MOVED_BUDGET, "{}", cache.weight());
            assert!(cache.peek(&pack(i)).is_some(), "record {i} just read");
        }
        assert!(cache.weight() > MOVED_BUDGET / 2);
        assert!(cache.get(&pack(n - 1)).is_some(), "the last record");
        println!(
            "cache-bound repo moved: bound {MOVED_BUDGET} bytes; after {n} inserts of {each} bytes: \
             {} entries, {} bytes (at most {most_len} entries, {most_weight} bytes)",
            cache.len(),
            cache.weight()
        );
    }
}
