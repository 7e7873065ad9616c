//! How a gc run behaves ([`GcOptions`]: retention, the grace period, rewrites, dry run,
//! the commits protected besides pins), the protocol's fixed times, and how the options
//! are made from what people give, typed: the config file's settings ([`GcSettings`])
//! with one run's flags on top ([`GcFlags`]; `modelcas gc` fills them from its command
//! line, the pages of `serve` with the `--unused-for` a page asks for).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use format::names::{CommitId, RepoId};
use repo::{lock, Result, StoreError};

use super::retention::{check_unused_for, Policy, Retention};

/// Default grace period between condemning a pack and deleting it.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);
/// Default: rewrite packs less than 80 % live.
pub const DEFAULT_REWRITE_BELOW: f64 = 0.8;
/// Marks and lease starts are both the object store's time; this allows for its
/// resolution (whole seconds) and for clocks differing between the nodes of a distributed
/// store: a lease that started up to this long after a pack was marked still protects it.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);
/// gc confirms its lock before every this many pack deletions.
pub(super) const DELETE_BATCH: usize = 64;
/// Leftover temporaries younger than this are never removed (writes in progress).
pub const TEMPORARY_MIN_AGE: Duration = Duration::from_secs(3600);

/// How a gc run behaves.
#[derive(Clone, Debug)]
pub struct GcOptions {
    /// Which revisions to keep.
    pub retention: Retention,
    /// Time between condemning a pack and deleting it.
    pub grace: Duration,
    /// Rewrite packs whose live fraction is below this (0 disables rewriting; 1 rewrites
    /// every pack with any dead byte).
    pub rewrite_below: f64,
    /// Report only; change nothing, take no lock.
    pub dry_run: bool,
    /// Time to live of the gc lock.
    pub lock_ttl: Duration,
    /// Commits kept as if pinned, besides the store's pins (serve's version locks).
    pub protected: HashSet<(RepoId, CommitId)>,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            retention: Retention::default(),
            grace: DEFAULT_GRACE,
            rewrite_below: DEFAULT_REWRITE_BELOW,
            dry_run: false,
            lock_ttl: lock::default_ttl(),
            protected: HashSet::new(),
        }
    }
}

/// gc's settings as the config file gives them (`[gc]`, `[gc.repos."org/name"]`, and the
/// commits `[serve.locks]` protects), before defaults: each unset setting of a repository
/// falls back to the default's, and an unset default to gc's own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GcSettings {
    /// The policy of repositories without their own.
    pub default: Policy,
    /// Repositories' own settings (each unset one falls back to `default`'s).
    pub repos: BTreeMap<RepoId, Policy>,
    /// Time between condemning a pack and deleting it (default [`DEFAULT_GRACE`]).
    pub grace: Option<Duration>,
    /// Rewrite packs less live than this (default [`DEFAULT_REWRITE_BELOW`]).
    pub rewrite_below: Option<f64>,
    /// Commits kept as if pinned (serve's version locks).
    pub protected: HashSet<(RepoId, CommitId)>,
}

/// One run's flags: each one set wins over the settings, for every repository.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GcFlags {
    /// `--keep-last`, `--keep-within`, `--unused-for`.
    pub policy: Policy,
    /// `--grace`.
    pub grace: Option<Duration>,
    /// `--rewrite-below`.
    pub rewrite_below: Option<f64>,
    /// `--dry-run`.
    pub dry_run: bool,
}

impl GcSettings {
    /// The options of a run with `flags` over these settings, checked: an `--unused-for`
    /// too short for last-use records, a rewrite fraction outside 0..1, or a configured
    /// `unused_for` too short is refused, naming it.
    pub fn options(&self, flags: &GcFlags) -> Result<GcOptions> {
        if let Some(d) = flags.policy.unused_for {
            check_unused_for("--unused-for", d)?;
        }
        let over = |p: &Policy, below: &Policy| Policy {
            keep_last: flags.policy.keep_last.or(p.keep_last).or(below.keep_last),
            keep_within: flags
                .policy
                .keep_within
                .or(p.keep_within)
                .or(below.keep_within),
            unused_for: flags
                .policy
                .unused_for
                .or(p.unused_for)
                .or(below.unused_for),
        };
        let default = over(&self.default, &Policy::default());
        let retention = Retention {
            default,
            repos: self
                .repos
                .iter()
                .map(|(repo, p)| (repo.clone(), over(p, &default)))
                .collect(),
        };
        let rewrite_below = match flags.rewrite_below.or(self.rewrite_below) {
            Some(r) if !(0.0..=1.0).contains(&r) => {
                return Err(StoreError::Invalid(format!(
                    "--rewrite-below {r}: must be between 0 and 1"
                )))
            }
            r => r.unwrap_or(DEFAULT_REWRITE_BELOW),
        };
        retention
            .check()
            .map_err(|e| StoreError::Invalid(format!("config [gc]: {e}")))?;
        Ok(GcOptions {
            retention,
            grace: flags.grace.or(self.grace).unwrap_or(DEFAULT_GRACE),
            rewrite_below,
            dry_run: flags.dry_run,
            protected: self.protected.clone(),
            ..GcOptions::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(s: &str) -> RepoId {
        RepoId::parse(s).unwrap()
    }

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn flags_win_over_a_repositorys_settings_which_win_over_the_default() {
        let settings = GcSettings {
            default: Policy {
                keep_last: Some(3),
                keep_within: Some(DAY),
                unused_for: None,
            },
            repos: BTreeMap::from([(
                repo("o/m"),
                Policy {
                    keep_last: Some(9),
                    ..Policy::default()
                },
            )]),
            grace: Some(DAY),
            ..GcSettings::default()
        };
        let o = settings.options(&GcFlags::default()).unwrap();
        assert_eq!(o.retention.default.keep_last, Some(3));
        let m = o.retention.policy(&repo("o/m"));
        assert_eq!((m.keep_last, m.keep_within), (Some(9), Some(DAY)));
        assert_eq!((o.grace, o.rewrite_below), (DAY, DEFAULT_REWRITE_BELOW));
        let flags = GcFlags {
            policy: Policy {
                keep_last: Some(1),
                unused_for: Some(30 * DAY),
                ..Policy::default()
            },
            dry_run: true,
            ..GcFlags::default()
        };
        let o = settings.options(&flags).unwrap();
        let m = o.retention.policy(&repo("o/m"));
        assert_eq!((m.keep_last, m.unused_for), (Some(1), Some(30 * DAY)));
        assert!(o.dry_run);
    }

    #[test]
    fn what_gc_cannot_apply_is_refused_naming_it() {
        let short = GcFlags {
            policy: Policy {
                unused_for: Some(Duration::from_secs(300)),
                ..Policy::default()
            },
            ..GcFlags::default()
        };
        let e = GcSettings::default()
            .options(&short)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--unused-for") && e.contains("shorter than 1h"),
            "{e}"
        );
        let rewrite = GcFlags {
            rewrite_below: Some(2.0),
            ..GcFlags::default()
        };
        let e = GcSettings::default()
            .options(&rewrite)
            .unwrap_err()
            .to_string();
        assert!(e.contains("between 0 and 1"), "{e}");
        let configured = GcSettings {
            default: Policy {
                unused_for: Some(Duration::from_secs(1800)),
                ..Policy::default()
            },
            ..GcSettings::default()
        };
        let e = configured
            .options(&GcFlags::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("config [gc]") && e.contains("shorter than 1h"),
            "{e}"
        );
    }
}
