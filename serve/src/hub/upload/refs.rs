//! Branches and tags (`create_branch`, `delete_branch`, `create_tag`, `delete_tag`): each
//! made or deleted under the name's commit lock (docs/format/protocols.md, "Commit lock"), a
//! tag with its tag record (docs/format/bytes.md, "Tag records").

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::{bad, branch_name, json_body, Head, Hub, Reply};
use crate::reply::internal;
use format::RepoId;

impl Hub {
    /// `POST .../branch/{branch}` `{startingPoint?}` creates a branch (at the revision
    /// named, else the default one; 409 when it exists); `DELETE` deletes it.
    pub(super) fn branch(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
        branch: &str,
        body: &[u8],
    ) -> Reply {
        let (repo, v) = match self.ref_request(req, org, name, body) {
            Ok((repo, Some(v))) => (repo, v),
            Ok((repo, None)) => return self.delete_ref(&repo, branch, RefKind::Branch),
            Err(r) => return *r,
        };
        let from = v
            .get("startingPoint")
            .and_then(Value::as_str)
            .unwrap_or("main");
        self.create_ref(&repo, branch, from, RefKind::Branch)
    }

    /// `POST .../tag/{rev}` `{tag}` tags a revision (409 when the tag exists); `DELETE
    /// .../tag/{tag}` deletes it. Tags are refs of the store like branches.
    pub(super) fn tag(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
        rev: &str,
        body: &[u8],
    ) -> Reply {
        let (repo, v) = match self.ref_request(req, org, name, body) {
            Ok((repo, Some(v))) => (repo, v),
            Ok((repo, None)) => return self.delete_ref(&repo, rev, RefKind::Tag),
            Err(r) => return *r,
        };
        let Some(tag) = v.get("tag").and_then(Value::as_str) else {
            return bad("a tag needs `tag`, its name");
        };
        self.create_ref(&repo, tag, rev, RefKind::Tag)
    }

    /// The commit lock of ref `name` (docs/format/protocols.md, "Commit lock"), held while
    /// a branch or tag is made or deleted, so that neither interleaves with a commit to
    /// that name or with another such change: `409` while someone else holds it.
    fn ref_lock(&self, repo: &RepoId, name: &str) -> Result<repo::lock::Held, Box<Reply>> {
        match repo::lock::Held::commit_lock(self.store.backend().clone(), repo, name) {
            Ok(l) => Ok(l),
            Err(repo::StoreError::LockHeld { holder, .. }) => Err(Box::new(Reply::error(
                StatusCode::CONFLICT,
                "",
                &format!("{repo} {name} is being changed ({holder}); try again when it is done"),
                None,
            ))),
            Err(e) => Err(Box::new(internal(e))),
        }
    }

    /// The repository a branch or tag request may write, and its JSON body (`None` for a
    /// `DELETE`).
    fn ref_request(
        &self,
        req: &Head<'_>,
        org: &str,
        name: &str,
        body: &[u8],
    ) -> Result<(RepoId, Option<Value>), Box<Reply>> {
        let (_, repo) = self.writable(req, org, name)?;
        if *req.method == Method::DELETE {
            return Ok((repo, None));
        }
        Ok((repo, Some(json_body(body)?)))
    }

    /// Creates branch or tag `name` at revision `from` (409 when a ref of that name
    /// exists). A tag's record is written before its ref, a branch clears a record a tag
    /// of its name left behind (docs/format/bytes.md, "Tag records").
    fn create_ref(&self, repo: &RepoId, name: &str, from: &str, kind: RefKind) -> Reply {
        if let Err(msg) = branch_name(name) {
            return bad(&msg);
        }
        let at = match self.locate(repo.org(), repo.name(), from) {
            Ok(at) => at,
            Err(r) => return *r,
        };
        let lock = match self.ref_lock(&at.repo, name) {
            Ok(l) => l,
            Err(r) => return *r,
        };
        match self.store.refs(&at.repo) {
            Ok(refs) if refs.contains_key(name) => {
                return Reply::error(
                    StatusCode::CONFLICT,
                    "",
                    &format!("Reference {name} already exists"),
                    None,
                )
            }
            Ok(_) => {}
            Err(e) => return internal(e),
        }
        let record = match kind {
            RefKind::Tag => self.store.set_tag_record(&at.repo, name, &at.commit),
            RefKind::Branch => self.store.delete_tag_record(&at.repo, name),
        };
        if let Err(e) = record.and_then(|()| lock.check()) {
            return internal(e);
        }
        match self.store.set_ref(&at.repo, name, &at.commit) {
            Ok(()) => Reply::json(
                StatusCode::OK,
                &json!({ "name": name, "targetCommit": at.commit.to_hex() }),
            ),
            Err(e) => internal(e),
        }
    }

    /// Deletes branch or tag `name`: 404 when it is not one of that kind (`delete_tag`
    /// never deletes a branch, nor `delete_branch` a tag); a tag's record goes after it.
    fn delete_ref(&self, repo: &RepoId, name: &str, kind: RefKind) -> Reply {
        let _lock = match self.ref_lock(repo, name) {
            Ok(l) => l,
            Err(r) => return *r,
        };
        let tag = match self.store.is_tag(repo, name) {
            Ok(t) => t,
            Err(e) => return internal(e),
        };
        if tag != (kind == RefKind::Tag) {
            let msg = if tag {
                format!("{repo} has no branch {name}: {name} is a tag (delete_tag deletes it)")
            } else {
                format!("{repo} has no tag {name}")
            };
            return Reply::error(StatusCode::NOT_FOUND, "RevisionNotFound", &msg, None);
        }
        // As on the Hub, the default branch stays: deleting it would unref the
        // repository's revisions for gc.
        if name == "main" {
            return Reply::error(
                StatusCode::FORBIDDEN,
                "",
                "the default branch main cannot be deleted",
                None,
            );
        }
        match self.store.delete_ref(repo, name) {
            Ok(_) if kind == RefKind::Tag => match self.store.delete_tag_record(repo, name) {
                Ok(()) => Reply::json(StatusCode::OK, &json!({})),
                Err(e) => internal(e),
            },
            Ok(_) => Reply::json(StatusCode::OK, &json!({})),
            Err(repo::StoreError::UnknownRevision { .. } | repo::StoreError::UnknownRepo(_)) => {
                Reply::error(
                    StatusCode::NOT_FOUND,
                    "RevisionNotFound",
                    &format!("{repo} has no ref {name}"),
                    None,
                )
            }
            Err(e) => internal(e),
        }
    }
}

/// What a branch or tag route makes or deletes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RefKind {
    Branch,
    Tag,
}
