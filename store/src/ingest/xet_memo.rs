//! Sparing ingest the Xet hash of content it hashed before (docs/format/xet.md, "When it
//! is computed"). The Xet hash costs ingest about a third more CPU per byte (its chunker
//! and a second BLAKE3 over every byte), and most of the bytes a new revision brings are
//! bytes an earlier revision brought. So ingest hashes only what is new to this machine:
//!
//! * A file whose sha256 is known before it is read (a blob of the Hub cache, a pulled
//!   file) and whose Xet hash the index recorded for that sha256 is read without it. Once
//!   read, its sha256 must be the expected one (or ingest fails, as always), and the
//!   recorded hash is its hash.
//! * A file on this machine's file system, of [`FOLLOW_MIN`] bytes or more, whose size and
//!   first chunk are those of a file read before (a `xet-first/` hint) is read without it
//!   while its chunks are that file's chunks, in order. If all are and its sha256 is that
//!   file's, the recorded hash is its hash. At the first chunk that differs, the bytes
//!   before it are read back from the same open file, each chunk checked against the id
//!   it had when it was read (so the hash is of the very bytes stored: a file written to
//!   in between fails the ingest), and the hash goes on from there.
//!
//! What makes a reused hash right is the sha256 of the bytes read and a record that checks
//! (a BLAKE3 over the sha256 and the hash, `format::index::xet_hash_record`); the hints and
//! chunk lists only decide when to try. A damaged, missing or stale record, hint or list
//! costs a hash, never a wrong one.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use format::index::{self as values, XET_MEMO_TAG};
use format::{ChunkId, Sha256, XetHash};
use index::Index;
use repo::{failpoint, Result, StoreError};

/// Files smaller than this are hashed as they are read: following a file read before
/// costs a lookup or three in the index, more than the hash of a small file.
pub(super) const FOLLOW_MIN: u64 = 1 << 20;

/// The Xet hash the index recorded for the content with this sha256, if the record checks.
pub(super) fn recorded(index: &Index, sha256: &Sha256) -> Option<XetHash> {
    let v = index
        .cached_object(&values::xet_hash_key(sha256), XET_MEMO_TAG)
        .ok()??;
    values::parse_xet_hash_record(sha256, &v)
}

/// Records the Xet hash of a file read whole, and (for one of [`FOLLOW_MIN`] bytes or
/// more) the hint that names it by its size and first chunk. Best effort: the records only
/// spare a later ingest a hash.
pub(super) fn remember(
    index: &Index,
    size: u64,
    sha256: &Sha256,
    xet: &XetHash,
    chunks: &[(ChunkId, u32)],
) {
    let _ = index.cache_object(
        &values::xet_hash_key(sha256),
        XET_MEMO_TAG,
        &values::xet_hash_record(sha256, xet),
    );
    if let Some((first, _)) = chunks.first().filter(|_| size >= FOLLOW_MIN) {
        let _ = index.cache_object(
            &values::xet_first_key(size, first),
            XET_MEMO_TAG,
            &values::xet_first_record(size, first, sha256),
        );
    }
}

/// A file read before that the file being read may be a copy of.
struct Known {
    sha256: Sha256,
    xet: XetHash,
    chunks: Vec<(ChunkId, u32)>,
}

/// The file read before with this size and first chunk, if the index has a hint naming
/// it, its Xet hash and its chunk list, all intact and consistent.
fn known_by_first(index: &Index, size: u64, first: &(ChunkId, u32)) -> Option<Known> {
    let v = index
        .cached_object(&values::xet_first_key(size, &first.0), XET_MEMO_TAG)
        .ok()??;
    let sha256 = values::parse_xet_first_record(size, &first.0, &v)?;
    let xet = recorded(index, &sha256)?;
    let chunks = index.file_chunk_list(&sha256).ok()??;
    let total: u64 = chunks.iter().map(|(_, n)| u64::from(*n)).sum();
    (chunks.first() == Some(first) && total == size).then_some(Known {
        sha256,
        xet,
        chunks,
    })
}

