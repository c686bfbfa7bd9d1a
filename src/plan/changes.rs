//! What must change in the cluster for it to match a plan: the difference
//! between the desired children and the ones the operator already wrote.
//! Pure, so "no writes at steady state" is a property of this function.

use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, ResourceQuota},
        networking::v1::NetworkPolicy,
        scheduling::v1::PriorityClass,
    },
    apimachinery::pkg::api::resource::Quantity,
};
use kube::api::ObjectMeta;

use super::{
    claim_key,
    injection::ProxyInjection,
    nodes::{node_change, NodeChange},
    placement::WorkloadPlacement,
    quantity::nano_units,
    Plan,
};
use crate::{
    crd::BULKHEAD_LABEL,
    pool_config::POOL_CONFIG_KEY,
    snapshot::{ObjectKey, Snapshot, WorkloadKind},
};

/// One write. Changes are listed in the order they must happen: PriorityClasses
/// before the pods that name them, node claims before the workloads that need
/// them, withdrawals before the PriorityClasses they named are deleted.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    ApplyPriorityClass(PriorityClass),
    DeletePriorityClass(String),
    Node(NodeChange),
    PlaceWorkload(WorkloadPlacement),
    WithdrawWorkload(WorkloadKind, ObjectKey),
    ApplyConfigMap(ConfigMap),
    InjectProxy(ProxyInjection),
    WithdrawProxy(WorkloadKind, ObjectKey),
    /// Stamp running pods with the hash of the pool config just written, so
    /// their kubelets refresh the mounted file now (see `propagation.rs`).
    StampPods {
        hash: String,
        pods: Vec<ObjectKey>,
    },
    /// After the sidecars it admits traffic to; deleted before they are withdrawn.
    ApplyNetworkPolicy(NetworkPolicy),
    DeleteNetworkPolicy(ObjectKey),
    DeleteConfigMap(ObjectKey),
    ApplyQuota(ResourceQuota),
    DeleteQuota(ObjectKey),
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = ObjectKey::from;
        match self {
            Change::ApplyPriorityClass(pc) => {
                write!(
                    f,
                    "apply PriorityClass {} (value {})",
                    pc.metadata.name.as_deref().unwrap_or_default(),
                    pc.value
                )
            }
            Change::DeletePriorityClass(name) => write!(f, "delete PriorityClass {name}"),
            Change::Node(n) => write!(f, "{n}"),
            Change::PlaceWorkload(p) => write!(f, "place {} in class {}", p.describe(), p.class),
            Change::WithdrawWorkload(kind, key) => write!(f, "withdraw placement from {} {key}", kind.as_str()),
            Change::ApplyConfigMap(cm) => write!(f, "apply ConfigMap {}", key(&cm.metadata)),
            Change::InjectProxy(p) => write!(f, "inject the proxy into {}", p.describe()),
            Change::WithdrawProxy(kind, key) => write!(f, "withdraw the proxy from {} {key}", kind.as_str()),
            Change::StampPods { hash, pods } => write!(f, "stamp pool config {hash} on {} pod(s)", pods.len()),
            Change::ApplyNetworkPolicy(np) => write!(f, "apply NetworkPolicy {}", key(&np.metadata)),
            Change::DeleteNetworkPolicy(k) => write!(f, "delete NetworkPolicy {k}"),
            Change::DeleteConfigMap(k) => write!(f, "delete ConfigMap {k}"),
            Change::ApplyQuota(rq) => write!(f, "apply ResourceQuota {}", key(&rq.metadata)),
            Change::DeleteQuota(k) => write!(f, "delete ResourceQuota {k}"),
        }
    }
}

