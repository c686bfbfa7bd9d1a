//! Placement, planned with no cluster: node claims (stability, replacement,
//! shortfall, never stealing), taint merging, workload patches, priorities and
//! PriorityClass-scoped quotas.

use std::collections::BTreeMap;

use bulkhead::{
    crd::Bulkhead,
    plan::{changes, merge_taints, teardown, Change, NodeChange, Plan, PlanConfig, WithheldConfig},
    select::Selection,
    snapshot::Snapshot,
    status::{build_status, ApplyOutcome, Refused, NODE_GROUPS_READY, PLACED, QUOTAS_SCOPED},
};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{Node, Taint},
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use serde_json::{json, Value};

use crate::fixtures::{mk_deployment, mk_namespace, mk_node_with, mk_pod};

/// The planner as the controller runs it: selectors parsed once, then planned.
fn plan(bulkhead: &Bulkhead, snapshot: &Snapshot) -> Plan {
    bulkhead::plan::plan(&Selection::parse(bulkhead), snapshot, &PlanConfig::default())
}

const KEY: &str = "bulkhead.dev/shop";

/// Three classes: checkout and reports with node groups of 2 from pool=general,
/// admin critical without one.
fn shop() -> Bulkhead {
    bulkhead(
        r#"
  - name: checkout
    reserved: 40
    pods: {namespaceSelector: {matchLabels: {team: shop}}, podSelector: {matchLabels: {app: checkout}}}
    nodes: {selector: {matchLabels: {pool: general}}, count: 2}
    antiAffinity: {topologyKey: kubernetes.io/hostname}
    runtimeClassName: kata
  - name: reports
    reserved: 40
    pods: {namespaceSelector: {matchLabels: {team: shop}}, podSelector: {matchLabels: {app: reports}}}
    nodes: {selector: {matchLabels: {pool: general}}, count: 2}
  - name: admin
    reserved: 10
    critical: true
    pods: {namespaceSelector: {matchLabels: {team: shop}}, podSelector: {matchLabels: {app: admin}}}
    antiAffinity: {topologyKey: kubernetes.io/hostname}
"#,
    )
}

fn bulkhead(classes: &str) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: shop, uid: u-1}}\nspec:\n  dimension: Criticality\n  pool: {{resource: connections, capacity: 100}}\n  classes:{classes}"
    ))
    .expect("fixture")
}

/// The cluster as API objects (made by `fixtures`, kept as JSON so that
/// planned changes can be applied to them the way the API server would),
/// turned into a Snapshot on demand through `Snapshot::apply`.
fn to_value<T: serde::Serialize>(object: T) -> Value {
    serde_json::to_value(object).expect("an API object serialises")
}

#[derive(Clone, Default)]
struct Cluster {
    nodes: BTreeMap<String, Value>,
    deployments: BTreeMap<String, Value>,
    pods: BTreeMap<String, Value>,
}

impl Cluster {
    fn with_nodes(names: &[&str]) -> Self {
        let mut c = Cluster::default();
        for n in names {
            c.node(n, json!({"pool": "general"}), json!([]), true);
        }
        c
    }

    fn node(&mut self, name: &str, labels: Value, taints: Value, ready: bool) {
        let mut labels = labels;
        labels["kubernetes.io/hostname"] = json!(name);
        self.nodes.insert(name.into(), to_value(mk_node_with(name, labels, taints, ready)));
    }

    fn deployment(&mut self, name: &str, app: &str) {
        self.deployments.insert(name.into(), to_value(mk_deployment("shop", name, app, 2)));
    }

    fn pod(&mut self, name: &str, node: &str, labels: Value) {
        let labels: Vec<(String, String)> = labels
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
            .unwrap_or_default();
        let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.pods.insert(name.into(), to_value(mk_pod("shop", name, &pairs, Some(node))));
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        s.apply(&mk_namespace("shop", &[("team", "shop")]));
        for v in self.nodes.values() {
            s.apply(&serde_json::from_value::<Node>(v.clone()).expect("node"));
        }
        for v in self.pods.values() {
            s.apply(&serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(v.clone()).expect("pod"));
        }
        for v in self.deployments.values() {
            s.apply(&serde_json::from_value::<Deployment>(v.clone()).expect("deployment"));
        }
        s
    }

    /// What the API server would hold after the operator's writes.
    fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Node(n) => {
                    let node = self.nodes.get_mut(&n.node).expect("planned node exists");
                    match &n.class {
                        Some(class) => node["metadata"]["labels"][&n.label_key] = json!(class),
                        None => {
                            node["metadata"]["labels"].as_object_mut().expect("labels").remove(&n.label_key);
                        }
                    }
                    node["spec"]["taints"] = json!(n.taints);
                    let rv: u64 =
                        node["metadata"]["resourceVersion"].as_str().and_then(|r| r.parse().ok()).unwrap_or(0);
                    node["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                }
                Change::PlaceWorkload(p) => {
                    let d = self.deployments.get_mut(&p.key.name).expect("planned workload exists");
                    merge(d, &p.body);
                    let generation = d["metadata"]["generation"].as_i64().unwrap_or(0);
                    d["metadata"]["generation"] = json!(generation + 1);
                }
                _ => {}
            }
        }
    }
}

/// A JSON merge of `patch` into `target` (what an apply that only adds fields does).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn node_changes(changes: &[Change]) -> Vec<&NodeChange> {
    changes.iter().filter_map(|c| if let Change::Node(n) = c { Some(n) } else { None }).collect()
}

