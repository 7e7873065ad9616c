//! Transfer bundles end to end: export and import between two stores, `--have` leaving out
//! what the other side holds, streaming through a pipe, and damaged bundles refused with
//! the destination unchanged.

use crate::common;

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::{ingest_series, series, wait_until, Env};

const REPO: &str = "demo-org/demo-llm";

fn rev(r: &str) -> String {
    format!("{REPO}@{r}")
}

fn verifies(env: &Env, r: &str) {
    env.verifies(&rev(r));
}

#[test]
fn export_import_and_have() {
    let s = series();
    let src = Env::new();
    ingest_series(&src);
    let dst = Env::empty();
    let b1 = src.path("r1.bundle");
    src.ok(&["export", &rev("r1"), "-o", b1.to_str().unwrap()]);
    let out = dst.json(&["import", b1.to_str().unwrap(), "--json"]);
    assert_eq!(out["revisions"][0], format!("{REPO}@{}", s.commit("r1")));
    verifies(&dst, "r1");
    let ls = dst.json(&["ls", REPO, "--json"]);
    assert_eq!(ls["refs"]["r1"], s.commit("r1"));
    // Importing again changes nothing and writes no pack.
    let again = dst.json(&["import", b1.to_str().unwrap(), "--json"]);
    assert_eq!(again["packs_written"], 0, "{again:#}");

    // r2 with --have r1: only what changed travels.
    let b2 = src.path("r2.bundle");
    let report = src.json(&[
        "export",
        &rev("r2"),
        "--have",
        &rev("r1"),
        "-o",
        b2.to_str().unwrap(),
        "--json",
    ]);
    let r1_chunks = chunk_sizes(&src, &s.commit("r1"));
    let r2_chunks = chunk_sizes(&src, &s.commit("r2"));
    let changed: u64 = r2_chunks
        .iter()
        .filter(|(id, _)| !r1_chunks.contains_key(*id))
        .map(|(_, raw)| *raw)
        .sum();
    let size = std::fs::metadata(&b2).unwrap().len();
    assert_eq!(report["bytes"].as_u64().unwrap(), size);
    assert!(
        (size as f64) < changed as f64 * 1.05,
        "bundle {size} bytes, changed {changed} bytes"
    );
    assert!(report["chunks_skipped"].as_u64().unwrap() > 0);
    dst.ok(&["import", b2.to_str().unwrap()]);
    verifies(&dst, "r2");
    verifies(&dst, "r1");

    // --have-from: what the destination lists; r3 and r4 through a pipe.
    let listing = dst.path("have.json");
    std::fs::write(&listing, dst.ok(&["ls", "--json"])).unwrap();
    let mut export = src
        .cmd()
        .args([
            "export",
            &rev("r3"),
            &rev("r4"),
            "--have-from",
            listing.to_str().unwrap(),
            "-o",
            "-",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = export.stdout.take().unwrap();
    let import = dst
        .cmd()
        .args(["import", "-"])
        .stdin(pipe)
        .output()
        .unwrap();
    assert!(export.wait().unwrap().success());
    assert!(
        import.status.success(),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
    verifies(&dst, "r3");
    verifies(&dst, "r4");
    let fsck = dst.run(&["fsck", "--read-data"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

/// Chunk id → raw length, over a revision.
fn chunk_sizes(env: &Env, commit: &str) -> std::collections::HashMap<format::ChunkId, u64> {
    let store = repo::Store::open(env.backend()).unwrap();
    let m = store
        .manifest(
            &format::RepoId::parse(REPO).unwrap(),
            &format::CommitId::parse(commit).unwrap(),
        )
        .unwrap();
    m.files
        .iter()
        .flat_map(|f| f.chunks.iter().map(|c| (c.id, c.raw_len as u64)))
        .collect()
}

#[test]
fn damaged_bundles_are_refused_and_change_nothing() {
    let src = Env::new();
    ingest_series(&src);
    let good = src.path("r1.bundle");
    src.ok(&["export", &rev("r1"), "-o", good.to_str().unwrap()]);
    let bytes = std::fs::read(&good).unwrap();
    // The destination already holds r4 (so that "unchanged" means something).
    let dst = Env::new();
    let r4 = src.path("r4.bundle");
    src.ok(&["export", &rev("r4"), "-o", r4.to_str().unwrap()]);
    dst.ok(&["import", r4.to_str().unwrap()]);
    let before = dst.objects();

    // Find the chunk records to damage precisely.
    let chunks = chunk_records(&bytes);
    assert!(chunks.len() > 10);
    let mut flipped = bytes.clone();
    let (at, len) = chunks[chunks.len() / 2];
    flipped[at + len / 2] ^= 0x01;
    let truncated = bytes[..bytes.len() * 2 / 3].to_vec();
    // Chunk record A carries chunk B's frame under A's id, and the bundle's checksum is
    // recomputed as a tamperer would: the chunk's own hash still gives it away.
    let swapped = swap_chunk(&bytes, &chunks, 3, 7);
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b"junk");

    for (name, data, want) in [
        ("flipped", flipped, "bundle refused"),
        ("truncated", truncated, "truncated"),
        ("swapped", swapped, "content does not match the chunk id"),
        ("trailing", trailing, "after the end record"),
        ("empty", Vec::new(), "truncated"),
        (
            "not a bundle",
            b"hello world, not a bundle".to_vec(),
            "not a modelcas bundle",
        ),
    ] {
        let p = dst.path(&format!("{name}.bundle"));
        std::fs::File::create(&p).unwrap().write_all(&data).unwrap();
        let err = dst.fails(&["import", p.to_str().unwrap()]);
        assert!(
            err.contains("bundle refused") && err.contains(want),
            "{name}: {err}"
        );
        only_new_packs(&before, &dst.objects(), name);
    }
    verifies(&dst, "r4");
    // The good bundle still imports.
    dst.ok(&["import", good.to_str().unwrap()]);
    verifies(&dst, "r1");
    // An export into an existing file is refused; bad revisions are named.
    let err = src.fails(&["export", &rev("r1"), "-o", good.to_str().unwrap()]);
    assert!(err.contains("exists"), "{err}");
    let err = src.fails(&[
        "export",
        &rev("nope"),
        "-o",
        src.path("x").to_str().unwrap(),
    ]);
    assert!(err.contains("unknown revision nope"), "{err}");
}

/// Nothing that was there is gone or changed, and nothing visible was added: a refused
/// import may leave packs it wrote before the damage showed (no manifest references them;
/// gc reclaims them), but it never deletes anything (issue 11, point 1).
fn only_new_packs(before: &[String], after: &[String], name: &str) {
    for o in before {
        assert!(after.contains(o), "{name}: {o} was removed or changed");
    }
    for o in after {
        assert!(
            before.contains(o) || o.starts_with("packs/"),
            "{name}: {o} was added"
        );
    }
}

/// (offset, length) of every chunk record's payload.
fn chunk_records(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 12;
    while at + 9 <= b.len() {
        let kind = b[at];
        let len = u64::from_le_bytes(b[at + 1..at + 9].try_into().unwrap()) as usize;
        if kind == 3 {
            out.push((at + 9, len));
        }
        if kind == 0xFF {
            break;
        }
        at += 9 + len;
    }
    out
}

/// The bundle with record `a`'s frame replaced by record `b`'s, and a valid checksum.
fn swap_chunk(b: &[u8], chunks: &[(usize, usize)], a: usize, bi: usize) -> Vec<u8> {
    let (pa, la) = chunks[a];
    let (pb, lb) = chunks[bi];
    let mut body = Vec::new();
    body.extend_from_slice(&b[..pa - 8]);
    body.extend_from_slice(&(lb as u64).to_le_bytes());
    body.extend_from_slice(&b[pa..pa + 32]); // A's id
    body.extend_from_slice(&b[pb + 32..pb + lb]); // B's raw length and frame
    let end_at = b.len() - 49;
    assert_eq!(b[end_at], 0xFF);
    body.extend_from_slice(&b[pa + la..end_at]);
    let digest = blake3::hash(&body);
    let count = &b[end_at + 9..end_at + 17];
    body.push(0xFF);
    body.extend_from_slice(&40u64.to_le_bytes());
    body.extend_from_slice(count);
    body.extend_from_slice(digest.as_bytes());
    body
}

#[test]
fn an_interrupted_import_leaves_nothing_visible_and_can_be_rerun() {
    let src = Env::new();
    ingest_series(&src);
    let b = src.path("all.bundle");
    src.ok(&["export", &rev("r1"), &rev("r4"), "-o", b.to_str().unwrap()]);
    let dst = Env::new();
    let pause = dst.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let mut child = dst
        .cmd()
        .args(["import", b.to_str().unwrap()])
        .env("MODELCAS_PAUSE_AT", "import-after-chunks")
        .env("MODELCAS_PAUSE_DIR", &pause)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let reached = pause.join("import-after-chunks.reached");
    wait_until(
        "the import to reach its pause point",
        Duration::from_secs(120),
        || reached.exists().then_some(()),
    );
    // Every chunk is in packs now; kill it before it publishes anything.
    assert!(!dst.packs().is_empty());
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    let ls = dst.json(&["ls", "--json"]);
    assert_eq!(
        ls["repos"].as_array().unwrap().len(),
        0,
        "visible after a killed import: {ls}"
    );
    let out = dst.json(&["import", b.to_str().unwrap(), "--json"]);
    assert_eq!(
        out["new_chunks"], 0,
        "the rerun reuses what landed: {out:#}"
    );
    verifies(&dst, "r1");
    verifies(&dst, "r4");
}

/// The commits `ls` lists for the test repository.
fn listed_commits(env: &Env) -> Vec<String> {
    let repos = env.json(&["ls", "--json"]);
    if repos["repos"].as_array().unwrap().is_empty() {
        return Vec::new();
    }
    let info = env.json(&["ls", REPO, "--json"]);
    let mut out: Vec<String> = info["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// Issue 11, point 1: a bundle holds A (r1) and C (r4); the destination already holds
/// commit C with other files (r2's). The import is refused naming C, publishes nothing,
/// deletes nothing, and once the conflict is removed a rerun imports A intact.
#[test]
fn regression_conflicting_commit_publishes_nothing_and_deletes_nothing() {
    let s = series();
    let src = Env::new();
    ingest_series(&src);
    let b = src.path("a-and-c.bundle");
    src.ok(&["export", &rev("r1"), &rev("r4"), "-o", b.to_str().unwrap()]);
    let dst = Env::new();
    let c = s.commit("r4");
    dst.ingest(&s.plain("r2"), &["--repo", REPO, "--revision", &c]);
    let before = listed_commits(&dst);
    assert_eq!(before, vec![c.clone()]);

    let err = dst.fails(&["import", b.to_str().unwrap()]);
    assert!(
        err.contains(&c) && err.contains("different files"),
        "the error names the conflicting commit: {err}"
    );
    assert_eq!(
        listed_commits(&dst),
        before,
        "a refused import published a revision"
    );
    // What was stored before still reads, byte for byte.
    verifies(&dst, &c);
    let co = dst.path("co-c");
    dst.ok(&["checkout".as_ref(), rev(&c).as_ref(), co.as_os_str()]);
    assert_eq!(common::tree_hashes(&co), s.files("r2"));

    // Remove the conflict: the rerun imports both, and A reads back intact.
    dst.ok(&["rm", "--force", &rev(&c)]);
    dst.ok(&["import", b.to_str().unwrap()]);
    verifies(&dst, "r1");
    verifies(&dst, "r4");
    let co = dst.path("co-a");
    dst.ok(&["checkout".as_ref(), rev("r1").as_ref(), co.as_os_str()]);
    assert_eq!(common::tree_hashes(&co), s.files("r1"));
}

/// Issue 11, point 1: an ingest on another machine deduplicates against a pack the import
/// wrote, publishes and ends; then the import fails (its stream is cut short). The ingest's
/// revision must keep its chunks: an import never deletes a pack.
#[test]
fn regression_failed_import_keeps_packs_another_ingest_dedups_against() {
    let s = series();
    let src = Env::new();
    ingest_series(&src);
    let b = src.path("r1.bundle");
    src.ok(&["export", &rev("r1"), "-o", b.to_str().unwrap()]);
    let bytes = std::fs::read(&b).unwrap();
    let dst = Env::new();
    let pause = dst.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    let point = "import-after-pack";
    let mut import = dst
        .cmd()
        .args(["import", "-"])
        .env("MODELCAS_PAUSE_AT", point)
        .env("MODELCAS_PAUSE_DIR", &pause)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The stream ends two thirds of the way: after several packs, before the end record.
    let mut stdin = import.stdin.take().unwrap();
    let cut = bytes[..bytes.len() * 2 / 3].to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&cut);
    });
    let reached = pause.join(format!("{point}.reached"));
    wait_until(
        format_args!("the import to reach {point}"),
        Duration::from_secs(120),
        || {
            if reached.exists() {
                return Some(());
            }
            assert!(import.try_wait().unwrap().is_none(), "import ended early");
            None
        },
    );
    assert!(!dst.packs().is_empty(), "the import wrote a pack");

    // Another machine ingests r1 (the same chunks), deduplicating against that pack.
    let peer = dst.sharing();
    let out = peer.ingest_json(
        &s.plain("r1"),
        &["--repo", REPO, "--revision", &s.commit("r1"), "--ref", "r1"],
    );
    assert!(
        out["new_chunks"].as_u64().unwrap() < out["chunks"].as_u64().unwrap(),
        "the ingest deduplicated against the import's pack: {out:#}"
    );
    verifies(&peer, "r1");

    // The import goes on, finds its stream cut short, and fails.
    std::fs::write(pause.join(format!("{point}.go")), b"").unwrap();
    feeder.join().unwrap();
    let done = import.wait_with_output().unwrap();
    assert!(!done.status.success(), "a truncated import succeeded");
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(err.contains("truncated"), "{err}");
    verifies(&peer, "r1");
    verifies(&dst, "r1");
    let co = dst.path("co");
    dst.ok(&["checkout".as_ref(), rev("r1").as_ref(), co.as_os_str()]);
    assert_eq!(common::tree_hashes(&co), s.files("r1"));
}

/// (kind, offset of the payload, length) of every record before the end record.
fn records(b: &[u8]) -> Vec<(u8, usize, usize)> {
    let mut out = Vec::new();
    let mut at = 12;
    while at + 9 <= b.len() && b[at] != 0xFF {
        let len = u64::from_le_bytes(b[at + 1..at + 9].try_into().unwrap()) as usize;
        out.push((b[at], at + 9, len));
        at += 9 + len;
    }
    out
}

/// A bundle of `records` with a correct end record, as a tamperer would write it.
fn bundle_of(records: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut b = b"MCASBNDL".to_vec();
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    for (kind, payload) in records {
        b.push(*kind);
        b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        b.extend_from_slice(payload);
    }
    let digest = blake3::hash(&b);
    b.push(0xFF);
    b.extend_from_slice(&40u64.to_le_bytes());
    b.extend_from_slice(&(records.len() as u64).to_le_bytes());
    b.extend_from_slice(digest.as_bytes());
    b
}

/// `object` (an uncompressed envelope whose payload starts with a repository id) with the
/// repository id replaced by `org`/`name` and a correct checksum.
fn with_repo(object: &[u8], org: &str, name: &str) -> Vec<u8> {
    let payload = &object[12..object.len() - 32];
    let org_len = payload[0] as usize;
    let name_len = payload[1 + org_len] as usize;
    let rest = &payload[2 + org_len + name_len..];
    let mut out = object[..12].to_vec();
    for part in [org, name] {
        out.push(part.len() as u8);
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(rest);
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

/// Issue 11, point 8: hand-crafted hostile bundles (repository names that would escape
/// their prefix, lengths no record may have, a chunk longer than any chunk, a stream cut
/// short, a manifest whose Xet hash is not its bytes') are each refused with an error naming the problem, and change nothing.
#[test]
fn regression_hostile_bundles_are_refused_and_change_nothing() {
    use format::codec::{decode, encode, Kind};
    let src = Env::new();
    ingest_series(&src);
    let good = src.path("r1.bundle");
    src.ok(&["export", &rev("r1"), "-o", good.to_str().unwrap()]);
    let bytes = std::fs::read(&good).unwrap();
    let dst = Env::new();
    let r4 = src.path("r4.bundle");
    src.ok(&["export", &rev("r4"), "-o", r4.to_str().unwrap()]);
    dst.ok(&["import", r4.to_str().unwrap()]);
    let before = dst.objects();

    let recs = records(&bytes);
    let owned: Vec<(u8, Vec<u8>)> = recs
        .iter()
        .map(|&(k, at, len)| (k, bytes[at..at + len].to_vec()))
        .collect();
    let (manifest_at, manifest) = owned.iter().enumerate().find(|(_, r)| r.0 == 1).unwrap();
    let (ref_at, bref) = owned.iter().enumerate().find(|(_, r)| r.0 == 2).unwrap();
    let m: format::manifest::Manifest = decode(Kind::Manifest, &manifest.1).unwrap();
    let plain_manifest = encode(Kind::Manifest, &m, false);
    // The same manifest recording a Xet hash one bit off for its largest file (a checksum
    // made to match: only re-reading the bytes tells).
    let mut lying = m.clone();
    let largest = (0..m.files.len()).max_by_key(|&i| m.files[i].size).unwrap();
    assert_eq!(
        lying.xet_hashes.len(),
        m.files.len(),
        "the export carries Xet hashes"
    );
    lying.xet_hashes[largest].0[0] ^= 1;
    let lying_manifest = encode(Kind::Manifest, &lying, false);
    let r: format::bundle::BundleRef = decode(Kind::BundleRef, &bref.1).unwrap();
    let plain_ref = encode(Kind::BundleRef, &r, false);
    let replaced = |i: usize, payload: Vec<u8>| {
        let mut v = owned.clone();
        v[i].1 = payload;
        bundle_of(&v)
    };
    let header = |kind: u8, len: u64| {
        let mut b = bytes[..12].to_vec();
        b.push(kind);
        b.extend_from_slice(&len.to_le_bytes());
        b
    };
    // One chunk record claiming a 4 GiB chunk: raw codec, raw length u32::MAX, empty body.
    let mut huge_chunk = vec![7u8; 32];
    huge_chunk.extend_from_slice(&u32::MAX.to_le_bytes());
    huge_chunk.extend_from_slice(&[0, 0, 0, 0]);
    huge_chunk.extend_from_slice(&u32::MAX.to_le_bytes());
    huge_chunk.extend_from_slice(&[0; 8]);
    let first_chunk = recs.iter().find(|r| r.0 == 3).unwrap().1;

    for (name, data, want) in [
        (
            "manifest of victim/model/refs",
            replaced(
                manifest_at,
                with_repo(&plain_manifest, "victim", "model/refs"),
            ),
            "invalid repo id",
        ),
        (
            "manifest of ../x",
            replaced(manifest_at, with_repo(&plain_manifest, "..", "x")),
            "invalid repo id",
        ),
        (
            "ref of victim/model/refs",
            replaced(ref_at, with_repo(&plain_ref, "victim", "model/refs")),
            "invalid repo id",
        ),
        (
            "manifest claiming 1 TiB",
            header(1, 1 << 40),
            "claims 1099511627776 bytes",
        ),
        (
            "chunk record claiming 512 MiB",
            header(3, 512 << 20),
            "claims 536870912 bytes",
        ),
        ("unknown record kind", header(9, 1), "unknown record kind 9"),
        (
            "chunk longer than any chunk",
            bundle_of(&[(3, huge_chunk)]),
            "more than any chunk",
        ),
        (
            "cut inside the first chunk",
            bytes[..first_chunk + 100].to_vec(),
            "truncated",
        ),
        // Last: refused after its packs were written, which the cases above compare with.
        (
            "manifest recording a wrong Xet hash",
            replaced(manifest_at, lying_manifest),
            "Xet hash",
        ),
    ] {
        let p = dst.path("hostile.bundle");
        std::fs::write(&p, &data).unwrap();
        let err = dst.fails(&["import", p.to_str().unwrap()]);
        assert!(
            err.contains("bundle refused") && err.contains(want),
            "{name}: {err}"
        );
        if want == "Xet hash" {
            // Refused once its files were re-read: after its packs were written.
            only_new_packs(&before, &dst.objects(), name);
        } else {
            assert_eq!(dst.objects(), before, "{name}: the destination changed");
        }
    }
    verifies(&dst, "r4");
    dst.ok(&["import", good.to_str().unwrap()]);
    verifies(&dst, "r1");
}

/// Issue 36 point 6: a bundle whose manifest says it was published 50 years from now (made
/// on a host whose clock runs ahead, or forged) is ordered by when this store took it: a
/// revision ingested after the import is the newest, and `gc --keep-last 1` keeps it and
/// expires the imported one (before, the imported revision counted as newest forever and
/// the later ingest was expired).
#[test]
fn regression_a_bundle_from_the_future_does_not_outrank_later_revisions() {
    use format::codec::{decode, encode, Kind};
    let s = series();
    let src = Env::new();
    common::ingest_rev(&src, "r1", &["r1"]);
    let good = src.path("r1.bundle");
    src.ok(&["export", &rev("r1"), "-o", good.to_str().unwrap()]);
    let bytes = std::fs::read(&good).unwrap();
    // The manifest stamped 50 years ahead, the ref records left out (a ref would keep it).
    let mut owned: Vec<(u8, Vec<u8>)> = Vec::new();
    for (kind, at, len) in records(&bytes) {
        let mut payload = bytes[at..at + len].to_vec();
        if kind == 1 {
            let mut m: format::manifest::Manifest = decode(Kind::Manifest, &payload).unwrap();
            let p = m
                .published
                .as_mut()
                .expect("a manifest of version 2 or later");
            p.store_ms += 50 * 365 * 24 * 3600 * 1000;
            p.seq += 50 * 365 * 24 * 3600 * 1000;
            payload = encode(Kind::Manifest, &m, false);
        }
        if kind != 2 {
            owned.push((kind, payload));
        }
    }
    let future = src.path("future.bundle");
    std::fs::write(&future, bundle_of(&owned)).unwrap();
    let dst = Env::new();
    dst.ok(&["import", future.to_str().unwrap()]);
    common::ingest_rev(&dst, "r2", &[]);
    dst.ok(&["gc", "--keep-last", "1"]);
    assert_eq!(
        listed_commits(&dst),
        vec![s.commit("r2")],
        "gc --keep-last 1 must keep the revision ingested last"
    );
    dst.verifies(&format!("{REPO}@{}", s.commit("r2")));
}

/// Issue 36 point 6, after review: an import stamps its revisions with this store's clock,
/// and keeps their order among themselves from the bundle's own times, whatever order the
/// export listed them in: `export NEW OLD` then `gc --keep-last 1` keeps NEW (before, the
/// sequence followed the bundle's order and gc expired NEW).
#[test]
fn regression_an_import_keeps_its_revisions_order_whatever_the_bundle_order() {
    let s = series();
    let src = Env::new();
    common::ingest_rev(&src, "r1", &[]);
    common::ingest_rev(&src, "r2", &[]);
    let b = src.path("new-old.bundle");
    let (new, old) = (s.commit("r2"), s.commit("r1"));
    src.ok(&[
        "export",
        &format!("{REPO}@{new}"),
        &format!("{REPO}@{old}"),
        "-o",
        b.to_str().unwrap(),
    ]);
    let dst = Env::new();
    dst.ok(&["import", b.to_str().unwrap()]);
    dst.ok(&["gc", "--keep-last", "1"]);
    assert_eq!(listed_commits(&dst), vec![new.clone()]);
    dst.verifies(&format!("{REPO}@{new}"));
}
