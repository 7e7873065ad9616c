//! Commits applied to a real local store and RocksDB index: what a branch holds after
//! each, and every refusal leaving the store as it was.

use std::sync::Arc;
use std::time::Duration;

use format::{RepoId, Sha256};
use index::Index;
use read::file_reader::FileReader;
use repo::{CreateOptions, Store};
use sha2::{Digest, Sha256 as Hasher};

use crate::spool::Spool;
use crate::{CommitRequest, Content, Operation, PublishError, Publisher};

struct Hub {
    _dir: tempfile::TempDir,
    store: Store,
    index: Index,
    publisher: Publisher,
}

fn hub() -> Hub {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(objects::LocalStore::new(dir.path().join("store")));
    let store = Store::open_or_create(backend, CreateOptions::default()).unwrap();
    let index = Index::open(&dir.path().join("index"), &store.config().store_id).unwrap();
    let spool = Spool::open(
        &dir.path().join("spool"),
        Duration::from_secs(3600),
        1 << 30,
    )
    .unwrap();
    let publisher = Publisher::new(store.clone(), spool);
    Hub {
        _dir: dir,
        store,
        index,
        publisher,
    }
}

fn sha(b: &[u8]) -> Sha256 {
    Sha256(Hasher::digest(b).into())
}

fn repo() -> RepoId {
    RepoId::parse("team/model").unwrap()
}

fn req(ops: Vec<Operation>) -> CommitRequest {
    CommitRequest {
        repo: repo(),
        branch: "main".into(),
        parent: None,
        operations: ops,
    }
}

fn add(path: &str, bytes: &[u8]) -> Operation {
    Operation::Add {
        path: path.into(),
        content: Content::Inline(bytes.to_vec()),
    }
}

fn object(path: &str, bytes: &[u8]) -> Operation {
    Operation::Add {
        path: path.into(),
        content: Content::Object {
            sha256: sha(bytes),
            size: bytes.len() as u64,
        },
    }
}

/// Every file of the branch's revision, read back through the read path.
fn files(h: &Hub, branch: &str) -> Vec<(String, Vec<u8>)> {
    let c = h.store.resolve(&repo(), branch).unwrap();
    let m = h.store.manifest(&repo(), &c).unwrap();
    m.files
        .iter()
        .map(|f| {
            let mut out = Vec::new();
            let r = FileReader::new(&h.store, &m, f).unwrap();
            std::io::copy(&mut r.into_read(), &mut out).unwrap();
            (f.path.clone(), out)
        })
        .collect()
}

