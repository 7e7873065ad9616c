//! `modelcas sync LIST.toml`: a prefetch list for a nightly job.
//!
//! The list names revisions to keep in the store (`[[model]]` entries: repository,
//! revision, include/exclude globs, extra refs; an optional top-level `endpoint`). It is
//! parsed and checked whole before anything is pulled: an unknown key, a bad repository
//! id, revision, ref name or glob, or two entries that point the same ref at different
//! revisions, is an error naming the entry. Then each entry goes through [`pull`] in
//! turn: what is missing is downloaded, refs are moved to what the list says, and an
//! entry that fails does not stop the others. The [`SyncReport`] says, per entry, whether
//! a revision was pulled, only refs moved, or nothing changed, and why an entry failed.
//!
//! ```toml
//! endpoint = "https://huggingface.co"
//!
//! [[model]]
//! repo = "meta-llama/Llama-3.1-8B"
//! revision = "main"
//! include = ["*.json", "*.safetensors"]
//!
//! [[model]]
//! repo = "org/embedder"
//! revision = "0123456789abcdef0123456789abcdef01234567"
//! refs = ["stable"]
//! ```

use std::collections::{BTreeMap, HashMap};

use format::names::check_ref_name;
use format::{CommitId, RepoId};
use hubclient::HubClient;
use index::Index;
use read::progress::Progress;
use repo::{Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::pull::{pull, PullOptions, PullReport};
use crate::select::Selection;

/// The list file as written (every key checked; unknown keys are errors).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListFile {
    endpoint: Option<String>,
    #[serde(default)]
    model: Vec<EntryFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryFile {
    repo: String,
    revision: Option<String>,
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    refs: Vec<String>,
}

/// A checked prefetch list.
#[derive(Clone, Debug)]
pub struct SyncList {
    /// The Hub to pull from, unless `--endpoint` says otherwise.
    pub endpoint: Option<String>,
    pub entries: Vec<SyncEntry>,
}

/// One `[[model]]` entry, checked.
#[derive(Clone, Debug)]
pub struct SyncEntry {
    pub repo: RepoId,
    /// A branch or tag name, or a full commit sha (default `main`).
    pub revision: String,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Refs to point at the revision's commit besides the revision's own name.
    pub refs: Vec<String>,
}

/// Why a list was refused; nothing was pulled.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("not a valid sync list: {0}")]
    Toml(String),
    #[error("the list has no [[model]] entry")]
    Empty,
    #[error("endpoint {0:?}: expected an http:// or https:// URL")]
    Endpoint(String),
    /// Entries are numbered from 1, in file order.
    #[error("entry {index} ({repo}): {reason}")]
    Entry {
        index: usize,
        repo: String,
        reason: String,
    },
}

impl SyncList {
    /// Parses and checks a list (see the module documentation for the format).
    pub fn parse(text: &str) -> Result<SyncList, ListError> {
        let file: ListFile = toml::from_str(text).map_err(|e| ListError::Toml(e.to_string()))?;
        if file.model.is_empty() {
            return Err(ListError::Empty);
        }
        if let Some(ep) = &file.endpoint {
            if !(ep.starts_with("http://") || ep.starts_with("https://")) {
                return Err(ListError::Endpoint(ep.clone()));
            }
        }
        let mut entries = Vec::with_capacity(file.model.len());
        for (i, e) in file.model.into_iter().enumerate() {
            let bad = |reason: String| ListError::Entry {
                index: i + 1,
                repo: e.repo.clone(),
                reason,
            };
            entries.push(check_entry(&e).map_err(bad)?);
        }
        check_ref_conflicts(&entries)?;
        Ok(SyncList {
            endpoint: file.endpoint,
            entries,
        })
    }
}

fn check_entry(e: &EntryFile) -> Result<SyncEntry, String> {
    let repo = RepoId::parse(&e.repo).map_err(|err| err.to_string())?;
    let mut revision = e.revision.clone().unwrap_or_else(|| "main".to_string());
    check_revision(&revision)?;
    if revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()) {
        // The Hub writes commits in lower case and answers for them so.
        revision.make_ascii_lowercase();
    }
    Selection::new(&e.include, &e.exclude)?;
    for r in &e.refs {
        check_ref_name(r).map_err(|err| format!("refs: {err}"))?;
    }
    Ok(SyncEntry {
        repo,
        revision,
        include: e.include.clone(),
        exclude: e.exclude.clone(),
        refs: e.refs.clone(),
    })
}

