//! The format specification (docs/FORMAT.md and docs/format/) is enough to read a store:
//! `tests/format_reader.py`, a reader written from the document alone (Python standard
//! library and the `zstandard` package, no Rust, no bincode library), lists repositories,
//! commits and refs and reads every file of every revision byte for byte as `modelcas`
//! does: on the generated series, on a store whose frames use all three codecs, and after
//! gc rewrote packs and deleted the old ones (so it must follow the forwarding records).
//! It also decodes pack footers, pins, last-use records, locks and leases, the condemned
//! list, and release records (check records, with the verdict it derives itself from the
//! files digest of the stored manifest, and labels), and every decoded field is compared
//! with what `modelcas` reports.
//!
//! The reader reads the local directory store only, so every test here builds its own
//! store in a local directory, whatever `MODELCAS_TEST_BACKEND` says: in `.ci/run`'s S3
//! phase these tests run again on a local store (they are about the bytes, which are the
//! same on both backends), not skipped.

use crate::common;

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

// --- Pack footers, pins, last-use records, locks and the condemned list -----------------
//
// The reader decodes each from docs/format/bytes.md alone; these tests make real ones with
// the binary and compare every decoded field with what the binary reports of them (`stats`,
// `gc --json`, `fsck --json`, `ls --json`, `pin`'s output) or with what the test itself
// knows (the pids it spawned, the files' sizes, the clock around each command).

/// Milliseconds since the Unix epoch by this machine's clock: the local store's clock.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The local store's own clock stamps mtimes with the kernel's coarse clock, which may lag
/// the fine one by a tick: the slack allowed below a window's start.
const TICK_MS: u64 = 20;

/// A local store with 16 KiB average chunks and 64 KiB packs, so that a few hundred KiB
/// span several packs.
fn small_pack_env() -> Env {
    let env = local_env();
    std::fs::remove_dir_all(&env.location).unwrap();
    env.ok(&["init", "--chunk-avg", "16384", "--pack-size", "65536"]);
    env
}

/// Random bytes (incompressible: raw frames), reproducible.
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

/// Ingests `files` as REPO@COMMIT with the ref `name`, one thread (packs in file order).
fn ingest_files(env: &Env, repo: &str, commit: &str, name: &str, files: &[(&str, Vec<u8>)]) {
    let dir = env.path(&format!("src-{commit}"));
    for (path, bytes) in files {
        std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
        std::fs::write(dir.join(path), bytes).unwrap();
    }
    env.ingest(
        &dir,
        &[
            "--threads",
            "1",
            "--repo",
            repo,
            "--revision",
            commit,
            "--ref",
            name,
        ],
    );
}

/// The reader's `packs`: pack id → (size, footer entries).
fn reader_packs(env: &Env) -> BTreeMap<String, (u64, u64)> {
    reader_lines(env, &["packs"])
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "{l}");
            (
                f[0].to_string(),
                (f[1].parse().unwrap(), f[2].parse().unwrap()),
            )
        })
        .collect()
}

/// One line of the reader's `condemned`.
#[derive(Debug)]
struct CondemnedLine {
    pack: String,
    marked_ms: u64,
    size: u64,
    chunks: u64,
    live_chunks: u64,
}

#[test]
fn decodes_pack_footers_and_the_condemned_list_as_modelcas_reports_them() {
    let env = small_pack_env();
    let repo = "fr-org/packs";
    let (a, b) = (
        "a000000000000000000000000000000000000001",
        "b000000000000000000000000000000000000002",
    );
    let shared = noise(150_000, 1);
    ingest_files(
        &env,
        repo,
        a,
        "old",
        &[
            ("a1.bin", noise(150_000, 2)),
            ("shared.bin", shared.clone()),
        ],
    );
    ingest_files(
        &env,
        repo,
        b,
        "main",
        &[("b1.bin", noise(150_000, 3)), ("shared.bin", shared)],
    );

    // Footers: what the binary's figures (from the manifests and the pack listing) say.
    let packs = reader_packs(&env);
    let stats = env.json(&["stats", "--json"]);
    assert!(packs.len() >= 4, "{packs:?}: too few packs to prove much");
    assert_eq!(packs.len() as u64, stats["packs"].as_u64().unwrap());
    let sizes: u64 = packs.values().map(|p| p.0).sum();
    assert_eq!(sizes, stats["stored_bytes"].as_u64().unwrap());
    for (id, (size, _)) in &packs {
        let path = Path::new(&env.location).join(format!("packs/{}/{id}", &id[..2]));
        assert_eq!(std::fs::metadata(path).unwrap().len(), *size, "{id}");
    }
    // Each chunk is stored once (the second ingest deduplicated the shared file), and every
    // stored chunk is referenced: the footers list exactly the distinct chunks.
    let (mut chunks, mut raw, mut framed) = (BTreeSet::new(), 0u64, 0u64);
    for (id, (_, entries)) in &packs {
        let lines = reader_lines(&env, &["--blake3-chunks", "footer", id]);
        assert_eq!(lines.len() as u64, *entries, "{id}");
        for l in lines {
            let f: Vec<&str> = l.split(' ').collect();
            assert!(chunks.insert(f[0].to_string()), "chunk {} twice", f[0]);
            framed += f[2].parse::<u64>().unwrap();
            raw += f[3].parse::<u64>().unwrap();
        }
    }
    assert_eq!(
        chunks.len() as u64,
        stats["unique_chunks"].as_u64().unwrap()
    );
    assert_eq!(raw, stats["unique_bytes"].as_u64().unwrap());
    assert_eq!(framed, stats["compressed_bytes"].as_u64().unwrap());
    assert!(
        reader_lines(&env, &["condemned"]).is_empty(),
        "no gc ran: no list"
    );

    // The condemned list: the packs only `a` used are condemned, the ones it shared with
    // `b` rewritten (their live frames copied) and condemned too.
    env.ok(&["rm", &format!("{repo}@{a}"), "--force"]);
    let t0 = now_ms();
    let report = gc(&env, &["--keep-last", "0", "--rewrite-below", "1"]);
    let t1 = now_ms();
    let n = |k: &str| report[k].as_u64().unwrap();
    assert!(
        n("packs_condemned") > 0 && n("packs_rewritten") > 0,
        "the test needs both kinds of condemned pack: {report:#}"
    );
    let lines = reader_lines(&env, &["condemned"]);
    let written_ms: u64 = lines[0]
        .strip_prefix("written_ms ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (t0 - TICK_MS..=t1).contains(&written_ms),
        "{written_ms} not in {t0}..{t1}"
    );
    let list: Vec<CondemnedLine> = lines[1..]
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let u = |i: usize| f[i].parse::<u64>().unwrap();
            CondemnedLine {
                pack: f[0].to_string(),
                marked_ms: u(1),
                size: u(2),
                chunks: u(3),
                live_chunks: u(4),
            }
        })
        .collect();
    let (dead, rewritten): (Vec<&CondemnedLine>, Vec<&CondemnedLine>) =
        list.iter().partition(|c| c.live_chunks == 0);
    assert_eq!(dead.len() as u64, n("packs_condemned"), "{list:?}");
    assert_eq!(rewritten.len() as u64, n("packs_rewritten"), "{list:?}");
    assert_eq!(
        dead.iter().map(|c| c.size).sum::<u64>(),
        n("bytes_condemned")
    );
    assert_eq!(
        rewritten.iter().map(|c| c.size).sum::<u64>(),
        n("bytes_rewritten")
    );
    assert_eq!(
        rewritten.iter().map(|c| c.live_chunks).sum::<u64>(),
        n("chunks_copied")
    );
    for c in &list {
        let (size, entries) = packs[&c.pack];
        assert_eq!(c.size, size, "{c:?}: size");
        // Every pack counts its footer's entries; a rewritten one also its live frames
        // (docs/format/bytes.md, "Condemned list").
        assert_eq!(c.chunks, entries, "{c:?}: the footer's entries");
        assert!(c.live_chunks < entries, "{c:?}: all {entries} frames live");
        assert!(
            (t0 - TICK_MS..=t1).contains(&c.marked_ms),
            "{c:?} not in {t0}..{t1}"
        );
    }
    let fsck = env.json(&["fsck", "--json"]);
    assert_eq!(fsck["condemned_packs"].as_u64().unwrap(), list.len() as u64);
    // The rewrite's new packs have footers the reader reads too.
    assert_eq!(
        reader_packs(&env).len() as u64,
        env.json(&["stats", "--json"])["packs"].as_u64().unwrap()
    );
}

