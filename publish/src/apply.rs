//! A commit's operations applied to its branch's head: the new revision's file list, each
//! file with where its bytes come from. Nothing is written here but inline files into
//! the spool; every refusal happens before any byte is published.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use format::manifest::check_path;
use format::{RepoId, Sha256};
use repo::manifest::Manifest;
use repo::{FilesBySha256, Store, StoreError};

use crate::error::PublishError;
use crate::request::{CommitRequest, Content, Operation};
use crate::spool::Spool;

/// Most operations in one commit.
pub const MAX_OPERATIONS: usize = 100_000;

/// Where the bytes of one file of the new revision come from.
pub(crate) enum Source {
    /// An object in the spool, opened when ingest reads it (one file open at a time
    /// however many a commit adds).
    Spooled {
        path: PathBuf,
        sha256: Sha256,
        size: u64,
    },
    /// File `index` of a stored revision (the head's files that stay, and added content
    /// a revision of the repository holds already).
    Stored {
        manifest: Arc<Manifest>,
        index: usize,
    },
}

/// The new revision's files by path, with whether each is executable.
pub struct Applied {
    pub(crate) files: BTreeMap<String, (Source, bool)>,
}

impl Applied {
    /// The spooled objects the revision takes (deleted from the spool once it is stored).
    pub(crate) fn spooled(&self) -> impl Iterator<Item = &Sha256> {
        self.files.values().filter_map(|(s, _)| match s {
            Source::Spooled { sha256, .. } => Some(sha256),
            Source::Stored { .. } => None,
        })
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the revision has no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The head of `req`'s branch, checked against the parent it names: `None` for the first
/// commit of a repository that has no revision.
fn head(store: &Store, req: &CommitRequest) -> Result<Option<Arc<Manifest>>, PublishError> {
    let refs = match store.refs(&req.repo) {
        Ok(r) => r,
        Err(StoreError::UnknownRepo(_)) => Default::default(),
        Err(e) => return Err(e.into()),
    };
    let head = refs.get(&req.branch).copied();
    if let Some(parent) = req.parent {
        if head != Some(parent) {
            let now = head.map_or("nothing".to_string(), |c| c.to_hex());
            return Err(PublishError::Moved(format!(
                "{} branch {} is at {now}, not at the parent commit {} this commit was made on",
                req.repo,
                req.branch,
                parent.to_hex()
            )));
        }
    }
    match head {
        Some(c) => Ok(Some(Arc::new(store.manifest_resolved(&req.repo, &c)?))),
        // A repository with refs has a history: a new branch starts from one of them. One
        // without (nothing visible: new, or whose first upload was held back by its
        // release check) takes this commit as its first.
        None if !refs.is_empty() => Err(PublishError::RevisionNotFound(format!(
            "{} has no branch {}: create it first (create_branch)",
            req.repo, req.branch
        ))),
        None => Ok(None),
    }
}

/// Applies `req`'s operations to its branch's head.
pub(crate) fn apply(
    store: &Store,
    spool: &Spool,
    req: &CommitRequest,
) -> Result<Applied, PublishError> {
    if req.operations.len() > MAX_OPERATIONS {
        return Err(PublishError::TooLarge(format!(
            "a commit of {} operations is over the limit of {MAX_OPERATIONS}",
            req.operations.len()
        )));
    }
    let head = head(store, req)?;
    let mut files: BTreeMap<String, (Source, bool)> = BTreeMap::new();
    if let Some(m) = &head {
        for (i, f) in m.files.iter().enumerate() {
            let src = Source::Stored {
                manifest: m.clone(),
                index: i,
            };
            files.insert(f.path.clone(), (src, f.executable));
        }
    }
    let mut stored: Option<FilesBySha256> = None;
    for op in &req.operations {
        match op {
            Operation::Add { path, content } => {
                checked(path)?;
                let src = match content {
                    Content::Inline(bytes) => {
                        let (sha256, path) = spool.keep_bytes(&req.repo, bytes)?;
                        Source::Spooled {
                            path,
                            sha256,
                            size: bytes.len() as u64,
                        }
                    }
                    Content::Object { sha256, size } => {
                        let stored = match &mut stored {
                            Some(s) => s,
                            None => stored.insert(stored_files(store, &req.repo)?),
                        };
                        object(spool, &req.repo, stored, path, sha256, *size)?
                    }
                };
                let exec = files.get(path).is_some_and(|(_, x)| *x);
                files.insert(path.clone(), (src, exec));
            }
            Operation::DeleteFile { path } => {
                if files.remove(path.as_str()).is_none() {
                    return Err(PublishError::EntryNotFound(format!(
                        "cannot delete {path}: A file with this name doesn't exist"
                    )));
                }
            }
            Operation::DeleteFolder { path } => {
                let dir = format!("{}/", path.trim_end_matches('/'));
                let under: Vec<String> = files
                    .range(dir.clone()..)
                    .map(|(k, _)| k)
                    .take_while(|k| k.starts_with(&dir))
                    .cloned()
                    .collect();
                if under.is_empty() {
                    return Err(PublishError::EntryNotFound(format!(
                        "cannot delete folder {path}: no file is under it"
                    )));
                }
                for k in under {
                    files.remove(&k);
                }
            }
        }
    }
    no_file_is_a_folder(&files)?;
    Ok(Applied { files })
}

/// Longest path a commit may add, and longest segment of one (what file systems take).
const MAX_PATH: usize = 1024;
const MAX_SEGMENT: usize = 255;

/// A path a commit may add: safe (no `..`, not absolute, no empty segment), no `.git`
/// segment in any case, no backslash (a separator elsewhere) or control character, no
/// segment ending in `:` (a drive elsewhere), and within [`MAX_PATH`] and [`MAX_SEGMENT`]
/// bytes, so that every checkout can write it.
pub(crate) fn checked(path: &str) -> Result<(), PublishError> {
    check_path(path).map_err(PublishError::BadRequest)?;
    let refuse = |why: &str| {
        Err(PublishError::BadRequest(format!(
            "unsafe file path {path:?}: {why}"
        )))
    };
    if path.len() > MAX_PATH {
        return refuse(&format!("longer than {MAX_PATH} bytes"));
    }
    if path.contains('\\') || path.chars().any(char::is_control) {
        return refuse("a backslash or a control character");
    }
    for seg in path.split('/') {
        if seg.eq_ignore_ascii_case(".git") {
            return refuse("inside .git");
        }
        if seg.len() > MAX_SEGMENT {
            return refuse(&format!("a name longer than {MAX_SEGMENT} bytes"));
        }
        if seg.ends_with(':') || (seg.len() == 2 && seg.as_bytes()[1] == b':') {
            return refuse("a drive name");
        }
    }
    Ok(())
}

/// The source of an added object: the spool's copy, else a stored file with that content.
fn object(
    spool: &Spool,
    repo: &RepoId,
    stored: &FilesBySha256,
    path: &str,
    sha256: &Sha256,
    size: u64,
) -> Result<Source, PublishError> {
    if let Some(path) = spool.object(repo, sha256, size) {
        return Ok(Source::Spooled {
            path,
            sha256: *sha256,
            size,
        });
    }
    match stored.get(sha256) {
        Some((m, i)) if m.files[*i].size == size => Ok(Source::Stored { manifest: m.clone(), index: *i }),
        _ => Err(PublishError::BadRequest(format!(
            "{path}: its content (sha256 {sha256}, {size} bytes) was never uploaded; upload it (LFS) before the commit"
        ))),
    }
}

/// Every file of every revision of `repo` by sha256, located through gc's forwarding
/// records (the files a commit takes unread are read by their chunk lists).
pub(crate) fn stored_files(store: &Store, repo: &RepoId) -> Result<FilesBySha256, PublishError> {
    Ok(store.files_by_sha256(repo, true)?)
}

/// Refuses a file list where a path is both a file and a folder (`a` and `a/b`).
fn no_file_is_a_folder(files: &BTreeMap<String, (Source, bool)>) -> Result<(), PublishError> {
    for path in files.keys() {
        let dir = format!("{path}/");
        if let Some((under, _)) = files.range(dir.clone()..).next() {
            if under.starts_with(&dir) {
                return Err(PublishError::BadRequest(format!(
                    "{path} would be both a file and a folder (of {under})"
                )));
            }
        }
    }
    Ok(())
}
