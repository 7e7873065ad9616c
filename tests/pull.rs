//! `modelcas pull` (issue 14): a revision from an upstream Hub straight into the store,
//! with a second `modelcas serve` as the upstream (no internet here) and a fake upstream
//! that misbehaves (cut connections, 429, a flipped byte, a token).

use crate::common;
use crate::fake;

use std::collections::BTreeMap;

use common::{ingest_rev, series, Env, Served};

const REPO: &str = "demo-org/demo-llm";

/// path → sha256 of a stored revision of the demo repository.
fn stored_files(env: &Env, rev: &str) -> BTreeMap<String, String> {
    env.stored_files(&format!("{REPO}@{rev}"))
}

fn expected_files(r: &str) -> BTreeMap<String, String> {
    series().files(r).into_iter().collect()
}

fn pull(env: &Env, endpoint: &str, target: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["pull", target, "--endpoint", endpoint, "--json"];
    args.extend_from_slice(extra);
    env.json(&args)
}

/// An upstream `modelcas serve` of a store holding `revs` (name, refs) of the series; its
/// store, the server and its URL (both must live as long as the test uses the URL).
fn upstream(revs: &[(&str, &[&str])]) -> (Env, Served, String) {
    let env = Env::new();
    for (r, refs) in revs {
        ingest_rev(&env, r, refs);
    }
    let srv = Served::start(&env, &[]);
    let url = format!("http://{}", srv.addr);
    (env, srv, url)
}

#[test]
fn pull_stores_a_revision_byte_exact_and_sets_its_ref() {
    let (_upstream, _srv, url) = upstream(&[("r1", &["main"]), ("r2", &["v2"])]);
    let local = Env::new();

    let r = pull(&local, &url, &format!("{REPO}@main"), &[]);
    let c1 = series().commit("r1");
    assert_eq!(r["commit"], c1.as_str());
    assert_eq!(r["new_revision"], true);
    assert_eq!(r["refs"], serde_json::json!(["main"]));
    let want = expected_files("r1");
    assert_eq!(r["files"].as_u64().unwrap() as usize, want.len());
    let bytes = r["bytes"].as_u64().unwrap();
    assert!(r["bytes_downloaded"].as_u64().unwrap() >= bytes, "{r}");
    assert_eq!(stored_files(&local, "main"), want);
    local.verifies(&format!("{REPO}@{c1}"));

    // The second revision by sha: the LFS files r1 already has (same sha256) are read
    // back from the store, not downloaded.
    let c2 = series().commit("r2");
    let r = pull(&local, &url, &format!("{REPO}@{c2}"), &["--ref", "next"]);
    assert_eq!(r["refs"], serde_json::json!(["next"]));
    assert_eq!(stored_files(&local, &c2), expected_files("r2"));
    let shared: u64 = {
        let (a, b) = (expected_files("r1"), expected_files("r2"));
        let sizes: BTreeMap<String, u64> = local.json(&["ls", &format!("{REPO}@{c2}"), "--json"])
            ["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap().into(),
                    f["size"].as_u64().unwrap(),
                )
            })
            .collect();
        b.iter()
            .filter(|(p, h)| a.values().any(|x| x == *h) && p.ends_with(".safetensors"))
            .map(|(p, _)| sizes[p])
            .sum()
    };
    let total = r["bytes"].as_u64().unwrap();
    let got = r["bytes_downloaded"].as_u64().unwrap();
    assert!(
        got <= total - shared,
        "downloaded {got} of {total}, {shared} shared: {r}"
    );
    // Weights are LFS files upstream (their sha256 is stated), and r2 keeps two of r1's.
    assert!(shared > 0);
    assert!(r["files_from_store"].as_u64().unwrap() >= 2, "{r}");
    // Held files are taken by their stored chunk lists: not one byte read back (issue 37).
    assert_eq!(r["files_taken_unread"], r["files_from_store"], "{r}");
    assert_eq!(r["bytes_read_back"], 0, "{r}");
    local.verifies(&format!("{REPO}@{c2}"));

    // Again: nothing downloaded, the ref moved.
    let again = pull(&local, &url, &format!("{REPO}@{c1}"), &["--ref", "next"]);
    assert_eq!(again["new_revision"], false);
    assert_eq!(again["bytes_downloaded"], 0);
    let refs = local.json(&["ls", REPO, "--json"])["refs"].clone();
    assert_eq!(refs["next"], c1.as_str());
    assert_eq!(refs["main"], c1.as_str());
}