fn claimed(plan: &Plan, class: &str) -> Vec<String> {
    plan.node_groups.classes.iter().find(|c| c.class == class).map(|c| c.nodes.clone()).unwrap_or_default()
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    Taint { key: key.into(), value: Some(value.into()), effect: effect.into(), time_added: None }
}

fn now() -> Time {
    Time("2026-12-02T12:00:00Z".parse().expect("time"))
}

fn condition(bh: &Bulkhead, p: &Plan, outcome: &ApplyOutcome, type_: &str) -> (String, String, String) {
    let status = build_status(bh, p, None, outcome, None, &now());
    let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn each_group_claims_its_count_in_name_order_with_label_and_taint() {
    let cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"]);
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert_eq!(claimed(&p, "checkout"), ["node-1", "node-2"]);
    assert_eq!(claimed(&p, "reports"), ["node-3", "node-4"]);
    let writes = node_changes(&p.node_groups.changes.iter().cloned().map(Change::Node).collect::<Vec<_>>())
        .into_iter()
        .map(|n| (n.node.clone(), n.class.clone(), n.taints.clone(), n.resource_version.clone()))
        .collect::<Vec<_>>();
    assert_eq!(writes.len(), 4, "only the claimed nodes are written: {writes:?}");
    assert_eq!(writes[0].0, "node-1");
    assert_eq!(writes[0].1.as_deref(), Some("checkout"));
    assert_eq!(writes[0].2, vec![taint(KEY, "checkout", "NoSchedule")]);
    assert_eq!(writes[0].3.as_deref(), Some("1"), "the write is conditional on the observed resourceVersion");
    let (status, reason, message) = condition(&bh, &p, &ApplyOutcome::NotApplied, NODE_GROUPS_READY);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "NodesClaimed"));
    assert_eq!(message, "checkout: node-1, node-2; reports: node-3, node-4");
}

#[test]
fn claims_are_stable_across_reconciles_and_new_nodes() {
    let mut cluster = Cluster::with_nodes(&["node-3", "node-4", "node-5", "node-6"]);
    let bh = shop();
    let first = plan(&bh, &cluster.snapshot());
    cluster.apply(&changes("shop", &first, &cluster.snapshot(), WithheldConfig::Remove));
    // A node that sorts first joins: nothing moves, nothing is written.
    cluster.node("node-0", json!({"pool": "general"}), json!([]), true);
    let again = plan(&bh, &cluster.snapshot());
    assert_eq!(claimed(&again, "checkout"), claimed(&first, "checkout"));
    assert_eq!(claimed(&again, "reports"), claimed(&first, "reports"));
    let node_writes: Vec<_> = changes("shop", &again, &cluster.snapshot(), WithheldConfig::Remove)
        .into_iter()
        .filter(|c| matches!(c, Change::Node(_)))
        .collect();
    assert!(node_writes.is_empty(), "a settled cluster gets no node writes: {node_writes:?}");
}

#[test]
fn a_lost_node_is_replaced_and_an_unready_one_released_and_replaced() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"]);
    let bh = shop();
    let first = plan(&bh, &cluster.snapshot());
    cluster.apply(&changes("shop", &first, &cluster.snapshot(), WithheldConfig::Remove));

    cluster.nodes.remove("node-2");
    let p = plan(&bh, &cluster.snapshot());
    assert_eq!(claimed(&p, "checkout"), ["node-1", "node-5"], "node-1 kept, node-5 replaces the lost node-2");
    assert_eq!(claimed(&p, "reports"), ["node-3", "node-4"]);
    cluster.apply(&changes("shop", &p, &cluster.snapshot(), WithheldConfig::Remove));

    // node-3 goes NotReady: released (label and taint gone) and replaced by node-6.
    let mut node3 = cluster.nodes["node-3"].clone();
    node3["status"]["conditions"][0]["status"] = json!("False");
    cluster.nodes.insert("node-3".into(), node3);
    let p = plan(&bh, &cluster.snapshot());
    assert_eq!(claimed(&p, "reports"), ["node-4", "node-6"]);
    let release = p.node_groups.changes.iter().find(|c| c.node == "node-3").expect("node-3 is released");
    assert_eq!(release.class, None);
    assert!(release.taints.is_empty());
}

#[test]
fn nodes_of_other_classes_and_bulkheads_are_never_taken_and_a_shortfall_is_reported() {
    let mut cluster = Cluster::default();
    cluster.node(
        "node-1",
        json!({"pool": "general", "bulkhead.dev/other": "x"}),
        json!([{"key": "bulkhead.dev/other", "value": "x", "effect": "NoSchedule"}]),
        true,
    );
    // A claim someone half-removed (label without its taint) is still a claim.
    cluster.node("node-0", json!({"pool": "general", "bulkhead.dev/half": "x"}), json!([]), true);
    // A label under another prefix is no claim.
    cluster.node("node-6", json!({"pool": "general", "test.bulkhead.dev/fake-node": "true"}), json!([]), true);
    cluster.node(
        "node-2",
        json!({"pool": "general"}),
        json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        true,
    );
    cluster.node("node-3", json!({"pool": "general"}), json!([]), false);
    cluster.node("node-4", json!({"pool": "general"}), json!([]), true);
    cluster.node("node-5", json!({"pool": "general"}), json!([]), true);
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    assert_eq!(claimed(&p, "checkout"), ["node-4", "node-5"]);
    assert_eq!(claimed(&p, "reports"), ["node-6"], "reports takes nothing from checkout");
    let (status, reason, message) = condition(&bh, &p, &ApplyOutcome::NotApplied, NODE_GROUPS_READY);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InsufficientNodes"));
    assert!(message.contains("class reports holds 1 of 2 node(s) (node-6)"), "{message}");
    assert!(message.contains("held by class checkout"), "{message}");
    assert!(message.contains("held by Bulkhead half, other"), "{message}");
    assert!(message.contains("not Ready, cordoned or being released: node-3"), "{message}");
    assert!(message.contains("tainted by others: node-2 (dedicated:NoSchedule)"), "{message}");
    assert!(message.contains("spec.classes[1].nodes.selector"), "{message}");
    let written: Vec<&str> = p.node_groups.changes.iter().map(|c| c.node.as_str()).collect();
    assert_eq!(written, ["node-4", "node-5", "node-6"], "nothing else is written");
}

