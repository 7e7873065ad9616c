//! The Hub API over a store: routing and the mapping of store answers to HTTP replies.
//! [`Hub::route`] is synchronous (it runs on the blocking pool) and total: any method, path,
//! query and headers give a reply. It owns the manifest and blob-id caches; file bytes
//! come from [`crate::body`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use quick_cache::sync::Cache;

use bytes::Bytes;
use format::manifest::Order;
use format::{CommitId, RepoId, Sha256, XetHash};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use read::cache::ChunkCache;
use read::readahead::ReadaheadConfig;
use repo::manifest::{FileEntry, Manifest};
use repo::{Store, StoreError};
use serde_json::{json, Value};

use crate::body::Body;
use crate::decode;
use crate::etag;
use crate::metrics::{Metrics, METRICS};
use crate::reply::{internal, not_found, repo_missing};
use crate::upstream::{Mirror, Policy, UpstreamError, UpstreamOptions};
use read::source::{FileSource, ReadPlan, Reload};

pub use crate::reply::{Head, Reply};

/// Manifests kept in memory (each is small next to the files it describes: about 60 bytes
/// a chunk, 1.2 MB for a revision of 10 GB in 512 KiB chunks).
const MANIFEST_CACHE: usize = 64;

/// The Hub's timestamp format (`2024-01-01T00:00:00.000Z`).
fn iso(secs: u64) -> String {
    let s = repo::manifest::utc_string(secs);
    format!("{}.000Z", s.trim_end_matches('Z'))
}

/// Most git blob ids of small files remembered (about 120 bytes each: under 8 MiB).
const BLOB_IDS_MAX: usize = 1 << 16;

/// Manifests read, by repository and commit, each with the tag of the manifest object it
/// was read from (`""`: unknown, read again on the next request): at most
/// [`MANIFEST_CACHE`], the least useful evicted first (a miss reads the manifest again).
type ManifestCache = Cache<(RepoId, CommitId), (String, Arc<Manifest>)>;

/// Most Xet hashes remembered with their repository (to tell "another repository's" from
/// "unknown", `hub/xet.rs`): about 100 bytes each, 26 MB in all.
const SEEN_MAX: usize = 1 << 18;

/// Most revisions whose place in the history is remembered (`hub/browse.rs`): a miss is
/// one GET of the manifest.
const ORDER_CACHE: usize = 16_384;

/// Most commits remembered as complete (`hub/policy.rs`): checking again is one GET.
const COMPLETE_CACHE: usize = 4096;

/// Most repositories whose role for the mirror is remembered (`hub/policy.rs`): finding it
/// again is a GET or a LIST.
const ROLE_CACHE: usize = 4096;

// The caches of the endpoint, each bounded by its count of entries (quick_cache: a miss is
// a read of the store again, never a wrong answer).

fn manifest_cache() -> ManifestCache {
    Cache::new(MANIFEST_CACHE)
}

fn blob_id_cache() -> Cache<Sha256, String> {
    Cache::new(BLOB_IDS_MAX)
}

fn seen_cache() -> Cache<XetHash, RepoId> {
    Cache::new(SEEN_MAX)
}

fn order_cache() -> OrderCache {
    Cache::new(ORDER_CACHE)
}

/// Most revisions whose release facts are kept (`hub/release.rs`; each a check record, at
/// most 1,000 problems of a few hundred bytes, usually none, and a few labels): a miss is a
/// GET of the record and a LIST of the labels.
const RELEASE_CACHE: usize = 4096;

/// How long release facts are kept: a record or label written meanwhile by another
/// process (`modelcas check`, `modelcas label`) shows within this time; a revision this
/// process pulls is read again at once.
const RELEASE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// What the store records of one revision's release.
#[derive(Clone, Debug, Default)]
struct ReleaseFacts {
    /// The current check record (`None`: not checked, or a record for other files).
    check: Option<format::release::CheckObject>,
    labels: format::release::Labels,
}

/// (repository, commit) → (when read, facts): at most [`RELEASE_CACHE`] entries.
type ReleaseCache = Cache<(RepoId, CommitId), (Instant, Arc<ReleaseFacts>)>;

fn release_cache() -> ReleaseCache {
    Cache::new(RELEASE_CACHE)
}

impl Names {
    fn new() -> Names {
        Names {
            spellings: Mutex::default(),
            roles: Cache::new(ROLE_CACHE),
            complete: Cache::new(COMPLETE_CACHE),
        }
    }
}

