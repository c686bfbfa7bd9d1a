//! Audit benchmark: a synthetic cluster of N nodes × 30 pods and 20 classes.
//! `cargo bench --bench audit` prints the figures; under `cargo test` it runs
//! a small smoke pass that checks the synthetic cluster audits as expected.
//!
//! Figures, all measured in one run so that their ratios hold from machine
//! to machine: the full audit at 1k / 5k / 20k nodes (single thread, which is
//! how the controller runs it) against the floor (one pass over the watched
//! pods grouping them by (class, node) in a hash map: the least any audit
//! must do); one pod event re-audited incrementally against the full audit;
//! and bytes held per watched pod: the stored lean form versus a whole
//! `k8s_openapi` Pod.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    collections::BTreeMap,
    sync::atomic::{AtomicIsize, Ordering},
    time::{Duration, Instant},
};

use bulkhead::{
    audit::{audit, audit_cached, AuditConfig},
    crd::{Bulkhead, Layer, LayerState},
    select::Selection,
    snapshot::{LabelLookup, NamespaceInfo, NodeInfo, ObjectKey, PodInfo, Snapshot},
};
use k8s_openapi::api::core::v1::Pod;

/// Counts live heap bytes, to measure what stored objects cost.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CLASSES: usize = 20;
const PODS_PER_NODE: usize = 30;
const NAMESPACES: usize = 200;

/// A pod as a Deployment makes it, as the API server returns it (with managedFields).
fn realistic_pod(ns: &str, name: &str, app: &str, node: &str, ip: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "uid": "5f0c5a54-8a4e-4b4e-9c1e-0f0f0f0f0f0f",
            "resourceVersion": "123456789", "creationTimestamp": "2026-11-30T10:00:00Z",
            "generateName": format!("{app}-7d9c8b6f5-"),
            "labels": {"app": app, "pod-template-hash": "7d9c8b6f5", "team": ns, "version": "v1"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T09:59:00Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9c8b6f5"),
                "uid": "1a2b3c4d-0000-0000-0000-000000000000", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}, "f:resources": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T10:00:05Z",
                "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}, "f:podIPs": {}}}}]
        },
        "spec": {
            "nodeName": node, "serviceAccountName": "default", "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "containers": [{"name": "app", "image": format!("registry.example.com/{app}:1.2.3"),
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "POOL_CONFIG", "value": "/etc/bulkhead/pools.json"}],
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1", "qosClass": "Burstable",
            "startTime": "2026-11-30T10:00:01Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": format!("registry.example.com/{app}:1.2.3"),
                "imageID": "registry.example.com/app@sha256:0123456789abcdef", "containerID": "containerd://0123456789abcdef",
                "started": true, "state": {"running": {"startedAt": "2026-11-30T10:00:03Z"}}}]
        }
    })
}

fn bulkhead() -> Bulkhead {
    let classes: String = (0..CLASSES)
        .map(|c| {
            format!(
                "  - {{name: c{c}, reserved: 1, pods: {{namespaceSelector: {{matchLabels: {{class: c{c}}}}}, podSelector: {{matchLabels: {{app: app-{c}}}}}}}, databases: [\"postgres://db-{}.shared.svc/c{c}\"]}}\n",
                c % 4
            )
        })
        .collect();
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: bench}}\nspec:\n  dimension: Tenant\n  layers: [Process, Node, Kernel, Zone, Host, Database]\n  pool: {{resource: connections, capacity: 1000}}\n  classes:\n{classes}"
    ))
    .expect("bench bulkhead")
}

/// Node of pod `p`: runs of 10 consecutive pods (10 classes) per node, three
/// runs per node, so every node holds 3 pods each of 10 classes: classes
/// share nodes (the expensive case: many Shared pairs with evidence).
fn node_of(p: usize, nodes: usize) -> usize {
    (p / 10) % nodes
}

fn pod_key(p: usize) -> ObjectKey {
    let ns = p % NAMESPACES;
    ObjectKey::new(format!("team-{ns}"), format!("app-{}-{p}", ns % CLASSES))
}

fn pod(s: &mut Snapshot, p: usize, node: Option<usize>) -> (ObjectKey, PodInfo) {
    let class = p % NAMESPACES % CLASSES;
    let labels =
        [("app".to_string(), format!("app-{class}")), ("pod-template-hash".to_string(), "7d9c8b6f5".to_string())];
    let labels = s.interner.labels(labels.iter().map(|(k, v)| (k, v)));
    let node = node.map(|n| s.interner.intern(&format!("node-{n}")));
    (
        pod_key(p),
        PodInfo {
            labels,
            node,
            runtime_class: None,
            ip: Some(format!("10.{}.{}.{}", p >> 16 & 255, p >> 8 & 255, p & 255).into()),
            finished: false,
            running: true,
            terminating: false,
            sidecar: None,
        },
    )
}

