//! How an ingest runs ([`IngestOptions`]: threads, readers, partial packs, rereading,
//! the settle time, completing a stored commit) and its defaults.

/// Ingest settings.
#[derive(Clone, Copy, Debug)]
pub struct IngestOptions {
    /// Worker threads (naming, deduplicating and compressing chunks); default: the number
    /// of CPUs.
    pub threads: usize,
    /// Reader threads (one file each, FastCDC and SHA-256 as the bytes pass; each with a
    /// pack of its own being filled in memory, so that a file's frames lie together);
    /// default: the number of CPUs, at least [`MIN_READERS`] and at most [`MAX_READERS`].
    pub readers: usize,
    /// On failure, still write the packs holding the chunks read so far (no manifest names
    /// them; a rerun deduplicates against them and, through the index's file records,
    /// reads completed files back instead of fetching them again). `pull` sets it: its
    /// sources are downloads. Off for files on disk, so a refused ingest writes nothing.
    pub keep_partial: bool,
    /// Read every file, even one the index recorded as unchanged since it was last read
    /// (same boot and mount, device, inode, size, mtime and ctime; see
    /// [`format::index::FileStamp`]).
    pub reread: bool,
    /// How long a file must have been still (its mtime and ctime that far in the past when
    /// it is read) for its stamp to be recorded: [`SETTLE`].
    pub settle: std::time::Duration,
    /// A stored commit may be replaced by a manifest holding every one of its files
    /// unchanged and more (completing a commit `pull --include` stored in part; the old
    /// manifest's chunks are all in the new one, so a reader holding it stays right).
    /// Any other difference is still refused.
    pub complete: bool,
    /// Check each revision's release (`release` crate) and record the result; a revision
    /// whose check fails is stored all the same.
    pub release_check: bool,
    /// Leave a snapshot's refs where they are when its revision's check does not pass
    /// (failed, or could not be made): `sync` protects its entries' refs so.
    pub hold_failing_refs: bool,
    /// What the check record says made it (`ingest`, `pull`).
    pub checked_by: &'static str,
}

/// How long a file must have gone unwritten before ingest records its stamp: longer than
/// any file system's coarse clock tick, so that a write in the tick the file was read in
/// cannot leave the stamp as it was.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// Fewest reader threads by default: a reader waiting on the disk (a cold file, a small
/// file's metadata) leaves the workers without chunks, and on 2 cores two readers left them
/// idle a third of the time on a hub cache of 660 small blobs (4 readers: its pipeline
/// 0.85-1.03 s to 0.71-0.75 s).
pub const MIN_READERS: usize = 4;
/// Most reader threads by default: each fills a pack of its own in memory (32 MiB by
/// default), so readers bound an ingest's memory; 8 read at several GB/s, more than a
/// disk or a network gives.
pub const MAX_READERS: usize = 8;

impl Default for IngestOptions {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        IngestOptions {
            threads: cpus,
            readers: cpus.clamp(MIN_READERS, MAX_READERS),
            keep_partial: false,
            reread: false,
            settle: SETTLE,
            complete: false,
            release_check: true,
            hold_failing_refs: false,
            checked_by: "ingest",
        }
    }
}
