//! What the mount shows, as inodes: no kernel types here, so it can be tested directly.
//!
//! ```text
//! /                          Root       (full mode) organisations
//! /<org>                     Org        repositories
//! /<org>/<name>              Repo       every ref and every full commit sha (prefixes, any case, on lookup)
//! /<org>/<name>/<rev>        View       the top of one revision
//! /<org>/<name>/<rev>/a/b    Dir        a subdirectory of a revision
//! .../<file>                 File       a file of a revision
//! ```
//!
//! With `--repo ORG/NAME@REV` the root itself is a View of that commit.
//!
//! Inode numbers are handed out on first sight and never reused while mounted, so they are
//! stable for the life of the mount. A View is keyed by its ref, or by its commit whatever
//! the spelling it was reached by (full or a prefix, any case). A File inode is keyed by (repo, commit, path) and the
//! file's content (sha256, size, executable bit): the same file seen through a ref, a sha
//! and a prefix is one inode, a file opened through a ref keeps its commit when the ref
//! moves, and a commit removed and ingested again with other files (`rm --force`, then
//! `ingest`) shows its changed files as new inodes, so the kernel never serves its cached
//! pages or size of the old bytes under the new name. Directory inodes are keyed by the
//! view they are reached through (a directory never has two parents) and by a digest of
//! the revision's file list. An inode of a replaced or removed revision keeps its
//! attributes, but is no longer current ([`Namespace::current`]): the core answers `ESTALE`
//! to opens and lookups through it, and the kernel looks the path up again.
//!
//! A View of a ref resolves the ref again when the cached refs are older than the refresh
//! ([`REFRESH`]); a revision's tree older than the refresh is checked against the tag of
//! its manifest object and read again when that changed (a gc that only moves chunks gives
//! the same content, so the same inodes). The core (`crate::fs`) gives the children of
//! views short entry timeouts so the kernel asks again. At most [`TREES`] trees are kept
//! (an open file holds its own), the refs of at most [`REF_LISTS`] repositories, and at
//! most [`ENTERED`] revisions are remembered as entered; each is a `quick_cache`, and what
//! it evicts is read again. The inode table is not a cache: it keeps every node seen for
//! the life of the mount (see [`Namespace::ino`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bincode::{Decode, Encode};
use format::{layout, CommitId, RepoId, Sha256};
use parking_lot::Mutex;
use quick_cache::sync::{Cache, EntryAction, EntryResult};
use read::tree::{Child, Tree};
use repo::manifest::{FileEntry, Manifest};
use repo::{Store, StoreError};

use crate::takeover::{State, StateError};

/// How long listings of repositories and refs, and revisions' trees, are trusted before
/// being checked again.
pub const REFRESH: Duration = Duration::from_secs(2);

/// How many revisions' trees are cached; beyond it the least useful are dropped.
pub const TREES: usize = 64;

/// How many repositories' refs are cached (a miss lists them again).
pub const REF_LISTS: usize = 1024;

/// How many revisions are remembered as entered, for the first-entry hook: one evicted
/// and entered again is warmed again (`read::warm`, a few small reads).
pub const ENTERED: usize = 4096;

/// The root inode.
pub const ROOT: u64 = 1;

/// What a File inode stands for besides its name: the file's bytes and mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub struct Content {
    pub sha256: Sha256,
    pub size: u64,
    pub executable: bool,
}

impl Content {
    /// The content of a manifest's file entry.
    pub fn of(f: &FileEntry) -> Content {
        Content {
            sha256: f.sha256,
            size: f.size,
            executable: f.executable,
        }
    }
}

/// What an inode is (bincode-encoded in the takeover journal: docs/format/takeover-state.md).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub enum Node {
    /// The top of a full mount.
    Root,
    /// An organisation directory.
    Org(String),
    /// A repository directory.
    Repo(RepoId),
    /// The top of a revision, reached through `name` (a ref, a sha, or a sha prefix).
    View {
        repo: RepoId,
        name: String,
        target: Target,
    },
    /// A subdirectory of a revision, reached through view inode `view`, in the revision's
    /// content of `digest` ([`digest`]).
    Dir {
        view: u64,
        repo: RepoId,
        commit: CommitId,
        path: String,
        digest: u64,
    },
    /// A file of a revision, with its content.
    File {
        repo: RepoId,
        commit: CommitId,
        path: String,
        content: Content,
    },
}