impl Change {
    /// The namespace the change writes in; None for cluster-scoped objects
    /// (nodes, PriorityClasses).
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Change::ApplyPriorityClass(_) | Change::DeletePriorityClass(_) | Change::Node(_) => None,
            Change::PlaceWorkload(p) => Some(&p.key.namespace),
            Change::InjectProxy(p) => Some(&p.key.namespace),
            Change::WithdrawWorkload(_, key)
            | Change::WithdrawProxy(_, key)
            | Change::DeleteNetworkPolicy(key)
            | Change::DeleteConfigMap(key)
            | Change::DeleteQuota(key) => Some(&key.namespace),
            Change::StampPods { pods, .. } => pods.first().map(|k| k.namespace.as_str()),
            Change::ApplyConfigMap(cm) => cm.metadata.namespace.as_deref(),
            Change::ApplyNetworkPolicy(np) => np.metadata.namespace.as_deref(),
            Change::ApplyQuota(rq) => rq.metadata.namespace.as_deref(),
        }
    }
}

/// What happens to the pool config already written when the plan has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WithheldConfig {
    /// The Bulkhead names a workload and its config is only withheld (unfunded,
    /// namespace missing): the last one written stays in force.
    KeepLast,
    /// The Bulkhead names no workload: a config it once wrote has no reader and goes.
    Remove,
}

impl WithheldConfig {
    pub fn for_spec(spec: &crate::crd::BulkheadSpec) -> Self {
        if spec.workload.is_some() {
            WithheldConfig::KeepLast
        } else {
            WithheldConfig::Remove
        }
    }
}

/// Changes that bring the children of Bulkhead `name` in line with `plan`.
/// An invalid plan changes nothing: the last good objects stay in force.
/// Nothing is written or deleted in a namespace without the opt-in label
/// (`Plan::namespace_opt_in`): what was written there before stays as it is.
pub fn changes(name: &str, plan: &Plan, snapshot: &Snapshot, withheld: WithheldConfig) -> Vec<Change> {
    let mut out = planned_changes(name, plan, snapshot, withheld);
    let opt_in = plan.namespace_opt_in.as_ref();
    out.retain(|c| c.namespace().is_none_or(|ns| super::namespace_opted_in(opt_in, snapshot, ns)));
    out
}