fn big(seed: u8, len: usize) -> Vec<u8> {
    let mut x = seed as u64 + 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_commit_adds_replaces_and_deletes_on_its_branch() {
    let h = hub();
    let weights = big(1, 3 << 20);
    h.publisher
        .receive(
            &repo(),
            &sha(&weights),
            weights.len() as u64,
            &mut &weights[..],
        )
        .unwrap();
    let first = h
        .publisher
        .commit(
            &h.index,
            &req(vec![
                add("config.json", b"{}"),
                object("model.safetensors", &weights),
                add("old/a.txt", b"a"),
            ]),
        )
        .unwrap();
    assert_eq!(first.files, 3);
    assert_eq!(h.store.resolve(&repo(), "main").unwrap(), first.commit);
    assert_eq!(
        h.publisher
            .spool()
            .object(&repo(), &sha(&weights), weights.len() as u64),
        None,
        "taken from the spool"
    );

    // The second commit sends only the new file; the weights stay by chunk list, unread.
    let second = h
        .publisher
        .commit(
            &h.index,
            &req(vec![
                add("config.json", b"{\"v\":2}"),
                Operation::DeleteFolder { path: "old".into() },
            ]),
        )
        .unwrap();
    assert_eq!(second.files_read, 1, "only the added file is read");
    assert_eq!(
        files(&h, "main"),
        vec![
            ("config.json".into(), b"{\"v\":2}".to_vec()),
            ("model.safetensors".into(), weights.clone())
        ]
    );
    // The content is in the repository now: a commit may name it without uploading it.
    let third = h
        .publisher
        .commit(&h.index, &req(vec![object("copy.safetensors", &weights)]))
        .unwrap();
    assert_eq!(third.new_chunks, 0, "nothing new stored");
    assert_eq!(files(&h, "main")[1].1, weights);
    assert_eq!(
        h.publisher
            .present(
                &repo(),
                &[(sha(&weights), weights.len() as u64), (sha(b"x"), 1)]
            )
            .unwrap(),
        vec![true, false]
    );
}

#[test]
fn refused_commits_change_nothing() {
    let h = hub();
    let base = h
        .publisher
        .commit(&h.index, &req(vec![add("a/b.txt", b"b")]))
        .unwrap();
    type Expect = fn(&PublishError) -> bool;
    let cases: Vec<(Vec<Operation>, Expect)> = vec![
        (
            vec![add("../escape", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("..")),
        ),
        (
            vec![add("/etc/passwd", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("absolute")),
        ),
        (vec![add(".git/config", b"x")], |e| {
            matches!(e, PublishError::BadRequest(_))
        }),
        (
            vec![add("x/.GIT/config", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains(".git")),
        ),
        (
            vec![add("a\\..\\x", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("backslash")),
        ),
        (
            vec![add("C:", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("drive")),
        ),
        (
            vec![add("line\nbreak", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("control")),
        ),
        (
            vec![add(&"n".repeat(256), b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("255")),
        ),
        (
            vec![add(&format!("{}x", "d/".repeat(600)), b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("1024")),
        ),
        (
            vec![add("a", b"x")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("both a file and a folder")),
        ),
        (
            vec![object("w.bin", b"never sent")],
            |e| matches!(e, PublishError::BadRequest(m) if m.contains("never uploaded")),
        ),
        (
            vec![
                add("ok.txt", b"x"),
                Operation::DeleteFile {
                    path: "nope".into(),
                },
            ],
            |e| matches!(e, PublishError::EntryNotFound(_)),
        ),
        (
            vec![Operation::DeleteFolder {
                path: "nope".into(),
            }],
            |e| matches!(e, PublishError::EntryNotFound(_)),
        ),
    ];
    for (ops, expected) in cases {
        let e = h.publisher.commit(&h.index, &req(ops.clone())).unwrap_err();
        assert!(expected(&e), "{ops:?}: {e}");
        assert_eq!(
            h.store.resolve(&repo(), "main").unwrap(),
            base.commit,
            "{ops:?}"
        );
        assert_eq!(h.store.commits(&repo()).unwrap().len(), 1, "{ops:?}");
    }
    let other = CommitRequest {
        branch: "dev".into(),
        ..req(vec![add("x", b"x")])
    };
    assert!(matches!(
        h.publisher.commit(&h.index, &other),
        Err(PublishError::RevisionNotFound(_))
    ));
    let bad_branch = CommitRequest {
        branch: "a..b".into(),
        ..req(vec![add("x", b"x")])
    };
    assert!(matches!(
        h.publisher.commit(&h.index, &bad_branch),
        Err(PublishError::BadRequest(_))
    ));
}

#[test]
fn a_first_commit_held_back_by_its_release_check_does_not_block_the_next() {
    // Hostile review of issue 41 (helper-42, 7): with refs of failing revisions held, a
    // new repository's first commit stored a revision but made no branch; the next commit
    // was refused "no branch main" for ever.
    let h = hub();
    let bad = h
        .publisher
        .commit(&h.index, &req(vec![add("f", b"1")]))
        .unwrap();
    h.store.delete_ref(&repo(), "main").unwrap(); // as a held first commit leaves it
    assert!(h.store.refs(&repo()).unwrap().is_empty());
    let next = h
        .publisher
        .commit(&h.index, &req(vec![add("g", b"2")]))
        .unwrap();
    assert_ne!(next.commit, bad.commit);
    assert_eq!(files(&h, "main"), vec![("g".into(), b"2".to_vec())]);
}

#[test]
fn an_object_sent_for_one_repository_is_not_another_s() {
    // Hostile review of issue 41 (helper-42, 1): the spool was one for all repositories,
    // so a commit anywhere could take bytes sent for another by naming their sha256.
    let h = hub();
    let secret = big(9, 300_000);
    h.publisher
        .receive(
            &repo(),
            &sha(&secret),
            secret.len() as u64,
            &mut &secret[..],
        )
        .unwrap();
    let other = RepoId::parse("other/x").unwrap();
    let mut r = req(vec![object("stolen.bin", &secret)]);
    r.repo = other.clone();
    let e = h.publisher.commit(&h.index, &r).unwrap_err();
    assert!(
        matches!(e, PublishError::BadRequest(ref m) if m.contains("never uploaded")),
        "{e}"
    );
    assert_eq!(
        h.publisher
            .present(&other, &[(sha(&secret), secret.len() as u64)])
            .unwrap(),
        vec![false]
    );
    // Its own repository still takes it.
    h.publisher
        .commit(&h.index, &req(vec![object("mine.bin", &secret)]))
        .unwrap();
}

#[test]
fn a_damaged_spooled_object_is_dropped_when_its_commit_fails() {
    // Hostile review of issue 41 (helper-42, 6): a bit flipped in the spool failed every
    // commit until the object expired, the batch answering "present" all along.
    let h = hub();
    let data = big(4, 200_000);
    let p = h
        .publisher
        .spool()
        .receive(&repo(), &sha(&data), data.len() as u64, &mut &data[..])
        .unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[1000] ^= 1;
    std::fs::write(&p, bytes).unwrap();
    assert!(h
        .publisher
        .commit(&h.index, &req(vec![object("w.bin", &data)]))
        .is_err());
    assert_eq!(
        h.publisher
            .present(&repo(), &[(sha(&data), data.len() as u64)])
            .unwrap(),
        vec![false]
    );
}

#[test]
fn a_commit_of_many_files_holds_no_file_open_for_each() {
    // Hostile review of issue 41 (helper-42, 4): each added file was held open until the
    // commit was published: 1,100 files failed under a 1,024-descriptor limit.
    let h = hub();
    let ops: Vec<Operation> = (0..1500)
        .map(|i| add(&format!("f/{i}.txt"), format!("{i}").as_bytes()))
        .collect();
    let before = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let mut peak = before;
    let r = req(ops);
    let applied = crate::apply::apply(&h.store, h.publisher.spool(), &r).unwrap();
    peak = peak.max(std::fs::read_dir("/proc/self/fd").unwrap().count());
    assert!(
        peak < before + 50,
        "{before} descriptors before, {peak} after applying"
    );
    drop(applied);
    let done = h.publisher.commit(&h.index, &r).unwrap();
    assert_eq!(done.files, 1500);
}

#[test]
fn a_commit_on_a_parent_the_branch_left_is_refused() {
    let h = hub();
    let one = h
        .publisher
        .commit(&h.index, &req(vec![add("f", b"1")]))
        .unwrap();
    let two = h
        .publisher
        .commit(
            &h.index,
            &CommitRequest {
                parent: Some(one.commit),
                ..req(vec![add("f", b"2")])
            },
        )
        .unwrap();
    let stale = CommitRequest {
        parent: Some(one.commit),
        ..req(vec![add("f", b"3")])
    };
    let e = h.publisher.commit(&h.index, &stale).unwrap_err();
    assert!(
        matches!(e, PublishError::Moved(ref m) if m.contains(&two.commit.to_hex())),
        "{e}"
    );
    assert_eq!(files(&h, "main"), vec![("f".into(), b"2".to_vec())]);
}

#[test]
fn a_second_commit_to_a_busy_branch_gets_a_conflict() {
    let h = hub();
    h.publisher
        .commit(&h.index, &req(vec![add("f", b"1")]))
        .unwrap();
    let key = ("team/model".to_string(), "main".to_string());
    h.publisher.busy.lock().insert(key.clone());
    let e = h
        .publisher
        .commit(&h.index, &req(vec![add("f", b"2")]))
        .unwrap_err();
    assert!(matches!(e, PublishError::Conflict(_)), "{e}");
    h.publisher.busy.lock().remove(&key);
    h.publisher
        .commit(&h.index, &req(vec![add("f", b"2")]))
        .unwrap();
    assert_eq!(files(&h, "main"), vec![("f".into(), b"2".to_vec())]);
}

/// Hostile review of issue 41 (helper-44, 9): the stored xorbs of a repository the hub does
/// not serve answered a shard naming them (200 for a right guess, 400 for a wrong one),
/// telling a writer what a hidden repository holds. They read as unknown now.
#[test]
fn a_shard_names_stored_xorbs_of_visible_repositories_only() {
    let mut h = hub();
    h.publisher = std::mem::replace(
        &mut h.publisher,
        Publisher::new(
            h.store.clone(),
            Spool::open(
                &h._dir.path().join("spool2"),
                Duration::from_secs(60),
                1 << 30,
            )
            .unwrap(),
        ),
    )
    .with_global_dedup([7; 32])
    .unwrap();
    let bytes = big(3, 300_000);
    h.publisher
        .commit(&h.index, &req(vec![add("w.bin", &bytes)]))
        .unwrap();
    h.publisher.prepare(&repo());
    let xet = h.publisher.xet.clone().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !xet.has(&sha(&bytes)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the indexer made no record"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let chunks = crate::xet::indexer::chunks_of(&bytes[..]).unwrap();
    let mut at = 0;
    let parts: Vec<&[u8]> = chunks
        .iter()
        .map(|(_, len)| {
            let p = &bytes[at..at + *len as usize];
            at += *len as usize;
            p
        })
        .collect();
    let x = crate::xet::stored::stored_xorbs(&chunks)[0].2;
    let body = crate::xet::shard::tests::shard(&x, &parts, |_| {});
    let other = RepoId::parse("team/other").unwrap();
    let e = h
        .publisher
        .receive_shard(&other, &mut &body[..], &|_| false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not have"), "{e}");
    let made = h
        .publisher
        .receive_shard(&other, &mut &body[..], &|r| *r == repo())
        .unwrap();
    assert_eq!(made, vec![sha(&bytes)]);
}