#[test]
fn decodes_pins_and_last_use_records_as_modelcas_reports_them() {
    let env = small_pack_env();
    let repo = "fr-org/pins";
    let (a, b, c) = (
        "a000000000000000000000000000000000000001",
        "b000000000000000000000000000000000000002",
        "c000000000000000000000000000000000000003",
    );
    for (commit, seed) in [(a, 1), (b, 2), (c, 3)] {
        ingest_files(
            &env,
            repo,
            commit,
            "main",
            &[("f.bin", noise(20_000, seed))],
        );
    }
    let secs = || now_ms() / 1000;

    // Pins: the commit `pin` reports, pinned at a second within the command.
    let t0 = secs();
    let out = env.ok(&["pin", &format!("{repo}@{b}")]);
    let t1 = secs();
    assert_eq!(out.trim(), format!("pinned {repo}@{b}"));
    let pins = reader_lines(&env, &["pins", repo]);
    assert_eq!(pins.len(), 1, "{pins:?}");
    let (commit, at) = pins[0].split_once(' ').unwrap();
    assert_eq!(commit, b);
    assert!(
        (t0..=t1).contains(&at.parse().unwrap()),
        "{at} not in {t0}..{t1}"
    );
    env.ok(&["pin", &format!("{repo}@{a}")]);
    env.ok(&["unpin", &format!("{repo}@{b}")]);
    let pins = reader_lines(&env, &["pins", repo]);
    assert_eq!(pins.len(), 1, "{pins:?}");
    assert!(pins[0].starts_with(&format!("{a} ")), "{pins:?}");
    assert_eq!(env.json(&["fsck", "--json"])["pins"], 1);

    // Last-use records: one per commit read, naming the command; what counts (and what
    // `ls` reports as last used) is the object's modification time.
    assert!(reader_lines(&env, &["used", repo]).is_empty());
    let t0 = now_ms();
    modelcas_cat(&env, repo, a, "f.bin");
    let out = env.path("checkout");
    env.ok(&["checkout", &format!("{repo}@{b}"), out.to_str().unwrap()]);
    let t1 = now_ms();
    let used: BTreeMap<String, (u64, u64, String)> = reader_lines(&env, &["used", repo])
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, ' ').collect();
            let u = |i: usize| f[i].parse::<u64>().unwrap();
            (f[0].to_string(), (u(1), u(2), f[3].to_string()))
        })
        .collect();
    let want: Vec<(&str, &str)> = vec![(a, "cat"), (b, "checkout")];
    assert_eq!(
        used.iter()
            .map(|(c, u)| (c.as_str(), u.2.as_str()))
            .collect::<Vec<_>>(),
        want
    );
    let ls = env.json(&["ls", repo, "--json"]);
    for row in ls["commits"].as_array().unwrap() {
        let commit = row["commit"].as_str().unwrap();
        match used.get(commit) {
            Some((used_at, mtime_ms, _)) => {
                assert!(
                    (t0 / 1000..=t1 / 1000).contains(used_at),
                    "{commit}: {used_at}"
                );
                assert!(
                    (t0 - TICK_MS..=t1).contains(mtime_ms),
                    "{commit}: {mtime_ms}"
                );
                assert_eq!(row["last_used"], mtime_ms / 1000, "{commit}");
            }
            None => assert!(row["last_used"].is_null(), "{commit}: {row}"),
        }
    }
    assert_eq!(ls["commits"].as_array().unwrap().len(), 3);
}

/// What a lock's `host` is for a process of this machine and pid namespace.
fn this_host() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    format!("{} {}", host.trim(), ns.display())
}

