//! The local RocksDB index: a cache that makes dedup and lookups fast on one machine.
//!
//! The bucket is the source of truth; this index can always be rebuilt from it
//! ([`Index::rebuild`]) because every pack carries a footer listing its chunks. Column
//! families (values documented in `docs/FORMAT.md`, "Local index"):
//!
//! * `chunks`: chunk id (32 bytes) → pack id (32) ‖ frame offset u32 ‖ frame length u32 ‖
//!   raw length u32, little endian (44 bytes).
//! * `packs`: pack id (32 bytes) → envelope `MCASIPAK` of [`IndexedPack`] (size and the
//!   chunk ids, so entries can be dropped when a pack disappears).
//! * `manifests`: object key → u16 tag length ‖ tag ‖ the object's bytes: a cache of small
//!   objects (manifests) that gc reads every run, valid while the listing shows the same
//!   tag; and `files/<64 hex sha256>` → the chunks (id, length) of a file ingest read, so a
//!   later pull reads it back instead of downloading it ([`Index::file_chunks`]); and
//!   `stamps/<dev>/<ino>` → a file's stamp and content when ingest read it, so a later
//!   ingest takes it unread ([`Index::stamped_file`], [`FileStamp`]).
//! * `meta`: `store_id` → the 16-byte id of the store this index belongs to; `version`.
//!
//! Before an ingest trusts the index it calls [`Index::sync`], which lists the bucket's
//! packs, reads the footers of packs it has not seen (written by another machine or by an
//! interrupted run) and forgets packs that are gone **or condemned by gc**
//! (`gc/condemned`): an ingest never deduplicates against a pack gc may delete. A known pack
//! whose listed size differs from the size recorded when it was learned (cut short by a
//! power loss after the index recorded it) is forgotten and learned again from its footer.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use bincode::{Decode, Encode};
use format::ChunkId;
use rocksdb::{ColumnFamilyDescriptor, Options, WriteBatch, DB};

use repo::backend::ObjectStore;
use repo::codec::{self, Kind};
use repo::layout;
use repo::pack::{self, FooterEntry, PackId};
use repo::{Result, StoreError};

const CF_CHUNKS: &str = "chunks";
const CF_PACKS: &str = "packs";
const CF_MANIFESTS: &str = "manifests";
const CF_META: &str = "meta";
/// Version of the index layout; an index of another version is rebuilt.
const INDEX_VERSION: u32 = 2;

/// Where a chunk is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLoc {
    /// The pack holding the frame.
    pub pack: PackId,
    /// Offset of the frame in the pack.
    pub offset: u32,
    /// Frame length.
    pub frame_len: u32,
    /// Uncompressed length.
    pub raw_len: u32,
}

impl ChunkLoc {
    fn to_bytes(self) -> [u8; 44] {
        let mut b = [0u8; 44];
        b[..32].copy_from_slice(&self.pack.0);
        b[32..36].copy_from_slice(&self.offset.to_le_bytes());
        b[36..40].copy_from_slice(&self.frame_len.to_le_bytes());
        b[40..44].copy_from_slice(&self.raw_len.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> Option<ChunkLoc> {
        if b.len() != 44 {
            return None;
        }
        let u = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut pack = [0u8; 32];
        pack.copy_from_slice(&b[..32]);
        Some(ChunkLoc {
            pack: PackId(pack),
            offset: u(32),
            frame_len: u(36),
            raw_len: u(40),
        })
    }
}

/// What the index remembers of a pack.
#[derive(Clone, Debug, Encode, Decode)]
pub struct IndexedPack {
    /// Object size in bytes.
    pub size: u64,
    /// The chunk ids in the pack.
    pub chunks: Vec<[u8; 32]>,
}

/// What [`Index::sync`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Packs in the bucket.
    pub packs: usize,
    /// Packs newly learned (footers read).
    pub learned: usize,
    /// Packs forgotten because they are no longer in the bucket or are condemned.
    pub forgotten: usize,
    /// Packs gc has condemned (not used for dedup).
    pub condemned: usize,
}

/// The RocksDB index of one store.
pub struct Index {
    db: DB,
    path: PathBuf,
}

impl Index {
    /// Opens (creating if needed) the index at `path` for the store `store_id`. An index
    /// that belongs to another store, or has another layout version, is wiped.
    ///
    /// The index is a cache of the bucket: one RocksDB reports damaged at open (a
    /// `CURRENT` or `MANIFEST` cut short or with other bytes, as a crash of the node's disk
    /// can leave) is discarded with a warning and made again, empty; commands then learn
    /// the packs from the bucket again.
    pub fn open(path: &Path, store_id: &[u8; 16]) -> Result<Index> {
        std::fs::create_dir_all(path).map_err(|e| StoreError::io(path, e))?;
        let idx = match Self::open_db(path) {
            Err(Damaged(why)) => {
                tracing::warn!("{why}; discarding it and learning the store's packs again");
                discard(path)?;
                Self::open_db(path).map_err(Opening::into_error)?
            }
            other => other.map_err(Opening::into_error)?,
        };
        let meta = idx.cf(CF_META)?;
        let id = idx.db.get_cf(meta, b"store_id").map_err(|e| idx.err(e))?;
        let version = idx.db.get_cf(meta, b"version").map_err(|e| idx.err(e))?;
        let matches = id.as_deref() == Some(&store_id[..])
            && version.as_deref() == Some(&INDEX_VERSION.to_le_bytes()[..]);
        if matches {
            return Ok(idx);
        }
        drop(idx);
        if id.is_some() {
            DB::destroy(&Options::default(), path).map_err(|e| index_err(path, e))?;
        }
        let idx = Self::open_db(path).map_err(Opening::into_error)?;
        let meta = idx.cf(CF_META)?;
        idx.db
            .put_cf(meta, b"store_id", store_id)
            .map_err(|e| idx.err(e))?;
        idx.db
            .put_cf(meta, b"version", INDEX_VERSION.to_le_bytes())
            .map_err(|e| idx.err(e))?;
        Ok(idx)
    }

