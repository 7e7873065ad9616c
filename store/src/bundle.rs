//! Transfer bundles: one stream holding revisions' manifests, refs and the chunks the other
//! side lacks, for closed networks (`docs/FORMAT.md`, "Bundles").
//!
//! The wire format (header, records, the end record, [`BundleRef`]) is `format::bundle`;
//! this module writes and reads it.
//!
//! Export streams chunks straight from packs (bounded memory). Import checks every chunk
//! against its id as it arrives and writes it into new packs, which nothing references
//! yet; only after the end record's checksum matches, every manifest's chunks are located
//! and every file's sha256 has been re-read and checked does it write manifests, then refs.
//! Every conflict with what the destination holds is checked before the first pack is
//! written and again before the first manifest is, so a refused import publishes nothing.
//! An import never deletes anything: the packs a refused import wrote are unreferenced,
//! another ingest may already deduplicate against them, and only gc may remove them.
//!
//! Whatever a bundle declares, import's memory stays bounded: every record length is
//! capped by its kind before anything is allocated (and read as it arrives), manifests
//! and refs together may take at most 1 GiB, and every manifest passes the
//! store's one manifest check ([`decode_manifest`]).

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};

use format::bundle::{
    self as wire, BundleRef, KIND_CHUNK, KIND_END, KIND_LABELS, KIND_MANIFEST, KIND_REF,
};
use format::codec::{self, Kind};
use format::layout;
use format::manifest::{ChunkRef, FileEntry, Manifest, Published};
use format::names::{CommitId, RepoId};
use format::release::BundleLabels;
use format::{ChunkId, MAX_CHUNK_LEN};
use index::Index;
use read::file_reader;
use read::progress::Progress;
use repo::handle::{decode_manifest, Store};
use repo::lock::{self, Held};
use repo::pack::{self, PackBuilder, PackId};
use repo::{Result, StoreError};

/// What to export.
#[derive(Clone, Debug, Default)]
pub struct ExportSpec {
    /// Revisions to send, each with the ref names to set on the other side.
    pub revisions: Vec<(RepoId, CommitId, Vec<String>)>,
    /// Revisions the other side holds: their chunks are left out.
    pub have: Vec<(RepoId, CommitId)>,
    /// Leave the revisions' release labels out (for importers older than labels).
    pub no_labels: bool,
}

/// What an export wrote.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ExportReport {
    /// Revisions.
    pub revisions: usize,
    /// Refs.
    pub refs: usize,
    /// Release labels.
    pub labels: usize,
    /// Chunks written.
    pub chunks: u64,
    /// Their uncompressed bytes.
    pub chunk_raw_bytes: u64,
    /// Chunks left out because the other side has them.
    pub chunks_skipped: u64,
    /// Revisions named by `have` that this store does not hold (nothing left out for them).
    pub have_unknown: Vec<String>,
    /// Bytes of the bundle.
    pub bytes: u64,
}

/// Counts and hashes what passes through.
struct Tee<W: Write> {
    inner: W,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl<W: Write> Tee<W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hasher.update(b);
        self.bytes += b.len() as u64;
        self.inner.write_all(b)
    }

    fn record(&mut self, kind: u8, parts: &[&[u8]]) -> std::io::Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        self.put(&wire::record_head(kind, len))?;
        for p in parts {
            self.put(p)?;
        }
        Ok(())
    }
}

fn out_err(e: std::io::Error) -> StoreError {
    StoreError::io("bundle output", e)
}

