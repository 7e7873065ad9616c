//! What a loader reads first: the small files of a revision.
//!
//! Every model server starts a load the same way: `config.json`, then
//! `generation_config.json`, `tokenizer_config.json`, `special_tokens_map.json`, the
//! `model.safetensors.index.json`, a `README.md` now and then (vLLM, transformers).
//! With the default chunking each is one chunk (a file below the minimum chunk is never
//! cut), and on a cold node each costs a pack open and a disk read before its first byte.
//! So when a reader first
//! enters a revision (looks a name up in it or lists it), [`warm_small_files`] hands the
//! chunks of its smallest files to the cache as prefetches: by the time the loader opens
//! them they are decoded and verified in memory, or on their way.
//!
//! Bounds: files of at most [`SMALL_FILE`] bytes, smallest first, at most [`MAX_FILES`] of
//! them and [`MAX_BYTES`] in all, and never more than the cache's own prefetch budget
//! (a third of its size); a revision of 20,000 small files warms its 64 smallest and no more.
//!
//! A walk of many small files (a dataset, a repository of code) reads each directory's
//! files in name order, which the packs hold in ingest order: one cold random `pread` per
//! file on the FUSE thread. So when a directory of a revision is listed,
//! [`warm_dir_files`] hands its small files' chunks to the cache too, in pack order, at
//! most [`MAX_DIR_BYTES`] per listing.

use std::sync::Arc;

use crate::cache::ChunkCache;
use crate::chunk_map::ChunkMap;
use repo::manifest::Manifest;

/// Largest file warmed: 128 KiB, the default minimum chunk, so each is one chunk.
pub const SMALL_FILE: u64 = 128 * 1024;
/// Most files warmed per revision.
pub const MAX_FILES: usize = 64;
/// Most bytes warmed per revision: 2 MiB, well under the default cache's in-flight share.
pub const MAX_BYTES: u64 = 2 * 1024 * 1024;

/// Starts fetching the chunks of the smallest files of `manifest` into `cache`, in the
/// background (the cache's workers; frames next to each other in a pack with one ranged
/// read); returns how many of their chunks are cached or on their way.
pub fn warm_small_files(cache: &Arc<ChunkCache>, manifest: &Manifest) -> usize {
    let mut small: Vec<usize> = (0..manifest.files.len())
        .filter(|&i| {
            let f = &manifest.files[i];
            f.size > 0 && f.size <= SMALL_FILE
        })
        .collect();
    small.sort_by_key(|&i| (manifest.files[i].size, i));
    let mut bytes = 0u64;
    let mut sources = Vec::new();
    for &i in small.iter().take(MAX_FILES) {
        let f = &manifest.files[i];
        if bytes + f.size > MAX_BYTES {
            break;
        }
        bytes += f.size;
        // A file whose chunks do not add up is left to its reader, which says so.
        if let Ok(map) = ChunkMap::new(manifest, f) {
            sources.extend(map.sources);
        }
    }
    // In pack order, so that neighbours share a read; the cache stops where its in-flight
    // share (a third of its budget) is taken, readers first.
    sources.sort_by(|a, b| (&a.key, a.offset).cmp(&(&b.key, b.offset)));
    cache.prefetch_run(&sources)
}

/// Most bytes warmed per listed directory: 8 MiB (a directory of hundreds of small files;
/// the cache's in-flight share caps it further).
pub const MAX_DIR_BYTES: u64 = 8 * 1024 * 1024;

