//! What the pages need of the endpoint besides the inventory ([`Ctx`]): the tokens, the
//! repository policy, the mirror's settings and recent activity, the store's spelling of
//! repository ids.

use std::collections::HashSet;
use std::time::Duration;

use format::RepoId;

use crate::upstream::recent::Recent;
use crate::upstream::Policy;

/// What the pages need of the endpoint besides the inventory.
pub struct Ctx<'a> {
    pub tokens: Option<&'a HashSet<String>>,
    pub policy: &'a Policy,
    /// The mirror: its upstream, TTL and recent activity.
    pub mirror: Option<(&'a str, Duration, &'a Recent)>,
    /// The store's spelling of a repository id (ids compare without case).
    pub spelling: &'a dyn Fn(RepoId) -> RepoId,
}
