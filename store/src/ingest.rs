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

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chunker::{ChunkId, ChunkParams, StreamChunker};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use sha2::{Digest, Sha256};

use crate::codec::{self, Kind};
use crate::failpoint;
use crate::frame;
use crate::index::{ChunkLoc, Index, SyncReport};
use crate::layout;
use crate::lock::{self, Held};
use crate::manifest::{derive_commit_id, now_secs, ChunkRef, FileEntry, Manifest};
use crate::names::{CommitId, RepoId};
use crate::pack::{PackBuilder, PackId};
use crate::repo::Store;
use crate::source::Snapshot;
use crate::{Result, StoreError};

/// Re-exported where callers have always found them.
pub use crate::progress::{NoProgress, Progress};

/// Brings `index` up to date with the bucket, as every writer does before it dedups
/// against it: gc's condemned list is read first and its packs count as gone
/// (docs/FORMAT.md, "Garbage collection").
pub fn sync_index(store: &Store, index: &Index, warn: &dyn Fn(String)) -> Result<SyncReport> {
    let backend = store.backend();
    let condemned = crate::gc::state::condemned_packs(backend.as_ref())?;
    index.sync(backend.as_ref(), &condemned, warn)
}

/// Ingest settings.
#[derive(Clone, Copy, Debug)]
pub struct IngestOptions {
    /// Reader threads and worker threads (each); default: the number of CPUs.
    pub threads: usize,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
        }
    }
}

/// The result for one snapshot.
#[derive(Clone, Debug)]
pub struct SnapshotOutcome {
    /// Repository.
    pub repo: RepoId,
    /// Commit stored.
    pub commit: CommitId,
    /// Files in it.
    pub files: usize,
    /// Logical bytes.
    pub bytes: u64,
    /// False when the store already had this commit with the same content.
    pub new_manifest: bool,
    /// Refs set.
    pub refs: Vec<String>,
}

/// What an ingest did.
#[derive(Clone, Debug, Default)]
pub struct IngestReport {
    /// Per snapshot.
    pub snapshots: Vec<SnapshotOutcome>,
    /// Distinct source files read.
    pub files_read: usize,
    /// Bytes read from them.
    pub bytes_read: u64,
    /// Chunks seen (with repeats).
    pub chunks: u64,
    /// Chunks not yet in the store, written now.
    pub new_chunks: u64,
    /// Uncompressed bytes of the new chunks.
    pub new_chunk_bytes: u64,
    /// Packs written.
    pub packs_written: usize,
    /// Bytes of the packs written.
    pub pack_bytes_written: u64,
    /// What the index learned from the bucket first.
    pub sync: SyncReport,
}

/// Where a chunk seen in this session lives.
#[derive(Clone, Copy, Debug)]
enum Claim {
    /// Being decided by another worker; final once the pipeline drains.
    Pending,
    /// Already stored before this session.
    Stored(ChunkLoc),
    /// Written by this session into the `seq`-th pack.
    New {
        seq: usize,
        offset: u32,
        frame_len: u32,
        raw_len: u32,
    },
}

struct Shared<'a> {
    store: &'a Store,
    index: &'a Index,
    claims: Mutex<HashMap<ChunkId, Claim>>,
    /// One open pack per reader thread ("lane"), so that the frames of a file land next
    /// to each other in a pack: sequential reads of the file then read the pack
    /// sequentially, and adjacent frames can be fetched with one ranged read.
    open_packs: Vec<Mutex<(usize, PackBuilder)>>,
    next_pack_seq: std::sync::atomic::AtomicUsize,
    sealed: Mutex<Vec<Option<PackId>>>,
    pack_target: usize,
    abort: AtomicBool,
    error: Mutex<Option<StoreError>>,
    chunks: AtomicU64,
    new_chunks: AtomicU64,
    new_chunk_bytes: AtomicU64,
    pack_bytes: AtomicU64,
    packs: AtomicU64,
}

impl Shared<'_> {
    fn fail(&self, e: StoreError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.abort.store(true, Ordering::SeqCst);
    }
}

struct Job {
    lane: usize,
    seq: u64,
    data: Arc<Vec<u8>>,
    reply: Sender<(u64, ChunkId, u32)>,
}

/// The chunked form of one source file.
#[derive(Clone, Debug)]
struct FileResult {
    size: u64,
    sha256: [u8; 32],
    chunks: Vec<(ChunkId, u32)>,
}

