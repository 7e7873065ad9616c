//! gc's pack rewrite: copying the live frames of mostly dead packs into new packs, and the
//! forwarding records (`moved/`, docs/format/protocols.md "Forwarding records") that say
//! where each copied frame went, so that manifests are never written again.

use std::collections::{BTreeMap, HashMap};

use format::ChunkId;

use super::pack_use::PackUse;
use super::report::GcReport;
use format::layout;
use index::Index;
use objects::ObjectStore;
use repo::forward::{self, Forwards, MovedFrame, MovedRecord};
use repo::handle::Store;
use repo::lock;
use repo::pack::{self, PackBuilder, PackId};
use repo::{Result, StoreError};

/// Every forwarding record, decoded and as stored.
pub(super) struct AllForwards {
    pub(super) forwards: Forwards,
    pub(super) records: HashMap<PackId, MovedRecord>,
}

/// Lists `moved/` once and reads every record (through the cache, like manifests). A record
/// gc cannot read could hide where live chunks are: stop.
pub(super) fn load_forwards(
    backend: &dyn ObjectStore,
    cache: Option<&Index>,
    report: &mut GcReport,
) -> Result<AllForwards> {
    let mut all = AllForwards {
        forwards: Forwards::default(),
        records: HashMap::new(),
    };
    for obj in backend.list(layout::MOVED_PREFIX)? {
        let Some(pack) = layout::parse_moved_key(&obj.key) else {
            continue;
        };
        let cached = match cache {
            Some(idx) if !obj.tag.is_empty() => idx.cached_object(&obj.key, &obj.tag)?,
            _ => None,
        };
        let bytes = match cached {
            Some(b) => b,
            None => {
                let b = match backend.get(&obj.key) {
                    Ok(b) => b,
                    Err(objects::ObjectError::NotFound(_)) => continue,
                    Err(e) => return Err(e.into()),
                };
                if let Some(idx) = cache {
                    if !obj.tag.is_empty() {
                        idx.cache_object(&obj.key, &obj.tag, &b)?;
                    }
                }
                b
            }
        };
        let rec = forward::decode(&obj.key, &bytes)?;
        all.forwards.insert(&rec);
        all.records.insert(pack, rec);
    }
    report.forwards = all.records.len();
    Ok(all)
}

/// Where the live frames of one rewritten pack went: old offset → (new pack, new offset,
/// frame length).
pub(super) type MovedFrames = HashMap<u32, (PackId, u32, u32)>;

/// The forwarding record of `old` after its live frames (`live`) were copied to `frames`
/// (old offset → new pack, new offset, frame length). Entries of an earlier record of the
/// same pack (a pack rewritten, then rescued and rewritten again) are kept: manifests
/// still resolve through them.
pub(super) fn forward_record(
    old: &PackId,
    frames: &MovedFrames,
    live: &PackUse,
    earlier: Option<&MovedRecord>,
) -> MovedRecord {
    let mut by_offset: BTreeMap<u32, (ChunkId, PackId, u32, u32)> = BTreeMap::new();
    if let Some(e) = earlier {
        for f in &e.frames {
            if let Some(t) = e.targets.get(f.target as usize) {
                by_offset.insert(f.offset, (f.id, *t, f.new_offset, f.frame_len));
            }
        }
    }
    for (off, (to, new_off, len)) in frames {
        if let Some((id, _, _)) = live.frames.get(off) {
            by_offset.entry(*off).or_insert((*id, *to, *new_off, *len));
        }
    }
    let mut targets: Vec<PackId> = Vec::new();
    let mut ix: HashMap<PackId, u32> = HashMap::new();
    let frames = by_offset
        .into_iter()
        .map(|(offset, (id, to, new_offset, frame_len))| {
            let target = *ix.entry(to).or_insert_with(|| {
                targets.push(to);
                (targets.len() - 1) as u32
            });
            MovedFrame {
                offset,
                id,
                target,
                new_offset,
                frame_len,
            }
        })
        .collect();
    MovedRecord {
        pack: *old,
        written_ms: lock::now_ms(),
        targets,
        frames,
    }
}

