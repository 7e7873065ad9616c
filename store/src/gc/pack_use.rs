//! What gc's liveness found kept revisions use of one pack: the frames they reference,
//! and the size a pack holding only those would have. Computed in `packs`, read there to
//! choose packs to rewrite and in `rewrite` to copy the live frames.

use std::collections::BTreeMap;

use format::codec::{self, Kind};
use format::ChunkId;
use repo::pack::{self, FooterEntry, PackFooter};

/// What kept manifests use of one pack: offset → (chunk id, frame length, raw length).
#[derive(Default)]
pub(super) struct PackUse {
    pub(super) frames: BTreeMap<u32, (ChunkId, u32, u32)>,
    pub(super) bytes: u64,
}

impl PackUse {
    /// Size of a pack holding exactly these frames (header, frames, footer, trailer).
    pub(super) fn size_if_only_live(&self) -> u64 {
        let mut at = pack::PACK_HEADER_LEN as u32;
        let entries: Vec<FooterEntry> = self
            .frames
            .values()
            .map(|(id, frame_len, raw_len)| {
                let e = FooterEntry {
                    id: *id,
                    offset: at,
                    frame_len: *frame_len,
                    raw_len: *raw_len,
                };
                at = at.saturating_add(*frame_len);
                e
            })
            .collect();
        let footer = codec::encode(Kind::PackFooter, &PackFooter { entries }, false);
        at as u64 + footer.len() as u64 + pack::PACK_TRAILER_LEN as u64
    }
}