/// A distinct source file: its path, the SHA-256 its snapshot expects, its size.
type Source = (PathBuf, Option<[u8; 32]>, u64);

/// Ingests `snapshots` into `store`, using `index` for dedup.
pub fn ingest(
    store: &Store,
    index: &Index,
    snapshots: &[Snapshot],
    opts: IngestOptions,
    progress: &dyn Progress,
) -> Result<IngestReport> {
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
    let total: u64 = sources.iter().map(|s| s.2).sum();
    progress.start("ingest", total);
    let (results, located) = run_pipeline(store, index, &sources, opts, progress, &mut report)?;
    progress.finish();
    report.files_read = sources.len();
    report.bytes_read = results.iter().map(|r| r.size).sum();

    // Build every manifest first, check for conflicts, then write manifests, then refs.
    let mut manifests = Vec::new();
    for s in snapshots {
        let manifest = build_manifest(s, &results, &source_ix, &located)?;
        let new = is_new(store, s, &manifest)?;
        manifests.push((s, manifest, new));
    }
    // Every pack must be durable before a manifest can name it.
    store.backend().sync_deferred()?;
    failpoint::pause("ingest-before-manifests");
    // Confirmed against the store, not just the refresher: a gc that judged the lease
    // stale may have deleted packs these manifests name.
    lease.check()?;
    for (_, m, new) in &manifests {
        if *new {
            let key = layout::manifest_key(&m.repo, &m.commit);
            let bytes = codec::encode(Kind::Manifest, m, true);
            store.backend().put(&key, &bytes)?;
        }
    }
    failpoint::pause("ingest-before-refs");
    lease.check()?;
    for (s, m, new) in manifests {
        set_refs(store, &lease, s, &m)?;
        report.snapshots.push(SnapshotOutcome {
            repo: m.repo.clone(),
            commit: m.commit,
            files: m.files.len(),
            bytes: m.total_size(),
            new_manifest: new,
            refs: s.refs.clone(),
        });
    }
    Ok(report)
}

