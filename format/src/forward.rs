//! Forwarding records (`moved/<2 hex>/<64 hex old pack id>`, magic `MCASMOVE`): where gc's
//! pack rewrite copied the live frames of a pack.
//!
//! Manifests are immutable once written: gc never puts one. When it rewrites a mostly dead
//! pack it copies the live frames into new packs, then writes one forwarding record per old
//! pack listing, for each copied frame, its old offset, chunk id and frame length and its
//! new place, and only then condemns the old pack. A chunk reference (P, offset) of a
//! manifest is *resolved* by following `moved/P` when it has an entry for that offset
//! with the same chunk id and frame length, repeatedly (a copy may be copied again), at
//! most [`MAX_HOPS`] times and never around a cycle. A reference with no matching entry
//! stays where the manifest says: that pack is then still in use, and gc keeps (rescues)
//! it. `docs/format/bytes.md` and `docs/format/protocols.md` ("Forwarding records") are
//! the specification and the safety argument; this module owns the record, its lookup and
//! [`resolve_locations`].

use std::collections::{HashMap, HashSet};

use bincode::{Decode, Encode};

use crate::codec::{self, Kind};
use crate::error::{FormatError, Result};
use crate::layout;
use crate::manifest::{ChunkRef, Manifest};
use crate::pack::PackId;
use crate::ChunkId;

/// Longest chain of forwarding records followed for one chunk. Each hop is a pack that
/// fell below gc's rewrite threshold again after being written by a rewrite, so real chains
/// are a handful of hops; the cap only bounds the work a damaged store can cause.
pub const MAX_HOPS: usize = 64;

/// One forwarding record, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Encode, Decode)]
pub struct MovedRecord {
    /// The pack the frames were copied out of (also named by the key).
    pub pack: PackId,
    /// When gc wrote the record (ms since the epoch).
    pub written_ms: u64,
    /// The packs the frames were copied into.
    pub targets: Vec<PackId>,
    /// The copied frames, sorted by `offset`, each offset once.
    pub frames: Vec<MovedFrame>,
}

/// One copied frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Encode, Decode)]
pub struct MovedFrame {
    /// Offset of the frame in the old pack.
    pub offset: u32,
    /// The chunk id.
    pub id: ChunkId,
    /// Index into [`MovedRecord::targets`].
    pub target: u32,
    /// Offset of the copy in the target pack.
    pub new_offset: u32,
    /// Length of the frame (the copy is byte for byte the same).
    pub frame_len: u32,
}

/// Where one copied frame went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// The chunk id.
    pub id: ChunkId,
    /// The pack holding the copy.
    pub pack: PackId,
    /// Its offset there.
    pub offset: u32,
    /// Frame length.
    pub frame_len: u32,
}

/// Decoded forwarding records: old pack → old offset → where the frame went.
#[derive(Clone, Debug, Default)]
pub struct Forwards {
    map: HashMap<PackId, HashMap<u32, Dest>>,
}

impl Forwards {
    /// Adds a decoded record (replacing any earlier one for the same pack).
    pub fn insert(&mut self, rec: &MovedRecord) {
        self.map.insert(rec.pack, entries(rec));
    }

    /// Whether a record for `pack` is held.
    pub fn contains(&self, pack: &PackId) -> bool {
        self.map.contains_key(pack)
    }

