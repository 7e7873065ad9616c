//! `fsck`: checks that the whole store is consistent.
//!
//! * every manifest decodes, names its own repository and commit, and every chunk it
//!   references is in a pack that exists, at the offset and with the length the manifest
//!   says (checked against the pack's footer);
//!   — the location after following gc's forwarding records (`moved/`), as every reader
//!   and gc resolve it;
//! * every forwarding record decodes and names its pack; entries pointing at deleted packs
//!   are noted (a revision that follows one is reported as reading from a missing pack);
//! * every ref and pin points at an existing commit;
//! * every release record (`checks/<commit>`, `labels/<commit>/<key>`) decodes, is within
//!   its cap and names the commit (and key) of its key; a record of a commit with no
//!   manifest (a `check` that raced an `rm`) is noted: ignored by readers, harmless;
//! * no leftover temporary (local `tmp/` file, incomplete multipart upload) is older than
//!   the grace period (and [`crate::gc::TEMPORARY_MIN_AGE`]);
//! * the condemned list and every lock object decode;
//! * with `read_data`, every pack hashes to its name and every chunk decodes and hashes to
//!   its id.
//!
//! Findings that are normal between gc runs (unreferenced packs that gc will condemn,
//! condemned packs waiting for their grace period, stale locks of dead processes) are
//! reported as notes, not problems.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use format::ChunkId;
use parking_lot::Mutex;
use serde::Serialize;

use crate::gc::{self, state};
use format::codec::{self, Kind};
use format::layout;
use format::manifest::Manifest;
use format::names::{CommitId, RepoId};
use format::release::{CheckObject, LabelObject, MAX_CHECK_OBJECT, MAX_LABEL_OBJECT};
use repo::forward::{self, Forwards, MovedRecord};
use repo::handle::{decode_manifest, Store};
use repo::lock;
use repo::pack::{self, FooterEntry, PackId};
use repo::{Result, StoreError};

/// Problems listed in full; beyond this only counted.
const MAX_LISTED: usize = 200;

/// What to check.
#[derive(Clone, Debug)]
pub struct FsckOptions {
    /// Also read every pack and hash every chunk.
    pub read_data: bool,
    /// Temporaries older than this (and [`gc::TEMPORARY_MIN_AGE`]) are problems.
    pub grace: Duration,
}

/// What was found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FsckReport {
    /// Repositories.
    pub repos: usize,
    /// Manifests checked.
    pub revisions: usize,
    /// Refs checked.
    pub refs: usize,
    /// Pins checked.
    pub pins: usize,
    /// Packs in the bucket.
    pub packs: usize,
    /// Their bytes.
    pub pack_bytes: u64,
    /// Chunk references checked against footers.
    pub chunk_refs: u64,
    /// Chunks hashed (with `read_data`).
    pub chunks_hashed: u64,
    /// Bytes read to hash them.
    pub bytes_hashed: u64,
    /// Packs no manifest references (gc condemns them).
    pub unreferenced_packs: usize,
    /// Packs on gc's condemned list.
    pub condemned_packs: usize,
    /// Forwarding records (`moved/`).
    pub forwards: usize,
    /// Release check records (`checks/`) checked.
    pub checks: usize,
    /// Release labels (`labels/`) checked.
    pub labels: usize,
    /// Number of problems.
    pub problem_count: usize,
    /// The problems (the first [`MAX_LISTED`]).
    pub problems: Vec<String>,
    /// Things worth knowing that are not problems.
    pub notes: Vec<String>,
}

impl FsckReport {
    fn problem(&mut self, p: String) {
        self.problem_count += 1;
        if self.problems.len() < MAX_LISTED {
            self.problems.push(p);
        }
    }

    /// True when no problem was found.
    pub fn is_clean(&self) -> bool {
        self.problem_count == 0
    }
}

