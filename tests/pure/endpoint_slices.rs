//! The Database layer reads a Service's backends from its EndpointSlices
//! (what the operator watches where `discovery.k8s.io/v1` is served) or from
//! its core/v1 Endpoints (the fallback). The same cluster described either way
//! must give the same verdicts: model data, read as `bulkhead plan` reads files.

use std::path::Path;

use bulkhead::{
    audit::{audit, AuditConfig},
    crd::{Layer, LayerState, LayerStatus},
    offline::load_text,
    select::Selection,
};

/// Pods, Services and one Bulkhead per case; no backends.
const CLUSTER: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: pg-0, namespace: shop}, spec: {nodeName: n-1, containers: []}, status: {podIP: 10.1.0.10}}
- {apiVersion: v1, kind: Pod, metadata: {name: pg-1, namespace: shop}, spec: {nodeName: n-1, containers: []}, status: {podIP: 10.1.0.11}}
- {apiVersion: v1, kind: Pod, metadata: {name: pg-2, namespace: shop}, spec: {nodeName: n-1, containers: []}, status: {podIP: 10.1.0.12}}
- {apiVersion: v1, kind: Pod, metadata: {name: pg-old, namespace: shop}, spec: {nodeName: n-1, containers: []}, status: {podIP: 10.1.0.13}}
- {apiVersion: v1, kind: Pod, metadata: {name: mysql-0, namespace: shop}, spec: {nodeName: n-2, containers: []}, status: {podIP: 10.1.0.20}}
- {apiVersion: v1, kind: Service, metadata: {name: orders-db, namespace: shop}, spec: {clusterIP: 10.96.0.1}}
- {apiVersion: v1, kind: Service, metadata: {name: reports-db, namespace: shop}, spec: {clusterIP: 10.96.0.2}}
- {apiVersion: v1, kind: Service, metadata: {name: old-db, namespace: shop}, spec: {clusterIP: 10.96.0.3}}
- {apiVersion: v1, kind: Service, metadata: {name: audit-db, namespace: shop}, spec: {clusterIP: 10.96.0.4, publishNotReadyAddresses: true}}
- {apiVersion: v1, kind: Service, metadata: {name: dual-db, namespace: shop}, spec: {clusterIP: 10.96.0.5}}
- {apiVersion: v1, kind: Service, metadata: {name: mysql-db, namespace: shop}, spec: {clusterIP: 10.96.0.6}}
- {apiVersion: v1, kind: Service, metadata: {name: ext-db, namespace: shop}, spec: {clusterIP: 10.96.0.7}}
- {apiVersion: v1, kind: Service, metadata: {name: empty-db, namespace: shop}, spec: {clusterIP: 10.96.0.8}}
"#;

/// Each case: a Bulkhead name, its two classes' URLs, and the verdict expected.
const CASES: &[(&str, &str, &str, LayerState)] = &[
    // orders-db's second slice holds the not-ready pg-1, which reports-db also reaches.
    ("split", "orders-db", "reports-db", LayerState::Shared),
    // pg-old is terminating: old-db drops it; audit-db publishes not-ready addresses and keeps it.
    ("terminating", "old-db", "audit-db", LayerState::Separate),
    // dual-db has an IPv6 slice beside its IPv4 one; Endpoints lists IPv4 only.
    ("dual-shared", "dual-db", "orders-db", LayerState::Shared),
    ("dual-separate", "dual-db", "mysql-db", LayerState::Separate),
    // A hand-written backend outside the cluster.
    ("external", "ext-db", "mysql-db", LayerState::Unverified),
    // A slice of no Service (no service-name label) is nobody's backend.
    ("empty", "empty-db", "mysql-db", LayerState::Unverified),
];

/// The backends as core/v1 Endpoints (what the Endpoints controller writes).
const ENDPOINTS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Endpoints
  metadata: {name: orders-db, namespace: shop}
  subsets:
  - addresses: [{ip: 10.1.0.10, targetRef: {kind: Pod, namespace: shop, name: pg-0}}]
    notReadyAddresses: [{ip: 10.1.0.11, targetRef: {kind: Pod, namespace: shop, name: pg-1}}]
- apiVersion: v1
  kind: Endpoints
  metadata: {name: reports-db, namespace: shop}
  subsets:
  - addresses: [{ip: 10.1.0.11, targetRef: {kind: Pod, namespace: shop, name: pg-1}}]
- apiVersion: v1
  kind: Endpoints
  metadata: {name: old-db, namespace: shop}
  subsets:
  - addresses: [{ip: 10.1.0.12, targetRef: {kind: Pod, namespace: shop, name: pg-2}}]
- apiVersion: v1
  kind: Endpoints
  metadata: {name: audit-db, namespace: shop}
  subsets:
  - addresses: [{ip: 10.1.0.13, targetRef: {kind: Pod, namespace: shop, name: pg-old}}]
- apiVersion: v1
  kind: Endpoints
  metadata: {name: dual-db, namespace: shop}
  subsets:
  - addresses: [{ip: 10.1.0.10, targetRef: {kind: Pod, namespace: shop, name: pg-0}}]
- apiVersion: v1
  kind: Endpoints
  metadata: {name: mysql-db, namespace: shop}
  subsets:
  - addresses: [{ip: 10.1.0.20, targetRef: {kind: Pod, namespace: shop, name: mysql-0}}]
- apiVersion: v1
  kind: Endpoints
  metadata: {name: ext-db, namespace: shop}
  subsets:
  - addresses: [{ip: 198.51.100.1}]
"#;