/// Where ingest stands with the Xet hash of the file it reads.
enum State {
    /// Hashing every byte, beside the sha256.
    Hashing,
    /// The file must have this sha256 (`.0`), whose Xet hash is recorded (`.1`).
    Expected(Sha256, XetHash),
    /// Before the first chunk: it decides.
    First,
    /// The chunks so far are the first `seen` chunks of `known`.
    Following { known: Known, seen: usize },
}

/// What the reader does with the Xet hash for one chunk ([`XetMemo::next`]).
pub(super) enum Step {
    /// Feed the chunk to the Xet hasher, as every chunk before it.
    Hash,
    /// Do not hash it; its id, where computed here, is `.0`.
    Skip(Option<ChunkId>),
    /// Start hashing with this hasher (which holds every byte before the chunk), from this
    /// chunk on; the chunk's id, computed here, is `.1`.
    Start(Box<xethash::Hasher>, ChunkId),
}

/// Bytes whose Xet hash ingest took from a record, and bytes it read back to compute one.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tally {
    pub(super) reused: u64,
    pub(super) reread: u64,
}

/// The Xet hash of one file being read: hashed as it is read, or taken from a record of a
/// file read before (module doc).
pub(super) struct XetMemo<'a> {
    index: &'a Index,
    path: &'a Path,
    /// The open file, to read back; `None` for a stream (never followed).
    file: Option<&'a File>,
    size: u64,
    state: State,
    /// The chunks read while following a known file (id and length, in order).
    read: Vec<(ChunkId, u32)>,
    /// Bytes read without hashing them.
    skipped: u64,
    pub(super) tally: Tally,
}

