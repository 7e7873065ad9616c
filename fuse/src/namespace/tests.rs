//! Tests of the namespace against a memory store (no kernel).

use super::*;
use chunker::ChunkParams;
use index::Index;
use objects::MemoryStore;
use read::progress::NoProgress;
use repo::CreateOptions;
use store::ingest::{ingest, IngestOptions};
use store::source::{discover, DiscoverOptions};

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// A memory store with `org/model` at commits A (`main`) and B, each with
/// `config.json` and `sub/w.bin` (other bytes in each).
fn store() -> (Store, RepoId) {
    let opts = CreateOptions {
        chunk: ChunkParams::tiny(),
        pack_target: 64 * 1024,
    };
    let store = Store::open_or_create(Arc::new(MemoryStore::new()), opts).unwrap();
    let idx = tempfile::tempdir().unwrap();
    let index = Index::open(idx.path(), &store.config().store_id).unwrap();
    let repo = RepoId::parse("org/model").unwrap();
    for (c, refs) in [(A, vec!["main".to_string()]), (B, vec![])] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            format!("{{\"c\": \"{c}\"}}"),
        )
        .unwrap();
        std::fs::write(dir.path().join("sub/w.bin"), c.repeat(100)).unwrap();
        let opts = DiscoverOptions {
            repo: Some(repo.clone()),
            revision: Some(CommitId::parse(c).unwrap()),
            refs,
        };
        let snaps = discover(dir.path(), &opts).unwrap().snapshots;
        ingest(
            &store,
            &index,
            &snaps,
            IngestOptions::default(),
            &NoProgress,
        )
        .unwrap();
    }
    (store, repo)
}

/// The inode of `path` (names separated by `/`) from the root.
fn walk(ns: &Namespace, path: &str) -> Option<u64> {
    path.split('/')
        .try_fold(ROOT, |ino, name| ns.lookup(ino, name).unwrap())
}

#[test]
fn a_file_through_a_ref_a_sha_a_prefix_and_upper_case_is_one_inode() {
    let (store, _) = store();
    let ns = Namespace::full(store);
    let by_ref = walk(&ns, "org/model/main/sub/w.bin").unwrap();
    for rev in [A, &A[..7], &A.to_ascii_uppercase()] {
        assert_eq!(
            walk(&ns, &format!("org/model/{rev}/sub/w.bin")),
            Some(by_ref)
        );
    }
    assert_ne!(walk(&ns, &format!("org/model/{B}/sub/w.bin")), Some(by_ref));
    let a = ns.attr(by_ref).unwrap().unwrap();
    assert_eq!((a.kind, a.size, a.immutable), (Kind::File, 4000, true));
}

/// Every spelling of a commit (full or a prefix, any case) is one View inode with one
/// subtree: the inode table grows with what is stored, not with how it is asked for (a
/// hostile walker spelling one sha 2^40 ways gets no new inode after the first).
#[test]
fn every_spelling_of_a_commit_is_one_inode_and_the_table_does_not_grow() {
    let (store, _) = store();
    let ns = Namespace::full(store);
    let full = walk(&ns, &format!("org/model/{A}")).unwrap();
    let sub = walk(&ns, &format!("org/model/{A}/sub/w.bin")).unwrap();
    let before = ns.inodes.lock().nodes.len();
    for len in repo::handle::MIN_PREFIX..=40 {
        let lower = &A[..len];
        let upper = lower.to_ascii_uppercase();
        let mixed: String = lower
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                }
            })
            .collect();
        for rev in [lower, &upper, &mixed] {
            assert_eq!(walk(&ns, &format!("org/model/{rev}")), Some(full), "{rev}");
            let file = walk(&ns, &format!("org/model/{rev}/sub/w.bin"));
            assert_eq!(file, Some(sub), "{rev}");
        }
    }
    assert_eq!(
        ns.inodes.lock().nodes.len(),
        before,
        "new inodes for spellings"
    );
    // A listing names the commit by its full sha, with the same inode.
    let repo_ino = walk(&ns, "org/model").unwrap();
    let listed = ns.list(repo_ino).unwrap().unwrap();
    assert!(listed.iter().any(|(n, i, _)| n == A && *i == full));
}