#[test]
fn include_and_exclude_select_files_and_a_token_is_needed_where_asked() {
    let upstream = Env::new();
    ingest_rev(&upstream, "r1", &["main"]);
    let tokens = upstream.path("tokens");
    std::fs::write(&tokens, "s3cret\n").unwrap();
    let srv = Served::start(&upstream, &["--token-file", tokens.to_str().unwrap()]);
    let url = format!("http://{}", srv.addr);
    let local = Env::new();

    let err = local.fails(&["pull", REPO, "--endpoint", &url]);
    assert!(err.contains("HF_TOKEN") || err.contains("--token"), "{err}");
    assert!(local.json(&["ls", "--json"])["repos"]
        .as_array()
        .unwrap()
        .is_empty());

    let r = pull(
        &local,
        &url,
        REPO,
        &[
            "--token",
            "s3cret",
            "--include",
            "*.json",
            "--exclude",
            "*index*",
        ],
    );
    let want: BTreeMap<String, String> = expected_files("r1")
        .into_iter()
        .filter(|(p, _)| p.ends_with(".json") && !p.contains("index"))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(r["files"].as_u64().unwrap() as usize, want.len());
    assert_eq!(stored_files(&local, "main"), want);

    // No file matches: a clear error, nothing stored.
    let other = Env::new();
    let out = other
        .cmd()
        .args(["pull", REPO, "--endpoint", &url, "--include", "*.nothing"])
        .env("HF_TOKEN", "s3cret")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no file") && err.contains("--include"),
        "{err}"
    );
}

#[test]
fn a_flipped_byte_refuses_the_revision_and_cuts_and_429_are_survived() {
    let up = fake::Fake::start();
    let want: BTreeMap<String, String> = up
        .state()
        .files
        .iter()
        .map(|f| (f.path.clone(), f.sha256_hex()))
        .collect();

    // A flipped byte in the LFS file (sha256) and, separately, in a small one (git sha1).
    for path in ["model.safetensors", "sub/dir/tokenizer.json"] {
        up.state().flip = Some((path.to_string(), 1234));
        let local = Env::new();
        let err = local.fails(&["pull", fake::REPO, "--endpoint", &up.url]);
        assert!(err.contains(path), "{err}");
        assert!(err.contains("sha256") || err.contains("sha1"), "{err}");
        let listed = local.json(&["ls", "--json"]);
        assert!(listed["repos"].as_array().unwrap().is_empty(), "{listed}");
    }
    up.state().flip = None;

    // Cuts mid-file and a 429 with Retry-After: the pull completes, byte-exact.
    up.state().cuts.extend([100_000, 7, 50_000]);
    up.state().canned.push_back(fake::Canned {
        on: "/resolve/",
        status: 429,
        headers: vec![("Retry-After".into(), "1".into())],
        body: b"slow down".to_vec(),
    });
    let local = Env::new();
    let r = pull(&local, &up.url, fake::REPO, &["--jobs", "1"]);
    assert_eq!(r["commit"], fake::COMMIT);
    assert!(r["retries"].as_u64().unwrap() >= 2, "{r}");
    let got = local.stored_files(&format!("{}@main", fake::REPO));
    assert_eq!(got, want);
    local.verifies(&format!("{}@{}", fake::REPO, fake::COMMIT));
}

/// A machine whose index has never seen the stored files (another machine pulled r1)
/// cannot take their chunk lists as they are: it reads them back, each chunk and the
/// sha256 checked, and the revision is byte exact all the same.
#[test]
fn a_fresh_machine_reads_held_files_back_and_stores_them_byte_exact() {
    let (_upstream, _srv, url) = upstream(&[("r1", &["main"]), ("r2", &["v2"])]);
    let first = Env::new();
    pull(&first, &url, &format!("{REPO}@main"), &[]);
    let second = first.sharing();
    let c2 = series().commit("r2");
    let r = pull(&second, &url, &format!("{REPO}@{c2}"), &[]);
    let held = r["files_from_store"].as_u64().unwrap();
    assert!(held >= 2, "{r}");
    let unread = r["files_taken_unread"].as_u64().unwrap();
    let back = r["bytes_read_back"].as_u64().unwrap();
    assert!(unread < held && back > 0, "{r}");
    assert_eq!(stored_files(&second, &c2), expected_files("r2"));
    second.verifies(&format!("{REPO}@{c2}"));
}

