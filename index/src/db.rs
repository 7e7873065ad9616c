//! The RocksDB handle of the index: the column families (listed in the crate's doc),
//! opening, the index's identity (the store's id and the layout version), and discarding
//! an index whose files are damaged. What each family holds is read and written by the
//! module of its concern ([`crate::packs`], [`crate::files`], [`crate::stamps`],
//! [`crate::object_cache`]).

use std::path::{Path, PathBuf};

use format::index::LAYOUT_VERSION;
use repo::{Result, StoreError};
use rocksdb::{ColumnFamilyDescriptor, Options, WriteBatch, DB};

pub(crate) const CF_CHUNKS: &str = "chunks";
pub(crate) const CF_PACKS: &str = "packs";
pub(crate) const CF_MANIFESTS: &str = "manifests";
pub(crate) const CF_META: &str = "meta";

/// The RocksDB index of one store.
pub struct Index {
    pub(crate) db: DB,
    pub(crate) path: PathBuf,
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
            && version.as_deref() == Some(&LAYOUT_VERSION.to_le_bytes()[..]);
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
            .put_cf(meta, b"version", LAYOUT_VERSION.to_le_bytes())
            .map_err(|e| idx.err(e))?;
        Ok(idx)
    }

    pub(crate) fn open_db(path: &Path) -> std::result::Result<Index, Opening> {
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

    pub(crate) fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| StoreError::Index {
            path: self.path.clone(),
            reason: format!("missing column family {name}"),
        })
    }

    pub(crate) fn err(&self, e: rocksdb::Error) -> StoreError {
        index_err(&self.path, e)
    }

    /// Deletes every entry but the index's identity.
    pub(crate) fn forget_all(&self) -> Result<()> {
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
    pub(crate) fn meta_values(&self) -> Result<Vec<(&'static [u8], Vec<u8>)>> {
        let meta = self.cf(CF_META)?;
        let mut out = Vec::new();
        for key in [&b"store_id"[..], &b"version"[..]] {
            if let Some(v) = self.db.get_cf(meta, key).map_err(|e| self.err(e))? {
                out.push((key, v));
            }
        }
        Ok(out)
    }

    pub(crate) fn put_meta(&self, values: &[(&'static [u8], Vec<u8>)]) -> Result<()> {
        let meta = self.cf(CF_META)?;
        for (k, v) in values {
            self.db.put_cf(meta, k, v).map_err(|e| self.err(e))?;
        }
        Ok(())
    }
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
pub(crate) enum Opening {
    /// Its files are damaged: the index may be discarded.
    Damaged(StoreError),
    /// Anything else (busy, I/O, permissions): never discarded.
    Failed(StoreError),
}
use Opening::Damaged;

impl Opening {
    pub(crate) fn into_error(self) -> StoreError {
        match self {
            Damaged(e) | Opening::Failed(e) => e,
        }
    }
}

/// Removes the index directory `path` and everything in it (it is made again at open).
pub(crate) fn discard(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io(path, e)),
    }
    std::fs::create_dir_all(path).map_err(|e| StoreError::io(path, e))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use format::ChunkId;
    use read::test_pack::{noise, one_pack};

    use super::*;

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
}
