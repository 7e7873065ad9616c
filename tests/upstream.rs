//! `modelcas serve --upstream URL` (issue 14): a pull-through mirror. The upstream is a
//! second `modelcas serve` (A) on a store with revisions of the generated series; the
//! mirror serves an empty store. Outcomes checked: bytes (sha256 of every file), what A
//! served (its access log and metrics), what the mirror stored, hit or miss.

use crate::common;
use crate::fake;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{ingest_rev, poll_until, series, wait_until, Env, Served};

const REPO: &str = "demo-org/demo-llm";

/// A plain HTTP/1.0 GET: (status, head, body).
fn get(addr: &str, path: &str, headers: &[&str]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, out[split + 4..].to_vec())
}

fn sha256(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(data))
}

fn expected(r: &str) -> BTreeMap<String, String> {
    series().files(r).into_iter().collect()
}

/// Every file of `rev` (a sha or ref) through plain GETs: path → sha256.
fn get_all(addr: &str, rev: &str, files: &[String]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|f| {
            let (status, head, body) = get(addr, &format!("/{REPO}/resolve/{rev}/{f}"), &[]);
            assert_eq!(status, 200, "{f}: {head}");
            (f.clone(), sha256(&body))
        })
        .collect()
}

/// `snapshot_download` of `rev` with the real `huggingface_hub` client into a fresh
/// cache under `work`: path → sha256, and the commit (the snapshot folder's name).
fn snapshot(addr: &str, work: &std::path::Path, rev: &str) -> (BTreeMap<String, String>, String) {
    let script = r#"
import hashlib, json, os, sys
os.environ["HF_ENDPOINT"] = sys.argv[1]
os.environ["HF_HUB_CACHE"] = sys.argv[2]
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
from huggingface_hub import snapshot_download
p = snapshot_download(sys.argv[3], revision=sys.argv[4])
out = {}
for d, _, files in os.walk(p):
    for n in files:
        f = os.path.join(d, n)
        out[os.path.relpath(f, p)] = hashlib.sha256(open(f, "rb").read()).hexdigest()
print(json.dumps({"files": out, "commit": os.path.basename(p)}))
"#;
    std::fs::create_dir_all(work).unwrap();
    let mut child = common::python()
        .args(["-c", script, &format!("http://{addr}")])
        .arg(work)
        .args([REPO, rev])
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
        .env("HF_HUB_DISABLE_XET", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if poll_until(Duration::from_secs(180), || child.try_wait().unwrap()).is_none() {
        let _ = child.kill();
        panic!("snapshot_download did not finish in 180 s");
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = v["files"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    (files, v["commit"].as_str().unwrap().to_string())
}

/// File GETs that A served, by file (its access log).
fn served_files(a: &Served) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for l in a.log().lines() {
        if !(l.contains("access repo=") && l.contains("method=GET")) {
            continue;
        }
        let file = l
            .split(" file=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .to_string();
        *out.entry(file).or_insert(0) += 1;
    }
    out
}

/// The sum of a metric's samples.
fn metric(addr: &str, name: &str) -> f64 {
    let (status, _, body) = get(addr, "/metrics", &[]);
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .filter(|l| l.starts_with(name))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// A (the upstream) with r1 as `main` and r2 under its own name.
fn upstream(extra: &[&str]) -> (Env, Served) {
    let env = Env::new();
    ingest_rev(&env, "r1", &["main"]);
    ingest_rev(&env, "r2", &["r2"]);
    let srv = Served::start(&env, extra);
    (env, srv)
}

fn mirror(env: &Env, a: &Served, extra: &[&str]) -> Served {
    let url = format!("http://{}", a.addr);
    let mut args = vec!["--upstream", url.as_str()];
    args.extend_from_slice(extra);
    Served::start(env, &args)
}

#[test]
fn snapshot_download_through_the_mirror_pulls_once_then_hits() {
    let (_a_env, a) = upstream(&[]);
    let m_env = Env::new();
    let m = mirror(&m_env, &a, &[]);
    let c1 = series().commit("r1");

    let (files, commit) = snapshot(&m.addr, &m_env.path("client1"), "main");
    assert_eq!(files, expected("r1"));
    assert_eq!(commit, c1);
    // The mirror's store now has the commit, and its main.
    let ls = m_env.json(&["ls", REPO, "--json"]);
    assert!(ls.to_string().contains(&c1), "{ls}");
    assert_eq!(ls["refs"]["main"], c1.as_str());
    let once: BTreeMap<String, usize> = expected("r1").into_keys().map(|f| (f, 1)).collect();
    assert_eq!(served_files(&a), once, "A's downloads:\n{}", a.log());
    let log = m.log();
    assert_eq!(log.matches("cache=miss").count(), 1, "{log}");
    assert!(metric(&m.addr, "modelcas_serve_upstream_bytes_total") > 1e6);

    // Again, into another cache: byte-exact, every download a hit, nothing new from A,
    // not even a question (within the TTL for `main`; never for a stored sha).
    let asked = |a: &Served| {
        metric(
            &a.addr,
            "modelcas_serve_requests_total{endpoint=\"revision\"",
        )
    };
    let questions = asked(&a);
    let (files, _) = snapshot(&m.addr, &m_env.path("client2"), "main");
    let (status, _, _) = get(&m.addr, &format!("/api/models/{REPO}/revision/{c1}"), &[]);
    assert_eq!(status, 200);
    assert_eq!(asked(&a), questions);
    assert_eq!(files, expected("r1"));
    assert_eq!(served_files(&a), once);
    let log = m.log();
    assert_eq!(log.matches("cache=miss").count(), 1, "{log}");
    let hits = log
        .lines()
        .filter(|l| l.contains("method=GET") && l.contains("cache=hit"))
        .count();
    assert!(hits >= 2 * expected("r1").len(), "{log}");
}

#[test]
fn eight_clients_at_once_cause_one_upstream_transfer() {
    let (_a_env, a) = upstream(&[]);
    let m_env = Env::new();
    let m = mirror(&m_env, &a, &["--upstream-jobs", "2"]);
    let c2 = series().commit("r2");
    let want = expected("r2");
    let names: Vec<String> = want.keys().cloned().collect();
    let gate = Arc::new(Barrier::new(8));
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let (gate, addr, names) = (gate.clone(), m.addr.clone(), names.clone());
            // Half by sha, half by ref name.
            let rev = if i % 2 == 0 { c2.clone() } else { "r2".into() };
            std::thread::spawn(move || {
                gate.wait();
                get_all(&addr, &rev, &names)
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), want);
    }
    let once: BTreeMap<String, usize> = names.iter().map(|f| (f.clone(), 1)).collect();
    assert_eq!(served_files(&a), once, "A's downloads:\n{}", a.log());
    assert_eq!(m.log().matches("pulled from").count(), 1, "{}", m.log());
    assert_eq!(metric(&m.addr, "modelcas_serve_upstream_pulls_total"), 1.0);
}

#[test]
fn repositories_outside_the_allow_list_get_403_and_are_never_fetched() {
    let (_a_env, a) = upstream(&[]);
    let m_env = Env::new();
    let m = mirror(&m_env, &a, &["--allow", "demo-org/*"]);
    let before = metric(&a.addr, "modelcas_serve_requests_total");
    for path in [
        "/api/models/other/x/revision/main",
        "/other/x/resolve/main/config.json",
        "/api/models/other/x/tree/main",
    ] {
        let (status, head, _) = get(&m.addr, path, &[]);
        assert_eq!(status, 403, "{path}: {head}");
        assert!(head.contains("X-Error-Code: RepoNotAllowed"), "{head}");
        assert!(head.contains("X-Error-Message: "), "{head}");
    }
    // A saw nothing (its /metrics reads are not counted as requests of other endpoints).
    let after = metric(&a.addr, "modelcas_serve_requests_total");
    assert_eq!(after - before, 1.0, "only the first /metrics read");
    assert!(!a.log().contains("other/x"));
    // An allowed repository is pulled.
    let (status, _, body) = get(&m.addr, &format!("/api/models/{REPO}/revision/main"), &[]);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains(&series().commit("r1")));
}

#[test]
fn a_lock_pins_main_whatever_the_upstream_says() {
    let a_env = Env::new();
    ingest_rev(&a_env, "r1", &["r1"]);
    ingest_rev(&a_env, "r2", &["main"]);
    let a = Served::start(&a_env, &[]);
    let m_env = Env::new();
    let c1 = series().commit("r1");
    let config = m_env.path("config.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nupstream = \"http://{}\"\n[serve.locks]\n\"{REPO}\" = \"{c1}\"\n",
            a.addr
        ),
    )
    .unwrap();
    let cfg = config.to_str().unwrap();
    let m = Served::start(&m_env, &["--config", cfg]);
    let (files, commit) = snapshot(&m.addr, &m_env.path("client"), "main");
    assert_eq!(commit, c1);
    assert_eq!(files, expected("r1"));
    let (_, _, body) = get(
        &m.addr,
        &format!("/api/models/{REPO}/revision/anything"),
        &[],
    );
    assert!(String::from_utf8_lossy(&body).contains(&c1));
    // A's main (r2) was never downloaded: every file A served was r1's.
    let c2 = series().commit("r2");
    let log = a.log();
    let gets: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("access repo=") && l.contains("method=GET"))
        .collect();
    assert_eq!(gets.len(), expected("r1").len(), "{log}");
    assert!(
        gets.iter().all(|l| l.contains(&format!("revision={c1}"))),
        "{log}"
    );
    assert!(!log.contains(&c2), "{log}");
    drop(m);

    // A bad lock is refused at startup, naming the entry.
    std::fs::write(&config, "[serve.locks]\n\"demo-org/demo-llm\" = \"main\"\n").unwrap();
    let err = m_env.fails(&["--config", cfg, "serve", "--listen", "127.0.0.1:0"]);
    assert!(
        err.contains("[serve.locks]") && err.contains("demo-org/demo-llm"),
        "{err}"
    );
    std::fs::write(&config, format!("[serve.locks]\n\"no-slash\" = \"{c1}\"\n")).unwrap();
    let err = m_env.fails(&["--config", cfg, "serve", "--listen", "127.0.0.1:0"]);
    assert!(err.contains("no-slash"), "{err}");
}

