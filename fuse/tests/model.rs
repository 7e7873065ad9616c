//! The mount's core (`modelfs::fs::MountCore`) against a reference model, without the
//! kernel: sequences of lookup / getattr / readdir / open / read / release over three
//! repositories in a memory store, with refs moved and deleted, revisions ingested and
//! removed, and gc run (rewriting every pack with a dead byte, deleting condemned packs at
//! once, so packs move under open files) between the steps.
//!
//! The model is what each path must show: per repository its commits (each a map of path
//! to bytes) and its refs. Checked: every lookup finds exactly what the model has (kind,
//! size, timeouts: short at the top of a revision, long below it), or `ENOENT`;
//! getattr agrees with lookup, and an inode once seen keeps its attributes; listings
//! (root, organisation, repository, every directory of a revision) equal the model, and a
//! listing from an offset is the tail of the whole; reads are byte-exact while the revision
//! is in the model, and byte-exact or `EIO` once it is removed (never other bytes); a
//! released or unknown handle reads `EBADF`; opens for writing are `EROFS`, of a directory
//! `EISDIR`. A revision removed and ingested again with other files under the same commit
//! shows them at once (the namespace's refresh is zero): a file whose bytes changed is a
//! new inode, the old one keeps its attributes and answers `ESTALE` to an open, and its
//! open handles read their own bytes or `EIO`.
//!
//! Open modes: the core has a node file cache (`read::file_cache::FileCache`) and a
//! stand-in kernel that takes backing files, or refuses them from some step on (as a
//! kernel without `CAP_SYS_ADMIN` does). Checked: every handle of an inode has the mode of
//! the first; a whole or passthrough open is of a file the cache keeps (at least
//! `MIN_FILE_BYTES`), and a file the cache was filled with opens whole or in passthrough
//! when none of its handles is open; the backing file handed to the kernel holds exactly
//! the file's bytes; no passthrough open after the first refusal, and no whole-file open
//! before it (passthrough is asked for).
//!
//! A proptest state machine: a case is a seed for the starting revisions and [`STEPS`]
//! operations ([`Op`], drawn by [`op`]); each operation names its choices among what the
//! case holds then (a handle, a commit, a path) by a [`Index`], so that any subsequence of
//! a case is a case too. A failure shrinks to the fewest and simplest operations that still
//! fail, and is reported with them and the steps they took. proptest saves the failing
//! case's seed in `fuse/tests/model.proptest-regressions` (committed), and every run
//! replays the seeds there before [`CASES`] new cases. The new cases are the same on every
//! run (from [`RNG_SEED`]); `PROPTEST_CASES=N` runs more of them, `PROPTEST_RNG_SEED=S`
//! others.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use chunker::ChunkParams;
use format::{CommitId, RepoId};
use index::Index as ChunkIndex;
use modelfs::fs::{FsError, Kind, MountCore, OpenHow, IMMUTABLE_TTL, MUTABLE_TTL};
use modelfs::namespace::{escape_ref, Namespace, ROOT};
use objects::MemoryStore;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::strategy::{NewTree, ValueTree};
use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestCaseError, TestRunner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use read::file_cache::FileCache;
use read::progress::NoProgress;
use repo::{CreateOptions, Store};
use store::gc::GcOptions;
use store::ingest::{ingest, IngestOptions};
use store::source::{discover, DiscoverOptions};

/// New cases in a normal run (after the saved regressions).
const CASES: u32 = 40;
/// The seed of the new cases' generator, unless `PROPTEST_RNG_SEED` says another: every
/// run tries the same cases, as the seeded test before it did; other seeds explore.
const RNG_SEED: u64 = 0x6d6f_64656c;
/// Operations per new case.
const STEPS: usize = 300;

const REPOS: [&str; 3] = ["org/alpha", "org/beta", "other/gamma"];
/// The one file large enough for the node file cache (`MIN_FILE_BYTES`), in `org/alpha`.
const BIG: &str = "weights/big.bin";
const PATHS: [&str; 7] = [
    BIG,
    "config.json",
    "model.bin",
    "sub/a.bin",
    "sub/deep/b.txt",
    "sub/deep/c.bin",
    "weights/w.bin",
];
const REF_NAMES: [&str; 3] = ["main", "dev", "refs/pr/1"];

/// One step of a case. Its choices among what the case holds when it runs (open handles,
/// commits, paths of a revision) are [`Index`]es into those lists; a step whose list is
/// empty does nothing.
#[derive(Clone, Debug)]
enum Op {
    /// Looks a path up from the root, checking every prefix.
    Lookup(Parts),
    /// Lists a directory (depth 0: the root), opens it for writing (`write`: `O_RDWR`, else
    /// `O_WRONLY`) and lists it again from an offset (`from`).
    List {
        dir: Parts,
        write: bool,
        from: Index,
    },
    /// Opens a file or directory.
    Open(OpenSpec),
    /// Reads from an open handle; with none open, opens `or_open` instead (as happens
    /// mostly early in a case).
    Read {
        handle: Index,
        at: At,
        size: u32,
        or_open: OpenSpec,
    },
    /// Releases an open handle.
    Release(Index),
    /// Asks the attributes of a file inode seen before.
    GetattrSeen(Index),
    /// Fills the node file cache with the big file of a commit of `org/alpha`.
    Fill(Index),
    /// Sets ref `REF_NAMES[name]` to a commit, or deletes it.
    MoveRef {
        repo: u8,
        name: u8,
        delete: bool,
        commit: Index,
    },
    /// Removes a commit (`open_one`: one an open handle reads, when there is one).
    Remove {
        repo: u8,
        open_one: bool,
        commit: Index,
    },
    /// Removes a commit and ingests other files (from `seed`) under the same id.
    Replace {
        repo: u8,
        commit: Index,
        path: Index,
        n: u32,
        seed: u64,
    },
    /// Ingests a new revision (files from `seed`) and points `main` at it.
    Ingest { repo: u8, n: u32, seed: u64 },
    /// Two gc runs.
    Gc,
    /// From now on the stand-in kernel refuses backing files.
    Refuse,
}

/// A path from the root: `depth` names of organisation, repository, revision, then the
/// path inside the revision.
#[derive(Clone, Debug)]
struct Parts {
    depth: u8,
    repo: u8,
    /// The organisation (0) or repository (1) name replaced by "absent".
    absent: Option<u8>,
    rev: Rev,
    inner: Inner,
}

/// A revision name: a ref (present or not), a full sha (lower or upper case, of a present
/// or removed commit), a prefix of one, or garbage.
#[derive(Clone, Debug)]
enum Rev {
    Ref(u8),
    Sha(Index),
    Upper(Index),
    Prefix(Index),
    Nope,
}

