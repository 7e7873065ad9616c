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

    fn receive(&self, sha256: &Sha256, size: u64, body: &mut dyn Read) -> Result<(), UploadError> {
        self.publisher.receive(sha256, size, body).map_err(refused)
    }

    fn received(&self, sha256: &Sha256, size: u64) -> bool {
        self.publisher.spool().object(sha256, size).is_some()
    }

    fn receive_xorb(&self, hash: &XetHash, body: &mut dyn Read) -> Result<bool, UploadError> {
        self.publisher.receive_xorb(hash, body).map_err(refused)
    }

    fn receive_shard(&self, body: &mut dyn Read) -> Result<usize, UploadError> {
        self.publisher
            .receive_shard(body)
            .map(|s| s.len())
            .map_err(refused)
    }

    fn commit(&self, req: &CommitRequest) -> Result<Committed, UploadError> {
        let index = self
            .index
            .get()
            .map_err(|e| UploadError::Internal(format!("opening the index: {e:#}")))?;
        let req = publish::CommitRequest {
            repo: req.repo.clone(),
            branch: req.branch.clone(),
            parent: req.parent,
            operations: req.operations.iter().map(operation).collect(),
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

fn operation(op: &Operation) -> publish::Operation {
    match op {
        Operation::Add { path, content } => publish::Operation::Add {
            path: path.clone(),
            content: match content {
                Content::Inline(b) => publish::Content::Inline(b.clone()),
                Content::Object { sha256, size } => publish::Content::Object {
                    sha256: *sha256,
                    size: *size,
                },
            },
        },
        Operation::DeleteFile { path } => publish::Operation::DeleteFile { path: path.clone() },
        Operation::DeleteFolder { path } => publish::Operation::DeleteFolder { path: path.clone() },
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
