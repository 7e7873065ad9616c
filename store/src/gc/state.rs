//! The condemned list (`gc/condemned`, magic `MCASGCST`): packs gc has marked for deletion
//! and when. Written only by the holder of the gc lock; read by gc (phase two) and by
//! every index sync, which treats a condemned pack as already gone so that no new ingest
//! deduplicates against it.

use bincode::{Decode, Encode};

use crate::backend::ObjectStore;
use crate::codec::{self, Kind};
use crate::layout;
use crate::pack::PackId;
use crate::{Result, StoreError};

/// One pack marked for deletion.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct Condemned {
    /// The pack.
    pub pack: PackId,
    /// When it was marked, by the object store's clock (ms since the epoch).
    pub marked_ms: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Chunks it holds (from its footer).
    pub chunks: u32,
    /// Live chunks it held when marked (non-zero for packs replaced by a rewrite).
    pub live_chunks: u32,
}

/// The whole list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Encode, Decode)]
pub struct GcState {
    /// Packs awaiting deletion.
    pub condemned: Vec<Condemned>,
    /// When it was written, by the object store's clock (ms since the epoch).
    pub written_ms: u64,
}

/// The packs on the condemned list: what every index sync treats as already gone.
pub fn condemned_packs(store: &dyn ObjectStore) -> Result<std::collections::HashSet<PackId>> {
    Ok(read(store)?.condemned.into_iter().map(|c| c.pack).collect())
}

/// Reads the list; an absent object is an empty list.
pub fn read(store: &dyn ObjectStore) -> Result<GcState> {
    match store.get(layout::CONDEMNED_KEY) {
        Ok(bytes) => codec::decode(Kind::GcState, &bytes).map_err(|e| StoreError::CorruptObject {
            key: layout::CONDEMNED_KEY.into(),
            reason: e.to_string(),
        }),
        Err(objects::ObjectError::NotFound(_)) => Ok(GcState::default()),
        Err(e) => Err(e.into()),
    }
}

/// Replaces the list.
pub fn write(store: &dyn ObjectStore, state: &GcState) -> Result<()> {
    Ok(store.put(
        layout::CONDEMNED_KEY,
        &codec::encode(Kind::GcState, state, true),
    )?)
}