/// Starts fetching the chunks of the small files `files` of `manifest` (the files of one
/// directory, as it is listed) into `cache`, in pack order, in the background. A walk
/// reads a directory's files in name order while the packs hold them in ingest order
/// (random against the walk: one cold random `pread` per file on the FUSE thread, issue
/// 40); fetched here, neighbours in a pack share one read and the cache's workers read
/// several at once, ahead of the walk. Returns how many chunks are cached or on their way.
pub fn warm_dir_files(cache: &Arc<ChunkCache>, manifest: &Manifest, files: &[usize]) -> usize {
    let mut bytes = 0u64;
    let mut sources = Vec::new();
    for &i in files {
        let Some(f) = manifest.files.get(i) else {
            continue;
        };
        if f.size == 0 || f.size > SMALL_FILE {
            continue;
        }
        if bytes + f.size > MAX_DIR_BYTES {
            break;
        }
        bytes += f.size;
        if let Ok(map) = ChunkMap::new(manifest, f) {
            sources.extend(map.sources);
        }
    }
    sources.sort_by(|a, b| (&a.key, a.offset).cmp(&(&b.key, b.offset)));
    cache.prefetch_run(&sources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pack::{noise, one_pack};
    use format::Sha256;
    use repo::manifest::FileEntry;

    /// A revision whose file `i` is the chunks `groups[i]` of one pack holding `chunks`.
    fn revision(groups: &[&[usize]], chunks: &[Vec<u8>]) -> (Arc<ChunkCache>, Manifest) {
        let p = one_pack(chunks);
        let files = groups
            .iter()
            .enumerate()
            .map(|(i, g)| FileEntry {
                path: format!("f{i}"),
                size: g.iter().map(|&c| chunks[c].len() as u64).sum(),
                sha256: Sha256([0; 32]),
                executable: false,
                chunks: g.iter().map(|&c| p.chunk_ref(c)).collect(),
            })
            .collect();
        let cache = Arc::new(ChunkCache::new(p.store.clone(), 64 << 20, 2).unwrap());
        (cache, p.manifest(files))
    }

    #[test]
    fn the_small_files_of_a_revision_are_fetched_and_the_large_ones_are_not() {
        // Chunks 0-2: three small files; 3-5: one file of 3 x 60,000 bytes (over 128 KiB).
        let sizes = [300, 5_000, 70_000, 60_000, 60_000, 60_000];
        let chunks: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| noise(n, i as u64))
            .collect();
        let (cache, m) = revision(&[&[2], &[3, 4, 5], &[0], &[1]], &chunks);
        assert_eq!(warm_small_files(&cache, &m), 3);
        for (i, c) in chunks.iter().enumerate() {
            let held = cache.holds(&format::ChunkId::of(c));
            assert_eq!(held, i < 3, "chunk {i}");
        }
        // Warming again hands nothing new over, and the bytes read right.
        assert_eq!(warm_small_files(&cache, &m), 3);
        let map = ChunkMap::new(&m, &m.files[2]).unwrap();
        assert_eq!(&**cache.get(&map.sources[0]).unwrap(), &chunks[0]);
    }

    #[test]
    fn a_revision_of_many_small_files_warms_only_its_smallest() {
        let chunks: Vec<Vec<u8>> = (0..MAX_FILES + 40)
            .map(|i| noise(1_000 + i, i as u64))
            .collect();
        // Listed largest first: the smallest are chosen, whatever the order.
        let groups: Vec<Vec<usize>> = (0..chunks.len()).rev().map(|i| vec![i]).collect();
        let refs: Vec<&[usize]> = groups.iter().map(|g| g.as_slice()).collect();
        let (cache, m) = revision(&refs, &chunks);
        assert_eq!(warm_small_files(&cache, &m), MAX_FILES);
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(cache.holds(&format::ChunkId::of(c)), i < MAX_FILES, "{i}");
        }
    }

    #[test]
    fn warming_stops_at_its_byte_cap() {
        // Twenty files of 120,000 bytes: 2 MiB holds 17 of them.
        let chunks: Vec<Vec<u8>> = (0..20).map(|i| noise(120_000, i)).collect();
        let groups: Vec<Vec<usize>> = (0..20).map(|i| vec![i]).collect();
        let refs: Vec<&[usize]> = groups.iter().map(|g| g.as_slice()).collect();
        let (cache, m) = revision(&refs, &chunks);
        let n = warm_small_files(&cache, &m);
        assert_eq!(n as u64, MAX_BYTES / 120_000);
    }

    #[test]
    fn a_listed_directory_warms_its_small_files_only_up_to_its_cap() {
        // Files 0-2 of the directory are small, file 3 is large (not warmed), file 4 is
        // not of this directory (not asked for).
        let sizes = [300, 5_000, 70_000, 60_000, 60_000, 60_000, 900];
        let chunks: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| noise(n, i as u64))
            .collect();
        let (cache, m) = revision(&[&[2], &[0], &[1], &[3, 4, 5], &[6]], &chunks);
        assert_eq!(warm_dir_files(&cache, &m, &[0, 1, 2, 3, 99]), 3);
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(cache.holds(&format::ChunkId::of(c)), i < 3, "chunk {i}");
        }
        let map = ChunkMap::new(&m, &m.files[1]).unwrap();
        assert_eq!(&**cache.get(&map.sources[0]).unwrap(), &chunks[0]);
        // 100 files of 120,000 bytes: 8 MiB holds 69 of them (the cache's prefetch share,
        // 64 MiB / 3, holds more).
        let chunks: Vec<Vec<u8>> = (0..100).map(|i| noise(120_000, i)).collect();
        let groups: Vec<Vec<usize>> = (0..100).map(|i| vec![i]).collect();
        let refs: Vec<&[usize]> = groups.iter().map(|g| g.as_slice()).collect();
        let (cache, m) = revision(&refs, &chunks);
        let all: Vec<usize> = (0..100).collect();
        assert_eq!(
            warm_dir_files(&cache, &m, &all) as u64,
            MAX_DIR_BYTES / 120_000
        );
    }
}
