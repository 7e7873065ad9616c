//! Pack blocks for nodes: block `n` of pack `P` is bytes `[n·2²⁰, (n+1)·2²⁰)` of the pack,
//! assembled from the pack's header, its frames and its footer, so that the bucket sends
//! each frame once however many nodes (or caches) ask at once.
//!
//! * Footers (size, header, footer and trailer bytes) are read once per pack and kept
//!   ([`FOOTER_BUDGET`]); the first read checks that the pack tiles (header, frames end to
//!   end, footer): a pack that does not is refused rather than served with bytes no check
//!   covers.
//! * Frames come from the hub's chunk cache (the store's disk cache, named by chunk id) when
//!   it holds one of the right length, checked (decoded, BLAKE3) once per process and file
//!   stamp; else from a fetch in flight (single-flight per frame: waiters take its bytes);
//!   else this request claims them, fetches each run of adjacent claimed frames with one
//!   ranged GET, checks every frame, and keeps it (on disk before it leaves the flights, so
//!   that a later claim finds it there: with a chunk cache each frame leaves the bucket once;
//!   without one, only requests at the same moment share a fetch). A request fetches its own claims before
//!   it waits on others', so no two wait on each other.
//! * `fresh` (a node found a wrong byte and asks past every cache) drops the verdicts of the
//!   block's frames: each is checked again from disk.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use format::layout::pack_key;
use format::pack::{
    decode_footer, decode_trailer, FooterEntry, PackId, PACK_HEADER_LEN, PACK_MAGIC,
    PACK_TRAILER_LEN,
};
use format::ChunkId;
use objects::hub_wire::block_range;
use parking_lot::{Condvar, Mutex};
use quick_cache::sync::Cache;
use repo::disk_cache::EntryStamp;
use repo::{again, Store, StoreError};

/// Memory for footers kept (48 bytes an entry plus the raw footer).
const FOOTER_BUDGET: u64 = 64 << 20;
/// Verdicts on cached frames kept (one per chunk: 512 KiB chunks → 128 GiB of frames).
const VERDICTS: usize = 262_144;

/// Why a block cannot be served.
#[derive(Clone, Debug)]
pub enum BlockError {
    /// The block lies past the pack's end (the pack's size).
    PastEnd(u64),
    /// The pack is not in the store (gc removed it: the node follows `moved/`).
    Gone,
    /// The bucket's own bytes fail their check (every hub would read the same).
    Bad(String),
    /// The bucket failed (try again, or another hub).
    Store(String),
}

impl From<StoreError> for BlockError {
    fn from(e: StoreError) -> BlockError {
        if e.is_not_found() {
            return BlockError::Gone;
        }
        match e {
            e @ (StoreError::CorruptChunk { .. } | StoreError::CorruptObject { .. }) => {
                BlockError::Bad(e.to_string())
            }
            e => BlockError::Store(e.to_string()),
        }
    }
}

impl From<objects::ObjectError> for BlockError {
    fn from(e: objects::ObjectError) -> BlockError {
        StoreError::from(e).into()
    }
}

/// What a pack's blocks need besides its frames.
struct Footer {
    size: u64,
    header: Vec<u8>,
    /// Frames in offset order (they tile `[PACK_HEADER_LEN, tail_at)`).
    entries: Vec<FooterEntry>,
    /// Where the footer starts; `tail` is the bytes from there to the end.
    tail_at: u64,
    tail: Vec<u8>,
}

#[derive(Clone)]
struct FooterWeight;

impl quick_cache::Weighter<PackId, Arc<Footer>> for FooterWeight {
    fn weight(&self, _: &PackId, f: &Arc<Footer>) -> u64 {
        (f.entries.len() * 48 + f.tail.len() + 128) as u64
    }
}

/// A frame being fetched: its outcome, once there.
#[derive(Default)]
struct Slot {
    outcome: Mutex<Option<Result<Bytes, BlockError>>>,
    ready: Condvar,
}

