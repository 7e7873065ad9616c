//! `modelcas serve`: an HTTP endpoint that answers enough of the Hugging Face Hub
//! API, from a modelcas store, for the official `huggingface_hub` client to work against it
//! with `HF_ENDPOINT` set (`snapshot_download`, `hf_hub_download`, `from_pretrained`), and,
//! for tokens with a write scope, to upload (`hf upload`, `upload_folder`, `push_to_hub`).
//!
//! Routes (repository ids are `org/name`; revisions are ref names, URL-quoted, or shas):
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/models/{repo}/revision/{rev}` | `{id, sha, siblings: [{rfilename}], modelcas: {check, labels}, ...}` |
//! | `GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=` | tree entries with `oid`, `size`, `lfs` |
//! | `GET /api/models/{repo}/refs` | `{branches, tags, converts, pullRequests}` |
//! | `GET /api/models/{repo}` | the same info at the default revision (`main`, else the newest) |
//! | `GET /api/models?search=&author=&sort=&limit=` | the stored, allowed repositories, paged by `Link` |
//! | `GET /api/models/{repo}/commits/{rev}` | the store's revisions from `rev` back, newest first, paged |
//! | `POST /api/models/{repo}/paths-info/{rev}` | tree entries of the form body's `paths` (body capped) |
//! | `GET /api/whoami-v2` | the bearer token's name from the token file |
//! | `/api/datasets/...`, `/spaces/...` | 404 `RepoNotFound`: models only |
//! | `HEAD`/`GET /{repo}/resolve/{rev}/{path}` | the file, with `X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`, `X-Xet-Hash` and its `Link`; `Range` |
//! | `GET /api/models/{repo}/xet-read-token/{rev}` | a Xet read token, the CAS URL and the expiry (headers and JSON) |
//! | `GET /v1/reconstructions/{xet hash}` | the file's reconstruction (Xet read token; `Range`) |
//! | `GET /xet/xorbs/...` | chunk records (signed, expiring URL; `Range`) |
//! | `GET /metrics` | Prometheus metrics |
//! | `POST /api/repos/create`, `.../preupload/{rev}`, `.../commit/{branch}`, `.../branch/{name}`, `.../tag/{rev}`, `/{repo}.git/info/lfs/objects/batch`, `PUT /upload/lfs/...`, `POST /upload/verify/{repo}` | uploads ([`uploads`], `hub/upload.rs`; a token with a write scope) |
//! | `GET .../xet-write-token/{rev}`, `POST /v1/xorbs/...`, `POST /v1/shards`, `GET /v1/chunks/...` | Xet uploads and the global dedup query (a Xet write token) |
//! | `/api/modelcas/v1/...` | the store API nodes read the store through ([`nodes`], node tokens only) |
//! | `GET /`, `/ui/...` | HTML pages for people ([`ui`]; off with `--no-ui`) |
//!
//! Errors carry `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) as the
//! client expects. Xet ([`xet`], `hub/xet.rs`, docs/format/xet.md) is offered for files
//! whose manifest records their Xet hash, unless turned off. With tokens configured every
//! route but `/metrics` and the two Xet CAS routes (their own token, their own signature)
//! needs `Authorization: Bearer <token>`. One access-log event per download
//! (tracing target `access`) goes to the log.
//!
//! **Pull-through mirror** (`modelcas serve --upstream URL`, [`upstream`]): a request for a
//! repository or revision the store lacks is pulled from the upstream Hub once (through
//! an [`Upstream`] the binary provides), then served; concurrent requests wait for that
//! one pull; ref names are resolved upstream with a TTL cache; when the upstream is down,
//! what is stored still answers (502 for what is not). **Policy** ([`Policy`]): with an
//! allow list (`--allow 'org/*'`) other repositories get 403 (`X-Error-Code:
//! RepoNotAllowed`) and are never fetched; a lock (`[serve.locks]`) makes every ref name
//! of a repository resolve to one commit, and a locked commit that failed its release
//! check answers 403 (`X-Error-Code: ReleaseCheckFailed`) unless `serve --force`
//! ([`Policy::force_locks`]). Access lines carry `cache=hit|miss`.
//!
//! The crate is a thin adapter: [`hub`] routes and maps store answers to HTTP, [`body`]
//! streams file bytes from the store's read path, [`decode`] turns client bytes into values
//! and values into header bytes (total functions, fuzzed), and [`server`] holds
//! connections to their limits (HTTP/1.1 on hyper, see its doc for the timeouts);
//! [`metrics`] are the endpoint's metrics, [`exposition`] the text `/metrics` answers, and
//! [`metrics_listener`] is the `/metrics`-only listener of the other commands. No input
//! makes it panic, and no header value is built from unchecked bytes.