/// What a View shows.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Encode, Decode)]
pub enum Target {
    /// Always this commit.
    Commit(CommitId),
    /// Whatever the ref points at now.
    Ref(String),
}

/// The kind of an inode, for the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// Attributes the adapter turns into a `stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub executable: bool,
    /// Seconds since the epoch.
    pub mtime: u64,
    /// True when the content under this inode never changes (long kernel timeouts).
    pub immutable: bool,
}

#[derive(Default)]
struct Inodes {
    by_node: HashMap<Node, u64>,
    /// Index = ino - 1: the node, and for a Dir or File the mtime it was first seen with.
    nodes: Vec<(Node, u64)>,
}

/// A repository's refs, by name, with the commits they point at.
type RefList = Vec<(String, CommitId)>;

#[derive(Clone)]
struct Timed<T> {
    at: Instant,
    value: T,
}

/// A revision's tree as read, and what tells whether it is still the store's.
#[derive(Clone)]
struct Cached {
    tree: Arc<Tree>,
    /// [`digest`] of the tree's manifest.
    digest: u64,
    /// The manifest object's tag when (or just before) it was read.
    tag: String,
    /// When the tag was last compared with the store's.
    checked: Instant,
}

/// The cached trees: at most [`TREES`], the least useful dropped beyond it.
struct Trees {
    cache: Cache<(RepoId, CommitId), Cached>,
}

/// A revision's tree and the [`digest`] of its content.
type Revision = (Arc<Tree>, u64);

impl Trees {
    fn new() -> Trees {
        Trees {
            cache: Cache::new(TREES),
        }
    }

    /// The entry of `key`: without `tag`, if it was checked within `refresh`; with it, if
    /// it was read under that tag (it is then marked checked now). Looked at and marked
    /// in one step, so a tree put meanwhile under another tag is never marked.
    fn get(
        &self,
        key: &(RepoId, CommitId),
        refresh: Duration,
        tag: Option<&str>,
    ) -> Option<Revision> {
        let found = self.cache.entry(key, None, |_, c| {
            match tag {
                Some(t) if !t.is_empty() && t == c.tag => c.checked = Instant::now(),
                Some(_) => return EntryAction::Retain(None),
                None if c.checked.elapsed() >= refresh => return EntryAction::Retain(None),
                None => {}
            }
            EntryAction::Retain(Some((c.tree.clone(), c.digest)))
        });
        match found {
            EntryResult::Retained(hit) => hit,
            // Not cached: the guard offered for an insert is dropped unused.
            _ => None,
        }
    }

    /// Keeps `tree` (read under manifest tag `tag`), dropping the least useful beyond
    /// [`TREES`].
    fn put(&self, key: (RepoId, CommitId), tree: Arc<Tree>, tag: String) -> Revision {
        let digest = digest(&tree.manifest);
        let cached = Cached {
            tree: tree.clone(),
            digest,
            tag,
            checked: Instant::now(),
        };
        self.cache.insert(key, cached);
        (tree, digest)
    }

    /// Forgets the tree of `key` (its revision is gone).
    fn remove(&self, key: &(RepoId, CommitId)) {
        self.cache.remove(key);
    }
}