/// Issue 39 (docs/design/release-check.md §6): a locked commit the mirror fetches later
/// and that fails its release check answers 403 `ReleaseCheckFailed`, naming the lock and
/// the problems (the bytes stay stored); with `--force` it is served, its verdict in
/// `model_info`.
#[test]
fn a_locked_commit_the_mirror_fetches_that_fails_its_check_is_refused_unless_forced() {
    use crate::serve::{broken_dir, BROKEN, BROKEN_COMMIT};
    let a_env = Env::new();
    a_env.ingest(
        &broken_dir(&a_env),
        &[
            "--repo",
            BROKEN,
            "--revision",
            BROKEN_COMMIT,
            "--ref",
            "main",
        ],
    );
    let a = Served::start(&a_env, &[]);
    for force in [false, true] {
        let m_env = Env::new();
        let config = m_env.path("config.toml");
        let lock = format!("[serve.locks]\n\"{BROKEN}\" = \"{BROKEN_COMMIT}\"\n");
        std::fs::write(&config, lock).unwrap();
        let mut extra = vec!["--config", config.to_str().unwrap()];
        if force {
            extra.push("--force");
        }
        // Not stored at start: serve starts either way.
        let m = mirror(&m_env, &a, &extra);
        let info = format!("/api/models/{BROKEN}/revision/main");
        let (status, head, body) = get(&m.addr, &info, &[]);
        let body = String::from_utf8_lossy(&body);
        if force {
            assert_eq!(status, 200, "{head}\n{body}\n{}", m.log());
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["sha"], BROKEN_COMMIT);
            assert_eq!(v["modelcas"]["check"]["verdict"], "failed", "{v}");
            continue;
        }
        assert_eq!(status, 403, "{head}\n{body}\n{}", m.log());
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("x-error-code: releasecheckfailed"), "{head}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let msg = v["error"].as_str().unwrap();
        assert!(
            msg.contains(&format!("{BROKEN} is locked to {BROKEN_COMMIT}"))
                && msg.contains("model.safetensors: ")
                && msg.contains("--force"),
            "{msg}"
        );
        assert_eq!(v["check"]["verdict"], "failed", "{v}");
        // Files too, and the bytes were stored (a later --force serves them).
        let file = format!("/{BROKEN}/resolve/main/config.json");
        assert_eq!(get(&m.addr, &file, &[]).0, 403);
        m_env.ok(&["ls", &format!("{BROKEN}@{BROKEN_COMMIT}")]);
    }
}