/// One line of the reader's `locks`.
#[derive(Debug, PartialEq)]
struct LockLine {
    key: String,
    kind: String,
    pid: u32,
    started_ms: u64,
    refreshed_ms: u64,
    ttl_ms: u64,
    mtime_ms: u64,
    state: String,
    host: String,
}

fn reader_locks(env: &Env) -> Vec<LockLine> {
    reader_lines(env, &["locks"])
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.splitn(9, ' ').collect();
            let u = |i: usize| f[i].parse::<u64>().unwrap();
            LockLine {
                key: f[0].into(),
                kind: f[1].into(),
                pid: f[2].parse().unwrap(),
                started_ms: u(3),
                refreshed_ms: u(4),
                ttl_ms: u(5),
                mtime_ms: u(6),
                state: f[7].into(),
                host: f[8].into(),
            }
        })
        .collect()
}

/// `fsck`'s notes on locks: key → (state, kind, host, pid).
fn fsck_locks(env: &Env) -> BTreeMap<String, (String, String, String, u32)> {
    let fsck = env.json(&["fsck", "--json"]);
    let mut out = BTreeMap::new();
    for note in fsck["notes"].as_array().unwrap() {
        let note = note.as_str().unwrap();
        let Some((key, rest)) = note
            .split_once(": ")
            .filter(|(k, _)| k.starts_with("locks/"))
        else {
            continue;
        };
        // "held, gc by HOST pid PID, started N s ago, refreshed N s ago"
        let (state, rest) = rest.split_once(", ").unwrap();
        let (kind, rest) = rest.split_once(" by ").unwrap();
        let (holder, _) = rest.split_once(", started").unwrap();
        let (host, pid) = holder.rsplit_once(" pid ").unwrap();
        out.insert(
            key.to_string(),
            (state.into(), kind.into(), host.into(), pid.parse().unwrap()),
        );
    }
    out
}

#[test]
fn decodes_locks_and_leases_as_modelcas_reports_them() {
    let env = small_pack_env();
    let repo = "fr-org/locks";
    let (a, b) = (
        "a000000000000000000000000000000000000001",
        "b000000000000000000000000000000000000002",
    );
    ingest_files(&env, repo, a, "main", &[("f.bin", noise(20_000, 1))]);
    let src = env.path("src-b");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f.bin"), noise(20_000, 2)).unwrap();
    let pause = env.path("pause");

    // One holder of each kind, each stopped while it holds its object.
    let t0 = now_ms();
    let mut gc_cmd = env.cmd();
    gc_cmd.args(["gc", "--grace", "0s"]);
    let gc_child = common::spawn_paused(&mut gc_cmd, "gc-after-listing", &pause);
    let mut ingest_cmd = env.cmd();
    ingest_cmd
        .arg("ingest")
        .arg(&src)
        .args(["--repo", repo, "--revision", b]);
    let ingest_child = common::spawn_paused(&mut ingest_cmd, "ingest-before-manifests", &pause);
    let mut pin_cmd = env.cmd();
    pin_cmd.args(["pin", &format!("{repo}@{a}")]);
    let pin_child = common::spawn_paused(&mut pin_cmd, "pin-after-check", &pause);
    let t1 = now_ms();

    let locks = reader_locks(&env);
    let host = this_host();
    let want = [
        ("gc", gc_child.id(), 600_000),
        ("ingest", ingest_child.id(), 600_000),
        ("write", pin_child.id(), 60_000),
    ];
    assert_eq!(locks.len(), 3, "{locks:#?}");
    for (l, (kind, pid, ttl_ms)) in locks.iter().zip(want) {
        assert!(l.key.starts_with(&format!("locks/{kind}-")), "{l:?}");
        let id = &l.key[format!("locks/{kind}-").len()..];
        assert!(
            id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{l:?}"
        );
        assert_eq!(
            (l.kind.as_str(), l.pid, l.ttl_ms),
            (kind, pid, ttl_ms),
            "{l:?}"
        );
        assert_eq!((l.host.as_str(), l.state.as_str()), (host.as_str(), "held"));
        // Not refreshed yet: `started_ms` is still 0, the object's mtime is the start.
        assert_eq!(l.started_ms, 0, "{l:?}");
        assert!(
            (t0 - TICK_MS..=t1).contains(&l.mtime_ms),
            "{l:?}: {t0}..{t1}"
        );
        assert!((t0..=t1).contains(&l.refreshed_ms), "{l:?}: {t0}..{t1}");
    }
    let reported = fsck_locks(&env);
    let decoded: BTreeMap<String, (String, String, String, u32)> = locks
        .iter()
        .map(|l| {
            let v = (l.state.clone(), l.kind.clone(), l.host.clone(), l.pid);
            (l.key.clone(), v)
        })
        .collect();
    assert_eq!(decoded, reported);

    for (point, child) in [
        ("pin-after-check", pin_child),
        ("ingest-before-manifests", ingest_child),
        ("gc-after-listing", gc_child),
    ] {
        common::go_on(&pause, point);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        reader_locks(&env),
        vec![],
        "every holder released its object"
    );

    // A holder killed: its lease stays behind, stale (same host, its process gone).
    let mut ingest_cmd = env.cmd();
    ingest_cmd
        .arg("ingest")
        .arg(&src)
        .args(["--repo", repo, "--revision", b]);
    let mut killed = common::spawn_paused(&mut ingest_cmd, "ingest-after-lease", &pause);
    let pid = killed.id();
    killed.kill().unwrap();
    killed.wait().unwrap();
    let locks = reader_locks(&env);
    assert_eq!(locks.len(), 1, "{locks:#?}");
    assert_eq!(
        (
            locks[0].kind.as_str(),
            locks[0].pid,
            locks[0].state.as_str()
        ),
        ("ingest", pid, "stale")
    );
    let reported = fsck_locks(&env);
    assert_eq!(
        reported[&locks[0].key],
        ("stale".to_string(), "ingest".to_string(), host, pid)
    );
    assert_eq!(gc(&env, &[])["stale_locks_removed"], 1);
    assert_eq!(reader_locks(&env), vec![]);
}

