//! Ingest spares the Xet hash of content it hashed before (`store::ingest::xet_memo`,
//! docs/format/xet.md "When it is computed"): a copy of a file read before takes the
//! recorded hash, a file that parts from it is read back and hashed, a file written to in
//! between fails the ingest. Whatever the shortcut did, every Xet hash a manifest records
//! is the one computed here from the source bytes, and `verify` agrees.
//! Each test ingests through the real binary into a real store and index.

use crate::common;

use std::path::Path;

use common::gc::{env_with_pause, listed_commits, manifest_of, paused, resume, REPO};
use common::*;
use serde_json::Value;

/// Every file of `commit` has the Xet hash of the bytes of the same file in `dir`, and
/// `verify` (which computes it again from the store) passes.
fn hashes_are_the_bytes(env: &Env, commit: &str, dir: &Path) {
    let m = manifest_of(env, commit);
    assert_eq!(m.xet_hashes.len(), m.files.len(), "one Xet hash per file");
    for (f, x) in m.files.iter().zip(&m.xet_hashes) {
        let bytes = std::fs::read(dir.join(&f.path)).unwrap();
        assert_eq!(*x, xethash::file_hash(&bytes), "{commit}: {}", f.path);
    }
    env.verifies(&format!("{REPO}@{commit}"));
}

fn ingest(env: &Env, dir: &Path, commit: &str) -> Value {
    env.ingest_json(dir, &["--repo", REPO, "--revision", commit])
}

/// Bytes of the files of revision `r` of at least 1 MiB whose content revision `before`
/// has too: those a follow takes the recorded Xet hash for.
fn big_bytes_seen_in(r: &str, before: &str) -> u64 {
    let s = series();
    let seen: Vec<String> = s.files(before).into_iter().map(|(_, h)| h).collect();
    s.revision(r)["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["size"].as_u64().unwrap() >= 1 << 20)
        .filter(|f| seen.iter().any(|h| h == f["sha256"].as_str().unwrap()))
        .map(|f| f["size"].as_u64().unwrap())
        .sum()
}

/// A copy of revision `r` of the series in a fresh directory, its largest file changed at
/// `at` (a fraction of its length) by one byte: the same size, and the same first chunk
/// when `at` is past it. Returns the directory and the changed file's name.
fn changed_copy(env: &Env, r: &str, at: f64) -> (std::path::PathBuf, String) {
    let dir = env.path(&format!("copy-{r}-{at}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut largest = (0, String::new());
    for e in std::fs::read_dir(series().plain(r)).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        std::fs::copy(e.path(), dir.join(&name)).unwrap();
        largest = largest.max((e.metadata().unwrap().len(), name));
    }
    let path = dir.join(&largest.1);
    let mut bytes = std::fs::read(&path).unwrap();
    let i = (bytes.len() as f64 * at) as usize;
    bytes[i] ^= 0x5a;
    std::fs::write(&path, bytes).unwrap();
    (dir, largest.1)
}

#[test]
fn the_series_takes_recorded_hashes_for_what_it_hashed_before_and_records_true_ones() {
    let env = Env::new();
    let s = series();
    let mut reused = Vec::new();
    for r in ["r1", "r2", "r3", "r4"] {
        let report = ingest(&env, &s.plain(r), &s.commit(r));
        reused.push(report["xet_bytes_reused"].as_u64().unwrap());
        hashes_are_the_bytes(&env, &s.commit(r), &s.plain(r));
    }
    assert_eq!(reused[0], 0, "nothing was hashed before r1");
    assert_eq!(reused[3], big_bytes_seen_in("r4", "r3"));
    assert!(reused[3] > 0, "r4 repeats r3's shards");
    assert_eq!(reused[1], big_bytes_seen_in("r2", "r1"));
}

#[test]
fn a_file_that_parts_from_the_one_read_before_is_read_back_and_hashed() {
    let env = Env::new();
    let s = series();
    ingest(&env, &s.plain("r1"), &s.commit("r1"));
    // Changed past its first chunk: followed, then read back up to the change.
    let (dir, _) = changed_copy(&env, "r1", 0.9);
    let commit = "1111111111111111111111111111111111111111";
    let report = ingest(&env, &dir, commit);
    assert!(
        report["xet_bytes_reread"].as_u64().unwrap() > 0,
        "the changed shard was followed, then read back: {report}"
    );
    assert_eq!(
        report["xet_bytes_reused"].as_u64().unwrap() + largest_of(&dir),
        big_bytes_seen_in("r1", "r1"),
        "every other shard took its recorded hash"
    );
    hashes_are_the_bytes(&env, commit, &dir);
    // Changed in its first byte: hashed as it is read, nothing read back.
    let (dir, _) = changed_copy(&env, "r1", 0.0);
    let commit = "2222222222222222222222222222222222222222";
    let report = ingest(&env, &dir, commit);
    assert_eq!(report["xet_bytes_reread"], 0, "{report}");
    hashes_are_the_bytes(&env, commit, &dir);
}

/// The size of the largest file in `dir`.
fn largest_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .max()
        .unwrap()
}

#[test]
fn a_file_written_to_before_it_is_read_back_fails_the_ingest_and_stores_nothing() {
    let (env, pause) = env_with_pause();
    let s = series();
    ingest(&env, &s.plain("r1"), &s.commit("r1"));
    let (dir, name) = changed_copy(&env, "r1", 0.9);
    let commit = "3333333333333333333333333333333333333333";
    let point = "ingest-before-xet-read-back";
    let args = [
        "ingest",
        dir.to_str().unwrap(),
        "--repo",
        REPO,
        "--revision",
        commit,
    ];
    let child = paused(&env, &args, point, &pause);
    // The reader has read the file past its change; its first bytes change now.
    let path = dir.join(&name);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let out = resume(child, point, &pause);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ingest succeeded over a file rewritten under it"
    );
    assert!(
        err.contains(&name) && err.contains("changed while it was read"),
        "{err}"
    );
    assert_eq!(
        listed_commits(&env),
        vec![s.commit("r1")],
        "nothing new is listed"
    );
    // Once the file stands still, the same ingest records its true hashes.
    ingest(&env, &dir, commit);
    hashes_are_the_bytes(&env, commit, &dir);
}

#[test]
fn reread_hashes_every_byte() {
    let env = Env::new();
    let s = series();
    ingest(&env, &s.plain("r3"), &s.commit("r3"));
    let report = env.ingest_json(
        &s.plain("r4"),
        &["--repo", REPO, "--revision", &s.commit("r4"), "--reread"],
    );
    assert_eq!(report["xet_bytes_reused"], 0, "{report}");
    hashes_are_the_bytes(&env, &s.commit("r4"), &s.plain("r4"));
}

#[test]
fn hub_cache_blobs_known_by_name_take_their_recorded_hash() {
    let env = Env::new();
    let s = series();
    ingest(&env, &s.plain("r3"), &s.commit("r3"));
    // The cache names its blobs by sha256: r3's shards are known before they are read.
    let report = env.ingest_json(&s.cache_repo(), &[]);
    assert!(report["xet_bytes_reused"].as_u64().unwrap() >= big_bytes_seen_in("r4", "r3"));
    for r in ["r1", "r2", "r3", "r4"] {
        hashes_are_the_bytes(&env, &s.commit(r), &s.plain(r));
    }
}
