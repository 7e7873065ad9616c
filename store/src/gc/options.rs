//! How a gc run behaves ([`GcOptions`]: retention, the grace period, rewrites, dry run,
//! the commits protected besides pins) and the protocol's fixed times.

use std::collections::HashSet;
use std::time::Duration;

use format::names::{CommitId, RepoId};
use repo::lock;

use super::retention::Retention;

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
