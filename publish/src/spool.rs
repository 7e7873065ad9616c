//! The upload spool: objects a client uploads (LFS `PUT`s, a commit's inline files, files
//! made from Xet shards) kept on this machine's disk, by repository and sha256, until a
//! commit names them; and the Xet xorbs shards are made from.
//!
//! ```text
//! <dir>/tmp/<random>                         something being received (never read)
//! <dir>/objects/<org>/<name>/<sha256 hex>    a whole object, checked (repository folded)
//! <dir>/objects/<org>/<name>/<sha256>.xet    its Xet chunk list, when a shard made it
//! <dir>/xorbs/<xet hash>                     a Xet xorb whose records and hash were checked
//! <dir>/xorbs/<xet hash>.idx                 where each of its records starts (a hint)
//! ```
//!
//! An object is streamed to a temporary file while its SHA-256 is computed; only when its
//! length and hash are the ones the client declared is it synced and renamed into place
//! (then the directory is synced): a name always holds the bytes it names, whatever crash
//! came before. Objects belong to the repository they were uploaded for (the signed URL or
//! the Xet token names it): a commit takes only its own repository's, so knowing a hash
//! is never enough to get bytes someone else sent. Nothing else is kept: a client that
//! dies mid upload leaves a temporary file [`Spool::prune`] deletes after an hour, and
//! objects and xorbs no commit took are deleted after [`Spool::ttl`] (pruned at most once
//! a minute, as uploads and commits come). Room is reserved for each upload in flight, so
//! that concurrent uploads cannot together fill the disk. The spool is not the store: an
//! object in it is in no revision until a commit's ingest reads it into packs.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use format::{RepoId, Sha256, XetHash};
use parking_lot::Mutex;
use sha2::{Digest, Sha256 as Hasher};

use crate::error::PublishError;

/// A temporary file untouched this long belongs to an upload that died.
const TMP_STALE: Duration = Duration::from_secs(3600);

/// Bytes kept free on the spool's file system beyond the uploads in flight.
const FREE_MARGIN: u64 = 256 << 20;

/// Least time between two prunes.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// The upload spool of one hub.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    ttl: Duration,
    max_object: u64,
    /// Bytes reserved by uploads in flight.
    reserved: Mutex<u64>,
    last_prune: Mutex<Option<Instant>>,
}

/// Room reserved for one upload; given back when dropped.
pub struct Reservation<'a> {
    spool: &'a Spool,
    bytes: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut r = self.spool.reserved.lock();
        *r = r.saturating_sub(self.bytes);
    }
}

impl Spool {
    /// The spool in `dir` (created if needed), keeping uncommitted objects for `ttl` and
    /// refusing objects over `max_object` bytes.
    pub fn open(dir: &Path, ttl: Duration, max_object: u64) -> Result<Spool, PublishError> {
        for sub in ["tmp", "objects", "xorbs"] {
            fs::create_dir_all(dir.join(sub)).map_err(|e| io_at(&dir.join(sub), e))?;
        }
        Ok(Spool {
            dir: dir.to_path_buf(),
            ttl,
            max_object,
            reserved: Mutex::new(0),
            last_prune: Mutex::new(None),
        })
    }

