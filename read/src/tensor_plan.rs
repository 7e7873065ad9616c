//! The order in which a loader will touch a `.safetensors` file's bytes (issue 15).
//!
//! A [`TensorPlan`] lists the file's tensor ranges in the order the loader visits them and
//! lays them end to end in a *plan space*: position 0 is the first byte of the first tensor
//! visited, and position `p` is `p` bytes further along that visit. A read at a file offset
//! maps to a plan position (the reader's place in its walk), and the bytes the reader will
//! want next are the plan positions after it, which map back to file ranges. The stream's
//! read-ahead ([`crate::readahead::FileStream`]) keeps a window of plan positions ahead of
//! the reader in the cache, whatever jumps that walk makes in the file.
//!
//! Offsets in the header map to position 0 (the loader reads the header, then the first
//! tensor); offsets between tensors map to the next tensor's start; offsets after the last
//! tensor map to nothing.

use crate::safetensors::Layout;

/// Which order the loader is expected to visit tensors in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorOrder {
    /// No plan: ordinary sequential read-ahead only.
    Off,
    /// Offset order (a loader that iterates the header in file order).
    File,
    /// Name order: `safe_open(...).keys()` is sorted, and vLLM loads in that order.
    Name,
}

impl TensorOrder {
    /// `off`, `file` or `name`.
    pub fn parse(s: &str) -> Option<TensorOrder> {
        match s {
            "off" => Some(TensorOrder::Off),
            "file" => Some(TensorOrder::File),
            "name" => Some(TensorOrder::Name),
            _ => None,
        }
    }
}

/// Tensor ranges in visiting order, laid end to end.
#[derive(Debug, Clone)]
pub struct TensorPlan {
    /// File ranges `[start, end)` in visiting order (empty tensors left out).
    ranges: Vec<(u64, u64)>,
    /// `cum[i]`: plan position of `ranges[i].0`; the last entry is the total.
    cum: Vec<u64>,
    /// `(start, index into ranges)`, sorted by start, for offset lookups.
    by_start: Vec<(u64, usize)>,
}

impl TensorPlan {
    /// The plan of `layout` visited in `order` (`None` for [`TensorOrder::Off`]).
    pub fn new(layout: &Layout, order: TensorOrder) -> Option<TensorPlan> {
        let visit: Vec<usize> = match order {
            TensorOrder::Off => return None,
            TensorOrder::File => (0..layout.tensors.len()).collect(),
            TensorOrder::Name => layout.name_order(),
        };
        let ranges: Vec<(u64, u64)> = visit
            .into_iter()
            .map(|i| (layout.tensors[i].start, layout.tensors[i].end))
            .filter(|(s, e)| e > s)
            .collect();
        let mut cum = Vec::with_capacity(ranges.len() + 1);
        let mut at = 0u64;
        for (s, e) in &ranges {
            cum.push(at);
            at += e - s;
        }
        cum.push(at);
        let mut by_start: Vec<(u64, usize)> =
            ranges.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
        by_start.sort_unstable();
        Some(TensorPlan {
            ranges,
            cum,
            by_start,
        })
    }

    /// Total bytes of all tensors.
    pub fn total(&self) -> u64 {
        self.cum.last().copied().unwrap_or(0)
    }

    /// The plan position of file offset `offset`: inside a tensor, its place in the walk;
    /// before the first tensor in the file (the header), 0; in a gap, the next tensor's
    /// start; after the last tensor, `None`.
    pub fn position(&self, offset: u64) -> Option<u64> {
        let first = self.by_start.first()?;
        if offset < first.0 {
            return Some(0);
        }
        // The last tensor starting at or before `offset`.
        let k = self.by_start.partition_point(|&(s, _)| s <= offset) - 1;
        let i = self.by_start[k].1;
        let (s, e) = self.ranges[i];
        if offset < e {
            return Some(self.cum[i] + (offset - s));
        }
        self.by_start.get(k + 1).map(|&(_, j)| self.cum[j])
    }

    /// File ranges holding plan positions `[from, to)`, in visiting order.
    pub fn file_ranges(&self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let to = to.min(self.total());
        let mut out = Vec::new();
        if from >= to {
            return out;
        }
        let mut i = self.cum.partition_point(|&c| c <= from) - 1;
        while i < self.ranges.len() && self.cum[i] < to {
            let (s, e) = self.ranges[i];
            let a = s + from.saturating_sub(self.cum[i]);
            let b = e.min(s + (to - self.cum[i]));
            if b > a {
                out.push((a, b));
            }
            i += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::Tensor;

    /// Data at 100: "b" [100,110), "a" [110,130), empty "z" at 130, gap, "c" [140,150).
    fn layout() -> Layout {
        let t = |n: &str, s, e| Tensor {
            name: n.into(),
            start: s,
            end: e,
        };
        Layout {
            data_start: 100,
            tensors: vec![
                t("b", 100, 110),
                t("a", 110, 130),
                t("z", 130, 130),
                t("c", 140, 150),
            ],
        }
    }

    #[test]
    fn file_order_positions_and_ranges() {
        let p = TensorPlan::new(&layout(), TensorOrder::File).unwrap();
        assert_eq!(p.total(), 40);
        assert_eq!(p.position(0), Some(0));
        assert_eq!(p.position(105), Some(5));
        assert_eq!(p.position(129), Some(29));
        assert_eq!(p.position(135), Some(30)); // gap: the next tensor
        assert_eq!(p.position(149), Some(39));
        assert_eq!(p.position(150), None);
        assert_eq!(p.file_ranges(5, 35), [(105, 110), (110, 130), (140, 145)]);
        assert_eq!(p.file_ranges(35, 100), [(145, 150)]);
        assert!(p.file_ranges(40, 50).is_empty());
    }

    #[test]
    fn name_order_walks_a_then_b_then_c() {
        let p = TensorPlan::new(&layout(), TensorOrder::Name).unwrap();
        // a [110,130) at 0..20, b [100,110) at 20..30, c [140,150) at 30..40.
        assert_eq!(p.position(110), Some(0));
        assert_eq!(p.position(100), Some(20));
        assert_eq!(p.position(50), Some(0));
        assert_eq!(p.file_ranges(15, 35), [(125, 130), (100, 110), (140, 145)]);
        assert!(TensorPlan::new(&layout(), TensorOrder::Off).is_none());
    }

    #[test]
    fn a_file_without_tensors_has_no_positions() {
        let l = Layout {
            data_start: 10,
            tensors: vec![],
        };
        let p = TensorPlan::new(&l, TensorOrder::Name).unwrap();
        assert_eq!(p.position(0), None);
        assert!(p.file_ranges(0, 10).is_empty());
    }
}
