//! `modelcas pull`: one revision from an upstream Hub into the store.
//!
//! Steps: resolve the revision upstream (its commit and file list, with each file's size,
//! git blob id and, for LFS files, sha256); select files; if the store already has the
//! commit with those files, only move the refs. A commit stored in part (an earlier
//! `--include`; `partial/` records which) is completed: its manifest is replaced by one
//! with the stored files and the new ones. Otherwise ingest a snapshot whose files are
//! read through [`HubOpener`]: a file whose sha256 the repository already stores is read
//! back from the store (no download); any other streams from the upstream (resumed with
//! `Range` when a connection is cut) through the chunker, and its bytes are checked
//! against what the Hub stated when the download ends. A mismatch, or any download that
//! fails for good, fails the ingest before any manifest is written: nothing becomes
//! visible, and a rerun stores no chunk twice (the packs that did land dedup it).

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use format::manifest::Manifest;
use format::{CommitId, RepoId, Sha256};
use hubclient::{HubClient, RemoteFile, Verifier};
use index::Index;
use read::cache::ChunkSource;
use read::chunk_map::ChunkMap;
use read::file_reader::FileReader;
use read::progress::Progress;
use repo::{Store, StoreError};
use store::ingest::{ingest_from, IngestOptions, Opened, Opener};
use store::listing::RowCheck;
use store::source::{Snapshot, SourceFile};

use crate::select::Selection;
use crate::slots::{Permit, Slots};

/// What to pull.
#[derive(Clone, Debug)]
pub struct PullOptions {
    pub repo: RepoId,
    /// A branch or tag name, or a commit sha (default `main`).
    pub revision: String,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Refs to set besides the revision's own name (a branch or tag name is set as a ref).
    pub refs: Vec<String>,
    /// Files downloaded at a time.
    pub jobs: usize,
    /// Download slots shared with other pulls of the process (serve --upstream), if any.
    pub slots: Option<Arc<Slots>>,
    /// Leave the refs where they are when the revision's release check does not pass
    /// (`sync` without `--force`); the revision is stored all the same.
    pub hold_failing_refs: bool,
}

/// What a pull did (`--json`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PullReport {
    pub repo: String,
    pub commit: String,
    /// Files in the revision as pulled (after `--include`/`--exclude`).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Files downloaded from the upstream.
    pub files_downloaded: u64,
    /// Files the store already held (their sha256 was stored): not downloaded.
    pub files_from_store: u64,
    /// Of those, files whose stored chunk list was taken as it is, no byte read back (every
    /// chunk in a pack the index knows); the others were read back, each chunk checked,
    /// and chunked again.
    pub files_taken_unread: u64,
    /// Bytes of stored files read back and chunked again.
    pub bytes_read_back: u64,
    /// Stored files whose read-back failed (packs another machine's gc deleted since this
    /// machine's index recorded them, a chunk list that does not give the sha256): the
    /// ingest was run again with them downloaded.
    pub files_read_back_failed: u64,
    /// Bytes received from the upstream (bodies, retries included).
    pub bytes_downloaded: u64,
    /// Uncompressed bytes of chunks the store did not have.
    pub bytes_stored_new: u64,
    /// Bytes of packs written.
    pub pack_bytes_written: u64,
    /// Requests sent again (429, 5xx, cut connections).
    pub retries: u64,
    /// False when the store already had the commit.
    pub new_revision: bool,
    /// Refs set.
    pub refs: Vec<String>,
    /// The commit is stored with only some of the upstream's files (`--include` or
    /// `--exclude`; recorded in the store, and completed by a later pull of the rest or by
    /// the mirror when a client asks for it).
    pub partial: bool,
    /// The revision's release check.
    pub check: RowCheck,
    /// Refs not moved because the check did not pass ([`PullOptions::hold_failing_refs`]).
    pub refs_held: Vec<String>,
}

/// Why a pull failed; nothing was made visible.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Hub(#[from] hubclient::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Invalid(String),
}