/// A path inside a revision: `PATHS[path]`, its directory, a name below it, another
/// revision's file, or nothing.
#[derive(Clone, Debug)]
enum Inner {
    File(u8),
    Parent(u8),
    Below(u8),
    Rev1,
    Empty,
}

/// What to open; `write`: for writing, with the flags numbered so.
#[derive(Clone, Debug)]
struct OpenSpec {
    target: Target,
    write: Option<u8>,
}

#[derive(Clone, Debug)]
enum Target {
    Path(Parts),
    /// `org/alpha/<rev>/weights/big.bin`: the file the node file cache keeps.
    Big(Rev),
}

/// Where a read starts: at 0, past the end, or inside the file (at most at its end).
#[derive(Clone, Debug)]
enum At {
    Start,
    PastEnd(u8),
    Within(Index),
}

fn rev() -> impl Strategy<Value = Rev> {
    prop_oneof![
        2 => (0..3u8).prop_map(Rev::Ref),
        2 => any::<Index>().prop_map(Rev::Sha),
        1 => any::<Index>().prop_map(Rev::Upper),
        1 => any::<Index>().prop_map(Rev::Prefix),
        1 => Just(Rev::Nope),
    ]
}

fn inner() -> impl Strategy<Value = Inner> {
    let path = 0..PATHS.len() as u8;
    prop_oneof![
        2 => path.clone().prop_map(Inner::File),
        1 => path.clone().prop_map(Inner::Parent),
        1 => path.prop_map(Inner::Below),
        1 => Just(Inner::Rev1),
        1 => Just(Inner::Empty),
    ]
}

fn parts(depth: std::ops::RangeInclusive<u8>) -> impl Strategy<Value = Parts> {
    let absent = prop_oneof![19 => Just(None), 1 => (0..2u8).prop_map(Some)];
    (depth, 0..REPOS.len() as u8, absent, rev(), inner()).prop_map(
        |(depth, repo, absent, rev, inner)| Parts {
            depth,
            repo,
            absent,
            rev,
            inner,
        },
    )
}

fn open_spec() -> impl Strategy<Value = OpenSpec> {
    let target = prop_oneof![
        7 => parts(4..=4).prop_map(Target::Path),
        3 => rev().prop_map(Target::Big),
    ];
    let write = prop_oneof![9 => Just(None), 1 => (0..3u8).prop_map(Some)];
    (target, write).prop_map(|(target, write)| OpenSpec { target, write })
}

/// One operation, as often as the steps of a mount's life: mostly lookups, listings, opens
/// and reads; now and then the store changes under them.
fn op() -> impl Strategy<Value = Op> {
    let repo = || 0..REPOS.len() as u8;
    let n = || 100..1_000_000u32;
    prop_oneof![
        90 => parts(1..=4).prop_map(Op::Lookup),
        45 => (parts(0..=4), any::<bool>(), any::<Index>())
            .prop_map(|(dir, write, from)| Op::List { dir, write, from }),
        30 => open_spec().prop_map(Op::Open),
        75 => (
            any::<Index>(),
            prop_oneof![
                1 => Just(At::Start),
                1 => (0..100u8).prop_map(At::PastEnd),
                2 => any::<Index>().prop_map(At::Within),
            ],
            0..70_000u32,
            open_spec(),
        )
            .prop_map(|(handle, at, size, or_open)| Op::Read {
                handle,
                at,
                size,
                or_open
            }),
        18 => any::<Index>().prop_map(Op::Release),
        3 => any::<Index>().prop_map(Op::GetattrSeen),
        6 => any::<Index>().prop_map(Op::Fill),
        9 => (repo(), 0..REF_NAMES.len() as u8, proptest::bool::weighted(0.2), any::<Index>())
            .prop_map(|(repo, name, delete, commit)| Op::MoveRef { repo, name, delete, commit }),
        6 => (repo(), any::<bool>(), any::<Index>())
            .prop_map(|(repo, open_one, commit)| Op::Remove { repo, open_one, commit }),
        3 => (repo(), any::<Index>(), any::<Index>(), n(), any::<u64>())
            .prop_map(|(repo, commit, path, n, seed)| Op::Replace { repo, commit, path, n, seed }),
        6 => (repo(), n(), any::<u64>()).prop_map(|(repo, n, seed)| Op::Ingest { repo, n, seed }),
        9 => Just(Op::Gc),
        // About one case in three never refuses (1 - 1/301 per step, 300 steps).
        1 => Just(Op::Refuse),
    ]
}

/// Exactly `len` values of `element`, shrinking to fewer (down to none) and then to simpler
/// ones. (`proptest::collection::vec` draws its length from its range and never shrinks
/// below the range's start, so it could not both run every case `STEPS` long and shrink a
/// failure to its few steps.) Shrinking deletes runs of steps, halving the run from half
/// the case down to one step, then simplifies each step left.
#[derive(Debug)]
struct Steps<S> {
    element: S,
    len: usize,
}

impl<S: Strategy> Strategy for Steps<S> {
    type Tree = StepsTree<S::Tree>;
    type Value = Vec<S::Value>;

    fn new_tree(&self, runner: &mut TestRunner) -> NewTree<Self> {
        let elements = (0..self.len)
            .map(|_| self.element.new_tree(runner))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StepsTree {
            kept: vec![true; elements.len()],
            elements,
            shrink: Shrink::Delete {
                run: self.len.div_ceil(2),
                at: 0,
            },
            last: None,
        })
    }
}

#[derive(Clone, Copy, Debug)]
enum Shrink {
    /// Delete the `run` kept steps from the `at`-th kept one on.
    Delete {
        run: usize,
        at: usize,
    },
    /// Simplify the step at this position.
    Simplify(usize),
    Done,
}

#[derive(Debug)]
enum Last {
    /// These positions were deleted.
    Deleted(Vec<usize>),
    /// The step at this position was simplified.
    Simplified(usize),
}

struct StepsTree<T> {
    elements: Vec<T>,
    kept: Vec<bool>,
    shrink: Shrink,
    last: Option<Last>,
}

impl<T: ValueTree> std::fmt::Debug for StepsTree<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepsTree")
            .field("kept", &self.kept.iter().filter(|k| **k).count())
            .field("shrink", &self.shrink)
            .finish()
    }
}

impl<T: ValueTree> ValueTree for StepsTree<T> {
    type Value = Vec<T::Value>;

    fn current(&self) -> Vec<T::Value> {
        self.elements
            .iter()
            .zip(&self.kept)
            .filter(|(_, k)| **k)
            .map(|(e, _)| e.current())
            .collect()
    }

