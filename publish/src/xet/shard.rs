//! Shards as hf_xet uploads them (docs/format/xet.md, "Uploads"): a 48-byte header, the
//! file-info section, the xorb-info section, each section ended by a bookend record, no
//! lookup tables and no footer; every record 48 bytes, integers little-endian.
//!
//! Each file block is checked and made whole at once, read as it arrives: its terms name
//! chunk ranges of xorbs the spool holds; each range's chunks are read back (decoded and
//! hashed again), its verification entry must be the keyed BLAKE3 of those chunk hashes,
//! the unpacked sizes must add up, the file hash must be the Merkle hash of all the
//! chunks, and the SHA-256 of the bytes must be the one the block's metadata names. Only
//! then is the file kept in the spool under its SHA-256, where a commit's `lfsFile` finds
//! it. The xorb-info section only lists what the xorbs say already; it is read and its
//! shape checked.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use format::{RepoId, Sha256, XetHash};
use sha2::{Digest, Sha256 as Hasher};

use super::full_shard::TAG;
use super::xorb::{next_record, MAX_CHUNKS};
use crate::error::PublishError;
use crate::spool::Spool;

/// The BLAKE3 key of a verification entry (xet-core `VERIFICATION_KEY`).
const VERIFICATION_KEY: [u8; 32] = [
    127, 24, 87, 214, 206, 86, 237, 102, 18, 127, 249, 19, 231, 165, 195, 243, 164, 205, 38, 213,
    181, 219, 73, 230, 65, 36, 152, 127, 40, 251, 148, 195,
];
const WITH_VERIFICATION: u32 = 1 << 31;
const WITH_METADATA: u32 = 1 << 30;
/// Most terms of one file (a 1 TiB file in 64 MiB xorbs has 16,384).
const MAX_TERMS: usize = 1 << 20;
/// A file's chunks average at least this many bytes (hf_xet cuts 8 KiB at least, all but a
/// file's last chunk): the file's chunk list, 36 bytes a chunk in memory while it is made
/// whole, stays under 1% of the bytes the spool reserved for it.
const MIN_AVERAGE_CHUNK: u64 = 4096;
/// Most bytes of one shard.
pub const MAX_SHARD: u64 = 64 << 20;

fn bad(msg: String) -> PublishError {
    PublishError::BadObject(format!("shard: {msg}"))
}

/// One term of a file: chunks `[start, end)` of a xorb, `bytes` unpacked.
struct Term {
    xorb: XetHash,
    bytes: u64,
    start: usize,
    end: usize,
}

/// What a shard made: the files it described, and of those the ones new to the spool.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShardOutcome {
    pub files: usize,
    pub sha256s: Vec<Sha256>,
}

fn record(r: &mut dyn Read) -> Result<[u8; 48], PublishError> {
    let mut b = [0u8; 48];
    r.read_exact(&mut b).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => bad("it ends inside a record".into()),
        _ => PublishError::Body(e.to_string()),
    })?;
    Ok(b)
}

