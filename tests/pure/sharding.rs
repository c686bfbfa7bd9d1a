//! Shuffle sharding planned with no cluster: every tenant class gets a shard
//! of the candidate nodes and its workloads are pinned to the shard's
//! hostnames; the assignment is deterministic, kept from status, repaired only
//! where a node went; the status reports the actual figures and the Node layer
//! says that sharded tenants share nodes, identical shards first.

use std::collections::BTreeMap;

use bulkhead::{
    audit::{audit, AuditConfig},
    crd::{Bulkhead, Layer, LayerState, LayerStatus},
    plan::{changes, Change, Plan, PlanConfig},
    select::Selection,
    snapshot::Snapshot,
    status::{build_status, ApplyOutcome, ISOLATED, PLACED, READY, SHUFFLE_SHARDED},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::fixtures::{mk_deployment, mk_namespace, mk_node, mk_pod};

/// A Tenant Bulkhead with `tenants` classes t00, t01, … (pods app=tNN in
/// namespaces team=saas) plus a critical admin class, sharded over pool=shared.
fn saas(tenants: usize, shard_size: u32, extra: &str) -> Bulkhead {
    let mut classes = String::new();
    for t in 0..tenants {
        classes.push_str(&format!(
            "\n  - name: t{t:02}\n    reserved: 1\n    pods: {{namespaceSelector: {{matchLabels: {{team: saas}}}}, podSelector: {{matchLabels: {{app: t{t:02}}}}}}}"
        ));
    }
    classes.push_str(
        "\n  - name: admin\n    reserved: 1\n    critical: true\n    pods: {namespaceSelector: {matchLabels: {team: saas}}, podSelector: {matchLabels: {app: admin}}}",
    );
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: saas, uid: u-1}}\nspec:\n  dimension: Tenant\n  layers: [Node]\n  pool: {{resource: connections, capacity: 1000}}\n  shuffleSharding: {{nodes: {{selector: {{matchLabels: {{pool: shared}}}}}}, shardSize: {shard_size}}}{extra}\n  classes:{classes}"
    ))
    .expect("fixture")
}

/// `nodes` candidate nodes n0…, each with a hostname label h-<name>, one
/// Deployment per tenant and one for admin, and pods as listed (app, node).
fn cluster(nodes: &[&str], tenants: usize, pods: &[(&str, &str)]) -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(&mk_namespace("saas", &[("team", "saas")]));
    for n in nodes {
        s.apply(&mk_node(n, &[("pool", "shared"), ("kubernetes.io/hostname", &format!("h-{n}"))]));
    }
    // Not a candidate: another pool, and one without a hostname label.
    s.apply(&mk_node("other", &[("pool", "batch"), ("kubernetes.io/hostname", "h-other")]));
    s.apply(&mk_node("nameless", &[("pool", "shared")]));
    let apps = (0..tenants).map(|t| format!("t{t:02}")).chain(["admin".to_string()]);
    for app in apps {
        s.apply(&mk_deployment("saas", &app, &app, 1));
    }
    for (i, (app, node)) in pods.iter().enumerate() {
        s.apply(&mk_pod("saas", &format!("{app}-{i}"), &[("app", app)], Some(node)));
    }
    s
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i}")).collect()
}

fn plan(bh: &Bulkhead, snapshot: &Snapshot) -> Plan {
    bulkhead::plan::plan(&Selection::parse(bh), snapshot, &PlanConfig::default())
}

fn now() -> Time {
    Time("2026-12-03T12:00:00Z".parse().expect("time"))
}

/// The Bulkhead as the operator leaves it after one reconcile: with the status
/// it reported (which holds the shards the next plan keeps).
fn reconciled(bh: &Bulkhead, snapshot: &Snapshot) -> (Plan, Bulkhead) {
    let p = plan(bh, snapshot);
    let a = audit(&Selection::parse(bh), snapshot, &AuditConfig::default());
    let status = build_status(bh, &p, Some(&a), &ApplyOutcome::NotApplied, bh.status.as_ref(), &now());
    let mut next = bh.clone();
    next.status = Some(status);
    (p, next)
}

fn shards(bh: &Bulkhead) -> BTreeMap<String, Vec<String>> {
    let status = bh.status.as_ref().expect("status");
    status.classes.iter().filter(|c| !c.shard.is_empty()).map(|c| (c.name.clone(), c.shard.clone())).collect()
}

