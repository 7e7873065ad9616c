//! Retention: which revisions of a repository gc keeps.
//!
//! A commit is kept when any of these holds:
//! * a ref (branch or tag) points at it;
//! * it is pinned (`modelcas pin`);
//! * it is among the `keep_last` most recently ingested commits of its repository;
//! * it was ingested within `keep_within` of now;
//! * it was read (or ingested) within `unused_for` of now: a mount, serve, checkout, cat or
//!   pull read it ([`repo::usage`]; times by the object store's clock);
//! * the policy for its repository is empty (no `keep_last`, `keep_within` or
//!   `unused_for`): without a policy gc expires nothing, and only `modelcas rm` removes
//!   revisions.
//!
//! Everything else is *expired*: gc deletes its manifest, and its data once no kept
//! revision uses it.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use crate::names::{CommitId, RepoId};
use crate::{Result, StoreError};

/// The policy of one repository.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Keep the N most recently ingested commits.
    pub keep_last: Option<usize>,
    /// Keep commits ingested within this long.
    pub keep_within: Option<Duration>,
    /// Keep commits read or ingested within this long.
    pub unused_for: Option<Duration>,
}

impl Policy {
    /// True when the policy expires nothing.
    pub fn is_empty(&self) -> bool {
        self.keep_last.is_none() && self.keep_within.is_none() && self.unused_for.is_none()
    }
}

/// Policies for every repository: a default, and overrides per repository.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Applies to repositories without an override.
    pub default: Policy,
    /// Overrides per repository.
    pub repos: BTreeMap<RepoId, Policy>,
}

impl Retention {
    /// The policy of `repo`: its override, found as the Hub compares ids (ASCII case
    /// ignored; the exact spelling first), else the default.
    pub fn policy(&self, repo: &RepoId) -> Policy {
        self.repos
            .get(repo)
            .or_else(|| {
                self.repos
                    .iter()
                    .find(|(r, _)| r.same_repo(repo))
                    .map(|(_, p)| p)
            })
            .copied()
            .unwrap_or(self.default)
    }
}

/// One commit as retention sees it.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// The commit.
    pub commit: CommitId,
    /// When it was ingested (seconds since the epoch).
    pub ingested_at: u64,
    /// Seconds since it was last read or ingested, by the object store's clock; `None`
    /// when unknown (then `unused_for` keeps it).
    pub idle_secs: Option<u64>,
}

/// Why a commit is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// A ref points at it.
    Ref,
    /// It is pinned.
    Pin,
    /// One of the `keep_last` newest.
    Last,
    /// Ingested within `keep_within`.
    Within,
    /// Read or ingested within `unused_for`.
    Used,
    /// No policy for the repository.
    NoPolicy,
}

/// Splits a repository's commits into kept (with a reason) and expired.
pub fn decide(
    policy: &Policy,
    commits: &[Candidate],
    referenced: &HashSet<CommitId>,
    pinned: &HashSet<CommitId>,
    now_secs: u64,
) -> (Vec<(CommitId, Keep)>, Vec<CommitId>) {
    let mut by_age: Vec<&Candidate> = commits.iter().collect();
    // Newest first; ties broken by commit id so the result does not depend on listing order.
    by_age.sort_by(|a, b| {
        b.ingested_at
            .cmp(&a.ingested_at)
            .then(a.commit.0.cmp(&b.commit.0))
    });
    // `keep_last` keeps the n newest, and every revision ingested in the same second as the
    // n-th: ingest times are whole seconds, so those cannot be told apart by age.
    let last_kept_at = policy
        .keep_last
        .filter(|n| *n > 0)
        .and_then(|n| by_age.get(n.min(by_age.len()).saturating_sub(1)))
        .map(|c| c.ingested_at);
    let mut kept = Vec::new();
    let mut expired = Vec::new();
    for (rank, c) in by_age.into_iter().enumerate() {
        let reason = if referenced.contains(&c.commit) {
            Some(Keep::Ref)
        } else if pinned.contains(&c.commit) {
            Some(Keep::Pin)
        } else if policy.is_empty() {
            Some(Keep::NoPolicy)
        } else if policy.keep_last.is_some_and(|n| rank < n)
            || last_kept_at.is_some_and(|t| c.ingested_at >= t)
        {
            Some(Keep::Last)
        } else if policy
            .keep_within
            .is_some_and(|d| now_secs.saturating_sub(c.ingested_at) < d.as_secs().max(1))
        {
            Some(Keep::Within)
        } else if policy
            .unused_for
            .is_some_and(|d| c.idle_secs.is_none_or(|i| i < d.as_secs().max(1)))
        {
            Some(Keep::Used)
        } else {
            None
        };
        match reason {
            Some(r) => kept.push((c.commit, r)),
            None => expired.push(c.commit),
        }
    }
    (kept, expired)
}

