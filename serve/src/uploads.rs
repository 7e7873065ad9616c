//! What the hub needs to take uploads (`hf upload`, `upload_folder`, `push_to_hub`), without
//! I/O: the [`Uploads`] the binary provides (the `modelcas` CLI implements it with the
//! `publish` crate, so this crate stays free of the index and the writers), write scopes
//! of tokens, and the signed URLs an LFS batch hands out.
//!
//! The routes are in `hub/upload.rs`; the streamed `PUT` of an object in `server.rs`.

use std::io::Read;
use std::time::Duration;

use format::{CommitId, RepoId, Sha256, XetHash};

/// What a commit adds: bytes sent inline, or an object uploaded before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    Inline(Vec<u8>),
    Object { sha256: Sha256, size: u64 },
}

/// One operation of a commit (the NDJSON lines after the header), in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    Add { path: String, content: Content },
    DeleteFile { path: String },
    DeleteFolder { path: String },
}

/// A commit to apply to `branch` of `repo`.
#[derive(Clone, Debug)]
pub struct CommitRequest {
    pub repo: RepoId,
    pub branch: String,
    /// `parentCommit` of the header: the commit is refused if the branch moved from it.
    pub parent: Option<CommitId>,
    pub operations: Vec<Operation>,
}

/// What a commit made.
#[derive(Clone, Debug)]
pub struct Committed {
    pub commit: CommitId,
    /// The branch was left where it was: the revision's release check did not pass.
    pub held: bool,
}

/// Why an upload or a commit was refused; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// 400: malformed, unsafe, or naming what was never uploaded.
    #[error("{0}")]
    BadRequest(String),
    /// 413: over a limit.
    #[error("{0}")]
    TooLarge(String),
    /// 507: no room to keep it.
    #[error("{0}")]
    NoRoom(String),
    /// 409: another commit to the branch is being applied.
    #[error("{0}")]
    Conflict(String),
    /// 412: the branch moved from the parent the commit names.
    #[error("{0}")]
    Moved(String),
    /// 404 `EntryNotFound`.
    #[error("{0}")]
    EntryNotFound(String),
    /// 404 `RevisionNotFound`.
    #[error("{0}")]
    RevisionNotFound(String),
    /// 500.
    #[error("{0}")]
    Internal(String),
}

impl UploadError {
    /// The reply to a refused upload or commit.
    pub(crate) fn reply(self) -> crate::reply::Reply {
        use http::StatusCode;
        let (status, code) = match &self {
            UploadError::BadRequest(_) => (StatusCode::BAD_REQUEST, ""),
            UploadError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, ""),
            UploadError::NoRoom(_) => (StatusCode::INSUFFICIENT_STORAGE, ""),
            UploadError::Conflict(_) => (StatusCode::CONFLICT, ""),
            UploadError::Moved(_) => (StatusCode::PRECONDITION_FAILED, ""),
            UploadError::EntryNotFound(_) => (StatusCode::NOT_FOUND, "EntryNotFound"),
            UploadError::RevisionNotFound(_) => (StatusCode::NOT_FOUND, "RevisionNotFound"),
            UploadError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, ""),
        };
        crate::reply::Reply::error(status, code, &self.to_string(), None)
    }
}

