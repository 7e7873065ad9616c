//! Retention: which revisions of a repository gc keeps.
//!
//! A commit is kept when any of these holds:
//! * a ref (branch or tag) points at it;
//! * it is pinned (`modelcas pin`);
//! * it is among the `keep_last` most recently ingested commits of its repository, in the
//!   total order of [`format::manifest::Manifest::order`] (the store's clock in ms when it
//!   was published, then a sequence, then the commit id: exactly N are kept);
//! * it was ingested within `keep_within` of now, by the object store's clock;
//! * it was used (or ingested) within `unused_for` of now: a mount, serve, checkout, cat or
//!   pull used it ([`repo::usage`]; times by the object store's clock). `unused_for` must be
//!   at least [`repo::usage::MIN_UNUSED_FOR`] ([`Retention::check`]);
//! * the policy for its repository is empty (no `keep_last`, `keep_within` or
//!   `unused_for`): without a policy gc expires nothing, and only `modelcas rm` removes
//!   revisions.
//!
//! Everything else is *expired*: gc deletes its manifest, and its data once no kept
//! revision uses it.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use format::manifest::Order;
use format::names::{CommitId, RepoId};
use repo::{Result, StoreError};

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

    /// The policy in words, as the config file spells it (`keep_last = 5, unused_for =
    /// 30days`), or what an empty one means.
    pub fn describe(&self) -> String {
        if self.is_empty() {
            return "none (gc expires nothing; only modelcas rm removes revisions)".into();
        }
        let mut parts = Vec::new();
        if let Some(n) = self.keep_last {
            parts.push(format!("keep_last = {n}"));
        }
        if let Some(d) = self.keep_within {
            parts.push(format!("keep_within = {}", humantime::format_duration(d)));
        }
        if let Some(d) = self.unused_for {
            parts.push(format!("unused_for = {}", humantime::format_duration(d)));
        }
        parts.join(", ")
    }
}

/// Refuses an `unused_for` (named `what` in the error) shorter than
/// [`repo::usage::MIN_UNUSED_FOR`]: readers keep their last-use records only that fresh.
pub fn check_unused_for(what: &str, d: Duration) -> Result<()> {
    let min = repo::usage::MIN_UNUSED_FOR;
    if d >= min {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "{what} {} is shorter than {}, the shortest gc accepts: readers rewrite a revision's \
         last-use record at most every {} while they use it, so a revision in use can look \
         unused for that long, and longer when a write is late",
        humantime::format_duration(d),
        humantime::format_duration(min),
        humantime::format_duration(repo::usage::REFRESH)
    )))
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
    /// Refuses a policy gc cannot apply safely: an `unused_for` shorter than
    /// [`repo::usage::MIN_UNUSED_FOR`].
    pub fn check(&self) -> Result<()> {
        if let Some(d) = self.default.unused_for {
            check_unused_for("unused_for", d)?;
        }
        for (repo, p) in &self.repos {
            if let Some(d) = p.unused_for {
                check_unused_for(&format!("unused_for of {repo}"), d)?;
            }
        }
        Ok(())
    }

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
    /// Its place in its repository's history ([`format::manifest::Manifest::order`]).
    pub order: Order,
    /// How long ago it was published, by the object store's clock (seconds).
    pub age_secs: u64,
    /// Seconds since it was last used or ingested, by the object store's clock; `None`
    /// when unknown (then `unused_for` keeps it).
    pub idle_secs: Option<u64>,
    /// Whether a use of it was ever recorded (a mount, serve, checkout, cat or pull); when
    /// not, `idle_secs` counts from its publication and `unused_for` keeps it as new.
    pub used: bool,
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
    /// Read within `unused_for`.
    Used,
    /// Never read, and published within `unused_for`: too new to expire.
    New,
    /// No policy for the repository.
    NoPolicy,
}

impl Keep {
    /// Why gc keeps a revision, in words.
    pub fn reason(self) -> &'static str {
        match self {
            Keep::Ref => "a ref points at it",
            Keep::Pin => "pinned or locked",
            Keep::Last => "among the keep_last newest",
            Keep::Within => "ingested within keep_within",
            Keep::Used => "used within unused_for",
            Keep::New => "not used yet, published within unused_for: too new to expire",
            Keep::NoPolicy => "no retention policy",
        }
    }
}

