//! `HEAD`/`GET /{repo}/resolve/{rev}/{path}`: a file download, with the headers the
//! `huggingface_hub` client keys its cache on, `Range`, and one access-log event per
//! request (tracing target `access`), written when the body has been sent or dropped.

use std::time::Instant;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, StatusCode};

use super::{Hub, Located};
use crate::body::Body;
use crate::decode::{self, content_disposition, header_ascii};
use crate::reply::{internal, not_found, Head, Reply, X_LINKED_ETAG, X_LINKED_SIZE, X_REPO_COMMIT};

/// What the access log says about one request.
#[derive(Clone)]
struct Access {
    repo: String,
    rev: String,
    file: String,
    client: String,
    method: &'static str,
    start: Instant,
    /// `hit`: the revision was stored; `miss`: it was pulled from the upstream first (or
    /// could not be found).
    cache: &'static str,
}

impl Access {
    fn log(&self, status: u16, bytes: u64) {
        // A routing that stopped to wait for the upstream logs when it is done.
        if crate::upstream::flight::stopped() {
            return;
        }
        tracing::info!(
            target: "access",
            repo = %self.repo,
            revision = %self.rev,
            file = %self.file,
            client = %self.client,
            method = %self.method,
            cache = %self.cache,
            status,
            bytes,
            duration_ms = self.start.elapsed().as_millis() as u64,
            "access"
        );
    }
}

impl Hub {
    pub(super) fn resolve(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
        rev: &str,
        file: &str,
        start: Instant,
    ) -> Reply {
        let head = *req.method == Method::HEAD;
        let access = Access {
            repo: format!("{org}/{name}"),
            rev: rev.to_string(),
            file: file.to_string(),
            client: req.client.to_string(),
            method: if head { "HEAD" } else { "GET" },
            start,
            cache: "miss",
        };
        let mut access = access;
        let r = self.resolve_reply(req.headers, org, name, rev, file, head, &mut access);
        self.count("resolve", r.status.as_u16());
        // A streamed body logs itself when it ends.
        if !matches!(r.body, Body::Stream { .. }) {
            access.log(r.status.as_u16(), 0);
        }
        r
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one request, each used once"
    )]
    fn resolve_reply(
        &self,
        req_headers: &HeaderMap,
        org: &str,
        name: &str,
        rev: &str,
        file: &str,
        head: bool,
        access: &mut Access,
    ) -> Reply {
        let at = match self.locate(org, name, rev) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        self.record_use(&at);
        access.cache = if at.pulled { "miss" } else { "hit" };
        if !head {
            self.metrics.lookup(!at.pulled);
        }
        let Ok(i) = at
            .manifest
            .files
            .binary_search_by(|f| f.path.as_str().cmp(file))
        else {
            let msg = format!("{file} does not exist at {}", at.commit.to_hex());
            return not_found("EntryNotFound", &msg, Some(&at.commit));
        };
        let mut h = match self.file_headers(&at, i) {
            Ok(h) => h,
            Err(e) => return internal(e),
        };
        self.xet_headers(req_headers, &at, i, &mut h);
        let size = at.manifest.files[i].size;
        let (status, from, to) = match byte_range(req_headers, size, &mut h) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        if head {
            h.insert("x-modelcas", HeaderValue::from_static("1"));
            return Reply {
                status,
                headers: h,
                body: Body::empty(),
            };
        }
        self.metrics.download_started();
        let (metrics, access, len) = (self.metrics_handle(), access.clone(), to - from);
        // A long download keeps its revision in use until it ends.
        let hold = repo::usage::hold(&self.store, &at.repo, &at.commit, "serve");
        let done = Box::new(move |sent: u64| {
            drop(hold);
            metrics.download_finished(sent, access.start.elapsed().as_secs_f64());
            let shown = if sent < len { 499 } else { status.as_u16() };
            access.log(shown, sent);
        });
        Reply {
            status,
            headers: h,
            body: Body::stream(self.source(&at, i), from, to, done),
        }
    }

    /// The headers of file `i` of the located revision that the client reads before the
    /// body: the commit, the etag (and for LFS files the linked etag and size), the name.
    fn file_headers(&self, at: &Located, i: usize) -> Result<HeaderMap, read::source::ReadError> {
        let f = &at.manifest.files[i];
        let (_, etag, lfs) = self.ids(at, i)?;
        let quoted = header_ascii(&format!("\"{etag}\""));
        let mut h = HeaderMap::new();
        h.insert(X_REPO_COMMIT, header_ascii(&at.commit.to_hex()));
        h.insert(header::ETAG, quoted.clone());
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        h.insert(header::CONTENT_DISPOSITION, content_disposition(&f.path));
        h.insert(
            header::LAST_MODIFIED,
            decode::http_date(at.manifest.ingested_at),
        );
        if lfs.is_some() {
            h.insert(X_LINKED_ETAG, quoted);
            h.insert(X_LINKED_SIZE, HeaderValue::from(f.size));
        }
        Ok(h)
    }

    fn metrics_handle(&self) -> &'static crate::metrics::Metrics {
        self.metrics
    }
}

/// The part of a file of `size` bytes the request asks for (its `Range` header): the
/// status and `[from, to)`, with `Content-Range` and `Content-Length` added to `h`; or the
/// 416 reply.
fn byte_range(
    req_headers: &HeaderMap,
    size: u64,
    h: &mut HeaderMap,
) -> Result<(StatusCode, u64, u64), Box<Reply>> {
    let range = req_headers
        .get(header::RANGE)
        .map(|v| v.to_str().ok().and_then(|r| decode::parse_range(r, size)));
    let (status, from, to) = match range {
        None => (StatusCode::OK, 0, size),
        Some(Some((a, b))) => {
            let cr = format!("bytes {a}-{}/{size}", b - 1);
            h.insert(header::CONTENT_RANGE, header_ascii(&cr));
            (StatusCode::PARTIAL_CONTENT, a, b)
        }
        Some(None) => {
            let mut r = Reply::error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "",
                "range not satisfiable",
                None,
            );
            h.insert(
                header::CONTENT_RANGE,
                header_ascii(&format!("bytes */{size}")),
            );
            h.remove(header::CONTENT_TYPE);
            r.headers.extend(h.clone());
            return Err(Box::new(r));
        }
    };
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(to - from));
    Ok((status, from, to))
}
