//! Placement end to end, on the real control plane with six fake nodes: the
//! real scheduler must put every class on its own nodes, a lost node must be
//! replaced, a conflicting field manager must be reported and left alone,
//! and deleting the Bulkhead must restore nodes and workloads exactly.
//!
//! The fake nodes have no kubelet: `FakeKubelet` marks bound pods Ready and
//! confirms graceful deletions in the test namespace, so Deployments roll out.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use bulkhead::crd::{Bulkhead, Layer, LayerState};
use bulkhead_testkit::{
    audit, condition,
    kubelet::FakeKubelet,
    names_with_prefix,
    operator::{Operator, USER},
    unique_suffix, wait_for, ControlPlane, TestNamespace,
};
use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{Node, Pod, ResourceQuota},
    scheduling::v1::PriorityClass,
};
use kube::{
    api::{Api, ListParams},
    Client,
};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(90);
/// Pods on a deleted node are removed by the pod garbage collector after a
/// 40 s quarantine, checked every 20 s.
const NODE_LOSS: Duration = Duration::from_secs(180);

fn deployment(ns: &str, app: &str, replicas: u32) -> String {
    // The teams' own scheduling fields, which placement must work beside and
    // leave as they were: checkout spreads its replicas over nodes (so a
    // replacement node gets one) and prefers linux nodes; admin prefers to
    // spread its replicas (a preferred anti-affinity beside placement's required one).
    let spread = match app {
        "checkout" => format!(
            "      topologySpreadConstraints: [{{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: {app}}}}}}}]\n      affinity: {{nodeAffinity: {{preferredDuringSchedulingIgnoredDuringExecution: [{{weight: 10, preference: {{matchExpressions: [{{key: kubernetes.io/os, operator: In, values: [linux]}}]}}}}]}}}}\n"
        ),
        "admin" => format!(
            "      affinity: {{podAntiAffinity: {{preferredDuringSchedulingIgnoredDuringExecution: [{{weight: 50, podAffinityTerm: {{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: {app}}}}}}}}}]}}}}\n"
        ),
        _ => String::new(),
    };
    bulkhead_testkit::workload::DeploymentYaml {
        pod_spec_lines: &spread,
        ..bulkhead_testkit::workload::DeploymentYaml::new(ns, app, replicas)
    }
    .render()
}

/// A StatefulSet of class reports, to show placement applies to both kinds.
fn statefulset(ns: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: reports-db, namespace: {ns}}}
spec:
  replicas: 1
  serviceName: reports-db
  selector: {{matchLabels: {{app: reports, role: db}}}}
  template:
    metadata: {{labels: {{app: reports, role: db}}}}
    spec:
      containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]
"#
    )
}

fn bulkhead_yaml(name: &str, team: &str) -> String {
    let pods = |app: &str| {
        format!(
            "{{namespaceSelector: {{matchLabels: {{team: {team}}}}}, podSelector: {{matchLabels: {{app: {app}}}}}}}"
        )
    };
    format!(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {{name: {name}}}
spec:
  dimension: Criticality
  layers: [Node]
  pool: {{resource: connections, capacity: 100}}
  classes:
  - name: checkout
    reserved: 40
    pods: {checkout}
    nodes: {{selector: {{matchLabels: {{pool: general}}}}, count: 2}}
    quota: {{hard: {{pods: "4"}}}}
  - name: reports
    reserved: 40
    pods: {reports}
    nodes: {{selector: {{matchLabels: {{pool: general}}}}, count: 2}}
    quota: {{hard: {{pods: "4"}}}}
  - name: admin
    reserved: 10
    critical: true
    pods: {admin}
    antiAffinity: {{topologyKey: kubernetes.io/hostname}}
"#,
        checkout = pods("checkout"),
        reports = pods("reports"),
        admin = pods("admin"),
    )
}

