//! The assignment: each tenant's shard of K nodes, deterministic, stable and spread.
//!
//! Order of work: 1. previous shards whose nodes all still exist are kept as
//! they are; 2. previous shards that lost nodes get each lost position filled
//! with the node that keeps overlaps lowest (`Index::best_fill`); 3. new tenants,
//! in name order, get the best of several candidate shards drawn by a
//! generator seeded with the FNV-1a hash of their name (`Index::score`).

use std::collections::{BTreeMap, HashMap};

use super::{check_sizes, hash::SplitMix64, index::Index, index::Score, ShardError};

/// Random candidate shards scored for each new tenant.
const CANDIDATES: usize = 12;
/// With at most this many distinct shards, every one is a candidate, so duplicates
/// (forced once T > C(N, K)) are spread exactly: use counts differ by at most 1.
const ENUMERATE_UP_TO: u64 = 256;
/// Extra uniform draws before walking the shards in order to find an unused one.
const EXTRA_DRAWS: usize = 64 * CANDIDATES;

/// Each tenant's shard (node names, in position order: a repaired shard keeps
/// its surviving nodes where they were) and what changed since `previous`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Assignment {
    pub shards: BTreeMap<String, Vec<String>>,
    /// Tenants given a new shard (new, or none of their previous nodes left).
    pub placed: Vec<String>,
    /// Tenants whose shard lost nodes and got replacements in those positions.
    pub repaired: Vec<String>,
}

/// Gives each tenant `shard_size` of `nodes`.
///
/// - Deterministic: the same tenants, nodes (in any order) and `previous` give
///   the same shards; each tenant's draws are seeded by the 64-bit FNV-1a hash
///   of its name (SplitMix64 generator).
/// - Stable: a previous shard whose nodes all exist is kept (so adding or
///   removing a tenant moves no other); a lost node is replaced in the shards that
///   held it, in its position, by the node that keeps overlaps lowest. A shard
///   longer than `shard_size` keeps its first nodes; a shorter one is filled.
///   Previous entries for tenants not listed are dropped.
/// - Spread: a new shard is never identical to another while unused shards
///   remain (C(N, K) ≥ T when nothing was kept); among candidates the lowest
///   largest overlap with any tenant wins, then the least loaded nodes.
///
/// Cost for a new tenant: CANDIDATES × (sum of the loads of a shard's nodes),
/// about 12·K²·T/N; for a lost position, about T·K.
pub fn assign(
    tenants: &[String],
    nodes: &[String],
    shard_size: usize,
    previous: &BTreeMap<String, Vec<String>>,
) -> Result<Assignment, ShardError> {
    if shard_size == 0 {
        return Err(ShardError::ZeroShardSize);
    }
    let mut names: Vec<&str> = tenants.iter().map(String::as_str).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ShardError::DuplicateTenant(w[0].to_string()));
    }
    if names.is_empty() {
        return Ok(Assignment::default());
    }
    check_sizes(nodes.len(), shard_size)?;
    let mut node_names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    node_names.sort_unstable();
    if let Some(w) = node_names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ShardError::DuplicateNode(w[0].to_string()));
    }
    let node_of: HashMap<&str, u32> = node_names.iter().enumerate().map(|(i, n)| (*n, i as u32)).collect();

    let mut index = Index::new(node_names.len(), names.len());
    let mut shards: Vec<Vec<u32>> = vec![Vec::new(); names.len()];
    let mut damaged: Vec<(usize, Vec<Option<u32>>)> = Vec::new();
    let mut fresh: Vec<usize> = Vec::new();
    for (slot, name) in names.iter().enumerate() {
        let positions = previous.get(*name).map(|p| surviving(p, &node_of, shard_size)).unwrap_or_default();
        if positions.iter().all(Option::is_none) {
            fresh.push(slot);
        } else if positions.iter().all(Option::is_some) {
            let shard: Vec<u32> = positions.into_iter().flatten().collect();
            index.insert(slot as u32, &sorted(&shard));
            shards[slot] = shard;
        } else {
            damaged.push((slot, positions));
        }
    }

    let mut repaired = Vec::new();
    for (slot, mut positions) in damaged {
        let mut rng = SplitMix64::for_tenant(names[slot]);
        for i in 0..positions.len() {
            if positions[i].is_none() {
                let partial = sorted(&positions.iter().flatten().copied().collect::<Vec<_>>());
                positions[i] = Some(index.best_fill(&partial, || rng.next_u64()));
            }
        }
        let shard: Vec<u32> = positions.into_iter().flatten().collect();
        index.insert(slot as u32, &sorted(&shard));
        shards[slot] = shard;
        repaired.push(names[slot].to_string());
    }

    let placer = Placer::new(node_names.len(), shard_size);
    let mut placed = Vec::new();
    for slot in fresh {
        let shard = placer.place(&mut index, names[slot]);
        index.insert(slot as u32, &shard);
        shards[slot] = shard;
        placed.push(names[slot].to_string());
    }

    let shards = names
        .iter()
        .zip(shards)
        .map(|(t, s)| (t.to_string(), s.into_iter().map(|v| node_names[v as usize].to_string()).collect()))
        .collect();
    Ok(Assignment { shards, placed, repaired })
}

