//! Manifests: the immutable description of one commit of one repository.
//!
//! A manifest lists every file of the revision (path, size, sha256, executable bit) and,
//! for each file, its chunks in order with where each chunk lives: an index into the
//! manifest's pack table, the frame's offset and length in that pack, and the chunk's
//! uncompressed length. A reader therefore needs the manifest and the packs, nothing else:
//! no global index. Stored under `repos/<org>/<name>/manifests/<commit>` in the object
//! envelope (codec.rs) with magic `MCASMANI`, zstd-compressed payload.

use crate::hash::{Sha256, XetHash};
use crate::ChunkId;
use bincode::{Decode, Encode};

use crate::codec::{self, Kind};
use crate::error::{FormatError, Result};
use crate::layout;
use crate::names::{CommitId, RepoId};
use crate::pack::PackId;

/// One chunk of a file, located.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct ChunkRef {
    /// BLAKE3 of the uncompressed chunk.
    pub id: ChunkId,
    /// Index into [`Manifest::packs`].
    pub pack: u32,
    /// Offset of the frame in the pack.
    pub offset: u32,
    /// Length of the frame (header included).
    pub frame_len: u32,
    /// Uncompressed length.
    pub raw_len: u32,
}

/// One file of a revision.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct FileEntry {
    /// Relative path with `/` separators, no `.` or `..` segments.
    pub path: String,
    /// Size in bytes (the sum of the chunks' raw lengths).
    pub size: u64,
    /// SHA-256 of the whole file.
    pub sha256: Sha256,
    /// Whether any execute bit was set in the source.
    pub executable: bool,
    /// The chunks, in file order.
    pub chunks: Vec<ChunkRef>,
}

impl FileEntry {
    /// The sha256 as hex.
    pub fn sha256_hex(&self) -> String {
        self.sha256.to_hex()
    }
}

/// One revision.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Manifest {
    /// The repository.
    pub repo: RepoId,
    /// The commit this manifest describes.
    pub commit: CommitId,
    /// When it was ingested (seconds since the Unix epoch).
    pub ingested_at: u64,
    /// Where it came from: `plain`, `hf-cache`.
    pub source: String,
    /// The packs the chunk refs point into.
    pub packs: Vec<PackId>,
    /// Every file, sorted by path.
    pub files: Vec<FileEntry>,
    /// When it was published, by the store's clock, with a tie-breaker (version 2; `None`
    /// in a manifest written before, and in version 2 for a manifest imported from one).
    pub published: Option<Published>,
    /// The Xet file hash of every file, in the order of `files` (version 3; empty in a
    /// manifest written before, or copied from one): the 32 bytes BLAKE3 outputs, see
    /// docs/format/xet.md and [`Manifest::xet_hash`].
    pub xet_hashes: Vec<XetHash>,
}

/// How much later than its manifest object's modification time a publication may be and
/// still be taken as it is ([`Manifest::order`]): more than any store's clock resolution
/// (whole seconds on S3, a kernel tick for a local directory).
pub const PUBLISHED_SLACK_MS: u64 = 2_000;

/// When a revision was published: its place in its repository's history (for
/// `gc --keep-last`) and its age by the store's clock (for `gc --keep-within`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Published {
    /// The object store's clock just before ingest wrote the manifest (ms since the Unix
    /// epoch). Its resolution is the store's: whole seconds where the store's clock is an
    /// HTTP `Date` header (S3), finer on a local directory.
    pub store_ms: u64,
    /// A sequence: the publishing host's clock in ms, made strictly increasing within one
    /// process. It orders revisions published within one `store_ms`.
    pub seq: u64,
}

/// A manifest as version 2 wrote it: [`Manifest`] without `xet_hashes`.
#[derive(Decode)]
struct ManifestV2 {
    repo: RepoId,
    commit: CommitId,
    ingested_at: u64,
    source: String,
    packs: Vec<PackId>,
    files: Vec<FileEntry>,
    published: Option<Published>,
}

impl From<ManifestV2> for Manifest {
    fn from(m: ManifestV2) -> Manifest {
        Manifest {
            repo: m.repo,
            commit: m.commit,
            ingested_at: m.ingested_at,
            source: m.source,
            packs: m.packs,
            files: m.files,
            published: m.published,
            xet_hashes: Vec::new(),
        }
    }
}

