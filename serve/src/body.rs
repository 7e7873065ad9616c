//! A byte range of one file of a revision as a `Read`. A reader thread fetches, decodes
//! and checks the chunks ahead of the socket, at most [`AHEAD`] chunks in flight, so
//! memory stays bounded whatever the file size and decoding overlaps sending.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

use store::layout;
use store::manifest::Manifest;
use store::Store;

/// Chunks decoded ahead of the socket.
pub const AHEAD: usize = 4;

/// `[start, end)` of file `file` of `manifest`.
pub struct FileBody {
    chunks: Option<Receiver<std::io::Result<Vec<u8>>>>,
    store: Store,
    manifest: Arc<Manifest>,
    file: usize,
    starts: Vec<u64>,
    pos: u64,
    end: u64,
    cur: Vec<u8>,
    cur_at: usize,
    sent: Arc<AtomicU64>,
}

impl FileBody {
    /// A reader of bytes `start..end`; `sent` counts the bytes handed out.
    pub fn new(
        store: Store,
        manifest: Arc<Manifest>,
        file: usize,
        start: u64,
        end: u64,
        sent: Arc<AtomicU64>,
    ) -> FileBody {
        let mut starts = Vec::with_capacity(manifest.files[file].chunks.len() + 1);
        let mut at = 0;
        for c in &manifest.files[file].chunks {
            starts.push(at);
            at += c.raw_len as u64;
        }
        starts.push(at);
        FileBody {
            chunks: None,
            store,
            manifest,
            file,
            starts,
            pos: start,
            end,
            cur: Vec::new(),
            cur_at: 0,
            sent,
        }
    }

    /// Starts the reader thread at the chunk holding `pos`.
    fn start(&mut self) -> Receiver<std::io::Result<Vec<u8>>> {
        let first = self.starts.partition_point(|&s| s <= self.pos) - 1;
        let last = self.starts.partition_point(|&s| s < self.end);
        let (tx, rx) = sync_channel(AHEAD);
        let (store, manifest, file) = (self.store.clone(), self.manifest.clone(), self.file);
        std::thread::spawn(move || {
            for c in &manifest.files[file].chunks[first..last] {
                let key = layout::pack_key(&manifest.packs[c.pack as usize]);
                let r = store
                    .read_chunk(&key, &c.chunk_id(), c.offset as u64, c.frame_len, true)
                    .map_err(|e| std::io::Error::other(e.to_string()));
                let failed = r.is_err();
                // The client went away: stop reading.
                if tx.send(r).is_err() || failed {
                    return;
                }
            }
        });
        self.cur_at = (self.pos - self.starts[first]) as usize;
        rx
    }

    fn fill(&mut self) -> std::io::Result<()> {
        if self.chunks.is_none() {
            let rx = self.start();
            self.chunks = Some(rx);
            let skip = self.cur_at;
            self.cur = self.next()?;
            self.cur_at = skip;
            return Ok(());
        }
        self.cur = self.next()?;
        self.cur_at = 0;
        Ok(())
    }

    fn next(&mut self) -> std::io::Result<Vec<u8>> {
        match self.chunks.as_ref().map(|rx| rx.recv()) {
            Some(Ok(r)) => r,
            _ => Err(std::io::Error::other("chunk reader stopped")),
        }
    }
}

impl Read for FileBody {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.end || buf.is_empty() {
            return Ok(0);
        }
        if self.cur_at >= self.cur.len() {
            self.fill()?;
        }
        let left = (self.end - self.pos) as usize;
        let n = buf.len().min(self.cur.len() - self.cur_at).min(left);
        buf[..n].copy_from_slice(&self.cur[self.cur_at..self.cur_at + n]);
        self.cur_at += n;
        self.pos += n as u64;
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}
