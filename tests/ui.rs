//! `modelcas serve`'s pages for people (issue 29), end to end on a running serve: the
//! figures of each page against what `modelcas ls`, `stats` and `gc --dry-run` print for the
//! same store; hostile text (the Host header, query values, unknown names) escaped; auth
//! (bearer or Basic once, then the cookie; never a token in the URL; the cookie does not
//! open the API); `--no-ui`; a repository of 1,000 revisions answered within the API's
//! budget; and a real browser (headless Chromium) rendering the pages, with a screenshot
//! kept in the test output directory (`target/test-output/ui/`, or `$MODELCAS_TEST_OUTPUT`).

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ingest_series, repo_root, series, wait_until, Env, Served};

const REPO: &str = "demo-org/demo-llm";

/// A GET over HTTP/1.0: (status, head, body).
fn get(addr: &str, path: &str, headers: &[&str]) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\n");
    if !headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("host:"))
    {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

/// The value of every `name="..."` attribute in `html`, in order.
fn attrs<'a>(html: &'a str, name: &str) -> Vec<&'a str> {
    let pat = format!("{name}=\"");
    html.match_indices(&pat)
        .map(|(i, _)| {
            let rest = &html[i + pat.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

/// The texts of every `<span class="tag">` in `html`.
fn tags(html: &str) -> Vec<String> {
    html.split("<span class=\"tag\">")
        .skip(1)
        .map(|s| s[..s.find("</span>").unwrap()].to_string())
        .collect()
}

/// The rows of a table: the HTML of each `<tr {key}="...">`, by that value.
fn rows<'a>(html: &'a str, key: &str) -> BTreeMap<String, &'a str> {
    let pat = format!("<tr {key}=\"");
    html.split(&pat)
        .skip(1)
        .map(|s| {
            let id = &s[..s.find('"').unwrap()];
            let end = s.find("</tr>").unwrap();
            (id.to_string(), &s[..end])
        })
        .collect()
}

/// The cell of the store page with `id`.
fn cell<'a>(html: &'a str, id: &str) -> &'a str {
    let pat = format!("id=\"{id}\">");
    let s = &html[html.find(&pat).unwrap_or_else(|| panic!("no {id}")) + pat.len()..];
    &s[..s.find("</td>").unwrap()]
}

