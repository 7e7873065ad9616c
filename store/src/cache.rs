//! A shared cache of decoded, verified chunks with a byte budget, and the worker pool that
//! fills it.
//!
//! Readers that serve many small requests (the FUSE mount) ask for chunks here instead of
//! reading packs themselves. A chunk missing from the cache is fetched, decoded and checked
//! against its BLAKE3 id by a worker thread, never by the caller's thread, so a slow fetch
//! holds one worker, and several requests for the same chunk wait for the one fetch (each
//! waiter sleeps on that chunk's own slot, so a finished fetch wakes only its waiters).
//! Prefetches are requests nobody waits for. When the decoded bytes pass the budget, the
//! least recently used ready chunks are dropped; chunks being loaded are never dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex};

use chunker::ChunkId;

use crate::backend::ObjectStore;
use crate::pack;
use crate::{Result, StoreError};

/// Where to fetch one chunk from.
#[derive(Clone, Debug)]
pub struct ChunkSource {
    /// Pack key.
    pub key: Arc<str>,
    /// Chunk id (checked after decoding).
    pub id: ChunkId,
    /// Frame offset in the pack.
    pub offset: u64,
    /// Frame length.
    pub frame_len: u32,
    /// Uncompressed length.
    pub raw_len: u32,
}

type Outcome = std::result::Result<Arc<Vec<u8>>, String>;

/// One fetch in flight: its waiters sleep here until the outcome is set.
#[derive(Default)]
struct Slot {
    outcome: Mutex<Option<Outcome>>,
    done: Condvar,
}

impl Slot {
    fn wait(&self) -> Outcome {
        let mut g = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(o) = g.as_ref() {
                return o.clone();
            }
            g = self.done.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn set(&self, o: Outcome) {
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(o);
        self.done.notify_all();
    }
}

enum Entry {
    Loading(Arc<Slot>),
    Ready { data: Arc<Vec<u8>>, tick: u64 },
}

#[derive(Default)]
struct Inner {
    map: HashMap<ChunkId, Entry>,
    lru: BTreeMap<u64, ChunkId>,
    bytes: usize,
    loading_bytes: usize,
    tick: u64,
}

/// Decoded chunks shared by every reader of a store.
pub struct ChunkCache {
    backend: Arc<dyn ObjectStore>,
    inner: Mutex<Inner>,
    budget: usize,
    pool: rayon::ThreadPool,
}

impl ChunkCache {
    /// A cache holding at most about `budget` bytes of decoded chunks, fetching with
    /// `workers` threads.
    pub fn new(backend: Arc<dyn ObjectStore>, budget: usize, workers: usize) -> Result<ChunkCache> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(workers.max(1))
            .thread_name(|i| format!("modelcas-fetch-{i}"))
            .build()
            .map_err(|e| StoreError::Invalid(format!("cannot start fetch threads: {e}")))?;
        Ok(ChunkCache {
            backend,
            inner: Mutex::new(Inner::default()),
            budget,
            pool,
        })
    }

    /// The byte budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Decoded bytes held now (ready chunks).
    pub fn held_bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chunk's bytes, fetching it if needed; blocks until they are there.
    pub fn get(self: &Arc<Self>, src: &ChunkSource) -> Result<Arc<Vec<u8>>> {
        let slot = {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            match inner.map.get_mut(&src.id) {
                Some(Entry::Ready { data, tick: t }) => {
                    let data = data.clone();
                    let old = std::mem::replace(t, tick);
                    inner.lru.remove(&old);
                    inner.lru.insert(tick, src.id);
                    return Ok(data);
                }
                Some(Entry::Loading(slot)) => slot.clone(),
                None => self.start_fetch(&mut inner, src),
            }
        };
        slot.wait().map_err(|reason| StoreError::CorruptChunk {
            chunk: src.id.to_hex(),
            pack: src.key.to_string(),
            offset: src.offset,
            reason,
        })
    }

    /// Starts fetching the chunk unless it is cached, loading, or the budget is taken by
    /// chunks still loading (prefetch never pushes memory past the budget). Returns
    /// whether the chunk is cached or on its way.
    pub fn prefetch(self: &Arc<Self>, src: &ChunkSource) -> bool {
        let mut inner = self.lock();
        if inner.map.contains_key(&src.id) {
            return true;
        }
        if inner.loading_bytes + src.raw_len as usize > self.budget / 2 {
            return false;
        }
        self.start_fetch(&mut inner, src);
        true
    }

    fn start_fetch(self: &Arc<Self>, inner: &mut Inner, src: &ChunkSource) -> Arc<Slot> {
        let slot = Arc::new(Slot::default());
        inner.map.insert(src.id, Entry::Loading(slot.clone()));
        inner.loading_bytes += src.raw_len as usize;
        let (me, src, s) = (self.clone(), src.clone(), slot.clone());
        self.pool.spawn(move || {
            let result = pack::read_chunk(
                me.backend.as_ref(),
                &src.key,
                &src.id,
                src.offset,
                src.frame_len,
            );
            let outcome = {
                let mut inner = me.lock();
                inner.loading_bytes = inner.loading_bytes.saturating_sub(src.raw_len as usize);
                match result {
                    Ok(data) => {
                        let data = Arc::new(data);
                        inner.tick += 1;
                        let tick = inner.tick;
                        inner.bytes += data.len();
                        inner.map.insert(
                            src.id,
                            Entry::Ready {
                                data: data.clone(),
                                tick,
                            },
                        );
                        inner.lru.insert(tick, src.id);
                        me.evict(&mut inner);
                        Ok(data)
                    }
                    Err(e) => {
                        // Forget the failure so that a later read tries again.
                        inner.map.remove(&src.id);
                        Err(match e {
                            StoreError::CorruptChunk { reason, .. } => reason,
                            other => other.to_string(),
                        })
                    }
                }
            };
            s.set(outcome);
        });
        slot
    }

    fn evict(&self, inner: &mut Inner) {
        while inner.bytes > self.budget {
            let Some((&tick, &id)) = inner.lru.iter().next() else {
                break;
            };
            inner.lru.remove(&tick);
            if let Some(Entry::Ready { data, .. }) = inner.map.remove(&id) {
                inner.bytes -= data.len();
            }
        }
    }
}
