//! The global options every subcommand shares ([`Ctx`]), opening the store, its node cache
//! and its index from them, and the small helpers the subcommands share (resolving
//! `ORG/NAME@REV`, sizes, recording a run).

use std::path::PathBuf;
use std::sync::Arc;

use ::index::Index;
use anyhow::{bail, Context, Result};
use format::RepoId;
use objects::{LocalStore, ObjectStore};
use repo::Store;

/// Records a completed run of `command` in the store (`runs/<command>`, shown by serve's
/// pages); best-effort: a failure is a warning, never the command's failure.
pub fn record_run(store: &Store, command: &str, started: u64, ok: bool, summary: &str) {
    let r = store::runs::write(
        store.backend().as_ref(),
        command,
        started,
        repo::clock::now_secs(),
        ok,
        summary,
    );
    if let Err(e) = r {
        tracing::warn!("cannot record this {command} run in the store: {e}");
    }
}

/// Whether a store location is across a network (S3, hubs): reads get the node chunk cache
/// and more fetch threads.
pub fn is_remote(location: &str) -> bool {
    location.starts_with("s3://") || objects::HubStore::is_hub_location(location)
}

/// Threads reading chunks in parallel from a remote store (checkout, verify, mount fetches).
pub const REMOTE_READ_THREADS: usize = 16;

/// How long a command waits for another process to release the local index.
const INDEX_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Global options shared by every subcommand.
#[derive(Clone)]
pub struct Ctx {
    pub store_arg: Option<String>,
    pub cache_dir: Option<PathBuf>,
    pub cache_size: Option<String>,
    pub s3: objects::S3Options,
    pub index_dir: Option<PathBuf>,
    pub quiet: bool,
    pub config: crate::config::Config,
    /// Every metric of the process (`crate::metrics::registry`).
    pub metrics: Arc<prometheus_client::registry::Registry>,
}

impl Ctx {
    /// The backend named by `--store` / `MODELCAS_STORE`, or the default directory.
    pub fn backend(&self) -> Result<Arc<dyn ObjectStore>> {
        let loc = match &self.store_arg {
            Some(s) if !s.is_empty() => s.clone(),
            _ => default_store_dir()?.display().to_string(),
        };
        let inner: Arc<dyn ObjectStore> = if loc.starts_with("s3://") {
            Arc::new(objects::S3Store::new(&loc, &self.s3)?)
        } else if objects::HubStore::is_hub_location(&loc) {
            Arc::new(objects::HubStore::new(&loc, self.hub_options()?)?)
        } else if loc.contains("://") {
            bail!("--store {loc}: unknown scheme (use a directory path, s3:// or http(s)://)");
        } else {
            Arc::new(LocalStore::new(PathBuf::from(loc)))
        };
        // Every request shows up in /metrics (a few atomic adds each).
        Ok(Arc::new(repo::MeteredStore::new(inner)))
    }

    /// How to reach hubs: the token (`--hub-token-file`, else `HF_TOKEN`) and how long to
    /// go round their addresses.
    fn hub_options(&self) -> Result<objects::HubOptions> {
        let mut o = objects::HubOptions {
            token_file: self.config.hub_token_file.clone(),
            ca_bundle: std::env::var_os("MODELCAS_CA_BUNDLE").map(PathBuf::from),
            ..Default::default()
        };
        if o.token_file.is_none() {
            o.token = std::env::var("HF_TOKEN")
                .ok()
                .filter(|t| !t.trim().is_empty());
        }
        if let Some(d) = &self.config.hub_retry_for {
            o.retry_for = store::gc::retention::parse_duration(d)
                .with_context(|| format!("--hub-retry-for {d:?}"))?;
        }
        Ok(o)
    }

    /// Whether `--store` names hubs (which only read).
    pub fn store_is_hub(&self) -> bool {
        self.store_arg
            .as_deref()
            .is_some_and(objects::HubStore::is_hub_location)
    }

    /// Opens an existing store (reading commands), with the node-local chunk cache when the
    /// store is remote (or `--cache-dir` asks for one).
    pub fn open(&self) -> Result<Store> {
        let backend = self.backend()?;
        let remote = is_remote(&backend.location());
        let store = Store::open(backend)?;
        if remote {
            // Reads from a remote store wait on the network more than on the CPU: checkout
            // and verify fetch with more threads than cores (a no-op if the pool exists).
            let _ = rayon::ThreadPoolBuilder::new()
                .num_threads(REMOTE_READ_THREADS)
                .build_global();
        }
        if !remote && self.cache_dir.is_none() {
            return Ok(store);
        }
        let size = match &self.cache_size {
            Some(s) => parse_size(s).with_context(|| format!("--cache-size {s:?}"))?,
            None => 10 << 30,
        };
        let dir = match &self.cache_dir {
            Some(d) => d.clone(),
            None => dirs::cache_dir()
                .context("no cache directory for the chunk cache; pass --cache-dir")?
                .join("modelcas/chunks")
                .join(hex_id(&store.config().store_id)),
        };
        Ok(store.with_disk_cache(repo::disk_cache::DiskCache::open(&dir, size)?))
    }

    /// Opens an existing store without the node-local chunk cache (maintenance commands).
    pub fn open_plain(&self) -> Result<Store> {
        Ok(Store::open(self.backend()?)?)
    }

    /// Where the store's index lives.
    pub fn index_dir(&self, store: &Store) -> Result<PathBuf> {
        Ok(match &self.index_dir {
            Some(d) => d.clone(),
            None => dirs::cache_dir()
                .context("no cache directory for the index; pass --index-dir")?
                .join("modelcas/index")
                .join(hex_id(&store.config().store_id)),
        })
    }

    /// The store's index if it can be opened now (not in use by an ingest), for caches
    /// that are optional.
    pub fn try_index(&self, store: &Store) -> Option<Index> {
        let dir = self.index_dir(store).ok()?;
        Index::open(&dir, &store.config().store_id).ok()
    }

    /// Opens the store's index (creating it if needed).
    pub fn index(&self, store: &Store) -> Result<Index> {
        open_index(&self.index_dir(store)?, store)
    }
}

/// Opens the index in `dir` (creating it if needed); while another process holds it,
/// waits for it (up to [`INDEX_WAIT`]) rather than fail.
pub fn open_index(dir: &std::path::Path, store: &Store) -> Result<Index> {
    let start = std::time::Instant::now();
    let mut told = false;
    loop {
        match Index::open(dir, &store.config().store_id) {
            Err(repo::StoreError::IndexBusy(p)) if start.elapsed() < INDEX_WAIT => {
                if !told {
                    tracing::info!(
                        "index {} is in use by another modelcas process; waiting",
                        p.display()
                    );
                    told = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            other => return Ok(other?),
        }
    }
}

/// `20G`, `512M`, `64K` or a number of bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("not a size (use e.g. 20G, 512M or bytes)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| anyhow::anyhow!("size too large"))
}

fn hex_id(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn default_store_dir() -> Result<PathBuf> {
    Ok(dirs::data_dir()
        .context("no data directory; pass --store PATH")?
        .join("modelcas/store"))
}

/// Parses `ORG/NAME@REV` and resolves REV.
pub fn resolve(store: &Store, spec: &str) -> Result<(RepoId, format::CommitId)> {
    let (repo, rev) = format::names::parse_repo_rev(spec)?;
    let commit = store.resolve(&repo, &rev)?;
    Ok((repo, commit))
}