#[test]
fn a_ref_is_read_again_after_the_refresh_and_a_file_keeps_its_commit() {
    let (store, repo) = store();
    let ns = Namespace::full(store.clone()).with_refresh(Duration::from_secs(3600));
    let fresh = Namespace::full(store.clone()).with_refresh(Duration::ZERO);
    let old = walk(&ns, "org/model/main/config.json").unwrap();
    let old_fresh = walk(&fresh, "org/model/main/config.json").unwrap();
    store
        .set_ref(&repo, "main", &CommitId::parse(B).unwrap())
        .unwrap();
    // Within the refresh the ref's commit is the one read before.
    assert_eq!(walk(&ns, "org/model/main/config.json"), Some(old));
    // Read again: another file, while the inode seen before keeps commit A.
    let new = walk(&fresh, "org/model/main/config.json").unwrap();
    assert_ne!(new, old_fresh);
    let (tree, _) = fresh.file(old_fresh).unwrap().unwrap();
    assert_eq!(tree.manifest.commit.to_hex(), A);
    let (tree, _) = fresh.file(new).unwrap().unwrap();
    assert_eq!(tree.manifest.commit.to_hex(), B);
}

#[test]
fn a_ref_with_slashes_is_listed_escaped_and_found_by_that_name() {
    let (store, repo) = store();
    store
        .set_ref(&repo, "refs/pr/1", &CommitId::parse(B).unwrap())
        .unwrap();
    let ns = Namespace::full(store);
    let repo_ino = walk(&ns, "org/model").unwrap();
    let names: Vec<String> = ns
        .list(repo_ino)
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, ["main", "refs%2Fpr%2F1", A, B]);
    assert!(walk(&ns, "org/model/refs%2Fpr%2F1/sub/w.bin").is_some());
    assert_eq!(walk(&ns, "org/model/refs/pr"), None);
}

#[test]
fn unknown_names_are_none_and_inodes_are_never_reused() {
    let (store, _) = store();
    let ns = Namespace::full(store);
    for path in [
        "nope",
        "org/nope",
        "org/model/nope",
        "org/model/main/nope",
        "org/model/main/config.json/x",
    ] {
        assert_eq!(walk(&ns, path), None, "{path}");
    }
    let first = walk(&ns, "org/model/main/sub").unwrap();
    let other = walk(&ns, &format!("org/model/{B}/sub")).unwrap();
    assert_ne!(first, other);
    assert_eq!(walk(&ns, "org/model/main/sub"), Some(first));
    assert_eq!(ns.attr(u64::MAX).unwrap(), None);
    assert_eq!(
        ns.list(walk(&ns, "org/model/main/config.json").unwrap())
            .unwrap(),
        None
    );
}

#[test]
fn a_single_revision_is_the_root() {
    let (store, repo) = store();
    let ns = Namespace::single(store, repo, CommitId::parse(B).unwrap());
    let names: Vec<String> = ns
        .list(ROOT)
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, ["config.json", "sub"]);
    // A commit's names keep long timeouts: a replaced commit's stale names answer
    // ESTALE at open and the kernel looks them up again.
    assert!(!ns.children_may_change(ROOT));
    let f = walk(&ns, "sub/w.bin").unwrap();
    assert_eq!(ns.attr(f).unwrap().unwrap().size, 4000);
}