/// Parses a duration through `humantime`: one or more `<number><unit>` terms (`90s`, `15m`,
/// `12h`, `30d`, `2w`, `1d12h`, `2h 30min`, `1.5h`). A bare number or a sign is refused:
/// the unit must be said.
pub fn parse_duration(s: &str) -> Result<Duration> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        StoreError::Invalid(format!(
            "invalid duration {s:?}: {e} (examples: 90s, 15m, 12h, 30d, 2w, 1d12h)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(n: u8, at: u64) -> Candidate {
        Candidate {
            commit: CommitId([n; 20]),
            ingested_at: at,
            idle_secs: None,
        }
    }

    #[test]
    fn keep_last_never_expires_a_revision_ingested_in_the_same_second_as_a_kept_one() {
        // Ingest times are whole seconds: revisions made within one second cannot be
        // ordered, so none of them may be expired in favour of another.
        let policy = Policy {
            keep_last: Some(1),
            ..Policy::default()
        };
        let commits = [c(1, 100), c(9, 200), c(5, 200), c(7, 200)];
        let (kept, expired) = decide(&policy, &commits, &HashSet::new(), &HashSet::new(), 300);
        let mut kept: Vec<u8> = kept.iter().map(|(k, _)| k.0[0]).collect();
        kept.sort();
        assert_eq!(kept, vec![5, 7, 9]);
        assert_eq!(expired, vec![c(1, 0).commit]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30d").unwrap().as_secs(), 30 * 86_400);
        assert_eq!(parse_duration("1d12h").unwrap().as_secs(), 36 * 3600);
        assert_eq!(parse_duration("2s").unwrap().as_secs(), 2);
        assert_eq!(parse_duration("0s").unwrap().as_secs(), 0);
        assert_eq!(parse_duration("1.5h").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("2h 30min").unwrap().as_secs(), 9000);
        for bad in ["", "30", "d", "3x", "-1d", "99999999999999999999w", "h1"] {
            let e = match parse_duration(bad) {
                Err(e) => e.to_string(),
                Ok(d) => panic!("{bad:?} parsed as {d:?}"),
            };
            assert!(e.contains("invalid duration"), "{bad}: {e}");
        }
    }

    #[test]
    fn decide_keeps_refs_pins_last_and_within() {
        let commits = [c(1, 100), c(2, 200), c(3, 300), c(4, 400), c(5, 500)];
        let refs: HashSet<_> = [CommitId([1; 20])].into();
        let pins: HashSet<_> = [CommitId([2; 20])].into();
        let empty = Policy::default();
        let (kept, expired) = decide(&empty, &commits, &refs, &pins, 1000);
        assert_eq!(kept.len(), 5);
        assert!(expired.is_empty());

        let last2 = Policy {
            keep_last: Some(2),
            ..Policy::default()
        };
        let (kept, expired) = decide(&last2, &commits, &refs, &pins, 1000);
        let mut kept_ids: Vec<u8> = kept.iter().map(|(c, _)| c.0[0]).collect();
        kept_ids.sort();
        assert_eq!(kept_ids, vec![1, 2, 4, 5]);
        assert_eq!(expired, vec![CommitId([3; 20])]);

        let within = Policy {
            keep_last: Some(0),
            keep_within: Some(Duration::from_secs(650)),
            ..Policy::default()
        };
        // now 1000: within 650 s means ingested after 350.
        let (_, expired) = decide(&within, &commits, &HashSet::new(), &HashSet::new(), 1000);
        let mut ex: Vec<u8> = expired.iter().map(|c| c.0[0]).collect();
        ex.sort();
        assert_eq!(ex, vec![1, 2, 3]);
    }

    #[test]
    fn unused_for_keeps_what_was_read_recently_and_what_is_unknown() {
        let idle = |n: u8, secs: Option<u64>| Candidate {
            commit: CommitId([n; 20]),
            ingested_at: 0,
            idle_secs: secs,
        };
        let commits = [
            idle(1, Some(40 * 86_400)),
            idle(2, Some(3600)),
            idle(3, None),
            idle(4, Some(31 * 86_400)),
        ];
        let refs: HashSet<_> = [CommitId([4; 20])].into();
        let p = Policy {
            unused_for: Some(Duration::from_secs(30 * 86_400)),
            ..Policy::default()
        };
        let (kept, expired) = decide(&p, &commits, &refs, &HashSet::new(), 0);
        assert_eq!(expired, vec![CommitId([1; 20])]);
        let reason = |n: u8| kept.iter().find(|(c, _)| c.0[0] == n).map(|(_, k)| *k);
        assert_eq!(reason(2), Some(Keep::Used));
        assert_eq!(reason(3), Some(Keep::Used));
        assert_eq!(reason(4), Some(Keep::Ref));
    }
}