fn num(s: &str) -> u64 {
    s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// A config file for serve and the commands: gc keeps the newest revision of each repo.
fn config(env: &Env) -> PathBuf {
    let p = env.path("config.toml");
    std::fs::write(&p, "[gc]\nkeep_last = 1\n").unwrap();
    p
}

fn json_cfg(env: &Env, cfg: &Path, args: &[&str]) -> serde_json::Value {
    let out = env
        .cmd()
        .env("MODELCAS_CONFIG", cfg)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Sets a local store's object to look `days` old.
fn age(env: &Env, key: &str, days: u64) {
    let f = std::fs::File::options()
        .write(true)
        .open(Path::new(&env.location).join(key))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(days * 86_400))
        .unwrap();
}

/// The series r1..r4 with refs, an older unreferenced revision, a newer pinned one, and
/// a second repository sharing data; one revision read through serve.
fn fixture(env: &Env) -> (String, String) {
    ingest_series(env);
    let s = series();
    let old = "0123456789abcdef0123456789abcdef01234567".to_string();
    let pinned = "fedcba9876543210fedcba9876543210fedcba98".to_string();
    env.ingest(&s.plain("r2"), &["--repo", REPO, "--revision", &old]);
    env.ingest(&s.plain("r3"), &["--repo", REPO, "--revision", &pinned]);
    env.ok(&["pin", &format!("{REPO}@{pinned}")]);
    env.ingest(
        &s.plain("r1"),
        &["--repo", "other-org/small", "--ref", "main"],
    );
    if !env.is_s3() {
        // Nobody used it for 40 days: `gc --unused-for 30d` expires it.
        age(env, &format!("repos/{REPO}/manifests/{old}"), 40);
        age(
            env,
            &format!("repos/{REPO}/manifests/{}", s.commit("r1")),
            40,
        );
    }
    (old, pinned)
}

#[test]
fn every_figure_of_the_pages_matches_ls_stats_and_gc_dry_run() {
    let env = Env::new();
    let (old, _) = fixture(&env);
    let cfg = config(&env);
    let cfg_s = cfg.to_str().unwrap();
    let srv = Served::start_with(&env, &[], &[("MODELCAS_CONFIG", cfg_s)]);
    // A download makes a last-use record; wait until `ls` shows it.
    let r4 = series().commit("r4");
    let (st, _, _) = get(&srv.addr, &format!("/api/models/{REPO}/revision/{r4}"), &[]);
    assert_eq!(st, 200);
    wait_until(
        "`ls` to show a last-use record",
        Duration::from_secs(20),
        || {
            json_cfg(&env, &cfg, &["ls", REPO, "--json"])["commits"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| !c["last_used"].is_null())
                .then_some(())
        },
    );

    // One repository: every revision's row against `ls --json` and gc's dry runs.
    let ls = json_cfg(&env, &cfg, &["ls", REPO, "--json"]);
    let gc = json_cfg(&env, &cfg, &["gc", "--dry-run", "--json"]);
    let gc30 = json_cfg(
        &env,
        &cfg,
        &["gc", "--dry-run", "--json", "--unused-for", "30d"],
    );
    let expired = |v: &serde_json::Value| -> Vec<String> {
        v["expired"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["repo"] == REPO)
            .map(|e| e["commit"].as_str().unwrap().to_string())
            .collect()
    };
    let (exp, exp30) = (expired(&gc), expired(&gc30));
    assert!(
        exp.contains(&old),
        "keep_last = 1 expires the unreferenced older one: {gc}"
    );
    if !env.is_s3() {
        assert!(exp30.contains(&old), "{gc30}");
    }
    let (st, _, page) = get(&srv.addr, "/ui/repos/demo-org/demo-llm?unused-for=30d", &[]);
    assert_eq!(st, 200, "{page}");
    let shown = rows(&page, "data-commit");
    let commits = ls["commits"].as_array().unwrap();
    assert_eq!(shown.len(), commits.len(), "{page}");
    for c in commits {
        let id = c["commit"].as_str().unwrap();
        let row = shown
            .get(id)
            .unwrap_or_else(|| panic!("{id} not on the page"));
        let epochs = attrs(row, "data-epoch");
        assert_eq!(num(epochs[0]), c["ingested_at"].as_u64().unwrap(), "{id}");
        match c["last_used"].as_u64() {
            Some(t) => assert_eq!(num(epochs[1]), t, "{id}"),
            None => assert_eq!(epochs[1], "", "{id}"),
        }
        assert_eq!(num(attrs(row, "data-n")[0]), c["files"].as_u64().unwrap());
        assert_eq!(
            num(attrs(row, "data-bytes")[0]),
            c["bytes"].as_u64().unwrap()
        );
        let refs: Vec<String> = c["refs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect();
        assert_eq!(tags(row), refs, "{id}");
        let verdicts = attrs(row, "data-verdict");
        let want = |list: &[String]| {
            if list.iter().any(|e| e == id) {
                "expire"
            } else {
                "keep"
            }
        };
        assert_eq!(verdicts, vec![want(&exp), want(&exp30)], "{id}: {row}");
    }
    // The rows are in ls's order.
    let page_order: Vec<&str> = attrs(&page, "data-commit");
    let ls_order: Vec<&str> = commits
        .iter()
        .map(|c| c["commit"].as_str().unwrap())
        .collect();
    assert_eq!(page_order, ls_order);

    // The repositories: revisions, refs and logical bytes against `ls --json`.
    let (st, _, page) = get(&srv.addr, "/", &[]);
    assert_eq!(st, 200);
    let listed = json_cfg(&env, &cfg, &["ls", "--json"]);
    let shown = rows(&page, "data-repo");
    let repos = listed["repos"].as_array().unwrap();
    assert_eq!(shown.len(), repos.len());
    for r in repos {
        let id = r["repo"].as_str().unwrap();
        let row = shown[id];
        assert_eq!(num(attrs(row, "data-n")[0]), r["commits"].as_u64().unwrap());
        let refs: Vec<String> = r["refs"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(tags(row), refs);
        let per = json_cfg(&env, &cfg, &["ls", id, "--json"]);
        let logical: u64 = per["commits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(num(attrs(row, "data-bytes")[0]), logical, "{id}");
    }

    // The store: every figure of `stats --json`, and what gc --dry-run would expire.
    let stats = json_cfg(&env, &cfg, &["stats", "--json"]);
    let (st, _, page) = get(&srv.addr, "/ui/store", &[]);
    assert_eq!(st, 200);
    for (id, key) in [
        ("repos", "repos"),
        ("commits", "commits"),
        ("files", "files"),
        ("chunks", "unique_chunks"),
        ("packs", "packs"),
    ] {
        assert_eq!(
            num(attrs(cell(&page, id), "data-n")[0]),
            stats[key].as_u64().unwrap(),
            "{id}"
        );
    }
    for (id, key) in [
        ("logical", "logical_bytes"),
        ("unique", "unique_bytes"),
        ("stored", "stored_bytes"),
    ] {
        assert_eq!(
            num(attrs(cell(&page, id), "data-bytes")[0]),
            stats[key].as_u64().unwrap(),
            "{id}"
        );
    }
    for (id, key) in [
        ("dedup", "dedup_ratio"),
        ("compression", "compression_ratio"),
        ("overall", "total_ratio"),
    ] {
        let shown = cell(&page, id).trim_end_matches('×');
        assert_eq!(
            shown,
            format!("{:.2}", stats[key].as_f64().unwrap()),
            "{id}"
        );
    }
    let would = cell(&page, "would-expire");
    let all = gc["expired"].as_array().unwrap();
    assert_eq!(num(attrs(would, "data-n")[0]), all.len() as u64);
    let bytes: u64 = all.iter().map(|e| e["bytes"].as_u64().unwrap()).sum();
    assert_eq!(num(attrs(would, "data-bytes")[0]), bytes);
}

/// Every `<` of a page opens one of the tags the pages write: no markup came from data
/// (hubserve::ui::html::foreign_markup, the check every test of the pages makes).
fn only_our_markup(page: &str) {
    if let Some(bad) = hubserve::ui::html::foreign_markup(page) {
        panic!("{bad}");
    }
    assert!(!page.contains("<script"), "{page}");
}

#[test]
fn hostile_text_is_escaped_everywhere_it_is_shown() {
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start(&env, &[]);
    let evil = "\"><script>alert(1)</script><img src=x onerror=alert(2)>";
    let host = format!("Host: {evil}");
    for path in [
        "/",
        "/ui/repos/demo-org/demo-llm",
        "/ui/mirror",
        "/ui/store",
    ] {
        let (st, head, page) = get(&srv.addr, path, &[&host]);
        assert_eq!(st, 200, "{path}");
        assert!(
            head.contains("Content-Security-Policy: default-src 'none'"),
            "{head}"
        );
        only_our_markup(&page);
    }
    // The Host header lands in the HF_ENDPOINT line, escaped.
    let (_, _, page) = get(&srv.addr, "/ui/repos/demo-org/demo-llm", &[&host]);
    assert!(
        page.contains("HF_ENDPOINT=http://&quot;&gt;&lt;script&gt;"),
        "{page}"
    );
    // A query value and unknown names are shown in messages: escaped too.
    let q = "/ui/repos/demo-org/demo-llm?unused-for=%22%3E%3Cscript%3Ex";
    let (st, _, page) = get(&srv.addr, q, &[]);
    assert_eq!(st, 400);
    only_our_markup(&page);
    assert!(page.contains("&lt;script&gt;"), "{page}");
    for path in [
        "/ui/repos/a%3Cb%3E/c%22d",
        "/ui/%3Cscript%3E",
        "/ui/repos/org/%3Cimg%20src%3Dx%3E",
    ] {
        let (st, _, page) = get(&srv.addr, path, &[]);
        assert_eq!(st, 404, "{path}");
        only_our_markup(&page);
    }
    // A repository of the org `ui` still downloads: its files are the API's, not pages.
    let s = series();
    env.ingest(&s.plain("r1"), &["--repo", "ui/tools", "--ref", "main"]);
    let (st, _, body) = get(&srv.addr, "/ui/tools/resolve/main/config.json", &[]);
    assert_eq!(st, 200, "{body}");
    let want = std::fs::read_to_string(s.plain("r1").join("config.json")).unwrap();
    assert_eq!(body, want);
    let (st, _, page) = get(&srv.addr, "/ui/repos/ui/tools", &[]);
    assert_eq!(st, 200);
    assert!(page.contains("<h1>ui/tools</h1>"));
    // Links are stable and encoded: the repository's page is linked by its id.
    let (_, _, page) = get(&srv.addr, "/", &[]);
    assert!(
        page.contains("href=\"/ui/repos/demo-org/demo-llm\""),
        "{page}"
    );
    // Ids compare without case, as on the Hub; `org%2Fname` is the same page.
    for path in [
        "/ui/repos/DEMO-ORG/Demo-LLM",
        "/ui/repos/demo-org%2Fdemo-llm",
    ] {
        let (st, _, page) = get(&srv.addr, path, &[]);
        assert_eq!(st, 200, "{path}");
        assert!(page.contains("<h1>demo-org/demo-llm</h1>"), "{path}");
    }
}

#[test]
fn pages_take_a_token_once_then_a_cookie_never_a_url_and_no_ui_turns_them_off() {
    let env = Env::new();
    ingest_series(&env);
    let tokens = env.path("tokens");
    std::fs::write(&tokens, "s3cret-token\n").unwrap();
    let srv = Served::start(&env, &["--token-file", tokens.to_str().unwrap()]);
    let a = &srv.addr;
    let (st, head, page) = get(a, "/", &[]);
    assert_eq!(st, 401);
    assert!(
        head.contains("Www-Authenticate: Basic realm=\"modelcas serve\""),
        "{head}"
    );
    assert!(
        !page.contains(REPO),
        "nothing of the store before auth: {page}"
    );
    // A token in the URL is never taken.
    for q in [
        "/?token=s3cret-token",
        "/ui/store?access_token=s3cret-token",
    ] {
        assert_eq!(get(a, q, &[]).0, 401, "{q}");
    }
    assert_eq!(get(a, "/", &["Authorization: Bearer wrong"]).0, 401);
    // Basic (the browser's prompt): any user, the token as password; sets the cookie.
    let basic = "Authorization: Basic dXNlcjpzM2NyZXQtdG9rZW4="; // user:s3cret-token
    let (st, head, page) = get(a, "/", &[basic]);
    assert_eq!(st, 200);
    assert!(page.contains(REPO));
    let cookie_line = head
        .lines()
        .find(|l| l.starts_with("Set-Cookie: "))
        .unwrap_or_else(|| panic!("no cookie: {head}"));
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie_line.contains(attr), "{cookie_line}");
    }
    assert!(
        !cookie_line.contains("s3cret-token"),
        "the cookie is not the token"
    );
    let value = cookie_line["Set-Cookie: ".len()..]
        .split(';')
        .next()
        .unwrap();
    let cookie = format!("Cookie: {value}");
    for path in [
        "/",
        "/ui/repos/demo-org/demo-llm",
        "/ui/mirror",
        "/ui/store",
    ] {
        assert_eq!(get(a, path, &[&cookie]).0, 200, "{path}");
    }
    // The cookie opens the pages only: the API still wants the bearer token.
    let api = format!("/api/models/{REPO}/refs");
    assert_eq!(get(a, &api, &[&cookie]).0, 401);
    assert_eq!(get(a, &api, &["Authorization: Bearer s3cret-token"]).0, 200);
    assert_eq!(get(a, "/", &["Authorization: Bearer s3cret-token"]).0, 200);
    // A forged cookie is refused.
    assert_eq!(get(a, "/", &["Cookie: modelcas_ui=00"]).0, 401);
    // Signing out clears the cookie.
    let (st, head, _) = get(a, "/ui/logout", &[&cookie]);
    assert_eq!(st, 401);
    assert!(
        head.contains("Set-Cookie: modelcas_ui=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        "{head}"
    );
    // A restarted serve draws a new key: the old cookie asks again.
    drop(srv);
    let srv = Served::start(&env, &["--token-file", tokens.to_str().unwrap()]);
    assert_eq!(get(&srv.addr, "/", &[&cookie]).0, 401);
    drop(srv);

    // --no-ui: no pages, the API as before.
    let srv = Served::start(&env, &["--no-ui"]);
    for path in [
        "/",
        "/ui/repos/demo-org/demo-llm",
        "/ui/store",
        "/ui/mirror",
    ] {
        let (st, head, _) = get(&srv.addr, path, &[]);
        assert_eq!(st, 404, "{path}");
        assert!(!head.contains("text/html"), "{head}");
    }
    assert_eq!(get(&srv.addr, &api, &[]).0, 200);
}

/// A Hugging Face cache with `n` revisions of one small file each (one ingest).
fn many_revisions(env: &Env, n: usize) -> Vec<String> {
    let dir = env.path("hf-cache/models--bulk-org--many");
    let mut shas = Vec::new();
    for i in 0..n {
        let sha = format!("{:040x}", 0x1000_0000u64 + i as u64);
        let snap = dir.join("snapshots").join(&sha);
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::write(snap.join("config.json"), format!("{{\"revision\": {i}}}\n")).unwrap();
        shas.push(sha);
    }
    std::fs::create_dir_all(dir.join("refs")).unwrap();
    std::fs::write(dir.join("refs/main"), shas.last().unwrap()).unwrap();
    env.ingest(&dir, &[]);
    shas
}

/// The best of `runs` timings of `f`.
fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
fn a_repository_of_1000_revisions_answers_within_the_apis_budget() {
    const N: usize = 1000;
    let env = Env::new();
    let shas = many_revisions(&env, N);
    let srv = Served::start(&env, &[]);
    let a = srv.addr.clone();
    let (st, _, page) = get(&a, "/ui/repos/bulk-org/many", &[]);
    assert_eq!(st, 200);
    assert_eq!(rows(&page, "data-commit").len(), N);
    // The budget: what the API takes to tell a client the same (each revision's info).
    let api = best(2, || {
        for sha in &shas {
            let (st, _, _) = get(
                &a,
                &format!("/api/models/bulk-org/many/revision/{sha}"),
                &[],
            );
            assert_eq!(st, 200);
        }
    });
    let page = best(3, || {
        assert_eq!(get(&a, "/ui/repos/bulk-org/many", &[]).0, 200)
    });
    let list = best(3, || assert_eq!(get(&a, "/", &[]).0, 200));
    let store = best(3, || assert_eq!(get(&a, "/ui/store", &[]).0, 200));
    eprintln!("API walk of {N} revisions {api:?}; pages: repository {page:?}, list {list:?}, store {store:?}");
    for (what, t) in [
        ("repository", page),
        ("repositories", list),
        ("store", store),
    ] {
        assert!(
            t <= api,
            "the {what} page took {t:?}, more than the API's {api:?} for the same {N} revisions"
        );
    }
}

/// Where tests leave files for CI to keep: `$MODELCAS_TEST_OUTPUT`, else
/// `target/test-output` in the clone.
fn output_dir() -> PathBuf {
    let d = std::env::var_os("MODELCAS_TEST_OUTPUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/test-output"))
        .join("ui");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Headless Chromium with its profile in `profile`.
fn chromium(profile: &Path) -> Command {
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .unwrap_or_else(|| {
            panic!("headless Chromium is needed for this test and is not installed: `apt-get install chromium` (scripts/install-deps.sh does it)")
        });
    // A browser that hangs must not hang the suite: coreutils' timeout ends it.
    let mut c = Command::new("timeout");
    c.args(["--kill-after=10", "120", bin]);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn a_real_browser_renders_the_pages() {
    let env = Env::new();
    ingest_series(&env);
    let srv = Served::start(&env, &[]);
    let profile = tempfile::tempdir().unwrap();
    let url = |p: &str| format!("http://{}{p}", srv.addr);
    // The DOM as Chromium built it (no script on the pages: this is the text people see).
    let out = chromium(profile.path())
        .arg("--dump-dom")
        .arg(url("/ui/repos/demo-org/demo-llm"))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("<h1>demo-org/demo-llm</h1>"),
        "{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in ["r1", "r2", "r3", "r4"] {
        assert!(
            dom.contains(&format!("<span class=\"tag\">{r}</span>")),
            "{r}"
        );
        assert!(dom.contains(&series().commit(r)), "{r}");
    }
    assert!(
        dom.contains(&format!("HF_ENDPOINT=http://{}", srv.addr)),
        "{dom}"
    );
    let out = chromium(profile.path())
        .arg("--dump-dom")
        .arg(url("/"))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("href=\"/ui/repos/demo-org/demo-llm\""),
        "{dom}"
    );
    let out = chromium(profile.path())
        .arg("--dump-dom")
        .arg(url("/ui/store"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Stored (packs)"));
    // A screenshot of the repository page, kept for people (and CI) to look at.
    let shot = output_dir().join("repository.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(profile.path())
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,720")
        .arg(url("/ui/repos/demo-org/demo-llm"))
        .output()
        .unwrap();
    let png = std::fs::read(&shot).unwrap_or_else(|e| {
        panic!(
            "no screenshot at {} ({e}): {}",
            shot.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000,
        "{} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}

#[test]
fn the_store_page_shows_the_last_gc_and_sync_runs_as_recorded() {
    let up = Env::new();
    common::ingest_rev(&up, "r1", &["main"]);
    let upstream = Served::start(&up, &[]);
    let env = Env::new();
    let srv = Served::start(&env, &[]);
    let run_row = |page: &str, command: &str| -> String {
        rows(page, "data-run")
            .get(command)
            .unwrap_or_else(|| panic!("no {command} row: {page}"))
            .to_string()
    };
    let (_, _, page) = get(&srv.addr, "/ui/store", &[]);
    for c in ["gc", "sync"] {
        assert!(run_row(&page, c).contains("never recorded"), "{page}");
    }
    // A sync with a failing entry: recorded as having failures, with its summary.
    let list = env.path("list.toml");
    std::fs::write(
        &list,
        format!("[[model]]\nrepo = \"{REPO}\"\ninclude = [\"config.json\"]\n\n[[model]]\nrepo = \"demo-org/no-such-model\"\n"),
    )
    .unwrap();
    let url = format!("http://{}", upstream.addr);
    let out = env.run(&["sync", list.to_str().unwrap(), "--endpoint", &url]);
    assert_eq!(out.status.code(), Some(1));
    // A dry run and a refused gc leave no record; a completed gc does.
    env.ok(&["gc", "--dry-run"]);
    assert!(
        env.backend().get("runs/gc").is_err(),
        "a dry run recorded itself"
    );
    env.ok(&["gc", "--grace", "0s"]);
    let (st, _, page) = get(&srv.addr, "/ui/store", &[]);
    assert_eq!(st, 200);
    let sync = run_row(&page, "sync");
    assert!(sync.contains("data-ok=\"false\""), "{sync}");
    assert!(
        sync.contains("2 entries from ") && sync.contains("1 pulled") && sync.contains("1 failed"),
        "{sync}"
    );
    let gc = run_row(&page, "gc");
    assert!(
        gc.contains("data-ok=\"true\"") && gc.contains("revisions expired"),
        "{gc}"
    );
    let ended = num(attrs(&gc, "data-epoch")[0]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(ended <= now && ended + 600 > now, "{ended} vs {now}");
    // A damaged record is named on the page; the page still answers.
    env.backend()
        .put("runs/gc", b"{\"magic\": \"<b>x</b>\"}")
        .unwrap();
    let (st, _, page) = get(&srv.addr, "/ui/store", &[]);
    assert_eq!(st, 200);
    only_our_markup(&page);
    assert!(run_row(&page, "gc").contains("unreadable record"), "{page}");
}

#[test]
fn the_mirror_page_shows_its_upstream_allow_list_pulls_and_upstream_errors() {
    let up = Env::new();
    common::ingest_rev(&up, "r1", &["main"]);
    let upstream = Served::start(&up, &[]);
    let url = format!("http://{}", upstream.addr);
    let env = Env::new();
    let m = Served::start(&env, &["--upstream", &url, "--allow", "demo-org/*"]);
    let (_, _, page) = get(&m.addr, "/ui/mirror", &[]);
    assert!(
        page.contains(&format!("<code id=\"upstream\">{url}</code>")),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"tag\">demo-org/*</span>"),
        "{page}"
    );
    assert!(
        !page.contains("<table id=\"pulls\">"),
        "no pull yet: {page}"
    );
    // A pull through the mirror, and a repository the upstream does not have.
    let r1 = series().commit("r1");
    let (st, _, _) = get(&m.addr, &format!("/api/models/{REPO}/revision/main"), &[]);
    assert_eq!(st, 200);
    let (st, _, _) = get(&m.addr, "/api/models/demo-org/no-such/revision/main", &[]);
    assert_eq!(st, 404);
    let (st, _, page) = get(&m.addr, "/ui/mirror", &[]);
    assert_eq!(st, 200);
    only_our_markup(&page);
    let pulls = &page[page.find("<table id=\"pulls\">").expect("a pulls table")..];
    assert!(
        pulls.contains(&format!("{REPO}@{r1}")) && pulls.contains("pulled"),
        "{page}"
    );
    let failures = &page[page
        .find("<table id=\"failures\">")
        .expect("a failures table")..];
    assert!(
        failures.contains("demo-org/no-such") && failures.contains("resolve"),
        "{page}"
    );
    // The pulled revision is on the repositories page.
    let (_, _, page) = get(&m.addr, "/", &[]);
    assert!(rows(&page, "data-repo").contains_key(REPO), "{page}");
}