/// Pulls `opts.revision` of `opts.repo` from `client`'s endpoint into `store`.
pub fn pull(
    store: &Store,
    index: &Index,
    client: &HubClient,
    opts: &PullOptions,
    progress: &dyn Progress,
) -> Result<PullReport, PullError> {
    // One repository whatever the case of its name (the Hub compares ids without it):
    // the spelling already stored, else the one asked for.
    let repo = &store
        .find_repo(&opts.repo)?
        .unwrap_or_else(|| opts.repo.clone());
    let rev = client.revision(&repo.to_string(), &opts.revision)?;
    let commit = CommitId::parse(&rev.commit).map_err(StoreError::from)?;
    let selection = selected(&rev.files, opts)?;
    let refs = refs_to_set(&opts.revision, &opts.refs);
    let stored = if store.has_commit(repo, &commit)? {
        Some(store.manifest(repo, &commit)?)
    } else {
        None
    };
    // What the manifest will hold: the selection, plus what is stored of the commit.
    let files = match &stored {
        Some(m) => with_stored(store, m, &rev.files, &selection)?,
        None => selection,
    };
    let whole = files.len() == rev.files.len();
    let mut report = PullReport {
        repo: repo.to_string(),
        commit: commit.to_hex(),
        files: files.len(),
        bytes: files.iter().map(|f| f.size).sum(),
        refs: refs.clone(),
        partial: !whole,
        ..Default::default()
    };
    if let Some(m) = stored.as_ref().filter(|m| m.files.len() == files.len()) {
        let warn = |w: String| progress.warn(&w);
        let check = store::release::ensure_checked(store, m, "pull", &warn)?;
        report.check = RowCheck::of(check.as_ref());
        let passes = check.is_some_and(|c| c.verdict().allows_protected_refs());
        if opts.hold_failing_refs && !passes {
            // Refs already at the commit (an earlier --force) are not held: they stay.
            let now = store.refs(repo)?;
            let (stay, held): (Vec<String>, Vec<String>) = std::mem::take(&mut report.refs)
                .into_iter()
                .partition(|r| now.get(r) == Some(&commit));
            report.refs = stay;
            report.refs_held = held;
        }
        for r in &report.refs {
            store.set_ref(repo, r, &commit)?;
        }
        if whole {
            store.clear_partial(repo, &commit)?;
        }
        record_use(store, repo, &commit);
        return Ok(report);
    }
    if !whole {
        // Before the manifest: no reader ever sees this commit without knowing it partial.
        store.mark_partial(repo, &commit, rev.files.len() as u64)?;
    }
    let target = Target {
        repo,
        commit,
        refs,
        files: &files,
        endpoint: client.endpoint(),
        complete: stored.is_some(),
    };
    let before = client.stats();
    let mut download = HashSet::new();
    let (ingested, opener) = loop {
        let mut opener = HubOpener::new(store, index, client, repo, &commit, &files, &download)?;
        opener.slots = opts.slots.clone();
        match ingest_files(store, index, &target, &opener, opts, progress) {
            Ok(ingested) => break (ingested, opener),
            // A stored file that could not be read back as planned: once more, with those
            // downloaded (the failed run published nothing; what it wrote is gc's).
            Err(e) if download.is_empty() && !opener.read_back_failed.lock().is_empty() => {
                let failed = std::mem::take(&mut *opener.read_back_failed.lock());
                tracing::warn!(
                    files = failed.len(),
                    "pull: stored files could not be read back ({e}); downloading them"
                );
                download.extend(failed);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let after = client.stats();
    report.files_read_back_failed = download.len() as u64;
    report.new_revision = ingested.snapshots.iter().any(|s| s.new_manifest);
    report.files_downloaded = opener.downloaded.load(Ordering::Relaxed);
    report.files_from_store = opener.from_store.load(Ordering::Relaxed);
    report.files_taken_unread = ingested.files_unchanged as u64;
    report.bytes_read_back = opener.read_back.load(Ordering::Relaxed);
    report.bytes_downloaded = after.bytes_downloaded - before.bytes_downloaded;
    report.retries = after.retries - before.retries;
    report.bytes_stored_new = ingested.new_chunk_bytes;
    report.pack_bytes_written = ingested.pack_bytes_written;
    if let Some(s) = ingested.snapshots.first() {
        report.check = RowCheck::of(s.check.as_ref());
        report.refs.clone_from(&s.refs);
        report.refs_held.clone_from(&s.refs_held);
    }
    if whole {
        store.clear_partial(repo, &commit)?;
    }
    record_use(store, repo, &commit);
    Ok(report)
}

/// What a pull stores: a commit of a repository with these files from this endpoint, the
/// refs to set, and whether a commit stored in part is completed (its manifest replaced by
/// one with every stored file unchanged and the new ones).
struct Target<'a> {
    repo: &'a RepoId,
    commit: CommitId,
    refs: Vec<String>,
    files: &'a [RemoteFile],
    endpoint: &'a str,
    complete: bool,
}

/// One ingest of the target's files through `opener`.
fn ingest_files(
    store: &Store,
    index: &Index,
    target: &Target<'_>,
    opener: &HubOpener<'_>,
    opts: &PullOptions,
    progress: &dyn Progress,
) -> repo::Result<store::ingest::IngestReport> {
    let snapshot = Snapshot {
        repo: target.repo.clone(),
        commit: Some(target.commit),
        refs: target.refs.clone(),
        files: opener.source_files(target.files),
        origin: "hub",
        dir: PathBuf::from(target.endpoint),
        labels: Vec::new(),
    };
    // One reader per download at once (`--jobs`), as many workers.
    let iopts = IngestOptions {
        threads: opts.jobs.max(1),
        readers: opts.jobs.max(1),
        keep_partial: true,
        complete: target.complete,
        hold_failing_refs: opts.hold_failing_refs,
        checked_by: "pull",
        ..Default::default()
    };
    ingest_from(store, index, &[snapshot], iopts, opener, progress)
}

/// A pull is a use of the revision (for `gc --unused-for`); a failure is only a warning.
fn record_use(store: &Store, repo: &RepoId, commit: &CommitId) {
    if let Err(e) = repo::usage::record(store, repo, commit, "pull") {
        tracing::warn!(%repo, commit = %commit.to_hex(), "cannot record last use: {e}");
    }
}

/// The files of the revision selected by `--include`/`--exclude`; none is an error.
fn selected(files: &[RemoteFile], opts: &PullOptions) -> Result<Vec<RemoteFile>, PullError> {
    let sel = Selection::new(&opts.include, &opts.exclude).map_err(PullError::Invalid)?;
    let out: Vec<RemoteFile> = files
        .iter()
        .filter(|f| sel.matches(&f.path))
        .cloned()
        .collect();
    if out.is_empty() {
        return Err(PullError::Invalid(format!(
            "no file of {}@{} matches the --include/--exclude patterns",
            opts.repo, opts.revision
        )));
    }
    Ok(out)
}

/// The revision's own name when it is a branch or tag (not a commit sha), then `extra`.
fn refs_to_set(revision: &str, extra: &[String]) -> Vec<String> {
    let is_sha = revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit());
    let mut refs: Vec<String> = Vec::new();
    if !is_sha {
        refs.push(revision.to_string());
    }
    for r in extra {
        if !refs.contains(r) {
            refs.push(r.clone());
        }
    }
    refs
}

/// The files of a commit stored as `m` once `selection` is added: every upstream file that
/// is stored or selected, in the upstream's order. Every stored file must be one of the
/// upstream's with the content it states ([`same_as_upstream`]); else the commit is not
/// the upstream's, and nothing is pulled.
fn with_stored(
    store: &Store,
    m: &Manifest,
    upstream: &[RemoteFile],
    selection: &[RemoteFile],
) -> Result<Vec<RemoteFile>, PullError> {
    let by_path: HashMap<&str, &RemoteFile> =
        upstream.iter().map(|f| (f.path.as_str(), f)).collect();
    // Chunk locations as they are now (gc may have moved packs), for small files read back.
    let mut resolved: Option<Manifest> = None;
    for (i, s) in m.files.iter().enumerate() {
        let same = match by_path.get(s.path.as_str()) {
            None => false,
            Some(f) => same_as_upstream(store, m, &mut resolved, i, f)?,
        };
        if !same {
            return Err(PullError::Invalid(format!(
                "{}@{} is already stored with {} other than the upstream has it (an ingest of other files under this commit); `modelcas rm` that commit first",
                m.repo,
                m.commit.to_hex(),
                s.path
            )));
        }
    }
    let chosen: HashSet<&str> = selection.iter().map(|f| f.path.as_str()).collect();
    Ok(upstream
        .iter()
        .filter_map(|f| match m.file(&f.path) {
            // Proved the upstream's content above: its sha256 is the stored one, so the
            // file is read back from the store (and checked against it), not downloaded.
            Some(s) => Some(RemoteFile {
                sha256: Some(s.sha256),
                ..f.clone()
            }),
            None => chosen.contains(f.path.as_str()).then(|| f.clone()),
        })
        .collect())
}

/// Whether file `i` of the stored manifest `m` has the content upstream file `f` states:
/// the same size, the same Xet hash where both record one, and the same sha256 for an LFS
/// file; any other file is read back from the store (each chunk checked against its id)
/// and its git blob id compared with the upstream's. A size alone proves nothing: a
/// `config.json` changed at equal length is another commit.
fn same_as_upstream(
    store: &Store,
    m: &Manifest,
    resolved: &mut Option<Manifest>,
    i: usize,
    f: &RemoteFile,
) -> Result<bool, PullError> {
    let s = &m.files[i];
    if f.size != s.size || f.xet_hash.zip(m.xet_hash(i)).is_some_and(|(a, b)| a != b) {
        return Ok(false);
    }
    if let Some(sha) = f.sha256 {
        return Ok(sha == s.sha256);
    }
    if resolved.is_none() {
        *resolved = Some(store.resolved(m.clone())?);
    }
    let Some(now) = resolved.as_ref() else {
        return Ok(false);
    };
    let mut stored = FileReader::new(store, now, &now.files[i])?.into_read();
    let mut blob = gitblob::GitBlob::new(s.size);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = stored
            .read(&mut buf)
            .map_err(|e| StoreError::io(Path::new(&s.path), e))?;
        if n == 0 {
            break;
        }
        blob.update(&buf[..n]);
    }
    Ok(blob.finish_hex() == f.git_oid)
}

