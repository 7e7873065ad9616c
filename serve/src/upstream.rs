//! The pull-through mirror (`modelcas serve --upstream URL`) and the repository policy
//! (`--allow`, `[serve.locks]`).
//!
//! The endpoint does not talk to the upstream itself: the binary gives it an [`Upstream`]
//! (the `modelcas` CLI implements it with `mirror::pull` and the Hub client), so this crate
//! stays free of the index, the writers and the HTTP client. [`Mirror`] decides when to ask:
//!
//! - **Commits never change.** A full sha the store holds is served without any upstream
//!   request; a sha it lacks is pulled once.
//! - **Ref names** (branches, tags) are resolved upstream and the answer is kept for the
//!   TTL (`--upstream-ttl`): within it, no upstream request. After a successful
//!   resolution the store's ref is moved to the upstream's commit, so that it answers when
//!   the upstream is down; only a ref the mirror set itself is moved, and only a
//!   repository it brought (or `upstream_repos` names) is looked up at all
//!   (`hub/policy.rs`).
//! - **Single flight, off the request threads.** Concurrent requests for the same ref
//!   name, or the same commit, wait for the one resolution or pull in progress, so N
//!   clients asking at once for a new revision cause one upstream transfer. Resolutions
//!   and pulls run on pools of their own ([`RESOLVE_THREADS`], [`PULL_THREADS`]) and the
//!   requests waiting for them hold no thread ([`flight`]): a slow upstream never takes
//!   the threads that serve stored files and `/metrics`, and every waiter gets a result
//!   (an operation that panics fails its waiters instead of hanging them).
//! - **Failures fall back to the store.** When the upstream is unreachable or errors, a
//!   stored ref or commit still answers; the failure is logged once (and again only when
//!   it changes), and retried after [`FAILURE_RETRY`] at most.
//!
//! A pull publishes the revision only when every file is in and checked (`mirror::pull`
//! writes the manifest last), so no request ever sees half of one. What the mirror did
//! lately (pulls, upstream failures) is kept in memory for the mirror page ([`recent`]).

pub mod flight;
pub mod recent;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quick_cache::sync::Cache;

use format::{CommitId, RepoId};

use crate::metrics::METRICS;
use flight::{Flights, Outcome, Pool};
pub use flight::{Wait, Waits};
use recent::Recent;

/// Threads resolving ref names upstream (small, quick requests: not queued behind pulls).
pub const RESOLVE_THREADS: usize = 4;
/// Pulls of different revisions at once (their downloads share `--upstream-jobs` slots).
pub const PULL_THREADS: usize = 8;
/// Operations that may wait for a thread of either pool; beyond, a request is told the
/// mirror is busy at once.
pub const QUEUED_OPERATIONS: usize = 256;

/// How long a failed upstream resolution is remembered (the store answers meanwhile), so
/// that a down upstream is not asked again by every request.
pub const FAILURE_RETRY: Duration = Duration::from_secs(5);

/// Most ref names whose upstream answer is remembered (a miss asks the upstream again).
pub const REF_CACHE: usize = 4096;

/// Most distinct upstream failures remembered as logged while the upstream fails (past
/// it, a failure evicted is logged again).
pub const WARNED_MAX: usize = 256;

/// Why the upstream could not answer. Clonable: every request waiting on one flight gets
/// the same result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream says the repository does not exist (or is not visible).
    #[error("{0}")]
    RepoNotFound(String),
    /// The upstream says the revision does not exist.
    #[error("{0}")]
    RevisionNotFound(String),
    /// The upstream could not be reached or failed (network, 5xx, bad answer, a pull that
    /// did not complete).
    #[error("{0}")]
    Unavailable(String),
    /// Still in flight: the request waits for it (without a thread) and is routed again.
    /// Never shown to a client (see [`flight`]).
    #[error("waiting for the upstream")]
    Pending,
}

