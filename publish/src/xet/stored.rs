//! Xet's view of what the store holds, for the global dedup query: the Xet chunk list of
//! stored files, recorded on the hub's disk (`<spool>/xet/<sha256>`, node.md "Xet chunk
//! lists"), and the *stored xorbs* they are cut into: each file's chunks in groups of at
//! most [`XORB_CHUNKS`] chunks and 64 MiB, in file order, each named by the Merkle hash of
//! its chunks as any xorb is. A client that asks about a chunk of a stored file gets a
//! shard listing the stored xorb holding it (its chunk hashes keyed, so that only a client
//! holding a chunk can recognise it); its own shard may then name that xorb, and the hub
//! reads those chunks back from the store (`crate::Publisher`), hashing each again.
//!
//! In memory: the key chunks (a file's first chunk, and every chunk whose hash's last word
//! is a multiple of 1024: the ones hf_xet asks about) and the stored xorbs, each a few
//! dozen bytes per 64 MiB stored; chunk lists are read from disk when needed.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use format::{CommitId, RepoId, Sha256, XetHash};
use parking_lot::Mutex;

use crate::error::PublishError;

/// Most chunks of one stored xorb.
pub const XORB_CHUNKS: usize = 1024;
/// Most bytes of one stored xorb.
const XORB_BYTES: u64 = 64 << 20;
/// hf_xet asks about a chunk whose hash's last word is a multiple of this.
const KEY_MODULUS: u64 = 1024;
const MAGIC: &[u8; 8] = b"MCASXETF";
const VERSION: u32 = 1;
/// Most chunks in one record (a 1 TiB file).
pub(crate) const MAX_CHUNKS: u32 = 1 << 24;

/// A stored file's Xet chunks, and a revision that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRecord {
    pub repo: RepoId,
    pub commit: CommitId,
    pub path: String,
    /// Each chunk's hash and length, in file order.
    pub chunks: Vec<(XetHash, u32)>,
}

impl FileRecord {
    /// The chunk list of a file no revision holds yet (the spool's `objects/<sha256>.xet`):
    /// repository `spool/pending`, commit all zero, path empty.
    pub fn pending(chunks: Vec<(XetHash, u32)>) -> Result<FileRecord, PublishError> {
        Ok(FileRecord {
            repo: RepoId::parse("spool/pending").map_err(|e| PublishError::Io(e.to_string()))?,
            commit: CommitId([0; 20]),
            path: String::new(),
            chunks,
        })
    }

