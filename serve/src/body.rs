//! A byte range of one file of a revision as a `Read`: chunks are read (and checked
//! against their ids) one at a time, so memory stays at one chunk whatever the file size.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use store::layout;
use store::manifest::Manifest;
use store::Store;

/// `[start, end)` of file `file` of `manifest`.
pub struct FileBody {
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

    fn fill(&mut self) -> std::io::Result<()> {
        let i = self.starts.partition_point(|&s| s <= self.pos) - 1;
        let c = &self.manifest.files[self.file].chunks[i];
        let key = layout::pack_key(&self.manifest.packs[c.pack as usize]);
        let data = self
            .store
            .read_chunk(&key, &c.chunk_id(), c.offset as u64, c.frame_len, true)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.cur_at = (self.pos - self.starts[i]) as usize;
        self.cur = data;
        Ok(())
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
