//! Uploads through `modelcas serve` (issue 41): the real `huggingface_hub` client uploading
//! with plain LFS (tests/hub_upload.py) and reading back byte for byte, with a second
//! upload that sends only the changed shard; and what a hostile or unlucky client sends
//! raw: forged and expired upload URLs, lying and truncated bodies, unsafe paths, commits
//! naming what was never uploaded, tokens without write scope, two commits to one branch
//! at once. After every refusal the branch is where it was and `fsck` is clean.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

use common::{go_on, repo_root, sha256_bytes, wait_until, Env, Served};
use serde_json::{json, Value};

const WRITER: &str = "writer-0123456789";
const READER: &str = "reader-0123456789";

/// Commits paused at `publish-commit-start` (after the branch's commit lock is taken) until
/// told to go on.
struct CommitPause {
    dir: std::path::PathBuf,
}

impl CommitPause {
    const POINT: &'static str = "publish-commit-start";

    fn new(env: &Env) -> CommitPause {
        let dir = env.path("pause");
        std::fs::create_dir_all(&dir).unwrap();
        CommitPause { dir }
    }

    /// The environment of a hub whose commits pause.
    fn vars(&self) -> [(&'static str, &str); 2] {
        [
            ("MODELCAS_PAUSE_AT", Self::POINT),
            ("MODELCAS_PAUSE_DIR", self.dir.to_str().unwrap()),
        ]
    }

    /// Waits until a commit has reached the point.
    fn reached(&self) {
        let flag = self.dir.join(format!("{}.reached", Self::POINT));
        wait_until(
            "a commit to pause",
            std::time::Duration::from_secs(60),
            || flag.exists().then_some(()),
        );
    }

    /// Lets the paused commit (and every later one) go on.
    fn go_on(&self) {
        go_on(&self.dir, Self::POINT);
    }

    /// Makes the next commit pause again.
    fn rearm(&self) {
        for f in std::fs::read_dir(&self.dir).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
    }
}

/// A hub on an empty store taking uploads to `team/*` from [`WRITER`].
fn hub(env: &Env, vars: &[(&str, &str)]) -> Served {
    hub_at(env, "spool", vars)
}

/// [`hub`] with its spool at `spool` in `env` (another hub over the same store: another
/// spool, and an index of its own in `vars`).
fn hub_at(env: &Env, spool: &str, vars: &[(&str, &str)]) -> Served {
    let tokens = env.path("tokens");
    std::fs::write(
        &tokens,
        format!("{WRITER}  write=team/*  # CI\n{READER}  # readers\n"),
    )
    .unwrap();
    let spool = env.path(spool);
    Served::start_with(
        env,
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--upload-dir",
            spool.to_str().unwrap(),
        ],
        vars,
    )
}

/// One HTTP/1.0 request: (status, head and body as text). `send` bytes of the body are
/// sent (all of it when `None`), then the write side is shut.
fn request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
    send: Option<usize>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(&body[..send.unwrap_or(body.len())]);
    let _ = s.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).to_string();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// The body of a GET, as bytes.
fn download(addr: &str, path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    let req =
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {READER}\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200") || out.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&out[..at])
    );
    out.split_off(at + 4)
}

fn json_of(resp: &str) -> Value {
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// The commit `main` of `repo` names now (as the Hub API answers it).
fn head(addr: &str, repo: &str) -> Option<String> {
    let (status, resp) = request(
        addr,
        "GET",
        &format!("/api/models/{repo}/revision/main"),
        Some(READER),
        b"",
        None,
    );
    (status == 200).then(|| json_of(&resp)["sha"].as_str().unwrap().to_string())
}

fn ndjson(lines: &[Value]) -> Vec<u8> {
    lines
        .iter()
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .into_bytes()
}

fn header() -> Value {
    json!({"key": "header", "value": {"summary": "s", "description": ""}})
}

fn inline(path: &str, bytes: &[u8]) -> Value {
    use base64::Engine as _;
    let content = base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"key": "file", "value": {"path": path, "content": content, "encoding": "base64"}})
}

fn lfs(path: &str, bytes: &[u8]) -> Value {
    json!({"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": sha256_bytes(bytes), "size": bytes.len()}})
}

