//! `modelcas serve` with the real `huggingface_hub` client (pip): snapshot_download by ref
//! and by sha, one file, not-found errors, a resumed download; the access log, metrics,
//! and bearer tokens. Robustness (issue 11): non-ASCII and broken escapes in paths, non-ASCII
//! stored names (RFC 5987 `filename*`), `%0D%0A` never splitting a header, and slow clients
//! that never finish their headers, while downloads go on.

use crate::common;

use std::io::Read;
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{ingest_series, poll_until, repo_root, series, wait_until, Env, Served};

const REPO: &str = "demo-org/demo-llm";

/// A plain HTTP/1.0 GET: (status, headers and body as text).
fn get(addr: &str, path: &str, headers: &[&str]) -> (u16, String) {
    use std::io::Write;
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    (status, out)
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

fn python_client(addr: &str, work: &std::path::Path, token: Option<&str>) -> std::process::Output {
    let s = series();
    let mut c = common::python();
    c.arg(repo_root().join("tests/hub_client.py"))
        .arg(format!("http://{addr}"))
        .arg(REPO)
        .arg(s.dir.join("expected.json"))
        .arg(work)
        .env_remove("HF_TOKEN")
        .env("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
        // Plain HTTP downloads (Xet ones: tests/xet.rs).
        .env("HF_HUB_DISABLE_XET", "1");
    if let Some(t) = token {
        c.env("HF_TOKEN", t)
            .env_remove("HF_HUB_DISABLE_IMPLICIT_TOKEN");
    }
    c.output().unwrap()
}

#[test]
fn huggingface_hub_client_downloads_from_serve() {
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start(&env, &[]);
    let work = env.path("client");
    std::fs::create_dir_all(&work).unwrap();
    let out = python_client(&srv.addr, &work, None);
    assert!(
        out.status.success(),
        "client failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        srv.log()
    );
    let facts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(facts["by_ref_files"], series().files("r4").len());
    assert_eq!(facts["not_found_file"], "RemoteEntryNotFoundError");

    // One access-log line per download, a 206 among them; Xet offered (issue 28,
    // tests/xet.rs; `--no-xet` turns it off).
    let log = srv.log();
    let downloads: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("access repo=") && l.contains("method=GET"))
        .collect();
    assert!(downloads.iter().any(|l| l.contains("status=206")), "{log}");
    assert!(downloads.iter().all(|l| l.contains("client=127.0.0.1:")
        && l.contains("bytes=")
        && l.contains("duration_ms=")));
    let (status, head) = get(&srv.addr, &format!("/{REPO}/resolve/r4/config.json"), &[]);
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("x-xet-hash: "), "{head}");
    let (status, resp) = get(&srv.addr, &format!("/{REPO}/resolve/r4/nope"), &[]);
    assert_eq!(status, 404);
    assert!(resp.contains("X-Error-Code: EntryNotFound"), "{resp}");

    // Metrics moved.
    let (status, m) = get(&srv.addr, "/metrics", &[]);
    assert_eq!(status, 200);
    assert!(metric(&m, "modelcas_serve_bytes_sent_total") > 1e6, "{m}");
    assert!(
        metric(&m, "modelcas_serve_download_seconds_count") >= 3.0,
        "{m}"
    );
    assert!(m.contains("endpoint=\"resolve\",status=\"206\""), "{m}");
}

#[test]
fn bearer_tokens_are_required_when_configured() {
    let env = Env::new();
    ingest_series(&env);
    let tokens = env.path("tokens");
    std::fs::write(&tokens, "# mirror tokens\nsecret-one\n\nsecret-two\n").unwrap();
    let srv = Served::start(&env, &["--token-file", tokens.to_str().unwrap()]);
    let path = format!("/api/models/{REPO}/revision/r4");
    assert_eq!(get(&srv.addr, &path, &[]).0, 401);
    assert_eq!(
        get(&srv.addr, &path, &["Authorization: Bearer wrong"]).0,
        401
    );
    let (status, body) = get(&srv.addr, &path, &["Authorization: Bearer secret-two"]);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&series().commit("r4")));
    let work = env.path("client");
    std::fs::create_dir_all(&work).unwrap();
    let out = python_client(&srv.addr, &work, Some("secret-one"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Bad token files are clear errors.
    std::fs::write(&tokens, "\n# nothing\n").unwrap();
    let err = env.fails(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        tokens.to_str().unwrap(),
    ]);
    assert!(err.contains("no token"), "{err}");
}