    fn simplify(&mut self) -> bool {
        loop {
            match self.shrink {
                Shrink::Delete { run, at } => {
                    let kept: Vec<usize> = (0..self.kept.len()).filter(|i| self.kept[*i]).collect();
                    if run == 0 {
                        self.shrink = Shrink::Simplify(0);
                        continue;
                    }
                    if at >= kept.len() {
                        self.shrink = Shrink::Delete {
                            run: run / 2,
                            at: 0,
                        };
                        continue;
                    }
                    let gone: Vec<usize> = kept[at..(at + run).min(kept.len())].to_vec();
                    for i in &gone {
                        self.kept[*i] = false;
                    }
                    // If the case still fails without them, the next run starts at the
                    // same place; if not, `complicate` puts them back and moves on.
                    self.last = Some(Last::Deleted(gone));
                    return true;
                }
                Shrink::Simplify(i) => {
                    if i >= self.elements.len() {
                        self.shrink = Shrink::Done;
                        continue;
                    }
                    if self.kept[i] && self.elements[i].simplify() {
                        self.last = Some(Last::Simplified(i));
                        return true;
                    }
                    self.shrink = Shrink::Simplify(i + 1);
                }
                Shrink::Done => return false,
            }
        }
    }

    fn complicate(&mut self) -> bool {
        match self.last.take() {
            None => false,
            Some(Last::Deleted(gone)) => {
                for i in gone {
                    self.kept[i] = true;
                }
                if let Shrink::Delete { run, at } = self.shrink {
                    self.shrink = Shrink::Delete { run, at: at + run };
                }
                true
            }
            Some(Last::Simplified(i)) => {
                // Undone as far as the step can; it may be undone further next time.
                let undone = self.elements[i].complicate();
                if undone {
                    self.last = Some(Last::Simplified(i));
                }
                undone
            }
        }
    }
}

type Files = BTreeMap<String, Vec<u8>>;

#[derive(Default)]
struct RepoModel {
    commits: BTreeMap<CommitId, Arc<Files>>,
    refs: BTreeMap<String, CommitId>,
    /// Commits removed (their names must no longer resolve).
    removed: BTreeSet<CommitId>,
}

/// An open handle and what it must read.
struct OpenFile {
    ino: u64,
    fh: u64,
    repo: String,
    commit: CommitId,
    path: String,
    bytes: Arc<Vec<u8>>,
    /// 'P'assthrough, 'W'hole or 'S'tream.
    how: char,
}

struct Case {
    store: Store,
    index: ChunkIndex,
    _index_dir: tempfile::TempDir,
    core: MountCore<()>,
    files: Arc<FileCache>,
    _files_dir: tempfile::TempDir,
    /// The stand-in kernel refuses backing files (an [`Op::Refuse`] ran).
    refusing: bool,
    refused: bool,
    /// Commits made so far (each commit id holds its number: none is made twice).
    made: u32,
    /// Contents the file cache was filled with (by their bytes).
    filled: BTreeSet<Vec<u8>>,
    model: BTreeMap<String, RepoModel>,
    open: Vec<OpenFile>,
    /// File inodes seen, with their size.
    seen: BTreeMap<u64, u64>,
    log: Vec<String>,
    counts: Counts,
}

/// What the steps did, to show that a run covers what it claims.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    found: u64,
    not_found: u64,
    listings: u64,
    opens: u64,
    reads: u64,
    read_bytes: u64,
    reads_of_removed: u64,
    eio_of_removed: u64,
    /// Opens in passthrough, whole, streamed.
    modes: [u64; 3],
    gc_runs: u64,
    packs_rewritten: u64,
    /// Opens of a file inode whose revision was ingested again with other bytes there.
    stale_opens: u64,
}

impl Counts {
    fn add(&mut self, c: &Counts) {
        self.found += c.found;
        self.not_found += c.not_found;
        self.listings += c.listings;
        self.opens += c.opens;
        self.reads += c.reads;
        self.read_bytes += c.read_bytes;
        self.reads_of_removed += c.reads_of_removed;
        self.eio_of_removed += c.eio_of_removed;
        for i in 0..3 {
            self.modes[i] += c.modes[i];
        }
        self.gc_runs += c.gc_runs;
        self.packs_rewritten += c.packs_rewritten;
        self.stale_opens += c.stale_opens;
    }
}

fn memory_store() -> Store {
    let opts = CreateOptions {
        chunk: ChunkParams::tiny(),
        pack_target: 48 * 1024,
    };
    Store::open_or_create(Arc::new(MemoryStore::new()), opts).unwrap()
}

/// Writes `files` in a temporary directory and ingests it as revision `commit` of `repo`.
fn ingest_files(store: &Store, index: &ChunkIndex, repo: &str, commit: CommitId, files: &Files) {
    let dir = tempfile::tempdir().unwrap();
    for (p, data) in files {
        let path = dir.path().join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }
    let opts = DiscoverOptions {
        repo: Some(RepoId::parse(repo).unwrap()),
        revision: Some(commit),
        refs: Vec::new(),
    };
    let snaps = discover(dir.path(), &opts).unwrap().snapshots;
    let opts = IngestOptions {
        threads: 1,
        ..Default::default()
    };
    ingest(store, index, &snaps, opts, &NoProgress).unwrap();
}

/// A commit id: random, ending with `k` (the case's count of commits made before), so that
/// no two are the same however the seeds shrink.
fn commit_id(rng: &mut StdRng, k: u32) -> CommitId {
    let mut id = [0u8; 20];
    rng.fill(&mut id[..16]);
    id[16..].copy_from_slice(&k.to_be_bytes());
    CommitId(id)
}

/// Bytes a file may have: runs copied from a shared source (so revisions share chunks),
/// with some noise.
fn content(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0 => 0,
        1..=3 => rng.gen_range(1..2000),
        _ => rng.gen_range(2000..40_000),
    };
    let seed: u8 = rng.gen_range(0..4);
    let mut v: Vec<u8> = (0..len)
        .map(|i: usize| ((i as u32).wrapping_mul(2654435761) >> (13 + seed)) as u8)
        .collect();
    for _ in 0..rng.gen_range(0..4) {
        if !v.is_empty() {
            let at = rng.gen_range(0..v.len());
            v[at] = rng.gen();
        }
    }
    v
}

/// Bytes of the big file: a little more than the file cache's minimum, one byte changed.
fn big_content(rng: &mut StdRng) -> Vec<u8> {
    let len = read::file_cache::MIN_FILE_BYTES as usize + rng.gen_range(0..50_000);
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2246822519).rotate_left(7) as u8)
        .collect();
    let at = rng.gen_range(0..len);
    v[at] = v[at].wrapping_add(1);
    v
}