/// The endpoint's state: the store, tokens, metrics and caches.
pub struct Hub {
    store: Store,
    /// Decoded chunks shared by every download (and the read-ahead of each).
    cache: Arc<ChunkCache>,
    /// The read-ahead windows of each download.
    readahead: ReadaheadConfig,
    tokens: Option<HashSet<String>>,
    /// The name of each token that has one in the token file (`whoami`).
    token_names: HashMap<String, String>,
    metrics: &'static Metrics,
    /// What `/metrics` shows (default: the endpoint's metrics alone).
    exposition: Arc<prometheus_client::registry::Registry>,
    manifests: Arc<ManifestCache>,
    /// sha256 of a small file → its git blob id: at most [`BLOB_IDS_MAX`] entries, the
    /// least useful evicted first (a miss reads the file again).
    blob_ids: Cache<Sha256, String>,
    /// `--allow` and `[serve.locks]`.
    policy: Policy,
    /// `--upstream`: what the store lacks is pulled from there.
    mirror: Option<Mirror>,
    /// Stored spellings, roles and complete commits (`hub/policy.rs`).
    names: Names,
    /// The pages (`GET /`, `/ui/...`); `None`: `--no-ui`.
    ui: Option<crate::ui::Ui>,
    /// Xet downloads (`hub/xet.rs`); `None`: off.
    xet: Option<crate::xet::XetOptions>,
    /// Xet hashes seen in manifests, with their repository (`hub/xet.rs`).
    xet_seen: Cache<XetHash, RepoId>,
    /// Each stored revision's place in its history (`hub/browse.rs`).
    orders: OrderCache,
    /// The store API for nodes (`/api/modelcas/v1/...`, [`crate::nodes`]).
    nodes: crate::nodes::Nodes,
    /// Release facts of revisions (`hub/release.rs`): at most [`RELEASE_CACHE`], each
    /// kept [`RELEASE_TTL`].
    releases: ReleaseCache,
    /// Uploads (`hub/upload.rs`); `None`: no token may write.
    uploads: Option<crate::uploads::UploadOptions>,
    /// Token → the repository patterns it may write (`TOKEN  write=org/*` in the token
    /// file).
    write_scopes: crate::uploads::WriteScopes,
}

/// A repository, commit and manifest found for a request.
struct Located {
    repo: RepoId,
    commit: CommitId,
    manifest: Arc<Manifest>,
    /// The revision was pulled from the upstream (or waited for) by this request.
    pulled: bool,
}

/// When repositories were last listed, and their spellings by folded id.
type Spellings = (Option<Instant>, HashMap<String, Vec<RepoId>>);

/// What the endpoint remembers of stored repositories' names, roles and commits.
struct Names {
    /// The last listing of the store's repositories (replaced whole by the next one: as
    /// large as the store's list of repositories, which the listing holds anyway).
    spellings: Mutex<Spellings>,
    /// Repository → when its role was found, and the role (never [`Role::New`]): at most
    /// [`ROLE_CACHE`].
    roles: Cache<RepoId, (Instant, Role)>,
    /// Commits found without a partial record, with their manifest's tag: at most
    /// [`COMPLETE_CACHE`].
    complete: Cache<(RepoId, CommitId, String), ()>,
}

/// What the mirror may do with a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Nothing: no mirror, or the repository exists only inside the store.
    Inside,
    /// Look it up upstream: the mirror brought it, or `upstream_repos` names it. Refs set
    /// inside are still never moved.
    Mirrored,
    /// The store does not have it: the upstream may have it.
    New,
}

/// What a request names once the policy has read it.
#[derive(Clone, Copy, Debug)]
enum Wanted<'a> {
    /// A full commit sha (any case), or the commit a lock pins.
    Commit(CommitId),
    /// A ref name (or a short sha).
    Name(&'a str),
}

/// What a stored revision's manifest says of its place in the history.
#[derive(Clone, Debug)]
struct RevFacts {
    /// Its place by publication ([`format::manifest::Manifest::order`]); `.0` is ms.
    pub order: Order,
    pub files: usize,
    /// `plain`, `hf-cache`, ...
    pub source: String,
}

/// Facts of revisions by repository, commit and manifest tag: at most [`ORDER_CACHE`].
type OrderCache = Cache<(RepoId, CommitId, String), RevFacts>;

impl Hub {
    /// A router over `store`, reading file bytes through `cache`; with `tokens`, every
    /// route but `/metrics` needs one.
    pub fn new(store: Store, cache: Arc<ChunkCache>, tokens: Option<HashSet<String>>) -> Hub {
        Hub {
            store: store.clone(),
            cache,
            readahead: ReadaheadConfig::default(),
            tokens,
            token_names: HashMap::new(),
            metrics: &METRICS,
            exposition: Arc::new(crate::exposition::own_registry()),
            manifests: Arc::new(manifest_cache()),
            blob_ids: blob_id_cache(),
            policy: Policy::default(),
            mirror: None,
            names: Names::new(),
            ui: None,
            xet: None,
            xet_seen: seen_cache(),
            orders: order_cache(),
            nodes: crate::nodes::Nodes::new(store, Default::default(), Policy::default()),
            releases: release_cache(),
            uploads: None,
            write_scopes: Default::default(),
        }
    }

    /// The same router, taking uploads with `uploads` from the tokens `scopes` lets write.
    pub fn with_uploads(
        mut self,
        uploads: Option<crate::uploads::UploadOptions>,
        scopes: crate::uploads::WriteScopes,
    ) -> Hub {
        self.uploads = uploads;
        self.write_scopes = scopes;
        self
    }

    /// Whether the allow-list lets this hub serve `repo` (what a shard may name of the
    /// store's stored xorbs, as the dedup query answers).
    pub(crate) fn allows(&self, repo: &RepoId) -> bool {
        self.policy.allows(&repo.to_string())
    }

    /// The upload settings (the streamed object `PUT` of `server.rs`).
    pub(crate) fn upload_options(&self) -> Option<&crate::uploads::UploadOptions> {
        self.uploads.as_ref()
    }

    /// The same router, serving the store API to nodes as `access` says (the policy set
    /// by [`Hub::with_policy`] before applies to it).
    pub fn with_nodes(mut self, access: crate::nodes::NodeAccess) -> Hub {
        self.nodes = crate::nodes::Nodes::new(self.store.clone(), access, self.policy.clone());
        self
    }