fn hash_at(b: &[u8]) -> XetHash {
    let mut h = [0u8; 32];
    h.copy_from_slice(&b[..32]);
    XetHash(h)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads an uploaded shard from `body` and keeps each file it describes in `spool`.
pub(crate) fn receive(
    spool: &Spool,
    repo: &RepoId,
    stored: &dyn StoredXorbs,
    body: &mut dyn Read,
) -> Result<ShardOutcome, PublishError> {
    let mut body = body.take(MAX_SHARD);
    let head = record(&mut body)?;
    if head[..32] != TAG {
        return Err(bad(
            "not a shard (its first 32 bytes are not the shard tag)".into(),
        ));
    }
    let version = u64::from_le_bytes(head[32..40].try_into().unwrap_or_default());
    if version != 2 {
        return Err(bad(format!("version {version}; this hub reads version 2")));
    }
    // Files are kept only once the whole shard has been read and found right.
    let mut made: Vec<Made> = Vec::new();
    let read = (|| {
        loop {
            let h = record(&mut body)?;
            if h[..32] == [0xff; 32] {
                break;
            }
            made.push(file_block(spool, stored, &mut body, &h)?);
        }
        xorb_section(&mut body)
    })();
    if let Err(e) = read {
        for m in &made {
            let _ = std::fs::remove_file(&m.0);
        }
        return Err(e);
    }
    let mut out = ShardOutcome {
        files: made.len(),
        sha256s: Vec::new(),
    };
    for (tmp, sha, chunks) in made {
        spool.keep(repo, &tmp, &sha)?;
        spool.keep_chunks(repo, &sha, &chunks)?;
        out.sha256s.push(sha);
    }
    Ok(out)
}

/// The xorb-info section: blocks of a header and its chunk entries, to the bookend.
fn xorb_section(body: &mut dyn Read) -> Result<(), PublishError> {
    loop {
        let h = record(body)?;
        if h[..32] == [0xff; 32] {
            return Ok(());
        }
        let n = u32_at(&h, 36) as usize;
        if n > MAX_CHUNKS {
            return Err(bad(format!("a xorb of {n} chunks is listed")));
        }
        for _ in 0..n {
            record(body)?;
        }
    }
}

/// One file block (its header `h` read): checked and made whole in a temporary file of
/// the spool; that file and its SHA-256.
fn file_block(
    spool: &Spool,
    stored: &dyn StoredXorbs,
    body: &mut dyn Read,
    h: &[u8; 48],
) -> Result<Made, PublishError> {
    let file_hash = hash_at(h);
    let (flags, n) = (u32_at(h, 32), u32_at(h, 36) as usize);
    let what = format!("file {file_hash}");
    if flags & !(WITH_VERIFICATION | WITH_METADATA) != 0 {
        return Err(bad(format!("{what}: unknown flags {flags:#x}")));
    }
    if flags & WITH_VERIFICATION == 0 {
        return Err(bad(format!(
            "{what}: no verification entries (this hub requires them)"
        )));
    }
    if n == 0 || n > MAX_TERMS {
        return Err(bad(format!("{what}: {n} terms")));
    }
    let mut terms = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        let e = record(body)?;
        let (start, end) = (u32_at(&e, 40) as usize, u32_at(&e, 44) as usize);
        if start >= end || end > MAX_CHUNKS {
            return Err(bad(format!("{what}: a term of chunks [{start}, {end})")));
        }
        terms.push(Term {
            xorb: hash_at(&e),
            bytes: u64::from(u32_at(&e, 36)),
            start,
            end,
        });
    }
    let chunks: u64 = terms.iter().map(|t| (t.end - t.start) as u64).sum();
    let size: u64 = terms.iter().map(|t| t.bytes).sum();
    if chunks > 1 + size / MIN_AVERAGE_CHUNK || chunks > u64::from(super::stored::MAX_CHUNKS) {
        return Err(bad(format!(
            "{what}: {chunks} chunks in {size} bytes (at most one per {MIN_AVERAGE_CHUNK} bytes)"
        )));
    }
    let mut checks = Vec::with_capacity(n.min(4096));
    for _ in 0..n {
        checks.push(hash_at(&record(body)?));
    }
    let sha256 = if flags & WITH_METADATA != 0 {
        // Stored as a Xet hash is: each 8-byte word reversed.
        let ext = hash_at(&record(body)?);
        Some(Sha256::from_hex(&ext.hex()).map_err(|e| bad(e.to_string()))?)
    } else {
        None
    };
    rebuild(spool, stored, &what, &file_hash, &terms, &checks, sha256)
}