    /// The spool's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long an object no commit took is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn repo_dir(&self, repo: &RepoId) -> PathBuf {
        let folded = repo.folded();
        self.dir.join("objects").join(folded)
    }

    fn object_path(&self, repo: &RepoId, sha256: &Sha256) -> PathBuf {
        self.repo_dir(repo).join(sha256.to_hex())
    }

    fn chunks_path(&self, repo: &RepoId, sha256: &Sha256) -> PathBuf {
        self.repo_dir(repo).join(format!("{}.xet", sha256.to_hex()))
    }

    /// The path of object `sha256` uploaded for `repo`, if the spool holds it with `size`
    /// bytes.
    pub fn object(&self, repo: &RepoId, sha256: &Sha256, size: u64) -> Option<PathBuf> {
        let path = self.object_path(repo, sha256);
        let meta = fs::symlink_metadata(&path).ok()?;
        (meta.is_file() && meta.len() == size).then_some(path)
    }

    /// Whether an object of `size` bytes may be received now: not over the cap, and room
    /// for it on the file system beside the uploads in flight.
    pub fn check_room(&self, size: u64) -> Result<(), PublishError> {
        self.room(size, *self.reserved.lock())
    }

    fn room(&self, size: u64, reserved: u64) -> Result<(), PublishError> {
        if size > self.max_object {
            return Err(PublishError::TooLarge(format!(
                "an object of {size} bytes is over this hub's limit of {} bytes per file",
                self.max_object
            )));
        }
        if let Some(free) = free_bytes(&self.dir) {
            let need = size.saturating_add(reserved).saturating_add(FREE_MARGIN);
            if free < need {
                return Err(PublishError::NoRoom(format!(
                    "the hub's upload spool has {free} bytes free, not enough for {size} more \
                     beside the {reserved} bytes of the uploads in flight"
                )));
            }
        }
        Ok(())
    }

    /// Reserves room for `size` bytes (refused as [`Spool::check_room`] refuses).
    pub fn reserve(&self, size: u64) -> Result<Reservation<'_>, PublishError> {
        let mut r = self.reserved.lock();
        self.room(size, *r)?;
        *r = r.saturating_add(size);
        Ok(Reservation {
            spool: self,
            bytes: size,
        })
    }

    /// Receives object `sha256` of `size` bytes for `repo` from `body`, reading at most
    /// `size + 1` bytes of it: kept only when it has exactly that length and hash.
    /// Receiving an object the spool holds already replaces it with the same bytes.
    pub fn receive(
        &self,
        repo: &RepoId,
        sha256: &Sha256,
        size: u64,
        body: &mut dyn Read,
    ) -> Result<PathBuf, PublishError> {
        self.maybe_prune();
        let _room = self.reserve(size)?;
        let (tmp, mut file) = self.temporary()?;
        let outcome = copy_checked(body, &mut file, size).and_then(|got| {
            if got != *sha256 {
                return Err(PublishError::BadObject(format!(
                    "the bytes sent have sha256 {got}, not the {sha256} they were declared with"
                )));
            }
            file.sync_all().map_err(|e| io_at(&tmp, e))
        });
        drop(file);
        if let Err(e) = outcome {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        self.keep(repo, &tmp, sha256)?;
        Ok(self.object_path(repo, sha256))
    }

    /// Keeps `bytes` (a commit's inline file) as an object of `repo`; returns its sha256
    /// and path.
    pub fn keep_bytes(
        &self,
        repo: &RepoId,
        bytes: &[u8],
    ) -> Result<(Sha256, PathBuf), PublishError> {
        let sha = Sha256(Hasher::digest(bytes).into());
        let path = self.receive(repo, &sha, bytes.len() as u64, &mut io::Cursor::new(bytes))?;
        Ok((sha, path))
    }

    /// Deletes an object of `repo` (a commit stored it, or it was found damaged), and its
    /// chunk list.
    pub fn remove(&self, repo: &RepoId, sha256: &Sha256) {
        let _ = fs::remove_file(self.object_path(repo, sha256));
        let _ = fs::remove_file(self.chunks_path(repo, sha256));
    }

    /// Keeps the Xet chunk list of object `sha256` of `repo` beside it (a record of
    /// [`crate::xet::stored::FileRecord`]'s format whose revision is not known yet).
    pub(crate) fn keep_chunks(
        &self,
        repo: &RepoId,
        sha256: &Sha256,
        chunks: &[(XetHash, u32)],
    ) -> Result<(), PublishError> {
        let rec = crate::xet::stored::FileRecord::pending(chunks.to_vec())?;
        let (tmp, mut f) = self.temporary()?;
        f.write_all(&rec.encode())
            .and_then(|()| f.sync_all())
            .map_err(|e| io_at(&tmp, e))?;
        let dest = self.chunks_path(repo, sha256);
        fs::rename(&tmp, &dest).map_err(|e| io_at(&dest, e))
    }

    /// The Xet chunk list kept beside object `sha256` of `repo`, if any.
    pub(crate) fn chunks(&self, repo: &RepoId, sha256: &Sha256) -> Option<Vec<(XetHash, u32)>> {
        let b = fs::read(self.chunks_path(repo, sha256)).ok()?;
        crate::xet::stored::FileRecord::decode(&b).map(|r| r.chunks)
    }

    /// Prunes if the last prune was more than a minute ago.
    pub fn maybe_prune(&self) {
        {
            let mut last = self.last_prune.lock();
            if last.is_some_and(|t| t.elapsed() < PRUNE_EVERY) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.prune();
    }

    /// Deletes temporary files of uploads that died and objects and xorbs older than the
    /// TTL; returns how many files went.
    pub fn prune(&self) -> usize {
        let mut gone = prune_dir(&self.dir.join("tmp"), TMP_STALE)
            + prune_dir(&self.dir.join("xorbs"), self.ttl);
        let Ok(orgs) = fs::read_dir(self.dir.join("objects")) else {
            return gone;
        };
        for org in orgs
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        {
            let Ok(names) = fs::read_dir(org.path()) else {
                continue;
            };
            for name in names
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            {
                gone += prune_dir(&name.path(), self.ttl);
            }
        }
        gone
    }

    /// The path of xorb `hash`, if the spool holds it.
    pub fn xorb(&self, hash: &XetHash) -> Option<PathBuf> {
        let path = self.dir.join("xorbs").join(hash.hex());
        fs::symlink_metadata(&path)
            .ok()
            .filter(|m| m.is_file())
            .map(|_| path)
    }

    /// Receives the xorb `hash` from `body`, kept only when every record is valid and its
    /// chunks hash to `hash`; whether it was new.
    pub fn receive_xorb(&self, hash: &XetHash, body: &mut dyn Read) -> Result<bool, PublishError> {
        self.maybe_prune();
        let existed = self.xorb(hash).is_some();
        let _room = self.reserve(crate::xet::xorb::MAX_BYTES)?;
        let (tmp, mut file) = self.temporary()?;
        let outcome = crate::xet::xorb::check_into(hash, body, &mut file)
            .and_then(|o| file.sync_all().map(|()| o).map_err(|e| io_at(&tmp, e)));
        drop(file);
        if outcome.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        let offsets = outcome?;
        // The offsets first: a xorb without them is still read, from its first record.
        if let Err(e) = self.write_offsets(hash, &offsets) {
            tracing::warn!("the record offsets of xorb {hash}: {e}");
        }
        let dest = self.dir.join("xorbs").join(hash.hex());
        fs::rename(&tmp, &dest).map_err(|e| io_at(&dest, e))?;
        sync_dir(&self.dir.join("xorbs"));
        Ok(!existed)
    }

    /// Writes `<hash>.idx`: each record's offset (u32 LE), then the BLAKE3 of those bytes.
    fn write_offsets(&self, hash: &XetHash, offsets: &[u32]) -> Result<(), PublishError> {
        let mut bytes: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
        let sum = blake3::hash(&bytes);
        bytes.extend_from_slice(sum.as_bytes());
        let (tmp, mut file) = self.temporary()?;
        let written = file.write_all(&bytes).and_then(|()| file.sync_all());
        drop(file);
        let dest = self.dir.join("xorbs").join(format!("{}.idx", hash.hex()));
        match written.and_then(|()| fs::rename(&tmp, &dest)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(io_at(&dest, e))
            }
        }
    }

    /// Where each record of spooled xorb `hash` starts, when its `.idx` is whole (its
    /// BLAKE3 matches, offsets increasing); a hint only: the records read there are decoded
    /// and hashed as any.
    pub(crate) fn xorb_offsets(&self, hash: &XetHash) -> Option<Vec<u32>> {
        let path = self.dir.join("xorbs").join(format!("{}.idx", hash.hex()));
        let bytes = fs::read(path).ok()?;
        let n = bytes.len().checked_sub(32)?;
        if n % 4 != 0 || blake3::hash(&bytes[..n]).as_bytes() != &bytes[n..] {
            return None;
        }
        let offsets: Vec<u32> = bytes[..n]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        offsets.windows(2).all(|w| w[0] < w[1]).then_some(offsets)
    }

    /// Keeps the checked temporary file `tmp` as object `sha256` of `repo`.
    pub(crate) fn keep(
        &self,
        repo: &RepoId,
        tmp: &Path,
        sha256: &Sha256,
    ) -> Result<(), PublishError> {
        let dir = self.repo_dir(repo);
        fs::create_dir_all(&dir).map_err(|e| io_at(&dir, e))?;
        let dest = dir.join(sha256.to_hex());
        fs::rename(tmp, &dest).map_err(|e| io_at(&dest, e))?;
        sync_dir(&dir);
        Ok(())
    }

    pub(crate) fn temporary(&self) -> Result<(PathBuf, File), PublishError> {
        let mut random = [0u8; 12];
        File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut random))
            .map_err(|e| io_at(Path::new("/dev/urandom"), e))?;
        let path = self.dir.join("tmp").join(hex::encode(random));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| io_at(&path, e))?;
        Ok((path, file))
    }
}