/// The upload URL an LFS batch hands out for `bytes` (path part, after the host).
fn upload_path(addr: &str, repo: &str, bytes: &[u8]) -> String {
    let batch = json!({"operation": "upload", "transfers": ["basic"], "objects": [{"oid": sha256_bytes(bytes), "size": bytes.len()}], "hash_algo": "sha256"});
    let (status, resp) = request(
        addr,
        "POST",
        &format!("/{repo}.git/info/lfs/objects/batch"),
        Some(WRITER),
        batch.to_string().as_bytes(),
        None,
    );
    assert_eq!(status, 200, "{resp}");
    let href = json_of(&resp)["objects"][0]["actions"]["upload"]["href"]
        .as_str()
        .unwrap()
        .to_string();
    href.split_once(addr).unwrap().1.to_string()
}

fn commit(addr: &str, repo: &str, lines: &[Value]) -> (u16, String) {
    commit_to(addr, repo, "main", lines)
}

fn commit_to(addr: &str, repo: &str, branch: &str, lines: &[Value]) -> (u16, String) {
    request(
        addr,
        "POST",
        &format!("/api/models/{repo}/commit/{branch}"),
        Some(WRITER),
        &ndjson(&[vec![header()], lines.to_vec()].concat()),
        None,
    )
}

fn metric(addr: &str, needle: &str) -> f64 {
    let (_, m) = request(addr, "GET", "/metrics", None, b"", None);
    m.lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn spool_files(env: &Env, sub: &str) -> usize {
    fn count(dir: &std::path::Path) -> usize {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| match e.file_type().map(|t| t.is_dir()) {
                        Ok(true) => count(&e.path()),
                        _ => usize::from(!e.file_name().to_string_lossy().ends_with(".xet")),
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    count(&env.path("spool").join(sub))
}

/// Runs tests/hub_upload.py against a fresh hub, with hf_xet or with plain LFS; the
/// client's facts and the hub.
fn real_client(xet: bool) -> (Env, Served, Value) {
    let env = Env::empty();
    let srv = hub(&env, &[]);
    let work = env.path("client");
    std::fs::create_dir_all(&work).unwrap();
    let mut c = common::python();
    c.arg(repo_root().join("tests/hub_upload.py"))
        .arg(format!("http://{}", srv.addr))
        .arg("team/tiny")
        .arg(&work)
        .arg(WRITER)
        .arg(READER)
        .env("HF_XET_CLIENT_RETRY_BASE_DELAY", "100ms");
    if xet {
        c.env_remove("HF_HUB_DISABLE_XET");
    } else {
        c.env("HF_HUB_DISABLE_XET", "1");
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "client failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        srv.log()
    );
    let facts: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(facts["files"], 6);
    assert_eq!(facts["third_files"], 6, "docs/ deleted, notes.txt added");
    let stored = env.stored_files(&format!("team/tiny@{}", facts["second"].as_str().unwrap()));
    assert_eq!(stored.len(), 6);
    if !xet {
        assert_eq!(
            spool_files(&env, "objects"),
            0,
            "every spooled file went into the store"
        );
    }
    (env, srv, facts)
}

#[test]
fn huggingface_hub_uploads_with_lfs_and_reads_back_every_byte() {
    let (env, srv, _) = real_client(false);
    // Three LFS objects in the first upload (the tokenizer and two shards; the config
    // files went inline), one in the second: only the changed shard was sent.
    assert_eq!(
        metric(&srv.addr, "endpoint=\"lfs-upload\",status=\"200\""),
        4.0,
        "{}",
        srv.log()
    );
    assert_eq!(metric(&srv.addr, "endpoint=\"xet-xorb-upload\""), 0.0);
    common::fsck_clean(&env, true);
}

#[test]
fn huggingface_hub_uploads_with_xet_and_reads_back_every_byte() {
    let (env, srv, _) = real_client(true);
    assert_eq!(
        metric(&srv.addr, "endpoint=\"lfs-upload\""),
        0.0,
        "{}",
        srv.log()
    );
    assert!(
        metric(&srv.addr, "endpoint=\"xet-xorb-upload\",status=\"200\"") >= 2.0,
        "{}",
        srv.log()
    );
    // One shard per upload that sent files (the first and the one-shard change).
    assert!(
        metric(&srv.addr, "endpoint=\"xet-shard-upload\",status=\"200\"") >= 2.0,
        "{}",
        srv.log()
    );
    assert_eq!(metric(&srv.addr, "status=\"500\""), 0.0, "{}", srv.log());
    // hf_xet sends every file before the client drops the unchanged ones from the commit:
    // those wait in the spool for its TTL (the tokenizer, the first shard and the changed
    // one, sent again by the third upload, which commits nothing).
    assert!(
        spool_files(&env, "objects") <= 3,
        "{}",
        spool_files(&env, "objects")
    );
    common::fsck_clean(&env, true);
}

/// One phase of tests/hub_upload_dedup.py (a client process with an empty cache); the
/// bytes serve received for it.
fn dedup_phase(env: &Env, srv: &Served, phase: &str) -> f64 {
    let before = metric(&srv.addr, "modelcas_serve_upload_bytes_received");
    let out = common::python()
        .arg(repo_root().join("tests/hub_upload_dedup.py"))
        .arg(format!("http://{}", srv.addr))
        .arg("team/dedup")
        .arg(env.path("client"))
        .arg(WRITER)
        .arg(phase)
        .env("HF_XET_CLIENT_RETRY_BASE_DELAY", "100ms")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "phase {phase} failed:\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        srv.log()
    );
    metric(&srv.addr, "modelcas_serve_upload_bytes_received") - before
}

#[test]
fn a_second_machine_sends_only_the_changed_shard_through_the_global_dedup_query() {
    let env = Env::empty();
    let srv = hub(&env, &[]);
    std::fs::create_dir_all(env.path("client")).unwrap();
    let first = dedup_phase(&env, &srv, "1");
    assert!(first > 6e6, "both shards sent the first time: {first}");
    let second = dedup_phase(&env, &srv, "2");
    // One changed 3 MiB shard, not both: the unchanged one is named by the stored xorb the
    // dedup answer listed, and read back from the store.
    assert!(second < 4.5e6, "the second upload sent {second} bytes");
    assert!(
        metric(&srv.addr, "endpoint=\"xet-dedup\",status=\"200\"") >= 1.0,
        "{}",
        srv.log()
    );
    common::fsck_clean(&env, true);
}

#[test]
fn content_that_came_another_way_is_answered_too() {
    // The base came through LFS (as ingest or pull bring it: no Xet shard); the hub makes
    // its chunk lists in the background after the commit, and when a Xet token is asked.
    let env = Env::empty();
    let srv = hub(&env, &[]);
    std::fs::create_dir_all(env.path("client")).unwrap();
    dedup_phase(&env, &srv, "1-lfs");
    let (status, _) = request(
        &srv.addr,
        "GET",
        "/api/models/team/dedup/xet-write-token/main",
        Some(WRITER),
        b"",
        None,
    );
    assert_eq!(status, 200);
    let records = env.path("spool/xet-files");
    wait_until(
        "the base's chunk lists",
        std::time::Duration::from_secs(60),
        || {
            let n = std::fs::read_dir(&records).map(|d| d.count()).unwrap_or(0);
            (n >= 3).then_some(())
        },
    );
    let second = dedup_phase(&env, &srv, "2");
    assert!(second < 4.5e6, "the second upload sent {second} bytes");
    common::fsck_clean(&env, true);
}

#[test]
fn hostile_uploads_change_nothing() {
    let env = Env::empty();
    let srv = hub(&env, &[]);
    let (a, repo) = (srv.addr.as_str(), "team/hostile");
    let (status, resp) = commit(a, repo, &[inline("config.json", b"{}")]);
    assert_eq!(status, 200, "{resp}");
    let base = head(a, repo).unwrap();
    let unchanged =
        |what: &str| assert_eq!(head(a, repo).as_deref(), Some(base.as_str()), "{what}");

    // Upload URLs: forged, for other bytes, lying, truncated.
    let weights: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let path = upload_path(a, repo, &weights);
    let other = if path.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{other}", &path[..path.len() - 1]);
    assert_eq!(request(a, "PUT", &forged, None, &weights, None).0, 403);
    let mut lying = weights.clone();
    lying[1000] ^= 1;
    let (status, resp) = request(a, "PUT", &path, None, &lying, None);
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("sha256"), "{resp}");
    let (status, _) = request(a, "PUT", &path, None, &weights, Some(1000));
    assert!(
        status == 400 || status == 0,
        "a truncated body is refused ({status})"
    );
    let (status, resp) = request(a, "PUT", &path, None, &weights[..1000], None);
    assert_eq!(status, 400, "Content-Length not the signed size: {resp}");
    assert_eq!(spool_files(&env, "objects"), 0);
    wait_until(
        "no temporary left in the spool",
        std::time::Duration::from_secs(10),
        || (spool_files(&env, "tmp") == 0).then_some(()),
    );
    let verify = json!({"oid": sha256_bytes(&weights), "size": weights.len()}).to_string();
    let (status, _) = request(
        a,
        "POST",
        &format!("/upload/verify/{repo}"),
        Some(WRITER),
        verify.as_bytes(),
        None,
    );
    assert_eq!(status, 404, "nothing arrived whole");

    // Commits that name what is not there, or places outside the repository.
    for (lines, status, says) in [
        (vec![lfs("w.bin", &weights)], 400, "never uploaded"),
        (vec![inline("../escape", b"x")], 400, ".."),
        (vec![inline("/etc/passwd", b"x")], 400, "absolute"),
        (vec![inline(".git/config", b"x")], 400, ".git"),
        (
            vec![inline("config.json/x", b"x")],
            400,
            "both a file and a folder",
        ),
        (
            vec![json!({"key": "deletedFile", "value": {"path": "nope"}})],
            404,
            "doesn't exist",
        ),
        (
            vec![json!({"key": "rename", "value": {"path": "x"}})],
            400,
            "unknown operation",
        ),
    ] {
        let (got, resp) = commit(a, repo, &lines);
        assert_eq!(got, status, "{lines:?}: {resp}");
        assert!(resp.contains(says), "{lines:?}: {resp}");
        unchanged(&format!("{lines:?}"));
    }
    let (status, _) = request(
        a,
        "POST",
        &format!("/api/models/{repo}/commit/main"),
        Some(WRITER),
        b"not json",
        None,
    );
    assert_eq!(status, 400);
    let (status, _) = request(
        a,
        "POST",
        &format!("/api/models/{repo}/commit/main?create_pr=1"),
        Some(WRITER),
        &ndjson(&[header(), inline("x", b"x")]),
        None,
    );
    assert_eq!(status, 400);

    // Tokens: none, read only, write elsewhere.
    let body = ndjson(&[header(), inline("x", b"x")]);
    assert_eq!(
        request(
            a,
            "POST",
            &format!("/api/models/{repo}/commit/main"),
            None,
            &body,
            None
        )
        .0,
        401
    );
    assert_eq!(
        request(
            a,
            "POST",
            &format!("/api/models/{repo}/commit/main"),
            Some(READER),
            &body,
            None
        )
        .0,
        403
    );
    assert_eq!(
        request(
            a,
            "POST",
            "/api/models/other/model/commit/main",
            Some(WRITER),
            &body,
            None
        )
        .0,
        403
    );
    unchanged("tokens");
    assert_eq!(head(a, "other/model"), None, "nothing was made elsewhere");

    // Xet: without its write token, lying xorbs and shards; nothing kept.
    let (status, resp) = request(
        a,
        "GET",
        &format!("/api/models/{repo}/xet-write-token/main"),
        Some(WRITER),
        b"",
        None,
    );
    assert_eq!(status, 200, "{resp}");
    let xet = json_of(&resp)["accessToken"].as_str().unwrap().to_string();
    assert_eq!(
        request(
            a,
            "GET",
            &format!("/api/models/{repo}/xet-write-token/main"),
            Some(READER),
            b"",
            None
        )
        .0,
        403
    );
    let chunk = b"hello xet\n".repeat(10);
    let mut record = vec![0u8, 100, 0, 0, 0, 100, 0, 0];
    record.extend_from_slice(&chunk);
    let name = "49dd99b90f8a27df4bc307d9f2b7f8dd40c048423463f71b7dcab5a3f29c03b5";
    let xorb_path = format!("/v1/xorbs/default/{name}");
    assert_eq!(request(a, "POST", &xorb_path, None, &record, None).0, 401);
    assert_eq!(
        request(a, "POST", &xorb_path, Some(WRITER), &record, None).0,
        401,
        "a token of the token file is not a Xet token"
    );
    let mut lying = record.clone();
    lying[20] ^= 1;
    let (status, resp) = request(a, "POST", &xorb_path, Some(&xet), &lying, None);
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("hash to"), "{resp}");
    assert_eq!(
        request(a, "POST", &xorb_path, Some(&xet), &record[..50], None).0,
        400
    );
    assert_eq!(spool_files(&env, "xorbs"), 0);
    let (status, resp) = request(a, "POST", &xorb_path, Some(&xet), &record, None);
    assert_eq!(
        (status, json_of(&resp)["was_inserted"].as_bool()),
        (200, Some(true)),
        "{resp}"
    );
    let (status, resp) = request(a, "POST", "/v1/shards", Some(&xet), &[0u8; 48], None);
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("shard tag"), "{resp}");
    assert_eq!(
        request(
            a,
            "POST",
            "/v1/xorb-grants/default/{name}",
            Some(&xet),
            b"{}",
            None
        )
        .0,
        404,
        "no grants: hf_xet falls back"
    );
    assert_eq!(
        request(
            a,
            "GET",
            &format!("/v1/chunks/default/{name}"),
            Some(&xet),
            b"",
            None
        )
        .0,
        404
    );
    unchanged("xet");

    // The upload itself, whole, then committed.
    assert_eq!(request(a, "PUT", &path, None, &weights, None).0, 200);
    let (status, resp) = commit(a, repo, &[lfs("w.bin", &weights)]);
    assert_eq!(status, 200, "{resp}");
    assert_ne!(head(a, repo).unwrap(), base);
    assert_eq!(download(a, &format!("/{repo}/resolve/main/w.bin")), weights);
    common::fsck_clean(&env, true);
}