/// Every chunk reference the manifests make, after forwarding: (pack) → offset → (chunk,
/// frame_len, raw_len, first user).
type Wanted = HashMap<PackId, HashMap<u32, (ChunkId, u32, u32, String)>>;

/// What the manifests reference, gathered repository by repository.
#[derive(Default)]
struct References {
    /// Where every referenced chunk should be.
    wanted: Wanted,
    /// Packs whose forwarding record some reference followed.
    followed: HashSet<PackId>,
}

/// Checks `store`.
pub fn run(store: &Store, opts: &FsckOptions) -> Result<FsckReport> {
    let mut report = FsckReport::default();
    let packs = list_packs(store, &mut report)?;
    let (forwards, records) = forwarding_records(store, &mut report)?;
    let mut refs = References::default();
    let repos = store.repos()?;
    report.repos = repos.len();
    for repo in &repos {
        let commits = check_revisions(store, repo, &forwards, &mut refs, &mut report)?;
        check_refs_and_pins(store, repo, &commits, &mut report)?;
        check_release_records(store, repo, &commits, &mut report)?;
    }
    check_chunks(store, &packs, &refs.wanted, &mut report)?;
    note_broken_forwards(&records, &packs, &refs.followed, &mut report);

    // gc's list, locks, temporaries.
    check_condemned(store, &packs, &refs.wanted, &mut report);
    note_locks(store, &mut report);
    check_temporaries(store, opts, &mut report)?;

    if opts.read_data {
        read_data(store, &packs, &mut report)?;
    }
    Ok(report)
}

/// The packs in the bucket and their sizes; other names under `packs/` are problems.
fn list_packs(store: &Store, report: &mut FsckReport) -> Result<BTreeMap<PackId, u64>> {
    let mut packs: BTreeMap<PackId, u64> = BTreeMap::new();
    for obj in store.backend().list(layout::PACKS_PREFIX)? {
        match layout::parse_pack_key(&obj.key) {
            Some(id) => {
                packs.insert(id, obj.size);
            }
            None => report.problem(format!("{}: not a pack name", obj.key)),
        }
    }
    report.packs = packs.len();
    report.pack_bytes = packs.values().sum();
    Ok(packs)
}

/// Checks every manifest of `repo` and adds its chunk references to `refs`; returns the
/// repository's commits.
fn check_revisions(
    store: &Store,
    repo: &RepoId,
    forwards: &Forwards,
    refs: &mut References,
    report: &mut FsckReport,
) -> Result<HashSet<CommitId>> {
    let commits: HashSet<_> = store.commits(repo)?.into_iter().collect();
    for commit in &commits {
        report.revisions += 1;
        let key = layout::manifest_key(repo, commit);
        let m = match store
            .backend()
            .get(&key)
            .map_err(StoreError::from)
            .and_then(|b| decode_manifest(&key, &b))
        {
            Ok(m) => m,
            Err(StoreError::Object(objects::ObjectError::NotFound(_))) => continue, // removed meanwhile
            Err(e) => {
                report.problem(format!("{key}: {e}"));
                continue;
            }
        };
        if &m.repo != repo || &m.commit != commit {
            report.problem(format!("{key}: describes {}@{} instead", m.repo, m.commit));
        }
        check_files(repo, commit, &m, forwards, refs, report);
    }
    Ok(commits)
}