    /// The entries of `pack`'s record.
    pub fn record(&self, pack: &PackId) -> Option<&HashMap<u32, Dest>> {
        self.map.get(pack)
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Where the chunk `id` (frame length `frame_len`) that a manifest places at
    /// (`pack`, `offset`) is now (see [`follow_with`]). `through` receives every pack whose
    /// record was followed.
    pub fn follow(
        &self,
        pack: PackId,
        offset: u32,
        id: &ChunkId,
        frame_len: u32,
        through: &mut dyn FnMut(PackId),
    ) -> (PackId, u32) {
        let mut lookup = |p: &PackId, off: u32| -> Result<Option<Dest>> {
            Ok(self.map.get(p).and_then(|r| r.get(&off)).copied())
        };
        follow_with(pack, offset, id, frame_len, &mut lookup, through).unwrap_or((pack, offset))
    }
}

/// The entries of a record by old offset.
pub fn entries(rec: &MovedRecord) -> HashMap<u32, Dest> {
    rec.frames
        .iter()
        .filter_map(|f| {
            let pack = *rec.targets.get(f.target as usize)?;
            Some((
                f.offset,
                Dest {
                    id: f.id,
                    pack,
                    offset: f.new_offset,
                    frame_len: f.frame_len,
                },
            ))
        })
        .collect()
}

/// Follows forwarding entries from (`pack`, `offset`) for the chunk `id` of length
/// `frame_len`: `lookup(p, off)` gives the entry of `moved/p` for `off`. An entry is only
/// followed when its chunk id and frame length match; at most [`MAX_HOPS`] hops, never
/// around a cycle. `through` receives every pack whose record was followed. The only
/// errors are `lookup`'s (reading a record is the caller's I/O).
pub fn follow_with<E>(
    pack: PackId,
    offset: u32,
    id: &ChunkId,
    frame_len: u32,
    mut lookup: impl FnMut(&PackId, u32) -> std::result::Result<Option<Dest>, E>,
    through: &mut dyn FnMut(PackId),
) -> std::result::Result<(PackId, u32), E> {
    let (mut pack, mut offset) = (pack, offset);
    let mut seen: HashSet<PackId> = HashSet::new();
    for _ in 0..MAX_HOPS {
        if !seen.insert(pack) {
            break;
        }
        let Some(d) = lookup(&pack, offset)? else {
            break;
        };
        if &d.id != id || d.frame_len != frame_len {
            break;
        }
        through(pack);
        (pack, offset) = (d.pack, d.offset);
    }
    Ok((pack, offset))
}

/// `m` with every chunk reference resolved through `fw` (see the module doc); the pack
/// table is rebuilt to hold exactly the packs the resolved references use.
pub fn resolve_locations(m: &Manifest, fw: &Forwards) -> Manifest {
    let mut out = m.clone();
    if fw.is_empty() {
        return out;
    }
    let mut table: Vec<PackId> = Vec::new();
    let mut ix: HashMap<PackId, u32> = HashMap::new();
    for f in out.files.iter_mut() {
        for c in f.chunks.iter_mut() {
            // A reference past the pack table is left as it is, for readers to refuse.
            let Some(old) = m.packs.get(c.pack as usize) else {
                return m.clone();
            };
            let (pack, offset) = fw.follow(*old, c.offset, &c.id, c.frame_len, &mut |_| {});
            let pi = *ix.entry(pack).or_insert_with(|| {
                table.push(pack);
                (table.len() - 1) as u32
            });
            *c = ChunkRef {
                pack: pi,
                offset,
                ..*c
            };
        }
    }
    out.packs = table;
    out
}

/// Decodes a forwarding record read from `key`, checking that it names the pack its key
/// names and that every entry's target is in its table.
pub fn decode(key: &str, bytes: &[u8]) -> Result<MovedRecord> {
    let bad = |reason: String| FormatError::Corrupt {
        key: key.into(),
        reason,
    };
    let rec: MovedRecord = codec::decode(Kind::Moved, bytes).map_err(|e| bad(e.to_string()))?;
    if layout::parse_moved_key(key) != Some(rec.pack) {
        return Err(bad(format!("describes pack {}", rec.pack.to_hex())));
    }
    if let Some(f) = rec
        .frames
        .iter()
        .find(|f| f.target as usize >= rec.targets.len())
    {
        return Err(bad(format!(
            "frame at {} points past the target table",
            f.offset
        )));
    }
    Ok(rec)
}

/// Encodes a record (zstd-compressed payload).
pub fn encode(rec: &MovedRecord) -> Vec<u8> {
    codec::encode(Kind::Moved, rec, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::FileEntry;
    use crate::names::{CommitId, RepoId};
    use crate::Sha256;

    fn cref(id: u8, pack: u32, offset: u32) -> ChunkRef {
        ChunkRef {
            id: ChunkId([id; 32]),
            pack,
            offset,
            frame_len: 10,
            raw_len: 5,
        }
    }

    fn record(from: u8, to: u8, frames: &[(u32, u8, u32)]) -> MovedRecord {
        MovedRecord {
            pack: PackId([from; 32]),
            written_ms: 1,
            targets: vec![PackId([to; 32])],
            frames: frames
                .iter()
                .map(|&(offset, id, new_offset)| MovedFrame {
                    offset,
                    id: ChunkId([id; 32]),
                    target: 0,
                    new_offset,
                    frame_len: 10,
                })
                .collect(),
        }
    }

    #[test]
    fn resolves_chains_and_leaves_unmatched_refs() {
        let m = Manifest {
            repo: RepoId::parse("a/b").unwrap(),
            commit: CommitId([1; 20]),
            ingested_at: 0,
            source: "plain".into(),
            packs: vec![PackId([1; 32]), PackId([9; 32])],
            files: vec![FileEntry {
                path: "f".into(),
                size: 25,
                sha256: Sha256([0; 32]),
                executable: false,
                // moved twice; not in the record; id differs from the record; other pack
                chunks: vec![
                    cref(7, 0, 16),
                    cref(8, 0, 26),
                    cref(6, 0, 36),
                    cref(5, 1, 16),
                    cref(7, 0, 16),
                ],
            }],
            published: None,
            xet_hashes: Vec::new(),
        };
        let mut fw = Forwards::default();
        fw.insert(&record(1, 2, &[(16, 7, 100), (36, 9, 110)]));
        fw.insert(&record(2, 3, &[(100, 7, 16)]));
        let r = resolve_locations(&m, &fw);
        let at = |i: usize| {
            let c = r.files[0].chunks[i];
            (r.packs[c.pack as usize].0[0], c.offset)
        };
        assert_eq!(at(0), (3, 16));
        assert_eq!(at(1), (1, 26));
        assert_eq!(at(2), (1, 36));
        assert_eq!(at(3), (9, 16));
        assert_eq!(at(4), (3, 16));
        assert_eq!(r.packs.len(), 3, "{:?}", r.packs);
        // A cycle stops.
        let mut cyc = Forwards::default();
        cyc.insert(&record(1, 2, &[(16, 7, 16)]));
        cyc.insert(&record(2, 1, &[(16, 7, 16)]));
        let (p, _) = cyc.follow(PackId([1; 32]), 16, &ChunkId([7; 32]), 10, &mut |_| {});
        assert!(p == PackId([1; 32]) || p == PackId([2; 32]));
    }

    #[test]
    fn record_round_trip_and_key_check() {
        let rec = record(4, 5, &[(16, 1, 16)]);
        let key = layout::moved_key(&rec.pack);
        assert!(key.starts_with("moved/04/0404"));
        let bytes = encode(&rec);
        assert_eq!(&bytes[..8], b"MCASMOVE");
        assert_eq!(decode(&key, &bytes).unwrap(), rec);
        assert!(decode(&layout::moved_key(&PackId([6; 32])), &bytes).is_err());
        let mut bad = rec.clone();
        bad.frames[0].target = 1;
        assert!(decode(&key, &encode(&bad)).is_err());
    }
}
