//! What a Bulkhead may make the operator do (issue 44, "the operator must
//! not be a confused deputy"): nothing is written in a namespace without the
//! opt-in label, and no node without the claim opt-in label is claimed,
//! whatever the Bulkhead's selectors match. No cluster.

use bulkhead::{
    crd::Bulkhead,
    plan::{
        changes, teardown, Change, OptIn, Plan, PlanConfig, WithheldConfig, DEFAULT_NAMESPACE_OPT_IN,
        DEFAULT_NODE_OPT_IN, NODE_OPT_IN_KEY,
    },
    select::Selection,
    snapshot::Snapshot,
    status::{build_status, ApplyOutcome, NODE_GROUPS_READY, PLACED, PROXY_INJECTED, READY},
};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, ResourceQuota},
        networking::v1::NetworkPolicy,
    },
    apimachinery::pkg::apis::meta::v1::Time,
};
use serde_json::json;

use crate::fixtures::{mk_namespace, mk_node_with};

const ENABLED: (&str, &str) = ("bulkhead.dev/enabled", "true");
const CLAIMABLE: (&str, &str) = ("bulkhead.dev/claimable", "true");

/// The operator as the binary and the chart run it: both opt-ins required.
fn scoped() -> PlanConfig {
    PlanConfig {
        proxy_image: Some("registry.example/bulkhead:1.0".into()),
        namespace_opt_in: OptIn::parse(DEFAULT_NAMESPACE_OPT_IN).expect("the default parses"),
        node_opt_in: OptIn::parse_for_nodes(DEFAULT_NODE_OPT_IN).expect("the default parses"),
        ..PlanConfig::default()
    }
}

/// The library's default: no opt-in required (what the other pure tests plan with).
fn unscoped() -> PlanConfig {
    PlanConfig { proxy_image: Some("registry.example/bulkhead:1.0".into()), ..PlanConfig::default() }
}

fn plan(bulkhead: &Bulkhead, snapshot: &Snapshot, config: &PlanConfig) -> Plan {
    bulkhead::plan::plan(&Selection::parse(bulkhead), snapshot, config)
}

fn conditions(bulkhead: &Bulkhead, plan: &Plan) -> Vec<(String, String, String, String)> {
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    build_status(bulkhead, plan, None, &ApplyOutcome::NotApplied, None, &now)
        .conditions
        .into_iter()
        .map(|c| (c.type_, c.status, c.reason, c.message))
        .collect()
}

fn condition(bulkhead: &Bulkhead, plan: &Plan, type_: &str) -> (String, String, String) {
    let found = conditions(bulkhead, plan).into_iter().find(|c| c.0 == type_);
    let (_, status, reason, message) = found.unwrap_or_else(|| panic!("no {type_} condition"));
    (status, reason, message)
}

/// Everything a Bulkhead writes into namespaces: a pool config and sidecar
/// (with its NetworkPolicy) for Deployment shop/api, placement of it in class
/// checkout, and class reports's quota in namespace tenant-b.
fn everything() -> Bulkhead {
    serde_saphyr::from_str(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: shop, uid: u-1}\nspec:\n  dimension: Dependency\n  \
         pool: {resource: requests, capacity: 200}\n  workload:\n    namespace: shop\n    selector: {matchLabels: {app: api}}\n    \
         proxy: {mode: Ingress, port: 8081, upstreamPort: 8080, networkPolicy: {}}\n  classes:\n  \
         - name: checkout\n    reserved: 40\n    priority: 10\n    pods: {namespaceSelector: {matchLabels: {team: shop}}, podSelector: {matchLabels: {app: api}}}\n  \
         - name: reports\n    reserved: 30\n    pods: {namespaceSelector: {matchLabels: {team: tenant-b}}, podSelector: {matchLabels: {app: reports}}}\n    quota: {hard: {pods: \"4\"}}\n  \
         - {name: control-plane, reserved: 5, critical: true}\n",
    )
    .expect("fixture")
}

/// Namespaces shop and tenant-b (each opted in or not) and Deployment shop/api.
fn cluster(shop_opted_in: bool, tenant_opted_in: bool) -> Snapshot {
    let labels = |team: &'static str, opted: bool| {
        let mut l = vec![("team", team)];
        if opted {
            l.push(ENABLED);
        }
        l
    };
    let mut s = Snapshot::default();
    s.apply(&mk_namespace("shop", &labels("shop", shop_opted_in)));
    s.apply(&mk_namespace("tenant-b", &labels("tenant-b", tenant_opted_in)));
    s.apply(&deployment(json!({})));
    s
}

fn deployment(annotations: serde_json::Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "api", "namespace": "shop", "generation": 3, "annotations": annotations},
        "spec": {"selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
    }))
    .expect("deployment")
}