/// Writes a bundle of `spec` to `out`.
pub fn export(
    store: &Store,
    spec: &ExportSpec,
    out: &mut dyn Write,
    progress: &dyn Progress,
) -> Result<ExportReport> {
    let mut report = ExportReport::default();
    let mut have: HashSet<ChunkId> = HashSet::new();
    for (repo, commit) in &spec.have {
        match store.manifest(repo, commit) {
            Ok(m) => have.extend(m.files.iter().flat_map(|f| f.chunks.iter().map(|c| c.id))),
            Err(StoreError::UnknownRevision { .. }) => {
                report.have_unknown.push(format!("{repo}@{commit}"))
            }
            Err(e) => return Err(e),
        }
    }
    let mut manifests = Vec::new();
    for (repo, commit, _) in &spec.revisions {
        let key = layout::manifest_key(repo, commit);
        let bytes = store.backend().get(&key)?;
        manifests.push((store.resolved(decode_manifest(&key, &bytes)?)?, bytes));
    }
    let mut w = Tee {
        inner: out,
        hasher: blake3::Hasher::new(),
        bytes: 0,
    };
    let mut records: u64 = 0;
    w.put(&wire::header()).map_err(out_err)?;
    for (_, bytes) in &manifests {
        w.record(KIND_MANIFEST, &[bytes]).map_err(out_err)?;
        records += 1;
    }
    for (repo, commit, refs) in &spec.revisions {
        for name in refs {
            let r = BundleRef {
                repo: repo.clone(),
                name: name.clone(),
                commit: *commit,
            };
            w.record(KIND_REF, &[&wire::encode_ref(&r)])
                .map_err(out_err)?;
            records += 1;
            report.refs += 1;
        }
    }
    if !spec.no_labels {
        for (repo, commit, _) in &spec.revisions {
            let labels = store.labels(repo, commit)?;
            if labels.is_empty() {
                continue;
            }
            let rec = BundleLabels {
                repo: repo.clone(),
                commit: *commit,
                labels: labels.into_iter().collect(),
            };
            w.record(KIND_LABELS, &[&wire::encode_labels(&rec)])
                .map_err(out_err)?;
            records += 1;
            report.labels += rec.labels.len();
        }
    }
    report.revisions = manifests.len();
    let total: u64 = manifests.iter().map(|(m, _)| m.total_size()).sum();
    progress.start("export", total);
    let mut sent: HashSet<ChunkId> = HashSet::new();
    // Chunks to send, in file order; neighbours in a pack are fetched with one ranged read.
    let mut run: Vec<(PackId, ChunkRef)> = Vec::new();
    for (m, _) in &manifests {
        for f in &m.files {
            for c in &f.chunks {
                progress.advance(c.raw_len as u64);
                if have.contains(&c.id) {
                    report.chunks_skipped += 1;
                    continue;
                }
                if !sent.insert(c.id) {
                    continue;
                }
                run.push((m.packs[c.pack as usize], *c));
                if run.len() >= PLAN_AHEAD {
                    send_planned(store, &mut run, false, &mut w, &mut records, &mut report)?;
                }
            }
        }
    }
    send_planned(store, &mut run, true, &mut w, &mut records, &mut report)?;
    progress.finish();
    let end = wire::end_payload(records, w.hasher.finalize().as_bytes());
    // The end record is not part of its own checksum.
    let head = wire::record_head(KIND_END, end.len() as u64);
    w.inner.write_all(&head).map_err(out_err)?;
    w.inner.write_all(&end).map_err(out_err)?;
    w.inner.flush().map_err(out_err)?;
    report.bytes = w.bytes + (head.len() + end.len()) as u64;
    Ok(report)
}

/// Largest span fetched with one ranged read when exporting.
const MAX_RUN: u64 = 8 << 20;
/// Chunks waiting to be planned into ranged reads; every group but the last (which a
/// later chunk may still join) is sent once this many wait.
const PLAN_AHEAD: usize = 1024;

/// Where the frame of a chunk lies, for the request planner.
fn frame_at((pack, c): &(PackId, ChunkRef)) -> read::plan::FrameAt<PackId> {
    read::plan::FrameAt {
        pack: *pack,
        offset: c.offset as u64,
        len: c.frame_len as u64,
    }
}