/// Ingests `files` (path, bytes) as `commit` of `repo` into `store`, `main` at it.
fn put_files(store: &Store, repo: &RepoId, commit: &str, files: &[(&str, &[u8])]) {
    let idx = tempfile::tempdir().unwrap();
    let index = Index::open(idx.path(), &store.config().store_id).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (path, bytes) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let opts = DiscoverOptions {
        repo: Some(repo.clone()),
        revision: Some(CommitId::parse(commit).unwrap()),
        refs: vec!["main".to_string()],
    };
    let snaps = discover(dir.path(), &opts).unwrap().snapshots;
    let done = ingest(store, &index, &snaps, IngestOptions::default(), &NoProgress);
    done.unwrap();
}

#[test]
fn a_commit_ingested_again_with_other_files_is_seen_after_the_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(objects::LocalStore::new(dir.path()));
    let opts = CreateOptions {
        chunk: ChunkParams::tiny(),
        pack_target: 64 * 1024,
    };
    let store = Store::open_or_create(backend, opts).unwrap();
    let repo = RepoId::parse("org/model").unwrap();
    put_files(&store, &repo, A, &[("a", b"old"), ("sub/w.bin", b"w")]);
    let ns = Namespace::full(store.clone()).with_refresh(Duration::ZERO);
    let held = Namespace::full(store.clone()).with_refresh(Duration::from_secs(3600));
    let paths = ["org/model/main/a", &format!("org/model/{A}/a")];
    let (a, sub) = (
        walk(&ns, paths[0]).unwrap(),
        walk(&ns, "org/model/main/sub"),
    );
    assert_eq!(walk(&ns, paths[1]), Some(a));
    let held_a = walk(&held, paths[0]).unwrap();
    // A gc that rewrites the manifest with the same content: a new tag, the same inodes.
    let key = layout::manifest_key(&repo, &CommitId::parse(A).unwrap());
    let bytes = store.backend().get(&key).unwrap();
    store.backend().put(&key, &bytes).unwrap();
    assert_eq!(walk(&ns, paths[0]), Some(a));
    assert_eq!(walk(&ns, "org/model/main/sub"), sub);
    // Removed and ingested again with other files: new inodes, the old ones stale.
    let c = CommitId::parse(A).unwrap();
    store.remove_commit(&repo, &c, true).unwrap();
    put_files(
        &store,
        &repo,
        A,
        &[("a", b"longer"), ("b", b"b"), ("sub/w.bin", b"w")],
    );
    for path in paths {
        let new = walk(&ns, path).unwrap();
        assert_ne!(new, a, "{path}");
        assert_eq!(ns.attr(new).unwrap().unwrap().size, 6);
        assert_eq!(ns.file(new).unwrap().unwrap().0.manifest.files.len(), 3);
    }
    assert!(walk(&ns, "org/model/main/b").is_some());
    let (new_sub, old_sub) = (walk(&ns, "org/model/main/sub").unwrap(), sub.unwrap());
    assert_ne!(
        new_sub, old_sub,
        "a directory of other content is another inode"
    );
    assert_eq!(ns.lookup(old_sub, "w.bin").unwrap(), None);
    assert_eq!(ns.list(old_sub).unwrap(), None);
    assert!(!ns.current(a).unwrap() && !ns.current(old_sub).unwrap());
    assert!(ns.current(new_sub).unwrap());
    // The old file inode keeps its attributes, but opens nothing.
    assert_eq!(ns.attr(a).unwrap().unwrap().size, 3);
    assert!(ns.file(a).unwrap().is_none());
    // Within its refresh a namespace keeps the tree it read.
    assert_eq!(walk(&held, paths[0]), Some(held_a));
    // Removed: gone, and its inodes stale.
    store.remove_commit(&repo, &c, true).unwrap();
    assert_eq!(walk(&ns, paths[1]), None);
    assert!(!ns.current(new_sub).unwrap());
}

