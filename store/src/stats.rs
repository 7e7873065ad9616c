//! Store-wide figures: logical bytes, unique bytes, stored bytes, and the ratios between
//! them, computed from the manifests and the pack listing.

use std::collections::HashMap;

use format::layout;
use format::{ChunkId, RepoId};
use repo::handle::Store;
use repo::Result;

/// Figures for a whole store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Repositories.
    pub repos: usize,
    /// Commits (manifests).
    pub commits: usize,
    /// Files over all commits.
    pub files: u64,
    /// Sum of every file of every commit: what plain copies would take.
    pub logical_bytes: u64,
    /// Distinct chunks referenced.
    pub unique_chunks: u64,
    /// Uncompressed bytes of the distinct chunks: the size after dedup.
    pub unique_bytes: u64,
    /// Frame bytes of the distinct chunks: the size after dedup and compression.
    pub compressed_bytes: u64,
    /// Pack objects.
    pub packs: u64,
    /// Bytes of all packs (includes footers and chunks no commit references).
    pub stored_bytes: u64,
}

impl Stats {
    /// logical / unique.
    pub fn dedup_ratio(&self) -> f64 {
        ratio(self.logical_bytes, self.unique_bytes)
    }
    /// unique / compressed.
    pub fn compression_ratio(&self) -> f64 {
        ratio(self.unique_bytes, self.compressed_bytes)
    }
    /// logical / stored.
    pub fn total_ratio(&self) -> f64 {
        ratio(self.logical_bytes, self.stored_bytes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Distinct chunks seen: id → (raw length, frame length).
type Chunks = HashMap<ChunkId, (u32, u32)>;

/// Counts one repository's revisions into `s` and its chunks into `chunks`.
fn add_repo(store: &Store, repo: &RepoId, s: &mut Stats, chunks: &mut Chunks) -> Result<()> {
    s.repos += 1;
    for commit in store.commits(repo)? {
        let m = store.manifest(repo, &commit)?;
        s.commits += 1;
        for f in &m.files {
            s.files += 1;
            s.logical_bytes += f.size;
            for c in &f.chunks {
                chunks.insert(c.id, (c.raw_len, c.frame_len));
            }
        }
    }
    Ok(())
}

fn add_chunks(s: &mut Stats, chunks: &Chunks) {
    s.unique_chunks = chunks.len() as u64;
    s.unique_bytes = chunks.values().map(|c| c.0 as u64).sum();
    s.compressed_bytes = chunks.values().map(|c| c.1 as u64).sum();
}

/// [`Stats`] of one repository's revisions alone (what [`stats`] counts, restricted to
/// them: its distinct chunks, shared or not with other repositories); no packs (packs
/// are shared), so `packs` and `stored_bytes` are 0.
pub fn repo_stats(store: &Store, repo: &RepoId) -> Result<Stats> {
    let mut s = Stats::default();
    let mut chunks = Chunks::new();
    add_repo(store, repo, &mut s, &mut chunks)?;
    add_chunks(&mut s, &chunks);
    Ok(s)
}

/// Computes [`Stats`] for `store`.
pub fn stats(store: &Store) -> Result<Stats> {
    let mut s = Stats::default();
    let mut chunks = Chunks::new();
    for repo in store.repos()? {
        add_repo(store, &repo, &mut s, &mut chunks)?;
    }
    add_chunks(&mut s, &chunks);
    for obj in store.backend().list(layout::PACKS_PREFIX)? {
        if layout::parse_pack_key(&obj.key).is_some() {
            s.packs += 1;
            s.stored_bytes += obj.size;
        }
    }
    Ok(s)
}