/// Groups the chunks of `run` into ranged reads ([`read::plan`]) and sends them; unless
/// `all`, the last group stays in `run` for chunks still to come.
fn send_planned<W: Write>(
    store: &Store,
    run: &mut Vec<(PackId, ChunkRef)>,
    all: bool,
    w: &mut Tee<W>,
    records: &mut u64,
    report: &mut ExportReport,
) -> Result<()> {
    let mut groups = read::plan::ranged_reads(run, frame_at, |_| false, MAX_RUN);
    let keep = if all { None } else { groups.pop() };
    for g in groups {
        send_run(store, &run[g], w, records, report)?;
    }
    match keep {
        Some(g) => drop(run.drain(..g.start)),
        None => run.clear(),
    }
    Ok(())
}

/// Fetches a run of chunks of one pack with one ranged read, checks and writes them.
fn send_run<W: Write>(
    store: &Store,
    run: &[(PackId, ChunkRef)],
    w: &mut Tee<W>,
    records: &mut u64,
    report: &mut ExportReport,
) -> Result<()> {
    let Some((pack_id, _)) = run.first().copied() else {
        return Ok(());
    };
    let key = layout::pack_key(&pack_id);
    let std::ops::Range { start, end } = read::plan::span(run.iter().map(frame_at));
    let bytes = store.backend().get_range(&key, start, end - start)?;
    for (_, c) in run {
        let at = (c.offset as u64 - start) as usize;
        let frame =
            bytes
                .get(at..at + c.frame_len as usize)
                .ok_or_else(|| StoreError::CorruptChunk {
                    chunk: c.id.to_hex(),
                    pack: key.clone(),
                    offset: c.offset as u64,
                    reason: "the ranged read ended before the frame".into(),
                })?;
        // Never send a damaged chunk: the import would refuse the whole bundle. A frame
        // that fails its check is asked of the store's other sources (a hub's other
        // addresses) before the export fails.
        let again;
        let frame = match pack::decode_checked(frame, &c.id, &key, c.offset as u64) {
            Ok(_) => frame,
            Err(first) => {
                let backend = store.backend().as_ref();
                let at = c.offset as u64;
                again = pack::read_frame_checked(backend, &key, &c.id, at, c.frame_len)
                    .map_err(|_| first)?
                    .0;
                &again[..]
            }
        };
        w.record(KIND_CHUNK, &[&wire::chunk_prefix(&c.id, c.raw_len), frame])
            .map_err(out_err)?;
        *records += 1;
        report.chunks += 1;
        report.chunk_raw_bytes += c.raw_len as u64;
    }
    Ok(())
}

/// What an import did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ImportReport {
    /// Revisions stored (`repo@commit`), new or already present.
    pub revisions: Vec<String>,
    /// Refs set (`repo@name -> commit`).
    pub refs: Vec<String>,
    /// Release labels set.
    pub labels: usize,
    /// Revisions whose release check failed here (`repo@commit: errors`).
    pub failing: Vec<String>,
    /// Chunks in the bundle.
    pub chunks: u64,
    /// Of those, chunks this store did not have.
    pub new_chunks: u64,
    /// Packs written.
    pub packs_written: usize,
    /// Their bytes.
    pub pack_bytes_written: u64,
    /// Bytes of files re-read to check their sha256.
    pub bytes_verified: u64,
    /// Bytes of the bundle read.
    pub bundle_bytes: u64,
}

/// Memory the manifests and refs of one bundle may take while the import holds them
/// (they are needed until every chunk has arrived). A manifest of a 1 TB model with
/// 512 KiB chunks takes about 100 MiB; a larger transfer must be split into several
/// bundles.
const MAX_METADATA_MEMORY: u64 = 1 << 30;

