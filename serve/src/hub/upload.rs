//! The Hub's write routes, as `huggingface_hub` calls them to upload (`upload_file`,
//! `upload_folder`, `create_commit`, `push_to_hub`, `create_repo`, `create_branch`,
//! `create_tag`): create a repository, preupload, the LFS batch and verify, the commit
//! (NDJSON, parsed in `upload/commit_body.rs`), branches and tags (`upload/refs.rs`). The
//! object `PUT` an LFS batch hands out is streamed by `server.rs`; the writing itself is the
//! binary's [`crate::uploads::Uploads`].
//!
//! Every route needs a token whose write scope covers the repository (403
//! `WriteNotAllowed` otherwise, nothing read or changed), and obeys the policy: the
//! allow-list (403 `RepoNotAllowed`), locks (403 `RevisionLocked`: a locked repository
//! takes no upload), and the mirror (403 `RepoMirrored` for a repository brought from
//! upstream, unless `--upload-over-mirror`).

use format::{RepoId, Sha256};
use http::{header, HeaderValue, Method, StatusCode};
use serde_json::{json, Value};

use super::browse::base_url;
use super::{Head, Hub, Reply};
use crate::reply::{internal, X_ERROR_MESSAGE};
use crate::uploads::{CommitRequest, UploadOptions};

mod commit_body;
mod refs;

pub(crate) use commit_body::parse_commit;

/// Most files in one preupload or LFS batch request (the client sends 256 and 1000).
const MAX_BATCH: usize = 10_000;

impl Hub {
    /// Xet's global dedup query, `GET /v1/chunks/{prefix}/{chunk hash}` with a Xet write
    /// token (not a token of the token file: routed before them): a shard listing the
    /// stored xorb that holds the chunk, its chunk hashes keyed (xet.md, "Global dedup
    /// answers"), when the repository of the revision holding it is served here; else 404.
    pub(super) fn xet_dedup_route(&self, req: &Head<'_>, segs: &[&str]) -> Option<Reply> {
        let ["v1", "chunks", _, hash] = segs else {
            return None;
        };
        let up = self.uploads.as_ref()?;
        let r = if *req.method != Method::GET {
            Reply::error(StatusCode::METHOD_NOT_ALLOWED, "", "GET only", None)
        } else if up
            .open_xet_token(
                crate::auth::bearer(req.headers).unwrap_or(""),
                repo::manifest::now_secs(),
            )
            .is_none()
        {
            Reply::error(
                StatusCode::UNAUTHORIZED,
                "",
                "a Xet write token is needed",
                None,
            )
        } else {
            let found = format::XetHash::parse(hash)
                .ok()
                .and_then(|h| up.uploads.dedup(&h));
            match found.filter(|(repo, _)| self.policy.allows(&repo.to_string())) {
                Some((_, shard)) => {
                    let mut r = Reply::json(StatusCode::OK, &Value::Null);
                    r.body = crate::body::Body::full(bytes::Bytes::from(shard));
                    r.header(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/octet-stream"),
                    )
                }
                None => Reply::error(
                    StatusCode::NOT_FOUND,
                    "",
                    "no stored xorb holds this chunk",
                    None,
                ),
            }
        };
        self.count("xet-dedup", r.status.as_u16());
        Some(r)
    }

    /// Whether the server may read the body of a request to `path`: for a write route, only
    /// when the token may write to its repository (`create` and `validate-yaml`: to some
    /// repository), so that no other token can hold the body slots.
    pub fn may_send_body(&self, path: &str, headers: &http::HeaderMap) -> bool {
        let Ok(segs) = crate::decode::segments(path) else {
            return false;
        };
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        let token = crate::auth::bearer(headers).unwrap_or("");
        let scope = self.write_scopes.get(token);
        let may = |org: &str, name: &str| {
            let repo = format!("{org}/{}", name.strip_suffix(".git").unwrap_or(name));
            scope.is_some_and(|p| crate::uploads::may_write(p, &repo))
        };
        match segs.as_slice() {
            ["api", "models", _, _, "paths-info", ..] => true,
            ["api", "models", org, name, ..]
            | [org, name, "info", "lfs", ..]
            | ["upload", "verify", org, name] => may(org, name),
            ["api", "repos", "create"] | ["api", "validate-yaml"] => scope.is_some(),
            _ => true,
        }
    }

