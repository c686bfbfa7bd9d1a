//! Isolation at admission, decided against the placement planner's own
//! output: a pod built from the template placement writes for a class is
//! admitted where that class's pods live and refused anywhere else, so
//! admission and placement cannot disagree. No cluster.

use bulkhead::{
    crd::Bulkhead,
    plan::{carries_operator_keys, review_pod, PlanConfig},
    select::Selection,
    snapshot::Snapshot,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use crate::fixtures::{mk_deployment, mk_namespace, mk_node};

/// Two teams with a node group each, and a critical class, each by its own namespace.
fn split() -> Bulkhead {
    serde_saphyr::from_str(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: split, uid: u-1}\nspec:\n  dimension: Tenant\n  \
         pool: {resource: connections, capacity: 100}\n  classes:\n  \
         - {name: a, reserved: 40, pods: {namespaceSelector: {matchLabels: {team: a}}, podSelector: {matchExpressions: [{key: app, operator: Exists}]}}, nodes: {selector: {matchLabels: {pool: general}}, count: 1}}\n  \
         - {name: b, reserved: 40, pods: {namespaceSelector: {matchLabels: {team: b}}, podSelector: {matchExpressions: [{key: app, operator: Exists}]}}, nodes: {selector: {matchLabels: {pool: general}}, count: 1}}\n  \
         - {name: ops, reserved: 10, critical: true, pods: {namespaceSelector: {matchLabels: {team: ops}}, podSelector: {matchExpressions: [{key: app, operator: Exists}]}}}\n",
    )
    .expect("fixture")
}

fn cluster() -> Snapshot {
    let mut s = Snapshot::default();
    for (ns, team) in [("team-a", "a"), ("team-b", "b"), ("ops", "ops"), ("elsewhere", "none")] {
        s.apply(&mk_namespace(ns, &[("team", team)]));
    }
    s.apply(&mk_namespace("kube-system", &[]));
    for n in ["n-1", "n-2", "n-3"] {
        s.apply(&mk_node(n, &[("pool", "general")]));
    }
    for (ns, app) in [("team-a", "a"), ("team-b", "b"), ("ops", "ops")] {
        s.apply(&mk_deployment(ns, app, app, 1));
    }
    s
}

/// n-1 as the operator leaves it when class a claims it: its label and taint.
fn claim_n1_for_a(s: &mut Snapshot) {
    s.apply(&crate::fixtures::mk_node_with(
        "n-1",
        json!({"pool": "general", "bulkhead.dev/split": "a"}),
        json!([{"key": "bulkhead.dev/split", "value": "a", "effect": "NoSchedule"}]),
        true,
    ));
}

/// The pod spec placement writes into `namespace`'s Deployment.
fn placed_template(bh: &Bulkhead, s: &Snapshot, namespace: &str) -> Value {
    let plan = bulkhead::plan::plan(&Selection::parse(bh), s, &PlanConfig::default());
    let placement = plan.placement.expect("placement planned");
    let w =
        placement.workloads.iter().find(|w| w.key.namespace == namespace).expect("the namespace's workload is placed");
    w.body["spec"]["template"]["spec"].clone()
}

fn pod(namespace: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "app", "image": "app"}]);
    serde_json::from_value(
        json!({"metadata": {"name": "p", "namespace": namespace, "labels": {"app": "x"}}, "spec": spec}),
    )
    .expect("pod")
}

