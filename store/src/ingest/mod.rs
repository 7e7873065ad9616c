//! The ingest pipeline: files → chunks → packs → manifests → refs.
//!
//! ```text
//!  reader threads (one file each)          worker threads                 bucket
//!  read → FastCDC → sha256 ──jobs──▶ BLAKE3 → dedup claim → encode ──▶ pack builder ─put─▶ packs/…
//!        ◀──────────── (seq, id, len) replies ───────────┘
//! ```
//!
//! * Readers stream each distinct source file once (a blob shared by several cache
//!   snapshots is read once), hash it with SHA-256 as the bytes pass, and hand chunks to
//!   the workers through a bounded channel: memory is bounded by the channel, the chunker
//!   buffers and the pack builders, whatever the file sizes.
//! * Workers name chunks, claim new ones in a session map (so a chunk repeated within a
//!   file, across files or across revisions is encoded once), consult the RocksDB index for
//!   chunks stored by earlier runs, and append frames of new chunks to the open pack. A full
//!   pack is sealed, written with one atomic put and recorded in the index.
//! * Only when every pack is written are manifests written, and only then refs: a crash at
//!   any point leaves no visible revision that references missing data, and a rerun
//!   dedups against whatever packs did land (the index learns them from the bucket).
//!
//! The threads are in `pipeline`; this module takes the lease, syncs the index, and turns
//! the chunked files into manifests and refs. Its parts: `options` (how an ingest runs),
//! `report` (what it did), `opener` (where a source file's bytes come from), `stamps`
//! (files taken unread) and `xet_memo` (Xet hashes spared).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::source::Snapshot;
use format::codec::{self, Kind};
use format::index::ChunkLoc;
use format::layout;
use format::manifest::{derive_commit_id, ChunkRef, FileEntry, Manifest, Published};
use format::names::{CommitId, RepoId};
use format::release::CheckObject;
use format::{ChunkId, XetHash};
use index::{Index, SyncReport};
use repo::failpoint;
use repo::handle::Store;
use repo::lock::{self, Held};
use repo::manifest::now_secs;
use repo::pack::PackId;
use repo::{Result, StoreError};

mod opener;
mod options;
mod pipeline;
pub(crate) mod report;
mod stamps;
mod xet_memo;

pub use opener::{FileSystem, Opened, Opener};
pub use options::{IngestOptions, MAX_READERS, MIN_READERS, SETTLE};
pub use report::{IngestReport, SnapshotOutcome};

use pipeline::{run_pipeline, FileResult, Source};

use read::progress::Progress;

/// Brings `index` up to date with the bucket, as every writer does before it dedups
/// against it: gc's condemned list is read first and its packs count as gone
/// (docs/format/protocols.md, "Garbage collection").
pub fn sync_index(store: &Store, index: &Index, warn: &dyn Fn(String)) -> Result<SyncReport> {
    let backend = store.backend();
    let condemned = crate::gc::state::condemned_packs(backend.as_ref())?;
    index.sync(backend.as_ref(), &condemned, warn)
}

/// Ingests `snapshots` into `store`, using `index` for dedup, reading their files from the
/// file system.
pub fn ingest(
    store: &Store,
    index: &Index,
    snapshots: &[Snapshot],
    opts: IngestOptions,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    ingest_from(store, index, snapshots, opts, &FileSystem, progress)
}

