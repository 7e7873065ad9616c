//! The local-directory object store: the embedded default.
//!
//! A key `a/b/c` is the file `<root>/a/b/c`. `put` writes `<root>/tmp/<random>` first,
//! fsyncs it, renames it into place and fsyncs the directory, so an object is either absent
//! or complete, even if the process or the machine dies. `put_deferred` does the same
//! without waiting for the disk: it starts writeback (`sync_file_range`) and leaves the
//! waiting to `sync_deferred`, which ingest calls once before writing manifests. Every
//! directory a put creates is made durable at once (its parent is fsynced), deferred or
//! not. `tmp/` is never listed as data. The store's clock ([`ObjectStore::now`]) is the
//! kernel's, the one that stamps file mtimes, whatever the process clock says
//! (`crate::clock`).

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::open_files::OpenFiles;
use crate::error::{ObjectError, Result};
use crate::store::{check_key, ObjectMeta, ObjectStore, Temporary};

/// Directory holding temporary files before they are renamed into place.
pub const TMP_DIR: &str = "tmp";

/// An object store in a local directory.
pub struct LocalStore {
    root: PathBuf,
    counter: AtomicU64,
    /// Files written by `put_deferred` and not yet synced.
    unsynced: Mutex<Vec<PathBuf>>,
    /// Packs kept open for ranged reads (a pack key never names two contents).
    open_packs: OpenFiles,
}

impl LocalStore {
    /// A store rooted at `root` (created on the first `put`).
    pub fn new(root: impl Into<PathBuf>) -> LocalStore {
        LocalStore {
            root: root.into(),
            counter: AtomicU64::new(0),
            unsynced: Mutex::new(Vec::new()),
            open_packs: OpenFiles::default(),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> Result<PathBuf> {
        check_key(key)?;
        Ok(self.root.join(key))
    }

    fn tmp_path(&self) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        self.root
            .join(TMP_DIR)
            .join(format!("{}-{}-{}", std::process::id(), nanos, n))
    }
}

fn map_open_err(key: &str, path: &Path, e: std::io::Error) -> ObjectError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ObjectError::NotFound(key.to_string())
    } else {
        ObjectError::io(path, e)
    }
}

impl LocalStore {
    /// Writes `data` to a temporary file and renames it to `key`'s path; `durable` waits
    /// for the disk (file and directory), otherwise writeback is only started.
    fn write_object(&self, key: &str, data: &[u8], durable: bool) -> Result<PathBuf> {
        let dest = self.path(key)?;
        let tmp = self.tmp_path();
        let tmp_dir = self.root.join(TMP_DIR);
        fs::create_dir_all(&tmp_dir).map_err(|e| ObjectError::io(&tmp_dir, e))?;
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            if durable {
                f.sync_data()?;
            } else {
                // SAFETY: a valid open fd; the call only schedules writeback.
                unsafe {
                    libc::sync_file_range(
                        std::os::fd::AsRawFd::as_raw_fd(&f),
                        0,
                        0,
                        libc::SYNC_FILE_RANGE_WRITE,
                    )
                };
            }
            Ok(())
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(ObjectError::io(&tmp, e));
        }
        if let Some(parent) = dest.parent() {
            create_dirs_durably(parent)?;
        }
        fs::rename(&tmp, &dest).map_err(|e| {
            let _ = fs::remove_file(&tmp);
            ObjectError::io(&dest, e)
        })?;
        if durable {
            sync_dir(dest.parent().unwrap_or(&self.root))?;
        }
        Ok(dest)
    }
}