/// Checks the files of manifest `m` (`repo@commit`): chunks within the pack table and
/// adding up to the file's size; records where each chunk should be.
fn check_files(
    repo: &RepoId,
    commit: &CommitId,
    m: &Manifest,
    forwards: &Forwards,
    refs: &mut References,
    report: &mut FsckReport,
) {
    for f in &m.files {
        let mut total = 0u64;
        for (i, c) in f.chunks.iter().enumerate() {
            total += c.raw_len as u64;
            let Some(p) = m.packs.get(c.pack as usize) else {
                report.problem(format!(
                    "{repo}@{commit} {}: chunk {i} points past the pack table",
                    f.path
                ));
                continue;
            };
            report.chunk_refs += 1;
            let (to, off) = forwards.follow(*p, c.offset, &c.id, c.frame_len, &mut |q| {
                refs.followed.insert(q);
            });
            let via = if to == *p {
                String::new()
            } else {
                format!(" (moved from pack {} at {})", p.to_hex(), c.offset)
            };
            refs.wanted.entry(to).or_default().entry(off).or_insert((
                c.id,
                c.frame_len,
                c.raw_len,
                format!("{repo}@{commit} {}{via}", f.path),
            ));
        }
        if total != f.size {
            report.problem(format!(
                "{repo}@{commit} {}: chunks add up to {total} bytes, the file has {}",
                f.path, f.size
            ));
        }
    }
}

/// Every ref and pin of `repo` must point at a commit with a manifest.
fn check_refs_and_pins(
    store: &Store,
    repo: &RepoId,
    commits: &HashSet<CommitId>,
    report: &mut FsckReport,
) -> Result<()> {
    match store.refs(repo) {
        Ok(refs) => {
            for (name, c) in refs {
                report.refs += 1;
                if !commits.contains(&c) && !store.has_commit(repo, &c)? {
                    report.problem(format!(
                        "{repo} ref {name} points at {c}, which has no manifest"
                    ));
                }
            }
        }
        Err(e) => report.problem(format!("{repo}: refs: {e}")),
    }
    for c in store.pins(repo)? {
        report.pins += 1;
        if !commits.contains(&c) && !store.has_commit(repo, &c)? {
            report.problem(format!("{repo}: pin of {c}, which has no manifest"));
        }
    }
    Ok(())
}

/// Every release record of `repo` must decode, be within its cap and name the commit (and
/// label key) of its key; a record of a commit with no manifest is noted.
fn check_release_records(
    store: &Store,
    repo: &RepoId,
    commits: &HashSet<CommitId>,
    report: &mut FsckReport,
) -> Result<()> {
    for obj in store.backend().list(&layout::checks_prefix(repo))? {
        let Some(c) = layout::parse_check_key(repo, &obj.key) else {
            report.problem(format!("{}: not a release check record name", obj.key));
            continue;
        };
        report.checks += 1;
        let found = read_record(store, &obj, MAX_CHECK_OBJECT, |b| {
            codec::decode::<CheckObject>(Kind::Check, b)
                .map_err(|e| e.to_string())?
                .check(&c)
        });
        note_record(store, repo, commits, &c, &obj.key, found, report)?;
    }
    for obj in store.backend().list(&layout::labels_prefix(repo))? {
        let Some((c, key)) = layout::parse_label_key(repo, &obj.key) else {
            report.problem(format!("{}: not a release label name", obj.key));
            continue;
        };
        report.labels += 1;
        let found = read_record(store, &obj, MAX_LABEL_OBJECT, |b| {
            codec::decode::<LabelObject>(Kind::Label, b)
                .map_err(|e| e.to_string())?
                .check(&c, &key)
        });
        note_record(store, repo, commits, &c, &obj.key, found, report)?;
    }
    Ok(())
}

