//! Ingest sources: turning a directory on disk into snapshots to ingest.
//!
//! Three layouts are recognised ([`discover`]):
//! * a Hugging Face hub cache (`~/.cache/huggingface/hub`): every `models--org--name` in it;
//! * one cache repo directory `models--org--name`: every `snapshots/<commit>` with the
//!   refs in `refs/`, each snapshot file resolved through its symlink to `blobs/<etag>`;
//! * a plain snapshot directory (`hf download --local-dir` output, or any directory).
//!
//! Nothing here reads file contents; the ingest pipeline does, once per distinct blob.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use format::names::{check_ref_name, CommitId, RepoId};
use format::{Sha256, XetHash};
use parking_lot::Mutex;
use repo::{Result, StoreError};

/// One file to ingest.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Path inside the snapshot, `/`-separated.
    pub path: String,
    /// The real file to read (a blob for cache snapshots).
    pub source: PathBuf,
    /// Size when discovered.
    pub size: u64,
    /// Whether an execute bit is set.
    pub executable: bool,
    /// The sha256 the content must have (from a 64-hex blob name).
    pub expected_sha256: Option<Sha256>,
    /// The Xet file hash the content must have (an upstream's `xetHash`).
    pub expected_xet: Option<XetHash>,
}

/// One revision to ingest.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Target repository.
    pub repo: RepoId,
    /// The commit, when the source names one.
    pub commit: Option<CommitId>,
    /// Refs to point at the commit once stored.
    pub refs: Vec<String>,
    /// Files, sorted by path.
    pub files: Vec<SourceFile>,
    /// `plain` or `hf-cache`.
    pub origin: &'static str,
    /// The directory it came from (for messages).
    pub dir: PathBuf,
    /// Release labels to set on the commit once stored (`ingest --label`).
    pub labels: Vec<(String, String)>,
}

/// Options from the command line that shape discovery.
#[derive(Clone, Debug, Default)]
pub struct DiscoverOptions {
    /// `--repo`: required for a plain directory; renames a single cache repo.
    pub repo: Option<RepoId>,
    /// `--revision`: the commit sha of a plain directory.
    pub revision: Option<CommitId>,
    /// `--ref`: refs to set on a plain directory's commit.
    pub refs: Vec<String>,
}

/// What [`discover`] found, with warnings for things skipped.
#[derive(Debug, Default)]
pub struct Discovered {
    /// The snapshots.
    pub snapshots: Vec<Snapshot>,
    /// Human-readable warnings (skipped partial downloads, refs to missing snapshots).
    pub warnings: Vec<String>,
}

fn bad(path: &Path, reason: impl Into<String>) -> StoreError {
    StoreError::BadSource {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Finds the snapshots under `path`.
pub fn discover(path: &Path, opts: &DiscoverOptions) -> Result<Discovered> {
    for r in &opts.refs {
        check_ref_name(r)?;
    }
    let meta = fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad(path, "no such file or directory"),
        _ => StoreError::io(path, e),
    })?;
    if !meta.is_dir() {
        return Err(bad(
            path,
            "not a directory (expected a snapshot directory or a Hugging Face cache)",
        ));
    }
    let mut out = Discovered::default();
    if is_cache_repo(path) {
        reject_plain_options(path, opts, true)?;
        cache_repo(path, opts.repo.clone(), &mut out)?;
    } else if let Some(repos) = cache_repos_in(path)? {
        reject_plain_options(path, opts, false)?;
        for found in cache_repos(&repos) {
            let found = found?;
            out.snapshots.extend(found.snapshots);
            out.warnings.extend(found.warnings);
        }
    } else {
        plain(path, opts, &mut out)?;
    }
    Ok(out)
}

fn reject_plain_options(path: &Path, opts: &DiscoverOptions, single: bool) -> Result<()> {
    if opts.revision.is_some() || !opts.refs.is_empty() {
        return Err(bad(path, "--revision and --ref apply to a plain snapshot directory; a Hugging Face cache brings its own commits and refs"));
    }
    if opts.repo.is_some() && !single {
        return Err(bad(
            path,
            "--repo cannot be used with a whole hub cache (each repo is named by its folder)",
        ));
    }
    Ok(())
}

fn is_cache_repo(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("models--") && path.join("snapshots").is_dir()
}