/// A revision is a full commit sha (40 hex digits) or a ref name. A run of 7 or more hex
/// digits of another length reads as an abbreviated or mistyped sha, which the Hub does
/// not resolve; it is refused rather than looked up as a branch.
fn check_revision(rev: &str) -> Result<(), String> {
    let hex = rev.bytes().all(|b| b.is_ascii_hexdigit());
    if rev.len() == 40 && hex {
        return CommitId::parse(rev).map(|_| ()).map_err(|e| e.to_string());
    }
    if hex && rev.len() >= 7 {
        return Err(format!(
            "revision {rev:?} looks like a commit sha but is not 40 hex digits"
        ));
    }
    check_ref_name(rev).map_err(|e| format!("revision {rev:?}: {e}"))
}

/// Refs an entry sets: the revision's own name (unless a sha), then its `refs`.
fn entry_refs(e: &SyncEntry) -> Vec<&str> {
    let mut out = Vec::new();
    if !hubclient::url::is_commit(&e.revision) {
        out.push(e.revision.as_str());
    }
    out.extend(e.refs.iter().map(String::as_str));
    out
}

/// Two entries may not point one ref of a repository at different revisions.
fn check_ref_conflicts(entries: &[SyncEntry]) -> Result<(), ListError> {
    let mut seen: HashMap<(&RepoId, &str), usize> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        for r in entry_refs(e) {
            match seen.get(&(&e.repo, r)) {
                Some(&j) if entries[j].revision != e.revision => {
                    return Err(ListError::Entry {
                        index: i + 1,
                        repo: e.repo.to_string(),
                        reason: format!(
                            "ref {r:?} is also set by entry {} to revision {:?}",
                            j + 1,
                            entries[j].revision
                        ),
                    });
                }
                Some(_) => {}
                None => {
                    seen.insert((&e.repo, r), i);
                }
            }
        }
    }
    Ok(())
}

/// What happened to one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A revision the store did not have was pulled.
    Pulled,
    /// Already stored; some ref now points at it that did not before.
    RefsMoved,
    /// Already stored, refs already as the list says.
    Unchanged,
    /// The pull failed; nothing of it became visible.
    Failed,
    /// Stored, but its release check did not pass: the entry's refs were left where they
    /// were (`sync --force` moves them).
    HeldBack,
}

impl Status {
    /// The word printed by `modelcas sync`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pulled => "pulled",
            Status::RefsMoved => "refs moved",
            Status::Unchanged => "unchanged",
            Status::Failed => "failed",
            Status::HeldBack => "held back",
        }
    }
}

/// One entry's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct EntryReport {
    pub repo: String,
    pub revision: String,
    /// The commit the revision named upstream (absent when that was not found out).
    pub commit: Option<String>,
    pub status: Status,
    /// Refs that point at the commit now and did not before.
    pub refs_moved: Vec<String>,
    /// Files and bytes of the revision as selected.
    pub files: usize,
    pub bytes: u64,
    /// Bytes received from the upstream.
    pub bytes_downloaded: u64,
    /// Uncompressed bytes of chunks the store did not have.
    pub bytes_stored_new: u64,
    /// Why the entry failed, or was held back (the release check's errors).
    pub error: Option<String>,
    /// The revision's release check.
    pub check: Option<store::listing::RowCheck>,
    /// Refs the release check held back.
    pub refs_held: Vec<String>,
}

/// What a sync did (`--json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SyncReport {
    pub endpoint: String,
    pub entries: Vec<EntryReport>,
    pub pulled: usize,
    pub refs_moved: usize,
    pub unchanged: usize,
    pub failed: usize,
    /// Entries stored whose refs were held back by a failing release check.
    pub held_back: usize,
    pub bytes_downloaded: u64,
    /// Nothing was downloaded or changed (`--dry-run`): statuses say what would be done.
    pub dry_run: bool,
}

