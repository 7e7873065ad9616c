//! Checking the store's feature list (`format::features`) before reading or writing: the
//! one place every command goes through, from [`crate::Store::open`] (to read) and from
//! taking any lock or lease (to write).

use crate::error::{Result, StoreError};
use format::layout;
use objects::ObjectStore;

/// Refuses with [`StoreError::NeedsNewerVersion`] when the store lists a feature this
/// build does not implement: one needed to read it, or (with `write`) to write to it.
pub fn check(store: &dyn ObjectStore, write: bool) -> Result<()> {
    let bytes = match store.get(layout::FEATURES_KEY) {
        Ok(b) => b,
        Err(objects::ObjectError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let f = format::features::decode(&bytes)?;
    let missing = if write {
        f.missing_to_write()
    } else {
        f.missing_to_read()
    };
    if missing.is_empty() {
        return Ok(());
    }
    Err(StoreError::NeedsNewerVersion {
        action: if write { "write to" } else { "read" },
        features: missing,
    })
}