/// Nodes spread over 3 zones; pods spread so that classes share nodes.
/// Pods are stored in key order (namespace, name), as a relist delivers them
/// (the API server lists in key order) and a starting operator stores them;
/// `BENCH_LAYOUT=scattered` stores them in pod-number order instead, each
/// namespace's pods 200 apart in memory (as long churn may leave them).
fn snapshot(nodes: usize) -> Snapshot {
    let mut s = Snapshot::default();
    for n in 0..NAMESPACES {
        let name = format!("team-{n}");
        let labels = [("class".to_string(), format!("c{}", n % CLASSES))].into();
        s.namespaces.insert(name.clone(), NamespaceInfo { name, labels, terminating: false });
    }
    for n in 0..nodes {
        let labels = [
            ("kubernetes.io/hostname".to_string(), format!("node-{n}")),
            ("topology.kubernetes.io/zone".to_string(), format!("zone-{}", n % 3)),
        ];
        let labels = s.interner.labels(labels.iter().map(|(k, v)| (k, v)));
        s.nodes.insert(
            format!("node-{n}"),
            NodeInfo {
                name: format!("node-{n}"),
                labels,
                taints: Vec::new(),
                schedulable: true,
                resource_version: None,
            },
        );
    }
    let mut order: Vec<usize> = (0..nodes * PODS_PER_NODE).collect();
    if std::env::var("BENCH_LAYOUT").as_deref() != Ok("scattered") {
        order.sort_by_cached_key(|&p| pod_key(p));
    }
    for p in order {
        let (key, info) = pod(&mut s, p, Some(node_of(p, nodes)));
        s.pods.insert(key, info);
    }
    s
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The floor: one pass over the watched pods, grouping them by (class, node).
fn floor(snap: &Snapshot) -> usize {
    let mut groups: rustc_hash::FxHashMap<(&str, &str), u32> = rustc_hash::FxHashMap::default();
    for pod in snap.pods.values() {
        if pod.finished {
            continue;
        }
        let class = pod.labels.label("app").unwrap_or_default();
        let node = pod.node.as_deref().unwrap_or_default();
        *groups.entry((class, node)).or_default() += 1;
    }
    groups.len()
}

struct Sizes {
    pods: usize,
    audit: Duration,
    floor: Duration,
}

/// Full audit and floor, interleaved run by run so both see the same machine.
fn time_audit(nodes: usize, runs: usize) -> Sizes {
    let snap = snapshot(nodes);
    let bh = bulkhead();
    let config = AuditConfig::default();
    let (mut audits, mut floors) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let a = audit(&Selection::parse(&bh), &snap, &config);
        audits.push(t.elapsed());
        std::hint::black_box(a);
        let t = Instant::now();
        std::hint::black_box(floor(&snap));
        floors.push(t.elapsed());
    }
    Sizes { pods: snap.pods.len(), audit: median(audits), floor: median(floors) }
}

/// Random pod events on a kept audit state: a pending pod bound, a pod moved
/// to another node, a pod deleted, a pod created pending. Returns the mean
/// time of one event (journal it, catch up, verdicts) and of a full audit of
/// the same snapshot.
fn time_events(nodes: usize, events: usize) -> (Duration, Duration) {
    let mut snap = snapshot(nodes);
    let bh = bulkhead();
    let config = AuditConfig::default();
    let mut cache = None;
    audit_cached(&mut cache, &Selection::parse(&bh), &snap, &config);
    let total = nodes * PODS_PER_NODE;
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng as usize
    };
    let mut pending: Vec<usize> = Vec::new();
    let mut spent = Duration::ZERO;
    for i in 0..events {
        let p = next() % total;
        let (key, change) = match i % 4 {
            // A pending pod bound (or, with none pending, one created bound).
            0 => {
                let q = pending.pop().unwrap_or(total + i);
                let (key, info) = pod(&mut snap, q, Some(next() % nodes));
                (key, Some(info))
            }
            // A pod moved to another node (deleted and recreated elsewhere, in one delta).
            1 => {
                let (key, info) = pod(&mut snap, p, Some(next() % nodes));
                (key, Some(info))
            }
            2 => (pod(&mut snap, p, None).0, None),
            // A new pod, not yet scheduled.
            _ => {
                pending.push(total + i);
                let (key, info) = pod(&mut snap, total + i, None);
                (key, Some(info))
            }
        };
        let t = Instant::now();
        snap.set_pod(key, change);
        let a = audit_cached(&mut cache, &Selection::parse(&bh), &snap, &config);
        spent += t.elapsed();
        std::hint::black_box(a);
    }
    let per_event = spent / events as u32;
    let full = median(
        (0..7)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(audit(&Selection::parse(&bh), &snap, &config));
                t.elapsed()
            })
            .collect(),
    );
    (per_event, full)
}