#[test]
fn an_interrupted_pull_downloads_only_what_it_had_not_stored() {
    let up = fake::Fake::start();
    // A wrong byte in the tokenizer fails the first pull after the weights were read
    // (largest files first, one at a time).
    up.state().flip = Some(("sub/dir/tokenizer.json".into(), 10));
    let local = Env::new();
    let err = local.fails(&["pull", fake::REPO, "--endpoint", &up.url, "--jobs", "1"]);
    assert!(err.contains("tokenizer.json"), "{err}");
    assert!(local.json(&["ls", "--json"])["repos"]
        .as_array()
        .unwrap()
        .is_empty());
    up.state().flip = None;
    let weights = up.file("model.safetensors").data.len() as u64;
    let resolved = |up: &fake::Fake| {
        up.seen()
            .iter()
            .filter(|s| s.target.contains("/resolve/") && s.target.ends_with("model.safetensors"))
            .count()
    };
    assert_eq!(resolved(&up), 1);

    // The rerun reads the weights back from what the first run stored (the chunk list is
    // the index's record, a cache: read back and checked, never taken unread).
    let r = pull(&local, &up.url, fake::REPO, &["--jobs", "1"]);
    assert_eq!(r["files_from_store"], 1, "{r}");
    assert_eq!(r["files_taken_unread"], 0, "{r}");
    assert_eq!(r["bytes_read_back"], weights, "{r}");
    assert_eq!(r["files_read_back_failed"], 0, "{r}");
    assert_eq!(r["files_downloaded"], 2, "{r}");
    assert!(r["bytes_downloaded"].as_u64().unwrap() < weights, "{r}");
    assert_eq!(resolved(&up), 1);
    local.verifies(&format!("{}@{}", fake::REPO, fake::COMMIT));
}

/// The Xet hashes the manifest of `repo@commit` records, by path (issue 28).
fn recorded_xet(env: &Env, repo: &str, commit: &str) -> BTreeMap<String, String> {
    let key = format!("repos/{repo}/manifests/{commit}");
    let bytes = env.backend().get(&key).unwrap();
    let m = format::manifest::decode(&key, &bytes).unwrap();
    assert_eq!(m.xet_hashes.len(), m.files.len(), "one Xet hash per file");
    m.files
        .iter()
        .zip(&m.xet_hashes)
        .map(|(f, h)| (f.path.clone(), h.hex()))
        .collect()
}

#[test]
fn an_upstream_xet_hash_must_match_and_is_recorded() {
    let up = fake::Fake::start();
    let files = up.state().files.clone();
    let want: BTreeMap<String, String> = files
        .iter()
        .map(|f| (f.path.clone(), xethash::file_hash(&f.data).hex()))
        .collect();
    // Another file's hash listed for the LFS file: the revision is refused, nothing stored.
    let other = want["sub/dir/tokenizer.json"].clone();
    up.state().xet_hashes = vec![("model.safetensors".into(), other)];
    let local = Env::new();
    let err = local.fails(&["pull", fake::REPO, "--endpoint", &up.url]);
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(err.contains("Xet hash"), "{err}");
    let listed = local.json(&["ls", "--json"]);
    assert!(listed["repos"].as_array().unwrap().is_empty(), "{listed}");
    // A listed hash that is not a hash: the listing is refused.
    up.state().xet_hashes = vec![("model.safetensors".into(), "xyz".into())];
    let err = local.fails(&["pull", fake::REPO, "--endpoint", &up.url]);
    assert!(err.contains("xetHash"), "{err}");
    // The right hashes (spelled in upper case for one): stored, and every file's recorded.
    up.state().xet_hashes = want
        .iter()
        .map(|(p, h)| {
            (
                p.clone(),
                if p.ends_with(".json") {
                    h.to_uppercase()
                } else {
                    h.clone()
                },
            )
        })
        .collect();
    pull(&local, &up.url, fake::REPO, &[]);
    assert_eq!(recorded_xet(&local, fake::REPO, fake::COMMIT), want);
    // Without hashes upstream, they are computed all the same.
    up.state().xet_hashes.clear();
    let again = Env::new();
    pull(&again, &up.url, fake::REPO, &[]);
    assert_eq!(recorded_xet(&again, fake::REPO, fake::COMMIT), want);
}

/// Issue 36 point 3: a commit stored under the upstream's sha with a small (non-LFS) file
/// whose content differs at the same length is not the upstream's commit: `pull` refuses
/// it naming the file, sets no ref and changes nothing (before, it compared small files by
/// size only, exited 0, set the ref and served the altered file as the upstream's).
#[test]
fn regression_pull_compares_stored_small_files_by_content() {
    let (_upstream, _srv, url) = upstream(&[("r1", &["main"])]);
    let local = Env::new();
    let c1 = series().commit("r1");
    let altered = local.path("altered");
    let copy = std::process::Command::new("cp")
        .args(["-r"])
        .arg(series().plain("r1"))
        .arg(&altered)
        .status()
        .unwrap();
    assert!(copy.success());
    let config = altered.join("config.json");
    let mut text = std::fs::read(&config).unwrap();
    let at = text
        .iter()
        .position(|b| b.is_ascii_digit())
        .expect("a digit in config.json");
    text[at] = if text[at] == b'9' { b'8' } else { text[at] + 1 };
    std::fs::write(&config, &text).unwrap();
    local.ingest(&altered, &["--repo", REPO, "--revision", &c1]);
    let err = local.fails(&["pull", &format!("{REPO}@main"), "--endpoint", &url]);
    assert!(err.contains("config.json"), "{err}");
    let refs = local.json(&["ls", REPO, "--json"])["refs"].clone();
    assert!(
        refs.get("main").is_none(),
        "a refused pull set main: {refs}"
    );
}

