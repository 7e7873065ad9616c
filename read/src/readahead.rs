//! Per-open-file reads with sequential detection and a growing read-ahead window, on top of
//! the shared [`ChunkCache`].
//!
//! How model servers read: `safe_open` memory-maps a shard and faults pages in roughly
//! sequential order with jumps; the `eager`/`prefetch` strategies read whole files
//! sequentially, sometimes from several threads in 16 MiB blocks; tokenizer and config
//! files are small reads. The kernel's own read-ahead reorders requests a little. So:
//!
//! * A read counts as sequential when it starts no more than
//!   [`ReadaheadConfig::back_slack`] before or [`ReadaheadConfig::forward_slack`] after where
//!   the previous read ended; small reorderings do not reset the stream.
//! * While reads stay sequential the window doubles from [`ReadaheadConfig::initial_window`]
//!   up to [`ReadaheadConfig::max_window`] (bounded further by half the cache's budget
//!   for ready chunks); a random read resets it.
//! * Chunks in the window ahead are handed to the cache as prefetches, fetched and decoded
//!   by the cache's workers while the reader consumes earlier ones.
//! * Offset → chunk is a binary search over the chunks' start offsets.
//! * For a `.safetensors` file the mount calls [`FileStream::follow_safetensors`]: the
//!   stream reads the header and, while the reader follows the loader's walk (a
//!   [`TensorPlan`]: tensors in name order, as vLLM visits them), keeps a window of that
//!   walk in the cache, wherever in the file its tensors lie; the window grows like the
//!   sequential one, up to [`ReadaheadConfig::tensor_window`]. Readers that do not follow
//!   the walk (`dd`, random reads), reads outside the tensors, and files whose header is
//!   refused get the sequential read-ahead above.
//!
//! The windows and slacks are one [`ReadaheadConfig`], given to each stream by whoever
//! opens it (the mount's and serve's options carry it; its `Default` is what they use).
//! Read-ahead only decides what to fetch early: whatever the config, every read returns the
//! file's bytes (or an error), never other bytes.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::cache::ChunkCache;
use crate::chunk_map::ChunkMap;
use crate::safetensors;
use crate::tensor_plan::{TensorOrder, TensorPlan};
use repo::manifest::{FileEntry, Manifest};
use repo::{Result, StoreError};

/// The read-ahead windows and the slack of the sequential test, in bytes. `Default` gives
/// the values the mount and serve use; a field of 0 turns that part off (an initial window
/// of 0 never prefetches; slacks of 0 count only exactly adjacent reads as sequential).
/// Every window is further bounded by half the cache's budget for ready chunks, so
/// prefetched chunks do not push out the ones being read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadaheadConfig {
    /// Window after the first sequential read. Default 8 MiB (a few default chunks).
    pub initial_window: u64,
    /// Largest sequential window. Default 256 MiB; on 2 cores the decoder saturates well
    /// before.
    pub max_window: u64,
    /// A read starting this far before the previous end still counts as sequential.
    /// Default 1 MiB (the kernel's read-ahead reorders requests a little).
    pub back_slack: u64,
    /// A read starting this far after the previous end still counts as sequential.
    /// Default 16 MiB (a loader skipping a small tensor, or a page walk's holes).
    pub forward_slack: u64,
    /// Bytes of a safetensors loader's walk kept in flight or cached ahead of it. Default
    /// 128 MiB, hf-mount's largest window (21 MiB in effect with the default 64 MiB cache).
    pub tensor_window: u64,
}

impl Default for ReadaheadConfig {
    fn default() -> Self {
        ReadaheadConfig {
            initial_window: 8 * 1024 * 1024,
            max_window: 256 * 1024 * 1024,
            back_slack: 1024 * 1024,
            forward_slack: 16 * 1024 * 1024,
            tensor_window: 128 * 1024 * 1024,
        }
    }
}

impl ReadaheadConfig {
    /// Whether a read starting at `at` continues one that ended at `last`.
    fn near(&self, at: u64, last: u64) -> bool {
        at.saturating_add(self.back_slack) >= last && at <= last.saturating_add(self.forward_slack)
    }