#[test]
fn nodes_running_another_class_pods_are_claimed_last() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    // The critical class (no group) already runs on node-1, not placed yet
    // (no claim label): its selectors say whose it is. A taint would not evict it.
    cluster.pod("admin-0", "node-1", json!({"app": "admin"}));
    // A pod of no class does not matter.
    cluster.pod("blog-0", "node-2", json!({"app": "blog"}));
    let p = plan(&shop(), &cluster.snapshot());
    assert_eq!(claimed(&p, "checkout"), ["node-2", "node-3"]);
    assert_eq!(claimed(&p, "reports"), ["node-1", "node-4"], "node-1 only as the last resort");
}

#[test]
fn a_claim_is_kept_when_someone_else_taints_the_node() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5"]);
    let bh = shop();
    cluster.apply(&changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove));
    // The kubelet reports memory pressure on node-1.
    let mut node1 = cluster.nodes["node-1"].clone();
    node1["spec"]["taints"]
        .as_array_mut()
        .expect("taints")
        .push(json!({"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}));
    cluster.nodes.insert("node-1".into(), node1);
    let p = plan(&bh, &cluster.snapshot());
    assert_eq!(
        claimed(&p, "checkout"),
        ["node-1", "node-2"],
        "the claim stays; releasing it would let other classes in"
    );
    assert!(p.node_groups.changes.is_empty(), "{:?}", p.node_groups.changes);

    // A NoExecute taint evicts the class's pods: the node no longer serves it and is replaced.
    let mut node2 = cluster.nodes["node-2"].clone();
    node2["spec"]["taints"].as_array_mut().expect("taints").push(json!({"key": "maintenance", "effect": "NoExecute"}));
    cluster.nodes.insert("node-2".into(), node2);
    let p = plan(&bh, &cluster.snapshot());
    assert_eq!(claimed(&p, "checkout"), ["node-1", "node-5"]);
}

#[test]
fn taint_merging_keeps_others_taints_and_changes_only_ours() {
    let others =
        vec![taint("node.kubernetes.io/unreachable", "", "NoExecute"), taint("dedicated", "db", "PreferNoSchedule")];
    let mut with_ours = others.clone();
    with_ours.push(taint(KEY, "reports", "NoSchedule"));
    // Claim: ours appended, others untouched.
    assert_eq!(merge_taints(&others, KEY, Some(taint(KEY, "checkout", "NoSchedule"))), {
        let mut v = others.clone();
        v.push(taint(KEY, "checkout", "NoSchedule"));
        v
    });
    // Re-claim for another class: ours replaced, not duplicated.
    let merged = merge_taints(&with_ours, KEY, Some(taint(KEY, "checkout", "NoSchedule")));
    assert_eq!(merged.iter().filter(|t| t.key == KEY).count(), 1);
    assert_eq!(merged[..2], others[..]);
    // Release: exactly ours removed.
    assert_eq!(merge_taints(&with_ours, KEY, None), others);
    // Another Bulkhead's taint is not ours.
    let foreign = vec![taint("bulkhead.dev/other", "x", "NoSchedule")];
    assert_eq!(merge_taints(&foreign, KEY, None), foreign);
}

#[test]
fn teardown_releases_exactly_our_nodes_keeping_other_taints() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5"]);
    cluster.node(
        "node-6",
        json!({"pool": "general", "bulkhead.dev/other": "x"}),
        json!([{"key": "bulkhead.dev/other", "value": "x", "effect": "NoSchedule"}]),
        true,
    );
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    cluster.apply(&changes("shop", &p, &cluster.snapshot(), WithheldConfig::Remove));
    // Someone adds a taint of their own to a claimed node.
    let mut node1 = cluster.nodes["node-1"].clone();
    node1["spec"]["taints"]
        .as_array_mut()
        .expect("taints")
        .insert(0, json!({"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}));
    cluster.nodes.insert("node-1".into(), node1);

    let down = teardown("shop", &cluster.snapshot());
    let released: Vec<&NodeChange> = node_changes(&down);
    let names: Vec<&str> = released.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(names, ["node-1", "node-2", "node-3", "node-4"]);
    assert!(released.iter().all(|n| n.class.is_none()));
    assert_eq!(released[0].taints, vec![taint("maintenance", "soon", "PreferNoSchedule")]);
    cluster.apply(&down);
    assert_eq!(
        cluster.nodes["node-6"]["metadata"]["labels"]["bulkhead.dev/other"], "x",
        "another Bulkhead's claim stays"
    );
    for n in ["node-2", "node-3", "node-4", "node-5"] {
        let node = &cluster.nodes[n];
        assert_eq!(
            node["metadata"]["labels"],
            json!({"pool": "general", "kubernetes.io/hostname": n}),
            "{n}'s labels are as they were"
        );
        assert_eq!(node["spec"]["taints"], json!([]), "{n}'s taints are as they were");
    }
}

fn place_changes(changes: &[Change]) -> Vec<&bulkhead::plan::WorkloadPlacement> {
    changes.iter().filter_map(|c| if let Change::PlaceWorkload(p) = c { Some(p) } else { None }).collect()
}

#[test]
fn the_workload_patch_carries_class_label_affinity_toleration_anti_affinity_runtime_and_priority() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"]);
    cluster.deployment("checkout", "checkout");
    cluster.deployment("admin", "admin");
    cluster.deployment("unrelated", "blog");
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    let all = changes("shop", &p, &cluster.snapshot(), WithheldConfig::Remove);
    let placed = place_changes(&all);
    assert_eq!(
        placed.iter().map(|p| p.key.name.as_str()).collect::<Vec<_>>(),
        ["admin", "checkout"],
        "the unrelated Deployment is not touched"
    );

    let checkout = placed.iter().find(|p| p.key.name == "checkout").expect("checkout").body.clone();
    assert_eq!(
        checkout["metadata"],
        json!({"name": "checkout", "namespace": "shop", "annotations": {"placement.bulkhead.dev/shop": placed[1].fingerprint}})
    );
    let tpl = &checkout["spec"]["template"];
    assert_eq!(tpl["metadata"]["labels"], json!({KEY: "checkout"}));
    assert_eq!(
        tpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        json!([{"matchExpressions": [{"key": KEY, "operator": "In", "values": ["checkout"]}]}])
    );
    assert_eq!(
        tpl["spec"]["tolerations"],
        json!([{"key": KEY, "operator": "Equal", "value": "checkout", "effect": "NoSchedule"}])
    );
    assert_eq!(
        tpl["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!([{
            "labelSelector": {"matchExpressions": [{"key": KEY, "operator": "Exists"}, {"key": KEY, "operator": "NotIn", "values": ["checkout"]}]},
            "namespaces": ["shop"],
            "topologyKey": "kubernetes.io/hostname",
        }])
    );
    assert_eq!(tpl["spec"]["runtimeClassName"], "kata");
    assert_eq!(tpl["spec"]["priorityClassName"], "bulkhead-shop.checkout");
    assert!(
        checkout["spec"].get("replicas").is_none() && tpl["spec"].get("containers").is_none(),
        "only placement's fields are applied"
    );

    // The critical class without a group tolerates every group and prefers free nodes.
    let admin = &placed.iter().find(|p| p.key.name == "admin").expect("admin").body["spec"]["template"]["spec"];
    assert_eq!(admin["tolerations"], json!([{"key": KEY, "operator": "Exists", "effect": "NoSchedule"}]));
    assert_eq!(
        admin["affinity"]["nodeAffinity"],
        json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [{"key": KEY, "operator": "DoesNotExist"}]}}]})
    );
    assert_eq!(admin["priorityClassName"], "bulkhead-shop.admin");
}