    /// The store API's state (its block counts, for tests and metrics).
    pub fn nodes(&self) -> &crate::nodes::Nodes {
        &self.nodes
    }

    /// The same router, naming tokens as `names` says (token → name) in `whoami`; a token
    /// without one is named [`crate::default_token_name`].
    pub fn with_token_names(mut self, names: HashMap<String, String>) -> Hub {
        self.token_names = names;
        self
    }

    /// The same router, offering Xet downloads with `xet` (`None`: off).
    pub fn with_xet(mut self, xet: Option<crate::xet::XetOptions>) -> Hub {
        self.xet = xet;
        self
    }

    /// The same router, with the pages for people over `pages` (`None`: no pages).
    pub fn with_ui(mut self, pages: Option<crate::ui::Pages>) -> Hub {
        self.ui = pages.map(|p| crate::ui::Ui::new(p.0));
        self
    }

    /// A page, when the pages are on and the path is theirs (they check auth themselves:
    /// a bearer token, or the cookie a first token set).
    fn ui_page(&self, req: &Head<'_>, segs: &[&str]) -> Option<Reply> {
        let ui = self.ui.as_ref().filter(|_| crate::ui::is_ui_path(segs))?;
        let spelling = |r: RepoId| match self.spelling(r.clone()) {
            Ok(s) => s,
            Err(_) => r,
        };
        let ctx = crate::ui::Ctx {
            tokens: self.tokens.as_ref(),
            policy: &self.policy,
            mirror: self
                .mirror
                .as_ref()
                .map(|m| (m.endpoint(), m.opts.ttl, m.recent.as_ref())),
            spelling: &spelling,
        };
        let r = ui.route(&ctx, req, segs);
        self.count("ui", r.status.as_u16());
        Some(r)
    }

    /// The same router, reading downloads with the read-ahead of `config` (default:
    /// [`ReadaheadConfig::default`]).
    pub fn with_readahead(mut self, config: ReadaheadConfig) -> Hub {
        self.readahead = config;
        self
    }

    /// The same router, answering only for the repositories `policy` allows, with its
    /// locks, and pulling what the store lacks from `upstream`.
    pub fn with_policy(mut self, policy: Policy, upstream: Option<UpstreamOptions>) -> Hub {
        self.nodes.set_policy(policy.clone());
        self.policy = policy;
        self.mirror = upstream.map(Mirror::new);
        self
    }

    /// The same router, showing `registry` on `/metrics` (the binary's, with every crate's
    /// metrics).
    pub fn with_exposition(mut self, registry: Arc<prometheus_client::registry::Registry>) -> Hub {
        self.exposition = registry;
        self
    }

    /// The endpoint's metrics.
    pub fn metrics(&self) -> &Metrics {
        self.metrics
    }