/// The write side the binary gives the hub.
pub trait Uploads: Send + Sync {
    /// For each (sha256, size), whether it need not be uploaded for a commit to `repo`.
    fn present(&self, repo: &RepoId, objects: &[(Sha256, u64)]) -> Result<Vec<bool>, UploadError>;
    /// Whether an object of `size` bytes may be received now (checked before any byte is
    /// read).
    fn check_room(&self, size: u64) -> Result<(), UploadError>;
    /// Receives object `sha256` of `size` bytes for `repo` from `body` (at most `size + 1`
    /// bytes are read); kept only when it is exactly that, and only for `repo`.
    fn receive(
        &self,
        repo: &RepoId,
        sha256: &Sha256,
        size: u64,
        body: &mut dyn Read,
    ) -> Result<(), UploadError>;
    /// Whether the spool holds object `sha256` of `size` bytes (LFS verify).
    fn received(&self, repo: &RepoId, sha256: &Sha256, size: u64) -> bool;
    /// Receives a Xet xorb named `hash` from `body`; whether it was new.
    fn receive_xorb(&self, hash: &XetHash, body: &mut dyn Read) -> Result<bool, UploadError>;
    /// Receives a Xet shard from `body`: each file it describes is checked and kept; how
    /// many.
    /// Receives a Xet shard for `repo` from `body`; its terms may name the stored xorbs of
    /// content held by repositories `visible` accepts (others read as unknown).
    fn receive_shard(
        &self,
        repo: &RepoId,
        body: &mut dyn Read,
        visible: &dyn Fn(&RepoId) -> bool,
    ) -> Result<usize, UploadError>;
    /// A client is about to upload to `repo` through Xet: what the store holds of it may
    /// be made ready for the dedup query (in the background).
    fn prepare(&self, repo: &RepoId);
    /// Xet's global dedup query: the repository of a revision holding `chunk` and a shard
    /// listing the stored xorb that holds it (`None`: unknown, 404).
    fn dedup(&self, chunk: &XetHash) -> Option<(RepoId, Vec<u8>)>;
    /// Applies a commit and publishes it.
    fn commit(&self, req: CommitRequest) -> Result<Committed, UploadError>;
}

/// The hub's upload settings.
#[derive(Clone)]
pub struct UploadOptions {
    pub uploads: std::sync::Arc<dyn Uploads>,
    /// Key of the upload URLs' signatures (random per process: URLs die with it).
    pub secret: [u8; 32],
    /// Lifetime of an upload URL.
    pub url_ttl: Duration,
    /// Files up to this size are committed inline (`regular`), larger ones by LFS.
    pub regular_max: u64,
    /// Uploads may go to repositories the mirror brought from upstream.
    pub over_mirror: bool,
}

impl std::fmt::Debug for UploadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UploadOptions")
            .field("url_ttl", &self.url_ttl)
            .field("regular_max", &self.regular_max)
            .field("over_mirror", &self.over_mirror)
            .finish_non_exhaustive()
    }
}

/// Default for [`UploadOptions::regular_max`]: config files and the like go inline.
pub const REGULAR_MAX: u64 = 256 << 10;

impl UploadOptions {
    /// The signature of an upload URL for object `sha256` of `size` bytes into `repo`,
    /// expiring at `exp` (unix seconds): a keyed BLAKE3, hex.
    pub fn sign(&self, repo: &str, sha256: &str, size: u64, exp: u64) -> String {
        let mut h = blake3::Hasher::new_keyed(&self.secret);
        for p in [
            "lfs-upload",
            repo,
            sha256,
            &size.to_string(),
            &exp.to_string(),
        ] {
            h.update(p.as_bytes());
            h.update(&[0]);
        }
        h.finalize().to_hex().to_string()
    }

    /// A Xet write token for `repo` expiring at `exp`: `w:{repo}:{exp}:{mac}`. The CAS
    /// routes (xorbs, shards) take it instead of a token of the token file.
    pub fn xet_token(&self, repo: &str, exp: u64) -> String {
        format!("w:{repo}:{exp}:{}", self.sign(repo, "xet-write", 0, exp))
    }

    /// The repository of a Xet write token, if it is one of ours and not expired at `now`.
    pub fn open_xet_token(&self, token: &str, now: u64) -> Option<String> {
        let rest = token.strip_prefix("w:")?;
        let (rest, mac) = rest.rsplit_once(':')?;
        let (repo, exp) = rest.rsplit_once(':')?;
        let exp = exp.parse::<u64>().ok()?;
        self.check(repo, "xet-write", 0, exp, mac, now)
            .then(|| repo.to_string())
    }

