//! Xet downloads (issue 28, docs/format/xet.md): the read-token route (behind the same
//! `--token-file` auth as every route), `GET /v1/reconstructions/{file_hash}` and its v2
//! form (authorized by a read token), the signed xorb fetch URLs (authorized by their own signature: the
//! client sends no `Authorization` there), and the Xet fields of listings and `resolve`.
//! Only files whose manifest records their Xet hash are offered through Xet; the bytes
//! come from [`Hub::source`], the one read path (every chunk BLAKE3-verified).

use bytes::Bytes;
use format::XetHash;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::{Hub, Located};
use crate::body::{Body, Segment};
use crate::decode::{self, header_ascii};
use crate::reply::{not_found, Head, Reply};
use crate::xet::{self, Refusal, XetOptions};

const X_XET_HASH: HeaderName = HeaderName::from_static("x-xet-hash");

/// Now, in seconds since the epoch, by the process clock (`repo::clock`) that issues and
/// checks the tokens and signed URLs.
fn now() -> u64 {
    repo::clock::now_secs()
}

fn refused(status: StatusCode, why: &str) -> Reply {
    Reply::error(status, "", why, None)
}

/// The bearer token of a request.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

impl Hub {
    /// The Xet routes that carry their own authorization (answered before the
    /// `--token-file` check): reconstructions and xorb fetches. `None`: not one of them.
    pub(super) fn xet_own_auth(&self, req: &Head<'_>, segs: &[&str]) -> Option<Reply> {
        let x = self.xet.as_ref()?;
        let (endpoint, r) = match segs {
            ["v2", "reconstructions", hash] => (
                "xet-reconstruction-v2",
                self.reconstruction(x, req, hash, xet::Api::V2),
            ),
            ["v1", "reconstructions", hash] => (
                "xet-reconstruction",
                self.reconstruction(x, req, hash, xet::Api::V1),
            ),
            ["xet", "xorbs", rest @ ..] => match <[&str; 7]>::try_from(rest) {
                Ok(parts) => ("xet-xorb", self.xorb(x, req, parts)),
                Err(_) => ("xet-xorb", not_found("", "no such xorb", None)),
            },
            _ => return None,
        };
        let r = if *req.method == Method::GET {
            r
        } else {
            Reply::error(StatusCode::METHOD_NOT_ALLOWED, "", "GET only", None)
        };
        self.count(endpoint, r.status.as_u16());
        Some(r)
    }

