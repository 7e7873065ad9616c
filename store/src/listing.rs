//! A repository as `modelcas ls ORG/NAME` lists it, and the pages of `serve` show it: its
//! refs, and its commits oldest first, each with when it was ingested, its files and
//! bytes, the refs naming it and when it was last used.

use format::RepoId;
use repo::handle::Store;
use repo::Result;

/// The refs of `repo` and its commits, oldest first, as `ls ORG/NAME` shows them (the
/// pages of `serve` show the same rows); `None`: the store has no such repository.
pub fn rows(store: &Store, repo: &RepoId) -> Result<Option<(Refs, Vec<Row>)>> {
    let commits = store.commits(repo)?;
    let refs = store.refs(repo)?;
    if commits.is_empty() && refs.is_empty() {
        return Ok(None);
    }
    let used = repo::usage::last_used(store, repo)?;
    let checks = store.repo_checks(repo)?;
    let mut labels = store.repo_labels(repo)?;
    let mut rows = Vec::new();
    for c in &commits {
        let m = store.manifest(repo, c)?;
        let check = checks
            .get(c)
            .filter(|k| k.files == format::release::files_digest(&m));
        rows.push(Row {
            check: RowCheck::of(check),
            labels: labels.remove(c).unwrap_or_default(),
            ingested_at: m.ingested_at,
            commit: c.to_hex(),
            files: m.files.len(),
            bytes: m.total_size(),
            refs: refs
                .iter()
                .filter(|(_, v)| *v == c)
                .map(|(k, _)| k.clone())
                .collect(),
            last_used: used.get(c).and_then(|t| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs())
            }),
        });
    }
    rows.sort_by(|a, b| (a.ingested_at, &a.commit).cmp(&(b.ingested_at, &b.commit)));
    Ok(Some((refs, rows)))
}

/// A repository's refs: name → commit.
pub type Refs = std::collections::BTreeMap<String, format::CommitId>;

/// One commit of `ls ORG/NAME`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Row {
    pub commit: String,
    pub ingested_at: u64,
    pub files: usize,
    pub bytes: u64,
    pub refs: Vec<String>,
    /// When a mount, serve, checkout, cat or pull last read it (the store's clock; `None`:
    /// never since last-use records exist).
    pub last_used: Option<u64>,
    /// Its release check.
    pub check: RowCheck,
    /// Its release labels.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// What a revision's release check record says, for listings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RowCheck {
    /// `passed`, `warnings`, `failed` or `not checked`.
    pub verdict: &'static str,
    pub errors: usize,
    pub warnings: usize,
    /// The rule set it was checked under (0: not checked).
    pub rules: u32,
    /// The problems' messages, errors first.
    pub problems: Vec<String>,
}

impl Default for RowCheck {
    /// Not checked.
    fn default() -> Self {
        RowCheck::of(None)
    }
}

impl RowCheck {
    /// The facts of `check` (the current record of the revision, if any).
    pub fn of(check: Option<&format::release::CheckObject>) -> RowCheck {
        match check {
            None => RowCheck {
                verdict: format::release::Verdict::NotChecked.as_str(),
                errors: 0,
                warnings: 0,
                rules: 0,
                problems: Vec::new(),
            },
            Some(c) => RowCheck {
                verdict: c.verdict().as_str(),
                errors: c.errors(),
                warnings: c.warnings(),
                rules: c.rules,
                problems: c.problems.iter().map(|p| p.message.clone()).collect(),
            },
        }
    }
}
