//! The operator end to end: installed with the Helm chart, run with the
//! chart's RBAC against the real control plane.

use std::time::Duration;

use bulkhead::crd::Bulkhead;
use bulkhead_testkit::{
    audit, builders::pool_config, condition, operator::Operator, unique_suffix, wait_for, ControlPlane, TestNamespace,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, ResourceQuota},
};
use kube::{
    api::{Api, ListParams, Patch, PatchParams},
    Client,
};
use serde_json::json;

const SETTLE: Duration = Duration::from_secs(30);

fn deployment_yaml(ns: &str, name: &str, replicas: u32) -> String {
    bulkhead_testkit::workload::DeploymentYaml::new(ns, name, replicas).render()
}

/// A Fleet-scoped Bulkhead: 200 connections, 4 × 30 reserved + 80 shared,
/// over the `api` Deployment in `ns`; `checkout` has a quota in namespaces
/// labelled `quota-for={ns}`.
fn fleet_bulkhead(name: &str, ns: &str, checkout_reserved: u32) -> String {
    format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {name}}}
spec:
  dimension: Dependency
  pool: {{resource: connections, capacity: 200, scope: Fleet, sharedSurplus: 80}}
  workload: {{namespace: {ns}, selector: {{matchLabels: {{app: api}}}}}}
  layers: [Process]
  classes:
  - name: checkout
    reserved: {checkout_reserved}
    pods: {{namespaceSelector: {{matchLabels: {{quota-for: {ns}}}}}}}
    quota: {{hard: {{pods: "20", cpu: "8"}}}}
  - {{name: search, reserved: 30}}
  - {{name: reports, reserved: 30}}
  - {{name: control-plane, reserved: 30, critical: true}}
"#
    )
}

async fn wait_condition(client: &Client, name: &str, type_: &str, status: &str) -> (String, String) {
    wait_for(&format!("{name}: {type_}={status}"), SETTLE, || async move {
        let (s, reason, message) = condition(client, name, type_).await?;
        (s == status).then_some((reason, message))
    })
    .await
}

/// A Bulkhead from its parts, each inline YAML: `pool` a flow mapping,
/// `rest` any further spec lines (indented two spaces) ending with `classes:`.
fn bulkhead_yaml(name: &str, dimension: &str, pool: &str, rest: &str) -> String {
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: {dimension}\n  pool: {pool}\n{rest}"
    )
}

/// A test namespace labelled `team=<unique>`, and that label value.
async fn team_namespace(prefix: &str) -> (TestNamespace, String) {
    let ns = TestNamespace::new(prefix, &[]).await;
    let label = format!("{prefix}-{}", unique_suffix());
    ControlPlane::get().kubectl(&["label", "namespace", &ns.name, &format!("team={label}")]);
    (ns, label)
}

/// A Tenant Bulkhead whose classes each put a quota (`hard`, inline YAML) in
/// namespaces labelled `team={label}`.
fn quota_bulkhead(name: &str, label: &str, classes: &[(&str, &str)]) -> String {
    let classes: String = classes
        .iter()
        .map(|(class, hard)| {
            format!("  - {{name: {class}, reserved: 10, pods: {{namespaceSelector: {{matchLabels: {{team: {label}}}}}}}, quota: {{hard: {hard}}}}}\n")
        })
        .collect();
    bulkhead_yaml(name, "Tenant", "{resource: connections, capacity: 100}", &format!("  classes:\n{classes}"))
}

fn started() -> (&'static ControlPlane, &'static Operator) {
    (ControlPlane::get(), Operator::get())
}

#[tokio::test]
async fn the_chart_installs_and_the_operator_serves_health_and_metrics() {
    let (_, op) = started();
    assert_eq!(op.http_get("/healthz").map(|r| r.0), Some(200));
    assert_eq!(op.http_get("/readyz").map(|r| r.0), Some(200));
    let (code, body) = op.http_get("/metrics").expect("metrics answer");
    assert_eq!(code, 200);
    assert!(body.contains("bulkhead_reconciles_total"), "{body}");
}

#[tokio::test]
async fn a_bulkhead_gets_its_pool_config_and_quota_and_reports_funded() {
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-apply", &[]).await;
    cp.kubectl(&["label", "namespace", &ns.name, &format!("quota-for={}", ns.name)]);
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 2));
    let name = format!("apply-{}", unique_suffix());
    cp.apply_yaml(&fleet_bulkhead(&name, &ns.name, 30));

    let (reason, message) = wait_condition(&client, &name, "Funded", "True").await;
    assert_eq!(reason, "Funded");
    assert!(message.contains("30 + 30 + 30 + 30 = 120, plus shared surplus 80, is 200 of 200"), "{message}");
    wait_condition(&client, &name, "Ready", "True").await;
    let (_, lane) = wait_condition(&client, &name, "ControlPlaneLane", "True").await;
    assert!(lane.contains("control-plane"), "{lane}");

    let config = pool_config(&client, &ns.name, &name).await.expect("pool config written");
    assert_eq!(config.divided_by, 2, "Fleet pool split over 2 replicas");
    assert_eq!(config.capacity, 100);
    assert_eq!(config.shared_surplus, 40);
    let checkout = config.classes.iter().find(|c| c.name == "checkout").expect("checkout");
    assert_eq!((checkout.reserved, checkout.ceiling), (15, 55));
    assert_eq!(config.on_ceiling, bulkhead::pool_config::OnCeiling::Reject);

    let quota = Api::<ResourceQuota>::namespaced(client.clone(), &ns.name)
        .get(&format!("bulkhead-{name}.checkout"))
        .await
        .expect("quota written");
    let hard = quota.spec.and_then(|s| s.hard).expect("hard");
    assert_eq!(hard.get("pods").map(|q| q.0.as_str()), Some("20"));

    let bh = Api::<Bulkhead>::all(client.clone()).get(&name).await.expect("bulkhead");
    let status = bh.status.expect("status");
    let class = status.classes.iter().find(|c| c.name == "checkout").expect("class status");
    assert_eq!((class.ceiling, class.borrowable, class.left_to_others), (110, 80, 90));
    assert_eq!(status.pool.expect("pool").replicas, Some(2));
    cp.kubectl(&["delete", "bulkhead", &name]);
}