#[test]
fn a_placed_workload_is_not_patched_again_until_the_spec_changes() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    cluster.deployment("checkout", "checkout");
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    cluster.apply(&changes("shop", &p, &cluster.snapshot(), WithheldConfig::Remove));
    let settled = plan(&bh, &cluster.snapshot());
    assert!(
        place_changes(&changes("shop", &settled, &cluster.snapshot(), WithheldConfig::Remove)).is_empty(),
        "no rollout loop"
    );

    // Someone removes the toleration placement set: it is applied again.
    let mut d = cluster.deployments["checkout"].clone();
    d["spec"]["template"]["spec"].as_object_mut().expect("spec").remove("tolerations");
    cluster.deployments.insert("checkout".into(), d);
    assert_eq!(
        place_changes(&changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove))
            .len(),
        1
    );

    // A spec change (no more runtimeClassName) re-applies with a new fingerprint.
    let mut changed = shop();
    changed.spec.classes[0].runtime_class_name = None;
    cluster.apply(&changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove));
    let again = changes("shop", &plan(&changed, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove);
    let placed = place_changes(&again);
    assert_eq!(placed.len(), 1);
    assert!(placed[0].body["spec"]["template"]["spec"].get("runtimeClassName").is_none());
}

#[test]
fn a_workload_with_affinity_of_its_own_settles_after_one_apply() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    cluster.deployment("admin", "admin");
    // The team spreads its replicas with a preferred anti-affinity of its own.
    let mut d = cluster.deployments["admin"].clone();
    d["spec"]["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "admin"}}, "topologyKey": "kubernetes.io/hostname"}}
    ]}, "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}});
    cluster.deployments.insert("admin".into(), d);
    let bh = shop();
    let first = changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove);
    assert_eq!(place_changes(&first).len(), 1);
    cluster.apply(&first);
    let again = changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove);
    assert!(place_changes(&again).is_empty(), "their preferred terms beside ours are no difference: {again:?}");
}