    /// Whether a request may use the Hub API: no tokens configured, or a token of the token
    /// file or a node token (nodes may read everything the Hub API serves anyway).
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(tokens) = &self.tokens else {
            return true;
        };
        crate::auth::bearer(headers).is_some_and(|t| tokens.contains(t) || self.nodes.knows(t))
    }

    /// Counts a request, unless its routing stopped to wait for the upstream: its reply is
    /// a placeholder, and the request is routed again, and counted, once the wait is over.
    pub(crate) fn count(&self, endpoint: &'static str, status: u16) {
        if !crate::upstream::flight::stopped() {
            self.metrics.request(endpoint, status);
        }
    }

    /// The reply to one request without a body.
    pub fn route(&self, req: &Head<'_>) -> Reply {
        self.route_with_body(req, &[])
    }

    /// The reply to one request; `body` is read (by the server, capped) only for the
    /// routes [`reads_body`] names, and empty for every other.
    pub fn route_with_body(&self, req: &Head<'_>, body: &[u8]) -> Reply {
        let start = Instant::now();
        let segs = match decode::segments(req.path) {
            Ok(s) => s,
            Err(e) => {
                self.count("unknown", 400);
                return Reply::error(StatusCode::BAD_REQUEST, "", &e.to_string(), None);
            }
        };
        let segs: Vec<&str> = segs.iter().map(|s| s.as_str()).collect();
        let (get, head) = (*req.method == Method::GET, *req.method == Method::HEAD);
        if segs == ["metrics"] && get {
            self.count("metrics", 200);
            let body = crate::exposition::render(&self.exposition);
            let mut r = Reply::json(StatusCode::OK, &Value::Null);
            r.body = Body::full(body);
            return r.header(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::exposition::CONTENT_TYPE),
            );
        }
        if let Some(page) = self.ui_page(req, &segs) {
            return page;
        }
        if let Some(r) = self.xet_own_auth(req, &segs) {
            return r;
        }
        if let Some(r) = self.xet_dedup_route(req, &segs) {
            return r;
        }
        if let ["api", "modelcas", "v1", rest @ ..] = segs.as_slice() {
            // Its own tokens (node tokens) and methods.
            let (endpoint, r) = self.nodes.route(req, rest);
            self.count(endpoint, r.status.as_u16());
            return r;
        }
        if !self.authorized(req.headers) {
            self.count("auth", 401);
            let msg = "Invalid credentials: send Authorization: Bearer <token>";
            return Reply::error(StatusCode::UNAUTHORIZED, "", msg, None);
        }
        if let Some(r) = other_type(&segs) {
            self.count("other-type", 404);
            return r;
        }
        if let Some((endpoint, r)) = self.upload_route(req, &segs, body) {
            self.count(endpoint, r.status.as_u16());
            return r;
        }
        let paths_info = match segs.as_slice() {
            ["api", "models", org, name, "paths-info", rev @ ..] if !rev.is_empty() => {
                Some((*org, *name, rev.join("/")))
            }
            _ => None,
        };
        if let (Some((org, name, rev)), true) = (&paths_info, *req.method == Method::POST) {
            let r = self.paths_info(org, name, rev, body);
            self.count("paths-info", r.status.as_u16());
            return r;
        }
        if (!get && !head) || paths_info.is_some() {
            self.count("other", 405);
            let allow = if paths_info.is_some() {
                "POST"
            } else {
                "GET, HEAD"
            };
            return Reply::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "",
                "read-only endpoint",
                None,
            )
            .header(header::ALLOW, HeaderValue::from_static(allow));
        }
        let (endpoint, r) = match segs.as_slice() {
            ["api", "models", org, name, "revision", rev @ ..] if !rev.is_empty() => (
                "revision",
                self.repo_info(org, name, &rev.join("/"), req.query),
            ),
            ["api", "models"] => ("models", self.list_models(req)),
            ["api", "models", org, name] => ("model", self.model_info(org, name, req.query)),
            ["api", "models", org, name, "commits", rev @ ..] if !rev.is_empty() => {
                ("commits", self.commits(req, org, name, &rev.join("/")))
            }
            ["api", "whoami-v2"] => ("whoami", self.whoami(req.headers)),
            ["api", "models", org, name, "tree", rev, rest @ ..] => {
                let recursive = decode::recursive(req.query);
                (
                    "tree",
                    self.tree(org, name, rev, &rest.join("/"), recursive),
                )
            }
            ["api", "models", org, name, "refs"] => ("refs", self.refs(org, name)),
            ["api", "models", org, name, "xet-read-token", rev] if get => {
                ("xet-token", self.xet_token(req, org, name, rev))
            }
            [org, name, "resolve", rev, rest @ ..] if !rest.is_empty() => {
                let file = rest.join("/");
                return self.resolve(req, org, name, rev, &file, start);
            }
            _ => {
                let msg = format!("no route for {}", req.path);
                ("unknown", not_found("", &msg, None))
            }
        };
        self.count(endpoint, r.status.as_u16());
        r
    }

    /// The repository id of a request, if it is valid and allowed, as the store spells it
    /// (ids compare without case, as on the Hub).
    fn repo_id(&self, org: &str, name: &str) -> Result<RepoId, Box<Reply>> {
        let shown = format!("{org}/{name}");
        let repo = RepoId::parse(&shown).map_err(|_| repo_missing(&shown))?;
        if !self.policy.allows(&shown) {
            let msg = format!("Repository {shown} is not served here (not in the allow list)");
            return Err(Box::new(Reply::error(
                StatusCode::FORBIDDEN,
                "RepoNotAllowed",
                &msg,
                None,
            )));
        }
        self.spelling(repo)
    }

    /// The repository and commit named, or the error reply the client understands.
    fn locate(&self, org: &str, name: &str, rev: &str) -> Result<Located, Box<Reply>> {
        let repo = self.repo_id(org, name)?;
        let (repo, commit, tag, pulled) = self.find(repo, rev)?;
        let key = (repo.clone(), commit);
        let cached = self
            .manifests
            .get(&key)
            .filter(|(t, _)| !t.is_empty() && *t == tag)
            .map(|(_, m)| m.clone());
        let manifest = match cached {
            Some(m) => m,
            None => {
                let m = Arc::new(self.store.manifest(&repo, &commit).map_err(internal)?);
                remember(&self.manifests, key, tag, m.clone());
                m
            }
        };
        let at = Located {
            repo,
            commit,
            manifest,
            pulled,
        };
        self.lock_guard(&at)?;
        Ok(at)
    }

    /// The stored commit `rev` names (a lock wins over ref names and refuses other
    /// commits), pulled through the upstream first when the mirror may look the
    /// repository up and the store lacks the commit or has it in part; with the
    /// repository (its spelling may change if another request stored it meanwhile), the
    /// manifest's tag, and whether it was pulled.
    fn find(
        &self,
        repo: RepoId,
        rev: &str,
    ) -> Result<(RepoId, CommitId, String, bool), Box<Reply>> {
        let wanted = self.wanted(&repo, rev)?;
        let shown = match wanted {
            Wanted::Commit(c) => c.to_hex(),
            Wanted::Name(n) => n.to_string(),
        };
        let role = self.role(&repo)?;
        let inside_ref = match wanted {
            Wanted::Name(n) if role == Role::Mirrored => self.set_inside(&repo, n)?,
            _ => false,
        };
        let Some(mirror) = self
            .mirror
            .as_ref()
            .filter(|_| role != Role::Inside && !inside_ref)
        else {
            let (c, tag) = self.stored(&repo, &shown)?;
            return self.completed(repo, c, tag);
        };
        // What the store answers when the upstream cannot.
        let fallback = |e: UpstreamError| match self.stored(&repo, &shown) {
            // In flight: the request waits for it and is routed again (not stale data).
            _ if e == UpstreamError::Pending => Err(upstream_reply(mirror.endpoint(), &e).into()),
            Ok((c, tag)) => Ok((repo.clone(), c, tag, false)),
            Err(_) => Err(upstream_reply(mirror.endpoint(), &e).into()),
        };
        let (commit, asked) = match wanted {
            Wanted::Commit(c) if role == Role::Mirrored => (c, false),
            // A repository the store lacks is asked about first (a sha too), so that
            // only one the upstream has is recorded as the mirror's.
            _ => match mirror.resolve(&repo, &shown) {
                (Ok(c), asked) => (c, asked),
                (Err(e), _) => return fallback(e),
            },
        };
        if role == Role::New {
            if let Some(stored) = self.adopt(&repo, mirror.endpoint())? {
                // Stored meanwhile (another case, another process): judged as stored.
                return self.find(stored, rev);
            }
        }
        let hex = commit.to_hex();
        let found = match self.stored(&repo, &hex) {
            Ok((c, tag)) if !self.partial(&repo, &commit, &tag)? => Some((c, tag)),
            _ => None,
        };
        // Missing, or stored in part: the pull brings (the rest of) it. Found after a
        // wait for its pull (routed again): still the miss that caused the pull.
        let pull = match found {
            Some(_) => mirror.waited_for_pull(&repo, &commit),
            None => Some(mirror.fetch(&repo, &commit)),
        };
        let pulled = match pull {
            None => false,
            Some(outcome) => match self.brought(mirror, &repo, &commit, rev, outcome) {
                Ok(()) => true,
                Err(e) => return fallback(e),
            },
        };
        if let Wanted::Name(n) = wanted {
            if asked || pulled {
                self.follow_ref(&repo, n, &commit);
            }
        }
        let (c, tag) = match found {
            Some(x) => x,
            None => self.stored(&repo, &hex)?,
        };
        Ok((repo, c, tag, pulled))
    }

    /// The outcome of a pull of `commit` through the mirror (run once, whoever else asks
    /// meanwhile), logged for the request that caused it.
    fn brought(
        &self,
        mirror: &Mirror,
        repo: &RepoId,
        commit: &CommitId,
        rev: &str,
        (bytes, led): (Result<u64, UpstreamError>, bool),
    ) -> Result<(), UpstreamError> {
        let bytes = bytes?;
        if led {
            // The access log's line for the request that caused the pull.
            tracing::info!(
                target: "access", repo = %repo, revision = %rev,
                commit = %commit.to_hex(), cache = %"miss", bytes,
                "pulled from {}", mirror.endpoint()
            );
        }
        Ok(())
    }

    /// A stored commit, completed first from the upstream when it is partial (whatever
    /// the repository's role: the sha names the upstream's content, no ref moves); served
    /// as stored when there is no upstream or it fails.
    fn completed(
        &self,
        repo: RepoId,
        c: CommitId,
        tag: String,
    ) -> Result<(RepoId, CommitId, String, bool), Box<Reply>> {
        let Some(mirror) = &self.mirror else {
            return Ok((repo, c, tag, false));
        };
        if !self.partial(&repo, &c, &tag)? {
            // Completed after a wait for its pull (routed again): the miss that caused it.
            let pulled = match mirror.waited_for_pull(&repo, &c) {
                Some(outcome) => self
                    .brought(mirror, &repo, &c, &c.to_hex(), outcome)
                    .is_ok(),
                None => false,
            };
            return Ok((repo, c, tag, pulled));
        }
        let outcome = mirror.fetch(&repo, &c);
        match self.brought(mirror, &repo, &c, &c.to_hex(), outcome) {
            Ok(()) => {
                let (c, tag) = self.stored(&repo, &c.to_hex())?;
                Ok((repo, c, tag, true))
            }
            Err(e @ UpstreamError::Pending) => Err(upstream_reply(mirror.endpoint(), &e).into()),
            Err(e) => {
                tracing::warn!(
                    "{repo}@{} is stored in part and cannot be completed: {e}",
                    c.to_hex()
                );
                Ok((repo, c, tag, false))
            }
        }
    }

    /// Points the store's ref `name` at the upstream's commit, so that it answers the same
    /// while the upstream is down (short shas are not ref names). Only a ref the mirror
    /// set itself is moved: one set inside stays ([`repo::Store::follow_ref`]).
    fn follow_ref(&self, repo: &RepoId, name: &str, commit: &CommitId) {
        if name.bytes().all(|b| b.is_ascii_hexdigit()) {
            return;
        }
        match self.store.follow_ref(repo, name, commit) {
            Ok(true) => {}
            Ok(false) => tracing::info!(
                "{repo} ref {name} was set inside the store; the upstream's {} is not followed",
                commit.to_hex()
            ),
            Err(e) => {
                tracing::warn!("cannot point {repo} ref {name} at {}: {e}", commit.to_hex())
            }
        }
    }

    /// The stored commit `rev` names, with its manifest's tag, or the not-found reply.
    fn stored(&self, repo: &RepoId, rev: &str) -> Result<(CommitId, String), Box<Reply>> {
        match self.store.resolve_tagged(repo, rev) {
            Ok(c) => Ok(c),
            Err(StoreError::UnknownRepo(_)) => Err(repo_missing(&repo.to_string()).into()),
            Err(StoreError::UnknownRevision { .. } | StoreError::AmbiguousRevision { .. }) => {
                Err(not_found("RevisionNotFound", &format!("Invalid rev id: {rev}"), None).into())
            }
            Err(e) => Err(internal(e).into()),
        }
    }

    /// Records that a request used the located revision (any request that names it:
    /// `HEAD` and `GET` of a file, its listing, its info), for `gc --unused-for`: in the
    /// background, at most once per `repo::usage::REFRESH` per revision.
    fn record_use(&self, at: &Located) {
        repo::usage::record_in_background(
            &self.store,
            &at.repo,
            &at.commit,
            "serve",
            std::time::Duration::ZERO,
        );
    }

    /// A reader of file `i` (the bytes of a download, or of a small file whose blob id is
    /// computed) that refreshes the manifest cache when it reloads.
    fn source(&self, at: &Located, i: usize) -> FileSource {
        let cache = self.manifests.clone();
        let key = (at.repo.clone(), at.commit);
        let reload = Arc::new(Remembering {
            store: self.store.clone(),
            manifests: cache,
            key,
        });
        let plan = ReadPlan {
            readahead: self.readahead,
            ..ReadPlan::default()
        };
        FileSource::new(self.cache.clone(), plan, reload, at.manifest.clone(), i)
    }

    fn repo_info(&self, org: &str, name: &str, rev: &str, query: &str) -> Reply {
        match self.locate(org, name, rev) {
            Ok(at) => self.info_reply(&at, query),
            Err(r) => *r,
        }
    }

    /// The `model_info` of the located revision; `?blobs=true` (`files_metadata=True`)
    /// adds each sibling's `size`, `blobId` and `lfs`.
    fn info_reply(&self, at: &Located, query: &str) -> Reply {
        self.record_use(at);
        let m = &at.manifest;
        let blobs = decode::query_flag(query, "blobs");
        let mut siblings = Vec::with_capacity(m.files.len());
        for (i, f) in m.files.iter().enumerate() {
            let mut s = json!({ "rfilename": f.path });
            if blobs {
                let (oid, _, lfs) = match self.ids(at, i) {
                    Ok(x) => x,
                    Err(e) => return internal(e),
                };
                s["size"] = json!(f.size);
                s["blobId"] = json!(oid);
                if let Some(l) = lfs {
                    s["lfs"] = json!({ "sha256": l["oid"], "size": l["size"],
                                       "pointerSize": l["pointerSize"] });
                }
            }
            siblings.push(s);
        }
        let (commit, repo) = (at.commit.to_hex(), at.repo.to_string());
        let mut info = json!({
            "_id": repo_object_id(&at.repo), "id": repo, "modelId": repo,
            "sha": commit, "lastModified": iso(m.ingested_at),
            "createdAt": iso(m.ingested_at), "private": false, "disabled": false,
            "gated": false, "downloads": 0, "likes": 0, "tags": [],
            "siblings": siblings,
        });
        // The release check and labels (huggingface_hub keeps unknown fields).
        if let Some(r) = self.release_json(at) {
            info["modelcas"] = r;
        }
        Reply::json(StatusCode::OK, &info)
    }

    /// The git blob id of a small file (read once, then remembered by sha256).
    fn blob_id(&self, at: &Located, i: usize) -> Result<String, read::source::ReadError> {
        let f = &at.manifest.files[i];
        if let Some(id) = self.blob_ids.get(&f.sha256) {
            return Ok(id);
        }
        let mut blob = gitblob::GitBlob::new(f.size);
        self.source(at, i).copy_range(0, f.size, &mut |b: Bytes| {
            blob.update(&b);
            true
        })?;
        let id = blob.finish_hex();
        self.blob_ids.insert(f.sha256, id.clone());
        Ok(id)
    }

    /// (oid, etag, lfs) of file `i`.
    fn ids(
        &self,
        at: &Located,
        i: usize,
    ) -> Result<(String, String, Option<Value>), read::source::ReadError> {
        let f = &at.manifest.files[i];
        if etag::is_lfs(&f.path, f.size) {
            let sha = f.sha256_hex();
            let pointer = etag::lfs_pointer(&sha, f.size);
            let oid = gitblob::git_blob_id(pointer.as_bytes());
            let lfs = json!({ "oid": sha, "size": f.size, "pointerSize": pointer.len() });
            Ok((oid, sha, Some(lfs)))
        } else {
            let id = self.blob_id(at, i)?;
            Ok((id.clone(), id, None))
        }
    }

    fn tree(&self, org: &str, name: &str, rev: &str, dir: &str, recursive: bool) -> Reply {
        let at = match self.locate(org, name, rev) {
            Ok(x) => x,
            Err(r) => return *r,
        };
        self.record_use(&at);
        let dir = dir.trim_matches('/');
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut entries = Vec::new();
        let mut dirs: HashSet<String> = HashSet::new();
        let mut found = dir.is_empty();
        for (i, f) in at.manifest.files.iter().enumerate() {
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
                    entries.push(dir_entry(&at, &d));
                }
            }
            if !recursive && parts.len() > 1 {
                continue;
            }
            match self.file_entry(&at, i) {
                Ok(e) => entries.push(e),
                Err(e) => return internal(e),
            }
        }
        if !found {
            let msg = format!("{dir} does not exist at {}", at.commit.to_hex());
            return not_found("EntryNotFound", &msg, Some(&at.commit));
        }
        Reply::json(StatusCode::OK, &Value::Array(entries))
    }

    fn refs(&self, org: &str, name: &str) -> Reply {
        let missing = repo_missing;
        let repo = match self.repo_id(org, name) {
            Ok(r) => r,
            Err(r) => return *r,
        };
        let refs = match self.store.refs(&repo) {
            Ok(r) => r,
            Err(e) => return internal(e),
        };
        if refs.is_empty()
            && self
                .store
                .commits(&repo)
                .map(|c| c.is_empty())
                .unwrap_or(true)
        {
            return missing(&repo.to_string());
        }
        let tags = match self.store.tags(&repo, &refs) {
            Ok(t) => t,
            Err(e) => return internal(e),
        };
        let (mut branches, mut tagged, mut prs) = (Vec::new(), Vec::new(), Vec::new());
        for (n, c) in refs {
            if tags.contains(&n) {
                tagged.push(json!({ "name": n, "ref": format!("refs/tags/{n}"), "targetCommit": c.to_hex() }));
            } else if n.starts_with("refs/pr/") {
                prs.push(json!({ "name": n, "ref": n, "targetCommit": c.to_hex() }));
            } else {
                branches.push(json!({ "name": n, "ref": format!("refs/heads/{n}"), "targetCommit": c.to_hex() }));
            }
        }
        Reply::json(
            StatusCode::OK,
            &json!({ "branches": branches, "tags": tagged, "converts": [], "pullRequests": prs }),
        )
    }
}

