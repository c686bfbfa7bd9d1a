//! The incremental audit against the full one: random streams of pod and
//! node events (pods created, bound, moved, finished, deleted; nodes added,
//! removed, relabelled; now and then a namespace relabelled), each applied
//! to the snapshot as a watch event would be, and after every one the kept
//! state's audit must equal a full audit of the same snapshot.

use std::{collections::BTreeMap, sync::Arc};

use bulkhead::{
    audit::{audit, audit_cached, AuditConfig, NESTED},
    crd::{Bulkhead, Layer, LayerState},
    select::Selection,
    snapshot::{NamespaceInfo, NodeInfo, ObjectKey, PodInfo, RuntimeClassInfo, Snapshot},
};
use k8s_openapi::api::core::v1::Namespace;
use proptest::prelude::*;

const NODES: usize = 5;
const PODS: usize = 14;
const NAMESPACES: [&str; 2] = ["shop", "lab"];
const APPS: [&str; 4] = ["checkout", "search", "reports", "api"];
const RUNTIME_CLASSES: [Option<&str>; 4] = [None, Some("kata"), Some("runc"), Some("missing")];
const HOST_LABEL: &str = "example.com/host";

#[derive(Clone, Debug)]
enum Event {
    /// Create (or replace) a pod, bound or not.
    Pod {
        id: usize,
        ns: usize,
        app: usize,
        node: Option<usize>,
        rc: usize,
    },
    Bind {
        id: usize,
        node: usize,
    },
    Finish {
        id: usize,
    },
    Delete {
        id: usize,
    },
    Node {
        n: usize,
        zone: Option<u8>,
        host: Option<u8>,
    },
    RemoveNode {
        n: usize,
    },
    /// Relabel a namespace (moves it in or out of a class's namespaceSelector).
    Namespace {
        ns: usize,
        tier: bool,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0..PODS, 0..NAMESPACES.len(), 0..APPS.len(), proptest::option::of(0..NODES), 0..RUNTIME_CLASSES.len())
            .prop_map(|(id, ns, app, node, rc)| Event::Pod { id, ns, app, node, rc }),
        3 => (0..PODS, 0..NODES).prop_map(|(id, node)| Event::Bind { id, node }),
        1 => (0..PODS).prop_map(|id| Event::Finish { id }),
        2 => (0..PODS).prop_map(|id| Event::Delete { id }),
        2 => (0..NODES, proptest::option::of(0..3u8), proptest::option::of(0..2u8))
            .prop_map(|(n, zone, host)| Event::Node { n, zone, host }),
        1 => (0..NODES).prop_map(|n| Event::RemoveNode { n }),
        1 => (0..NAMESPACES.len(), any::<bool>()).prop_map(|(ns, tier)| Event::Namespace { ns, tier }),
    ]
}

/// Classes whose selectors overlap (a pod can be in two), one drawing by
/// namespace label, and, with a workload, two running in its pods.
fn bulkhead(workload: bool) -> Bulkhead {
    let mut classes = String::from(
        "  - {name: checkout, reserved: 1, pods: {podSelector: {matchExpressions: [{key: app, operator: In, values: [checkout, api]}]}}}\n\
         \x20 - {name: search, reserved: 1, pods: {podSelector: {matchExpressions: [{key: app, operator: In, values: [search, api]}]}}}\n\
         \x20 - {name: reports, reserved: 1, pods: {namespaceSelector: {matchLabels: {tier: batch}}, podSelector: {matchLabels: {app: reports}}}}\n",
    );
    let mut spec_workload = String::new();
    if workload {
        classes.push_str("  - {name: a, reserved: 1}\n  - {name: b, reserved: 1}\n");
        spec_workload = "  workload: {namespace: shop, selector: {matchLabels: {app: api}}}\n".to_string();
    }
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: t}}\nspec:\n  dimension: Dependency\n  layers: [Process, Node, Kernel, Zone, Host, Database]\n  pool: {{resource: connections, capacity: 100}}\n{spec_workload}  classes:\n{classes}"
    ))
    .expect("fixture")
}

fn start() -> Snapshot {
    let mut s = Snapshot::default();
    for ns in NAMESPACES {
        s.namespaces.insert(ns.into(), NamespaceInfo { name: ns.into(), ..Default::default() });
    }
    s.runtime_classes.insert("kata".into(), RuntimeClassInfo { handler: "kata-qemu".into() });
    s.runtime_classes.insert("runc".into(), RuntimeClassInfo { handler: "runc".into() });
    for n in 0..NODES - 1 {
        apply(&mut s, &Event::Node { n, zone: Some((n % 2) as u8), host: Some((n % 2) as u8) });
    }
    s
}

