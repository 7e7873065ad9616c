//! Forwarding records in an object store: reading one, and loading those reachable from a
//! manifest's pack table. The record format and how locations are resolved through it are
//! `format::forward`, re-exported here.

pub use format::forward::*;

use std::collections::HashSet;

use crate::error::Result;
use crate::pack::PackId;
use format::layout;
use objects::ObjectStore;

/// Reads the record of `pack`; `None` when there is none.
pub fn read(store: &dyn ObjectStore, pack: &PackId) -> Result<Option<MovedRecord>> {
    let key = layout::moved_key(pack);
    match store.get(&key) {
        Ok(b) => Ok(Some(crate::again::decoded(store, &key, b, |b| {
            Ok(decode(&key, &b)?)
        })?)),
        Err(objects::ObjectError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Lists `moved/` once and reads the records reachable from `packs` (the pack table of a
/// manifest): a record names the packs its frames went to, whose records are read in turn.
pub fn load_reachable(store: &dyn ObjectStore, packs: &[PackId]) -> Result<Forwards> {
    let listed: HashSet<PackId> = store
        .list(layout::MOVED_PREFIX)?
        .iter()
        .filter_map(|o| layout::parse_moved_key(&o.key))
        .collect();
    let mut fw = Forwards::default();
    if listed.is_empty() {
        return Ok(fw);
    }
    let mut todo: Vec<PackId> = packs.to_vec();
    let mut seen: HashSet<PackId> = HashSet::new();
    while let Some(p) = todo.pop() {
        if !listed.contains(&p) || !seen.insert(p) {
            continue;
        }
        // Removed meanwhile: only gc removes records, and only unneeded ones.
        if let Some(rec) = read(store, &p)? {
            todo.extend(rec.targets.iter().copied());
            fw.insert(&rec);
        }
    }
    Ok(fw)
}