    /// The reply to a write route, or `None` when the request is not one.
    pub(super) fn upload_route(
        &self,
        req: &Head<'_>,
        segs: &[&str],
        body: &[u8],
    ) -> Option<(&'static str, Reply)> {
        let (post, delete) = (*req.method == Method::POST, *req.method == Method::DELETE);
        let r = match segs {
            ["api", "repos", "create"] if post => ("repo-create", self.create_repo(req, body)),
            ["api", "models", org, name, "preupload", rev @ ..] if post && !rev.is_empty() => (
                "preupload",
                self.preupload(req, org, name, &rev.join("/"), body),
            ),
            ["api", "models", org, name, "commit", rev @ ..] if post && !rev.is_empty() => {
                ("commit", self.commit(req, org, name, &rev.join("/"), body))
            }
            ["api", "models", org, name, "branch", branch @ ..]
                if (post || delete) && !branch.is_empty() =>
            {
                (
                    "branch",
                    self.branch(req, org, name, &branch.join("/"), body),
                )
            }
            ["api", "models", org, name, "tag", rev @ ..]
                if (post || delete) && !rev.is_empty() =>
            {
                ("tag", self.tag(req, org, name, &rev.join("/"), body))
            }
            [org, git, "info", "lfs", "objects", "batch"] if post && git.ends_with(".git") => {
                let name = &git[..git.len() - 4];
                ("lfs-batch", self.lfs_batch(req, org, name, body))
            }
            ["upload", "verify", org, name] if post => {
                ("lfs-verify", self.lfs_verify(req, org, name, body))
            }
            // `upload_folder` checks a README.md's metadata first; the store keeps no
            // metadata, so any is accepted (the body must still be JSON).
            ["api", "validate-yaml"] if post => match json_body(body) {
                Ok(_) => {
                    let ok = json!({ "errors": [], "warnings": [] });
                    ("validate-yaml", Reply::json(StatusCode::OK, &ok))
                }
                Err(r) => ("validate-yaml", *r),
            },
            ["api", "models", org, name, "xet-write-token", ..] if *req.method == Method::GET => {
                ("xet-write-token", self.xet_write_token(req, org, name))
            }
            _ => return None,
        };
        Some(r)
    }