    /// The record's bytes: `MCASXETF`, version u32 (1), the repository (u16 length and
    /// UTF-8), the commit (20 bytes), the path (u32 length and UTF-8), the chunk count u32,
    /// each chunk's hash (32) and length u32, then the BLAKE3 of everything before (32);
    /// integers little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let repo = self.repo.to_string();
        let mut out =
            Vec::with_capacity(80 + repo.len() + self.path.len() + 36 * self.chunks.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(repo.len() as u16).to_le_bytes());
        out.extend_from_slice(repo.as_bytes());
        out.extend_from_slice(&self.commit.0);
        out.extend_from_slice(&(self.path.len() as u32).to_le_bytes());
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        for (h, len) in &self.chunks {
            out.extend_from_slice(&h.0);
            out.extend_from_slice(&len.to_le_bytes());
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// A record from its bytes; `None` when they are not a whole, intact record.
    pub fn decode(b: &[u8]) -> Option<FileRecord> {
        let body = b.get(..b.len().checked_sub(32)?)?;
        if blake3::hash(body).as_bytes() != &b[body.len()..] || !body.starts_with(MAGIC) {
            return None;
        }
        let mut r = Reader { b: body, at: 8 };
        if r.u32()? != VERSION {
            return None;
        }
        let n = r.u16()? as usize;
        let repo = RepoId::parse(std::str::from_utf8(r.take(n)?).ok()?).ok()?;
        let commit = CommitId(r.take(20)?.try_into().ok()?);
        let n = r.u32()? as usize;
        let path = std::str::from_utf8(r.take(n)?).ok()?.to_string();
        let n = r.u32()?;
        if n > MAX_CHUNKS || r.b.len() - r.at != 36 * n as usize {
            return None;
        }
        let chunks = (0..n)
            .map(|_| Some((XetHash(r.take(32)?.try_into().ok()?), r.u32()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(FileRecord {
            repo,
            commit,
            path,
            chunks,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let out = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(out)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// The stored xorbs of a chunk list: (first chunk, chunk count, Merkle hash).
pub fn stored_xorbs(chunks: &[(XetHash, u32)]) -> Vec<(usize, usize, XetHash)> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < chunks.len() {
        let (mut n, mut bytes) = (0usize, 0u64);
        let mut tree = xethash::Tree::default();
        while first + n < chunks.len() && n < XORB_CHUNKS {
            let (h, len) = chunks[first + n];
            if n > 0 && bytes + u64::from(len) > XORB_BYTES {
                break;
            }
            tree.push(h, u64::from(len));
            bytes += u64::from(len);
            n += 1;
        }
        if let Some(root) = tree.root() {
            out.push((first, n, root));
        }
        first += n;
    }
    out
}

fn is_key(h: &XetHash) -> bool {
    u64::from_le_bytes(h.0[24..].try_into().unwrap_or_default()) % KEY_MODULUS == 0
}

#[derive(Default)]
struct Maps {
    /// Key chunk → the file and the chunk's index.
    keys: HashMap<XetHash, (Sha256, u32)>,
    /// Stored xorb → the file and where the xorb lies in it.
    xorbs: HashMap<XetHash, (Sha256, Group)>,
    /// Each file's stored xorbs, in order.
    groups: HashMap<Sha256, Vec<Group>>,
}

/// Where one stored xorb lies in its file: its first chunk, chunk count, the offset of its
/// first byte, and its hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub first: u32,
    pub n: u32,
    pub offset: u64,
    pub hash: XetHash,
}

/// Part of a record read from disk: its repository and revision, and chunks `[first,
/// first + n)` of one stored xorb.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub repo: RepoId,
    pub commit: CommitId,
    pub chunks: Vec<(XetHash, u32)>,
}

/// A global dedup answer ([`StoredXet::dedup_shard`]): the shard to send, and the record's
/// content, repository and revision (the revision holding it when it was recorded).
pub struct DedupAnswer {
    pub sha: Sha256,
    pub repo: RepoId,
    pub commit: CommitId,
    pub shard: Vec<u8>,
}

/// The chunk lists of stored files, on the hub's disk, with their key chunks and stored
/// xorbs in memory.
pub struct StoredXet {
    dir: PathBuf,
    maps: Mutex<Maps>,
}

impl StoredXet {
    /// The records in `dir` (created if needed); records that do not decode are deleted.
    pub fn open(dir: &Path) -> Result<StoredXet, PublishError> {
        fs::create_dir_all(dir).map_err(|e| PublishError::Io(format!("{}: {e}", dir.display())))?;
        let me = StoredXet {
            dir: dir.to_path_buf(),
            maps: Mutex::new(Maps::default()),
        };
        let entries =
            fs::read_dir(dir).map_err(|e| PublishError::Io(format!("{}: {e}", dir.display())))?;
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(sha) = name.to_str().and_then(|n| Sha256::from_hex(n).ok()) else {
                let _ = fs::remove_file(e.path()); // a temporary left by a crash
                continue;
            };
            match fs::read(e.path()).ok().and_then(|b| FileRecord::decode(&b)) {
                Some(rec) => me.learn(sha, &rec),
                None => {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        Ok(me)
    }

    fn learn(&self, sha: Sha256, rec: &FileRecord) {
        let mut groups = Vec::new();
        let mut offset = 0u64;
        for (first, n, hash) in stored_xorbs(&rec.chunks) {
            groups.push(Group {
                first: first as u32,
                n: n as u32,
                offset,
                hash,
            });
            offset += rec.chunks[first..first + n]
                .iter()
                .map(|c| u64::from(c.1))
                .sum::<u64>();
        }
        let mut m = self.maps.lock();
        for (i, (h, _)) in rec.chunks.iter().enumerate() {
            if i == 0 || is_key(h) {
                m.keys.insert(*h, (sha, i as u32));
            }
        }
        for g in &groups {
            m.xorbs.insert(g.hash, (sha, *g));
        }
        m.groups.insert(sha, groups);
    }

    /// Whether content `sha` has a record.
    pub fn has(&self, sha: &Sha256) -> bool {
        self.dir.join(sha.to_hex()).exists()
    }

    /// Records the chunk list of stored content `sha` (written whole, then renamed). The
    /// first record of a content stays: the stored xorbs handed out name its chunks, and
    /// the same bytes cut otherwise by a later upload must not change what they hold.
    pub fn add(&self, sha: Sha256, rec: &FileRecord) -> Result<(), PublishError> {
        if self.maps.lock().groups.contains_key(&sha) {
            return Ok(());
        }
        let io = |e: std::io::Error| PublishError::Io(format!("{}: {e}", self.dir.display()));
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = self.dir.join(format!(".tmp-{}-{n}", std::process::id()));
        let mut f = fs::File::create(&tmp).map_err(io)?;
        f.write_all(&rec.encode())
            .and_then(|()| f.sync_all())
            .map_err(io)?;
        fs::rename(&tmp, self.dir.join(sha.to_hex())).map_err(io)?;
        self.learn(sha, rec);
        Ok(())
    }

    /// Forgets content `sha`'s record (its revision is gone, or its chunks no longer read
    /// back as recorded): the file, and every key chunk and stored xorb naming it, so that
    /// the dedup query stops answering for it and clients send its chunks again.
    pub fn forget(&self, sha: &Sha256) {
        let _ = fs::remove_file(self.dir.join(sha.to_hex()));
        let mut m = self.maps.lock();
        m.keys.retain(|_, (s, _)| s != sha);
        m.xorbs.retain(|_, (s, _)| s != sha);
        m.groups.remove(sha);
    }

    /// Reads the chunks of stored xorb `g` of content `sha`'s record: its header, then only
    /// those 36-byte entries. The record's BLAKE3 was checked when it was learnt; the chunks
    /// are hashed again wherever they are read, so damage since fails a shard, never
    /// passes a wrong byte.
    fn slice(&self, sha: &Sha256, g: &Group) -> Option<Slice> {
        let mut f = fs::File::open(self.dir.join(sha.to_hex())).ok()?;
        let mut head = [0u8; 14];
        f.read_exact(&mut head).ok()?;
        if &head[..8] != MAGIC || u32::from_le_bytes(head[8..12].try_into().ok()?) != VERSION {
            return None;
        }
        let repo_len = u16::from_le_bytes([head[12], head[13]]) as usize;
        let mut repo_commit_len = vec![0u8; repo_len + 24];
        f.read_exact(&mut repo_commit_len).ok()?;
        let repo = RepoId::parse(std::str::from_utf8(&repo_commit_len[..repo_len]).ok()?).ok()?;
        let commit = CommitId(repo_commit_len[repo_len..repo_len + 20].try_into().ok()?);
        let path_len = u32::from_le_bytes(repo_commit_len[repo_len + 20..].try_into().ok()?);
        f.seek(SeekFrom::Current(i64::from(path_len))).ok()?;
        let mut count = [0u8; 4];
        f.read_exact(&mut count).ok()?;
        if g.first.checked_add(g.n)? > u32::from_le_bytes(count) {
            return None;
        }
        f.seek(SeekFrom::Current(36 * i64::from(g.first))).ok()?;
        let mut entries = vec![0u8; 36 * g.n as usize];
        f.read_exact(&mut entries).ok()?;
        let chunks = entries
            .chunks_exact(36)
            .map(|e| {
                Some((
                    XetHash(e[..32].try_into().ok()?),
                    u32::from_le_bytes(e[32..].try_into().ok()?),
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Slice {
            repo,
            commit,
            chunks,
        })
    }

    /// [`StoredXet::slice`]; a record that no longer reads (removed or cut short on disk)
    /// is forgotten, so that a later commit or the indexer records the content again.
    fn slice_or_forget(&self, sha: &Sha256, g: &Group) -> Option<Slice> {
        let slice = self.slice(sha, g);
        if slice.is_none() {
            self.forget(sha);
        }
        slice
    }

    /// The stored xorb `hash`: its file's content, where it lies there, and its chunks.
    pub fn xorb(&self, hash: &XetHash) -> Option<(Sha256, Group, Slice)> {
        let (sha, g) = *self.maps.lock().xorbs.get(hash)?;
        let slice = self.slice_or_forget(&sha, &g)?;
        Some((sha, g, slice))
    }

    /// The answer to a global dedup query for `chunk`: a shard (xet.md, "Global dedup
    /// answers") listing the stored xorb that holds it, chunk hashes keyed with `key`,
    /// expiring at `expiry`, and the record it came from. `None`: not a key chunk of
    /// anything recorded.
    pub fn dedup_shard(
        &self,
        chunk: &XetHash,
        key: &[u8; 32],
        now: u64,
        expiry: u64,
    ) -> Option<DedupAnswer> {
        let (sha, g) = {
            let m = self.maps.lock();
            let (sha, at) = *m.keys.get(chunk)?;
            let g = *m
                .groups
                .get(&sha)?
                .iter()
                .find(|g| (g.first..g.first + g.n).contains(&at))?;
            (sha, g)
        };
        let slice = self.slice_or_forget(&sha, &g)?;
        let shard = super::full_shard::write(&g.hash, &slice.chunks, key, now, expiry);
        Some(DedupAnswer {
            sha,
            repo: slice.repo,
            commit: slice.commit,
            shard,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: usize) -> FileRecord {
        FileRecord {
            repo: RepoId::parse("team/model").unwrap(),
            commit: CommitId([7; 20]),
            path: "model.safetensors".into(),
            chunks: (0..n)
                .map(|i| (xethash::chunk_hash(&(i as u64).to_le_bytes()), 65536))
                .collect(),
        }
    }

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let r = rec(3000);
        let b = r.encode();
        assert_eq!(FileRecord::decode(&b), Some(r));
        for at in [0, 9, 20, b.len() / 2, b.len() - 1] {
            let mut d = b.clone();
            d[at] ^= 1;
            assert_eq!(FileRecord::decode(&d), None, "{at}");
        }
        assert_eq!(FileRecord::decode(&b[..b.len() - 1]), None);
        assert_eq!(FileRecord::decode(&[]), None);
    }

    #[test]
    fn files_are_cut_into_xorbs_of_at_most_1024_chunks_and_64_mib() {
        let r = rec(2500);
        let x = stored_xorbs(&r.chunks);
        assert_eq!(
            x.iter().map(|(f, n, _)| (*f, *n)).collect::<Vec<_>>(),
            vec![(0, 1024), (1024, 1024), (2048, 452)]
        );
        let mut small = rec(1500);
        for c in &mut small.chunks {
            c.1 = 1000;
        }
        assert_eq!(
            stored_xorbs(&small.chunks)
                .iter()
                .map(|x| x.1)
                .collect::<Vec<_>>(),
            vec![1024, 476]
        );
        assert!(stored_xorbs(&[]).is_empty());
    }

    #[test]
    fn a_key_chunk_finds_its_stored_xorb_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let r = rec(2500);
        let sha = Sha256([3; 32]);
        {
            let s = StoredXet::open(dir.path()).unwrap();
            s.add(sha, &r).unwrap();
        }
        fs::write(dir.path().join("junk"), b"x").unwrap();
        let s = StoredXet::open(dir.path()).unwrap();
        assert!(!dir.path().join("junk").exists());
        let a = s.dedup_shard(&r.chunks[0].0, &[0; 32], 1, 2).unwrap();
        assert_eq!(a.repo.to_string(), "team/model");
        assert_eq!((a.sha, a.commit), (sha, r.commit));
        assert!(a.shard.len() > 1000 * 48);
        let xorbs = stored_xorbs(&r.chunks);
        let (got_sha, g, slice) = s.xorb(&xorbs[1].2).unwrap();
        assert_eq!(got_sha, sha);
        assert_eq!((g.first, g.n, g.offset), (1024, 1024, 1024 * 65536));
        assert_eq!((&slice.repo, slice.commit), (&r.repo, r.commit));
        assert_eq!(slice.chunks, r.chunks[1024..2048]);
        let (_, last, tail) = s.xorb(&xorbs[2].2).unwrap();
        assert_eq!((last.first, last.n), (2048, 452));
        assert_eq!(tail.chunks, r.chunks[2048..]);
        assert!(s
            .dedup_shard(&xethash::chunk_hash(b"unknown"), &[0; 32], 1, 2)
            .is_none());
    }

    #[test]
    fn the_first_record_of_a_content_stays_until_it_is_forgotten() {
        // Hostile review (helper-44, 3): the same bytes cut otherwise, committed by another
        // writer, replaced the record the stored xorbs handed out point into.
        let dir = tempfile::tempdir().unwrap();
        let s = StoredXet::open(dir.path()).unwrap();
        let (first, sha) = (rec(1500), Sha256([4; 32]));
        s.add(sha, &first).unwrap();
        let mut other = rec(1501);
        other.repo = RepoId::parse("other/x").unwrap();
        s.add(sha, &other).unwrap();
        let xorbs = stored_xorbs(&first.chunks);
        let (_, g, got) = s.xorb(&xorbs[1].2).unwrap();
        assert_eq!((g.first, g.n), (1024, 476));
        assert_eq!(got.chunks, first.chunks[1024..]);
        assert!(s.xorb(&stored_xorbs(&other.chunks)[1].2).is_none());
        // Forgotten: no answer, no stored xorb, no file; then a new record is taken.
        s.forget(&sha);
        assert!(s.dedup_shard(&first.chunks[0].0, &[0; 32], 1, 2).is_none());
        assert!(s.xorb(&xorbs[0].2).is_none());
        assert!(!s.has(&sha));
        s.add(sha, &other).unwrap();
        // A record gone from the disk under a running hub: forgotten at its first use,
        // then recorded again.
        fs::remove_file(dir.path().join(sha.to_hex())).unwrap();
        assert!(s.dedup_shard(&other.chunks[0].0, &[0; 32], 1, 2).is_none());
        s.add(sha, &other).unwrap();
        assert_eq!(
            s.dedup_shard(&other.chunks[0].0, &[0; 32], 1, 2)
                .unwrap()
                .repo,
            other.repo
        );
    }
}