#[test]
fn workloads_that_stop_matching_or_match_two_classes_are_withdrawn_or_left_alone() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    cluster.deployment("checkout", "checkout");
    let bh = shop();
    cluster.apply(&changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove));
    // The app label changes: the workload is no class's any more.
    let mut d = cluster.deployments["checkout"].clone();
    d["spec"]["template"]["metadata"]["labels"]["app"] = json!("blog");
    cluster.deployments.insert("checkout".into(), d);
    let c = changes("shop", &plan(&bh, &cluster.snapshot()), &cluster.snapshot(), WithheldConfig::Remove);
    assert!(c.iter().any(|c| matches!(c, Change::WithdrawWorkload(_, k) if k.name == "checkout")), "{c:?}");

    // A workload two classes match is left alone and reported.
    let mut both = shop();
    both.spec.classes[1].pods.as_mut().expect("pods").pod_selector = Some(
        serde_json::from_value(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]})).expect("selector"),
    );
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    cluster.deployment("checkout", "checkout");
    let p = plan(&both, &cluster.snapshot());
    assert!(place_changes(&changes("shop", &p, &cluster.snapshot(), WithheldConfig::Remove)).is_empty());
    let (status, reason, message) = condition(&both, &p, &ApplyOutcome::NotApplied, PLACED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "WorkloadInTwoClasses"));
    assert!(message.contains("Deployment shop/checkout matches classes checkout and reports"), "{message}");
}

#[test]
fn a_placement_conflict_is_a_condition_naming_workload_field_and_manager() {
    let cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    let outcome = ApplyOutcome::Applied {
        config_maps: 0,
        quotas: 0,
        conflicts: vec![Refused {
            workload: "Deployment shop/checkout".into(),
            account: "Apply failed with 1 conflict: conflict with \"gitops\": .spec.template.spec.affinity".into(),
        }],
        rejected: Vec::new(),
        proxy_refused: Vec::new(),
    };
    let (status, reason, message) = condition(&bh, &p, &outcome, PLACED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PlacementConflict"));
    assert!(
        message.contains("Deployment shop/checkout")
            && message.contains("\"gitops\"")
            && message.contains(".spec.template.spec.affinity"),
        "{message}"
    );

    let rejected = ApplyOutcome::Applied {
        config_maps: 0,
        quotas: 0,
        conflicts: Vec::new(),
        rejected: vec![Refused {
            workload: "Deployment shop/reports".into(),
            account: "admission webhook \"policy\" denied the request".into(),
        }],
        proxy_refused: Vec::new(),
    };
    let (status, reason, message) = condition(&bh, &p, &rejected, PLACED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PlacementRejected"));
    assert!(message.contains("Deployment shop/reports: admission webhook"), "{message}");
    let (status, reason, _) = condition(&bh, &p, &ApplyOutcome::Failed("boom".into()), PLACED);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("Unknown", "ApplyFailed"),
        "a stopped apply does not claim placement"
    );
}

#[test]
fn a_runtime_class_the_cluster_lacks_is_reported() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    cluster.deployment("checkout", "checkout");
    let bh = shop();
    let p = plan(&bh, &cluster.snapshot());
    let (status, reason, message) = condition(&bh, &p, &ApplyOutcome::NotApplied, PLACED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "RuntimeClassNotFound"));
    assert!(message.contains("class checkout names RuntimeClass kata, which does not exist"), "{message}");
    let mut snapshot = cluster.snapshot();
    snapshot
        .runtime_classes
        .insert("kata".into(), bulkhead::snapshot::RuntimeClassInfo { handler: "kata-qemu".into() });
    let p = plan(&bh, &snapshot);
    assert_eq!(condition(&bh, &p, &ApplyOutcome::NotApplied, PLACED).1, "WorkloadsPlaced");
}

#[test]
fn priorities_default_with_the_critical_class_highest_and_are_validated() {
    let bh = shop();
    let p = plan(&bh, &Snapshot::default());
    let values: Vec<(String, i32)> =
        p.priority_classes.iter().map(|pc| (pc.metadata.name.clone().unwrap_or_default(), pc.value)).collect();
    assert_eq!(
        values,
        [
            ("bulkhead-shop.checkout".to_string(), 0),
            ("bulkhead-shop.reports".to_string(), 0),
            ("bulkhead-shop.admin".to_string(), 1000)
        ]
    );
    let policies: Vec<Option<String>> = p.priority_classes.iter().map(|pc| pc.preemption_policy.clone()).collect();
    assert_eq!(
        policies,
        [Some("Never".to_string()), Some("Never".to_string()), Some("PreemptLowerPriority".to_string())],
        "only the control-plane lane preempts"
    );
    let mut explicit = shop();
    explicit.spec.classes[0].priority = Some(5000);
    let p = plan(&explicit, &Snapshot::default());
    assert_eq!(p.priority_classes[2].value, 6000, "critical sits above the highest other class");

    explicit.spec.classes[2].priority = Some(4000);
    let p = plan(&explicit, &Snapshot::default());
    let errors: Vec<String> = p.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        errors,
        ["spec.classes[2].priority: critical class admin has priority 4000, not above class checkout's 5000: a critical class must have the highest priority of the Bulkhead"]
    );
}