/// Deletes the files of `dir` older than `age`; how many.
fn prune_dir(dir: &Path, age: Duration) -> usize {
    let now = SystemTime::now();
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut gone = 0;
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|d| d > age);
        if old && e.file_type().is_ok_and(|t| t.is_file()) && fs::remove_file(e.path()).is_ok() {
            gone += 1;
        }
    }
    gone
}

/// Copies `body` into `out`, at most `size + 1` bytes: the sha256 of exactly `size` bytes,
/// or an error saying the body was shorter or longer.
fn copy_checked(body: &mut dyn Read, out: &mut File, size: u64) -> Result<Sha256, PublishError> {
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(PublishError::Body(e.to_string())),
        };
        total += n as u64;
        if total > size {
            return Err(PublishError::BadObject(format!(
                "more than the {size} bytes declared were sent"
            )));
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|e| write_error(&e))?;
    }
    if total != size {
        return Err(PublishError::BadObject(format!(
            "{total} bytes were sent, {size} were declared"
        )));
    }
    Ok(Sha256(hasher.finalize().into()))
}

/// Free bytes for an unprivileged user on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain old data, for which all zero bytes are valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid statvfs to fill.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail.saturating_mul(st.f_frsize))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

fn io_at(path: &Path, e: io::Error) -> PublishError {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => {
            PublishError::NoRoom(format!("{}: {e}", path.display()))
        }
        _ => PublishError::Io(format!("{}: {e}", path.display())),
    }
}

