//! The Hub routes a client calls to look around rather than download (issue 42):
//! `model_info` at the default revision (`GET /api/models/{repo}`, also `repo_exists`,
//! `HfFileSystem`, hf-mount), `list_models` (`GET /api/models`), `list_repo_commits`
//! (`GET /api/models/{repo}/commits/{rev}`: the store's publication history), `whoami`
//! (`GET /api/whoami-v2`), and the 404 for repository types the store does not hold.
//!
//! Lists are paged as the Hub pages them: a `Link: <...>; rel="next"` header with the
//! next page's absolute URL (query parameter `p`, the page number), page sizes bounded.

use std::collections::{BTreeMap, HashSet};

use format::manifest::Order;
use format::{CommitId, RepoId};
use http::header::{self, HeaderMap, HeaderValue};
use http::StatusCode;
use repo::StoreError;
use serde_json::{json, Value};

use super::{repo_object_id, Hub, RevFacts};
use crate::auth::{bearer, default_token_name};
use crate::decode::{form_pairs, header_ascii};
use crate::reply::{bad_request, internal, Head, Reply, X_ERROR_CODE};

/// Page size of `list_models` (the default and the most `limit` gets).
const MODELS_PAGE: usize = 1000;
/// Default page size of `list_repo_commits`, and the most its `limit` gets.
const COMMITS_PAGE: usize = 50;
const COMMITS_PAGE_MAX: usize = 1000;
/// Highest page number accepted (beyond it a list is empty anyway).
const MAX_PAGE: usize = 1 << 20;

/// The Hub's timestamp format with milliseconds.
fn iso_ms(ms: u64) -> String {
    let s = repo::manifest::utc_string(ms / 1000);
    format!("{}.{:03}Z", s.trim_end_matches('Z'), ms % 1000)
}

/// What a query string asks of a list: its pairs, or the 400.
fn query_pairs(query: &str) -> Result<Vec<(String, String)>, Box<Reply>> {
    form_pairs(query.as_bytes()).map_err(|e| Box::new(bad_request(&e.to_string())))
}

/// The value of `key` in `pairs` (the last one given).
fn param<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `limit` (clamped to `1..=max`, `default` when absent) and `p` of a list's query.
fn page_params(
    pairs: &[(String, String)],
    default: usize,
    max: usize,
) -> Result<(usize, usize), Box<Reply>> {
    let num = |key: &str| -> Result<Option<usize>, Box<Reply>> {
        match param(pairs, key) {
            None => Ok(None),
            Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                Box::new(bad_request(&format!(
                    "{key}={v:?}: expected a non-negative integer"
                )))
            }),
        }
    };
    let limit = num("limit")?.unwrap_or(default).clamp(1, max);
    let page = num("p")?.unwrap_or(0);
    if page > MAX_PAGE {
        return Err(Box::new(bad_request(&format!(
            "p={page}: at most {MAX_PAGE}"
        ))));
    }
    Ok((limit, page))
}

/// Items `page * limit ..` of `items` (at most `limit`), and whether more follow.
fn page_of<T>(items: &[T], limit: usize, page: usize) -> (&[T], bool) {
    let from = page.saturating_mul(limit).min(items.len());
    let to = from.saturating_add(limit).min(items.len());
    (&items[from..to], to < items.len())
}

/// The `Link` header of the page after `page`: the same path and query with `p` replaced,
/// absolute (`http://` + `Host`, `https://` behind a proxy that says so), as the client
/// follows it without a base URL.
fn next_link(headers: &HeaderMap, path: &str, query: &str, page: usize) -> HeaderValue {
    let base = base_url(headers);
    let mut q: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.is_empty() && *kv != "p" && !kv.starts_with("p="))
        .collect();
    let p = format!("p={}", page + 1);
    q.push(&p);
    header_ascii(&format!("<{base}{path}?{}>; rel=\"next\"", q.join("&")))
}

/// The URL this endpoint is reached at, as the client sent it: `http://` + `Host`
/// (`https://` behind a proxy that says so); empty without a usable `Host`.
pub(super) fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
        });
    let scheme = match headers.get("x-forwarded-proto").map(|v| v.as_bytes()) {
        Some(b"https") => "https",
        _ => "http",
    };
    host.map_or(String::new(), |h| format!("{scheme}://{h}"))
}