#[test]
fn a_changed_priority_replaces_the_immutable_priority_class() {
    let bh = shop();
    let mut snapshot = Snapshot::default();
    for pc in plan(&bh, &snapshot).priority_classes {
        snapshot.priority_classes.insert(pc.metadata.name.clone().unwrap_or_default(), pc);
    }
    assert!(
        changes("shop", &plan(&bh, &snapshot), &snapshot, bulkhead::plan::WithheldConfig::Remove).is_empty(),
        "settled"
    );
    let mut raised = shop();
    raised.spec.classes[1].priority = Some(1500);
    let c: Vec<String> = changes("shop", &plan(&raised, &snapshot), &snapshot, bulkhead::plan::WithheldConfig::Remove)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        c,
        [
            "delete PriorityClass bulkhead-shop.reports",
            "apply PriorityClass bulkhead-shop.reports (value 1500)",
            // The critical class's default follows the highest other class.
            "delete PriorityClass bulkhead-shop.admin",
            "apply PriorityClass bulkhead-shop.admin (value 2500)",
        ]
    );
}

#[test]
fn with_placement_classes_sharing_a_namespace_get_quotas_scoped_by_priority_class() {
    let with_quota = |placement: &str| {
        bulkhead(&format!(
            r#"
  - name: checkout
    reserved: 40
    pods: {{namespaceSelector: {{matchLabels: {{team: shop}}}}, podSelector: {{matchLabels: {{app: checkout}}}}}}
    quota: {{hard: {{pods: "10"}}}}{placement}
  - name: reports
    reserved: 40
    pods: {{namespaceSelector: {{matchLabels: {{team: shop}}}}, podSelector: {{matchLabels: {{app: reports}}}}}}
    quota: {{hard: {{pods: "4"}}}}
"#
        ))
    };
    let snapshot = Cluster::default().snapshot();
    // Without placement: withheld and reported, as before.
    let unscoped = with_quota("");
    let p = plan(&unscoped, &snapshot);
    assert!(p.quotas.is_empty());
    assert!(p.priority_classes.is_empty() && p.placement.is_none());
    assert_eq!(condition(&unscoped, &p, &ApplyOutcome::NotApplied, QUOTAS_SCOPED).1, "QuotaNamespaceShared");

    let scoped = with_quota("\n    priority: 100");
    let p = plan(&scoped, &snapshot);
    let scopes: Vec<Value> =
        p.quotas.iter().map(|q| json!(q.spec.as_ref().and_then(|s| s.scope_selector.clone()))).collect();
    assert_eq!(
        scopes,
        [
            json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["bulkhead-shop.checkout"]}]}),
            json!({"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["bulkhead-shop.reports"]}]}),
        ]
    );
    let (status, reason, message) = condition(&scoped, &p, &ApplyOutcome::NotApplied, QUOTAS_SCOPED);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "QuotasScoped"));
    assert_eq!(
        message,
        "2 quota(s): 0 alone in its namespace, 2 in namespaces classes share, each scoped to its class's PriorityClass"
    );

    // A class without a quota still shares the namespace: the other's quota is scoped, not bounding it.
    let mut one_quota = scoped.clone();
    one_quota.spec.classes[1].quota = None;
    let p = plan(&one_quota, &snapshot);
    assert_eq!(p.quotas.len(), 1);
    assert!(p.quotas[0].spec.as_ref().is_some_and(|s| s.scope_selector.is_some()));

    // A class alone in its namespace keeps an unscoped quota: it bounds everything there.
    let mut alone = scoped.clone();
    alone.spec.classes[1].pods.as_mut().expect("pods").namespace_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"team": "elsewhere"}})).expect("selector"));
    let p = plan(&alone, &snapshot);
    assert_eq!(p.quotas.len(), 1);
    assert!(p.quotas[0].spec.as_ref().is_some_and(|s| s.scope_selector.is_none()));

    // A resource a PriorityClass scope cannot count: the shared namespace gets no quota, and says why.
    let mut services = scoped.clone();
    services.spec.classes[1]
        .quota
        .as_mut()
        .expect("quota")
        .hard
        .insert("services".into(), k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()));
    let p = plan(&services, &snapshot);
    assert!(p.quotas.is_empty());
    let (status, reason, message) = condition(&services, &p, &ApplyOutcome::NotApplied, QUOTAS_SCOPED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "QuotaNotScopable"));
    assert!(
        message.starts_with(
            "namespace shop: class reports's quota sets services, which a quota scoped by PriorityClass cannot count"
        ),
        "{message}"
    );
    // ephemeral-storage is a pod resource, but the API server refuses it under this scope too.
    let mut storage = scoped.clone();
    storage.spec.classes[0].quota.as_mut().expect("quota").hard.insert(
        "requests.ephemeral-storage".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
    );
    let p = plan(&storage, &snapshot);
    assert!(p.quotas.is_empty());
    assert_eq!(condition(&storage, &p, &ApplyOutcome::NotApplied, QUOTAS_SCOPED).1, "QuotaNotScopable");

    // An existing unscoped quota cannot be re-scoped in place: it is replaced.
    let mut snapshot = snapshot;
    let mut old = plan(&scoped, &snapshot).quotas[0].clone();
    old.spec.as_mut().expect("spec").scope_selector = None;
    snapshot.resource_quotas.insert(bulkhead::snapshot::ObjectKey::new("shop", "bulkhead-shop.checkout"), old);
    let c: Vec<String> = changes("shop", &plan(&scoped, &snapshot), &snapshot, bulkhead::plan::WithheldConfig::Remove)
        .iter()
        .map(ToString::to_string)
        .collect();
    let delete = c.iter().position(|c| c == "delete ResourceQuota shop/bulkhead-shop.checkout").expect("deleted");
    let apply = c.iter().position(|c| c == "apply ResourceQuota shop/bulkhead-shop.checkout").expect("re-applied");
    assert!(delete < apply, "{c:?}");
}