#[test]
fn bytes_sent_for_one_repository_are_not_another_s() {
    // Hostile review of issue 41 (helper-42, 1): the spool was shared, so any write token
    // knowing a sha256 got bytes another repository's uploader had sent (verify 200, the
    // batch "present", the commit 200). Failed before: the commit to other/x answered 200.
    let env = Env::empty();
    let tokens = env.path("tokens");
    std::fs::write(
        &tokens,
        format!("{WRITER}  write=team/*\nother-writer  write=other/*\n"),
    )
    .unwrap();
    let srv = Served::start(
        &env,
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--upload-dir",
            env.path("spool").to_str().unwrap(),
        ],
    );
    let a = srv.addr.as_str();
    let secret: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let path = upload_path(a, "team/secret", &secret);
    assert_eq!(request(a, "PUT", &path, None, &secret, None).0, 200);
    let verify = json!({"oid": sha256_bytes(&secret), "size": secret.len()}).to_string();
    let (status, _) = request(
        a,
        "POST",
        "/upload/verify/other/x",
        Some("other-writer"),
        verify.as_bytes(),
        None,
    );
    assert_eq!(status, 404);
    let batch = json!({"operation": "upload", "objects": [{"oid": sha256_bytes(&secret), "size": secret.len()}]});
    let (_, resp) = request(
        a,
        "POST",
        "/other/x.git/info/lfs/objects/batch",
        Some("other-writer"),
        batch.to_string().as_bytes(),
        None,
    );
    assert!(
        json_of(&resp)["objects"][0]["actions"]["upload"].is_object(),
        "{resp}"
    );
    let body = ndjson(&[header(), lfs("stolen.bin", &secret)]);
    let (status, resp) = request(
        a,
        "POST",
        "/api/models/other/x/commit/main",
        Some("other-writer"),
        &body,
        None,
    );
    assert_eq!(status, 400, "{resp}");
    assert_eq!(head(a, "other/x"), None);
    // The uploader's own commit still takes it.
    let body = ndjson(&[header(), lfs("w.bin", &secret)]);
    let (status, resp) = request(
        a,
        "POST",
        "/api/models/team/secret/commit/main",
        Some(WRITER),
        &body,
        None,
    );
    assert_eq!(status, 200, "{resp}");
}

