//! `checkout`: every file of a revision written under a directory as plain files, in
//! parallel, each verified (sha256) under a hidden partial name beside its place before it
//! is renamed there.

use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
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

/// Prefix of the hidden names a checkout writes files under before renaming them
/// (`<its directory>/.modelcas-checkout-<16 hex>.<index>`).
const PARTIAL_PREFIX: &str = ".modelcas-checkout-";

/// Writes every file of `manifest` under `dir` as plain files (no symlinks), in parallel,
/// each checked against its sha256. `dir` must not exist or be an empty directory. Each
/// file is written in its own directory under a hidden partial name that no name of the
/// revision starts with (see [`partial_prefix`]), and renamed into place once verified:
/// a rename within one directory, which writers of different directories do not contend
/// for (a rename between directories takes the filesystem's one rename lock: with every
/// file staged in one directory, 20,000 small files spent a third of a checkout spinning
/// on it). On an error the file at fault leaves no partial file, and the error names it.
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
    let prefix = partial_prefix(manifest)?;
    make_parents(manifest, dir)?;
    progress.start("checkout", manifest.total_size());
    // Largest files first so that the long ones start early.
    let mut order: Vec<(usize, &FileEntry)> = manifest.files.iter().enumerate().collect();
    order.sort_by_key(|&(_, f)| std::cmp::Reverse(f.size));
    let results = for_each_file(&order, |i, f| {
        write_one(store, manifest, f, dir, &format!("{prefix}.{i}"), progress)
    });
    progress.finish();
    results.into_iter().collect::<Result<Vec<()>>>()?;
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

/// `.modelcas-checkout-<16 hex random>`: a name that starts no component of any path in
/// the revision, so that no partial name (`<prefix>.<index>`) can be, or be taken for, one
/// of the revision's own files.
fn partial_prefix(manifest: &Manifest) -> Result<String> {
    for attempt in 0u32..16 {
        let seed = format!(
            "{}-{:?}-{:?}-{attempt}",
            std::process::id(),
            std::time::Instant::now(),
            std::time::SystemTime::now()
        );
        let name = format!(
            "{PARTIAL_PREFIX}{}",
            &blake3::hash(seed.as_bytes()).to_hex()[..16]
        );
        if starts_no_name(manifest, &name) {
            return Ok(name);
        }
    }
    Err(StoreError::Invalid(
        "no free name for the checkout's partial files".into(),
    ))
}

/// Whether no component of any path of `manifest` starts with `prefix`.
fn starts_no_name(manifest: &Manifest, prefix: &str) -> bool {
    !manifest
        .files
        .iter()
        .any(|f| f.path.split('/').any(|c| c.starts_with(prefix)))
}

/// Writes `f` under the hidden name `partial` in its directory, then renames it to its
/// place.
fn write_one(
    store: &Store,
    manifest: &Manifest,
    f: &FileEntry,
    dir: &Path,
    partial: &str,
    progress: &dyn Progress,
) -> Result<()> {
    let dest = dir.join(safe_relative(&f.path)?);
    let partial = &dest.with_file_name(partial);
    // Removes the partial file on every way out but the rename, a panic included.
    struct Partial<'a>(&'a Path, bool);
    impl Drop for Partial<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = fs::remove_file(self.0);
            }
        }
    }
    let mut guard = Partial(partial, false);
    let mode = if f.executable { 0o755 } else { 0o644 };
    // Created with its mode; set again only where the umask takes bits of it away.
    let mut file = fs::File::options()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(partial)
        .map_err(|e| StoreError::io(partial, e))?;
    guard.1 = true;
    // Windows of many MiB go to the file in single writes: no buffer in between.
    FileReader::new(store, manifest, f)?.copy_to_unchecked_chunks(&mut file, progress)?;
    if mode & umask() != 0 {
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| StoreError::io(partial, e))?;
    }
    fs::rename(partial, &dest).map_err(|e| StoreError::io(&dest, e))?;
    guard.1 = false;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;
    use crate::test_pack::{noise, one_file_store};

    /// Every file lands whole at its path, in nested directories too, and no partial name
    /// is left anywhere; a name of the revision that merely looks like a partial one is
    /// written like any other.
    #[test]
    fn a_checkout_leaves_the_files_and_nothing_else() {
        let data = noise(100_000, 7);
        let (store, mut m) = one_file_store(&data);
        let one = m.files[0].clone();
        m.files = [
            "a/b/deep.bin",
            "a/x.bin",
            "top.bin",
            ".modelcas-checkout-0.0",
        ]
        .iter()
        .map(|p| FileEntry {
            path: p.to_string(),
            ..one.clone()
        })
        .collect();
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("co");
        let report = checkout(&store, &m, &dir, &NoProgress).unwrap();
        assert_eq!(report.files, 4);
        let mut found = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    assert_eq!(fs::read(&p).unwrap(), data, "{}", p.display());
                    found.push(p.strip_prefix(&dir).unwrap().to_str().unwrap().to_string());
                }
            }
        }
        found.sort();
        assert_eq!(
            found,
            [
                ".modelcas-checkout-0.0",
                "a/b/deep.bin",
                "a/x.bin",
                "top.bin"
            ]
        );
    }

    #[test]
    fn the_partial_prefix_starts_no_name_of_the_revision() {
        let data = noise(1_000, 1);
        let (_, mut m) = one_file_store(&data);
        let prefix = partial_prefix(&m).unwrap();
        assert!(prefix.starts_with(PARTIAL_PREFIX));
        assert_eq!(prefix.len(), PARTIAL_PREFIX.len() + 16);
        assert!(starts_no_name(&m, &prefix));
        // A name anywhere in a path that a partial name could equal or shadow.
        for taken in [
            format!("d/{prefix}.3"),
            prefix.clone(),
            format!("{prefix}/x"),
        ] {
            m.files[0].path = taken.clone();
            assert!(!starts_no_name(&m, &prefix), "{taken}");
        }
        m.files[0].path = format!("d/x{prefix}");
        assert!(starts_no_name(&m, &prefix));
    }
}
