//! The condemned list in the bucket (`gc/condemned`): reading and replacing it. Its bytes
//! ([`GcState`], [`format::gc::Condemned`]) are `format::gc`. Written only by the holder of
//! the gc lock; read by gc (phase two) and by every index sync, which treats a condemned
//! pack as already gone so that no new ingest deduplicates against it.

use format::gc::{self, GcState};
use format::layout;
use format::pack::PackId;
use objects::ObjectStore;
use repo::Result;

/// The packs on the condemned list: what every index sync treats as already gone.
pub fn condemned_packs(store: &dyn ObjectStore) -> Result<std::collections::HashSet<PackId>> {
    Ok(read(store)?.condemned.into_iter().map(|c| c.pack).collect())
}

/// Reads the list; an absent object is an empty list.
pub fn read(store: &dyn ObjectStore) -> Result<GcState> {
    match store.get(layout::CONDEMNED_KEY) {
        Ok(bytes) => Ok(gc::decode(&bytes)?),
        Err(objects::ObjectError::NotFound(_)) => Ok(GcState::default()),
        Err(e) => Err(e.into()),
    }
}

/// Replaces the list.
pub fn write(store: &dyn ObjectStore, state: &GcState) -> Result<()> {
    Ok(store.put(layout::CONDEMNED_KEY, &gc::encode(state))?)
}