    /// Whether `sig` signs that URL and it has not expired at `now` (constant-time
    /// comparison).
    pub fn check(
        &self,
        repo: &str,
        sha256: &str,
        size: u64,
        exp: u64,
        sig: &str,
        now: u64,
    ) -> bool {
        let want = self.sign(repo, sha256, size, exp);
        let same = matches!(
            (blake3::Hash::from_hex(&want), blake3::Hash::from_hex(sig)),
            (Ok(a), Ok(b)) if a == b
        );
        same && exp > now
    }
}

/// Write scopes of tokens: token → repository patterns it may write (`org/*`, `org/name`,
/// `*`; without ASCII case, as repository ids compare).
pub type WriteScopes = std::collections::HashMap<String, Vec<String>>;

/// Whether `patterns` let a token write to `repo`.
pub fn may_write(patterns: &[String], repo: &str) -> bool {
    patterns
        .iter()
        .any(|p| crate::upstream::glob_folded(p, repo))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct None_;
    impl Uploads for None_ {
        fn present(&self, _: &RepoId, o: &[(Sha256, u64)]) -> Result<Vec<bool>, UploadError> {
            Ok(vec![false; o.len()])
        }
        fn check_room(&self, _: u64) -> Result<(), UploadError> {
            Ok(())
        }
        fn receive(
            &self,
            _: &RepoId,
            _: &Sha256,
            _: u64,
            _: &mut dyn Read,
        ) -> Result<(), UploadError> {
            Ok(())
        }
        fn received(&self, _: &RepoId, _: &Sha256, _: u64) -> bool {
            false
        }
        fn receive_xorb(&self, _: &XetHash, _: &mut dyn Read) -> Result<bool, UploadError> {
            Ok(false)
        }
        fn receive_shard(
            &self,
            _: &RepoId,
            _: &mut dyn Read,
            _: &dyn Fn(&RepoId) -> bool,
        ) -> Result<usize, UploadError> {
            Ok(0)
        }
        fn dedup(&self, _: &XetHash) -> Option<(RepoId, Vec<u8>)> {
            None
        }
        fn prepare(&self, _: &RepoId) {}
        fn commit(&self, _: CommitRequest) -> Result<Committed, UploadError> {
            Err(UploadError::Internal("no".into()))
        }
    }

    #[test]
    fn an_upload_url_is_bound_to_its_object_and_expires() {
        let o = UploadOptions {
            uploads: std::sync::Arc::new(None_),
            secret: [3; 32],
            url_ttl: Duration::from_secs(60),
            regular_max: REGULAR_MAX,
            over_mirror: false,
        };
        let sig = o.sign("a/b", "00ff", 10, 100);
        assert!(o.check("a/b", "00ff", 10, 100, &sig, 99));
        assert!(!o.check("a/b", "00ff", 10, 100, &sig, 100), "expired");
        assert!(
            !o.check("a/c", "00ff", 10, 100, &sig, 0),
            "another repository"
        );
        assert!(!o.check("a/b", "00fe", 10, 100, &sig, 0), "another object");
        assert!(!o.check("a/b", "00ff", 11, 100, &sig, 0), "another size");
        assert!(!o.check("a/b", "00ff", 10, 101, &sig, 0), "a later expiry");
        assert!(!o.check("a/b", "00ff", 10, 100, "zz", 0), "garbage");
        let other = UploadOptions {
            secret: [4; 32],
            ..o.clone()
        };
        assert!(!other.check("a/b", "00ff", 10, 100, &sig, 0), "another key");
    }

    #[test]
    fn write_scopes_match_without_case() {
        let p = vec!["Team/*".to_string(), "solo/model".to_string()];
        assert!(may_write(&p, "team/llm"));
        assert!(may_write(&p, "SOLO/Model"));
        assert!(!may_write(&p, "solo/other"));
        assert!(!may_write(&[], "team/llm"));
    }
}