fn condition(bh: &Bulkhead, type_: &str) -> (String, String, String) {
    let status = bh.status.as_ref().expect("status");
    let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// The hostnames a planned workload body pins its pods to, if any.
fn pinned(p: &Plan, workload: &str) -> Option<Vec<String>> {
    let w = p.placement.as_ref()?.workloads.iter().find(|w| w.key.name == workload)?;
    let terms = &w.body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    let expr = &terms[0]["matchExpressions"][0];
    if expr["key"] != "kubernetes.io/hostname" || expr["operator"] != "In" {
        return None;
    }
    Some(expr["values"].as_array()?.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
}

fn node_layer(bh: &Bulkhead) -> LayerStatus {
    let status = bh.status.as_ref().expect("status");
    status.layers.iter().find(|l| l.name == Layer::Node).cloned().expect("node layer")
}

#[test]
fn every_tenant_gets_a_shard_of_candidates_and_its_workload_is_pinned_to_their_hostnames() {
    let nodes = names(6);
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let snapshot = cluster(&node_refs, 10, &[]);
    let (p, bh) = reconciled(&saas(10, 2, ""), &snapshot);
    assert!(p.is_valid(), "{:?}", p.errors);
    let held = shards(&bh);
    assert_eq!(held.len(), 10, "every tenant, not the critical class: {held:?}");
    assert!(!held.contains_key("admin"));
    for (tenant, shard) in &held {
        assert_eq!(shard.len(), 2, "{tenant}: {shard:?}");
        assert!(shard.iter().all(|n| nodes.contains(n)), "{tenant} holds a non-candidate: {shard:?}");
        let want: Vec<String> = shard.iter().map(|n| format!("h-{n}")).collect();
        assert_eq!(pinned(&p, tenant).as_ref(), Some(&want), "{tenant}'s Deployment");
    }
    // C(6, 2) = 15 ≥ 10: no two tenants share a shard.
    let mut distinct: Vec<Vec<String>> = held
        .values()
        .map(|s| {
            let mut s = s.clone();
            s.sort();
            s
        })
        .collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 10);
    assert_eq!(pinned(&p, "admin"), None, "the control-plane lane is not sharded");
    let (status, reason, message) = condition(&bh, SHUFFLE_SHARDED);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "ShardsAssigned"), "{message}");
    assert!(
        message.starts_with("10 tenants on 6 nodes, 2 per shard (C(6, 2) = 15 possible): 10 distinct shards; no two tenants hold the same shard; largest overlap 1 node(s)"),
        "{message}"
    );
    assert!(message.contains("tenants per node 3-4 (mean 3.3)"), "{message}");
    assert_eq!(condition(&bh, READY).0, "True");
    assert_eq!(condition(&bh, PLACED).0, "True");
}

#[test]
fn the_same_tenants_and_nodes_give_the_same_shards_and_a_second_plan_writes_nothing() {
    let nodes = names(8);
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let snapshot = cluster(&node_refs, 12, &[]);
    let (_, first) = reconciled(&saas(12, 3, ""), &snapshot);
    let (_, again) = reconciled(&saas(12, 3, ""), &snapshot);
    assert_eq!(shards(&first), shards(&again), "deterministic from names alone");
    // With the shards in status and the placement applied, the next plan keeps both.
    let (p, kept) = reconciled(&first, &snapshot);
    assert_eq!(shards(&kept), shards(&first));
    assert!(p.shards.as_ref().is_some_and(|s| s.placed.is_empty() && s.repaired.is_empty()));
}

#[test]
fn a_lost_node_is_replaced_only_in_the_shards_that_held_it() {
    let nodes = names(8);
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let (_, before) = reconciled(&saas(30, 2, ""), &cluster(&node_refs, 30, &[]));
    let lost = "n3";
    let remaining: Vec<&str> = node_refs.iter().copied().filter(|n| *n != lost).collect();
    let snapshot = cluster(&remaining, 30, &[]);
    let (p, after) = reconciled(&before, &snapshot);
    let (old, new) = (shards(&before), shards(&after));
    let holders: Vec<&String> = old.iter().filter(|(_, s)| s.iter().any(|n| n == lost)).map(|(t, _)| t).collect();
    assert!(!holders.is_empty(), "30 tenants on 8 nodes: someone held {lost}");
    for (tenant, shard) in &old {
        if holders.contains(&tenant) {
            assert!(!new[tenant].contains(&lost.to_string()), "{tenant} still holds the lost node");
            let kept = shard.iter().filter(|n| *n != lost).all(|n| new[tenant].contains(n));
            assert!(kept, "{tenant} kept its other node: {shard:?} -> {:?}", new[tenant]);
        } else {
            assert_eq!(&new[tenant], shard, "{tenant} did not hold {lost} and must not move");
        }
    }
    let repaired = &p.shards.as_ref().expect("shards").repaired;
    assert_eq!(repaired.iter().collect::<Vec<_>>(), holders);
}

#[test]
fn adding_or_removing_a_tenant_moves_no_other() {
    let nodes = names(8);
    let node_refs: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let (_, eight) = reconciled(&saas(8, 2, ""), &cluster(&node_refs, 9, &[]));
    // One more tenant, with the status of the eight.
    let mut nine = saas(9, 2, "");
    nine.status = eight.status.clone();
    let (_, nine) = reconciled(&nine, &cluster(&node_refs, 9, &[]));
    let (before, after) = (shards(&eight), shards(&nine));
    assert_eq!(after.len(), 9);
    for (tenant, shard) in &before {
        assert_eq!(&after[tenant], shard, "{tenant} moved when t08 arrived");
    }
    // And t03 leaving moves nobody either.
    let mut fewer = saas(9, 2, "");
    fewer.spec.classes.retain(|c| c.name != "t03");
    fewer.status = nine.status.clone();
    let (_, fewer) = reconciled(&fewer, &cluster(&node_refs, 9, &[]));
    let left = shards(&fewer);
    assert!(!left.contains_key("t03"));
    for (tenant, shard) in &left {
        assert_eq!(&after[tenant], shard, "{tenant} moved when t03 left");
    }
}