/// Splits a repository's commits into kept (with a reason) and expired.
pub fn decide(
    policy: &Policy,
    commits: &[Candidate],
    referenced: &HashSet<CommitId>,
    pinned: &HashSet<CommitId>,
) -> (Vec<(CommitId, Keep)>, Vec<CommitId>) {
    let mut by_age: Vec<&Candidate> = commits.iter().collect();
    // Newest first, in a total order: exactly `keep_last` are the newest.
    by_age.sort_by_key(|c| std::cmp::Reverse(c.order));
    let mut kept = Vec::new();
    let mut expired = Vec::new();
    for (rank, c) in by_age.into_iter().enumerate() {
        let reason = if referenced.contains(&c.commit) {
            Some(Keep::Ref)
        } else if pinned.contains(&c.commit) {
            Some(Keep::Pin)
        } else if policy.is_empty() {
            Some(Keep::NoPolicy)
        } else if policy.keep_last.is_some_and(|n| rank < n) {
            Some(Keep::Last)
        } else if policy
            .keep_within
            .is_some_and(|d| c.age_secs < d.as_secs().max(1))
        {
            Some(Keep::Within)
        } else if policy
            .unused_for
            .is_some_and(|d| c.idle_secs.is_none_or(|i| i < d.as_secs().max(1)))
        {
            Some(if c.used { Keep::Used } else { Keep::New })
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

    /// A commit published at store time `at` seconds (and `at` seconds old at time 1000).
    fn c(n: u8, at: u64) -> Candidate {
        seq(n, at * 1000, 0)
    }

    fn seq(n: u8, store_ms: u64, seq: u64) -> Candidate {
        Candidate {
            commit: CommitId([n; 20]),
            order: (store_ms, seq, [n; 20]),
            age_secs: 1000u64.saturating_sub(store_ms / 1000),
            idle_secs: None,
            used: false,
        }
    }

    fn kept_ids(kept: &[(CommitId, Keep)]) -> Vec<u8> {
        let mut k: Vec<u8> = kept.iter().map(|(c, _)| c.0[0]).collect();
        k.sort();
        k
    }

    #[test]
    fn keep_last_keeps_exactly_the_n_newest_of_revisions_published_within_one_second() {
        // Issue 26: ranked by whole seconds, revisions published within one second tied
        // and all of them were kept. The order is total: store time in ms, then the
        // sequence, then the commit id.
        let policy = Policy {
            keep_last: Some(1),
            ..Policy::default()
        };
        let none = HashSet::new();
        // Three in one millisecond of the store's clock (S3's whole seconds), by sequence.
        let commits = [seq(9, 200_000, 3), seq(5, 200_000, 1), seq(7, 200_000, 2)];
        let (kept, expired) = decide(&policy, &commits, &none, &none);
        assert_eq!(kept_ids(&kept), vec![9]);
        assert_eq!(expired.len(), 2);
        // Within one second, by milliseconds.
        let commits = [seq(1, 200_900, 0), seq(2, 200_100, 0), seq(3, 200_500, 0)];
        let two = Policy {
            keep_last: Some(2),
            ..Policy::default()
        };
        let (kept, expired) = decide(&two, &commits, &none, &none);
        assert_eq!(kept_ids(&kept), vec![1, 3]);
        assert_eq!(expired, vec![CommitId([2; 20])]);
        // Everything equal but the commit: still one kept, the same one in any input order.
        let a = [seq(4, 1, 1), seq(6, 1, 1)];
        let b = [seq(6, 1, 1), seq(4, 1, 1)];
        assert_eq!(
            decide(&policy, &a, &none, &none),
            decide(&policy, &b, &none, &none)
        );
        assert_eq!(kept_ids(&decide(&policy, &a, &none, &none).0), vec![6]);
    }

    #[test]
    fn an_unused_for_shorter_than_the_refresh_margin_is_refused() {
        let mut r = Retention::default();
        r.default.unused_for = Some(Duration::from_secs(12 * 3600));
        r.check().unwrap();
        r.default.unused_for = Some(Duration::from_secs(300));
        let e = r.check().unwrap_err().to_string();
        assert!(
            e.contains("5m") && e.contains("1h") && e.contains("10m"),
            "{e}"
        );
        let mut r = Retention::default();
        r.repos.insert(
            RepoId::parse("a/b").unwrap(),
            Policy {
                unused_for: Some(Duration::from_secs(60)),
                ..Policy::default()
            },
        );
        assert!(r.check().unwrap_err().to_string().contains("a/b"));
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
        let (kept, expired) = decide(&empty, &commits, &refs, &pins);
        assert_eq!(kept.len(), 5);
        assert!(expired.is_empty());

        let last2 = Policy {
            keep_last: Some(2),
            ..Policy::default()
        };
        let (kept, expired) = decide(&last2, &commits, &refs, &pins);
        assert_eq!(kept_ids(&kept), vec![1, 2, 4, 5]);
        assert_eq!(expired, vec![CommitId([3; 20])]);

        let within = Policy {
            keep_last: Some(0),
            keep_within: Some(Duration::from_secs(650)),
            ..Policy::default()
        };
        // now 1000: within 650 s means published after 350.
        let (_, expired) = decide(&within, &commits, &HashSet::new(), &HashSet::new());
        let mut ex: Vec<u8> = expired.iter().map(|c| c.0[0]).collect();
        ex.sort();
        assert_eq!(ex, vec![1, 2, 3]);
    }

    #[test]
    fn unused_for_keeps_what_was_read_recently_and_what_is_unknown() {
        let idle = |n: u8, secs: Option<u64>| Candidate {
            idle_secs: secs,
            used: n != 5,
            ..c(n, 0)
        };
        let commits = [
            idle(1, Some(40 * 86_400)),
            idle(2, Some(3600)),
            idle(3, None),
            idle(4, Some(31 * 86_400)),
            idle(5, Some(3600)),
        ];
        let refs: HashSet<_> = [CommitId([4; 20])].into();
        let p = Policy {
            unused_for: Some(Duration::from_secs(30 * 86_400)),
            ..Policy::default()
        };
        let (kept, expired) = decide(&p, &commits, &refs, &HashSet::new());
        assert_eq!(expired, vec![CommitId([1; 20])]);
        let reason = |n: u8| kept.iter().find(|(c, _)| c.0[0] == n).map(|(_, k)| *k);
        assert_eq!(reason(2), Some(Keep::Used));
        assert_eq!(reason(3), Some(Keep::Used));
        assert_eq!(reason(4), Some(Keep::Ref));
        // Never used, published an hour ago: kept as too new, not as used (issue 36).
        assert_eq!(reason(5), Some(Keep::New));
    }
}