    /// The next window after `window` (0: none yet), doubling up to `cap`.
    fn grow(&self, window: u64, cap: u64) -> u64 {
        if window == 0 {
            self.initial_window.min(cap)
        } else {
            window.saturating_mul(2).min(cap)
        }
    }
}

struct State {
    last_end: u64,
    window: u64,
    prefetched_to: u64,
    /// Plan position up to which the tensor walk was handed to the cache.
    plan_to: u64,
    /// Plan position where the last read ended.
    plan_last: u64,
    /// Read-ahead window along the walk; 0 while the reader does not follow it.
    plan_window: u64,
    /// Whether the reader's last jump between tensors followed the walk rather than the
    /// file's order.
    trust_plan: bool,
    /// Whether the last read was sequential in the walk.
    plan_streak: bool,
}

/// One open file of a revision.
pub struct FileStream {
    cache: Arc<ChunkCache>,
    config: ReadaheadConfig,
    map: ChunkMap,
    state: Mutex<State>,
    plan: std::sync::OnceLock<TensorPlan>,
}

impl FileStream {
    /// A stream over `file` of `manifest`, reading through `cache`, with the read-ahead of
    /// `config`.
    pub fn new(
        cache: Arc<ChunkCache>,
        config: ReadaheadConfig,
        manifest: &Manifest,
        file: &FileEntry,
    ) -> Result<FileStream> {
        Ok(FileStream {
            cache,
            config,
            map: ChunkMap::new(manifest, file)?,
            state: Mutex::new(State {
                last_end: 0,
                window: 0,
                prefetched_to: 0,
                plan_to: 0,
                plan_last: 0,
                plan_window: 0,
                trust_plan: true,
                plan_streak: false,
            }),
            plan: std::sync::OnceLock::new(),
        })
    }

    /// File size.
    pub fn size(&self) -> u64 {
        self.map.size()
    }

    /// The read-ahead this stream was opened with.
    pub fn config(&self) -> &ReadaheadConfig {
        &self.config
    }

    /// Half the cache's budget for ready chunks (at least 1 byte): the bound on every window,
    /// so that the chunks read last and the window ahead both fit (a chunk prefetched early
    /// is older, for the cache's least-recently-used order, than the chunks read since).
    fn half_budget(&self) -> u64 {
        (self.cache.ready_budget() as u64 / 2).max(1)
    }