/// A new revision's files: some kept from `base`, some new; never empty, never equal to
/// `base` (a `rev` file says which revision it is).
fn revision_files(rng: &mut StdRng, base: Option<&Files>, n: usize, big: bool) -> Files {
    let mut files = Files::new();
    for p in PATHS {
        if rng.gen_bool(0.3) || (p == BIG && !big) {
            continue;
        }
        let kept = base.and_then(|b| b.get(p)).filter(|_| rng.gen_bool(0.6));
        let new = |rng: &mut StdRng| match p {
            BIG => big_content(rng),
            _ => content(rng),
        };
        files.insert(p.to_string(), kept.cloned().unwrap_or_else(|| new(rng)));
    }
    files.insert(
        format!("rev{}.txt", n % 3),
        format!("revision {n}\n").into_bytes(),
    );
    files
}

impl Case {
    /// Three repositories of three revisions each (files drawn from `seed`), `main` at the
    /// last of each.
    fn new(seed: u64) -> Case {
        let files_dir = tempfile::tempdir().unwrap();
        let files = FileCache::open(files_dir.path(), 64 << 20).unwrap();
        let store = memory_store();
        let index_dir = tempfile::tempdir().unwrap();
        let index = ChunkIndex::open(index_dir.path(), &store.config().store_id).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = BTreeMap::new();
        let mut made = 0;
        for repo in REPOS {
            let mut m = RepoModel::default();
            let mut base: Option<Arc<Files>> = None;
            let mut last = None;
            for _ in 0..3 {
                made += 1;
                let big = repo == REPOS[0];
                let files = Arc::new(revision_files(
                    &mut rng,
                    base.as_deref(),
                    made as usize,
                    big,
                ));
                let c = commit_id(&mut rng, made);
                ingest_files(&store, &index, repo, c, &files);
                m.commits.insert(c, files.clone());
                base = Some(files);
                last = Some(c);
            }
            let last = last.unwrap();
            store
                .set_ref(&RepoId::parse(repo).unwrap(), "main", &last)
                .unwrap();
            m.refs.insert("main".into(), last);
            model.insert(repo.to_string(), m);
        }
        let cache = Arc::new(read::cache::ChunkCache::new(store.clone(), 96 * 1024, 2).unwrap());
        let ns = Namespace::full(store.clone()).with_refresh(Duration::ZERO);
        Case {
            store,
            index,
            _index_dir: index_dir,
            core: MountCore::new(ns, cache).with_file_cache(files.clone(), true),
            files,
            _files_dir: files_dir,
            refusing: false,
            refused: false,
            made,
            filled: BTreeSet::new(),
            model,
            open: Vec::new(),
            seen: BTreeMap::new(),
            log: Vec::new(),
            counts: Counts::default(),
        }
    }

    fn repo_id(repo: &str) -> RepoId {
        RepoId::parse(repo).unwrap()
    }

    /// The next commit id, from `rng`.
    fn new_commit(&mut self, rng: &mut StdRng) -> CommitId {
        self.made += 1;
        commit_id(rng, self.made)
    }

    /// One step.
    fn step(&mut self, op: &Op) {
        match op {
            Op::Lookup(parts) => self.lookup_path(parts),
            Op::List { dir, write, from } => self.list(dir, *write, *from),
            Op::Open(spec) => self.open(spec),
            Op::Read {
                handle,
                at,
                size,
                or_open,
            } => self.read(*handle, at, *size, or_open),
            Op::Release(handle) => self.release(*handle),
            Op::GetattrSeen(which) => self.getattr_seen(*which),
            Op::Fill(commit) => self.fill(*commit),
            Op::MoveRef {
                repo,
                name,
                delete,
                commit,
            } => self.move_ref(*repo, *name, *delete, *commit),
            Op::Remove {
                repo,
                open_one,
                commit,
            } => self.remove_revision(*repo, *open_one, *commit),
            Op::Replace {
                repo,
                commit,
                path,
                n,
                seed,
            } => self.replace_revision(*repo, *commit, *path, *n, *seed),
            Op::Ingest { repo, n, seed } => self.new_revision(*repo, *n, *seed),
            Op::Gc => self.gc(),
            Op::Refuse => {
                self.refusing = true;
                self.log
                    .push("the kernel refuses backing files from now on".into());
            }
        }
    }
}

/// What a revision name shows in the model: its commit, or None (`ENOENT`).
fn resolve(m: &RepoModel, name: &str) -> Option<CommitId> {
    let unescaped = name.replace("%2F", "/");
    if let Some(c) = m.refs.get(&unescaped) {
        return Some(*c);
    }
    let lower = name.to_ascii_lowercase();
    if lower.len() < 7 || !lower.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let found: Vec<&CommitId> = m
        .commits
        .keys()
        .filter(|c| c.to_hex().starts_with(&lower))
        .collect();
    (found.len() == 1).then(|| *found[0])
}

/// The entries of directory `dir` ("" for the top) of a revision: name → is a directory.
fn model_dir(files: &Files, dir: &str) -> Option<BTreeMap<String, bool>> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut out = BTreeMap::new();
    for p in files.keys() {
        if let Some(rest) = p.strip_prefix(&prefix) {
            match rest.split_once('/') {
                Some((d, _)) => out.insert(d.to_string(), true),
                None => out.insert(rest.to_string(), false),
            };
        }
    }
    (dir.is_empty() || !out.is_empty()).then_some(out)
}

/// What a path inside a revision is: Some(Some(size)) a file, Some(None) a directory.
fn model_path(files: &Files, path: &str) -> Option<Option<u64>> {
    if let Some(b) = files.get(path) {
        return Some(Some(b.len() as u64));
    }
    model_dir(files, path).map(|_| None)
}

impl Case {
    /// The name `rev` gives a revision of `repo`: a ref (present or not), a full sha (lower
    /// or upper case, of a present or removed commit), a prefix, or garbage.
    fn rev_name(&self, repo: &str, rev: &Rev) -> String {
        let m = &self.model[repo];
        let sha = |i: &Index| {
            let mut shas: Vec<CommitId> = m.commits.keys().copied().collect();
            shas.extend(m.removed.iter().copied());
            i.get(&shas).to_hex()
        };
        match rev {
            Rev::Ref(r) => escape_ref(REF_NAMES[*r as usize]),
            Rev::Sha(i) => sha(i),
            Rev::Upper(i) => sha(i).to_ascii_uppercase(),
            Rev::Prefix(i) => sha(i)[..12].to_string(),
            Rev::Nope => "nope".to_string(),
        }
    }