/// How `list_models` orders repositories.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    Id,
    LastModified,
    CreatedAt,
    /// A count the store keeps at 0 (downloads, likes, trending): every repository ties.
    Zero,
}

impl Sort {
    fn parse(v: Option<&str>) -> Result<Sort, Box<Reply>> {
        Ok(match v {
            None | Some("id") | Some("modelId") => Sort::Id,
            Some("lastModified") | Some("last_modified") => Sort::LastModified,
            Some("createdAt") | Some("created_at") => Sort::CreatedAt,
            Some(
                "downloads" | "likes" | "trendingScore" | "trending_score" | "likes30d"
                | "downloadsAllTime",
            ) => Sort::Zero,
            Some(other) => {
                let msg = format!(
                    "Invalid sort {other:?}: one of lastModified, createdAt, id, downloads, \
                     likes, trendingScore"
                );
                return Err(Box::new(bad_request(&msg)));
            }
        })
    }
}

/// A repository as `list_models` sorts it.
struct Listed {
    repo: RepoId,
    /// Publication of its newest and oldest stored revision (ms), and the newest commit.
    newest: u64,
    oldest: u64,
    newest_commit: CommitId,
    /// The full publication order of those two revisions (time, sequence, commit): a total
    /// order even where the store's clock has whole seconds (S3) and times tie.
    newest_order: Order,
    oldest_order: Order,
}

impl Hub {
    /// The stored revisions of `repo`, newest published first (one LIST, and a manifest
    /// GET for each revision not seen before).
    pub(super) fn history(&self, repo: &RepoId) -> Result<Vec<(CommitId, RevFacts)>, Box<Reply>> {
        let prefix = format::layout::manifests_prefix(repo);
        let listed = self.store.backend().list(&prefix).map_err(internal)?;
        let mut out = Vec::with_capacity(listed.len());
        for o in listed {
            let Some(c) = o
                .key
                .strip_prefix(&prefix)
                .and_then(|h| CommitId::parse(h).ok())
            else {
                continue;
            };
            let key = (repo.clone(), c, o.tag.clone());
            let known = self.orders.get(&key);
            if let Some(f) = known.filter(|_| !o.tag.is_empty()) {
                out.push((c, f));
                continue;
            }
            let m = match self.store.manifest(repo, &c) {
                Ok(m) => m,
                // Removed since the listing.
                Err(StoreError::UnknownRevision { .. }) => continue,
                Err(e) => return Err(internal(e).into()),
            };
            let facts = RevFacts {
                order: m.order(o.modified.map(repo::clock::to_ms)),
                files: m.files.len(),
                source: m.source.clone(),
            };
            if !o.tag.is_empty() {
                self.orders.insert(key, facts.clone());
            }
            out.push((c, facts));
        }
        out.sort_by_key(|a| std::cmp::Reverse(a.1.order));
        Ok(out)
    }

    /// `GET /api/models/{org}/{name}`: the info of the default revision, `main` (pulled
    /// through in mirror mode), else the newest stored revision.
    pub(super) fn model_info(&self, org: &str, name: &str, query: &str) -> Reply {
        let missing_main = match self.locate(org, name, "main") {
            Ok(at) => return self.info_reply(&at, query),
            Err(r) => r,
        };
        let code = missing_main.headers.get(X_ERROR_CODE).map(|v| v.as_bytes());
        let falls_back = code == Some(b"RevisionNotFound".as_slice())
            || missing_main.status == StatusCode::BAD_GATEWAY;
        if !falls_back {
            return *missing_main;
        }
        let repo = match self.repo_id(org, name) {
            Ok(r) => r,
            Err(r) => return *r,
        };
        let newest = match self.history(&repo) {
            Ok(h) => h.first().map(|(c, _)| *c),
            Err(r) => return *r,
        };
        let Some(newest) = newest else {
            return *missing_main;
        };
        match self.locate(org, name, &newest.to_hex()) {
            Ok(at) => self.info_reply(&at, query),
            Err(r) => *r,
        }
    }

    /// The commit `list_models` shows for `repo`: its lock, `main`, else the newest.
    fn default_commit(&self, l: &Listed) -> Result<CommitId, Box<Reply>> {
        if let Some(c) = self.policy.lock_of(&l.repo) {
            return Ok(c);
        }
        let refs = self.store.refs(&l.repo).map_err(internal)?;
        Ok(refs.get("main").copied().unwrap_or(l.newest_commit))
    }

