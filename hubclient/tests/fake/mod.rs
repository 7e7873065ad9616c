//! A small HF-compatible upstream for the tests: `std::net` and threads, hand-written
//! HTTP/1.1, one request per connection. It serves one repository (`org/model`, by any
//! case of its name, as the Hub does) at one commit, records every request it receives, and can be told to misbehave: answer
//! queued statuses first, cut a body after N bytes, ignore `Range`, flip a byte, require
//! a token, redirect downloads to another server or to any `Location` at all, dribble a
//! body a byte at a time, paginate the tree, list a huge synthetic tree, or send any
//! tree body at all.

#![allow(
    dead_code,
    reason = "shared by several test binaries; each uses a part"
)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;

use parking_lot::{Condvar, Mutex, MutexGuard};
use percent_encoding::percent_decode_str;
use sha1::Digest as _;

pub const REPO: &str = "org/model";
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// One file of the fake repository.
#[derive(Clone)]
pub struct File {
    pub path: String,
    pub data: Vec<u8>,
    pub lfs: bool,
}

impl File {
    pub fn sha256_hex(&self) -> String {
        hex::encode(sha2::Sha256::digest(&self.data))
    }

    /// The git blob id of the content (regular file) or of its LFS pointer.
    pub fn oid(&self) -> String {
        let blob = |d: &[u8]| {
            let mut h = sha1::Sha1::new();
            h.update(format!("blob {}\0", d.len()).as_bytes());
            h.update(d);
            hex::encode(h.finalize())
        };
        if self.lfs {
            let pointer = format!(
                "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n",
                self.sha256_hex(),
                self.data.len()
            );
            blob(pointer.as_bytes())
        } else {
            blob(&self.data)
        }
    }
}

/// Bytes that do not repeat (a SplitMix64 stream), so any misplaced range shows.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x = x.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The default repository: an LFS weight file, a small config, a file two directories
/// down.
pub fn files() -> Vec<File> {
    vec![
        File {
            path: "model.safetensors".into(),
            data: bytes(300_000, 1),
            lfs: true,
        },
        File {
            path: "config.json".into(),
            data: br#"{"model_type": "fake", "hidden_size": 8}"#.to_vec(),
            lfs: false,
        },
        File {
            path: "sub/dir/tokenizer.json".into(),
            data: bytes(5_000, 2),
            lfs: false,
        },
    ]
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Seen {
    /// The request target as sent (still percent-encoded).
    pub target: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A canned answer, sent instead of the real one to the next request whose target
/// contains `on`.
pub struct Canned {
    pub on: &'static str,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What the fake serves and how it misbehaves; tests change it between requests.
#[derive(Default)]
pub struct State {
    pub files: Vec<File>,
    /// Revision names that resolve to [`COMMIT`] (besides the commit itself).
    pub refs: Vec<String>,
    pub canned: VecDeque<Canned>,
    /// For successive downloads: send only this many body bytes, then close.
    pub cuts: VecDeque<usize>,
    pub ignore_range: bool,
    /// A 206 holds at most this many bytes (a server sending less than asked).
    pub range_cap: Option<usize>,
    /// With a cut: hold the connection open, silent, for this long before closing it.
    pub stall: Option<std::time::Duration>,
    /// Omit Content-Length on downloads and raw tree bodies (close-delimited bodies).
    pub no_length: bool,
    /// Bytes appended to every download body (with `no_length`).
    pub extra: Vec<u8>,
    /// (path, byte index): that byte of that file is sent inverted.
    pub flip: Option<(String, usize)>,
    /// Every route but `/cdn/` needs `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Downloads answer 302 to `{redirect}/cdn/{path}`.
    pub redirect: Option<String>,
    /// Downloads answer 302 with this `Location`, as it is (relative, user info, loops).
    pub location: Option<String>,
    /// Every body is sent a byte at a time, with this pause before each byte.
    pub dribble: Option<std::time::Duration>,
    /// The tree lists this many more files (size 1, one oid) with paths this many bytes
    /// long, a thousand a page (or `page_size`), generated as they are sent.
    pub synthetic: Option<(usize, usize)>,
    /// Tree entries per page (with `Link: rel="next"`), all at once when `None`.
    pub page_size: Option<usize>,
    /// (path, xetHash): the tree lists this `xetHash` for that file.
    pub xet_hashes: Vec<(String, String)>,
    /// A raw tree body sent instead of the real tree.
    pub tree_body: Option<Vec<u8>>,
    /// A raw `Link` header sent with every tree page.
    pub tree_link: Option<String>,
    /// Other repository names served with the same files at the same commit.
    pub also_repos: Vec<String>,
    /// Requests whose target contains the string wait at the gate before being answered.
    pub hold: Option<(String, Arc<Gate>)>,
    pub seen: Vec<Seen>,
}

/// A gate requests wait at until the test opens it.
#[derive(Default)]
pub struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    pub fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    fn wait(&self) {
        let mut o = self.open.lock();
        while !*o {
            self.opened.wait(&mut o);
        }
    }
}

pub struct Fake {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl Fake {
    /// A fake serving [`files`] at [`COMMIT`], `main` and `refs/pr/1`.
    pub fn start() -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State {
            files: files(),
            refs: vec!["main".into(), "refs/pr/1".into()],
            ..State::default()
        }));
        let (s, base) = (state.clone(), url.clone());
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (s, base) = (s.clone(), base.clone());
                thread::spawn(move || serve(conn, &s, &base));
            }
        });
        Fake { url, state }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    pub fn file(&self, path: &str) -> File {
        let s = self.state();
        s.files
            .iter()
            .find(|f| f.path == path)
            .expect("file")
            .clone()
    }
}