fn in_namespaces(changes: &[Change]) -> Vec<String> {
    changes.iter().filter(|c| c.namespace().is_some()).map(ToString::to_string).collect()
}

/// A namespace without the opt-in label gets nothing: no pool config, no
/// sidecar, no NetworkPolicy, no placement, no quota. Ready, ProxyInjected
/// and Placed name the namespace and the label to add; the cluster-scoped
/// PriorityClasses are still planned. Once labelled, everything is written.
#[test]
fn a_namespace_without_the_opt_in_label_gets_no_write_and_a_condition_names_it() {
    let bh = everything();
    // Without the requirement (the library's default), every write is planned:
    // what the requirement must hold back.
    let open = cluster(false, false);
    let all = changes("shop", &plan(&bh, &open, &unscoped()), &open, WithheldConfig::KeepLast);
    let written = in_namespaces(&all);
    for expected in [
        "apply ConfigMap shop/bulkhead-shop",
        "inject the proxy into Deployment shop/api",
        "apply NetworkPolicy shop/bulkhead-shop",
        "place Deployment shop/api in class checkout",
        "apply ResourceQuota tenant-b/bulkhead-shop.reports",
    ] {
        assert!(written.iter().any(|w| w == expected), "{expected} in {written:#?}");
    }

    let fenced = cluster(false, false);
    let p = plan(&bh, &fenced, &scoped());
    assert!(p.is_valid(), "{:?}", p.errors);
    assert!(p.config_map.is_none() && p.quotas.is_empty() && p.proxy.injections.is_empty());
    assert!(p.network_policy.policy.is_none());
    assert!(p.placement.as_ref().is_some_and(|pl| pl.workloads.is_empty()));
    let all = changes("shop", &p, &fenced, WithheldConfig::KeepLast);
    assert_eq!(in_namespaces(&all), Vec::<String>::new(), "nothing is written in a namespace: {all:#?}");
    assert!(all.iter().any(|c| matches!(c, Change::ApplyPriorityClass(_))), "cluster-scoped: {all:#?}");
    let namespaces: Vec<&str> = p.not_opted_in.iter().map(|n| n.namespace.as_str()).collect();
    assert_eq!(namespaces, ["shop", "tenant-b"]);

    let (status, reason, message) = condition(&bh, &p, READY);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NamespaceNotOptedIn"), "{message}");
    for part in [
        "shop (the pool config, the sidecars, the NetworkPolicy, placement of Deployment shop/api)",
        "tenant-b (ResourceQuota bulkhead-shop.reports)",
        "kubectl label namespace shop tenant-b bulkhead.dev/enabled=true",
        "left as it is",
    ] {
        assert!(message.contains(part), "Ready names {part:?}: {message}");
    }
    let (status, reason, message) = condition(&bh, &p, PROXY_INJECTED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NamespaceNotOptedIn"), "{message}");
    assert!(message.contains("kubectl label namespace shop"), "{message}");
    let (status, reason, message) = condition(&bh, &p, PLACED);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NamespaceNotOptedIn"), "{message}");
    assert!(message.contains("Deployment shop/api") && message.contains("bulkhead.dev/enabled=true"), "{message}");

    // Only tenant-b opted in: its quota is written, shop still gets nothing.
    let half = cluster(false, true);
    let p = plan(&bh, &half, &scoped());
    let written = in_namespaces(&changes("shop", &p, &half, WithheldConfig::KeepLast));
    assert_eq!(written, ["apply ResourceQuota tenant-b/bulkhead-shop.reports"]);
    let (_, reason, message) = condition(&bh, &p, READY);
    assert_eq!(reason, "NamespaceNotOptedIn");
    assert!(!message.contains("tenant-b"), "{message}");

    // Both opted in: everything, and Ready says nothing of opting in.
    let opted = cluster(true, true);
    let p = plan(&bh, &opted, &scoped());
    assert!(p.not_opted_in.is_empty());
    let written = in_namespaces(&changes("shop", &p, &opted, WithheldConfig::KeepLast));
    assert_eq!(written.len(), 5, "{written:#?}");
    assert_ne!(condition(&bh, &p, READY).1, "NamespaceNotOptedIn");
    assert_eq!(condition(&bh, &p, PROXY_INJECTED).1, "SidecarInjected");
}

/// A namespace that loses its label after the operator wrote there: what was
/// written is left as it is (no delete, no withdrawal, even when the
/// Bulkhead no longer wants it), until the namespace opts in again or the
/// Bulkhead is deleted, whose teardown removes everything it made.
#[test]
fn what_was_written_before_a_namespace_lost_its_label_is_left_as_it_is_until_teardown() {
    let managed = |name: &str, ns: &str| {
        json!({"name": name, "namespace": ns,
               "labels": {"app.kubernetes.io/managed-by": "bulkhead", "bulkhead.dev/bulkhead": "shop"}})
    };
    let written = |shop_opted_in: bool| {
        let mut s = cluster(shop_opted_in, shop_opted_in);
        s.apply(&deployment(json!({"proxy.bulkhead.dev/shop": "f1", "placement.bulkhead.dev/shop": "f2"})));
        s.apply(
            &serde_json::from_value::<ConfigMap>(json!({"metadata": managed("bulkhead-shop", "shop"), "data": {}}))
                .expect("config map"),
        );
        s.apply(
            &serde_json::from_value::<NetworkPolicy>(json!({"metadata": managed("bulkhead-shop", "shop"),
                                                           "spec": {"podSelector": {}}}))
            .expect("policy"),
        );
        s.apply(
            &serde_json::from_value::<ResourceQuota>(json!({"metadata": managed("bulkhead-shop.reports", "tenant-b"),
                                                           "spec": {"hard": {"pods": "4"}}}))
            .expect("quota"),
        );
        s
    };
    // The author has since dropped the workload, the placement and the quota.
    let bare: Bulkhead = serde_saphyr::from_str(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {name: shop, uid: u-1}\nspec:\n  dimension: Dependency\n  \
         pool: {resource: requests, capacity: 200}\n  classes:\n  - {name: checkout, reserved: 40}\n  - {name: reports, reserved: 30}\n",
    )
    .expect("fixture");

    // Opted in, all of it is withdrawn.
    let opted = written(true);
    let withdrawn = in_namespaces(&changes("shop", &plan(&bare, &opted, &scoped()), &opted, WithheldConfig::Remove));
    for expected in [
        "withdraw placement from Deployment shop/api",
        "withdraw the proxy from Deployment shop/api",
        "delete NetworkPolicy shop/bulkhead-shop",
        "delete ConfigMap shop/bulkhead-shop",
        "delete ResourceQuota tenant-b/bulkhead-shop.reports",
    ] {
        assert!(withdrawn.iter().any(|w| w == expected), "{expected} in {withdrawn:#?}");
    }

    // Label removed: not one of those.
    let fenced = written(false);
    let p = plan(&bare, &fenced, &scoped());
    let left = in_namespaces(&changes("shop", &p, &fenced, WithheldConfig::Remove));
    assert_eq!(left, Vec::<String>::new());

    // Deleting the Bulkhead removes everything it made, label or not.
    let torn: Vec<String> = teardown("shop", &fenced).iter().map(ToString::to_string).collect();
    assert_eq!(torn.len(), 5, "{torn:#?}");
}

fn node_groups(count: u32) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: shop, uid: u-1}}\nspec:\n  dimension: Criticality\n  \
         pool: {{resource: connections, capacity: 100}}\n  classes:\n  \
         - name: checkout\n    reserved: 40\n    pods: {{namespaceSelector: {{matchLabels: {{team: shop}}}}, podSelector: {{matchLabels: {{app: checkout}}}}}}\n    \
         nodes: {{selector: {{matchLabels: {{pool: general}}}}, count: {count}}}\n  \
         - {{name: admin, reserved: 10, critical: true}}\n"
    ))
    .expect("fixture")
}