#[test]
fn placement_needs_a_pod_selector_a_label_key_and_is_off_unless_a_class_asks() {
    let bh = bulkhead(
        "\n  - {name: a, reserved: 10, pods: {namespaceSelector: {matchLabels: {team: shop}}}, priority: 10}\n  - {name: b, reserved: 10, antiAffinity: {topologyKey: \"not a key\"}}\n",
    );
    let errors: Vec<String> = plan(&bh, &Snapshot::default()).errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        errors,
        [
            "spec.classes[0].pods.podSelector: is required when the Bulkhead places workloads: without it every workload of the selected namespaces would be patched",
            "spec.classes[1].antiAffinity.topologyKey: \"not a key\" is not a label key (like kubernetes.io/hostname)",
        ]
    );
    let mut reserved = shop();
    reserved.metadata.name = Some("class".into());
    let errors: Vec<String> = plan(&reserved, &Snapshot::default()).errors.iter().map(|e| e.field.clone()).collect();
    assert_eq!(errors, ["metadata.name"], "bulkhead.dev/class labels the operator's own objects");

    let off = bulkhead("\n  - {name: a, reserved: 10, pods: {podSelector: {matchLabels: {app: a}}}}\n");
    let mut cluster = Cluster::default();
    cluster.deployment("a", "a");
    let p = plan(&off, &cluster.snapshot());
    assert!(p.placement.is_none() && p.priority_classes.is_empty() && p.node_groups.classes.is_empty());
    let status = build_status(&off, &p, None, &ApplyOutcome::NotApplied, None, &now());
    assert!(status.conditions.iter().all(|c| c.type_ != NODE_GROUPS_READY && c.type_ != PLACED));
    assert!(changes("a", &p, &cluster.snapshot(), WithheldConfig::Remove).is_empty());
}

/// A Bulkhead of one class `batch` wanting `count` nodes of pool=general and
/// placing `app: checkout` workloads, created at `second`.
fn rival(name: &str, second: i64, count: u32) -> Bulkhead {
    let mut bh = bulkhead(&format!(
        r#"
  - name: batch
    reserved: 40
    pods: {{namespaceSelector: {{matchLabels: {{team: shop}}}}, podSelector: {{matchLabels: {{app: checkout}}}}}}
    nodes: {{selector: {{matchLabels: {{pool: general}}}}, count: {count}}}
"#
    ));
    bh.metadata.name = Some(name.into());
    bh.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(second).expect("time")));
    bh
}

/// `shop()` created at second 100.
fn shop_at_100() -> Bulkhead {
    let mut bh = shop();
    bh.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(100).expect("time")));
    bh
}

/// The cluster's snapshot, knowing when each of `bulkheads` was created.
fn ranked(cluster: &Cluster, bulkheads: &[&Bulkhead]) -> Snapshot {
    let mut s = cluster.snapshot();
    for bh in bulkheads {
        s.seniority.insert(&bh.metadata);
    }
    s
}

fn plan_and_apply(cluster: &mut Cluster, bh: &Bulkhead, all: &[&Bulkhead]) -> Plan {
    let name = bh.metadata.name.clone().expect("named");
    let p = plan(bh, &ranked(cluster, all));
    cluster.apply(&changes(&name, &p, &ranked(cluster, all), bulkhead::plan::WithheldConfig::Remove));
    p
}

#[test]
fn where_two_bulkheads_claimed_one_node_the_older_keeps_it_and_the_newer_moves() {
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"]);
    let (shop, late) = (shop_at_100(), rival("late", 200, 1));
    // Both wrote a claim on node-1 before seeing the other's.
    cluster.node(
        "node-1",
        json!({"pool": "general", KEY: "checkout", "bulkhead.dev/late": "batch"}),
        json!([taint(KEY, "checkout", "NoSchedule"), taint("bulkhead.dev/late", "batch", "NoSchedule")]),
        true,
    );
    let all = [&shop, &late];
    let p = plan_and_apply(&mut cluster, &shop, &all);
    assert_eq!(claimed(&p, "checkout"), ["node-1", "node-2"], "the older keeps node-1");
    let p = plan_and_apply(&mut cluster, &late, &all);
    assert_eq!(claimed(&p, "batch"), ["node-5"], "the newer lets node-1 go and takes a free node");
    let node1 = &cluster.nodes["node-1"];
    assert!(node1["metadata"]["labels"].get("bulkhead.dev/late").is_none(), "{node1}");
    assert_eq!(node1["spec"]["taints"], json!([taint(KEY, "checkout", "NoSchedule")]), "only the older's taint stays");
    // The other way round (names swapped in age), the verdict swaps too.
    let mut cluster2 = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5", "node-6"]);
    cluster2.nodes = cluster.nodes.clone();
    cluster2.node(
        "node-1",
        json!({"pool": "general", KEY: "checkout", "bulkhead.dev/late": "batch"}),
        json!([taint(KEY, "checkout", "NoSchedule"), taint("bulkhead.dev/late", "batch", "NoSchedule")]),
        true,
    );
    let early = rival("late", 50, 1);
    let all = [&shop, &early];
    let p = plan(&early, &ranked(&cluster2, &all));
    assert_eq!(claimed(&p, "batch"), ["node-1"], "created first, it keeps node-1");
    let p = plan(&shop, &ranked(&cluster2, &all));
    assert!(!claimed(&p, "checkout").contains(&"node-1".to_string()), "{:?}", claimed(&p, "checkout"));
    // No timestamps to tell them apart within a second: the smaller name wins.
    let (a, b) = (rival("a-team", 300, 1), rival("b-team", 300, 1));
    let mut cluster3 = Cluster::with_nodes(&["node-1", "node-2"]);
    cluster3.node(
        "node-1",
        json!({"pool": "general", "bulkhead.dev/a-team": "batch", "bulkhead.dev/b-team": "batch"}),
        json!([
            taint("bulkhead.dev/a-team", "batch", "NoSchedule"),
            taint("bulkhead.dev/b-team", "batch", "NoSchedule")
        ]),
        true,
    );
    assert_eq!(claimed(&plan(&a, &ranked(&cluster3, &[&a, &b])), "batch"), ["node-1"]);
    assert_eq!(claimed(&plan(&b, &ranked(&cluster3, &[&a, &b])), "batch"), ["node-2"]);
}