    /// The stored, allowed repositories matching `search` (substring of the id) and
    /// `author` (the org), both without case, each with its history's ends.
    fn listed(
        &self,
        search: Option<&str>,
        author: Option<&str>,
    ) -> Result<Vec<Listed>, Box<Reply>> {
        let search = search.map(str::to_ascii_lowercase);
        let author = author.map(str::to_ascii_lowercase);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for repo in self.store.repos().map_err(internal)? {
            let (id, folded) = (repo.to_string(), repo.folded());
            let org = folded.split('/').next().unwrap_or("");
            if !self.policy.allows(&id)
                || search.as_deref().is_some_and(|s| !folded.contains(s))
                || author.as_deref().is_some_and(|a| a != org)
                || !seen.insert(folded.clone())
            {
                continue;
            }
            let h = self.history(&repo)?;
            let (Some(first), Some(last)) = (h.first(), h.last()) else {
                continue;
            };
            out.push(Listed {
                newest: first.1.order.0,
                oldest: last.1.order.0,
                newest_commit: first.0,
                newest_order: first.1.order,
                oldest_order: last.1.order,
                repo,
            });
        }
        Ok(out)
    }

    /// `GET /api/models`: `search`, `author`, `sort`, `direction`, `limit`, `p`, `full`.
    pub(super) fn list_models(&self, req: &Head<'_>) -> Reply {
        match self.list_models_inner(req) {
            Ok(r) => r,
            Err(r) => *r,
        }
    }

    fn list_models_inner(&self, req: &Head<'_>) -> Result<Reply, Box<Reply>> {
        let q = query_pairs(req.query)?;
        let sort = Sort::parse(param(&q, "sort"))?;
        let desc = match param(&q, "direction") {
            Some(d) => d.trim() == "-1",
            None => !matches!(sort, Sort::Id),
        };
        let (limit, page) = page_params(&q, MODELS_PAGE, MODELS_PAGE)?;
        let full = param(&q, "full").is_some_and(|v| matches!(v, "true" | "True" | "1"));
        // Tag filters: the store records no tags, so none matches.
        let tagged = ["filter", "pipeline_tag", "library", "language", "tags"]
            .iter()
            .any(|k| param(&q, k).is_some_and(|v| !v.is_empty()));
        let mut rows = if tagged {
            Vec::new()
        } else {
            self.listed(param(&q, "search"), param(&q, "author"))?
        };
        rows.sort_by(|a, b| {
            let key = match sort {
                Sort::LastModified => a.newest_order.cmp(&b.newest_order),
                Sort::CreatedAt => a.oldest_order.cmp(&b.oldest_order),
                Sort::Id | Sort::Zero => std::cmp::Ordering::Equal,
            };
            let key = if desc { key.reverse() } else { key };
            let by_id = a.repo.folded().cmp(&b.repo.folded());
            let by_id = if desc && sort == Sort::Id {
                by_id.reverse()
            } else {
                by_id
            };
            key.then(by_id)
        });
        let (shown, more) = page_of(&rows, limit, page);
        let mut items = Vec::with_capacity(shown.len());
        for l in shown {
            items.push(self.listed_item(l, full)?);
        }
        let mut r = Reply::json(StatusCode::OK, &Value::Array(items));
        if more {
            let link = next_link(req.headers, "/api/models", req.query, page);
            r.headers.insert(header::LINK, link);
        }
        Ok(r)
    }

    /// One `list_models` entry (with its files' names when `full`).
    fn listed_item(&self, l: &Listed, full: bool) -> Result<Value, Box<Reply>> {
        let sha = self.default_commit(l)?;
        let id = l.repo.to_string();
        let mut v = json!({
            "_id": repo_object_id(&l.repo), "id": id, "modelId": id, "sha": sha.to_hex(),
            "lastModified": iso_ms(l.newest), "createdAt": iso_ms(l.oldest),
            "private": false, "gated": false, "disabled": false,
            "downloads": 0, "likes": 0, "tags": [],
        });
        if full {
            let siblings: Vec<Value> = match self.store.manifest(&l.repo, &sha) {
                Ok(m) => m
                    .files
                    .iter()
                    .map(|f| json!({ "rfilename": f.path }))
                    .collect(),
                // A lock on a commit not stored: no files to show.
                Err(StoreError::UnknownRevision { .. }) => Vec::new(),
                Err(e) => return Err(internal(e).into()),
            };
            v["siblings"] = Value::Array(siblings);
        }
        Ok(v)
    }