/// A manifest as version 1 wrote it: [`Manifest`] without `published` and `xet_hashes`.
#[derive(Decode)]
struct ManifestV1 {
    repo: RepoId,
    commit: CommitId,
    ingested_at: u64,
    source: String,
    packs: Vec<PackId>,
    files: Vec<FileEntry>,
}

impl From<ManifestV1> for Manifest {
    fn from(m: ManifestV1) -> Manifest {
        Manifest::from(ManifestV2 {
            repo: m.repo,
            commit: m.commit,
            ingested_at: m.ingested_at,
            source: m.source,
            packs: m.packs,
            files: m.files,
            published: None,
        })
    }
}

/// A revision's place in its repository's history: compared as a tuple, later is newer.
/// The same on every reader of the same objects, and total (the commit id breaks the
/// last ties).
pub type Order = (u64, u64, [u8; 20]);

impl Manifest {
    /// The file at `path`.
    pub fn file(&self, path: &str) -> Option<&FileEntry> {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    /// Its place in its repository's history: `(store time in ms, sequence, commit)` from
    /// [`Published`]; for a manifest without it, the manifest object's modification time by
    /// the store's clock (`listed_ms`, from the listing; `ingested_at` when the store gives
    /// none), then `ingested_at`. A publication time later than the object's modification
    /// time by more than [`PUBLISHED_SLACK_MS`] (a manifest imported with another host's
    /// time before imports stamped their own) counts as that modification time: no
    /// revision is newer than when this store got it. Within the slack (the store's clock
    /// read just before the write, and a modification time from a coarser clock) the
    /// publication stands, so revisions published together keep their sequence's order.
    pub fn order(&self, listed_ms: Option<u64>) -> Order {
        match self.published {
            Some(p) => {
                let at = match listed_ms {
                    Some(l) if p.store_ms > l.saturating_add(PUBLISHED_SLACK_MS) => l,
                    _ => p.store_ms,
                };
                (at, p.seq, self.commit.0)
            }
            None => {
                let ingested_ms = self.ingested_at.saturating_mul(1000);
                (listed_ms.unwrap_or(ingested_ms), ingested_ms, self.commit.0)
            }
        }
    }

    /// The Xet file hash of `files[index]`, if this manifest records them (version 3).
    pub fn xet_hash(&self, index: usize) -> Option<XetHash> {
        self.xet_hashes.get(index).copied()
    }

    /// Total size of the files.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Checks the invariants every reader relies on; the reason names the first broken one.
    /// [`decode`], the one function that decodes manifests, calls it,
    /// so no manifest from a bucket or a bundle reaches a reader without passing.
    ///
    /// * paths are safe relative names (no empty, `.` or `..` segment, no leading `/`, no
    ///   NUL), strictly sorted (so unique), and no path is a directory of another;
    /// * every chunk points into the pack table, at or after a pack's header, with a frame
    ///   at least a frame header long, ending within 4 GiB, and a chunk of at most
    ///   [`crate::MAX_CHUNK_LEN`] bytes;
    /// * every file's size is the sum of its chunks' lengths;
    /// * `xet_hashes` is empty or holds one hash per file.
    ///
    /// The repository id was checked when it was decoded ([`RepoId`]'s decoder).
    pub fn check(&self) -> std::result::Result<(), String> {
        let mut prev: Option<&str> = None;
        let mut names = std::collections::HashSet::with_capacity(self.files.len());
        for f in &self.files {
            check_path(&f.path)?;
            if let Some(p) = prev {
                if p >= f.path.as_str() {
                    return Err(format!("file {:?} is out of order or repeated", f.path));
                }
            }
            prev = Some(&f.path);
            names.insert(f.path.as_str());
            self.check_chunks(f)?;
        }
        if !self.xet_hashes.is_empty() && self.xet_hashes.len() != self.files.len() {
            return Err(format!(
                "{} Xet hashes for {} files",
                self.xet_hashes.len(),
                self.files.len()
            ));
        }
        for f in &self.files {
            let mut at = 0;
            while let Some(i) = f.path[at..].find('/') {
                let dir = &f.path[..at + i];
                if names.contains(dir) {
                    return Err(format!("{dir:?} is both a file and a directory"));
                }
                at += i + 1;
            }
        }
        Ok(())
    }

    fn check_chunks(&self, f: &FileEntry) -> std::result::Result<(), String> {
        let mut size: u64 = 0;
        for c in &f.chunks {
            let bad = |why: &str| Err(format!("{}: chunk {}: {why}", f.path, c.id));
            if c.pack as usize >= self.packs.len() {
                return bad("pack index beyond the pack table");
            }
            if (c.offset as usize) < crate::pack::PACK_HEADER_LEN
                || (c.frame_len as usize) < crate::frame::HEADER_LEN
                || c.offset as u64 + c.frame_len as u64 > u32::MAX as u64
            {
                return bad("frame offset or length impossible in a pack");
            }
            if c.raw_len > crate::MAX_CHUNK_LEN {
                return bad("longer than any chunk");
            }
            size += c.raw_len as u64;
        }
        if size != f.size {
            return Err(format!(
                "{}: size {} but its chunks hold {size} bytes",
                f.path, f.size
            ));
        }
        Ok(())
    }

    /// Whether every file of this manifest is in `other` with the same content (path,
    /// size, sha256, executable bit).
    pub fn is_part_of(&self, other: &Manifest) -> bool {
        self.files.iter().all(|a| {
            other.file(&a.path).is_some_and(|b| {
                a.size == b.size && a.sha256 == b.sha256 && a.executable == b.executable
            })
        })
    }

    /// True when both describe the same file tree (paths, sizes, hashes, modes), whatever
    /// the chunk locations and ingest times.
    pub fn same_content(&self, other: &Manifest) -> bool {
        self.files.len() == other.files.len()
            && self.files.iter().zip(&other.files).all(|(a, b)| {
                a.path == b.path
                    && a.size == b.size
                    && a.sha256 == b.sha256
                    && a.executable == b.executable
            })
    }
}

/// Checks that a file path is a safe relative name: not empty, no leading `/`, no empty,
/// `.` or `..` segment, no NUL. The one rule for every path joined to a directory (a
/// checkout, the Hub client's checks add what an upstream may not send); the error says
/// which part of it fails.
pub fn check_path(path: &str) -> std::result::Result<(), String> {
    let why = if path.is_empty() {
        "empty"
    } else if path.starts_with('/') {
        "absolute"
    } else if path.contains('\0') {
        "contains a NUL"
    } else if path
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == "..")
    {
        "has an empty, '.' or '..' segment"
    } else {
        return Ok(());
    };
    Err(format!("unsafe file path {path:?}: {why}"))
}

