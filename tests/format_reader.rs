//! docs/FORMAT.md is enough to read a store: `tests/format_reader.py`, a reader written
//! from the document alone (Python standard library and the `zstandard` package, no Rust,
//! no bincode library), lists repositories, commits and refs and reads every file of every
//! revision byte for byte as `modelcas` does: on the generated series, on a store whose
//! frames use all three codecs, and after gc rewrote packs and deleted the old ones (so it
//! must follow the forwarding records).
//!
//! The reader reads the local directory store only, so every test here builds its own
//! store in a local directory, whatever `MODELCAS_TEST_BACKEND` says: in `.ci/run`'s S3
//! phase these tests run again on a local store (they are about the bytes, which are the
//! same on both backends), not skipped.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{ingest_series, series, Env};
use format::{CommitId, RepoId};
use rand::{Rng, SeedableRng};
use repo::Store;
use sha2::{Digest, Sha256};

const REPO: &str = "demo-org/demo-llm";

/// A scratch environment whose store is a local directory even when the suite runs on
/// S3, created like [`Env::new`]'s (16 KiB average chunks, 1 MiB packs).
fn local_env() -> Env {
    let tmp = tempfile::Builder::new()
        .prefix("modelcas-test-fr-")
        .tempdir()
        .unwrap();
    let location = tmp.path().join("store").to_str().unwrap().to_string();
    let env = Env {
        tmp,
        s3: None,
        location,
        read_only: false,
    };
    env.ok(&["init", "--chunk-avg", "16384", "--pack-size", "1048576"]);
    env
}

