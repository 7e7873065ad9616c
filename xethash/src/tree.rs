//! Xet's Merkle aggregation (xet-core `merklehash::aggregated_hashes`), streamed.
//!
//! Xet reduces a list of `(hash, size)` nodes level by level: each level is cut into groups
//! (a group ends after the first node, from the third on, whose hash's last word is
//! divisible by 4, and holds at most 9 nodes; the level's last group takes what is left),
//! each group becomes one node, until one node is left. Whether a group ends is decided by
//! at most the next 9 nodes, so each level keeps at most 9 pending nodes and emits groups
//! as soon as they are decided: memory is a few nodes per level whatever the file's size.

use crate::hash::{last_word, INTERNAL_NODE_KEY};
use format::XetHash;

/// Most children of one node.
const MAX_GROUP: usize = 9;

/// The mean branching factor: a node from the third child on ends its group when its hash's
/// last word is divisible by it.
const BRANCHING: u64 = 4;

#[derive(Clone, Debug, Default)]
struct Level {
    pending: Vec<(XetHash, u64)>,
    total: u64,
}

/// A streaming Merkle aggregation: [`Tree::push`] the chunks' `(hash, size)` in order, then
/// [`Tree::root`].
#[derive(Clone, Debug, Default)]
pub struct Tree {
    levels: Vec<Level>,
}

/// Where the group starting at `nodes[0]` ends, if `nodes` decides it (`end` true: `nodes`
/// is all that is left of the level).
fn group_len(nodes: &[(XetHash, u64)], end: bool) -> Option<usize> {
    if nodes.len() <= 2 {
        return end.then_some(nodes.len());
    }
    let scan = nodes.len().min(MAX_GROUP);
    for (i, (h, _)) in nodes.iter().enumerate().take(scan).skip(2) {
        if last_word(h).is_multiple_of(BRANCHING) {
            return Some(i + 1);
        }
    }
    (end || nodes.len() >= MAX_GROUP).then_some(scan)
}

/// The node over `children`: BLAKE3 keyed with the internal-node key over one line
/// `"{hex} : {size}\n"` per child; its size is theirs summed.
pub fn merge(children: &[(XetHash, u64)]) -> (XetHash, u64) {
    let mut h = blake3::Hasher::new_keyed(&INTERNAL_NODE_KEY);
    let mut size = 0u64;
    for (hash, len) in children {
        h.update(hash.hex().as_bytes());
        h.update(b" : ");
        h.update(len.to_string().as_bytes());
        h.update(b"\n");
        size = size.wrapping_add(*len);
    }
    (XetHash(*h.finalize().as_bytes()), size)
}

impl Tree {
    /// Adds the next node of level 0 (a chunk).
    pub fn push(&mut self, hash: XetHash, size: u64) {
        self.push_at(0, (hash, size));
    }

    fn push_at(&mut self, at: usize, node: (XetHash, u64)) {
        if self.levels.len() <= at {
            self.levels.resize_with(at + 1, Level::default);
        }
        let level = &mut self.levels[at];
        level.pending.push(node);
        level.total += 1;
        self.emit(at, false);
    }

    /// Merges the groups of level `at` that are decided (all of them when `end`) into
    /// nodes of the level above.
    fn emit(&mut self, at: usize, end: bool) {
        while let Some(n) = group_len(&self.levels[at].pending, end) {
            if n == 0 {
                break;
            }
            let merged = merge(&self.levels[at].pending[..n]);
            self.levels[at].pending.drain(..n);
            self.push_at(at + 1, merged);
        }
    }

    /// The root: `None` for no node, the node itself for one, else the aggregation.
    pub fn root(mut self) -> Option<XetHash> {
        let mut at = 0;
        loop {
            let level = self.levels.get(at)?;
            let above = self.levels.get(at + 1).map_or(0, |l| l.total);
            if level.total == 1 && above == 0 {
                return level.pending.first().map(|n| n.0);
            }
            if level.total == 0 {
                return None;
            }
            self.emit(at, true);
            at += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xet-core's `next_merge_cut`, as written there.
    #[allow(
        clippy::needless_range_loop,
        reason = "xet-core's loop, kept as written there"
    )]
    fn next_merge_cut(hashes: &[(XetHash, u64)]) -> usize {
        if hashes.len() <= 2 {
            return hashes.len();
        }
        let end = 9.min(hashes.len());
        for i in 2..end {
            if last_word(&hashes[i].0).is_multiple_of(4) {
                return i + 1;
            }
        }
        end
    }

    /// xet-core's `aggregated_node_hash`, level by level over the whole list.
    fn reference(chunks: &[(XetHash, u64)]) -> Option<XetHash> {
        if chunks.is_empty() {
            return None;
        }
        let mut hv = chunks.to_vec();
        while hv.len() > 1 {
            let mut next = Vec::new();
            let mut i = 0;
            while i < hv.len() {
                let n = next_merge_cut(&hv[i..]);
                next.push(merge(&hv[i..i + n]));
                i += n;
            }
            hv = next;
        }
        Some(hv[0].0)
    }

    #[test]
    fn streaming_equals_whole_list_aggregation() {
        for n in 0..400u64 {
            let nodes: Vec<_> = (0..n)
                .map(|i| {
                    let h = blake3::hash(&(i * 7919 + n).to_le_bytes());
                    (XetHash(*h.as_bytes()), i % 5 * 1000 + 1)
                })
                .collect();
            let mut t = Tree::default();
            for &(h, s) in &nodes {
                t.push(h, s);
            }
            assert_eq!(t.root(), reference(&nodes), "{n} nodes");
        }
    }
}