/// Labels and taints of every node: what the Bulkhead may touch.
async fn node_marks(client: &Client) -> BTreeMap<String, (Value, Value)> {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("list nodes");
    nodes
        .items
        .into_iter()
        .map(|n| {
            let taints = json!(n.spec.and_then(|s| s.taints).unwrap_or_default());
            (n.metadata.name.unwrap_or_default(), (json!(n.metadata.labels), taints))
        })
        .collect()
}

/// Nodes claimed for `class` (label bulkhead.dev/<bulkhead>=<class>).
async fn group(client: &Client, bulkhead: &str, class: &str) -> BTreeSet<String> {
    let selector = format!("bulkhead.dev/{bulkhead}={class}");
    let nodes =
        Api::<Node>::all(client.clone()).list(&ListParams::default().labels(&selector)).await.expect("list nodes");
    nodes.items.into_iter().filter_map(|n| n.metadata.name).collect()
}

/// Per app label: the nodes of its live pods (None while unbound), and whether any pod is terminating.
async fn pods_by_app(client: &Client, ns: &str) -> BTreeMap<String, (Vec<Option<String>>, bool)> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("list pods");
    let mut out: BTreeMap<String, (Vec<Option<String>>, bool)> = BTreeMap::new();
    for p in pods.items {
        let app = p.metadata.labels.as_ref().and_then(|l| l.get("app")).cloned().unwrap_or_default();
        let entry = out.entry(app).or_default();
        if p.metadata.deletion_timestamp.is_some() {
            entry.1 = true;
        } else {
            entry.0.push(p.spec.and_then(|s| s.node_name));
        }
    }
    out
}

async fn deployment_state(client: &Client, ns: &str, name: &str) -> Deployment {
    Api::<Deployment>::namespaced(client.clone(), ns).get(name).await.expect("deployment")
}

async fn statefulset_state(client: &Client, ns: &str) -> StatefulSet {
    Api::<StatefulSet>::namespaced(client.clone(), ns).get("reports-db").await.expect("statefulset")
}

/// Every Deployment (and the StatefulSet) rolled out: all replicas updated and ready, no old pods left.
async fn rolled_out(client: &Client, ns: &str, apps: &[(&str, i32)]) -> bool {
    let sts = statefulset_state(client, ns).await;
    let s = sts.status.unwrap_or_default();
    if s.observed_generation != sts.metadata.generation
        || s.ready_replicas != Some(1)
        || s.update_revision.is_none()
        || s.current_revision != s.update_revision
    {
        return false;
    }
    for (app, replicas) in apps {
        let d = deployment_state(client, ns, app).await;
        let s = d.status.unwrap_or_default();
        let current = s.observed_generation == d.metadata.generation;
        if !current
            || s.updated_replicas != Some(*replicas)
            || s.ready_replicas != Some(*replicas)
            || s.replicas != Some(*replicas)
        {
            return false;
        }
    }
    true
}

/// Each class's pods on nodes of its own; returns a description of what is wrong, if anything.
fn separation_problems(
    pods: &BTreeMap<String, (Vec<Option<String>>, bool)>,
    checkout: &BTreeSet<String>,
    reports: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut classes_on: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (app, (nodes, terminating)) in pods {
        if *terminating {
            problems.push(format!("{app} has terminating pods"));
        }
        for node in nodes {
            let Some(node) = node else {
                problems.push(format!("a {app} pod is unbound"));
                continue;
            };
            classes_on.entry(node).or_default().insert(app);
            let ok = match app.as_str() {
                "checkout" => checkout.contains(node),
                "reports" => reports.contains(node),
                _ => !checkout.contains(node) && !reports.contains(node),
            };
            if !ok {
                problems.push(format!("a {app} pod runs on {node}"));
            }
        }
    }
    for (node, apps) in classes_on {
        if apps.len() > 1 {
            problems.push(format!("{node} runs {apps:?}"));
        }
    }
    problems
}