/// Reads exactly what the bundle declares, hashing it; a short read is a truncated bundle.
struct Source<'a> {
    inner: &'a mut dyn Read,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl Source<'_> {
    fn eof(&self, e: std::io::Error) -> StoreError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            bad(format!(
                "truncated: the stream ends after {} bytes",
                self.bytes
            ))
        } else {
            StoreError::io("bundle input", e)
        }
    }

    fn exact(&mut self, buf: &mut [u8], hash: bool) -> Result<()> {
        self.inner.read_exact(buf).map_err(|e| self.eof(e))?;
        if hash {
            self.hasher.update(buf);
        }
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// `len` bytes (already checked against the record kind's cap), read as they arrive:
    /// memory follows the bytes received, never a length a truncated bundle merely claims.
    fn payload(&mut self, len: u64, hash: bool) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len.min(1 << 20) as usize);
        let got = (&mut self.inner)
            .take(len)
            .read_to_end(&mut out)
            .map_err(|e| StoreError::io("bundle input", e))?;
        if (got as u64) < len {
            self.bytes += got as u64;
            return Err(self.eof(std::io::ErrorKind::UnexpectedEof.into()));
        }
        if hash {
            self.hasher.update(&out);
        }
        self.bytes += len;
        Ok(out)
    }
}

fn bad(reason: String) -> StoreError {
    StoreError::Invalid(format!("bundle refused, nothing imported: {reason}"))
}

/// Imports a bundle from `input` into `store`, using `index` for dedup.
///
/// An import never deletes anything. A refused or interrupted import leaves only packs
/// that no manifest references; another ingest may have deduplicated against them
/// meanwhile, so only gc, by its protocol, may remove them.
pub fn import(
    store: &Store,
    index: &Index,
    input: &mut dyn Read,
    progress: &dyn Progress,
) -> Result<ImportReport> {
    let lease = Held::ingest_lease(store.backend().clone(), lock::default_ttl())?;
    crate::ingest::sync_index(store, index, &|w| progress.warn(&w))?;
    let mut rx = Received::default();
    read_bundle(store, index, input, progress, &mut rx)?;
    check_conflicts(store, &rx)?;
    repo::failpoint::pause("import-after-chunks");
    for m in &rx.manifests {
        let relocated = relocate(m, index)?;
        let v = file_reader::verify(store, &relocated, progress);
        if let Some(p) = v.problems.first() {
            return Err(bad(format!(
                "{}@{}: {} (and {} more problems)",
                m.repo,
                m.commit,
                p.error,
                v.problems.len() - 1
            )));
        }
        rx.report.bytes_verified += v.bytes;
        // This store's own release check (a bundle's verdict would be another host's word).
        let check = match crate::release::check_revision(store, &relocated, "import") {
            Ok(c) => Some(c),
            Err(e) => {
                progress.warn(&crate::release::not_made(&relocated, &e));
                None
            }
        };
        rx.checks.push(check);
    }
    publish(store, index, &lease, rx)
}

/// What the records of a bundle delivered.
#[derive(Default)]
struct Received {
    manifests: Vec<Manifest>,
    refs: Vec<BundleRef>,
    labels: Vec<BundleLabels>,
    /// The release check of each manifest, in order (`None`: it could not be made).
    checks: Vec<Option<format::release::CheckObject>>,
    /// Estimated memory of `manifests` and `refs`.
    metadata_memory: u64,
    /// Whether the conflicts were checked (once, before the first pack is written).
    checked: bool,
    report: ImportReport,
}

impl Received {
    fn hold(&mut self, bytes: u64, at: u64) -> Result<()> {
        self.metadata_memory += bytes;
        if self.metadata_memory > MAX_METADATA_MEMORY {
            return Err(bad(format!(
                "at byte {at}: its manifests and refs need more than {} MiB of memory; export fewer revisions per bundle",
                MAX_METADATA_MEMORY >> 20
            )));
        }
        Ok(())
    }
}

/// Estimated memory of a decoded manifest.
fn footprint(m: &Manifest) -> u64 {
    use std::mem::size_of;
    let files: usize = m
        .files
        .iter()
        .map(|f| size_of::<FileEntry>() + f.path.len() + f.chunks.len() * size_of::<ChunkRef>())
        .sum();
    (size_of::<Manifest>() + m.source.len() + m.packs.len() * size_of::<PackId>() + files) as u64
}

