//! What the mount shows, as inodes: no kernel types here, so it can be tested directly.
//!
//! ```text
//! /                          Root       (full mode) organisations
//! /<org>                     Org        repositories
//! /<org>/<name>              Repo       every ref and every full commit sha (prefixes resolve on lookup)
//! /<org>/<name>/<rev>        View       the top of one revision
//! /<org>/<name>/<rev>/a/b    Dir        a subdirectory of a revision
//! .../<file>                 File       a file of a revision
//! ```
//!
//! With `--repo ORG/NAME@REV` the root itself is a View of that commit.
//!
//! Inode numbers are handed out on first sight and never reused while mounted, so they are
//! stable for the life of the mount. A File inode is keyed by (repo, commit, path): the same
//! file seen through a ref, a sha and a prefix is one inode, and a file opened through a
//! ref keeps its commit when the ref moves. Directory inodes are keyed by the view they are
//! reached through, so a directory never has two parents. A View of a ref resolves the ref
//! again when the cached refs are older than [`REFRESH`]; the core (`crate::fs`) gives
//! the children of such views short entry timeouts so the kernel asks again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use format::{CommitId, RepoId};
use read::tree::{Child, Tree};
use repo::{Store, StoreError};

/// How long listings of repositories and refs are trusted before being read again.
pub const REFRESH: Duration = Duration::from_secs(2);

/// The root inode.
pub const ROOT: u64 = 1;

/// What an inode is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
    /// A subdirectory of a revision, reached through view inode `view`.
    Dir {
        view: u64,
        repo: RepoId,
        commit: CommitId,
        path: String,
    },
    /// A file of a revision.
    File {
        repo: RepoId,
        commit: CommitId,
        path: String,
    },
}

/// What a View shows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
    nodes: Vec<Node>, // index = ino - 1
}

/// A repository's refs, by name, with the commits they point at.
type RefList = Vec<(String, CommitId)>;

struct Timed<T> {
    at: Instant,
    value: T,
}

