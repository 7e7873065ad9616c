//! The repository policies as the endpoint applies them: repository ids compared as the
//! Hub compares them (one stored repository whatever the case of a request's name),
//! version locks that hold by every name, sha and case, which repositories the mirror may
//! look up upstream (never one that exists only inside the store, unless `upstream_repos`
//! says so: no dependency confusion), and which stored commits are partial (completed from
//! the upstream before they are served).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use format::{CommitId, RepoId};
use http::StatusCode;
use repo::handle::MIN_PREFIX;

use super::{Hub, Role, Wanted};
use crate::reply::{internal, Reply};

/// A request for a name the last listing of repositories did not hold lists them again
/// at most this often (a client asking for many unknown names costs one listing per
/// period, not one per request).
const RELIST: Duration = Duration::from_secs(2);

/// How long whether the mirror may look a repository up is remembered.
const ROLE_TTL: Duration = Duration::from_secs(30);

impl Hub {
    /// The store's spelling of `repo`: the exact one if stored, else one differing only in
    /// case, else `repo` itself.
    pub(crate) fn spelling(&self, repo: RepoId) -> Result<RepoId, Box<Reply>> {
        let folded = repo.folded();
        {
            let s = self.names.spellings.lock();
            if let Some(v) = s.1.get(&folded) {
                return Ok(pick(v, repo));
            }
            if s.0.is_some_and(|t| t.elapsed() < RELIST) {
                return Ok(repo);
            }
        }
        let listed = self.store.repos().map_err(internal)?;
        let mut map: HashMap<String, Vec<RepoId>> = HashMap::new();
        for r in listed {
            map.entry(r.folded()).or_default().push(r);
        }
        let out = match map.get(&folded) {
            Some(v) => pick(v, repo),
            None => repo,
        };
        *self.names.spellings.lock() = (Some(Instant::now()), map);
        Ok(out)
    }

    /// Takes a repository the store did not have as the mirror's (its record written),
    /// unless a request in another case or another process stored it meanwhile: then that
    /// spelling, for the caller to look at again. Serialized, so that two requests in
    /// two cases make one repository.
    /// Forgets the listing of spellings (a commit may have made a repository): the next
    /// request lists them again.
    pub(super) fn forget_spellings(&self) {
        self.names.spellings.lock().0 = None;
    }

    pub(super) fn adopt(
        &self,
        repo: &RepoId,
        upstream: &str,
    ) -> Result<Option<RepoId>, Box<Reply>> {
        let mut s = self.names.spellings.lock();
        let found = self.store.find_repo(repo).map_err(internal)?;
        let known = found.clone().unwrap_or_else(|| repo.clone());
        let v = s.1.entry(known.folded()).or_default();
        if !v.contains(&known) {
            v.push(known.clone());
        }
        match found {
            Some(f) => Ok(Some(f)),
            None => {
                self.store.mark_mirrored(repo, upstream).map_err(internal)?;
                self.names
                    .roles
                    .insert(repo.clone(), (Instant::now(), Role::Mirrored));
                Ok(None)
            }
        }
    }

    /// What the mirror may do with `repo`.
    pub(super) fn role(&self, repo: &RepoId) -> Result<Role, Box<Reply>> {
        if self.mirror.is_none() {
            return Ok(Role::Inside);
        }
        if let Some((at, r)) = self.names.roles.get(repo) {
            if at.elapsed() < ROLE_TTL {
                return Ok(r);
            }
        }
        let role = if self.policy.looks_up(&repo.to_string())
            || self.store.mirrored(repo).map_err(internal)?
        {
            Role::Mirrored
        } else if self.store.has_objects(repo).map_err(internal)? {
            Role::Inside
        } else {
            return Ok(Role::New);
        };
        self.names
            .roles
            .insert(repo.clone(), (Instant::now(), role));
        Ok(role)
    }

    /// What `rev` names in `repo`: a lock pins every ref name to its commit and refuses any
    /// other commit (403 naming the lock), by full sha or prefix, in any case.
    pub(super) fn wanted<'a>(&self, repo: &RepoId, rev: &'a str) -> Result<Wanted<'a>, Box<Reply>> {
        let hex = !rev.is_empty() && rev.bytes().all(|b| b.is_ascii_hexdigit());
        let lower = rev.to_ascii_lowercase();
        let Some(lock) = self.policy.lock_of(repo) else {
            return Ok(match CommitId::parse(rev) {
                Ok(c) => Wanted::Commit(c),
                Err(_) => Wanted::Name(rev),
            });
        };
        let names_lock = if hex && rev.len() == 40 {
            lower == lock.to_hex()
        } else if hex && rev.len() >= MIN_PREFIX {
            lock.to_hex().starts_with(&lower)
        } else {
            true
        };
        if names_lock {
            return Ok(Wanted::Commit(lock));
        }
        let msg = format!(
            "{repo} is locked to {} by the server's [serve.locks]; revision {rev} is not served",
            lock.to_hex()
        );
        Err(Box::new(Reply::error(
            StatusCode::FORBIDDEN,
            "RevisionLocked",
            &msg,
            Some(&lock),
        )))
    }

    /// Whether stored `commit` (its manifest tagged `tag`) is partial: one GET, then
    /// remembered while complete.
    pub(super) fn partial(
        &self,
        repo: &RepoId,
        commit: &CommitId,
        tag: &str,
    ) -> Result<bool, Box<Reply>> {
        let key = (repo.clone(), *commit, tag.to_string());
        if !tag.is_empty() && self.names.complete.contains_key(&key) {
            return Ok(false);
        }
        let partial = self
            .store
            .partial(repo, commit)
            .map_err(internal)?
            .is_some();
        if !partial && !tag.is_empty() {
            self.names.complete.insert(key, ());
        }
        Ok(partial)
    }

    /// Whether ref `name` of `repo` was set inside (ingest, pull, sync, `modelcas ref`): then
    /// the mirror serves it as stored and never moves it.
    pub(super) fn set_inside(&self, repo: &RepoId, name: &str) -> Result<bool, Box<Reply>> {
        if format::names::check_ref_name(name).is_err() {
            return Ok(false);
        }
        let by_mirror = self.store.ref_set_by_mirror(repo, name).map_err(internal)?;
        Ok(by_mirror == Some(false))
    }
}

/// The exact spelling if stored, else the first stored one.
fn pick(stored: &[RepoId], asked: RepoId) -> RepoId {
    if stored.contains(&asked) {
        return asked;
    }
    stored.first().cloned().unwrap_or(asked)
}