/// A response about to be written.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close.
    cut: Option<usize>,
    /// Send `Content-Length` (else the body is close-delimited).
    length: bool,
    /// After a cut, stay silent this long before closing.
    stall: Option<std::time::Duration>,
    /// Send the body a byte at a time, with this pause before each.
    dribble: Option<std::time::Duration>,
}

impl Answer {
    fn new(status: u16, body: Vec<u8>) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body,
            cut: None,
            length: true,
            stall: None,
            dribble: None,
        }
    }

    fn json(v: serde_json::Value) -> Answer {
        Answer::new(200, v.to_string().into_bytes()).h("content-type", "application/json")
    }

    fn error(status: u16, code: &str, msg: &str) -> Answer {
        let mut a = Answer::new(status, format!("{{\"error\":\"{msg}\"}}").into_bytes());
        if !code.is_empty() {
            a = a.h("x-error-code", code);
        }
        a.h("x-error-message", msg)
    }

    fn h(mut self, k: &str, v: &str) -> Answer {
        self.headers.push((k.to_string(), v.to_string()));
        self
    }
}

fn serve(mut conn: TcpStream, state: &Mutex<State>, base: &str) {
    let Some(seen) = read_head(&conn) else { return };
    let hold = {
        let mut s = state.lock();
        s.seen.push(seen.clone());
        s.hold
            .clone()
            .filter(|(on, _)| seen.target.contains(on.as_str()))
    };
    if let Some((_, gate)) = hold {
        gate.wait();
    }
    let answer = {
        let mut s = state.lock();
        let mut a = route(&mut s, &seen, base);
        a.dribble = s.dribble;
        a
    };
    write_answer(&mut conn, answer);
}

fn read_head(conn: &TcpStream) -> Option<Seen> {
    let mut r = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let target = line.split_whitespace().nth(1)?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    Some(Seen { target, headers })
}

fn write_answer(conn: &mut TcpStream, a: Answer) {
    let mut head = format!("HTTP/1.1 {} X\r\nconnection: close\r\n", a.status);
    for (k, v) in &a.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if a.length {
        head.push_str(&format!("content-length: {}\r\n", a.body.len()));
    }
    head.push_str("\r\n");
    let n = a.cut.unwrap_or(a.body.len()).min(a.body.len());
    let _ = conn.write_all(head.as_bytes());
    match a.dribble {
        None => {
            let _ = conn.write_all(&a.body[..n]);
        }
        Some(pause) => {
            for b in &a.body[..n] {
                thread::sleep(pause);
                if conn.write_all(&[*b]).and_then(|()| conn.flush()).is_err() {
                    return;
                }
            }
        }
    }
    let _ = conn.flush();
    if let (Some(d), Some(_)) = (a.stall, a.cut) {
        thread::sleep(d);
    }
    let _ = conn.shutdown(Shutdown::Both);
}

