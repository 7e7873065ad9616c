//! Helpers shared by the end-to-end tests: locating the binary, a scratch store per test,
//! the generated model revisions, and hashing.

#![allow(dead_code, reason = "shared by every test binary; each uses a part")]

pub mod gc;
pub mod hub;
pub mod loopfs;
pub mod mount;
pub mod relay;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};
/// The one way the tests wait for something (the `testutil` crate): polls with a short
/// backoff, fails naming what it waited for.
pub use testutil::{poll_until, wait_until};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The `modelcas` binary under test.
pub fn bin() -> PathBuf {
    if let Ok(p) = std::env::var("MODELCAS_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test> → target/<profile>/modelcas
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("modelcas");
    assert!(
        p.exists(),
        "{} not built: run `cargo build --release` first (or set MODELCAS_BIN)",
        p.display()
    );
    p
}

/// The generated four-revision series (16 MiB), made once per test process.
pub struct Series {
    pub dir: PathBuf,
    pub expected: serde_json::Value,
}

impl Series {
    pub fn plain(&self, rev: &str) -> PathBuf {
        self.dir.join("plain").join(rev)
    }
    pub fn hub(&self) -> PathBuf {
        self.dir.join("hub")
    }
    pub fn cache_repo(&self) -> PathBuf {
        self.dir.join("hub/models--demo-org--demo-llm")
    }
    pub fn revision(&self, name: &str) -> &serde_json::Value {
        self.expected["revisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()
    }
    pub fn commit(&self, name: &str) -> String {
        self.revision(name)["commit"].as_str().unwrap().to_string()
    }
    /// path → sha256 of a revision's files.
    pub fn files(&self, name: &str) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self.revision(name)["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap().to_string(),
                    f["sha256"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        v.sort();
        v
    }
    pub fn floor(&self) -> u64 {
        self.expected["unique_bytes_floor"].as_u64().unwrap()
    }
}

/// Ingests r1..r4 of the series from the plain layout into `demo-org/demo-llm`, each with
/// its commit sha and a ref named after it.
pub fn ingest_series(env: &Env) {
    let s = series();
    for r in ["r1", "r2", "r3", "r4"] {
        env.ingest(
            &s.plain(r),
            &[
                "--repo",
                "demo-org/demo-llm",
                "--revision",
                &s.commit(r),
                "--ref",
                r,
            ],
        );
    }
}

/// The Python interpreter with the packages of `scripts/requirements.txt`:
/// `MODELCAS_PYTHON` (set by `scripts/test.sh` to the venv that `scripts/install-deps.sh`
/// makes), else `python3` from PATH.
pub fn python() -> Command {
    Command::new(std::env::var_os("MODELCAS_PYTHON").unwrap_or_else(|| "python3".into()))
}

/// Generates a series with the project's generator into `out`.
pub fn generate(out: &Path, size_mib: u32) {
    let st = python()
        .arg(repo_root().join("bench/gen_revisions.py"))
        .arg(out)
        .args(["--size-mib", &size_mib.to_string()])
        .output()
        .expect("run python3");
    assert!(
        st.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
}

/// The 16 MiB series every test reads, generated once per machine and version of the
/// generator: `$TMPDIR/modelcas-test-series-16-<BLAKE3 of gen_revisions.py>`, made in a
/// scratch directory and renamed into place, so test binaries running at once share one copy
/// and none is left behind per run.
pub fn series() -> &'static Series {
    static S: OnceLock<Series> = OnceLock::new();
    S.get_or_init(|| {
        let script = std::fs::read(repo_root().join("bench/gen_revisions.py")).unwrap();
        let key = blake3::hash(&script).to_hex();
        let dir = std::env::temp_dir().join(format!("modelcas-test-series-16-{}", &key[..16]));
        if !dir.join("expected.json").exists() {
            let scratch = tempfile::Builder::new()
                .prefix("modelcas-series-")
                .tempdir()
                .unwrap();
            generate(scratch.path(), 16);
            // Another test binary may have won the race: then its copy is as good as ours.
            if std::fs::rename(scratch.path(), &dir).is_ok() {
                let _ = scratch.keep();
            }
        }
        let expected =
            serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        Series { dir, expected }
    })
}

/// Which backend the tests run against: the local directory store, or S3 (Garage) when
/// `MODELCAS_TEST_BACKEND=s3` and the settings written by `tests/garage.sh` are in the
/// environment. `.ci/run` runs the whole suite once with each.
pub fn s3_settings() -> Option<S3Settings> {
    if std::env::var("MODELCAS_TEST_BACKEND").ok().as_deref() != Some("s3") {
        return None;
    }
    let var = |k: &str| {
        std::env::var(k)
            .unwrap_or_else(|_| panic!("MODELCAS_TEST_BACKEND=s3 needs {k} (tests/garage.sh)"))
    };
    Some(S3Settings {
        endpoint: var("MODELCAS_TEST_S3_ENDPOINT"),
        bucket: var("MODELCAS_TEST_S3_BUCKET"),
        region: var("MODELCAS_TEST_S3_REGION"),
        key_id: var("MODELCAS_TEST_S3_KEY_ID"),
        secret: var("MODELCAS_TEST_S3_SECRET"),
        ro_key_id: var("MODELCAS_TEST_S3_RO_KEY_ID"),
        ro_secret: var("MODELCAS_TEST_S3_RO_SECRET"),
    })
}

/// How to reach the test bucket.
#[derive(Clone, Debug)]
pub struct S3Settings {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub key_id: String,
    pub secret: String,
    pub ro_key_id: String,
    pub ro_secret: String,
}

/// A scratch store and index for one test, on the backend the suite runs against.
pub struct Env {
    pub tmp: tempfile::TempDir,
    /// `Some` when the store is an S3 prefix.
    pub s3: Option<S3Settings>,
    /// The store location (`--store`).
    pub location: String,
    /// Use the read-only S3 key.
    pub read_only: bool,
}

impl Env {
    /// A new empty environment; the store is created with small chunks (16 KiB average)
    /// and 1 MiB packs so that the 16 MiB series spans many chunks and packs.
    pub fn new() -> Env {
        let env = Env::empty();
        env.ok(&["init", "--chunk-avg", "16384", "--pack-size", "1048576"]);
        env
    }

    /// An environment whose store does not exist yet.
    pub fn empty() -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("modelcas-test-")
            .tempdir()
            .unwrap();
        let s3 = s3_settings();
        let location = match &s3 {
            Some(s) => {
                let name = tmp
                    .path()
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                format!("s3://{}/tests/{name}", s.bucket)
            }
            None => tmp.path().join("store").to_str().unwrap().to_string(),
        };
        Env {
            tmp,
            s3,
            location,
            read_only: false,
        }
    }

    /// Another machine on the same store: its own index, cache and scratch directory.
    pub fn sharing(&self) -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("modelcas-test-peer-")
            .tempdir()
            .unwrap();
        Env {
            tmp,
            s3: self.s3.clone(),
            location: self.location.clone(),
            read_only: false,
        }
    }

    /// The same store, reached with read-only credentials (S3 only).
    pub fn read_only(&self) -> Env {
        let tmp = tempfile::Builder::new()
            .prefix("modelcas-test-ro-")
            .tempdir()
            .unwrap();
        Env {
            tmp,
            s3: self.s3.clone(),
            location: self.location.clone(),
            read_only: true,
        }
    }

    /// Whether the suite runs on S3.
    pub fn is_s3(&self) -> bool {
        self.s3.is_some()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(bin());
        c.env("MODELCAS_STORE", &self.location)
            .env("MODELCAS_INDEX", self.tmp.path().join("index"))
            .env("MODELCAS_FILE_CACHE", self.tmp.path().join("file-cache"))
            .arg("-q");
        if self.location.starts_with("http") {
            // A node reading through hubs: its own chunk cache, no bucket credentials, the
            // node token when the test wrote one.
            c.env("MODELCAS_CACHE_DIR", self.tmp.path().join("chunk-cache"))
                .env_remove("AWS_ACCESS_KEY_ID")
                .env_remove("AWS_SECRET_ACCESS_KEY")
                .env_remove("AWS_PROFILE")
                .env_remove("AWS_SESSION_TOKEN")
                .env("AWS_CONFIG_FILE", "/dev/null")
                .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
            // A dead hub fails a test's read in seconds, not a minute.
            c.env("MODELCAS_HUB_RETRY_FOR", "10s");
            let token = self.tmp.path().join("hub-token");
            if token.exists() {
                c.env("MODELCAS_HUB_TOKEN_FILE", token);
            }
        }
        if let Some(s) = &self.s3 {
            let (id, secret) = if self.read_only {
                (&s.ro_key_id, &s.ro_secret)
            } else {
                (&s.key_id, &s.secret)
            };
            c.env("MODELCAS_CACHE_DIR", self.tmp.path().join("chunk-cache"))
                .env("MODELCAS_ENDPOINT_URL", &s.endpoint)
                .env("MODELCAS_REGION", &s.region)
                .env("AWS_ACCESS_KEY_ID", id)
                .env("AWS_SECRET_ACCESS_KEY", secret)
                .env_remove("AWS_PROFILE")
                .env_remove("AWS_SESSION_TOKEN");
        }
        c
    }

    /// The store's object store, opened directly (to inspect or damage objects).
    pub fn backend(&self) -> std::sync::Arc<dyn objects::ObjectStore> {
        match &self.s3 {
            Some(s) => {
                std::env::set_var("AWS_ACCESS_KEY_ID", &s.key_id);
                std::env::set_var("AWS_SECRET_ACCESS_KEY", &s.secret);
                let opts = objects::S3Options {
                    endpoint: Some(s.endpoint.clone()),
                    region: Some(s.region.clone()),
                    path_style: Some(true),
                };
                std::sync::Arc::new(objects::S3Store::new(&self.location, &opts).unwrap())
            }
            None => std::sync::Arc::new(objects::LocalStore::new(&self.location)),
        }
    }

    /// Keys and sizes of every pack.
    pub fn packs(&self) -> Vec<(String, u64)> {
        self.backend()
            .list("packs/")
            .unwrap()
            .into_iter()
            .map(|o| (o.key, o.size))
            .collect()
    }

    /// Replaces an object's bytes with `f(bytes)`.
    pub fn rewrite(&self, key: &str, f: impl FnOnce(&mut Vec<u8>)) {
        let b = self.backend();
        let mut bytes = b.get(key).unwrap();
        f(&mut bytes);
        b.put(key, &bytes).unwrap();
    }

    /// Whether anything exists at the store location.
    pub fn store_exists(&self) -> bool {
        !self.backend().list("").unwrap().is_empty()
    }

    pub fn run<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        self.cmd().args(args).output().expect("run modelcas")
    }

    /// Runs and asserts success; returns stdout.
    pub fn ok<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> String {
        let out = self.run(args);
        let shown: Vec<_> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        assert!(
            out.status.success(),
            "modelcas {:?} failed ({}):\nstdout: {}\nstderr: {}",
            shown,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs and asserts failure; returns stderr.
    pub fn fails<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> String {
        let out = self.run(args);
        let shown: Vec<_> = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy().into_owned())
            .collect();
        assert!(
            !out.status.success(),
            "modelcas {shown:?} should have failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    pub fn json<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).expect("json output")
    }

    /// Asserts that `modelcas verify REV` passes.
    pub fn verifies(&self, rev: &str) {
        let v = self.json(&["verify", rev, "--json"]);
        assert_eq!(v["ok"], true, "{rev}: {v}");
    }

    /// Every object's key and size, locks and leases aside (to compare a store before and
    /// after a command).
    pub fn objects(&self) -> Vec<String> {
        self.backend()
            .list("")
            .unwrap()
            .into_iter()
            .filter(|o| !o.key.starts_with("locks/"))
            .map(|o| format!("{} {}", o.key, o.size))
            .collect()
    }

    /// path → sha256 of every file of a stored revision `ORG/NAME@REV` (`ls --json`).
    pub fn stored_files(&self, repo_rev: &str) -> std::collections::BTreeMap<String, String> {
        let v = self.json(&["ls", repo_rev, "--json"]);
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let s = |k: &str| f[k].as_str().unwrap().to_string();
                (s("path"), s("sha256"))
            })
            .collect()
    }

    /// `modelcas ingest DIR ARGS...`, asserting success; returns stdout.
    pub fn ingest(&self, dir: &Path, args: &[&str]) -> String {
        let mut all: Vec<std::ffi::OsString> = vec!["ingest".into(), dir.into()];
        all.extend(args.iter().map(|a| a.into()));
        self.ok(&all)
    }

    /// `modelcas ingest DIR ARGS... --json`, asserting success.
    pub fn ingest_json(&self, dir: &Path, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(&self.ingest(dir, &all)).expect("json output")
    }
}

