//! The state one gc run's steps share: [`GcRun`] (the store through the request-counting
//! backend, the options, the report being filled in, the gc lock) and [`Rev`], one
//! manifest as gc holds it. The steps (`super`, `expire`, `packs`) extend `GcRun` with
//! what they do.

use std::sync::Arc;

use format::manifest::Manifest;
use format::names::RepoId;
use objects::ObjectStore;
use repo::handle::Store;
use repo::lock::Held;
use repo::Result;

use super::options::GcOptions;
use super::report::GcReport;

/// One manifest as gc holds it.
pub(super) struct Rev {
    pub(super) repo: RepoId,
    pub(super) key: String,
    pub(super) bytes: Vec<u8>,
    pub(super) manifest: Manifest,
}

/// One gc run: the store through the request-counting backend, the options, the report
/// being filled in and the gc lock (none in a dry run).
pub(super) struct GcRun<'a> {
    pub(super) backend: Arc<dyn ObjectStore>,
    pub(super) store: Store,
    pub(super) opts: &'a GcOptions,
    pub(super) warn: &'a dyn Fn(String),
    pub(super) report: GcReport,
    pub(super) lock: Option<Held>,
}

impl<'a> GcRun<'a> {
    /// Step 1: takes the gc lock (none in a dry run); `store` is used through `backend`.
    pub(super) fn start(
        store: &Store,
        backend: Arc<dyn ObjectStore>,
        opts: &'a GcOptions,
        warn: &'a dyn Fn(String),
    ) -> Result<Self> {
        let store = store.with_backend(backend.clone());
        let report = GcReport {
            dry_run: opts.dry_run,
            ..Default::default()
        };
        let lock = if opts.dry_run {
            None
        } else {
            Some(Held::gc_lock(backend.clone(), opts.lock_ttl)?)
        };
        Ok(GcRun {
            backend,
            store,
            opts,
            warn,
            report,
            lock,
        })
    }

    /// Confirms the gc lock is still held (always fine in a dry run).
    pub(super) fn check_lock(&self) -> Result<()> {
        self.lock.as_ref().map_or(Ok(()), |l| l.check())
    }

    /// Releases the gc lock and hands back the report.
    pub(super) fn release(self) -> GcReport {
        let GcRun { report, lock, .. } = self;
        drop(lock);
        report
    }
}