impl Slot {
    fn wait(&self) -> Result<Bytes, BlockError> {
        let mut o = self.outcome.lock();
        loop {
            if let Some(r) = o.as_ref() {
                return r.clone();
            }
            self.ready.wait(&mut o);
        }
    }
}

/// The frames in flight, by pack and offset.
type Flights = Mutex<HashMap<(PackId, u32), Arc<Slot>>>;

/// A frame this request claimed: finished (and its waiters woken) when dropped, with an
/// error if the request never gave it an outcome.
struct Claim<'a> {
    flights: &'a Flights,
    at: (PackId, u32),
    slot: Arc<Slot>,
}

impl Claim<'_> {
    /// Gives the frame its outcome (the first given stands), takes it out of the flights
    /// (only this claim's entry: a later fetch of the same frame has its own) and wakes its
    /// waiters.
    fn finish(&self, r: Result<Bytes, BlockError>) {
        {
            let mut o = self.slot.outcome.lock();
            if o.is_some() {
                return;
            }
            *o = Some(r);
        }
        let mut flights = self.flights.lock();
        if flights
            .get(&self.at)
            .is_some_and(|s| Arc::ptr_eq(s, &self.slot))
        {
            flights.remove(&self.at);
        }
        drop(flights);
        self.slot.ready.notify_all();
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.finish(Err(BlockError::Store("the fetch was abandoned".into())));
    }
}

/// Counts of what blocks cost, for the metrics and tests.
#[derive(Debug, Default)]
pub struct BlockCounts {
    pub frames_fetched: std::sync::atomic::AtomicU64,
    pub frame_cache_hits: std::sync::atomic::AtomicU64,
    pub flight_waits: std::sync::atomic::AtomicU64,
    pub frame_checks: std::sync::atomic::AtomicU64,
}

/// Serves blocks of the store's packs.
pub struct Blocks {
    store: Store,
    footers: Cache<PackId, Arc<Footer>, FooterWeight>,
    flights: Flights,
    verdicts: Cache<ChunkId, EntryStamp>,
    pub counts: BlockCounts,
}

