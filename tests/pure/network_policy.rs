//! The NetworkPolicy in front of the sidecar (spec.workload.proxy.networkPolicy)
//! in the planner: the ports it admits, its order among the writes, no
//! re-apply at rest, exact withdrawal (field unset, Bulkhead gone, workload
//! moved), kept while the sidecars are, and the rules that name their field.
//! No cluster; no CNI either (the object is what is tested).

use bulkhead::{
    crd::Bulkhead,
    plan::{changes, teardown, Change, Plan, PlanConfig, WithheldConfig},
    select::Selection,
    snapshot::{ObjectKey, Snapshot},
};
use k8s_openapi::{
    api::{apps::v1::Deployment, networking::v1::NetworkPolicy},
    apimachinery::pkg::apis::meta::v1::Time,
};
use serde_json::{json, Value};

fn plan(bulkhead: &Bulkhead, snapshot: &Snapshot) -> Plan {
    let config = PlanConfig { proxy_image: Some("registry.example/bulkhead:test".into()), ..PlanConfig::default() };
    bulkhead::plan::plan(&Selection::parse(bulkhead), snapshot, &config)
}

fn bulkhead_in(namespace: &str, proxy: &str, capacity: u32) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: shop, uid: u-1}}\nspec:\n  dimension: Dependency\n  \
         pool: {{resource: requests, capacity: {capacity}}}\n  workload:\n    namespace: {namespace}\n    \
         selector: {{matchLabels: {{app: api}}, matchExpressions: []}}\n    proxy: {proxy}\n  classes:\n  \
         - {{name: checkout, reserved: 40}}\n  - {{name: search, reserved: 30, critical: true}}\n"
    ))
    .expect("fixture")
}

fn bulkhead(proxy: &str) -> Bulkhead {
    bulkhead_in("shop", proxy, 200)
}

const GUARDED: &str = "{port: 8081, upstreamPort: 8080, networkPolicy: {}}";

/// Namespaces `shop` and `shop-2`, Deployment `api` in `shop`.
fn shop(annotations: Value) -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(&crate::fixtures::mk_namespace("shop", &[]));
    s.apply(&crate::fixtures::mk_namespace("shop-2", &[]));
    s.apply(
        &serde_json::from_value::<Deployment>(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": 3, "annotations": annotations},
            "spec": {"selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
        }))
        .expect("deployment"),
    );
    s
}

fn all_changes(p: &Plan, snapshot: &Snapshot) -> Vec<Change> {
    changes("shop", p, snapshot, WithheldConfig::KeepLast)
}

fn lines(changes: &[Change]) -> Vec<String> {
    changes.iter().map(ToString::to_string).collect()
}

/// The policy as the API server hands it back: defaults, bookkeeping and
/// another manager's egress rule added.
fn as_stored(policy: &NetworkPolicy) -> NetworkPolicy {
    let mut v = serde_json::to_value(policy).expect("serialises");
    v["metadata"]["resourceVersion"] = json!("42");
    v["metadata"]["uid"] = json!("np-1");
    v["metadata"]["managedFields"] = json!([{"manager": "bulkhead", "operation": "Apply"}]);
    v["spec"]["egress"] = json!([{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]);
    serde_json::from_value(v).expect("a NetworkPolicy")
}

fn ports(policy: &NetworkPolicy) -> Value {
    serde_json::to_value(policy).expect("serialises")["spec"]["ingress"][0]["ports"].clone()
}

#[test]
fn the_policy_admits_other_pods_only_to_the_proxy_and_its_probes() {
    let snapshot = shop(json!({}));
    let p = plan(&bulkhead(GUARDED), &snapshot);
    assert!(p.is_valid(), "{:?}", p.errors);
    let policy = p.network_policy.policy.as_ref().expect("a policy");
    let v = serde_json::to_value(policy).expect("serialises");
    assert_eq!((v["apiVersion"].as_str(), v["kind"].as_str()), (Some("networking.k8s.io/v1"), Some("NetworkPolicy")));
    assert_eq!(
        (v["metadata"]["namespace"].as_str(), v["metadata"]["name"].as_str()),
        (Some("shop"), Some("bulkhead-shop"))
    );
    assert_eq!(v["metadata"]["labels"]["bulkhead.dev/bulkhead"], "shop");
    assert_eq!(v["metadata"]["labels"]["app.kubernetes.io/managed-by"], "bulkhead");
    assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "u-1");
    // The pods spec.workload.selector selects, as the API server would store the selector.
    assert_eq!(v["spec"]["podSelector"], json!({"matchLabels": {"app": "api"}}));
    assert_eq!(v["spec"]["policyTypes"], json!(["Ingress"]));
    // Any source, only these ports: the proxy's and the probes'; never upstreamPort 8080,
    // never the metrics kept on loopback.
    assert_eq!(
        v["spec"]["ingress"],
        json!([{"ports": [{"port": 8081, "protocol": "TCP"}, {"port": 9901, "protocol": "TCP"}]}])
    );
    assert!(v["spec"].get("egress").is_none(), "egress is left alone");

    // Written after the sidecar it admits traffic to.
    let all = lines(&all_changes(&p, &snapshot));
    let inject = all.iter().position(|c| c.starts_with("inject the proxy")).expect("injection");
    let apply = all.iter().position(|c| c == "apply NetworkPolicy shop/bulkhead-shop").expect("policy");
    assert!(inject < apply, "{all:?}");
}