impl UpstreamError {
    /// The failure's `kind` label in the `serve_upstream_errors` metric; none for
    /// [`UpstreamError::Pending`], which is not a failure.
    pub fn metric_kind(&self) -> Option<&'static str> {
        match self {
            UpstreamError::RepoNotFound(_) => Some("repo_not_found"),
            UpstreamError::RevisionNotFound(_) => Some("revision_not_found"),
            UpstreamError::Unavailable(_) => Some("unavailable"),
            UpstreamError::Pending => None,
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Outcome for Result<T, UpstreamError> {
    fn failed(why: String) -> Self {
        Err(UpstreamError::Unavailable(why))
    }
    fn pending() -> Self {
        Err(UpstreamError::Pending)
    }
}

/// What the endpoint needs from an upstream Hub.
pub trait Upstream: Send + Sync {
    /// The upstream's URL, for messages.
    fn endpoint(&self) -> &str;
    /// The commit that `rev` (a branch or tag name, or a sha) of `repo` names upstream.
    fn resolve(&self, repo: &RepoId, rev: &str) -> Result<CommitId, UpstreamError>;
    /// Brings every file of `commit` into the store and publishes it only when all are in
    /// and checked; returns the bytes received from the upstream.
    fn fetch(&self, repo: &RepoId, commit: &CommitId) -> Result<u64, UpstreamError>;
}

/// Which repositories the endpoint answers for, revisions pinned by configuration, and
/// which repositories the mirror may look up upstream. Repository ids are compared as the
/// Hub compares them: without ASCII case (`My-Org/LLM` is `my-org/llm`).
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// `--allow` patterns (`org/*`, `org/name`; `*` matches any characters). Empty: all.
    pub allow: Vec<String>,
    /// `[serve.locks]`: every ref name of the repository resolves to this commit, and no
    /// other commit of it is served or fetched.
    pub locks: HashMap<RepoId, CommitId>,
    /// `upstream_repos` patterns: repositories the mirror looks up upstream even though
    /// they exist only inside the store (ingested, pulled, bundled). Empty: none.
    pub upstream_repos: Vec<String>,
    /// `serve --force`: a locked commit that failed its release check is served anyway
    /// (with a warning at start); without it such a commit answers 403
    /// `ReleaseCheckFailed` (docs/design/release-check.md §6).
    pub force_locks: bool,
}

impl Policy {
    /// Whether `repo` may be served (and fetched).
    pub fn allows(&self, repo: &str) -> bool {
        self.allow.is_empty() || self.allow.iter().any(|p| glob_folded(p, repo))
    }

    /// The commit `repo` is locked to, whatever the case of either spelling.
    pub fn lock_of(&self, repo: &RepoId) -> Option<CommitId> {
        self.locks
            .iter()
            .find(|(r, _)| r.same_repo(repo))
            .map(|(_, c)| *c)
    }

    /// Whether the mirror may look `repo` up upstream though it exists only inside.
    pub fn looks_up(&self, repo: &str) -> bool {
        self.upstream_repos.iter().any(|p| glob_folded(p, repo))
    }
}

/// [`glob`] without ASCII case, as the Hub compares repository ids.
pub(crate) fn glob_folded(pattern: &str, s: &str) -> bool {
    glob(&pattern.to_ascii_lowercase(), &s.to_ascii_lowercase())
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, s: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == s;
    };
    let Some(mut tail) = s.strip_prefix(head) else {
        return false;
    };
    loop {
        if glob(rest, tail) {
            return true;
        }
        let mut chars = tail.chars();
        if chars.next().is_none() {
            return false;
        }
        tail = chars.as_str();
    }
}

/// How the mirror asks its upstream.
#[derive(Clone)]
pub struct UpstreamOptions {
    pub upstream: Arc<dyn Upstream>,
    /// How long a ref name's upstream commit is trusted without asking again.
    pub ttl: Duration,
}

impl std::fmt::Debug for UpstreamOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamOptions")
            .field("upstream", &self.upstream.endpoint())
            .field("ttl", &self.ttl)
            .finish()
    }
}

type RefKey = (RepoId, String);
type Resolved = Result<CommitId, UpstreamError>;

/// The mirror's state: the TTL cache of ref names, flights, the last failure logged.
pub struct Mirror {
    pub(crate) opts: UpstreamOptions,
    /// Ref name → the upstream's answer and when it came: at most [`REF_CACHE`].
    refs: Arc<Cache<RefKey, (Instant, Resolved)>>,
    resolving: Flights<RefKey, Resolved>,
    pulling: Flights<(RepoId, CommitId), Result<u64, UpstreamError>>,
    /// Failures already logged (logged again once the upstream answered).
    warned: Arc<Warned>,
    /// The last pulls and failures, for the mirror page.
    pub(crate) recent: Arc<Recent>,
}