#[tokio::test]
async fn changing_a_reservation_or_scaling_the_workload_rewrites_the_config() {
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-rewrite", &[]).await;
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 2));
    let name = format!("rewrite-{}", unique_suffix());
    cp.apply_yaml(&fleet_bulkhead(&name, &ns.name, 30));
    wait_for("first config", SETTLE, || pool_config(&client, &ns.name, &name)).await;

    // 40 + 30 + 30 + 30 + 80 = 210 > 200: lower the surplus to keep it funded.
    let bulkheads: Api<Bulkhead> = Api::all(client.clone());
    bulkheads
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"pool": {"sharedSurplus": 70}, "classes": [
                {"name": "checkout", "reserved": 40},
                {"name": "search", "reserved": 30},
                {"name": "reports", "reserved": 30},
                {"name": "control-plane", "reserved": 30, "critical": true}
            ]}})),
        )
        .await
        .expect("patch reservation");
    let config = wait_for("config with checkout 40", SETTLE, || async {
        let c = pool_config(&client, &ns.name, &name).await?;
        (c.classes.iter().any(|k| k.name == "checkout" && k.reserved == 20)).then_some(c)
    })
    .await;
    assert_eq!(config.shared_surplus, 35);

    Api::<Deployment>::namespaced(client.clone(), &ns.name)
        .patch("api", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .expect("scale");
    let config = wait_for("config divided by 4", SETTLE, || async {
        let c = pool_config(&client, &ns.name, &name).await?;
        (c.divided_by == 4).then_some(c)
    })
    .await;
    assert_eq!(config.capacity, 50);
    assert_eq!(config.classes.iter().find(|c| c.name == "checkout").map(|c| c.reserved), Some(10));
    cp.kubectl(&["delete", "bulkhead", &name]);
}

#[tokio::test]
async fn an_unfundable_bulkhead_says_why_and_the_others_keep_working() {
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-unfunded", &[]).await;
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 1));
    let bad = format!("unfunded-{}", unique_suffix());
    cp.apply_yaml(&bulkhead_yaml(
        &bad,
        "Tenant",
        "{resource: connections, capacity: 200, sharedSurplus: 80}",
        &format!(
            "  workload: {{namespace: {}, selector: {{matchLabels: {{app: api}}}}}}\n  classes:\n  - {{name: a, reserved: 100}}\n  - {{name: b, reserved: 50}}\n",
            ns.name
        ),
    ));
    let good = format!("funded-{}", unique_suffix());
    cp.apply_yaml(&fleet_bulkhead(&good, &ns.name, 30));

    let (reason, message) = wait_condition(&client, &bad, "Funded", "False").await;
    assert_eq!(reason, "Unfundable");
    assert!(
        message.contains("reserved 100 + 50 = 150, plus shared surplus 80, is 230: 30 more than the capacity of 200"),
        "{message}"
    );
    let (reason, _) = wait_condition(&client, &bad, "Ready", "False").await;
    assert_eq!(reason, "NotFunded");
    assert!(pool_config(&client, &ns.name, &bad).await.is_none(), "no config for an unfunded design");

    wait_condition(&client, &good, "Ready", "True").await;
    assert!(pool_config(&client, &ns.name, &good).await.is_some());
    cp.kubectl(&["delete", "bulkhead", &bad, &good]);
}