/// Reads every record up to the end record, storing new chunks in new packs; checks the
/// checksum, the record count, and that nothing follows.
fn read_bundle(
    store: &Store,
    index: &Index,
    input: &mut dyn Read,
    progress: &dyn Progress,
    rx: &mut Received,
) -> Result<()> {
    let mut src = Source {
        inner: input,
        hasher: blake3::Hasher::new(),
        bytes: 0,
    };
    let mut header = [0u8; wire::HEADER_LEN];
    src.exact(&mut header, true)?;
    wire::check_header(&header).map_err(|e| bad(e.to_string()))?;
    let mut packs = Packer {
        builder: PackBuilder::new(),
        pending: HashSet::new(),
        target: store.config().pack_target.max(1) as usize,
    };
    let mut records: u64 = 0;
    progress.start("import", 0);
    loop {
        let mut head = [0u8; wire::RECORD_HEAD_LEN];
        let at = src.bytes;
        src.exact(&mut head[..1], false)?;
        let hashed = head[0] != KIND_END;
        if hashed {
            src.hasher.update(&head[..1]);
        }
        src.exact(&mut head[1..], hashed)?;
        let (kind, len) = wire::parse_record_head(&head);
        let Some(cap) = wire::record_cap(kind) else {
            return Err(bad(format!("unknown record kind {kind} at byte {at}")));
        };
        if len > cap {
            return Err(bad(format!(
                "record of kind {kind} at byte {at} claims {len} bytes (at most {cap})"
            )));
        }
        let payload = src.payload(len, hashed)?;
        match kind {
            KIND_MANIFEST => {
                let m = decode_manifest(&format!("bundle manifest at byte {at}"), &payload)
                    .map_err(|e| bad(e.to_string()))?;
                rx.hold(footprint(&m), at)?;
                rx.manifests.push(m);
            }
            KIND_LABELS => {
                let l = wire::decode_labels(&payload)
                    .map_err(|e| bad(format!("labels at byte {at}: {e}")))?;
                if rx.checked {
                    return Err(bad(format!(
                        "labels at byte {at} after the chunks (they come before)"
                    )));
                }
                if rx
                    .labels
                    .iter()
                    .any(|o| o.repo == l.repo && o.commit == l.commit)
                {
                    return Err(bad(format!(
                        "labels at byte {at}: a second labels record for {}@{}",
                        l.repo, l.commit
                    )));
                }
                let size: usize = l.labels.iter().map(|(k, v)| k.len() + v.len() + 48).sum();
                rx.hold((size_of::<BundleLabels>() + size) as u64, at)?;
                rx.labels.push(l);
            }
            KIND_REF => {
                let r = wire::decode_ref(&payload)
                    .map_err(|e| bad(format!("ref at byte {at}: {e}")))?;
                rx.hold((size_of::<BundleRef>() + r.name.len()) as u64, at)?;
                rx.refs.push(r);
            }
            KIND_CHUNK => {
                if !rx.checked {
                    // Refuse before writing a single pack when the bundle cannot be taken.
                    check_conflicts(store, rx)?;
                    rx.checked = true;
                }
                packs.chunk(store, index, &payload, at, &mut rx.report, progress)?;
            }
            _ => {
                wire::check_end(&payload, src.hasher.finalize().as_bytes(), records)
                    .map_err(|e| bad(e.to_string()))?;
                break;
            }
        }
        records += 1;
    }
    let mut extra = [0u8; 1];
    if src
        .inner
        .read(&mut extra)
        .map_err(|e| StoreError::io("bundle input", e))?
        != 0
    {
        return Err(bad("bytes after the end record".into()));
    }
    rx.report.bundle_bytes = src.bytes;
    packs.seal(store, index, &mut rx.report)?;
    progress.finish();
    Ok(store.backend().sync_deferred()?)
}