impl Mirror {
    pub fn new(opts: UpstreamOptions) -> Mirror {
        let pool = |name, n| Pool::new(name, n, QUEUED_OPERATIONS);
        Mirror {
            opts,
            refs: Arc::new(Cache::new(REF_CACHE)),
            resolving: Flights::new(pool("upstream-resolve", RESOLVE_THREADS)),
            pulling: Flights::new(pool("upstream-pull", PULL_THREADS)),
            warned: Arc::new(warned()),
            recent: Arc::default(),
        }
    }

    /// The upstream's URL.
    pub fn endpoint(&self) -> &str {
        self.opts.upstream.endpoint()
    }

    /// The commit `rev` names upstream: from the TTL cache, else asked once for all the
    /// callers waiting on it. The flag is true when this call asked the upstream.
    pub fn resolve(&self, repo: &RepoId, rev: &str) -> (Resolved, bool) {
        let key = (repo.clone(), rev.to_string());
        let fresh = |(at, r): &(Instant, Resolved)| {
            let keep = if r.is_ok() {
                self.opts.ttl
            } else {
                FAILURE_RETRY
            };
            at.elapsed() < keep
        };
        // A request routed again after waiting sees the answer it waited for.
        if let Some(done) = self.resolving.replay(&key) {
            return done;
        }
        if let Some(hit) = self.cached(&key).filter(fresh) {
            return (hit.1, false);
        }
        let (up, notes, refs) = (self.opts.upstream.clone(), self.notes(), self.refs.clone());
        let (repo, rev, k) = (repo.clone(), rev.to_string(), key.clone());
        self.resolving.run(&key, move || {
            let r = up.resolve(&repo, &rev);
            notes.note(&r, &format!("resolving {repo}@{rev}"), "resolve");
            refs.insert(k, (Instant::now(), r.clone()));
            r
        })
    }

    fn cached(&self, key: &RefKey) -> Option<(Instant, Resolved)> {
        self.refs.get(key)
    }

    /// Pulls `commit` once, whoever else asks meanwhile: the bytes received and whether
    /// this caller ran the pull.
    pub fn fetch(&self, repo: &RepoId, commit: &CommitId) -> (Result<u64, UpstreamError>, bool) {
        let (up, notes) = (self.opts.upstream.clone(), self.notes());
        let (repo, commit) = (repo.clone(), *commit);
        let recent = self.recent.clone();
        self.pulling.run(&(repo.clone(), commit), move || {
            let start = Instant::now();
            let r = up.fetch(&repo, &commit);
            let ms = start.elapsed().as_millis() as u64;
            let shown = r.clone().map_err(|e| e.to_string());
            recent.pull(&repo.to_string(), &commit.to_hex(), shown, ms);
            notes.note(&r, &format!("pulling {repo}@{}", commit.to_hex()), "pull");
            METRICS.upstream_pull(r.is_ok(), *r.as_ref().unwrap_or(&0));
            if let Ok(bytes) = &r {
                tracing::info!(
                    repo = %repo, commit = %commit.to_hex(), bytes,
                    seconds = start.elapsed().as_secs_f64(),
                    "pulled from the upstream {}", up.endpoint()
                );
            }
            r
        })
    }

    /// The pull of `commit` that the request being routed waited for, if it succeeded,
    /// and whether this request started it: a request routed again after its wait finds
    /// the commit stored, and is still the miss that caused the pull.
    pub fn waited_for_pull(
        &self,
        repo: &RepoId,
        commit: &CommitId,
    ) -> Option<(Result<u64, UpstreamError>, bool)> {
        self.pulling
            .replay(&(repo.clone(), *commit))
            .filter(|(r, _)| r.is_ok())
    }

    fn notes(&self) -> Notes {
        Notes {
            warned: self.warned.clone(),
            endpoint: self.endpoint().to_string(),
            recent: self.recent.clone(),
        }
    }
}

/// The failures logged while the upstream fails, at most [`WARNED_MAX`]: one lock around
/// the check and the insert, so that each is logged once, and the recovery once.
type Warned = Mutex<quick_cache::unsync::Cache<String, ()>>;

fn warned() -> Warned {
    Mutex::new(quick_cache::unsync::Cache::new(WARNED_MAX))
}

/// What an operation on the pool needs to log its outcome.
struct Notes {
    warned: Arc<Warned>,
    endpoint: String,
    recent: Arc<Recent>,
}