#[test]
fn with_the_upstream_down_what_is_stored_is_still_served() {
    let (a_env, a) = upstream(&[]);
    let m_env = Env::new();
    let url = format!("http://{}", a.addr);
    let m = mirror(&m_env, &a, &["--upstream-ttl", "0s"]);
    let c1 = series().commit("r1");
    let want = expected("r1");
    let names: Vec<String> = want.keys().cloned().collect();
    assert_eq!(get_all(&m.addr, "main", &names), want);
    drop(a);
    drop(a_env);

    // Stored: by ref (every request asks the upstream: TTL 0) and by sha.
    let t = Instant::now();
    assert_eq!(get_all(&m.addr, "main", &names), want);
    assert_eq!(get_all(&m.addr, &c1, &names), want);
    let (status, _, body) = get(&m.addr, &format!("/api/models/{REPO}/revision/main"), &[]);
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains(&c1));
    // Missing: a clear error naming the upstream, not a hang.
    let c2 = series().commit("r2");
    for rev in [c2.as_str(), "r2"] {
        let (status, head, _) = get(&m.addr, &format!("/api/models/{REPO}/revision/{rev}"), &[]);
        assert_eq!(status, 502, "{head}");
        assert!(
            head.contains(&format!("X-Error-Message: upstream {url}")),
            "{head}"
        );
    }
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    // The failure is logged once per distinct error, not per request.
    let warnings = m.log().matches("warning: upstream").count();
    assert!((1..=4).contains(&warnings), "{}", m.log());
    assert!(metric(&m.addr, "modelcas_serve_upstream_errors_total") >= 2.0);
}