#[tokio::test]
async fn a_bulkhead_the_types_cannot_read_is_reported_and_does_not_stall_others() {
    let (cp, _) = started();
    let client = cp.client().await;
    let broken = format!("broken-{}", unique_suffix());
    // The schema refuses 2^33 (its maximum is the u32's), but an object stored
    // before the maximum existed can hold it. Recreate that: lift the maximum,
    // store the object, put the maximum back.
    let broken_yaml = bulkhead_yaml(
        &broken,
        "Tenant",
        "{resource: connections, capacity: 8589934592}",
        "  classes: [{name: a, reserved: 1}]\n",
    );
    let maximum = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/pool/properties/capacity/maximum";
    let patch_crd = |op: &str| {
        let value = if op == "add" { r#","value":4294967295"# } else { "" };
        cp.kubectl(&[
            "patch",
            "crd",
            "bulkheads.bulkhead.dev",
            "--type=json",
            "-p",
            &format!(r#"[{{"op":"{op}","path":"{maximum}"{value}}}]"#),
        ]);
    };
    patch_crd("remove");
    wait_for("the CRD without the maximum is served", SETTLE, || async {
        cp.try_apply_yaml(&broken_yaml).0.then_some(())
    })
    .await;
    patch_crd("add");
    let fine = format!("fine-{}", unique_suffix());
    cp.apply_yaml(&bulkhead_yaml(
        &fine,
        "Tenant",
        "{resource: connections, capacity: 10}",
        "  classes: [{name: a, reserved: 1, critical: true}]\n",
    ));
    // Read it untyped: the typed client cannot decode it either.
    let cp_ = cp;
    let (reason, message) = wait_for("broken: Ready=False", SETTLE, || async {
        let out = cp_.kubectl(&["get", "bulkhead", &broken, "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}|{.status.conditions[?(@.type=="Ready")].reason}|{.status.conditions[?(@.type=="Ready")].message}"#]);
        let mut parts = out.splitn(3, '|');
        let (status, reason, message) = (parts.next()?, parts.next()?, parts.next()?);
        (status == "False").then(|| (reason.to_string(), message.to_string()))
    })
    .await;
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("spec.pool.capacity"), "the field is named: {message}");
    wait_condition(&client, &fine, "Ready", "True").await;
    cp.kubectl(&["delete", "bulkhead", &broken, &fine]);
}

#[tokio::test]
async fn planner_rules_the_schema_cannot_state_are_reported_with_the_field() {
    let (cp, _) = started();
    let client = cp.client().await;
    let name = format!("ceiling-{}", unique_suffix());
    cp.apply_yaml(&bulkhead_yaml(
        &name,
        "Dependency",
        "{resource: connections, capacity: 200, sharedSurplus: 80}",
        "  classes:\n  - {name: a, reserved: 30, ceiling: 150}\n  - {name: b, reserved: 30}\n",
    ));
    let (reason, message) = wait_condition(&client, &name, "Ready", "False").await;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.classes[0].ceiling: 150 exceeds reserved + sharedSurplus (30 + 80 = 110)"),
        "{message}"
    );
    cp.kubectl(&["delete", "bulkhead", &name]);
}

#[test]
fn the_schema_rejects_bad_names_and_duplicate_classes() {
    let cp = ControlPlane::get();
    Operator::get();
    let attempt = |yaml: &str| {
        let (ok, _, err) = cp.try_apply_yaml(yaml);
        (ok, err)
    };
    let (ok, err) = attempt(&bulkhead_yaml(
        "badname",
        "Tenant",
        "{resource: connections, capacity: 10}",
        "  classes: [{name: Bad_Name, reserved: 1}]\n",
    ));
    assert!(!ok && err.contains("spec.classes.name"), "{err}");
    let (ok, err) = attempt(&bulkhead_yaml(
        "dupes",
        "Tenant",
        "{resource: connections, capacity: 10}",
        "  classes: [{name: a, reserved: 1}, {name: a, reserved: 2}]\n",
    ));
    assert!(!ok && err.contains("Duplicate value"), "{err}");
    let (ok, err) = attempt(&bulkhead_yaml(
        "negative",
        "Sideways",
        "{resource: connections, capacity: -1}",
        "  classes: [{name: a, reserved: 1}]\n",
    ));
    assert!(!ok && err.contains("spec.dimension") && err.contains("spec.pool.capacity"), "{err}");
}

#[tokio::test]
async fn two_quotas_in_one_namespace_are_reported_instead_of_written() {
    let (cp, _) = started();
    let client = cp.client().await;
    let (ns, label) = team_namespace("core-collide").await;
    let name = format!("collide-{}", unique_suffix());
    cp.apply_yaml(&quota_bulkhead(&name, &label, &[("a", r#"{pods: "5"}"#), ("b", r#"{pods: "5"}"#)]));
    let (reason, message) = wait_condition(&client, &name, "QuotasScoped", "False").await;
    assert_eq!(reason, "QuotaNamespaceShared");
    assert!(message.contains(&format!("namespace {} is selected by the quotas of a and b", ns.name)), "{message}");
    let quotas =
        Api::<ResourceQuota>::namespaced(client.clone(), &ns.name).list(&ListParams::default()).await.expect("list");
    assert!(quotas.items.is_empty(), "no misleading quota written");
    cp.kubectl(&["delete", "bulkhead", &name]);
}

#[tokio::test]
async fn deleting_a_bulkhead_removes_what_it_made_and_nothing_else() {
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-delete", &[]).await;
    cp.kubectl(&["label", "namespace", &ns.name, &format!("quota-for={}", ns.name)]);
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 1));
    // Objects someone else made, in the same namespace.
    cp.kubectl(&["-n", &ns.name, "create", "configmap", "theirs", "--from-literal=k=v"]);
    cp.kubectl(&["-n", &ns.name, "create", "quota", "their-quota", "--hard=pods=50"]);
    let name = format!("delete-{}", unique_suffix());
    cp.apply_yaml(&fleet_bulkhead(&name, &ns.name, 30));
    wait_condition(&client, &name, "Ready", "True").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let rqs: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    assert!(cms.get(&format!("bulkhead-{name}")).await.is_ok());
    assert!(rqs.get(&format!("bulkhead-{name}.checkout")).await.is_ok());

    cp.kubectl(&["delete", "bulkhead", &name]);
    wait_for("children garbage-collected", SETTLE, || async {
        let cm_gone = cms.get_opt(&format!("bulkhead-{name}")).await.ok()?.is_none();
        let rq_gone = rqs.get_opt(&format!("bulkhead-{name}.checkout")).await.ok()?.is_none();
        (cm_gone && rq_gone).then_some(())
    })
    .await;
    assert!(cms.get("theirs").await.is_ok(), "someone else's ConfigMap stays");
    assert!(rqs.get("their-quota").await.is_ok(), "someone else's quota stays");
    assert!(Api::<Deployment>::namespaced(client, &ns.name).get("api").await.is_ok(), "the workload stays");
}

#[tokio::test]
async fn an_unchanged_cluster_gets_no_writes() {
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-rest", &[]).await;
    cp.kubectl(&["label", "namespace", &ns.name, &format!("quota-for={}", ns.name)]);
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 3));
    let name = format!("rest-{}", unique_suffix());
    cp.apply_yaml(&fleet_bulkhead(&name, &ns.name, 30));
    wait_condition(&client, &name, "Ready", "True").await;
    // Let the reconcile that follows the status write happen.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let rv = |m: &kube::api::ObjectMeta| m.resource_version.clone().unwrap_or_default();
    let bulkheads: Api<Bulkhead> = Api::all(client.clone());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let rqs: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    let before = (
        rv(&bulkheads.get(&name).await.expect("bh").metadata),
        rv(&cms.get(&format!("bulkhead-{name}")).await.expect("cm").metadata),
        rv(&rqs.get(&format!("bulkhead-{name}.checkout")).await.expect("rq").metadata),
    );
    let since = audit::now_rfc3339();
    // A change the planner reads (a namespace label) re-plans every Bulkhead.
    cp.kubectl(&["label", "namespace", &ns.name, "touched=yes"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = (
        rv(&bulkheads.get(&name).await.expect("bh").metadata),
        rv(&cms.get(&format!("bulkhead-{name}")).await.expect("cm").metadata),
        rv(&rqs.get(&format!("bulkhead-{name}.checkout")).await.expect("rq").metadata),
    );
    assert_eq!(before, after, "resourceVersions moved at rest");
    let writes: Vec<_> = audit::writes_by(&cp.dir, bulkhead_testkit::operator::USER, &since)
        .into_iter()
        .filter(|w| w.uri.contains(&name) || w.uri.contains(&format!("/namespaces/{}/", ns.name)))
        .collect();
    assert!(writes.is_empty(), "the operator wrote at rest: {writes:#?}");
    cp.kubectl(&["delete", "bulkhead", &name]);
}

#[tokio::test]
async fn the_examples_apply_and_report_status() {
    let (cp, _) = started();
    let client = cp.client().await;
    let root = bulkhead_testkit::repo_root();
    cp.kubectl(&["apply", "-f", &root.join("examples/cluster").display().to_string()]);
    cp.kubectl(&["apply", "-f", &root.join("examples/four-dependencies.yaml").display().to_string()]);
    cp.kubectl(&["apply", "-f", &root.join("examples/control-plane-lane.yaml").display().to_string()]);
    let names: Vec<String> = ["four-dependencies", "control-plane-lane"]
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(root.join(format!("examples/{f}.yaml"))).expect("example");
            let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("example YAML");
            let bh: Bulkhead = docs
                .into_iter()
                .find_map(|v| serde_json::from_value::<Bulkhead>(v).ok())
                .expect("a Bulkhead in the example");
            bh.metadata.name.expect("named")
        })
        .collect();
    let (_, message) = wait_condition(&client, &names[0], "Funded", "True").await;
    assert!(message.contains("is 200 of 200"), "{message}");
    let (_, message) = wait_condition(&client, &names[1], "Funded", "True").await;
    assert!(message.contains("40 + 30 + 10 + 5 = 85, plus shared surplus 115, is 200 of 200"), "{message}");
    wait_condition(&client, &names[1], "ControlPlaneLane", "True").await;
    let table = cp.kubectl(&["get", "bulkheads", &names[1]]);
    assert!(table.contains("Operation") && table.contains("True"), "{table}");

    cp.kubectl(&["apply", "-f", &root.join("examples/tenants.yaml").display().to_string()]);
    wait_condition(&client, "tenants", "Ready", "True").await;
    for tenant in ["tenant-a", "tenant-b", "tenant-c"] {
        let quota = wait_for(&format!("quota in {tenant}"), SETTLE, || {
            let rqs: Api<ResourceQuota> = Api::namespaced(client.clone(), tenant);
            async move { rqs.get(&format!("bulkhead-tenants.{tenant}")).await.ok() }
        })
        .await;
        assert!(quota.spec.and_then(|s| s.hard).is_some_and(|h| h.contains_key("pods")));
    }
    let config = pool_config(&client, "shop", "tenants").await.expect("tenants pool config");
    assert_eq!(config.divided_by, 3, "Fleet pool split over shop/api's 3 replicas");
}

fn isolated(bh: &Bulkhead) -> Option<(String, String)> {
    let status = bh.status.as_ref()?;
    if status.observed_generation != bh.metadata.generation {
        return None;
    }
    status.conditions.iter().find(|c| c.type_ == "Isolated").map(|c| (c.status.clone(), c.message.clone()))
}

#[tokio::test]
async fn the_audit_sees_classes_share_a_node_and_flips_within_two_seconds_when_they_part() {
    let (cp, _) = started();
    let client = cp.client().await;
    let suffix = unique_suffix();
    let ns = TestNamespace::new("audit", &[]).await;
    cp.kubectl(&["label", "namespace", &ns.name, &format!("audit={suffix}")]);
    let (node_a, node_b) = (format!("audit-{suffix}-a"), format!("audit-{suffix}-b"));
    cp.add_node(&node_a, "zone-a", &[("audit", &suffix)]);
    for app in ["checkout", "reports"] {
        cp.apply_yaml(&format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {app}, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: {app}}}}}
  template:
    metadata: {{labels: {{app: {app}}}}}
    spec:
      nodeSelector: {{audit: "{suffix}"}}
      containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]
