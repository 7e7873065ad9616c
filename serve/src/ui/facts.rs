//! What the pages show, as plain values, and the [`Inventory`] trait that provides them.
//!
//! The endpoint does not compute store-wide figures or gc's decisions itself: those live
//! in the `store` crate (which this crate must not depend on: it builds without RocksDB
//! and the AWS SDK). The binary implements [`Inventory`] with the very functions that
//! `modelcas ls`, `stats` and `gc --dry-run` call, so that a page and those commands show
//! the same figures for the same store.

use std::collections::BTreeMap;
use std::time::Duration;

pub use format::release::Verdict as ReleaseVerdict;
use format::{CommitId, RepoId};

/// An error of the inventory, shown on the page (never a panic, never a 500 for the
/// whole page when only one part failed).
pub type Result<T> = std::result::Result<T, String>;

/// One repository on the repositories page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RepoSummary {
    /// As the store spells it.
    pub repo: String,
    /// Revisions (manifests).
    pub revisions: usize,
    /// Ref names, sorted.
    pub refs: Vec<String>,
    /// The repository's own figures ([`Figures`]: its revisions alone).
    pub figures: Figures,
    /// The latest last use of any of its revisions (seconds since the epoch).
    pub last_used: Option<u64>,
    /// Refs naming a revision that failed its release check.
    pub failing_refs: usize,
}

/// Sizes of a set of revisions, as `modelcas stats` counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Files over all revisions.
    pub files: u64,
    /// Sum of every file of every revision.
    pub logical_bytes: u64,
    /// Distinct chunks.
    pub unique_chunks: u64,
    /// Uncompressed bytes of the distinct chunks (after dedup).
    pub unique_bytes: u64,
    /// Frame bytes of the distinct chunks (after dedup and compression).
    pub compressed_bytes: u64,
    /// logical / unique, as `modelcas stats` computes it.
    pub dedup_ratio: f64,
    /// unique / compressed, as `modelcas stats` computes it.
    pub compression_ratio: f64,
}

/// What retention does to a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Kept, with the reason in words (`a ref points at it`, `pinned`, ...).
    Keep(String),
    /// gc would delete its manifest.
    Expire,
    /// Not decided: the policy could not be applied (the text says why).
    Unknown(String),
}

/// One revision on a repository's page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    pub commit: CommitId,
    /// Seconds since the epoch.
    pub ingested_at: u64,
    pub files: usize,
    /// Total size of its files.
    pub bytes: u64,
    /// Ref names pointing at it.
    pub refs: Vec<String>,
    pub pinned: bool,
    /// Last read (seconds since the epoch), `None`: never since last-use records exist.
    pub last_used: Option<u64>,
    /// What `modelcas gc` with the configured policy would do.
    pub policy: Verdict,
    /// What `modelcas gc --unused-for D` would do (D as asked on the page).
    pub unused_for: Verdict,
    /// Its release check, as its current record says.
    pub check: CheckFacts,
    /// Its release labels, by key.
    pub labels: BTreeMap<String, String>,
}

/// What a revision's release check record says (docs/design/release-check.md §7.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckFacts {
    /// [`ReleaseVerdict::NotChecked`] when there is no record for the revision's files.
    pub verdict: ReleaseVerdict,
    pub errors: usize,
    pub warnings: usize,
    /// The problems' messages (each starts with the file it is about), errors first.
    pub problems: Vec<String>,
}

impl Default for CheckFacts {
    /// Not checked.
    fn default() -> Self {
        CheckFacts {
            verdict: ReleaseVerdict::NotChecked,
            errors: 0,
            warnings: 0,
            problems: Vec::new(),
        }
    }
}

/// One repository's page.
#[derive(Clone, Debug, PartialEq)]
pub struct RepoDetail {
    /// As the store spells it.
    pub repo: String,
    /// Oldest first (ingest time, then commit), as `modelcas ls ORG/NAME` lists them.
    pub revisions: Vec<Revision>,
    /// The configured retention policy of this repository, in words.
    pub policy: String,
}

/// The store page.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreFacts {
    /// Where the store is (`/path`, `s3://bucket/prefix`).
    pub location: String,
    pub repos: usize,
    pub revisions: usize,
    /// Every revision's figures together.
    pub figures: Figures,
    /// Pack objects and their bytes.
    pub packs: u64,
    pub stored_bytes: u64,
    /// logical / stored, as `modelcas stats` computes it.
    pub total_ratio: f64,
    /// Packs on gc's condemned list and their bytes.
    pub condemned_packs: u64,
    pub condemned_bytes: u64,
    /// When gc last wrote its condemned list (ms since the epoch, the store's clock);
    /// `None`: never.
    pub gc_state_written_ms: Option<u64>,
    /// What `modelcas gc --dry-run` (the configured policy) would expire: count, bytes.
    pub would_expire: std::result::Result<(usize, u64), String>,
    /// The last recorded run of each maintenance command (`gc`, `sync`): `None` when none
    /// is recorded, an error when the record cannot be read.
    pub runs: Vec<(String, std::result::Result<Option<LastRun>, String>)>,
}

/// The last run of a maintenance command, as the store records it (`runs/<command>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastRun {
    /// Seconds since the epoch, by the clock of the machine that ran it.
    pub started_at: u64,
    pub finished_at: u64,
    /// Every part succeeded.
    pub ok: bool,
    /// What it did, as the command printed it.
    pub summary: String,
}

/// The data the pages need; the binary implements it over the store.
pub trait Inventory: Send + Sync {
    /// Every repository, sorted by id.
    fn repos(&self) -> Result<Vec<RepoSummary>>;
    /// One repository (`None`: the store has no such repository), with what gc with the
    /// configured policy, and with `--unused-for unused_for`, would do to each revision.
    fn repo(&self, repo: &RepoId, unused_for: Duration) -> Result<Option<RepoDetail>>;
    /// Store-wide figures.
    fn store(&self) -> Result<StoreFacts>;
    /// The shortest `--unused-for` gc accepts.
    fn min_unused_for(&self) -> Duration;
}