#[test]
fn the_upstream_token_stays_on_the_mirror() {
    let a_tokens = Env::new();
    let tokens = a_tokens.path("tokens");
    std::fs::write(&tokens, "upstream-secret\n").unwrap();
    let (_a_env, a) = upstream(&["--token-file", tokens.to_str().unwrap()]);
    let want = expected("r1");
    let names: Vec<String> = want.keys().cloned().collect();

    // Without the token the mirror cannot pull: an error, nothing stored.
    let m_env = Env::new();
    let m = mirror(&m_env, &a, &[]);
    let (status, head, _) = get(&m.addr, &format!("/{REPO}/resolve/main/config.json"), &[]);
    assert_eq!(status, 502, "{head}");
    drop(m);

    let token_file = m_env.path("upstream-token");
    std::fs::write(&token_file, "# for A\nupstream-secret\n").unwrap();
    let m = mirror(
        &m_env,
        &a,
        &["--upstream-token-file", token_file.to_str().unwrap()],
    );
    // Clients send no token.
    assert_eq!(get_all(&m.addr, "main", &names), want);
    assert!(!m.log().contains("upstream-secret"));
    assert_eq!(served_files(&a).len(), names.len());
}

#[test]
fn a_moved_branch_is_followed_after_the_ttl() {
    let (a_env, a) = upstream(&[]);
    let m_env = Env::new();
    let ttl = Duration::from_secs(3);
    let m = mirror(&m_env, &a, &["--upstream-ttl", "3s"]);
    let (c1, c2) = (series().commit("r1"), series().commit("r2"));
    let info = |rev: &str| {
        let (status, _, body) = get(&m.addr, &format!("/api/models/{REPO}/revision/{rev}"), &[]);
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        v["sha"].as_str().unwrap_or_default().to_string()
    };
    // Pull r1 by its commit first (no ref resolved), so that the TTL's clock starts at the
    // resolution below and not before a pull of unknown length: the TTL counts from the
    // upstream's answer, and on a slow machine the pull alone outlasted it.
    assert_eq!(info(&c1), c1);
    let t = Instant::now();
    assert_eq!(info("main"), c1);
    a_env.ok(&["ref", REPO, "main", &c2]);
    // Within the TTL the mirror does not ask again.
    assert_eq!(info("main"), c1);
    assert!(t.elapsed() < ttl, "too slow to test the TTL");
    std::thread::sleep(ttl - t.elapsed() + Duration::from_millis(200));
    assert_eq!(info("main"), c2);
    let names: Vec<String> = expected("r2").into_keys().collect();
    assert_eq!(get_all(&m.addr, "main", &names), expected("r2"));
    // The mirror's store follows (its main answers if A goes away).
    let refs = m_env.json(&["ls", REPO, "--json"])["refs"].clone();
    assert_eq!(refs["main"], c2.as_str());
}

#[test]
fn a_pull_held_up_upstream_does_not_hold_up_another_revision() {
    // The fake upstream serves the same files as org/model and org/other; downloads of
    // org/model wait at a gate until the end of the test.
    let up = fake::Fake::start();
    let gate = Arc::new(fake::Gate::default());
    up.state().also_repos = vec!["org/other".into()];
    up.state().hold = Some(("/org/model/resolve/".into(), gate.clone()));
    let env = Env::new();
    let m = Served::start(&env, &["--upstream", &up.url]);
    let config = up.file("config.json");

    let held = {
        let addr = m.addr.clone();
        std::thread::spawn(move || get(&addr, "/org/model/resolve/main/config.json", &[]))
    };
    // Wait until the mirror's pull of org/model is stuck at the gate.
    wait_until(
        "the pull of org/model to start",
        Duration::from_secs(30),
        || {
            up.seen()
                .iter()
                .any(|s| s.target.contains("/org/model/resolve/"))
                .then_some(())
        },
    );
    // Another repository is pulled and served meanwhile.
    let (status, head, body) = get(&m.addr, "/org/other/resolve/main/config.json", &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, config.data);
    assert!(!held.is_finished());

    gate.open();
    let (status, head, body) = held.join().unwrap();
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, config.data);
}

/// `GET /api/models/{repo}/revision/{rev}` of `addr`: the status, and the `sha` answered
/// (the response head when it is not a 200).
fn revision_sha(addr: &str, repo: &str, rev: &str) -> (u16, String) {
    let (status, head, body) = get(addr, &format!("/api/models/{repo}/revision/{rev}"), &[]);
    if status != 200 {
        return (status, head);
    }
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    (status, v["sha"].as_str().unwrap_or_default().to_string())
}