/// Where the bytes of each source come from.
enum Plan {
    /// Downloaded and checked.
    Download(RemoteFile),
    /// Read back from the store: the chunks of a file with the same sha256, from a stored
    /// manifest or from the index's record of a file an earlier (perhaps interrupted)
    /// ingest or pull read. Ingest takes a stored manifest's chunk list unread where the
    /// index places every chunk; else it reads the stored bytes back (each chunk and the
    /// sha256 checked). A read-back that fails makes the pull try again with the file
    /// downloaded.
    Stored {
        /// The source's name, to name it in errors.
        path: String,
        sha256: Sha256,
        map: ChunkMap,
        /// The chunk list is a stored manifest's (may be taken unread).
        unread: bool,
    },
}

/// The [`Opener`] of a pull: sources are named by the first path with their content.
struct HubOpener<'a> {
    store: &'a Store,
    client: &'a HubClient,
    repo: String,
    commit: String,
    plans: HashMap<PathBuf, Plan>,
    /// Source of each path (paths with the same sha256 share one source).
    source_of: HashMap<String, PathBuf>,
    downloaded: AtomicU64,
    from_store: AtomicU64,
    /// Bytes of stored files read back (their chunk list could not be taken as it is).
    read_back: AtomicU64,
    /// Sources whose read-back failed (to download on the next try).
    read_back_failed: Mutex<Vec<PathBuf>>,
    slots: Option<Arc<Slots>>,
}