/// A previous shard cut or padded to `k` positions, each its node if that still
/// exists (and is not repeated) or None to fill.
fn surviving(previous: &[String], node_of: &HashMap<&str, u32>, k: usize) -> Vec<Option<u32>> {
    let mut positions: Vec<Option<u32>> = Vec::with_capacity(k);
    for name in previous.iter().take(k) {
        let node = node_of.get(name.as_str()).copied();
        positions.push(node.filter(|v| !positions.contains(&Some(*v))));
    }
    positions.resize(k, None);
    positions
}

fn sorted(shard: &[u32]) -> Vec<u32> {
    let mut s = shard.to_vec();
    s.sort_unstable();
    s
}

/// Draws and scores candidate shards for new tenants.
struct Placer {
    nodes: usize,
    k: usize,
    /// Every shard, when there are at most ENUMERATE_UP_TO.
    all: Option<Vec<Vec<u32>>>,
    /// C(N, K), saturated at u64::MAX.
    combinations: u64,
}

impl Placer {
    fn new(nodes: usize, k: usize) -> Self {
        let combinations = super::binomial(nodes as u64, k as u64).try_into().unwrap_or(u64::MAX);
        let all = (combinations <= ENUMERATE_UP_TO).then(|| {
            let mut all = Vec::new();
            let mut c: Vec<u32> = (0..k as u32).collect();
            loop {
                all.push(c.clone());
                if !next_combination(&mut c, nodes) {
                    break all;
                }
            }
        });
        Placer { nodes, k, all, combinations }
    }

    fn place(&self, index: &mut Index, tenant: &str) -> Vec<u32> {
        let mut rng = SplitMix64::for_tenant(tenant);
        let mut best: Option<(Score, Vec<u32>)> = None;
        let mut consider = |index: &mut Index, c: Vec<u32>, tiebreak: u64| {
            if let Some(s) = index.score(&c, tiebreak, best.as_ref().map(|b| &b.0)) {
                best = Some((s, c));
            }
        };
        if let Some(all) = &self.all {
            for c in all {
                consider(index, c.clone(), rng.next_u64());
            }
        } else {
            for _ in 0..CANDIDATES {
                let c = self.draw(index, &mut rng, true);
                consider(index, c, rng.next_u64());
            }
            // Unused shards remain but the candidates all duplicate one: search on.
            let unused_left = (index.distinct() as u64) < self.combinations;
            if unused_left && best.as_ref().is_some_and(|b| b.0.identical > 0) {
                for _ in 0..EXTRA_DRAWS {
                    let c = self.draw(index, &mut rng, false);
                    if index.holders(&c) == 0 {
                        return c;
                    }
                }
                let mut c = best.map(|b| b.1).unwrap_or_else(|| (0..self.k as u32).collect());
                while index.holders(&c) > 0 {
                    if !next_combination(&mut c, self.nodes) {
                        c = (0..self.k as u32).collect();
                    }
                }
                return c;
            }
        }
        best.map(|b| b.1).unwrap_or_else(|| (0..self.k as u32).collect())
    }