/// [`ingest`], reading every source file through `opener`.
pub fn ingest_from(
    store: &Store,
    index: &Index,
    snapshots: &[Snapshot],
    opts: IngestOptions,
    opener: &dyn Opener,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    let started = std::time::Instant::now();
    // The lease goes up before the index learns what gc has condemned: gc keeps every
    // pack condemned after this moment until the lease is gone (see `gc`).
    let lease = Held::ingest_lease(store.backend().clone(), lock::default_ttl())?;
    failpoint::pause("ingest-after-lease");
    let mut report = IngestReport {
        sync: sync_index(store, index, &|w| progress.warn(&w))?,
        ..Default::default()
    };
    failpoint::pause("ingest-after-sync");
    let (sources, source_ix) = distinct_sources(snapshots);
    let total: u64 = sources.iter().map(|s| s.size).sum();
    progress.start("ingest", total);
    let (results, located) =
        run_pipeline(store, index, &sources, opts, opener, progress, &mut report)?;
    progress.finish();
    report.files_read = sources.len();
    report.bytes_read = results.iter().map(|r| r.size).sum();

    // Build every manifest first, check for conflicts, then write manifests, then refs.
    let mut manifests = Vec::new();
    for s in snapshots {
        let mut manifest = build_manifest(s, &results, &source_ix, &located)?;
        let new = is_new(store, s, &mut manifest, opts.complete)?;
        manifests.push((s, manifest, new));
    }
    // Every pack must be durable before a manifest can name it (and before the release
    // check reads the revision back through them).
    store.backend().sync_deferred()?;
    let (checks, fresh) = release_checks(store, &manifests, opts, progress);
    failpoint::pause("ingest-before-manifests");
    // Confirmed against the store, not just the refresher: a gc that judged the lease
    // stale may have deleted packs these manifests name.
    lease.check()?;
    stamp_published(store, &mut manifests)?;
    // One batch: each manifest atomic and durable, the syncs shared (docs/format/protocols.md).
    let new_manifests: Vec<(String, Vec<u8>)> = manifests
        .iter()
        .filter(|(_, _, new)| *new)
        .map(|(_, m, _)| {
            (
                layout::manifest_key(&m.repo, &m.commit),
                codec::encode(Kind::Manifest, m, true),
            )
        })
        .collect();
    store.backend().put_many(&new_manifests)?;
    // Release records after their manifests, before any ref names the commit.
    write_release_records(store, &manifests, &checks, &fresh)?;
    failpoint::pause("ingest-before-refs");
    lease.check()?;
    let held: Vec<Vec<String>> = manifests
        .iter()
        .zip(&checks)
        .map(|((s, m, _), c)| held_refs(store, s, m, c.as_ref(), opts))
        .collect::<Result<_>>()?;
    let with_refs: Vec<(Vec<String>, &Manifest)> = manifests
        .iter()
        .zip(&held)
        .map(|((s, m, _), held)| {
            let refs = s
                .refs
                .iter()
                .filter(|r| !held.contains(r))
                .cloned()
                .collect();
            (refs, m)
        })
        .collect();
    opener.before_refs()?;
    set_refs(store, &lease, &with_refs)?;
    for (((s, m, new), check), held) in manifests.into_iter().zip(checks).zip(held) {
        report.snapshots.push(SnapshotOutcome {
            repo: m.repo.clone(),
            commit: m.commit,
            files: m.files.len(),
            bytes: m.total_size(),
            new_manifest: new,
            refs: s
                .refs
                .iter()
                .filter(|r| !held.contains(r))
                .cloned()
                .collect(),
            refs_held: held,
            check,
        });
    }
    crate::metrics::ingest_finished(&report, started.elapsed());
    Ok(report)
}

/// The release check of each snapshot's revision, read from its current record when there
/// is one (same files, current rules), else made: `None` when it is off or could not be
/// made (warned; the bytes are stored all the same, and the revision shows *not checked*).
/// Beside each, whether it is new (to be written).
fn release_checks(
    store: &Store,
    manifests: &[(&Snapshot, Manifest, bool)],
    opts: IngestOptions,
    progress: &dyn Progress,
) -> (Vec<Option<CheckObject>>, Vec<bool>) {
    manifests
        .iter()
        .map(|(_, m, _)| {
            if !opts.release_check {
                return (None, false);
            }
            match store.current_check(m) {
                Ok(Some(c)) if c.rules >= crate::release::RULES => return (Some(c), false),
                Ok(_) => {}
                Err(e) => progress.warn(&format!("reading the release check of {}: {e}", m.repo)),
            }
            match crate::release::check_revision(store, m, opts.checked_by) {
                Ok(c) => (Some(c), true),
                Err(e) => {
                    progress.warn(&crate::release::not_made(m, &e));
                    (None, false)
                }
            }
        })
        .unzip()
}