    fn open_db(path: &Path) -> std::result::Result<Index, Opening> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_max_open_files(256);
        opts.set_keep_log_file_num(2);
        let cfs = [CF_CHUNKS, CF_PACKS, CF_MANIFESTS, CF_META]
            .into_iter()
            .map(|n| ColumnFamilyDescriptor::new(n, Options::default()));
        let db = DB::open_cf_descriptors(&opts, path, cfs).map_err(|e| {
            let msg = e.to_string();
            // Damage first: "block checksum mismatch" contains "lock".
            if is_damage(&e) {
                Damaged(index_err(path, e))
            } else if msg.contains("lock") || msg.contains("Resource temporarily unavailable") {
                Opening::Failed(StoreError::IndexBusy(path.to_path_buf()))
            } else {
                Opening::Failed(index_err(path, e))
            }
        })?;
        Ok(Index {
            db,
            path: path.to_path_buf(),
        })
    }

    /// Directory of the index.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| StoreError::Index {
            path: self.path.clone(),
            reason: format!("missing column family {name}"),
        })
    }

    fn err(&self, e: rocksdb::Error) -> StoreError {
        index_err(&self.path, e)
    }

    /// Where a chunk is, if any known pack holds it.
    pub fn chunk(&self, id: &ChunkId) -> Result<Option<ChunkLoc>> {
        let v = self
            .db
            .get_pinned_cf(self.cf(CF_CHUNKS)?, id.0)
            .map_err(|e| self.err(e))?;
        Ok(v.and_then(|b| ChunkLoc::from_bytes(&b)))
    }

    /// Records a pack and all its chunks (one atomic batch).
    pub fn add_pack(&self, id: &PackId, size: u64, entries: &[FooterEntry]) -> Result<()> {
        let mut batch = WriteBatch::default();
        let chunks = self.cf(CF_CHUNKS)?;
        for e in entries {
            let loc = ChunkLoc {
                pack: *id,
                offset: e.offset,
                frame_len: e.frame_len,
                raw_len: e.raw_len,
            };
            batch.put_cf(chunks, e.id, loc.to_bytes());
        }
        let value = IndexedPack {
            size,
            chunks: entries.iter().map(|e| e.id).collect(),
        };
        batch.put_cf(
            self.cf(CF_PACKS)?,
            id.0,
            codec::encode(Kind::IndexPack, &value, false),
        );
        self.db.write(batch).map_err(|e| self.err(e))
    }

    /// Forgets a pack and every chunk entry that points into it.
    pub fn remove_pack(&self, id: &PackId) -> Result<()> {
        let packs = self.cf(CF_PACKS)?;
        let Some(v) = self.db.get_cf(packs, id.0).map_err(|e| self.err(e))? else {
            return Ok(());
        };
        let mut batch = WriteBatch::default();
        if let Ok(p) = codec::decode::<IndexedPack>(Kind::IndexPack, &v) {
            let chunks = self.cf(CF_CHUNKS)?;
            for c in p.chunks {
                if self.chunk(&ChunkId(c))?.map(|l| l.pack) == Some(*id) {
                    batch.delete_cf(chunks, c);
                }
            }
        }
        batch.delete_cf(packs, id.0);
        self.db.write(batch).map_err(|e| self.err(e))
    }

    /// Every pack the index knows.
    pub fn packs(&self) -> Result<HashSet<PackId>> {
        Ok(self.pack_sizes()?.into_keys().collect())
    }

    /// Every pack the index knows, with the object size recorded when it was learned
    /// (`None` when the record cannot be decoded).
    fn pack_sizes(&self) -> Result<HashMap<PackId, Option<u64>>> {
        let mut out = HashMap::new();
        for item in self
            .db
            .iterator_cf(self.cf(CF_PACKS)?, rocksdb::IteratorMode::Start)
        {
            let (k, v) = item.map_err(|e| self.err(e))?;
            if k.len() == 32 {
                let mut id = [0u8; 32];
                id.copy_from_slice(&k);
                let size = codec::decode::<IndexedPack>(Kind::IndexPack, &v)
                    .ok()
                    .map(|p| p.size);
                out.insert(PackId(id), size);
            }
        }
        Ok(out)
    }

    /// Number of chunk entries (an estimate from RocksDB's statistics).
    pub fn chunk_count_estimate(&self) -> Result<u64> {
        Ok(self
            .db
            .property_int_value_cf(self.cf(CF_CHUNKS)?, "rocksdb.estimate-num-keys")
            .map_err(|e| self.err(e))?
            .unwrap_or(0))
    }

    /// Brings the index up to date with the bucket: learns unknown packs from their footers,
    /// forgets packs that no longer exist and those in `condemned` (gc's condemned list,
    /// which the caller reads *before* this listing: a pack condemned after that read was
    /// condemned after the caller's lease started, and gc keeps it while the lease lives).
    /// A pack whose footer cannot be read is skipped (its chunks will simply be written
    /// again) and reported through `warn`.
    pub fn sync(
        &self,
        store: &dyn ObjectStore,
        condemned: &HashSet<PackId>,
        warn: &dyn Fn(String),
    ) -> Result<SyncReport> {
        let listed = store.list(layout::PACKS_PREFIX)?;
        let mut known = self.pack_sizes()?;
        let mut report = SyncReport {
            packs: listed.len(),
            ..Default::default()
        };
        for obj in listed {
            let Some(id) = layout::parse_pack_key(&obj.key) else {
                continue;
            };
            if condemned.contains(&id) {
                report.condemned += 1;
                continue; // left in `known`: forgotten below
            }
            match known.remove(&id) {
                Some(Some(size)) if size == obj.size => continue,
                // Recorded with another size (a pack cut short by a power loss after the
                // index recorded it, or replaced), or unreadable: forget it and learn
                // what the bucket holds now.
                Some(_) => {
                    self.remove_pack(&id)?;
                    report.forgotten += 1;
                }
                None => {}
            }
            match pack::read_footer(store, &obj.key) {
                Ok(footer) => {
                    self.add_pack(&id, obj.size, &footer.entries)?;
                    report.learned += 1;
                }
                Err(e) => warn(format!("skipping unreadable pack {}: {e}", obj.key)),
            }
        }
        for gone in known.into_keys() {
            self.remove_pack(&gone)?;
            report.forgotten += 1;
        }
        Ok(report)
    }

    /// Drops everything and relearns the packs from the bucket. An index whose files are
    /// damaged (its entries cannot even be listed) is discarded whole and made again
    /// first; the index to use from then on is returned.
    pub fn rebuild(
        self,
        store: &dyn ObjectStore,
        condemned: &HashSet<PackId>,
        warn: &dyn Fn(String),
    ) -> Result<(Index, SyncReport)> {
        let index = match self.forget_all() {
            Ok(()) => self,
            Err(e) => {
                warn(format!("{e}: discarding the index and making it again"));
                let (path, meta) = (self.path.clone(), self.meta_values()?);
                drop(self);
                discard(&path)?;
                let index = Self::open_db(&path).map_err(Opening::into_error)?;
                index.put_meta(&meta)?;
                index
            }
        };
        let report = index.sync(store, condemned, warn)?;
        Ok((index, report))
    }

    /// Deletes every entry but the index's identity.
    fn forget_all(&self) -> Result<()> {
        for cf in [CF_CHUNKS, CF_PACKS, CF_MANIFESTS] {
            let handle = self.cf(cf)?;
            let mut batch = WriteBatch::default();
            for item in self.db.iterator_cf(handle, rocksdb::IteratorMode::Start) {
                let (k, _) = item.map_err(|e| self.err(e))?;
                batch.delete_cf(handle, k);
            }
            self.db.write(batch).map_err(|e| self.err(e))?;
        }
        // Tables left unread by the iteration (damaged ones) are not trusted either.
        self.db
            .compact_range_cf::<&[u8], &[u8]>(self.cf(CF_CHUNKS)?, None, None);
        Ok(())
    }

    /// The index's identity (`store_id`, `version`).
    fn meta_values(&self) -> Result<Vec<(&'static [u8], Vec<u8>)>> {
        let meta = self.cf(CF_META)?;
        let mut out = Vec::new();
        for key in [&b"store_id"[..], &b"version"[..]] {
            if let Some(v) = self.db.get_cf(meta, key).map_err(|e| self.err(e))? {
                out.push((key, v));
            }
        }
        Ok(out)
    }

    fn put_meta(&self, values: &[(&'static [u8], Vec<u8>)]) -> Result<()> {
        let meta = self.cf(CF_META)?;
        for (k, v) in values {
            self.db.put_cf(meta, k, v).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Records the chunks of a file whose content has `sha256` (chunk id and length, in
    /// order), under `files/<64 hex>` in the `manifests` family. Its chunks may still be in
    /// a pack not yet written: [`Index::file_chunks`] answers only when every chunk is in
    /// a known pack.
    pub fn remember_file(&self, sha256: &[u8; 32], chunks: &[(ChunkId, u32)]) -> Result<()> {
        self.cache_object(&file_key(sha256), "", &file_record(chunks))
    }

    /// Where every chunk of a file with content `sha256` is, in order, if the index
    /// recorded the file and still knows a pack for each of its chunks.
    pub fn file_chunks(&self, sha256: &[u8; 32]) -> Result<Option<Vec<(ChunkId, ChunkLoc)>>> {
        match self.cached_object(&file_key(sha256), "")? {
            Some(v) => self.locate_file_record(&v),
            None => Ok(None),
        }
    }

    /// The chunks a `files/` record lists, each with where it is, if every one is in a
    /// known pack with the recorded length.
    fn locate_file_record(&self, v: &[u8]) -> Result<Option<Vec<(ChunkId, ChunkLoc)>>> {
        let Some(n) = v
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        else {
            return Ok(None);
        };
        if v.len() != 4 + n as usize * 36 {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(n as usize);
        for e in v[4..].chunks_exact(36) {
            let mut id = [0u8; 32];
            id.copy_from_slice(&e[..32]);
            let id = ChunkId(id);
            let len = u32::from_le_bytes([e[32], e[33], e[34], e[35]]);
            match self.chunk(&id)? {
                Some(loc) if loc.raw_len == len => out.push((id, loc)),
                _ => return Ok(None),
            }
        }
        Ok(Some(out))
    }

    /// Records that the file `stamp` describes had content `sha256`, cut into `chunks`,
    /// when it was read: [`Index::remember_stamps`] of one file.
    pub fn remember_stamp(
        &self,
        stamp: &FileStamp,
        sha256: &[u8; 32],
        chunks: &[(ChunkId, u32)],
    ) -> Result<()> {
        self.remember_stamps(&[(*stamp, *sha256, chunk_list_digest(chunks))])
    }

    /// Records, in one write, for each file, that the file its stamp describes (the boot,
    /// mount, device, inode, size and times) had content `sha256` when it was read, and
    /// the [`chunk_list_digest`] of its chunks: under `stamps/<dev>/<ino>` in the
    /// `manifests` family (docs/FORMAT.md, "Files taken unread"). A later ingest that
    /// finds the file with the very same stamp takes it from [`Index::stamped_file`]
    /// instead of reading it again.
    pub fn remember_stamps(&self, stamps: &[(FileStamp, [u8; 32], [u8; 32])]) -> Result<()> {
        let cf = self.cf(CF_MANIFESTS)?;
        let mut batch = WriteBatch::default();
        for (stamp, sha256, chunks) in stamps {
            let mut v = vec![0, 0]; // an empty tag, as `cache_object` writes it
            v.extend_from_slice(&stamp.record(sha256, chunks));
            batch.put_cf(cf, stamp_key(stamp), v);
        }
        self.db.write(batch).map_err(|e| self.err(e))
    }

    /// The content recorded for a file with exactly this `stamp` (its sha256, and its
    /// chunks with where each is), if the stamp record is intact, the `files/` record of
    /// that sha256 is the one the stamp record was written with (its digest), and every
    /// chunk is in a known pack with the recorded length.
    pub fn stamped_file(&self, stamp: &FileStamp) -> Result<Option<StampedFile>> {
        let Some(v) = self.cached_object(&stamp_key(stamp), "")? else {
            return Ok(None);
        };
        let Some((sha256, digest)) = stamp.recorded(&v) else {
            return Ok(None);
        };
        let Some(list) = self.cached_object(&file_key(&sha256), "")? else {
            return Ok(None);
        };
        if *blake3::hash(&list).as_bytes() != digest {
            return Ok(None);
        }
        Ok(self
            .locate_file_record(&list)?
            .map(|chunks| StampedFile { sha256, chunks }))
    }

    /// Caches an object's bytes under its listing tag.
    pub fn cache_object(&self, key: &str, tag: &str, bytes: &[u8]) -> Result<()> {
        let tag = tag.as_bytes();
        let Ok(len) = u16::try_from(tag.len()) else {
            return Ok(());
        };
        let mut v = Vec::with_capacity(2 + tag.len() + bytes.len());
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(tag);
        v.extend_from_slice(bytes);
        self.db
            .put_cf(self.cf(CF_MANIFESTS)?, key, v)
            .map_err(|e| self.err(e))
    }

    /// A cached object's bytes, if cached with this tag.
    pub fn cached_object(&self, key: &str, tag: &str) -> Result<Option<Vec<u8>>> {
        let Some(v) = self
            .db
            .get_pinned_cf(self.cf(CF_MANIFESTS)?, key)
            .map_err(|e| self.err(e))?
        else {
            return Ok(None);
        };
        if v.len() < 2 {
            return Ok(None);
        }
        let len = u16::from_le_bytes([v[0], v[1]]) as usize;
        if v.len() < 2 + len || &v[2..2 + len] != tag.as_bytes() {
            return Ok(None);
        }
        Ok(Some(v[2 + len..].to_vec()))
    }
}

/// What [`Index::stamped_file`] found for a stamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StampedFile {
    /// The content's sha256.
    pub sha256: [u8; 32],
    /// Its chunks in order, each with where it is.
    pub chunks: Vec<(ChunkId, ChunkLoc)>,
}

/// What tells a file on this machine has not changed since it was read, without reading
/// it: the boot and the mount it was seen through, the device and inode it lives on, its
/// size, and its modification and status-change times to the nanosecond. Any write to a
/// file moves its ctime, which no user can set, so a file with the same stamp as a
/// recorded one has the recorded content, provided the record was taken when the file had
/// been still for a while ([`FileStamp::settled`]: on file systems whose clock ticks
/// coarsely, a write in the same tick as the read leaves the times as they were). The
/// times a write sets may stay in memory only (a crash then leaves the new bytes under the
/// old times, if the data was made durable); every crash ends the mount, so a record
/// taken in another boot or through another mount is never trusted (docs/FORMAT.md,
/// "Files taken unread").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    /// `/proc/sys/kernel/random/boot_id`, as 16 bytes.
    pub boot_id: [u8; 16],
    /// `statx`'s `STATX_MNT_ID_UNIQUE`: the mount the file was opened through, an id never
    /// given to another mount in the same boot.
    pub mount_id: u64,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mtime` in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// `st_ctime` in nanoseconds since the epoch.
    pub ctime_ns: i64,
}

/// Magic of a `stamps/` record.
const STAMP_MAGIC: &[u8; 8] = b"MCASSTMP";
/// Version of a `stamps/` record. (Records of 56 bytes, with no magic, were written before
/// there was one, and are never trusted: they are not bound to a boot and a mount.)
const STAMP_VERSION: u32 = 1;
/// Bytes of a `stamps/` record's fields that must equal the stamp: magic, version, boot id,
/// mount id, device, inode, size, mtime, ctime.
const STAMP_FIELDS_LEN: usize = 8 + 4 + 16 + 6 * 8;
/// Bytes of a `stamps/` record: the stamp's fields, sha256, chunk-list digest, checksum.
const STAMP_RECORD_LEN: usize = STAMP_FIELDS_LEN + 32 + 32 + 32;

impl FileStamp {
    /// Whether the file had been still for `quiet` at `now`: its mtime and ctime are both at
    /// least that far in the past. Only such a stamp may be recorded.
    pub fn settled(&self, now: std::time::SystemTime, quiet: std::time::Duration) -> bool {
        let Ok(now) = now.duration_since(std::time::UNIX_EPOCH) else {
            return false;
        };
        let limit = i64::try_from(now.saturating_sub(quiet).as_nanos()).unwrap_or(i64::MAX);
        self.mtime_ns <= limit && self.ctime_ns <= limit
    }

    /// The `stamps/` record of this stamp for content `sha256` cut into chunks whose
    /// `files/` record has the BLAKE3 `chunks` (docs/FORMAT.md, "Local index").
    fn record(&self, sha256: &[u8; 32], chunks: &[u8; 32]) -> Vec<u8> {
        let mut v = Vec::with_capacity(STAMP_RECORD_LEN);
        v.extend_from_slice(STAMP_MAGIC);
        v.extend_from_slice(&STAMP_VERSION.to_le_bytes());
        v.extend_from_slice(&self.boot_id);
        for n in [self.mount_id, self.dev, self.ino, self.size] {
            v.extend_from_slice(&n.to_le_bytes());
        }
        v.extend_from_slice(&self.mtime_ns.to_le_bytes());
        v.extend_from_slice(&self.ctime_ns.to_le_bytes());
        v.extend_from_slice(sha256);
        v.extend_from_slice(chunks);
        let sum = blake3::hash(&v);
        v.extend_from_slice(sum.as_bytes());
        v
    }

    /// The sha256 and chunk-list digest of record `v`, if it is an intact record (its
    /// checksum holds) of this very stamp; `None` for any other record, a damaged one, or
    /// one of another version.
    fn recorded(&self, v: &[u8]) -> Option<([u8; 32], [u8; 32])> {
        if v.len() != STAMP_RECORD_LEN {
            return None;
        }
        let (body, sum) = v.split_at(STAMP_RECORD_LEN - 32);
        if blake3::hash(body).as_bytes()[..] != sum[..] {
            return None;
        }
        if body[..STAMP_FIELDS_LEN] != self.record(&[0; 32], &[0; 32])[..STAMP_FIELDS_LEN] {
            return None;
        }
        let sha256 = body[STAMP_FIELDS_LEN..STAMP_FIELDS_LEN + 32]
            .try_into()
            .ok()?;
        let chunks = body[STAMP_FIELDS_LEN + 32..].try_into().ok()?;
        Some((sha256, chunks))
    }
}

/// The BLAKE3 of the `files/` record of `chunks` (its value after the tag): what a
/// `stamps/` record names a file's chunk list by.
pub fn chunk_list_digest(chunks: &[(ChunkId, u32)]) -> [u8; 32] {
    *blake3::hash(&file_record(chunks)).as_bytes()
}

/// The value of a `files/` record (after its tag): count, then each chunk's id and length.
fn file_record(chunks: &[(ChunkId, u32)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + chunks.len() * 36);
    v.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    for (id, len) in chunks {
        v.extend_from_slice(&id.0);
        v.extend_from_slice(&len.to_le_bytes());
    }
    v
}

/// Key of a file's stamp record in the `manifests` family (never an object key).
fn stamp_key(stamp: &FileStamp) -> String {
    format!("stamps/{:016x}/{:016x}", stamp.dev, stamp.ino)
}

/// Key of a file's chunk list in the `manifests` family (never an object key).
fn file_key(sha256: &[u8; 32]) -> String {
    let hex: String = sha256.iter().map(|b| format!("{b:02x}")).collect();
    format!("files/{hex}")
}

fn index_err(path: &Path, e: rocksdb::Error) -> StoreError {
    let reason = if is_damage(&e) {
        format!(
            "{e} (the index is damaged; it is a cache of the store: \
             `modelcas index rebuild` makes it again)"
        )
    } else {
        e.to_string()
    };
    StoreError::Index {
        path: path.to_path_buf(),
        reason,
    }
}

/// Whether RocksDB says its files are damaged (not busy, not an I/O failure).
fn is_damage(e: &rocksdb::Error) -> bool {
    match e.kind() {
        rocksdb::ErrorKind::Corruption => true,
        // A `CURRENT` with other bytes names a `MANIFEST-*` that is not there.
        rocksdb::ErrorKind::IOError => {
            let m = e.to_string();
            m.contains("No such file") && m.contains("MANIFEST-")
        }
        _ => false,
    }
}

/// Why a RocksDB could not be opened.
enum Opening {
    /// Its files are damaged: the index may be discarded.
    Damaged(StoreError),
    /// Anything else (busy, I/O, permissions): never discarded.
    Failed(StoreError),
}
use Opening::Damaged;

impl Opening {
    fn into_error(self) -> StoreError {
        match self {
            Damaged(e) | Opening::Failed(e) => e,
        }
    }
}

/// Removes the index directory `path` and everything in it (it is made again at open).
fn discard(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io(path, e)),
    }
    std::fs::create_dir_all(path).map_err(|e| StoreError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use read::test_pack::{noise, one_pack};

    #[test]
    fn sync_learns_packs_forgets_gone_condemned_and_resized_ones() {
        let chunks: Vec<Vec<u8>> = (0..4).map(|i| noise(5_000, i)).collect();
        let p = one_pack(&chunks);
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(dir.path(), &[7; 16]).unwrap();
        let none = HashSet::new();
        let r = index.sync(p.backend.as_ref(), &none, &|_| {}).unwrap();
        assert_eq!((r.packs, r.learned, r.forgotten), (1, 1, 0));
        let id = ChunkId::of(&chunks[2]);
        let loc = index.chunk(&id).unwrap().unwrap();
        assert_eq!(
            (loc.pack, loc.offset, loc.raw_len),
            (p.pack, p.entries[2].offset, 5_000)
        );
        // Known and unchanged: nothing to learn.
        let r = index.sync(p.backend.as_ref(), &none, &|_| {}).unwrap();
        assert_eq!((r.learned, r.forgotten), (0, 0));
        // Condemned by gc: not used for dedup any more.
        let condemned: HashSet<PackId> = [p.pack].into();
        let r = index.sync(p.backend.as_ref(), &condemned, &|_| {}).unwrap();
        assert_eq!((r.condemned, r.forgotten), (1, 1));
        assert!(index.chunk(&id).unwrap().is_none());
        // Listed shorter than recorded (cut short by a power loss after the index recorded
        // it): forgotten, and not learned again since its footer is gone with its tail.
        index.sync(p.backend.as_ref(), &none, &|_| {}).unwrap();
        assert!(index.chunk(&id).unwrap().is_some());
        let bytes = p.backend.get(&p.key).unwrap();
        p.backend.put(&p.key, &bytes[..bytes.len() / 2]).unwrap();
        let warned = std::cell::Cell::new(0);
        let r = index
            .sync(p.backend.as_ref(), &none, &|_| warned.set(warned.get() + 1))
            .unwrap();
        assert_eq!((r.forgotten, r.learned, warned.get()), (1, 0, 1));
        assert!(index.chunk(&id).unwrap().is_none());
        p.backend.put(&p.key, &bytes).unwrap();
        let r = index.sync(p.backend.as_ref(), &none, &|_| {}).unwrap();
        assert_eq!((r.forgotten, r.learned), (0, 1));
        // Gone from the bucket: forgotten.
        p.backend.delete(&p.key).unwrap();
        let r = index.sync(p.backend.as_ref(), &none, &|_| {}).unwrap();
        assert_eq!((r.packs, r.forgotten), (0, 1));
        assert!(index.chunk(&id).unwrap().is_none());
    }

    /// An index in `dir` that knows one pack of four chunks, flushed to its files and
    /// closed; the pack's backend and one chunk id.
    fn closed_index(dir: &Path) -> (read::test_pack::OnePack, ChunkId) {
        let chunks: Vec<Vec<u8>> = (0..4).map(|i| noise(5_000, i)).collect();
        let p = one_pack(&chunks);
        let index = Index::open(dir, &[7; 16]).unwrap();
        index
            .sync(p.backend.as_ref(), &HashSet::new(), &|_| {})
            .unwrap();
        index.db.flush_cf(index.cf(CF_CHUNKS).unwrap()).unwrap();
        index.db.flush().unwrap();
        drop(index);
        (p, ChunkId::of(&chunks[1]))
    }

    /// The files of the index in `dir` whose name starts with `prefix`.
    fn files_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix) || n.ends_with(prefix))
            })
            .collect();
        v.sort();
        v
    }

    /// The index is a cache: one RocksDB cannot open (its CURRENT cut short, its MANIFEST
    /// damaged) is discarded and made again, empty, instead of failing every command.
    #[test]
    fn an_index_that_cannot_open_is_discarded_and_made_again() {
        for damage in [
            "truncate CURRENT",
            "other CURRENT",
            "flip MANIFEST",
            "empty MANIFEST",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (p, id) = closed_index(dir.path());
            match damage {
                "truncate CURRENT" => {
                    let f = dir.path().join("CURRENT");
                    let b = std::fs::read(&f).unwrap();
                    std::fs::write(&f, &b[..b.len() / 2]).unwrap();
                }
                "other CURRENT" => {
                    // Names a MANIFEST that does not exist (a flipped digit).
                    std::fs::write(dir.path().join("CURRENT"), "MANIFEST-999990\n").unwrap();
                }
                _ => {
                    let f = files_named(dir.path(), "MANIFEST-").pop().unwrap();
                    let mut b = std::fs::read(&f).unwrap();
                    if damage == "empty MANIFEST" {
                        b.clear();
                    } else {
                        for i in (0..b.len()).step_by(7) {
                            b[i] ^= 0x5A;
                        }
                    }
                    std::fs::write(&f, &b).unwrap();
                }
            }
            let index = Index::open(dir.path(), &[7; 16])
                .unwrap_or_else(|e| panic!("{damage}: the damaged index was not discarded: {e}"));
            assert!(index.chunk(&id).unwrap().is_none(), "{damage}");
            let r = index
                .sync(p.backend.as_ref(), &HashSet::new(), &|_| {})
                .unwrap();
            assert_eq!(r.learned, 1, "{damage}");
            assert!(index.chunk(&id).unwrap().is_some(), "{damage}");
        }
    }

    /// An index that opens but whose table files are damaged fails the reads that touch
    /// them with an error that says what to do; `rebuild` then makes it whole again.
    #[test]
    fn rebuild_makes_an_index_with_damaged_tables_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (p, id) = closed_index(dir.path());
        for f in files_named(dir.path(), ".sst") {
            let mut b = std::fs::read(&f).unwrap();
            let n = b.len().saturating_sub(64);
            for x in b.iter_mut().take(n) {
                *x ^= 0xFF;
            }
            std::fs::write(&f, &b).unwrap();
        }
        let index = match Index::open(dir.path(), &[7; 16]) {
            Ok(index) => {
                if let Err(e) = index.chunk(&id) {
                    assert!(e.to_string().contains("index rebuild"), "{e}");
                }
                index
            }
            // Some damage is seen at open: then it is discarded as above.
            Err(e) => panic!("the damaged index was not discarded: {e}"),
        };
        let (index, r) = index
            .rebuild(p.backend.as_ref(), &HashSet::new(), &|_| {})
            .unwrap();
        assert_eq!(r.learned, 1);
        assert!(index.chunk(&id).unwrap().is_some());
        drop(index);
        let index = Index::open(dir.path(), &[7; 16]).unwrap();
        assert!(index.chunk(&id).unwrap().is_some());
    }

    /// An index that knows one pack of four 5,000-byte chunks, a file of those chunks
    /// recorded as content `[9; 32]`, and a stamp of it.
    fn stamped() -> (tempfile::TempDir, Index, FileStamp, Vec<(ChunkId, u32)>) {
        let chunks: Vec<Vec<u8>> = (0..4).map(|i| noise(5_000, i)).collect();
        let p = one_pack(&chunks);
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(dir.path(), &[7; 16]).unwrap();
        index
            .sync(p.backend.as_ref(), &HashSet::new(), &|_| {})
            .unwrap();
        let list: Vec<(ChunkId, u32)> = chunks.iter().map(|c| (ChunkId::of(c), 5_000)).collect();
        index.remember_file(&[9; 32], &list).unwrap();
        let st = FileStamp {
            boot_id: [0xB0; 16],
            mount_id: 1 << 33,
            dev: 2049,
            ino: 77,
            size: 20_000,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: 1_700_000_001_000_000_001,
        };
        index.remember_stamp(&st, &[9; 32], &list).unwrap();
        (dir, index, st, list)
    }

    #[test]
    fn a_stamp_record_answers_only_for_the_very_same_stamp() {
        let (_dir, index, st, list) = stamped();
        let found = index.stamped_file(&st).unwrap().unwrap();
        assert_eq!(found.sha256, [9; 32]);
        let ids: Vec<(ChunkId, u32)> = found
            .chunks
            .iter()
            .map(|(id, l)| (*id, l.raw_len))
            .collect();
        assert_eq!(ids, list);
        for other in [
            FileStamp {
                boot_id: [0xB1; 16],
                ..st
            },
            FileStamp {
                mount_id: st.mount_id + 1,
                ..st
            },
            FileStamp {
                size: st.size - 1,
                ..st
            },
            FileStamp {
                mtime_ns: st.mtime_ns + 1,
                ..st
            },
            FileStamp {
                ctime_ns: st.ctime_ns + 1,
                ..st
            },
            // Another inode or device is another key; a record for it is its own.
            FileStamp { ino: 78, ..st },
            FileStamp { dev: 1, ..st },
        ] {
            assert_eq!(index.stamped_file(&other).unwrap(), None, "{other:?}");
        }
        // A newer read of the same inode replaces the record.
        let later = FileStamp {
            ctime_ns: st.ctime_ns + 5,
            ..st
        };
        index.remember_stamp(&later, &[9; 32], &list).unwrap();
        assert!(index.stamped_file(&later).unwrap().is_some());
        assert_eq!(index.stamped_file(&st).unwrap(), None);
    }

    /// A record is only a hint to skip a read: one written before records were bound to a
    /// boot and a mount, one with any bit flipped, or one whose `files/` record is not the
    /// chunk list it was written with, is never trusted.
    #[test]
    fn an_old_or_damaged_stamp_record_is_never_trusted() {
        let (_dir, index, st, list) = stamped();
        let key = stamp_key(&st);
        let good = index.cached_object(&key, "").unwrap().unwrap();
        assert_eq!(good.len(), STAMP_RECORD_LEN);
        // The record of the same file as written before (size, mtime, ctime, sha256).
        let mut old = Vec::new();
        old.extend_from_slice(&st.size.to_le_bytes());
        old.extend_from_slice(&st.mtime_ns.to_le_bytes());
        old.extend_from_slice(&st.ctime_ns.to_le_bytes());
        old.extend_from_slice(&[9; 32]);
        index.cache_object(&key, "", &old).unwrap();
        assert_eq!(index.stamped_file(&st).unwrap(), None, "an old record");
        // Any bit flipped, anywhere.
        for bit in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            index.cache_object(&key, "", &bad).unwrap();
            assert_eq!(index.stamped_file(&st).unwrap(), None, "bit {bit} flipped");
        }
        // Cut short, or longer.
        for bad in [&good[..good.len() - 1], &[&good[..], &[0][..]].concat()[..]] {
            index.cache_object(&key, "", bad).unwrap();
            assert_eq!(index.stamped_file(&st).unwrap(), None);
        }
        index.cache_object(&key, "", &good).unwrap();
        assert!(index.stamped_file(&st).unwrap().is_some());
        // The content's chunk list replaced by another of the same chunks and lengths (the
        // chunks in another order): a list the stamp record was not written with.
        let mut other = list.clone();
        other.swap(0, 1);
        index.remember_file(&[9; 32], &other).unwrap();
        assert!(index.file_chunks(&[9; 32]).unwrap().is_some());
        assert_eq!(index.stamped_file(&st).unwrap(), None, "another chunk list");
        index.remember_file(&[9; 32], &list).unwrap();
        assert!(index.stamped_file(&st).unwrap().is_some());
        // A chunk list whose chunk the index no longer knows.
        let unknown = [(ChunkId([1; 32]), 5_000)];
        index.remember_file(&[8; 32], &unknown).unwrap();
        index.remember_stamp(&st, &[8; 32], &unknown).unwrap();
        assert_eq!(index.stamped_file(&st).unwrap(), None, "an unknown chunk");
    }

    #[test]
    fn a_stamp_is_settled_once_both_times_are_old_enough() {
        use std::time::{Duration, UNIX_EPOCH};
        let at = |ns: i64| UNIX_EPOCH + Duration::from_nanos(ns as u64);
        let st = FileStamp {
            boot_id: [0; 16],
            mount_id: 1,
            dev: 1,
            ino: 1,
            size: 1,
            mtime_ns: 10_000_000_000,
            ctime_ns: 20_000_000_000,
        };
        let two = Duration::from_secs(2);
        assert!(!st.settled(at(21_999_999_999), two), "ctime 1.99 s ago");
        assert!(st.settled(at(22_000_000_000), two));
        let future = FileStamp {
            mtime_ns: 30_000_000_000,
            ..st
        };
        assert!(
            !future.settled(at(23_000_000_000), two),
            "mtime in the future"
        );
        assert!(st.settled(at(20_000_000_000), Duration::ZERO));
        assert!(!st.settled(UNIX_EPOCH, Duration::ZERO));
    }
}
