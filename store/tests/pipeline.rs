//! Store-level tests on the in-memory backend: arbitrary contents round-trip, an edit
//! changes only nearby chunks, and an ingest interrupted at every possible put leaves no
//! visible revision and can be rerun.

use std::path::Path;
use std::sync::Arc;

use chunker::ChunkParams;
use format::RepoId;
use index::Index;
use objects::{MemoryStore, ObjectStore};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use read::file_reader::{verify, FileReader};
use read::progress::NoProgress;
use repo::{CreateOptions, Store};
use store::ingest::{ingest, IngestOptions};
use store::source::{discover, DiscoverOptions};

fn tiny_store(backend: Arc<MemoryStore>) -> Store {
    Store::open_or_create(
        backend,
        CreateOptions {
            chunk: ChunkParams::tiny(),
            pack_target: 64 * 1024,
        },
    )
    .unwrap()
}

fn snapshot_of(dir: &Path, repo: &str) -> Vec<store::source::Snapshot> {
    let opts = DiscoverOptions {
        repo: Some(RepoId::parse(repo).unwrap()),
        ..Default::default()
    };
    discover(dir, &opts).unwrap().snapshots
}

fn random_bytes(rng: &mut impl Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.gen()).collect()
}

fn read_all(store: &Store, repo: &str, path: &str) -> Vec<u8> {
    let repo = RepoId::parse(repo).unwrap();
    let commit = store.commits(&repo).unwrap()[0];
    let m = store.manifest(&repo, &commit).unwrap();
    let f = m.file(path).unwrap();
    let mut out = Vec::new();
    FileReader::new(store, &m, f)
        .unwrap()
        .copy_to(&mut out, &NoProgress)
        .unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]
    #[test]
    fn arbitrary_contents_round_trip(files in proptest::collection::vec((0usize..200_000, any::<u64>(), any::<bool>()), 1..5)) {
        let dir = tempfile::tempdir().unwrap();
        let mut want = Vec::new();
        for (i, (len, seed, repetitive)) in files.iter().enumerate() {
            let mut rng = rand::rngs::StdRng::seed_from_u64(*seed);
            let data = if *repetitive {
                let unit = random_bytes(&mut rng, 3000);
                unit.iter().cycle().take(*len).copied().collect()
            } else {
                random_bytes(&mut rng, *len)
            };
            let name = format!("d{}/f{i}.bin", i % 2);
            std::fs::create_dir_all(dir.path().join(format!("d{}", i % 2))).unwrap();
            std::fs::write(dir.path().join(&name), &data).unwrap();
            want.push((name, data));
        }
        let backend = Arc::new(MemoryStore::new());
        let store = tiny_store(backend);
        let idx_dir = tempfile::tempdir().unwrap();
        let index = Index::open(idx_dir.path(), &store.config().store_id).unwrap();
        ingest(&store, &index, &snapshot_of(dir.path(), "p/t"), IngestOptions { threads: 2, ..Default::default() }, &NoProgress).unwrap();
        for (name, data) in &want {
            prop_assert_eq!(&read_all(&store, "p/t", name), data);
        }
        // random ranges through read_at
        let repo = RepoId::parse("p/t").unwrap();
        let m = store.manifest(&repo, &store.commits(&repo).unwrap()[0]).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(files.len() as u64);
        for (name, data) in &want {
            let r = FileReader::new(&store, &m, m.file(name).unwrap()).unwrap();
            for _ in 0..10 {
                let off = rng.gen_range(0..=data.len());
                let len = rng.gen_range(0..70_000);
                let end = (off + len).min(data.len());
                prop_assert_eq!(r.read_at(off as u64, len).unwrap(), data[off..end].to_vec());
            }
        }
    }
}

