//! Tags of the [`Store`]. A tag is a ref (`refs/<name>`, read and kept by everything that
//! reads refs) that the hub made with `create_tag`, and so carries a *tag record*
//! (`repos/<org>/<name>/tags/<name>`: the ref's envelope and payload, naming the commit the
//! tag was made at). A ref is a tag while it points at its record's commit; a ref any
//! writer moved elsewhere is a branch again, so a record left behind (a crash between the
//! record and the ref, a ref removed by `rm` or `ref --delete`) never makes a branch a
//! tag. Only the hub's view depends on it: tags are listed as tags and take no commits
//! (docs/format/bytes.md, "Tag records").

use std::collections::{BTreeMap, BTreeSet};

use super::Store;
use crate::error::Result;
use crate::manifest::{now_secs, RefObject};
use format::codec::{self, Kind};
use format::layout;
use format::names::{CommitId, RepoId};

impl Store {
    /// Which of `refs` (the repository's refs, [`Store::refs`]) are tags. A record that
    /// does not decode counts as a tag of what its ref points at: damage never lets a
    /// commit move a tag (`delete_tag` still removes it).
    pub fn tags(
        &self,
        repo: &RepoId,
        refs: &BTreeMap<String, CommitId>,
    ) -> Result<BTreeSet<String>> {
        let mut out = BTreeSet::new();
        let prefix = layout::tags_prefix(repo);
        for obj in self.backend.list(&prefix)? {
            let Some(name) = obj.key.strip_prefix(&prefix).map(|n| n.replace("%2F", "/")) else {
                continue;
            };
            let Some(at) = refs.get(&name) else {
                continue; // no such ref: a record left behind
            };
            let bytes = match self.backend.get(&obj.key) {
                Ok(b) => b,
                Err(objects::ObjectError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            match codec::decode::<RefObject>(Kind::Ref, &bytes) {
                Ok(r) if r.commit != *at => {} // the ref moved: a branch now
                Ok(_) => {
                    out.insert(name);
                }
                Err(e) => {
                    tracing::warn!(key = %obj.key, "tag record does not decode ({e}): taken as a tag");
                    out.insert(name);
                }
            }
        }
        Ok(out)
    }

    /// Whether ref `name` of `repo` is a tag (false when there is no such ref or
    /// repository).
    pub fn is_tag(&self, repo: &RepoId, name: &str) -> Result<bool> {
        let refs = match self.refs(repo) {
            Ok(r) => r,
            Err(crate::StoreError::UnknownRepo(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        if !refs.contains_key(name) {
            return Ok(false);
        }
        Ok(self.tags(repo, &refs)?.contains(name))
    }

    /// Writes the tag record of `name` at `commit` (before the ref itself is set).
    pub fn set_tag_record(&self, repo: &RepoId, name: &str, commit: &CommitId) -> Result<()> {
        let obj = RefObject {
            commit: *commit,
            updated_at: now_secs(),
        };
        let key = layout::tag_key(repo, name);
        Ok(self
            .backend
            .put(&key, &codec::encode(Kind::Ref, &obj, false))?)
    }

    /// Removes the tag record of `name`, if there is one.
    pub fn delete_tag_record(&self, repo: &RepoId, name: &str) -> Result<()> {
        Ok(self.backend.delete(&layout::tag_key(repo, name))?)
    }
}
