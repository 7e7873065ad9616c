//! The index of a long-running process (serve) that writes now and then: the mirror's
//! pulls and the uploads' commits. The index admits one process at a time (RocksDB's
//! lock), and `ingest`, `pull` or `sync` in another process may want it: it is opened when
//! a writer starts and no other writer has it open, shared by the writers running at the
//! same time, and closed when the last ends.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use index::Index;
use parking_lot::Mutex;
use repo::Store;

/// The index, open while some writer holds it.
pub struct SharedIndex {
    store: Store,
    dir: PathBuf,
    open: Mutex<Weak<Index>>,
}

impl SharedIndex {
    /// The index of `store` in `dir`, opened on first use.
    pub fn new(store: Store, dir: PathBuf) -> Arc<SharedIndex> {
        Arc::new(SharedIndex {
            store,
            dir,
            open: Mutex::new(Weak::new()),
        })
    }

    /// The index, opened unless a running writer has it open already.
    pub fn get(&self) -> anyhow::Result<Arc<Index>> {
        let mut shared = self.open.lock();
        if let Some(i) = shared.upgrade() {
            return Ok(i);
        }
        let i = Arc::new(crate::ctx::open_index(&self.dir, &self.store)?);
        *shared = Arc::downgrade(&i);
        Ok(i)
    }

    /// Lets go of a writer's index; the last one closes it, under the lock, so that a
    /// writer starting meanwhile opens it only once it is closed.
    pub fn release(&self, index: Arc<Index>) {
        let _shared = self.open.lock();
        drop(index);
    }
}
