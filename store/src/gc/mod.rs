//! Garbage collection: expire revisions by policy and reclaim the packs no kept revision
//! needs, safely beside running ingests and mounts. The design (`docs/format/protocols.md`,
//! "Garbage collection") in short:
//!
//! 1. Take the gc lock (`locks/gc-*`): one gc at a time.
//! 2. List live ingest leases, **then** manifests, refs, pins and forwarding records
//!    (`moved/`, one LIST). An ingest whose lease is gone by then has already published its
//!    manifests, so they are seen.
//! 3. Expire revisions ([`retention`]): delete their manifests. Then wait until every
//!    write lease (`pin`, `ref`, `rm`) live at that moment is released, list refs and pins
//!    again, and put back, where the key is still absent, an expired manifest that a ref
//!    now points at or that is now pinned.
//! 4. Liveness: every (pack, offset) a kept manifest references, resolved through the
//!    forwarding records ([`repo::forward`]). Nothing but manifests, records and listings
//!    is read, so a run that finds nothing new costs a LIST per prefix and a GET per
//!    changed object (unchanged ones come from the local index's cache).
//! 5. Phase two, for packs condemned by earlier runs: a pack a manifest references again
//!    is *rescued*; one condemned less than the grace period ago waits; one condemned
//!    before (or just after) a live ingest lease started waits for that ingest; the rest
//!    are deleted. Forwarding records whose old pack was already gone and that no kept
//!    revision follows are deleted.
//! 6. Phase one: packs nothing references are condemned. Packs whose live fraction is
//!    below `rewrite_below` have their live frames copied into new packs, a forwarding
//!    record per old pack says where each frame went, and the old packs are condemned.
//!    Manifests are never written by a rewrite: the manifest gc listed may have been
//!    removed and written again with other files meanwhile.
//! 7. The condemned list is written (`gc/condemned`). Every index sync reads it and stops
//!    deduplicating against condemned packs, so only ingests that started before the mark
//!    (and hold a lease) can still reference them, and phase two waits for those.
//!
//! A gc killed anywhere leaves a consistent store: new packs are written before the
//! forwarding records that name them, records before anything is condemned, and deletion
//! only removes packs that no manifest references after resolution.
//!
//! This module runs the steps in order ([`run`]) and lists revisions; `options` holds how
//! a run behaves ([`GcOptions`]) and `report` what it did ([`GcReport`]), `session` the
//! state one run's steps share (the counting backend, the lock, the report being filled);
//! [`retention`] decides what expires, `expire` does step 3's follow-up, `packs` steps 4
//! to 7 (with `pack_use`, what kept revisions use of each pack), `rewrite` the pack rewrite
//! and its forwarding records, [`state`] the condemned list.

mod expire;
mod options;
mod pack_use;
mod packs;
pub(crate) mod report;
pub mod retention;
mod rewrite;
mod session;
pub mod state;

pub use options::{
    GcFlags, GcOptions, GcSettings, DEFAULT_GRACE, DEFAULT_REWRITE_BELOW, MAX_CLOCK_SKEW,
    TEMPORARY_MIN_AGE,
};
pub use report::{ExpiredRevision, GcReport};

use expire::{restore_wanted, wait_for_writers};
use packs::{liveness, unneeded_forwards};
use report::expired_revision;
use rewrite::load_forwards;
use session::{GcRun, Rev};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use format::layout;
use format::names::{CommitId, RepoId};
use index::Index;
use objects::CountingStore;
use repo::failpoint;
use repo::handle::{decode_manifest, Store};
use repo::lock;
use repo::pack::PackId;
use repo::Result;

use format::gc::Condemned;
use retention::{Candidate, Keep};