/// The repositories (`org/name` as spelled in the keys) with an object in the store.
fn stored_repos(env: &Env) -> std::collections::BTreeSet<String> {
    env.objects()
        .iter()
        .filter_map(|o| o.strip_prefix("repos/"))
        .map(|k| k.split('/').take(2).collect::<Vec<_>>().join("/"))
        .collect()
}

/// r1 of the series ingested here as `repo`, with `main`.
fn ingest_r1_as(env: &Env, repo: &str) -> String {
    let c1 = series().commit("r1");
    env.ingest(
        &series().plain("r1"),
        &["--repo", repo, "--revision", &c1, "--ref", "main"],
    );
    c1
}

/// Issue 26, point 3: a lock holds whatever the request spells: the repository in any
/// case, the revision as any ref name, the locked sha in any case or a prefix of it.
/// Another commit, by full sha or prefix, is refused (403 naming the lock) and nothing is
/// asked of the upstream or stored under another spelling.
#[test]
fn a_lock_holds_by_every_name_sha_and_case_and_nothing_else_is_fetched() {
    let up = fake::Fake::start();
    let env = Env::new();
    let c1 = ingest_r1_as(&env, "org/model");
    let config = env.path("config.toml");
    let text = format!(
        "[serve]\nupstream = \"{}\"\n[serve.locks]\n\"Org/Model\" = \"{c1}\"\n",
        up.url
    );
    std::fs::write(&config, text).unwrap();
    let m = Served::start(&env, &["--config", config.to_str().unwrap()]);
    let upper = c1.to_uppercase();
    for (repo, rev) in [
        ("org/model", "main"),
        ("org/MODEL", "main"),
        ("ORG/Model", "refs%2Fpr%2F1"),
        ("org/model", &c1[..10]),
        ("Org/model", upper.as_str()),
        ("org/model", c1.as_str()),
    ] {
        assert_eq!(
            revision_sha(&m.addr, repo, rev),
            (200, c1.clone()),
            "{repo}@{rev}"
        );
    }
    let other = fake::COMMIT;
    for (repo, rev) in [
        ("org/model", other),
        ("org/MODEL", other),
        ("org/model", &other[..12]),
    ] {
        let (status, head) = revision_sha(&m.addr, repo, rev);
        assert_eq!(status, 403, "{repo}@{rev}: {head}");
        assert!(head.contains(&c1) && head.contains("lock"), "{head}");
    }
    let (status, head, _) = get(
        &m.addr,
        &format!("/org/MODEL/resolve/{other}/config.json"),
        &[],
    );
    assert_eq!(status, 403, "{head}");
    assert!(
        up.seen().is_empty(),
        "the upstream was asked: {:?}",
        up.seen()
    );
    assert_eq!(stored_repos(&env), ["org/model".to_string()].into());
    let refs = env.json(&["ls", "org/model", "--json"])["refs"].clone();
    assert_eq!(refs, serde_json::json!({ "main": c1 }));
}

