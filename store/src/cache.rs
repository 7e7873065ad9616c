//! A shared cache of decoded, verified chunks with a byte budget, and the worker pool that
//! fills it.
//!
//! Readers that serve many small requests (the FUSE mount) ask for chunks here instead of
//! reading packs themselves. A chunk missing from the cache is fetched, decoded and checked
//! against its BLAKE3 id by a worker thread, never by the caller's thread, so a slow fetch
//! holds one worker, and several requests for the same chunk wait for the one fetch.
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

enum Entry {
    Loading,
    Ready { data: Arc<Vec<u8>>, tick: u64 },
    Failed(String),
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
    ready: Condvar,
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
            ready: Condvar::new(),
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
        let mut inner = self.lock();
        loop {
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
                Some(Entry::Loading) => {
                    inner = self.ready.wait(inner).unwrap_or_else(|p| p.into_inner());
                }
                Some(Entry::Failed(reason)) => {
                    let reason = reason.clone();
                    inner.map.remove(&src.id);
                    return Err(StoreError::CorruptChunk {
                        chunk: src.id.to_hex(),
                        pack: src.key.to_string(),
                        offset: src.offset,
                        reason,
                    });
                }
                None => {
                    inner.map.insert(src.id, Entry::Loading);
                    inner.loading_bytes += src.raw_len as usize;
                    drop(inner);
                    self.spawn_fetch(src.clone());
                    inner = self.lock();
                }
            }
        }
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
        inner.map.insert(src.id, Entry::Loading);
        inner.loading_bytes += src.raw_len as usize;
        drop(inner);
        self.spawn_fetch(src.clone());
        true
    }

    fn spawn_fetch(self: &Arc<Self>, src: ChunkSource) {
        let me = self.clone();
        self.pool.spawn(move || {
            let result = pack::read_chunk(
                me.backend.as_ref(),
                &src.key,
                &src.id,
                src.offset,
                src.frame_len,
            );
            let mut inner = me.lock();
            inner.loading_bytes = inner.loading_bytes.saturating_sub(src.raw_len as usize);
            match result {
                Ok(data) => {
                    inner.tick += 1;
                    let tick = inner.tick;
                    inner.bytes += data.len();
                    inner.map.insert(
                        src.id,
                        Entry::Ready {
                            data: Arc::new(data),
                            tick,
                        },
                    );
                    inner.lru.insert(tick, src.id);
                    me.evict(&mut inner);
                }
                Err(e) => {
                    let reason = match e {
                        StoreError::CorruptChunk { reason, .. } => reason,
                        other => other.to_string(),
                    };
                    inner.map.insert(src.id, Entry::Failed(reason));
                }
            }
            drop(inner);
            me.ready.notify_all();
        });
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
