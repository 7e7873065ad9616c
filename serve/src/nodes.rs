//! The store API (`/api/modelcas/v1/...`, docs/format/hub-protocol.md): what nodes read a
//! store through when their `--store` is this hub, so that they hold no bucket credentials
//! and the bucket sends one copy however many nodes start a revision.
//!
//! Pack bytes go out in 1 MiB blocks named by pack id and block number, every other object
//! by (key, tag): both immutable, sent with `Cache-Control: public, max-age=31536000,
//! immutable`, so that any HTTP cache between nodes and hub works unchanged. Blocks are
//! assembled from frames checked here and kept in the hub's chunk cache ([`blocks`]).
//! Stats and listings are `no-store`, kept one second so that a fleet's refreshes cost the
//! bucket one request a second. Only tokens of `--node-token-file` are accepted; the
//! allow list hides names (refs, manifests, listings), not bytes (packs are shared between
//! repositories: docs/design/fleet-hub.md §3.3).

mod blocks;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use std::time::{Duration, Instant};

use format::layout;
use http::header::{self, HeaderValue};
use http::{Method, StatusCode};
use objects::hub_wire::{self, ListPage, StoreInfo, WireMeta, LIST_PAGE};
use objects::ObjectMeta;
use quick_cache::sync::Cache;
use repo::Store;
use serde_json::json;

use crate::body::Body;
use crate::reply::{Head, Reply};
use crate::upstream::Policy;

pub use blocks::Blocks;

/// How long a stat or a listing is kept (a replaced manifest is seen at most this late).
const FRESH_FOR: Duration = Duration::from_secs(1);
/// Stats kept at most.
const STAT_CACHE: usize = 65_536;
/// Bytes of listings kept (each a prefix: a repository's refs, manifests, ...).
const LIST_BUDGET: u64 = 128 << 20;
/// Bytes of small objects (manifests, refs, records) kept.
const OBJECT_BUDGET: u64 = 64 << 20;

/// `Cache-Control` of what never changes under its URL.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Who may read the store API.
#[derive(Clone, Debug, Default)]
pub struct NodeAccess {
    /// Tokens of `--node-token-file`; `None`: the store API is off (unless `open`).
    pub tokens: Option<HashSet<String>>,
    /// `--node-api-open`: no token asked (a closed network, a test).
    pub open: bool,
}

/// The store API's state.
pub struct Nodes {
    store: Store,
    access: NodeAccess,
    policy: Policy,
    store_id: String,
    stats: Cache<String, (Instant, ObjectMeta)>,
    lists: Cache<String, (Instant, Arc<Vec<ObjectMeta>>), ListWeight>,
    objects: Cache<String, (String, Bytes), ObjectWeight>,
    blocks: Blocks,
}

#[derive(Clone)]
struct ListWeight;

impl quick_cache::Weighter<String, (Instant, Arc<Vec<ObjectMeta>>)> for ListWeight {
    fn weight(&self, k: &String, v: &(Instant, Arc<Vec<ObjectMeta>>)) -> u64 {
        let each: usize = v.1.iter().map(|m| m.key.len() + m.tag.len() + 64).sum();
        (k.len() + each + 64) as u64
    }
}

#[derive(Clone)]
struct ObjectWeight;

impl quick_cache::Weighter<String, (String, Bytes)> for ObjectWeight {
    fn weight(&self, k: &String, v: &(String, Bytes)) -> u64 {
        (k.len() + v.0.len() + v.1.len() + 64) as u64
    }
}

impl Nodes {
    /// The store API over `store`, for `access`, hiding what `policy` does not allow.
    pub fn new(store: Store, access: NodeAccess, policy: Policy) -> Nodes {
        let store_id = hex::encode(store.config().store_id);
        Nodes {
            blocks: Blocks::new(store.clone()),
            store,
            access,
            policy,
            store_id,
            stats: Cache::new(STAT_CACHE),
            lists: Cache::with_weighter(1024, LIST_BUDGET, ListWeight),
            objects: Cache::with_weighter(4096, OBJECT_BUDGET, ObjectWeight),
        }
    }