    /// The chunk holding `offset` (below the size), or the last one.
    fn chunk_at(&self, offset: u64) -> usize {
        self.map
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// Reads up to `len` bytes at `offset` (fewer at the end of the file), prefetching ahead
    /// when the reads are sequential.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        if offset >= self.size() || len == 0 {
            return Ok(Vec::new());
        }
        let end = (offset + len as u64).min(self.size());
        self.ahead(offset, end);
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut i = self.chunk_at(offset);
        while i < self.map.sources.len() && self.map.starts[i] < end {
            let data = self.chunk(i)?;
            let from = offset.max(self.map.starts[i]) - self.map.starts[i];
            let to = end.min(self.map.starts[i + 1]) - self.map.starts[i];
            out.extend_from_slice(&data[from as usize..to as usize]);
            i += 1;
        }
        Ok(out)
    }

    /// The chunk holding byte `pos` (which must lie below the file's size), prefetching
    /// ahead as a read of `[pos, to)` would: its offset in the file and its decoded bytes,
    /// shared with the cache. For readers that hand bytes on without copying them (serve).
    pub fn chunk_containing(&self, pos: u64, to: u64) -> Result<(u64, Arc<Vec<u8>>)> {
        if pos >= self.size() {
            return Err(StoreError::Invalid(format!(
                "read at {pos}, past the end of a {}-byte file",
                self.size()
            )));
        }
        let i = self.chunk_at(pos);
        self.ahead(pos, to.clamp(pos + 1, self.map.starts[i + 1]));
        Ok((self.map.starts[i], self.chunk(i)?))
    }

    /// Chunk `i` through the cache, checked to have the length the manifest records (so
    /// slicing it by the recorded offsets cannot go out of bounds).
    fn chunk(&self, i: usize) -> Result<Arc<Vec<u8>>> {
        let src = &self.map.sources[i];
        let data = self.cache.get(src)?;
        if data.len() != src.raw_len as usize {
            return Err(StoreError::CorruptChunk {
                chunk: src.id.to_hex(),
                pack: src.key.to_string(),
                offset: src.offset,
                reason: format!(
                    "{} bytes where the manifest records {}",
                    data.len(),
                    src.raw_len
                ),
            });
        }
        Ok(data)
    }

    /// Reads the safetensors header at the start of the file and, if it is sound, follows
    /// the loader's walk in `order` from now on. Returns the number of tensors; a refused
    /// header is an error, and the stream keeps its sequential read-ahead.
    pub fn follow_safetensors(&self, order: TensorOrder) -> Result<usize> {
        let invalid = |e: safetensors::HeaderError| StoreError::Invalid(e.to_string());
        let n = safetensors::header_len(&self.read(0, 8)?, self.size()).map_err(invalid)?;
        let json = self.read(safetensors::PREFIX, n as usize)?;
        let layout = safetensors::parse(&json, self.size()).map_err(invalid)?;
        let Some(plan) = TensorPlan::new(&layout, order) else {
            return Ok(0);
        };
        let _ = self.plan.set(plan);
        // Reading the header is the start of the loader's walk.
        self.state.lock().plan_streak = true;
        if let Some(plan) = self.plan.get() {
            // Start on the first tensors now: the loader asks for them next.
            let window = self.config.initial_window.min(self.half_budget());
            self.plan_ahead(plan, 0, window);
        }
        Ok(layout.tensors.len())
    }

    /// Read-ahead for a read of `[offset, end)`: along the tensor walk while the reader
    /// follows it, else sequential.
    fn ahead(&self, offset: u64, end: u64) {
        if let Some(plan) = self.plan.get() {
            if let Some(pos) = plan.position(offset) {
                if let Some(window) = self.follows_plan(pos, offset, end) {
                    self.plan_ahead(plan, pos, window);
                    return;
                }
            }
        }
        self.plan_prefetch(offset, end);
    }

    /// Whether the reader follows the tensor walk; if so, the window to keep ahead of it.
    ///
    /// A read is *sequential in the walk* when its walk position `pos` lies within the
    /// slacks of where the previous read ended in the walk, and *sequential in the file*
    /// likewise for its offset. Within a tensor both hold; where they differ (a jump from
    /// one tensor to the next in one order and not the other), the order that held wins
    /// and is trusted until the other wins. Trusting the walk and sequential in it: the
    /// window doubles from the config's initial window up to half the cache budget (at most
    /// its tensor window). Otherwise (or with a window of 0) `None`: sequential read-ahead
    /// decides (a file-order reader, `dd`, and random reads are served as before). The file's sequential state
    /// is kept up to date either way. A read only starts prefetching along the walk when the
    /// read before it was sequential in the walk too.
    fn follows_plan(&self, pos: u64, offset: u64, end: u64) -> Option<u64> {
        let mut st = self.state.lock();
        let c = &self.config;
        let in_file = (offset == 0 && st.last_end == 0) || c.near(offset, st.last_end);
        let in_walk = c.near(pos, st.plan_last);
        if in_walk != in_file {
            st.trust_plan = in_walk;
        }
        let len = end - offset;
        st.plan_last = if in_walk {
            st.plan_last.max(pos + len)
        } else {
            pos + len
        };
        // Two reads in a row in the walk before any prefetch along it: a random reader
        // lands near its previous read now and then, and must not pay for a window each
        // time (that cost 20% of random 4 KiB reads when a single read sufficed).
        let streak = std::mem::replace(&mut st.plan_streak, in_walk);
        if !(st.trust_plan && in_walk && streak) {
            st.plan_window = 0;
            return None;
        }
        if in_file {
            st.last_end = st.last_end.max(end);
        } else {
            // A jump in the file: the sequential state starts again here, as it would for
            // the read itself.
            st.last_end = end;
            st.window = 0;
            st.prefetched_to = 0;
        }
        let cap = c.tensor_window.min(self.half_budget());
        st.plan_window = c.grow(st.plan_window, cap);
        // A window of 0 (read-ahead off): no prefetch, as for a reader off the walk.
        (st.plan_window > 0).then_some(st.plan_window)
    }

    /// Hands the cache the chunks of the next `window` bytes of the walk after the reader's
    /// place `pos`.
    fn plan_ahead(&self, plan: &TensorPlan, pos: u64, window: u64) {
        let (from, to) = {
            let mut st = self.state.lock();
            if st.plan_to > pos + window {
                st.plan_to = pos; // the reader went back: follow it from there
            }
            let from = st.plan_to.max(pos);
            let to = (pos + window).min(plan.total());
            // Refill in steps of a quarter window, so that runs are long enough to be
            // fetched with one ranged read.
            if to <= from || (to - from < window / 4 && to < plan.total()) {
                return;
            }
            st.plan_to = to;
            (from, to)
        };
        for (a, b) in plan.file_ranges(from, to) {
            let (first, last) = (self.chunk_at(a), self.chunk_at(b - 1) + 1);
            let accepted = self.cache.prefetch_run(&self.map.sources[first..last]);
            if first + accepted < last {
                // Budget taken by loads in flight: take up from here next time.
                let stop = self.map.starts[first + accepted].max(a);
                let mut st = self.state.lock();
                st.plan_to = st.plan_to.min(plan.position(stop).unwrap_or(from));
                break;
            }
        }
    }

    fn plan_prefetch(&self, offset: u64, end: u64) {
        let (from, to) = {
            let mut st = self.state.lock();
            let c = &self.config;
            let sequential = (offset == 0 && st.last_end == 0) || c.near(offset, st.last_end);
            let cap = c.max_window.min(self.half_budget());
            if sequential {
                st.window = c.grow(st.window, cap);
            } else {
                st.window = 0;
                st.prefetched_to = 0;
            }
            st.last_end = st.last_end.max(end);
            if !sequential {
                st.last_end = end;
            }
            let from = end.max(st.prefetched_to);
            let to = (end + st.window).min(self.size());
            if to > from {
                st.prefetched_to = to;
            }
            (from, to)
        };
        if to <= from {
            return;
        }
        let first = self.chunk_at(from);
        let mut last = first;
        while last < self.map.sources.len() && self.map.starts[last] < to {
            last += 1;
        }
        let accepted = self.cache.prefetch_run(&self.map.sources[first..last]);
        if first + accepted < last {
            // Budget taken by loads in flight: remember where we stopped.
            let mut st = self.state.lock();
            st.prefetched_to = st.prefetched_to.min(self.map.starts[first + accepted]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pack::{noise, one_pack};
    use format::names::{CommitId, RepoId};
    use format::Sha256;
    use repo::manifest::{ChunkRef, FileEntry};

    /// A file made of `chunks` in one pack, and a stream over it.
    fn stream(chunks: &[Vec<u8>], budget: usize) -> (FileStream, Vec<u8>) {
        stream_with(chunks, budget, ReadaheadConfig::default())
    }

    /// [`stream`] with the read-ahead of `config`.
    fn stream_with(
        chunks: &[Vec<u8>],
        budget: usize,
        config: ReadaheadConfig,
    ) -> (FileStream, Vec<u8>) {
        let p = one_pack(chunks);
        let file = FileEntry {
            path: "f".into(),
            size: chunks.iter().map(|c| c.len() as u64).sum(),
            sha256: Sha256([0; 32]),
            executable: false,
            chunks: p
                .entries
                .iter()
                .map(|e| ChunkRef {
                    id: e.id,
                    pack: 0,
                    offset: e.offset,
                    frame_len: e.frame_len,
                    raw_len: e.raw_len,
                })
                .collect(),
        };
        let m = Manifest {
            repo: RepoId::parse("a/b").unwrap(),
            commit: CommitId([1; 20]),
            ingested_at: 0,
            source: "test".into(),
            packs: vec![p.pack],
            files: vec![file.clone()],
            published: None,
            xet_hashes: Vec::new(),
        };
        let cache = Arc::new(ChunkCache::new(p.store.clone(), budget, 2).unwrap());
        let s = FileStream::new(cache, config, &m, &file).unwrap();
        (s, chunks.concat())
    }

    #[test]
    fn reads_any_range_byte_exact() {
        let chunks: Vec<Vec<u8>> = (0..5).map(|i| noise(10_000 + i * 777, i as u64)).collect();
        let (s, all) = stream(&chunks, 1 << 20);
        assert_eq!(s.size(), all.len() as u64);
        for (off, len) in [
            (0, 1),
            (0, all.len()),
            (9_999, 3),
            (12_345, 20_000),
            (all.len() - 1, 10),
        ] {
            let end = (off + len).min(all.len());
            assert_eq!(
                s.read(off as u64, len).unwrap(),
                &all[off..end],
                "{off}+{len}"
            );
        }
        assert!(s.read(all.len() as u64, 10).unwrap().is_empty());
        // chunk_containing: the chunk's start and its whole bytes.
        let (start, data) = s.chunk_containing(10_500, 11_000).unwrap();
        assert_eq!(start, 10_000);
        assert_eq!(&**data, &chunks[1]);
        assert!(s
            .chunk_containing(all.len() as u64, all.len() as u64 + 1)
            .is_err());
    }

    #[test]
    fn sequential_reads_prefetch_ahead() {
        let chunks: Vec<Vec<u8>> = (0..12).map(|i| noise(20_000, i as u64)).collect();
        let (s, all) = stream(&chunks, 1 << 20);
        let mut got = Vec::new();
        let mut off = 0u64;
        while off < all.len() as u64 {
            let d = s.read(off, 4096).unwrap();
            off += d.len() as u64;
            got.extend(d);
        }
        assert!(got == all);
        // After the first reads, chunks ahead were handed to the cache.
        assert!(s.state.lock().prefetched_to > 20_000);
    }

    #[test]
    fn the_config_sets_the_windows() {
        // The defaults are the windows the mount and serve have always used.
        let d = ReadaheadConfig::default();
        assert_eq!(
            (
                d.initial_window,
                d.max_window,
                d.back_slack,
                d.forward_slack,
                d.tensor_window
            ),
            (8 << 20, 256 << 20, 1 << 20, 16 << 20, 128 << 20)
        );
        let chunks: Vec<Vec<u8>> = (0..40).map(|i| noise(10_000, i as u64)).collect();
        let read_all = |s: &FileStream, all: &[u8]| {
            let mut off = 0u64;
            let mut ahead = 0u64;
            while off < all.len() as u64 {
                let d = s.read(off, 5_000).unwrap();
                assert!(d[..] == all[off as usize..off as usize + d.len()], "{off}");
                off += d.len() as u64;
                ahead = ahead.max(s.state.lock().prefetched_to.saturating_sub(off));
            }
            ahead
        };
        // Windows of 20,000 growing to 40,000 bytes: never more than that ahead of the
        // reader, although half the ready chunks' budget would allow about 350,000.
        let small = ReadaheadConfig {
            initial_window: 20_000,
            max_window: 40_000,
            ..d
        };
        let (s, all) = stream_with(&chunks, 1 << 20, small);
        assert_eq!(s.config(), &small);
        let ahead = read_all(&s, &all);
        assert!((20_000..=40_000).contains(&ahead), "{ahead}");
        // An initial window of 0: no read-ahead at all, the same bytes.
        let off = ReadaheadConfig {
            initial_window: 0,
            ..d
        };
        let (s, all) = stream_with(&chunks, 1 << 20, off);
        assert_eq!(read_all(&s, &all), 0);
        assert_eq!(s.state.lock().prefetched_to, 0);
    }

    /// A safetensors file of four 36,000-byte tensors laid out t3, t1, t2, t0 (so name
    /// order walks backwards and forwards through the file), cut into 4,000-byte chunks.
    fn safetensors_stream(budget: usize) -> (FileStream, Vec<u8>, u64) {
        let t = 36_000u64;
        let entries = [
            ("t3", 0, t),
            ("t1", t, 2 * t),
            ("t2", 2 * t, 3 * t),
            ("t0", 3 * t, 4 * t),
        ];
        let mut bytes = safetensors::tests::file(&entries, 0);
        let data_start = bytes.len() as u64;
        bytes.extend(noise(4 * t as usize, 99));
        let chunks: Vec<Vec<u8>> = bytes.chunks(4_000).map(|c| c.to_vec()).collect();
        let (s, all) = stream(&chunks, budget);
        assert!(all == bytes);
        (s, all, data_start)
    }

    /// Whether the chunk holding byte `at` is cached or on its way.
    fn held(s: &FileStream, at: u64) -> bool {
        s.cache.holds(&s.map.sources[s.chunk_at(at)].id)
    }

    /// Waits (up to 10 s) for `f`, reading a byte at `at` meanwhile as a reader would
    /// (prefetches refused while the budget was taken are asked again on the next read).
    fn eventually(s: &FileStream, at: u64, f: impl Fn() -> bool) -> bool {
        testutil::poll_until(std::time::Duration::from_secs(10), || {
            if f() {
                return Some(());
            }
            s.read(at, 1).unwrap();
            None
        })
        .is_some()
    }

    #[test]
    fn a_safetensors_stream_prefetches_the_next_tensors_in_name_order() {
        // Budget 64,000: a window of 21,333 bytes of the walk (half the ready chunks').
        let (s, all, d) = safetensors_stream(64_000);
        assert_eq!(s.follow_safetensors(TensorOrder::Name).unwrap(), 4);
        let t = 36_000u64;
        let (t3, t1, t2, t0) = (d, d + t, d + 2 * t, d + 3 * t);
        // The walk starts with t0, at the end of the file: its first chunk is fetched...
        assert!(eventually(&s, 0, || held(&s, t0)));
        // ...but not t2, which comes after t0 and t1 in the walk.
        assert!(!held(&s, t2 + 10_000));
        // Reading t0 moves the window on to t1, which the file's order would not reach.
        let mut off = t0;
        while off < t0 + t {
            let d = s.read(off, 3_000).unwrap();
            assert!(d[..] == all[off as usize..off as usize + d.len()], "{off}");
            off += d.len() as u64;
        }
        assert!(eventually(&s, t0 + t - 1, || held(&s, t1 + 1_000)));
        // Every tensor in name order, then the header again, byte-exact.
        for start in [t0, t1, t2, t3] {
            let mut off = start;
            while off < start + t {
                let d = s.read(off, 3_000).unwrap();
                assert!(d[..] == all[off as usize..off as usize + d.len()], "{off}");
                off += d.len() as u64;
            }
        }
        assert!(s.read(0, d as usize).unwrap()[..] == all[..d as usize]);
    }

    #[test]
    fn a_refused_header_leaves_sequential_read_ahead() {
        let mut bytes = (u64::MAX).to_le_bytes().to_vec();
        bytes.extend(noise(50_000, 3));
        let chunks: Vec<Vec<u8>> = bytes.chunks(4_000).map(|c| c.to_vec()).collect();
        let (s, all) = stream(&chunks, 1 << 20);
        assert!(s.follow_safetensors(TensorOrder::Name).is_err());
        assert!(s.plan.get().is_none());
        assert!(s.read(0, all.len()).unwrap() == all);
        // The file-order walk: a stream following file order reads the same bytes.
        let (s, all, d) = safetensors_stream(1 << 20);
        assert_eq!(s.follow_safetensors(TensorOrder::File).unwrap(), 4);
        assert!(eventually(&s, 0, || held(&s, d)));
        assert!(s.read(0, all.len()).unwrap() == all);
    }
}
