//! The ingest pipeline's threads: readers stream each distinct source file through FastCDC
//! and SHA-256, workers name chunks, claim new ones, dedup against the index and append
//! frames to one open pack per lane; full packs are sealed (one atomic put, then the
//! index). `mod.rs` turns what this returns (the chunked files and where every chunk is)
//! into manifests and refs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use chunker::{ChunkParams, StreamChunker};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use format::{ChunkId, ChunkListDigest, Sha256, XetHash};
use sha2::Digest;

use super::opener::{Opened, Opener};
use super::options::{IngestOptions, SETTLE};
use super::report::IngestReport;
use super::stamps;
use super::xet_memo::{self, Step, XetMemo};
use format::frame;
use format::index::{chunk_list_digest, ChunkLoc, FileStamp};
use format::layout;
use index::Index;
use read::progress::Progress;
use repo::handle::Store;
use repo::pack::{PackBuilder, PackId};
use repo::{Result, StoreError};

/// A distinct source file, read once however many snapshots name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Source {
    /// Where its bytes are ([`crate::source::SourceFile::source`]), as the opener names it.
    pub(super) path: PathBuf,
    /// Its size, as discovery found it.
    pub(super) size: u64,
    /// The SHA-256 its snapshot expects (a hub cache's blob name), if any.
    pub(super) sha256: Option<Sha256>,
    /// The Xet hash it must have (a pull's upstream stated it), if any.
    pub(super) xet: Option<XetHash>,
}

/// Where a chunk seen in this session lives.
#[derive(Clone, Copy, Debug)]
pub(super) enum Claim {
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

/// A file's stamp with its content's sha256 and chunk-list digest, as
/// [`Index::remember_stamps`] records it.
type StampedFile = (FileStamp, Sha256, ChunkListDigest);

struct Shared<'a> {
    store: &'a Store,
    index: &'a Index,
    opener: &'a dyn Opener,
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
    pub(super) chunks: AtomicU64,
    /// Files taken from the index unread, and their bytes.
    files_unchanged: AtomicU64,
    bytes_unchanged: AtomicU64,
    reread: bool,
    settle: std::time::Duration,
    /// Stamps of the files read whole while they stood still, with their content's sha256
    /// and chunk-list digest, recorded in one write once every file is read.
    stamps: Mutex<Vec<StampedFile>>,
    stamper: stamps::Stamper,
    new_chunks: AtomicU64,
    new_chunk_bytes: AtomicU64,
    pack_bytes: AtomicU64,
    packs: AtomicU64,
    xet_reused: AtomicU64,
    xet_reread: AtomicU64,
}

impl Shared<'_> {
    fn fail(&self, e: StoreError) {
        let mut slot = self.error.lock();
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
    /// The chunk's id, where the reader computed it already.
    id: Option<ChunkId>,
    reply: Sender<(u64, ChunkId, u32)>,
}

/// The chunked form of one source file.
#[derive(Clone, Debug)]
pub(super) struct FileResult {
    pub(super) size: u64,
    pub(super) sha256: Sha256,
    /// The Xet file hash (docs/format/xet.md).
    pub(super) xet: XetHash,
    pub(super) chunks: Vec<(ChunkId, u32)>,
}

