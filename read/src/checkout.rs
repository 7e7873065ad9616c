//! `checkout`: every file of a revision written under a directory as plain files, in
//! parallel, each verified (sha256) in a hidden staging directory before it is renamed to
//! its place.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::file_reader::{safe_relative, FileReader};
use crate::progress::Progress;
use repo::manifest::{FileEntry, Manifest};
use repo::Store;
use repo::{Result, StoreError};

/// Files a checkout writes at once (at least; see [`for_each_file`]).
const FILES_AT_ONCE: usize = 4;

/// What a checkout wrote.
#[derive(Clone, Debug, Default)]
pub struct CheckoutReport {
    /// Files written.
    pub files: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// Prefix of the hidden staging directory of a checkout (`<dir>/.modelcas-checkout-<hex>`).
const STAGING_PREFIX: &str = ".modelcas-checkout-";

/// Writes every file of `manifest` under `dir` as plain files (no symlinks), in parallel,
/// each checked against its sha256. `dir` must not exist or be an empty directory. Files
/// are written into a staging directory inside `dir` (see [`staging_dir`]) under their
/// index in the manifest, and renamed into place once verified, so no temporary name can
/// be one of the revision's own files. On an error the staging directory is removed and
/// the error names the file.
pub fn checkout(
    store: &Store,
    manifest: &Manifest,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<CheckoutReport> {
    match fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(StoreError::BadSource {
                    path: dir.to_path_buf(),
                    reason: "checkout target exists and is not empty".into(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(StoreError::BadSource {
                path: dir.to_path_buf(),
                reason: "checkout target is not a directory".into(),
            })
        }
        Err(e) => return Err(StoreError::io(dir, e)),
    }
    for f in &manifest.files {
        safe_relative(&f.path)?;
    }
    let staging = staging_dir(dir, manifest)?;
    if let Err(e) = make_parents(manifest, dir) {
        let _ = fs::remove_dir(&staging);
        return Err(e);
    }
    progress.start("checkout", manifest.total_size());
    // Largest files first so that the long ones start early.
    let mut order: Vec<(usize, &FileEntry)> = manifest.files.iter().enumerate().collect();
    order.sort_by(|a, b| b.1.size.cmp(&a.1.size));
    let results = for_each_file(&order, |i, f| {
        write_one(
            store,
            manifest,
            f,
            dir,
            &staging.join(i.to_string()),
            progress,
        )
    });
    progress.finish();
    let done = results.into_iter().collect::<Result<Vec<()>>>();
    let cleaned = match done {
        Ok(_) => fs::remove_dir(&staging),
        Err(_) => fs::remove_dir_all(&staging),
    };
    done?;
    cleaned.map_err(|e| StoreError::io(&staging, e))?;
    Ok(CheckoutReport {
        files: manifest.files.len(),
        bytes: manifest.total_size(),
    })
}

/// Runs `write` on every file of `order`, several files at once (at least
/// [`FILES_AT_ONCE`], more when the thread pool is larger, as for remote stores), each on
/// a thread of its own: the files' sha256 threads then advance side by side and the big
/// files end together, instead of the last one hashing alone while the other cores idle.
/// The chunks of each file are still decoded on the thread pool. After a failure no more
/// files are started.
fn for_each_file<F>(order: &[(usize, &FileEntry)], write: F) -> Vec<Result<()>>
where
    F: Fn(usize, &FileEntry) -> Result<()> + Sync,
{
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let workers = FILES_AT_ONCE
        .max(rayon::current_num_threads())
        .min(order.len());
    let per_worker: Vec<Vec<Result<()>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut results = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let Some((i, f)) = order.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            break;
                        };
                        let r = write(*i, f);
                        failed.fetch_or(r.is_err(), Ordering::Relaxed);
                        results.push(r);
                    }
                    results
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![Err(StoreError::Invalid(
                        "a checkout thread panicked".into(),
                    ))]
                })
            })
            .collect()
    });
    per_worker.into_iter().flatten().collect()
}

/// Creates every directory the revision's files live in, each once, before any file is
/// written (a `mkdir` per file, failing with `EEXIST` for all but the first file of a
/// directory, was a fifth of a checkout of many small files; docs/BENCHMARKS.md).
fn make_parents(manifest: &Manifest, dir: &Path) -> Result<()> {
    let mut parents = std::collections::BTreeSet::new();
    for f in &manifest.files {
        if let Some(parent) = safe_relative(&f.path)?.parent() {
            if !parent.as_os_str().is_empty() {
                parents.insert(parent.to_path_buf());
            }
        }
    }
    for p in parents {
        let p = dir.join(p);
        fs::create_dir_all(&p).map_err(|e| StoreError::io(&p, e))?;
    }
    Ok(())
}

/// Creates `<dir>/.modelcas-checkout-<16 hex random>`: exclusively (`mkdir` fails if it
/// exists, so two checkouts never share one) and under a name that is not the first
/// component of any path in the revision (so nothing of the revision lives under it).
fn staging_dir(dir: &Path, manifest: &Manifest) -> Result<PathBuf> {
    for attempt in 0u32..16 {
        let seed = format!(
            "{}-{:?}-{:?}-{attempt}",
            std::process::id(),
            std::time::Instant::now(),
            std::time::SystemTime::now()
        );
        let name = format!(
            "{STAGING_PREFIX}{}",
            &blake3::hash(seed.as_bytes()).to_hex()[..16]
        );
        if manifest
            .files
            .iter()
            .any(|f| f.path.split('/').next() == Some(name.as_str()))
        {
            continue;
        }
        let path = dir.join(&name);
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(StoreError::io(&path, e)),
        }
    }
    Err(StoreError::BadSource {
        path: dir.to_path_buf(),
        reason: "no free name for the checkout's staging directory".into(),
    })
}

/// Writes `f` to `partial` (in the staging directory), then renames it to its place.
fn write_one(
    store: &Store,
    manifest: &Manifest,
    f: &FileEntry,
    dir: &Path,
    partial: &Path,
    progress: &dyn Progress,
) -> Result<()> {
    let dest = dir.join(safe_relative(&f.path)?);
    let result = (|| -> Result<()> {
        let mode = if f.executable { 0o755 } else { 0o644 };
        // Created with its mode; set again only where the umask takes bits of it away.
        let file = fs::File::options()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(partial)
            .map_err(|e| StoreError::io(partial, e))?;
        // Windows of many MiB go to the file in single writes: no buffer in between.
        let mut file = file;
        FileReader::new(store, manifest, f)?.copy_to_unchecked_chunks(&mut file, progress)?;
        if mode & umask() != 0 {
            file.set_permissions(fs::Permissions::from_mode(mode))
                .map_err(|e| StoreError::io(partial, e))?;
        }
        fs::rename(partial, &dest).map_err(|e| StoreError::io(&dest, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(partial);
    }
    result
}

/// The process's umask, read once from `/proc/self/status` (changing it to read it would
/// race with other threads creating files); all bits when it cannot be read, so that
/// every file's mode is then set explicitly.
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("Umask:"))?;
                u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
            })
            .unwrap_or(0o777)
    })
}