#[tokio::test]
async fn classes_get_their_own_nodes_a_lost_node_is_replaced_conflicts_are_left_alone_and_deletion_restores() {
    let cp = ControlPlane::get();
    Operator::get();
    let client = cp.client().await;
    // Six candidate nodes: the three the control plane registered and three more.
    for n in ["node-1", "node-2", "node-3"] {
        cp.kubectl(&["label", "node", n, "pool=general", "--overwrite"]);
    }
    for (n, zone) in [("node-4", "zone-0"), ("node-5", "zone-1"), ("node-6", "zone-2")] {
        cp.add_node(n, zone, &[("pool", "general")]);
    }
    let suffix = unique_suffix();
    let ns = TestNamespace::new("place", &[("team", &suffix)]).await;
    let _kubelet = FakeKubelet::start(client.clone(), &ns.name);
    let apps = [("checkout", 2), ("reports", 2), ("admin", 1)];
    for (app, replicas) in apps {
        cp.apply_yaml(&deployment(&ns.name, app, replicas as u32));
    }
    cp.apply_yaml(&statefulset(&ns.name));
    wait_for("the Deployments to roll out before the Bulkhead", SETTLE, || async {
        rolled_out(&client, &ns.name, &apps).await.then_some(())
    })
    .await;
    let nodes_before = node_marks(&client).await;
    let mut specs_before = BTreeMap::new();
    for (app, _) in apps {
        specs_before.insert(app, json!(deployment_state(&client, &ns.name, app).await.spec));
    }
    let statefulset_before = json!(statefulset_state(&client, &ns.name).await.spec);

    // 1. Apply: every class on nodes of its own.
    let name = format!("place-{suffix}");
    cp.apply_yaml(&bulkhead_yaml(&name, &suffix));
    let started = Instant::now();
    let (checkout_nodes, reports_nodes) = wait_for("each class alone on its nodes", SETTLE, || async {
        let (checkout, reports) = (group(&client, &name, "checkout").await, group(&client, &name, "reports").await);
        if checkout.len() != 2 || reports.len() != 2 || !rolled_out(&client, &ns.name, &apps).await {
            return None;
        }
        separation_problems(&pods_by_app(&client, &ns.name).await, &checkout, &reports)
            .is_empty()
            .then_some((checkout, reports))
    })
    .await;
    eprintln!("figure: classes separated by the real scheduler {:?} after the Bulkhead was applied", started.elapsed());
    assert!(checkout_nodes.is_disjoint(&reports_nodes));
    let (status, reason, message) = condition(&client, &name, "NodeGroupsReady").await.expect("NodeGroupsReady");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "NodesClaimed"), "{message}");
    let (status, reason, message) = wait_for("Placed=True", SETTLE, || async {
        condition(&client, &name, "Placed").await.filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(reason, "WorkloadsPlaced", "{status} {message}");
    for node in checkout_nodes.iter().chain(&reports_nodes) {
        let taints = &node_marks(&client).await[node].1;
        assert!(
            taints.as_array().is_some_and(|t| t
                .iter()
                .any(|t| t["key"] == format!("bulkhead.dev/{name}") && t["effect"] == "NoSchedule")),
            "{node} carries the group's NoSchedule taint: {taints}"
        );
    }
    let priority_classes = Api::<PriorityClass>::all(client.clone());
    let admin_pc = priority_classes.get(&format!("bulkhead-{name}.admin")).await.expect("admin PriorityClass");
    let checkout_pc = priority_classes.get(&format!("bulkhead-{name}.checkout")).await.expect("checkout PriorityClass");
    assert!(admin_pc.value > checkout_pc.value, "the critical class has the highest priority");
    assert_eq!(admin_pc.preemption_policy.as_deref(), Some("PreemptLowerPriority"));
    assert_eq!(checkout_pc.preemption_policy.as_deref(), Some("Never"), "only the control-plane lane preempts");
    // The audit confirms what the scheduler did.
    let node_layer = wait_for("the audit to see the Node layer Separate", SETTLE, || async {
        let bh = Api::<Bulkhead>::all(client.clone()).get(&name).await.ok()?;
        let layer = bh.status?.layers.into_iter().find(|l| l.name == Layer::Node)?;
        (layer.state == LayerState::Separate).then_some(layer)
    })
    .await;
    assert!(node_layer.pairs.iter().all(|p| p.state == LayerState::Separate), "{node_layer:?}");

    // Two classes share the namespace: each quota is scoped to its class's
    // PriorityClass, and the quota controller counts only that class's pods.
    for (class, pods) in [("checkout", "2"), ("reports", "3")] {
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
        let quota_name = format!("bulkhead-{name}.{class}");
        wait_for(&format!("{quota_name} to count the class's {pods} pods"), SETTLE, || async {
            let q = quotas.get(&quota_name).await.ok()?;
            let scope = q.spec.as_ref()?.scope_selector.as_ref()?.match_expressions.as_ref()?.first()?.clone();
            assert_eq!(scope.scope_name, "PriorityClass");
            assert_eq!(scope.values, Some(vec![format!("bulkhead-{name}.{class}")]));
            let used = q.status?.used?.get("pods")?.0.clone();
            (used == pods).then_some(())
        })
        .await;
    }

    // 2. At rest: nothing is written, no rollout loop. First wait out the
    // last reactions to the start, as sharding_e2e does: CI once saw a single
    // status patch land in the window (what it changed was not recorded). An
    // operator that never stops writing fails in the wait instead.
    audit::wait_quiet(&cp.dir, USER, Duration::from_secs(2), SETTLE).await;
    let rv = |d: &Deployment| d.metadata.resource_version.clone();
    let mut versions = Vec::new();
    for (app, _) in apps {
        versions.push(rv(&deployment_state(&client, &ns.name, app).await));
    }
    let since = audit::now_rfc3339();
    cp.kubectl(&["label", "namespace", &ns.name, "poke=1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for ((app, _), before) in apps.iter().zip(&versions) {
        assert_eq!(&rv(&deployment_state(&client, &ns.name, app).await), before, "{app} was not written at rest");
    }
    // Every write request by the operator counts (Events aside: a courtesy
    // that the 1.20 server refuses for cluster-scoped objects anyway).
    let writes: Vec<_> =
        audit::writes_by(&cp.dir, USER, &since).into_iter().filter(|w| !w.uri.contains("/events")).collect();
    assert!(writes.is_empty(), "writes at rest: {writes:?}");

    // 3. A claimed node is lost: replaced, and the pod that ran there rescheduled onto the replacement.
    // Lose a node that runs a checkout pod (the scheduler may have put both on one).
    let checkout_pods = pods_by_app(&client, &ns.name).await.remove("checkout").expect("checkout pods").0;
    let lost = checkout_pods.into_iter().flatten().next().expect("a bound checkout pod");
    let kept: BTreeSet<String> = checkout_nodes.iter().filter(|n| **n != lost).cloned().collect();
    cp.kubectl(&["delete", "node", &lost]);
    let started = Instant::now();
    let polls = std::cell::Cell::new(0u32);
    let claimed_after = std::cell::Cell::new(None);
    let replacement = wait_for("a replacement node running a checkout pod", NODE_LOSS, || async {
        let checkout = group(&client, &name, "checkout").await;
        if claimed_after.get().is_none() && checkout.len() == 2 && !checkout.contains(&lost) {
            claimed_after.set(Some(started.elapsed()));
        }
        polls.set(polls.get() + 1);
        if polls.get().is_multiple_of(100) {
            eprintln!(
                "after {:?}: checkout group {checkout:?}, pods {:?}",
                started.elapsed(),
                pods_by_app(&client, &ns.name).await
            );
        }
        if checkout.len() != 2 || checkout.contains(&lost) || !checkout.is_superset(&kept) {
            return None;
        }
        let replacement = checkout.difference(&kept).next().cloned()?;
        let pods = pods_by_app(&client, &ns.name).await;
        let on_replacement = pods.get("checkout")?.0.iter().any(|n| n.as_deref() == Some(replacement.as_str()));
        (on_replacement && separation_problems(&pods, &checkout, &reports_nodes).is_empty()).then_some(replacement)
    })
    .await;
    eprintln!(
        "figure: node {lost} replaced by {replacement} (claimed {:?} after the deletion), its pod rescheduled there {:?} after it",
        claimed_after.get().unwrap_or_default(),
        started.elapsed()
    );
    assert_eq!(group(&client, &name, "reports").await, reports_nodes, "reports kept its nodes");

    // 4. Another manager owns a field placement sets: reported, left alone, no fight.
    let gitops = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: reports-gitops, namespace: {ns}}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: reports}}}}
  template:
    metadata: {{labels: {{app: reports}}}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{{matchExpressions: [{{key: disktype, operator: In, values: [ssd]}}]}}]
      containers: [{{name: c, image: registry.k8s.io/pause:3.9}}]
