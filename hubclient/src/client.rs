//! The HTTP layer: one [`HubClient`] (cheap to clone, shared by threads) sends GETs with
//! the token, follows redirects itself, retries what is worth retrying, turns error
//! statuses into typed [`Error`]s and counts what it did ([`Stats`]).
//!
//! Redirects are followed here rather than by `ureq` so that the rule for the token is
//! ours and visible: `Authorization` goes to the endpoint's origin (scheme, host, port)
//! and nowhere else, whichever hop or `Link` leads elsewhere (the Hub redirects file
//! downloads to a CDN that must never see the token).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ureq::http::{HeaderMap, Response};
use ureq::Body;

use crate::error::{token_hint, Error};
use crate::options::HubOptions;
use crate::retry;
use crate::url::{join, origin};

/// Most redirects followed for one request (as `requests` and `huggingface_hub`: a
/// renamed repository, then a CDN, never more than a few).
const MAX_REDIRECTS: u32 = 10;

/// Most bytes of an error body read for its message.
const ERROR_BODY_LIMIT: u64 = 16 * 1024;

/// What the client has done so far, for progress bars and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// HTTP requests sent (each redirect hop and each retry counts).
    pub requests: u64,
    /// Requests sent again after a 429, a 5xx or a connection failure.
    pub retries: u64,
    /// Downloads re-requested from where a cut connection left them.
    pub resumes: u64,
    /// File bytes received (metadata excluded), those discarded included.
    pub bytes_downloaded: u64,
    /// Bytes received but thrown away: the start of a 200 answer to a ranged request.
    pub bytes_discarded: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) resumes: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) discarded: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// What a request is about, to name it in errors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    pub repo: &'a str,
    pub revision: Option<&'a str>,
    pub path: Option<&'a str>,
}

/// Headers that only the Hub's own hop carries (a CDN's final answer lacks them): the
/// first value seen along the redirect chain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Linked {
    pub repo_commit: Option<String>,
    pub linked_etag: Option<String>,
    pub linked_size: Option<String>,
}

impl Linked {
    fn collect(&mut self, h: &HeaderMap) {
        let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
        self.repo_commit = self.repo_commit.take().or_else(|| get("x-repo-commit"));
        self.linked_etag = self.linked_etag.take().or_else(|| get("x-linked-etag"));
        self.linked_size = self.linked_size.take().or_else(|| get("x-linked-size"));
    }
}

/// A final (non-redirect) response.
pub(crate) struct Reply {
    /// The URL that gave this response, after redirects.
    pub url: String,
    pub status: u16,
    pub headers: HeaderMap,
    pub linked: Linked,
    pub body: Body,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The result of one attempt, for [`HubClient::with_retries`].
pub(crate) enum Outcome<T> {
    Done(T),
    /// Worth another attempt, after the wait the server asked for if any; the error is
    /// returned when attempts run out.
    Retry(Error, Option<Duration>),
    Fail(Error),
}

/// A client of one endpoint. Clones share the connection pool and the counters.
#[derive(Clone)]
pub struct HubClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub agent: ureq::Agent,
    pub opts: HubOptions,
    /// The endpoint's origin: the only one that receives the token.
    pub origin: String,
    pub counters: Counters,
}

impl HubClient {
    /// A client of `opts.endpoint`; fails on an unusable endpoint, token or user agent.
    pub fn new(opts: HubOptions) -> Result<HubClient, Error> {
        let opts = opts.checked()?;
        let origin = origin(&opts.endpoint)
            .ok_or_else(|| Error::Invalid(format!("endpoint {:?}", opts.endpoint)))?;
        let t = opts.timeouts;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(opts.user_agent.as_str())
            .accept_encoding("identity")
            .timeout_connect(Some(t.connect))
            .timeout_recv_response(Some(t.response))
            .timeout_per_read(Some(t.read))
            .build();
        Ok(HubClient {
            inner: Arc::new(Inner {
                agent: ureq::Agent::new_with_config(config),
                opts,
                origin,
                counters: Counters::default(),
            }),
        })
    }

    /// The endpoint, without a trailing slash.
    pub fn endpoint(&self) -> &str {
        &self.inner.opts.endpoint
    }

