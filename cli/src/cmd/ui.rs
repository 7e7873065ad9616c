//! The figures of `serve`'s pages ([`hubserve::ui::Inventory`]), from the functions the
//! commands use: the rows of `modelcas ls ORG/NAME` ([`store::listing::rows`]), `modelcas
//! stats` ([`store::stats`]), and gc's retention decision with the options `modelcas gc
//! --dry-run` takes: the config file's settings ([`crate::config::gc_settings`]) with the
//! page's `--unused-for` as a typed flag on top ([`store::gc::GcSettings::options`],
//! [`store::gc::verdicts`]). Nothing is recomputed here, so a page shows what those
//! commands print for the same store. This module only turns store values into the
//! pages' facts: `serve` must not depend on `store` (RocksDB), nor `store` on `serve`.

use std::collections::BTreeMap;
use std::time::Duration;

use format::{CommitId, RepoId};
use hubserve::ui::facts::{
    self, CheckFacts, Figures, ReleaseVerdict, RepoDetail, RepoSummary, Revision, StoreFacts,
    Verdict,
};
use hubserve::ui::Inventory;
use repo::Store;
use store::gc::retention::Policy;
use store::gc::{GcFlags, GcOptions, GcSettings};

/// The store, and gc's settings from the config file `serve` was started with (or why
/// they cannot be read).
pub struct StoreInventory {
    store: Store,
    gc: Result<GcSettings, String>,
}

impl StoreInventory {
    pub fn new(store: Store, gc: Result<GcSettings, String>) -> StoreInventory {
        StoreInventory { store, gc }
    }

    /// The options of `modelcas gc --dry-run [--unused-for D]` with this config.
    fn gc_options(&self, unused_for: Option<Duration>) -> Result<GcOptions, String> {
        let flags = GcFlags {
            policy: Policy {
                unused_for,
                ..Policy::default()
            },
            dry_run: true,
            ..GcFlags::default()
        };
        let settings = self.gc.as_ref().map_err(String::clone)?;
        settings.options(&flags).map_err(text)
    }

    /// gc's decision for each commit of `repo` under each of `opts` (read once), in words.
    fn verdicts(
        &self,
        repo: &RepoId,
        opts: &[&Result<GcOptions, String>],
    ) -> Vec<BTreeMap<CommitId, Verdict>> {
        let mut usable = Vec::new();
        for o in opts {
            match o {
                Ok(o) => usable.push(o),
                Err(e) => return vec![unknown_all(&self.store, repo, e); opts.len()],
            }
        }
        let mut out = vec![BTreeMap::new(); opts.len()];
        match store::gc::verdicts(&self.store, repo, &usable) {
            Ok(v) => {
                for r in v {
                    for (i, keep) in r.keep.into_iter().enumerate() {
                        let v = keep.map_or(Verdict::Expire, |k| Verdict::Keep(k.reason().into()));
                        out[i].insert(r.commit, v);
                    }
                }
                out
            }
            Err(e) => vec![unknown_all(&self.store, repo, &e.to_string()); opts.len()],
        }
    }
}

fn unknown_all(store: &Store, repo: &RepoId, why: &str) -> BTreeMap<CommitId, Verdict> {
    let commits = store.commits(repo).unwrap_or_default();
    commits
        .into_iter()
        .map(|c| (c, Verdict::Unknown(why.to_string())))
        .collect()
}

/// The page's view of a listing row's release check.
fn check_facts(c: &store::listing::RowCheck) -> CheckFacts {
    let verdict = match c.verdict {
        v if v == ReleaseVerdict::Passed.as_str() => ReleaseVerdict::Passed,
        v if v == ReleaseVerdict::Warnings.as_str() => ReleaseVerdict::Warnings,
        v if v == ReleaseVerdict::Failed.as_str() => ReleaseVerdict::Failed,
        _ => ReleaseVerdict::NotChecked,
    };
    CheckFacts {
        verdict,
        errors: c.errors,
        warnings: c.warnings,
        problems: c.problems.clone(),
    }
}

/// How many of `refs` name a revision whose current release check record failed: a GET
/// of the manifest (through the pages' manifest cache) and of the record per commit named.
fn failing_refs(
    store: &Store,
    repo: &RepoId,
    refs: &BTreeMap<String, CommitId>,
) -> repo::Result<usize> {
    let mut failing = BTreeMap::new();
    for c in refs.values() {
        if failing.contains_key(c) {
            continue;
        }
        let fails = match store.manifest(repo, c) {
            Ok(m) => store
                .current_check(&m)?
                .is_some_and(|k| k.verdict() == ReleaseVerdict::Failed),
            // A ref to a commit removed meanwhile (or never stored) names no failing one.
            Err(repo::StoreError::UnknownRevision { .. }) => false,
            Err(e) => return Err(e),
        };
        failing.insert(*c, fails);
    }
    Ok(refs.values().filter(|c| failing[*c]).count())
}