/// The mounted namespace.
pub struct Namespace {
    store: Store,
    inodes: Mutex<Inodes>,
    trees: Mutex<HashMap<(RepoId, CommitId), Arc<Tree>>>,
    repos: Mutex<Option<Timed<Vec<RepoId>>>>,
    refs: Mutex<HashMap<RepoId, Timed<RefList>>>,
    mounted_at: u64,
    /// How long listings of repositories and refs are trusted ([`REFRESH`] by default).
    refresh: Duration,
    on_first_entry: Option<EntryHook>,
    /// Revisions a name has been looked up in or listed, for `on_first_entry`.
    entered: Mutex<std::collections::HashSet<(RepoId, CommitId)>>,
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
        inodes.nodes.push(root);
        Namespace {
            store,
            inodes: Mutex::new(inodes),
            trees: Mutex::new(HashMap::new()),
            repos: Mutex::new(None),
            refs: Mutex::new(HashMap::new()),
            mounted_at: repo::manifest::now_secs(),
            refresh: REFRESH,
            on_first_entry: None,
            entered: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Calls `hook` with a revision's tree the first time something inside it is looked
    /// up or listed: the adapter warms the files a loader reads first (`read::warm`). The
    /// hook must not block.
    pub fn on_first_entry(mut self, hook: EntryHook) -> Namespace {
        self.on_first_entry = Some(hook);
        self
    }

    /// Trusts listings of repositories and refs for `refresh` instead of [`REFRESH`]
    /// (zero: every lookup and listing reads them again; the model tests use it).
    pub fn with_refresh(mut self, refresh: Duration) -> Namespace {
        self.refresh = refresh;
        self
    }

    /// The tree of a revision being entered (a lookup or listing inside it).
    fn enter(&self, repo: &RepoId, commit: &CommitId) -> Result<Arc<Tree>> {
        let tree = self.tree(repo, commit)?;
        if let Some(hook) = &self.on_first_entry {
            let first = self
                .entered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((repo.clone(), *commit));
            if first {
                hook(&tree);
            }
        }
        Ok(tree)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The node of an inode.
    pub fn node(&self, ino: u64) -> Option<Node> {
        let inodes = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        inodes.nodes.get((ino as usize).checked_sub(1)?).cloned()
    }

    fn ino(&self, node: Node) -> u64 {
        let mut inodes = self.inodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&i) = inodes.by_node.get(&node) {
            return i;
        }
        inodes.nodes.push(node.clone());
        let i = inodes.nodes.len() as u64;
        inodes.by_node.insert(node, i);
        i
    }

    fn repos(&self) -> Result<Vec<RepoId>> {
        let mut slot = self.repos.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut map = self.refs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = map.get(repo) {
            if t.at.elapsed() < self.refresh {
                return Ok(t.value.clone());
            }
        }
        let value: RefList = self.store.refs(repo)?.into_iter().collect();
        map.insert(
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

    /// The tree of a commit (cached for the life of the mount: commits never change).
    pub fn tree(&self, repo: &RepoId, commit: &CommitId) -> Result<Arc<Tree>> {
        let key = (repo.clone(), *commit);
        if let Some(t) = self
            .trees
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(t.clone());
        }
        let m = self.store.manifest(repo, commit)?;
        let tree = Arc::new(Tree::new(Arc::new(m)));
        self.trees
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, tree.clone());
        Ok(tree)
    }

    /// For a View or Dir: (view ino, repo, commit, path) of the directory it shows.
    fn dir_of(&self, ino: u64, node: &Node) -> Result<Option<(u64, RepoId, CommitId, String)>> {
        Ok(match node {
            Node::View { repo, target, .. } => self
                .view_commit(repo, target)?
                .map(|c| (ino, repo.clone(), c, String::new())),
            Node::Dir {
                view,
                repo,
                commit,
                path,
            } => Some((*view, repo.clone(), *commit, path.clone())),
            _ => None,
        })
    }

    /// Looks `name` up in directory `parent`; `None` when it does not exist.
    pub fn lookup(&self, parent: u64, name: &str) -> Result<Option<u64>> {
        let Some(node) = self.node(parent) else {
            return Ok(None);
        };
        match &node {
            Node::Root => {
                let found = self.repos()?.iter().any(|r| r.org() == name);
                Ok(found.then(|| self.ino(Node::Org(name.to_string()))))
            }
            Node::Org(org) => {
                let found = self
                    .repos()?
                    .into_iter()
                    .find(|r| r.org() == org && r.name() == name);
                Ok(found.map(|r| self.ino(Node::Repo(r))))
            }
            Node::Repo(repo) => {
                if self
                    .refs(repo)?
                    .iter()
                    .any(|(n, _)| n == &unescape_ref(name))
                {
                    let target = Target::Ref(unescape_ref(name));
                    return Ok(Some(self.ino(Node::View {
                        repo: repo.clone(),
                        name: name.to_string(),
                        target,
                    })));
                }
                match self.store.resolve(repo, name) {
                    Ok(c) => Ok(Some(self.ino(Node::View {
                        repo: repo.clone(),
                        name: name.to_string(),
                        target: Target::Commit(c),
                    }))),
                    Err(
                        StoreError::UnknownRevision { .. } | StoreError::AmbiguousRevision { .. },
                    ) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            Node::View { .. } | Node::Dir { .. } => {
                let Some((view, repo, commit, dir)) = self.dir_of(parent, &node)? else {
                    return Ok(None);
                };
                let tree = self.enter(&repo, &commit)?;
                let path = Tree::join(&dir, name);
                Ok(tree.lookup(&dir, name).map(|child| match child {
                    Child::Dir => self.ino(Node::Dir {
                        view,
                        repo,
                        commit,
                        path,
                    }),
                    Child::File(_) => self.ino(Node::File { repo, commit, path }),
                }))
            }
            Node::File { .. } => Ok(None),
        }
    }

    /// Entries of directory `ino` (name, ino, kind); `None` if it is not a directory.
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
                    .map(|o| (o.clone(), self.ino(Node::Org(o)), Kind::Dir))
                    .collect()
            }
            Node::Org(org) => self
                .repos()?
                .into_iter()
                .filter(|r| r.org() == org)
                .map(|r| (r.name().to_string(), self.ino(Node::Repo(r)), Kind::Dir))
                .collect(),
            Node::Repo(repo) => {
                let mut out = Vec::new();
                for (name, _) in self.refs(repo)? {
                    let shown = escape_ref(&name);
                    let ino = self.ino(Node::View {
                        repo: repo.clone(),
                        name: shown.clone(),
                        target: Target::Ref(name),
                    });
                    out.push((shown, ino, Kind::Dir));
                }
                for c in self.store.commits(repo)? {
                    let name = c.to_hex();
                    let ino = self.ino(Node::View {
                        repo: repo.clone(),
                        name: name.clone(),
                        target: Target::Commit(c),
                    });
                    out.push((name, ino, Kind::Dir));
                }
                out
            }
            Node::View { .. } | Node::Dir { .. } => {
                let Some((view, repo, commit, dir)) = self.dir_of(ino, &node)? else {
                    return Ok(Some(Vec::new()));
                };
                let tree = self.enter(&repo, &commit)?;
                let Some(entries) = tree.list(&dir) else {
                    return Ok(None);
                };
                entries
                    .iter()
                    .map(|(name, child)| {
                        let path = Tree::join(&dir, name);
                        match child {
                            Child::Dir => (
                                name.clone(),
                                self.ino(Node::Dir {
                                    view,
                                    repo: repo.clone(),
                                    commit,
                                    path,
                                }),
                                Kind::Dir,
                            ),
                            Child::File(_) => (
                                name.clone(),
                                self.ino(Node::File {
                                    repo: repo.clone(),
                                    commit,
                                    path,
                                }),
                                Kind::File,
                            ),
                        }
                    })
                    .collect()
            }
            Node::File { .. } => return Ok(None),
        };
        Ok(Some(out))
    }