impl LocalStore {
    /// [`ObjectStore::put_many`]: writes every object to `tmp/` (recorded in `written`,
    /// emptied as they are renamed), makes them and every directory made for them durable,
    /// renames them, and makes the renames durable.
    fn put_many_into(
        &self,
        objects: &[(String, Vec<u8>)],
        written: &mut Vec<(PathBuf, PathBuf)>,
    ) -> Result<()> {
        // Every key checked before anything is written.
        let dests = objects
            .iter()
            .map(|(key, _)| self.path(key))
            .collect::<Result<Vec<_>>>()?;
        let tmp_dir = self.root.join(TMP_DIR);
        fs::create_dir_all(&tmp_dir).map_err(|e| ObjectError::io(&tmp_dir, e))?;
        // Opened before the first byte is written (see `WholeFs`).
        let whole_fs = if objects.len() >= SYNCFS_BATCH {
            WholeFs::open(&tmp_dir)?
        } else {
            None
        };
        // Each file closed once written (synced first without `syncfs`): a batch of
        // thousands must not hold thousands of descriptors.
        for ((_, data), dest) in objects.iter().zip(dests) {
            let tmp = self.tmp_path();
            let mut f = File::create(&tmp).map_err(|e| ObjectError::io(&tmp, e))?;
            written.push((tmp.clone(), dest));
            f.write_all(data).map_err(|e| ObjectError::io(&tmp, e))?;
            if whole_fs.is_none() {
                f.sync_data().map_err(|e| ObjectError::io(&tmp, e))?;
            }
        }
        // Every directory the objects go into is made (and durable, below) before any
        // object is renamed into it.
        let mut made = std::collections::BTreeSet::new();
        for (_, dest) in written.iter() {
            create_dirs(dest.parent().unwrap_or(&self.root), &mut made)?;
        }
        match &whole_fs {
            Some(fs) => fs.sync()?,
            None => made.iter().try_for_each(|d| sync_dir(d))?,
        }
        let mut dirs = std::collections::BTreeSet::new();
        let mut renamed = 0;
        let outcome = written.iter().try_for_each(|(tmp, dest)| {
            fs::rename(tmp, dest).map_err(|e| ObjectError::io(dest, e))?;
            renamed += 1;
            dirs.insert(dest.parent().unwrap_or(&self.root).to_path_buf());
            Ok(())
        });
        written.drain(..renamed);
        outcome?;
        match &whole_fs {
            // tmp/ and every destination are on one filesystem (rename would have failed).
            Some(fs) => fs.sync(),
            None => dirs.iter().try_for_each(|d| sync_dir(d)),
        }
    }
}

/// Creates `dir` and any missing ancestors, fsyncing the parent of each directory it
/// creates: a new `packs/xx/` or `repos/<org>/<name>/manifests/` must survive a power cut
/// as surely as the object renamed into it (whose own directory the caller syncs).
fn create_dirs_durably(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs_durably(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        // Another writer created it: it synced the parent, or is about to before its
        // object is published; syncing here too keeps our own promise.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(ObjectError::io(dir, e)),
    }
    sync_dir(dir.parent().unwrap_or(dir))
}

/// Creates `dir` and any missing ancestors without syncing; the parent of each directory
/// it creates goes into `to_sync`, for the caller to sync before it reports success.
fn create_dirs(dir: &Path, to_sync: &mut std::collections::BTreeSet<PathBuf>) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, to_sync)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        // Made by another writer meanwhile: it syncs it, or is about to; we sync it too.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(ObjectError::io(dir, e)),
    }
    to_sync.insert(dir.parent().unwrap_or(dir).to_path_buf());
    Ok(())
}

/// Up to `len` bytes at `offset` of `file` (fewer only at its end), by `pread`, so that
/// readers of one open file do not share a file offset; the buffer is not zeroed first.
fn pread(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    let mut out: Vec<u8> = Vec::with_capacity(len);
    while out.len() < len {
        let done = out.len();
        let at = libc::off_t::try_from(offset + done as u64)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let spare = &mut out.spare_capacity_mut()[..len - done];
        // SAFETY: pread writes at most `spare.len()` bytes into memory that `out` owns.
        let n =
            unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
        match n {
            0 => break,
            n if n < 0 => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            // SAFETY: the first `n` bytes of the spare capacity were just written.
            n => unsafe { out.set_len(done + n as usize) },
        }
    }
    Ok(out)
}

/// Batches of [`ObjectStore::put_many`] at least this large are made durable with
/// `syncfs` where it can be trusted ([`WholeFs`]: every dirty page and inode of the store's
/// filesystem, then one device flush) rather than one `fsync` per file and directory, each
/// of which flushes the device: 200 manifests cost 0.17 s of syncs that way on a virtio
/// disk. Smaller batches sync file by file, so a lone `modelcas ref` never waits for other
/// programs' dirty pages.
pub const SYNCFS_BATCH: usize = 8;

/// `syncfs(2)` of the filesystem holding a directory, where it can be trusted as the
/// durability of a batch: Linux 5.8 or later (before, `syncfs` returned 0 whatever
/// writeback did) and a local journaling filesystem (ext4, XFS, btrfs; on FUSE or network
/// filesystems a `syncfs` need not reach the server as an `fsync` does). The directory is
/// opened before the batch writes anything: a writeback error after that moment is then
/// reported to this handle even if another process's `syncfs` saw it first.
struct WholeFs {
    dir: File,
    path: PathBuf,
}