fn decode(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}

fn route(s: &mut State, req: &Seen, base: &str) -> Answer {
    if let Some(i) = s.canned.iter().position(|c| req.target.contains(c.on)) {
        let c = s.canned.remove(i).expect("canned");
        let mut a = Answer::new(c.status, c.body);
        a.headers = c.headers;
        return a;
    }
    let (path, query) = req.target.split_once('?').unwrap_or((&req.target, ""));
    if let Some(file) = path.strip_prefix("/cdn/") {
        return download(s, req, &decode(file));
    }
    if let Some(t) = &s.token {
        if req.header("authorization") != Some(&format!("Bearer {t}")) {
            return Answer::error(401, "", "Invalid credentials in Authorization header");
        }
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", "models", o, n, "revision", rev] => revision(s, &format!("{o}/{n}"), &decode(rev)),
        ["api", "models", o, n, "tree", rev] => tree(s, &format!("{o}/{n}"), rev, query, base),
        [o, n, "resolve", rev, rest @ ..] => {
            let file = rest.iter().map(|x| decode(x)).collect::<Vec<_>>().join("/");
            resolve(s, req, &format!("{o}/{n}"), rev, &file)
        }
        _ => Answer::error(404, "", "no route"),
    }
}

/// The repository's own spelling: names match without regard to ASCII case, as on the
/// Hub (`Org/MODEL` is `org/model`).
fn canonical<'a>(s: &'a State, repo: &str) -> Option<&'a str> {
    std::iter::once(REPO)
        .chain(s.also_repos.iter().map(String::as_str))
        .find(|r| r.eq_ignore_ascii_case(repo))
}

fn repo_missing(s: &State, repo: &str) -> Option<Answer> {
    canonical(s, repo)
        .is_none()
        .then(|| Answer::error(404, "RepoNotFound", &format!("Repository {repo} not found")))
}

fn revision(s: &State, repo: &str, rev: &str) -> Answer {
    if let Some(a) = repo_missing(s, repo) {
        return a;
    }
    if rev != COMMIT && !s.refs.iter().any(|r| r == rev) {
        return Answer::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"));
    }
    let siblings: Vec<_> = s
        .files
        .iter()
        .map(|f| serde_json::json!({"rfilename": f.path}))
        .collect();
    let id = canonical(s, repo).unwrap_or(repo);
    Answer::json(serde_json::json!({"id": id, "sha": COMMIT, "siblings": siblings}))
}

/// The entries of the tree: each directory once, before its first file.
fn entries(s: &State) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut dirs = Vec::<String>::new();
    for f in &s.files {
        let parts: Vec<&str> = f.path.split('/').collect();
        for k in 1..parts.len() {
            let d = parts[..k].join("/");
            if !dirs.contains(&d) {
                out.push(
                    serde_json::json!({"type": "directory", "path": d, "oid": "1".repeat(40)}),
                );
                dirs.push(d);
            }
        }
        let mut e = serde_json::json!({"type": "file", "path": f.path, "size": f.data.len(), "oid": f.oid()});
        if f.lfs {
            e["lfs"] = serde_json::json!({"oid": f.sha256_hex(), "size": f.data.len(), "pointerSize": 130});
        }
        if let Some((_, h)) = s.xet_hashes.iter().find(|(p, _)| *p == f.path) {
            e["xetHash"] = serde_json::json!(h);
        }
        out.push(e);
    }
    out
}

fn tree(s: &State, repo: &str, rev: &str, query: &str, base: &str) -> Answer {
    if let Some(a) = repo_missing(s, repo) {
        return a;
    }
    if rev != COMMIT {
        return Answer::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"));
    }
    if let Some(b) = &s.tree_body {
        let mut a = Answer::new(200, b.clone());
        a.length = !s.no_length;
        return match &s.tree_link {
            Some(l) => a.h("link", l),
            None => a,
        };
    }
    if let Some((n, len)) = s.synthetic {
        return synthetic_page(repo, rev, query, n, len, s.page_size.unwrap_or(1000));
    }
    let all = entries(s);
    let Some(size) = s.page_size else {
        return Answer::json(serde_json::Value::Array(all));
    };
    let cursor: usize = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("cursor="))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let page: Vec<_> = all.iter().skip(cursor).take(size).cloned().collect();
    let mut a = Answer::json(serde_json::Value::Array(page));
    if cursor + size < all.len() {
        // Absolute on odd pages, relative on even ones: clients must take both.
        let next = format!(
            "/api/models/{repo}/tree/{rev}?recursive=true&expand=false&cursor={}",
            cursor + size
        );
        let next = if (cursor / size).is_multiple_of(2) {
            format!("{base}{next}")
        } else {
            next
        };
        a = a.h("link", &format!("<{next}>; rel=\"next\""));
    }
    a
}