/// The `models--*` directories of a hub cache, or `None` if `path` is not one.
fn cache_repos_in(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    let mut repos = Vec::new();
    let mut other_kinds = false;
    for entry in fs::read_dir(path).map_err(|e| StoreError::io(path, e))? {
        let entry = entry.map_err(|e| StoreError::io(path, e))?;
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if is_cache_repo(&p) {
            repos.push(p);
        } else if (name.starts_with("datasets--") || name.starts_with("spaces--")) && p.is_dir() {
            other_kinds = true;
        }
    }
    if repos.is_empty() && !other_kinds {
        return Ok(None);
    }
    repos.sort();
    Ok(Some(repos))
}

/// `models--org--name` → `org/name`.
fn repo_from_cache_dir(dir: &Path) -> Result<RepoId> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let rest = name.strip_prefix("models--").unwrap_or(name);
    match rest.split_once("--") {
        Some((org, n)) => RepoId::parse(&format!("{org}/{n}")).map_err(|e| bad(dir, e.to_string())),
        None => Err(bad(
            dir,
            format!("repo {rest:?} has no organisation; ingest it with --repo ORG/NAME"),
        )),
    }
}

/// Threads listing the repositories of a hub cache at once: on a cold node each waits on
/// the disk for directory blocks and inodes, and several outstanding reads finish sooner.
const DISCOVER_THREADS: usize = 8;

/// What each repository of a hub cache holds, in the order of `repos`, listed by up to
/// [`DISCOVER_THREADS`] threads (no more once one has failed).
fn cache_repos(repos: &[PathBuf]) -> Vec<Result<Discovered>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let found: Vec<Mutex<Option<Result<Discovered>>>> =
        repos.iter().map(|_| Mutex::new(None)).collect();
    let work = || {
        use std::sync::atomic::Ordering::SeqCst;
        while !failed.load(SeqCst) {
            let i = next.fetch_add(1, SeqCst);
            let Some(dir) = repos.get(i) else { break };
            let mut out = Discovered::default();
            let r = cache_repo(dir, None, &mut out).map(|()| out);
            failed.fetch_or(r.is_err(), SeqCst);
            *found[i].lock() = Some(r);
        }
    };
    std::thread::scope(|s| {
        let mut started = 0;
        for _ in 0..DISCOVER_THREADS.min(repos.len()) {
            if std::thread::Builder::new().spawn_scoped(s, work).is_err() {
                break; // no more threads to be had: those started do the rest
            }
            started += 1;
        }
        if started == 0 {
            work();
        }
    });
    // Repositories after a failure may be unlisted: the failure comes first in order.
    found.into_iter().map_while(Mutex::into_inner).collect()
}

fn cache_repo(dir: &Path, repo: Option<RepoId>, out: &mut Discovered) -> Result<()> {
    let repo = match repo {
        Some(r) => r,
        None => repo_from_cache_dir(dir)?,
    };
    let blobs = dir.join("blobs");
    if let Ok(entries) = fs::read_dir(&blobs) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".incomplete") {
                out.warnings
                    .push(format!("skipping partial download {}", e.path().display()));
            }
        }
    }
    // refs: refs/<name> (nested for refs/pr/N) containing a commit sha
    let mut refs: BTreeMap<CommitId, Vec<String>> = BTreeMap::new();
    let refs_dir = dir.join("refs");
    let mut ref_files = Vec::new();
    if refs_dir.is_dir() {
        walk_files(&refs_dir, &refs_dir, &mut ref_files)?;
    }
    let snaps_dir = dir.join("snapshots");
    for (name, file) in ref_files {
        let text = fs::read_to_string(&file).map_err(|e| StoreError::io(&file, e))?;
        let commit = CommitId::parse(text.trim()).map_err(|e| bad(&file, e.to_string()))?;
        check_ref_name(&name).map_err(|e| bad(&file, e.to_string()))?;
        if snaps_dir.join(commit.to_hex()).is_dir() {
            refs.entry(commit).or_default().push(name);
        } else {
            out.warnings.push(format!(
                "ref {name} of {repo} points to {commit}, which has no snapshot here; skipped"
            ));
        }
    }
    // Snapshot links are followed only into this repository's own blobs, and a snapshot's
    // regular files must lie inside the repository (a user who can write into a shared
    // cache must not make another user's ingest read their files).
    let blobs = fs::canonicalize(&blobs).ok();
    let inside = fs::canonicalize(dir).map_err(|e| StoreError::io(dir, e))?;
    let mut commits = Vec::new();
    for entry in fs::read_dir(&snaps_dir).map_err(|e| StoreError::io(&snaps_dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(&snaps_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let commit = CommitId::parse(&name).map_err(|_| {
            bad(
                &entry.path(),
                "snapshot folder is not named by a 40-hex commit",
            )
        })?;
        commits.push((commit, entry.path()));
    }
    commits.sort();
    for (commit, snap) in commits {
        let mut files = Vec::new();
        let within = Within::Cache {
            blobs: blobs.as_deref(),
            repo: &inside,
        };
        collect(&snap, &snap, &mut files, within)?;
        if files.is_empty() {
            out.warnings
                .push(format!("snapshot {} is empty; skipped", snap.display()));
            continue;
        }
        out.snapshots.push(Snapshot {
            repo: repo.clone(),
            commit: Some(commit),
            refs: refs.remove(&commit).unwrap_or_default(),
            files,
            origin: "hf-cache",
            dir: snap,
            labels: Vec::new(),
        });
    }
    Ok(())
}

/// Lists regular files under `dir` as (relative name, path), for refs.
fn walk_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))? {
        let entry = entry.map_err(|e| StoreError::io(dir, e))?;
        let p = entry.path();
        if p.is_dir() {
            walk_files(root, &p, out)?;
        } else if let Some(rel) = p.strip_prefix(root).ok().and_then(|r| r.to_str()) {
            out.push((rel.to_string(), p.clone()));
        }
    }
    Ok(())
}