    /// The names of `parts`, from the root: none at depth 0, the organisation and the
    /// repository at depths 1 and 2, then the revision, then the path inside it.
    fn names(&self, parts: &Parts) -> Vec<String> {
        if parts.depth == 0 {
            return Vec::new();
        }
        let repo = REPOS[parts.repo as usize];
        let (org, name) = repo.split_once('/').unwrap();
        let mut names = vec![org.to_string(), name.to_string()];
        if let Some(i) = parts.absent {
            names[i as usize] = "absent".into();
        }
        if parts.depth > 2 {
            names.push(self.rev_name(repo, &parts.rev));
        }
        if parts.depth > 3 {
            let inner = match parts.inner {
                Inner::File(p) => PATHS[p as usize].to_string(),
                Inner::Parent(p) => {
                    let p = PATHS[p as usize];
                    p.rsplit_once('/')
                        .map(|(d, _)| d.to_string())
                        .unwrap_or(p.to_string())
                }
                Inner::Below(p) => format!("{}/x", PATHS[p as usize]),
                Inner::Rev1 => "rev1.txt".into(),
                Inner::Empty => "".into(),
            };
            names.extend(inner.split('/').filter(|s| !s.is_empty()).map(String::from));
        }
        names
    }
    /// Walks `parts` from the root by lookups, each checked against `expect` for that
    /// prefix; returns the last inode found.
    fn walk(&mut self, parts: &[String]) -> Option<(u64, Kind)> {
        let mut ino = ROOT;
        let mut kind = Kind::Dir;
        for (i, name) in parts.iter().enumerate() {
            let want = self.expect(&parts[..=i]);
            let got = self.core.lookup(ino, name);
            self.log.push(format!(
                "lookup {:?} -> {:?}",
                &parts[..=i],
                got.as_ref().map(|e| e.attr)
            ));
            match (want, got) {
                (None, Err(FsError::NotFound)) => {
                    self.counts.not_found += 1;
                    return None;
                }
                (Some(want), Ok(e)) => {
                    assert_eq!(e.attr.kind, want.kind, "kind of {parts:?}");
                    if let Some(size) = want.size {
                        assert_eq!(e.attr.size, size, "size of {parts:?}");
                        self.seen.insert(e.attr.ino, size);
                    }
                    assert_eq!(e.entry_ttl, want.entry_ttl, "entry timeout of {parts:?}");
                    let ttl = if e.attr.immutable {
                        IMMUTABLE_TTL
                    } else {
                        MUTABLE_TTL
                    };
                    assert_eq!(e.attr_ttl, ttl);
                    assert_eq!(
                        self.core.getattr(e.attr.ino),
                        Ok(e.attr),
                        "getattr of {parts:?}"
                    );
                    ino = e.attr.ino;
                    kind = e.attr.kind;
                    self.counts.found += 1;
                }
                (want, got) => panic!("lookup {parts:?}: model {want:?}, core {got:?}"),
            }
        }
        Some((ino, kind))
    }

    /// What the model says `parts` (from the root) is.
    fn expect(&self, parts: &[String]) -> Option<Want> {
        let dir = |entry_ttl| {
            Some(Want {
                kind: Kind::Dir,
                size: None,
                entry_ttl,
            })
        };
        match parts {
            [org] => self
                .model
                .keys()
                .any(|r| r.split('/').next() == Some(org))
                .then_some(())?,
            [org, name] => self
                .model
                .contains_key(&format!("{org}/{name}"))
                .then_some(())?,
            _ => {}
        }
        if parts.len() < 3 {
            return dir(MUTABLE_TTL);
        }
        let m = &self.model[&format!("{}/{}", parts[0], parts[1])];
        let commit = resolve(m, &parts[2])?;
        if parts.len() == 3 {
            return dir(MUTABLE_TTL);
        }
        // Names directly under a ref's view expire soon (the ref moves, the commit may be
        // replaced); under a commit's view they stay (a replaced commit's stale names
        // answer ESTALE, and the kernel looks them up again).
        let by_ref = m.refs.contains_key(&parts[2].replace("%2F", "/"));
        let entry_ttl = if parts.len() == 4 && by_ref {
            MUTABLE_TTL
        } else {
            IMMUTABLE_TTL
        };
        let path = parts[3..].join("/");
        let size = model_path(&m.commits[&commit], &path)?;
        let kind = if size.is_some() {
            Kind::File
        } else {
            Kind::Dir
        };
        Some(Want {
            kind,
            size,
            entry_ttl,
        })
    }

    fn lookup_path(&mut self, parts: &Parts) {
        let names = self.names(parts);
        self.walk(&names);
    }
}

#[derive(Debug)]
struct Want {
    kind: Kind,
    size: Option<u64>,
    entry_ttl: Duration,
}

impl Case {
    /// Lists a directory and checks it against the model.
    fn list(&mut self, dir: &Parts, write: bool, from: Index) {
        let parts = self.names(dir);
        let Some((ino, kind)) = self.walk(&parts) else {
            return;
        };
        let got = self.core.listing(ino, 0);
        self.log.push(format!("list {parts:?}"));
        self.counts.listings += 1;
        let write = if write { libc::O_RDWR } else { libc::O_WRONLY };
        assert_eq!(self.core.opendir(ino, write), Err(FsError::ReadOnly));
        if kind == Kind::File {
            assert_eq!(got, Err(FsError::NotDir), "listing of file {parts:?}");
            assert_eq!(self.core.opendir(ino, libc::O_RDONLY), Err(FsError::NotDir));
            return;
        }
        assert_eq!(
            self.core.opendir(ino, libc::O_RDONLY),
            Ok(()),
            "opendir {parts:?}"
        );
        let got = got.unwrap_or_else(|e| panic!("listing {parts:?}: {e:?}"));
        assert_eq!(got[0].name, ".");
        assert_eq!(got[1].name, "..");
        for (i, e) in got.iter().enumerate() {
            assert_eq!(e.next, i as u64 + 1);
        }
        let names: BTreeMap<String, bool> = got[2..]
            .iter()
            .map(|e| (e.name.clone(), e.kind == Kind::Dir))
            .collect();
        assert_eq!(
            names.len(),
            got.len() - 2,
            "names listed twice in {parts:?}"
        );
        assert_eq!(names, self.model_listing(&parts), "listing of {parts:?}");
        let from = from.index(got.len() + 1);
        assert_eq!(self.core.listing(ino, from as u64).unwrap(), got[from..]);
        // The names in a ref's view expire soon; in a commit's view they stay.
        let by_ref = |m: &RepoModel| m.refs.contains_key(&parts[2].replace("%2F", "/"));
        let entry_ttl = match parts.len() {
            0..=2 => MUTABLE_TTL,
            3 if by_ref(&self.model[&format!("{}/{}", parts[0], parts[1])]) => MUTABLE_TTL,
            _ => IMMUTABLE_TTL,
        };
        self.check_plus(ino, parts.len() == 2, entry_ttl, &got);
    }