/// Heap bytes per pod: the snapshot's stored form (map entry, key, lean pod)
/// versus whole deserialized Pods, for `count` pods.
fn bytes_per_pod(count: usize) -> (f64, f64) {
    let raw: Vec<serde_json::Value> = (0..count)
        .map(|i| {
            realistic_pod(
                &format!("team-{}", i % NAMESPACES),
                &format!("api-7d9c8b6f5-{i:05}"),
                &format!("app-{}", i % CLASSES),
                &format!("node-{}", i % 1000),
                &format!("10.1.{}.{}", i / 256 % 256, i % 256),
            )
        })
        .collect();

    let before = LIVE.load(Ordering::Relaxed);
    let full: Vec<Pod> = raw.iter().map(|v| serde_json::from_value(v.clone()).expect("pod")).collect();
    let full_bytes = LIVE.load(Ordering::Relaxed) - before;

    let mut snap = Snapshot::default();
    // Warm the interner as a running operator's would be (label vocabularies repeat).
    let before = LIVE.load(Ordering::Relaxed);
    let mut stored: BTreeMap<ObjectKey, PodInfo> = BTreeMap::new();
    for pod in &full {
        let key = ObjectKey::new(
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        stored.insert(key, PodInfo::from_pod(pod, &mut snap.interner));
    }
    let stored_bytes = LIVE.load(Ordering::Relaxed) - before;
    std::hint::black_box((&full, &stored));
    (stored_bytes as f64 / count as f64, (full_bytes as f64 / count as f64) + std::mem::size_of::<Pod>() as f64 * 0.0)
}

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    if !benching {
        // Smoke pass under `cargo test`: the synthetic cluster audits as designed.
        let snap = snapshot(50);
        let bh = bulkhead();
        let a = audit(&Selection::parse(&bh), &snap, &AuditConfig::default());
        let state = |l: Layer| a.layers.iter().find(|x| x.name == l).map(|x| x.state);
        assert_eq!(state(Layer::Node), Some(LayerState::Shared), "round-robin pods share nodes");
        assert_eq!(state(Layer::Database), Some(LayerState::Shared), "c0 and c4 name the same database host");
        // No host label, but classes share nodes: one node is one machine.
        assert_eq!(state(Layer::Host), Some(LayerState::Shared), "a shared node is a shared machine");
        let (stored, full) = bytes_per_pod(500);
        assert!(stored < full, "the stored form is smaller than a whole Pod ({stored} vs {full})");
        println!("audit bench smoke: 1 passed, 0 failed");
        return;
    }
    // BENCH_EVENT_NODES=1000 times only the events (for profiling; BENCH_EVENTS=200 fewer of them).
    if let Some(nodes) = std::env::var("BENCH_EVENT_NODES").ok().and_then(|n| n.parse().ok()) {
        let events = std::env::var("BENCH_EVENTS").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000);
        let (event, full) = time_events(nodes, events);
        println!("event {:.1} µs, full audit {:.2} ms", event.as_secs_f64() * 1e6, full.as_secs_f64() * 1e3);
        return;
    }
    // BENCH_NODES=5000 times one size (for profiling).
    let sizes: Vec<usize> = match std::env::var("BENCH_NODES").ok().and_then(|n| n.parse().ok()) {
        Some(n) => vec![n],
        None => vec![1_000, 5_000, 20_000],
    };
    // Short runs are the noisiest on a busy machine: smaller sizes take more
    // (7 at 20,000 nodes, 28 at 5,000, 50 at 1,000).
    let runs = |nodes: usize| if sizes.len() == 1 { 50 } else { (7 * 20_000 / nodes.max(1)).clamp(7, 50) };
    println!("audit of 20 classes, {PODS_PER_NODE} pods per node, single thread (median of the runs shown):");
    let mut per_pod = Vec::new();
    for &nodes in &sizes {
        let runs = runs(nodes);
        let s = time_audit(nodes, runs);
        let ns = |d: Duration| d.as_secs_f64() * 1e9 / s.pods as f64;
        println!(
            "  {nodes:>6} nodes {:>7} pods ({runs:>2} runs): full audit {:>7.1} ms ({:.0} ns per pod), floor {:>6.1} ms ({:.0} ns per pod)",
            s.pods,
            s.audit.as_secs_f64() * 1e3,
            ns(s.audit),
            s.floor.as_secs_f64() * 1e3,
            ns(s.floor)
        );
        println!("audit/floor {} pods: {:.1}", s.pods, s.audit.as_secs_f64() / s.floor.as_secs_f64());
        per_pod.push(ns(s.audit));
    }
    if per_pod.len() > 1 {
        let (lo, hi) = per_pod.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        println!("audit cost per pod, largest over smallest across sizes: {:.2}", hi / lo);
    }
    if std::env::var("BENCH_NODES").is_ok() {
        return;
    }
    let events = 2_000;
    let (event, full) = time_events(5_000, events);
    println!(
        "one pod event re-audited incrementally (mean of {events}: bind, move, delete, create): {:.1} µs; full audit {:.1} ms",
        event.as_secs_f64() * 1e6,
        full.as_secs_f64() * 1e3
    );
    println!("event/audit 150000 pods: {:.2}%", event.as_secs_f64() / full.as_secs_f64() * 100.0);
    let (stored, full) = bytes_per_pod(20_000);
    println!("heap bytes per watched pod (20,000 realistic pods):");
    println!("  stored lean form (map entry + key + PodInfo, interned labels): {stored:.0} B");
    println!("  whole k8s_openapi Pod as the API returns it:                  {full:.0} B");
}
