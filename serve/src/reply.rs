//! The answer to one request, as every route builds it: the request as the router sees it
//! ([`Head`]), the reply ([`Reply`]: status, headers, body) and the error replies in the
//! shape `huggingface_hub` understands (`X-Error-Code`, `X-Error-Message`), with the
//! Hub's header names.

use format::CommitId;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use crate::body::Body;
use crate::decode::{header_ascii, header_text};

/// One request as the router sees it.
pub struct Head<'a> {
    pub method: &'a Method,
    /// The path as sent, still `%`-encoded.
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a HeaderMap,
    /// The peer's address, for the access log.
    pub client: &'a str,
}

/// A reply: status, headers, body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

impl Reply {
    pub(crate) fn json(status: StatusCode, v: &Value) -> Reply {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Reply {
            status,
            headers,
            body: Body::full(v.to_string()),
        }
    }

    /// `204 No Content`.
    pub(crate) fn no_content() -> Reply {
        Reply {
            status: StatusCode::NO_CONTENT,
            headers: HeaderMap::new(),
            body: Body::empty(),
        }
    }

    /// An error the client understands: `X-Error-Code`, `X-Error-Message` (escaped).
    pub fn error(
        status: StatusCode,
        code: &'static str,
        msg: &str,
        commit: Option<&CommitId>,
    ) -> Reply {
        let mut r = Reply::json(status, &json!({ "error": msg }));
        if !code.is_empty() {
            r.headers
                .insert(X_ERROR_CODE, HeaderValue::from_static(code));
        }
        r.headers.insert(X_ERROR_MESSAGE, header_text(msg));
        if let Some(c) = commit {
            r.headers.insert(X_REPO_COMMIT, header_ascii(&c.to_hex()));
        }
        r
    }

    pub(crate) fn header(mut self, name: HeaderName, v: HeaderValue) -> Reply {
        self.headers.insert(name, v);
        self
    }
}

pub(crate) const X_ERROR_CODE: HeaderName = HeaderName::from_static("x-error-code");
pub(crate) const X_ERROR_MESSAGE: HeaderName = HeaderName::from_static("x-error-message");
pub(crate) const X_REPO_COMMIT: HeaderName = HeaderName::from_static("x-repo-commit");
pub(crate) const X_LINKED_ETAG: HeaderName = HeaderName::from_static("x-linked-etag");
pub(crate) const X_LINKED_SIZE: HeaderName = HeaderName::from_static("x-linked-size");

/// A 404 with the Hub's error shape and `code` (`RepoNotFound`, ...).
pub(crate) fn not_found(code: &'static str, msg: &str, commit: Option<&CommitId>) -> Reply {
    Reply::error(StatusCode::NOT_FOUND, code, msg, commit)
}

/// A 500 saying what went wrong.
pub(crate) fn internal(e: impl std::fmt::Display) -> Reply {
    Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "", &e.to_string(), None)
}

/// A 400 with the Hub's error shape.
pub(crate) fn bad_request(msg: &str) -> Reply {
    Reply::error(StatusCode::BAD_REQUEST, "", msg, None)
}

/// A 404 `RepoNotFound` for `repo`.
pub(crate) fn repo_missing(repo: &str) -> Reply {
    not_found(
        "RepoNotFound",
        &format!("Repository {repo} not found"),
        None,
    )
}