fn key(id: usize, s: &Snapshot) -> ObjectKey {
    // A pod keeps its namespace once created; a new one starts in the first.
    s.pods
        .keys()
        .find(|k| k.name == format!("pod-{id}"))
        .cloned()
        .unwrap_or_else(|| ObjectKey::new(NAMESPACES[id % 2], format!("pod-{id}")))
}

fn apply(s: &mut Snapshot, e: &Event) {
    match *e {
        Event::Pod { id, ns, app, node, rc } => {
            if let Some(old) = s.pods.keys().find(|k| k.name == format!("pod-{id}")).cloned() {
                s.set_pod(old, None);
            }
            let labels = [("app".to_string(), APPS[app].to_string())];
            let labels = s.interner.labels(labels.iter().map(|(k, v)| (k, v)));
            let node = node.map(|n| s.interner.intern(&format!("n-{n}")));
            let pod = PodInfo {
                labels,
                node,
                runtime_class: RUNTIME_CLASSES[rc].map(Arc::from),
                ip: None,
                finished: false,
                running: false,
                terminating: false,
                sidecar: None,
            };
            s.set_pod(ObjectKey::new(NAMESPACES[ns], format!("pod-{id}")), Some(pod));
        }
        Event::Bind { id, node } => {
            let k = key(id, s);
            if let Some(mut pod) = s.pods.get(&k).cloned() {
                // An unbound pod is bound; a bound one is moved (as a
                // reschedule under the same name would look).
                pod.node = Some(s.interner.intern(&format!("n-{node}")));
                s.set_pod(k, Some(pod));
            }
        }
        Event::Finish { id } => {
            let k = key(id, s);
            if let Some(mut pod) = s.pods.get(&k).cloned() {
                pod.finished = true;
                s.set_pod(k, Some(pod));
            }
        }
        Event::Delete { id } => {
            let k = key(id, s);
            s.set_pod(k, None);
        }
        Event::Node { n, zone, host } => {
            let mut labels = BTreeMap::new();
            if let Some(z) = zone {
                labels.insert("topology.kubernetes.io/zone".to_string(), format!("z-{z}"));
            }
            if let Some(h) = host {
                labels.insert(HOST_LABEL.to_string(), format!("h-{h}"));
            }
            let labels = s.interner.labels(labels.iter());
            let name = format!("n-{n}");
            let info =
                NodeInfo { name: name.clone(), labels, taints: Vec::new(), schedulable: true, resource_version: None };
            s.set_node(Some(info), &name);
        }
        Event::RemoveNode { n } => s.set_node(None, &format!("n-{n}")),
        Event::Namespace { ns, tier } => {
            let mut labels = BTreeMap::new();
            if tier {
                labels.insert("tier".to_string(), "batch".to_string());
            }
            let obj = Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(NAMESPACES[ns].to_string()),
                    labels: Some(labels),
                    ..Default::default()
                },
                ..Default::default()
            };
            s.apply(&obj);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_kept_audit_equals_a_full_audit_after_every_event(
        events in proptest::collection::vec(event(), 1..80),
        workload in any::<bool>(),
        host_label in any::<bool>(),
    ) {
        let bh = bulkhead(workload);
        let config = AuditConfig { host_label: host_label.then(|| HOST_LABEL.to_string()), ..AuditConfig::default() };
        let mut s = start();
        let mut cache = None;
        audit_cached(&mut cache, &Selection::parse(&bh), &s, &config);
        for (i, e) in events.iter().enumerate() {
            apply(&mut s, e);
            let kept = audit_cached(&mut cache, &Selection::parse(&bh), &s, &config);
            let full = audit(&Selection::parse(&bh), &s, &config);
            prop_assert_eq!(kept, full, "after event {} ({:?})", i, e);
        }
    }
}