fn planned_changes(name: &str, plan: &Plan, snapshot: &Snapshot, withheld: WithheldConfig) -> Vec<Change> {
    if !plan.is_valid() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let ours = |m: &ObjectMeta| made_by(m, name);

    let mut stale_priority_classes = Vec::new();
    for pc in &plan.priority_classes {
        let pc_name = pc.metadata.name.clone().unwrap_or_default();
        match snapshot.priority_classes.get(&pc_name) {
            Some(existing)
                if meta_up_to_date(&existing.metadata, &pc.metadata)
                    && existing.value == pc.value
                    && existing.preemption_policy == pc.preemption_policy => {}
            // A PriorityClass's value and preemption policy cannot change: replace it.
            Some(existing) if existing.value != pc.value || existing.preemption_policy != pc.preemption_policy => {
                out.push(Change::DeletePriorityClass(pc_name));
                out.push(Change::ApplyPriorityClass(pc.clone()));
            }
            _ => out.push(Change::ApplyPriorityClass(pc.clone())),
        }
    }
    for (pc_name, existing) in &snapshot.priority_classes {
        if ours(&existing.metadata)
            && !plan.priority_classes.iter().any(|pc| pc.metadata.name.as_ref() == Some(pc_name))
        {
            stale_priority_classes.push(Change::DeletePriorityClass(pc_name.clone()));
        }
    }
    out.extend(plan.node_groups.changes.iter().cloned().map(Change::Node));
    let withdrawals = match &plan.placement {
        Some(p) => p.withdrawals.clone(),
        // Placement switched off: withdraw from every workload this Bulkhead placed.
        None => placed_by(name, snapshot),
    };
    out.extend(withdrawals.into_iter().map(|(kind, key)| Change::WithdrawWorkload(kind, key)));
    for p in plan.placement.iter().flat_map(|p| &p.workloads) {
        if !p.up_to_date {
            out.push(Change::PlaceWorkload(p.clone()));
        }
    }

    if let Some(cm) = &plan.config_map {
        let key = ObjectKey::from(&cm.metadata);
        match snapshot.config_maps.get(&key) {
            // Only the key we write counts: another manager's keys survive our
            // apply, so comparing the whole map would re-apply forever.
            Some(existing) if meta_up_to_date(&existing.metadata, &cm.metadata) && our_key(existing) == our_key(cm) => {
            }
            _ => out.push(Change::ApplyConfigMap(cm.clone())),
        }
    }
    // Sidecars after the config they mount; withdrawn before it goes. The
    // NetworkPolicy goes before the sidecars and comes after them.
    let (apply_policy, stale_policies) = network_policy_changes(name, plan, snapshot);
    out.extend(stale_policies);
    out.extend(plan.proxy.withdrawals.iter().cloned().map(|(kind, key)| Change::WithdrawProxy(kind, key)));
    out.extend(plan.proxy.injections.iter().filter(|i| !i.up_to_date).cloned().map(Change::InjectProxy));
    // After the config they make the kubelets read again.
    if let (Some(hash), false) = (&plan.proxy.config_hash, plan.proxy.stamps.is_empty()) {
        out.push(Change::StampPods { hash: hash.clone(), pods: plan.proxy.stamps.clone() });
    }
    out.extend(apply_policy);
    // A withheld config (unfunded, namespace missing) leaves the last one in place;
    // a config that moved namespace, or a Bulkhead that dropped its workload, removes it.
    if plan.config_map.is_some() || withheld == WithheldConfig::Remove {
        for (key, existing) in &snapshot.config_maps {
            let desired = plan.config_map.iter().any(|cm| ObjectKey::from(&cm.metadata) == *key);
            if ours(&existing.metadata) && !desired {
                out.push(Change::DeleteConfigMap(key.clone()));
            }
        }
    }

    for rq in &plan.quotas {
        let key = ObjectKey::from(&rq.metadata);
        let hard = |q: &ResourceQuota| q.spec.as_ref().and_then(|s| s.hard.clone()).unwrap_or_default();
        let scope = |q: &ResourceQuota| q.spec.as_ref().and_then(|s| s.scope_selector.clone());
        match snapshot.resource_quotas.get(&key) {
            Some(existing)
                if meta_up_to_date(&existing.metadata, &rq.metadata)
                    && same_quantities(&hard(existing), &hard(rq))
                    && scope(existing) == scope(rq) => {}
            // A quota's scope cannot change: replace it.
            Some(existing) if scope(existing) != scope(rq) => {
                out.push(Change::DeleteQuota(key.clone()));
                out.push(Change::ApplyQuota(rq.clone()));
            }
            _ => out.push(Change::ApplyQuota(rq.clone())),
        }
    }
    for (key, existing) in &snapshot.resource_quotas {
        let desired = plan.quotas.iter().any(|rq| ObjectKey::from(&rq.metadata) == *key);
        if ours(&existing.metadata) && !desired {
            out.push(Change::DeleteQuota(key.clone()));
        }
    }
    out.extend(stale_priority_classes);
    out
}

/// The NetworkPolicy to apply, if it differs from the one written, and those
/// of this Bulkhead to delete (none while the plan keeps the last one).
fn network_policy_changes(name: &str, plan: &Plan, snapshot: &Snapshot) -> (Option<Change>, Vec<Change>) {
    let desired = plan.network_policy.policy.as_ref();
    let desired_key = desired.map(|np| ObjectKey::from(&np.metadata));
    // Only the fields we set: another manager may add an egress rule.
    let ours = |np: &NetworkPolicy| {
        np.spec.as_ref().map(|s| (s.pod_selector.clone(), s.policy_types.clone(), s.ingress.clone()))
    };
    let apply = desired.filter(|want| {
        let existing = desired_key.as_ref().and_then(|k| snapshot.network_policies.get(k));
        !existing.is_some_and(|have| meta_up_to_date(&have.metadata, &want.metadata) && ours(have) == ours(want))
    });
    let stale = snapshot
        .network_policies
        .iter()
        .filter(|(key, np)| {
            !plan.network_policy.keep && made_by(&np.metadata, name) && desired_key.as_ref() != Some(*key)
        })
        .map(|(key, _)| Change::DeleteNetworkPolicy(key.clone()))
        .collect();
    (apply.cloned().map(Change::ApplyNetworkPolicy), stale)
}