/// Runs `format_reader.py STORE ARGS...`, asserting that it fails with status 1 and an
/// error naming `names`; returns the error.
fn reader_refuses(env: &Env, args: &[&str], names: &str) -> String {
    let out = common::python()
        .arg(common::repo_root().join("tests/format_reader.py"))
        .arg(&env.location)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(names), "{args:?}: {err} does not name {names}");
    err
}

#[test]
fn refuses_damaged_footers_pins_records_locks_and_condemned_lists() {
    let env = small_pack_env();
    let repo = "fr-org/damage";
    let (a, b) = (
        "a000000000000000000000000000000000000001",
        "b000000000000000000000000000000000000002",
    );
    ingest_files(&env, repo, a, "old", &[("f.bin", noise(100_000, 1))]);
    ingest_files(&env, repo, b, "main", &[("f.bin", noise(100_000, 2))]);
    env.ok(&["pin", &format!("{repo}@{b}")]);
    modelcas_cat(&env, repo, b, "f.bin");
    env.ok(&["rm", &format!("{repo}@{a}"), "--force"]);
    gc(&env, &["--keep-last", "0"]);
    let root = Path::new(&env.location);
    let damage = |key: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let path = root.join(key);
        let mut bytes = std::fs::read(&path).unwrap();
        let good = bytes.clone();
        f(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        move || std::fs::write(&path, &good).unwrap()
    };
    let flip_at = |at: usize| move |b: &mut Vec<u8>| b[at] ^= 0x01;

    // Every object decodes while intact.
    let pack = reader_lines(&env, &["packs"])[0]
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let pack_key = format!("packs/{}/{pack}", &pack[..2]);
    for args in [
        &["pins", repo][..],
        &["used", repo],
        &["condemned"],
        &["footer", &pack],
    ] {
        assert!(!reader_lines(&env, args).is_empty(), "{args:?}");
    }

    // A pack: its trailer's footer length past the start, its end magic, its footer's
    // checksum, a footer entry moved off its frame.
    let size = std::fs::metadata(root.join(&pack_key)).unwrap().len() as usize;
    let undo = damage(&pack_key, &|b| {
        b[size - 12..size - 8].copy_from_slice(&u32::MAX.to_le_bytes())
    });
    reader_refuses(&env, &["packs"], &pack_key);
    undo();
    let undo = damage(&pack_key, &flip_at(size - 1));
    reader_refuses(&env, &["footer", &pack], "no end magic");
    undo();
    let footer_len = {
        let b = std::fs::read(root.join(&pack_key)).unwrap();
        u32::from_le_bytes(b[size - 12..size - 8].try_into().unwrap()) as usize
    };
    let undo = damage(&pack_key, &flip_at(size - 12 - footer_len + 20));
    reader_refuses(&env, &["packs"], "checksum mismatch");
    undo();
    // The pack header's version.
    let undo = damage(&pack_key, &flip_at(8));
    reader_refuses(&env, &["footer", &pack], "pack version");
    undo();
    assert!(!reader_lines(&env, &["footer", &pack]).is_empty());

    // One flipped byte in the payload of a pin, a last-use record, the condemned list.
    for (key, args) in [
        (format!("repos/{repo}/pins/{b}"), vec!["pins", repo]),
        (format!("repos/{repo}/used/{b}"), vec!["used", repo]),
        ("gc/condemned".to_string(), vec!["condemned"]),
    ] {
        let undo = damage(&key, &flip_at(13));
        reader_refuses(&env, &args, &key);
        undo();
        assert!(!reader_lines(&env, &args).is_empty(), "{key} restored");
    }
    // A pin stored under another commit's key: it describes another commit.
    let other = format!("repos/{repo}/pins/{a}");
    std::fs::copy(
        root.join(format!("repos/{repo}/pins/{b}")),
        root.join(&other),
    )
    .unwrap();
    reader_refuses(&env, &["pins", repo], "describes commit");
    std::fs::remove_file(root.join(&other)).unwrap();

    // A lock cut short.
    std::fs::create_dir_all(root.join("locks")).unwrap();
    let pin = std::fs::read(root.join(format!("repos/{repo}/pins/{b}"))).unwrap();
    std::fs::write(root.join("locks/ingest-00000000000000aa"), &pin[..20]).unwrap();
    reader_refuses(&env, &["locks"], "locks/ingest-00000000000000aa");
    // Another kind's object under a lock key: refused by its magic.
    std::fs::write(root.join("locks/ingest-00000000000000aa"), &pin).unwrap();
    reader_refuses(&env, &["locks"], "magic");
}

/// The objects of docs/format/vectors.md: each label line `` `KEY`, N bytes ``, then the
/// fenced block of bare hex below it.
fn vector_objects() -> Vec<(String, Vec<u8>)> {
    let path = common::repo_root().join("docs/format/vectors.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let Some(key) = l
            .strip_prefix('`')
            .and_then(|r| r.split_once("`, "))
            .filter(|(_, rest)| rest.contains(" bytes"))
            .map(|(k, _)| k)
        else {
            continue;
        };
        assert_eq!(lines[i + 2], "```", "{key}: the hex block");
        let hex: String = lines[i + 3..]
            .iter()
            .take_while(|l| **l != "```")
            .copied()
            .collect();
        out.push((key.to_string(), hex::decode(hex).unwrap()));
    }
    out
}