impl<'a> HubOpener<'a> {
    fn new(
        store: &'a Store,
        index: &Index,
        client: &'a HubClient,
        repo: &'a RepoId,
        commit: &CommitId,
        files: &[RemoteFile],
        download: &HashSet<PathBuf>,
    ) -> Result<HubOpener<'a>, PullError> {
        let stored = stored_by_sha256(store, repo)?;
        let mut plans = HashMap::new();
        let mut source_of = HashMap::new();
        let mut by_sha: HashMap<Sha256, PathBuf> = HashMap::new();
        for f in files {
            if let Some(src) = f.sha256.and_then(|s| by_sha.get(&s)) {
                source_of.insert(f.path.clone(), src.clone());
                continue;
            }
            let src = PathBuf::from(&f.path);
            let held = match f.sha256 {
                Some(sha) if !download.contains(&src) => stored_copy(index, &stored, &sha, f.size)?
                    .map(|(map, unread)| (sha, map, unread)),
                _ => None,
            };
            let plan = match held {
                Some((sha256, map, unread)) => Plan::Stored {
                    path: f.path.clone(),
                    sha256,
                    map,
                    unread,
                },
                None => Plan::Download(f.clone()),
            };
            if let Some(s) = f.sha256 {
                by_sha.insert(s, src.clone());
            }
            plans.insert(src.clone(), plan);
            source_of.insert(f.path.clone(), src);
        }
        Ok(HubOpener {
            store,
            client,
            repo: repo.to_string(),
            commit: commit.to_hex(),
            plans,
            source_of,
            downloaded: AtomicU64::new(0),
            from_store: AtomicU64::new(0),
            read_back: AtomicU64::new(0),
            read_back_failed: Mutex::new(Vec::new()),
            slots: None,
        })
    }

    fn source_files(&self, files: &[RemoteFile]) -> Vec<SourceFile> {
        files
            .iter()
            .map(|f| SourceFile {
                path: f.path.clone(),
                source: self.source_of[&f.path].clone(),
                size: f.size,
                executable: false,
                expected_sha256: f.sha256,
                expected_xet: f.xet_hash,
            })
            .collect()
    }
}