impl WholeFs {
    /// `None` where `syncfs` cannot be trusted: the caller syncs file by file.
    fn open(dir: &Path) -> Result<Option<WholeFs>> {
        use std::os::fd::AsRawFd;
        let f = File::open(dir).map_err(|e| ObjectError::io(dir, e))?;
        if !kernel_reports_syncfs_errors() {
            return Ok(None);
        }
        // SAFETY: statfs is plain old data, filled by the kernel for a valid descriptor.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open for `f`'s life and `st` is ours, outliving the call.
        if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
            return Ok(None);
        }
        const EXT4: i64 = 0xEF53;
        const XFS: i64 = 0x5846_5342;
        const BTRFS: i64 = 0x9123_683E;
        #[allow(
            trivial_numeric_casts,
            clippy::unnecessary_cast,
            reason = "f_type's type differs between targets (i64 here, u32 or i32 elsewhere)"
        )]
        let local = matches!(st.f_type as i64, EXT4 | XFS | BTRFS);
        Ok(local.then(|| WholeFs {
            dir: f,
            path: dir.to_path_buf(),
        }))
    }

    /// When it returns `Ok`, every write to the filesystem made before the call is durable.
    fn sync(&self) -> Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid open descriptor; syncfs touches no memory of ours.
        if unsafe { libc::syncfs(self.dir.as_raw_fd()) } != 0 {
            return Err(ObjectError::io(&self.path, std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// Whether this kernel is Linux 5.8 or later, whose `syncfs` reports writeback errors.
fn kernel_reports_syncfs_errors() -> bool {
    static NEW_ENOUGH: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NEW_ENOUGH.get_or_init(|| {
        // SAFETY: utsname is plain old data, filled by the kernel.
        let mut u: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `u` is ours and outlives the call.
        if unsafe { libc::uname(&mut u) } != 0 {
            return false;
        }
        let release: String = u
            .release
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8 as char)
            .collect();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (major, minor) >= (5, 8)
    })
}

fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(test)]
    tests::SYNCED.with(|s| s.borrow_mut().push(dir.to_path_buf()));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ObjectError::io(dir, e))
}

impl ObjectStore for LocalStore {
    fn put(&self, key: &str, data: &[u8]) -> Result<()> {
        self.write_object(key, data, true).map(|_| ())
    }

    fn put_deferred(&self, key: &str, data: &[u8]) -> Result<()> {
        let dest = self.write_object(key, data, false)?;
        self.unsynced.lock().push(dest);
        Ok(())
    }

    fn sync_deferred(&self) -> Result<()> {
        let files = std::mem::take(&mut *self.unsynced.lock());
        let mut dirs = std::collections::BTreeSet::new();
        for f in &files {
            File::open(f)
                .and_then(|h| h.sync_data())
                .map_err(|e| ObjectError::io(f, e))?;
            if let Some(d) = f.parent() {
                dirs.insert(d.to_path_buf());
            }
        }
        for d in dirs {
            sync_dir(&d)?;
        }
        Ok(())
    }