/// The kept state is really kept: pod and node events do not rebuild it
/// (a test that would pass just as well by rebuilding every time proves less).
#[test]
fn pod_and_node_events_update_the_kept_state_without_a_rebuild() {
    let bh = bulkhead(false);
    let config = AuditConfig::default();
    let mut s = start();
    let mut cache = None;
    audit_cached(&mut cache, &Selection::parse(&bh), &s, &config);
    let cursor = s.journal.cursor();
    apply(&mut s, &Event::Pod { id: 1, ns: 0, app: 0, node: Some(1), rc: 0 });
    apply(&mut s, &Event::Pod { id: 2, ns: 0, app: 1, node: Some(1), rc: 0 });
    apply(&mut s, &Event::Node { n: 1, zone: Some(2), host: None });
    assert!(s.journal.since(cursor).is_some(), "the events are journaled, not a new epoch");
    let state = cache.as_mut().expect("a kept state");
    assert!(state.catch_up(&s), "the kept state catches up from the journal");
    let kept = audit_cached(&mut cache, &Selection::parse(&bh), &s, &config);
    assert_eq!(kept, audit(&Selection::parse(&bh), &s, &config));
    let node = kept.layers.iter().find(|l| l.name == bulkhead::crd::Layer::Node).expect("node layer");
    assert_eq!(node.pairs[0].evidence, vec!["node n-1 runs shop/pod-1 and shop/pod-2"]);
}

/// What the audit says of one pair in one layer (a pair a layer does not list is Separate).
fn state_of(audit: &bulkhead::audit::Audit, layer: Layer, a: &str, b: &str) -> LayerState {
    let l = audit.layers.iter().find(|l| l.name == layer).expect("every layer is reported");
    l.pairs.iter().find(|p| p.classes == [a, b]).map_or(LayerState::Separate, |p| p.state)
}