/// Nodes `(name, labels, taints)`, all Ready, in a cluster with namespace shop.
fn nodes(list: &[(&str, serde_json::Value, serde_json::Value)]) -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(&mk_namespace("shop", &[("team", "shop"), ENABLED]));
    for (name, labels, taints) in list {
        s.apply(&mk_node_with(name, labels.clone(), taints.clone(), true));
    }
    s
}

fn node_changes(changes: &[Change]) -> Vec<String> {
    changes.iter().filter(|c| matches!(c, Change::Node(_))).map(ToString::to_string).collect()
}

/// The only node a class's selector matches lacks the claim opt-in label: it
/// is not labelled, not tainted, and NodeGroupsReady says how many matching
/// nodes lacked the label and how to add it. Labelled, it is claimed.
#[test]
fn a_node_without_the_claim_label_is_never_claimed_even_when_it_is_the_only_match() {
    let bh = node_groups(1);
    let alone = nodes(&[("n1", json!({"pool": "general"}), json!([]))]);
    // Without the requirement it would be claimed: what the requirement must hold back.
    let open = plan(&bh, &alone, &unscoped());
    assert_eq!(node_changes(&changes("shop", &open, &alone, WithheldConfig::Remove)).len(), 1);

    let p = plan(&bh, &alone, &scoped());
    let all = changes("shop", &p, &alone, WithheldConfig::Remove);
    assert_eq!(node_changes(&all), Vec::<String>::new(), "no write to the node: {all:#?}");
    assert!(p.node_groups.classes[0].nodes.is_empty());
    let (status, reason, message) = condition(&bh, &p, NODE_GROUPS_READY);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InsufficientNodes"), "{message}");
    assert!(message.contains("not opted in (1 without the label bulkhead.dev/claimable=true): n1"), "{message}");
    assert!(message.contains("kubectl label node NAME bulkhead.dev/claimable=true"), "{message}");

    // Three match, one opted in: only that one is a candidate.
    let some = nodes(&[
        ("n1", json!({"pool": "general"}), json!([])),
        ("n2", json!({"pool": "general", CLAIMABLE.0: CLAIMABLE.1}), json!([])),
        ("n3", json!({"pool": "general"}), json!([])),
    ]);
    let p = plan(&node_groups(2), &some, &scoped());
    assert_eq!(p.node_groups.classes[0].nodes, ["n2"]);
    assert_eq!(
        node_changes(&changes("shop", &p, &some, WithheldConfig::Remove)),
        ["claim Node n2 for class checkout (label and taint bulkhead.dev/shop=checkout:NoSchedule)"]
    );
    let (_, _, message) = condition(&node_groups(2), &p, NODE_GROUPS_READY);
    assert!(message.contains("not opted in (2 without the label bulkhead.dev/claimable=true): n1, n3"), "{message}");
}