    /// The CAS URL handed to clients: `[serve] xet_cas_url`, else `http://` + `Host`.
    fn cas_url(&self, x: &XetOptions, headers: &HeaderMap) -> Option<String> {
        if let Some(u) = &x.cas_url {
            return Some(u.trim_end_matches('/').to_string());
        }
        let host = headers.get(header::HOST)?.to_str().ok()?;
        let ok = !host.is_empty()
            && host.len() <= 255
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b));
        ok.then(|| format!("http://{host}"))
    }

    /// The Xet hash of file `i` when serve offers it through Xet.
    pub(super) fn xet_hash_of(&self, at: &Located, i: usize) -> Option<XetHash> {
        self.xet.as_ref()?;
        at.manifest.xet_hash(i)
    }

    /// `X-Xet-Hash` and the `Link` to the read-token route for file `i`.
    pub(super) fn xet_headers(&self, req: &HeaderMap, at: &Located, i: usize, h: &mut HeaderMap) {
        let (Some(hash), Some(x)) = (self.xet_hash_of(at, i), self.xet.as_ref()) else {
            return;
        };
        let Some(base) = self.cas_url(x, req) else {
            return;
        };
        let link = format!(
            "<{base}/api/models/{}/xet-read-token/{}>; rel=\"xet-auth\"",
            at.repo,
            at.commit.to_hex()
        );
        h.insert(X_XET_HASH, header_ascii(&hash.hex()));
        h.insert(header::LINK, header_ascii(&link));
    }

    /// Remembers the repository of each Xet hash of the located revision (the cache
    /// evicts others when full).
    fn remember_xet(&self, at: &Located) {
        for h in &at.manifest.xet_hashes {
            self.xet_seen.insert(*h, at.repo.clone());
        }
    }

    /// `GET /api/models/{repo}/xet-read-token/{rev}`.
    pub(super) fn xet_token(&self, req: &Head<'_>, org: &str, name: &str, rev: &str) -> Reply {
        let Some(x) = self.xet.as_ref() else {
            return not_found("", "Xet is off on this server", None);
        };
        let at = match self.locate(org, name, rev) {
            Ok(at) => at,
            Err(r) => return *r,
        };
        if at.manifest.xet_hashes.is_empty() {
            let msg = "this revision has no Xet hashes recorded; download it without Xet";
            return not_found("EntryNotFound", msg, Some(&at.commit));
        }
        let Some(cas) = self.cas_url(x, req.headers) else {
            return refused(StatusCode::BAD_REQUEST, "no usable Host header");
        };
        self.record_use(&at);
        self.remember_xet(&at);
        let exp = xet::expiry(now(), x.token_ttl);
        let token = x.token(&at.repo.to_string(), &at.commit.to_hex(), exp);
        let mut r = Reply::json(
            StatusCode::OK,
            &json!({"accessToken": token, "exp": exp, "casUrl": cas}),
        );
        for (name, v) in [
            ("x-xet-cas-url", cas.as_str()),
            ("x-xet-access-token", token.as_str()),
            ("x-xet-token-expiration", &exp.to_string()),
        ] {
            r.headers
                .insert(HeaderName::from_static(name), header_ascii(v));
        }
        r
    }

    /// The revision a read token names, and the 401 that refreshes the client's token.
    fn token_scope(&self, x: &XetOptions, req: &Head<'_>) -> Result<Located, Box<Reply>> {
        let refuse = |why: Refusal| Box::new(refused(StatusCode::UNAUTHORIZED, why.message()));
        let token = bearer(req.headers).ok_or_else(|| refuse(Refusal::BadToken))?;
        let (repo, commit) = x.open_token(token, now()).map_err(refuse)?;
        let (org, name) = repo
            .split_once('/')
            .ok_or_else(|| refuse(Refusal::BadToken))?;
        self.locate(org, name, &commit)
    }

    /// `GET /v1/reconstructions/{hash}` and `/v2/...`: the file's terms and fetch URLs.
    fn reconstruction(&self, x: &XetOptions, req: &Head<'_>, hash: &str, api: xet::Api) -> Reply {
        let at = match self.token_scope(x, req) {
            Ok(at) => at,
            Err(r) => return *r,
        };
        let Ok(hash) = XetHash::parse(hash) else {
            return refused(StatusCode::BAD_REQUEST, "not a Xet hash");
        };
        let Some(i) = at.manifest.xet_hashes.iter().position(|h| *h == hash) else {
            if self.xet_seen.get(&hash).is_some_and(|r| r != at.repo) {
                let msg = "this token is for another repository";
                return refused(StatusCode::FORBIDDEN, msg);
            }
            return not_found("EntryNotFound", "no such file hash", None);
        };
        self.remember_xet(&at);
        let Some(cas) = self.cas_url(x, req.headers) else {
            return refused(StatusCode::BAD_REQUEST, "no usable Host header");
        };
        let f = &at.manifest.files[i];
        let (from, to) = match req.headers.get(header::RANGE) {
            None if f.size == 0 => (0, 0),
            None => (0, f.size),
            Some(v) => match v.to_str().ok().and_then(|r| decode::parse_range(r, f.size)) {
                Some(r) => r,
                None => {
                    let mut r = refused(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
                    let cr = header_ascii(&format!("bytes */{}", f.size));
                    r.headers.insert(header::CONTENT_RANGE, cr);
                    return r;
                }
            },
        };
        let (repo, commit, exp) = (
            at.repo.to_string(),
            at.commit.to_hex(),
            xet::expiry(now(), x.url_ttl),
        );
        let url = |id: &XetHash| format!("{cas}{}", x.xorb_path(&repo, &commit, &hash, id, exp));
        let v = if from < to {
            xet::reconstruction(f, from, to - 1, &url, api)
        } else {
            json!({"offset_into_first_range": 0, "terms": [], api.fetch_key(): {}})
        };
        self.record_use(&at);
        tracing::info!(
            target: "access",
            repo = %at.repo,
            revision = %commit,
            file = %f.path,
            client = %req.client,
            range = %format!("{from}-{to}"),
            api = ?api,
            terms = v["terms"].as_array().map_or(0, Vec::len),
            "xet reconstruction"
        );
        Reply::json(StatusCode::OK, &v)
    }

    fn xorb(&self, x: &XetOptions, req: &Head<'_>, parts: [&str; 7]) -> Reply {
        let named = match x.open_xorb_path(parts, now()) {
            Ok(p) => p,
            Err(why) => return refused(StatusCode::FORBIDDEN, why.message()),
        };
        let Some((org, name)) = named.repo.split_once('/') else {
            return not_found("", "no such xorb", None);
        };
        let at = match self.locate(org, name, &named.commit) {
            Ok(at) => at,
            Err(r) => return *r,
        };
        // The file by its content and the xorb by its id: a commit replaced since the URL
        // was handed out answers the same bytes where it still has them, else 404.
        let gone = "the content this URL names is no longer in this commit";
        let Some(fi) = at.manifest.xet_hashes.iter().position(|h| *h == named.file) else {
            return not_found("", gone, None);
        };
        let f = &at.manifest.files[fi];
        let xorbs = xet::xorbs(f);
        let Some(xb) = xorbs.iter().find(|xb| xb.id == named.xorb) else {
            return not_found("", gone, None);
        };
        let recs = xet::records(f, xb);
        let total = xet::xorb_len(&recs);
        let range = req.headers.get(header::RANGE);
        let (from, to) =
            match range.map(|v| v.to_str().ok().and_then(|r| decode::parse_range(r, total))) {
                None => (0, total),
                Some(Some(r)) => r,
                Some(None) => {
                    let mut r = refused(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
                    let cr = header_ascii(&format!("bytes */{total}"));
                    r.headers.insert(header::CONTENT_RANGE, cr);
                    return r;
                }
            };
        let segs: Vec<Segment> = xet::xorb_range(xb, &recs, from, to)
            .into_iter()
            .map(|p| match p {
                xet::XorbPart::Header(h) => Segment::Bytes(Bytes::from(h)),
                xet::XorbPart::File { from, to } => Segment::File { from, to },
            })
            .collect();
        let len = to - from;
        let hold = repo::usage::hold(&self.store, &at.repo, &at.commit, "serve");
        let mut r = Reply {
            status: if range.is_some() {
                StatusCode::PARTIAL_CONTENT
            } else {
                StatusCode::OK
            },
            headers: HeaderMap::new(),
            // Streamed as downloads are: a slow reader holds a few batches, not the range;
            // and, as a download does, keeps its revision in use until it ends.
            body: Body::segments(self.source(&at, fi), segs, Box::new(move |_| drop(hold))),
        };
        if range.is_some() {
            let cr = format!("bytes {from}-{}/{total}", to - 1);
            r.headers.insert(header::CONTENT_RANGE, header_ascii(&cr));
        }
        r.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        r.headers
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        r
    }

    /// The `xetHash` of a tree entry for file `i`, when offered through Xet.
    pub(super) fn xet_listed(&self, at: &Located, i: usize) -> Option<Value> {
        self.xet_hash_of(at, i).map(|h| Value::String(h.hex()))
    }
}