impl<'a> XetMemo<'a> {
    /// The plan for a file at `path` of `size` bytes (as listed) that must have the
    /// sha256 `expected` if that is given. `fresh` (`ingest --reread`) hashes everything.
    pub(super) fn start(
        index: &'a Index,
        path: &'a Path,
        file: Option<&'a File>,
        size: u64,
        expected: Option<Sha256>,
        fresh: bool,
    ) -> XetMemo<'a> {
        let recorded = || expected.and_then(|e| Some((e, recorded(index, &e)?)));
        let state = match (!fresh).then(recorded).flatten() {
            _ if fresh => State::Hashing,
            Some((sha256, xet)) => State::Expected(sha256, xet),
            None if file.is_some() && size >= FOLLOW_MIN => State::First,
            None => State::Hashing,
        };
        XetMemo {
            index,
            path,
            file,
            size,
            state,
            read: Vec::new(),
            skipped: 0,
            tally: Tally::default(),
        }
    }

    /// Whether the Xet hash is computed from the first byte (nothing to decide).
    pub(super) fn hashing(&self) -> bool {
        matches!(self.state, State::Hashing)
    }

    /// What to do with the next chunk of the file.
    pub(super) fn next(&mut self, data: &[u8]) -> Result<Step> {
        match self.state {
            State::Hashing => Ok(Step::Hash),
            State::Expected(..) => {
                self.skipped += data.len() as u64;
                Ok(Step::Skip(None))
            }
            State::First => {
                let chunk = (ChunkId::of(data), data.len() as u32);
                match known_by_first(self.index, self.size, &chunk) {
                    Some(known) => {
                        self.state = State::Following { known, seen: 0 };
                        self.follow(chunk)
                    }
                    None => {
                        self.state = State::Hashing;
                        Ok(Step::Start(Box::default(), chunk.0))
                    }
                }
            }
            State::Following { .. } => self.follow((ChunkId::of(data), data.len() as u32)),
        }
    }

    /// Follows the known file with a chunk of this id and length, or starts hashing.
    fn follow(&mut self, chunk: (ChunkId, u32)) -> Result<Step> {
        if let State::Following { known, seen } = &mut self.state {
            if known.chunks.get(*seen) == Some(&chunk) {
                *seen += 1;
                self.read.push(chunk);
                self.skipped += u64::from(chunk.1);
                return Ok(Step::Skip(Some(chunk.0)));
            }
        }
        let hasher = self.read_back()?;
        self.state = State::Hashing;
        Ok(Step::Start(hasher, chunk.0))
    }

    /// The file's Xet hash, once every chunk went through [`XetMemo::next`]: `hashed` is
    /// what the hasher gave when hashing ran, `sha256` the content's.
    pub(super) fn finish(
        mut self,
        sha256: &Sha256,
        hashed: Option<XetHash>,
    ) -> Result<(XetHash, Tally)> {
        let xet = match (&self.state, hashed) {
            (State::Hashing, Some(x)) => x,
            (State::Hashing, None) => {
                return Err(StoreError::Invalid(format!(
                    "internal error: no Xet hash was computed for {}",
                    self.path.display()
                )))
            }
            (State::Expected(expected, x), _) => {
                if expected != sha256 {
                    return Err(StoreError::BadSource {
                        path: self.path.to_path_buf(),
                        reason: format!(
                            "content does not have the sha256 expected: it is {}, expected {}",
                            sha256.to_hex(),
                            expected.to_hex()
                        ),
                    });
                }
                self.tally.reused += self.skipped;
                *x
            }
            (State::Following { known, seen }, _)
                if *seen == known.chunks.len() && known.sha256 == *sha256 =>
            {
                self.tally.reused += self.skipped;
                known.xet
            }
            // Not (or no longer) the file read before, or nothing read: hash what was read.
            _ => self.read_back()?.finalize(),
        };
        Ok((xet, self.tally))
    }

    /// A Xet hasher fed with the chunks read so far, read back from the file, each checked
    /// against the id it had.
    fn read_back(&mut self) -> Result<Box<xethash::Hasher>> {
        let mut hasher = Box::<xethash::Hasher>::default();
        let read = std::mem::take(&mut self.read);
        if read.is_empty() {
            return Ok(hasher);
        }
        let Some(file) = self.file else {
            return Err(StoreError::Invalid(format!(
                "internal error: {} was followed without a file to read back",
                self.path.display()
            )));
        };
        failpoint::pause("ingest-before-xet-read-back");
        let longest = read.iter().map(|(_, n)| *n as usize).max().unwrap_or(0);
        let mut buf = vec![0u8; longest];
        let mut at = 0u64;
        for (id, len) in &read {
            let piece = &mut buf[..*len as usize];
            file.read_exact_at(piece, at)
                .map_err(|e| StoreError::io(self.path, e))?;
            if ChunkId::of(piece) != *id {
                return Err(StoreError::BadSource {
                    path: self.path.to_path_buf(),
                    reason: format!(
                        "it changed while it was read (the bytes at {at} are not the ones read \
                         there before): ingest it again once it stands still"
                    ),
                });
            }
            hasher.update(piece);
            at += u64::from(*len);
        }
        self.tally.reread += at;
        Ok(hasher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;
    use std::io::Write;

    const PIECE: usize = 256 << 10;

    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn sha(data: &[u8]) -> Sha256 {
        Sha256(sha2::Sha256::digest(data).into())
    }

    /// `data` cut into pieces of 256 KiB (how it is cut does not matter here: the memo
    /// compares the pieces with the ones recorded).
    fn pieces(data: &[u8]) -> Vec<(ChunkId, u32)> {
        data.chunks(PIECE)
            .map(|c| (ChunkId::of(c), c.len() as u32))
            .collect()
    }

    /// Records `data` as a file ingest read.
    fn read_before(index: &Index, data: &[u8]) {
        let s = sha(data);
        let chunks = pieces(data);
        index.remember_file(&s, &chunks).unwrap();
        remember(
            index,
            data.len() as u64,
            &s,
            &xethash::file_hash(data),
            &chunks,
        );
    }

    struct File0 {
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
        file: File,
    }

    fn on_disk(data: &[u8]) -> File0 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        File::create(&path).unwrap().write_all(data).unwrap();
        let file = File::open(&path).unwrap();
        File0 {
            _dir: dir,
            path,
            file,
        }
    }

    /// What ingest does with `data` (the bytes the reader gets) through a memo: the Xet
    /// hash and the tally.
    fn drive(mut memo: XetMemo<'_>, data: &[u8]) -> Result<(XetHash, Tally)> {
        let mut hasher = memo.hashing().then(Box::<xethash::Hasher>::default);
        for c in data.chunks(PIECE) {
            match memo.next(c)? {
                Step::Hash => {}
                Step::Skip(id) => assert!(id.is_none_or(|id| id == ChunkId::of(c))),
                Step::Start(h, id) => {
                    assert_eq!(id, ChunkId::of(c));
                    assert!(hasher.is_none(), "hashing started twice");
                    hasher = Some(h);
                }
            }
            if let Some(h) = hasher.as_mut() {
                h.update(c);
            }
        }
        memo.finish(&sha(data), hasher.map(|h| h.finalize()))
    }

    fn index() -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open(dir.path(), &[7; 16]).unwrap();
        (dir, index)
    }

    #[test]
    fn a_record_reads_back_only_for_the_sha256_it_was_written_for() {
        let (_d, index) = index();
        let (sha, xet) = (Sha256([1; 32]), XetHash([2; 32]));
        let key = values::xet_hash_key(&sha);
        assert_eq!(recorded(&index, &sha), None);
        let entry = values::xet_hash_record(&sha, &xet);
        index.cache_object(&key, XET_MEMO_TAG, &entry).unwrap();
        assert_eq!(recorded(&index, &sha), Some(xet));
        // An entry moved under another sha256, or with a flipped bit, or short: none.
        let other = Sha256([3; 32]);
        index
            .cache_object(&values::xet_hash_key(&other), XET_MEMO_TAG, &entry)
            .unwrap();
        assert_eq!(recorded(&index, &other), None);
        for damage in [0usize, 31, 39] {
            let mut bad = entry;
            bad[damage] ^= 4;
            index.cache_object(&key, XET_MEMO_TAG, &bad).unwrap();
            assert_eq!(recorded(&index, &sha), None, "byte {damage}");
        }
        index.cache_object(&key, XET_MEMO_TAG, &xet.0).unwrap();
        assert_eq!(recorded(&index, &sha), None, "no check bytes");
    }

    #[test]
    fn a_copy_of_a_file_read_before_is_not_hashed() {
        let (_d, index) = index();
        let a = bytes(1, 5 * PIECE + 1000);
        read_before(&index, &a);
        let f = on_disk(&a);
        let memo = XetMemo::start(&index, &f.path, Some(&f.file), a.len() as u64, None, false);
        assert!(!memo.hashing());
        let (xet, tally) = drive(memo, &a).unwrap();
        assert_eq!(xet, xethash::file_hash(&a));
        assert_eq!((tally.reused, tally.reread), (a.len() as u64, 0));
    }

    #[test]
    fn a_file_that_parts_from_the_one_read_before_is_hashed_whole() {
        let (_d, index) = index();
        let a = bytes(2, 4 * PIECE + 77);
        read_before(&index, &a);
        // Changed in the first piece, in the third, in the last byte; cut short, and longer
        // by a piece (another size than the one read before: never followed).
        let mut cases: Vec<(Vec<u8>, u64)> = Vec::new();
        for (at, reread) in [
            (5, 0),
            (2 * PIECE + 9, 2 * PIECE as u64),
            (a.len() - 1, 4 * PIECE as u64),
        ] {
            let mut b = a.clone();
            b[at] ^= 1;
            cases.push((b, reread));
        }
        cases.push((a[..3 * PIECE].to_vec(), 0));
        let mut longer = a.clone();
        longer.extend_from_slice(&bytes(3, PIECE));
        cases.push((longer, 0));
        for (b, reread) in cases {
            let f = on_disk(&b);
            let memo = XetMemo::start(&index, &f.path, Some(&f.file), b.len() as u64, None, false);
            let (xet, tally) = drive(memo, &b).unwrap();
            assert_eq!(xet, xethash::file_hash(&b), "{} bytes", b.len());
            assert_eq!(
                (tally.reused, tally.reread),
                (0, reread),
                "{} bytes",
                b.len()
            );
        }
    }

    #[test]
    fn a_listed_size_that_lies_costs_a_read_back_not_a_wrong_hash() {
        let (_d, index) = index();
        let a = bytes(4, 5 * PIECE);
        read_before(&index, &a);
        // Listed with a's size, but the file grew by a piece before it was read: every
        // piece of a matches, then one more comes.
        let mut b = a.clone();
        b.extend_from_slice(&bytes(5, PIECE));
        let f = on_disk(&b);
        let memo = XetMemo::start(&index, &f.path, Some(&f.file), a.len() as u64, None, false);
        let (xet, tally) = drive(memo, &b).unwrap();
        assert_eq!(xet, xethash::file_hash(&b));
        assert_eq!((tally.reused, tally.reread), (0, a.len() as u64));
        // Listed with a's size and read whole as a, but a's record names another content
        // (a hint left by a file since rewritten): the sha256 decides, the bytes are hashed.
        let c = bytes(6, 5 * PIECE);
        let f = on_disk(&a);
        index.remember_file(&sha(&c), &pieces(&a)).unwrap();
        remember(
            &index,
            a.len() as u64,
            &sha(&c),
            &XetHash([9; 32]),
            &pieces(&a),
        );
        let memo = XetMemo::start(&index, &f.path, Some(&f.file), a.len() as u64, None, false);
        let (xet, tally) = drive(memo, &a).unwrap();
        assert_eq!(xet, xethash::file_hash(&a));
        assert_eq!((tally.reused, tally.reread), (0, a.len() as u64));
    }

    /// A change made to an index.
    type Damage<'a> = dyn Fn(&Index) + 'a;

    #[test]
    fn a_damaged_hint_record_or_list_is_no_candidate_and_costs_a_hash() {
        let a = bytes(7, 5 * PIECE + 5);
        let (s, size) = (sha(&a), a.len() as u64);
        let first = pieces(&a)[0];
        let hint = values::xet_first_key(size, &first.0);
        let damages: [(&str, &Damage<'_>); 6] = [
            ("a flipped check byte of the hint", &|i| {
                let mut v = values::xet_first_record(size, &first.0, &s);
                v[35] ^= 1;
                i.cache_object(&hint, XET_MEMO_TAG, &v).unwrap();
            }),
            ("the hint of another size moved here", &|i| {
                let v = values::xet_first_record(size + 1, &first.0, &s);
                i.cache_object(&hint, XET_MEMO_TAG, &v).unwrap();
            }),
            ("a flipped byte of the Xet record", &|i| {
                let mut v = values::xet_hash_record(&s, &xethash::file_hash(&a));
                v[0] ^= 1;
                i.cache_object(&values::xet_hash_key(&s), XET_MEMO_TAG, &v)
                    .unwrap();
            }),
            ("a chunk list cut short", &|i| {
                i.cache_object(&values::file_key(&s), "", b"\x01\0\0")
                    .unwrap()
            }),
            ("a chunk list without its first chunk", &|i| {
                i.remember_file(&s, &pieces(&a)[1..]).unwrap()
            }),
            ("a chunk list of another length", &|i| {
                let mut list = pieces(&a);
                list.last_mut().unwrap().1 += 1;
                i.remember_file(&s, &list).unwrap()
            }),
        ];
        for (what, damage) in damages {
            let (_d, index) = index();
            read_before(&index, &a);
            assert!(
                known_by_first(&index, size, &first).is_some(),
                "{what}: intact"
            );
            damage(&index);
            assert!(known_by_first(&index, size, &first).is_none(), "{what}");
            let f = on_disk(&a);
            let memo = XetMemo::start(&index, &f.path, Some(&f.file), size, None, false);
            let (xet, tally) = drive(memo, &a).unwrap();
            assert_eq!(xet, xethash::file_hash(&a), "{what}");
            assert_eq!((tally.reused, tally.reread), (0, 0), "{what}");
        }
    }

    #[test]
    fn a_file_that_shrinks_while_followed_is_read_back_and_hashed() {
        let (_d, index) = index();
        let a = bytes(12, 5 * PIECE);
        read_before(&index, &a);
        // Listed with a's size, the reader gets only its first three pieces (cut short
        // under it): followed to the end of what came, then read back whole.
        let f = on_disk(&a);
        let got = &a[..3 * PIECE];
        let memo = XetMemo::start(&index, &f.path, Some(&f.file), a.len() as u64, None, false);
        let (xet, tally) = drive(memo, got).unwrap();
        assert_eq!(xet, xethash::file_hash(got));
        assert_eq!((tally.reused, tally.reread), (0, got.len() as u64));
    }

    #[test]
    fn a_file_written_to_before_it_is_read_back_fails_the_ingest() {
        let (_d, index) = index();
        let a = bytes(8, 4 * PIECE);
        read_before(&index, &a);
        let mut b = a.clone();
        b[3 * PIECE + 1] ^= 1;
        // The reader got b, but the file's first piece changed on disk before the read back.
        let mut on = b.clone();
        on[10] ^= 1;
        let f = on_disk(&on);
        let memo = XetMemo::start(&index, &f.path, Some(&f.file), b.len() as u64, None, false);
        let err = drive(memo, &b).unwrap_err().to_string();
        assert!(err.contains("changed while it was read"), "{err}");
    }

    #[test]
    fn streams_small_files_and_reread_are_hashed_from_the_first_byte() {
        let (_d, index) = index();
        let a = bytes(9, 5 * PIECE);
        read_before(&index, &a);
        let small = bytes(10, (FOLLOW_MIN - 1) as usize);
        read_before(&index, &small);
        let f = on_disk(&a);
        let p = Path::new("x");
        for memo in [
            XetMemo::start(&index, p, None, a.len() as u64, None, false),
            XetMemo::start(&index, &f.path, Some(&f.file), a.len() as u64, None, true),
        ] {
            assert!(memo.hashing());
            let (xet, tally) = drive(memo, &a).unwrap();
            assert_eq!((xet, tally.reused), (xethash::file_hash(&a), 0));
        }
        let f = on_disk(&small);
        let memo = XetMemo::start(
            &index,
            &f.path,
            Some(&f.file),
            small.len() as u64,
            None,
            false,
        );
        assert!(memo.hashing());
    }

    #[test]
    fn an_expected_sha256_with_a_record_is_read_without_hashing_and_checked() {
        let (_d, index) = index();
        let a = bytes(11, 2 * PIECE);
        read_before(&index, &a);
        // A stream (a download) of a known content: the record's hash.
        let p = Path::new("blob");
        let memo = XetMemo::start(&index, p, None, 1, Some(sha(&a)), false);
        assert!(!memo.hashing());
        let (xet, tally) = drive(memo, &a).unwrap();
        assert_eq!(
            (xet, tally.reused),
            (xethash::file_hash(&a), a.len() as u64)
        );
        // Bytes that are not that content: refused, never given the record's hash.
        let mut b = a.clone();
        b[0] ^= 1;
        let memo = XetMemo::start(&index, p, None, 1, Some(sha(&a)), false);
        let err = drive(memo, &b).unwrap_err().to_string();
        assert!(err.contains("sha256"), "{err}");
        // Without a record for it: hashed.
        let memo = XetMemo::start(&index, p, None, 1, Some(sha(&b)), false);
        assert!(memo.hashing());
    }
}