"#,
            ns = ns.name
        ));
    }
    let name = format!("audit-{suffix}");
    cp.apply_yaml(&format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {name}}}
spec:
  dimension: Dependency
  layers: [Node]
  pool: {{resource: connections, capacity: 100}}
  classes:
  - {{name: checkout, reserved: 10, critical: true, pods: {{namespaceSelector: {{matchLabels: {{audit: "{suffix}"}}}}, podSelector: {{matchLabels: {{app: checkout}}}}}}}}
  - {{name: reports, reserved: 10, pods: {{namespaceSelector: {{matchLabels: {{audit: "{suffix}"}}}}, podSelector: {{matchLabels: {{app: reports}}}}}}}}
"#
    ));
    let bulkheads: Api<Bulkhead> = Api::all(client.clone());
    let message = wait_for("Isolated=False naming the shared node", SETTLE, || async {
        let (status, message) = isolated(&bulkheads.get(&name).await.ok()?)?;
        (status == "False").then_some(message)
    })
    .await;
    assert!(message.contains(&format!("Node shared by checkout and reports: node {node_a} runs")), "{message}");
    let bh = bulkheads.get(&name).await.expect("bulkhead");
    let node_layer = bh
        .status
        .expect("status")
        .layers
        .into_iter()
        .find(|l| l.name == bulkhead::crd::Layer::Node)
        .expect("Node layer");
    assert_eq!(node_layer.state, bulkhead::crd::LayerState::Shared);

    // Move reports away: a second node, the first cordoned, reports' pods recreated.
    cp.add_node(&node_b, "zone-b", &[("audit", &suffix)]);
    cp.kubectl(&["cordon", &node_a]);
    // No kubelet runs to confirm the old pods' termination: force them out, as it would.
    cp.kubectl(&["-n", &ns.name, "delete", "pods", "-l", "app=reports", "--force", "--grace-period=0"]);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns.name);
    let deadline = std::time::Instant::now() + SETTLE;
    let both_on_b = || async {
        let list = pods.list(&ListParams::default().labels("app=reports")).await.expect("list pods");
        let on_b =
            list.items.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_b.as_str()));
        list.items.len() == 2 && on_b.count() == 2
    };
    let mut bound_at = None;
    let mut not_yet_at = std::time::Instant::now();
    let flipped_at = loop {
        assert!(std::time::Instant::now() < deadline, "Isolated did not turn True after reports moved");
        if bound_at.is_none() {
            let listed_at = std::time::Instant::now();
            if both_on_b().await {
                bound_at = Some(listed_at);
            } else {
                not_yet_at = listed_at;
            }
        }
        let bh = bulkheads.get(&name).await.expect("bulkhead");
        if isolated(&bh).is_some_and(|(status, _)| status == "True") {
            break std::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Bound and flipped between one list and the status read after it: the
    // pods were bound after `not_yet_at`, which bounds the delay from above.
    if bound_at.is_none() {
        assert!(both_on_b().await, "Isolated turned True before reports' pods were bound to the second node");
        bound_at = Some(not_yet_at);
    }
    let bound_at = bound_at.expect("set above");
    let took = flipped_at.duration_since(bound_at);
    eprintln!("figure: Isolated flipped {took:?} after the pods were seen bound");
    assert!(took < Duration::from_secs(2), "Isolated flipped {took:?} after the pods were bound");
    cp.kubectl(&["delete", "bulkhead", &name]);
    cp.kubectl(&["delete", "node", &node_a, &node_b, "--wait=false"]);
}

#[tokio::test]
async fn a_write_the_api_server_rejects_is_reported_and_retried_with_backoff() {
    let (cp, op) = started();
    let client = cp.client().await;
    let (_ns, label) = team_namespace("core-rejected").await;
    let name = format!("rejected-{}", unique_suffix());
    // Neither the schema nor the planner knows which quota resource names the API
    // server accepts: "not-a-resource" is a valid name, but no standard resource.
    cp.apply_yaml(&quota_bulkhead(&name, &label, &[("a", r#"{"not-a-resource": "1"}"#)]));
    let (reason, message) = wait_condition(&client, &name, "Ready", "False").await;
    assert_eq!(reason, "ApplyFailed");
    assert!(message.contains("not-a-resource"), "{message}");
    // The error is counted once the reconcile returns, just after it wrote the status.
    wait_for("the rejected write counted as an api error", Duration::from_secs(5), || async {
        let (_, metrics) = op.http_get("/metrics")?;
        metrics.contains(r#"bulkhead_reconcile_errors_total{error="api"}"#).then_some(())
    })
    .await;
    cp.kubectl(&["delete", "bulkhead", &name]);
}

#[tokio::test]
async fn an_object_of_the_same_name_made_by_someone_else_is_not_taken_over() {
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-theirs", &[]).await;
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 1));
    let name = format!("theirs-{}", unique_suffix());
    cp.kubectl(&["-n", &ns.name, "create", "configmap", &format!("bulkhead-{name}"), "--from-literal=mine=yes"]);
    cp.apply_yaml(&fleet_bulkhead(&name, &ns.name, 30));
    let (reason, message) = wait_condition(&client, &name, "Ready", "False").await;
    assert_eq!(reason, "ApplyFailed");
    assert!(message.contains("not taking it over"), "{message}");
    cp.kubectl(&["delete", "bulkhead", &name, "--timeout=30s"]);
    let cm =
        Api::<ConfigMap>::namespaced(client, &ns.name).get(&format!("bulkhead-{name}")).await.expect("still there");
    assert_eq!(cm.data.and_then(|d| d.get("mine").cloned()).as_deref(), Some("yes"), "their ConfigMap is untouched");
    assert!(!cm.metadata.labels.unwrap_or_default().contains_key("bulkhead.dev/bulkhead"));
}

/// spec.workload.proxy.networkPolicy on the real API server: the policy it
/// holds admits only the sidecar's ports, nothing is written at rest, and
/// unsetting the field and deleting the Bulkhead each remove exactly it.
/// The test nodes' CNI enforces no NetworkPolicy: the object is what is
/// checked, never a dropped packet.
#[tokio::test]
async fn a_network_policy_admits_only_the_sidecars_ports_and_is_withdrawn_exactly() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let (cp, _) = started();
    let client = cp.client().await;
    let ns = TestNamespace::new("core-netpol", &[]).await;
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 1));
    // A policy someone else made in the same namespace.
    cp.apply_yaml(&format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{name: theirs, namespace: {}}}\n\
         spec: {{podSelector: {{}}, policyTypes: [Ingress]}}\n",
        ns.name
    ));
    let name = format!("netpol-{}", unique_suffix());
    let proxy = "{port: 8081, upstreamPort: 8080, metricsAddress: '0.0.0.0:9902', networkPolicy: {extraPorts: [9090]}}";
    cp.apply_yaml(&bulkhead_yaml(
        &name,
        "Dependency",
        "{resource: connections, capacity: 100}",
        &format!(
            "  workload: {{namespace: {}, selector: {{matchLabels: {{app: api}}}}, proxy: {proxy}}}\n  classes:\n  \
             - {{name: checkout, reserved: 60}}\n  - {{name: ops, reserved: 10, critical: true}}\n",
            ns.name
        ),
    ));
    wait_condition(&client, &name, "Ready", "True").await;
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), &ns.name);
    let ours = format!("bulkhead-{name}");
    let policy = wait_for("the NetworkPolicy", SETTLE, || async { policies.get_opt(&ours).await.ok().flatten() }).await;
    let v = serde_json::to_value(&policy).expect("serialises");
    assert_eq!(v["spec"]["podSelector"], json!({"matchLabels": {"app": "api"}}));
    assert_eq!(v["spec"]["policyTypes"], json!(["Ingress"]));
    // From anywhere, to the proxy, the probes, the metrics and the extra port; never 8080.
    let tcp = |port: u16| json!({"port": port, "protocol": "TCP"});
    assert_eq!(v["spec"]["ingress"], json!([{"ports": [tcp(8081), tcp(9901), tcp(9902), tcp(9090)]}]));
    assert_eq!(v["metadata"]["labels"]["bulkhead.dev/bulkhead"], json!(name));
    let owner = &v["metadata"]["ownerReferences"][0];
    assert_eq!((owner["kind"].as_str(), owner["name"].as_str()), (Some("Bulkhead"), Some(name.as_str())));

    // At rest: the policy the server holds is the one planned, so nothing is written.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rv = |p: &NetworkPolicy| p.metadata.resource_version.clone().unwrap_or_default();
    let before = rv(&policies.get(&ours).await.expect("policy"));
    let since = audit::now_rfc3339();
    cp.kubectl(&["label", "namespace", &ns.name, "touched=yes"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rv(&policies.get(&ours).await.expect("policy")), before, "the policy was rewritten at rest");
    let writes: Vec<_> = audit::writes_by(&cp.dir, bulkhead_testkit::operator::USER, &since)
        .into_iter()
        .filter(|w| w.uri.contains("/networkpolicies"))
        .collect();
    assert!(writes.is_empty(), "the operator wrote policies at rest: {writes:#?}");

    // The field unset: the policy goes, the sidecar stays.
    cp.kubectl(&[
        "patch",
        "bulkhead",
        &name,
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/workload/proxy/networkPolicy"}]"#,
    ]);
    wait_for("the policy withdrawn", SETTLE, || async { policies.get_opt(&ours).await.ok()?.is_none().then_some(()) })
        .await;
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns.name).get("api").await.expect("api");
    let containers = deployment.spec.and_then(|s| s.template.spec).map(|s| s.containers).unwrap_or_default();
    assert!(containers.iter().any(|c| c.name == "bulkhead-proxy"), "the sidecar stays");

    // Set again, then the Bulkhead deleted: it goes with the Bulkhead, theirs stays.
    cp.kubectl(&[
        "patch",
        "bulkhead",
        &name,
        "--type=merge",
        "-p",
        r#"{"spec": {"workload": {"proxy": {"networkPolicy": {}}}}}"#,
    ]);
    wait_for("the policy back", SETTLE, || async { policies.get_opt(&ours).await.ok().flatten() }).await;
    cp.kubectl(&["delete", "bulkhead", &name, "--timeout=30s"]);
    wait_for("the policy deleted with the Bulkhead", SETTLE, || async {
        policies.get_opt(&ours).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(policies.get("theirs").await.is_ok(), "someone else's policy stays");
}

/// Issue 44, the confused deputy, against the real API server and the
/// chart's RBAC: a Bulkhead that names a namespace without the opt-in label
/// (the operator's default `--namespace-opt-in bulkhead.dev/enabled=true`)
/// gets nothing written there (no pool config, no quota, no sidecar, no
/// placement: the audit log shows no write by the operator in it) and Ready,
/// ProxyInjected and Placed name the namespace and the label. Opted in,
/// everything is written; the label removed again, what was written stays
/// untouched even when the Bulkhead changes; deleting the Bulkhead still
/// withdraws it.
#[tokio::test]
async fn a_namespace_that_has_not_opted_in_is_left_untouched_and_named() {
    use bulkhead_testkit::NAMESPACE_OPT_IN;
    let (cp, _) = started();
    let client = cp.client().await;
    let suffix = unique_suffix();
    let ns = TestNamespace::not_opted_in("core-optin", &[("team", &suffix)]).await;
    cp.apply_yaml(&deployment_yaml(&ns.name, "api", 1));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let generation = deployments.get("api").await.expect("api").metadata.generation;
    let name = format!("optin-{suffix}");
    let bulkhead = |reserved: u32| {
        bulkhead_yaml(
            &name,
            "Dependency",
            "{resource: connections, capacity: 100}",
            &format!(
                "  workload: {{namespace: {ns}, selector: {{matchLabels: {{app: api}}}}, proxy: {{port: 8081, upstreamPort: 8080}}}}\n  \
                 classes:\n  \
                 - {{name: checkout, reserved: {reserved}, priority: 10, pods: {{namespaceSelector: {{matchLabels: {{team: \"{suffix}\"}}}}, podSelector: {{matchLabels: {{app: api}}}}}}, quota: {{hard: {{pods: \"4\"}}}}}}\n  \
                 - {{name: ops, reserved: 10, critical: true}}\n",
                ns = ns.name
            ),
        )
    };
    let since = audit::now_rfc3339();
    cp.apply_yaml(&bulkhead(40));

    let (reason, message) = wait_condition(&client, &name, "Ready", "False").await;
    assert_eq!(reason, "NamespaceNotOptedIn", "{message}");
    assert!(message.contains(&format!("kubectl label namespace {} {NAMESPACE_OPT_IN}", ns.name)), "{message}");
    for held in ["the pool config", "the sidecars", &format!("ResourceQuota bulkhead-{name}.checkout")] {
        assert!(message.contains(held), "Ready names {held}: {message}");
    }
    let (reason, message) = wait_condition(&client, &name, "ProxyInjected", "False").await;
    assert_eq!(reason, "NamespaceNotOptedIn", "{message}");
    let (reason, message) = wait_condition(&client, &name, "Placed", "False").await;
    assert_eq!(reason, "NamespaceNotOptedIn", "{message}");
    assert!(message.contains(&format!("Deployment {}/api", ns.name)), "{message}");
    // Nothing in the namespace: no object, no write request of any kind.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let in_ns = |since: &str| -> Vec<audit::Write> {
        audit::writes_by(&cp.dir, bulkhead_testkit::operator::USER, since)
            .into_iter()
            .filter(|w| w.uri.contains(&format!("/namespaces/{}/", ns.name)))
            .collect()
    };
    assert!(in_ns(&since).is_empty(), "the operator wrote in a namespace that has not opted in: {:#?}", in_ns(&since));
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    assert!(config_maps.get_opt(&format!("bulkhead-{name}")).await.expect("get").is_none());
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    assert!(quotas.list(&ListParams::default()).await.expect("quotas").items.is_empty());
    let api = deployments.get("api").await.expect("api");
    assert_eq!(api.metadata.generation, generation, "the Deployment is not re-templated");
    let marked = api.metadata.annotations.unwrap_or_default();
    assert!(marked.keys().all(|k| !k.contains("bulkhead.dev/")), "{marked:?}");

    // Opted in: everything is written.
    cp.kubectl(&["label", "namespace", &ns.name, NAMESPACE_OPT_IN]);
    wait_condition(&client, &name, "Ready", "True").await;
    wait_condition(&client, &name, "ProxyInjected", "True").await;
    wait_condition(&client, &name, "Placed", "True").await;
    let written = pool_config(&client, &ns.name, &name).await.expect("pool config written");
    assert!(quotas.get_opt(&format!("bulkhead-{name}.checkout")).await.expect("get").is_some());
    let sidecar = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .is_some_and(|s| s.containers.iter().any(|c| c.name == "bulkhead-proxy"))
    };
    assert!(sidecar(&deployments.get("api").await.expect("api")));

    // The label removed, then the reservation changed: the old config, quota
    // and sidecar stay as they were, and nothing is written there.
    let (key, _) = NAMESPACE_OPT_IN.split_once('=').expect("KEY=VALUE");
    cp.kubectl(&["label", "namespace", &ns.name, &format!("{key}-")]);
    let since = audit::now_rfc3339();
    cp.apply_yaml(&bulkhead(50));
    let (reason, _) = wait_condition(&client, &name, "Ready", "False").await;
    assert_eq!(reason, "NamespaceNotOptedIn");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(in_ns(&since).is_empty(), "written after the namespace left: {:#?}", in_ns(&since));
    assert_eq!(
        pool_config(&client, &ns.name, &name).await.expect("still there"),
        written,
        "the config stays as it was"
    );
    assert!(quotas.get_opt(&format!("bulkhead-{name}.checkout")).await.expect("get").is_some());
    assert!(sidecar(&deployments.get("api").await.expect("api")));

    // Deleting the Bulkhead withdraws its sidecar and placement all the same.
    cp.kubectl(&["delete", "bulkhead", &name, "--timeout=30s"]);
    let api = deployments.get("api").await.expect("api");
    assert!(!sidecar(&api), "the sidecar is withdrawn on deletion");
    let marked = api.metadata.annotations.unwrap_or_default();
    assert!(marked.keys().all(|k| !k.contains("bulkhead.dev/")), "{marked:?}");
}

