//! The upstream of `modelcas serve --upstream URL`: the endpoint's [`Upstream`] trait
//! implemented with the Hub client (resolving ref names) and `mirror::pull` (bringing a
//! commit into the store, published only when every file is in and checked).
//!
//! The index is the process's [`SharedIndex`] (shared with the uploads' commits). Pulls of different revisions run at once (a large pull does not hold up a small one);
//! `--upstream-jobs` download slots are shared by all of them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use format::{CommitId, RepoId};
use hubclient::{HubClient, HubOptions, ListingLimits, Timeouts};
use hubserve::{Upstream, UpstreamError};
use mirror::slots::Slots;
use mirror::{PullError, PullOptions};
use read::progress::NoProgress;
use repo::Store;

use super::shared_index::SharedIndex;

/// Requests for metadata are retried once: a request waits on it, and a down upstream
/// should fall back to the store quickly.
const META_RETRIES: u32 = 1;
/// Downloads are retried a few times (with backoff from 0.5 s): a pull is worth more.
const PULL_RETRIES: u32 = 3;

/// How the mirror talks to its upstream (`--upstream-redirect-host`,
/// `--upstream-timeout`, `--upstream-min-rate`, `--upstream-max-files`).
#[derive(Clone, Debug)]
pub struct Transport {
    pub redirect_hosts: Vec<String>,
    pub timeout: Duration,
    pub min_rate: u64,
    pub max_files: usize,
}

impl Default for Transport {
    fn default() -> Transport {
        Transport {
            redirect_hosts: Vec::new(),
            timeout: Timeouts::default().total,
            min_rate: Timeouts::default().min_rate,
            max_files: ListingLimits::default().max_files,
        }
    }
}

/// The mirror's upstream Hub.
pub struct HubUpstream {
    meta: HubClient,
    pulls: HubClient,
    store: Store,
    jobs: usize,
    /// Download slots shared by every pull.
    slots: Arc<Slots>,
    index: Arc<SharedIndex>,
}

impl HubUpstream {
    /// A client of `endpoint` that pulls into `store` through `index`.
    pub fn new(
        endpoint: &str,
        token: Option<String>,
        store: Store,
        index: Arc<SharedIndex>,
        jobs: usize,
        t: &Transport,
    ) -> Result<HubUpstream> {
        if jobs == 0 {
            bail!("--upstream-jobs must be at least 1");
        }
        let opts = |retries| HubOptions {
            endpoint: endpoint.to_string(),
            token: token.clone(),
            max_retries: retries,
            timeouts: Timeouts {
                connect: Duration::from_secs(5),
                total: t.timeout,
                min_rate: t.min_rate,
                ..Timeouts::default()
            },
            redirect_hosts: t.redirect_hosts.clone(),
            limits: ListingLimits {
                max_files: t.max_files,
                ..ListingLimits::default()
            },
            ..HubOptions::default()
        };
        let meta = HubClient::new(opts(META_RETRIES)).context("--upstream")?;
        let pulls = HubClient::new(opts(PULL_RETRIES)).context("--upstream")?;
        Ok(HubUpstream {
            meta,
            pulls,
            store,
            jobs,
            slots: Slots::new(jobs),
            index,
        })
    }
}

impl Upstream for HubUpstream {
    fn endpoint(&self) -> &str {
        self.meta.endpoint()
    }

    fn resolve(&self, repo: &RepoId, rev: &str) -> Result<CommitId, UpstreamError> {
        let sha = self
            .meta
            .commit(&repo.to_string(), rev)
            .map_err(hub_error)?;
        CommitId::parse(&sha).map_err(|e| UpstreamError::Unavailable(e.to_string()))
    }

    fn fetch(&self, repo: &RepoId, commit: &CommitId) -> Result<u64, UpstreamError> {
        let index = self
            .index
            .get()
            .map_err(|e| UpstreamError::Unavailable(format!("opening the index: {e:#}")))?;
        let opts = PullOptions {
            repo: repo.clone(),
            revision: commit.to_hex(),
            include: Vec::new(),
            exclude: Vec::new(),
            refs: Vec::new(),
            jobs: self.jobs,
            slots: Some(self.slots.clone()),
            hold_failing_refs: false,
        };
        let pulled = mirror::pull(&self.store, &index, &self.pulls, &opts, &NoProgress);
        self.index.release(index);
        match pulled {
            Ok(r) => Ok(r.bytes_downloaded),
            Err(PullError::Hub(e)) => Err(hub_error(e)),
            Err(e) => Err(UpstreamError::Unavailable(format!("pull failed: {e}"))),
        }
    }
}

/// The endpoint's view of a client error: not found upstream, or unavailable.
fn hub_error(e: hubclient::Error) -> UpstreamError {
    match e {
        hubclient::Error::RepoNotFound { .. } => UpstreamError::RepoNotFound(e.to_string()),
        hubclient::Error::RevisionNotFound { .. } => UpstreamError::RevisionNotFound(e.to_string()),
        e => UpstreamError::Unavailable(e.to_string()),
    }
}

/// The token for the upstream: the first line of `file` that is neither blank nor a `#`
/// comment, else `HF_TOKEN`.
pub fn token(file: Option<&Path>) -> Result<Option<String>> {
    let Some(path) = file else {
        return Ok(hubclient::token(None));
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--upstream-token-file {}", path.display()))?;
    match text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
    {
        Some(t) => Ok(Some(t.to_string())),
        None => bail!("--upstream-token-file {}: no token in it", path.display()),
    }
}