/// Runs gc on `store`. `cache` (the local index) keeps manifests between runs so that
/// unchanged ones are not fetched again; it is closed as soon as the manifests are read,
/// so that an ingest on this machine does not wait for the whole run. `warn` receives
/// non-fatal findings.
pub fn run(
    store: &Store,
    cache: Option<Index>,
    opts: &GcOptions,
    warn: &dyn Fn(String),
) -> Result<GcReport> {
    let started = Instant::now();
    opts.retention.check()?;
    let counted = Arc::new(CountingStore::new(store.backend().clone()));
    let mut gc = GcRun::start(store, counted.clone(), opts, warn)?;

    // 2. Leases first, then revisions. Times are the store's, its clock read first.
    let now = lock::store_now_ms(gc.backend.as_ref())?;
    let leases = gc.live_ingest_leases(now)?;
    let (mut kept, expired) = gc.list_revisions(cache.as_ref())?;
    let forwards = load_forwards(gc.backend.as_ref(), cache.as_ref(), &mut gc.report)?;
    drop(cache);
    failpoint::pause("gc-after-listing");

    // 3. Expire.
    gc.expire(expired, &mut kept)?;
    gc.report.revisions_kept = kept.len();

    // 4. Liveness, through the forwarding records.
    let live = liveness(&kept, &forwards.forwards)?;
    gc.report.live_bytes = live.uses.values().map(|u| u.bytes).sum();

    // 5. Phase two: delete what was condemned long enough ago.
    let mut listed = gc.list_packs()?;
    let unneeded = unneeded_forwards(&forwards, &listed, &live.needed);
    let old_state = state::read(gc.backend.as_ref())?;
    let (new_state, to_delete) = gc.sort_condemned(&old_state, &listed, &live.uses, &leases, now);
    failpoint::pause("gc-before-delete");
    gc.delete_condemned(&unneeded, &to_delete, &mut listed)?;

    // 6. Phase one: condemn unreferenced packs, rewrite mostly dead ones.
    let pending: HashSet<PackId> = new_state.condemned.iter().map(|c| c.pack).collect();
    let (mut condemn, rewrite) = gc.condemn_or_rewrite(&listed, &pending, &live.uses);
    gc.rewrite(&rewrite, &live.uses, &forwards, &mut condemn)?;

    // Leftovers of interrupted writes.
    gc.remove_temporaries()?;

    // 7. Write the condemned list.
    failpoint::pause("gc-before-state");
    gc.write_condemned(&old_state, new_state, condemn)?;

    gc.final_figures(&to_delete)?;
    let mut report = gc.release();
    report.requests = counted.requests();
    report.duration_ms = started.elapsed().as_millis() as u64;
    crate::metrics::gc_finished(&report);
    Ok(report)
}

impl GcRun<'_> {
    /// Step 2: the ingest leases live at `now` (the store's time); stale ones are removed.
    fn live_ingest_leases(&mut self, now: u64) -> Result<Vec<lock::Listed>> {
        let mut leases = Vec::new();
        for lease in lock::list(self.backend.as_ref(), "ingest")? {
            if lease.is_stale(now) {
                if !self.opts.dry_run {
                    self.backend.delete(&lease.key)?;
                    self.report.stale_locks_removed += 1;
                }
            } else {
                leases.push(lease);
            }
        }
        Ok(leases)
    }

    /// Step 2: every repository's manifests, split into kept and expired by retention.
    fn list_revisions(&mut self, cache: Option<&Index>) -> Result<(Vec<Rev>, Vec<Rev>)> {
        let repos = self.store.repos()?;
        self.report.repos = repos.len();
        let store_now = self.backend.now()?;
        let mut kept: Vec<Rev> = Vec::new();
        let mut expired: Vec<Rev> = Vec::new();
        for repo in &repos {
            let (k, e) = revisions(
                &self.store,
                cache,
                repo,
                store_now,
                self.opts,
                &mut self.report,
            )?;
            kept.extend(k);
            expired.extend(e);
        }
        Ok((kept, expired))
    }

    /// Step 3: deletes the expired manifests, waits for the writers live then and puts
    /// back into `kept` those a ref or pin now wants. A dry run only reports them.
    fn expire(&mut self, expired: Vec<Rev>, kept: &mut Vec<Rev>) -> Result<()> {
        if !self.opts.dry_run && !expired.is_empty() {
            self.check_lock()?;
            for h in &expired {
                self.backend.delete(&h.key)?;
            }
            failpoint::pause("gc-after-expire");
            wait_for_writers(self.backend.as_ref(), &mut self.report, self.warn)?;
            self.check_lock()?;
            restore_wanted(&self.store, expired, kept, &mut self.report, self.warn)?;
        } else {
            self.report.expired = expired
                .iter()
                .map(|h| expired_revision(&h.manifest))
                .collect();
        }
        Ok(())
    }

    /// The packs stored after the run; in a dry run, those that would remain once
    /// `to_delete` was deleted.
    fn final_figures(&mut self, to_delete: &[Condemned]) -> Result<()> {
        let after = self.backend.list(layout::PACKS_PREFIX)?;
        let report = &mut self.report;
        report.packs_stored = after.len();
        report.bytes_stored = after.iter().map(|o| o.size).sum();
        if self.opts.dry_run {
            // Nothing was deleted: show what would remain.
            let deleted: u64 = to_delete.iter().map(|c| c.size).sum();
            report.packs_stored -= to_delete.len().min(report.packs_stored);
            report.bytes_stored = report.bytes_stored.saturating_sub(deleted);
        }
        Ok(())
    }
}