/// The classes of the generated Bulkhead a pod belongs to by its selectors
/// (spec.workload's classes aside), read from the snapshot as a person would.
fn selected_by(s: &Snapshot, key: &ObjectKey, pod: &PodInfo) -> Vec<&'static str> {
    let app = pod.labels.iter().find(|(k, _)| *k == "app").map(|(_, v)| v.to_string()).unwrap_or_default();
    let batch =
        s.namespaces.get(&key.namespace).is_some_and(|ns| ns.labels.iter().any(|(k, v)| k == "tier" && v == "batch"));
    let mut classes = Vec::new();
    if app == "checkout" || app == "api" {
        classes.push("checkout");
    }
    if app == "search" || app == "api" {
        classes.push("search");
    }
    if app == "reports" && batch {
        classes.push("reports");
    }
    classes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// One pod runs on one node with one kernel; one node sits on one machine
    /// in one zone. So no pair may be Separate (or Unverified) in a layer
    /// while it shares one nested in it; a shared node is a shared kernel
    /// unless both sides run sandboxed there; and disjoint nodes are
    /// disjoint kernels.
    #[test]
    fn no_pair_is_separate_under_a_layer_it_shares(
        events in proptest::collection::vec(event(), 1..60),
        workload in any::<bool>(),
        host_label in any::<bool>(),
    ) {
        let bh = bulkhead(workload);
        let config = AuditConfig { host_label: host_label.then(|| HOST_LABEL.to_string()), ..AuditConfig::default() };
        let names: Vec<String> = bh.spec.classes.iter().map(|c| c.name.clone()).collect();
        let mut s = start();
        for e in &events {
            apply(&mut s, e);
        }
        let audit = audit(&Selection::parse(&bh), &s, &config);
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                for step in NESTED.windows(2) {
                    if state_of(&audit, step[0], a, b) == LayerState::Shared {
                        prop_assert_eq!(
                            state_of(&audit, step[1], a, b), LayerState::Shared,
                            "{} and {} share {:?} but not {:?}: {:?}", a, b, step[0], step[1], audit.layers
                        );
                    }
                }
                if state_of(&audit, Layer::Node, a, b) == LayerState::Separate {
                    prop_assert_eq!(state_of(&audit, Layer::Kernel, a, b), LayerState::Separate);
                }
            }
        }
        // The oracle, from the snapshot alone: two classes' pods on one node,
        // at least one of them on the node's own kernel (no RuntimeClass, or
        // one that is not a sandbox), share that kernel.
        let host_kernel = |p: &PodInfo| p.runtime_class.as_deref().is_none_or(|rc| rc == "runc");
        let placed: Vec<(&ObjectKey, &PodInfo)> = s
            .pods
            .iter()
            .filter(|(_, p)| !p.finished && p.node.as_deref().is_some_and(|n| s.nodes.contains_key(n)))
            .collect();
        for (ka, pa) in &placed {
            for (kb, pb) in &placed {
                if pa.node != pb.node || !(host_kernel(pa) || host_kernel(pb)) {
                    continue;
                }
                for ca in selected_by(&s, ka, pa) {
                    for cb in selected_by(&s, kb, pb) {
                        let (Some(x), Some(y)) = (names.iter().position(|n| n == ca), names.iter().position(|n| n == cb)) else { continue };
                        if x < y {
                            prop_assert_eq!(
                                state_of(&audit, Layer::Kernel, ca, cb), LayerState::Shared,
                                "{} ({:?}) and {} ({:?}) on {:?}", ka, pa.runtime_class, kb, pb.runtime_class, pa.node
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A sandbox does not give a pod's classes a kernel each: one pod, one kernel.
#[test]
fn two_classes_in_one_sandboxed_pod_share_its_kernel() {
    let bh = bulkhead(false);
    let mut s = start();
    // An `api` pod serves checkout and search, in a Kata sandbox.
    apply(&mut s, &Event::Pod { id: 1, ns: 0, app: 3, node: Some(1), rc: 1 });
    let found = audit(&Selection::parse(&bh), &s, &AuditConfig::default());
    for layer in [Layer::Process, Layer::Node, Layer::Kernel, Layer::Zone, Layer::Host] {
        assert_eq!(state_of(&found, layer, "checkout", "search"), LayerState::Shared, "{layer:?}");
    }
    let kernel = found.layers.iter().find(|l| l.name == Layer::Kernel).expect("kernel layer");
    assert_eq!(
        kernel.pairs[0].evidence,
        vec!["pod shop/pod-1 serves both: one heap, one garbage collector (so one kernel)"]
    );
    // Before it is scheduled, too: wherever it runs, it is one pod.
    let mut s = start();
    apply(&mut s, &Event::Pod { id: 1, ns: 0, app: 3, node: None, rc: 1 });
    let found = audit(&Selection::parse(&bh), &s, &AuditConfig::default());
    assert_eq!(state_of(&found, Layer::Kernel, "checkout", "search"), LayerState::Shared);
}

/// A sandboxed pod beside an ordinary one still shares the node's kernel
/// with it; two sandboxed pods do not share one.
#[test]
fn a_node_kernel_is_shared_unless_both_sides_are_sandboxed() {
    let bh = bulkhead(false);
    let mut s = start();
    apply(&mut s, &Event::Pod { id: 1, ns: 0, app: 0, node: Some(1), rc: 1 }); // checkout, kata
    apply(&mut s, &Event::Pod { id: 2, ns: 0, app: 1, node: Some(1), rc: 0 }); // search, no RuntimeClass
    let audit1 = audit(&Selection::parse(&bh), &s, &AuditConfig::default());
    assert_eq!(state_of(&audit1, Layer::Kernel, "checkout", "search"), LayerState::Shared);
    let kernel = audit1.layers.iter().find(|l| l.name == Layer::Kernel).expect("kernel layer");
    assert!(
        kernel.pairs[0].evidence[0]
            .starts_with("node n-1 runs shop/pod-1 and shop/pod-2: shop/pod-2 runs on the node's own kernel"),
        "{:?}",
        kernel.pairs
    );
    apply(&mut s, &Event::Pod { id: 2, ns: 0, app: 1, node: Some(1), rc: 1 }); // search sandboxed too
    let audit2 = audit(&Selection::parse(&bh), &s, &AuditConfig::default());
    assert_eq!(state_of(&audit2, Layer::Node, "checkout", "search"), LayerState::Shared);
    assert_eq!(state_of(&audit2, Layer::Kernel, "checkout", "search"), LayerState::Separate);
}

/// A pod of two classes is named once in the Node layer's evidence.
#[test]
fn evidence_names_a_pod_of_both_classes_once() {
    let bh = bulkhead(false);
    let mut s = start();
    apply(&mut s, &Event::Pod { id: 1, ns: 0, app: 3, node: Some(1), rc: 0 });
    let audit = audit(&Selection::parse(&bh), &s, &AuditConfig::default());
    let node = audit.layers.iter().find(|l| l.name == Layer::Node).expect("node layer");
    assert_eq!(node.pairs[0].evidence, vec!["node n-1 runs shop/pod-1, which serves both"]);
}

/// Disjoint nodes are disjoint kernels, whatever RuntimeClass a pod names.
#[test]
fn a_missing_runtime_class_does_not_doubt_kernels_on_disjoint_nodes() {
    let bh = bulkhead(false);
    let mut s = start();
    apply(&mut s, &Event::Pod { id: 1, ns: 0, app: 0, node: Some(1), rc: 3 }); // checkout, RuntimeClass missing
    apply(&mut s, &Event::Pod { id: 2, ns: 0, app: 1, node: Some(2), rc: 0 }); // search
    let audit = audit(&Selection::parse(&bh), &s, &AuditConfig::default());
    assert_eq!(state_of(&audit, Layer::Node, "checkout", "search"), LayerState::Separate);
    assert_eq!(state_of(&audit, Layer::Kernel, "checkout", "search"), LayerState::Separate);
}