    /// Every object is written to a temporary file, all of them are made durable, and only
    /// then is each renamed into place, the directories made durable after: each object is
    /// absent or complete whatever happens, as with [`ObjectStore::put`]. A batch of
    /// [`SYNCFS_BATCH`] objects or more is made durable with two `syncfs` calls (one
    /// device flush each) instead of two `fsync`s per object.
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        let mut written: Vec<(PathBuf, PathBuf)> = Vec::with_capacity(objects.len());
        let result = self.put_many_into(objects, &mut written);
        // Whatever was not renamed into place (an error) goes.
        for (tmp, _) in &written {
            let _ = fs::remove_file(tmp);
        }
        result
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let path = self.path(key)?;
        let mut f = File::open(&path).map_err(|e| map_open_err(key, &path, e))?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)
            .map_err(|e| ObjectError::io(&path, e))?;
        Ok(out)
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        let path = self.path(key)?;
        let file = if format::layout::parse_pack_key(key).is_some() {
            self.open_packs.get(key, &path)
        } else {
            File::open(&path).map(Arc::new)
        }
        .map_err(|e| map_open_err(key, &path, e))?;
        let out = pread(&file, offset, len as usize).map_err(|e| ObjectError::io(&path, e))?;
        if (out.len() as u64) < len {
            return Err(ObjectError::CorruptObject {
                key: key.to_string(),
                reason: format!(
                    "truncated: wanted {len} bytes at offset {offset}, object ends after {}",
                    out.len()
                ),
            });
        }
        Ok(out)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        crate::store::check_prefix(prefix)?;
        let mut out = Vec::new();
        // Walk from the deepest directory that the prefix fully names.
        let dir_part = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let start = if dir_part.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir_part)
        };
        walk(&self.root, &start, prefix, &mut out)?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn temporaries(&self, min_age: std::time::Duration) -> Result<Vec<Temporary>> {
        let dir = self.root.join(TMP_DIR);
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ObjectError::io(&dir, e)),
        };
        let now = std::time::SystemTime::now();
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| ObjectError::io(&dir, e))?;
            let Ok(meta) = entry.metadata() else {
                continue; // renamed into place meanwhile
            };
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if age >= min_age {
                let name = entry.file_name().to_string_lossy().into_owned();
                out.push(Temporary {
                    name: format!("{TMP_DIR}/{name}"),
                    age_secs: age.as_secs(),
                    handle: name,
                    key: None,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn remove_temporary(&self, t: &Temporary) -> Result<()> {
        if t.handle.contains('/') || t.handle.starts_with('.') {
            return Err(ObjectError::Invalid(format!("bad temporary {}", t.name)));
        }
        let path = self.root.join(TMP_DIR).join(&t.handle);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ObjectError::io(&path, e)),
        }
    }

    fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ObjectError::io(&path, e)),
        }
    }

    fn size(&self, key: &str) -> Result<Option<u64>> {
        let path = self.path(key)?;
        match fs::metadata(&path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ObjectError::io(&path, e)),
        }
    }

    fn stat(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let path = self.path(key)?;
        match fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(Some(meta_of(key.to_string(), &m))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ObjectError::io(&path, e)),
        }
    }

    /// The kernel's clock, which stamps the mtimes `list` and `stat` report (for a
    /// directory on a network file system, mtimes come from the server: keep the clocks
    /// of its clients in step, or use S3).
    fn now(&self) -> Result<std::time::SystemTime> {
        Ok(std::time::SystemTime::now())
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }
}

fn meta_of(key: String, meta: &fs::Metadata) -> ObjectMeta {
    ObjectMeta {
        key,
        size: meta.len(),
        tag: local_tag(meta),
        modified: meta.modified().ok(),
    }
}

/// Modification time (ns) and inode: every put renames a new file into place.
fn local_tag(meta: &fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!("{}.{}-{}", meta.mtime(), meta.mtime_nsec(), meta.ino())
}