    /// The listing with attributes: the same entries, each with its own attributes and the
    /// shorter of the two timeouts, or a stand-in that expires at once (the revisions of a
    /// repository, "." and "..").
    fn check_plus(
        &mut self,
        ino: u64,
        repo: bool,
        entry_ttl: Duration,
        listed: &[modelfs::fs::DirEntry],
    ) {
        let mut plus = Vec::new();
        let done = self.core.readdirplus(ino, 0, |e, a, ttl| {
            plus.push((e, a, ttl));
            false
        });
        assert_eq!(done, Ok(()));
        let entries: Vec<_> = plus.iter().map(|(e, _, _)| e.clone()).collect();
        assert_eq!(
            entries, listed,
            "readdirplus lists other entries than readdir"
        );
        for (e, a, ttl) in plus {
            assert_eq!((a.ino, a.kind), (e.ino, e.kind));
            if repo || e.name == "." || e.name == ".." {
                assert_eq!(ttl, Duration::ZERO, "stand-in {}", e.name);
                continue;
            }
            assert_eq!(Ok(a), self.core.getattr(e.ino), "attributes of {}", e.name);
            let attr_ttl = if a.immutable {
                IMMUTABLE_TTL
            } else {
                MUTABLE_TTL
            };
            assert_eq!(ttl, attr_ttl.min(entry_ttl), "timeout of {}", e.name);
        }
    }

    fn model_listing(&self, parts: &[String]) -> BTreeMap<String, bool> {
        let dirs = |names: Vec<String>| names.into_iter().map(|n| (n, true)).collect();
        match parts {
            [] => dirs(
                self.model
                    .keys()
                    .map(|r| r.split('/').next().unwrap().to_string())
                    .collect(),
            ),
            [org] => dirs(
                self.model
                    .keys()
                    .filter_map(|r| r.strip_prefix(&format!("{org}/")).map(String::from))
                    .collect(),
            ),
            [org, name] => {
                let m = &self.model[&format!("{org}/{name}")];
                let mut names: Vec<String> = m.refs.keys().map(|r| escape_ref(r)).collect();
                names.extend(m.commits.keys().map(|c| c.to_hex()));
                dirs(names)
            }
            _ => {
                let m = &self.model[&format!("{}/{}", parts[0], parts[1])];
                let commit = resolve(m, &parts[2]).unwrap();
                model_dir(&m.commits[&commit], &parts[3..].join("/")).unwrap()
            }
        }
    }
}

impl Case {
    /// Opens a path: a file (its handle kept with the bytes it must read), a directory
    /// (`EISDIR`), or a file for writing (`EROFS`).
    fn open(&mut self, spec: &OpenSpec) {
        let parts = match &spec.target {
            Target::Path(parts) => self.names(parts),
            // The file the node file cache keeps.
            Target::Big(rev) => {
                let rev = self.rev_name(REPOS[0], rev);
                ["org", "alpha", &rev, "weights", "big.bin"]
                    .map(String::from)
                    .to_vec()
            }
        };
        let Some((ino, kind)) = self.walk(&parts) else {
            return;
        };
        if let Some(w) = spec.write {
            let flags = [libc::O_WRONLY, libc::O_RDWR, libc::O_RDONLY | libc::O_TRUNC][w as usize];
            let got = self.core.open(ino, flags, |_| Ok(()));
            assert_eq!(
                got.err().map(|e| e.errno()),
                Some(libc::EROFS),
                "open {parts:?} for writing"
            );
            return;
        }
        let bytes = self.model_bytes(&parts);
        let refuse = self.refusing;
        let mut registered = false;
        let got = self.core.open(ino, libc::O_RDONLY, |file| {
            registered = true;
            check_backing(file, bytes.as_deref());
            if refuse {
                return Err(std::io::Error::other("refused"));
            }
            Ok(())
        });
        self.refused |= registered && refuse;
        self.log.push(format!(
            "open {parts:?} -> {:?}",
            got.as_ref().map(|o| (o.fh, how(&o.how)))
        ));
        if kind == Kind::Dir {
            assert_eq!(
                got.err(),
                Some(FsError::IsDir),
                "open of directory {parts:?}"
            );
            return;
        }
        let opened = got.unwrap_or_else(|e| panic!("open {parts:?}: {e:?}"));
        self.counts.opens += 1;
        let repo = format!("{}/{}", parts[0], parts[1]);
        let commit = resolve(&self.model[&repo], &parts[2]).unwrap();
        let bytes = Arc::new(bytes.unwrap());
        let how = how(&opened.how);
        self.check_mode(ino, how, &bytes, &parts);
        self.open.push(OpenFile {
            ino,
            fh: opened.fh,
            repo,
            commit,
            path: parts[3..].join("/"),
            bytes,
            how,
        });
    }

    /// The bytes of the file `parts` names in the model (None: not a file).
    fn model_bytes(&self, parts: &[String]) -> Option<Vec<u8>> {
        let m = self
            .model
            .get(&format!("{}/{}", parts.first()?, parts.get(1)?))?;
        let commit = resolve(m, parts.get(2)?)?;
        m.commits[&commit].get(&parts.get(3..)?.join("/")).cloned()
    }

    /// The mode an open got, against the other handles of the inode, the file cache and
    /// the stand-in kernel.
    fn check_mode(&mut self, ino: u64, how: char, bytes: &[u8], parts: &[String]) {
        if let Some(other) = self.open.iter().find(|f| f.ino == ino) {
            assert_eq!(
                how, other.how,
                "open {parts:?}: another mode than its open handles"
            );
            return;
        }
        let fits = bytes.len() as u64 >= read::file_cache::MIN_FILE_BYTES;
        match how {
            'P' => assert!(fits && !self.refused, "open {parts:?}: passthrough"),
            'W' => assert!(fits && self.refused, "open {parts:?}: whole file"),
            _ => assert!(
                !self.filled.contains(bytes),
                "open {parts:?}: streamed, yet the file cache has it"
            ),
        }
        self.counts.modes[match how {
            'P' => 0,
            'W' => 1,
            _ => 2,
        }] += 1;
    }

