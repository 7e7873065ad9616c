//! Garbage collection: expire revisions by policy and reclaim the packs no kept revision
//! needs, safely beside running ingests and mounts. The design (`docs/FORMAT.md`,
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
//!    forwarding records ([`crate::forward`]). Nothing but manifests, records and listings
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

mod expire;
pub mod retention;
mod rewrite;
pub mod state;

use expire::{restore_wanted, wait_for_writers};
use rewrite::{forward_record, load_forwards, rewrite_packs, AllForwards};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::backend::{CountingStore, ObjectStore, Requests};
use crate::codec::{self, Kind};
use crate::failpoint;
use crate::forward::{self, Forwards};
use crate::index::Index;
use crate::layout;
use crate::lock::{self, Held};
use crate::manifest::Manifest;
use crate::names::{CommitId, RepoId};
use crate::pack::{self, FooterEntry, PackFooter, PackId};
use crate::repo::{decode_manifest, Store};
use crate::{Result, StoreError};

use retention::{Candidate, Keep, Retention};
use state::{Condemned, GcState};

/// Default grace period between condemning a pack and deleting it.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);
/// Default: rewrite packs less than 80 % live.
pub const DEFAULT_REWRITE_BELOW: f64 = 0.8;
/// Marks and lease starts are both the object store's time; this allows for its
/// resolution (whole seconds) and for clocks differing between the nodes of a distributed
/// store: a lease that started up to this long after a pack was marked still protects it.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// gc confirms its lock before every this many pack deletions.
const DELETE_BATCH: usize = 64;
/// Leftover temporaries younger than this are never removed (writes in progress).
pub const TEMPORARY_MIN_AGE: Duration = Duration::from_secs(3600);

/// How a gc run behaves.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Which revisions to keep.
    pub retention: Retention,
    /// Time between condemning a pack and deleting it.
    pub grace: Duration,
    /// Rewrite packs whose live fraction is below this (0 disables rewriting; 1 rewrites
    /// every pack with any dead byte).
    pub rewrite_below: f64,
    /// Report only; change nothing, take no lock.
    pub dry_run: bool,
    /// Time to live of the gc lock.
    pub lock_ttl: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            retention: Retention::default(),
            grace: DEFAULT_GRACE,
            rewrite_below: DEFAULT_REWRITE_BELOW,
            dry_run: false,
            lock_ttl: lock::default_ttl(),
        }
    }
}

/// A revision gc expired.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ExpiredRevision {
    /// `org/name`.
    pub repo: String,
    /// Commit sha.
    pub commit: String,
    /// When it was ingested (seconds since the epoch).
    pub ingested_at: u64,
    /// Total size of its files.
    pub bytes: u64,
}

