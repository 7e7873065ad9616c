//! Chunk → pack: where each chunk is stored (the `chunks` family) and what the index knows
//! of each pack (`packs`), learned from the packs' footers in the bucket ([`Index::sync`]).

use std::collections::{HashMap, HashSet};

use format::index::{ChunkLoc, IndexedPack};
use format::layout;
use format::pack::{FooterEntry, PackId};
use format::ChunkId;
use objects::ObjectStore;
use repo::pack;
use repo::Result;
use rocksdb::WriteBatch;

use crate::db::{discard, Index, Opening, CF_CHUNKS, CF_PACKS};

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

impl Index {
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
            batch.put_cf(chunks, e.id.0, loc.to_bytes());
        }
        let value = IndexedPack {
            size,
            chunks: entries.iter().map(|e| e.id).collect(),
        };
        batch.put_cf(self.cf(CF_PACKS)?, id.0, value.encode());
        self.db.write(batch).map_err(|e| self.err(e))
    }

    /// Forgets a pack and every chunk entry that points into it.
    pub fn remove_pack(&self, id: &PackId) -> Result<()> {
        let packs = self.cf(CF_PACKS)?;
        let Some(v) = self.db.get_cf(packs, id.0).map_err(|e| self.err(e))? else {
            return Ok(());
        };
        let mut batch = WriteBatch::default();
        if let Ok(p) = IndexedPack::decode(&v) {
            let chunks = self.cf(CF_CHUNKS)?;
            for c in p.chunks {
                if self.chunk(&c)?.map(|l| l.pack) == Some(*id) {
                    batch.delete_cf(chunks, c.0);
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
    pub(crate) fn pack_sizes(&self) -> Result<HashMap<PackId, Option<u64>>> {
        let mut out = HashMap::new();
        for item in self
            .db
            .iterator_cf(self.cf(CF_PACKS)?, rocksdb::IteratorMode::Start)
        {
            let (k, v) = item.map_err(|e| self.err(e))?;
            if k.len() == 32 {
                let mut id = [0u8; 32];
                id.copy_from_slice(&k);
                let size = IndexedPack::decode(&v).ok().map(|p| p.size);
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
                let index = Index::open_db(&path).map_err(Opening::into_error)?;
                index.put_meta(&meta)?;
                index
            }
        };
        let report = index.sync(store, condemned, warn)?;
        Ok((index, report))
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
}

#[cfg(test)]
mod tests {
    use read::test_pack::{noise, one_pack};

    use super::*;

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
}
