//! `modelcas serve`: a read-only HTTP endpoint that answers enough of the Hugging Face Hub
//! API, from a modelcas store, for the official `huggingface_hub` client to work against it
//! with `HF_ENDPOINT` set (`snapshot_download`, `hf_hub_download`, `from_pretrained`).
//!
//! Routes (repository ids are `org/name`; revisions are ref names, URL-quoted, or shas):
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/models/{repo}/revision/{rev}` | `{id, sha, siblings: [{rfilename}], ...}` |
//! | `GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=` | tree entries with `oid`, `size`, `lfs` |
//! | `GET /api/models/{repo}/refs` | `{branches, tags, converts, pullRequests}` |
//! | `HEAD`/`GET /{repo}/resolve/{rev}/{path}` | the file, with `X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`; `Range` |
//! | `GET /metrics` | Prometheus metrics |
//!
//! Errors carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) as the
//! client expects. No Xet header is ever sent. With tokens configured every route but
//! `/metrics` needs `Authorization: Bearer <token>`. One access-log event per download
//! (tracing target `access`) goes to the log.

mod body;
pub mod etag;
pub mod metrics;

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};
use store::manifest::Manifest;
use store::{CommitId, RepoId, Store, StoreError};
use tiny_http::{Header, Method, Request, Response, StatusCode};

use crate::body::FileBody;
use crate::metrics::Metrics;

/// Errors starting the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: String, reason: String },
}

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// `host:port`.
    pub listen: String,
    /// Accepted bearer tokens; `None`: no authentication.
    pub tokens: Option<HashSet<String>>,
    /// Worker threads.
    pub threads: usize,
}

/// A bound endpoint.
pub struct Server {
    http: Arc<tiny_http::Server>,
    state: Arc<State>,
    threads: usize,
}

struct State {
    store: Store,
    tokens: Option<HashSet<String>>,
    metrics: Metrics,
    manifests: Mutex<HashMap<(RepoId, CommitId), Arc<Manifest>>>,
    /// sha256 of a small file → its git blob id.
    blob_ids: Mutex<HashMap<[u8; 32], String>>,
}

/// Manifests kept in memory (each is small next to the files it describes).
const MANIFEST_CACHE: usize = 64;

impl Server {
    /// Binds `opts.listen`.
    pub fn bind(store: Store, opts: &ServeOptions) -> Result<Server, ServeError> {
        let http = tiny_http::Server::http(&opts.listen).map_err(|e| ServeError::Listen {
            addr: opts.listen.clone(),
            reason: e.to_string(),
        })?;
        Ok(Server {
            http: Arc::new(http),
            state: Arc::new(State {
                store,
                tokens: opts.tokens.clone(),
                metrics: Metrics::default(),
                manifests: Mutex::new(HashMap::new()),
                blob_ids: Mutex::new(HashMap::new()),
            }),
            threads: opts.threads.max(1),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> String {
        self.http
            .server_addr()
            .to_ip()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }

    /// Serves until the process ends.
    pub fn run(&self) {
        let mut workers = Vec::new();
        for _ in 0..self.threads {
            let (http, state) = (self.http.clone(), self.state.clone());
            workers.push(std::thread::spawn(move || {
                while let Ok(req) = http.recv() {
                    state.handle(req);
                }
            }));
        }
        for w in workers {
            let _ = w.join();
        }
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

/// A reply before its body: status, headers, and what to count it as.
struct Reply {
    status: u16,
    headers: Vec<Header>,
    body: Vec<u8>,
}

impl Reply {
    fn json(status: u16, v: &Value) -> Reply {
        Reply {
            status,
            headers: vec![header("Content-Type", "application/json")],
            body: v.to_string().into_bytes(),
        }
    }

    fn error(status: u16, code: &str, msg: &str, commit: Option<&CommitId>) -> Reply {
        let mut r = Reply::json(status, &json!({ "error": msg }));
        if !code.is_empty() {
            r.headers.push(header("X-Error-Code", code));
        }
        r.headers.push(header("X-Error-Message", msg));
        if let Some(c) = commit {
            r.headers.push(header("X-Repo-Commit", &c.to_hex()));
        }
        r
    }
}

/// `%xx` decoding of one path segment.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The Hub's timestamp format (`2024-01-01T00:00:00.000Z`).
fn iso(secs: u64) -> String {
    let s = store::manifest::utc_string(secs);
    format!("{}.000Z", s.trim_end_matches('Z'))
}

impl State {
    fn handle(&self, req: Request) {
        let start = Instant::now();
        let url = req.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
        let segs: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(decode)
            .collect();
        let segs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
        if segs == ["metrics"] && *req.method() == Method::Get {
            let body = self.metrics.render() + &store::metrics::render();
            self.metrics.request("metrics", 200);
            let resp = Response::from_string(body)
                .with_header(header("Content-Type", "text/plain; version=0.0.4"));
            let _ = req.respond(resp);
            return;
        }
        if let Some(tokens) = &self.tokens {
            let ok = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .and_then(|h| h.value.as_str().strip_prefix("Bearer "))
                .is_some_and(|t| tokens.contains(t.trim()));
            if !ok {
                self.metrics.request("auth", 401);
                let r = Reply::error(
                    401,
                    "",
                    "Invalid credentials: send Authorization: Bearer <token>",
                    None,
                );
                return respond(req, r);
            }
        }
        let recursive = query
            .split('&')
            .any(|kv| kv == "recursive=true" || kv == "recursive=1" || kv == "recursive=True");
        let is_head = *req.method() == Method::Head;
        if *req.method() != Method::Get && !is_head {
            self.metrics.request("other", 405);
            return respond(req, Reply::error(405, "", "read-only endpoint", None));
        }
        match segs.as_slice() {
            ["api", "models", org, name, "revision", rev @ ..] if !rev.is_empty() => {
                let r = self.repo_info(org, name, &rev.join("/"));
                self.metrics.request("revision", r.status);
                respond(req, r)
            }
            ["api", "models", org, name, "tree", rev, rest @ ..] => {
                let r = self.tree(org, name, rev, &rest.join("/"), recursive);
                self.metrics.request("tree", r.status);
                respond(req, r)
            }
            ["api", "models", org, name, "refs"] => {
                let r = self.refs(org, name);
                self.metrics.request("refs", r.status);
                respond(req, r)
            }
            [org, name, "resolve", rev, rest @ ..] if !rest.is_empty() => {
                let file = rest.join("/");
                self.resolve(req, org, name, rev, &file, is_head, start)
            }
            _ => {
                self.metrics.request("unknown", 404);
                respond(
                    req,
                    Reply::error(404, "", &format!("no route for {path}"), None),
                )
            }
        }
    }

    /// The repository and commit named, or the error reply the client understands.
    fn locate(
        &self,
        org: &str,
        name: &str,
        rev: &str,
    ) -> Result<(RepoId, CommitId, Arc<Manifest>), Reply> {
        let repo = RepoId::parse(&format!("{org}/{name}")).map_err(|_| {
            Reply::error(
                404,
                "RepoNotFound",
                &format!("Repository {org}/{name} not found"),
                None,
            )
        })?;
        let commit = match self.store.resolve(&repo, rev) {
            Ok(c) => c,
            Err(StoreError::UnknownRepo(_)) => {
                return Err(Reply::error(
                    404,
                    "RepoNotFound",
                    &format!("Repository {repo} not found"),
                    None,
                ))
            }
            Err(StoreError::UnknownRevision { .. } | StoreError::AmbiguousRevision { .. }) => {
                return Err(Reply::error(
                    404,
                    "RevisionNotFound",
                    &format!("Invalid rev id: {rev}"),
                    None,
                ))
            }
            Err(e) => return Err(Reply::error(500, "", &e.to_string(), None)),
        };
        let key = (repo.clone(), commit);
        if let Some(m) = self
            .manifests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok((repo, commit, m.clone()));
        }
        let m = Arc::new(
            self.store
                .manifest(&repo, &commit)
                .map_err(|e| Reply::error(500, "", &e.to_string(), None))?,
        );
        let mut cache = self.manifests.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MANIFEST_CACHE {
            cache.clear();
        }
        cache.insert(key, m.clone());
        Ok((repo, commit, m))
    }

    fn repo_info(&self, org: &str, name: &str, rev: &str) -> Reply {
        let (repo, commit, m) = match self.locate(org, name, rev) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let siblings: Vec<Value> = m
            .files
            .iter()
            .map(|f| json!({ "rfilename": f.path }))
            .collect();
        Reply::json(
            200,
            &json!({
                "_id": commit.to_hex(),
                "id": repo.to_string(),
                "modelId": repo.to_string(),
                "sha": commit.to_hex(),
                "lastModified": iso(m.ingested_at),
                "createdAt": iso(m.ingested_at),
                "private": false,
                "disabled": false,
                "gated": false,
                "tags": [],
                "siblings": siblings,
            }),
        )
    }

    /// The git blob id of a small file (read once, then remembered by sha256).
    fn blob_id(&self, m: &Arc<Manifest>, i: usize) -> std::io::Result<String> {
        let f = &m.files[i];
        if let Some(id) = self
            .blob_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&f.sha256)
        {
            return Ok(id.clone());
        }
        let sent = Arc::new(AtomicU64::new(0));
        let mut body = FileBody::new(self.store.clone(), m.clone(), i, 0, f.size, sent);
        let mut blob = etag::GitBlob::new(f.size);
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = body.read(&mut buf)?;
            if n == 0 {
                break;
            }
            blob.update(&buf[..n]);
        }
        let id = blob.finish();
        self.blob_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(f.sha256, id.clone());
        Ok(id)
    }

    /// (oid, etag, lfs) of file `i`.
    fn ids(&self, m: &Arc<Manifest>, i: usize) -> std::io::Result<(String, String, Option<Value>)> {
        let f = &m.files[i];
        if etag::is_lfs(&f.path, f.size) {
            let sha = f.sha256_hex();
            let pointer = etag::lfs_pointer(&sha, f.size);
            let oid = etag::git_blob_id(pointer.as_bytes());
            let lfs = json!({ "oid": sha, "size": f.size, "pointerSize": pointer.len() });
            Ok((oid, sha, Some(lfs)))
        } else {
            let id = self.blob_id(m, i)?;
            Ok((id.clone(), id, None))
        }
    }

    fn tree(&self, org: &str, name: &str, rev: &str, dir: &str, recursive: bool) -> Reply {
        let (_, commit, m) = match self.locate(org, name, rev) {
            Ok(x) => x,
            Err(r) => return r,
        };
        let dir = dir.trim_matches('/');
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut entries = Vec::new();
        let mut dirs: HashSet<String> = HashSet::new();
        let mut found = dir.is_empty();
        for (i, f) in m.files.iter().enumerate() {
            let Some(rest) = f.path.strip_prefix(&prefix) else {
                continue;
            };
            found = true;
            // Directories on the way to the file.
            let parts: Vec<&str> = rest.split('/').collect();
            let shown_dirs = if recursive {
                parts.len() - 1
            } else {
                parts.len().min(2) - 1
            };
            for k in 1..=shown_dirs {
                let d = format!("{prefix}{}", parts[..k].join("/"));
                if dirs.insert(d.clone()) {
                    let oid = etag::git_blob_id(format!("tree {}@{d}", commit.to_hex()).as_bytes());
                    entries.push(json!({ "type": "directory", "oid": oid, "path": d }));
                }
            }
            if !recursive && parts.len() > 1 {
                continue;
            }
            let (oid, _, lfs) = match self.ids(&m, i) {
                Ok(x) => x,
                Err(e) => return Reply::error(500, "", &e.to_string(), None),
            };
            let mut e = json!({ "type": "file", "oid": oid, "size": f.size, "path": f.path });
            if let Some(l) = lfs {
                e["lfs"] = l;
            }
            entries.push(e);
        }
        if !found {
            return Reply::error(
                404,
                "EntryNotFound",
                &format!("{dir} does not exist at {}", commit.to_hex()),
                Some(&commit),
            );
        }
        Reply::json(200, &Value::Array(entries))
    }

    fn refs(&self, org: &str, name: &str) -> Reply {
        let Ok(repo) = RepoId::parse(&format!("{org}/{name}")) else {
            return Reply::error(
                404,
                "RepoNotFound",
                &format!("Repository {org}/{name} not found"),
                None,
            );
        };
        let refs = match self.store.refs(&repo) {
            Ok(r) => r,
            Err(e) => return Reply::error(500, "", &e.to_string(), None),
        };
        if refs.is_empty()
            && self
                .store
                .commits(&repo)
                .map(|c| c.is_empty())
                .unwrap_or(true)
        {
            return Reply::error(
                404,
                "RepoNotFound",
                &format!("Repository {repo} not found"),
                None,
            );
        }
        let (mut branches, mut prs) = (Vec::new(), Vec::new());
        for (n, c) in refs {
            if n.starts_with("refs/pr/") {
                prs.push(json!({ "name": n, "ref": n, "targetCommit": c.to_hex() }));
            } else {
                branches.push(json!({ "name": n, "ref": format!("refs/heads/{n}"), "targetCommit": c.to_hex() }));
            }
        }
        Reply::json(
            200,
            &json!({ "branches": branches, "tags": [], "converts": [], "pullRequests": prs }),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        req: Request,
        org: &str,
        name: &str,
        rev: &str,
        file: &str,
        head: bool,
        start: Instant,
    ) {
        let client = req
            .remote_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "-".into());
        let log = |status: u16, bytes: u64| {
            tracing::info!(
                target: "access",
                repo = %format!("{org}/{name}"),
                revision = %rev,
                file = %file,
                client = %client,
                method = %if head { "HEAD" } else { "GET" },
                status,
                bytes,
                duration_ms = start.elapsed().as_millis() as u64,
                "access"
            );
        };
        let (_, commit, m) = match self.locate(org, name, rev) {
            Ok(x) => x,
            Err(r) => {
                self.metrics.request("resolve", r.status);
                log(r.status, 0);
                return respond(req, r);
            }
        };
        let Ok(i) = m.files.binary_search_by(|f| f.path.as_str().cmp(file)) else {
            let r = Reply::error(
                404,
                "EntryNotFound",
                &format!("{file} does not exist at {}", commit.to_hex()),
                Some(&commit),
            );
            self.metrics.request("resolve", 404);
            log(404, 0);
            return respond(req, r);
        };
        let f = &m.files[i];
        let (_, etag, lfs) = match self.ids(&m, i) {
            Ok(x) => x,
            Err(e) => {
                self.metrics.request("resolve", 500);
                log(500, 0);
                return respond(req, Reply::error(500, "", &e.to_string(), None));
            }
        };
        let mut headers = vec![
            header("X-Repo-Commit", &commit.to_hex()),
            header("ETag", &format!("\"{etag}\"")),
            header("Accept-Ranges", "bytes"),
            header("Content-Type", "application/octet-stream"),
            header(
                "Content-Disposition",
                &format!(
                    "attachment; filename=\"{}\"",
                    f.path
                        .rsplit('/')
                        .next()
                        .unwrap_or(&f.path)
                        .replace('"', "")
                ),
            ),
        ];
        if lfs.is_some() {
            headers.push(header("X-Linked-Etag", &format!("\"{etag}\"")));
            headers.push(header("X-Linked-Size", &f.size.to_string()));
        }
        let range = req
            .headers()
            .iter()
            .find(|h| h.field.equiv("Range"))
            .map(|h| h.value.as_str().to_string());
        let (status, from, to) = match range.as_deref().map(|r| parse_range(r, f.size)) {
            None => (200, 0, f.size),
            Some(Some((a, b))) => {
                headers.push(header(
                    "Content-Range",
                    &format!("bytes {a}-{}/{}", b - 1, f.size),
                ));
                (206, a, b)
            }
            Some(None) => {
                headers.push(header("Content-Range", &format!("bytes */{}", f.size)));
                self.metrics.request("resolve", 416);
                log(416, 0);
                let mut r = Reply::error(416, "", "range not satisfiable", None);
                r.headers.extend(headers);
                return respond(req, r);
            }
        };
        self.metrics.request("resolve", status);
        let len = (to - from) as usize;
        if head {
            let mut resp = Response::new(
                StatusCode(status),
                headers,
                std::io::empty(),
                Some(len),
                None,
            )
            .with_chunked_threshold(usize::MAX);
            resp.add_header(header("X-Modelcas", "1"));
            let _ = req.respond(resp);
            log(status, 0);
            return;
        }
        let sent = Arc::new(AtomicU64::new(0));
        let body = FileBody::new(self.store.clone(), m.clone(), i, from, to, sent.clone());
        self.metrics.download_started();
        let resp = Response::new(StatusCode(status), headers, body, Some(len), None)
            .with_chunked_threshold(usize::MAX);
        let result = req.respond(resp);
        let bytes = sent.load(std::sync::atomic::Ordering::Relaxed);
        self.metrics
            .download_finished(bytes, start.elapsed().as_secs_f64());
        let shown = if result.is_err() || bytes < len as u64 {
            499
        } else {
            status
        };
        log(shown, bytes);
    }
}

fn respond(req: Request, r: Reply) {
    let len = r.body.len();
    let resp = Response::new(
        StatusCode(r.status),
        r.headers,
        std::io::Cursor::new(r.body),
        Some(len),
        None,
    )
    .with_chunked_threshold(usize::MAX);
    let _ = req.respond(resp);
}

/// `bytes=a-b`, `bytes=a-`, `bytes=-n` → `[start, end)`; `None` when unsatisfiable.
fn parse_range(h: &str, size: u64) -> Option<(u64, u64)> {
    let spec = h.trim().strip_prefix("bytes=")?;
    let spec = spec.split(',').next()?.trim();
    let (a, b) = spec.split_once('-')?;
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (size.saturating_sub(n), size)
    } else {
        let start: u64 = a.parse().ok()?;
        let end = if b.is_empty() {
            size
        } else {
            b.parse::<u64>().ok()?.saturating_add(1).min(size)
        };
        (start, end)
    };
    (start < end && start < size).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 10)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=-10", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=95-200", 100), Some((95, 100)));
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=x-", 100), None);
    }

    #[test]
    fn decoding() {
        assert_eq!(decode("refs%2Fpr%2F1"), "refs/pr/1");
        assert_eq!(decode("a%20b"), "a b");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
    }
}
