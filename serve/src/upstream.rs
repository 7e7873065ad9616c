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
//! - **Single flight.** Concurrent requests for the same ref name, or the same commit,
//!   wait for the one resolution or pull in progress ([`Flights`]: a map of in-flight
//!   operations, each a mutex and condvar holding its result), so N clients asking at
//!   once for a new revision cause one upstream transfer.
//! - **Failures fall back to the store.** When the upstream is unreachable or errors, a
//!   stored ref or commit still answers; the failure is logged once (and again only when
//!   it changes), and retried after [`FAILURE_RETRY`] at most.
//!
//! A pull publishes the revision only when every file is in and checked (`mirror::pull`
//! writes the manifest last), so no request ever sees half of one.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use repo::{CommitId, RepoId};

use crate::metrics::METRICS;

/// How long a failed upstream resolution is remembered (the store answers meanwhile), so
/// that a down upstream is not asked again by every request.
pub const FAILURE_RETRY: Duration = Duration::from_secs(5);

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

/// The shared result of one operation in flight.
struct Flight<V> {
    result: Mutex<Option<V>>,
    done: Condvar,
}

/// Single flight: concurrent callers with the same key share one run of the operation.
pub struct Flights<K, V> {
    inflight: Mutex<HashMap<K, Arc<Flight<V>>>>,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for Flights<K, V> {
    fn default() -> Self {
        Flights {
            inflight: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Flights<K, V> {
    /// Runs `op` for `key`, or waits for the run already in progress and returns its
    /// result. The flag is true for the caller that ran it.
    pub fn run(&self, key: &K, op: impl FnOnce() -> V) -> (V, bool) {
        let (flight, leader) = {
            let mut map = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(key) {
                Some(f) => (f.clone(), false),
                None => {
                    let f = Arc::new(Flight {
                        result: Mutex::new(None),
                        done: Condvar::new(),
                    });
                    map.insert(key.clone(), f.clone());
                    (f, true)
                }
            }
        };
        if !leader {
            let mut r = flight.result.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(v) = r.as_ref() {
                    return (v.clone(), false);
                }
                r = flight.done.wait(r).unwrap_or_else(|p| p.into_inner());
            }
        }
        // The flight leaves the map even if `op` panics, so later callers run it again.
        let guard = Landing {
            flights: self,
            key: key.clone(),
        };
        let v = op();
        *flight.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(v.clone());
        flight.done.notify_all();
        drop(guard);
        (v, true)
    }
}

#[cfg(test)]
impl<K: Eq + Hash + Clone, V: Clone> Flights<K, V> {
    /// Callers waiting on the flight of `key` (besides its leader).
    fn joined(&self, key: &K) -> usize {
        let map = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        // One reference is the map's, one the leader's; each waiter holds one more.
        map.get(key)
            .map_or(0, |f| Arc::strong_count(f).saturating_sub(2))
    }
}

/// Removes a finished flight from the map.
struct Landing<'a, K: Eq + Hash, V> {
    flights: &'a Flights<K, V>,
    key: K,
}

impl<K: Eq + Hash, V> Drop for Landing<'_, K, V> {
    fn drop(&mut self) {
        let mut map = self
            .flights
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.remove(&self.key);
    }
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
fn glob_folded(pattern: &str, s: &str) -> bool {
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
    /// Ref name → the upstream's answer and when it came.
    refs: Mutex<HashMap<RefKey, (Instant, Resolved)>>,
    resolving: Flights<RefKey, Resolved>,
    pulling: Flights<(RepoId, CommitId), Result<u64, UpstreamError>>,
    /// Failures already logged (logged again once the upstream answered).
    warned: Mutex<HashSet<String>>,
}

impl Mirror {
    pub fn new(opts: UpstreamOptions) -> Mirror {
        Mirror {
            opts,
            refs: Mutex::new(HashMap::new()),
            resolving: Flights::default(),
            pulling: Flights::default(),
            warned: Mutex::new(HashSet::new()),
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
        if let Some(hit) = self.cached(&key).filter(fresh) {
            return (hit.1, false);
        }
        self.resolving.run(&key, || {
            let r = self.opts.upstream.resolve(repo, rev);
            self.note(&r, &format!("resolving {repo}@{rev}"), "resolve");
            lock(&self.refs).insert(key.clone(), (Instant::now(), r.clone()));
            r
        })
    }

    fn cached(&self, key: &RefKey) -> Option<(Instant, Resolved)> {
        lock(&self.refs).get(key).cloned()
    }

    /// Pulls `commit` once, whoever else asks meanwhile: the bytes received and whether
    /// this caller ran the pull.
    pub fn fetch(&self, repo: &RepoId, commit: &CommitId) -> (Result<u64, UpstreamError>, bool) {
        self.pulling.run(&(repo.clone(), *commit), || {
            let start = Instant::now();
            let r = self.opts.upstream.fetch(repo, commit);
            self.note(&r, &format!("pulling {repo}@{}", commit.to_hex()), "pull");
            METRICS.upstream_pull(r.is_ok(), *r.as_ref().unwrap_or(&0));
            if let Ok(bytes) = &r {
                tracing::info!(
                    repo = %repo, commit = %commit.to_hex(), bytes,
                    seconds = start.elapsed().as_secs_f64(),
                    "pulled from the upstream {}", self.endpoint()
                );
            }
            r
        })
    }

    /// Counts a failure and logs it once (per message), and a recovery once.
    fn note<T>(&self, r: &Result<T, UpstreamError>, what: &str, op: &'static str) {
        if let Err(e) = r {
            METRICS.upstream_error(op, e);
        }
        let mut warned = lock(&self.warned);
        match r {
            Err(UpstreamError::Unavailable(e)) => {
                if warned.insert(e.clone()) {
                    tracing::warn!(
                        "upstream {} failed {what}: {e}; serving what is stored",
                        self.endpoint()
                    );
                }
            }
            _ if !warned.is_empty() => {
                warned.clear();
                tracing::info!("upstream {} answers again", self.endpoint());
            }
            _ => {}
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

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

    #[test]
    fn one_flight_for_concurrent_callers() {
        let flights: Arc<Flights<u32, usize>> = Arc::new(Flights::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(Barrier::new(2));
        // The leader holds its flight open until all 8 other callers wait on it.
        let leader = {
            let (f, runs, started) = (flights.clone(), runs.clone(), started.clone());
            std::thread::spawn(move || {
                let inner = f.clone();
                f.run(&7, move || {
                    started.wait();
                    // Bounded, so a broken single flight fails the asserts below
                    // instead of hanging.
                    let give_up = Instant::now() + Duration::from_secs(10);
                    while inner.joined(&7) < 8 && Instant::now() < give_up {
                        std::thread::yield_now();
                    }
                    runs.fetch_add(1, Ordering::SeqCst) + 41
                })
            })
        };
        started.wait();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (f, runs) = (flights.clone(), runs.clone());
                std::thread::spawn(move || f.run(&7, || runs.fetch_add(1, Ordering::SeqCst) + 100))
            })
            .collect();
        assert_eq!(leader.join().unwrap(), (41, true));
        for w in waiters {
            assert_eq!(w.join().unwrap(), (41, false));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // A later call runs again.
        assert!(flights.run(&7, || 5).1);
    }
}