/// The reply to a request the upstream could not answer (and the store could not either).
fn upstream_reply(endpoint: &str, e: &UpstreamError) -> Reply {
    match e {
        UpstreamError::RepoNotFound(m) => {
            not_found("RepoNotFound", &format!("{m} (upstream {endpoint})"), None)
        }
        UpstreamError::RevisionNotFound(m) => not_found(
            "RevisionNotFound",
            &format!("{m} (upstream {endpoint})"),
            None,
        ),
        UpstreamError::Unavailable(m) => Reply::error(
            StatusCode::BAD_GATEWAY,
            "",
            &format!("upstream {endpoint} unavailable and not stored here: {m}"),
            None,
        ),
        // Replaced by the answer once the wait is over (see `upstream::flight`).
        UpstreamError::Pending => Reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "",
            &format!("waiting for the upstream {endpoint}"),
            None,
        ),
    }
}

/// A stable `_id` for a repository (24 hex, as the Hub's object ids are long).
fn repo_object_id(repo: &RepoId) -> String {
    blake3::hash(repo.folded().as_bytes()).to_hex()[..24].to_string()
}

/// The reply to a repository type the store does not hold (`/api/datasets/...`,
/// `/spaces/...`), if `segs` names one: a 404 `RepoNotFound`, so that `repo_exists(...,
/// repo_type="dataset")` is False.
fn other_type(segs: &[&str]) -> Option<Reply> {
    // `/api/{kind}/...`, and `/{kind}/{org}/{name}/{resolve|tree|...}/...`: a model whose
    // organisation is named `datasets` is `/datasets/{name}/resolve/...`, one segment
    // shorter before `resolve`, and stays a model.
    let kind = match segs {
        ["api", k, ..] => *k,
        [_, _, "resolve", ..] => return None,
        [k, _, ..] => *k,
        _ => return None,
    };
    if !matches!(kind, "datasets" | "spaces") {
        return None;
    }
    let msg = format!("Repository not found: this server serves models only, not {kind}");
    Some(not_found("RepoNotFound", &msg, None))
}