/// New chunks on their way into packs.
struct Packer {
    builder: PackBuilder,
    /// Chunks in `builder` (not yet in the index).
    pending: HashSet<ChunkId>,
    target: usize,
}

impl Packer {
    /// Checks a chunk record and adds its frame unless this store has the chunk.
    fn chunk(
        &mut self,
        store: &Store,
        index: &Index,
        payload: &[u8],
        at: u64,
        report: &mut ImportReport,
        progress: &dyn Progress,
    ) -> Result<()> {
        let Some((cid, raw_len, frame)) = wire::parse_chunk(payload) else {
            return Err(bad(format!("chunk record at byte {at} is too short")));
        };
        if raw_len > MAX_CHUNK_LEN {
            return Err(bad(format!(
                "chunk {cid} at byte {at} claims {raw_len} bytes, more than any chunk ({MAX_CHUNK_LEN})"
            )));
        }
        let data = pack::decode_checked(frame, &cid, "bundle", at)
            .map_err(|e| bad(format!("chunk {cid} at byte {at}: {e}")))?;
        if data.len() != raw_len as usize {
            return Err(bad(format!(
                "chunk {cid} at byte {at}: {} bytes, the record says {raw_len}",
                data.len()
            )));
        }
        report.chunks += 1;
        progress.advance(raw_len as u64);
        if self.pending.contains(&cid) || index.chunk(&cid)?.is_some() {
            return Ok(());
        }
        self.builder.add_frame(cid, frame, raw_len as usize);
        self.pending.insert(cid);
        report.new_chunks += 1;
        if self.builder.len() >= self.target {
            self.seal(store, index, report)?;
        }
        Ok(())
    }

    /// Writes the pack being built (if any) and records it in the index.
    fn seal(&mut self, store: &Store, index: &Index, report: &mut ImportReport) -> Result<()> {
        if self.builder.is_empty() {
            return Ok(());
        }
        let (id, bytes, entries) = std::mem::take(&mut self.builder).finish();
        store
            .backend()
            .put_deferred(&layout::pack_key(&id), &bytes)?;
        index.add_pack(&id, bytes.len() as u64, &entries)?;
        self.pending.clear();
        report.packs_written += 1;
        report.pack_bytes_written += bytes.len() as u64;
        repo::failpoint::pause("import-after-pack");
        Ok(())
    }
}

/// Refuses the import when a revision of the bundle is stored here with other files, or a
/// ref names a commit that neither the bundle nor this store holds. Runs before the first
/// pack is written and again just before the first manifest is.
fn check_conflicts(store: &Store, rx: &Received) -> Result<()> {
    for m in &rx.manifests {
        if store.has_commit(&m.repo, &m.commit)? {
            let old = store.manifest(&m.repo, &m.commit)?;
            if !old.same_content(m) {
                return Err(bad(format!(
                    "{}@{} is already stored with different files (remove it with `modelcas rm --force` to import the bundle's)",
                    m.repo, m.commit
                )));
            }
        }
    }
    for l in &rx.labels {
        if !rx
            .manifests
            .iter()
            .any(|m| m.repo == l.repo && m.commit == l.commit)
        {
            return Err(bad(format!(
                "labels for {}@{}, which is not among the bundle's revisions",
                l.repo, l.commit
            )));
        }
        // The labels this store would hold afterwards: refused now, not half-published.
        let mut keys: std::collections::BTreeSet<String> =
            if store.has_commit(&l.repo, &l.commit)? {
                store.labels(&l.repo, &l.commit)?.into_keys().collect()
            } else {
                Default::default()
            };
        keys.extend(l.labels.iter().map(|(k, _)| k.clone()));
        if keys.len() > format::release::MAX_LABELS {
            return Err(bad(format!(
                "{}@{} would carry {} labels (those stored here and the bundle's), at most {}",
                l.repo,
                l.commit,
                keys.len(),
                format::release::MAX_LABELS
            )));
        }
    }
    for r in &rx.refs {
        if !rx
            .manifests
            .iter()
            .any(|m| m.repo == r.repo && m.commit == r.commit)
            && !store.has_commit(&r.repo, &r.commit)?
        {
            return Err(bad(format!(
                "ref {}@{} points at {}, which neither the bundle nor this store holds",
                r.repo, r.name, r.commit
            )));
        }
    }
    Ok(())
}