fn walk(root: &Path, dir: &Path, prefix: &str, out: &mut Vec<ObjectMeta>) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ObjectError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| ObjectError::io(dir, e))?;
        let path = entry.path();
        let rel = match path.strip_prefix(root).ok().and_then(|p| p.to_str()) {
            Some(r) => r.to_string(),
            None => continue,
        };
        if rel == TMP_DIR || rel.starts_with("tmp/") && !prefix.starts_with("tmp/") {
            continue;
        }
        let ft = entry.file_type().map_err(|e| ObjectError::io(&path, e))?;
        if ft.is_dir() {
            let as_dir = format!("{rel}/");
            if as_dir.starts_with(prefix) || prefix.starts_with(&as_dir) {
                walk(root, &path, prefix, out)?;
            }
        } else if ft.is_file() && rel.starts_with(prefix) {
            let meta = entry.metadata().map_err(|e| ObjectError::io(&path, e))?;
            out.push(meta_of(rel, &meta));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        pub(super) static SYNCED: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Issue 11, point 5: a put that creates `packs/xx/` (or any directory) fsyncs the
    /// parent of every directory it created, not only the object's own directory.
    #[test]
    fn regression_new_directories_are_made_durable() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let store = LocalStore::new(&root);
        for deferred in [false, true] {
            SYNCED.with(|s| s.borrow_mut().clear());
            let top = if deferred { "packs" } else { "repos" };
            let key = format!("{top}/ab/cd/object");
            if deferred {
                store.put_deferred(&key, b"x").unwrap();
            } else {
                store.put(&key, b"x").unwrap();
            }
            let synced = SYNCED.with(|s| s.borrow().clone());
            for dir in [root.clone(), root.join(top), root.join(top).join("ab")] {
                assert!(
                    synced.contains(&dir),
                    "{} not synced: {synced:?}",
                    dir.display()
                );
            }
        }
        assert_eq!(store.get("repos/ab/cd/object").unwrap(), b"x");
    }

    fn tmp_files(root: &Path) -> usize {
        fs::read_dir(root.join(TMP_DIR)).map_or(0, |d| d.count())
    }

    /// A small batch syncs file by file: every directory it made has its parent synced,
    /// and every object's directory is synced, as `put` does for one object.
    #[test]
    fn put_many_of_a_few_objects_syncs_every_directory_it_made() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let store = LocalStore::new(&root);
        SYNCED.with(|s| s.borrow_mut().clear());
        let objects = vec![
            ("repos/a/b/manifests/1".to_string(), b"one".to_vec()),
            ("repos/a/c/refs/main".to_string(), b"two".to_vec()),
        ];
        store.put_many(&objects).unwrap();
        let synced = SYNCED.with(|s| s.borrow().clone());
        for dir in [
            "",
            "repos",
            "repos/a",
            "repos/a/b",
            "repos/a/c",
            "repos/a/b/manifests",
            "repos/a/c/refs",
        ] {
            let dir = if dir.is_empty() {
                root.clone()
            } else {
                root.join(dir)
            };
            assert!(
                synced.contains(&dir),
                "{} not synced: {synced:?}",
                dir.display()
            );
        }
        for (k, v) in &objects {
            assert_eq!(&store.get(k).unwrap(), v);
        }
        assert_eq!(tmp_files(&root), 0);
    }

    /// A large batch (syncfs) stores every object whole and leaves nothing in `tmp/`.
    #[test]
    fn put_many_of_a_large_batch_stores_every_object() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let store = LocalStore::new(&root);
        let objects: Vec<(String, Vec<u8>)> = (0..SYNCFS_BATCH * 5)
            .map(|i| {
                (
                    format!("repos/o{}/n{i}/manifests/m", i % 3),
                    vec![i as u8; 100 + i],
                )
            })
            .collect();
        store.put_many(&objects).unwrap();
        for (k, v) in &objects {
            assert_eq!(&store.get(k).unwrap(), v);
        }
        assert_eq!(store.list("repos/").unwrap().len(), objects.len());
        assert_eq!(tmp_files(&root), 0);
        // Objects already there are replaced.
        let again: Vec<(String, Vec<u8>)> = objects
            .iter()
            .map(|(k, _)| (k.clone(), b"new".to_vec()))
            .collect();
        store.put_many(&again).unwrap();
        assert_eq!(store.get(&objects[7].0).unwrap(), b"new");
    }

    /// A batch that fails part-way leaves every object it made visible complete, the
    /// others absent, and no temporary file behind.
    #[test]
    fn put_many_that_fails_leaves_whole_objects_and_no_temporaries() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let store = LocalStore::new(&root);
        // The third destination is a directory: its rename fails.
        fs::create_dir_all(root.join("repos/x/blocked/inside")).unwrap();
        for n in [3, SYNCFS_BATCH + 2] {
            let mut objects: Vec<(String, Vec<u8>)> = (0..n)
                .map(|i| (format!("repos/x/ok{n}-{i}"), vec![7u8; 1000]))
                .collect();
            objects[2].0 = "repos/x/blocked".into();
            assert!(store.put_many(&objects).is_err());
            assert_eq!(tmp_files(&root), 0, "batch of {n}");
            for (k, v) in objects.iter().filter(|(k, _)| !k.ends_with("blocked")) {
                match store.get(k) {
                    Ok(got) => assert_eq!(&got, v, "{k}"),
                    Err(e) => assert!(matches!(e, ObjectError::NotFound(_)), "{k}: {e}"),
                }
            }
        }
        // A key refused before anything is written: nothing at all.
        let bad = vec![
            ("repos/y/1".to_string(), b"a".to_vec()),
            ("../escape".to_string(), b"b".to_vec()),
        ];
        assert!(store.put_many(&bad).is_err());
        assert!(matches!(
            store.get("repos/y/1"),
            Err(ObjectError::NotFound(_))
        ));
        assert_eq!(tmp_files(&root), 0);
    }
}