/// A commit pulled in part with small (non-LFS) files, then completed: the stored small
/// files, proved the upstream's by their git blob id, are read back from the store, not
/// downloaded again (before, the full pull compared them and then downloaded them all).
#[test]
fn completing_a_commit_reads_its_stored_small_files_back() {
    let (_upstream, _srv, url) = upstream(&[("r1", &["main"])]);
    let local = Env::new();
    let part = pull(
        &local,
        &url,
        &format!("{REPO}@main"),
        &["--include", "*.json"],
    );
    let small = part["files"].as_u64().unwrap();
    assert!(small > 0);
    let whole = pull(&local, &url, &format!("{REPO}@main"), &[]);
    assert!(
        whole["files_from_store"].as_u64().unwrap() >= small,
        "{whole}"
    );
    assert_eq!(
        whole["files_downloaded"].as_u64().unwrap(),
        whole["files"].as_u64().unwrap() - small,
        "{whole}"
    );
    assert_eq!(stored_files(&local, "main"), expected_files("r1"));
    local.verifies(&format!("{REPO}@main"));
}

/// Another machine's gc deleted the packs of a file this machine's index still records
/// (its revision removed there): the pull plans to read the file back from the store,
/// finds the packs gone, and downloads it instead; the revision is stored byte-exact
/// (failed before the fix: "object not found", the pull refused).
#[test]
fn a_held_file_whose_packs_a_peer_deleted_is_downloaded_instead() {
    let (_upstream, _srv, url) = upstream(&[("r1", &["main"])]);
    let local = Env::new();
    pull(&local, &url, &format!("{REPO}@main"), &[]);
    let c1 = series().commit("r1");
    let peer = local.sharing();
    peer.ok(&["rm", "--force", &format!("{REPO}@{c1}")]);
    for _ in 0..2 {
        peer.json(&["gc", "--json", "--grace", "0s"]);
    }
    assert!(local.packs().is_empty(), "{:?}", local.packs());
    let r = pull(&local, &url, &format!("{REPO}@{c1}"), &[]);
    assert!(r["files_downloaded"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["files_read_back_failed"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(stored_files(&local, &c1), expected_files("r1"));
    local.verifies(&format!("{REPO}@{c1}"));
}

/// The index's record of a file's chunks (a cache, not the truth) says another file's
/// chunks of the same size: a pull must not publish them under the file's sha256. A
/// chunk list from the index is read back and checked, never taken unread; when it lies,
/// the file is downloaded (failed before the fix: r2's shard stored with r1's bytes).
#[test]
fn a_lying_index_record_of_a_file_never_reaches_a_manifest() {
    let (_upstream, _srv, url) = upstream(&[("r1", &["main"]), ("r2", &["v2"])]);
    let local = Env::new();
    let (c1, c2) = (series().commit("r1"), series().commit("r2"));
    pull(&local, &url, &format!("{REPO}@{c1}"), &[]);
    pull(&local, &url, &format!("{REPO}@{c2}"), &[]);
    local.ok(&["rm", "--force", &format!("{REPO}@{c2}")]);
    // r2's third shard has r1's size and other bytes: its record now lists r1's chunks.
    let shard = "model-00003-of-00004.safetensors";
    let store = repo::Store::open(local.backend()).unwrap();
    let repo_id = format::RepoId::parse(REPO).unwrap();
    let m1 = store
        .manifest(&repo_id, &format::CommitId::parse(&c1).unwrap())
        .unwrap();
    let f1 = m1.file(shard).unwrap();
    let r2_sha = format::Sha256::from_hex(&expected_files("r2")[shard]).unwrap();
    assert_ne!(f1.sha256, r2_sha);
    {
        let index = index::Index::open(&local.path("index"), &store.config().store_id).unwrap();
        let lie: Vec<_> = f1.chunks.iter().map(|c| (c.id, c.raw_len)).collect();
        index.remember_file(&r2_sha, &lie).unwrap();
    }
    let r = pull(&local, &url, &format!("{REPO}@{c2}"), &[]);
    assert_eq!(r["files_read_back_failed"], 1, "{r}");
    assert!(r["files_downloaded"].as_u64().unwrap() >= 1, "{r}");
    assert_eq!(stored_files(&local, &c2), expected_files("r2"));
    local.verifies(&format!("{REPO}@{c2}"));
}
