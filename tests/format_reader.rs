//! The format specification (docs/FORMAT.md and docs/format/) is enough to read a store:
//! `tests/format_reader.py`, a reader written from the document alone (Python standard
//! library and the `zstandard` package, no Rust, no bincode library), lists repositories,
//! commits and refs and reads every file of every revision byte for byte as `modelcas`
//! does: on the generated series, on a store whose frames use all three codecs, and after
//! gc rewrote packs and deleted the old ones (so it must follow the forwarding records).
//! It also decodes pack footers, pins, last-use records, locks and leases, and the
//! condemned list, and every decoded field is compared with what `modelcas` reports.
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
    assert_eq!(keys.len(), 7, "{keys:?}");
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
}