impl Opener for HubOpener<'_> {
    fn open(&self, source: &Path) -> repo::Result<Box<dyn Read + Send + '_>> {
        match self.open_source(source)? {
            Opened::Stream(r) | Opened::Stored { fallback: r, .. } => Ok(r),
            Opened::File(f) => Ok(Box::new(f)),
        }
    }

    fn open_source(&self, source: &Path) -> repo::Result<Opened<'_>> {
        let unknown = || StoreError::Invalid(format!("pull: no plan for {}", source.display()));
        match self.plans.get(source).ok_or_else(unknown)? {
            Plan::Download(f) => {
                let permit = self.slots.as_ref().map(|s| s.acquire());
                let d = self
                    .client
                    .open_file(&self.repo, &self.commit, f, 0)
                    .map_err(|e| StoreError::io(source, io::Error::other(e)))?;
                self.downloaded.fetch_add(1, Ordering::Relaxed);
                Ok(Opened::Stream(Box::new(Checked {
                    inner: d,
                    verifier: Some(Verifier::for_file(f)),
                    file: f,
                    _permit: permit,
                })))
            }
            Plan::Stored {
                path,
                sha256,
                map,
                unread,
            } => {
                self.from_store.fetch_add(1, Ordering::Relaxed);
                let back = Box::new(ReadBack {
                    inner: FileReader::of_chunks(self.store, path, *sha256, map).into_read(),
                    bytes: &self.read_back,
                    source: source.to_path_buf(),
                    failed: &self.read_back_failed,
                });
                Ok(if *unread {
                    Opened::Stored {
                        sha256: *sha256,
                        chunks: map.sources.iter().map(|c| (c.id, c.raw_len)).collect(),
                        fallback: back,
                    }
                } else {
                    Opened::Stream(back)
                })
            }
        }
    }
}

/// A stored file read back: adds the bytes read to a counter, and notes `source` as
/// failed when a read fails (a chunk or the sha256 not what the list promised, a pack
/// gone), so that the pull downloads it on its next try.
struct ReadBack<'a, R> {
    inner: R,
    bytes: &'a AtomicU64,
    source: PathBuf,
    failed: &'a Mutex<Vec<PathBuf>>,
}

impl<R: Read> Read for ReadBack<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.bytes.fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) => {
                self.failed.lock().push(self.source.clone());
                Err(e)
            }
        }
    }
}

/// A download whose bytes are checked against what the Hub stated when it ends: a
/// mismatch is a read error, so the ingest fails before any manifest is written.
struct Checked<'a> {
    inner: hubclient::Download,
    verifier: Option<Verifier>,
    file: &'a RemoteFile,
    /// The download slot, given back when the file is read (or the reader dropped).
    _permit: Option<Permit>,
}

impl Read for Checked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            if let Some(v) = &mut self.verifier {
                v.update(&buf[..n]);
            }
            return Ok(n);
        }
        if let Some(v) = self.verifier.take() {
            self.file
                .check(&v.finish())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        Ok(0)
    }
}

/// The chunks of a stored copy of a file with content `sha256` and `size` bytes, and
/// whether ingest may take them unread: from a stored manifest (the store's truth: yes),
/// else from the index's record of a file an earlier ingest read (a cache: no, the bytes
/// are read back and their sha256 checked, so a record that lies never reaches a manifest).
fn stored_copy(
    index: &Index,
    stored: &StoredFiles,
    sha256: &Sha256,
    size: u64,
) -> Result<Option<(ChunkMap, bool)>, PullError> {
    if let Some((m, i)) = stored.get(sha256) {
        if m.files[*i].size == size {
            return Ok(Some((ChunkMap::new(m, &m.files[*i])?, true)));
        }
    }
    let Some(chunks) = index.file_chunks(sha256)? else {
        return Ok(None);
    };
    if chunks.iter().map(|(_, l)| l.raw_len as u64).sum::<u64>() != size {
        return Ok(None);
    }
    let sources = chunks
        .into_iter()
        .map(|(id, l)| ChunkSource {
            key: format::layout::pack_key(&l.pack).into(),
            id,
            offset: l.offset as u64,
            frame_len: l.frame_len,
            raw_len: l.raw_len,
        })
        .collect();
    Ok(Some((ChunkMap::from_sources(sources), false)))
}

/// Stored files by sha256: the manifest and the file's position in it.
type StoredFiles = repo::FilesBySha256;

/// Every file of `repo`'s stored commits, by sha256 (a revision removed meanwhile: its
/// files are simply downloaded).
fn stored_by_sha256(store: &Store, repo: &RepoId) -> Result<StoredFiles, PullError> {
    Ok(store.files_by_sha256(repo, false)?)
}