    /// Fills the node file cache with the big file of a revision, now.
    fn fill(&mut self, commit: Index) {
        let repo = REPOS[0];
        let m = &self.model[repo];
        let commits: Vec<CommitId> = m.commits.keys().copied().collect();
        let c = *commit.get(&commits);
        let Some(bytes) = m.commits[&c].get(BIG).cloned() else {
            return;
        };
        let manifest = self.store.manifest(&Self::repo_id(repo), &c).unwrap();
        let f = manifest.file(BIG).unwrap();
        self.files.fill(&self.store, &manifest, f).unwrap();
        self.log.push(format!("fill {repo}@{} {BIG}", c.to_hex()));
        self.filled.insert(bytes);
    }

    /// Reads a range of an open file (with none open, opens `or_open`).
    fn read(&mut self, handle: Index, at: &At, size: u32, or_open: &OpenSpec) {
        if self.open.is_empty() {
            return self.open(or_open);
        }
        let i = handle.index(self.open.len());
        let len = self.open[i].bytes.len() as u64;
        let offset = match at {
            At::Start => 0,
            At::PastEnd(n) => len + *n as u64,
            At::Within(o) => o.index(len as usize + 1) as u64,
        };
        let f = &self.open[i];
        let got = self.core.read(f.ino, f.fh, offset, size);
        self.log.push(format!(
            "read fh {} [{offset}, +{size}) of {len} -> {:?}",
            f.fh,
            got.as_ref().map(|d| d.len())
        ));
        let from = (offset.min(len)) as usize;
        let to = (offset.saturating_add(size as u64).min(len)) as usize;
        // Removed, or ingested again with other bytes at this path.
        let removed = self.model[&f.repo]
            .commits
            .get(&f.commit)
            .and_then(|files| files.get(&f.path))
            .is_none_or(|b| **b != *f.bytes);
        self.counts.reads += 1;
        self.counts.reads_of_removed += removed as u64;
        match got {
            Err(FsError::Io) if removed => self.counts.eio_of_removed += 1,
            Ok(data) => {
                assert!(
                    data == f.bytes[from..to],
                    "read fh {} [{offset}, +{size}): wrong bytes",
                    f.fh
                );
                self.counts.read_bytes += data.len() as u64;
            }
            Err(e) => panic!("read fh {} [{offset}, +{size}): {e:?}", f.fh),
        }
    }

    /// Releases an open handle; it then reads `EBADF`.
    fn release(&mut self, handle: Index) {
        if !self.open.is_empty() {
            self.release_at(handle.index(self.open.len()));
        }
    }

    fn release_at(&mut self, i: usize) {
        let f = self.open.swap_remove(i);
        self.log.push(format!("release fh {}", f.fh));
        self.core.release(f.ino, f.fh);
        assert_eq!(self.core.read(f.ino, f.fh, 0, 10), Err(FsError::BadHandle));
        assert_eq!(self.core.open_handles(), self.open.len());
    }

    /// A file inode seen before keeps its attributes (even once its revision is removed).
    fn getattr_seen(&mut self, which: Index) {
        let seen: Vec<(u64, u64)> = self.seen.iter().map(|(i, s)| (*i, *s)).collect();
        if seen.is_empty() {
            return;
        }
        let (ino, size) = *which.get(&seen);
        let a = self
            .core
            .getattr(ino)
            .unwrap_or_else(|e| panic!("getattr {ino}: {e:?}"));
        assert_eq!((a.kind, a.size, a.immutable), (Kind::File, size, true));
        assert_eq!(self.core.getattr(u64::MAX), Err(FsError::NotFound));
    }
}

impl Case {
    /// Sets a ref to a commit of its repository, or deletes it.
    fn move_ref(&mut self, repo: u8, name: u8, delete: bool, commit: Index) {
        let repo = REPOS[repo as usize].to_string();
        let name = REF_NAMES[name as usize].to_string();
        let id = Self::repo_id(&repo);
        let m = self.model.get_mut(&repo).unwrap();
        if delete {
            if m.refs.remove(&name).is_some() {
                self.store.delete_ref(&id, &name).unwrap();
            }
            self.log.push(format!("delete ref {repo} {name}"));
            return;
        }
        let commits: Vec<CommitId> = m.commits.keys().copied().collect();
        let c = *commit.get(&commits);
        self.store.set_ref(&id, &name, &c).unwrap();
        m.refs.insert(name.clone(), c);
        self.log
            .push(format!("set ref {repo} {name} -> {}", c.to_hex()));
    }

    /// Removes a revision (and the refs to it), keeping one per repository.
    fn remove_revision(&mut self, repo: u8, open_one: bool, commit: Index) {
        let repo = REPOS[repo as usize].to_string();
        let m = self.model.get_mut(&repo).unwrap();
        if m.commits.len() < 2 {
            return;
        }
        let mut commits: Vec<CommitId> = m.commits.keys().copied().collect();
        let open: Vec<CommitId> = self
            .open
            .iter()
            .filter(|f| f.repo == repo)
            .map(|f| f.commit)
            .collect();
        if open_one && commits.iter().any(|c| open.contains(c)) {
            // One that a handle has open: its reads are then checked too.
            commits.retain(|c| open.contains(c));
        }
        let c = *commit.get(&commits);
        self.store
            .remove_commit(&Self::repo_id(&repo), &c, true)
            .unwrap();
        m.commits.remove(&c);
        m.refs.retain(|_, r| *r != c);
        m.removed.insert(c);
        self.log.push(format!("remove {repo}@{}", c.to_hex()));
    }

