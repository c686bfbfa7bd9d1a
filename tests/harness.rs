//! The test harness itself, against the real control plane: custom
//! resources work (the reflect2 patch), the real scheduler binds pods to fake
//! nodes, and ResourceQuota admission is enforced.

use std::time::Duration;

use bulkhead_testkit::{wait_for, ControlPlane, TestNamespace};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, ResourceQuota},
};
use kube::{
    api::{Api, DynamicObject, ListParams, PostParams},
    core::GroupVersionKind,
    discovery::ApiResource,
};
use serde_json::json;

#[tokio::test]
async fn custom_resources_can_be_created_and_read_back() {
    // Kubernetes 1.20 built with Go >= 1.18 and the stock reflect2 crashes
    // right here; the build patches it.
    let cp = ControlPlane::get();
    let suffix = bulkhead_testkit::unique_suffix();
    let group = format!("h{suffix}.example.com");
    cp.apply_yaml(&format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  names: {{kind: Widget, plural: widgets, singular: widget}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: integer}}}}}}
"#
    ));
    cp.kubectl(&["wait", "--for=condition=Established", &format!("crd/widgets.{group}"), "--timeout=30s"]);
    let ns = TestNamespace::new("harness-crd", &[]).await;
    let gvk = GroupVersionKind::gvk(&group, "v1", "Widget");
    let api: Api<DynamicObject> =
        Api::namespaced_with(cp.client().await, &ns.name, &ApiResource::from_gvk_with_plural(&gvk, "widgets"));
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3}
    }))
    .expect("widget");
    api.create(&PostParams::default(), &widget).await.expect("create a custom resource");
    let back = api.get("w1").await.expect("read it back");
    assert_eq!(back.data["spec"]["size"], 3);
    assert_eq!(api.list(&ListParams::default()).await.expect("list").items.len(), 1);
    cp.kubectl(&["delete", &format!("crd/widgets.{group}"), "--wait=false"]);
}

#[tokio::test]
async fn the_real_scheduler_binds_a_deployments_pods_to_fake_nodes() {
    let cp = ControlPlane::get();
    let ns = TestNamespace::new("harness-sched", &[]).await;
    let client = cp.client().await;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
            }
        }
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create deployment");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let nodes = wait_for("3 pods bound to nodes", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("app=web")).await.ok()?;
            let nodes: Vec<String> = list.items.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect();
            (nodes.len() == 3 && list.items.len() == 3).then_some(nodes)
        }
    })
    .await;
    for node in &nodes {
        assert!(node.starts_with("node-"), "pod bound to {node}, not to a fake node");
    }
}

#[tokio::test]
async fn resource_quota_admission_rejects_a_pod_over_quota() {
    let cp = ControlPlane::get();
    let ns = TestNamespace::new("harness-quota", &[]).await;
    let client = cp.client().await;
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "one-pod"},
        "spec": {"hard": {"pods": "1"}}
    }))
    .expect("quota");
    Api::<ResourceQuota>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &quota)
        .await
        .expect("create quota");
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    // The quota controller must have computed usage before admission enforces it.
    wait_for("quota status", Duration::from_secs(30), || {
        let quotas = quotas.clone();
        async move { quotas.get("one-pod").await.ok()?.status?.hard.map(|_| ()) }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}
        }))
        .expect("pod")
    };
    pods.create(&PostParams::default(), &pod("first")).await.expect("the first pod fits the quota");
    let err = pods.create(&PostParams::default(), &pod("second")).await.expect_err("the second pod exceeds it");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(status.message.contains("exceeded quota"), "{}", status.message);
        }
        other => panic!("expected a quota rejection, got {other}"),
    }
}