/// What retention decides for each revision of `repo` under each of `opts`, now: the
/// decision [`run`] makes (a dry run too) with those options, with the reason each kept
/// revision is kept (`None`: expired), one per options in their order. Reads what gc
/// reads (the manifests, refs, pins, last-use records) once, changes nothing. Revisions
/// in no particular order, each with its total size.
pub fn verdicts(store: &Store, repo: &RepoId, opts: &[&GcOptions]) -> Result<Vec<Verdicts>> {
    for o in opts {
        o.retention.check()?;
    }
    let now = store.backend().now()?;
    let loaded = load_repo(store, None, repo, &mut GcReport::default())?;
    let keeps: Vec<HashMap<CommitId, Keep>> =
        opts.iter().map(|o| loaded.decide(repo, now, o)).collect();
    Ok(loaded
        .held
        .iter()
        .map(|h| {
            let commit = h.manifest.commit;
            Verdicts {
                commit,
                bytes: h.manifest.total_size(),
                keep: keeps.iter().map(|k| k.get(&commit).copied()).collect(),
            }
        })
        .collect())
}

/// Retention's decisions for one revision ([`verdicts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdicts {
    pub commit: CommitId,
    /// Total size of its files.
    pub bytes: u64,
    /// Per options asked, in their order: why it is kept, or `None`: it expires.
    pub keep: Vec<Option<Keep>>,
}

/// Loads a repository's manifests (through the cache) and splits them by retention.
fn revisions(
    store: &Store,
    cache: Option<&Index>,
    repo: &RepoId,
    store_now: SystemTime,
    opts: &GcOptions,
    report: &mut GcReport,
) -> Result<(Vec<Rev>, Vec<Rev>)> {
    let (held, keep) = decide_repo(store, cache, repo, store_now, opts, report)?;
    let (kept, expired) = held
        .into_iter()
        .partition(|h| keep.contains_key(&h.manifest.commit));
    Ok((kept, expired))
}

/// A repository's manifests (through the cache), and retention's decision: the commits
/// kept, each with its reason.
fn decide_repo(
    store: &Store,
    cache: Option<&Index>,
    repo: &RepoId,
    store_now: SystemTime,
    opts: &GcOptions,
    report: &mut GcReport,
) -> Result<(Vec<Rev>, HashMap<CommitId, Keep>)> {
    let loaded = load_repo(store, cache, repo, report)?;
    let keep = loaded.decide(repo, store_now, opts);
    Ok((loaded.held, keep))
}