/// The commit id modelcas derives for a snapshot that has none: the first 20 bytes of a
/// BLAKE3 over the sorted (path, size, sha256, executable) list. The same files always give
/// the same id, whatever the chunking or the time.
pub fn derive_commit_id(files: &[(String, u64, Sha256, bool)]) -> CommitId {
    let mut sorted: Vec<_> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = blake3::Hasher::new();
    h.update(b"modelcas-commit-v1\0");
    for (path, size, sha, exec) in sorted {
        h.update(path.as_bytes());
        h.update(&[0]);
        h.update(&size.to_le_bytes());
        h.update(&sha.0);
        h.update(&[*exec as u8]);
    }
    let mut out = [0u8; 20];
    out.copy_from_slice(&h.finalize().as_bytes()[..20]);
    CommitId(out)
}

/// A ref object: `repos/<org>/<name>/refs/<name>`, magic `MCASREF\0`.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct RefObject {
    /// The commit the ref points at.
    pub commit: CommitId,
    /// When it was last set (seconds since the Unix epoch).
    pub updated_at: u64,
}

/// A pin: `repos/<org>/<name>/pins/<commit>`, magic `MCASPIN\0`.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct PinObject {
    /// The pinned commit.
    pub commit: CommitId,
    /// When it was pinned (seconds since the Unix epoch).
    pub pinned_at: u64,
}

/// A last-use record: `repos/<org>/<name>/used/<commit>`, magic `MCASUSED`. What counts for
/// `gc --unused-for` is the object's modification time by the store's clock; the fields
/// say who wrote it, for people.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct UsedObject {
    /// The commit read.
    pub commit: CommitId,
    /// When, by the writer's clock (seconds since the Unix epoch; informational).
    pub used_at: u64,
    /// What read it: `mount`, `serve`, `checkout`, `cat`, `pull`.
    pub by: String,
}