    /// Applies `policy` from now on.
    pub(crate) fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    /// Whether `token` is a node token (node tokens also read the Hub API).
    pub fn knows(&self, token: &str) -> bool {
        self.access
            .tokens
            .as_ref()
            .is_some_and(|t| t.contains(token))
    }

    /// The reply to a request whose path starts `/api/modelcas/v1/`; `rest` are the
    /// decoded segments after it. Returns the endpoint's name for the metrics too.
    pub fn route(&self, req: &Head<'_>, rest: &[&str]) -> (&'static str, Reply) {
        if let Some(r) = self.refused(req) {
            return ("store-auth", r);
        }
        let get = *req.method == Method::GET;
        let post = *req.method == Method::POST;
        if let Some(r) = odd_query(rest, req.query) {
            return ("store-other", self.stamped(r));
        }
        let (endpoint, r) = match rest {
            ["store"] if get => ("store-info", self.info()),
            ["auth"] if get => ("store-auth", Reply::no_content()),
            ["stat", key @ ..] if get => ("store-stat", self.with_key(key, |k| self.stat(k))),
            ["objects", key @ ..] if get => (
                "store-object",
                self.with_key(key, |k| self.object(k, req.query)),
            ),
            ["list"] if get => ("store-list", self.list(req.query)),
            ["packs", dir, hex, n] if get => {
                let path = format!("packs/{dir}/{hex}/{n}");
                ("store-block", self.block(&path, req))
            }
            ["used", org, name, commit] if post => ("store-used", self.used(org, name, commit)),
            _ => (
                "store-other",
                error(StatusCode::NOT_FOUND, "NoRoute", "no such store API route"),
            ),
        };
        (endpoint, self.stamped(r))
    }

    /// Every answer names the store; errors are never kept by a cache.
    fn stamped(&self, mut r: Reply) -> Reply {
        if let Ok(v) = HeaderValue::from_str(&self.store_id) {
            r.headers.insert(hub_wire::HEADER_STORE, v);
        }
        if !r.headers.contains_key(header::CACHE_CONTROL) {
            r.headers
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        }
        r
    }

    /// `None` when the request may read; else the refusal.
    fn refused(&self, req: &Head<'_>) -> Option<Reply> {
        if self.access.open {
            return None;
        }
        let Some(tokens) = &self.access.tokens else {
            let msg = "the store API is off: start the hub with --node-token-file";
            return Some(self.stamped(error(StatusCode::FORBIDDEN, "StoreApiOff", msg)));
        };
        match crate::auth::bearer(req.headers) {
            Some(t) if tokens.contains(t) => None,
            Some(_) => Some(self.stamped(error(
                StatusCode::FORBIDDEN,
                "NotANodeToken",
                "this token is not a node token (--node-token-file)",
            ))),
            None => Some(self.stamped(error(
                StatusCode::UNAUTHORIZED,
                "",
                "send Authorization: Bearer <node token>",
            ))),
        }
    }

    fn info(&self) -> Reply {
        let info = StoreInfo {
            version: hub_wire::VERSION,
            store_id: self.store_id.clone(),
            block_len: hub_wire::BLOCK_LEN,
        };
        Reply::json(StatusCode::OK, &json!(info))
    }

    /// Checks a key spelled as path segments (one spelling per key: no segment holds a
    /// `/`), that the store API serves it and that the policy shows its repository.
    fn with_key(&self, segs: &[&str], f: impl FnOnce(&str) -> Reply) -> Reply {
        if segs.iter().any(|s| s.contains('/')) {
            return error(StatusCode::BAD_REQUEST, "BadKey", "a key segment holds '/'");
        }
        let key = segs.join("/");
        if objects::check_key(&key).is_err() {
            return error(
                StatusCode::BAD_REQUEST,
                "BadKey",
                &format!("invalid key {key:?}"),
            );
        }
        if !hub_wire::served_key(&key) {
            let msg = format!("{key}: not served to nodes (only writers read it)");
            return error(StatusCode::FORBIDDEN, "NotServed", &msg);
        }
        if let Some(r) = self.hidden(&key) {
            return r;
        }
        f(&key)
    }