/// `127.0.0.1:<a port free right now>` for a server a test starts.
pub fn local_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

pub fn sha256_bytes(b: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b);
    hex::encode(h.finalize())
}

pub fn sha256_file(p: &Path) -> String {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(p).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    hex::encode(h.finalize())
}

/// path → sha256 of every regular file under `dir`; panics on a symlink.
pub fn tree_hashes(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, d: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            assert!(
                !ft.is_symlink(),
                "symlink in checkout: {}",
                e.path().display()
            );
            if ft.is_dir() {
                walk(root, &e.path(), out);
            } else {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string();
                out.push((rel, sha256_file(&e.path())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Spawns `cmd` with the pause point `point` armed (`repo/src/failpoint.rs`) and returns
/// once the process waits there; panics (with its stderr) if it exits first. Its stdout and
/// stderr are piped.
pub fn spawn_paused(cmd: &mut Command, point: &str, dir: &Path) -> std::process::Child {
    use std::io::Read;
    std::fs::create_dir_all(dir).unwrap();
    let _ = std::fs::remove_file(dir.join(format!("{point}.go")));
    let _ = std::fs::remove_file(dir.join(format!("{point}.reached")));
    let mut child = cmd
        .env("MODELCAS_PAUSE_AT", point)
        .env("MODELCAS_PAUSE_DIR", dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let reached = dir.join(format!("{point}.reached"));
    wait_until(
        format_args!("the pause point {point} to be reached"),
        std::time::Duration::from_secs(300),
        || {
            if reached.exists() {
                return Some(());
            }
            if let Some(st) = child.try_wait().unwrap() {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("exited ({st}) before {point}: {err}");
            }
            None
        },
    );
    child
}

/// Lets a process paused at `point` (see [`spawn_paused`]) go on.
pub fn go_on(dir: &Path, point: &str) {
    std::fs::write(dir.join(format!("{point}.go")), b"").unwrap();
}

/// Asserts `fsck` (with `--read-data` when asked) finds no problem.
pub fn fsck_clean(env: &Env, read_data: bool) {
    let mut args = vec!["fsck", "--json", "--grace", "0s"];
    if read_data {
        args.push("--read-data");
    }
    let out = env.run(&args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(
        out.status.success() && report["problem_count"] == 0,
        "fsck found problems: {report:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Ingests revision `r` of the series as `demo-org/demo-llm` under its commit sha, with
/// `refs` pointing at it.
pub fn ingest_rev(env: &Env, r: &str, refs: &[&str]) {
    let s = series();
    let commit = s.commit(r);
    let mut args = vec!["--repo", "demo-org/demo-llm", "--revision", commit.as_str()];
    for name in refs {
        args.extend(["--ref", name]);
    }
    env.ingest(&s.plain(r), &args);
}

pub struct Served {
    pub child: std::process::Child,
    pub addr: String,
    pub log: PathBuf,
}

impl Served {
    pub fn start(env: &Env, extra: &[&str]) -> Served {
        Served::start_with(env, extra, &[])
    }

    /// With environment variables set (settings today's code ignores, so a test of them
    /// fails on its assertions rather than on an unknown flag).
    pub fn start_with(env: &Env, extra: &[&str], vars: &[(&str, &str)]) -> Served {
        Served::start_at(env, &local_addr(), extra, vars)
    }

    /// On `addr` (a server started again where its clients know it).
    pub fn start_at(env: &Env, addr: &str, extra: &[&str], vars: &[(&str, &str)]) -> Served {
        let addr = addr.to_string();
        let port = addr.rsplit(':').next().unwrap().to_string();
        let log = env.path(&format!("serve-{port}.log"));
        let child = env
            .cmd()
            .args(["serve", "--listen", &addr])
            .args(extra)
            .envs(vars.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        wait_until(
            std::fmt::from_fn(|f| {
                let log = std::fs::read_to_string(&log).unwrap();
                write!(f, "serve to come up on {addr}; its log:\n{log}")
            }),
            std::time::Duration::from_secs(20),
            || std::net::TcpStream::connect(&addr).ok(),
        );
        Served { child, addr, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