/// Reads the release record `obj` (refused over `cap`) and judges its bytes with `judge`:
/// `Ok(false)` when it went meanwhile, `Err` saying why it is damaged.
fn read_record(
    store: &Store,
    obj: &objects::ObjectMeta,
    cap: u64,
    judge: impl FnOnce(&[u8]) -> std::result::Result<(), String>,
) -> std::result::Result<bool, String> {
    if obj.size > cap {
        return Err(format!("{} bytes, more than {cap}", obj.size));
    }
    match store.backend().get(&obj.key) {
        Ok(b) if b.len() as u64 > cap => Err(format!("{} bytes, more than {cap}", b.len())),
        Ok(b) => judge(&b).map(|()| true),
        Err(objects::ObjectError::NotFound(_)) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Reports a damaged release record at `key` (a problem) or one of a commit with no
/// manifest (a note: readers ignore it).
fn note_record(
    store: &Store,
    repo: &RepoId,
    commits: &HashSet<CommitId>,
    commit: &CommitId,
    key: &str,
    found: std::result::Result<bool, String>,
    report: &mut FsckReport,
) -> Result<()> {
    match found {
        Err(why) => report.problem(format!("{key}: {why}")),
        Ok(false) => return Ok(()), // removed meanwhile
        Ok(true) => {}
    }
    if !commits.contains(commit) && !store.has_commit(repo, commit)? {
        report.notes.push(format!(
            "{key}: a release record of {repo}@{commit}, which has no manifest (ignored)"
        ));
    }
    Ok(())
}

/// Every referenced chunk where its manifest says (checked against the pack's footer).
fn check_chunks(
    store: &Store,
    packs: &BTreeMap<PackId, u64>,
    wanted: &Wanted,
    report: &mut FsckReport,
) -> Result<()> {
    for (p, offsets) in wanted {
        let key = layout::pack_key(p);
        if !packs.contains_key(p) {
            let user = offsets
                .values()
                .next()
                .map_or("?", |(_, _, _, u)| u.as_str());
            report.problem(format!(
                "pack {} is missing; {} chunks reference it (first: {user})",
                p.to_hex(),
                offsets.len()
            ));
            continue;
        }
        let footer = match pack::read_footer(store.backend().as_ref(), &key) {
            Ok(f) => f,
            Err(e) => {
                report.problem(format!("{e}"));
                continue;
            }
        };
        let by_offset: HashMap<u32, &FooterEntry> =
            footer.entries.iter().map(|e| (e.offset, e)).collect();
        for (off, (id, frame_len, raw_len, user)) in offsets {
            match by_offset.get(off) {
                Some(e) if e.id == *id && e.frame_len == *frame_len && e.raw_len == *raw_len => {}
                Some(_) => report.problem(format!(
                    "{user}: chunk {} at offset {off} of pack {} differs from the pack's footer",
                    id,
                    p.to_hex()
                )),
                None => report.problem(format!(
                    "{user}: no frame at offset {off} of pack {}",
                    p.to_hex()
                )),
            }
        }
    }
    Ok(())
}

/// Forwarding records whose copies are gone. A revision that follows an entry to a
/// missing pack is a problem already reported by [`check_chunks`] ("pack ... is missing",
/// naming the pack it moved from); entries no revision follows are harmless, and gc
/// removes the record once its old pack is gone and no revision follows it.
fn note_broken_forwards(
    records: &[(PackId, MovedRecord)],
    packs: &BTreeMap<PackId, u64>,
    followed: &HashSet<PackId>,
    report: &mut FsckReport,
) {
    for (p, rec) in records {
        let gone: Vec<String> = rec
            .targets
            .iter()
            .filter(|t| !packs.contains_key(t))
            .map(|t| t.to_hex())
            .collect();
        if !gone.is_empty() {
            let users = if followed.contains(p) {
                "revisions follow other entries of it"
            } else {
                "no revision follows it"
            };
            report.notes.push(format!(
                "forwarding record {} has entries pointing at deleted packs {} ({users})",
                layout::moved_key(p),
                gone.join(", ")
            ));
        }
    }
}

/// gc's condemned list must decode; notes the condemned packs referenced again and the
/// packs nothing references.
fn check_condemned(
    store: &Store,
    packs: &BTreeMap<PackId, u64>,
    wanted: &Wanted,
    report: &mut FsckReport,
) {
    let condemned: HashSet<PackId> = match state::read(store.backend().as_ref()) {
        Ok(s) => s.condemned.into_iter().map(|c| c.pack).collect(),
        Err(e) => {
            report.problem(e.to_string());
            HashSet::new()
        }
    };
    report.condemned_packs = condemned.iter().filter(|p| packs.contains_key(p)).count();
    let referenced_condemned = condemned.iter().filter(|p| wanted.contains_key(p)).count();
    if referenced_condemned > 0 {
        report.notes.push(format!(
            "{referenced_condemned} condemned packs are referenced again; the next gc keeps them"
        ));
    }
    report.unreferenced_packs = packs
        .keys()
        .filter(|p| !wanted.contains_key(p) && !condemned.contains(p))
        .count();
    if report.unreferenced_packs > 0 {
        report.notes.push(format!(
            "{} packs are referenced by no revision; gc will reclaim them",
            report.unreferenced_packs
        ));
    }
}

/// Every lock object must decode; each is noted, held or stale.
fn note_locks(store: &Store, report: &mut FsckReport) {
    let backend = store.backend();
    for kind in ["gc", "ingest", lock::WRITE_KIND] {
        // Ages by the store's clock, read before the listing.
        let listed = lock::store_now_ms(backend.as_ref())
            .and_then(|now| Ok((now, lock::list(backend.as_ref(), kind)?)));
        match listed {
            Ok((now, locks)) => {
                for l in locks {
                    let state = if l.is_stale(now) { "stale" } else { "held" };
                    report
                        .notes
                        .push(format!("{}: {state}, {}", l.key, l.describe(now)));
                }
            }
            Err(e) => report.problem(e.to_string()),
        }
    }
}

/// Leftover temporaries older than the grace period (and [`gc::TEMPORARY_MIN_AGE`]).
fn check_temporaries(store: &Store, opts: &FsckOptions, report: &mut FsckReport) -> Result<()> {
    let min_age = opts.grace.max(gc::TEMPORARY_MIN_AGE);
    for t in store.backend().temporaries(min_age)? {
        report.problem(format!(
            "orphaned temporary {} is {} s old (gc removes it)",
            t.name, t.age_secs
        ));
    }
    Ok(())
}

/// Every forwarding record; one that cannot be read is a problem (and is not followed).
fn forwarding_records(
    store: &Store,
    report: &mut FsckReport,
) -> Result<(Forwards, Vec<(PackId, MovedRecord)>)> {
    let backend = store.backend();
    let mut fw = Forwards::default();
    let mut records = Vec::new();
    for obj in backend.list(layout::MOVED_PREFIX)? {
        let Some(p) = layout::parse_moved_key(&obj.key) else {
            report.problem(format!("{}: not a forwarding record name", obj.key));
            continue;
        };
        match backend
            .get(&obj.key)
            .map_err(StoreError::from)
            .and_then(|b| Ok(forward::decode(&obj.key, &b)?))
        {
            Ok(rec) => {
                fw.insert(&rec);
                records.push((p, rec));
            }
            Err(StoreError::Object(objects::ObjectError::NotFound(_))) => {} // removed by gc meanwhile
            Err(e) => report.problem(e.to_string()),
        }
    }
    report.forwards = records.len();
    Ok((fw, records))
}

/// Reads every pack: its bytes must hash to its name, every frame must decode and hash to
/// its chunk id.
fn read_data(store: &Store, packs: &BTreeMap<PackId, u64>, report: &mut FsckReport) -> Result<()> {
    use rayon::prelude::*;
    let found = Mutex::new(Vec::new());
    let totals = Mutex::new((0u64, 0u64));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .map_err(|e| StoreError::Invalid(format!("thread pool: {e}")))?;
    pool.install(|| {
        packs.par_iter().for_each(|(id, _)| {
            let key = layout::pack_key(id);
            let mut problems = Vec::new();
            let bytes = match store.backend().get(&key) {
                Ok(b) => b,
                Err(objects::ObjectError::NotFound(_)) => return, // deleted by gc meanwhile
                Err(e) => {
                    problems.push(e.to_string());
                    found.lock().extend(problems);
                    return;
                }
            };
            if blake3::hash(&bytes).as_bytes() != &id.0 {
                problems.push(format!(
                    "pack {}: its bytes do not hash to its name",
                    id.to_hex()
                ));
            }
            let mut chunks = 0u64;
            match pack::read_footer(store.backend().as_ref(), &key) {
                Ok(footer) => {
                    for e in &footer.entries {
                        let (s, end) =
                            (e.offset as usize, e.offset as usize + e.frame_len as usize);
                        let Some(frame) = bytes.get(s..end) else {
                            problems.push(format!(
                                "pack {}: frame at {s} runs past the end",
                                id.to_hex()
                            ));
                            continue;
                        };
                        match pack::decode_checked(frame, &e.id, &key, e.offset as u64) {
                            Ok(data) if data.len() == e.raw_len as usize => chunks += 1,
                            Ok(data) => problems.push(format!(
                                "pack {}: chunk at {s} decodes to {} bytes, footer says {}",
                                id.to_hex(),
                                data.len(),
                                e.raw_len
                            )),
                            Err(err) => problems.push(err.to_string()),
                        }
                    }
                }
                Err(e) => problems.push(e.to_string()),
            }
            {
                let mut t = totals.lock();
                t.0 += chunks;
                t.1 += bytes.len() as u64;
            }
            found.lock().extend(problems);
        })
    });
    let (chunks, bytes) = totals.into_inner();
    report.chunks_hashed = chunks;
    report.bytes_hashed = bytes;
    for p in found.into_inner() {
        report.problem(p);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::manifest::{ChunkRef, FileEntry};
    use format::Sha256;
    use repo::forward::MovedFrame;

    fn chunk(id: u8, pack: u32, offset: u32) -> ChunkRef {
        ChunkRef {
            id: ChunkId([id; 32]),
            pack,
            offset,
            frame_len: 116,
            raw_len: 100,
        }
    }

    #[test]
    fn files_are_checked_and_their_chunks_found_through_forwarding_records() {
        let (old, new) = (PackId([1; 32]), PackId([2; 32]));
        let mut forwards = Forwards::default();
        forwards.insert(&MovedRecord {
            pack: old,
            written_ms: 0,
            targets: vec![new],
            frames: vec![MovedFrame {
                offset: 16,
                id: ChunkId([1; 32]),
                target: 0,
                new_offset: 40,
                frame_len: 116,
            }],
        });
        let (repo, commit) = (RepoId::parse("org/model").unwrap(), CommitId([9; 20]));
        let m = Manifest {
            repo: repo.clone(),
            commit,
            ingested_at: 1,
            source: "plain".into(),
            packs: vec![old],
            files: vec![
                FileEntry {
                    path: "a.bin".into(),
                    size: 200,
                    sha256: Sha256([0; 32]),
                    executable: false,
                    chunks: vec![chunk(1, 0, 16), chunk(2, 0, 132)],
                },
                FileEntry {
                    path: "b.bin".into(),
                    size: 999, // the chunks add up to 200
                    sha256: Sha256([0; 32]),
                    executable: false,
                    chunks: vec![chunk(3, 0, 248), chunk(4, 5, 16)],
                },
            ],
            published: None,
            xet_hashes: Vec::new(),
        };
        let mut refs = References::default();
        let mut report = FsckReport::default();
        check_files(&repo, &commit, &m, &forwards, &mut refs, &mut report);
        assert_eq!(report.chunk_refs, 3);
        let moved = &refs.wanted[&new][&40];
        assert_eq!((moved.0, moved.1, moved.2), (ChunkId([1; 32]), 116, 100));
        assert!(moved.3.contains("a.bin (moved from pack"), "{}", moved.3);
        let mut offsets: Vec<_> = refs.wanted[&old].keys().copied().collect();
        offsets.sort();
        assert_eq!(offsets, [132, 248]);
        assert_eq!(refs.followed, HashSet::from([old]));
        assert_eq!(report.problem_count, 2, "{:?}", report.problems);
        assert!(report.problems[0].contains("b.bin: chunk 1 points past the pack table"));
        assert!(report.problems[1].contains("b.bin: chunks add up to 200 bytes, the file has 999"));
    }

    fn label(c: CommitId, key: &str) -> Vec<u8> {
        let l = LabelObject {
            commit: c,
            key: key.into(),
            value: "ok".into(),
            set_at: 1,
            by: "test".into(),
        };
        codec::encode(Kind::Label, &l, false)
    }

    #[test]
    fn damaged_release_records_are_problems_naming_their_key_and_orphans_notes() {
        use objects::{MemoryStore, ObjectStore};
        let backend = std::sync::Arc::new(MemoryStore::new());
        let store = Store::open_or_create(backend.clone(), Default::default()).unwrap();
        let repo = RepoId::parse("org/m").unwrap();
        let (c, other, gone) = (CommitId([1; 20]), CommitId([2; 20]), CommitId([3; 20]));
        backend.put(&layout::manifest_key(&repo, &c), b"m").unwrap();
        backend
            .put(&layout::manifest_key(&repo, &other), b"m")
            .unwrap();
        let check = CheckObject {
            commit: c,
            files: [0; 32],
            rules: 1,
            checked_at: 1,
            by: "test".into(),
            problems: Vec::new(),
            omitted: 0,
        };
        let put = |key: String, bytes: &[u8]| backend.put(&key, bytes).unwrap();
        put(
            layout::check_key(&repo, &c),
            &codec::encode(Kind::Check, &check, true),
        );
        // Another commit's record under `other`'s key; one of a commit with no manifest.
        put(
            layout::check_key(&repo, &other),
            &codec::encode(Kind::Check, &check, true),
        );
        let orphan = CheckObject {
            commit: gone,
            ..check
        };
        put(
            layout::check_key(&repo, &gone),
            &codec::encode(Kind::Check, &orphan, true),
        );
        put(layout::label_key(&repo, &c, "vllm"), &label(c, "vllm"));
        put(layout::label_key(&repo, &c, "bad"), b"not a label");
        put(layout::label_key(&repo, &c, "moved"), &label(c, "other"));
        put(
            layout::label_key(&repo, &other, "big"),
            &vec![0; MAX_LABEL_OBJECT as usize + 1],
        );
        put(
            layout::label_key(&repo, &gone, "stage"),
            &label(gone, "stage"),
        );
        put(format!("{}zz", layout::checks_prefix(&repo)), b"x");

        let commits = HashSet::from([c, other]);
        let mut report = FsckReport::default();
        check_release_records(&store, &repo, &commits, &mut report).unwrap();
        assert_eq!((report.checks, report.labels), (3, 5));
        let problem = |key: String, why: &str| {
            assert!(
                report
                    .problems
                    .iter()
                    .any(|p| p.starts_with(&format!("{key}: ")) && p.contains(why)),
                "{key} ({why}) in {:#?}",
                report.problems
            )
        };
        problem(layout::check_key(&repo, &other), "record of commit");
        problem(layout::label_key(&repo, &c, "bad"), "");
        problem(layout::label_key(&repo, &c, "moved"), "another key");
        problem(layout::label_key(&repo, &other, "big"), "more than 8192");
        problem(format!("{}zz", layout::checks_prefix(&repo)), "not a");
        assert_eq!(report.problem_count, 5, "{:#?}", report.problems);
        let mut notes = report.notes.clone();
        notes.sort();
        assert_eq!(notes.len(), 2, "{notes:#?}");
        assert!(
            notes[0].starts_with(&layout::check_key(&repo, &gone)),
            "{notes:#?}"
        );
        assert!(notes[1].starts_with(&layout::label_key(&repo, &gone, "stage")));
        assert!(notes.iter().all(|n| n.contains("no manifest")));
    }
}