#[test]
fn slow_uploads_leave_the_router_its_threads() {
    // Hostile review of issue 41 (helper-42, 2): each upload held a thread of the
    // router's pool, so as many slow uploads as `--threads` stopped every download.
    // Failed before: the download below timed out.
    let env = Env::empty();
    let tokens = env.path("tokens");
    std::fs::write(&tokens, format!("{WRITER}  write=team/*\n{READER}\n")).unwrap();
    let srv = Served::start(
        &env,
        &[
            "--token-file",
            tokens.to_str().unwrap(),
            "--upload-dir",
            env.path("spool").to_str().unwrap(),
            "--threads",
            "4",
        ],
    );
    let a = srv.addr.as_str();
    assert_eq!(
        commit(a, "team/slow", &[inline("config.json", b"{}")]).0,
        200
    );
    let data = vec![7u8; 1 << 20];
    let path = upload_path(a, "team/slow", &data);
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = TcpStream::connect(a).unwrap();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {a}\r\nContent-Length: {}\r\n\r\n",
            data.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(&data[..10]).unwrap();
        slow.push(s);
    }
    // Every upload has started: its first bytes reached the spooling threads.
    wait_until(
        "the slow uploads to start",
        std::time::Duration::from_secs(30),
        || (metric(a, "modelcas_serve_upload_bytes_received") >= 80.0).then_some(()),
    );
    let started = std::time::Instant::now();
    let got = download(a, "/team/slow/resolve/main/config.json");
    assert_eq!(got, b"{}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(slow);
}