fn plain(dir: &Path, opts: &DiscoverOptions, out: &mut Discovered) -> Result<()> {
    let repo = opts.repo.clone().ok_or_else(|| {
        bad(
            dir,
            "a plain snapshot directory needs --repo ORG/NAME (or point at a Hugging Face cache)",
        )
    })?;
    let mut files = Vec::new();
    collect(dir, dir, &mut files, Within::Anywhere)?;
    if files.is_empty() {
        return Err(bad(dir, "not a snapshot: no files in it"));
    }
    let commit = match opts.revision {
        Some(c) => Some(c),
        None => local_dir_commit(dir, out),
    };
    out.snapshots.push(Snapshot {
        repo,
        commit,
        refs: opts.refs.clone(),
        files,
        origin: "plain",
        dir: dir.to_path_buf(),
        labels: Vec::new(),
    });
    Ok(())
}

/// The commit recorded by `hf download --local-dir` in `.cache/huggingface/download/*.metadata`
/// (first line), when every metadata file agrees.
fn local_dir_commit(dir: &Path, out: &mut Discovered) -> Option<CommitId> {
    let meta_dir = dir.join(".cache/huggingface/download");
    let mut files = Vec::new();
    walk_files(&meta_dir, &meta_dir, &mut files).ok()?;
    let mut found: Option<CommitId> = None;
    for (name, p) in files {
        if !name.ends_with(".metadata") {
            continue;
        }
        let text = fs::read_to_string(&p).ok()?;
        let c = CommitId::parse(text.lines().next()?.trim()).ok()?;
        if found.is_some_and(|f| f != c) {
            out.warnings.push(format!(
                "{}: files of several commits; deriving the commit id from the content",
                meta_dir.display()
            ));
            return None;
        }
        found = Some(c);
    }
    found
}

/// Where the files of a snapshot may lie.
#[derive(Clone, Copy)]
enum Within<'a> {
    /// A plain directory: anywhere (the user named it and what it links to).
    Anywhere,
    /// A cache snapshot: a link only to a file directly in this repository's `blobs/` (its
    /// canonical path; `None` when the repository has none, so no link leads anywhere),
    /// and a regular file only inside the repository's directory (`repo`, canonical), so
    /// that a snapshot directory that is itself a link out reads nothing.
    Cache {
        blobs: Option<&'a Path>,
        repo: &'a Path,
    },
}

impl Within<'_> {
    /// Whether a file found at `source` (canonical) may be read; `link`: it was reached
    /// through a link in the snapshot.
    fn admits(&self, source: &Path, link: bool) -> bool {
        match *self {
            Within::Anywhere => true,
            Within::Cache { blobs, .. } if link => {
                blobs.is_some_and(|b| source.parent() == Some(b))
            }
            Within::Cache { repo, .. } => source.starts_with(repo),
        }
    }
}