/// Runs `format_reader.py STORE ARGS...`, asserting success; returns stdout.
fn reader(env: &Env, args: &[&str]) -> Vec<u8> {
    let script = common::repo_root().join("tests/format_reader.py");
    let out = common::python()
        .arg(&script)
        .arg(&env.location)
        .args(args)
        .output()
        .expect("run the Python interpreter (MODELCAS_PYTHON)");
    assert!(
        out.status.success(),
        "format_reader.py {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn reader_lines(env: &Env, args: &[&str]) -> Vec<String> {
    String::from_utf8(reader(env, args))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// `modelcas cat REPO@REV PATH`.
fn modelcas_cat(env: &Env, repo: &str, rev: &str, path: &str) -> Vec<u8> {
    let out = env
        .cmd()
        .args(["cat", &format!("{repo}@{rev}"), path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "modelcas cat {repo}@{rev} {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The reader's `repos`, `commits` and `refs` agree with `modelcas ls --json`.
fn listings_agree(env: &Env) {
    let all = env.json(&["ls", "--json"]);
    let repos: Vec<String> = all["repos"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["repo"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reader_lines(env, &["repos"]), repos);
    for repo in &repos {
        let ls = env.json(&["ls", repo, "--json"]);
        let mut commits: Vec<String> = ls["commits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["commit"].as_str().unwrap().to_string())
            .collect();
        commits.sort();
        assert_eq!(reader_lines(env, &["commits", repo]), commits, "{repo}");
        let refs: Vec<String> = ls["refs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(name, c)| format!("{name} {}", c.as_str().unwrap()))
            .collect();
        assert_eq!(reader_lines(env, &["refs", repo]), refs, "{repo}");
    }
}

/// The reader's `files` of REPO@REV as (path, sha256), sorted, checking that each line's
/// size matches `modelcas ls REPO@REV --json`.
fn reader_files(env: &Env, repo: &str, rev: &str) -> Vec<(String, String)> {
    let listed = env.json(&["ls", &format!("{repo}@{rev}"), "--json"]);
    let want: BTreeMap<String, (String, u64)> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (
                    f["sha256"].as_str().unwrap().to_string(),
                    f["size"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let mut got = BTreeMap::new();
    for line in reader_lines(env, &["files", repo, rev]) {
        let mut parts = line.splitn(3, ' ');
        let (sha, size, path) = (
            parts.next().unwrap().to_string(),
            parts.next().unwrap().parse::<u64>().unwrap(),
            parts.next().unwrap().to_string(),
        );
        got.insert(path, (sha, size));
    }
    assert_eq!(got, want, "files of {repo}@{rev}");
    got.into_iter().map(|(p, (sha, _))| (p, sha)).collect()
}

/// Every file of REPO@REV read by the reader (with `extra` options) is byte for byte what
/// `modelcas cat` gives, and hashes to `want`.
fn cats_agree(env: &Env, repo: &str, rev: &str, want: &[(String, String)], extra: &[&str]) {
    for (path, sha) in want {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["cat", repo, rev, path]);
        let ours = reader(env, &args);
        assert_eq!(
            &sha256_hex(&ours),
            sha,
            "format_reader.py cat {repo}@{rev} {path}"
        );
        let theirs = modelcas_cat(env, repo, rev, path);
        assert!(
            ours == theirs,
            "{repo}@{rev} {path}: the reader and modelcas differ"
        );
    }
}

#[test]
fn reads_every_revision_of_the_series_as_modelcas_does() {
    let s = series();
    let env = local_env();
    ingest_series(&env);
    listings_agree(&env);
    assert_eq!(reader_lines(&env, &["repos"]), vec![REPO.to_string()]);
    let mut commits: Vec<String> = ["r1", "r2", "r3", "r4"]
        .iter()
        .map(|r| s.commit(r))
        .collect();
    commits.sort();
    assert_eq!(reader_lines(&env, &["commits", REPO]), commits);
    for r in ["r1", "r2", "r3", "r4"] {
        // by ref name and by full commit
        for rev in [r.to_string(), s.commit(r)] {
            assert_eq!(reader_files(&env, REPO, &rev), s.files(r), "{r} via {rev}");
        }
        cats_agree(&env, REPO, r, &s.files(r), &[]);
        let by_commit: Vec<_> = s.files(r).into_iter().take(3).collect();
        cats_agree(&env, REPO, &s.commit(r), &by_commit, &[]);
    }
}

/// bf16-like bytes: N(0, 0.02)-ish floats, upper half of each f32, little endian.
fn bf16_like(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let x: f32 = (rng.gen::<f32>() - 0.5) * 0.04;
        out.extend_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// The codec byte of every frame the manifest of REPO@COMMIT references, read straight
/// from the pack files.
fn codecs_used(env: &Env, repo: &str, commit: &str) -> BTreeSet<u8> {
    let store = Store::open(env.backend()).unwrap();
    let m = store
        .manifest(
            &RepoId::parse(repo).unwrap(),
            &CommitId::parse(commit).unwrap(),
        )
        .unwrap();
    let mut codecs = BTreeSet::new();
    for f in &m.files {
        for c in &f.chunks {
            let key = format::layout::pack_key(&m.packs[c.pack as usize]);
            let bytes = std::fs::read(Path::new(&env.location).join(&key)).unwrap();
            codecs.insert(bytes[c.offset as usize]);
        }
    }
    codecs
}

#[test]
fn reads_frames_of_all_three_codecs_and_checks_chunk_ids() {
    let env = local_env();
    let repo = "fr-org/codecs";
    let commit = "c0dec5c0dec5c0dec5c0dec5c0dec5c0dec5c0de";
    let dir: PathBuf = env.path("src");
    std::fs::create_dir_all(dir.join("sub/dir")).unwrap();
    let text: Vec<u8> = (0..2000)
        .flat_map(|i| format!("{{\"token\": \"tok{i}\", \"id\": {i}}},\n").into_bytes())
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let noise: Vec<u8> = (0..40_000).map(|_| rng.gen()).collect();
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("tokenizer.json", text),                     // zstd
        ("noise.bin", noise),                         // raw: incompressible
        ("model.safetensors", bf16_like(100_000, 3)), // bg2
        ("sub/dir/tiny.txt", b"hi\n".to_vec()),       // raw: too short to compress
        ("empty", Vec::new()),                        // no chunks
    ];
    for (path, bytes) in &files {
        std::fs::write(dir.join(path), bytes).unwrap();
    }
    env.ingest(
        &dir,
        &[
            "--repo",
            repo,
            "--revision",
            commit,
            "--ref",
            "main",
            "--ref",
            "refs/pr/1",
        ],
    );
    assert_eq!(
        codecs_used(&env, repo, commit),
        BTreeSet::from([0, 1, 2]),
        "the store does not use raw, zstd and bg2 frames: the test proves less than it says"
    );
    listings_agree(&env);
    assert_eq!(
        reader_lines(&env, &["refs", repo]),
        vec![format!("main {commit}"), format!("refs/pr/1 {commit}")]
    );
    let want: Vec<(String, String)> = {
        let mut v: Vec<_> = files
            .iter()
            .map(|(p, b)| (p.to_string(), sha256_hex(b)))
            .collect();
        v.sort();
        v
    };
    assert_eq!(reader_files(&env, repo, "refs/pr/1"), want);
    // Every chunk id checked too, with the reader's own BLAKE3 (pure Python) unless the
    // `blake3` package is installed.
    cats_agree(&env, repo, "main", &want, &["--blake3-chunks"]);
    cats_agree(&env, repo, commit, &want, &[]);
    for (path, bytes) in &files {
        assert!(
            reader(&env, &["cat", repo, "refs/pr/1", path]) == *bytes,
            "{path} differs from its source"
        );
    }
}

/// gc with a short grace period, as JSON.
fn gc(env: &Env, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["gc", "--json", "--grace", "0s"];
    args.extend_from_slice(extra);
    env.json(&args)
}

#[test]
fn follows_forwarding_records_after_gc_deleted_the_packs_a_manifest_names() {
    let s = series();
    let env = local_env();
    ingest_series(&env);
    for r in ["r1", "r2", "r3"] {
        env.ok(&["rm", &format!("{REPO}@{r}")]);
    }
    let first = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert!(first["forwards_written"].as_u64().unwrap() > 0, "{first:#}");
    let second = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    assert!(second["packs_deleted"].as_u64().unwrap() > 0, "{second:#}");
    let x = s.commit("r4");
    let store = Store::open(env.backend()).unwrap();
    let m = store
        .manifest(&RepoId::parse(REPO).unwrap(), &CommitId::parse(&x).unwrap())
        .unwrap();
    let gone = m
        .packs
        .iter()
        .filter(|p| {
            !Path::new(&env.location)
                .join(format::layout::pack_key(p))
                .exists()
        })
        .count();
    assert!(
        gone > 0,
        "no pack of r4's manifest was deleted: the test proves nothing"
    );
    assert!(
        !env.backend().list("moved/").unwrap().is_empty(),
        "no forwarding record"
    );
    listings_agree(&env);
    assert_eq!(reader_lines(&env, &["commits", REPO]), vec![x.clone()]);
    assert_eq!(reader_files(&env, REPO, "r4"), s.files("r4"));
    cats_agree(&env, REPO, "r4", &s.files("r4"), &[]);
    cats_agree(&env, REPO, &x, &s.files("r4"), &[]);
}

#[test]
fn honours_the_feature_list() {
    let env = local_env();
    ingest_series(&env);
    let put = |to_read: &[&str], to_write: &[&str]| {
        let f = format::features::Features {
            to_read: to_read.iter().map(|s| s.to_string()).collect(),
            to_write: to_write.iter().map(|s| s.to_string()).collect(),
        };
        std::fs::write(
            Path::new(&env.location).join("features"),
            format::features::encode(&f),
        )
        .unwrap();
    };
    // Needed only to write: a reader reads on.
    put(&[], &["gc-v2"]);
    assert_eq!(reader_lines(&env, &["repos"]), vec![REPO.to_string()]);
    // Needed to read: the reader refuses, naming the feature.
    put(&["sparse-packs"], &[]);
    let out = common::python()
        .arg(common::repo_root().join("tests/format_reader.py"))
        .arg(&env.location)
        .arg("repos")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("sparse-packs"),
        "{err}"
    );
}