#[test]
fn the_node_layer_shows_overlapping_shards_as_shared_and_identical_shards_first() {
    // Four tenants, three nodes, shards of two: C(3, 2) = 3 < 4, so one pair must share a shard.
    let snapshot = cluster(&["n0", "n1", "n2"], 4, &[]);
    let (_, bh) = reconciled(&saas(4, 2, ""), &snapshot);
    let held = shards(&bh);
    let (status, reason, message) = condition(&bh, SHUFFLE_SHARDED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "IdenticalShards"), "{message}");
    assert!(message.contains("1 pair(s) hold identical shards"), "{message}");
    assert!(message.contains("forced, there are more tenants than shards"), "{message}");
    let layer = node_layer(&bh);
    assert_eq!(layer.state, LayerState::Shared);
    let first = &layer.pairs[0];
    let (a, b) = (&first.classes[0], &first.classes[1]);
    let mut sa = held[a].clone();
    let mut sb = held[b].clone();
    sa.sort();
    sb.sort();
    assert_eq!(sa, sb, "the first pair is the identical one: {layer:?}");
    assert!(first.evidence[0].starts_with("identical shards"), "{:?}", first.evidence);
    assert!(message.contains(&format!("{a} and {b}")), "the condition names the pair: {message}");
    // Any two shards of two out of three nodes overlap: all six tenant pairs come next, with the overlap;
    // then the pairs with admin, which has no pod yet (the audit's own verdict, untouched).
    assert_eq!(layer.pairs.len(), 10);
    assert!(layer.pairs[1..6].iter().all(|p| p.evidence[0].starts_with("shards overlap on ")), "{layer:?}");
    assert!(layer.pairs[1..6].iter().all(|p| p.state == LayerState::Shared));
    assert!(layer.pairs[6..].iter().all(|p| p.classes[1] == "admin" && p.state != LayerState::Shared), "{layer:?}");
    assert_eq!(condition(&bh, ISOLATED).0, "False", "Node is required and shared");
}

#[test]
fn pods_already_together_keep_the_audit_evidence_after_the_shard_evidence() {
    let snapshot = cluster(&["n0", "n1", "n2", "n3"], 2, &[("t00", "n0"), ("t01", "n0")]);
    let (_, bh) = reconciled(&saas(2, 3, ""), &snapshot);
    let layer = node_layer(&bh);
    assert_eq!(layer.pairs[0].classes, ["t00", "t01"], "{layer:?}");
    let evidence = &layer.pairs[0].evidence;
    assert!(evidence[0].starts_with("shards overlap on ") || evidence[0].starts_with("identical"), "{evidence:?}");
    assert!(evidence.iter().any(|e| e.contains("node n0 runs")), "the pods' own evidence stays: {evidence:?}");
}

#[test]
fn too_few_candidates_pin_nothing_and_say_so() {
    let snapshot = cluster(&["n0"], 3, &[]);
    let (p, bh) = reconciled(&saas(3, 2, ""), &snapshot);
    let (status, reason, message) = condition(&bh, SHUFFLE_SHARDED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "TooFewShardNodes"));
    assert!(message.contains("1 candidate node(s)"), "{message}");
    assert!(shards(&bh).is_empty());
    assert_eq!(pinned(&p, "t00"), None);
}

#[test]
fn sharding_outside_the_tenant_dimension_or_beside_a_node_group_is_refused_by_field() {
    let snapshot = cluster(&["n0", "n1"], 2, &[]);
    let mut other = saas(2, 1, "");
    other.spec.dimension = bulkhead::crd::Dimension::Criticality;
    let p = plan(&other, &snapshot);
    assert!(p.errors.iter().any(|e| e.field == "spec.shuffleSharding"), "{:?}", p.errors);

    let grouped: Bulkhead = serde_saphyr::from_str(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: saas}\nspec:\n  dimension: Tenant\n  pool: {resource: c, capacity: 10}\n  shuffleSharding: {nodes: {selector: {matchLabels: {pool: shared}}}, shardSize: 1}\n  classes:\n  - {name: a, reserved: 1, nodes: {selector: {}, count: 1}}\n",
    )
    .expect("fixture");
    let p = plan(&grouped, &snapshot);
    assert!(p.errors.iter().any(|e| e.field == "spec.classes[0].nodes"), "{:?}", p.errors);
    let changes = changes("saas", &p, &snapshot, bulkhead::plan::WithheldConfig::Remove);
    assert!(!changes.iter().any(|c| matches!(c, Change::PlaceWorkload(_))), "an invalid spec places nothing");
}
