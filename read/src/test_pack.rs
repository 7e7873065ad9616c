//! Test helpers (compiled in tests only): a store in memory holding one pack of chunks.

use std::sync::Arc;

use format::ChunkId;

use crate::cache::ChunkSource;
use format::frame;
use format::layout;
use objects::{MemoryStore, ObjectStore};
use repo::pack::{FooterEntry, PackBuilder, PackId};
use repo::{CreateOptions, Store};

/// A store in memory and one pack holding `chunks`, with where each chunk is.
pub struct OnePack {
    pub backend: Arc<MemoryStore>,
    pub store: Store,
    pub pack: PackId,
    pub key: String,
    pub entries: Vec<FooterEntry>,
    pub sources: Vec<ChunkSource>,
}

/// Deterministic, poorly compressible bytes.
pub fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

impl OnePack {
    /// The manifest's reference to chunk `i` of the pack (pack 0 of the manifest).
    pub fn chunk_ref(&self, i: usize) -> repo::manifest::ChunkRef {
        let e = &self.entries[i];
        repo::manifest::ChunkRef {
            id: e.id,
            pack: 0,
            offset: e.offset,
            frame_len: e.frame_len,
            raw_len: e.raw_len,
        }
    }

    /// A manifest of `files` whose only pack is this one.
    pub fn manifest(&self, files: Vec<repo::manifest::FileEntry>) -> repo::manifest::Manifest {
        repo::manifest::Manifest {
            repo: format::names::RepoId::parse("a/b").unwrap(),
            commit: format::names::CommitId([1; 20]),
            ingested_at: 0,
            source: "test".into(),
            packs: vec![self.pack],
            files,
            published: None,
            xet_hashes: Vec::new(),
        }
    }
}

/// Builds the store and puts the pack.
pub fn one_pack(chunks: &[Vec<u8>]) -> OnePack {
    let backend = Arc::new(MemoryStore::new());
    let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
    let mut b = PackBuilder::new();
    for c in chunks {
        let mut f = Vec::new();
        frame::encode(c, &mut f);
        b.add_frame(ChunkId::of(c), &f, c.len());
    }
    let (pack, bytes, entries) = b.finish();
    let key = layout::pack_key(&pack);
    backend.put(&key, &bytes).unwrap();
    let sources = entries
        .iter()
        .map(|e| ChunkSource {
            key: Arc::from(key.as_str()),
            id: e.id,
            offset: e.offset as u64,
            frame_len: e.frame_len,
            raw_len: e.raw_len,
        })
        .collect();
    OnePack {
        backend,
        store,
        pack,
        key,
        entries,
        sources,
    }
}

/// A store in memory holding one file of `data` (cut into 16 KiB chunks, one pack), and the
/// manifest of a revision with that file (`f`, with its sha256).
pub fn one_file_store(data: &[u8]) -> (Store, repo::manifest::Manifest) {
    use format::names::{CommitId, RepoId};
    use repo::manifest::{ChunkRef, FileEntry, Manifest};
    use sha2::Digest;
    let chunks: Vec<Vec<u8>> = data.chunks(16 << 10).map(|c| c.to_vec()).collect();
    let p = one_pack(&chunks);
    let file = FileEntry {
        path: "f".into(),
        size: data.len() as u64,
        sha256: format::Sha256(sha2::Sha256::digest(data).into()),
        executable: false,
        chunks: p
            .entries
            .iter()
            .map(|e| ChunkRef {
                id: e.id,
                pack: 0,
                offset: e.offset,
                frame_len: e.frame_len,
                raw_len: e.raw_len,
            })
            .collect(),
    };
    let m = Manifest {
        repo: RepoId::parse("a/b").unwrap(),
        commit: CommitId([1; 20]),
        ingested_at: 0,
        source: "test".into(),
        packs: vec![p.pack],
        files: vec![file],
        published: None,
        xet_hashes: Vec::new(),
    };
    (p.store, m)
}