    /// Attributes of an inode.
    pub fn attr(&self, ino: u64) -> Result<Option<Attr>> {
        let Some(node) = self.node(ino) else {
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
            Node::View { repo, target, .. } => match self.view_commit(repo, target)? {
                Some(c) => dir(
                    self.tree(repo, &c)?.manifest.ingested_at,
                    matches!(target, Target::Commit(_)),
                ),
                None => dir(self.mounted_at, false),
            },
            Node::Dir { repo, commit, .. } => {
                dir(self.tree(repo, commit)?.manifest.ingested_at, true)
            }
            Node::File { repo, commit, path } => {
                let tree = self.tree(repo, commit)?;
                let Some(f) = tree.manifest.file(path) else {
                    return Ok(None);
                };
                Attr {
                    ino,
                    kind: Kind::File,
                    size: f.size,
                    executable: f.executable,
                    mtime: tree.manifest.ingested_at,
                    immutable: true,
                }
            }
        }))
    }

    /// Whether entries found in directory `ino` may change (a ref view, or above).
    pub fn children_may_change(&self, ino: u64) -> bool {
        match self.node(ino) {
            Some(Node::View {
                target: Target::Commit(_),
                ..
            })
            | Some(Node::Dir { .. }) => false,
            Some(_) => true,
            None => false,
        }
    }

    /// Reads the manifest of a File inode's commit again ([`read::reload::same_file`]) and
    /// replaces the cached tree, if the file is still there with the same content: a mount
    /// that held a revision's chunk locations while gc repacked it finds the new ones here.
    pub fn reload_file(&self, ino: u64) -> Result<Option<(Arc<Tree>, usize)>> {
        let Some(Node::File { repo, commit, path }) = self.node(ino) else {
            return Ok(None);
        };
        let old = self.tree(&repo, &commit)?;
        let Some(was) = old.manifest.file(&path) else {
            return Ok(None);
        };
        let Some((m, _)) = read::reload::same_file(&self.store, &repo, &commit, was)? else {
            return Ok(None);
        };
        let tree = Arc::new(Tree::new(m));
        self.trees
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((repo, commit), tree.clone());
        self.file(ino)
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

    /// The file behind a File inode: its tree and index in the manifest.
    pub fn file(&self, ino: u64) -> Result<Option<(Arc<Tree>, usize)>> {
        let Some(Node::File { repo, commit, path }) = self.node(ino) else {
            return Ok(None);
        };
        let tree = self.tree(&repo, &commit)?;
        let idx = tree
            .manifest
            .files
            .binary_search_by(|f| f.path.as_str().cmp(&path))
            .ok();
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

#[cfg(test)]
mod tests {
    use super::*;
    use chunker::ChunkParams;
    use index::Index;
    use objects::MemoryStore;
    use read::progress::NoProgress;
    use repo::CreateOptions;
    use store::ingest::{ingest, IngestOptions};
    use store::source::{discover, DiscoverOptions};

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    /// A memory store with `org/model` at commits A (`main`) and B, each with
    /// `config.json` and `sub/w.bin` (other bytes in each).
    fn store() -> (Store, RepoId) {
        let opts = CreateOptions {
            chunk: ChunkParams::tiny(),
            pack_target: 64 * 1024,
        };
        let store = Store::open_or_create(Arc::new(MemoryStore::new()), opts).unwrap();
        let idx = tempfile::tempdir().unwrap();
        let index = Index::open(idx.path(), &store.config().store_id).unwrap();
        let repo = RepoId::parse("org/model").unwrap();
        for (c, refs) in [(A, vec!["main".to_string()]), (B, vec![])] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("sub")).unwrap();
            std::fs::write(
                dir.path().join("config.json"),
                format!("{{\"c\": \"{c}\"}}"),
            )
            .unwrap();
            std::fs::write(dir.path().join("sub/w.bin"), c.repeat(100)).unwrap();
            let opts = DiscoverOptions {
                repo: Some(repo.clone()),
                revision: Some(CommitId::parse(c).unwrap()),
                refs,
            };
            let snaps = discover(dir.path(), &opts).unwrap().snapshots;
            ingest(
                &store,
                &index,
                &snaps,
                IngestOptions::default(),
                &NoProgress,
            )
            .unwrap();
        }
        (store, repo)
    }

    /// The inode of `path` (names separated by `/`) from the root.
    fn walk(ns: &Namespace, path: &str) -> Option<u64> {
        path.split('/')
            .try_fold(ROOT, |ino, name| ns.lookup(ino, name).unwrap())
    }

    #[test]
    fn a_file_through_a_ref_a_sha_a_prefix_and_upper_case_is_one_inode() {
        let (store, _) = store();
        let ns = Namespace::full(store);
        let by_ref = walk(&ns, "org/model/main/sub/w.bin").unwrap();
        for rev in [A, &A[..7], &A.to_ascii_uppercase()] {
            assert_eq!(
                walk(&ns, &format!("org/model/{rev}/sub/w.bin")),
                Some(by_ref)
            );
        }
        assert_ne!(walk(&ns, &format!("org/model/{B}/sub/w.bin")), Some(by_ref));
        let a = ns.attr(by_ref).unwrap().unwrap();
        assert_eq!((a.kind, a.size, a.immutable), (Kind::File, 4000, true));
    }

    #[test]
    fn a_ref_is_read_again_after_the_refresh_and_a_file_keeps_its_commit() {
        let (store, repo) = store();
        let ns = Namespace::full(store.clone()).with_refresh(Duration::from_secs(3600));
        let fresh = Namespace::full(store.clone()).with_refresh(Duration::ZERO);
        let old = walk(&ns, "org/model/main/config.json").unwrap();
        let old_fresh = walk(&fresh, "org/model/main/config.json").unwrap();
        store
            .set_ref(&repo, "main", &CommitId::parse(B).unwrap())
            .unwrap();
        // Within the refresh the ref's commit is the one read before.
        assert_eq!(walk(&ns, "org/model/main/config.json"), Some(old));
        // Read again: another file, while the inode seen before keeps commit A.
        let new = walk(&fresh, "org/model/main/config.json").unwrap();
        assert_ne!(new, old_fresh);
        let (tree, _) = fresh.file(old_fresh).unwrap().unwrap();
        assert_eq!(tree.manifest.commit.to_hex(), A);
        let (tree, _) = fresh.file(new).unwrap().unwrap();
        assert_eq!(tree.manifest.commit.to_hex(), B);
    }

    #[test]
    fn a_ref_with_slashes_is_listed_escaped_and_found_by_that_name() {
        let (store, repo) = store();
        store
            .set_ref(&repo, "refs/pr/1", &CommitId::parse(B).unwrap())
            .unwrap();
        let ns = Namespace::full(store);
        let repo_ino = walk(&ns, "org/model").unwrap();
        let names: Vec<String> = ns
            .list(repo_ino)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(names, ["main", "refs%2Fpr%2F1", A, B]);
        assert!(walk(&ns, "org/model/refs%2Fpr%2F1/sub/w.bin").is_some());
        assert_eq!(walk(&ns, "org/model/refs/pr"), None);
    }

    #[test]
    fn unknown_names_are_none_and_inodes_are_never_reused() {
        let (store, _) = store();
        let ns = Namespace::full(store);
        for path in [
            "nope",
            "org/nope",
            "org/model/nope",
            "org/model/main/nope",
            "org/model/main/config.json/x",
        ] {
            assert_eq!(walk(&ns, path), None, "{path}");
        }
        let first = walk(&ns, "org/model/main/sub").unwrap();
        let other = walk(&ns, &format!("org/model/{B}/sub")).unwrap();
        assert_ne!(first, other);
        assert_eq!(walk(&ns, "org/model/main/sub"), Some(first));
        assert_eq!(ns.attr(u64::MAX).unwrap(), None);
        assert_eq!(
            ns.list(walk(&ns, "org/model/main/config.json").unwrap())
                .unwrap(),
            None
        );
    }

    #[test]
    fn a_single_revision_is_the_root() {
        let (store, repo) = store();
        let ns = Namespace::single(store, repo, CommitId::parse(B).unwrap());
        let names: Vec<String> = ns
            .list(ROOT)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(names, ["config.json", "sub"]);
        assert!(!ns.children_may_change(ROOT));
        let f = walk(&ns, "sub/w.bin").unwrap();
        assert_eq!(ns.attr(f).unwrap().unwrap().size, 4000);
    }
}