/// Runs every entry of `list` through [`pull`] (`jobs` files at a time within each).
pub fn sync(
    store: &Store,
    index: &Index,
    client: &HubClient,
    list: &SyncList,
    jobs: usize,
    force: bool,
    progress: &dyn Progress,
) -> SyncReport {
    let mut report = SyncReport {
        endpoint: client.endpoint().to_string(),
        ..Default::default()
    };
    for (i, e) in list.entries.iter().enumerate() {
        let _span = tracing::info_span!("sync", entry = i + 1, repo = %e.repo).entered();
        let r = sync_entry(store, index, client, e, (jobs, force), progress);
        if let Some(err) = &r.error {
            tracing::error!("{}@{}: {err}", r.repo, r.revision);
        }
        report.count(r);
    }
    report
}

impl SyncReport {
    /// Adds one entry's outcome to the totals.
    fn count(&mut self, r: EntryReport) {
        match r.status {
            Status::Pulled => self.pulled += 1,
            Status::RefsMoved => self.refs_moved += 1,
            Status::Unchanged => self.unchanged += 1,
            Status::Failed => self.failed += 1,
            Status::HeldBack => self.held_back += 1,
        }
        self.bytes_downloaded += r.bytes_downloaded;
        self.entries.push(r);
    }
}

impl EntryReport {
    /// A failed entry with nothing known yet.
    fn new(e: &SyncEntry) -> EntryReport {
        EntryReport {
            repo: e.repo.to_string(),
            revision: e.revision.clone(),
            commit: None,
            status: Status::Failed,
            refs_moved: Vec::new(),
            files: 0,
            bytes: 0,
            bytes_downloaded: 0,
            bytes_stored_new: 0,
            error: None,
            check: None,
            refs_held: Vec::new(),
        }
    }
}

fn sync_entry(
    store: &Store,
    index: &Index,
    client: &HubClient,
    e: &SyncEntry,
    (jobs, force): (usize, bool),
    progress: &dyn Progress,
) -> EntryReport {
    let mut out = EntryReport::new(e);
    let opts = PullOptions {
        repo: e.repo.clone(),
        revision: e.revision.clone(),
        include: e.include.clone(),
        exclude: e.exclude.clone(),
        refs: e.refs.clone(),
        jobs,
        slots: None,
        hold_failing_refs: !force,
    };
    let pulled = stored_refs(store, &e.repo)
        .map_err(|err| error_chain(&err))
        .and_then(|before| {
            let r = pull(store, index, client, &opts, progress).map_err(|err| error_chain(&err))?;
            Ok((before, r))
        });
    match pulled {
        Ok((before, r)) => fill(&mut out, &before, r),
        Err(text) => out.error = Some(text),
    }
    out
}

/// The entry's report from a successful pull and the refs as they were before it.
fn fill(out: &mut EntryReport, before: &BTreeMap<String, CommitId>, r: PullReport) {
    out.refs_moved = r
        .refs
        .iter()
        .filter(|name| before.get(*name).map(CommitId::to_hex).as_ref() != Some(&r.commit))
        .cloned()
        .collect();
    out.status = if r.new_revision {
        Status::Pulled
    } else if !out.refs_moved.is_empty() {
        Status::RefsMoved
    } else {
        Status::Unchanged
    };
    if !r.refs_held.is_empty() {
        out.status = Status::HeldBack;
        out.error = Some(format!(
            "release check {}: refs {} not moved (sync --force moves them): {}",
            r.check.verdict,
            r.refs_held.join(", "),
            r.check.problems.join("; ")
        ));
    } else if r.check.verdict == "failed" {
        tracing::warn!(
            "{}@{} fails its release check{}: {}",
            r.repo,
            r.commit,
            if r.refs.is_empty() {
                ""
            } else {
                " (its refs point at it)"
            },
            r.check.problems.join("; ")
        );
    }
    out.check = Some(r.check);
    out.refs_held = r.refs_held;
    out.commit = Some(r.commit);
    out.files = r.files;
    out.bytes = r.bytes;
    out.bytes_downloaded = r.bytes_downloaded;
    out.bytes_stored_new = r.bytes_stored_new;
}