#[test]
fn reads_the_objects_of_the_test_vectors() {
    // A store of exactly the vectors' objects (the forwarding record's target pack is not
    // among them; the pack it forwards from is, so it is never followed).
    let tmp = tempfile::tempdir().unwrap();
    let objects = vector_objects();
    let keys: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys.len(), 8, "{keys:?}");
    for (key, bytes) in &objects {
        let path = tmp.path().join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let env = Env {
        location: tmp.path().to_str().unwrap().to_string(),
        tmp,
        s3: None,
        read_only: false,
    };
    let commit = "0123456789abcdef0123456789abcdef01234567";
    assert_eq!(reader_lines(&env, &["repos"]), vec!["org/name"]);
    assert_eq!(reader_lines(&env, &["commits", "org/name"]), vec![commit]);
    assert_eq!(
        reader_lines(&env, &["refs", "org/name"]),
        vec![format!("main {commit}")]
    );
    // The pin and the last-use record, as the reader and modelcas see them.
    assert_eq!(
        reader_lines(&env, &["pins", "org/name"]),
        vec![format!("{commit} 1796264278")]
    );
    // (fsck reports a problem here: the forwarding record's target pack is not among the
    // vectors; its count of pins stands.)
    let fsck: serde_json::Value =
        serde_json::from_slice(&env.run(&["fsck", "--json"]).stdout).unwrap();
    assert_eq!(fsck["pins"], 1, "{fsck:#}");
    let used = reader_lines(&env, &["used", "org/name"]);
    let f: Vec<&str> = used[0].split(' ').collect();
    assert_eq!(
        (used.len(), f[0], f[1], f[3]),
        (1, commit, "1796264278", "cat")
    );
    let mtime_ms: u64 = f[2].parse().unwrap();
    let ls = env.json(&["ls", "org/name", "--json"]);
    assert_eq!(ls["commits"][0]["last_used"], mtime_ms / 1000);
    // (modelcas's `cat` below is a use: it writes the record again.)
    // The inputs of the vectors (the table at the top of vectors.md).
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("a.txt", b"hi\n".to_vec()),
        ("b.txt", b"hello world, ".repeat(24)),
        (
            "c.bin",
            (0..32u32)
                .flat_map(|i| [(i * 37 % 256) as u8, 0x3c])
                .collect(),
        ),
    ];
    let listed: Vec<String> = inputs
        .iter()
        .map(|(p, b)| format!("{} {} {p}", sha256_hex(b), b.len()))
        .collect();
    assert_eq!(reader_lines(&env, &["files", "org/name", "main"]), listed);
    for (path, bytes) in &inputs {
        let got = reader(&env, &["--blake3-chunks", "cat", "org/name", commit, path]);
        assert_eq!(&got, bytes, "{path}");
        // and modelcas reads the document's objects the same
        assert_eq!(
            &modelcas_cat(&env, "org/name", "main", path),
            bytes,
            "{path}"
        );
    }
    let pack = "225860231f9dc73a657069d5c56e4f5ca67324df0e008dc2c79a9f3c502cc82c";
    assert_eq!(
        reader_lines(&env, &["packs"]),
        vec![format!("{pack} 310 3")]
    );
    let footer = reader_lines(&env, &["--blake3-chunks", "footer", pack]);
    let offsets: Vec<&str> = footer
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(offsets, ["16", "62", "127"]);
    assert!(reader_lines(&env, &["condemned"]).is_empty());
    // The release label, as the reader and modelcas see it (no check record: not checked).
    assert_eq!(
        reader_lines(&env, &["labels", "org/name"]),
        vec![format!("{commit} vllm 0.11.0")]
    );
    assert!(reader_lines(&env, &["checks", "org/name"]).is_empty());
    let label = env.json(&["label", "org/name@main", "--json"]);
    assert_eq!(label["labels"], serde_json::json!({"vllm": "0.11.0"}));
    release_records_agree(&env, "org/name");
}

// --- Release records (bytes.md "Release records") ---------------------------------------

const RELEASE_REPO: &str = "o/m";

/// A model directory for the release check: a llama `config.json`, a BPE `tokenizer.json`
/// and `model.safetensors` as given.
fn release_dir(env: &Env, name: &str, safetensors: &[u8]) -> PathBuf {
    let dir = env.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type":"llama","architectures":["X"]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("tokenizer.json"),
        r#"{"model":{"type":"BPE","vocab":{},"merges":[]}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("model.safetensors"), safetensors).unwrap();
    dir
}

/// A valid safetensors file: one F32 tensor of 2 values.
fn safetensors_valid() -> Vec<u8> {
    let mut header = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#.to_vec();
    while !header.len().is_multiple_of(8) {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend([0u8; 8]);
    out
}

/// A safetensors file cut inside its header: it claims 64 header bytes, 20 follow.
fn safetensors_truncated() -> Vec<u8> {
    let mut out = 64u64.to_le_bytes().to_vec();
    out.extend([b'{'; 20]);
    out
}

/// Ingests DIR into o/m with the ref main and two labels; returns the commit.
fn ingest_release(env: &Env, dir: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "--repo",
        RELEASE_REPO,
        "--ref",
        "main",
        "--label",
        "vllm=0.11.0",
        "--label",
        "validated-by=ci",
    ];
    args.extend(extra);
    let v = env.ingest_json(dir, &args);
    v["snapshots"][0]["commit"].as_str().unwrap().to_string()
}

/// The reader's `checks`: commit → (verdict, rules, errors, warnings).
fn reader_checks(env: &Env, repo: &str) -> BTreeMap<String, (String, u64, u64, u64)> {
    reader_lines(env, &["checks", repo])
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 5, "{l}");
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            (f[0].to_string(), (f[1].to_string(), n(2), n(3), n(4)))
        })
        .collect()
}

/// The reader's `labels`: commit → key → value.
fn reader_labels(env: &Env, repo: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let lines = reader_lines(env, &["labels", repo]);
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "labels are listed sorted");
    for l in lines {
        let f: Vec<&str> = l.splitn(3, ' ').collect();
        assert_eq!(f.len(), 3, "{l}");
        out.entry(f[0].to_string())
            .or_default()
            .insert(f[1].to_string(), f[2].to_string());
    }
    out
}

fn json_labels(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// What `modelcas ls REPO --json` says of each commit: commit → (verdict in the reader's
/// spelling, rules, errors, warnings, labels).
type LsRelease = BTreeMap<String, (String, u64, u64, u64, BTreeMap<String, String>)>;

fn ls_release(env: &Env, repo: &str) -> LsRelease {
    let ls = env.json(&["ls", repo, "--json"]);
    ls["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let c = &row["check"];
            let n = |k: &str| c[k].as_u64().unwrap();
            (
                row["commit"].as_str().unwrap().to_string(),
                (
                    c["verdict"].as_str().unwrap().replace(' ', "-"),
                    n("rules"),
                    n("errors"),
                    n("warnings"),
                    json_labels(&row["labels"]),
                ),
            )
        })
        .collect()
}