pub mod auth;
pub mod body;
pub mod decode;
pub mod etag;
pub mod exposition;
pub mod hub;
pub mod metrics;
pub mod metrics_listener;
pub mod nodes;
pub mod reply;
pub mod server;
pub mod ui;
mod upload_stream;
pub mod uploads;
pub mod upstream;
pub mod xet;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use read::cache::ChunkCache;
use read::readahead::ReadaheadConfig;
use repo::Store;

pub use crate::auth::default_token_name;
pub use crate::hub::Hub;
pub use crate::server::Limits;
pub use crate::upstream::{Policy, Upstream, UpstreamError, UpstreamOptions};

/// Errors starting the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: String, reason: String },
    /// The async runtime could not start.
    #[error("cannot start the server runtime: {0}")]
    Runtime(std::io::Error),
    /// The chunk cache could not start.
    #[error(transparent)]
    Store(#[from] repo::StoreError),
}

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// `host:port`.
    pub listen: String,
    /// Accepted bearer tokens; `None`: no authentication.
    pub tokens: Option<HashSet<String>>,
    /// Names of tokens (token → name, from the token file), shown by `whoami`; a token
    /// without one is named [`default_token_name`].
    pub token_names: HashMap<String, String>,
    /// Threads reading the store (requests being routed and chunks being read at once).
    pub threads: usize,
    /// Connection limit and timeouts.
    pub limits: Limits,
    /// Memory for decoded chunks shared by every download (read-ahead uses up to half).
    pub cache_bytes: usize,
    /// Threads fetching, decompressing and verifying chunks ahead of the downloads.
    pub fetch_threads: usize,
    /// `--allow` and `[serve.locks]`.
    pub policy: Policy,
    /// `--upstream`: a pull-through mirror of that Hub.
    pub upstream: Option<UpstreamOptions>,
    /// Read-ahead windows of downloads.
    pub readahead: ReadaheadConfig,
    /// What `/metrics` shows: the registry the binary assembled from every crate's metrics.
    pub metrics: Arc<prometheus_client::registry::Registry>,
    /// The pages' figures; `None` (`--no-ui`): no pages, `/` and `/ui/...` are 404.
    pub ui: Option<ui::Pages>,
    /// Xet downloads (`None`: off; docs/format/xet.md).
    pub xet: Option<xet::XetOptions>,
    /// The store API for nodes (docs/format/hub-protocol.md): who may read it.
    pub nodes: nodes::NodeAccess,
    /// Uploads (`None`: no token may write; `hub/upload.rs`).
    pub uploads: Option<uploads::UploadOptions>,
    /// Token → the repository patterns it may write.
    pub write_scopes: uploads::WriteScopes,
}

/// A bound endpoint.
pub struct Server {
    listener: std::net::TcpListener,
    hub: Arc<Hub>,
    threads: usize,
    limits: Limits,
}

impl Server {
    /// Binds `opts.listen`.
    pub fn bind(store: Store, opts: &ServeOptions) -> Result<Server, ServeError> {
        let listen_err = |e: std::io::Error| ServeError::Listen {
            addr: opts.listen.clone(),
            reason: e.to_string(),
        };
        let listener = std::net::TcpListener::bind(&opts.listen).map_err(listen_err)?;
        listener.set_nonblocking(true).map_err(listen_err)?;
        let cache = Arc::new(ChunkCache::new(
            store.clone(),
            opts.cache_bytes,
            opts.fetch_threads,
        )?);
        Ok(Server {
            listener,
            hub: Arc::new(
                Hub::new(store, cache, opts.tokens.clone())
                    .with_policy(opts.policy.clone(), opts.upstream.clone())
                    .with_nodes(opts.nodes.clone())
                    .with_readahead(opts.readahead)
                    .with_exposition(opts.metrics.clone())
                    .with_ui(opts.ui.clone())
                    .with_xet(opts.xet.clone())
                    .with_token_names(opts.token_names.clone())
                    .with_uploads(opts.uploads.clone(), opts.write_scopes.clone()),
            ),
            threads: opts.threads.max(1),
            limits: opts.limits.clone(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> String {
        self.listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    }

    /// Serves until the process ends.
    pub fn run(self) -> Result<(), ServeError> {
        repo::usage::start_background_writer();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(self.threads)
            .thread_name("serve")
            .enable_all()
            .build()
            .map_err(ServeError::Runtime)?;
        rt.block_on(async move {
            let listener =
                tokio::net::TcpListener::from_std(self.listener).map_err(ServeError::Runtime)?;
            server::accept_loop(listener, self.hub, self.limits).await;
            Ok(())
        })
    }
}
