//! Shuffle sharding in the plan: which candidate nodes there are, and each
//! tenant class's shard of them. The assignment itself is `crate::shard`'s
//! (deterministic from the tenant names, stable against the shards the
//! Bulkhead's status already holds); placement pins each class's workloads to
//! its shard's hostnames.

use std::collections::BTreeMap;

use crate::{
    crd::BulkheadSpec,
    select::{Selection, SpecError},
    shard::{assign, report, ShardReport},
    snapshot::{LabelLookup, Snapshot},
};

/// The node label a shard pins pods by.
pub(super) const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

#[derive(Clone, Debug, PartialEq)]
pub struct ShardPlan {
    pub shard_size: usize,
    /// Candidate nodes (matching the selector, with a hostname label), sorted.
    pub candidates: Vec<String>,
    /// Each tenant's shard (node names); empty when no assignment is possible.
    pub shards: BTreeMap<String, Vec<String>>,
    /// The hostname label of every candidate node.
    pub hostnames: BTreeMap<String, String>,
    /// Tenants given a shard afresh, and tenants whose shard lost a node and
    /// got a replacement, in this plan.
    pub placed: Vec<String>,
    pub repaired: Vec<String>,
    /// The figures of the assignment; None when there is none.
    pub report: Option<ShardReport>,
    /// Why no tenant has a shard, when none has.
    pub shortfall: Option<String>,
}

impl ShardPlan {
    /// The hostnames a class's pods are pinned to, when the class has a shard.
    pub fn pinned_hostnames(&self, class: &str) -> Option<Vec<String>> {
        let shard = self.shards.get(class)?;
        Some(shard.iter().filter_map(|n| self.hostnames.get(n).cloned()).collect())
    }
}

pub(super) fn plan_shards(selection: &Selection<'_>, snapshot: &Snapshot) -> Option<ShardPlan> {
    let bulkhead = selection.bulkhead;
    let spec = bulkhead.spec.shuffle_sharding.as_ref()?;
    let matcher = selection.shard_nodes.as_ref()?;
    let mut hostnames = BTreeMap::new();
    for (name, node) in &snapshot.nodes {
        if matcher.matches(&node.labels) {
            if let Some(host) = node.labels.label(HOSTNAME_LABEL) {
                hostnames.insert(name.clone(), host.to_string());
            }
        }
    }
    let candidates: Vec<String> = hostnames.keys().cloned().collect();
    // The tenants: every class but the control-plane lane, in spec order.
    let tenants: Vec<String> = bulkhead.spec.classes.iter().filter(|c| !c.critical).map(|c| c.name.clone()).collect();
    let shard_size = spec.shard_size as usize;
    let previous: BTreeMap<String, Vec<String>> = bulkhead
        .status
        .iter()
        .flat_map(|s| &s.classes)
        .filter(|c| !c.shard.is_empty())
        .map(|c| (c.name.clone(), c.shard.clone()))
        .collect();
    let mut plan = ShardPlan {
        shard_size,
        candidates,
        shards: BTreeMap::new(),
        hostnames,
        placed: Vec::new(),
        repaired: Vec::new(),
        report: None,
        shortfall: None,
    };
    if tenants.is_empty() {
        plan.shortfall = Some("every class is critical: there is no tenant to shard".to_string());
        return Some(plan);
    }
    if plan.candidates.len() < shard_size {
        plan.shortfall = Some(format!(
            "{} candidate node(s) (spec.shuffleSharding.nodes.selector, with a {HOSTNAME_LABEL} label) for shards \
             of {shard_size}",
            plan.candidates.len()
        ));
        return Some(plan);
    }
    match assign(&tenants, &plan.candidates, shard_size, &previous) {
        Ok(assignment) => {
            plan.report = Some(report(&assignment.shards, &plan.candidates));
            plan.shards = assignment.shards;
            plan.placed = assignment.placed;
            plan.repaired = assignment.repaired;
        }
        // Validation refuses duplicate class names and a zero shard size, so
        // this is only reached with an invalid spec; say why all the same.
        Err(e) => plan.shortfall = Some(e.to_string()),
    }
    Some(plan)
}

/// Spec rules of shuffle sharding.
pub(super) fn validate_sharding(spec: &BulkheadSpec) -> Vec<SpecError> {
    let Some(sharding) = &spec.shuffle_sharding else { return Vec::new() };
    let mut errors = Vec::new();
    if spec.dimension != crate::crd::Dimension::Tenant {
        errors.push(SpecError::new(
            "spec.shuffleSharding",
            format!("shards are given to tenants: it needs dimension Tenant, not {:?}", spec.dimension),
        ));
    }
    if sharding.shard_size == 0 || sharding.shard_size > crate::crd::MAX_SHARD_SIZE {
        errors.push(SpecError::new(
            "spec.shuffleSharding.shardSize",
            format!("{} must lie between 1 and {}", sharding.shard_size, crate::crd::MAX_SHARD_SIZE),
        ));
    }
    for (i, class) in spec.classes.iter().enumerate() {
        if class.nodes.is_some() {
            errors.push(SpecError::new(
                format!("spec.classes[{i}].nodes"),
                "a class cannot hold a node group of its own under spec.shuffleSharding (its shard is its nodes)",
            ));
        }
    }
    errors
}
