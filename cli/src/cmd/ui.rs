//! The figures of `serve`'s pages ([`hubserve::ui::Inventory`]), from the functions the
//! commands use: the rows of `modelcas ls ORG/NAME` ([`store::listing::rows`]), `modelcas
//! stats` ([`store::stats`]), and gc's retention decision with the options `modelcas gc
//! --dry-run` builds from the config file and flags ([`crate::config::gc_options`],
//! [`store::gc::verdicts`]). Nothing is recomputed here, so a page shows what those
//! commands print for the same store.

use std::collections::BTreeMap;
use std::time::Duration;

use format::{CommitId, RepoId};
use hubserve::ui::facts::{self, Figures, RepoDetail, RepoSummary, Revision, StoreFacts, Verdict};
use hubserve::ui::Inventory;
use repo::Store;
use store::gc::retention::Keep;
use store::gc::GcOptions;

use crate::args::GcArgs;
use crate::config::Config;

/// The store and the config file `serve` was started with.
pub struct StoreInventory {
    store: Store,
    config: Config,
}

impl StoreInventory {
    pub fn new(store: Store, config: Config) -> StoreInventory {
        StoreInventory { store, config }
    }

    /// The options of `modelcas gc --dry-run [--unused-for D]` with this config.
    fn gc_options(&self, unused_for: Option<Duration>) -> anyhow::Result<GcOptions> {
        let args = GcArgs {
            keep_last: None,
            keep_within: None,
            unused_for: unused_for.map(|d| humantime::format_duration(d).to_string()),
            grace: None,
            rewrite_below: None,
            dry_run: true,
            json: false,
        };
        crate::config::gc_options(&self.config, &args)
    }

    /// gc's decision for each commit of `repo` under each of `opts` (read once), in words.
    fn verdicts(
        &self,
        repo: &RepoId,
        opts: &[&anyhow::Result<GcOptions>],
    ) -> Vec<BTreeMap<CommitId, Verdict>> {
        let mut usable = Vec::new();
        for o in opts {
            match o {
                Ok(o) => usable.push(o),
                Err(e) => {
                    return vec![unknown_all(&self.store, repo, &format!("{e:#}")); opts.len()]
                }
            }
        }
        let mut out = vec![BTreeMap::new(); opts.len()];
        match store::gc::verdicts(&self.store, repo, &usable) {
            Ok(v) => {
                for r in v {
                    for (i, keep) in r.keep.into_iter().enumerate() {
                        let v = keep.map_or(Verdict::Expire, |k| Verdict::Keep(reason(k).into()));
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

/// Why gc keeps a revision, in words.
fn reason(k: Keep) -> &'static str {
    match k {
        Keep::Ref => "a ref points at it",
        Keep::Pin => "pinned or locked",
        Keep::Last => "among the keep_last newest",
        Keep::Within => "ingested within keep_within",
        Keep::Used => "used within unused_for",
        Keep::New => "not used yet, published within unused_for: too new to expire",
        Keep::NoPolicy => "no retention policy",
    }
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
fn policy_text(opts: &anyhow::Result<GcOptions>, repo: &RepoId) -> String {
    let Ok(o) = opts else {
        return "not readable from the config file".into();
    };
    let p = o.retention.policy(repo);
    if p.is_empty() {
        return "none (gc expires nothing; only modelcas rm removes revisions)".into();
    }
    let mut parts = Vec::new();
    if let Some(n) = p.keep_last {
        parts.push(format!("keep_last = {n}"));
    }
    if let Some(d) = p.keep_within {
        parts.push(format!("keep_within = {}", humantime::format_duration(d)));
    }
    if let Some(d) = p.unused_for {
        parts.push(format!("unused_for = {}", humantime::format_duration(d)));
    }
    parts.join(", ")
}

impl Inventory for StoreInventory {
    fn repos(&self) -> facts::Result<Vec<RepoSummary>> {
        let mut out = Vec::new();
        for repo in self.store.repos().map_err(text)? {
            let s = store::stats::repo_stats(&self.store, &repo).map_err(text)?;
            let refs = self.store.refs(&repo).map_err(text)?;
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
            Err(e) => Err(format!("{e:#}")),
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
            runs: store::runs::COMMANDS
                .iter()
                .map(|c| (c.to_string(), last_run(&self.store, c)))
                .collect(),
        })
    }

    fn min_unused_for(&self) -> Duration {
        repo::usage::MIN_UNUSED_FOR
    }
}