#[test]
fn an_older_bulkhead_takes_a_newer_ones_node_only_when_no_free_node_is_left() {
    let (shop, late) = (shop_at_100(), rival("late", 200, 1));
    let all = [&shop, &late];
    // The newer came first to the pool and holds node-1.
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5"]);
    let p = plan_and_apply(&mut cluster, &late, &[&late]);
    assert_eq!(claimed(&p, "batch"), ["node-1"]);
    // Four free nodes for shop's four: node-1 is left alone.
    let p = plan_and_apply(&mut cluster, &shop, &all);
    let mut held = [claimed(&p, "checkout"), claimed(&p, "reports")].concat();
    held.sort();
    assert_eq!(held, ["node-2", "node-3", "node-4", "node-5"]);

    // Three free nodes for four: the older takes the newer's node, which lets go of it.
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4"]);
    plan_and_apply(&mut cluster, &late, &[&late]);
    let p = plan_and_apply(&mut cluster, &shop, &all);
    let mut held = [claimed(&p, "checkout"), claimed(&p, "reports")].concat();
    held.sort();
    assert_eq!(held, ["node-1", "node-2", "node-3", "node-4"]);
    let p = plan_and_apply(&mut cluster, &late, &all);
    assert!(claimed(&p, "batch").is_empty());
    let (status, reason, message) = condition(&late, &p, &ApplyOutcome::NotApplied, NODE_GROUPS_READY);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InsufficientNodes"));
    assert!(message.contains("held by Bulkhead shop, which outranks this one"), "{message}");
    assert!(cluster.nodes["node-1"]["metadata"]["labels"].get("bulkhead.dev/late").is_none());
    // At rest: neither plans another write.
    for bh in all {
        let s = ranked(&cluster, &all);
        let name = bh.metadata.name.clone().expect("named");
        let c = changes(&name, &plan(bh, &s), &s, bulkhead::plan::WithheldConfig::Remove);
        assert!(node_changes(&c).is_empty() && place_changes(&c).is_empty(), "{name} writes at rest: {c:?}");
    }
}

#[test]
fn a_workload_two_bulkheads_place_is_left_to_the_older_and_taken_from_the_newer() {
    let (shop, late) = (shop_at_100(), rival("late", 200, 1));
    let all = [&shop, &late];
    let mut cluster = Cluster::with_nodes(&["node-1", "node-2", "node-3", "node-4", "node-5"]);
    cluster.deployment("checkout", "checkout");
    // The newer placed it first.
    plan_and_apply(&mut cluster, &late, &[&late]);
    assert!(cluster.deployments["checkout"]["metadata"]["annotations"].get("placement.bulkhead.dev/late").is_some());
    let s = ranked(&cluster, &all);
    let c = changes("shop", &plan(&shop, &s), &s, bulkhead::plan::WithheldConfig::Remove);
    let placed = place_changes(&c);
    assert_eq!(placed.len(), 1, "{c:?}");
    assert_eq!(placed[0].take_from, ["late"], "the older may take the newer's fields");
    cluster.apply(&c);
    // The newer yields: withdraws, places nothing, and names the winner.
    let s = ranked(&cluster, &all);
    let p = plan(&late, &s);
    let c = changes("late", &p, &s, bulkhead::plan::WithheldConfig::Remove);
    assert!(place_changes(&c).is_empty(), "{c:?}");
    assert!(c.iter().any(|c| matches!(c, Change::WithdrawWorkload(_, k) if k.name == "checkout")), "{c:?}");
    let (status, reason, message) = condition(&late, &p, &ApplyOutcome::NotApplied, PLACED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "PlacedByOlderBulkhead"));
    assert!(message.contains("Deployment shop/checkout to Bulkhead shop"), "{message}");

    // A placement left by a Bulkhead that is gone is nobody to yield to or take from.
    let s = ranked(&cluster, &[&late]);
    let p = plan(&late, &s);
    assert!(p.placement.as_ref().is_some_and(|pl| pl.yielded.is_empty()));
    let s = ranked(&cluster, &[&shop]);
    let c = changes("shop", &plan(&shop, &s), &s, bulkhead::plan::WithheldConfig::Remove);
    assert!(place_changes(&c).iter().all(|p| p.take_from.is_empty()), "{c:?}");
}
