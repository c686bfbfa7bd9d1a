//! Shuffle sharding end to end, on the real control plane with eight fake
//! nodes and thirty tenant Deployments, shards of two: the real scheduler puts
//! every tenant's pods on its shard only; `bulkhead plan` over the same nodes
//! gives the same shards; deleting a node re-shards only the tenants that held
//! it (no other Deployment is written); deleting the Bulkhead restores every
//! Deployment exactly and leaves the nodes as they were.
//!
//! `FakeKubelet` marks bound pods Ready in the test namespace, so Deployments roll out.

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
    time::{Duration, Instant},
};

use bulkhead::crd::Bulkhead;
use bulkhead_testkit::{
    audit, condition,
    kubelet::FakeKubelet,
    names_with_prefix,
    operator::{Operator, USER},
    unique_suffix, wait_for, ControlPlane, TestNamespace,
};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Node, Pod},
    scheduling::v1::PriorityClass,
};
use kube::{
    api::{Api, ListParams},
    Client,
};
use serde_json::{json, Value};

const TENANTS: usize = 30;
const SETTLE: Duration = Duration::from_secs(150);

fn tenant(i: usize) -> String {
    format!("t{i:02}")
}

fn deployments(ns: &str) -> String {
    (0..TENANTS)
        .map(|i| {
            let t = tenant(i);
            bulkhead_testkit::workload::DeploymentYaml {
                label: ("tenant", &t),
                ..bulkhead_testkit::workload::DeploymentYaml::new(ns, &t, 1)
            }
            .render()
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn bulkhead_yaml(name: &str, team: &str) -> String {
    let classes: String = (0..TENANTS)
        .map(|i| {
            let t = tenant(i);
            format!("\n  - name: {t}\n    reserved: 1\n    pods: {{namespaceSelector: {{matchLabels: {{team: {team}}}}}, podSelector: {{matchLabels: {{tenant: {t}}}}}}}")
        })
        .collect();
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: Tenant\n  layers: [Node]\n  pool: {{resource: requests, capacity: 100}}\n  shuffleSharding: {{nodes: {{selector: {{matchLabels: {{pool: shared}}}}}}, shardSize: 2}}\n  classes:{classes}\n"
    )
}

/// status.classes[].shard, once the status describes the current generation.
async fn shards(client: &Client, name: &str) -> Option<BTreeMap<String, Vec<String>>> {
    let bh = Api::<Bulkhead>::all(client.clone()).get(name).await.ok()?;
    let status = bh.status?;
    if status.observed_generation != bh.metadata.generation {
        return None;
    }
    let held: BTreeMap<String, Vec<String>> =
        status.classes.into_iter().filter(|c| !c.shard.is_empty()).map(|c| (c.name, c.shard)).collect();
    (held.len() == TENANTS).then_some(held)
}

async fn deployments_now(client: &Client, ns: &str) -> BTreeMap<String, Deployment> {
    let list = Api::<Deployment>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("list");
    list.items.into_iter().map(|d| (d.metadata.name.clone().unwrap_or_default(), d)).collect()
}

fn rolled_out(d: &Deployment) -> bool {
    let s = d.status.clone().unwrap_or_default();
    s.observed_generation == d.metadata.generation
        && s.updated_replicas == Some(1)
        && s.ready_replicas == Some(1)
        && s.replicas == Some(1)
}

/// Every tenant rolled out with its live pods bound inside its shard; the problems otherwise.
async fn off_shard(client: &Client, ns: &str, held: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, d) in deployments_now(client, ns).await {
        if !rolled_out(&d) {
            problems.push(format!("{name} is rolling out"));
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns).list(&ListParams::default()).await.expect("pods");
    for p in pods.items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let t = p.metadata.labels.as_ref().and_then(|l| l.get("tenant")).cloned().unwrap_or_default();
        let node = p.spec.and_then(|s| s.node_name);
        match (node, held.get(&t)) {
            (Some(node), Some(shard)) if shard.contains(&node) => {}
            (node, shard) => problems.push(format!("a {t} pod is on {node:?}, its shard is {shard:?}")),
        }
    }
    problems
}

async fn node_labels(client: &Client) -> BTreeMap<String, Value> {
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await.expect("nodes");
    nodes
        .items
        .into_iter()
        .map(|n| {
            let taints = json!(n.spec.and_then(|s| s.taints));
            (n.metadata.name.unwrap_or_default(), json!([n.metadata.labels, taints]))
        })
        .collect()
}

/// The shards `bulkhead plan` gives for the same Bulkhead over the cluster's nodes as exported.
fn offline_shards(cp: &ControlPlane, bulkhead_yaml: &str, suffix: &str) -> BTreeMap<String, Vec<String>> {
    let nodes = cp.kubectl(&["get", "nodes", "-o", "yaml"]);
    let (nodes_file, bulkhead_file) =
        (cp.dir.join(format!("nodes-{suffix}.yaml")), cp.dir.join(format!("saas-{suffix}.yaml")));
    std::fs::write(&nodes_file, nodes).expect("write nodes");
    std::fs::write(&bulkhead_file, bulkhead_yaml).expect("write bulkhead");
    let out = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(["plan", "-o", "json", "-f"])
        .arg(&nodes_file)
        .arg("-f")
        .arg(&bulkhead_file)
        .output()
        .expect("bulkhead plan runs");
    let list: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bulkhead plan printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    let bh = list["items"].as_array().and_then(|items| items.iter().find(|i| i["kind"] == "Bulkhead")).cloned();
    let bh: Bulkhead = serde_json::from_value(bh.expect("the plan lists the Bulkhead")).expect("a Bulkhead");
    bh.status.expect("status").classes.into_iter().map(|c| (c.name, c.shard)).collect()
}

#[tokio::test]
async fn tenants_run_only_on_their_shards_a_lost_node_reshards_only_its_holders_and_deletion_restores() {
    let cp = ControlPlane::get();
    Operator::get();
    let client = cp.client().await;
    for n in ["node-1", "node-2", "node-3"] {
        cp.kubectl(&["label", "node", n, "pool=shared", "--overwrite"]);
    }
    for i in 4..=8 {
        cp.add_node(&format!("node-{i}"), &format!("zone-{}", i % 3), &[("pool", "shared")]);
    }
    let suffix = unique_suffix();
    let ns = TestNamespace::new("saas", &[("team", &suffix)]).await;
    let _kubelet = FakeKubelet::start(client.clone(), &ns.name);
    cp.apply_yaml(&deployments(&ns.name));
    wait_for("the tenants' Deployments to roll out", SETTLE, || async {
        let all = deployments_now(&client, &ns.name).await;
        (all.len() == TENANTS && all.values().all(rolled_out)).then_some(())
    })
    .await;
    let specs_before: BTreeMap<String, Value> =
        deployments_now(&client, &ns.name).await.into_iter().map(|(n, d)| (n, json!(d.spec))).collect();
    let nodes_before = node_labels(&client).await;

    // 1. Every tenant on its shard, as the real scheduler places it.
    let name = format!("saas-{suffix}");
    let yaml = bulkhead_yaml(&name, &suffix);
    cp.apply_yaml(&yaml);
    let started = Instant::now();
    let held = wait_for("every tenant rolled out onto its shard", SETTLE, || async {
        let held = shards(&client, &name).await?;
        off_shard(&client, &ns.name, &held).await.is_empty().then_some(held)
    })
    .await;
    eprintln!(
        "figure: {TENANTS} tenants rolled out onto their shards {:?} after the Bulkhead was applied",
        started.elapsed()
    );
    let distinct: BTreeSet<BTreeSet<&String>> = held.values().map(|s| s.iter().collect()).collect();
    // C(8, 2) = 28 shards for 30 tenants: duplicates are forced, and as few as possible.
    assert_eq!(distinct.len(), 28, "{held:?}");
    let (status, reason, message) = condition(&client, &name, "ShuffleSharded").await.expect("ShuffleSharded");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "IdenticalShards"), "{message}");
    assert!(message.contains("30 tenants on 8 nodes, 2 per shard (C(8, 2) = 28 possible): 28 distinct shards; 2 pair(s) hold identical shards"), "{message}");
    eprintln!("figure: ShuffleSharded: {message}");
    assert_eq!(nodes_before, node_labels(&client).await, "sharding writes nothing to nodes");

    // 2. The offline planner gives the same shards from the same nodes.
    assert_eq!(offline_shards(cp, &yaml, &suffix), held, "bulkhead plan and the controller agree");

    // 3. At rest: once the old pods are gone and the audit has seen it, nothing is written (Events aside).
    audit::wait_quiet(&cp.dir, USER, Duration::from_secs(2), SETTLE).await;
    let since = audit::now_rfc3339();
    cp.kubectl(&["label", "namespace", &ns.name, "poke=1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes: Vec<_> =
        audit::writes_by(&cp.dir, USER, &since).into_iter().filter(|w| !w.uri.contains("/events")).collect();
    assert!(writes.is_empty(), "writes at rest: {writes:?}");

    // 4. Lose the node most tenants hold: only they are re-sharded and rolled.
    let mut load: BTreeMap<&String, usize> = BTreeMap::new();
    for node in held.values().flatten() {
        *load.entry(node).or_default() += 1;
    }
    let lost =
        load.iter().max_by_key(|(n, l)| (**l, std::cmp::Reverse(**n))).map(|(n, _)| (*n).clone()).expect("a node");
    let holders: BTreeSet<&String> = held.iter().filter(|(_, s)| s.contains(&lost)).map(|(t, _)| t).collect();
    let generations: BTreeMap<String, Option<i64>> =
        deployments_now(&client, &ns.name).await.into_iter().map(|(n, d)| (n, d.metadata.generation)).collect();
    cp.kubectl(&["delete", "node", &lost]);
    let started = Instant::now();
    let after = wait_for("the holders of the lost node re-sharded and rolled out", SETTLE, || async {
        let now = shards(&client, &name).await?;
        if now.values().flatten().any(|n| *n == lost) {
            return None;
        }
        off_shard(&client, &ns.name, &now).await.is_empty().then_some(now)
    })
    .await;
    eprintln!(
        "figure: node {lost} (held by {} tenants) deleted: its holders re-sharded and rolled out {:?} later",
        holders.len(),
        started.elapsed()
    );
    for (t, shard) in &held {
        if holders.contains(t) {
            let kept = shard.iter().find(|n| **n != lost).expect("the other node");
            assert!(after[t].contains(kept), "{t} kept {kept}: {shard:?} -> {:?}", after[t]);
        } else {
            assert_eq!(&after[t], shard, "{t} did not hold {lost} and must not move");
        }
    }
    for (t, d) in deployments_now(&client, &ns.name).await {
        let moved = d.metadata.generation != generations[&t];
        assert_eq!(moved, holders.contains(&t), "{t}: only holders' Deployments are written");
    }

    // 5. Deleting the Bulkhead restores every Deployment exactly; nodes were never touched.
    cp.kubectl(&["delete", "bulkhead", &name, "--timeout=60s"]);
    for (t, d) in deployments_now(&client, &ns.name).await {
        assert_eq!(json!(d.spec), specs_before[&t], "{t}'s spec is as it was");
        let annotations = d.metadata.annotations.unwrap_or_default();
        assert!(annotations.keys().all(|k| !k.starts_with("placement.bulkhead.dev/")), "{t}: {annotations:?}");
    }
    let mut nodes_expected = nodes_before;
    nodes_expected.remove(&lost);
    assert_eq!(node_labels(&client).await, nodes_expected);
    let left = names_with_prefix(&Api::<PriorityClass>::all(client.clone()), &format!("bulkhead-{name}."))
        .await
        .expect("list PriorityClasses");
    assert!(left.is_empty(), "PriorityClasses left behind: {left:?}");
}