#[test]
fn metrics_outside_the_pod_and_extra_ports_are_admitted_too() {
    let snapshot = shop(json!({}));
    let proxy = "{port: 8081, upstreamPort: 8080, adminPort: 9100, metricsAddress: '0.0.0.0:9102', \
                 networkPolicy: {extraPorts: [9090, 8081]}}";
    let p = plan(&bulkhead(proxy), &snapshot);
    assert!(p.is_valid(), "{:?}", p.errors);
    let admitted: Vec<i64> = ports(p.network_policy.policy.as_ref().expect("policy"))
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|port| port["port"].as_i64())
        .collect();
    // Each once, the proxy's first.
    assert_eq!(admitted, [8081, 9100, 9102, 9090]);
}

#[test]
fn an_unchanged_cluster_gets_no_policy_write_and_a_changed_selector_one() {
    let bh = bulkhead(GUARDED);
    let mut snapshot = shop(json!({}));
    let p = plan(&bh, &snapshot);
    snapshot.apply(&as_stored(p.network_policy.policy.as_ref().expect("policy")));
    let again = plan(&bh, &snapshot);
    let all = lines(&all_changes(&again, &snapshot));
    assert!(!all.iter().any(|c| c.contains("NetworkPolicy")), "no write at rest: {all:?}");

    // The selector changed: the policy follows it.
    let mut moved = bh.clone();
    if let Some(w) = moved.spec.workload.as_mut() {
        w.selector = serde_json::from_value(json!({"matchLabels": {"app": "api", "tier": "web"}})).expect("selector");
    }
    let all = lines(&all_changes(&plan(&moved, &snapshot), &snapshot));
    assert_eq!(all.iter().filter(|c| *c == "apply NetworkPolicy shop/bulkhead-shop").count(), 1, "{all:?}");
}

#[test]
fn unsetting_the_field_or_the_proxy_withdraws_only_this_bulkheads_policy() {
    let mut snapshot = shop(json!({"proxy.bulkhead.dev/shop": "abc"}));
    let written = plan(&bulkhead(GUARDED), &snapshot).network_policy.policy.expect("policy");
    snapshot.apply(&as_stored(&written));
    // Another Bulkhead's policy in the same namespace, and one nobody labelled: never touched.
    let mut theirs = written.clone();
    theirs.metadata.name = Some("bulkhead-other".into());
    theirs.metadata.labels.get_or_insert_default().insert("bulkhead.dev/bulkhead".into(), "other".into());
    snapshot.apply(&theirs);

    let unset = plan(&bulkhead("{port: 8081, upstreamPort: 8080}"), &snapshot);
    assert_eq!(unset.network_policy.policy, None);
    let all = lines(&all_changes(&unset, &snapshot));
    let deletes: Vec<&String> = all.iter().filter(|c| c.contains("NetworkPolicy")).collect();
    assert_eq!(deletes, ["delete NetworkPolicy shop/bulkhead-shop"], "{all:?}");

    // The whole proxy removed: the policy goes before the sidecar it admitted traffic to.
    let mut no_proxy = bulkhead(GUARDED);
    if let Some(w) = no_proxy.spec.workload.as_mut() {
        w.proxy = None;
    }
    let all = lines(&all_changes(&plan(&no_proxy, &snapshot), &snapshot));
    let delete = all.iter().position(|c| c == "delete NetworkPolicy shop/bulkhead-shop").expect("deleted");
    let withdraw = all.iter().position(|c| c.starts_with("withdraw the proxy from")).expect("withdrawn");
    assert!(delete < withdraw, "{all:?}");

    // The Bulkhead deleted: exactly its own policy, before its sidecars.
    let gone = lines(&teardown("shop", &snapshot));
    let policies: Vec<&String> = gone.iter().filter(|c| c.contains("NetworkPolicy")).collect();
    assert_eq!(policies, ["delete NetworkPolicy shop/bulkhead-shop"], "{gone:?}");
    let delete = gone.iter().position(|c| c.contains("NetworkPolicy")).expect("deleted");
    let withdraw = gone.iter().position(|c| c.starts_with("withdraw the proxy from")).expect("withdrawn");
    assert!(delete < withdraw, "{gone:?}");
}