/// The same backends as EndpointSlices (what the EndpointSlice controller and
/// its mirroring controller write for these Services and Endpoints).
const SLICES: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: orders-db-a1, namespace: shop, labels: {kubernetes.io/service-name: orders-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.10], conditions: {ready: true}, targetRef: {kind: Pod, namespace: shop, name: pg-0}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: orders-db-b2, namespace: shop, labels: {kubernetes.io/service-name: orders-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.11], conditions: {ready: false}, targetRef: {kind: Pod, namespace: shop, name: pg-1}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: reports-db-c3, namespace: shop, labels: {kubernetes.io/service-name: reports-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.11], targetRef: {kind: Pod, namespace: shop, name: pg-1}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: old-db-d4, namespace: shop, labels: {kubernetes.io/service-name: old-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.12], conditions: {ready: true}, targetRef: {kind: Pod, namespace: shop, name: pg-2}}
  - {addresses: [10.1.0.13], conditions: {ready: false, serving: true, terminating: true}, targetRef: {kind: Pod, namespace: shop, name: pg-old}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: audit-db-e5, namespace: shop, labels: {kubernetes.io/service-name: audit-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.13], conditions: {ready: true, serving: true, terminating: true}, targetRef: {kind: Pod, namespace: shop, name: pg-old}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: dual-db-f6, namespace: shop, labels: {kubernetes.io/service-name: dual-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.10], targetRef: {kind: Pod, namespace: shop, name: pg-0}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: dual-db-g7, namespace: shop, labels: {kubernetes.io/service-name: dual-db}}
  addressType: IPv6
  endpoints:
  - {addresses: ["fd00::10"], targetRef: {kind: Pod, namespace: shop, name: pg-0}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: mysql-db-h8, namespace: shop, labels: {kubernetes.io/service-name: mysql-db}}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.20], targetRef: {kind: Pod, namespace: shop, name: mysql-0}}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: ext-db-i9, namespace: shop, labels: {kubernetes.io/service-name: ext-db, endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io}}
  addressType: IPv4
  endpoints:
  - {addresses: [198.51.100.1]}
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: empty-db-stray, namespace: shop}
  addressType: IPv4
  endpoints:
  - {addresses: [10.1.0.20], targetRef: {kind: Pod, namespace: shop, name: mysql-0}}
"#;

fn bulkheads() -> String {
    CASES
        .iter()
        .map(|(name, a, b, _)| {
            format!(
                "---\napiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: Dependency\n  layers: [Database]\n  pool: {{resource: connections, capacity: 100}}\n  classes:\n  - {{name: a, reserved: 10, databases: [\"postgres://{a}.shop.svc/x\"]}}\n  - {{name: b, reserved: 10, databases: [\"postgres://{b}.shop.svc/y\"]}}\n"
            )
        })
        .collect()
}

/// Each case's Database verdict, the backends given as `backends`.
fn verdicts(backends: &str) -> Vec<(String, LayerStatus)> {
    let text = format!("{CLUSTER}---{backends}{}", bulkheads());
    let input = load_text(Path::new("cluster.yaml"), &text).expect("the cluster loads");
    input
        .bulkheads
        .iter()
        .map(|bh| {
            let audit = audit(&Selection::parse(bh), &input.snapshot, &AuditConfig::default());
            let layer = audit.owned_layers().into_iter().find(|l| l.name == Layer::Database).expect("Database");
            (bh.metadata.name.clone().unwrap_or_default(), layer)
        })
        .collect()
}

#[test]
fn slices_and_endpoints_of_the_same_backends_give_the_same_verdicts() {
    let from_endpoints = verdicts(ENDPOINTS);
    let from_slices = verdicts(SLICES);
    assert_eq!(from_endpoints.len(), CASES.len());
    for ((name, endpoints), (_, slices)) in from_endpoints.iter().zip(&from_slices) {
        assert_eq!(endpoints, slices, "case {name}: Endpoints (left) and EndpointSlices (right) disagree");
    }
    // Equal, and right: each case is the verdict it was written for.
    for ((name, layer), (case, _, _, state)) in from_slices.iter().zip(CASES) {
        assert_eq!((name.as_str(), layer.state), (*case, *state), "{layer:?}");
    }
}

#[test]
fn a_stray_slice_and_a_service_without_backends_stay_unverified_with_the_reason() {
    let from_slices = verdicts(SLICES);
    let (_, empty) = from_slices.iter().find(|(n, _)| n == "empty").expect("case");
    assert!(empty.pairs[0].evidence.iter().any(|e| e == "Service shop/empty-db has no known backends"), "{empty:?}");
    let (_, external) = from_slices.iter().find(|(n, _)| n == "external").expect("case");
    assert!(external.pairs[0].evidence.iter().any(|e| e.contains("198.51.100.1, which is not a pod")), "{external:?}");
}

#[test]
fn both_together_as_a_dump_of_either_server_holds_change_nothing() {
    // `kubectl get endpoints,endpointslices -A -o yaml` gives both: the union is the same.
    let both = format!("{ENDPOINTS}---{SLICES}");
    assert_eq!(verdicts(&both), verdicts(ENDPOINTS));
}

#[test]
fn v1beta1_slices_from_a_1_20_server_read_the_same() {
    // 1.20 serves discovery.k8s.io/v1beta1 only: `kubectl get endpointslices` prints those.
    let beta = SLICES.replace("discovery.k8s.io/v1", "discovery.k8s.io/v1beta1");
    assert_eq!(verdicts(&beta), verdicts(SLICES));
}