/// What a run did (or, with `dry_run`, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GcReport {
    /// Nothing was changed.
    pub dry_run: bool,
    /// Repositories seen.
    pub repos: usize,
    /// Revisions kept.
    pub revisions_kept: usize,
    /// Revisions expired this run.
    pub expired: Vec<ExpiredRevision>,
    /// Expired manifests put back because a ref or pin appeared meanwhile.
    pub restored: Vec<ExpiredRevision>,
    /// Pin, ref and rm commands gc waited for before listing refs and pins again.
    pub writers_waited_for: usize,
    /// Manifests fetched from the bucket.
    pub manifests_fetched: usize,
    /// Manifests taken from the local cache.
    pub manifests_cached: usize,
    /// Bytes of chunk frames kept revisions reference.
    pub live_bytes: u64,
    /// Packs condemned this run (nothing references them).
    pub packs_condemned: usize,
    /// Their bytes.
    pub bytes_condemned: u64,
    /// Packs rewritten this run (their live chunks copied, the old pack condemned).
    pub packs_rewritten: usize,
    /// Bytes of the packs rewritten.
    pub bytes_rewritten: u64,
    /// Bytes of the new packs written by rewrites.
    pub rewrite_bytes_written: u64,
    /// Chunks copied by rewrites.
    pub chunks_copied: u64,
    /// Forwarding records in the store when the run started.
    pub forwards: usize,
    /// Forwarding records written (one per rewritten pack).
    pub forwards_written: usize,
    /// Forwarding records deleted (their old pack gone, no kept revision follows them).
    pub forwards_deleted: usize,
    /// Condemned packs referenced again (by an ingest that started before the mark).
    pub packs_rescued: usize,
    /// Packs deleted this run.
    pub packs_deleted: usize,
    /// Dead chunks in the packs deleted.
    pub chunks_deleted: u64,
    /// Bytes freed by deleting packs this run.
    pub bytes_reclaimed: u64,
    /// Condemned packs still waiting (grace period or a running ingest).
    pub packs_waiting: usize,
    /// Their bytes.
    pub bytes_waiting: u64,
    /// Of those, packs held back by a live ingest lease.
    pub packs_waiting_on_ingest: usize,
    /// Leftover temporaries removed.
    pub temporaries_removed: usize,
    /// Stale locks and leases removed.
    pub stale_locks_removed: usize,
    /// Packs in the bucket after the run.
    pub packs_stored: usize,
    /// Bytes of packs in the bucket after the run.
    pub bytes_stored: u64,
    /// Requests made to the object store.
    pub requests: Requests,
    /// Wall time.
    pub duration_ms: u64,
}

/// One manifest as gc holds it.
struct Rev {
    repo: RepoId,
    key: String,
    bytes: Vec<u8>,
    manifest: Manifest,
}

/// What kept manifests use of one pack: offset → (chunk id, frame length, raw length).
#[derive(Default)]
struct PackUse {
    frames: BTreeMap<u32, ([u8; 32], u32, u32)>,
    bytes: u64,
}

impl PackUse {
    /// Size of a pack holding exactly these frames (header, frames, footer, trailer).
    fn size_if_only_live(&self) -> u64 {
        let mut at = pack::PACK_HEADER_LEN as u32;
        let entries: Vec<FooterEntry> = self
            .frames
            .values()
            .map(|(id, frame_len, raw_len)| {
                let e = FooterEntry {
                    id: *id,
                    offset: at,
                    frame_len: *frame_len,
                    raw_len: *raw_len,
                };
                at = at.saturating_add(*frame_len);
                e
            })
            .collect();
        let footer = codec::encode(Kind::PackFooter, &PackFooter { entries }, false);
        at as u64 + footer.len() as u64 + pack::PACK_TRAILER_LEN as u64
    }
}

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
    Ok(report)
}

/// One gc run: the store through the request-counting backend, the options, the report
/// being filled in and the gc lock (none in a dry run).
struct GcRun<'a> {
    backend: Arc<dyn ObjectStore>,
    store: Store,
    opts: &'a GcOptions,
    warn: &'a dyn Fn(String),
    report: GcReport,
    lock: Option<Held>,
}

/// What kept revisions use, after forwarding.
struct Liveness {
    /// Per pack, the frames kept manifests reference (where they are now).
    uses: HashMap<PackId, PackUse>,
    /// Packs whose forwarding record was followed.
    needed: HashSet<PackId>,
}