#[test]
fn the_ref_lists_and_the_revisions_entered_keep_to_their_bounds() {
    let store = Store::open_or_create(Arc::new(MemoryStore::new()), CreateOptions::default());
    let ns = Namespace::full(store.unwrap());
    assert_eq!(ns.refs.capacity(), REF_LISTS as u64);
    assert_eq!(ns.entered.capacity(), ENTERED as u64);
    let n = REF_LISTS * 10;
    let repo_of = |i: usize| RepoId::parse(&format!("org/model-{i}")).unwrap();
    let mut most = 0;
    for i in 0..n {
        let refs = vec![("main".to_string(), CommitId([1; 20]))];
        let value = Timed {
            at: Instant::now(),
            value: refs,
        };
        ns.refs.insert(repo_of(i), value);
        most = most.max(ns.refs.len());
        assert!(ns.refs.len() <= REF_LISTS);
        assert!(ns.refs.peek(&repo_of(i)).is_some(), "refs {i} just listed");
    }
    assert!(ns.refs.len() > REF_LISTS / 2);
    assert!(ns.refs.get(&repo_of(n - 1)).is_some(), "the last listing");
    println!(
        "cache-bound fuse refs: bound {REF_LISTS} entries; after {n} inserts: {} entries \
         (at most {most})",
        ns.refs.len()
    );
    let repo = RepoId::parse("org/model").unwrap();
    let commit = |i: usize| {
        let mut c = [0u8; 20];
        c[..8].copy_from_slice(&(i as u64).to_le_bytes());
        CommitId(c)
    };
    assert!(ns.first_entry((repo.clone(), commit(0))));
    assert!(!ns.first_entry((repo.clone(), commit(0))));
    let n = ENTERED * 10;
    let mut most = 0;
    for i in 1..n {
        assert!(ns.first_entry((repo.clone(), commit(i))));
        most = most.max(ns.entered.len());
        assert!(ns.entered.len() <= ENTERED);
    }
    assert!(ns.entered.len() > ENTERED / 2);
    // The last revision entered is remembered: entering it again is not a first entry.
    assert!(!ns.first_entry((repo.clone(), commit(n - 1))));
    println!(
        "cache-bound fuse entered: bound {ENTERED} entries; after {n} inserts: {} entries \
         (at most {most})",
        ns.entered.len()
    );
}

#[test]
fn the_tree_cache_keeps_to_its_bound_and_the_tree_in_use() {
    let tree = |n: u8| {
        let m = Manifest {
            repo: RepoId::parse("a/b").unwrap(),
            commit: CommitId([n; 20]),
            ingested_at: 0,
            source: "plain".into(),
            packs: vec![],
            files: vec![],
            published: None,
            xet_hashes: Vec::new(),
        };
        Arc::new(Tree::new(Arc::new(m)))
    };
    let repo = RepoId::parse("a/b").unwrap();
    let key = |n: u8| (repo.clone(), CommitId([n; 20]));
    let trees = Trees::new();
    assert_eq!(trees.cache.capacity(), TREES as u64);
    let n = TREES * 4;
    let mut most = 0;
    for i in 0..n {
        trees.put(key(i as u8), tree(i as u8), "t".into());
        most = most.max(trees.cache.len());
        // The first stays in use, and the one just read is served.
        assert!(trees.get(&key(0), Duration::from_secs(60), None).is_some());
        assert!(
            trees.cache.peek(&key(i as u8)).is_some(),
            "tree {i} just read"
        );
        assert!(trees.cache.len() <= TREES, "{}", trees.cache.len());
    }
    assert!(trees.cache.len() > TREES / 2);
    let last = key((n - 1) as u8);
    assert!(trees.get(&last, Duration::from_secs(60), None).is_some());
    println!(
        "cache-bound fuse trees: bound {TREES} entries; after {n} inserts: {} entries \
         (at most {most})",
        trees.cache.len()
    );
    // A tag other than the one read under is not the cached tree.
    assert!(trees.get(&key(0), Duration::ZERO, Some("u")).is_none());
    assert!(trees.get(&key(0), Duration::ZERO, Some("t")).is_some());
}