#[test]
fn a_token_that_may_not_write_is_answered_before_its_body() {
    // Hostile review of issue 41 (helper-42, 8): commit bodies were read before the write
    // scope was checked: a read token held the body slots. Failed before: no answer until
    // the body came (here: never).
    let env = Env::empty();
    let srv = hub(&env, &[]);
    let a = srv.addr.as_str();
    let mut s = TcpStream::connect(a).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let head = format!("POST /api/models/team/x/commit/main HTTP/1.1\r\nHost: {a}\r\nAuthorization: Bearer {READER}\r\nContent-Length: 1000000\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 403"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
}

#[test]
fn refs_the_hub_keeps_and_repositories_it_cannot_make() {
    // Hostile review of issue 41 (helper-42, 3, 13): `delete_tag("main")` deleted the main
    // branch; `refs/pr/1` and `HEAD` were taken as branches; `private=True` answered 200
    // for a repository every token reads.
    let env = Env::empty();
    let srv = hub(&env, &[]);
    let a = srv.addr.as_str();
    assert_eq!(commit(a, "team/refs", &[inline("f", b"1")]).0, 200);
    for (route, want) in [("tag", 404), ("branch", 403)] {
        let (status, resp) = request(
            a,
            "DELETE",
            &format!("/api/models/team/refs/{route}/main"),
            Some(WRITER),
            b"",
            None,
        );
        assert_eq!(status, want, "{route}: {resp}");
    }
    assert!(head(a, "team/refs").is_some());
    for name in ["refs%2Fpr%2F1", "HEAD"] {
        let (status, resp) = request(
            a,
            "POST",
            &format!("/api/models/team/refs/branch/{name}"),
            Some(WRITER),
            b"{}",
            None,
        );
        assert_eq!(status, 400, "{name}: {resp}");
        let body = ndjson(&[header(), inline("g", b"2")]);
        let (status, _) = request(
            a,
            "POST",
            &format!("/api/models/team/refs/commit/{name}"),
            Some(WRITER),
            &body,
            None,
        );
        assert_eq!(status, 400, "{name}");
    }
    let private = json!({"name": "p", "organization": "team", "private": true}).to_string();
    assert_eq!(
        request(
            a,
            "POST",
            "/api/repos/create",
            Some(WRITER),
            private.as_bytes(),
            None
        )
        .0,
        400
    );
    let bad = json!({"name": "a--b", "organization": "team"}).to_string();
    assert_eq!(
        request(
            a,
            "POST",
            "/api/repos/create",
            Some(WRITER),
            bad.as_bytes(),
            None
        )
        .0,
        400
    );
}

#[test]
fn two_commits_to_one_branch_at_once_one_wins_the_other_is_told() {
    let env = Env::empty();
    let pause = CommitPause::new(&env);
    let srv = hub(&env, &pause.vars());
    let (a, repo) = (srv.addr.clone(), "team/race");
    let first = std::thread::spawn({
        let a = a.clone();
        move || commit(&a, repo, &[inline("f.txt", b"first")])
    });
    pause.reached();
    let (status, resp) = commit(&a, repo, &[inline("f.txt", b"second")]);
    assert_eq!(status, 409, "{resp}");
    assert_eq!(
        head(&a, repo),
        None,
        "nothing visible while the first is applied"
    );
    pause.go_on();
    let (status, resp) = first.join().unwrap();
    assert_eq!(status, 200, "{resp}");
    let oid = json_of(&resp)["commitOid"].as_str().unwrap().to_string();
    assert_eq!(head(&a, repo).as_deref(), Some(oid.as_str()));
    assert_eq!(
        download(&a, &format!("/{repo}/resolve/main/f.txt")),
        b"first"
    );
}

/// Two hubs over one store (two machines): commits to one branch are applied one at a time
/// across them, as in one hub; a hub killed while it holds a branch blocks nobody after.
#[test]
fn two_hubs_over_one_store_commit_to_a_branch_one_at_a_time() {
    let env = Env::empty();
    let pause = CommitPause::new(&env);
    let index_b = env.path("index-b");
    let mut a = hub_at(&env, "spool-a", &pause.vars());
    let b = hub_at(
        &env,
        "spool-b",
        &[("MODELCAS_INDEX", index_b.to_str().unwrap())],
    );
    let repo = "team/shared";
    let (status, resp) = commit(&b.addr, repo, &[inline("base.txt", b"base")]);
    assert_eq!(status, 200, "{resp}");
    let first = std::thread::spawn({
        let a = a.addr.clone();
        move || commit(&a, repo, &[inline("a.txt", b"from A")])
    });
    pause.reached();
    let (status, resp) = commit(&b.addr, repo, &[inline("b.txt", b"from B")]);
    assert_eq!(
        status, 409,
        "B must not move the branch A is committing to: {resp}"
    );
    pause.go_on();
    let (status, resp) = first.join().unwrap();
    assert_eq!(status, 200, "{resp}");
    let oid_a = json_of(&resp)["commitOid"].as_str().unwrap().to_string();
    assert_eq!(head(&b.addr, repo).as_deref(), Some(oid_a.as_str()));
    // B again, now built on A's commit: every file of both is on the branch.
    let (status, resp) = commit(&b.addr, repo, &[inline("b.txt", b"from B")]);
    assert_eq!(status, 200, "{resp}");
    for (path, bytes) in [
        ("base.txt", &b"base"[..]),
        ("a.txt", b"from A"),
        ("b.txt", b"from B"),
    ] {
        assert_eq!(
            download(&b.addr, &format!("/{repo}/resolve/main/{path}")),
            bytes,
            "{path}"
        );
    }
    // A killed while it holds the branch: B commits at once (the lock's holder is gone).
    pause.rearm();
    let stuck = std::thread::spawn({
        let a = a.addr.clone();
        move || commit(&a, repo, &[inline("never.txt", b"never")])
    });
    pause.reached();
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let _ = stuck.join();
    let (status, resp) = commit(&b.addr, repo, &[inline("c.txt", b"after A died")]);
    assert_eq!(status, 200, "{resp}");
    let r = request(
        &b.addr,
        "GET",
        &format!("/{repo}/resolve/main/never.txt"),
        Some(READER),
        b"",
        None,
    );
    assert!(
        r.0 == 404,
        "the killed commit is not on the branch: {}",
        r.1
    );
}

/// A tag is a ref with a tag record naming its commit: a record left behind by a ref that
/// another command removed or moved makes no branch a tag, and a damaged record keeps the
/// tag a tag (no commit moves it).
#[test]
fn tag_records_that_lie_never_move_a_tag() {
    let env = Env::empty();
    let srv = hub(&env, &[]);
    let a = srv.addr.as_str();
    let repo = "team/tags";
    let (_, resp) = commit(a, repo, &[inline("f", b"1")]);
    let first = json_of(&resp)["commitOid"].as_str().unwrap().to_string();
    let tag = |name: &str| {
        request(
            a,
            "POST",
            &format!("/api/models/{repo}/tag/main"),
            Some(WRITER),
            json!({ "tag": name }).to_string().as_bytes(),
            None,
        )
    };
    let tags = || {
        let (status, resp) = request(
            a,
            "GET",
            &format!("/api/models/{repo}/refs"),
            Some(READER),
            b"",
            None,
        );
        assert_eq!(status, 200, "{resp}");
        let v = json_of(&resp);
        v["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(tag("v1").0, 200);
    assert_eq!(tags(), ["v1"]);
    // Removed by the operator's `ref` commands and set again elsewhere: a branch now.
    let (_, resp) = commit(a, repo, &[inline("f", b"2")]);
    let second = json_of(&resp)["commitOid"].as_str().unwrap().to_string();
    env.ok(&["ref", repo, "v1", &second]);
    assert!(tags().is_empty(), "a moved ref is a branch");
    let (status, resp) = commit_to(a, repo, "v1", &[inline("g", b"on v1")]);
    assert_eq!(status, 200, "{resp}");
    // A tag whose record is damaged stays a tag: no commit moves it.
    assert_eq!(tag("v2").0, 200);
    let (store, key) = (env.backend(), "repos/team/tags/tags/v2");
    let mut bytes = store.get(key).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 1;
    store.put(key, &bytes).unwrap();
    assert_eq!(tags(), ["v2"]);
    let (status, resp) = commit_to(a, repo, "v2", &[inline("h", b"moved?")]);
    assert_eq!(status, 400, "{resp}");
    assert!(resp.contains("is a tag"), "{resp}");
    assert_ne!(first, second);
}

/// Hostile review of issue 41 (helper-44, 7): sixteen bodies trickled a byte at a time held
/// every upload place for as long as they trickled (each frame came within the stall
/// timeout); a body slower than 16 KiB/s past the grace is cut off and frees its place.
#[test]
fn trickled_uploads_are_cut_off_and_free_their_places() {
    let env = Env::empty();
    let srv = hub(&env, &[("MODELCAS_TEST_UPLOAD_GRACE_SECS", "1")]);
    let a = srv.addr.clone();
    let data = vec![3u8; 1 << 20];
    let path = upload_path(&a, "team/trickle", &data);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tricklers = Vec::new();
    for _ in 0..16 {
        let mut s = TcpStream::connect(&a).unwrap();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: {a}\r\nContent-Length: {}\r\n\r\n",
            data.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let stop = stop.clone();
        // The attacker's workload: a byte every 100 ms until cut off or told to stop.
        tricklers.push(std::thread::spawn(move || {
            let mut sent = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sent < 4000 {
                if s.write_all(&[7]).is_err() {
                    return; // cut off
                }
                sent += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }));
    }
    let honest = vec![9u8; 4096];
    let honest_path = upload_path(&a, "team/trickle", &honest);
    let got = wait_until(
        "an honest upload to get a place",
        std::time::Duration::from_secs(60),
        || {
            let (status, _) = request(&a, "PUT", &honest_path, None, &honest, None);
            (status == 200).then_some(status)
        },
    );
    assert_eq!(got, 200);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tricklers {
        t.join().unwrap();
    }
}

/// Hostile review of issue 41 (helper-45, 1 and 2): the tag check of a commit and the
/// branch and tag routes took no lock, so a commit in flight moved a tag made meanwhile of
/// its branch's name, and two creations of one name both answered 200. The routes now take
/// the name's commit lock, and a commit looks for a tag again under it.
#[test]
fn refs_are_not_changed_under_a_commit_in_flight() {
    let env = Env::empty();
    let pause = CommitPause::new(&env);
    let srv = hub(&env, &pause.vars());
    let (a, repo) = (srv.addr.clone(), "team/inflight");
    let first = std::thread::spawn({
        let a = a.clone();
        move || commit(&a, repo, &[inline("base.txt", b"base")])
    });
    pause.reached();
    pause.go_on();
    assert_eq!(first.join().unwrap().0, 200);
    let route = |method: &str, path: &str, body: Value| {
        request(
            &a,
            method,
            &format!("/api/models/{repo}/{path}"),
            Some(WRITER),
            body.to_string().as_bytes(),
            None,
        )
    };
    assert_eq!(route("POST", "branch/b", json!({})).0, 200);
    pause.rearm();
    let inflight = std::thread::spawn({
        let a = a.clone();
        move || commit_to(&a, repo, "b", &[inline("b.txt", b"on b")])
    });
    pause.reached();
    let (status, resp) = route("DELETE", "branch/b", json!({}));
    assert_eq!(
        status, 409,
        "the branch a commit is applied to was deleted: {resp}"
    );
    let (status, resp) = route("POST", "tag/main", json!({"tag": "b"}));
    assert_eq!(status, 409, "{resp}");
    pause.go_on();
    let (status, resp) = inflight.join().unwrap();
    assert_eq!(status, 200, "{resp}");
    let oid = json_of(&resp)["commitOid"].as_str().unwrap().to_string();
    let (_, refs) = request(
        &a,
        "GET",
        &format!("/api/models/{repo}/refs"),
        Some(READER),
        b"",
        None,
    );
    let refs = json_of(&refs);
    assert_eq!(refs["tags"], json!([]), "{refs}");
    let b = refs["branches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "b")
        .unwrap();
    assert_eq!(b["targetCommit"], oid.as_str());
}
