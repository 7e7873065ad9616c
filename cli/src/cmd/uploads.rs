//! The uploads of `modelcas serve`: the endpoint's [`Uploads`] implemented with the
//! `publish` crate (the spool and the commits) and the process's [`SharedIndex`].

use std::io::Read;
use std::sync::Arc;

use format::{RepoId, Sha256, XetHash};
use hubserve::uploads::{CommitRequest, Committed, Content, Operation, UploadError, Uploads};
use publish::{PublishError, Publisher};

use super::shared_index::SharedIndex;

/// The hub's write side.
pub struct HubUploads {
    publisher: Publisher,
    index: Arc<SharedIndex>,
}

impl HubUploads {
    pub fn new(publisher: Publisher, index: Arc<SharedIndex>) -> HubUploads {
        HubUploads { publisher, index }
    }
}

impl Uploads for HubUploads {
    fn present(&self, repo: &RepoId, objects: &[(Sha256, u64)]) -> Result<Vec<bool>, UploadError> {
        self.publisher.present(repo, objects).map_err(refused)
    }

    fn check_room(&self, size: u64) -> Result<(), UploadError> {
        self.publisher.spool().check_room(size).map_err(refused)
    }

    fn receive(
        &self,
        repo: &RepoId,
        sha256: &Sha256,
        size: u64,
        body: &mut dyn Read,
    ) -> Result<(), UploadError> {
        self.publisher
            .receive(repo, sha256, size, body)
            .map_err(refused)
    }

    fn received(&self, repo: &RepoId, sha256: &Sha256, size: u64) -> bool {
        self.publisher.spool().object(repo, sha256, size).is_some()
    }

    fn receive_xorb(&self, hash: &XetHash, body: &mut dyn Read) -> Result<bool, UploadError> {
        self.publisher.receive_xorb(hash, body).map_err(refused)
    }

    fn receive_shard(
        &self,
        repo: &RepoId,
        body: &mut dyn Read,
        visible: &dyn Fn(&RepoId) -> bool,
    ) -> Result<usize, UploadError> {
        self.publisher
            .receive_shard(repo, body, visible)
            .map(|s| s.len())
            .map_err(refused)
    }

    fn prepare(&self, repo: &RepoId) {
        self.publisher.prepare(repo);
    }

    fn dedup(&self, chunk: &XetHash) -> Option<(RepoId, Vec<u8>)> {
        self.publisher.dedup(chunk)
    }

    fn commit(&self, req: CommitRequest) -> Result<Committed, UploadError> {
        let index = self
            .index
            .get()
            .map_err(|e| UploadError::Internal(format!("opening the index: {e:#}")))?;
        let req = publish::CommitRequest {
            repo: req.repo,
            branch: req.branch,
            parent: req.parent,
            operations: req.operations.into_iter().map(operation).collect(),
        };
        let done = self.publisher.commit(&index, &req);
        self.index.release(index);
        let done = done.map_err(refused)?;
        tracing::info!(
            repo = %req.repo,
            branch = %req.branch,
            commit = %done.commit.to_hex(),
            files = done.files,
            files_read = done.files_read,
            new_chunk_bytes = done.new_chunk_bytes,
            pack_bytes_written = done.pack_bytes_written,
            held = done.held,
            "commit stored"
        );
        Ok(Committed {
            commit: done.commit,
            held: done.held,
        })
    }
}

/// One operation, moved (inline files are not copied).
fn operation(op: Operation) -> publish::Operation {
    match op {
        Operation::Add { path, content } => publish::Operation::Add {
            path,
            content: match content {
                Content::Inline(b) => publish::Content::Inline(b),
                Content::Object { sha256, size } => publish::Content::Object { sha256, size },
            },
        },
        Operation::DeleteFile { path } => publish::Operation::DeleteFile { path },
        Operation::DeleteFolder { path } => publish::Operation::DeleteFolder { path },
    }
}

/// The endpoint's view of a refusal.
fn refused(e: PublishError) -> UploadError {
    let msg = e.to_string();
    match e {
        PublishError::BadRequest(_) | PublishError::BadObject(_) | PublishError::Body(_) => {
            UploadError::BadRequest(msg)
        }
        PublishError::TooLarge(_) => UploadError::TooLarge(msg),
        PublishError::NoRoom(_) => UploadError::NoRoom(msg),
        PublishError::Conflict(_) => UploadError::Conflict(msg),
        PublishError::Moved(_) => UploadError::Moved(msg),
        PublishError::EntryNotFound(_) => UploadError::EntryNotFound(msg),
        PublishError::RevisionNotFound(_) => UploadError::RevisionNotFound(msg),
        PublishError::Io(_) | PublishError::Store(_) => UploadError::Internal(msg),
    }
}