/// Issue 26, point 3: repository ids are compared as the Hub compares them (without
/// ASCII case): in `--allow`, in the store (one repository whatever the request's case:
/// pulled once) and in gc's reading of `[serve.locks]`.
#[test]
fn names_are_compared_without_case_in_the_allow_list_the_store_and_gc() {
    let up = fake::Fake::start();
    let env = Env::new();
    let m = Served::start(&env, &["--upstream", &up.url, "--allow", "Org/*"]);
    let config = up.file("config.json");
    for repo in ["org/model", "ORG/Model", "org/MODEL"] {
        let (status, head, body) = get(&m.addr, &format!("/{repo}/resolve/main/config.json"), &[]);
        assert_eq!(status, 200, "{repo}: {head}");
        assert_eq!(body, config.data, "{repo}");
    }
    let trees = up
        .seen()
        .iter()
        .filter(|s| s.target.contains("/tree/"))
        .count();
    assert_eq!(trees, 1, "pulled more than once: {:?}", up.seen());
    assert_eq!(stored_repos(&env), ["org/model".to_string()].into());
    drop(m);

    // gc: a lock spelled in another case protects its commit like a pin.
    let env = Env::new();
    ingest_rev(&env, "r1", &["main"]);
    ingest_rev(&env, "r2", &["main"]);
    let c1 = series().commit("r1");
    let cfg = env.path("config.toml");
    std::fs::write(
        &cfg,
        format!("[serve.locks]\n\"Demo-Org/Demo-LLM\" = \"{c1}\"\n"),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    env.ok(&["--config", cfg, "gc", "--grace", "0s", "--keep-last", "1"]);
    let listed = env.json(&["ls", REPO, "--json"]).to_string();
    assert!(
        listed.contains(&c1),
        "the locked commit was expired: {listed}"
    );
    env.verifies(&format!("{REPO}@{c1}"));
}

/// Issue 26, point 4: a repository that exists only here (ingested inside) is never
/// looked up upstream, though the upstream has a repository of that name: its `main` is
/// served from the store and not moved, other revisions are not found, and the upstream
/// hears nothing of it. With `upstream_repos` matching it, the mirror brings what the
/// store lacks, but still never moves a ref set inside.
#[test]
fn a_repository_ingested_here_is_never_taken_from_the_upstream() {
    let up = fake::Fake::start();
    up.state().also_repos = vec!["acme/internal".into()];
    let env = Env::new();
    let c1 = ingest_r1_as(&env, "acme/internal");
    let m = Served::start(&env, &["--upstream", &up.url, "--upstream-ttl", "0s"]);
    assert_eq!(
        revision_sha(&m.addr, "acme/internal", "main"),
        (200, c1.clone())
    );
    for (f, sha) in expected("r1") {
        let (status, head, body) = get(&m.addr, &format!("/acme/internal/resolve/main/{f}"), &[]);
        assert_eq!(status, 200, "{f}: {head}");
        assert_eq!(sha256(&body), sha, "{f}");
    }
    for rev in ["dev", fake::COMMIT, "refs%2Fpr%2F1"] {
        let (status, head) = revision_sha(&m.addr, "Acme/Internal", rev);
        assert_eq!(status, 404, "{rev}: {head}");
    }
    let asked: Vec<_> = up
        .seen()
        .into_iter()
        .filter(|s| s.target.to_ascii_lowercase().contains("acme"))
        .collect();
    assert!(asked.is_empty(), "the upstream was asked: {asked:?}");
    let refs = env.json(&["ls", "acme/internal", "--json"])["refs"].clone();
    assert_eq!(refs, serde_json::json!({ "main": c1 }));
    drop(m);

    let cfg = env.path("config.toml");
    let text = format!(
        "[serve]\nupstream = \"{}\"\nupstream_ttl = \"0s\"\nupstream_repos = [\"acme/*\"]\n",
        up.url
    );
    std::fs::write(&cfg, text).unwrap();
    let m = Served::start(&env, &["--config", cfg.to_str().unwrap()]);
    assert_eq!(
        revision_sha(&m.addr, "acme/internal", "main"),
        (200, c1.clone())
    );
    assert_eq!(
        revision_sha(&m.addr, "acme/internal", "refs%2Fpr%2F1"),
        (200, fake::COMMIT.to_string())
    );
    assert_eq!(
        revision_sha(&m.addr, "acme/internal", "main"),
        (200, c1.clone())
    );
    let refs = env.json(&["ls", "acme/internal", "--json"])["refs"].clone();
    assert_eq!(refs["main"], c1.as_str(), "{refs}");
    assert_eq!(refs["refs/pr/1"], fake::COMMIT, "{refs}");
}

/// Issue 26, point 5: a revision pulled with `--include` is stored as partial. The mirror
/// lists every file of it and serves each (completing it from the upstream on demand),
/// and a full `modelcas pull` of a partially stored commit completes it.
#[test]
fn a_partial_pull_is_completed_on_demand_and_by_a_full_pull() {
    let up = fake::Fake::start();
    let all: BTreeMap<String, String> = fake::files()
        .iter()
        .map(|f| (f.path.clone(), f.sha256_hex()))
        .collect();
    let env = Env::new();
    let pull = ["pull", "org/model", "--endpoint", up.url.as_str()];
    let partial = [&pull[..], &["--include", "config.json"]].concat();
    env.ok(&partial);
    assert_eq!(env.stored_files("org/model@main").len(), 1);
    let m = Served::start(&env, &["--upstream", &up.url]);
    let (status, head, body) = get(
        &m.addr,
        "/api/models/org/model/tree/main?recursive=true",
        &[],
    );
    assert_eq!(status, 200, "{head}");
    let tree: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let listed: std::collections::BTreeSet<String> = tree
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "file")
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, all.keys().cloned().collect());
    for f in fake::files() {
        let (status, head, body) =
            get(&m.addr, &format!("/org/model/resolve/main/{}", f.path), &[]);
        assert_eq!(status, 200, "{}: {head}", f.path);
        assert_eq!(sha256(&body), f.sha256_hex(), "{}", f.path);
    }
    assert_eq!(env.stored_files("org/model@main"), all);
    drop(m);

    // A full pull of a partially stored commit completes it.
    let env = Env::new();
    env.ok(&partial);
    env.ok(&pull);
    assert_eq!(env.stored_files("org/model@main"), all);
    env.verifies("org/model@main");
}

