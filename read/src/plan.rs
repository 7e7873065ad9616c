//! The one request planner: which frames of packs are read together, with one ranged read.
//!
//! Every reader that fetches frames it knows in advance (the chunk cache's prefetches, the
//! whole-file reader of `cat`, `checkout` and `verify`, `export`'s bundles) groups them
//! here, by one rule: frames taken in the order the reader wants them join the current
//! group while they are in the same pack, the group's byte span stays within the reader's
//! bound, and the bytes in that span nobody asked for (gaps, frames of other files) stay at
//! most a quarter of it. Frames of one file are mostly in order in a pack, with small swaps
//! where two ingest workers appended concurrently; the rule takes those in one read too.
//! A frame the reader marks as `alone` (e.g. one the node's chunk cache holds) is a group
//! of its own. A reader slices each frame out of the group's read at `offset - span.start`.

use std::ops::Range;

/// Bytes of a group's span nobody asked for may be at most `span / MAX_WASTE_FRACTION`.
pub const MAX_WASTE_FRACTION: u64 = 4;

/// Where one frame lies: its pack (any key type that tells packs apart), its offset in
/// the pack and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameAt<K> {
    pub pack: K,
    pub offset: u64,
    pub len: u64,
}

/// The byte range `[start, end)` of a group of frames in their pack.
pub fn span<K>(frames: impl IntoIterator<Item = FrameAt<K>>) -> Range<u64> {
    let mut out: Option<Range<u64>> = None;
    for f in frames {
        let (a, b) = (f.offset, f.offset + f.len);
        out = Some(match out {
            None => a..b,
            Some(r) => r.start.min(a)..r.end.max(b),
        });
    }
    out.unwrap_or(0..0)
}

/// Groups `items` (in the order the reader wants them) into runs read with one ranged read
/// each: the index ranges of `items`, in order, covering every item once. `at` says where
/// an item's frame lies; `alone` marks items that must be read on their own; `max_span`
/// bounds the bytes of one read (a single frame larger than it is a group of its own).
pub fn ranged_reads<T, K: PartialEq>(
    items: &[T],
    at: impl Fn(&T) -> FrameAt<K>,
    alone: impl Fn(&T) -> bool,
    max_span: u64,
) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    // The open group's span and the bytes of its frames.
    let mut open: Option<(Range<u64>, u64)> = None;
    for (i, item) in items.iter().enumerate() {
        let f = at(item);
        let single = alone(item);
        let joined = match (&open, single) {
            (Some((r, wanted)), false) if at(&items[start]).pack == f.pack => {
                let r = r.start.min(f.offset)..r.end.max(f.offset + f.len);
                let wanted = wanted + f.len;
                let len = r.end - r.start;
                let fits = len <= max_span && len - wanted.min(len) <= len / MAX_WASTE_FRACTION;
                fits.then_some((r, wanted))
            }
            _ => None,
        };
        match joined {
            Some(g) => open = Some(g),
            None => {
                if i > start {
                    groups.push(start..i);
                }
                start = i;
                open = Some((f.offset..f.offset + f.len, f.len));
            }
        }
        if single {
            groups.push(start..i + 1);
            start = i + 1;
            open = None;
        }
    }
    if start < items.len() {
        groups.push(start..items.len());
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(pack: u8, offset: u64, len: u64) -> FrameAt<u8> {
        FrameAt { pack, offset, len }
    }

    fn plan(frames: &[FrameAt<u8>], max: u64) -> Vec<Range<usize>> {
        ranged_reads(frames, |x| *x, |_| false, max)
    }

    #[test]
    fn adjacent_frames_of_one_pack_are_one_read_up_to_the_bound() {
        let frames: Vec<_> = (0..10).map(|i| f(1, i * 100, 100)).collect();
        assert_eq!(plan(&frames, 1000), vec![0..10]);
        assert_eq!(plan(&frames, 400), vec![0..4, 4..8, 8..10]);
    }

    #[test]
    fn another_pack_starts_a_new_read() {
        let frames = [f(1, 0, 10), f(1, 10, 10), f(2, 20, 10), f(1, 20, 10)];
        assert_eq!(plan(&frames, 1 << 20), vec![0..2, 2..3, 3..4]);
    }

    #[test]
    fn small_swaps_join_and_wide_gaps_split() {
        // Swapped neighbours: one read of [0, 300).
        let swapped = [f(1, 100, 100), f(1, 0, 100), f(1, 200, 100)];
        assert_eq!(plan(&swapped, 1 << 20), vec![0..3]);
        assert_eq!(span(swapped.iter().copied()), 0..300);
        // A gap of 20 in 120 (under a quarter) joins; a gap of 100 in 300 does not.
        assert_eq!(plan(&[f(1, 0, 50), f(1, 70, 50)], 1 << 20), vec![0..2]);
        assert_eq!(
            plan(&[f(1, 0, 100), f(1, 200, 100)], 1 << 20),
            vec![0..1, 1..2]
        );
    }

    #[test]
    fn alone_items_are_groups_of_their_own_and_cut_runs() {
        let frames: Vec<_> = (0..6).map(|i| f(1, i * 10, 10)).collect();
        let got = ranged_reads(&frames, |x| *x, |x| x.offset == 30, 1 << 20);
        assert_eq!(got, vec![0..3, 3..4, 4..6]);
        let all = ranged_reads(&frames, |x| *x, |_| true, 1 << 20);
        assert_eq!(all.len(), 6);
    }

    #[test]
    fn every_item_is_in_exactly_one_group_in_order() {
        // A deterministic pseudo-random walk over packs, offsets and lengths.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let n = (next() % 40) as usize;
            let frames: Vec<_> = (0..n)
                .map(|_| f((next() % 3) as u8, next() % 5000, 1 + next() % 700))
                .collect();
            let max = 200 + next() % 3000;
            let groups = ranged_reads(&frames, |x| *x, |x| x.len > 650, max);
            let covered: Vec<usize> = groups.iter().flat_map(|g| g.clone()).collect();
            assert_eq!(covered, (0..n).collect::<Vec<_>>(), "round {round}");
            for g in &groups {
                assert!(!g.is_empty());
                let s = span(frames[g.clone()].iter().copied());
                let wanted: u64 = frames[g.clone()].iter().map(|x| x.len).sum();
                if g.len() > 1 {
                    assert!(frames[g.clone()]
                        .iter()
                        .all(|x| x.pack == frames[g.start].pack));
                    assert!(s.end - s.start <= max, "round {round}");
                    assert!(s.end - s.start - wanted.min(s.end - s.start) <= (s.end - s.start) / 4);
                }
            }
        }
    }
}