/// Writes the new check records and the snapshots' labels (after their manifests).
fn write_release_records(
    store: &Store,
    manifests: &[(&Snapshot, Manifest, bool)],
    checks: &[Option<CheckObject>],
    fresh: &[bool],
) -> Result<()> {
    for (((s, m, _), check), fresh) in manifests.iter().zip(checks).zip(fresh) {
        if let (Some(c), true) = (check, fresh) {
            store.put_check(&m.repo, c)?;
        }
        if !s.labels.is_empty() {
            store.set_labels(&m.repo, &m.commit, &s.labels, "ingest")?;
        }
    }
    Ok(())
}

/// The refs of `s` held back when failing revisions' refs are held and the check did not
/// pass (or was not made): those that would move (a ref already at the commit, moved
/// there by an earlier `--force`, is not held).
fn held_refs(
    store: &Store,
    s: &Snapshot,
    m: &Manifest,
    check: Option<&CheckObject>,
    opts: IngestOptions,
) -> Result<Vec<String>> {
    let passes = check.is_some_and(|c| c.verdict().allows_protected_refs());
    if !opts.hold_failing_refs || passes || s.refs.is_empty() {
        return Ok(Vec::new());
    }
    let now = store.refs(&m.repo)?;
    Ok(s.refs
        .iter()
        .filter(|r| now.get(*r) != Some(&m.commit))
        .cloned()
        .collect())
}

/// Sets when the new manifests are published: the store's clock read now (one request),
/// and each its own sequence number, so that revisions of one batch, and of ingests within
/// one tick of the store's clock, are ordered (docs/format/bytes.md, "Manifests").
fn stamp_published(store: &Store, manifests: &mut [(&Snapshot, Manifest, bool)]) -> Result<()> {
    if !manifests.iter().any(|(_, _, new)| *new) {
        return Ok(());
    }
    let store_ms = lock::store_now_ms(store.backend().as_ref())?;
    for (_, m, new) in manifests.iter_mut() {
        // A manifest rewritten to record Xet hashes keeps its publication (`is_new`).
        if *new && m.published.is_none() {
            m.published = Some(Published {
                store_ms,
                seq: repo::clock::sequence_ms(),
            });
        }
    }
    Ok(())
}

/// Distinct source files: a blob shared by several snapshots is read once. Returns them
/// and, by path, their index.
fn distinct_sources(snapshots: &[Snapshot]) -> (Vec<Source>, HashMap<PathBuf, usize>) {
    let mut sources: Vec<Source> = Vec::new();
    let mut source_ix: HashMap<PathBuf, usize> = HashMap::new();
    for s in snapshots {
        for f in &s.files {
            source_ix.entry(f.source.clone()).or_insert_with(|| {
                sources.push(Source {
                    path: f.source.clone(),
                    size: f.size,
                    sha256: f.expected_sha256,
                    xet: f.expected_xet,
                });
                sources.len() - 1
            });
        }
    }
    (sources, source_ix)
}

/// The manifest of snapshot `s`, from the chunked files (`results`, by `source_ix`) and
/// where every chunk is (`located`).
fn build_manifest(
    s: &Snapshot,
    results: &[FileResult],
    source_ix: &HashMap<PathBuf, usize>,
    located: &HashMap<ChunkId, ChunkLoc>,
) -> Result<Manifest> {
    let mut pack_table: Vec<PackId> = Vec::new();
    let mut pack_ix: HashMap<PackId, u32> = HashMap::new();
    let mut files = Vec::with_capacity(s.files.len());
    for f in &s.files {
        let r = &results[source_ix[&f.source]];
        let chunks = chunk_refs(r, located, &mut pack_table, &mut pack_ix)?;
        let entry = FileEntry {
            path: f.path.clone(),
            size: r.size,
            sha256: r.sha256,
            executable: f.executable,
            chunks,
        };
        files.push((entry, r.xet));
    }
    files.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    let (files, xet_hashes): (Vec<FileEntry>, Vec<XetHash>) = files.into_iter().unzip();
    let commit = s.commit.unwrap_or_else(|| {
        derive_commit_id(
            &files
                .iter()
                .map(|f| (f.path.clone(), f.size, f.sha256, f.executable))
                .collect::<Vec<_>>(),
        )
    });
    Ok(Manifest {
        repo: s.repo.clone(),
        commit,
        ingested_at: now_secs(),
        source: s.origin.to_string(),
        packs: pack_table,
        files,
        published: None,
        xet_hashes,
    })
}

