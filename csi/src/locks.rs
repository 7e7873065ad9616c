//! One async lock per target path, so that publishes and unpublishes of one target run one
//! at a time (two concurrent publishes of a target cannot both mount) while other targets
//! go on. An entry lives while someone holds or waits for it, and is dropped after.
//!
//! A guard is owned (`'static`), so that it can move into the blocking call it protects:
//! when kubelet gives up on a call (its 2-minute deadline) the call's future is dropped,
//! but the backend's work goes on, and the lock must stay held until that work ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

type Map = Mutex<HashMap<PathBuf, Arc<AsyncMutex<()>>>>;

/// The locks of the targets being worked on.
#[derive(Default)]
pub(crate) struct TargetLocks {
    map: Arc<Map>,
}

/// Holds one target's lock; dropping it releases the lock (and the entry, when nobody
/// else waits for it).
pub(crate) struct TargetGuard {
    map: Arc<Map>,
    target: PathBuf,
    guard: Option<OwnedMutexGuard<()>>,
}

impl TargetLocks {
    /// Waits for `target`'s lock.
    pub(crate) async fn lock(&self, target: &Path) -> TargetGuard {
        let entry = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(map.entry(target.to_path_buf()).or_default())
        };
        let guard = entry.lock_owned().await;
        TargetGuard {
            map: Arc::clone(&self.map),
            target: target.to_path_buf(),
            guard: Some(guard),
        }
    }

    /// How many targets have an entry (held or waited for).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for TargetGuard {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's reference and the guard's: nobody else holds or waits for this lock,
        // and nobody can start to, since taking a reference needs the map's lock.
        if map
            .get(&self.target)
            .is_some_and(|entry| Arc::strong_count(entry) == 2)
        {
            map.remove(&self.target);
        }
        self.guard.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_holder_per_target_and_entries_are_dropped() {
        let locks = Arc::new(TargetLocks::default());
        let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (locks, inside) = (Arc::clone(&locks), Arc::clone(&inside));
            tasks.push(tokio::spawn(async move {
                let _g = locks.lock(Path::new("/t")).await;
                let before = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                before
            }));
        }
        for t in tasks {
            assert_eq!(
                t.await.unwrap(),
                0,
                "two holders of one target's lock at once"
            );
        }
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn other_targets_do_not_wait() {
        let locks = TargetLocks::default();
        let _a = locks.lock(Path::new("/a")).await;
        let b = tokio::time::timeout(Duration::from_secs(5), locks.lock(Path::new("/b"))).await;
        assert!(b.is_ok());
        assert_eq!(locks.len(), 2);
    }
}