/// The mirror's record of a repository it brought from its upstream:
/// `repos/<org>/<name>/mirror/repo`, magic `MCASMREP`. Without it, a stored repository
/// exists inside (ingested, pulled, bundled) and `serve --upstream` never looks it up
/// upstream unless `upstream_repos` says so.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct MirrorRepoObject {
    /// The upstream's URL (informational).
    pub upstream: String,
    /// When the mirror first asked for it (seconds since the Unix epoch).
    pub created_at: u64,
}

/// The mirror's record of a ref it set: `repos/<org>/<name>/mirror/refs/<ref>`, magic
/// `MCASMREF`. The ref was set by the mirror's resolution iff this record equals the ref
/// object (same commit and `updated_at`); any other write of the ref (ingest, pull, sync,
/// `modelcas ref`) makes them differ, and the mirror never moves that ref again.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct MirrorRefObject {
    /// The commit the mirror set the ref to.
    pub commit: CommitId,
    /// The `updated_at` of the ref object it wrote.
    pub updated_at: u64,
}

/// A partially stored commit: `repos/<org>/<name>/partial/<commit>`, magic `MCASPART`.
/// Written before the manifest of a pull that selected only some files, removed once a
/// pull has stored every file of the commit.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct PartialObject {
    /// The commit.
    pub commit: CommitId,
    /// How many files the upstream lists for it.
    pub upstream_files: u64,
    /// When it was recorded (seconds since the Unix epoch).
    pub recorded_at: u64,
}

/// The store config: `config`, magic `MCASCONF`.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct StoreConfig {
    /// Random id of this store; names its local index directory.
    pub store_id: [u8; 16],
    /// When the store was created.
    pub created_at: u64,
    /// FastCDC minimum chunk size.
    pub chunk_min: u32,
    /// FastCDC average chunk size.
    pub chunk_avg: u32,
    /// FastCDC maximum chunk size.
    pub chunk_max: u32,
    /// Target pack size in bytes.
    pub pack_target: u32,
}

