//! The tenants placed so far, indexed so that a candidate shard is scored
//! against all of them in time proportional to the loads of its nodes, not to
//! the number of tenants.

use rustc_hash::FxHashMap;

/// How good a candidate shard is; lower is better, field by field: tenants that
/// already hold the same shard, then the largest overlap with any one tenant,
/// then the busiest of its nodes, then the load of all of them, then a draw
/// from the tenant's generator so that ties do not favour low node names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Score {
    pub identical: u32,
    pub overlap: u32,
    pub max_load: u32,
    pub load: u64,
    pub tiebreak: u64,
}

pub(crate) struct Index {
    /// Tenant slots on each node.
    on_node: Vec<Vec<u32>>,
    /// Each shard in use (node indices, sorted) and how many tenants hold it.
    shards: FxHashMap<Box<[u32]>, u32>,
    /// Per tenant slot: (epoch, nodes of the current candidate it is on).
    scratch: Vec<(u32, u32)>,
    epoch: u32,
}

impl Index {
    pub(super) fn new(nodes: usize, tenants: usize) -> Self {
        Index {
            on_node: vec![Vec::new(); nodes],
            shards: FxHashMap::default(),
            scratch: vec![(0, 0); tenants],
            epoch: 0,
        }
    }

    pub(super) fn load(&self, node: u32) -> u32 {
        self.on_node[node as usize].len() as u32
    }

    /// Distinct shards in use.
    pub(super) fn distinct(&self) -> usize {
        self.shards.len()
    }

    pub(super) fn holders(&self, sorted: &[u32]) -> u32 {
        self.shards.get(sorted).copied().unwrap_or(0)
    }

    pub(super) fn insert(&mut self, slot: u32, sorted: &[u32]) {
        for &v in sorted {
            self.on_node[v as usize].push(slot);
        }
        *self.shards.entry(sorted.into()).or_insert(0) += 1;
    }

    fn next_epoch(&mut self) -> u32 {
        if self.epoch == u32::MAX {
            self.scratch.fill((0, 0));
            self.epoch = 0;
        }
        self.epoch += 1;
        self.epoch
    }

    /// Scores `sorted`, or returns None as soon as it cannot beat `best`.
    /// Cost: the sum of its nodes' loads, often less.
    pub(super) fn score(&mut self, sorted: &[u32], tiebreak: u64, best: Option<&Score>) -> Option<Score> {
        let identical = self.holders(sorted);
        let max_load = sorted.iter().map(|&v| self.load(v)).max().unwrap_or(0);
        let load = sorted.iter().map(|&v| u64::from(self.load(v))).sum();
        if identical > 0 {
            // A holder of the same shard overlaps it fully.
            let s = Score { identical, overlap: sorted.len() as u32, max_load, load, tiebreak };
            return (best.is_none_or(|b| s < *b)).then_some(s);
        }
        // The largest overlap this candidate may reach and still win.
        let limit = match best {
            Some(b) if b.identical == 0 => {
                if (max_load, load, tiebreak) < (b.max_load, b.load, b.tiebreak) {
                    b.overlap
                } else if b.overlap == 0 {
                    return None;
                } else {
                    b.overlap - 1
                }
            }
            _ => u32::MAX,
        };
        let epoch = self.next_epoch();
        let mut overlap = 0;
        for &v in sorted {
            for &t in &self.on_node[v as usize] {
                let cell = &mut self.scratch[t as usize];
                *cell = if cell.0 == epoch { (epoch, cell.1 + 1) } else { (epoch, 1) };
                if cell.1 > overlap {
                    overlap = cell.1;
                    if overlap > limit {
                        return None;
                    }
                }
            }
        }
        Some(Score { identical, overlap, max_load, load, tiebreak })
    }

    /// The best node to add to `partial` (sorted, one short of a shard): each
    /// other node is scored as `score` would score `partial` plus it, but the
    /// overlaps through `partial` are counted once, so the cost is the sum of
    /// all loads (T·K) rather than N times the shard's.
    pub(super) fn best_fill(&mut self, partial: &[u32], mut tiebreak: impl FnMut() -> u64) -> u32 {
        let epoch = self.next_epoch();
        let mut base_overlap = 0;
        for &v in partial {
            for &t in &self.on_node[v as usize] {
                let cell = &mut self.scratch[t as usize];
                *cell = if cell.0 == epoch { (epoch, cell.1 + 1) } else { (epoch, 1) };
                base_overlap = base_overlap.max(cell.1);
            }
        }
        let base_max = partial.iter().map(|&v| self.load(v)).max().unwrap_or(0);
        let base_load: u64 = partial.iter().map(|&v| u64::from(self.load(v))).sum();
        let mut shard = Vec::with_capacity(partial.len() + 1);
        let mut best: Option<(Score, u32)> = None;
        for x in 0..self.on_node.len() as u32 {
            if partial.contains(&x) {
                continue;
            }
            shard.clear();
            shard.extend_from_slice(partial);
            let at = shard.partition_point(|&v| v < x);
            shard.insert(at, x);
            let identical = self.holders(&shard);
            let overlap = if identical > 0 {
                shard.len() as u32
            } else {
                let through_x = self.on_node[x as usize]
                    .iter()
                    .map(|&t| self.scratch[t as usize])
                    .map(|(e, c)| if e == epoch { c + 1 } else { 1 })
                    .max()
                    .unwrap_or(0);
                base_overlap.max(through_x)
            };
            let s = Score {
                identical,
                overlap,
                max_load: base_max.max(self.load(x)),
                load: base_load + u64::from(self.load(x)),
                tiebreak: tiebreak(),
            };
            if best.is_none_or(|(b, _)| s < b) {
                best = Some((s, x));
            }
        }
        best.map(|(_, x)| x).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_index_scores_overlap_and_identical() {
        let mut ix = Index::new(6, 3);
        ix.insert(0, &[0, 1, 2]);
        ix.insert(1, &[2, 3, 4]);
        let s = ix.score(&[0, 1, 2], 0, None).expect("score");
        assert_eq!((s.identical, s.overlap, s.max_load, s.load), (1, 3, 2, 4));
        let s = ix.score(&[1, 2, 3], 0, None).expect("score");
        assert_eq!((s.identical, s.overlap, s.max_load, s.load), (0, 2, 2, 4));
        let s = ix.score(&[0, 4, 5], 0, None).expect("score");
        assert_eq!((s.identical, s.overlap), (0, 1));
        // Cannot beat a best with overlap 1 and lower load.
        assert_eq!(ix.score(&[1, 2, 3], 0, Some(&s)), None);
        // The fill that keeps overlaps lowest: {0, 1} + 5 meets tenant 0 in two
        // nodes, + 3 or + 4 too but on a loaded node, + 2 is tenant 0's shard.
        assert_eq!(ix.best_fill(&[0, 1], || 0), 5);
        // {3, 4} + 5 meets tenant 1 in two nodes, as + 0 or + 1 would, and 5 is idle.
        assert_eq!(ix.best_fill(&[3, 4], || 0), 5);
    }
}