/// Issue 26, point 3: a store written by older versions may hold one repository under two
/// spellings. Each stays served by its own spelling; any other spelling gets the first in
/// key order (uppercase sorts first); a lock on either spelling holds for both.
#[test]
fn a_store_with_two_spellings_of_one_repository_keeps_serving_both() {
    let env = Env::new();
    let c1 = ingest_r1_as(&env, "org/model");
    let c2 = series().commit("r2");
    env.ingest(
        &series().plain("r2"),
        &["--repo", "Org/Model", "--revision", &c2, "--ref", "main"],
    );
    let m = Served::start(&env, &[]);
    assert_eq!(
        revision_sha(&m.addr, "org/model", "main"),
        (200, c1.clone())
    );
    assert_eq!(
        revision_sha(&m.addr, "Org/Model", "main"),
        (200, c2.clone())
    );
    assert_eq!(
        revision_sha(&m.addr, "ORG/MODEL", "main"),
        (200, c2.clone())
    );
    drop(m);
    let config = env.path("config.toml");
    std::fs::write(
        &config,
        format!("[serve.locks]\n\"org/model\" = \"{c1}\"\n"),
    )
    .unwrap();
    let m = Served::start(&env, &["--config", config.to_str().unwrap()]);
    assert_eq!(
        revision_sha(&m.addr, "org/model", "main"),
        (200, c1.clone())
    );
    let (status, head) = revision_sha(&m.addr, "Org/Model", &c2);
    assert_eq!(status, 403, "{head}");
}

/// Waits until the fake upstream has received a request whose target contains each of
/// `parts` (bounded: a pull that never starts fails the test).
fn wait_for_requests(up: &fake::Fake, parts: &[&str]) {
    wait_until(
        std::fmt::from_fn(|f| {
            let seen = up.seen();
            write!(f, "the pulls of {parts:?} to start (seen: {seen:?})")
        }),
        Duration::from_secs(30),
        || {
            parts
                .iter()
                .all(|p| up.seen().iter().any(|s| s.target.contains(p)))
                .then_some(())
        },
    );
}

/// Issue 26 point 7: requests waiting on a slow upstream hold none of serve's threads.
/// With `--threads 2`, two pulls stuck upstream and a third request waiting on one of
/// them, `/metrics` and downloads of a stored revision are answered at once; when the
/// upstream goes on, every waiting request gets its file.
#[test]
fn pulls_stuck_upstream_leave_the_threads_to_stored_data() {
    let up = fake::Fake::start();
    let gate = Arc::new(fake::Gate::default());
    up.state().also_repos = vec!["org/other".into()];
    up.state().hold = Some(("/resolve/".into(), gate.clone()));
    let env = Env::new();
    ingest_rev(&env, "r1", &["main"]);
    let c1 = series().commit("r1");
    let names: Vec<String> = expected("r1").into_keys().collect();
    let m = Served::start(
        &env,
        &[
            "--upstream",
            &up.url,
            "--threads",
            "2",
            "--request-timeout",
            "20s",
        ],
    );
    let misses: Vec<_> = ["org/model", "org/other", "org/model"]
        .iter()
        .map(|r| {
            let (addr, path) = (m.addr.clone(), format!("/{r}/resolve/main/config.json"));
            std::thread::spawn(move || get(&addr, &path, &[]))
        })
        .collect();
    wait_for_requests(&up, &["/org/model/resolve/", "/org/other/resolve/"]);

    let t = Instant::now();
    let (status, head, _) = get(&m.addr, "/metrics", &[]);
    assert_eq!(status, 200, "/metrics while pulls are stuck: {head}");
    assert_eq!(get_all(&m.addr, &c1, &names), expected("r1"));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(misses.iter().all(|h| !h.is_finished()));

    gate.open();
    let config = up.file("config.json").data;
    for h in misses {
        let (status, head, body) = h.join().unwrap();
        assert_eq!(status, 200, "{head}");
        assert_eq!(body, config);
    }
    // One pull each: the third request waited on the first's.
    let pulls = up
        .seen()
        .iter()
        .filter(|s| {
            s.target
                .ends_with("/resolve/0123456789abcdef0123456789abcdef01234567/config.json")
        })
        .count();
    assert_eq!(pulls, 2, "{:?}", up.seen());
}

