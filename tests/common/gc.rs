//! Helpers of the gc tests (tests/gc.rs, tests/gc_races.rs): running gc, pausing commands
//! at their pause points, and reading back what a revision lists and holds.

use std::path::Path;
use std::process::Child;

use format::{CommitId, RepoId};

use repo::Store;

use super::Env;

/// The repository the series is ingested as.
pub const REPO: &str = "demo-org/demo-llm";

/// A gc that expires every revision without a ref or pin at once and rewrites every pack
/// holding anything it drops.
pub const GC_REWRITING_ALL: [&str; 7] = [
    "gc",
    "--keep-last",
    "0",
    "--grace",
    "0s",
    "--rewrite-below",
    "1",
];

/// `REPO@r`.
pub fn rev(r: &str) -> String {
    format!("{REPO}@{r}")
}

/// gc with a short grace period, as JSON.
pub fn gc(env: &Env, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["gc", "--json", "--grace", "0s"];
    args.extend_from_slice(extra);
    env.json(&args)
}

/// A new store and a directory for pause points.
pub fn env_with_pause() -> (Env, std::path::PathBuf) {
    let env = Env::new();
    let pause = env.path("pause");
    std::fs::create_dir_all(&pause).unwrap();
    (env, pause)
}

/// `verify` of revision `r` of the test repository succeeds.
pub fn verifies(env: &Env, r: &str) {
    env.verifies(&rev(r));
}

/// Starts modelcas with `args`, pausing at `point` ([`super::spawn_paused`]); returns once
/// it is there.
pub fn paused(env: &Env, args: &[&str], point: &str, dir: &Path) -> Child {
    super::spawn_paused(env.cmd().args(args), point, dir)
}

/// `ingest` of revision `r` of the series under its commit sha with the ref `r`, paused at
/// `point`.
pub fn paused_ingest(env: &Env, r: &str, point: &str, dir: &Path) -> Child {
    let s = super::series();
    let plain = s.plain(r);
    let commit = s.commit(r);
    let args = [
        "ingest",
        plain.to_str().unwrap(),
        "--repo",
        REPO,
        "--revision",
        &commit,
        "--ref",
        r,
    ];
    paused(env, &args, point, dir)
}

/// Lets a paused process go on and asserts it succeeds.
pub fn release(child: Child, point: &str, dir: &Path) {
    std::fs::write(dir.join(format!("{point}.go")), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "paused process failed after {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The manifest of `commit` of the test repository, read from the store.
pub fn manifest_of(env: &Env, commit: &str) -> format::manifest::Manifest {
    Store::open(env.backend())
        .unwrap()
        .manifest(
            &RepoId::parse(REPO).unwrap(),
            &CommitId::parse(commit).unwrap(),
        )
        .unwrap()
}

/// Path → sha256 of the files a manifest lists.
pub fn listed_files(env: &Env, commit: &str) -> Vec<(String, String)> {
    let m = manifest_of(env, commit);
    let mut v: Vec<_> = m
        .files
        .iter()
        .map(|f| (f.path.clone(), f.sha256_hex()))
        .collect();
    v.sort();
    v
}

/// Every file of `commit` read back with `cat` hashes to `want`.
pub fn cats_exactly(env: &Env, commit: &str, want: &[(String, String)]) {
    for (path, sha) in want {
        let out = env
            .cmd()
            .args(["cat", &rev(commit), path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cat {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&out.stdout));
        assert_eq!(&got, sha, "cat {path}");
    }
}

/// Lets a paused process go on and returns its output, whatever its exit status.
pub fn resume(child: Child, point: &str, dir: &Path) -> std::process::Output {
    std::fs::write(dir.join(format!("{point}.go")), b"").unwrap();
    child.wait_with_output().unwrap()
}

/// The commits `ls` shows for the test repository.
pub fn listed_commits(env: &Env) -> Vec<String> {
    let listed = env.json(&["ls", REPO, "--json"]);
    listed["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap_or_default().to_string())
        .collect()
}