"#,
        ns = ns.name
    );
    let file = cp.dir.join(format!("gitops-{suffix}.yaml"));
    std::fs::write(&file, &gitops).expect("write manifest");
    cp.kubectl(&["apply", "--server-side", "--field-manager=gitops", "-f", &file.display().to_string()]);
    let gitops_before = json!(deployment_state(&client, &ns.name, "reports-gitops").await.spec);
    let (_, _, message) = wait_for("Placed=False PlacementConflict", SETTLE, || async {
        condition(&client, &name, "Placed").await.filter(|c| c.1 == "PlacementConflict")
    })
    .await;
    assert!(message.contains(&format!("Deployment {}/reports-gitops", ns.name)), "names the workload: {message}");
    assert!(message.contains("\"gitops\""), "names the manager: {message}");
    assert!(message.contains("nodeAffinity"), "names the field: {message}");
    let gitops_rv = rv(&deployment_state(&client, &ns.name, "reports-gitops").await);
    let since = audit::now_rfc3339();
    cp.kubectl(&["label", "namespace", &ns.name, "poke=2", "--overwrite"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        rv(&deployment_state(&client, &ns.name, "reports-gitops").await),
        gitops_rv,
        "no fight over reports-gitops"
    );
    let retries: Vec<_> =
        audit::writes_by(&cp.dir, USER, &since).into_iter().filter(|w| w.uri.contains("reports-gitops")).collect();
    assert!(retries.is_empty(), "a remembered conflict is not retried: {retries:?}");
    assert_eq!(json!(deployment_state(&client, &ns.name, "reports-gitops").await.spec), gitops_before);

    // 5. Deleting the Bulkhead restores nodes and workloads exactly.
    cp.kubectl(&["delete", "bulkhead", &name, "--timeout=60s"]);
    let nodes_after = node_marks(&client).await;
    for (node, marks) in &nodes_after {
        if let Some(before) = nodes_before.get(node) {
            assert_eq!(marks, before, "{node}'s labels and taints are as they were");
        }
    }
    for (app, _) in apps {
        let d = deployment_state(&client, &ns.name, app).await;
        assert_eq!(json!(d.spec), specs_before[app], "{app}'s spec is as it was");
        let annotations = d.metadata.annotations.unwrap_or_default();
        assert!(annotations.keys().all(|k| !k.starts_with("placement.bulkhead.dev/")), "{app}: {annotations:?}");
    }
    assert_eq!(json!(deployment_state(&client, &ns.name, "reports-gitops").await.spec), gitops_before);
    assert_eq!(
        json!(statefulset_state(&client, &ns.name).await.spec),
        statefulset_before,
        "the StatefulSet's spec is as it was"
    );
    let left = names_with_prefix(&Api::<PriorityClass>::all(client.clone()), &format!("bulkhead-{name}."))
        .await
        .expect("list PriorityClasses");
    assert!(left.is_empty(), "PriorityClasses left behind: {left:?}");
    let quotas =
        Api::<ResourceQuota>::namespaced(client.clone(), &ns.name).list(&ListParams::default()).await.expect("quotas");
    assert!(
        quotas.items.is_empty(),
        "quotas left behind: {:?}",
        quotas.items.iter().map(|q| &q.metadata.name).collect::<Vec<_>>()
    );
}