    /// Removes a revision and ingests other files as the same commit (the way out of an
    /// import conflict), `main` at it. A file of it looked up before keeps its inode if its
    /// bytes stayed; else that inode keeps its attributes and an open of it is `ESTALE`.
    fn replace_revision(&mut self, repo: u8, commit: Index, path: Index, n: u32, seed: u64) {
        let repo = REPOS[repo as usize].to_string();
        let commits: Vec<CommitId> = self.model[&repo].commits.keys().copied().collect();
        let c = *commit.get(&commits);
        let old = self.model[&repo].commits[&c].clone();
        let paths: Vec<String> = old.keys().cloned().collect();
        let path = path.get(&paths).clone();
        let mut parts: Vec<String> = repo.split('/').map(String::from).collect();
        parts.push(c.to_hex());
        parts.extend(path.split('/').map(String::from));
        let before = self.walk(&parts).map(|(ino, _)| ino);
        let big = repo == REPOS[0];
        let mut rng = StdRng::seed_from_u64(seed);
        let files = Arc::new(revision_files(&mut rng, Some(&old), n as usize, big));
        let id = Self::repo_id(&repo);
        self.store.remove_commit(&id, &c, true).unwrap();
        ingest_files(&self.store, &self.index, &repo, c, &files);
        self.store.set_ref(&id, "main", &c).unwrap();
        let m = self.model.get_mut(&repo).unwrap();
        m.refs.retain(|_, r| *r != c);
        m.refs.insert("main".into(), c);
        m.commits.insert(c, files.clone());
        self.log
            .push(format!("replace {repo}@{} as main", c.to_hex()));
        let Some(before) = before else { return };
        let after = self.walk(&parts).map(|(ino, _)| ino);
        if files.get(&path) == old.get(&path) {
            assert_eq!(after, Some(before), "{path}: same bytes, another inode");
            return;
        }
        assert_ne!(after, Some(before), "{path}: other bytes, the same inode");
        let size = self.core.getattr(before).map(|a| a.size);
        assert_eq!(size, Ok(old[&path].len() as u64), "{path}: attributes kept");
        let got = self.core.open(before, libc::O_RDONLY, |_| Ok(()));
        assert_eq!(got.err(), Some(FsError::Stale), "open of the old {path}");
        self.counts.stale_opens += 1;
    }

    /// Ingests a new revision of a repository and points `main` at it.
    fn new_revision(&mut self, repo: u8, n: u32, seed: u64) {
        let repo = REPOS[repo as usize].to_string();
        let base = self.model[&repo].commits.values().next().cloned();
        let big = repo == REPOS[0];
        let mut rng = StdRng::seed_from_u64(seed);
        let files = Arc::new(revision_files(&mut rng, base.as_deref(), n as usize, big));
        let c = self.new_commit(&mut rng);
        ingest_files(&self.store, &self.index, &repo, c, &files);
        self.store
            .set_ref(&Self::repo_id(&repo), "main", &c)
            .unwrap();
        let m = self.model.get_mut(&repo).unwrap();
        m.commits.insert(c, files);
        m.refs.insert("main".into(), c);
        self.log
            .push(format!("ingest {repo}@{} as main", c.to_hex()));
    }

    /// Two gc runs: every pack with a dead byte rewritten, the condemned deleted at once.
    fn gc(&mut self) {
        let opts = GcOptions {
            grace: Duration::ZERO,
            rewrite_below: 1.0,
            ..Default::default()
        };
        for _ in 0..2 {
            let report = store::gc::run(&self.store, None, &opts, &|_| {}).unwrap();
            self.counts.packs_rewritten += report.packs_rewritten as u64;
        }
        self.counts.gc_runs += 1;
        self.log.push("gc x2".into());
    }
}

thread_local! {
    /// While set, a panic on this thread is recorded in [`PANICKED`] and not printed (a
    /// case's failure is reported once, shrunk, rather than at every try).
    static QUIET: Cell<bool> = const { Cell::new(false) };
    /// The last quiet panic: its message and where it happened.
    static PANICKED: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f`, catching a panic: Err(its message and place), printed by nobody.
fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let printing = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.get() {
                PANICKED.set(Some(info.to_string()));
            } else {
                printing(info);
            }
        }));
    });
    QUIET.set(true);
    let result = catch_unwind(AssertUnwindSafe(f));
    QUIET.set(false);
    result.map_err(|_| PANICKED.take().unwrap_or_else(|| "a panic".into()))
}

/// Runs one case: the starting revisions from `setup`, the operations in order, then every
/// handle left released. A failure is its panic and the last steps that led to it (each
/// as it resolved against the case).
fn run_case(setup: u64, ops: &[Op]) -> Result<Counts, String> {
    let mut case = Case::new(setup);
    quietly(|| {
        for op in ops {
            case.step(op);
        }
        // Every handle released: none left open.
        while !case.open.is_empty() {
            case.release_at(0);
        }
    })
    .map_err(|why| {
        let tail = case.log.len().saturating_sub(40);
        let steps: Vec<String> = case.log[tail..].iter().map(|l| format!("  {l}")).collect();
        format!("{why}\nlast steps:\n{}", steps.join("\n"))
    })?;
    Ok(case.counts)
}

#[test]
fn mount_core_matches_the_model() {
    let cases = std::env::var("PROPTEST_CASES")
        .map(|n| n.parse().expect("PROPTEST_CASES: a number"))
        .unwrap_or(CASES);
    let mut runner = TestRunner::new(Config {
        cases,
        // fuse/tests/model.proptest-regressions: replayed first on every run, and where a
        // new failure's seed is added.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        source_file: Some(file!()),
        max_shrink_iters: 10_000,
        max_shrink_time: 600_000,
        rng_seed: match Config::default().rng_seed {
            RngSeed::Random => RngSeed::Fixed(RNG_SEED),
            chosen => chosen,
        },
        ..Config::default()
    });
    let all = RefCell::new(Counts::default());
    let steps = Steps {
        element: op(),
        len: STEPS,
    };
    let result = runner.run(&(any::<u64>(), steps), |(setup, ops)| {
        let counts = run_case(setup, &ops).map_err(TestCaseError::fail)?;
        all.borrow_mut().add(&counts);
        Ok(())
    });
    if let Err(e) = result {
        panic!("model: {e}");
    }
    let all = all.into_inner();
    eprintln!("model: {all:?}");
    // The run exercised what the properties are about.
    assert!(all.found > 0 && all.not_found > 0 && all.listings > 0 && all.opens > 0);
    assert!(all.read_bytes > 0 && all.reads_of_removed > 0 && all.packs_rewritten > 0);
    assert!(all.stale_opens > 0, "no open of a replaced file");
    assert!(
        all.modes.iter().all(|&n| n > 0),
        "every open mode was taken"
    );
}

/// The tag of an open's mode.
fn how(h: &OpenHow<()>) -> char {
    match h {
        OpenHow::Passthrough(_) => 'P',
        OpenHow::Whole => 'W',
        OpenHow::Stream => 'S',
    }
}

/// The backing file the kernel is given holds exactly the file's bytes.
fn check_backing(file: &std::fs::File, bytes: Option<&[u8]>) {
    use std::os::unix::fs::FileExt;
    let bytes = bytes.expect("a backing file for something that is no file");
    let mut got = vec![0u8; bytes.len() + 1];
    let mut n = 0;
    loop {
        let r = file.read_at(&mut got[n..], n as u64).unwrap();
        n += r;
        if r == 0 || n == got.len() {
            break;
        }
    }
    assert!(got[..n] == *bytes, "the backing file holds other bytes");
}