fn figures(s: &store::stats::Stats) -> Figures {
    Figures {
        files: s.files,
        logical_bytes: s.logical_bytes,
        unique_chunks: s.unique_chunks,
        unique_bytes: s.unique_bytes,
        compressed_bytes: s.compressed_bytes,
        dedup_ratio: s.dedup_ratio(),
        compression_ratio: s.compression_ratio(),
    }
}

/// The recorded last run of `command`.
fn last_run(store: &Store, command: &str) -> Result<Option<facts::LastRun>, String> {
    let r = store::runs::read(store.backend().as_ref(), command).map_err(text)?;
    Ok(r.map(|r| facts::LastRun {
        started_at: r.started_at,
        finished_at: r.finished_at,
        ok: r.ok,
        summary: r.summary,
    }))
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The policy of `repo` in words, as gc applies it.
fn policy_text(opts: &Result<GcOptions, String>, repo: &RepoId) -> String {
    match opts {
        Ok(o) => o.retention.policy(repo).describe(),
        Err(_) => "not readable from the config file".into(),
    }
}

impl Inventory for StoreInventory {
    fn repos(&self) -> facts::Result<Vec<RepoSummary>> {
        let mut out = Vec::new();
        for repo in self.store.repos().map_err(text)? {
            let s = store::stats::repo_stats(&self.store, &repo).map_err(text)?;
            let refs = self.store.refs(&repo).map_err(text)?;
            let failing_refs = failing_refs(&self.store, &repo, &refs).map_err(text)?;
            let used = repo::usage::last_used(&self.store, &repo).map_err(text)?;
            let last_used = used
                .values()
                .filter_map(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .max();
            out.push(RepoSummary {
                repo: repo.to_string(),
                revisions: s.commits,
                refs: refs.into_keys().collect(),
                figures: figures(&s),
                last_used,
                failing_refs,
            });
        }
        Ok(out)
    }

    fn repo(&self, repo: &RepoId, unused_for: Duration) -> facts::Result<Option<RepoDetail>> {
        let Some((_, rows)) = store::listing::rows(&self.store, repo).map_err(text)? else {
            return Ok(None);
        };
        let pins = self.store.pins(repo).map_err(text)?;
        let configured = self.gc_options(None);
        let asked = self.gc_options(Some(unused_for));
        let mut both = self.verdicts(repo, &[&configured, &asked]).into_iter();
        let mut policy = both.next().unwrap_or_default();
        let mut unused = both.next().unwrap_or_default();
        let mut revisions = Vec::new();
        for r in rows {
            let commit = CommitId::parse(&r.commit).map_err(text)?;
            let gone = || Verdict::Unknown("removed meanwhile".into());
            revisions.push(Revision {
                commit,
                ingested_at: r.ingested_at,
                files: r.files,
                bytes: r.bytes,
                refs: r.refs,
                pinned: pins.contains(&commit),
                last_used: r.last_used,
                policy: policy.remove(&commit).unwrap_or_else(gone),
                unused_for: unused.remove(&commit).unwrap_or_else(gone),
                check: check_facts(&r.check),
                labels: r.labels,
            });
        }
        Ok(Some(RepoDetail {
            repo: repo.to_string(),
            revisions,
            policy: policy_text(&configured, repo),
        }))
    }

    fn store(&self) -> facts::Result<StoreFacts> {
        let s = store::stats::stats(&self.store).map_err(text)?;
        let state = store::gc::state::read(self.store.backend().as_ref()).map_err(text)?;
        let would_expire = match self.gc_options(None) {
            Err(e) => Err(e),
            Ok(opts) => (|| {
                let (mut n, mut bytes) = (0usize, 0u64);
                for repo in self.store.repos()? {
                    for r in store::gc::verdicts(&self.store, &repo, &[&opts])? {
                        if r.keep.first().is_some_and(Option::is_none) {
                            n += 1;
                            bytes += r.bytes;
                        }
                    }
                }
                Ok::<_, repo::StoreError>((n, bytes))
            })()
            .map_err(text),
        };
        Ok(StoreFacts {
            location: self.store.backend().location(),
            repos: s.repos,
            revisions: s.commits,
            figures: figures(&s),
            packs: s.packs,
            stored_bytes: s.stored_bytes,
            total_ratio: s.total_ratio(),
            condemned_packs: state.condemned.len() as u64,
            condemned_bytes: state.condemned.iter().map(|c| c.size).sum(),
            gc_state_written_ms: (state.written_ms > 0).then_some(state.written_ms),
            would_expire,
            runs: format::runs::COMMANDS
                .iter()
                .map(|c| (c.to_string(), last_run(&self.store, c)))
                .collect(),
        })
    }

    fn min_unused_for(&self) -> Duration {
        repo::usage::MIN_UNUSED_FOR
    }
}