/// The reader's `checks` and `labels` of REPO agree with `modelcas ls REPO --json` and
/// `modelcas label REPO@COMMIT --json`: a commit without a record is "not checked" there;
/// a not-checked record's counts are not compared (ls shows none). Returns the reader's
/// checks.
fn release_records_agree(env: &Env, repo: &str) -> BTreeMap<String, (String, u64, u64, u64)> {
    let checks = reader_checks(env, repo);
    let labels = reader_labels(env, repo);
    let ls = ls_release(env, repo);
    for c in checks.keys().chain(labels.keys()) {
        assert!(
            ls.contains_key(c),
            "{c}: a record of a commit ls does not show"
        );
    }
    for (commit, (verdict, rules, errors, warnings, ls_labels)) in &ls {
        match checks.get(commit) {
            Some((v, _, _, _)) if v == "not-checked" => {
                assert_eq!(verdict, "not-checked", "{commit}")
            }
            Some(got) => assert_eq!(
                got,
                &(verdict.clone(), *rules, *errors, *warnings),
                "{commit}: reader vs ls"
            ),
            None => assert_eq!(verdict, "not-checked", "{commit}: no record"),
        }
        let ours = labels.get(commit).cloned().unwrap_or_default();
        assert_eq!(&ours, ls_labels, "{commit}: labels, reader vs ls");
        let label = env.json(&["label", &format!("{repo}@{commit}"), "--json"]);
        assert_eq!(label["commit"], commit.as_str());
        assert_eq!(
            json_labels(&label["labels"]),
            ours,
            "{commit}: labels, reader vs label --json"
        );
    }
    checks
}

/// A bincode 2 `standard()` varint (bytes.md "Payload encoding").
fn varint(out: &mut Vec<u8>, n: u64) {
    if n <= 250 {
        out.push(n as u8);
    } else if n <= 0xffff {
        out.push(0xfb);
        out.extend((n as u16).to_le_bytes());
    } else if n <= 0xffff_ffff {
        out.push(0xfc);
        out.extend((n as u32).to_le_bytes());
    } else {
        out.push(0xfd);
        out.extend(n.to_le_bytes());
    }
}

fn bincode_string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend(s.as_bytes());
}

/// An object envelope, version 1 (bytes.md "Object envelope").
fn envelope(magic: &[u8; 8], flags: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = magic.to_vec();
    out.extend(1u16.to_le_bytes());
    out.extend(flags.to_le_bytes());
    out.extend(payload);
    let sum = blake3::hash(&out);
    out.extend(sum.as_bytes());
    out
}

/// `data` as one zstd frame of raw blocks (RFC 8878: no compression library needed).
fn zstd_raw(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    out.push(0xe0); // single segment, an 8-byte content size, no checksum
    out.extend((data.len() as u64).to_le_bytes());
    let blocks: Vec<&[u8]> = if data.is_empty() {
        vec![&[][..]]
    } else {
        data.chunks(128 * 1024).collect()
    };
    for (i, b) in blocks.iter().enumerate() {
        let last = u32::from(i + 1 == blocks.len());
        let header = last | (b.len() as u32) << 3; // block type 0: raw
        out.extend(&header.to_le_bytes()[..3]);
        out.extend(*b);
    }
    out
}

/// A label object (MCASLABL).
fn label_object(commit: &str, key: &str, value: &str, by: &str) -> Vec<u8> {
    let mut p = hex::decode(commit).unwrap();
    bincode_string(&mut p, key);
    bincode_string(&mut p, value);
    varint(&mut p, 1_796_264_278);
    bincode_string(&mut p, by);
    envelope(b"MCASLABL", 0, &p)
}

/// A check object (MCASCHCK, compressed): problems as (severity, code, path, message).
fn check_object(
    commit: &str,
    files: &[u8; 32],
    problems: &[(u8, &str, &str, &str)],
    omitted: u32,
) -> Vec<u8> {
    let mut p = hex::decode(commit).unwrap();
    p.extend(files);
    varint(&mut p, 1); // rules
    varint(&mut p, 1_796_264_278); // checked_at
    bincode_string(&mut p, "check");
    varint(&mut p, problems.len() as u64);
    for (severity, code, path, message) in problems {
        p.push(*severity);
        bincode_string(&mut p, code);
        bincode_string(&mut p, path);
        bincode_string(&mut p, message);
    }
    varint(&mut p, u64::from(omitted));
    envelope(b"MCASCHCK", 1, &zstd_raw(&p))
}

/// The files digest of REPO@COMMIT (bytes.md "Files digest"), from `ls --json`'s files.
fn files_digest(env: &Env, repo: &str, commit: &str) -> [u8; 32] {
    let v = env.json(&["ls", &format!("{repo}@{commit}"), "--json"]);
    let mut files: Vec<(String, u64, String, bool)> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
                f["sha256"].as_str().unwrap().to_string(),
                f["executable"].as_bool().unwrap(),
            )
        })
        .collect();
    files.sort();
    let mut h = blake3::Hasher::new();
    h.update(b"modelcas-release-files-v1\0");
    for (path, size, sha, exec) in files {
        h.update(path.as_bytes());
        h.update(&[0]);
        h.update(&size.to_le_bytes());
        h.update(&hex::decode(sha).unwrap());
        h.update(&[u8::from(exec)]);
    }
    *h.finalize().as_bytes()
}