impl Notes {
    /// Counts a failure and logs it once (per message), and a recovery once.
    fn note<T>(&self, r: &Result<T, UpstreamError>, what: &str, op: &'static str) {
        if let Some(kind) = r.as_ref().err().and_then(UpstreamError::metric_kind) {
            METRICS.upstream_error(op, kind);
            if let Err(e) = r {
                self.recent.failure(op, what, &e.to_string());
            }
        }
        let mut warned = self.warned.lock();
        if let Err(UpstreamError::Unavailable(e)) = r {
            if !warned.contains_key(e) {
                warned.insert(e.clone(), ());
                tracing::warn!(
                    "upstream {} failed {what}: {e}; serving what is stored",
                    self.endpoint
                );
            }
        } else if !warned.is_empty() {
            warned.clear();
            tracing::info!("upstream {} answers again", self.endpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mirror_s_caches_keep_to_their_bounds() {
        let refs: Cache<RefKey, (Instant, Resolved)> = Cache::new(REF_CACHE);
        assert_eq!(refs.capacity(), REF_CACHE as u64);
        let n = REF_CACHE * 10;
        let repo = RepoId::parse("org/model").unwrap();
        let key = |i: usize| (repo.clone(), format!("branch-{i}"));
        let mut most = 0;
        for i in 0..n {
            let failed = Err(UpstreamError::Unavailable(format!("failure {i}")));
            refs.insert(key(i), (Instant::now(), failed));
            most = most.max(refs.len());
            assert!(refs.len() <= REF_CACHE, "{} refs", refs.len());
            assert!(refs.peek(&key(i)).is_some(), "ref {i} just inserted");
        }
        assert!(refs.len() > REF_CACHE / 2);
        assert!(refs.get(&key(n - 1)).is_some(), "the last ref answered");
        println!(
            "cache-bound serve upstream refs: bound {REF_CACHE} entries; after {n} inserts: {} entries \
             (at most {most})",
            refs.len()
        );
        let notes = Notes {
            warned: Arc::new(warned()),
            endpoint: "http://upstream".into(),
            recent: Arc::default(),
        };
        assert_eq!(notes.warned.lock().capacity(), WARNED_MAX as u64);
        let n = WARNED_MAX * 10;
        let mut most = 0;
        for i in 0..n {
            let r: Result<(), _> = Err(UpstreamError::Unavailable(format!("failure {i}")));
            notes.note(&r, "resolving org/model@main", "resolve");
            most = most.max(notes.warned.lock().len());
            assert!(notes.warned.lock().len() <= WARNED_MAX);
            // The failure just logged is remembered: the same one again is not logged.
            assert!(notes.warned.lock().contains_key(&format!("failure {i}")));
        }
        let kept = notes.warned.lock().len();
        assert!(kept > WARNED_MAX / 2);
        println!(
            "cache-bound serve upstream warned: bound {WARNED_MAX} entries; after {n} inserts: {kept} entries \
             (at most {most})"
        );
        // The upstream answers: every failure is forgotten.
        notes.note(
            &Ok::<(), UpstreamError>(()),
            "resolving org/model@main",
            "resolve",
        );
        assert_eq!(notes.warned.lock().len(), 0);
    }

    #[test]
    fn globs() {
        let p = Policy {
            allow: vec!["demo-org/*".into(), "x/exact".into()],
            ..Policy::default()
        };
        assert!(p.allows("demo-org/demo-llm"));
        assert!(p.allows("x/exact"));
        assert!(!p.allows("x/exact2"));
        assert!(!p.allows("other/demo-org"));
        assert!(glob("*-llm", "a/b-llm"));
        assert!(glob("a*b*c", "axxbyyc"));
        assert!(!glob("a*b*c", "axxbyy"));
        assert!(Policy::default().allows("any/thing"));
        assert!(p.allows("Demo-Org/Demo-LLM"), "ids compare without case");
        assert!(p.allows("X/EXACT"));
        let c = CommitId([7; 20]);
        let locked = Policy {
            locks: [(RepoId::parse("Org/Model").unwrap(), c)].into(),
            upstream_repos: vec!["Acme/*".into()],
            ..Policy::default()
        };
        assert_eq!(
            locked.lock_of(&RepoId::parse("org/MODEL").unwrap()),
            Some(c)
        );
        assert_eq!(locked.lock_of(&RepoId::parse("org/model2").unwrap()), None);
        assert!(locked.looks_up("acme/internal") && !locked.looks_up("other/x"));
        assert!(!Policy::default().looks_up("any/thing"));
    }
}