    /// The refusal of a key under `repos/` whose repository the allow list does not show.
    fn hidden(&self, key: &str) -> Option<Reply> {
        if !key.starts_with(layout::REPOS_PREFIX) {
            return None;
        }
        match layout::repo_of_key(key) {
            Some(r) if self.policy.allows(&r.to_string()) => None,
            Some(r) => Some(error(
                StatusCode::FORBIDDEN,
                "RepoNotAllowed",
                &format!("Repository {r} is not served here (not in the allow list)"),
            )),
            None => Some(error(StatusCode::NOT_FOUND, "NotFound", "no such object")),
        }
    }

    /// The object's metadata, kept [`FRESH_FOR`] (absent is never kept: a manifest written
    /// just before the ref naming it must not look absent to the node following the ref).
    fn meta(&self, key: &str) -> Result<Option<ObjectMeta>, objects::ObjectError> {
        if let Some((at, m)) = self.stats.get(key) {
            if at.elapsed() < FRESH_FOR {
                return Ok(Some(m));
            }
        }
        let m = self.store.backend().stat(key)?;
        if let Some(m) = &m {
            self.stats
                .insert(key.to_string(), (Instant::now(), m.clone()));
        }
        Ok(m)
    }

    fn stat(&self, key: &str) -> Reply {
        let m = match self.meta(key) {
            Ok(Some(m)) => m,
            Ok(None) => return not_found(key),
            Err(e) => return backend_error(key, &e),
        };
        let Some(shown) = self.shown(&m) else {
            return not_found(key);
        };
        let pack = layout::parse_pack_key(key).is_some();
        let r = Reply::json(StatusCode::OK, &json!(shown));
        if pack {
            // A pack's size never changes while it exists.
            return r.header(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
        }
        r
    }

    /// The object's bytes, only while its tag is the one asked for.
    fn object(&self, key: &str, query: &str) -> Reply {
        if layout::parse_pack_key(key).is_some() {
            let msg = "read packs by block: /packs/<2 hex>/<64 hex>/<n>";
            return error(StatusCode::BAD_REQUEST, "ReadPacksByBlock", msg);
        }
        // The tag as sent, not decoded: a cache keys by the raw value (`$arg_tag`).
        let raw_tag = query.split('&').find_map(|kv| kv.strip_prefix("tag="));
        let Some(tag) = raw_tag
            .filter(|t| hub_wire::is_hub_tag(t))
            .map(str::to_string)
        else {
            return error(
                StatusCode::BAD_REQUEST,
                "NoTag",
                "ask for an object by ?tag=",
            );
        };
        let fresh = query_value(query, "fresh").is_some();
        if fresh {
            self.objects.remove(key);
            self.stats.remove(key);
        }
        let bytes = match locked_view(&self.policy, key) {
            Locked::Hidden => return not_found(key),
            Locked::Ref(b) if lock_tag(&b) == tag => Bytes::from(b),
            Locked::Ref(_) => return tag_changed(key),
            Locked::Shown => match self.stored_object(key, &tag) {
                Ok(b) => b,
                Err(r) => return *r,
            },
        };
        self.object_reply(&tag, bytes)
    }

    /// The bytes of `key` while its tag is `tag`: kept, or read from the bucket.
    fn stored_object(&self, key: &str, tag: &str) -> Result<Bytes, Box<Reply>> {
        Ok(match self.objects.get(key) {
            Some((t, b)) if t == tag && self.tag_now(key).as_deref() == Some(tag) => b,
            _ => match self.read_object(key, tag) {
                Ok(Some(b)) => b,
                Ok(None) => return Err(Box::new(tag_changed(key))),
                Err(e) if e.is_not_found() => return Err(Box::new(not_found(key))),
                Err(e) => return Err(Box::new(backend_error(key, &e))),
            },
        })
    }

    /// An object's bytes as the store API sends them: immutable under (key, tag).
    fn object_reply(&self, tag: &str, bytes: Bytes) -> Reply {
        let etag = format!("\"{tag}\"");
        crate::metrics::METRICS.store_sent(bytes.len() as u64);
        let mut r = Reply::json(StatusCode::OK, &serde_json::Value::Null);
        r.body = Body::full(bytes);
        r.header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )
        .header(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE))
        .header(header::ETAG, crate::decode::header_ascii(&etag))
    }

    /// The hub tag of `key` now (kept [`FRESH_FOR`]).
    fn tag_now(&self, key: &str) -> Option<String> {
        self.meta(key)
            .ok()
            .flatten()
            .map(|m| hub_wire::hub_tag(&m.tag))
    }

    /// Reads `key` from the bucket; kept and answered when a stat after the read still
    /// shows `tag` (`None`: the object has another tag now).
    fn read_object(&self, key: &str, tag: &str) -> Result<Option<Bytes>, objects::ObjectError> {
        let bytes = Bytes::from(self.store.backend().get(key)?);
        self.stats.remove(key);
        let now = self.store.backend().stat(key)?;
        let Some(now) = now.filter(|m| hub_wire::hub_tag(&m.tag) == tag) else {
            return Ok(None);
        };
        if now.size != bytes.len() as u64 {
            return Ok(None);
        }
        self.stats.insert(key.to_string(), (Instant::now(), now));
        self.objects
            .insert(key.to_string(), (tag.to_string(), bytes.clone()));
        Ok(Some(bytes))
    }

    fn list(&self, query: &str) -> Reply {
        let prefix = query_value(query, "prefix").unwrap_or_default();
        let after = query_value(query, "after");
        // One spelling per prefix, inside the store: no `.`, `..` or empty segment (a
        // directory store would list outside itself, and each spelling be kept apart).
        let bad_after = after
            .as_deref()
            .is_some_and(|a| objects::check_key(a).is_err());
        if objects::check_prefix(&prefix).is_err() || bad_after {
            let msg = format!("invalid listing prefix {prefix:?} or after {after:?}");
            return error(StatusCode::BAD_REQUEST, "BadKey", &msg);
        }
        if !prefix.is_empty() && !hub_wire::served_key(&prefix) && !served_prefix(&prefix) {
            let msg = format!("{prefix}: not listed to nodes");
            return error(StatusCode::FORBIDDEN, "NotServed", &msg);
        }
        if prefix.starts_with(layout::REPOS_PREFIX) && prefix.matches('/').count() > 2 {
            if let Some(r) = self.hidden(&format!("{prefix}x")) {
                return r;
            }
        }
        let all = match self.listing(&prefix) {
            Ok(l) => l,
            Err(e) => return backend_error(&prefix, &e),
        };
        let start = match &after {
            Some(a) => all.partition_point(|m| m.key.as_str() <= a.as_str()),
            None => 0,
        };
        let mut objects = Vec::new();
        for m in all[start..].iter().filter(|m| self.listed(&m.key)) {
            if objects.len() == LIST_PAGE {
                break;
            }
            objects.extend(self.shown(m));
        }
        let next = (objects.len() == LIST_PAGE)
            .then(|| objects.last().map(|m| m.key.clone()))
            .flatten();
        Reply::json(StatusCode::OK, &json!(ListPage { objects, next }))
    }

    /// How an object is shown to nodes: as stored, as a locked repository's refs and
    /// manifests look (`[serve.locks]`), or not at all.
    fn shown(&self, m: &ObjectMeta) -> Option<WireMeta> {
        let mut w = wire(m);
        match locked_view(&self.policy, &m.key) {
            Locked::Shown => {}
            Locked::Hidden => return None,
            Locked::Ref(b) => (w.size, w.tag) = (b.len() as u64, lock_tag(&b)),
        }
        Some(w)
    }

    /// Whether a listed key is shown to nodes.
    fn listed(&self, key: &str) -> bool {
        hub_wire::served_key(key) && self.hidden(key).is_none()
    }

    /// The bucket's listing of `prefix`, kept [`FRESH_FOR`].
    fn listing(&self, prefix: &str) -> Result<Arc<Vec<ObjectMeta>>, objects::ObjectError> {
        if let Some((at, l)) = self.lists.get(prefix) {
            if at.elapsed() < FRESH_FOR {
                return Ok(l);
            }
        }
        let l = Arc::new(self.store.backend().list(prefix)?);
        self.lists
            .insert(prefix.to_string(), (Instant::now(), l.clone()));
        Ok(l)
    }

    fn block(&self, path: &str, req: &Head<'_>) -> Reply {
        let (id, n) = match hub_wire::parse_block_path(path) {
            Ok(b) => b,
            Err(e) => return error(StatusCode::BAD_REQUEST, "BadBlock", &e.to_string()),
        };
        let fresh = query_value(req.query, "fresh").is_some()
            || req.headers.contains_key(hub_wire::HEADER_FRESH);
        match self.blocks.block(&id, n, fresh) {
            Ok(bytes) => {
                let bytes = flipped_for_a_test(bytes);
                crate::metrics::METRICS.store_sent(bytes.len() as u64);
                let etag = format!("\"b-{}-{n}\"", id.to_hex());
                let mut r = Reply::json(StatusCode::OK, &serde_json::Value::Null);
                r.body = Body::full(bytes);
                r.header(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                )
                .header(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE))
                .header(header::ETAG, crate::decode::header_ascii(&etag))
            }
            Err(blocks::BlockError::PastEnd(size)) => error(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "PastEnd",
                "block past the pack's end",
            )
            .header(
                http::HeaderName::from_static("modelcas-pack-size"),
                crate::decode::header_ascii(&size.to_string()),
            ),
            Err(blocks::BlockError::Gone) => error(
                StatusCode::NOT_FOUND,
                "PackNotFound",
                &format!("{path}: no such pack"),
            ),
            Err(blocks::BlockError::Bad(why)) => {
                tracing::error!("pack block {path}: {why}");
                error(StatusCode::BAD_GATEWAY, "BadPack", &why)
            }
            Err(blocks::BlockError::Store(why)) => {
                tracing::warn!("pack block {path}: {why}");
                error(StatusCode::SERVICE_UNAVAILABLE, "StoreUnavailable", &why)
            }
        }
    }

    /// A node used a revision: the hub records it for gc's `--unused-for` (one write per
    /// revision a while, however many nodes).
    fn used(&self, org: &str, name: &str, commit: &str) -> Reply {
        let key = format!("repos/{org}/{name}/used/{commit}");
        let Some((repo, commit)) = layout::parse_used_key(&key) else {
            return error(
                StatusCode::BAD_REQUEST,
                "BadKey",
                &format!("invalid key {key:?}"),
            );
        };
        if let Some(r) = self.hidden(&key) {
            return r;
        }
        // Only a stored revision is recorded (one a lock hides is not there for nodes):
        // nodes cannot make records of their own.
        let manifest = layout::manifest_key(&repo, &commit);
        if let Locked::Hidden = locked_view(&self.policy, &manifest) {
            return not_found(&manifest);
        }
        match self.meta(&manifest) {
            Ok(Some(_)) => {}
            Ok(None) => return not_found(&layout::manifest_key(&repo, &commit)),
            Err(e) => return backend_error(&key, &e),
        }
        repo::usage::record_in_background(&self.store, &repo, &commit, "node", Duration::ZERO);
        Reply::no_content()
    }
}