/// Whether an object carries the label of Bulkhead `name`.
fn made_by(meta: &ObjectMeta, name: &str) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(BULKHEAD_LABEL)).is_some_and(|b| b == name)
}

/// Workloads that carry this Bulkhead's placement annotation.
fn placed_by(name: &str, snapshot: &Snapshot) -> Vec<(WorkloadKind, ObjectKey)> {
    snapshot.workloads.iter().filter(|(_, w)| w.placed_by.contains_key(name)).map(|(k, _)| k.clone()).collect()
}

fn our_key(cm: &ConfigMap) -> Option<&String> {
    cm.data.as_ref().and_then(|d| d.get(POOL_CONFIG_KEY))
}

/// Our labels are present and our owner reference is there (others may add theirs).
fn meta_up_to_date(existing: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels_ok =
        desired.labels.iter().flatten().all(|(k, v)| existing.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
    let owners_ok = desired.owner_references.iter().flatten().all(|want| {
        existing
            .owner_references
            .iter()
            .flatten()
            .any(|have| have.uid == want.uid && have.controller == want.controller)
    });
    labels_ok && owners_ok
}

/// The quantities we set compare by value (the API server may store "0.5" as
/// "500m"); limits another manager added are not ours to compare.
fn same_quantities(
    existing: &std::collections::BTreeMap<String, Quantity>,
    desired: &std::collections::BTreeMap<String, Quantity>,
) -> bool {
    desired.iter().all(|(k, want)| {
        existing.get(k).is_some_and(|have| match (nano_units(&have.0), nano_units(&want.0)) {
            (Some(x), Some(y)) => x == y,
            _ => have.0 == want.0,
        })
    })
}

/// Everything a Bulkhead made, to delete when it goes: found by label, so
/// cleanup needs neither a valid spec nor the garbage collector.
pub fn teardown(name: &str, snapshot: &Snapshot) -> Vec<Change> {
    let ours = |m: &ObjectMeta| made_by(m, name);
    let config_maps = snapshot
        .config_maps
        .iter()
        .filter(|(_, cm)| ours(&cm.metadata))
        .map(|(k, _)| Change::DeleteConfigMap(k.clone()));
    let quotas = snapshot
        .resource_quotas
        .iter()
        .filter(|(_, rq)| ours(&rq.metadata))
        .map(|(k, _)| Change::DeleteQuota(k.clone()));
    let key = claim_key(name);
    // Every node with our label or taint is released.
    let nodes = snapshot.nodes.values().filter_map(|n| node_change(n, &key, None)).map(Change::Node);
    let priority_classes = snapshot
        .priority_classes
        .iter()
        .filter(|(_, pc)| ours(&pc.metadata))
        .map(|(n, _)| Change::DeletePriorityClass(n.clone()));
    // Workloads first: their new pods must not name a PriorityClass that is
    // gone, nor mount a pool config that is gone.
    let withdrawals = placed_by(name, snapshot).into_iter().map(|(kind, key)| Change::WithdrawWorkload(kind, key));
    // Traffic is admitted to every port again before the sidecars go.
    let network_policies = snapshot
        .network_policies
        .iter()
        .filter(|(_, np)| ours(&np.metadata))
        .map(|(k, _)| Change::DeleteNetworkPolicy(k.clone()));
    let sidecars = snapshot
        .workloads
        .iter()
        .filter(|(_, w)| w.proxied_by.contains_key(name))
        .map(|((kind, key), _)| Change::WithdrawProxy(*kind, key.clone()));
    withdrawals
        .chain(network_policies)
        .chain(sidecars)
        .chain(nodes)
        .chain(config_maps)
        .chain(quotas)
        .chain(priority_classes)
        .collect()
}