#[test]
fn a_pod_from_a_classs_placement_is_admitted_in_its_namespace_and_refused_in_another() {
    let bh = split();
    let s = cluster();
    let selections = [Selection::parse(&bh)];
    let a = placed_template(&bh, &s, "team-a");
    assert!(a["tolerations"].as_array().is_some_and(|t| !t.is_empty()), "placement tolerates a's taint: {a}");
    assert_eq!(review_pod(&pod("team-a", a.clone()), &selections, &s, &[]), Ok(()));
    let denied = review_pod(&pod("team-b", a.clone()), &selections, &s, &[]).expect_err("another class's namespace");
    assert_eq!((denied.bulkhead.as_str(), denied.class.as_str()), ("split", "a"));
    assert_eq!(denied.field, "spec.tolerations[0]");
    assert!(
        denied.message.starts_with("Bulkhead split: spec.tolerations[0] reaches the nodes dedicated to class a"),
        "{}",
        denied.message
    );
    assert!(
        denied.message.contains("namespaceSelector (team=a)"),
        "it says what would admit the pod: {}",
        denied.message
    );
    // Selecting the nodes without tolerating them is refused too, by the field that does it.
    let mut selects_only = a.clone();
    selects_only.as_object_mut().expect("object").remove("tolerations");
    let d = review_pod(&pod("elsewhere", selects_only.clone()), &selections, &s, &[]).expect_err("affinity alone");
    assert!(
        d.field.starts_with("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
        "{}",
        d.field
    );
    let by_selector = json!({"nodeSelector": {"bulkhead.dev/split": "b"}});
    let d = review_pod(&pod("team-a", by_selector), &selections, &s, &[]).expect_err("a's pod selecting b's nodes");
    assert_eq!((d.class.as_str(), d.field.as_str()), ("b", "spec.nodeSelector[bulkhead.dev/split]"));
}

#[test]
fn the_critical_class_tolerates_every_group_and_only_it_does() {
    let bh = split();
    let s = cluster();
    let selections = [Selection::parse(&bh)];
    let ops = placed_template(&bh, &s, "ops");
    assert_eq!(ops["tolerations"][0]["operator"], "Exists", "placement lets the lane use every group: {ops}");
    assert_eq!(review_pod(&pod("ops", ops.clone()), &selections, &s, &[]), Ok(()));
    let d = review_pod(&pod("team-b", ops.clone()), &selections, &s, &[]).expect_err("not the lane");
    assert_eq!(d.class, "a", "the first group it reaches that it does not belong to");
    // A pod of the critical class may use a class's own toleration as well.
    let a = placed_template(&bh, &s, "team-a");
    assert_eq!(review_pod(&pod("ops", a), &selections, &s, &[]), Ok(()));
}

#[test]
fn pods_without_the_operators_keys_are_not_looked_at_and_exempt_namespaces_are_not_reviewed() {
    let bh = split();
    let s = cluster();
    let selections = [Selection::parse(&bh)];
    let plain = pod(
        "team-b",
        json!({"nodeSelector": {"pool": "general"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}),
    );
    assert!(!carries_operator_keys(&plain));
    assert_eq!(review_pod(&plain, &selections, &s, &[]), Ok(()));
    // A toleration of every taint (a node agent's) reaches every group.
    let agent = pod("kube-system", json!({"tolerations": [{"operator": "Exists"}]}));
    assert!(carries_operator_keys(&agent));
    assert_eq!(review_pod(&agent, &selections, &s, &[]).expect_err("a wildcard").field, "spec.tolerations[0]");
    assert_eq!(review_pod(&agent, &selections, &s, &["kube-system".to_string()]), Ok(()));
    // A NoExecute-only toleration does not tolerate the NoSchedule claim taint.
    let no_execute = pod(
        "team-b",
        json!({"tolerations": [{"key": "bulkhead.dev/split", "operator": "Exists", "effect": "NoExecute"}]}),
    );
    assert_eq!(review_pod(&no_execute, &selections, &s, &[]), Ok(()));
}

#[test]
fn a_pod_bound_by_name_to_a_claimed_node_is_refused_and_one_on_an_unmanaged_node_is_not() {
    let bh = split();
    let mut s = cluster();
    claim_n1_for_a(&mut s);
    let selections = [Selection::parse(&bh)];
    let d = review_pod(&pod("team-b", json!({"nodeName": "n-1"})), &selections, &s, &[]).expect_err("bound by name");
    assert_eq!((d.class.as_str(), d.field.as_str()), ("a", "spec.nodeName"));
    assert_eq!(review_pod(&pod("team-a", json!({"nodeName": "n-1"})), &selections, &s, &[]), Ok(()));
    assert_eq!(
        review_pod(&pod("team-b", json!({"nodeName": "n-3"})), &selections, &s, &[]),
        Ok(()),
        "not a claimed node"
    );
}

/// With the webhook served, the Node layer says node groups are kept at
/// admission, and a pod found across one anyway is named as having bypassed
/// it; without, the layer is as it was before there was a webhook.
#[test]
fn the_node_layer_says_whether_admission_keeps_the_groups_and_names_a_pod_that_bypassed_it() {
    use bulkhead::{
        crd::{Layer, NodeAdmission},
        evaluate::{evaluate, Config},
        status::{ApplyOutcome, BYPASSED},
    };
    let bh = split();
    let mut s = cluster();
    // n-1 is a's; a pod of b runs there (created while the webhook was down).
    claim_n1_for_a(&mut s);
    s.apply(&crate::fixtures::mk_pod("team-a", "a-1", &[("app", "a")], Some("n-1")));
    s.apply(&crate::fixtures::mk_pod("team-b", "crosser", &[("app", "b")], Some("n-1")));
    let node_layer = |admission: bool| {
        let mut config = Config::default();
        config.audit.admission = admission;
        let e = evaluate(&bh, &s, &config);
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH);
        let status = e.status(&bh, &ApplyOutcome::NotApplied, &now);
        status.layers.into_iter().find(|l| l.name == Layer::Node).expect("a Node layer")
    };
    let kept = node_layer(true);
    assert_eq!(kept.admission, Some(NodeAdmission::Enforced));
    let pair = kept.pairs.iter().find(|p| p.classes == ["a", "b"]).expect("a and b share n-1");
    assert!(pair.evidence.iter().all(|e| e.contains("team-b/crosser") && e.ends_with(BYPASSED)), "{:?}", pair.evidence);
    let audited = node_layer(false);
    assert_eq!(audited.admission, None, "only audited: nothing new in the status (an upgrade writes none)");
    assert!(audited.pairs.iter().flat_map(|p| &p.evidence).all(|e| !e.contains("bypassed")));
}