/// The refusal of a query a route does not take: a parameter it does not know (in any
/// case: a cache may match `Tag` as `tag`), or one given twice. So a cache in front, which
/// keys an object by its path and `tag`, can never store one answer under another tag's
/// key (docs/format/hub-protocol.md, "Design rule").
fn odd_query(route: &[&str], query: &str) -> Option<Reply> {
    let allowed: &[&str] = match route.first().copied() {
        Some("stat") | Some("packs") => &["fresh"],
        Some("objects") => &["tag", "fresh"],
        Some("list") => &["prefix", "after"],
        _ => &[],
    };
    let pairs = match crate::decode::form_pairs(query.as_bytes()) {
        Ok(p) => p,
        Err(e) => return Some(error(StatusCode::BAD_REQUEST, "BadQuery", &e.to_string())),
    };
    let mut seen: Vec<&str> = Vec::new();
    for (name, _) in &pairs {
        if !allowed.contains(&name.as_str()) || seen.contains(&name.as_str()) {
            let msg = format!("query parameter {name:?} unknown or repeated on this route");
            return Some(error(StatusCode::BAD_REQUEST, "BadQuery", &msg));
        }
        seen.push(name);
    }
    None
}

/// What a key of a repository `[serve.locks]` holds at one commit is to nodes.
enum Locked {
    /// As stored (not a ref or manifest of a locked repository, or its locked manifest).
    Shown,
    /// Another commit's manifest, check record or label: absent.
    Hidden,
    /// A ref: every one names the locked commit (these bytes, a ref object).
    Ref(Vec<u8>),
}