/// Writes the file of `terms` to a temporary file of the spool, checking every term, the
/// file hash and the SHA-256; returns the file and its SHA-256.
#[allow(
    clippy::too_many_arguments,
    reason = "one file block's parts and where to read them"
)]
fn rebuild(
    spool: &Spool,
    stored: &dyn StoredXorbs,
    what: &str,
    file_hash: &XetHash,
    terms: &[Term],
    checks: &[XetHash],
    sha256: Option<Sha256>,
) -> Result<Made, PublishError> {
    let size: u64 = terms.iter().map(|t| t.bytes).sum();
    let _room = spool.reserve(size)?;
    let (tmp, mut file) = spool.temporary()?;
    let written = (|| {
        let mut tree = xethash::Tree::default();
        let mut sha = Hasher::new();
        let mut chunks = Vec::new();
        for (i, (t, check)) in terms.iter().zip(checks).enumerate() {
            let hashes = term(spool, stored, what, i, t, &mut |data: &[u8], h| {
                tree.push(h, data.len() as u64);
                chunks.push((h, data.len() as u32));
                sha.update(data);
                file.write_all(data)
                    .map_err(|e| crate::spool::write_error(&e))
            })?;
            let mut k = blake3::Hasher::new_keyed(&VERIFICATION_KEY);
            for h in &hashes {
                k.update(&h.0);
            }
            if XetHash(*k.finalize().as_bytes()) != *check {
                return Err(bad(format!(
                    "{what}: term {i}'s verification entry does not match the chunks of xorb {}",
                    t.xorb
                )));
            }
        }
        let root = tree.root().unwrap_or(XetHash([0; 32]));
        if xethash::file_hash_of_root(&root) != *file_hash {
            return Err(bad(format!("{what}: its chunks hash to another file hash")));
        }
        let got = Sha256(sha.finalize().into());
        if sha256.is_some_and(|s| s != got) {
            return Err(bad(format!(
                "{what}: its bytes have sha256 {got}, not the one its metadata names"
            )));
        }
        file.sync_all()
            .map_err(|e| PublishError::Io(e.to_string()))?;
        Ok((got, chunks))
    })();
    drop(file);
    match written {
        Ok((sha, chunks)) => Ok((tmp, sha, chunks)),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// A file made from a shard: its temporary file, SHA-256 and Xet chunk list.
type Made = (PathBuf, Sha256, Vec<(XetHash, u32)>);

/// Where a term's chunks go: each decoded chunk and its hash.
pub(crate) type ChunkSink<'a> = dyn FnMut(&[u8], XetHash) -> Result<(), PublishError> + 'a;

/// Xorbs the store holds (stored xorbs, [`super::stored`]), for terms whose xorb the spool
/// lacks.
pub(crate) trait StoredXorbs {
    /// Hands chunks `[start, end)` of stored xorb `xorb` to `sink`, each read back from the
    /// store and checked against its recorded hash; `false` when `xorb` is not a stored
    /// xorb.
    fn read(
        &self,
        xorb: &XetHash,
        start: usize,
        end: usize,
        sink: &mut ChunkSink<'_>,
    ) -> Result<bool, PublishError>;
}

/// Reads chunks `[start, end)` of term `i`'s xorb from the spool, handing each (decoded,
/// hashed again) to `sink`; returns their hashes.
fn term(
    spool: &Spool,
    stored: &dyn StoredXorbs,
    what: &str,
    i: usize,
    t: &Term,
    sink: &mut ChunkSink<'_>,
) -> Result<Vec<XetHash>, PublishError> {
    let Some(path) = spool.xorb(&t.xorb) else {
        let (mut hashes, mut bytes) = (Vec::new(), 0u64);
        let found = stored.read(&t.xorb, t.start, t.end, &mut |data: &[u8], h| {
            hashes.push(h);
            bytes += data.len() as u64;
            sink(data, h)
        })?;
        if !found {
            return Err(bad(format!(
                "{what}: term {i} names xorb {}, which this hub does not have (upload it first)",
                t.xorb
            )));
        }
        if bytes != t.bytes {
            return Err(bad(format!(
                "{what}: term {i} says {} bytes, its chunks hold {bytes}",
                t.bytes
            )));
        }
        return Ok(hashes);
    };
    let mut f =
        File::open(&path).map_err(|e| PublishError::Io(format!("{}: {e}", path.display())))?;
    // Straight to the term's first record where the spool knows the offsets; else read
    // from the first.
    let from = match spool.xorb_offsets(&t.xorb) {
        Some(o) if t.end > o.len() => {
            return Err(bad(format!(
                "{what}: term {i} names chunks [{}, {}) of xorb {}, which has {}",
                t.start,
                t.end,
                t.xorb,
                o.len()
            )))
        }
        Some(o) => {
            f.seek(SeekFrom::Start(u64::from(o[t.start])))
                .map_err(|e| PublishError::Io(format!("{}: {e}", path.display())))?;
            t.start
        }
        None => 0,
    };
    let mut r = BufReader::new(f);
    let (mut hashes, mut bytes) = (Vec::with_capacity(t.end - t.start), 0u64);
    for k in from..t.end {
        let rec = next_record(&mut r, k)
            .map_err(|e| bad(format!("{what}: xorb {} in the spool: {e}", t.xorb)))?
            .ok_or_else(|| {
                bad(format!(
                    "{what}: term {i} names chunks [{}, {}) of xorb {}, which has {k}",
                    t.start, t.end, t.xorb
                ))
            })?;
        if k >= t.start {
            sink(&rec.data, rec.hash)?;
            hashes.push(rec.hash);
            bytes += rec.data.len() as u64;
        }
    }
    if bytes != t.bytes {
        return Err(bad(format!(
            "{what}: term {i} says {} bytes, its chunks hold {bytes}",
            t.bytes
        )));
    }
    Ok(hashes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::xorb::tests::{record, xorb_hash};
    use super::*;
    use std::time::Duration;

    /// No stored xorbs.
    struct NoStored;

    impl StoredXorbs for NoStored {
        fn read(
            &self,
            _: &XetHash,
            _: usize,
            _: usize,
            _: &mut ChunkSink<'_>,
        ) -> Result<bool, PublishError> {
            Ok(false)
        }
    }

    fn repo() -> RepoId {
        RepoId::parse("team/model").unwrap()
    }

    fn rec(parts: &[&[u8]]) -> Vec<u8> {
        let mut r = parts.concat();
        r.resize(48, 0);
        r
    }

    /// A file block of `chunks` of one xorb `x` (all of them, in one term), as hf_xet
    /// writes it, with its sha256 in the metadata (word-reversed), and the xorb section.
    pub(crate) fn shard(
        x: &XetHash,
        chunks: &[&[u8]],
        edit: impl FnOnce(&mut Vec<Vec<u8>>),
    ) -> Vec<u8> {
        let mut tree = xethash::Tree::default();
        let mut k = blake3::Hasher::new_keyed(&VERIFICATION_KEY);
        let mut sha = Hasher::new();
        for c in chunks {
            tree.push(xethash::chunk_hash(c), c.len() as u64);
            k.update(&xethash::chunk_hash(c).0);
            sha.update(c);
        }
        let file = xethash::file_hash_of_root(&tree.root().unwrap());
        let sha_hex = hex::encode(sha.finalize());
        let sha_word = XetHash::parse(&sha_hex).unwrap();
        let bytes: u32 = chunks.iter().map(|c| c.len() as u32).sum();
        let n = chunks.len() as u32;
        let mut recs = vec![
            rec(&[&TAG, &2u64.to_le_bytes(), &0u64.to_le_bytes()]),
            rec(&[&file.0, &0xC000_0000u32.to_le_bytes(), &1u32.to_le_bytes()]),
            rec(&[
                &x.0,
                &0u32.to_le_bytes(),
                &bytes.to_le_bytes(),
                &0u32.to_le_bytes(),
                &n.to_le_bytes(),
            ]),
            rec(&[k.finalize().as_bytes()]),
            rec(&[&sha_word.0]),
            rec(&[&[0xff; 32]]),
            rec(&[
                &x.0,
                &0u32.to_le_bytes(),
                &n.to_le_bytes(),
                &bytes.to_le_bytes(),
            ]),
        ];
        for c in chunks {
            recs.push(rec(&[&xethash::chunk_hash(c).0]));
        }
        recs.push(rec(&[&[0xff; 32]]));
        edit(&mut recs);
        recs.concat()
    }

    fn spool_with(chunks: &[&[u8]]) -> (tempfile::TempDir, Spool, XetHash) {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(dir.path(), Duration::from_secs(600), 1 << 30).unwrap();
        let body: Vec<u8> = chunks
            .iter()
            .enumerate()
            .flat_map(|(i, c)| record(c, (i % 3) as u8))
            .collect();
        let x = xorb_hash(chunks);
        assert!(s.receive_xorb(&x, &mut &body[..]).unwrap());
        assert!(
            !s.receive_xorb(&x, &mut &body[..]).unwrap(),
            "the second time it is not new"
        );
        (dir, s, x)
    }

    #[test]
    fn a_shard_makes_its_files_whole_in_the_spool() {
        let a: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        let b = b"tail".to_vec();
        let (_d, s, x) = spool_with(&[&a, &b]);
        let body = shard(&x, &[&a, &b], |_| {});
        let out = receive(&s, &repo(), &NoStored, &mut &body[..]).unwrap();
        assert_eq!(out.files, 1);
        let whole = [a.clone(), b.clone()].concat();
        let sha = Sha256(Hasher::digest(&whole).into());
        assert_eq!(out.sha256s, vec![sha]);
        assert_eq!(
            std::fs::read(s.object(&repo(), &sha, whole.len() as u64).unwrap()).unwrap(),
            whole
        );
    }

    #[test]
    fn a_term_reads_only_its_own_chunks_of_a_spooled_xorb() {
        // Hostile review (helper-44, 4): each term read its xorb from the first record up
        // to its end, so 96 bytes of term naming the last chunk of a 64 MiB xorb cost 64 MiB
        // of decoding and hashing. A term reads its own records only: a record before them
        // that no longer decodes is not read at all.
        let a: Vec<u8> = (0..70_000u32).map(|i| (i % 241) as u8).collect();
        let b: Vec<u8> = (0..5_000u32).map(|i| (i % 13) as u8).collect();
        let c: Vec<u8> = (0..6_000u32).map(|i| (i % 17) as u8).collect();
        let (_d, s, x) = spool_with(&[&a, &b, &c]);
        let p = s.xorb(&x).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[0] = 9; // record 0's version
        std::fs::write(&p, bytes).unwrap();
        let body = shard(&x, &[&b, &c], |r| {
            r[2][40..44].copy_from_slice(&1u32.to_le_bytes());
            r[2][44..48].copy_from_slice(&3u32.to_le_bytes());
        });
        let out = receive(&s, &repo(), &NoStored, &mut &body[..]).unwrap();
        assert_eq!(out.files, 1);
        let whole = [b.clone(), c.clone()].concat();
        assert_eq!(out.sha256s, vec![Sha256(Hasher::digest(&whole).into())]);
        // A term past the xorb's last chunk is still refused.
        let body = shard(&x, &[&b, &c], |r| {
            r[2][40..44].copy_from_slice(&2u32.to_le_bytes());
            r[2][44..48].copy_from_slice(&4u32.to_le_bytes());
        });
        let e = receive(&s, &repo(), &NoStored, &mut &body[..])
            .unwrap_err()
            .to_string();
        assert!(e.contains("which has 3"), "{e}");
    }

    #[test]
    fn a_lying_shard_keeps_nothing() {
        let a: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        let b = b"tail".to_vec();
        let (d, s, x) = spool_with(&[&a, &b]);
        let unknown = xorb_hash(&[b"never sent"]);
        type Edit = Box<dyn Fn(&mut Vec<Vec<u8>>)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("tag", Box::new(|r| r[0][0] ^= 1)),
            ("version", Box::new(|r| r[0][32] = 3)),
            ("verification", Box::new(|r| r[3][0] ^= 1)),
            ("another file hash", Box::new(|r| r[1][0] ^= 1)),
            ("sha256", Box::new(|r| r[4][0] ^= 1)),
            ("says", Box::new(|r| r[2][36] ^= 1)),
            ("which has", Box::new(|r| r[2][44] = 9)),
            ("a term of chunks", Box::new(|r| r[2][40] = 2)),
            (
                "does not have",
                Box::new(move |r| r[2][..32].copy_from_slice(&unknown.0)),
            ),
            ("no verification", Box::new(|r| r[1][35] = 0x40)),
            ("unknown flags", Box::new(|r| r[1][32] = 1)),
            (
                "inside a record",
                Box::new(|r| {
                    r.pop();
                    r.last_mut().unwrap().truncate(10);
                }),
            ),
        ];
        for (says, edit) in cases {
            let body = shard(&x, &[&a, &b], edit);
            let e = receive(&s, &repo(), &NoStored, &mut &body[..])
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{says}: {e}");
            assert!(!d.path().join("objects/team").exists(), "{says}");
            assert_eq!(
                std::fs::read_dir(d.path().join("tmp")).unwrap().count(),
                0,
                "{says}"
            );
        }
        // A file of more chunks than its bytes allow (a chunk averages 4 KiB or more; hf_xet
        // cuts 8 KiB at least, all but the last) is refused before a chunk is read: a term
        // of 8,192 one-byte chunks is 48 bytes of shard, and each chunk would be 36 bytes
        // of the file's chunk list in memory.
        let tiny: Vec<Vec<u8>> = (0..300u32).map(|i| vec![(i % 251) as u8]).collect();
        let refs: Vec<&[u8]> = tiny.iter().map(|c| &c[..]).collect();
        let (d2, s2, x2) = spool_with(&refs);
        let body = shard(&x2, &refs, |_| {});
        let e = receive(&s2, &repo(), &NoStored, &mut &body[..])
            .unwrap_err()
            .to_string();
        assert!(e.contains("300 chunks in 300 bytes"), "{e}");
        assert!(!d2.path().join("objects/team").exists());
        // A xorb damaged in the spool after it was checked is found out by its chunks.
        let p = s.xorb(&x).unwrap();
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 1;
        std::fs::write(&p, bytes).unwrap();
        let body = shard(&x, &[&a, &b], |_| {});
        assert!(receive(&s, &repo(), &NoStored, &mut &body[..]).is_err());
    }
}