#[test]
fn a_workload_moved_to_another_namespace_takes_its_policy_along() {
    let mut snapshot = shop(json!({}));
    snapshot.apply(&as_stored(&plan(&bulkhead(GUARDED), &snapshot).network_policy.policy.expect("policy")));
    let moved = plan(&bulkhead_in("shop-2", GUARDED, 200), &snapshot);
    let all = lines(&all_changes(&moved, &snapshot));
    assert!(all.contains(&"apply NetworkPolicy shop-2/bulkhead-shop".to_string()), "{all:?}");
    assert!(all.contains(&"delete NetworkPolicy shop/bulkhead-shop".to_string()), "{all:?}");
}

#[test]
fn while_the_sidecars_are_left_alone_so_is_the_policy() {
    // Unfunded from the start: no sidecar was ever injected, so no policy is written.
    let snapshot = shop(json!({}));
    let unfunded = bulkhead_in("shop", GUARDED, 10);
    let p = plan(&unfunded, &snapshot);
    assert!(p.network_policy.keep && p.network_policy.policy.is_none(), "{:?}", p.network_policy);
    assert!(p.network_policy.withheld.is_some());
    assert!(!lines(&all_changes(&p, &snapshot)).iter().any(|c| c.contains("NetworkPolicy")));
    // Unfunded later: the sidecars stay, and the policy with them.
    let mut written = shop(json!({"proxy.bulkhead.dev/shop": "abc"}));
    written.apply(&as_stored(&plan(&bulkhead(GUARDED), &written).network_policy.policy.expect("policy")));
    let all = lines(&all_changes(&plan(&unfunded, &written), &written));
    assert!(!all.iter().any(|c| c.contains("NetworkPolicy")), "{all:?}");
    // No image to inject: the same.
    let p = bulkhead::plan::plan(&Selection::parse(&bulkhead(GUARDED)), &written, &PlanConfig::default());
    assert!(p.network_policy.keep, "{:?}", p.network_policy);
    assert!(!lines(&all_changes(&p, &written)).iter().any(|c| c.contains("NetworkPolicy")));
}

/// The policy would select the pods of a workload an older Bulkhead's
/// sidecar holds, and close that sidecar's ports: none is written, and one
/// written before goes (a withdrawn policy only opens traffic).
#[test]
fn a_workload_held_by_another_bulkheads_sidecar_gets_no_policy() {
    let mut older = bulkhead("{port: 9081, upstreamPort: 8080}");
    older.metadata.name = Some("first".into());
    older.metadata.creation_timestamp = Some(Time("2026-01-01T00:00:00Z".parse().expect("time")));
    let mut younger = bulkhead(GUARDED);
    younger.metadata.creation_timestamp = Some(Time("2026-06-01T00:00:00Z".parse().expect("time")));
    let mut snapshot = shop(json!({"proxy.bulkhead.dev/first": "abc"}));
    snapshot.seniority.insert(&older.metadata);
    snapshot.seniority.insert(&younger.metadata);
    let before = plan(&bulkhead(GUARDED), &shop(json!({}))).network_policy.policy.expect("policy");
    snapshot.apply(&as_stored(&before));
    let p = plan(&younger, &snapshot);
    assert_eq!(p.network_policy.policy, None);
    let why = p.network_policy.withheld.as_deref().unwrap_or_default();
    assert!(why.contains("Deployment shop/api") && why.contains("first"), "{why}");
    let all = lines(&all_changes(&p, &snapshot));
    assert!(all.contains(&"delete NetworkPolicy shop/bulkhead-shop".to_string()), "{all:?}");
}

#[test]
fn each_rule_of_the_policy_names_its_field() {
    let snapshot = shop(json!({}));
    let cases = [
        (
            "{mode: Egress, routes: [{class: checkout, port: 15001, upstream: 'http://x:1'}], networkPolicy: {}}",
            "spec.workload.proxy.networkPolicy",
            "only mode Ingress",
        ),
        (
            "{port: 8081, upstreamPort: 8080, networkPolicy: {extraPorts: [8080]}}",
            "spec.workload.proxy.networkPolicy.extraPorts[0]",
            "upstreamPort",
        ),
        (
            "{port: 8081, upstreamPort: 8080, networkPolicy: {extraPorts: [9090, 9090]}}",
            "spec.workload.proxy.networkPolicy.extraPorts[1]",
            "twice",
        ),
        (
            "{port: 8081, upstreamPort: 8080, networkPolicy: {extraPorts: [0]}}",
            "spec.workload.proxy.networkPolicy.extraPorts[0]",
            "between 1 and 65535",
        ),
    ];
    for (proxy, field, says) in cases {
        let p = plan(&bulkhead(proxy), &snapshot);
        let error = p.errors.iter().find(|e| e.field == field);
        assert!(error.is_some_and(|e| e.message.contains(says)), "{proxy}: {:?}", p.errors);
        assert!(all_changes(&p, &snapshot).is_empty(), "an invalid spec writes nothing");
    }
    // No stray key of ours in the policy a person would not expect.
    let p = plan(&bulkhead(GUARDED), &snapshot);
    let key = ObjectKey::new("shop", "bulkhead-shop");
    assert_eq!(p.network_policy.policy.as_ref().map(|np| ObjectKey::from(&np.metadata)), Some(key));
}