/// Issue 26 point 7: a request whose pull outlives its timeout gets a 503 while the pull
/// goes on; the client that caused a pull may go away; either way the pull completes,
/// and the next request is a hit that asks the upstream for nothing more.
#[test]
fn a_pull_outlives_its_requests_and_then_serves() {
    let up = fake::Fake::start();
    let gate = Arc::new(fake::Gate::default());
    up.state().hold = Some(("/resolve/".into(), gate.clone()));
    let env = Env::new();
    let m = Served::start(
        &env,
        &[
            "--upstream",
            &up.url,
            "--threads",
            "2",
            "--request-timeout",
            "1s",
        ],
    );
    // A client that goes away while its pull is stuck.
    let mut gone = TcpStream::connect(&m.addr).unwrap();
    gone.write_all(b"GET /org/model/resolve/main/config.json HTTP/1.0\r\n\r\n")
        .unwrap();
    wait_for_requests(&up, &["/org/model/resolve/"]);
    drop(gone);
    // One that times out waiting.
    let (status, head, _) = get(&m.addr, "/org/model/resolve/main/config.json", &[]);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("waiting for the upstream"), "{head}");
    let asked = up.seen().len();
    gate.open();
    let last = RefCell::new(String::new());
    let body = wait_until(
        std::fmt::from_fn(|f| {
            write!(
                f,
                "a 200 once the upstream went on (last: {})",
                last.borrow()
            )
        }),
        Duration::from_secs(30),
        || {
            let (status, head, body) = get(&m.addr, "/org/model/resolve/main/config.json", &[]);
            if status == 200 {
                return Some(body);
            }
            assert_eq!(status, 503, "{head}");
            *last.borrow_mut() = head;
            None
        },
    );
    assert_eq!(body, up.file("config.json").data);
    let files = fake::files().len();
    assert!(up.seen().len() <= asked + files + 1, "{:?}", up.seen());
    let (status, _, body) = get(&m.addr, "/org/model/resolve/main/config.json", &[]);
    assert_eq!((status, body), (200, up.file("config.json").data));
    let log = m.log();
    assert!(log.contains("cache=hit"), "{log}");
    // The routings that stopped to wait for the pull are not logged as requests.
    let stopped = log
        .lines()
        .filter(|l| l.contains("access repo=") && l.contains("status=503"))
        .count();
    assert_eq!(stopped, 0, "{log}");
}

/// Issue 26 point 8: a redirect of the upstream to another origin is refused (502,
/// naming it; nothing stored, the other origin never asked) unless that origin is
/// configured (`--upstream-redirect-host`), and then the token stays home.
#[test]
fn the_mirror_follows_redirects_only_to_configured_hosts() {
    let (up, cdn) = (fake::Fake::start(), fake::Fake::start());
    up.state().redirect = Some(cdn.url.clone());
    let env = Env::new();
    let m = Served::start(&env, &["--upstream", &up.url]);
    let (status, head, _) = get(&m.addr, "/org/model/resolve/main/config.json", &[]);
    let head = percent_encoding::percent_decode_str(&head).decode_utf8_lossy();
    assert_eq!(status, 502, "{head}");
    assert!(
        head.contains("refused to follow the redirect") && head.contains(&cdn.url),
        "{head}"
    );
    assert_eq!(cdn.seen().len(), 0);
    drop(m);

    let token = env.path("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    up.state().token = Some("s3cret".into());
    let m = Served::start(
        &env,
        &[
            "--upstream",
            &up.url,
            "--upstream-redirect-host",
            &cdn.url,
            "--upstream-token-file",
            token.to_str().unwrap(),
        ],
    );
    let (status, head, body) = get(&m.addr, "/org/model/resolve/main/config.json", &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, up.file("config.json").data);
    assert!(!cdn.seen().is_empty());
    assert!(cdn
        .seen()
        .iter()
        .all(|s| s.header("authorization").is_none()));
    drop(m);
    let err = env.fails(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &up.url,
        "--upstream-redirect-host",
        "cdn.example/path",
    ]);
    assert!(
        err.contains("--upstream-redirect-host") && err.contains("cdn.example/path"),
        "{err}"
    );
}

/// Issue 26 point 12: a mirror's first start on an empty store location creates the
/// store and serves; a plain serve of an empty location still says what to do.
#[test]
fn a_mirror_creates_its_store_on_first_start() {
    let up = fake::Fake::start();
    let env = Env::empty();
    let m = Served::start(&env, &["--upstream", &up.url]);
    let (status, head, body) = get(&m.addr, "/org/model/resolve/main/config.json", &[]);
    assert_eq!(status, 200, "{head}");
    assert_eq!(body, up.file("config.json").data);
    let ls = env.json(&["ls", "org/model", "--json"]);
    assert_eq!(ls["refs"]["main"], fake::COMMIT, "{ls}");
    drop(m);

    let empty = Env::empty();
    let err = empty.fails(&["serve", "--listen", "127.0.0.1:0"]);
    assert!(err.contains("modelcas ingest"), "{err}");
}