/// Decodes a manifest read from `key` (a bucket key, or a description such as a bundle
/// record's position) and checks it: the one way any reader gets a [`Manifest`] from
/// bytes. Beyond the envelope's checks, the repository id passes [`RepoId::parse`]'s rules
/// (its decoder), the invariants of [`Manifest::check`] hold, and a manifest read from a
/// bucket key describes the repository and commit that key names.
pub fn decode(key: &str, bytes: &[u8]) -> Result<Manifest> {
    let corrupt = |reason: String| FormatError::Corrupt {
        key: key.into(),
        reason,
    };
    let m: Manifest =
        codec::decode_versioned(Kind::Manifest, bytes, |version, payload| match version {
            1 => codec::decode_payload::<ManifestV1>(payload).map(Manifest::from),
            2 => codec::decode_payload::<ManifestV2>(payload).map(Manifest::from),
            _ => codec::decode_payload::<Manifest>(payload),
        })
        .map_err(|e| corrupt(e.to_string()))?;
    m.check().map_err(corrupt)?;
    if key.starts_with(layout::REPOS_PREFIX) && key != layout::manifest_key(&m.repo, &m.commit) {
        return Err(corrupt(format!(
            "it describes {}@{}, which belongs elsewhere",
            m.repo, m.commit
        )));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode, encode, Kind};

    #[test]
    fn manifest_round_trip_and_commit_derivation() {
        let m = Manifest {
            repo: RepoId::parse("a/b").unwrap(),
            commit: CommitId([1; 20]),
            ingested_at: 5,
            source: "plain".into(),
            packs: vec![PackId([2; 32])],
            files: vec![FileEntry {
                path: "x/y.bin".into(),
                size: 3,
                sha256: Sha256([3; 32]),
                executable: true,
                chunks: vec![ChunkRef {
                    id: ChunkId([4; 32]),
                    pack: 0,
                    offset: 16,
                    frame_len: 19,
                    raw_len: 3,
                }],
            }],
            published: None,
            xet_hashes: Vec::new(),
        };
        let bytes = encode(Kind::Manifest, &m, true);
        assert_eq!(decode::<Manifest>(Kind::Manifest, &bytes).unwrap(), m);
        assert!(m.file("x/y.bin").is_some());
        assert!(m.file("x").is_none());
        let a = derive_commit_id(&[
            ("a".into(), 1, Sha256([0; 32]), false),
            ("b".into(), 2, Sha256([1; 32]), false),
        ]);
        let b = derive_commit_id(&[
            ("b".into(), 2, Sha256([1; 32]), false),
            ("a".into(), 1, Sha256([0; 32]), false),
        ]);
        let c = derive_commit_id(&[
            ("a".into(), 1, Sha256([0; 32]), true),
            ("b".into(), 2, Sha256([1; 32]), false),
        ]);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}

#[cfg(test)]
mod decode_tests {
    use super::*;
    use crate::manifest::{ChunkRef, FileEntry};
    use crate::pack::PackId;
    use proptest::prelude::*;

    fn sample() -> Manifest {
        let chunk = |i: u8, raw_len: u32| ChunkRef {
            id: ChunkId([i; 32]),
            pack: u32::from(i % 2),
            offset: 16 + u32::from(i) * 100,
            frame_len: 16 + raw_len,
            raw_len,
        };
        Manifest {
            repo: RepoId::parse("org/model").unwrap(),
            commit: CommitId([9; 20]),
            ingested_at: 1,
            source: "plain".into(),
            packs: vec![PackId([1; 32]), PackId([2; 32])],
            files: vec![
                FileEntry {
                    path: "a/b.bin".into(),
                    size: 7,
                    sha256: Sha256([3; 32]),
                    executable: false,
                    chunks: vec![chunk(1, 3), chunk(2, 4)],
                },
                FileEntry {
                    path: "c.json".into(),
                    size: 5,
                    sha256: Sha256([4; 32]),
                    executable: true,
                    chunks: vec![chunk(3, 5)],
                },
            ],
            published: None,
            xet_hashes: Vec::new(),
        }
    }

    /// An envelope around `payload` with a correct checksum, as a tamperer would make.
    fn envelope(payload: &[u8]) -> Vec<u8> {
        let mut out = b"MCASMANI".to_vec();
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(payload);
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// The invariants, checked independently of [`Manifest::check`].
    fn holds(m: &Manifest) {
        RepoId::parse(&m.repo.to_string()).unwrap();
        for w in m.files.windows(2) {
            assert!(w[0].path < w[1].path);
        }
        for f in &m.files {
            assert!(!f.path.is_empty() && !f.path.starts_with('/'));
            assert!(f
                .path
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."));
            let mut sum = 0u64;
            for c in &f.chunks {
                assert!((c.pack as usize) < m.packs.len());
                assert!(c.raw_len <= crate::MAX_CHUNK_LEN);
                assert!(c.offset >= 16 && c.frame_len >= 16);
                sum += c.raw_len as u64;
            }
            assert_eq!(sum, f.size);
        }
    }

    #[test]
    fn decode_checks_names_and_invariants() {
        let m = sample();
        let bytes = codec::encode(Kind::Manifest, &m, true);
        assert_eq!(decode("x", &bytes).unwrap(), m);
        let key = layout::manifest_key(&m.repo, &m.commit);
        decode(&key, &bytes).unwrap();
        let elsewhere = layout::manifest_key(&RepoId::parse("other/model").unwrap(), &m.commit);
        assert!(decode(&elsewhere, &bytes).is_err());
        type Damage = Box<dyn Fn(&mut Manifest)>;
        let cases: Vec<(&str, Damage)> = vec![
            (
                "unsafe file path",
                Box::new(|m| m.files[0].path = "../x".into()),
            ),
            (
                "unsafe file path",
                Box::new(|m| m.files[0].path = "/etc/x".into()),
            ),
            ("out of order", Box::new(|m| m.files.swap(0, 1))),
            (
                "out of order",
                Box::new(|m| m.files[1].path = "a/b.bin".into()),
            ),
            (
                "both a file and a directory",
                Box::new(|m| m.files[1].path = "a/b.bin/c".into()),
            ),
            ("pack index", Box::new(|m| m.files[0].chunks[0].pack = 2)),
            (
                "longer than any chunk",
                Box::new(|m| m.files[0].chunks[0].raw_len = u32::MAX),
            ),
            (
                "impossible",
                Box::new(|m| m.files[0].chunks[0].offset = u32::MAX),
            ),
            ("chunks hold", Box::new(|m| m.files[1].size = 6)),
        ];
        for (want, damage) in cases {
            let mut bad = sample();
            damage(&mut bad);
            let err = decode("x", &codec::encode(Kind::Manifest, &bad, false))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
        // A repository name that would escape its prefix never decodes.
        let payload = bincode::encode_to_vec(sample(), bincode::config::standard()).unwrap();
        let at = payload.windows(5).position(|w| w == b"model").unwrap();
        let mut evil = payload[..at - 1].to_vec();
        let name = b"model/refs";
        evil.push(name.len() as u8);
        evil.extend_from_slice(name);
        evil.extend_from_slice(&payload[at + 5..]);
        let err = decode("x", &envelope(&evil)).unwrap_err().to_string();
        assert!(err.contains("invalid repo id"), "{err}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn mutated_manifests_never_panic(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let mut payload =
                bincode::encode_to_vec(sample(), bincode::config::standard()).unwrap();
            for (at, byte, op) in edits {
                let i = at.index(payload.len().max(1));
                match op {
                    0 if i < payload.len() => payload[i] = byte,
                    1 if i < payload.len() => payload[i] ^= 1 << (byte % 8),
                    2 => payload.insert(i.min(payload.len()), byte),
                    _ if i < payload.len() => { payload.remove(i); }
                    _ => {}
                }
            }
            if truncate {
                payload.truncate(cut.index(payload.len() + 1));
            }
            if let Ok(m) = decode("x", &envelope(&payload)) {
                holds(&m);
            }
        }
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    /// The version 1 manifest of the test vectors (docs/format/vectors.md), as modelcas wrote it.
    const V1: &str = "4d4341534d414e490100010028b52ffd603500a90900036f7267046e616d6501\
        23456789abcdef0123456789abcdef01234567fc702d0e6b05706c61696e0122\
        5860231f9dc73a657069d5c56e4f5ca67324df0e008dc2c79a9f3c502cc82c03\
        05612e7478740398ea6e4f216f2fb4b69fff9b3a44842c38686ca685f3f55dc4\
        8c5d3fb1107be401010b8b60248fad7ac6dfac221b7e01a8b91c772421a15b38\
        7dd1fb2d6a94aee438007f130305622e747874fb38010ee3074055a306ceb843\
        f6d4229d459ed7a55f898ff9f9aa18f10656ae4accd600013149576ee95e25e6\
        18e577e05539852f23029b568132572f90813e7bd36215f600102efb38010563\
        2e62696e40e930ecff9cd3953e26ccdddd425f699e9dfd5faaec861aeed23033\
        1e9e0669d700012536cb44dc2316fec0ababceaad16025b2579d65582292d9dd\
        4215f013e8a879003e414099244423d9ab3c646b7f818bc870624bfd22d7f3f6\
        0f33480e63b2053cf15b1f";
    const KEY: &str = "repos/org/name/manifests/0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_version_1_manifest_still_reads_and_orders_by_its_objects_time() {
        let bytes = hex::decode(V1.replace(' ', "")).unwrap();
        let m = decode(KEY, &bytes).unwrap();
        assert_eq!(m.ingested_at, 1_796_091_248);
        assert_eq!(m.published, None);
        assert_eq!(m.files.len(), 3);
        // Without `published`: the object's time by the store's clock, then ingested_at.
        assert_eq!(m.order(Some(7)), (7, 1_796_091_248_000, m.commit.0));
        assert_eq!(m.order(None).0, 1_796_091_248_000);
    }

    #[test]
    fn version_2_carries_when_it_was_published() {
        let mut m = decode(KEY, &hex::decode(V1).unwrap()).unwrap();
        m.published = Some(Published {
            store_ms: 1_796_091_248_123,
            seq: 42,
        });
        let bytes = codec::encode(Kind::Manifest, &m, true);
        assert_eq!(&bytes[8..10], &[3, 0], "written as version 3");
        let back = decode(KEY, &bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.order(None), (1_796_091_248_123, 42, m.commit.0));
        let later = Some(1_796_091_249_000);
        assert_eq!(back.order(later), (1_796_091_248_123, 42, m.commit.0));
        // Published after the object was written (another host's time, issue 36): the
        // object's time wins, so the revision is no newer than when this store got it;
        // within the slack of clock resolutions, the publication stands.
        assert_eq!(back.order(Some(5)), (5, 42, m.commit.0));
        let just_before = Some(1_796_091_248_123 - PUBLISHED_SLACK_MS);
        assert_eq!(back.order(just_before).0, 1_796_091_248_123);
        // The example of the test vectors (docs/format/vectors.md): the 19 bytes after `files`.
        m.published = Some(Published {
            store_ms: 1_796_091_248_123,
            seq: 1_796_091_248_124,
        });
        let plain = codec::encode(Kind::Manifest, &m, false);
        let payload = &plain[codec::HEADER_LEN..plain.len() - codec::TRAILER_LEN];
        assert_eq!(
            payload.len(),
            0x135 + 19 + 1,
            "and version 3's empty xet_hashes"
        );
        assert_eq!(
            hex::encode(&payload[0x135..]),
            "01fdfb7d612fa2010000fdfc7d612fa201000000"
        );
        // Without the fields: the same as version 1 plus a None tag and an empty Vec.
        m.published = None;
        let plain = codec::encode(Kind::Manifest, &m, false);
        assert_eq!(plain[plain.len() - 34], 0, "the Option tag, None");
        assert_eq!(plain[plain.len() - 33], 0, "no Xet hashes");
        assert_eq!(decode(KEY, &plain).unwrap(), m);
        // A version 1 object with version 2's payload is refused (trailing bytes), not
        // misread; and a version above 2 is refused.
        let mut relabelled = plain[..plain.len() - 32].to_vec();
        relabelled[8] = 1;
        let sum = blake3::hash(&relabelled);
        relabelled.extend_from_slice(sum.as_bytes());
        assert!(decode(KEY, &relabelled).is_err());
        let mut newer = bytes.clone();
        newer[8] = 4;
        assert!(decode(KEY, &newer)
            .unwrap_err()
            .to_string()
            .contains("newer"));
    }

    /// Re-envelopes `payload` as `version`, with a correct checksum.
    fn as_version(version: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = b"MCASMANI".to_vec();
        out.extend_from_slice(&[version, 0, 0, 0]);
        out.extend_from_slice(payload);
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    #[test]
    fn version_3_carries_one_xet_hash_per_file_and_version_2_still_reads() {
        let mut m = decode(KEY, &hex::decode(V1).unwrap()).unwrap();
        m.xet_hashes = vec![XetHash([7; 32]), XetHash([8; 32]), XetHash([9; 32])];
        let bytes = codec::encode(Kind::Manifest, &m, false);
        assert_eq!(&bytes[8..10], &[3, 0]);
        let back = decode(KEY, &bytes).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.xet_hash(1), Some(XetHash([8; 32])));
        assert_eq!(back.xet_hash(3), None);
        // The payload ends with the Vec: its length (3) and the hashes in file order.
        let payload = &bytes[codec::HEADER_LEN..bytes.len() - codec::TRAILER_LEN];
        assert_eq!(payload[payload.len() - 97], 3);
        assert_eq!(&payload[payload.len() - 32..], &[9; 32]);
        // A count other than the files' is refused.
        for n in [1, 2, 4] {
            m.xet_hashes = vec![XetHash([7; 32]); n];
            let err = decode(KEY, &codec::encode(Kind::Manifest, &m, false)).unwrap_err();
            assert!(err.to_string().contains("Xet hashes for 3 files"), "{err}");
        }
        // A version 2 object (version 3's payload without the last field) reads as having
        // no Xet hashes; the same payload labelled version 3 is refused (truncated).
        m.xet_hashes.clear();
        let plain = codec::encode(Kind::Manifest, &m, false);
        let v2_payload = &plain[codec::HEADER_LEN..plain.len() - codec::TRAILER_LEN - 1];
        let v2 = decode(KEY, &as_version(2, v2_payload)).unwrap();
        assert_eq!(v2, m);
        assert!(v2.xet_hashes.is_empty());
        assert!(decode(KEY, &as_version(3, v2_payload)).is_err());
    }
}