/// A claim made before the node lost its opt-in label (or before the operator
/// required one) is kept while intact, with a note in NodeGroupsReady, but
/// never repaired: a broken one is released, and the node not claimed again.
#[test]
fn a_claim_on_a_node_that_lost_its_opt_in_is_kept_while_intact_and_never_repaired() {
    let bh = node_groups(1);
    let claim = json!([{"key": "bulkhead.dev/shop", "value": "checkout", "effect": "NoSchedule"}]);
    let kept = nodes(&[("n1", json!({"pool": "general", "bulkhead.dev/shop": "checkout"}), claim.clone())]);
    let p = plan(&bh, &kept, &scoped());
    assert_eq!(p.node_groups.classes[0].nodes, ["n1"]);
    assert_eq!(node_changes(&changes("shop", &p, &kept, WithheldConfig::Remove)), Vec::<String>::new());
    let (status, reason, message) = condition(&bh, &p, NODE_GROUPS_READY);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "NodesClaimed"), "{message}");
    assert!(message.contains("kept without the node opt-in label, claimed before: n1"), "{message}");

    // Someone removed the taint: repairing it would write to the node, so the
    // rest of the claim is released instead, and the node is not taken again.
    let broken = nodes(&[("n1", json!({"pool": "general", "bulkhead.dev/shop": "checkout"}), json!([]))]);
    let p = plan(&bh, &broken, &scoped());
    assert!(p.node_groups.classes[0].nodes.is_empty());
    assert_eq!(
        node_changes(&changes("shop", &p, &broken, WithheldConfig::Remove)),
        ["release Node n1 (remove label and taint bulkhead.dev/shop)"]
    );
    // The same claim on an opted-in node is repaired.
    let opted = nodes(&[(
        "n1",
        json!({"pool": "general", "bulkhead.dev/shop": "checkout", CLAIMABLE.0: CLAIMABLE.1}),
        json!([]),
    )]);
    let p = plan(&bh, &opted, &scoped());
    assert_eq!(
        node_changes(&changes("shop", &p, &opted, WithheldConfig::Remove)),
        ["claim Node n1 for class checkout (label and taint bulkhead.dev/shop=checkout:NoSchedule)"]
    );
}

/// The claim opt-in label is no claim: a node carrying it is not held by a
/// Bulkhead named `claimable`, no such Bulkhead may claim nodes, and no other
/// key under bulkhead.dev/ may be the opt-in.
#[test]
fn the_claim_opt_in_label_is_reserved() {
    assert!(DEFAULT_NODE_OPT_IN.starts_with(&format!("{NODE_OPT_IN_KEY}=")));
    let err = OptIn::parse_for_nodes("bulkhead.dev/mine=true").expect_err("reads as a claim");
    assert!(err.contains("claims"), "{err}");
    assert!(OptIn::parse_for_nodes("example.com/dedicated=ok").expect("valid").is_some());
    assert_eq!(OptIn::parse_for_nodes("none"), Ok(None));

    // Another Bulkhead sees the labelled node as free.
    let snapshot = nodes(&[("n1", json!({"pool": "general", CLAIMABLE.0: CLAIMABLE.1}), json!([]))]);
    let p = plan(&node_groups(1), &snapshot, &scoped());
    assert_eq!(p.node_groups.classes[0].nodes, ["n1"]);
    // A Bulkhead named after the label cannot place workloads.
    let mut named = node_groups(1);
    named.metadata.name = Some("claimable".into());
    let p = plan(&named, &snapshot, &scoped());
    assert!(p.errors.iter().any(|e| e.to_string().contains("\"claimable\" is reserved")), "{:?}", p.errors);
}