impl<'a> GcRun<'a> {
    /// Step 1: takes the gc lock (none in a dry run); `store` is used through `backend`.
    fn start(
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
    fn check_lock(&self) -> Result<()> {
        self.lock.as_ref().map_or(Ok(()), |l| l.check())
    }

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
        let mut kept: Vec<Rev> = Vec::new();
        let mut expired: Vec<Rev> = Vec::new();
        for repo in &repos {
            let (k, e) = revisions(&self.store, cache, repo, self.opts, &mut self.report)?;
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

    /// Step 5: the packs in the bucket and their sizes.
    fn list_packs(&self) -> Result<BTreeMap<PackId, u64>> {
        let mut listed: BTreeMap<PackId, u64> = BTreeMap::new();
        for obj in self.backend.list(layout::PACKS_PREFIX)? {
            if let Some(id) = layout::parse_pack_key(&obj.key) {
                listed.insert(id, obj.size);
            }
        }
        Ok(listed)
    }

    /// Step 5: sorts the condemned list read at the start into the packs still waiting
    /// (the new list) and those to delete; rescued ones are dropped from both.
    fn sort_condemned(
        &mut self,
        old_state: &GcState,
        listed: &BTreeMap<PackId, u64>,
        uses: &HashMap<PackId, PackUse>,
        leases: &[lock::Listed],
        now: u64,
    ) -> (GcState, Vec<Condemned>) {
        let report = &mut self.report;
        let mut new_state = GcState::default();
        let mut to_delete = Vec::new();
        let grace_ms = self.opts.grace.as_millis() as u64;
        let skew_ms = MAX_CLOCK_SKEW.as_millis() as u64;
        for c in &old_state.condemned {
            if !listed.contains_key(&c.pack) {
                continue; // deleted by an earlier run that died before writing the list
            }
            if uses.contains_key(&c.pack) {
                report.packs_rescued += 1;
                continue;
            }
            let waiting_on_ingest = leases
                .iter()
                .any(|l| l.started_ms() <= c.marked_ms.saturating_add(skew_ms));
            if now < c.marked_ms.saturating_add(grace_ms) || waiting_on_ingest {
                report.packs_waiting += 1;
                report.bytes_waiting += c.size;
                if waiting_on_ingest {
                    report.packs_waiting_on_ingest += 1;
                }
                new_state.condemned.push(c.clone());
                continue;
            }
            to_delete.push(c.clone());
        }
        (new_state, to_delete)
    }

    /// Step 5: deletes the unneeded forwarding records, then the packs `to_delete` (also
    /// removed from `listed`), confirming the lock first and every [`DELETE_BATCH`] packs.
    fn delete_condemned(
        &mut self,
        unneeded: &[PackId],
        to_delete: &[Condemned],
        listed: &mut BTreeMap<PackId, u64>,
    ) -> Result<()> {
        let dry_run = self.opts.dry_run;
        if !dry_run && (!to_delete.is_empty() || !unneeded.is_empty()) {
            self.check_lock()?;
        }
        for p in unneeded {
            if !dry_run {
                self.backend.delete(&layout::moved_key(p))?;
            }
            self.report.forwards_deleted += 1;
        }
        for (i, c) in to_delete.iter().enumerate() {
            if !dry_run {
                if i % DELETE_BATCH == 0 {
                    self.check_lock()?;
                }
                self.backend.delete(&layout::pack_key(&c.pack))?;
            }
            listed.remove(&c.pack);
            self.report.packs_deleted += 1;
            self.report.bytes_reclaimed += c.size;
            self.report.chunks_deleted += c.chunks.saturating_sub(c.live_chunks) as u64;
        }
        Ok(())
    }

    /// Step 6: of the packs `listed` and not `pending`, those nothing references are
    /// condemned (returned marked 0) and those below `rewrite_below` live are returned to
    /// be rewritten.
    fn condemn_or_rewrite(
        &mut self,
        listed: &BTreeMap<PackId, u64>,
        pending: &HashSet<PackId>,
        uses: &HashMap<PackId, PackUse>,
    ) -> (Vec<Condemned>, Vec<(PackId, u64)>) {
        let mut condemn: Vec<Condemned> = Vec::new();
        let mut rewrite: Vec<(PackId, u64)> = Vec::new();
        for (id, size) in listed {
            if pending.contains(id) {
                continue;
            }
            match uses.get(id) {
                None => {
                    let key = layout::pack_key(id);
                    let chunks = match pack::read_footer(self.backend.as_ref(), &key) {
                        Ok(f) => f.entries.len() as u32,
                        Err(e) => {
                            (self.warn)(format!("pack {}: {e}", id.to_hex()));
                            0
                        }
                    };
                    condemn.push(Condemned {
                        pack: *id,
                        marked_ms: 0,
                        size: *size,
                        chunks,
                        live_chunks: 0,
                    });
                    self.report.packs_condemned += 1;
                    self.report.bytes_condemned += size;
                }
                Some(u) => {
                    let live_size = u.size_if_only_live();
                    let below = (live_size as f64) < self.opts.rewrite_below * *size as f64;
                    if live_size < *size && below {
                        rewrite.push((*id, *size));
                    }
                }
            }
        }
        (condemn, rewrite)
    }

    /// Step 6: copies the live frames of the packs to `rewrite`, writes their forwarding
    /// records, then adds the old packs to `condemn`. A dry run only reports them.
    fn rewrite(
        &mut self,
        rewrite: &[(PackId, u64)],
        uses: &HashMap<PackId, PackUse>,
        forwards: &AllForwards,
        condemn: &mut Vec<Condemned>,
    ) -> Result<()> {
        if rewrite.is_empty() {
            return Ok(());
        }
        if self.opts.dry_run {
            self.report.packs_rewritten = rewrite.len();
            self.report.bytes_rewritten = rewrite.iter().map(|r| r.1).sum();
            return Ok(());
        }
        self.check_lock()?;
        let moved = rewrite_packs(&self.store, rewrite, uses, &mut self.report)?;
        // Manifests are never rewritten: the new places are recorded, before the old
        // packs are condemned.
        failpoint::pause("gc-before-forwards");
        for (old, frames) in &moved {
            let rec = forward_record(old, frames, &uses[old], forwards.records.get(old));
            self.check_lock()?;
            self.backend
                .put(&layout::moved_key(old), &forward::encode(&rec))?;
            self.report.forwards_written += 1;
        }
        for (id, size) in rewrite {
            let u = &uses[id];
            let chunks = u.frames.len() as u32;
            condemn.push(Condemned {
                pack: *id,
                marked_ms: 0,
                size: *size,
                chunks,
                live_chunks: chunks,
            });
        }
        Ok(())
    }

    /// Removes leftovers of interrupted writes older than the grace period (and at least
    /// [`TEMPORARY_MIN_AGE`]).
    fn remove_temporaries(&mut self) -> Result<()> {
        let min_age = self.opts.grace.max(TEMPORARY_MIN_AGE);
        for t in self.backend.temporaries(min_age)? {
            if !self.opts.dry_run {
                self.backend.remove_temporary(&t)?;
            }
            self.report.temporaries_removed += 1;
        }
        Ok(())
    }

    /// Step 7: writes the condemned list (the packs still waiting, then `condemn` marked
    /// now) if it changed.
    fn write_condemned(
        &mut self,
        old_state: &GcState,
        new_state: GcState,
        condemn: Vec<Condemned>,
    ) -> Result<()> {
        let changed = !condemn.is_empty() || new_state.condemned != old_state.condemned;
        if !self.opts.dry_run && changed {
            self.check_lock()?;
            write_marked(self.backend.as_ref(), new_state, condemn)?;
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

    /// Releases the gc lock and hands back the report.
    fn release(self) -> GcReport {
        let GcRun { report, lock, .. } = self;
        drop(lock);
        report
    }
}

/// Step 4: every (pack, offset) the `kept` manifests reference, resolved through the
/// forwarding records: a chunk a record moved is live where it was copied, and the
/// records followed are needed.
fn liveness(kept: &[Rev], forwards: &Forwards) -> Result<Liveness> {
    let mut uses: HashMap<PackId, PackUse> = HashMap::new();
    let mut needed: HashSet<PackId> = HashSet::new();
    for h in kept {
        for f in &h.manifest.files {
            for c in &f.chunks {
                let Some(p) = h.manifest.packs.get(c.pack as usize) else {
                    return Err(StoreError::CorruptObject {
                        key: h.key.clone(),
                        reason: format!("{}: chunk points past the pack table", f.path),
                    });
                };
                let (p, offset) = forwards.follow(*p, c.offset, &c.id, c.frame_len, &mut |q| {
                    needed.insert(q);
                });
                let u = uses.entry(p).or_default();
                if u.frames
                    .insert(offset, (c.id, c.frame_len, c.raw_len))
                    .is_none()
                {
                    u.bytes += c.frame_len as u64;
                }
            }
        }
    }
    Ok(Liveness { uses, needed })
}

/// Step 5: the forwarding records whose old pack is already gone and that no kept
/// manifest follows: never needed again (FORMAT.md, "Forwarding records").
fn unneeded_forwards(
    forwards: &AllForwards,
    listed: &BTreeMap<PackId, u64>,
    needed: &HashSet<PackId>,
) -> Vec<PackId> {
    forwards
        .records
        .keys()
        .filter(|p| !listed.contains_key(p) && !needed.contains(p))
        .copied()
        .collect()
}

/// Writes the condemned list with the packs of `condemn` marked now, by the store's clock.
/// The mark must not precede the write by more than half of [`MAX_CLOCK_SKEW`] (an ingest
/// whose sync ran before the write may use those packs, and only a lease started by the
/// mark plus that allowance keeps them): if the write's own modification time shows that
/// it landed later (gc was paused in between), the marks are moved to it and the list is
/// written again.
fn write_marked(
    backend: &dyn ObjectStore,
    mut state: GcState,
    condemn: Vec<Condemned>,
) -> Result<()> {
    let first_new = state.condemned.len();
    state.condemned.extend(condemn);
    let mut marked = lock::store_now_ms(backend)?;
    let slack = MAX_CLOCK_SKEW.as_millis() as u64 / 2;
    for _ in 0..4 {
        for c in &mut state.condemned[first_new..] {
            c.marked_ms = marked;
        }
        state.written_ms = marked;
        state::write(backend, &state)?;
        let landed = backend
            .stat(layout::CONDEMNED_KEY)?
            .and_then(|m| m.modified)
            .map(crate::clock::to_ms)
            .ok_or_else(|| StoreError::Backend {
                op: "head",
                key: layout::CONDEMNED_KEY.into(),
                reason: "no modification time after writing it".into(),
            })?;
        if landed <= marked.saturating_add(slack) {
            return Ok(());
        }
        marked = landed;
    }
    Err(StoreError::Backend {
        op: "put",
        key: layout::CONDEMNED_KEY.into(),
        reason: "each write landed long after its mark (gc keeps being paused)".into(),
    })
}

fn expired_revision(m: &Manifest) -> ExpiredRevision {
    ExpiredRevision {
        repo: m.repo.to_string(),
        commit: m.commit.to_hex(),
        ingested_at: m.ingested_at,
        bytes: m.total_size(),
    }
}

/// Loads a repository's manifests (through the cache) and splits them by retention.
fn revisions(
    store: &Store,
    cache: Option<&Index>,
    repo: &RepoId,
    opts: &GcOptions,
    report: &mut GcReport,
) -> Result<(Vec<Rev>, Vec<Rev>)> {
    let backend = store.backend();
    let prefix = layout::manifests_prefix(repo);
    let mut held = Vec::new();
    for obj in backend.list(&prefix)? {
        if CommitId::parse(&obj.key[prefix.len()..]).is_err() {
            continue;
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
                    Err(StoreError::NotFound(_)) => continue, // removed meanwhile
                    Err(e) => return Err(e),
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
    let pinned: HashSet<CommitId> = store.pins(repo)?.into_iter().collect();
    let candidates: Vec<Candidate> = held
        .iter()
        .map(|h| Candidate {
            commit: h.manifest.commit,
            ingested_at: h.manifest.ingested_at,
        })
        .collect();
    let (keep, _) = retention::decide(
        &opts.retention.policy(repo),
        &candidates,
        &referenced,
        &pinned,
        crate::manifest::now_secs(),
    );
    let keep: HashMap<CommitId, Keep> = keep.into_iter().collect();
    let (kept, expired) = held
        .into_iter()
        .partition(|h| keep.contains_key(&h.manifest.commit));
    Ok((kept, expired))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemoryStore;
    use crate::forward::{MovedFrame, MovedRecord};
    use crate::lock::{Listed, LockObject};
    use crate::manifest::{ChunkRef, FileEntry};
    use crate::repo::CreateOptions;

    fn chunk(id: u8, pack: u32, offset: u32, frame_len: u32) -> ChunkRef {
        ChunkRef {
            id: [id; 32],
            pack,
            offset,
            frame_len,
            raw_len: frame_len - 16,
        }
    }

    /// A kept revision whose one file has `chunks`, in packs `packs`.
    fn rev(packs: Vec<PackId>, chunks: Vec<ChunkRef>) -> Rev {
        let size = chunks.iter().map(|c| c.raw_len as u64).sum();
        let repo = RepoId::parse("org/model").unwrap();
        Rev {
            repo: repo.clone(),
            key: "manifests/org/model/x".into(),
            bytes: Vec::new(),
            manifest: Manifest {
                repo,
                commit: CommitId([9; 20]),
                ingested_at: 1,
                source: "plain".into(),
                packs,
                files: vec![FileEntry {
                    path: "w.bin".into(),
                    size,
                    sha256: [0; 32],
                    executable: false,
                    chunks,
                }],
            },
        }
    }

    #[test]
    fn liveness_follows_forwarding_records() {
        let (old, new) = (PackId([1; 32]), PackId([2; 32]));
        // Frames at 16 (chunk 1) and 116 (chunk 2) of `old`; only chunk 1 was moved.
        let rec = MovedRecord {
            pack: old,
            written_ms: 0,
            targets: vec![new],
            frames: vec![MovedFrame {
                offset: 16,
                id: [1; 32],
                target: 0,
                new_offset: 40,
                frame_len: 100,
            }],
        };
        let mut forwards = Forwards::default();
        forwards.insert(&rec);
        let kept = vec![rev(
            vec![old],
            vec![chunk(1, 0, 16, 100), chunk(2, 0, 116, 50)],
        )];
        let live = liveness(&kept, &forwards).unwrap();
        // Chunk 1 is live where it was copied, chunk 2 where the manifest says.
        assert_eq!(live.uses[&new].frames.keys().collect::<Vec<_>>(), [&40]);
        assert_eq!(live.uses[&new].frames[&40], ([1; 32], 100, 84));
        assert_eq!(live.uses[&new].bytes, 100);
        assert_eq!(live.uses[&old].frames.keys().collect::<Vec<_>>(), [&116]);
        assert_eq!(live.uses[&old].bytes, 50);
        assert_eq!(live.needed, HashSet::from([old]));

        // A reference whose chunk id differs from the record's entry stays put.
        let kept = vec![rev(vec![old], vec![chunk(7, 0, 16, 100)])];
        let live = liveness(&kept, &forwards).unwrap();
        assert!(!live.uses.contains_key(&new));
        assert_eq!(live.uses[&old].frames[&16].0, [7; 32]);
    }

    #[test]
    fn liveness_rejects_a_chunk_past_the_pack_table() {
        let kept = vec![rev(vec![PackId([1; 32])], vec![chunk(1, 1, 16, 100)])];
        let err = liveness(&kept, &Forwards::default()).err().unwrap();
        assert!(matches!(err, StoreError::CorruptObject { .. }), "{err}");
    }

    fn lease(started_ms: u64) -> Listed {
        Listed {
            key: "locks/ingest-test".into(),
            lock: LockObject {
                kind: "ingest".into(),
                host: "elsewhere".into(),
                pid: 1,
                started_ms,
                refreshed_ms: started_ms,
                ttl_ms: 60_000,
            },
            modified_ms: started_ms,
        }
    }

    fn condemned(n: u8, marked_ms: u64) -> Condemned {
        Condemned {
            pack: PackId([n; 32]),
            marked_ms,
            size: 1000 + n as u64,
            chunks: 10,
            live_chunks: 0,
        }
    }

    #[test]
    fn phase_two_keeps_packs_marked_before_a_lease_started() {
        let mem: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let store = Store::open_or_create(mem.clone(), CreateOptions::default()).unwrap();
        let opts = GcOptions {
            grace: Duration::from_secs(60),
            ..Default::default()
        };
        let warn = |_: String| {};
        let mut gc = GcRun {
            backend: mem,
            store,
            opts: &opts,
            warn: &warn,
            report: GcReport::default(),
            lock: None,
        };
        let skew = MAX_CLOCK_SKEW.as_millis() as u64;
        let started = 10_000_000;
        let now = started + 3_600_000; // every grace period is over
        let old_state = GcState {
            condemned: vec![
                condemned(1, started - skew),     // lease started within the skew: waits
                condemned(2, started - skew - 1), // marked before the lease: deleted
                condemned(3, started - skew - 1), // referenced again: rescued
                condemned(4, started - skew - 1), // already gone: dropped
                condemned(5, now - 1000),         // grace period not over: waits
            ],
            written_ms: 0,
        };
        let listed: BTreeMap<PackId, u64> = [1, 2, 3, 5].map(|n| (PackId([n; 32]), 1000)).into();
        let uses = HashMap::from([(PackId([3; 32]), PackUse::default())]);
        let (new_state, to_delete) =
            gc.sort_condemned(&old_state, &listed, &uses, &[lease(started)], now);
        let packs = |v: &[Condemned]| v.iter().map(|c| c.pack.0[0]).collect::<Vec<_>>();
        assert_eq!(packs(&new_state.condemned), [1, 5]);
        assert_eq!(new_state.condemned[0], old_state.condemned[0]); // mark kept
        assert_eq!(packs(&to_delete), [2]);
        assert_eq!(gc.report.packs_rescued, 1);
        assert_eq!(gc.report.packs_waiting, 2);
        assert_eq!(gc.report.bytes_waiting, 1001 + 1005);
        assert_eq!(gc.report.packs_waiting_on_ingest, 2);

        // Once the ingest is gone, only the grace period holds pack 5 back.
        let mut report = GcReport::default();
        std::mem::swap(&mut gc.report, &mut report);
        let (new_state, to_delete) = gc.sort_condemned(&old_state, &listed, &uses, &[], now);
        assert_eq!(packs(&new_state.condemned), [5]);
        assert_eq!(packs(&to_delete), [1, 2]);
        assert_eq!(gc.report.packs_waiting_on_ingest, 0);
    }

    #[test]
    fn deleting_condemned_packs_removes_them_and_unneeded_records() {
        let mem = Arc::new(MemoryStore::new());
        let backend: Arc<dyn ObjectStore> = mem.clone();
        let store = Store::open_or_create(backend.clone(), CreateOptions::default()).unwrap();
        let (gone, kept) = (condemned(1, 0), PackId([2; 32]));
        let moved = PackId([3; 32]);
        for key in [
            layout::pack_key(&gone.pack),
            layout::pack_key(&kept),
            layout::moved_key(&moved),
        ] {
            backend.put(&key, b"x").unwrap();
        }
        let opts = GcOptions::default();
        let warn = |_: String| {};
        let mut gc = GcRun {
            backend: backend.clone(),
            store,
            opts: &opts,
            warn: &warn,
            report: GcReport::default(),
            lock: None,
        };
        let mut listed: BTreeMap<PackId, u64> = [(gone.pack, 1), (kept, 1)].into();
        gc.delete_condemned(&[moved], &[gone.clone()], &mut listed)
            .unwrap();
        assert!(backend
            .stat(&layout::pack_key(&gone.pack))
            .unwrap()
            .is_none());
        assert!(backend.stat(&layout::moved_key(&moved)).unwrap().is_none());
        assert!(backend.stat(&layout::pack_key(&kept)).unwrap().is_some());
        assert_eq!(listed.keys().collect::<Vec<_>>(), [&kept]);
        assert_eq!(gc.report.packs_deleted, 1);
        assert_eq!(gc.report.forwards_deleted, 1);
        assert_eq!(gc.report.bytes_reclaimed, gone.size);
        assert_eq!(gc.report.chunks_deleted, 10);
    }
}