/// The git id the tree route gives directory `dir` of the located revision (stable for a
/// commit; the store keeps no git trees).
fn dir_oid(at: &Located, dir: &str) -> String {
    gitblob::git_blob_id(format!("tree {}@{dir}", at.commit.to_hex()).as_bytes())
}

/// A directory's tree entry.
fn dir_entry(at: &Located, dir: &str) -> Value {
    json!({ "type": "directory", "oid": dir_oid(at, dir), "path": dir })
}

/// Reads a manifest again after a pack was gone ([`read::reload::same_file`]) and keeps
/// the fresh one in the manifest cache, for the next request of the revision.
struct Remembering {
    store: Store,
    manifests: Arc<ManifestCache>,
    key: (RepoId, CommitId),
}

impl Reload for Remembering {
    fn same_file(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        was: &FileEntry,
    ) -> repo::Result<Option<(Arc<Manifest>, usize)>> {
        let found = read::reload::same_file(&self.store, repo, commit, was)?;
        if let Some((m, _)) = &found {
            remember(&self.manifests, self.key.clone(), String::new(), m.clone());
        }
        Ok(found)
    }
}

/// Puts a manifest in the cache (evicting another when full: manifests are cheap to load
/// again).
fn remember(cache: &ManifestCache, key: (RepoId, CommitId), tag: String, m: Arc<Manifest>) {
    cache.insert(key, (tag, m));
}

