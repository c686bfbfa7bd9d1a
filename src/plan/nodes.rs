//! Node groups: which nodes each class holds. Claims live on the nodes
//! themselves (label `bulkhead.dev/<bulkhead>=<class>` plus a NoSchedule taint
//! with the same key), so they survive restarts and the choice is stable:
//! a claim is kept while its node is fit, a lost or unfit node is replaced,
//! and a node held by another class or Bulkhead is never taken.
//!
//! With a node opt-in (`--node-opt-in`, `bulkhead.dev/claimable=true` by
//! default) only nodes carrying that label are claimed. A claim made before
//! the node lost it (or before the operator required it) is kept while it is
//! intact and the node fit, but never repaired: nothing is written to a node
//! without the label except to release a claim.

use std::collections::{BTreeMap, BTreeSet};

use super::{scope::opted_in, OptIn};
use crate::{
    crd::{NodeGroupSpec, BULKHEAD_LABEL, CLASS_LABEL},
    select::{members, Matcher, Selection},
    snapshot::{LabelLookup, NodeInfo, Snapshot},
};
use k8s_openapi::api::core::v1::Taint;

/// Prefix of every claim key; what follows is the Bulkhead's name.
pub(super) const CLAIM_PREFIX: &str = "bulkhead.dev/";
pub const CLAIM_EFFECT: &str = "NoSchedule";

/// The node label and taint key of a Bulkhead's claims.
pub fn claim_key(bulkhead: &str) -> String {
    format!("{CLAIM_PREFIX}{bulkhead}")
}

/// The nodes one class holds after this plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassNodes {
    pub class: String,
    pub wanted: u32,
    pub nodes: Vec<String>,
    /// Why fewer than `wanted` could be held, when they could not.
    pub shortfall: Option<String>,
    /// Nodes of `nodes` without the node opt-in label: claimed before it was
    /// required (or before it was removed), kept, never claimed again once released.
    pub kept_without_opt_in: Vec<String>,
}

/// A write to one node: its claim label and our taint set (Some) or removed (None).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeChange {
    pub node: String,
    /// The node's resourceVersion when planned: the write is refused if it moved.
    pub resource_version: Option<String>,
    pub label_key: String,
    pub class: Option<String>,
    /// The whole taint list to write: others' taints unchanged, ours added or removed.
    pub taints: Vec<Taint>,
}