/// A locked repository shows nodes what the Hub API shows clients: every ref resolves to
/// the locked commit, and no other commit is there.
fn locked_view(policy: &Policy, key: &str) -> Locked {
    let Some(repo) = layout::repo_of_key(key) else {
        return Locked::Shown;
    };
    let Some(commit) = policy.lock_of(&repo) else {
        return Locked::Shown;
    };
    if key.starts_with(&layout::refs_prefix(&repo)) {
        let r = format::manifest::RefObject {
            commit,
            updated_at: 0,
        };
        return Locked::Ref(format::codec::encode(format::codec::Kind::Ref, &r, false));
    }
    let hex = commit.to_hex();
    // Another commit's manifest, release check record (`checks/<c>`) or labels
    // (`labels/<c>/<key>`): not there.
    let other = |prefix: String, rest: fn(&str, &str) -> bool| {
        key.strip_prefix(&prefix).is_some_and(|r| !rest(r, &hex))
    };
    if other(layout::manifests_prefix(&repo), |r, hex| r == hex)
        || other(layout::checks_prefix(&repo), |r, hex| r == hex)
        || other(layout::labels_prefix(&repo), |r, hex| {
            r.strip_prefix(hex).is_some_and(|k| k.starts_with('/'))
        })
    {
        return Locked::Hidden;
    }
    Locked::Shown
}