/// Sends raw bytes, reads until the server closes (or 20 s pass): the response bytes.
fn raw(addr: &str, request: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A raw `GET` with `Connection: close`: (status, head as text, body).
fn raw_get(addr: &str, target: &[u8]) -> (u16, String, Vec<u8>) {
    let mut req = b"GET ".to_vec();
    req.extend_from_slice(target);
    req.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let out = raw(addr, &req);
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "no response to {:?}: {:?}",
                String::from_utf8_lossy(target),
                String::from_utf8_lossy(&out)
            )
        });
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, out[split + 4..].to_vec())
}

fn sha256(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(data))
}

/// `hf_hub_download` of each `(repo, file, revision)` with the real client, killed after two
/// minutes: the sha256 of each downloaded file.
fn hf_download(addr: &str, work: &std::path::Path, files: &[(&str, &str, &str)]) -> Vec<String> {
    let script = r#"
import hashlib, json, os, sys
os.environ["HF_ENDPOINT"] = sys.argv[1]
os.environ["HF_HUB_CACHE"] = os.path.join(sys.argv[2], "hub-cache")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
from huggingface_hub import hf_hub_download
out = []
for repo, name, rev in json.loads(sys.argv[3]):
    p = hf_hub_download(repo, name, revision=rev)
    out.append(hashlib.sha256(open(p, "rb").read()).hexdigest())
print(json.dumps(out))
"#;
    let spec = serde_json::to_string(files).unwrap();
    let mut child = common::python()
        .args([
            "-c",
            script,
            &format!("http://{addr}"),
            work.to_str().unwrap(),
            &spec,
        ])
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .env("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if poll_until(Duration::from_secs(120), || child.try_wait().unwrap()).is_none() {
        let _ = child.kill();
        panic!("huggingface_hub download did not finish in 120 s");
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn expected_sha(rev: &str, file: &str) -> String {
    series()
        .files(rev)
        .into_iter()
        .find(|(p, _)| p == file)
        .map(|(_, h)| h)
        .unwrap()
}

/// Issue 11: non-ASCII path characters and a broken escape each panicked a worker; after
/// about twenty the server accepted connections and never answered.
#[test]
fn non_ascii_and_broken_escapes_in_paths_get_answers_and_serve_stays_up() {
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start(&env, &[]);
    let targets: Vec<Vec<u8>> = (0..30)
        .map(|i| match i % 6 {
            0 => format!("/{REPO}/resolve/r4/é{i}").into_bytes(),
            1 => format!("/{REPO}/resolve/r4/%C3%A9{i}").into_bytes(),
            2 => format!("/{REPO}/resolve/r4/%aé{i}").into_bytes(),
            3 => format!("/api/models/{REPO}/tree/r4/d%C3%A9j%C3%A0{i}").into_bytes(),
            4 => format!("/api/models/d%C3%A9mo/x{i}/revision/r4").into_bytes(),
            _ => format!("/{REPO}/resolve/r%ff{i}/config.json").into_bytes(),
        })
        .collect();
    for t in &targets {
        let (status, head, _) = raw_get(&srv.addr, t);
        assert!(
            (400..500).contains(&status),
            "{:?}: {head}\nserver log:\n{}",
            String::from_utf8_lossy(t),
            srv.log()
        );
    }
    let work = env.path("client");
    let got = hf_download(&srv.addr, &work, &[(REPO, "config.json", "r4")]);
    assert_eq!(got, [expected_sha("r4", "config.json")]);
    assert!(!srv.log().contains("panicked"), "{}", srv.log());
}

/// Issue 11: a stored file name with non-ASCII characters (the Content-Disposition header
/// was built with `expect`) downloads with the right bytes and an RFC 5987 `filename*`.
#[test]
fn non_ascii_stored_names_download_with_filename_star() {
    let env = Env::new();
    let dir = env.path("unicode");
    std::fs::create_dir_all(dir.join("données")).unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    let small = "{\"naïve\": \"☃\"}\n".as_bytes().to_vec();
    std::fs::write(dir.join("données/modèle ☃.bin"), &big).unwrap();
    std::fs::write(dir.join("naïve.json"), &small).unwrap();
    std::fs::write(dir.join("config.json"), b"{}\n").unwrap();
    env.ingest(&dir, &["--repo", "demo-org/unicode", "--ref", "main"]);
    let srv = Served::start(&env, &[]);

    let (status, head, body) = raw_get(
        &srv.addr,
        b"/demo-org/unicode/resolve/main/donn%C3%A9es/mod%C3%A8le%20%E2%98%83.bin",
    );
    assert_eq!(status, 200, "{head}\n{}", srv.log());
    assert!(
        head.contains(
            "Content-Disposition: attachment; filename=\"mod_le _.bin\"; \
             filename*=UTF-8''mod%C3%A8le%20%E2%98%83.bin\r\n"
        ),
        "{head}"
    );
    assert_eq!(sha256(&body), sha256(&big));

    let work = env.path("client");
    let got = hf_download(
        &srv.addr,
        &work,
        &[
            ("demo-org/unicode", "données/modèle ☃.bin", "main"),
            ("demo-org/unicode", "naïve.json", "main"),
        ],
    );
    assert_eq!(got, [sha256(&big), sha256(&small)]);
}

/// Issue 11: `%0D%0A` in a path reached the response headers. The raw response head must
/// have no line that the request injected.
#[test]
fn crlf_in_a_path_never_splits_a_header() {
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start(&env, &[]);
    for t in [
        format!("/{REPO}/resolve/r4/x%0D%0AInjected:%20yes"),
        format!("/{REPO}/resolve/r4%0D%0AInjected:%20yes/config.json"),
        format!("/api/models/{REPO}/tree/r4/x%0AInjected:%20yes"),
        "/demo-org/x%0D%0AInjected:%20yes/resolve/r4/config.json".to_string(),
        "/no%0D%0AInjected:%20yes/route".to_string(),
    ] {
        let (status, head, _) = raw_get(&srv.addr, t.as_bytes());
        assert_eq!(status, 404, "{t}: {head}");
        for line in head.split("\r\n") {
            assert!(
                !line.to_ascii_lowercase().starts_with("injected"),
                "{t}: {head}"
            );
            assert!(!line.contains('\n') && !line.contains('\r'), "{t}: {head}");
        }
        assert!(
            head.to_ascii_lowercase().contains("x-error-message: "),
            "{head}"
        );
    }
}

/// Issue 11: slow clients (headers sent a byte at a time, never finished) must not stall
/// the endpoint, and the header timeout must close them.
#[test]
fn slow_clients_are_closed_and_do_not_stall_downloads() {
    use std::io::Write;
    let env = Env::new();
    ingest_series(&env);
    let timeout_s = 10;
    let srv = Served::start_with(
        &env,
        &[],
        &[("MODELCAS_SERVE_HEADER_TIMEOUT", &format!("{timeout_s}s"))],
    );
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut s = TcpStream::connect(&srv.addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect();
    let open = std::sync::Arc::new(parking_lot::Mutex::new(vec![true; 64]));
    let dripper = {
        let open = open.clone();
        let mut socks: Vec<TcpStream> = slow.iter_mut().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            // One byte per connection every 100 ms, never the end of the head; a connection
            // is closed once reading it gives end-of-file or an error.
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(120) {
                let mut any = false;
                for (i, s) in socks.iter_mut().enumerate() {
                    if !open.lock()[i] {
                        continue;
                    }
                    any = true;
                    let mut b = [0u8; 256];
                    let closed = match s.read(&mut b) {
                        Ok(_) => true,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            s.write_all(b"a").is_err()
                        }
                        Err(_) => true,
                    };
                    if closed {
                        open.lock()[i] = false;
                    }
                }
                if !any {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // A whole shard downloads while all 64 are held open.
    let shard = series()
        .files("r4")
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p.ends_with(".safetensors"))
        .unwrap();
    let (status, head, body) = raw_get(&srv.addr, format!("/{REPO}/resolve/r4/{shard}").as_bytes());
    assert_eq!(status, 200, "{head}");
    assert_eq!(sha256(&body), expected_sha("r4", &shard));
    let held = open.lock().iter().filter(|o| **o).count();
    assert!(
        held == 64 || started.elapsed() >= Duration::from_secs(timeout_s),
        "slow clients closed before their header timeout: {held} of 64 open"
    );
    let (status, _) = get(&srv.addr, "/metrics", &[]);
    assert_eq!(status, 200);

    // Then the header timeout closes every one of them.
    let still = || open.lock().iter().filter(|o| **o).count();
    wait_until(
        std::fmt::from_fn(|f| {
            let (n, t) = (still(), started.elapsed());
            write!(
                f,
                "every slow client to be closed ({n} still open after {t:?})"
            )
        }),
        Duration::from_secs(timeout_s + 50),
        || (still() == 0).then_some(()),
    );
    assert!(
        started.elapsed() >= Duration::from_secs(timeout_s - 1),
        "closed before the timeout: {:?}",
        started.elapsed()
    );
    dripper.join().unwrap();
}

/// Every file of `commit` downloaded from serve: path → (status, sha256 of the body).
fn download_all(addr: &str, commit: &str, paths: &[String]) -> Vec<(String, u16, String)> {
    paths
        .iter()
        .map(|p| {
            let (status, _, body) =
                raw_get(addr, format!("/{REPO}/resolve/{commit}/{p}").as_bytes());
            (p.clone(), status, sha256(&body))
        })
        .collect()
}

fn gc_json(env: &Env, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["gc", "--json", "--grace", "0s", "--keep-last", "0"];
    args.extend_from_slice(extra);
    env.json(&args)
}

/// Issue 11, point 7: serve keeps the manifests it has read. While it runs, gc moves a
/// revision's chunks into new packs and deletes the old ones: later downloads still come
/// back byte-exact (through the forwarding records). Then the commit is removed, gc
/// deletes its packs, and the commit is ingested again with other files (how a partial
/// snapshot is replaced): serve must read the manifest again and serve the new files'
/// bytes, never fail on the old packs or return old bytes.
#[test]
fn serve_reads_on_after_gc_moves_deletes_and_a_commit_is_replaced() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start(&env, &[]);
    let x = s.commit("r4");
    let old = s.files("r4");
    let paths: Vec<String> = old.iter().map(|(p, _)| p.clone()).collect();
    let ok = |got: Vec<(String, u16, String)>, want: &[(String, String)], when: &str| {
        for ((p, status, sha), (wp, wsha)) in got.iter().zip(want) {
            assert_eq!(p, wp);
            assert_eq!((*status, sha), (200, wsha), "{when}: {p}\n{}", srv.log());
        }
    };
    ok(download_all(&srv.addr, &x, &paths), &old, "first download");

    // gc rewrites the packs r4 shares with r1..r3, then deletes the old ones.
    for r in ["r1", "r2", "r3"] {
        env.ok(&["rm", &format!("{REPO}@{r}")]);
    }
    let first = gc_json(&env, &["--rewrite-below", "1"]);
    assert!(first["packs_rewritten"].as_u64().unwrap() > 0, "{first:#}");
    let second = gc_json(&env, &["--rewrite-below", "1"]);
    assert!(second["packs_deleted"].as_u64().unwrap() > 0, "{second:#}");
    ok(
        download_all(&srv.addr, &x, &paths),
        &old,
        "after the packs moved",
    );

    // The commit is removed, its packs and records deleted, and it is ingested again with
    // r1's files.
    env.ok(&["rm", "--force", &format!("{REPO}@{x}")]);
    for _ in 0..3 {
        gc_json(&env, &[]);
    }
    assert!(
        env.packs().is_empty(),
        "packs left behind: {:?}",
        env.packs()
    );
    env.ingest(
        &s.plain("r1"),
        &["--repo", REPO, "--revision", &x, "--ref", "r4"],
    );
    let new = s.files("r1");
    let new_paths: Vec<String> = new.iter().map(|(p, _)| p.clone()).collect();
    ok(
        download_all(&srv.addr, &x, &new_paths),
        &new,
        "after the commit was replaced",
    );
    for p in paths.iter().filter(|p| !new_paths.contains(p)) {
        let (status, head, _) = raw_get(&srv.addr, format!("/{REPO}/resolve/{x}/{p}").as_bytes());
        assert_eq!(status, 404, "{p} is not in the new revision: {head}");
    }
    let (status, _, body) = raw_get(
        &srv.addr,
        format!("/api/models/{REPO}/revision/{x}").as_bytes(),
    );
    assert_eq!(status, 200);
    let info: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut listed: Vec<String> = info["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rfilename"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, new_paths, "the revision's file list is the new one");
}

/// Chunks fetched and decoded so far (lookups that fetched, plus chunks fetched ahead).
fn chunks_fetched(addr: &str) -> f64 {
    let (status, m) = get(addr, "/metrics", &[]);
    assert_eq!(status, 200);
    metric(&m, "modelcas_chunk_cache_misses_total") + metric(&m, "modelcas_readahead_chunks_total")
}

/// Issue 13: serve reads through the store's one range reader, over the decoded-chunk cache
/// the mount uses: a second download of a shard (and a range of it) decodes nothing again,
/// and every byte is the file's.
#[test]
fn a_second_download_of_a_shard_is_served_from_the_chunk_cache() {
    let s = series();
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start_with(&env, &[], &[("MODELCAS_SERVE_CACHE_MIB", "512")]);
    let (path, sha) = s
        .files("r4")
        .into_iter()
        .max_by_key(|(p, _)| std::fs::metadata(s.plain("r4").join(p)).unwrap().len())
        .unwrap();
    let size = std::fs::metadata(s.plain("r4").join(&path)).unwrap().len();
    assert!(
        size > 4 << 20,
        "{path}: {size} bytes, too small to span many chunks"
    );
    let target = format!("/{REPO}/resolve/r4/{path}");
    let before = chunks_fetched(&srv.addr);
    let (status, _, body) = raw_get(&srv.addr, target.as_bytes());
    assert_eq!((status, sha256(&body)), (200, sha.clone()));
    let first = chunks_fetched(&srv.addr) - before;
    assert!(first >= 4.0, "the first download fetched {first} chunks");
    let (status, _, body) = raw_get(&srv.addr, target.as_bytes());
    assert_eq!((status, sha256(&body)), (200, sha));
    let mut req = format!("GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n").into_bytes();
    req.extend_from_slice(format!("Range: bytes=1000-{}\r\n\r\n", size / 2).as_bytes());
    let out = raw(&srv.addr, &req);
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let want = std::fs::read(s.plain("r4").join(&path)).unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 206"),
        "{:?}",
        String::from_utf8_lossy(&out[..split])
    );
    assert!(
        out[split + 4..] == want[1000..=(size / 2) as usize],
        "the range's bytes differ"
    );
    assert_eq!(
        chunks_fetched(&srv.addr) - before,
        first,
        "the second download and the range fetched and decoded chunks again"
    );
}

/// The small repository ingested as team/m0..m4 and hidden/secret: path → bytes.
fn small_repo() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("config.json", b"{\"model_type\": \"tiny\"}\n".to_vec()),
        (
            "weights.bin",
            (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect(),
        ),
        ("sub/notes.txt", b"notes\n".to_vec()),
    ]
}

/// tests/hub_routes.py against `addr` with `token`: its facts, or a panic with its output
/// and the server's log.
fn hub_routes_client(
    addr: &str,
    env: &Env,
    token: &str,
    name: &str,
    log: &str,
) -> serde_json::Value {
    let work = env.path(&format!("routes-client-{}", addr.replace(':', "-")));
    std::fs::create_dir_all(&work).unwrap();
    let small: std::collections::BTreeMap<&str, String> =
        small_repo().iter().map(|(p, d)| (*p, sha256(d))).collect();
    let small_json = work.join("small.json");
    std::fs::write(&small_json, serde_json::to_string(&small).unwrap()).unwrap();
    let out = common::python()
        .arg(repo_root().join("tests/hub_routes.py"))
        .arg(format!("http://{addr}"))
        .arg(series().dir.join("expected.json"))
        .arg(&small_json)
        .arg(&work)
        .args([token, name])
        .env_remove("HF_HUB_DISABLE_IMPLICIT_TOKEN")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "client failed:\n{}\n{}\nserver log:\n{log}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue 42: every Hub route the real client browses with (model_info without a revision,
/// repo_exists, file_exists, list_models with its filters and pages, list_repo_commits,
/// get_paths_info, HfFileSystem ls/info/glob/open, `hf download`, `hf auth whoami`,
/// whoami) against serve in local mode and in mirror mode (an empty store pulling from a
/// second serve), with an allow-list that hides hidden/secret and a token file that names
/// its tokens. tests/hub_routes.py asserts the results.
#[test]
fn hub_browsing_routes_answer_the_real_client_in_local_and_mirror_mode() {
    let env = Env::new();
    let s = series();
    for r in ["r1", "r2", "r3", "r4"] {
        let commit = s.commit(r);
        let mut args = vec!["--repo", REPO, "--revision", commit.as_str(), "--ref", r];
        if r == "r4" {
            args.extend(["--ref", "main"]);
        }
        env.ingest(&s.plain(r), &args);
    }
    let dir = env.path("small");
    for (p, data) in small_repo() {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }
    for repo in [
        "team/m0",
        "team/m1",
        "team/m2",
        "team/m3",
        "team/m4",
        "hidden/secret",
    ] {
        env.ingest(&dir, &["--repo", repo, "--ref", "main"]);
    }
    let tokens = env.path("tokens");
    std::fs::write(
        &tokens,
        "# browse\ntok-alice  # Alice Team\ntok-plain\nOpen Sesame 2024\n",
    )
    .unwrap();
    let guarded = [
        "--token-file",
        tokens.to_str().unwrap(),
        "--allow",
        "demo-org/*",
        "--allow",
        "team/*",
    ];
    // Local mode.
    let local = Served::start(&env, &guarded);
    let facts = hub_routes_client(&local.addr, &env, "tok-alice", "Alice Team", &local.log());
    assert_eq!(facts["list_models_pages"], 3, "{facts}");
    assert_eq!(facts["hidden"], "HfHubHTTPError", "{facts}");
    // A token without a name is named by its hash; no token file: whoami says why.
    let (status, body) = get(
        &local.addr,
        "/api/whoami-v2",
        &["Authorization: Bearer tok-plain"],
    );
    assert_eq!(status, 200, "{body}");
    let blake = blake3::hash(b"tok-plain").to_hex();
    assert!(
        body.contains(&format!("\"name\":\"token-{}\"", &blake[..8])),
        "{body}"
    );
    // A line with spaces and no ` #` is one token, as before names (the review found it
    // cut at the first space, so `Bearer Open` was let in).
    let bearer = |t: &str| {
        get(
            &local.addr,
            "/api/whoami-v2",
            &[&format!("Authorization: Bearer {t}")],
        )
        .0
    };
    assert_eq!(bearer("Open Sesame 2024"), 200);
    assert_eq!(bearer("Open"), 401);
    let open = Served::start(&env, &[]);
    let (status, body) = get(&open.addr, "/api/whoami-v2", &[]);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("no tokens configured"), "{body}");
    // Mirror mode: an empty store, the same store served plainly as its upstream.
    let m_env = Env::new();
    let url = format!("http://{}", open.addr);
    let mut args = vec!["--upstream", url.as_str()];
    args.extend_from_slice(&guarded);
    let mirror = Served::start(&m_env, &args);
    let facts = hub_routes_client(
        &mirror.addr,
        &m_env,
        "tok-alice",
        "Alice Team",
        &mirror.log(),
    );
    assert_eq!(facts["list_models_pages"], 3, "{facts}");
    // hidden/secret was never pulled: the mirror's store lacks it.
    let ls = m_env.ok(&["ls"]);
    assert!(
        !ls.contains("hidden/secret") && ls.contains("team/m4"),
        "{ls}"
    );
}

/// The review of issue 42: a paths-info body was read (up to 1 MiB for up to 30 s) before
/// the token was checked, so clients without a token could make serve hold a mebibyte per
/// connection. Now a request without a valid token is answered 401 at once, its body
/// unread: here the body never comes, and the 401 must (before, the reply was a 408 after
/// 30 s, and this read timed out after 10).
#[test]
fn an_unauthorized_body_is_never_read() {
    use std::io::Write;
    let env = Env::new();
    let tokens = env.path("tokens");
    std::fs::write(&tokens, "tok\n").unwrap();
    let srv = Served::start(&env, &["--token-file", tokens.to_str().unwrap()]);
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /api/models/o/m/paths-info/main HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000\r\n\r\npaths=a",
        srv.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut got = [0u8; 12];
    s.read_exact(&mut got).expect("a reply before the body");
    assert_eq!(&got, b"HTTP/1.1 401");
}

/// A repository whose one revision fails its release check.
pub(crate) const BROKEN: &str = "demo-org/broken";
pub(crate) const BROKEN_COMMIT: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";

/// A Llama config, a BPE tokenizer and a truncated shard (its header claims 64 bytes; 10
/// follow): a revision no loader takes (issue 39).
pub(crate) fn broken_dir(env: &Env) -> std::path::PathBuf {
    let d = env.path("broken");
    std::fs::create_dir_all(&d).unwrap();
    let config = r#"{"model_type":"llama","architectures":["X"]}"#;
    std::fs::write(d.join("config.json"), config).unwrap();
    let tokenizer = r#"{"model":{"type":"BPE","vocab":{},"merges":[]}}"#;
    std::fs::write(d.join("tokenizer.json"), tokenizer).unwrap();
    let mut shard = 64u64.to_le_bytes().to_vec();
    shard.extend_from_slice(b"{\"w\":{\"dt");
    std::fs::write(d.join("model.safetensors"), shard).unwrap();
    d
}

/// The JSON body of a GET that must answer 200.
fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let (status, out) = get(addr, path, &[]);
    assert_eq!(status, 200, "{path}: {out}");
    let body = out.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

/// Issue 39 (docs/design/release-check.md §6): a `[serve.locks]` entry naming a stored
/// revision that fails its release check stops serve at start with a message naming the
/// lock and the file; `--force` starts it (a warning in the log) and `model_info` carries
/// the failed verdict.
#[test]
fn a_lock_on_a_failing_revision_stops_serve_unless_forced() {
    let env = Env::new();
    env.ingest(
        &broken_dir(&env),
        &[
            "--repo",
            BROKEN,
            "--revision",
            BROKEN_COMMIT,
            "--ref",
            "main",
        ],
    );
    let cfg = env.path("config.toml");
    let lock = format!("[serve.locks]\n\"{BROKEN}\" = \"{BROKEN_COMMIT}\"\n");
    std::fs::write(&cfg, lock).unwrap();
    let cfg = cfg.to_str().unwrap();
    let err = env.fails(&["--config", cfg, "serve", "--listen", "127.0.0.1:0"]);
    let entry = format!("[serve.locks] \"{BROKEN}\" = \"{BROKEN_COMMIT}\"");
    assert!(
        err.contains(&format!(
            "{entry}: this revision failed its release check (model.safetensors: "
        )),
        "{err}"
    );
    assert!(
        err.contains("fix the lock or start serve with --force"),
        "{err}"
    );

    let s = Served::start(&env, &["--config", cfg, "--force"]);
    let log = s.log();
    assert!(
        log.contains(&entry) && log.contains("served (--force)"),
        "{log}"
    );
    for path in [
        format!("/api/models/{BROKEN}/revision/main"),
        format!("/api/models/{BROKEN}"),
    ] {
        let info = get_json(&s.addr, &path);
        assert_eq!(info["sha"], BROKEN_COMMIT, "{info}");
        let check = &info["modelcas"]["check"];
        assert_eq!(check["verdict"], "failed", "{info}");
        assert!(check["errors"].as_u64().unwrap() >= 1, "{info}");
        let problems = check["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p["path"] == "model.safetensors" && p["severity"] == "error"),
            "{info}"
        );
    }
    // The file still downloads: --force serves the lock.
    let (status, _) = get(&s.addr, &format!("/{BROKEN}/resolve/main/config.json"), &[]);
    assert_eq!(status, 200);
}

/// Issue 39: `model_info` of a revision carries its release check and labels, by ref and
/// by sha; the repository page shows a "Release check" cell and a labels cell per revision,
/// and the repositories page counts the refs naming failing revisions.
#[test]
fn model_info_and_the_pages_show_release_checks_and_labels() {
    let env = Env::new();
    let s = series();
    let c1 = s.commit("r1");
    env.ingest(
        &s.plain("r1"),
        &[
            "--repo",
            REPO,
            "--revision",
            &c1,
            "--ref",
            "main",
            "--label",
            "vllm=0.11.0",
            "--label",
            "validated-by=ci",
        ],
    );
    env.ingest(
        &broken_dir(&env),
        &[
            "--repo",
            BROKEN,
            "--revision",
            BROKEN_COMMIT,
            "--ref",
            "main",
            "--ref",
            "v1",
        ],
    );
    let served = Served::start(&env, &[]);
    let info = get_json(&served.addr, &format!("/api/models/{REPO}/revision/{c1}"));
    let m = &info["modelcas"];
    // The generated series passes, with warnings only (tokenizer.structure, today).
    let verdict = m["check"]["verdict"].as_str().unwrap();
    assert!(["passed", "warnings"].contains(&verdict), "{info}");
    assert_eq!(m["check"]["errors"], 0, "{info}");
    let warnings = m["check"]["warnings"].as_u64().unwrap();
    assert!(m["check"]["rules"].as_u64().unwrap() >= 1, "{info}");
    assert_eq!(
        m["labels"],
        serde_json::json!({"validated-by": "ci", "vllm": "0.11.0"}),
        "{info}"
    );
    assert_eq!(
        get_json(&served.addr, &format!("/api/models/{REPO}"))["modelcas"],
        *m
    );
    // Not locked: a failing revision is served, its verdict said.
    let broken = get_json(&served.addr, &format!("/api/models/{BROKEN}/revision/v1"));
    assert_eq!(broken["modelcas"]["check"]["verdict"], "failed", "{broken}");
    assert_eq!(
        broken["modelcas"]["labels"],
        serde_json::json!({}),
        "{broken}"
    );

    let (status, page) = get(&served.addr, &format!("/ui/repos/{REPO}"), &[]);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("<th>Release check</th><th>Labels</th>"),
        "{page}"
    );
    assert!(
        page.contains(&format!("data-check=\"{verdict}\"")),
        "{page}"
    );
    match warnings {
        0 => assert!(
            page.contains(&format!("data-check=\"{verdict}\">ok</td>")),
            "{page}"
        ),
        1 => assert!(page.contains("<summary>ok, 1 warning</summary>"), "{page}"),
        n => assert!(
            page.contains(&format!("<summary>ok, {n} warnings</summary>")),
            "{page}"
        ),
    }
    for p in m["check"]["problems"].as_array().unwrap() {
        let message = p["message"].as_str().unwrap();
        assert!(
            page.contains(&format!("<li>{message}</li>"))
                || message.contains(['<', '&', '"', '\'']),
            "{page}"
        );
    }
    assert!(
        page.contains("validated-by=ci") && page.contains("vllm=0.11.0"),
        "{page}"
    );
    let (_, page) = get(&served.addr, &format!("/ui/repos/{BROKEN}"), &[]);
    assert!(page.contains("data-check=\"failed\""), "{page}");
    assert!(page.contains("<summary>FAILED ("), "{page}");
    assert!(page.contains("<li>model.safetensors: "), "{page}");
    let (_, page) = get(&served.addr, "/", &[]);
    let row = |repo: &str| {
        let at = page.find(&format!("<tr data-repo=\"{repo}\"")).unwrap();
        page[at..at + page[at..].find("</tr>").unwrap()].to_string()
    };
    assert!(row(BROKEN).contains("data-failing-refs=\"2\""), "{page}");
    assert!(row(REPO).contains("data-failing-refs=\"0\""), "{page}");
}