/// Issue 44: a node the Bulkhead's selector matches, but without the claim
/// opt-in label (`--node-opt-in bulkhead.dev/claimable=true`), is never
/// labelled or tainted, even as the only match; NodeGroupsReady says how many
/// matching nodes lack the label. Opted in, it is claimed (so the first half
/// could have failed); deleting the Bulkhead releases it.
#[tokio::test]
async fn a_node_without_the_claim_label_is_never_claimed() {
    use bulkhead_testkit::NODE_OPT_IN;
    let (cp, _) = started();
    let client = cp.client().await;
    let suffix = unique_suffix();
    let node = format!("optin-{suffix}");
    cp.add_node_opted(&node, "zone-0", &[("pool", &suffix)], false);
    let name = format!("nodes-{suffix}");
    let since = audit::now_rfc3339();
    cp.apply_yaml(&bulkhead_yaml(
        &name,
        "Criticality",
        "{resource: connections, capacity: 100}",
        &format!(
            "  classes:\n  \
             - {{name: checkout, reserved: 40, pods: {{namespaceSelector: {{matchLabels: {{team: \"{suffix}\"}}}}, podSelector: {{matchLabels: {{app: checkout}}}}}}, nodes: {{selector: {{matchLabels: {{pool: \"{suffix}\"}}}}, count: 1}}}}\n  \
             - {{name: admin, reserved: 10, critical: true}}\n"
        ),
    ));
    let (reason, message) = wait_condition(&client, &name, "NodeGroupsReady", "False").await;
    assert_eq!(reason, "InsufficientNodes", "{message}");
    assert!(message.contains(&format!("not opted in (1 without the label {NODE_OPT_IN}): {node}")), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let key = format!("bulkhead.dev/{name}");
    let marks = || async {
        let n = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()).get(&node).await.expect("node");
        let label = n.metadata.labels.unwrap_or_default().get(&key).cloned();
        let taint = n.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().any(|t| t.key == key);
        (label, taint)
    };
    assert_eq!(marks().await, (None, false), "the node is neither labelled nor tainted");
    let node_writes: Vec<_> = audit::writes_by(&cp.dir, bulkhead_testkit::operator::USER, &since)
        .into_iter()
        .filter(|w| w.uri.contains(&format!("/nodes/{node}")))
        .collect();
    assert!(node_writes.is_empty(), "the operator wrote to a node that has not opted in: {node_writes:#?}");

    // The cluster admin opts it in: claimed.
    cp.kubectl(&["label", "node", &node, NODE_OPT_IN]);
    wait_condition(&client, &name, "NodeGroupsReady", "True").await;
    wait_for("the claim on the node", SETTLE, || async {
        (marks().await == (Some("checkout".into()), true)).then_some(())
    })
    .await;
    cp.kubectl(&["delete", "bulkhead", &name, "--timeout=30s"]);
    assert_eq!(marks().await, (None, false), "released with the Bulkhead");
    cp.kubectl(&["delete", "node", &node]);
}