/// A hand-written record's problems (severity, code, path, message), its `omitted`, and
/// the (verdict, errors, warnings) both readers must give.
type VerdictCase<'a> = (
    Vec<(u8, &'a str, &'a str, &'a str)>,
    u32,
    (&'a str, u64, u64),
);

#[test]
fn decodes_release_checks_and_labels_as_modelcas_reports_them() {
    let env = local_env();
    let bad_dir = release_dir(&env, "bad", &safetensors_truncated());
    let good_dir = release_dir(&env, "good", &safetensors_valid());
    let bad = ingest_release(&env, &bad_dir, &[]);
    let good = ingest_release(&env, &good_dir, &[]);
    assert_ne!(bad, good);

    // One record each: the failing revision failed with one error, the other passed; both
    // carry the two labels.
    let checks = release_records_agree(&env, RELEASE_REPO);
    let want: BTreeMap<String, (String, u64, u64, u64)> = [
        (
            bad.clone(),
            ("failed".to_string(), store::release::RULES.into(), 1, 0),
        ),
        (
            good.clone(),
            ("passed".to_string(), store::release::RULES.into(), 0, 0),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(checks, want);
    let two: BTreeMap<String, String> = [("validated-by", "ci"), ("vllm", "0.11.0")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let labels = reader_labels(&env, RELEASE_REPO);
    assert_eq!(labels.len(), 2);
    assert_eq!(labels[&bad], two);
    assert_eq!(labels[&good], two);
    assert_eq!(
        json_labels(&env.json(&["label", "o/m@main", "--json"])["labels"]),
        two
    );

    // Labels set, replaced and removed by `modelcas label`: the reader follows.
    env.ok(&[
        "label",
        &format!("{RELEASE_REPO}@{bad}"),
        "vllm=0.12.0",
        "note=see_the_ticket",
    ]);
    env.ok(&["label", "o/m@main", "--remove", "validated-by"]);
    let labels = reader_labels(&env, RELEASE_REPO);
    assert_eq!(labels[&bad]["vllm"], "0.12.0");
    assert_eq!(labels[&bad].len(), 3);
    assert_eq!(labels[&good].keys().collect::<Vec<_>>(), ["vllm"]);
    release_records_agree(&env, RELEASE_REPO);

    // A stale record: commit C stored with the passing files and checked, removed, stored
    // again with the failing files; the first record put back under its key (its commit
    // is C's) no longer matches C's files digest: not checked, for both.
    let c = "c000000000000000000000000000000000000003";
    ingest_release(&env, &good_dir, &["--revision", c]);
    let root = Path::new(&env.location);
    let c_key = root.join(format!("repos/{RELEASE_REPO}/checks/{c}"));
    let passed_record = std::fs::read(&c_key).unwrap();
    assert_eq!(reader_checks(&env, RELEASE_REPO)[c].0, "passed");
    env.ok(&["rm", &format!("{RELEASE_REPO}@{c}"), "--force"]);
    assert!(!c_key.exists(), "rm deletes the check record");
    ingest_release(&env, &bad_dir, &["--revision", c]);
    assert_eq!(reader_checks(&env, RELEASE_REPO)[c].0, "failed");
    std::fs::write(&c_key, &passed_record).unwrap();
    let checks = release_records_agree(&env, RELEASE_REPO);
    assert_eq!(
        checks[c],
        (
            "not-checked".to_string(),
            store::release::RULES.into(),
            0,
            0
        )
    );

    // Records written here from the spec, on the passing commit: every verdict rule, as
    // the reader and modelcas derive it.
    let g_key = root.join(format!("repos/{RELEASE_REPO}/checks/{good}"));
    let digest = files_digest(&env, RELEASE_REPO, &good);
    let warn = (1u8, "config.unknown", "config.json", "a warning");
    let err = (
        0u8,
        "safetensors.truncated",
        "model.safetensors",
        "an error",
    );
    let odd = (
        7u8,
        "future.rule",
        "tokenizer.json",
        "a severity of a later version",
    );
    let cases: Vec<VerdictCase<'_>> = vec![
        (vec![], 0, ("passed", 0, 0)),
        (vec![warn], 0, ("warnings", 0, 1)),
        (vec![warn], 5, ("warnings", 0, 1)),
        (vec![err, warn], 0, ("failed", 1, 1)),
        (vec![odd], 0, ("failed", 1, 0)),
        (vec![], 3, ("failed", 0, 0)),
    ];
    for (problems, omitted, (verdict, errors, warnings)) in cases {
        std::fs::write(&g_key, check_object(&good, &digest, &problems, omitted)).unwrap();
        let checks = release_records_agree(&env, RELEASE_REPO);
        assert_eq!(
            checks[&good],
            (verdict.to_string(), 1, errors, warnings),
            "{problems:?} omitted {omitted}"
        );
    }
    // The failing commit's files digest under the passing commit's key: not checked.
    let bad_digest = files_digest(&env, RELEASE_REPO, &bad);
    std::fs::write(&g_key, check_object(&good, &bad_digest, &[], 0)).unwrap();
    assert_eq!(
        release_records_agree(&env, RELEASE_REPO)[&good].0,
        "not-checked"
    );
    // A label written from the spec, its value with spaces: VALUE is the rest of the line.
    let l_key = root.join(format!("repos/{RELEASE_REPO}/labels/{good}/notes"));
    std::fs::write(&l_key, label_object(&good, "notes", "two words", "label")).unwrap();
    assert_eq!(
        reader_labels(&env, RELEASE_REPO)[&good]["notes"],
        "two words"
    );
    release_records_agree(&env, RELEASE_REPO);
}

#[test]
fn refuses_damaged_release_records() {
    let env = local_env();
    let bad = ingest_release(
        &env,
        &release_dir(&env, "bad", &safetensors_truncated()),
        &[],
    );
    let good = ingest_release(&env, &release_dir(&env, "good", &safetensors_valid()), &[]);
    release_records_agree(&env, RELEASE_REPO);
    let root = Path::new(&env.location);
    let checks = |c: &str| format!("repos/{RELEASE_REPO}/checks/{c}");
    let label = |c: &str, k: &str| format!("repos/{RELEASE_REPO}/labels/{c}/{k}");
    let put = |key: &str, bytes: &[u8]| std::fs::write(root.join(key), bytes).unwrap();
    let get = |key: &str| std::fs::read(root.join(key)).unwrap();
    let args = ["checks", RELEASE_REPO];
    let largs = ["labels", RELEASE_REPO];

    // A check record copied under another commit's key: it names another commit. The
    // reader refuses it, naming the key; modelcas reads that commit as not checked.
    let (good_check, bad_check) = (get(&checks(&good)), get(&checks(&bad)));
    put(&checks(&bad), &good_check);
    let err = reader_refuses(&env, &args, &checks(&bad));
    assert!(err.contains(&format!("record of commit {good}")), "{err}");
    let ls = ls_release(&env, RELEASE_REPO);
    assert_eq!(ls[&bad].0, "not-checked");
    assert_eq!(ls[&good].0, "passed");

    // One flipped byte (the checksum); an object over 4 MiB (by its size, whatever it
    // holds); more than 1000 problems; a problem's code over 64 bytes.
    let mut flipped = bad_check.clone();
    flipped[14] ^= 1;
    let digest = files_digest(&env, RELEASE_REPO, &bad);
    let many: Vec<(u8, &str, &str, &str)> = vec![(0, "c", "p", "m"); 1001];
    let long_code = "x".repeat(65);
    let long: Vec<(u8, &str, &str, &str)> = vec![(0, &long_code, "p", "m")];
    for (bytes, why) in [
        (flipped, "checksum mismatch"),
        (vec![0u8; 4 * 1024 * 1024 + 1], "over the 4194304-byte cap"),
        (check_object(&bad, &digest, &many, 0), "more than 1000"),
        (check_object(&bad, &digest, &long, 0), "more than 64"),
    ] {
        put(&checks(&bad), &bytes);
        let err = reader_refuses(&env, &args, &checks(&bad));
        assert!(err.contains(why), "{err} does not say {why}");
        assert_eq!(
            ls_release(&env, RELEASE_REPO)[&bad].0,
            "not-checked",
            "{why}"
        );
    }
    // Within the caps (1000 problems, a 64-byte code) it decodes.
    let most: Vec<(u8, &str, &str, &str)> = vec![(0, &long_code[..64], "p", "m"); 1000];
    put(&checks(&bad), &check_object(&bad, &digest, &most, 0));
    assert_eq!(
        release_records_agree(&env, RELEASE_REPO)[&bad],
        ("failed".to_string(), 1, 1000, 0)
    );
    put(&checks(&bad), &bad_check);
    release_records_agree(&env, RELEASE_REPO);

    // Labels: copied under another commit, under another key; a value over 1024 bytes,
    // with a control character; a key that breaks the rules. Each is refused by the
    // reader, naming its key, and left out by modelcas. (An object over 8 KiB: below.)
    let vllm = get(&label(&good, "vllm"));
    let cases: Vec<(String, Vec<u8>, &str)> = vec![
        (label(&bad, "vllm"), vllm.clone(), "label of commit"),
        (
            label(&good, "other"),
            vllm.clone(),
            "stored under another key",
        ),
        (
            label(&good, "long"),
            label_object(&good, "long", &"v".repeat(1025), "label"),
            "more than 1024",
        ),
        (
            label(&good, "bell"),
            label_object(&good, "bell", "a\u{7}b", "label"),
            "control character",
        ),
        (
            label(&good, "-dash"),
            label_object(&good, "-dash", "v", "label"),
            "is not a label key",
        ),
    ];
    for (key, bytes, why) in cases {
        let had = root.join(&key).exists().then(|| get(&key));
        put(&key, &bytes);
        let err = reader_refuses(&env, &largs, &key);
        assert!(err.contains(why), "{err} does not say {why}");
        let last = key.rsplit('/').next().unwrap();
        let commit = key.split('/').nth(4).unwrap();
        let shown = &ls_release(&env, RELEASE_REPO)[commit].4;
        assert!(!shown.contains_key(last), "{key}: modelcas shows {shown:?}");
        match had {
            Some(b) => put(&key, &b),
            None => std::fs::remove_file(root.join(&key)).unwrap(),
        }
        release_records_agree(&env, RELEASE_REPO);
    }
    // At the caps it decodes: a 1024-byte value, a 64-character key.
    let key64 = format!("k{}", "_".repeat(63));
    put(
        &label(&good, &key64),
        &label_object(&good, &key64, &"v".repeat(1024), "label"),
    );
    assert_eq!(reader_labels(&env, RELEASE_REPO)[&good][&key64].len(), 1024);
    release_records_agree(&env, RELEASE_REPO);
}

/// A label object over 8 KiB (here by a long `by`, which has no cap of its own) is refused
/// by its size: by the reader, naming its key; modelcas leaves it out of listings as it
/// does every damaged label (bytes.md "Release records": "A damaged label is left out of
/// listings (and named by `fsck`)").
#[test]
fn an_oversized_label_is_refused_and_left_out() {
    let env = local_env();
    let good = ingest_release(&env, &release_dir(&env, "good", &safetensors_valid()), &[]);
    let key = format!("repos/{RELEASE_REPO}/labels/{good}/big");
    let path = Path::new(&env.location).join(&key);
    let object = label_object(&good, "big", "v", &"b".repeat(8 * 1024));
    assert!(object.len() > 8 * 1024);
    std::fs::write(&path, &object).unwrap();
    let err = reader_refuses(&env, &["labels", RELEASE_REPO], &key);
    assert!(err.contains("over the 8192-byte cap"), "{err}");
    let fsck = env.run(&["fsck", "--json"]);
    let fsck: serde_json::Value = serde_json::from_slice(&fsck.stdout).unwrap();
    assert!(
        fsck["problems"].to_string().contains(&key),
        "fsck names {key}: {fsck:#}"
    );
    let shown = &ls_release(&env, RELEASE_REPO)[&good].4;
    assert!(!shown.contains_key("big"), "modelcas shows {shown:?}");
    let label = env.json(&["label", &format!("{RELEASE_REPO}@{good}"), "--json"]);
    assert!(label["labels"].get("big").is_none(), "{label}");
    std::fs::remove_file(&path).unwrap();
    release_records_agree(&env, RELEASE_REPO);
}
