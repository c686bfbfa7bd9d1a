//! The NetworkPolicy's writes against a mocked API server: applied after the
//! sidecar it admits traffic to, under the operator's field manager, and on
//! deletion exactly the Bulkhead's own policy is deleted.

use kube::core::DeserializeGuard;
use serde_json::json;

use super::{bulkhead, echo, not_found, run, run_configured, shop, Kept, Seen};
use crate::{
    crd::{Bulkhead, FINALIZER},
    evaluate::Config,
    plan::ImageAllowList,
};

fn guarded() -> Bulkhead {
    bulkhead(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: pools, uid: u-1, resourceVersion: '7', generation: 1, finalizers: [{FINALIZER}]}}\n\
         spec:\n  dimension: Dependency\n  pool: {{resource: connections, capacity: 100}}\n  workload:\n    namespace: shop\n    selector: {{matchLabels: {{app: api}}}}\n\
         \x20   proxy: {{port: 8081, upstreamPort: 8080, image: 'registry.example/bulkhead:t', networkPolicy: {{}}}}\n\
         \x20 classes:\n  - {{name: checkout, reserved: 40}}\n  - {{name: search, reserved: 30, critical: true}}\n"
    ))
}

#[tokio::test]
async fn the_policy_is_applied_after_the_sidecar_under_the_operators_manager() {
    // The Bulkhead names its image: the operator must allow it.
    let mut config = Config::default();
    config.plan.proxy_image_allow = ImageAllowList::new(["registry.example/bulkhead:*"]);
    let answer = |s: &Seen| match s.method.as_str() {
        "GET" => not_found(),
        _ => echo(s),
    };
    let (result, seen) = run_configured(DeserializeGuard(Ok(guarded())), shop(), answer, &Kept::fresh(), config).await;
    assert!(result.is_ok(), "{result:?}");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    let policy = "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/bulkhead-pools";
    assert_eq!(
        lines,
        [
            "GET /api/v1/namespaces/shop/configmaps/bulkhead-pools".to_string(),
            "PATCH /api/v1/namespaces/shop/configmaps/bulkhead-pools".to_string(),
            "PATCH /apis/apps/v1/namespaces/shop/deployments/api".to_string(),
            format!("GET {policy}"),
            format!("PATCH {policy}"),
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools/status".to_string(),
        ]
    );
    let apply = &seen[4];
    assert!(apply.path.ends_with("?&force=true&fieldManager=bulkhead"), "{}", apply.path);
    assert_eq!(apply.body["metadata"]["labels"]["bulkhead.dev/bulkhead"], "pools");
    assert_eq!(apply.body["spec"]["podSelector"], json!({"matchLabels": {"app": "api"}}));
    assert_eq!(
        apply.body["spec"]["ingress"],
        json!([{"ports": [{"port": 8081, "protocol": "TCP"}, {"port": 9901, "protocol": "TCP"}]}])
    );
}

#[tokio::test]
async fn a_deleted_bulkhead_deletes_its_policy_and_no_other() {
    let mut bh = guarded();
    bh.metadata.deletion_timestamp = Some(super::now());
    let mut snapshot = shop();
    for (name, owner) in [("bulkhead-pools", "pools"), ("bulkhead-other", "other")] {
        snapshot.apply(
            &serde_json::from_value::<k8s_openapi::api::networking::v1::NetworkPolicy>(json!({
                "metadata": {"name": name, "namespace": "shop",
                             "labels": {"app.kubernetes.io/managed-by": "bulkhead", "bulkhead.dev/bulkhead": owner}},
                "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
            }))
            .expect("network policy"),
        );
    }
    let (result, seen) = run(DeserializeGuard(Ok(bh)), snapshot, |s| match s.method.as_str() {
        "DELETE" => (200, json!({"kind": "Status", "status": "Success"})),
        _ => echo(s),
    })
    .await;
    assert!(result.is_ok(), "{result:?}");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        [
            "DELETE /apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/bulkhead-pools",
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools",
        ]
    );
}