/// Distinct source files: a blob shared by several snapshots is read once. Returns them
/// and, by path, their index.
fn distinct_sources(snapshots: &[Snapshot]) -> (Vec<Source>, HashMap<PathBuf, usize>) {
    let mut sources: Vec<Source> = Vec::new();
    let mut source_ix: HashMap<PathBuf, usize> = HashMap::new();
    for s in snapshots {
        for f in &s.files {
            source_ix.entry(f.source.clone()).or_insert_with(|| {
                sources.push((f.source.clone(), f.expected_sha256, f.size));
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
        files.push(FileEntry {
            path: f.path.clone(),
            size: r.size,
            sha256: r.sha256,
            executable: f.executable,
            chunks,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
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
            id: id.0,
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
fn is_new(store: &Store, s: &Snapshot, manifest: &Manifest) -> Result<bool> {
    let commit = manifest.commit;
    let existing = if store.has_commit(&s.repo, &commit)? {
        Some(store.manifest(&s.repo, &commit)?)
    } else {
        None
    };
    if let Some(old) = &existing {
        if !old.same_content(manifest) {
            return Err(StoreError::Invalid(format!(
                "{}@{commit} is already stored with different files; refusing to replace a commit (from {})",
                s.repo,
                s.dir.display()
            )));
        }
    }
    Ok(existing.is_none())
}

/// Sets the refs of snapshot `s` to its manifest `m`, putting `m` back if a gc expired it
/// meanwhile.
fn set_refs(store: &Store, lease: &Held, s: &Snapshot, m: &Manifest) -> Result<()> {
    // Until its ref exists the commit is detached, and a gc may expire it meanwhile:
    // put the manifest back if so (its packs are protected by our lease until the
    // manifest is seen), before and after setting each ref.
    let restore = || -> Result<()> {
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
    for r in &s.refs {
        // A gc that expired the commit between our restore and the ref makes set_ref
        // take the ref back: restore and try again.
        let mut tries = 0;
        loop {
            restore()?;
            match store.set_ref(&m.repo, r, &m.commit) {
                Err(StoreError::RemovedMeanwhile { .. }) if tries < 3 => tries += 1,
                other => break other?,
            }
        }
    }
    if !s.refs.is_empty() {
        restore()?;
    }
    Ok(())
}

/// Runs the readers and workers over `sources`; returns the chunked files (in the order
/// of `sources`) and where every chunk seen is stored.
fn run_pipeline(
    store: &Store,
    index: &Index,
    sources: &[Source],
    opts: IngestOptions,
    progress: &dyn Progress,
    report: &mut IngestReport,
) -> Result<(Vec<FileResult>, HashMap<ChunkId, ChunkLoc>)> {
    let threads = opts.threads.max(1);
    let params = store.config().chunk_params();
    let shared = Shared::new(store, index, threads);
    let results = run_threads(&shared, sources, threads, params, progress);
    if let Some(e) = shared
        .error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        return Err(e);
    }
    // Seal the last pack of every lane.
    for lane in &shared.open_packs {
        let (seq, last) = std::mem::replace(
            &mut *lane.lock().unwrap_or_else(|p| p.into_inner()),
            (0, PackBuilder::new()),
        );
        if !last.is_empty() {
            seal(&shared, seq, last)?;
        }
    }
    let sealed = shared
        .sealed
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    let claims = shared
        .claims
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    let located = locate(claims, &sealed)?;
    report.chunks = shared.chunks.load(Ordering::SeqCst);
    report.new_chunks = shared.new_chunks.load(Ordering::SeqCst);
    report.new_chunk_bytes = shared.new_chunk_bytes.load(Ordering::SeqCst);
    report.packs_written = shared.packs.load(Ordering::SeqCst) as usize;
    report.pack_bytes_written = shared.pack_bytes.load(Ordering::SeqCst);
    let results = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| {
                StoreError::Invalid(format!(
                    "internal error: {} was not read",
                    sources[i].0.display()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((results, located))
}

impl<'a> Shared<'a> {
    /// The state of a pipeline with `threads` lanes, nothing claimed or sealed yet.
    fn new(store: &'a Store, index: &'a Index, threads: usize) -> Self {
        Shared {
            store,
            index,
            claims: Mutex::new(HashMap::new()),
            open_packs: (0..threads)
                .map(|i| Mutex::new((i, PackBuilder::new())))
                .collect(),
            next_pack_seq: std::sync::atomic::AtomicUsize::new(threads),
            sealed: Mutex::new(Vec::new()),
            pack_target: store.config().pack_target as usize,
            abort: AtomicBool::new(false),
            error: Mutex::new(None),
            chunks: AtomicU64::new(0),
            new_chunks: AtomicU64::new(0),
            new_chunk_bytes: AtomicU64::new(0),
            pack_bytes: AtomicU64::new(0),
            packs: AtomicU64::new(0),
        }
    }
}

/// Runs `threads` workers and `threads` readers (one lane each) until every source is
/// read or the pipeline aborts; returns what each source chunked into (None if unread).
fn run_threads(
    shared: &Shared<'_>,
    sources: &[Source],
    threads: usize,
    params: ChunkParams,
    progress: &dyn Progress,
) -> Vec<Option<FileResult>> {
    let results: Mutex<Vec<Option<FileResult>>> = Mutex::new(vec![None; sources.len()]);
    let next_file = AtomicU64::new(0);
    // Largest files first, so that the long ones do not start last and run alone.
    let mut order: Vec<usize> = (0..sources.len()).collect();
    order.sort_by(|&a, &b| sources[b].2.cmp(&sources[a].2));
    let order = &order;
    let (job_tx, job_rx) = bounded::<Job>(threads * 2);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let rx = job_rx.clone();
            s.spawn(move || worker(shared, rx));
        }
        drop(job_rx);
        let mut readers = Vec::new();
        for lane in 0..threads {
            let tx = job_tx.clone();
            let (results, next_file) = (&results, &next_file);
            readers.push(s.spawn(move || loop {
                let k = next_file.fetch_add(1, Ordering::SeqCst) as usize;
                if k >= sources.len() || shared.abort.load(Ordering::SeqCst) {
                    break;
                }
                let i = order[k];
                match read_file(shared, lane, &sources[i], params, &tx, progress) {
                    Ok(r) => results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r),
                    Err(e) => shared.fail(e),
                }
            }));
        }
        drop(job_tx);
    });
    results.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// Where every chunk claimed in this session is: stored before, or in the pack sealed as
/// `sealed[seq]`.
fn locate(
    claims: HashMap<ChunkId, Claim>,
    sealed: &[Option<PackId>],
) -> Result<HashMap<ChunkId, ChunkLoc>> {
    let mut located = HashMap::with_capacity(claims.len());
    for (id, claim) in claims {
        let loc = match claim {
            Claim::Stored(loc) => loc,
            Claim::New {
                seq,
                offset,
                frame_len,
                raw_len,
            } => {
                let pack = sealed.get(seq).copied().flatten().ok_or_else(|| {
                    StoreError::Invalid(format!(
                        "internal error: pack {seq} of chunk {id} was never sealed"
                    ))
                })?;
                ChunkLoc {
                    pack,
                    offset,
                    frame_len,
                    raw_len,
                }
            }
            Claim::Pending => {
                return Err(StoreError::Invalid(format!(
                    "internal error: chunk {id} left pending"
                )))
            }
        };
        located.insert(id, loc);
    }
    Ok(located)
}

fn read_file(
    shared: &Shared<'_>,
    lane: usize,
    (path, expected, _size): &Source,
    params: ChunkParams,
    jobs: &Sender<Job>,
    progress: &dyn Progress,
) -> Result<FileResult> {
    let file = File::open(path).map_err(|e| StoreError::io(path, e))?;
    let (reply_tx, reply_rx) = unbounded();
    // SHA-256 runs in its own thread, fed in order, so that one large file keeps two
    // cores busy (chunking here, hashing there) instead of one.
    let (sha_tx, sha_rx) = bounded::<Arc<Vec<u8>>>(4);
    let hasher = std::thread::spawn(move || {
        let mut sha = Sha256::new();
        for data in sha_rx {
            sha.update(&data[..]);
        }
        <[u8; 32]>::from(sha.finalize())
    });
    let mut size = 0u64;
    let mut seq = 0u64;
    let mut failed = None;
    for chunk in StreamChunker::new(file, params) {
        if shared.abort.load(Ordering::SeqCst) {
            failed = Some(StoreError::Invalid("ingest aborted".into()));
            break;
        }
        let data = match chunk {
            Ok(c) => Arc::new(c.data),
            Err(e) => {
                failed = Some(StoreError::io(path, e));
                break;
            }
        };
        size += data.len() as u64;
        progress.advance(data.len() as u64);
        let _ = sha_tx.send(data.clone());
        if jobs
            .send(Job {
                lane,
                seq,
                data,
                reply: reply_tx.clone(),
            })
            .is_err()
        {
            failed = Some(StoreError::Invalid("ingest workers stopped".into()));
            break;
        }
        seq += 1;
    }
    drop(sha_tx);
    let sha256 = hasher
        .join()
        .map_err(|_| StoreError::Invalid("sha256 thread panicked".into()))?;
    if let Some(e) = failed {
        return Err(e);
    }
    drop(reply_tx);
    let mut chunks: Vec<(u64, ChunkId, u32)> = reply_rx.iter().collect();
    if chunks.len() as u64 != seq {
        return Err(StoreError::Invalid(format!(
            "{}: ingest aborted",
            path.display()
        )));
    }
    chunks.sort_by_key(|c| c.0);
    if let Some(exp) = expected {
        if *exp != sha256 {
            return Err(StoreError::BadSource {
                path: path.clone(),
                reason: format!(
                    "content does not match its blob name: sha256 is {}, the name says {}",
                    hex::encode(sha256),
                    hex::encode(exp)
                ),
            });
        }
    }
    Ok(FileResult {
        size,
        sha256,
        chunks: chunks.into_iter().map(|(_, id, n)| (id, n)).collect(),
    })
}

fn worker(shared: &Shared<'_>, jobs: Receiver<Job>) {
    let mut frame = Vec::new();
    for job in jobs {
        if shared.abort.load(Ordering::SeqCst) {
            continue; // drain so that readers never block
        }
        let id = ChunkId::of(&job.data);
        let raw_len = job.data.len() as u32;
        shared.chunks.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = place(shared, job.lane, id, &job.data, &mut frame) {
            shared.fail(e);
            continue;
        }
        let _ = job.reply.send((job.seq, id, raw_len));
    }
}

/// Makes sure chunk `id` is stored: already known, claimed by another worker, or encoded
/// and appended to the open pack now.
fn place(
    shared: &Shared<'_>,
    lane: usize,
    id: ChunkId,
    data: &[u8],
    frame: &mut Vec<u8>,
) -> Result<()> {
    {
        let mut claims = shared.claims.lock().unwrap_or_else(|p| p.into_inner());
        if claims.contains_key(&id) {
            return Ok(());
        }
        claims.insert(id, Claim::Pending);
    }
    if let Some(loc) = shared.index.chunk(&id)? {
        shared
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Claim::Stored(loc));
        return Ok(());
    }
    frame.clear();
    frame::encode(data, frame);
    shared.new_chunks.fetch_add(1, Ordering::Relaxed);
    shared
        .new_chunk_bytes
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    let full = {
        let mut open = shared.open_packs[lane]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let seq = open.0;
        let offset = open.1.add_frame(id, frame, data.len());
        shared
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                Claim::New {
                    seq,
                    offset,
                    frame_len: frame.len() as u32,
                    raw_len: data.len() as u32,
                },
            );
        if open.1.len() >= shared.pack_target {
            let next = shared.next_pack_seq.fetch_add(1, Ordering::SeqCst);
            Some(std::mem::replace(&mut *open, (next, PackBuilder::new())))
        } else {
            None
        }
    };
    if let Some((seq, builder)) = full {
        seal(shared, seq, builder)?;
    }
    Ok(())
}

/// Writes a finished pack and records it in the index.
fn seal(shared: &Shared<'_>, seq: usize, builder: PackBuilder) -> Result<()> {
    let (id, bytes, entries) = builder.finish();
    shared
        .store
        .backend()
        .put_deferred(&layout::pack_key(&id), &bytes)?;
    shared.index.add_pack(&id, bytes.len() as u64, &entries)?;
    shared
        .pack_bytes
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    shared.packs.fetch_add(1, Ordering::Relaxed);
    let mut sealed = shared.sealed.lock().unwrap_or_else(|p| p.into_inner());
    if sealed.len() <= seq {
        sealed.resize(seq + 1, None);
    }
    sealed[seq] = Some(id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    fn loc(pack: u8, offset: u32) -> ChunkLoc {
        ChunkLoc {
            pack: PackId([pack; 32]),
            offset,
            frame_len: 116,
            raw_len: 100,
        }
    }

    #[test]
    fn locate_places_new_chunks_in_their_sealed_packs() {
        let (a, b) = (ChunkId([1; 32]), ChunkId([2; 32]));
        let claims = HashMap::from([
            (a, Claim::Stored(loc(7, 16))),
            (
                b,
                Claim::New {
                    seq: 1,
                    offset: 40,
                    frame_len: 116,
                    raw_len: 100,
                },
            ),
        ]);
        let sealed = [None, Some(PackId([8; 32]))];
        let located = locate(claims.clone(), &sealed).unwrap();
        assert_eq!(located[&a], loc(7, 16));
        assert_eq!(located[&b], loc(8, 40));
        // A pack that was never sealed, or a chunk never decided, is an internal error.
        assert!(locate(claims, &[Some(PackId([8; 32]))]).is_err());
        assert!(locate(HashMap::from([(a, Claim::Pending)]), &sealed).is_err());
    }

    #[test]
    fn a_manifest_is_built_from_the_chunked_files() {
        let file = |path: &str, source: &str| SourceFile {
            path: path.into(),
            source: source.into(),
            size: 200,
            executable: false,
            expected_sha256: None,
        };
        let snapshot = Snapshot {
            repo: RepoId::parse("org/model").unwrap(),
            commit: None,
            refs: vec!["main".into()],
            // Two paths share one blob; listed out of order.
            files: vec![file("z.bin", "/blobs/1"), file("a.bin", "/blobs/1")],
            origin: "hf-cache",
            dir: "/snap".into(),
        };
        let (sources, source_ix) = distinct_sources(std::slice::from_ref(&snapshot));
        assert_eq!(sources, [(PathBuf::from("/blobs/1"), None, 200)]);
        let (a, b) = (ChunkId([1; 32]), ChunkId([2; 32]));
        let results = [FileResult {
            size: 200,
            sha256: [5; 32],
            chunks: vec![(a, 100), (b, 100)],
        }];
        let located = HashMap::from([(a, loc(7, 16)), (b, loc(8, 16))]);
        let m = build_manifest(&snapshot, &results, &source_ix, &located).unwrap();
        assert_eq!(m.packs, [PackId([7; 32]), PackId([8; 32])]);
        assert_eq!(m.files.len(), 2);
        assert_eq!(m.files[0].path, "a.bin");
        assert_eq!(m.files[1].path, "z.bin");
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
