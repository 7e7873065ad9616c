//! gc's work on packs, steps 4 to 7 of the protocol in docs/format/protocols.md ("Garbage
//! collection"): which frames the kept revisions use, through the forwarding records
//! (liveness); phase two, deleting packs condemned long enough ago that no lease can still
//! use them; phase one, condemning unreferenced packs and rewriting mostly dead ones; and
//! writing the condemned list with marks by the store's clock; and removing leftovers of
//! interrupted writes. `mod.rs` runs the steps in
//! order; this module owns what each does to packs.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::options::{DELETE_BATCH, MAX_CLOCK_SKEW, TEMPORARY_MIN_AGE};
use super::pack_use::PackUse;
use super::rewrite::{forward_record, rewrite_packs, AllForwards};
use super::session::{GcRun, Rev};
use super::state;
use format::gc::{Condemned, GcState};
use format::layout;
use objects::{ObjectError, ObjectStore};
use repo::failpoint;
use repo::forward::{self, Forwards};
use repo::lock;
use repo::pack::{self, PackId};
use repo::{Result, StoreError};

/// What kept revisions use, after forwarding.
pub(super) struct Liveness {
    /// Per pack, the frames kept manifests reference (where they are now).
    pub(super) uses: HashMap<PackId, PackUse>,
    /// Packs whose forwarding record was followed.
    pub(super) needed: HashSet<PackId>,
}

impl GcRun<'_> {
    /// Step 5: the packs in the bucket and their sizes.
    pub(super) fn list_packs(&self) -> Result<BTreeMap<PackId, u64>> {
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
    pub(super) fn sort_condemned(
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
    pub(super) fn delete_condemned(
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
    pub(super) fn condemn_or_rewrite(
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
    pub(super) fn rewrite(
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
        let (moved, frames_in) = rewrite_packs(&self.store, rewrite, uses, &mut self.report)?;
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
            let live = uses[id].frames.len() as u32;
            condemn.push(Condemned {
                pack: *id,
                marked_ms: 0,
                size: *size,
                // The footer's count, so that the report's dead chunks are these less the
                // live ones (0 when the footer did not decode: then it reports none).
                chunks: frames_in.get(id).copied().unwrap_or(0).max(live),
                live_chunks: live,
            });
        }
        Ok(())
    }

    /// Removes leftovers of interrupted writes older than the grace period (and at least
    /// [`TEMPORARY_MIN_AGE`]).
    pub(super) fn remove_temporaries(&mut self) -> Result<()> {
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
    pub(super) fn write_condemned(
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
}

/// Step 4: every (pack, offset) the `kept` manifests reference, resolved through the
/// forwarding records: a chunk a record moved is live where it was copied, and the
/// records followed are needed.
pub(super) fn liveness(kept: &[Rev], forwards: &Forwards) -> Result<Liveness> {
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
/// manifest follows: never needed again (docs/format/protocols.md, "Forwarding records").
pub(super) fn unneeded_forwards(
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
            .map(repo::clock::to_ms)
            .ok_or_else(|| {
                StoreError::from(ObjectError::Backend {
                    op: "head",
                    key: layout::CONDEMNED_KEY.into(),
                    reason: "no modification time after writing it".into(),
                })
            })?;
        if landed <= marked.saturating_add(slack) {
            return Ok(());
        }
        marked = landed;
    }
    Err(ObjectError::Backend {
        op: "put",
        key: layout::CONDEMNED_KEY.into(),
        reason: "each write landed long after its mark (gc keeps being paused)".into(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::gc::{GcOptions, GcReport};
    use format::lock::LockObject;
    use format::manifest::Manifest;
    use format::manifest::{ChunkRef, FileEntry};
    use format::names::{CommitId, RepoId};
    use format::{ChunkId, Sha256};
    use objects::MemoryStore;
    use repo::forward::{MovedFrame, MovedRecord};
    use repo::handle::CreateOptions;
    use repo::handle::Store;
    use repo::lock::Listed;

    fn chunk(id: u8, pack: u32, offset: u32, frame_len: u32) -> ChunkRef {
        ChunkRef {
            id: ChunkId([id; 32]),
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
                    sha256: Sha256([0; 32]),
                    executable: false,
                    chunks,
                }],
                published: None,
                xet_hashes: Vec::new(),
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
                id: ChunkId([1; 32]),
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
        assert_eq!(live.uses[&new].frames[&40], (ChunkId([1; 32]), 100, 84));
        assert_eq!(live.uses[&new].bytes, 100);
        assert_eq!(live.uses[&old].frames.keys().collect::<Vec<_>>(), [&116]);
        assert_eq!(live.uses[&old].bytes, 50);
        assert_eq!(live.needed, HashSet::from([old]));

        // A reference whose chunk id differs from the record's entry stays put.
        let kept = vec![rev(vec![old], vec![chunk(7, 0, 16, 100)])];
        let live = liveness(&kept, &forwards).unwrap();
        assert!(!live.uses.contains_key(&new));
        assert_eq!(live.uses[&old].frames[&16].0, ChunkId([7; 32]));
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
        gc.delete_condemned(&[moved], std::slice::from_ref(&gone), &mut listed)
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