    /// What this client and its clones have done so far.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            requests: get(&c.requests),
            retries: get(&c.retries),
            resumes: get(&c.resumes),
            bytes_downloaded: get(&c.bytes),
            bytes_discarded: get(&c.discarded),
        }
    }

    /// Sends one GET to `url`, with the token when `url` is on the endpoint's origin.
    fn send(&self, url: &str, extra: &[(&str, String)]) -> Result<Response<Body>, ureq::Error> {
        Counters::add(&self.inner.counters.requests, 1);
        let mut req = self.inner.agent.get(url);
        for (k, v) in extra {
            req = req.header(*k, v.as_str());
        }
        if let Some(t) = &self.inner.opts.token {
            if origin(url).as_deref() == Some(self.inner.origin.as_str()) {
                req = req.header("authorization", format!("Bearer {t}"));
            }
        }
        req.call()
    }

    /// GET `url`, following redirects: the final response, whatever its status.
    fn follow(&self, url: &str, extra: &[(&str, String)]) -> Result<Reply, (String, ureq::Error)> {
        let (mut url, mut linked) = (url.to_string(), Linked::default());
        for _ in 0..=MAX_REDIRECTS {
            let resp = self.send(&url, extra).map_err(|e| (url.clone(), e))?;
            let status = resp.status().as_u16();
            linked.collect(resp.headers());
            let location = resp.headers().get("location").and_then(|v| v.to_str().ok());
            let next = match (status, location) {
                (301 | 302 | 303 | 307 | 308, Some(loc)) => join(&url, loc),
                _ => None,
            };
            match next {
                Some(n) => url = n,
                None => {
                    let (parts, body) = resp.into_parts();
                    return Ok(Reply {
                        url,
                        status,
                        headers: parts.headers,
                        linked,
                        body,
                    });
                }
            }
        }
        Err((url, ureq::Error::TooManyRedirects))
    }

    /// One attempt at GET `url`: a 2xx (or 416, for the caller to judge) response, a
    /// retryable failure, or a final error.
    pub(crate) fn once(&self, url: &str, extra: &[(&str, String)], t: Target) -> Outcome<Reply> {
        let reply = match self.follow(url, extra) {
            Ok(r) => r,
            Err((at, e)) => {
                let retry = transient(&e);
                let err = Error::Transport {
                    url: at,
                    attempts: 1,
                    source: Box::new(e),
                };
                return if retry {
                    Outcome::Retry(err, None)
                } else {
                    Outcome::Fail(err)
                };
            }
        };
        match reply.status {
            200..=299 | 416 => Outcome::Done(reply),
            s if retry::retryable_status(s) => {
                let asked = reply
                    .header("retry-after")
                    .and_then(|v| retry::retry_after(v, SystemTime::now()));
                Outcome::Retry(self.status_error(reply, t), asked)
            }
            _ => Outcome::Fail(self.status_error(reply, t)),
        }
    }

    /// Runs `attempt` until it is done, fails for good, or `max_retries` retries are
    /// spent, sleeping the backoff (or what the server asked for) in between.
    pub(crate) fn with_retries<T>(
        &self,
        mut attempt: impl FnMut() -> Outcome<T>,
    ) -> Result<T, Error> {
        let o = &self.inner.opts;
        let mut n = 0u32;
        loop {
            n += 1;
            match attempt() {
                Outcome::Done(v) => return Ok(v),
                Outcome::Fail(e) => return Err(with_attempts(e, n)),
                Outcome::Retry(e, _) if n > o.max_retries => return Err(with_attempts(e, n)),
                Outcome::Retry(e, asked) => {
                    let d = retry::wait(n, asked, o.base_backoff, o.max_backoff);
                    tracing::debug!(error = %e, attempt = n, wait_ms = d.as_millis() as u64, "retrying");
                    std::thread::sleep(d);
                    Counters::add(&self.inner.counters.retries, 1);
                }
            }
        }
    }

    /// GET `url` with retries: a 2xx or 416 response, or the error.
    pub(crate) fn get(
        &self,
        url: &str,
        extra: &[(&str, String)],
        t: Target,
    ) -> Result<Reply, Error> {
        self.with_retries(|| self.once(url, extra, t))
    }

    /// The typed error for an error status.
    fn status_error(&self, reply: Reply, t: Target) -> Error {
        let (status, url) = (reply.status, reply.url.clone());
        let code = reply.header("x-error-code").unwrap_or("").to_string();
        let message = error_message(reply);
        let sent =
            self.inner.opts.token.is_some() && origin(&url).as_deref() == Some(&self.inner.origin);
        let (repo, revision) = (t.repo.to_string(), t.revision.unwrap_or("").to_string());
        match (status, code.as_str()) {
            (401 | 404, "RepoNotFound") => Error::RepoNotFound {
                repo,
                message,
                hint: if sent {
                    ""
                } else {
                    " (if it is private or gated, a token may be needed: set HF_TOKEN or pass --token)"
                },
            },
            (404, "RevisionNotFound") => Error::RevisionNotFound {
                repo,
                revision,
                message,
            },
            (404, "EntryNotFound") => Error::EntryNotFound {
                repo,
                revision,
                path: t.path.unwrap_or("").to_string(),
                message,
            },
            (401, _) => Error::Unauthorized {
                url,
                message,
                hint: token_hint(sent),
            },
            (403, _) => Error::Forbidden {
                url,
                message,
                hint: token_hint(sent),
            },
            _ => Error::Status {
                url,
                status,
                attempts: 1,
                message,
            },
        }
    }
}

/// Whether a transport error may go away on its own.
fn transient(e: &ureq::Error) -> bool {
    use ureq::Error as E;
    matches!(
        e,
        E::Io(_) | E::Timeout(_) | E::HostNotFound | E::ConnectionFailed | E::Protocol(_)
    )
}

fn with_attempts(mut e: Error, n: u32) -> Error {
    if let Error::Status { attempts, .. } | Error::Transport { attempts, .. } = &mut e {
        *attempts = n;
    }
    e
}

/// The reason an error response gives: `X-Error-Message`, else the body's JSON `error`,
/// else the start of the body, printable characters only.
fn error_message(reply: Reply) -> String {
    let header = reply.header("x-error-message").map(str::to_string);
    let text = header.unwrap_or_else(|| {
        let body = reply
            .body
            .into_with_config()
            .limit(ERROR_BODY_LIMIT)
            .read_to_vec()
            .unwrap_or_default();
        let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
        match json
            .as_ref()
            .and_then(|j| j.get("error"))
            .and_then(|e| e.as_str())
        {
            Some(e) => e.to_string(),
            None => String::from_utf8_lossy(&body).into_owned(),
        }
    });
    let clean: String = text.chars().filter(|c| !c.is_control()).take(300).collect();
    if clean.trim().is_empty() {
        "(no message)".into()
    } else {
        clean.trim().to_string()
    }
}
