//! Files taken unread: the stamp a file had when ingest read it, with its content's sha256
//! and chunk list's digest (`stamps/<dev>/<ino>` in the `manifests` family), so that a
//! later ingest that finds the very same stamp takes the file without reading it.

use format::index::{self as values, ChunkLoc, FileStamp};
use format::{ChunkId, ChunkListDigest, Sha256};
use repo::Result;
use rocksdb::WriteBatch;

use crate::db::{Index, CF_MANIFESTS};

/// What [`Index::stamped_file`] found for a stamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StampedFile {
    /// The content's sha256.
    pub sha256: Sha256,
    /// Its chunks in order, each with where it is.
    pub chunks: Vec<(ChunkId, ChunkLoc)>,
}

impl Index {
    /// Records that the file `stamp` describes had content `sha256`, cut into `chunks`,
    /// when it was read: [`Index::remember_stamps`] of one file.
    pub fn remember_stamp(
        &self,
        stamp: &FileStamp,
        sha256: &Sha256,
        chunks: &[(ChunkId, u32)],
    ) -> Result<()> {
        self.remember_stamps(&[(*stamp, *sha256, values::chunk_list_digest(chunks))])
    }

    /// Records, in one write, for each file, that the file its stamp describes (the boot,
    /// mount, device, inode, size and times) had content `sha256` when it was read, and
    /// the [`values::chunk_list_digest`] of its chunks: under `stamps/<dev>/<ino>` in the
    /// `manifests` family (docs/FORMAT.md, "Files taken unread"). A later ingest that
    /// finds the file with the very same stamp takes it from [`Index::stamped_file`]
    /// instead of reading it again.
    pub fn remember_stamps(&self, stamps: &[(FileStamp, Sha256, ChunkListDigest)]) -> Result<()> {
        let cf = self.cf(CF_MANIFESTS)?;
        let mut batch = WriteBatch::default();
        for (stamp, sha256, chunks) in stamps {
            let v = values::tagged("", &stamp.record(sha256, chunks)).unwrap_or_default();
            batch.put_cf(cf, stamp.key(), v);
        }
        self.db.write(batch).map_err(|e| self.err(e))
    }

    /// The content recorded for a file with exactly this `stamp` (its sha256, and its
    /// chunks with where each is), if the stamp record is intact, the `files/` record of
    /// that sha256 is the one the stamp record was written with (its digest), and every
    /// chunk is in a known pack with the recorded length.
    pub fn stamped_file(&self, stamp: &FileStamp) -> Result<Option<StampedFile>> {
        let Some(v) = self.cached_object(&stamp.key(), "")? else {
            return Ok(None);
        };
        let Some((sha256, digest)) = stamp.recorded(&v) else {
            return Ok(None);
        };
        let Some(list) = self.cached_object(&values::file_key(&sha256), "")? else {
            return Ok(None);
        };
        if ChunkListDigest(*blake3::hash(&list).as_bytes()) != digest {
            return Ok(None);
        }
        Ok(self
            .locate_file_record(&list)?
            .map(|chunks| StampedFile { sha256, chunks }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use format::index::STAMP_RECORD_LEN;
    use read::test_pack::{noise, one_pack};

    use super::*;

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
        index.remember_file(&Sha256([9; 32]), &list).unwrap();
        let st = FileStamp {
            boot_id: [0xB0; 16],
            mount_id: 1 << 33,
            dev: 2049,
            ino: 77,
            size: 20_000,
            mtime_ns: 1_700_000_000_123_456_789,
            ctime_ns: 1_700_000_001_000_000_001,
        };
        index.remember_stamp(&st, &Sha256([9; 32]), &list).unwrap();
        (dir, index, st, list)
    }

    #[test]
    fn a_stamp_record_answers_only_for_the_very_same_stamp() {
        let (_dir, index, st, list) = stamped();
        let found = index.stamped_file(&st).unwrap().unwrap();
        assert_eq!(found.sha256, Sha256([9; 32]));
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
        index
            .remember_stamp(&later, &Sha256([9; 32]), &list)
            .unwrap();
        assert!(index.stamped_file(&later).unwrap().is_some());
        assert_eq!(index.stamped_file(&st).unwrap(), None);
    }

    /// A record is only a hint to skip a read: one written before records were bound to a
    /// boot and a mount, one with any bit flipped, or one whose `files/` record is not the
    /// chunk list it was written with, is never trusted.
    #[test]
    fn an_old_or_damaged_stamp_record_is_never_trusted() {
        let (_dir, index, st, list) = stamped();
        let key = st.key();
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
        index.remember_file(&Sha256([9; 32]), &other).unwrap();
        assert!(index.file_chunks(&Sha256([9; 32])).unwrap().is_some());
        assert_eq!(index.stamped_file(&st).unwrap(), None, "another chunk list");
        index.remember_file(&Sha256([9; 32]), &list).unwrap();
        assert!(index.stamped_file(&st).unwrap().is_some());
        // A chunk list whose chunk the index no longer knows.
        let unknown = [(ChunkId([1; 32]), 5_000)];
        index.remember_file(&Sha256([8; 32]), &unknown).unwrap();
        index
            .remember_stamp(&st, &Sha256([8; 32]), &unknown)
            .unwrap();
        assert_eq!(index.stamped_file(&st).unwrap(), None, "an unknown chunk");
    }
}