/// What body a request's route reads (the server reads it, capped, before routing):
/// `None` for every route but the ones that take one.
pub fn reads_body(method: &Method, path: &str) -> Option<BodyKind> {
    if *method != Method::POST {
        return None;
    }
    let segs = decode::segments(path).ok()?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    match segs.as_slice() {
        ["api", "models", _, _, "commit", _, ..] => Some(BodyKind::Commit),
        ["api", "models", _, _, "paths-info" | "preupload" | "branch" | "tag", _, ..]
        | ["api", "repos", "create"]
        | ["api", "validate-yaml"]
        | [_, _, "info", "lfs", "objects", "batch"]
        | ["upload", "verify", _, _] => Some(BodyKind::Small),
        _ => None,
    }
}

/// The bodies routes read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON or form body: at most [`crate::Limits::max_body`].
    Small,
    /// A commit (NDJSON with inline files): at most [`crate::Limits::max_commit_body`].
    Commit,
}

mod browse;
mod paths;
mod policy;
mod release;
mod resolve;
mod upload;
mod xet;

#[cfg(test)]
mod tests {
    use super::*;

    /// Inserts `n` distinct entries into `cache`, checks that at most `bound` stay and that
    /// the entry just inserted is served, and prints the figure (docs/BENCHMARKS.md,
    /// "Memory bounds of in-memory caches").
    fn fill<K, V>(
        name: &str,
        cache: &Cache<K, V>,
        bound: usize,
        n: usize,
        entry: impl Fn(usize) -> (K, V),
    ) where
        K: Eq + std::hash::Hash + Clone,
        V: Clone,
    {
        assert_eq!(cache.capacity(), bound as u64, "{name}: capacity");
        let mut most = 0;
        for i in 0..n {
            let (k, v) = entry(i);
            cache.insert(k.clone(), v);
            most = most.max(cache.len());
            assert!(
                cache.len() <= bound,
                "{name}: {} entries > {bound}",
                cache.len()
            );
            assert!(cache.peek(&k).is_some(), "{name}: entry {i} just inserted");
        }
        let (last, _) = entry(n - 1);
        assert!(cache.get(&last).is_some(), "{name}: the last entry");
        assert!(
            cache.len() > bound / 2,
            "{name}: {} entries kept",
            cache.len()
        );
        println!(
            "cache-bound serve {name}: bound {bound} entries; after {n} inserts: {} entries \
             (at most {most})",
            cache.len()
        );
    }