/// The chunk references of one file; packs not yet in the manifest's `pack_table`
/// (indexed by `pack_ix`) are added to it.
fn chunk_refs(
    r: &FileResult,
    located: &HashMap<ChunkId, ChunkLoc>,
    pack_table: &mut Vec<PackId>,
    pack_ix: &mut HashMap<PackId, u32>,
) -> Result<Vec<ChunkRef>> {
    let mut chunks = Vec::with_capacity(r.chunks.len());
    for (id, _) in &r.chunks {
        let loc = *located.get(id).ok_or_else(|| {
            StoreError::Invalid(format!(
                "internal error: chunk {id} has no location after ingest"
            ))
        })?;
        let pi = *pack_ix.entry(loc.pack).or_insert_with(|| {
            pack_table.push(loc.pack);
            (pack_table.len() - 1) as u32
        });
        chunks.push(ChunkRef {
            id: *id,
            pack: pi,
            offset: loc.offset,
            frame_len: loc.frame_len,
            raw_len: loc.raw_len,
        });
    }
    Ok(chunks)
}

/// Whether `manifest` is new to the store: false when the store already has its commit
/// with the same content, an error when it has it with other files.
/// With `complete`, a stored manifest whose files `manifest` all holds unchanged is
/// replaced (new).
///
/// A stored manifest without Xet hashes (written before version 3, docs/format/xet.md) of
/// the same files is replaced too, keeping its publication: ingesting or pulling such a
/// revision again records its Xet hashes.
fn is_new(store: &Store, s: &Snapshot, manifest: &mut Manifest, complete: bool) -> Result<bool> {
    let commit = manifest.commit;
    let existing = if store.has_commit(&s.repo, &commit)? {
        Some(store.manifest(&s.repo, &commit)?)
    } else {
        None
    };
    if let Some(old) = &existing {
        if complete && old.files.len() < manifest.files.len() && old.is_part_of(manifest) {
            return Ok(true);
        }
        if !old.same_content(manifest) {
            return Err(StoreError::Invalid(format!(
                "{}@{commit} is already stored with different files; refusing to replace a commit (from {})",
                s.repo,
                s.dir.display()
            )));
        }
        if old.xet_hashes.is_empty() && !manifest.xet_hashes.is_empty() {
            manifest.published = old.published;
            return Ok(true);
        }
    }
    Ok(existing.is_none())
}