/// One page of a synthetic tree of `n` files whose paths are `len` bytes long, written
/// as text (a million `serde_json::Value`s would take the test's memory).
fn synthetic_page(repo: &str, rev: &str, query: &str, n: usize, len: usize, size: usize) -> Answer {
    let cursor: usize = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("cursor="))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let oid = "a".repeat(40);
    let mut body = String::from("[");
    for i in cursor..n.min(cursor + size) {
        if i > cursor {
            body.push(',');
        }
        let name = format!("f{i:0>width$}", width = len.max(12) - 1);
        body.push_str(&format!(
            r#"{{"type":"file","path":"{name}","size":1,"oid":"{oid}"}}"#
        ));
    }
    body.push(']');
    let mut a = Answer::new(200, body.into_bytes()).h("content-type", "application/json");
    if cursor + size < n {
        let next = format!(
            "/api/models/{repo}/tree/{rev}?recursive=true&expand=false&cursor={}",
            cursor + size
        );
        a = a.h("link", &format!("<{next}>; rel=\"next\""));
    }
    a
}

fn resolve(s: &mut State, req: &Seen, repo: &str, rev: &str, path: &str) -> Answer {
    if let Some(a) = repo_missing(s, repo) {
        return a;
    }
    if rev != COMMIT && !s.refs.iter().any(|r| r == rev) {
        return Answer::error(404, "RevisionNotFound", &format!("Invalid rev id: {rev}"));
    }
    let Some(f) = s.files.iter().find(|f| f.path == path).cloned() else {
        return Answer::error(404, "EntryNotFound", &format!("{path} does not exist"))
            .h("x-repo-commit", COMMIT);
    };
    let mut a = match &s.redirect {
        _ if s.location.is_some() => {
            Answer::new(302, Vec::new()).h("location", s.location.as_deref().unwrap_or(""))
        }
        Some(to) => {
            let loc = format!(
                "{to}/cdn/{}",
                percent_encoding::utf8_percent_encode(path, percent_encoding::NON_ALPHANUMERIC)
            );
            Answer::new(302, Vec::new()).h("location", &loc)
        }
        None => download(s, req, path),
    };
    a = a
        .h("x-repo-commit", COMMIT)
        .h("etag", &format!("\"{}\"", f.oid()));
    if f.lfs {
        a = a
            .h("x-linked-etag", &format!("\"{}\"", f.sha256_hex()))
            .h("x-linked-size", &f.data.len().to_string());
    }
    a
}

/// The file's bytes, honouring `Range: bytes=N-` unless told not to.
fn download(s: &mut State, req: &Seen, path: &str) -> Answer {
    let Some(f) = s.files.iter().find(|f| f.path == path) else {
        return Answer::error(404, "EntryNotFound", "no such file");
    };
    let mut data = f.data.clone();
    if let Some((p, i)) = &s.flip {
        if p == path && *i < data.len() {
            data[*i] ^= 0xff;
        }
    }
    let len = data.len();
    let from = req
        .header("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|_| !s.ignore_range);
    let mut a = match from {
        Some(n) if n >= len => {
            return Answer::new(416, Vec::new()).h("content-range", &format!("bytes */{len}"))
        }
        Some(n) => {
            let end = s.range_cap.map_or(len, |c| len.min(n + c));
            Answer::new(206, data[n..end].to_vec())
                .h("content-range", &format!("bytes {n}-{}/{len}", end - 1))
        }
        None => Answer::new(200, data),
    };
    a.body.extend_from_slice(&s.extra);
    a.length = !s.no_length;
    a.cut = s.cuts.pop_front();
    a.stall = s.stall;
    a.h("accept-ranges", "bytes")
}
