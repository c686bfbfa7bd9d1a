//! The shape shared by the Process, Node, Kernel, Zone and Host layers: each
//! pod lives in one domain of the layer (itself, a node, a zone, a machine);
//! two classes share the layer where a domain holds pods of both.
//!
//! Cost is linear in pods: an inverted index domain → classes present, then
//! only domains holding two or more classes produce pairs.

use rustc_hash::FxHashMap;

use crate::{
    crd::LayerState,
    select::Source,
    snapshot::{ObjectKey, PodInfo},
};

/// A class's member pods with the node each is bound to (see `nodes.rs`).
pub struct Located<'a> {
    pub class: &'a str,
    pub source: Source,
    pub pods: Vec<(&'a ObjectKey, &'a PodInfo)>,
    /// Per pod (same order): its node in the audit's node table; None if unscheduled.
    pub nodes: Vec<Option<NodeId>>,
}

/// A member pod, with the audit's index of the node it is bound to.
#[derive(Clone, Copy)]
pub struct Placed<'a> {
    /// Index of the class in spec.classes.
    pub class: usize,
    pub key: &'a ObjectKey,
    pub pod: &'a PodInfo,
    pub node: Option<NodeId>,
}

/// Index of a node in the audit's node table (see `nodes.rs`).
pub type NodeId = u32;

/// Why a pod's domain is unknown; worded only when kept as evidence, since
/// a cluster without zone labels would otherwise format a reason per pod.
pub enum Doubt<'d> {
    NoLabel { node: &'d str, pod: &'d ObjectKey, label: &'d str },
    UnknownNode { node: &'d str, pod: &'d ObjectKey },
    MissingRuntimeClass { pod: &'d ObjectKey, runtime_class: &'d str },
    Text(&'static str),
}

impl std::fmt::Display for Doubt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Doubt::NoLabel { node, pod, label } => write!(f, "node {node} (running {pod}) has no {label} label"),
            Doubt::UnknownNode { node, pod } => write!(f, "node {node} (running {pod}) is not known to the API"),
            Doubt::MissingRuntimeClass { pod, runtime_class } => {
                write!(f, "pod {pod} names RuntimeClass {runtime_class}, which does not exist")
            }
            Doubt::Text(t) => f.write_str(t),
        }
    }
}

/// Where one pod sits in a layer.
pub enum Domain<'d, K> {
    Known(K),
    /// Placed, but in a domain of its own (a sandboxed pod's guest kernel).
    Alone,
    /// The API cannot tell (a node without the label that names the domain).
    Unknown(Doubt<'d>),
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

/// One domain's occupants: the first class seen there and any others, each
/// with an example pod. Only sharing allocates.
struct Occupants<'a> {
    first: (usize, &'a ObjectKey),
    others: Vec<(usize, &'a ObjectKey)>,
}

impl<'a> Occupants<'a> {
    fn last_class(&self) -> usize {
        self.others.last().map_or(self.first.0, |o| o.0)
    }
}

pub struct DomainLayer<'a, K> {
    /// Domain → classes present there.
    index: FxHashMap<K, Occupants<'a>>,
    /// Per class: some pod is placed (in a known domain or alone).
    placed: Vec<bool>,
    unknown: Vec<Vec<String>>,
    pub ignored: usize,
}

impl<'a, K: Copy + Eq + std::hash::Hash> DomainLayer<'a, K> {
    pub fn build<'d>(members: &[Located<'a>], mut domain_of: impl FnMut(Placed<'a>) -> Domain<'d, K>) -> Self {
        let pods: usize = members.iter().map(|m| m.pods.len()).sum();
        let mut index: FxHashMap<K, Occupants<'a>> =
            FxHashMap::with_capacity_and_hasher(pods.min(1 << 16), Default::default());
        let mut placed = vec![false; members.len()];
        let mut unknown = vec![Vec::new(); members.len()];
        let mut worded = vec![0usize; members.len()];
        let mut ignored = 0;
        // Classes are visited in order, so "already here" is "the last class here".
        for (i, m) in members.iter().enumerate() {
            for (&(key, pod), &node) in m.pods.iter().zip(&m.nodes) {
                match domain_of(Placed { class: i, key, pod, node }) {
                    Domain::Known(d) => {
                        placed[i] = true;
                        match index.entry(d) {
                            std::collections::hash_map::Entry::Vacant(v) => {
                                v.insert(Occupants { first: (i, key), others: Vec::new() });
                            }
                            std::collections::hash_map::Entry::Occupied(mut o) => {
                                if o.get().last_class() != i {
                                    o.get_mut().others.push((i, key));
                                }
                            }
                        }
                    }
                    Domain::Alone => placed[i] = true,
                    Domain::Unknown(doubt) => {
                        // Word only the first few: a cluster without zone
                        // labels would otherwise format a reason per pod.
                        if unknown[i].len() < MAX_EVIDENCE && worded[i] < 4 * MAX_EVIDENCE {
                            worded[i] += 1;
                            let doubt = doubt.to_string();
                            if !unknown[i].contains(&doubt) {
                                unknown[i].push(doubt);
                            }
                        }
                    }
                    Domain::Ignored => ignored += 1,
                }
            }
        }
        Self { index, placed, unknown, ignored }
    }

    /// Verdicts for every pair (a < b). `describe(domain, pod of a, pod of b)`
    /// words the evidence of a shared domain.
    pub fn pairs(
        &self,
        members: &[Located<'_>],
        describe: impl Fn(K, &ObjectKey, &ObjectKey) -> String,
    ) -> Vec<PairVerdict> {
        let n = members.len();
        let mut shared_domains: Vec<(K, &Occupants<'_>)> =
            self.index.iter().filter(|(_, o)| !o.others.is_empty()).map(|(k, o)| (*k, o)).collect();
        // Stable evidence: the first pod seen in a domain identifies it.
        shared_domains.sort_by(|x, y| x.1.first.1.cmp(y.1.first.1));
        let mut shared: Vec<Vec<String>> = vec![Vec::new(); n * n];
        for (d, occupants) in shared_domains {
            let present: Vec<(usize, &ObjectKey)> =
                std::iter::once(occupants.first).chain(occupants.others.iter().copied()).collect();
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
                dedup_keep_order(&mut doubts);
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

/// Drop repeated evidence, keeping the first of each.
pub fn dedup_keep_order(items: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    items.retain(|i| seen.insert(i.clone()));
}