/// Whether the manifest of any of `pending` is missing from the store now.
fn any_missing(store: &Store, pending: &[(&Manifest, &str)]) -> Result<bool> {
    for (m, _) in pending {
        if !store.has_commit(&m.repo, &m.commit)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Sets the refs of every snapshot to its manifest, all under one write lease
/// ([`Store::set_refs`]), putting a manifest back if a gc expired it meanwhile.
fn set_refs(store: &Store, lease: &Held, snapshots: &[(Vec<String>, &Manifest)]) -> Result<()> {
    // Until its ref exists the commit is detached, and a gc may expire it meanwhile: put
    // the manifest back if so (its packs are protected by our lease until the manifest is
    // seen), before setting the refs and after.
    let restore = |m: &Manifest| -> Result<()> {
        if !store.has_commit(&m.repo, &m.commit)? {
            // Only our lease protects the packs of an expired manifest.
            lease.check()?;
            let key = layout::manifest_key(&m.repo, &m.commit);
            store
                .backend()
                .put(&key, &codec::encode(Kind::Manifest, m, true))?;
        }
        Ok(())
    };
    let mut pending: Vec<(&Manifest, &str)> = snapshots
        .iter()
        .flat_map(|(refs, m)| refs.iter().map(move |r| (*m, r.as_str())))
        .collect();
    // A gc that expired a commit between our restore and its ref makes set_refs take that
    // ref back: restore and try those again.
    let mut tries = 0;
    while !pending.is_empty() {
        for (m, _) in &pending {
            restore(m)?;
        }
        let batch: Vec<(RepoId, String, CommitId)> = pending
            .iter()
            .map(|(m, r)| (m.repo.clone(), r.to_string(), m.commit))
            .collect();
        failpoint::pause("ingest-refs-after-restore");
        let outcomes = match store.set_refs(&batch) {
            Ok(outcomes) => outcomes,
            // A commit gone between our restore and set_refs' first check (a gc expired
            // it): put it back and try again.
            Err(_) if tries < 3 && any_missing(store, &pending)? => {
                tries += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut again = Vec::new();
        for (entry, outcome) in pending.into_iter().zip(outcomes) {
            match outcome {
                Ok(()) => {}
                Err(StoreError::RemovedMeanwhile { .. }) if tries < 3 => again.push(entry),
                Err(e) => return Err(e),
            }
        }
        pending = again;
        tries += 1;
    }
    for (refs, m) in snapshots {
        if !refs.is_empty() {
            restore(m)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;
    use format::Sha256;

    /// A chunk location in pack `[pack; 32]` (also used by the pipeline's tests).
    pub(super) fn loc(pack: u8, offset: u32) -> ChunkLoc {
        ChunkLoc {
            pack: PackId([pack; 32]),
            offset,
            frame_len: 116,
            raw_len: 100,
        }
    }

    #[test]
    fn a_manifest_is_built_from_the_chunked_files() {
        let file = |path: &str, source: &str| SourceFile {
            path: path.into(),
            source: source.into(),
            size: 200,
            executable: false,
            expected_sha256: None,
            expected_xet: None,
        };
        let snapshot = Snapshot {
            repo: RepoId::parse("org/model").unwrap(),
            commit: None,
            refs: vec!["main".into()],
            // Two paths share one blob; listed out of order.
            files: vec![file("z.bin", "/blobs/1"), file("a.bin", "/blobs/1")],
            origin: "hf-cache",
            dir: "/snap".into(),
            labels: Vec::new(),
        };
        let (sources, source_ix) = distinct_sources(std::slice::from_ref(&snapshot));
        let want = Source {
            path: PathBuf::from("/blobs/1"),
            size: 200,
            sha256: None,
            xet: None,
        };
        assert_eq!(sources, [want]);
        let (a, b) = (ChunkId([1; 32]), ChunkId([2; 32]));
        let results = [FileResult {
            size: 200,
            sha256: Sha256([5; 32]),
            xet: XetHash([6; 32]),
            chunks: vec![(a, 100), (b, 100)],
        }];
        let located = HashMap::from([(a, loc(7, 16)), (b, loc(8, 16))]);
        let m = build_manifest(&snapshot, &results, &source_ix, &located).unwrap();
        assert_eq!(m.packs, [PackId([7; 32]), PackId([8; 32])]);
        assert_eq!(m.files.len(), 2);
        assert_eq!(m.files[0].path, "a.bin");
        assert_eq!(m.files[1].path, "z.bin");
        assert_eq!(m.xet_hashes, [XetHash([6; 32]); 2], "one Xet hash per file");
        let refs: Vec<_> = m.files[1]
            .chunks
            .iter()
            .map(|c| (c.pack, c.offset))
            .collect();
        assert_eq!(refs, [(0, 16), (1, 16)]);
        assert_eq!(m.source, "hf-cache");
        m.check().unwrap();
        // The commit is derived from the files: the same files give the same commit.
        let again = build_manifest(&snapshot, &results, &source_ix, &located).unwrap();
        assert_eq!(again.commit, m.commit);
        // A chunk with no location is an internal error, not a manifest.
        let located = HashMap::from([(a, loc(7, 16))]);
        assert!(build_manifest(&snapshot, &results, &source_ix, &located).is_err());
    }
}