impl std::fmt::Display for NodeChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.class {
            Some(class) => write!(
                f,
                "claim Node {} for class {class} (label and taint {}={class}:{CLAIM_EFFECT})",
                self.node, self.label_key
            ),
            None => write!(f, "release Node {} (remove label and taint {})", self.node, self.label_key),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeGroupPlan {
    /// Classes with a node group, in spec order.
    pub classes: Vec<ClassNodes>,
    pub changes: Vec<NodeChange>,
    /// Whether planning read pods (to rank nodes for a missing claim): the
    /// only part of a plan that does, so a plan that did not holds while
    /// only pods change.
    pub read_pods: bool,
}

impl NodeGroupPlan {
    pub fn shortfalls(&self) -> impl Iterator<Item = &str> {
        self.classes.iter().filter_map(|c| c.shortfall.as_deref())
    }
}

/// The taint list with every taint under `key` replaced by `ours` (or removed);
/// the taints of kubelets, controllers and admins keep their place and value.
pub fn merge_taints(existing: &[Taint], key: &str, ours: Option<Taint>) -> Vec<Taint> {
    let mut out: Vec<Taint> = existing.iter().filter(|t| t.key != key).cloned().collect();
    out.extend(ours);
    out
}

fn our_taint(key: &str, class: &str) -> Taint {
    Taint { key: key.to_string(), value: Some(class.to_string()), effect: CLAIM_EFFECT.to_string(), time_added: None }
}

/// The Bulkheads holding a claim on a node: any label or taint under
/// `bulkhead.dev/<bulkhead>` counts (a claim someone half-removed still
/// counts), except the operator's own child labels.
fn claimed_by(node: &NodeInfo) -> impl Iterator<Item = &str> {
    let label_keys = node.labels.iter().map(|(k, _)| k);
    let taint_keys = node.taints.iter().map(|t| t.key.as_str());
    label_keys.chain(taint_keys).filter(|k| !RESERVED_KEYS.contains(k)).filter_map(|k| k.strip_prefix(CLAIM_PREFIX))
}

/// Keys under the claim prefix that are not claims: the labels on the
/// operator's children and the default node opt-in label. Bulkheads of these
/// names cannot place workloads.
pub(super) const RESERVED_KEYS: [&str; 3] = [BULKHEAD_LABEL, CLASS_LABEL, NODE_OPT_IN_KEY];

/// The key of `DEFAULT_NODE_OPT_IN` (a test holds the two together).
pub const NODE_OPT_IN_KEY: &str = "bulkhead.dev/claimable";

impl OptIn {
    /// As `parse`, for nodes: a key under `bulkhead.dev/` other than
    /// `NODE_OPT_IN_KEY` would read as a Bulkhead's claim.
    pub fn parse_for_nodes(s: &str) -> Result<Option<OptIn>, String> {
        let parsed = Self::parse(s)?;
        if let Some(o) = &parsed {
            if o.key.starts_with(CLAIM_PREFIX) && o.key != NODE_OPT_IN_KEY {
                return Err(format!(
                    "{s:?}: keys under {CLAIM_PREFIX} are the Bulkheads' node claims; use {NODE_OPT_IN_KEY} or a key \
                     of your own"
                ));
            }
        }
        Ok(parsed)
    }
}

/// Taints that keep pods off which no Bulkhead's claim put there (a newer
/// Bulkhead's claim gives way; an older one's was dealt with before).
fn foreign_repelling_taint<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a Taint> {
    let is_claim = |k: &str| !RESERVED_KEYS.contains(&k) && k.starts_with(CLAIM_PREFIX);
    node.taints
        .iter()
        .find(|t| t.key != key && !is_claim(&t.key) && matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
}

/// `opt_in`: the label a node must carry to be claimed (None: any node).
pub(super) fn plan_node_groups(
    selection: &Selection<'_>,
    snapshot: &Snapshot,
    opt_in: Option<&OptIn>,
) -> NodeGroupPlan {
    let name = selection.name();
    let key = claim_key(name);
    let groups: Vec<(usize, &str, &NodeGroupSpec, &Matcher)> = selection
        .classes
        .iter()
        .filter_map(|c| Some((c.index, c.spec.name.as_str(), c.spec.nodes.as_ref()?, c.nodes.as_ref()?)))
        .collect();
    // A claim is kept while its node is Ready, uncordoned and still matches.
    // NoSchedule taints others add later (memory pressure) do not release it:
    // the class's pods stay there, and releasing would let other classes in.
    // A NoExecute taint evicts them, so the node no longer serves the class.
    // Where two Bulkheads claim one node (both wrote before seeing the
    // other, or the older took it), the older keeps it and the newer lets go.
    // A node without the opt-in label keeps a claim only while it is intact:
    // repairing it would be a write to that node.
    let outranked_on = |node: &NodeInfo| claimed_by(node).any(|b| b != name && snapshot.seniority.outranks(b, name));
    let keeps = |node: &NodeInfo, matcher: &Matcher, class: &str| {
        node.schedulable
            && matcher.matches(&node.labels)
            && !node.taints.iter().any(|t| t.key != key && t.effect == "NoExecute")
            && !outranked_on(node)
            && (opted_in(opt_in, &node.labels) || node_change(node, &key, Some(class)).is_none())
    };

    // Keep every claim that is still fit, up to the count.
    let mut held: BTreeMap<&str, &str> = BTreeMap::new();
    let mut kept: Vec<Vec<&str>> = Vec::new();
    for (_, class, group, matcher) in &groups {
        let mine: Vec<&str> = snapshot
            .nodes
            .values()
            .filter(|n| n.labels.label(&key) == Some(*class) && keeps(n, matcher, class))
            .map(|n| n.name.as_str())
            .take(group.count as usize)
            .collect();
        for n in &mine {
            held.insert(n, class);
        }
        kept.push(mine);
    }
    // Then claim free nodes for what is missing: first those that run no pod
    // of another class (a taint keeps new pods off, it does not evict), then
    // by name. Finding pods' classes costs a scan of their pods, and ranking
    // a sort of the nodes: both only when a claim is missing.
    let missing = groups.iter().zip(&kept).any(|((_, _, g, _), k)| k.len() < g.count as usize);
    let classes_on = if missing { classes_by_node(selection, snapshot) } else { BTreeMap::new() };
    let mut classes = Vec::new();
    for ((i, class, group, matcher), mut nodes) in groups.iter().zip(kept) {
        let mut skipped = Skipped::default();
        let mut candidates: Vec<&NodeInfo> = Vec::new();
        if nodes.len() < group.count as usize {
            candidates.extend(snapshot.nodes.values());
            // Free nodes before those a newer Bulkhead holds (taken only when
            // nothing else is left), and nodes without other classes' pods first.
            candidates.sort_by_key(|n| {
                let held_by_newer = claimed_by(n).any(|b| b != name);
                (held_by_newer, classes_on.get(n.name.as_str()).is_some_and(|cs| cs.iter().any(|c| c != class)))
            });
        }
        for node in candidates {
            if nodes.len() >= group.count as usize {
                break;
            }
            if !matcher.matches(&node.labels) {
                continue;
            }
            if let Some(holder) = held.get(node.name.as_str()) {
                if holder != class {
                    skipped.other_classes.insert(holder.to_string());
                }
                continue;
            }
            let older: Vec<&str> =
                claimed_by(node).filter(|b| *b != name && snapshot.seniority.outranks(b, name)).collect();
            if !opted_in(opt_in, &node.labels) {
                skipped.not_opted_in.insert(node.name.clone());
            } else if !older.is_empty() {
                skipped.other_bulkheads.extend(older.into_iter().map(str::to_string));
            } else if node.labels.label(&key).is_some() || node.taints.iter().any(|t| t.key == key) {
                // Ours but unfit, or held for a class that is gone: released below, not reused at once.
                skipped.unfit.insert(node.name.clone());
            } else if !node.schedulable {
                skipped.unfit.insert(node.name.clone());
            } else if let Some(t) = foreign_repelling_taint(node, &key) {
                skipped.tainted.insert(format!("{} ({}:{})", node.name, t.key, t.effect));
            } else {
                held.insert(node.name.as_str(), class);
                nodes.push(node.name.as_str());
            }
        }
        nodes.sort_unstable();
        let shortfall =
            (nodes.len() < group.count as usize).then(|| skipped.describe(class, *i, group.count, &nodes, opt_in));
        let kept_without_opt_in = nodes
            .iter()
            .filter(|n| snapshot.nodes.get(**n).is_some_and(|node| !opted_in(opt_in, &node.labels)))
            .map(|n| n.to_string())
            .collect();
        classes.push(ClassNodes {
            class: class.to_string(),
            wanted: group.count,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            shortfall,
            kept_without_opt_in,
        });
    }

    let changes = snapshot
        .nodes
        .values()
        .filter_map(|node| node_change(node, &key, held.get(node.name.as_str()).copied()))
        .collect();
    NodeGroupPlan { classes, changes, read_pods: missing }
}

/// Classes whose pods (by the classes' selectors, as the audit places them) run on each node.
fn classes_by_node<'a>(selection: &Selection<'a>, snapshot: &'a Snapshot) -> BTreeMap<&'a str, BTreeSet<&'a str>> {
    let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for class in members(selection, snapshot) {
        for (_, pod) in &class.pods {
            if let Some(node) = pod.node.as_deref() {
                out.entry(node).or_default().insert(class.class);
            }
        }
    }
    out
}

/// The write that gives `node` the claim `class` (or none), if it lacks it.
pub(super) fn node_change(node: &NodeInfo, key: &str, class: Option<&str>) -> Option<NodeChange> {
    let label = node.labels.label(key);
    let taints: Vec<&Taint> = node.taints.iter().filter(|t| t.key == key).collect();
    let desired_taint = class.map(|c| our_taint(key, c));
    let taint_ok = match &desired_taint {
        Some(want) => taints.len() == 1 && taints[0].value == want.value && taints[0].effect == want.effect,
        None => taints.is_empty(),
    };
    if label == class && taint_ok {
        return None;
    }
    Some(NodeChange {
        node: node.name.clone(),
        resource_version: node.resource_version.clone(),
        label_key: key.to_string(),
        class: class.map(str::to_string),
        taints: merge_taints(&node.taints, key, desired_taint),
    })
}

/// Why candidate nodes were passed over, for the shortfall message.
#[derive(Default)]
struct Skipped {
    other_classes: BTreeSet<String>,
    other_bulkheads: BTreeSet<String>,
    unfit: BTreeSet<String>,
    tainted: BTreeSet<String>,
    not_opted_in: BTreeSet<String>,
}

/// At most this many nodes are named per reason.
const NAMED: usize = 10;

impl Skipped {
    fn describe(&self, class: &str, index: usize, wanted: u32, nodes: &[&str], opt_in: Option<&OptIn>) -> String {
        let mut why = Vec::new();
        if !self.other_classes.is_empty() {
            why.push(format!("held by class {}", join(&self.other_classes)));
        }
        if !self.other_bulkheads.is_empty() {
            why.push(format!("held by Bulkhead {}, which outranks this one", join(&self.other_bulkheads)));
        }
        if !self.unfit.is_empty() {
            why.push(format!("not Ready, cordoned or being released: {}", join(&self.unfit)));
        }
        if !self.tainted.is_empty() {
            why.push(format!("tainted by others: {}", join(&self.tainted)));
        }
        if let (false, Some(opt_in)) = (self.not_opted_in.is_empty(), opt_in) {
            let named: Vec<&str> = self.not_opted_in.iter().take(NAMED).map(String::as_str).collect();
            let more = self.not_opted_in.len() - named.len();
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            why.push(format!(
                "not opted in ({} without the label {opt_in}): {}{more} (a cluster admin opts a node in with \
                 kubectl label node NAME {opt_in})",
                self.not_opted_in.len(),
                named.join(", ")
            ));
        }
        let held = if nodes.is_empty() { "none".to_string() } else { nodes.join(", ") };
        let passed = if why.is_empty() {
            "no other node matches".to_string()
        } else {
            format!("other matching nodes are {}", why.join("; "))
        };
        format!(
            "class {class} holds {} of {wanted} node(s) ({held}); {passed} (spec.classes[{index}].nodes.selector)",
            nodes.len()
        )
    }
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}