/// The error of a write into the spool: a full disk is [`PublishError::NoRoom`].
pub(crate) fn write_error(e: &io::Error) -> PublishError {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => {
            PublishError::NoRoom(format!("the upload spool is full: {e}"))
        }
        _ => PublishError::Io(format!("writing the upload spool: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool() -> (tempfile::TempDir, Spool) {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(dir.path(), Duration::from_secs(3600), 1 << 30).unwrap();
        (dir, s)
    }

    fn sha(b: &[u8]) -> Sha256 {
        Sha256(Hasher::digest(b).into())
    }

    fn repo() -> RepoId {
        RepoId::parse("team/model").unwrap()
    }

    fn tmp_files(dir: &Path) -> usize {
        fs::read_dir(dir.join("tmp")).unwrap().count()
    }

    #[test]
    fn an_object_is_kept_only_with_its_declared_size_and_hash() {
        let (dir, s) = spool();
        let data = b"weights".repeat(1000);
        let path = s
            .receive(&repo(), &sha(&data), data.len() as u64, &mut &data[..])
            .unwrap();
        assert_eq!(fs::read(&path).unwrap(), data);
        assert_eq!(
            s.object(&repo(), &sha(&data), data.len() as u64),
            Some(path)
        );
        assert_eq!(
            s.object(&repo(), &sha(&data), 3),
            None,
            "another size is not it"
        );

        let other = b"other bytes".to_vec();
        let lying = s.receive(&repo(), &sha(&data), other.len() as u64, &mut &other[..]);
        assert!(matches!(lying, Err(PublishError::BadObject(ref m)) if m.contains("sha256")));
        let short = s.receive(&repo(), &sha(&other), 100, &mut &other[..]);
        assert!(matches!(short, Err(PublishError::BadObject(ref m)) if m.contains("declared")));
        let long = s.receive(&repo(), &sha(&other[..3]), 3, &mut &other[..]);
        assert!(matches!(long, Err(PublishError::BadObject(ref m)) if m.contains("more than")));
        assert_eq!(tmp_files(dir.path()), 0, "refused uploads leave nothing");
        assert_eq!(
            fs::read(s.object(&repo(), &sha(&data), 7000).unwrap()).unwrap(),
            data
        );
    }

    #[test]
    fn objects_belong_to_the_repository_they_were_sent_for() {
        let (_d, s) = spool();
        let (sha_a, _) = s.keep_bytes(&repo(), b"secret").unwrap();
        let other = RepoId::parse("other/x").unwrap();
        assert!(s.object(&repo(), &sha_a, 6).is_some());
        assert_eq!(s.object(&other, &sha_a, 6), None, "a hash is not the bytes");
        assert!(
            s.object(&RepoId::parse("TEAM/Model").unwrap(), &sha_a, 6)
                .is_some(),
            "ids fold"
        );
    }

    #[test]
    fn room_is_reserved_for_uploads_in_flight() {
        let d = tempfile::tempdir().unwrap();
        let s = Spool::open(d.path(), Duration::from_secs(60), u64::MAX).unwrap();
        let free = free_bytes(s.dir()).unwrap();
        let first = free - FREE_MARGIN - (64 << 20);
        let held = s.reserve(first).unwrap();
        assert!(matches!(s.reserve(128 << 20), Err(PublishError::NoRoom(_))));
        assert!(matches!(
            s.check_room(128 << 20),
            Err(PublishError::NoRoom(_))
        ));
        drop(held);
        s.reserve(128 << 20).unwrap();
    }

    #[test]
    fn a_body_that_fails_midway_leaves_nothing() {
        struct Dies(usize);
        impl Read for Dies {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::other("connection reset"));
                }
                self.0 -= 1;
                buf[0] = 1;
                Ok(1)
            }
        }
        let (dir, s) = spool();
        let r = s.receive(&repo(), &sha(&[1; 10]), 10, &mut Dies(5));
        assert!(matches!(r, Err(PublishError::Body(_))));
        assert_eq!(tmp_files(dir.path()), 0);
        assert_eq!(s.object(&repo(), &sha(&[1; 10]), 10), None);
    }

    #[test]
    fn objects_over_the_cap_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(dir.path(), Duration::from_secs(60), 10).unwrap();
        let mut never = io::repeat(0).take(0);
        let r = s.receive(&repo(), &sha(b""), 11, &mut never);
        assert!(matches!(r, Err(PublishError::TooLarge(_))));
        let r = s.check_room(u64::MAX / 2);
        assert!(r.is_err());
    }

    #[test]
    fn prune_deletes_stale_temporaries_and_expired_objects_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(dir.path(), Duration::from_secs(600), 1 << 20).unwrap();
        let age = |p: &Path, secs| {
            let t = SystemTime::now() - Duration::from_secs(secs);
            let f = File::options().write(true).open(p).unwrap();
            f.set_modified(t).unwrap();
        };
        let (sha_a, a) = s.keep_bytes(&repo(), b"a").unwrap();
        let (sha_b, b) = s.keep_bytes(&repo(), b"b").unwrap();
        age(&a, 601);
        age(&b, 599);
        let stale = dir.path().join("tmp/dead");
        fs::write(&stale, b"x").unwrap();
        age(&stale, 3601);
        let fresh = dir.path().join("tmp/live");
        fs::write(&fresh, b"x").unwrap();
        assert_eq!(s.prune(), 2);
        assert!(!a.exists() && !stale.exists() && fresh.exists() && b.exists());
        assert_eq!(s.object(&repo(), &sha_a, 1), None);
        assert!(s.object(&repo(), &sha_b, 1).is_some());
    }
}