/// Collects the files under `dir` (relative to `root`). Symlinks are followed to a
/// regular file; a dangling one is an error that names it. In a cache snapshot, a link must
/// lead to a file directly in the repository's `blobs/` ([`Within::Blobs`]), and a blob
/// named by 64 hex digits gives the expected sha256.
fn collect(root: &Path, dir: &Path, out: &mut Vec<SourceFile>, within: Within<'_>) -> Result<()> {
    let cache = matches!(within, Within::Cache { .. });
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(|e| StoreError::io(dir, e))?
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| StoreError::io(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let p = entry.path();
        let name = entry.file_name();
        let name = name
            .to_str()
            .ok_or_else(|| bad(&p, "file name is not valid UTF-8"))?;
        let rel = p
            .strip_prefix(root)
            .ok()
            .and_then(|r| r.to_str())
            .ok_or_else(|| bad(&p, "path is not valid UTF-8"))?
            .to_string();
        if !cache
            && (rel == ".cache/huggingface"
                || rel == ".git"
                || (rel == ".cache" && p.join("huggingface").is_dir()))
        {
            continue;
        }
        let lmeta = fs::symlink_metadata(&p).map_err(|e| StoreError::io(&p, e))?;
        if lmeta.is_dir() {
            collect(root, &p, out, within)?;
            continue;
        }
        // A regular file's lstat says all; a link is followed to what it names.
        let followed = if lmeta.file_type().is_symlink() {
            fs::metadata(&p)
        } else {
            Ok(lmeta.clone())
        };
        let meta = match followed {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let target = fs::read_link(&p)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                let hint = partial_download_hint(&p);
                return Err(bad(&p, format!("dangling symlink to {target}{hint}")));
            }
            Err(e) => return Err(StoreError::io(&p, e)),
        };
        if meta.is_dir() {
            return Err(bad(
                &p,
                "symlink to a directory is not supported in a snapshot",
            ));
        }
        if !meta.is_file() {
            return Err(bad(&p, "not a regular file"));
        }
        // Every source is named by its canonical path: ingest opens it refusing any link on
        // the way (`open_source`), so a link put anywhere in the path after this is refused.
        let source = fs::canonicalize(&p).map_err(|e| StoreError::io(&p, e))?;
        if !within.admits(&source, lmeta.file_type().is_symlink()) {
            return Err(outside_blobs(&p, &source));
        }
        if name.ends_with(".incomplete") && cache {
            continue;
        }
        let expected_sha256 = if cache { blob_sha256(&source) } else { None };
        out.push(SourceFile {
            path: rel,
            source,
            size: meta.len(),
            executable: meta.permissions().mode() & 0o111 != 0,
            expected_sha256,
            expected_xet: None,
        });
    }
    Ok(())
}

/// The error for a cache snapshot entry that is not a link into its repository's blobs.
fn outside_blobs(entry: &Path, source: &Path) -> StoreError {
    bad(
        entry,
        format!(
            "leads to {}, outside this repository's blobs/ (a Hugging Face cache snapshot holds only links to files in its own blobs/, and its own files; refusing to read anything else; a blobs/ directory that is a link to another disk is fine, a blob that is a link is not)",
            source.display()
        ),
    )
}

/// For a dangling link into `blobs/`, says whether a partial download is there.
fn partial_download_hint(link: &Path) -> String {
    let Ok(target) = fs::read_link(link) else {
        return String::new();
    };
    let blob = link.parent().map(|d| d.join(&target)).unwrap_or(target);
    let (Some(dir), Some(name)) = (blob.parent(), blob.file_name().and_then(|n| n.to_str())) else {
        return String::new();
    };
    let partial = fs::read_dir(dir).ok().and_then(|rd| {
        rd.flatten().find(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(name) && n.ends_with(".incomplete")
        })
    });
    match partial {
        Some(e) => format!(
            " (download incomplete: {} exists; finish the download first)",
            e.path().display()
        ),
        None => String::new(),
    }
}

fn blob_sha256(source: &Path) -> Option<Sha256> {
    let name = source.file_name()?.to_str()?;
    if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Sha256::from_hex(name).ok()
}