/// Counts `n` in `c` and in the endpoint's metrics as `result`.
fn add(c: &std::sync::atomic::AtomicU64, n: u64) {
    c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

fn counted(c: &std::sync::atomic::AtomicU64, result: &'static str, n: u64) {
    add(c, n);
    crate::metrics::METRICS.store_frames(result, n);
}

impl Blocks {
    pub fn new(store: Store) -> Blocks {
        Blocks {
            store,
            footers: Cache::with_weighter(16_384, FOOTER_BUDGET, FooterWeight),
            flights: Mutex::default(),
            verdicts: Cache::new(VERDICTS),
            counts: BlockCounts::default(),
        }
    }

    /// Block `n` of pack `id`, every frame in it checked.
    pub fn block(&self, id: &PackId, n: u64, fresh: bool) -> Result<Bytes, BlockError> {
        let key = pack_key(id);
        let footer = self
            .footers
            .get_or_insert_with(id, || read_footer(&self.store, &key).map(Arc::new))?;
        let (s, e) = block_range(n, footer.size).ok_or(BlockError::PastEnd(footer.size))?;
        let mut out = Vec::with_capacity((e - s) as usize);
        let header_len = PACK_HEADER_LEN as u64;
        if s < header_len {
            out.extend_from_slice(&footer.header[s as usize..e.min(header_len) as usize]);
        }
        let first = footer
            .entries
            .partition_point(|f| f.offset as u64 + f.frame_len as u64 <= s);
        let frames: Vec<&FooterEntry> = footer.entries[first..]
            .iter()
            .take_while(|f| (f.offset as u64) < e)
            .collect();
        let bytes = self.frames(id, &key, &frames, fresh)?;
        for (f, b) in frames.iter().zip(&bytes) {
            let at = f.offset as u64;
            let (from, to) = (s.max(at) - at, e.min(at + f.frame_len as u64) - at);
            out.extend_from_slice(&b[from as usize..to as usize]);
        }
        if e > footer.tail_at {
            let from = s.max(footer.tail_at) - footer.tail_at;
            out.extend_from_slice(&footer.tail[from as usize..(e - footer.tail_at) as usize]);
        }
        if out.len() as u64 != e - s {
            return Err(BlockError::Bad(format!(
                "{key}: block {n} assembled to a wrong length"
            )));
        }
        Ok(Bytes::from(out))
    }

    /// The bytes of `frames` (adjacent frames of pack `id`), each checked.
    fn frames(
        &self,
        id: &PackId,
        key: &str,
        frames: &[&FooterEntry],
        fresh: bool,
    ) -> Result<Vec<Bytes>, BlockError> {
        let mut out: Vec<Option<Bytes>> = vec![None; frames.len()];
        let mut mine: Vec<(usize, Claim<'_>)> = Vec::new();
        let mut waits: Vec<(usize, Arc<Slot>)> = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            if fresh {
                self.verdicts.remove(&f.id);
            }
            if let Some(b) = self.cached_frame(f, key) {
                out[i] = Some(b);
                continue;
            }
            let at = (*id, f.offset);
            let mut flights = self.flights.lock();
            match flights.get(&at) {
                Some(slot) => waits.push((i, slot.clone())),
                None => {
                    let slot = Arc::new(Slot::default());
                    flights.insert(at, slot.clone());
                    let flights = &self.flights;
                    mine.push((i, Claim { flights, at, slot }));
                }
            }
        }
        // A claim made just after another request finished the same frame: that request
        // wrote the chunk cache before it left the flights, so the cache has it now.
        mine.retain(|(i, claim)| match self.cached_frame(frames[*i], key) {
            Some(b) => {
                claim.finish(Ok(b.clone()));
                out[*i] = Some(b);
                false
            }
            None => true,
        });
        let mut first_error = None;
        for run in runs(&mine) {
            let got = self.fetch_run(
                key,
                &run.iter().map(|(i, _)| frames[*i]).collect::<Vec<_>>(),
            );
            for (k, (i, claim)) in run.iter().enumerate() {
                let r = got.as_ref().map(|v| v[k].clone()).map_err(Clone::clone);
                claim.finish(r.clone());
                match r {
                    Ok(b) => out[*i] = Some(b),
                    Err(e) => first_error = first_error.or(Some(e)),
                }
            }
        }
        drop(mine);
        if let Some(e) = first_error {
            return Err(e);
        }
        for (i, slot) in waits {
            counted(&self.counts.flight_waits, "flight_wait", 1);
            out[i] = Some(slot.wait()?);
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// The cached frame of `f` when the disk cache holds one of its length that passes its
    /// check (once per process and file stamp); a damaged entry is removed.
    fn cached_frame(&self, f: &FooterEntry, key: &str) -> Option<Bytes> {
        let disk = self.store.disk_cache()?;
        let (bytes, stamp) = disk.get_stamped(&f.id)?;
        if bytes.len() != f.frame_len as usize {
            // Damaged (cut short), or another encoding of the chunk: removed, so that the
            // frame fetched now is kept in its place and the bucket sends it once.
            disk.remove(&f.id);
            return None;
        }
        if self.verdicts.get(&f.id) != Some(stamp) {
            counted(&self.counts.frame_checks, "checked", 1);
            if repo::pack::decode_checked(&bytes, &f.id, key, f.offset as u64).is_err() {
                tracing::warn!(
                    "hub chunk cache: {} failed its check; fetched again",
                    f.id.to_hex()
                );
                disk.remove(&f.id);
                return None;
            }
            self.verdicts.insert(f.id, stamp);
        }
        counted(&self.counts.frame_cache_hits, "cache_hit", 1);
        Some(Bytes::from(bytes))
    }

    /// Fetches adjacent frames with one ranged GET, checks each and keeps it on disk.
    fn fetch_run(&self, key: &str, run: &[&FooterEntry]) -> Result<Vec<Bytes>, BlockError> {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            return Ok(Vec::new());
        };
        let start = first.offset as u64;
        let len = last.offset as u64 + last.frame_len as u64 - start;
        let bytes = Bytes::from(self.store.backend().get_range(key, start, len)?);
        counted(&self.counts.frames_fetched, "fetched", run.len() as u64);
        let disk = self.store.disk_cache();
        let mut out = Vec::with_capacity(run.len());
        for f in run {
            let at = (f.offset as u64 - start) as usize;
            let Some(frame) = bytes.get(at..at + f.frame_len as usize) else {
                return Err(BlockError::Bad(format!(
                    "{key}: the read ended before a frame"
                )));
            };
            counted(&self.counts.frame_checks, "checked", 1);
            let (offset, len) = (f.offset as u64, f.frame_len);
            let frame = match repo::pack::decode_checked(frame, &f.id, key, offset) {
                Ok(_) => bytes.slice(at..at + len as usize),
                // Wrong bytes from the store: asked of its other sources (a hub of a hub:
                // the upstream hub's other addresses) before the block fails.
                Err(first) => {
                    let backend = self.store.backend().as_ref();
                    let again = repo::pack::read_frame_checked(backend, key, &f.id, offset, len);
                    Bytes::from(again.map_err(|_| first)?.0)
                }
            };
            if let Some(stamp) = disk.and_then(|d| d.put_stamped(&f.id, &frame)) {
                self.verdicts.insert(f.id, stamp);
            }
            out.push(frame);
        }
        Ok(out)
    }
}

/// Runs of claims whose frames are adjacent in the pack (consecutive in `frames`).
fn runs<'a, 'b>(mine: &'a [(usize, Claim<'b>)]) -> Vec<&'a [(usize, Claim<'b>)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..=mine.len() {
        if k == mine.len() || mine[k].0 != mine[k - 1].0 + 1 {
            out.push(&mine[start..k]);
            start = k;
        }
    }
    out
}