#[test]
fn insert_changes_only_chunks_around_the_edit() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let base = random_bytes(&mut rng, 4 << 20);
    let mut edited = base.clone();
    let at = base.len() / 3;
    edited.splice(at..at, random_bytes(&mut rng, 37));
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    std::fs::write(a.path().join("w.bin"), &base).unwrap();
    std::fs::write(b.path().join("w.bin"), &edited).unwrap();
    let backend = Arc::new(MemoryStore::new());
    let store = tiny_store(backend.clone());
    let idx_dir = tempfile::tempdir().unwrap();
    let index = Index::open(idx_dir.path(), &store.config().store_id).unwrap();
    let r1 = ingest(
        &store,
        &index,
        &snapshot_of(a.path(), "e/x"),
        IngestOptions::default(),
        &NoProgress,
    )
    .unwrap();
    let r2 = ingest(
        &store,
        &index,
        &snapshot_of(b.path(), "e/x"),
        IngestOptions::default(),
        &NoProgress,
    )
    .unwrap();
    assert!(r1.new_chunks > 500, "{}", r1.new_chunks);
    assert!(
        r2.new_chunks <= 3,
        "a 37-byte insert created {} new chunks",
        r2.new_chunks
    );
    assert!(r2.new_chunk_bytes < 3 * 16384 + 37);
}

/// For every N, an ingest whose Nth put fails (on a fresh store, so that every point of the
/// write sequence is hit): no ref or manifest is visible unless complete, what is visible
/// verifies, and a rerun completes, storing each chunk once.
#[test]
fn interrupted_at_every_put_leaves_nothing_visible_and_rerun_completes() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        std::fs::write(
            dir.path().join(format!("f{i}")),
            random_bytes(&mut rng, 150_000),
        )
        .unwrap();
    }
    let snaps = {
        let opts = DiscoverOptions {
            repo: Some(RepoId::parse("c/r").unwrap()),
            refs: vec!["main".into()],
            ..Default::default()
        };
        discover(dir.path(), &opts).unwrap().snapshots
    };
    let repo = RepoId::parse("c/r").unwrap();
    let mut failures = 0;
    for n in 0.. {
        assert!(n < 1000);
        let backend = Arc::new(MemoryStore::new());
        let store = tiny_store(backend.clone());
        let idx_dir = tempfile::tempdir().unwrap();
        let index = Index::open(idx_dir.path(), &store.config().store_id).unwrap();
        backend.fail_put_after(n);
        let r = ingest(
            &store,
            &index,
            &snaps,
            IngestOptions {
                threads: 2,
                ..Default::default()
            },
            &NoProgress,
        );
        backend.fail_put_after(-1);
        for c in store.commits(&repo).unwrap() {
            let m = store.manifest(&repo, &c).unwrap();
            assert!(verify(&store, &m, &NoProgress).problems.is_empty());
        }
        for (_, c) in store.refs(&repo).unwrap() {
            assert!(store.has_commit(&repo, &c).unwrap());
        }
        if r.is_ok() {
            break;
        }
        failures += 1;
        assert!(
            store.refs(&repo).unwrap().is_empty(),
            "ref visible after a failed ingest (n = {n})"
        );
        // The rerun completes, reusing the packs that did land.
        let bytes_before = backend.bytes_put();
        ingest(
            &store,
            &index,
            &snaps,
            IngestOptions {
                threads: 2,
                ..Default::default()
            },
            &NoProgress,
        )
        .unwrap();
        assert!(backend.bytes_put() > bytes_before);
        let c = store.resolve(&repo, "main").unwrap();
        let m = store.manifest(&repo, &c).unwrap();
        assert_eq!(m.files.len(), 3);
        assert!(verify(&store, &m, &NoProgress).problems.is_empty());
        let chunks_in_packs: usize = backend
            .list("packs/")
            .unwrap()
            .iter()
            .map(|o| {
                repo::pack::read_footer(backend.as_ref(), &o.key)
                    .unwrap()
                    .entries
                    .len()
            })
            .sum();
        let distinct: std::collections::HashSet<format::ChunkId> = m
            .files
            .iter()
            .flat_map(|f| f.chunks.iter().map(|c| c.id))
            .collect();
        assert_eq!(
            chunks_in_packs,
            distinct.len(),
            "no chunk stored twice (n = {n})"
        );
    }
    assert!(failures > 5, "the ingest needs several puts ({failures})");
}
