//! The HTTP layer: one [`HubClient`] (cheap to clone, shared by threads) sends GETs with
//! the token, follows redirects itself, retries what is worth retrying, turns error
//! statuses into typed [`Error`]s and counts what it did ([`Stats`]).
//!
//! Redirects are followed here rather than by `ureq` so that the rules are ours and
//! visible: `Authorization` goes to the endpoint's origin (scheme, host, port, compared
//! by the `url` crate) and nowhere else, whichever hop or `Link` leads elsewhere (the Hub
//! redirects file downloads to a CDN that must never see the token); and a redirect is
//! followed only to the endpoint's origin or to a configured redirect host
//! ([`HubOptions::redirect_hosts`]): bytes are taken from nowhere else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use ureq::http::{HeaderMap, Response};
use ureq::Body;

use crate::error::{token_hint, Error};
use crate::options::HubOptions;
use crate::retry;
use crate::url::{join, parse_http, same_origin, OriginRule, Url};

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
    /// The endpoint: its origin is the only one that receives the token.
    pub endpoint: Url,
    /// Other origins a redirect or `Link` may lead to.
    pub redirect_rules: Vec<OriginRule>,
    pub counters: Counters,
}

impl HubClient {
    /// A client of `opts.endpoint`; fails on an unusable endpoint, token or user agent.
    pub fn new(opts: HubOptions) -> Result<HubClient, Error> {
        let opts = opts.checked()?;
        let endpoint = parse_http(&opts.endpoint).map_err(Error::Invalid)?;
        let redirect_rules = opts.redirect_rules()?;
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
                endpoint,
                redirect_rules,
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

    /// Whether `url` is on the endpoint's origin (the only one that gets the token).
    pub(crate) fn is_endpoint_origin(&self, url: &Url) -> bool {
        same_origin(url, &self.inner.endpoint)
    }

    /// Why the client will not go to `url` (a redirect or `Link` target), if it will not:
    /// it is on neither the endpoint's origin nor a configured redirect host.
    pub(crate) fn refuses(&self, url: &Url) -> Option<String> {
        if self.is_endpoint_origin(url) || self.inner.redirect_rules.iter().any(|r| r.admits(url)) {
            return None;
        }
        let allowed: Vec<String> = self
            .inner
            .redirect_rules
            .iter()
            .map(ToString::to_string)
            .collect();
        Some(format!(
            "{} is not the endpoint's origin {} nor a configured redirect host ({})",
            url.origin().ascii_serialization(),
            self.inner.endpoint.origin().ascii_serialization(),
            if allowed.is_empty() {
                "none configured".to_string()
            } else {
                allowed.join(", ")
            }
        ))
    }

    /// Sends one GET to `url`, with the token when `url` is on the endpoint's origin,
    /// to be over (body included) by `deadline`.
    fn send(
        &self,
        url: &Url,
        extra: &[(&str, String)],
        deadline: Option<Instant>,
    ) -> Result<Response<Body>, ureq::Error> {
        Counters::add(&self.inner.counters.requests, 1);
        let mut req = self.inner.agent.get(url.as_str());
        for (k, v) in extra {
            req = req.header(*k, v.as_str());
        }
        if let Some(t) = &self.inner.opts.token {
            if self.is_endpoint_origin(url) {
                req = req.header("authorization", format!("Bearer {t}"));
            }
        }
        match deadline {
            None => req.call(),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                let left = left.max(Duration::from_millis(1));
                req.config().timeout_global(Some(left)).build().call()
            }
        }
    }

    /// GET `url`, following redirects (to allowed origins only): the final response,
    /// whatever its status. `total`: the deadline of the whole request, hops and body.
    fn follow(
        &self,
        url: &str,
        extra: &[(&str, String)],
        total: Option<Duration>,
    ) -> Result<Reply, Error> {
        let deadline = total.map(|t| Instant::now() + t);
        let mut url = parse_http(url).map_err(Error::Invalid)?;
        let mut linked = Linked::default();
        let mut hops = 0;
        loop {
            let resp = self
                .send(&url, extra, deadline)
                .map_err(|e| Error::Transport {
                    url: url.to_string(),
                    attempts: 1,
                    source: Box::new(e),
                })?;
            let status = resp.status().as_u16();
            linked.collect(resp.headers());
            let location = match status {
                301 | 302 | 303 | 307 | 308 => resp.headers().get("location"),
                _ => None,
            };
            let Some(location) = location else {
                let (parts, body) = resp.into_parts();
                return Ok(Reply {
                    url: url.to_string(),
                    status,
                    headers: parts.headers,
                    linked,
                    body,
                });
            };
            let to = String::from_utf8_lossy(location.as_bytes()).into_owned();
            let refused = |reason: String| Error::Redirect {
                from: url.to_string(),
                to: to.chars().take(200).collect(),
                reason,
            };
            if hops == MAX_REDIRECTS {
                return Err(refused(format!("more than {MAX_REDIRECTS} redirects")));
            }
            hops += 1;
            let next = join(&url, &to).map_err(refused)?;
            if let Some(why) = self.refuses(&next) {
                return Err(refused(why));
            }
            url = next;
        }
    }

    /// One attempt at GET `url`: a 2xx (or 416, for the caller to judge) response, a
    /// retryable failure, or a final error. `total`: the attempt's deadline, body
    /// included (metadata requests; downloads have their own, see `Download`).
    pub(crate) fn once(
        &self,
        url: &str,
        extra: &[(&str, String)],
        t: Target<'_>,
        total: Option<Duration>,
    ) -> Outcome<Reply> {
        let reply = match self.follow(url, extra, total) {
            Ok(r) => r,
            Err(e) => {
                let retry = matches!(&e, Error::Transport { source, .. } if transient(source));
                return if retry {
                    Outcome::Retry(e, None)
                } else {
                    Outcome::Fail(e)
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
        t: Target<'_>,
    ) -> Result<Reply, Error> {
        self.with_retries(|| self.once(url, extra, t, None))
    }

    /// The typed error for an error status.
    fn status_error(&self, reply: Reply, t: Target<'_>) -> Error {
        let (status, url) = (reply.status, reply.url.clone());
        let code = reply.header("x-error-code").unwrap_or("").to_string();
        let message = error_message(reply);
        let sent = self.inner.opts.token.is_some()
            && parse_http(&url).is_ok_and(|u| self.is_endpoint_origin(&u));
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
