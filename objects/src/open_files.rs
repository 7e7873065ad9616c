//! Open files of a local store's objects that are never rewritten in place (a pack is named
//! by the hash of its bytes), kept so that a ranged read is one `pread`: no path walk, no
//! `open`, no `close`. A mount reading thousands of small files out of a few packs opened
//! each pack once per file before; after the page cache is dropped, each of those opens
//! walks the store's directories on disk again.
//!
//! Bounds: at most [`MAX_OPEN`] files (a `quick_cache`: past it, the least useful are
//! closed); and a file not read for [`IDLE`] is closed by the process's one sweeper thread
//! (started with the first store, not on a read), so that a pack deleted by gc does not
//! keep its disk space for long behind an idle reader. A file found deleted (no link left)
//! when it is used is closed and opened again by path, so a reader sees `NotFound` for a
//! deleted object as it did without this cache.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use quick_cache::sync::Cache;

/// Most files kept open.
pub const MAX_OPEN: usize = 64;
/// A file not read for this long is closed.
pub const IDLE: Duration = Duration::from_secs(10);

/// An open file and when it was last used.
struct Open {
    file: Arc<File>,
    used: Mutex<Instant>,
}

/// The open files of a store by key, at most [`MAX_OPEN`].
type Slots = Cache<String, Arc<Open>>;

/// The open files of one store, by key.
pub struct OpenFiles {
    slots: Arc<Slots>,
}

impl Default for OpenFiles {
    fn default() -> OpenFiles {
        let slots = Arc::new(Cache::new(MAX_OPEN));
        sweep_later(Arc::downgrade(&slots));
        OpenFiles { slots }
    }
}

impl OpenFiles {
    /// The open file of `key` (at `path`), opened now if it is not open or was deleted.
    pub fn get(&self, key: &str, path: &Path) -> std::io::Result<Arc<File>> {
        let now = Instant::now();
        if let Some(f) = self.cached(key, now) {
            // Deleted (gc, or by hand): read it by path again, which fails as it should.
            if f.metadata().map(|m| m.nlink() > 0).unwrap_or(false) {
                return Ok(f);
            }
            self.slots.remove(key);
        }
        let f = Arc::new(File::open(path)?);
        let open = Open {
            file: f.clone(),
            used: Mutex::new(now),
        };
        self.slots.insert(key.to_string(), Arc::new(open));
        Ok(f)
    }

    /// How many files are open now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn cached(&self, key: &str, now: Instant) -> Option<Arc<File>> {
        let open = self.slots.get(key)?;
        *open.used.lock() = now;
        Some(open.file.clone())
    }
}

fn close_idle(slots: &Slots, now: Instant) {
    slots.retain(|_, open| now.saturating_duration_since(*open.used.lock()) < IDLE);
}

type Registry = Mutex<Vec<Weak<Slots>>>;

/// Hands `slots` to the sweeper thread, which closes its idle files every [`IDLE`] / 2
/// until it is dropped. Without a thread (none could start), files are closed only as
/// others replace them.
fn sweep_later(slots: Weak<Slots>) {
    static ALL: OnceLock<Registry> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        let _ = std::thread::Builder::new()
            .name("open-files".into())
            .spawn(|| loop {
                std::thread::sleep(IDLE / 2);
                let Some(all) = ALL.get() else { continue };
                all.lock().retain(|w| match w.upgrade() {
                    Some(s) => {
                        close_idle(&s, Instant::now());
                        true
                    }
                    None => false,
                });
            });
        Mutex::new(Vec::new())
    });
    all.lock().push(slots);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_opened_once_and_a_deleted_one_again_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"one").unwrap();
        let files = OpenFiles::default();
        let a = files.get("a", &p).unwrap();
        let b = files.get("a", &p).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        std::fs::remove_file(&p).unwrap();
        let e = files.get("a", &p).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(files.len(), 0);
    }

    #[test]
    fn at_most_max_open_files_stay_open() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::default();
        assert_eq!(files.slots.capacity(), MAX_OPEN as u64);
        let n = MAX_OPEN * 10;
        let mut most = 0;
        for i in 0..n {
            let p = dir.path().join(i.to_string());
            std::fs::write(&p, b"x").unwrap();
            files.get(&i.to_string(), &p).unwrap();
            most = most.max(files.len());
            assert!(files.len() <= MAX_OPEN, "{}", files.len());
            assert!(
                files.slots.peek(&i.to_string()).is_some(),
                "file {i} just opened"
            );
        }
        assert!(files.len() > MAX_OPEN / 2);
        println!(
            "cache-bound objects open_files: bound {MAX_OPEN} entries; after {n} inserts: {} entries \
             (at most {most})",
            files.len()
        );
        // The last one opened is open.
        assert!(files.cached(&(n - 1).to_string(), Instant::now()).is_some());
    }

    #[test]
    fn idle_files_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"one").unwrap();
        let files = OpenFiles::default();
        files.get("a", &p).unwrap();
        close_idle(&files.slots, Instant::now() + IDLE / 2);
        assert_eq!(files.len(), 1);
        close_idle(&files.slots, Instant::now() + IDLE);
        assert_eq!(files.len(), 0);
    }
}