    fn repo(i: usize) -> RepoId {
        RepoId::parse(&format!("org/model-{i}")).unwrap()
    }

    fn commit(i: usize) -> CommitId {
        let mut c = [0u8; 20];
        c[..8].copy_from_slice(&(i as u64).to_le_bytes());
        CommitId(c)
    }

    fn sha(i: usize) -> [u8; 32] {
        *blake3::hash(&(i as u64).to_le_bytes()).as_bytes()
    }

    #[test]
    fn every_cache_of_the_endpoint_keeps_to_its_bound() {
        let m = Arc::new(Manifest {
            repo: repo(0),
            commit: commit(0),
            ingested_at: 0,
            source: "plain".into(),
            packs: Vec::new(),
            files: Vec::new(),
            published: None,
            xet_hashes: Vec::new(),
        });
        let n = MANIFEST_CACHE * 10;
        fill("manifests", &manifest_cache(), MANIFEST_CACHE, n, |i| {
            ((repo(i), commit(i)), ("tag".to_string(), m.clone()))
        });
        fill(
            "blob_ids",
            &blob_id_cache(),
            BLOB_IDS_MAX,
            BLOB_IDS_MAX * 4,
            |i| (Sha256(sha(i)), format!("{i:040x}")),
        );
        fill("xet_seen", &seen_cache(), SEEN_MAX, SEEN_MAX * 4, |i| {
            (XetHash(sha(i)), repo(i % 100))
        });
        let facts = |i: usize| RevFacts {
            order: (i as u64, 0, [0; 20]),
            files: 3,
            source: "plain".into(),
        };
        fill(
            "orders",
            &order_cache(),
            ORDER_CACHE,
            ORDER_CACHE * 10,
            |i| ((repo(i % 100), commit(i), "tag".into()), facts(i)),
        );
        let names = Names::new();
        fill("roles", &names.roles, ROLE_CACHE, ROLE_CACHE * 10, |i| {
            (repo(i), (Instant::now(), Role::Inside))
        });
        fill(
            "complete",
            &names.complete,
            COMPLETE_CACHE,
            COMPLETE_CACHE * 10,
            |i| ((repo(i % 100), commit(i), "tag".into()), ()),
        );
        let facts = Arc::new(ReleaseFacts::default());
        fill(
            "releases",
            &release_cache(),
            RELEASE_CACHE,
            RELEASE_CACHE * 10,
            |i| ((repo(i % 100), commit(i)), (Instant::now(), facts.clone())),
        );
    }

    #[test]
    fn other_types_are_refused_models_are_not() {
        assert!(other_type(&["api", "datasets", "a", "b"]).is_some());
        assert!(other_type(&["spaces", "a", "b", "resolve"]).is_some());
        assert!(other_type(&["api", "models", "a", "b"]).is_none());
        assert!(other_type(&["org", "model", "resolve"]).is_none());
        assert!(other_type(&["datasets"]).is_none());
        // A model of the organisation `datasets`: org/name/resolve, not a dataset.
        assert!(other_type(&["datasets", "foo", "resolve", "main", "config.json"]).is_none());
        assert!(other_type(&["datasets", "o", "d", "resolve", "main", "x"]).is_some());
    }
}