    /// A random shard, sorted. With `two_choices` each node is the less loaded
    /// of two random ones, which keeps node loads within a few of each other.
    fn draw(&self, index: &Index, rng: &mut SplitMix64, two_choices: bool) -> Vec<u32> {
        let mut c: Vec<u32> = Vec::with_capacity(self.k);
        let mut pick = |c: &Vec<u32>| loop {
            let v = rng.below(self.nodes) as u32;
            if !c.contains(&v) {
                break v;
            }
        };
        while c.len() < self.k {
            let a = pick(&c);
            let v = if two_choices {
                let b = pick(&c);
                if index.load(b) < index.load(a) {
                    b
                } else {
                    a
                }
            } else {
                a
            };
            c.push(v);
        }
        c.sort_unstable();
        c
    }
}

/// The next K-subset of 0..n in lexicographic order; false after the last.
fn next_combination(c: &mut [u32], n: usize) -> bool {
    let k = c.len();
    for i in (0..k).rev() {
        if (c[i] as usize) < n - k + i {
            c[i] += 1;
            for j in i + 1..k {
                c[j] = c[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn shard_combinations_enumerate_in_order() {
        let mut c = vec![0, 1];
        let mut seen = 1;
        while next_combination(&mut c, 4) {
            seen += 1;
        }
        assert_eq!((seen, c), (6, vec![2, 3])); // C(4, 2) = 6, last {2, 3}
    }

    #[test]
    fn shard_assign_rejects_bad_input() {
        let none = BTreeMap::new();
        assert_eq!(assign(&names("t", 2), &names("n", 3), 0, &none), Err(ShardError::ZeroShardSize));
        assert_eq!(
            assign(&names("t", 2), &names("n", 3), 4, &none),
            Err(ShardError::ShardLargerThanNodes { shard_size: 4, nodes: 3 })
        );
        assert_eq!(assign(&names("t", 2), &[], 1, &none), Err(ShardError::NoNodes));
        let twice = vec!["a".to_string(), "a".to_string()];
        assert_eq!(assign(&twice, &names("n", 3), 1, &none), Err(ShardError::DuplicateTenant("a".into())));
        assert_eq!(assign(&names("t", 2), &twice, 1, &none), Err(ShardError::DuplicateNode("a".into())));
        assert_eq!(assign(&[], &[], 3, &none), Ok(Assignment::default()));
    }

    #[test]
    fn shard_assign_pads_cuts_and_dedupes_previous_shards() {
        let nodes = names("n", 6);
        let prev: BTreeMap<String, Vec<String>> = [
            ("long".to_string(), vec!["n0".into(), "n1".into(), "n2".into(), "n3".into()]),
            ("short".to_string(), vec!["n4".into()]),
            ("twice".to_string(), vec!["n5".into(), "n5".into(), "n2".into()]),
        ]
        .into();
        let tenants = vec!["long".to_string(), "short".to_string(), "twice".to_string()];
        let a = assign(&tenants, &nodes, 3, &prev).expect("assign");
        assert_eq!(a.shards["long"], ["n0", "n1", "n2"]);
        assert_eq!(a.shards["short"][0], "n4");
        assert_eq!((a.shards["twice"][0].as_str(), a.shards["twice"][2].as_str()), ("n5", "n2"));
        for s in a.shards.values() {
            let mut d = s.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), 3, "{s:?}");
        }
        assert_eq!(a.repaired, ["short", "twice"]);
        assert!(a.placed.is_empty());
    }
}