/// Copies the live frames of `packs` into new packs; returns old (pack, offset) → new
/// location, grouped by old pack, and each old pack's number of frames (its footer's
/// entries; 0 when the footer does not decode: the figure is only reported).
pub(super) fn rewrite_packs(
    store: &Store,
    packs: &[(PackId, u64)],
    uses: &HashMap<PackId, PackUse>,
    report: &mut GcReport,
) -> Result<(HashMap<PackId, MovedFrames>, HashMap<PackId, u32>)> {
    let mut frames_in: HashMap<PackId, u32> = HashMap::new();
    let backend = store.backend();
    let target = store.config().pack_target.max(1) as usize;
    let mut moved: HashMap<PackId, MovedFrames> = HashMap::new();
    let mut builder = PackBuilder::new();
    // Frames in the open builder: (old pack, old offset, new offset, frame length).
    let mut open: Vec<(PackId, u32, u32, u32)> = Vec::new();
    let seal = |builder: PackBuilder,
                open: &mut Vec<(PackId, u32, u32, u32)>,
                moved: &mut HashMap<PackId, MovedFrames>,
                report: &mut GcReport|
     -> Result<()> {
        let (id, bytes, _) = builder.finish();
        backend.put(&layout::pack_key(&id), &bytes)?;
        report.rewrite_bytes_written += bytes.len() as u64;
        for (old, old_off, new_off, len) in open.drain(..) {
            moved
                .entry(old)
                .or_default()
                .insert(old_off, (id, new_off, len));
        }
        Ok(())
    };
    for (id, size) in packs {
        let key = layout::pack_key(id);
        let bytes = backend.get(&key)?;
        if bytes.len() as u64 != *size {
            return Err(StoreError::CorruptObject {
                key,
                reason: format!("listed with {size} bytes, read {}", bytes.len()),
            });
        }
        frames_in.insert(*id, footer_entries(&key, &bytes));
        for (off, (chunk, frame_len, raw_len)) in &uses[id].frames {
            let (s, e) = (*off as usize, *off as usize + *frame_len as usize);
            let frame = bytes.get(s..e).ok_or_else(|| StoreError::CorruptObject {
                key: key.clone(),
                reason: format!("frame at {off} runs past the end"),
            })?;
            // Never copy a damaged chunk into a fresh pack: stop and let fsck report it.
            pack::decode_checked(frame, chunk, &key, *off as u64)?;
            let new_off = builder.add_frame(*chunk, frame, *raw_len as usize);
            open.push((*id, *off, new_off, *frame_len));
            report.chunks_copied += 1;
            if builder.len() >= target {
                let full = std::mem::take(&mut builder);
                seal(full, &mut open, &mut moved, report)?;
            }
        }
        report.packs_rewritten += 1;
        report.bytes_rewritten += size;
    }
    if !builder.is_empty() {
        seal(builder, &mut open, &mut moved, report)?;
    }
    backend.sync_deferred()?;
    Ok((moved, frames_in))
}

/// The number of entries of the footer of the pack `bytes` (0 when it does not decode).
fn footer_entries(key: &str, bytes: &[u8]) -> u32 {
    let size = bytes.len() as u64;
    let trailer = &bytes[bytes.len().saturating_sub(pack::PACK_TRAILER_LEN)..];
    let Ok(footer_len) = pack::decode_trailer(key, size, trailer) else {
        return 0;
    };
    // decode_trailer checked that the footer lies within the pack.
    let footer_at = size - pack::PACK_TRAILER_LEN as u64 - footer_len;
    let footer = &bytes[footer_at as usize..(footer_at + footer_len) as usize];
    pack::decode_footer(key, footer_at, footer).map_or(0, |f| f.entries.len() as u32)
}