/// Runs the readers and workers over `sources`; returns the chunked files (in the order
/// of `sources`) and where every chunk seen is stored.
pub(super) fn run_pipeline(
    store: &Store,
    index: &Index,
    sources: &[Source],
    opts: IngestOptions,
    opener: &dyn Opener,
    progress: &dyn Progress,
    report: &mut IngestReport,
) -> Result<(Vec<FileResult>, HashMap<ChunkId, ChunkLoc>)> {
    let (workers, readers) = (opts.threads.max(1), opts.readers.max(1));
    let params = ChunkParams::of_config(store.config());
    let mut shared = Shared::new(store, index, opener, readers);
    (shared.reread, shared.settle) = (opts.reread, opts.settle);
    let results = run_threads(&shared, sources, (readers, workers), params, progress);
    let failed = shared.error.lock().take();
    if let Some(e) = failed {
        // With `keep_partial`, keep what was chunked: the frames of files that did
        // complete are recorded in the index, so a rerun reads them back instead of
        // fetching them again. No manifest names these packs; gc reclaims them if nothing
        // ever does.
        if opts.keep_partial {
            let _ = seal_open_packs(&shared);
        }
        return Err(e);
    }
    seal_open_packs(&shared)?;
    // Best effort: a record only saves a later ingest a read.
    let stamps = std::mem::take(&mut *shared.stamps.lock());
    let _ = index.remember_stamps(&stamps);
    let sealed = shared.sealed.into_inner();
    let claims = shared.claims.into_inner();
    let located = locate(claims, &sealed)?;
    report.chunks = shared.chunks.load(Ordering::SeqCst);
    report.files_unchanged = shared.files_unchanged.load(Ordering::SeqCst) as usize;
    report.bytes_unchanged = shared.bytes_unchanged.load(Ordering::SeqCst);
    report.new_chunks = shared.new_chunks.load(Ordering::SeqCst);
    report.new_chunk_bytes = shared.new_chunk_bytes.load(Ordering::SeqCst);
    report.packs_written = shared.packs.load(Ordering::SeqCst) as usize;
    report.pack_bytes_written = shared.pack_bytes.load(Ordering::SeqCst);
    report.xet_bytes_reused = shared.xet_reused.load(Ordering::SeqCst);
    report.xet_bytes_reread = shared.xet_reread.load(Ordering::SeqCst);
    let results = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| {
                StoreError::Invalid(format!(
                    "internal error: {} was not read",
                    sources[i].path.display()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((results, located))
}

impl<'a> Shared<'a> {
    /// The state of a pipeline with `lanes` lanes, nothing claimed or sealed yet.
    fn new(store: &'a Store, index: &'a Index, opener: &'a dyn Opener, lanes: usize) -> Self {
        Shared {
            store,
            index,
            opener,
            claims: Mutex::new(HashMap::new()),
            open_packs: (0..lanes)
                .map(|i| Mutex::new((i, PackBuilder::new())))
                .collect(),
            next_pack_seq: std::sync::atomic::AtomicUsize::new(lanes),
            sealed: Mutex::new(Vec::new()),
            pack_target: store.config().pack_target as usize,
            abort: AtomicBool::new(false),
            error: Mutex::new(None),
            chunks: AtomicU64::new(0),
            files_unchanged: AtomicU64::new(0),
            bytes_unchanged: AtomicU64::new(0),
            reread: false,
            settle: SETTLE,
            stamps: Mutex::new(Vec::new()),
            stamper: stamps::Stamper::new(),
            new_chunks: AtomicU64::new(0),
            new_chunk_bytes: AtomicU64::new(0),
            pack_bytes: AtomicU64::new(0),
            packs: AtomicU64::new(0),
            xet_reused: AtomicU64::new(0),
            xet_reread: AtomicU64::new(0),
        }
    }
}

/// Seals the last pack of every lane.
fn seal_open_packs(shared: &Shared<'_>) -> Result<()> {
    for lane in &shared.open_packs {
        let (seq, last) = std::mem::replace(&mut *lane.lock(), (0, PackBuilder::new()));
        if !last.is_empty() {
            seal(shared, seq, last)?;
        }
    }
    Ok(())
}

/// Runs `workers` workers and `readers` readers (one lane each) until every source is
/// read or the pipeline aborts; returns what each source chunked into (None if unread).
fn run_threads(
    shared: &Shared<'_>,
    sources: &[Source],
    (readers, workers): (usize, usize),
    params: ChunkParams,
    progress: &dyn Progress,
) -> Vec<Option<FileResult>> {
    let results: Mutex<Vec<Option<FileResult>>> = Mutex::new(vec![None; sources.len()]);
    let next_file = AtomicU64::new(0);
    // Largest files first, so that the long ones do not start last and run alone.
    let mut order: Vec<usize> = (0..sources.len()).collect();
    order.sort_by(|&a, &b| sources[b].size.cmp(&sources[a].size));
    let order = &order;
    let (job_tx, job_rx) = bounded::<Job>(workers * 2);
    std::thread::scope(|s| {
        for _ in 0..workers {
            let rx = job_rx.clone();
            s.spawn(move || worker(shared, rx));
        }
        drop(job_rx);
        let mut reading = Vec::new();
        for lane in 0..readers {
            let tx = job_tx.clone();
            let (results, next_file) = (&results, &next_file);
            reading.push(s.spawn(move || loop {
                let k = next_file.fetch_add(1, Ordering::SeqCst) as usize;
                if k >= sources.len() || shared.abort.load(Ordering::SeqCst) {
                    break;
                }
                let i = order[k];
                match read_file(shared, lane, &sources[i], params, &tx, progress) {
                    Ok(r) => results.lock()[i] = Some(r),
                    Err(e) => shared.fail(e),
                }
            }));
        }
        drop(job_tx);
    });
    results.into_inner()
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

/// Files up to this size are hashed in the lane's own thread: a thread started per file
/// cost more than the hashing itself for small files (20,000 files of 1-16 KiB: 20,099
/// `clone3` and 67% of the ingest's time in the kernel; docs/BENCHMARKS.md).
const INLINE_SHA_MAX: u64 = 8 << 20;

/// A file's SHA-256 and Xet hash, computed in the caller's thread for a small file and in
/// a thread of their own, fed in order, for a large one (so that one large file keeps two
/// cores busy, chunking in the lane and hashing there, instead of one). One thread for
/// both: a thread each costs a wake-up each per chunk. The Xet hash is computed only from
/// the chunk [`xet_memo::XetMemo`] says (possibly none).
enum FileSha {
    Inline(sha2::Sha256, Option<Box<xethash::Hasher>>),
    Thread {
        feed: Sender<Feed>,
        hasher: std::thread::JoinHandle<(Sha256, Option<XetHash>)>,
    },
}

/// What the hashing thread of a large file is fed, in order.
enum Feed {
    /// The next bytes of the file.
    Data(Arc<Vec<u8>>),
    /// The Xet hasher to feed from here on (it holds every byte before).
    Xet(Box<xethash::Hasher>),
}

impl FileSha {
    fn start(size: u64, xet: bool) -> FileSha {
        let xet = xet.then(Box::<xethash::Hasher>::default);
        if size <= INLINE_SHA_MAX {
            return FileSha::Inline(sha2::Sha256::new(), xet);
        }
        let (feed, rx) = bounded::<Feed>(4);
        let hasher = std::thread::spawn(move || {
            let (mut sha, mut xet) = (sha2::Sha256::new(), xet);
            for f in rx {
                match f {
                    Feed::Data(data) => {
                        sha.update(&data[..]);
                        if let Some(x) = xet.as_mut() {
                            x.update(&data[..]);
                        }
                    }
                    Feed::Xet(h) => xet = Some(h),
                }
            }
            (Sha256(sha.finalize().into()), xet.map(|x| x.finalize()))
        });
        FileSha::Thread { feed, hasher }
    }

    /// Computes the Xet hash from the next bytes on, with `hasher`.
    fn start_xet(&mut self, hasher: Box<xethash::Hasher>) {
        match self {
            FileSha::Inline(_, xet) => *xet = Some(hasher),
            FileSha::Thread { feed, .. } => {
                // A send fails only if the hasher is gone; `finish` reports that.
                let _ = feed.send(Feed::Xet(hasher));
            }
        }
    }

    fn update(&mut self, data: &Arc<Vec<u8>>) {
        match self {
            FileSha::Inline(sha, xet) => {
                sha.update(&data[..]);
                if let Some(x) = xet.as_mut() {
                    x.update(&data[..]);
                }
            }
            FileSha::Thread { feed, .. } => {
                let _ = feed.send(Feed::Data(data.clone()));
            }
        }
    }

    /// The sha256 and, where it was computed, the Xet hash.
    fn finish(self) -> Result<(Sha256, Option<XetHash>)> {
        match self {
            FileSha::Inline(sha, xet) => {
                Ok((Sha256(sha.finalize().into()), xet.map(|x| x.finalize())))
            }
            FileSha::Thread { feed, hasher } => {
                drop(feed);
                hasher
                    .join()
                    .map_err(|_| StoreError::Invalid("hash thread panicked".into()))
            }
        }
    }
}

/// The chunked form of one source: taken from the index when the file is unchanged since
/// it was last read ([`unchanged_file`]), otherwise read ([`chunk_file`]); a file read
/// whole while it stood still gets its stamp recorded for the next ingest.
fn read_file(
    shared: &Shared<'_>,
    lane: usize,
    source: &Source,
    params: ChunkParams,
    jobs: &Sender<Job>,
    progress: &dyn Progress,
) -> Result<FileResult> {
    let mut opened = shared.opener.open_source(&source.path)?;
    if let Opened::Stored { sha256, chunks, .. } = &opened {
        if let Some(r) = stored_file(shared, source, sha256, chunks)? {
            progress.advance(r.size);
            return Ok(r);
        }
    }
    let stamp = opened.file().and_then(|f| shared.stamper.stamp_of(f));
    if let Some(st) = stamp.filter(|_| !shared.reread) {
        if let Some(r) = unchanged_file(shared, &st, source)? {
            progress.advance(r.size);
            return Ok(r);
        }
    }
    let record_as = opened
        .file()
        .zip(stamp)
        .filter(|(f, st)| stamps::may_record(f, st, shared.settle))
        .map(|(_, st)| st);
    let r = chunk_file(
        shared,
        lane,
        opened.reader(),
        source,
        params,
        jobs,
        progress,
    )?;
    // Best effort: the chunk list only saves a later ingest a read (or a pull a
    // download). The stamp is kept only if the file has the same stamp after the read:
    // nothing wrote to it meanwhile; it is recorded with the others once every file is read.
    let _ = shared.index.remember_file(&r.sha256, &r.chunks);
    xet_memo::remember(shared.index, r.size, &r.sha256, &r.xet, &r.chunks);
    if let Some((f, st)) = opened.file().zip(record_as) {
        if st.size == r.size && shared.stamper.stamp_again(f) == Some(st) {
            let digest = chunk_list_digest(&r.chunks);
            let mut stamps = shared.stamps.lock();
            stamps.push((st, r.sha256, digest));
        }
    }
    Ok(r)
}

/// The chunked form of a file the index knows unchanged: its stamp recorded (in this boot
/// and mount) with a content and the digest of that content's chunk list, that chunk list
/// recorded, every chunk in a pack the index knows (synced after the lease: never one gc
/// condemned), the lengths adding up to the file's size and the content the one a blob
/// name expects. None when any of that fails; the file is then read.
fn unchanged_file(
    shared: &Shared<'_>,
    stamp: &FileStamp,
    Source {
        sha256: expected,
        size,
        xet: expected_xet,
        ..
    }: &Source,
) -> Result<Option<FileResult>> {
    if stamp.size != *size {
        return Ok(None);
    }
    let Some(found) = shared.index.stamped_file(stamp)? else {
        return Ok(None);
    };
    let (sha256, chunks) = (found.sha256, found.chunks);
    if expected.is_some_and(|e| e != sha256) {
        return Ok(None);
    }
    // Without its Xet hash recorded (an index from before them), the file is read.
    let Some(xet) = xet_memo::recorded(shared.index, &sha256) else {
        return Ok(None);
    };
    if expected_xet.is_some_and(|e| e != xet) {
        return Ok(None);
    }
    Ok(take_unread(shared, *size, sha256, xet, &chunks))
}

/// The chunked form of content the store already holds, as an opener gave it
/// ([`Opened::Stored`]): taken unread on the terms of [`unchanged_file`] (the content the
/// source expects, its Xet hash recorded, every chunk in a pack the index knows with the
/// listed length, the lengths adding up to the size). None when any of that fails; the
/// opener's fallback stream is then read.
fn stored_file(
    shared: &Shared<'_>,
    source: &Source,
    sha256: &Sha256,
    chunks: &[(ChunkId, u32)],
) -> Result<Option<FileResult>> {
    if source.sha256.is_some_and(|e| e != *sha256) {
        return Ok(None);
    }
    let Some(xet) = xet_memo::recorded(shared.index, sha256) else {
        return Ok(None);
    };
    if source.xet.is_some_and(|e| e != xet) {
        return Ok(None);
    }
    let mut located = Vec::with_capacity(chunks.len());
    for (id, len) in chunks {
        match shared.index.chunk(id)? {
            Some(loc) if loc.raw_len == *len => located.push((*id, loc)),
            _ => return Ok(None),
        }
    }
    Ok(take_unread(shared, source.size, *sha256, xet, &located))
}

/// A file taken unread with these chunks (each in a pack the index knows): claims them as
/// stored and counts the file, unless the lengths do not add up to `size` (None).
fn take_unread(
    shared: &Shared<'_>,
    size: u64,
    sha256: Sha256,
    xet: XetHash,
    chunks: &[(ChunkId, ChunkLoc)],
) -> Option<FileResult> {
    if chunks
        .iter()
        .map(|(_, l)| u64::from(l.raw_len))
        .sum::<u64>()
        != size
    {
        return None;
    }
    {
        let mut claims = shared.claims.lock();
        for (id, loc) in chunks {
            claims.entry(*id).or_insert(Claim::Stored(*loc));
        }
    }
    shared
        .chunks
        .fetch_add(chunks.len() as u64, Ordering::Relaxed);
    shared.files_unchanged.fetch_add(1, Ordering::Relaxed);
    shared.bytes_unchanged.fetch_add(size, Ordering::Relaxed);
    Some(FileResult {
        size,
        sha256,
        xet,
        chunks: chunks.iter().map(|(id, l)| (*id, l.raw_len)).collect(),
    })
}

/// Reads a file through FastCDC, SHA-256 and (where [`XetMemo`] says) Xet's hash, handing
/// its chunks to the workers. `file` is the open file the reader reads, where the source
/// is one.
fn chunk_file(
    shared: &Shared<'_>,
    lane: usize,
    (reader, file): (Box<dyn std::io::Read + Send + '_>, Option<&std::fs::File>),
    Source {
        path,
        size: source_size,
        sha256: expected,
        xet: expected_xet,
    }: &Source,
    params: ChunkParams,
    jobs: &Sender<Job>,
    progress: &dyn Progress,
) -> Result<FileResult> {
    let (reply_tx, reply_rx) = unbounded();
    let mut memo = XetMemo::start(
        shared.index,
        path,
        file,
        *source_size,
        *expected,
        shared.reread,
    );
    let mut sha = FileSha::start(*source_size, memo.hashing());
    let mut size = 0u64;
    let mut seq = 0u64;
    let mut failed = None;
    for chunk in StreamChunker::with_size_hint(reader, params, *source_size) {
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
        let id = match memo.next(&data) {
            Ok(Step::Hash) => None,
            Ok(Step::Skip(id)) => id,
            Ok(Step::Start(hasher, id)) => {
                sha.start_xet(hasher);
                Some(id)
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        sha.update(&data);
        let job = Job {
            lane,
            seq,
            data,
            id,
            reply: reply_tx.clone(),
        };
        if jobs.send(job).is_err() {
            failed = Some(StoreError::Invalid("ingest workers stopped".into()));
            break;
        }
        seq += 1;
    }
    let (sha256, hashed) = sha.finish()?;
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
                    sha256.to_hex(),
                    exp.to_hex()
                ),
            });
        }
    }
    let (xet, tally) = memo.finish(&sha256, hashed)?;
    shared.xet_reused.fetch_add(tally.reused, Ordering::Relaxed);
    shared.xet_reread.fetch_add(tally.reread, Ordering::Relaxed);
    if let Some(exp) = expected_xet.filter(|e| *e != xet) {
        return Err(StoreError::BadSource {
            path: path.clone(),
            reason: format!(
                "content does not match the upstream's Xet hash: it is {}, the upstream says {}",
                xet, exp
            ),
        });
    }
    Ok(FileResult {
        size,
        sha256,
        xet,
        chunks: chunks.into_iter().map(|(_, id, n)| (id, n)).collect(),
    })
}

fn worker(shared: &Shared<'_>, jobs: Receiver<Job>) {
    let mut frame = Vec::new();
    for job in jobs {
        if shared.abort.load(Ordering::SeqCst) {
            continue; // drain so that readers never block
        }
        let id = job.id.unwrap_or_else(|| ChunkId::of(&job.data));
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
        let mut claims = shared.claims.lock();
        if claims.contains_key(&id) {
            return Ok(());
        }
        claims.insert(id, Claim::Pending);
    }
    if let Some(loc) = shared.index.chunk(&id)? {
        shared.claims.lock().insert(id, Claim::Stored(loc));
        return Ok(());
    }
    frame.clear();
    frame::encode(data, frame);
    shared.new_chunks.fetch_add(1, Ordering::Relaxed);
    shared
        .new_chunk_bytes
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    let full = {
        let mut open = shared.open_packs[lane].lock();
        let seq = open.0;
        let offset = open.1.add_frame(id, frame, data.len());
        shared.claims.lock().insert(
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
    let mut sealed = shared.sealed.lock();
    if sealed.len() <= seq {
        sealed.resize(seq + 1, None);
    }
    sealed[seq] = Some(id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::tests::loc;

    #[test]
    fn file_sha_inline_and_in_a_thread_agree_with_sha256_and_xet() {
        let parts: Vec<Arc<Vec<u8>>> = (0..5u8).map(|i| Arc::new(vec![i; 1000])).collect();
        let all: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        let want = Sha256(sha2::Sha256::digest(&all).into());
        for size in [0u64, 1, INLINE_SHA_MAX, INLINE_SHA_MAX + 1] {
            for xet in [true, false] {
                let mut sha = FileSha::start(size, xet);
                assert_eq!(matches!(sha, FileSha::Inline(..)), size <= INLINE_SHA_MAX);
                for p in &parts {
                    sha.update(p);
                }
                let got = sha.finish().unwrap();
                assert_eq!(got, (want, xet.then(|| xethash::file_hash(&all))));
            }
            // A Xet hasher handed over after two parts, holding those two: the same hash.
            let mut sha = FileSha::start(size, false);
            let mut late = Box::<xethash::Hasher>::default();
            for p in &parts[..2] {
                sha.update(p);
                late.update(p);
            }
            sha.start_xet(late);
            for p in &parts[2..] {
                sha.update(p);
            }
            assert_eq!(
                sha.finish().unwrap(),
                (want, Some(xethash::file_hash(&all)))
            );
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
}