/// What [`sync`] would do, without downloading or changing anything: each entry's
/// revision is resolved upstream and compared with the store (`--dry-run`). An entry
/// whose commit is stored only with other files is still reported `unchanged` or
/// `refs_moved` here; the real run refuses it.
pub fn plan(store: &Store, client: &HubClient, list: &SyncList) -> SyncReport {
    let mut report = SyncReport {
        endpoint: client.endpoint().to_string(),
        dry_run: true,
        ..Default::default()
    };
    for e in &list.entries {
        let mut out = EntryReport::new(e);
        match plan_entry(store, client, e) {
            Ok((commit, moved, stored)) => {
                out.status = match (stored, moved.is_empty()) {
                    (false, _) => Status::Pulled,
                    (true, false) => Status::RefsMoved,
                    (true, true) => Status::Unchanged,
                };
                out.commit = Some(commit);
                out.refs_moved = moved;
            }
            Err(text) => out.error = Some(text),
        }
        report.count(out);
    }
    report
}

/// The entry's commit upstream, the refs that would move, and whether it is stored.
fn plan_entry(
    store: &Store,
    client: &HubClient,
    e: &SyncEntry,
) -> Result<(String, Vec<String>, bool), String> {
    let commit = client
        .commit(&e.repo.to_string(), &e.revision)
        .map_err(|err| error_chain(&err))?;
    let id = CommitId::parse(&commit).map_err(|err| err.to_string())?;
    let stored = store
        .has_commit(&e.repo, &id)
        .map_err(|err| error_chain(&err))?;
    let before = stored_refs(store, &e.repo).map_err(|err| error_chain(&err))?;
    let moved = entry_refs(e)
        .into_iter()
        .filter(|r| before.get(*r) != Some(&id))
        .map(str::to_string)
        .collect();
    Ok((commit, moved, stored))
}

/// A repository's refs; none when the store does not know the repository yet.
fn stored_refs(store: &Store, repo: &RepoId) -> Result<BTreeMap<String, CommitId>, StoreError> {
    match store.refs(repo) {
        Err(StoreError::UnknownRepo(_)) => Ok(BTreeMap::new()),
        other => other,
    }
}

/// An error and its sources, `: `-separated (the report carries text, not types).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        next = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_list_parses_with_defaults() {
        let l = SyncList::parse(&format!(
            "endpoint = \"http://hub\"\n[[model]]\nrepo = \"a/b\"\ninclude = [\"*.json\"]\n\n[[model]]\nrepo = \"a/c\"\nrevision = \"{SHA}\"\nrefs = [\"stable\"]\n"
        ))
        .unwrap();
        assert_eq!(l.endpoint.as_deref(), Some("http://hub"));
        assert_eq!(l.entries.len(), 2);
        assert_eq!(l.entries[0].revision, "main");
        assert_eq!(l.entries[0].include, ["*.json"]);
        assert_eq!(l.entries[1].refs, ["stable"]);
        assert_eq!(entry_refs(&l.entries[1]), ["stable"]);
        let upper = SyncList::parse(&format!(
            "[[model]]\nrepo = \"a/b\"\nrevision = \"{}\"\n",
            SHA.to_ascii_uppercase()
        ))
        .unwrap();
        assert_eq!(upper.entries[0].revision, SHA);
    }

    #[test]
    fn bad_lists_name_the_entry() {
        let cases = [
            ("[[model]]\nrepo = \"a/b\"\nrevison = \"main\"\n", "revison"),
            ("[[model]]\nrepo = \"a/b\"\n[[model]]\nrepo = \"a b/c\"\n", "entry 2 (a b/c)"),
            ("[[model]]\nrepo = \"a/b\"\nrevision = \"0123456789abcdef0123\"\n", "entry 1 (a/b)"),
            ("[[model]]\nrepo = \"a/b\"\nrefs = [\"x..y\"]\n", "entry 1 (a/b)"),
            ("[[model]]\nrepo = \"a/b\"\ninclude = [\"[\"]\n", "entry 1 (a/b)"),
            ("[[model]]\nrepo = \"a/b\"\n[[model]]\nrepo = \"a/b\"\nrevision = \"v2\"\nrefs = [\"main\"]\n", "entry 2 (a/b)"),
            ("endpoint = \"x\"\n", "no [[model]]"),
            ("models = []\n", "models"),
            ("endpoint = \"hub.local\"\n[[model]]\nrepo = \"a/b\"\n", "hub.local"),
        ];
        for (text, want) in cases {
            let err = SyncList::parse(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }
}