    /// The upload settings and the repository, when the request's token may write to
    /// `org/name` and the policy lets it be written.
    fn writable(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
    ) -> Result<(&UploadOptions, RepoId), Box<Reply>> {
        let forbidden = |code: &'static str, msg: &str| {
            Box::new(Reply::error(StatusCode::FORBIDDEN, code, msg, None))
        };
        let Some(up) = &self.uploads else {
            return Err(forbidden(
                "WriteNotAllowed",
                "this hub takes no uploads: give a token a write scope in the token file (TOKEN  write=org/*)",
            ));
        };
        let shown = format!("{org}/{name}");
        let token = crate::auth::bearer(req.headers).unwrap_or("");
        if !self
            .write_scopes
            .get(token)
            .is_some_and(|p| crate::uploads::may_write(p, &shown))
        {
            return Err(forbidden(
                "WriteNotAllowed",
                &format!("this token may not write to {shown}"),
            ));
        }
        let repo = self.repo_id(org, name)?;
        if let Some(c) = self.policy.lock_of(&repo) {
            let msg = format!(
                "{repo} is locked to {} by [serve.locks]: it takes no uploads",
                c.to_hex()
            );
            return Err(forbidden("RevisionLocked", &msg));
        }
        if !up.over_mirror
            && (self.policy.looks_up(&repo.to_string())
                || self.store.mirrored(&repo).map_err(internal)?)
        {
            let msg = format!("{repo} is mirrored from upstream: it takes no uploads (serve --upload-over-mirror)");
            return Err(forbidden("RepoMirrored", &msg));
        }
        Ok((up, repo))
    }

    /// `GET .../xet-write-token/{rev}`: a Xet write token for the CAS routes (xorbs and
    /// shards, `upload_stream.rs`), its expiry and the CAS URL, in the JSON body and in the
    /// `X-Xet-*` headers as the Hub sends them. The revision (`None` for a pull request) is
    /// not part of it: the commit names the branch.
    fn xet_write_token(&self, req: &Head<'_>, org: &str, name: &str) -> Reply {
        let (up, repo) = match self.writable(req, org, name) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        let exp = crate::xet::expiry(repo::manifest::now_secs(), up.url_ttl);
        let token = up.xet_token(&repo.to_string(), exp);
        up.uploads.prepare(&repo);
        let cas = match self.xet.as_ref().and_then(|x| x.cas_url.clone()) {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => base_url(req.headers),
        };
        let r = Reply::json(
            StatusCode::OK,
            &json!({ "accessToken": token, "exp": exp, "casUrl": cas }),
        );
        r.header(
            header::HeaderName::from_static("x-xet-access-token"),
            crate::decode::header_ascii(&token),
        )
        .header(
            header::HeaderName::from_static("x-xet-token-expiration"),
            crate::decode::header_ascii(&exp.to_string()),
        )
        .header(
            header::HeaderName::from_static("x-xet-cas-url"),
            crate::decode::header_ascii(&cas),
        )
    }

    /// `POST /api/repos/create` (`create_repo`): a repository exists in the store once it
    /// has a revision, so this checks that it may be written and answers 409 when it has
    /// one already (`exist_ok=True` takes that).
    fn create_repo(&self, req: &Head<'_>, body: &[u8]) -> Reply {
        let v = match json_body(body) {
            Ok(v) => v,
            Err(r) => return *r,
        };
        match v.get("type").and_then(Value::as_str) {
            None | Some("model") => {}
            Some(t) => return bad(&format!("this hub stores models only, not {t}s")),
        }
        let (Some(org), Some(name)) = (
            v.get("organization").and_then(Value::as_str),
            v.get("name").and_then(Value::as_str),
        ) else {
            return bad(
                "repository ids here are org/name: give create_repo an id with an organization",
            );
        };
        if let Err(e) = RepoId::parse(&format!("{org}/{name}")) {
            return bad(&e.to_string());
        }
        let private = v.get("private").and_then(Value::as_bool) == Some(true)
            || v.get("visibility")
                .and_then(Value::as_str)
                .is_some_and(|s| s != "public");
        if private {
            return bad("this hub has no private repositories: every token of the token file reads every repository it serves");
        }
        let repo = match self.writable(req, org, name) {
            Ok((_, r)) => r,
            Err(r) => return *r,
        };
        let url = format!("{}/{repo}", base_url(req.headers));
        match self.store.commits(&repo) {
            // As the Hub: the 409 carries the repository's `url`, which `create_repo(...,
            // exist_ok=True)` reads from it.
            Ok(c) if !c.is_empty() => {
                let msg = "You already created this model repo";
                Reply::json(StatusCode::CONFLICT, &json!({ "error": msg, "url": url }))
                    .header(X_ERROR_MESSAGE, HeaderValue::from_static(msg))
            }
            Ok(_) | Err(repo::StoreError::UnknownRepo(_)) => Reply::json(
                StatusCode::OK,
                &json!({ "url": url, "name": repo.to_string(), "id": repo.to_string() }),
            ),
            Err(e) => internal(e),
        }
    }

    /// `POST .../preupload/{rev}`: each file's upload mode (`regular` inline up to
    /// [`UploadOptions::regular_max`], else `lfs`) and, when the branch has a file at that
    /// path, its oid as the client computes its own (sha256 for LFS, git blob id for
    /// regular), so that unchanged files are not sent.
    fn preupload(&self, req: &Head<'_>, org: &str, name: &str, rev: &str, body: &[u8]) -> Reply {
        let (up, repo, v) = match self.writable_json(req, org, name, body) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        let Some(files) = v
            .get("files")
            .and_then(Value::as_array)
            .filter(|f| f.len() <= MAX_BATCH)
        else {
            return bad(&format!(
                "preupload needs `files`, a list of at most {MAX_BATCH}"
            ));
        };
        let head = self.locate(repo.org(), repo.name(), rev).ok();
        let mut out = Vec::with_capacity(files.len());
        for f in files {
            let (Some(path), Some(size)) = (
                f.get("path").and_then(Value::as_str),
                f.get("size").and_then(Value::as_u64),
            ) else {
                return bad("each preupload file needs `path` and `size`");
            };
            let regular = size <= up.regular_max;
            let oid = head.as_ref().and_then(|at| {
                let i = at.manifest.files.iter().position(|e| e.path == path)?;
                if !regular {
                    return Some(at.manifest.files[i].sha256.to_hex());
                }
                (at.manifest.files[i].size <= up.regular_max)
                    .then(|| self.blob_id(at, i).ok())
                    .flatten()
            });
            out.push(json!({
                "path": path,
                "uploadMode": if regular { "regular" } else { "lfs" },
                "shouldIgnore": false,
                "oid": oid,
            }));
        }
        Reply::json(
            StatusCode::OK,
            &json!({ "files": out, "commitOid": head.map(|h| h.commit.to_hex()) }),
        )
    }

    /// `POST /{repo}.git/info/lfs/objects/batch`: per object, nothing to do when the
    /// repository or the spool has it, else a signed, expiring upload URL and a verify URL.
    fn lfs_batch(&self, req: &Head<'_>, org: &str, name: &str, body: &[u8]) -> Reply {
        let (up, repo, v) = match self.writable_json(req, org, name, body) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        if v.get("operation").and_then(Value::as_str) != Some("upload") {
            return bad("this LFS endpoint takes uploads only (operation: upload); download through resolve");
        }
        let Some(objects) = v
            .get("objects")
            .and_then(Value::as_array)
            .filter(|o| o.len() <= MAX_BATCH)
        else {
            return bad(&format!(
                "an LFS batch needs `objects`, a list of at most {MAX_BATCH}"
            ));
        };
        let mut wanted = Vec::with_capacity(objects.len());
        for o in objects {
            let oid = o
                .get("oid")
                .and_then(Value::as_str)
                .and_then(|s| Sha256::from_hex(s).ok());
            let (Some(oid), Some(size)) = (oid, o.get("size").and_then(Value::as_u64)) else {
                return bad("each LFS object needs `oid` (64 hex digits, a sha256) and `size`");
            };
            wanted.push((oid, size));
        }
        let present = match up.uploads.present(&repo, &wanted) {
            Ok(p) => p,
            Err(e) => return e.reply(),
        };
        let base = base_url(req.headers);
        let exp = crate::xet::expiry(repo::manifest::now_secs(), up.url_ttl);
        let answers: Vec<Value> = wanted
            .iter()
            .zip(present)
            .map(|((oid, size), have)| {
                let oid_hex = oid.to_hex();
                if have {
                    return json!({ "oid": oid_hex, "size": size });
                }
                if let Err(e) = up.uploads.check_room(*size) {
                    return json!({ "oid": oid_hex, "size": size, "error": { "code": 413, "message": e.to_string() } });
                }
                let sig = up.sign(&repo.to_string(), &oid_hex, *size, exp);
                let href = format!("{base}/upload/lfs/{repo}/{oid_hex}/{size}/{exp}/{sig}");
                json!({
                    "oid": oid_hex, "size": size, "authenticated": true,
                    "actions": {
                        "upload": { "href": href, "expires_in": up.url_ttl.as_secs() },
                        "verify": { "href": format!("{base}/upload/verify/{repo}") },
                    }
                })
            })
            .collect();
        Reply::json(
            StatusCode::OK,
            &json!({ "transfer": "basic", "objects": answers, "hash_algo": "sha256" }),
        )
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/vnd.git-lfs+json"),
        )
    }

    /// `POST /upload/verify/{repo}` `{oid, size}`: 200 when the object arrived whole.
    fn lfs_verify(&self, req: &Head<'_>, org: &str, name: &str, body: &[u8]) -> Reply {
        let (up, repo, v) = match self.writable_json(req, org, name, body) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        let oid = v
            .get("oid")
            .and_then(Value::as_str)
            .and_then(|s| Sha256::from_hex(s).ok());
        let (Some(oid), Some(size)) = (oid, v.get("size").and_then(Value::as_u64)) else {
            return bad("verify needs `oid` and `size`");
        };
        if up.uploads.received(&repo, &oid, size) {
            Reply::json(
                StatusCode::OK,
                &json!({ "oid": oid.to_hex(), "size": size }),
            )
        } else {
            Reply::error(
                StatusCode::NOT_FOUND,
                "EntryNotFound",
                "the object has not arrived whole",
                None,
            )
        }
    }

    /// `POST .../commit/{branch}` (NDJSON): the operations applied to the branch and
    /// published; `{commitUrl, commitOid}`.
    fn commit(&self, req: &Head<'_>, org: &str, name: &str, branch: &str, body: &[u8]) -> Reply {
        let (up, repo) = match self.writable(req, org, name) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        crate::metrics::METRICS.upload_received(body.len() as u64);
        if crate::decode::query_flag(req.query, "create_pr") {
            return bad("this hub takes no pull requests: commit to a branch");
        }
        if let Err(msg) = branch_name(branch) {
            return bad(&msg);
        }
        // A tag of that name refuses it: the commit looks under the branch's commit lock.
        let (parent, operations) = match parse_commit(body) {
            Ok(x) => x,
            Err(msg) => return bad(&msg),
        };
        let c = CommitRequest {
            repo: repo.clone(),
            branch: branch.to_string(),
            parent,
            operations,
        };
        match up.uploads.commit(c) {
            Ok(done) => {
                self.forget_spellings();
                let oid = done.commit.to_hex();
                if done.held {
                    let msg = format!(
                        "stored as {oid}, but its release check did not pass: {branch} was not moved (modelcas check {repo}@{oid})"
                    );
                    return Reply::error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "ReleaseCheckFailed",
                        &msg,
                        None,
                    );
                }
                let url = format!("{}/{repo}/commit/{oid}", base_url(req.headers));
                Reply::json(
                    StatusCode::OK,
                    &json!({ "success": true, "commitOid": oid, "commitUrl": url, "pullRequestUrl": null }),
                )
            }
            Err(e) => e.reply(),
        }
    }

    /// [`Hub::writable`], and the request's body as a JSON object.
    fn writable_json(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
        body: &[u8],
    ) -> Result<(&UploadOptions, RepoId, Value), Box<Reply>> {
        let (up, repo) = self.writable(req, org, name)?;
        Ok((up, repo, json_body(body)?))
    }
}

/// A name a commit, branch or tag may take: a valid ref name, not `HEAD` and not under
/// `refs/` (pull requests and the like, which the Hub makes itself).
fn branch_name(name: &str) -> Result<(), String> {
    format::names::check_ref_name(name).map_err(|e| format!("ref name {name:?}: {e}"))?;
    if name == "HEAD" || name.starts_with("refs/") {
        return Err(format!(
            "ref name {name:?}: HEAD and refs/... are the Hub's own"
        ));
    }
    Ok(())
}

fn json_body(body: &[u8]) -> Result<Value, Box<Reply>> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(Box::new(bad("the body must be a JSON object"))),
        Err(e) => Err(Box::new(bad(&format!("the body is not JSON: {e}")))),
    }
}

fn bad(msg: &str) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, "", msg, None)
}
