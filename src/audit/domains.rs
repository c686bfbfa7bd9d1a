//! The shape shared by the Process, Node, Kernel, Zone and Host layers: each
//! pod lives in one domain of the layer (itself, a node, a zone, a machine);
//! two classes share the layer where a domain holds pods of both.
//!
//! Cost is linear in pods: an inverted index domain → classes present, then
//! only domains holding two or more classes produce pairs.

use std::collections::HashMap;

use super::membership::{Members, Source};
use crate::{
    crd::LayerState,
    snapshot::{ObjectKey, PodInfo},
};

/// Where one pod sits in a layer.
pub enum Domain<K> {
    Known(K),
    /// Placed, but in a domain of its own (a sandboxed pod's guest kernel).
    Alone,
    /// The API cannot tell (a node without the label that names the domain).
    Unknown(String),
    /// Not counted in this layer at all (a pod not yet scheduled).
    Ignored,
}

/// Verdict for one pair of classes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairVerdict {
    pub a: usize,
    pub b: usize,
    pub state: LayerState,
    pub evidence: Vec<String>,
}

/// How much evidence a pair carries: enough to act on, not a dump.
const MAX_EVIDENCE: usize = 3;

pub struct DomainLayer<'a, K> {
    /// Per class: domain → an example pod.
    known: Vec<HashMap<K, &'a ObjectKey>>,
    /// Per class: some pod is placed (in a known domain or alone).
    placed: Vec<bool>,
    unknown: Vec<Vec<String>>,
    pub ignored: usize,
}

impl<'a, K: Copy + Eq + Ord + std::hash::Hash> DomainLayer<'a, K> {
    pub fn build(members: &[Members<'a>], domain_of: impl Fn(&'a ObjectKey, &'a PodInfo) -> Domain<K>) -> Self {
        let mut known = vec![HashMap::new(); members.len()];
        let mut placed = vec![false; members.len()];
        let mut unknown = vec![Vec::new(); members.len()];
        let mut ignored = 0;
        for (i, m) in members.iter().enumerate() {
            for &(key, pod) in &m.pods {
                match domain_of(key, pod) {
                    Domain::Known(d) => {
                        known[i].entry(d).or_insert(key);
                        placed[i] = true;
                    }
                    Domain::Alone => placed[i] = true,
                    Domain::Unknown(reason) => {
                        if unknown[i].len() < MAX_EVIDENCE {
                            unknown[i].push(reason);
                        }
                    }
                    Domain::Ignored => ignored += 1,
                }
            }
        }
        Self { known, placed, unknown, ignored }
    }

    /// Verdicts for every pair (a < b). `describe(domain, pod of a, pod of b)`
    /// words the evidence of a shared domain.
    pub fn pairs(
        &self,
        members: &[Members<'_>],
        describe: impl Fn(K, &ObjectKey, &ObjectKey) -> String,
    ) -> Vec<PairVerdict> {
        let n = members.len();
        // domain → classes present, with an example pod each
        let mut index: HashMap<K, Vec<(usize, &ObjectKey)>> = HashMap::new();
        for (i, domains) in self.known.iter().enumerate() {
            for (&d, &pod) in domains {
                index.entry(d).or_default().push((i, pod));
            }
        }
        let mut shared: Vec<Vec<String>> = vec![Vec::new(); n * n];
        let mut domains: Vec<K> = index.keys().copied().collect();
        domains.sort(); // stable evidence
        for d in domains {
            let present = &index[&d];
            if present.len() < 2 {
                continue;
            }
            for (x, &(a, pa)) in present.iter().enumerate() {
                for &(b, pb) in &present[x + 1..] {
                    let (a, b, pa, pb) = if a < b { (a, b, pa, pb) } else { (b, a, pb, pa) };
                    let slot = &mut shared[a * n + b];
                    if slot.len() < MAX_EVIDENCE {
                        slot.push(describe(d, pa, pb));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for a in 0..n {
            for b in a + 1..n {
                let evidence = std::mem::take(&mut shared[a * n + b]);
                if !evidence.is_empty() {
                    out.push(PairVerdict { a, b, state: LayerState::Shared, evidence });
                    continue;
                }
                let mut doubts = Vec::new();
                for c in [a, b] {
                    if !self.placed[c] && self.unknown[c].is_empty() {
                        doubts.push(match members[c].source {
                            Source::Unknown => format!(
                                "class {} has no pods selectors and the Bulkhead names no workload: where it runs is unknown",
                                members[c].class
                            ),
                            _ => format!("no pods of class {} are placed yet", members[c].class),
                        });
                    }
                    doubts.extend(self.unknown[c].iter().cloned());
                }
                if doubts.is_empty() {
                    out.push(PairVerdict { a, b, state: LayerState::Separate, evidence: Vec::new() });
                } else {
                    doubts.truncate(MAX_EVIDENCE);
                    out.push(PairVerdict { a, b, state: LayerState::Unverified, evidence: doubts });
                }
            }
        }
        out
    }
}