/// The tag of a locked repository's ref: of its bytes, the same on every replica.
fn lock_tag(bytes: &[u8]) -> String {
    hub_wire::hub_tag(&format!("lock:{}", blake3::hash(bytes).to_hex()))
}

/// A hub that answers wrong bytes, for the tests (`MODELCAS_TEST_HUB_FLIP_BLOCKS=1`: one
/// byte of every block flipped; never in a release build).
fn flipped_for_a_test(bytes: Bytes) -> Bytes {
    if repo::failpoint::test_var("MODELCAS_TEST_HUB_FLIP_BLOCKS").is_none() || bytes.is_empty() {
        return bytes;
    }
    let mut b = bytes.to_vec();
    let mid = b.len() / 2;
    b[mid] ^= 0x20;
    Bytes::from(b)
}

/// Prefixes above served keys that a node may list (`repos/` as a whole, `packs/`).
fn served_prefix(prefix: &str) -> bool {
    ["packs/", "moved/", "repos/"]
        .iter()
        .any(|p| p.starts_with(prefix))
}

fn wire(m: &ObjectMeta) -> WireMeta {
    WireMeta {
        key: m.key.clone(),
        size: m.size,
        tag: hub_wire::hub_tag(&m.tag),
        modified_ms: m.modified.and_then(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_millis() as u64)
        }),
    }
}

/// The decoded value of `name` in a query string ([`crate::decode::form_pairs`]; a query
/// that does not decode has none: `odd_query` refuses it first).
fn query_value(query: &str, name: &str) -> Option<String> {
    let pairs = crate::decode::form_pairs(query.as_bytes()).ok()?;
    pairs.into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn error(status: StatusCode, code: &'static str, msg: &str) -> Reply {
    Reply::error(status, code, msg, None)
}

fn not_found(key: &str) -> Reply {
    error(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("no such object: {key}"),
    )
}

fn tag_changed(key: &str) -> Reply {
    let msg = format!("{key} was replaced: stat it again");
    error(StatusCode::PRECONDITION_FAILED, "TagChanged", &msg)
}

fn backend_error(key: &str, e: &objects::ObjectError) -> Reply {
    tracing::warn!("store API: {key}: {e}");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "StoreUnavailable",
        &e.to_string(),
    )
}

#[cfg(test)]
mod tests;