/// Writes the manifests (located in this store's packs), then the refs, after checking
/// every conflict again: a refused import publishes nothing.
fn publish(store: &Store, index: &Index, lease: &Held, mut rx: Received) -> Result<ImportReport> {
    check_conflicts(store, &rx)?;
    lease.check()?;
    let published = publications(store, &rx.manifests)?;
    for (m, published) in rx.manifests.iter().zip(published) {
        if !store.has_commit(&m.repo, &m.commit)? {
            let key = layout::manifest_key(&m.repo, &m.commit);
            let mut relocated = relocate(m, index)?;
            relocated.published = Some(published);
            store
                .backend()
                .put(&key, &codec::encode(Kind::Manifest, &relocated, true))?;
        }
        rx.report.revisions.push(format!("{}@{}", m.repo, m.commit));
    }
    // Release records after the manifests, before the refs.
    for (m, check) in rx.manifests.iter().zip(&rx.checks) {
        if let Some(c) = check {
            store.put_check(&m.repo, c)?;
            if !c.verdict().allows_protected_refs() {
                rx.report
                    .failing
                    .push(format!("{}@{}: {}", m.repo, m.commit, c.errors_line(3)));
            }
        }
    }
    for l in &rx.labels {
        store.set_labels(&l.repo, &l.commit, &l.labels, "import")?;
        rx.report.labels += l.labels.len();
    }
    for r in &rx.refs {
        store.set_ref(&r.repo, &r.name, &r.commit)?;
        rx.report
            .refs
            .push(format!("{}@{} -> {}", r.repo, r.name, r.commit));
    }
    Ok(rx.report)
}

/// When this store publishes each of `manifests`: its own clock, read once (the bundle's
/// times are another host's: ahead, behind, or forged), and sequence numbers handed out in
/// the order of the bundle's own publication times, so that revisions keep their order
/// among themselves whatever order the bundle lists them in, and all come after what this
/// store held before.
fn publications(store: &Store, manifests: &[Manifest]) -> Result<Vec<Published>> {
    let store_ms = lock::store_now_ms(store.backend().as_ref())?;
    let mut ranked: Vec<usize> = (0..manifests.len()).collect();
    ranked.sort_by_key(|&i| manifests[i].order(None));
    let mut out = vec![Published { store_ms, seq: 0 }; manifests.len()];
    for i in ranked {
        out[i].seq = repo::clock::sequence_ms();
    }
    Ok(out)
}

/// The manifest with every chunk pointing at where this store holds it.
fn relocate(m: &Manifest, index: &Index) -> Result<Manifest> {
    let mut out = m.clone();
    let mut table: Vec<PackId> = Vec::new();
    let mut ix: HashMap<PackId, u32> = HashMap::new();
    for f in out.files.iter_mut() {
        for c in f.chunks.iter_mut() {
            let loc = index.chunk(&c.id)?.ok_or_else(|| {
                bad(format!(
                    "{}@{} {}: chunk {} is neither in the bundle nor in this store (was it exported with --have for a revision this store lacks?)",
                    m.repo,
                    m.commit,
                    f.path,
                    c.id
                ))
            })?;
            let pi = *ix.entry(loc.pack).or_insert_with(|| {
                table.push(loc.pack);
                (table.len() - 1) as u32
            });
            *c = ChunkRef {
                id: c.id,
                pack: pi,
                offset: loc.offset,
                frame_len: loc.frame_len,
                raw_len: loc.raw_len,
            };
        }
    }
    out.packs = table;
    Ok(out)
}