/// What retention looks at in one repository.
struct Loaded {
    held: Vec<Rev>,
    /// Last read or ingested (a manifest's write), by the store's clock.
    last_use: HashMap<CommitId, SystemTime>,
    /// Commits with a last-use record (read at least once).
    used: HashSet<CommitId>,
    /// When each manifest was written, by the store's clock in ms.
    written: HashMap<CommitId, u64>,
    referenced: HashSet<CommitId>,
    pins: HashSet<CommitId>,
}

/// Reads a repository's manifests (through the cache), last-use records, refs and pins.
fn load_repo(
    store: &Store,
    cache: Option<&Index>,
    repo: &RepoId,
    report: &mut GcReport,
) -> Result<Loaded> {
    let backend = store.backend();
    let prefix = layout::manifests_prefix(repo);
    let mut held = Vec::new();
    // Last read or ingested (a manifest's write), by the store's clock.
    let mut last_use = repo::usage::last_used(store, repo)?;
    let used: HashSet<CommitId> = last_use.keys().copied().collect();
    // When each manifest was written, by the store's clock (for manifests that do not say).
    let mut written: HashMap<CommitId, u64> = HashMap::new();
    for obj in backend.list(&prefix)? {
        let Ok(commit) = CommitId::parse(&obj.key[prefix.len()..]) else {
            continue;
        };
        if let Some(at) = obj.modified {
            let e = last_use.entry(commit).or_insert(at);
            *e = (*e).max(at);
            written.insert(commit, repo::clock::to_ms(at));
        }
        let cached = match cache {
            Some(idx) if !obj.tag.is_empty() => idx.cached_object(&obj.key, &obj.tag)?,
            _ => None,
        };
        let bytes = match cached {
            Some(b) => {
                report.manifests_cached += 1;
                b
            }
            None => {
                let b = match backend.get(&obj.key) {
                    Ok(b) => b,
                    Err(objects::ObjectError::NotFound(_)) => continue, // removed meanwhile
                    Err(e) => return Err(e.into()),
                };
                report.manifests_fetched += 1;
                if let Some(idx) = cache {
                    if !obj.tag.is_empty() {
                        idx.cache_object(&obj.key, &obj.tag, &b)?;
                    }
                }
                b
            }
        };
        // A manifest gc cannot read makes every pack potentially live: stop.
        let manifest = decode_manifest(&obj.key, &bytes)?;
        held.push(Rev {
            repo: repo.clone(),
            key: obj.key,
            bytes,
            manifest,
        });
    }
    let referenced: HashSet<CommitId> = store.refs(repo)?.into_values().collect();
    let pins: HashSet<CommitId> = store.pins(repo)?.into_iter().collect();
    Ok(Loaded {
        held,
        last_use,
        used,
        written,
        referenced,
        pins,
    })
}

impl Loaded {
    /// The commits `opts` keeps, each with its reason, at `store_now`.
    fn decide(
        &self,
        repo: &RepoId,
        store_now: SystemTime,
        opts: &GcOptions,
    ) -> HashMap<CommitId, Keep> {
        let mut pinned = self.pins.clone();
        pinned.extend(
            opts.protected
                .iter()
                // As the Hub compares ids: a lock on `Org/Model` protects `org/model`.
                .filter(|(r, _)| r.same_repo(repo))
                .map(|(_, c)| *c),
        );
        let idle = |c: &CommitId| {
            let at = self.last_use.get(c)?;
            Some(store_now.duration_since(*at).map_or(0, |d| d.as_secs()))
        };
        let now_ms = repo::clock::to_ms(store_now);
        let candidates: Vec<Candidate> = self
            .held
            .iter()
            .map(|h| {
                let m = &h.manifest;
                let order = m.order(self.written.get(&m.commit).copied());
                Candidate {
                    commit: m.commit,
                    order,
                    age_secs: now_ms.saturating_sub(order.0) / 1000,
                    idle_secs: idle(&m.commit),
                    used: self.used.contains(&m.commit),
                }
            })
            .collect();
        let (keep, _) = retention::decide(
            &opts.retention.policy(repo),
            &candidates,
            &self.referenced,
            &pinned,
        );
        keep.into_iter().collect()
    }
}