/// A digest of a revision's content: every file's path, size, sha256 and executable bit
/// (not where its chunks are, which gc may change). Specified (the first 8 bytes, little
/// endian, of BLAKE3 over each file's path length (u64 LE), path, size (u64 LE), sha256
/// and executable byte, in manifest order), since it is kept in the takeover journal and
/// a server of another build must compute the same.
pub fn digest(m: &Manifest) -> u64 {
    let mut h = blake3::Hasher::new();
    for f in &m.files {
        h.update(&(f.path.len() as u64).to_le_bytes());
        h.update(f.path.as_bytes());
        h.update(&f.size.to_le_bytes());
        h.update(f.sha256.as_bytes());
        h.update(&[u8::from(f.executable)]);
    }
    let out = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// The directory a View or Dir shows now.
struct Shown {
    view: u64,
    repo: RepoId,
    commit: CommitId,
    tree: Arc<Tree>,
    digest: u64,
    path: String,
}

/// The mounted namespace.
pub struct Namespace {
    store: Store,
    /// Every node seen, for the life of the mount (not a cache: see [`Namespace::ino`]).
    inodes: Mutex<Inodes>,
    trees: Trees,
    repos: Mutex<Option<Timed<Vec<RepoId>>>>,
    /// Each repository's refs as last listed, at most [`REF_LISTS`].
    refs: Cache<RepoId, Timed<RefList>>,
    mounted_at: u64,
    /// How long listings of repositories and refs, and trees, are trusted ([`REFRESH`] by
    /// default).
    refresh: Duration,
    on_first_entry: Option<EntryHook>,
    /// Where each node handed out is recorded before the kernel hears of it, for the
    /// server that takes the connection over (`crate::takeover`).
    journal: Option<Arc<State>>,
    /// Revisions a name has been looked up in or listed, for `on_first_entry`: at most
    /// [`ENTERED`].
    entered: Cache<(RepoId, CommitId), ()>,
}

/// Called with a revision's tree the first time a name inside it is looked up or one of
/// its directories listed (not when only its attributes are asked for: `ls -l` of a
/// repository asks for every revision's).
pub type EntryHook = Box<dyn Fn(&Tree) + Send + Sync>;

type Result<T> = std::result::Result<T, StoreError>;

impl Namespace {
    /// A full mount: every repository.
    pub fn full(store: Store) -> Namespace {
        Self::with_root(store, Node::Root)
    }

    /// One revision at the root.
    pub fn single(store: Store, repo: RepoId, commit: CommitId) -> Namespace {
        let name = commit.to_hex();
        Self::with_root(
            store,
            Node::View {
                repo,
                name,
                target: Target::Commit(commit),
            },
        )
    }

    fn with_root(store: Store, root: Node) -> Namespace {
        let mut inodes = Inodes::default();
        inodes.by_node.insert(root.clone(), ROOT);
        inodes.nodes.push((root, 0));
        Namespace {
            store,
            inodes: Mutex::new(inodes),
            trees: Trees::new(),
            repos: Mutex::new(None),
            refs: Cache::new(REF_LISTS),
            mounted_at: repo::manifest::now_secs(),
            refresh: REFRESH,
            on_first_entry: None,
            journal: None,
            entered: Cache::new(ENTERED),
        }
    }

    /// Calls `hook` with a revision's tree the first time something inside it is looked
    /// up or listed: the adapter warms the files a loader reads first (`read::warm`). The
    /// hook must not block.
    pub fn on_first_entry(mut self, hook: EntryHook) -> Namespace {
        self.on_first_entry = Some(hook);
        self
    }

    /// Records every node handed out in `state`'s journal, and takes the mount time from
    /// it; with [`Namespace::restore`], a server that takes the connection over answers
    /// the kernel's inode numbers as its predecessor did.
    pub fn with_journal(mut self, state: Arc<State>) -> Namespace {
        self.mounted_at = state.header().mounted_at;
        self.journal = Some(state);
        self
    }

    /// Hands out the inode numbers of `state`'s journal again, in order (inode 2 is the
    /// first record: 1 is the root, which every server makes the same).
    pub fn restore(&self, state: &State) -> std::result::Result<usize, StateError> {
        let records = state.records()?;
        let mut inodes = self.inodes.lock();
        for (i, rec) in records.iter().enumerate() {
            let ((node, mtime), _): ((Node, u64), usize) =
                bincode::decode_from_slice(rec, bincode::config::standard())
                    .map_err(|e| StateError::Damaged(format!("journal record {i}: {e}")))?;
            inodes.nodes.push((node.clone(), mtime));
            let ino = inodes.nodes.len() as u64;
            inodes.by_node.entry(node).or_insert(ino);
        }
        Ok(records.len())
    }

    /// Trusts listings of repositories and refs, and trees, for `refresh` instead of
    /// [`REFRESH`] (zero: every lookup and listing reads them again, and checks the tree's
    /// manifest tag; the model tests use it).
    pub fn with_refresh(mut self, refresh: Duration) -> Namespace {
        self.refresh = refresh;
        self
    }

    /// The tree of a revision being entered (a lookup or listing inside it), with its
    /// digest; `None` when the revision is gone.
    fn enter(&self, repo: &RepoId, commit: &CommitId) -> Result<Option<Revision>> {
        let Some(rev) = self.revision(repo, commit)? else {
            return Ok(None);
        };
        if let Some(hook) = &self.on_first_entry {
            if self.first_entry((repo.clone(), *commit)) {
                hook(&rev.0);
            }
        }
        Ok(Some(rev))
    }

    /// Marks a revision entered; true the first time (since it was last evicted). Looked
    /// at and marked in one step: of concurrent lookups, one is the first.
    fn first_entry(&self, key: (RepoId, CommitId)) -> bool {
        match self
            .entered
            .entry(&key, None, |_, _| EntryAction::Retain(()))
        {
            EntryResult::Vacant(guard) => {
                let _ = guard.insert(());
                true
            }
            _ => false,
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The node of an inode.
    pub fn node(&self, ino: u64) -> Option<Node> {
        self.node_seen(ino).map(|(n, _)| n)
    }

    /// The node of an inode, with the mtime of a Dir or File when first seen.
    fn node_seen(&self, ino: u64) -> Option<(Node, u64)> {
        let inodes = self.inodes.lock();
        inodes.nodes.get((ino as usize).checked_sub(1)?).cloned()
    }

    /// The inode of `node`, handed out now if it has none (with `mtime`, for a Dir or File).
    ///
    /// The table is not a cache and grows with every node seen, for the life of the mount:
    /// an inode number stays the node's as long as the kernel may hold it, and this file
    /// system does not count the kernel's lookups (`forget`), so it cannot tell when that
    /// ends. A node costs its path and about 100 bytes.
    fn ino(&self, node: Node, mtime: u64) -> u64 {
        self.inos(vec![(node, mtime)])[0]
    }

    /// The inodes of `nodes` (each with its mtime, all distinct: a listing's entries have
    /// distinct names), in order, as [`Self::ino`] gives them; the new ones are journaled
    /// with one write (issue 40). A node given twice would get two numbers, both valid.
    fn inos(&self, nodes: Vec<(Node, u64)>) -> Vec<u64> {
        let mut inodes = self.inodes.lock();
        let mut out = Vec::with_capacity(nodes.len());
        let mut new: Vec<(Node, u64)> = Vec::new();
        for (node, mtime) in nodes {
            if let Some(&i) = inodes.by_node.get(&node) {
                out.push(i);
                continue;
            }
            out.push((inodes.nodes.len() + new.len() + 1) as u64);
            new.push((node, mtime));
        }
        if let (Some(state), false) = (&self.journal, new.is_empty()) {
            // Before the kernel hears of the inodes: a successor must know every one it holds.
            let recs: std::result::Result<Vec<Vec<u8>>, _> = new
                .iter()
                .map(|(n, m)| bincode::encode_to_vec((n, *m), bincode::config::standard()))
                .collect();
            if let Err(e) = recs
                .map_err(std::io::Error::other)
                .and_then(|r| state.append_all(&r))
            {
                tracing::error!(
                    "takeover journal: {e}: a server taking over will not know inodes {} to {}",
                    inodes.nodes.len() + 1,
                    inodes.nodes.len() + new.len()
                );
            }
        }
        for (node, mtime) in new {
            inodes.nodes.push((node.clone(), mtime));
            let i = inodes.nodes.len() as u64;
            inodes.by_node.insert(node, i);
        }
        out
    }

    fn repos(&self) -> Result<Vec<RepoId>> {
        let mut slot = self.repos.lock();
        if let Some(t) = slot.as_ref() {
            if t.at.elapsed() < self.refresh {
                return Ok(t.value.clone());
            }
        }
        let value = self.store.repos()?;
        *slot = Some(Timed {
            at: Instant::now(),
            value: value.clone(),
        });
        Ok(value)
    }

    fn refs(&self, repo: &RepoId) -> Result<RefList> {
        if let Some(t) = self.refs.get(repo) {
            if t.at.elapsed() < self.refresh {
                return Ok(t.value);
            }
        }
        let value: RefList = self.store.refs(repo)?.into_iter().collect();
        self.refs.insert(
            repo.clone(),
            Timed {
                at: Instant::now(),
                value: value.clone(),
            },
        );
        Ok(value)
    }

    /// The commit a view shows now.
    pub fn view_commit(&self, repo: &RepoId, target: &Target) -> Result<Option<CommitId>> {
        match target {
            Target::Commit(c) => Ok(Some(*c)),
            Target::Ref(name) => Ok(self
                .refs(repo)?
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, c)| c)),
        }
    }

    /// The tree of a revision as the store has it now (`None`: the revision is gone).
    pub fn tree(&self, repo: &RepoId, commit: &CommitId) -> Result<Option<Arc<Tree>>> {
        Ok(self.revision(repo, commit)?.map(|(t, _)| t))
    }

    /// The tree of a revision and its digest: the cached one while checked within the
    /// refresh; else the tag of the manifest object is asked for, and the manifest read
    /// again when the tag is not the cached one's (the commit was removed and ingested
    /// again, or the manifest rewritten). `None` when the manifest is gone. No lock is held
    /// while the store is asked.
    fn revision(&self, repo: &RepoId, commit: &CommitId) -> Result<Option<Revision>> {
        let key = (repo.clone(), *commit);
        if let Some(hit) = self.trees.get(&key, self.refresh, None) {
            return Ok(Some(hit));
        }
        // The tag before the read: a manifest replaced in between is read again next time.
        let stat = self
            .store
            .backend()
            .stat(&layout::manifest_key(repo, commit));
        let Some(meta) = stat.map_err(StoreError::from)? else {
            self.trees.remove(&key);
            return Ok(None);
        };
        if let Some(hit) = self.trees.get(&key, self.refresh, Some(&meta.tag)) {
            return Ok(Some(hit));
        }
        let m = match self.store.manifest(repo, commit) {
            Ok(m) => m,
            Err(StoreError::UnknownRevision { .. }) => {
                self.trees.remove(&key);
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let tree = Arc::new(Tree::new(Arc::new(m)));
        Ok(Some(self.trees.put(key, tree, meta.tag)))
    }

    /// For a View or Dir: the directory it shows now, entering its revision; `None` when
    /// it shows none (a ref deleted, a revision gone, a Dir of content replaced since).
    fn shown(&self, ino: u64, node: &Node) -> Result<Option<Shown>> {
        let (view, repo, commit, path, want) = match node {
            Node::View { repo, target, .. } => match self.view_commit(repo, target)? {
                Some(c) => (ino, repo, c, String::new(), None),
                None => return Ok(None),
            },
            Node::Dir {
                view,
                repo,
                commit,
                path,
                digest,
            } => (*view, repo, *commit, path.clone(), Some(*digest)),
            _ => return Ok(None),
        };
        let Some((tree, digest)) = self.enter(repo, &commit)? else {
            return Ok(None);
        };
        if want.is_some_and(|d| d != digest) {
            return Ok(None);
        }
        Ok(Some(Shown {
            view,
            repo: repo.clone(),
            commit,
            tree,
            digest,
            path,
        }))
    }

    /// The inode of entry `name` (`child`) of directory `at`.
    fn child_ino(&self, at: &Shown, name: &str, child: Child) -> (u64, Kind) {
        let (node, kind) = Self::child_node(at, name, child);
        (self.ino(node, at.tree.manifest.ingested_at), kind)
    }

    /// The node of entry `name` (a `child`) of the directory `at` shows.
    fn child_node(at: &Shown, name: &str, child: Child) -> (Node, Kind) {
        let path = Tree::join(&at.path, name);
        let (repo, commit) = (at.repo.clone(), at.commit);
        match child {
            Child::Dir => {
                let node = Node::Dir {
                    view: at.view,
                    repo,
                    commit,
                    path,
                    digest: at.digest,
                };
                (node, Kind::Dir)
            }
            Child::File(i) => {
                let content = Content::of(&at.tree.manifest.files[i]);
                let node = Node::File {
                    repo,
                    commit,
                    path,
                    content,
                };
                (node, Kind::File)
            }
        }
    }

    /// Looks `name` up in directory `parent`; `None` when it does not exist (or `parent`
    /// is no longer current: [`Namespace::current`]).
    pub fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>> {
        let Some(node) = self.node(parent) else {
            return Ok(None);
        };
        match &node {
            Node::Root => {
                let found = self.repos()?.iter().any(|r| r.org() == name);
                Ok(found.then(|| self.ino(Node::Org(name.to_string()), 0)))
            }
            Node::Org(org) => {
                let found = self
                    .repos()?
                    .into_iter()
                    .find(|r| r.org() == org && r.name() == name);
                Ok(found.map(|r| self.ino(Node::Repo(r), 0)))
            }
            Node::Repo(repo) => self.lookup_view(repo, name),
            Node::View { .. } | Node::Dir { .. } => {
                let Some(at) = self.shown(parent, &node)? else {
                    return Ok(None);
                };
                let child = at.tree.lookup(&at.path, name);
                Ok(child.map(|c| self.child_ino(&at, name, c).0))
            }
            Node::File { .. } => Ok(None),
        }
    }

    /// The View of revision `name` (a ref, else a sha or a prefix of one) of `repo`. A
    /// commit has one View whatever its spelling (full or a prefix, any case): the one its
    /// listing names by its full sha, so the inode table grows with the commits looked at,
    /// never with the ways of spelling them (the kernel moves the directory's one dentry to
    /// the name last looked up; all have the same parent).
    fn lookup_view(&self, repo: &RepoId, name: &str) -> Result<Option<u64>> {
        let view = |name: String, target| {
            let node = Node::View {
                repo: repo.clone(),
                name,
                target,
            };
            Some(self.ino(node, 0))
        };
        let as_ref = unescape_ref(name);
        if self.refs(repo)?.iter().any(|(n, _)| n == &as_ref) {
            return Ok(view(escape_ref(&as_ref), Target::Ref(as_ref)));
        }
        match self.store.resolve(repo, name) {
            Ok(c) => Ok(view(c.to_hex(), Target::Commit(c))),
            Err(StoreError::UnknownRevision { .. } | StoreError::AmbiguousRevision { .. }) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Entries of directory `ino` (name, ino, kind); `None` if it is not a directory (or
    /// no longer current: [`Namespace::current`]).
    pub fn list(&self, ino: u64) -> Result<Option<Vec<(String, u64, Kind)>>> {
        let Some(node) = self.node(ino) else {
            return Ok(None);
        };
        let out = match &node {
            Node::Root => {
                let mut orgs: Vec<String> =
                    self.repos()?.iter().map(|r| r.org().to_string()).collect();
                orgs.dedup();
                orgs.into_iter()
                    .map(|o| (o.clone(), self.ino(Node::Org(o), 0), Kind::Dir))
                    .collect()
            }
            Node::Org(org) => self
                .repos()?
                .into_iter()
                .filter(|r| r.org() == org)
                .map(|r| (r.name().to_string(), self.ino(Node::Repo(r), 0), Kind::Dir))
                .collect(),
            Node::Repo(repo) => self.list_views(repo)?,
            Node::View { .. } | Node::Dir { .. } => {
                let Some(at) = self.shown(ino, &node)? else {
                    // A view whose ref or revision is gone is empty; a Dir not current.
                    return Ok(matches!(node, Node::View { .. }).then(Vec::new));
                };
                let Some(entries) = at.tree.list(&at.path) else {
                    return Ok(None);
                };
                // The entries' inodes in one go: new ones journaled with one write.
                let mtime = at.tree.manifest.ingested_at;
                let (nodes, kinds): (Vec<(Node, u64)>, Vec<Kind>) = entries
                    .iter()
                    .map(|(name, child)| {
                        let (node, kind) = Self::child_node(&at, name, *child);
                        ((node, mtime), kind)
                    })
                    .unzip();
                let inos = self.inos(nodes);
                entries
                    .iter()
                    .zip(inos.into_iter().zip(kinds))
                    .map(|((name, _), (i, kind))| (name.clone(), i, kind))
                    .collect()
            }
            Node::File { .. } => return Ok(None),
        };
        Ok(Some(out))
    }

    /// The revision shown at directory `ino` (a view or a subdirectory of a revision) and
    /// the manifest indices of the files directly in it; `None` for another inode or one no
    /// longer current.
    pub fn dir_files(&self, ino: u64) -> Result<Option<(Arc<Tree>, Vec<usize>)>> {
        let Some(node) = self.node(ino) else {
            return Ok(None);
        };
        if !matches!(node, Node::View { .. } | Node::Dir { .. }) {
            return Ok(None);
        }
        let Some(at) = self.shown(ino, &node)? else {
            return Ok(None);
        };
        let files = match at.tree.list(&at.path) {
            Some(entries) => entries
                .iter()
                .filter_map(|(_, c)| match c {
                    Child::File(i) => Some(*i),
                    Child::Dir => None,
                })
                .collect(),
            None => return Ok(None),
        };
        Ok(Some((at.tree, files)))
    }

    /// The views of a repository: every ref, then every commit.
    fn list_views(&self, repo: &RepoId) -> Result<Vec<(String, u64, Kind)>> {
        let mut out = Vec::new();
        for (name, _) in self.refs(repo)? {
            let shown = escape_ref(&name);
            let node = Node::View {
                repo: repo.clone(),
                name: shown.clone(),
                target: Target::Ref(name),
            };
            out.push((shown, self.ino(node, 0), Kind::Dir));
        }
        for c in self.store.commits(repo)? {
            let name = c.to_hex();
            let node = Node::View {
                repo: repo.clone(),
                name: name.clone(),
                target: Target::Commit(c),
            };
            out.push((name, self.ino(node, 0), Kind::Dir));
        }
        Ok(out)
    }

    /// Attributes of an inode. A Dir or File answers what it was first seen with, even
    /// once its revision is replaced or removed (its content never changes).
    pub fn attr(&self, ino: u64) -> Result<Option<Attr>> {
        let Some((node, seen)) = self.node_seen(ino) else {
            return Ok(None);
        };
        let dir = |mtime, immutable| Attr {
            ino,
            kind: Kind::Dir,
            size: 0,
            executable: true,
            mtime,
            immutable,
        };
        Ok(Some(match &node {
            Node::Root | Node::Org(_) | Node::Repo(_) => dir(self.mounted_at, false),
            Node::View { repo, target, .. } => {
                let tree = match self.view_commit(repo, target)? {
                    Some(c) => self.tree(repo, &c)?,
                    None => None,
                };
                let mtime = tree.map_or(self.mounted_at, |t| t.manifest.ingested_at);
                dir(mtime, false)
            }
            Node::Dir { .. } => dir(seen, true),
            Node::File { content, .. } => Attr {
                ino,
                kind: Kind::File,
                size: content.size,
                executable: content.executable,
                mtime: seen,
                immutable: true,
            },
        }))
    }

    /// Whether entries found in directory `ino` may change (a view, or above: a commit
    /// may be removed and ingested again with other files). A Dir's do not: a Dir of
    /// other content is another inode.
    pub fn children_may_change(&self, ino: u64) -> bool {
        // A commit's view keeps long timeouts: a replaced commit's stale names answer
        // ESTALE at open, and the kernel looks the path up again.
        !matches!(
            self.node(ino),
            Some(Node::Dir { .. })
                | Some(Node::View {
                    target: Target::Commit(_),
                    ..
                })
                | None
        )
    }

    /// Whether inode `ino` still shows what it showed when handed out: false for a Dir or
    /// File of a revision removed or replaced by other content since (the core answers
    /// `ESTALE` to opens and lookups through it, and the kernel looks the path up again).
    pub fn current(&self, ino: u64) -> Result<bool> {
        match self.node(ino) {
            Some(node @ Node::Dir { .. }) => Ok(self.shown(ino, &node)?.is_some()),
            Some(Node::File { .. }) => Ok(self.file(ino)?.is_some()),
            Some(_) => Ok(true),
            None => Ok(false),
        }
    }

    /// Reads the manifest of the revision of file `was` again
    /// ([`read::reload::same_file`]) and replaces the cached tree, if the file is still
    /// there with the same content: a mount that held a revision's chunk locations while
    /// gc repacked it finds the new ones here. `None` when the file changed or is gone.
    pub fn reload_file(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        was: &FileEntry,
    ) -> Result<Option<(Arc<Tree>, usize)>> {
        // The tag before the read: a manifest replaced in between is read again next time.
        let stat = self
            .store
            .backend()
            .stat(&layout::manifest_key(repo, commit));
        let Some(meta) = stat.map_err(StoreError::from)? else {
            return Ok(None);
        };
        let Some((m, i)) = read::reload::same_file(&self.store, repo, commit, was)? else {
            return Ok(None);
        };
        let (tree, _) = self
            .trees
            .put((repo.clone(), *commit), Arc::new(Tree::new(m)), meta.tag);
        Ok(Some((tree, i)))
    }

    /// Notes that a file of `tree`'s revision was opened (its last-use record, written
    /// from a background thread at most once per `repo::usage::REFRESH`), and holds the
    /// revision in use until the returned hold is dropped (the file closed): see
    /// `repo::usage`.
    pub fn record_use(&self, tree: &Tree) -> repo::usage::Hold {
        let m = &tree.manifest;
        repo::usage::record_in_background(
            &self.store,
            &m.repo,
            &m.commit,
            "mount",
            repo::usage::MOUNT_DELAY,
        );
        repo::usage::hold(&self.store, &m.repo, &m.commit, "mount")
    }

    /// The file behind a File inode: its revision's current tree and its index in the
    /// manifest; `None` for another inode, or a file whose revision is gone or no longer
    /// has this content at this path.
    pub fn file(&self, ino: u64) -> Result<Option<(Arc<Tree>, usize)>> {
        let Some(Node::File {
            repo,
            commit,
            path,
            content,
        }) = self.node(ino)
        else {
            return Ok(None);
        };
        let Some(tree) = self.tree(&repo, &commit)? else {
            return Ok(None);
        };
        let files = &tree.manifest.files;
        let idx = files
            .binary_search_by(|f| f.path.as_str().cmp(&path))
            .ok()
            .filter(|&i| Content::of(&files[i]) == content);
        Ok(idx.map(|i| (tree, i)))
    }
}

/// Ref names may contain `/` (`refs/pr/1`); in a directory name it is shown as `%2F`.
pub fn escape_ref(name: &str) -> String {
    name.replace('/', "%2F")
}

fn unescape_ref(name: &str) -> String {
    name.replace("%2F", "/")
}

/// The mount's way of reading a manifest again after a pack was gone
/// ([`Namespace::reload_file`]): the fresh tree replaces the cached one, for later opens.
pub struct Reloading(pub Arc<Namespace>);

impl read::source::Reload for Reloading {
    fn same_file(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        was: &FileEntry,
    ) -> repo::Result<Option<(Arc<Manifest>, usize)>> {
        Ok(self
            .0
            .reload_file(repo, commit, was)?
            .map(|(tree, i)| (tree.manifest.clone(), i)))
    }
}

#[cfg(test)]
mod tests;
