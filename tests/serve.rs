//! `modelcas serve` with the real `huggingface_hub` client (pip): snapshot_download by ref
//! and by sha, one file, not-found errors, a resumed download; the access log, metrics,
//! and bearer tokens.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{ingest_series, repo_root, series, Env};

const REPO: &str = "demo-org/demo-llm";

struct Served {
    child: Child,
    addr: String,
    log: std::path::PathBuf,
}

impl Served {
    fn start(env: &Env, extra: &[&str]) -> Served {
        let addr = common::local_addr();
        let port = addr.rsplit(':').next().unwrap().to_string();
        let log = env.path(&format!("serve-{port}.log"));
        let child = env
            .cmd()
            .args(["serve", "--listen", &addr])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "serve did not come up: {}",
                std::fs::read_to_string(&log).unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Served { child, addr, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
        .env("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1");
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

    // One access-log line per download, a 206 among them; no Xet header anywhere.
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
    assert!(!head.to_ascii_lowercase().contains("xet"), "{head}");
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