    /// `GET /api/models/{org}/{name}/commits/{rev}`: the stored revisions from the one
    /// `rev` names back, newest published first (a locked repository: its lock alone).
    pub(super) fn commits(&self, req: &Head<'_>, org: &str, name: &str, rev: &str) -> Reply {
        self.commits_inner(req, org, name, rev)
            .unwrap_or_else(|r| *r)
    }

    fn commits_inner(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
        rev: &str,
    ) -> Result<Reply, Box<Reply>> {
        let q = query_pairs(req.query)?;
        let (limit, page) = page_params(&q, COMMITS_PAGE, COMMITS_PAGE_MAX)?;
        let at = self.locate(org, name, rev)?;
        let history = self.history(&at.repo)?;
        let start = history.iter().position(|(c, _)| *c == at.commit);
        let mut from: Vec<(CommitId, RevFacts)> = match start {
            Some(i) => history[i..].to_vec(),
            None => vec![(
                at.commit,
                RevFacts {
                    order: at.manifest.order(None),
                    files: at.manifest.files.len(),
                    source: at.manifest.source.clone(),
                },
            )],
        };
        if self.policy.lock_of(&at.repo).is_some() {
            from.truncate(1);
        }
        let mut refs: BTreeMap<CommitId, Vec<String>> = BTreeMap::new();
        for (n, c) in self.store.refs(&at.repo).map_err(internal)? {
            refs.entry(c).or_default().push(n);
        }
        let (shown, more) = page_of(&from, limit, page);
        let items: Vec<Value> = shown
            .iter()
            .map(|(c, f)| commit_item(c, f, refs.get(c)))
            .collect();
        let mut r = Reply::json(StatusCode::OK, &Value::Array(items));
        if more {
            r.headers.insert(
                header::LINK,
                next_link(req.headers, req.path, req.query, page),
            );
        }
        Ok(r)
    }

    /// `GET /api/whoami-v2`: the token's name from the token file (routing has checked the
    /// token); without tokens, a 401 saying every request is anonymous.
    pub(super) fn whoami(&self, headers: &HeaderMap) -> Reply {
        if self.tokens.is_none() {
            let msg = "This server has no tokens configured (serve --token-file): every \
                       request is anonymous, there is no user to name";
            return Reply::error(StatusCode::UNAUTHORIZED, "", msg, None);
        }
        let token = bearer(headers).unwrap_or("");
        let name = self
            .token_names
            .get(token)
            .cloned()
            .unwrap_or_else(|| default_token_name(token));
        let id = blake3::hash(token.as_bytes()).to_hex()[..24].to_string();
        let role = if self.write_scopes.contains_key(token) {
            "write"
        } else {
            "read"
        };
        Reply::json(
            StatusCode::OK,
            &json!({
                "type": "user", "id": id, "name": name, "fullname": name,
                "isPro": false, "canPay": false, "orgs": [],
                "auth": { "type": "access_token",
                          "accessToken": { "displayName": name, "role": role } },
            }),
        )
    }
}

/// A stored revision as a commit of `list_repo_commits`.
fn commit_item(c: &CommitId, f: &RevFacts, refs: Option<&Vec<String>>) -> Value {
    let title = format!("Stored {} files ({})", f.files, f.source);
    let message = match refs {
        Some(r) if !r.is_empty() => format!("Refs: {}", r.join(", ")),
        _ => String::new(),
    };
    json!({
        "id": c.to_hex(), "title": title, "message": message,
        "authors": [{ "user": "modelcas", "avatar": null }],
        "date": iso_ms(f.order.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_links() {
        let items: Vec<u32> = (0..5).collect();
        assert_eq!(page_of(&items, 2, 0), (&items[0..2], true));
        assert_eq!(page_of(&items, 2, 2), (&items[4..5], false));
        assert_eq!(page_of(&items, 2, usize::MAX), (&items[5..5], false));
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("hub:8080"));
        let l = next_link(&h, "/api/models", "search=a&p=1&limit=2", 1);
        assert_eq!(
            l.to_str().unwrap(),
            "<http://hub:8080/api/models?search=a&limit=2&p=2>; rel=\"next\""
        );
        assert_eq!(iso_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