/// Reads the pack's size, header, footer and trailer, and checks that the pack tiles.
fn read_footer(store: &Store, key: &str) -> Result<Footer, BlockError> {
    let backend = store.backend();
    let size = backend.size(key)?.ok_or(BlockError::Gone)?;
    let (h, t) = (PACK_HEADER_LEN as u64, PACK_TRAILER_LEN as u64);
    if size < h + t {
        return Err(BlockError::Bad(format!(
            "{key}: {size} bytes is too short for a pack"
        )));
    }
    // Each piece checked, and asked again of the store's other sources when it fails (a
    // hub of a hub: the next upstream address).
    let magic = |b: Vec<u8>| match b.starts_with(PACK_MAGIC) {
        true => Ok(b),
        false => Err(StoreError::CorruptObject {
            key: key.to_string(),
            reason: "not a pack (magic)".into(),
        }),
    };
    let header = again::range_decoded(backend.as_ref(), key, 0, h, magic)?;
    let trailer_of = |b: Vec<u8>| Ok((decode_trailer(key, size, &b)?, b));
    let (footer_len, trailer) =
        again::range_decoded(backend.as_ref(), key, size - t, t, trailer_of)?;
    let tail_at = size - t - footer_len;
    let footer_of = |b: Vec<u8>| Ok((decode_footer(key, tail_at, &b)?, b));
    let (footer, mut tail) =
        again::range_decoded(backend.as_ref(), key, tail_at, footer_len, footer_of)?;
    tail.extend_from_slice(&trailer);
    let mut entries = footer.entries;
    entries.sort_by_key(|e| e.offset);
    let mut expected = h;
    for e in &entries {
        if e.offset as u64 != expected {
            return Err(BlockError::Bad(format!(
                "{key}: frames do not tile the pack (a frame at {}, expected {expected})",
                e.offset
            )));
        }
        expected += e.frame_len as u64;
    }
    if expected != tail_at {
        return Err(BlockError::Bad(format!(
            "{key}: frames end at {expected}, the footer at {tail_at}"
        )));
    }
    Ok(Footer {
        size,
        header,
        entries,
        tail_at,
        tail,
    })
}
