//! The shared-layer audit, rule by rule, including the tricky cases. No cluster.

use bulkhead::{
    audit::{host_of, Audit, AuditConfig},
    crd::{Bulkhead, Layer, LayerState, LayerStatus},
    select::Selection,
    snapshot::Snapshot,
    status::{isolated_condition, ConditionStatus as Status},
};
use serde_json::json;

use crate::fixtures::{mk_endpoints, mk_namespace, mk_node, mk_pod_with, mk_runtime_class, mk_service};

/// The audit as the controller runs it: selectors parsed once, then audited.
fn audit(bulkhead: &Bulkhead, snapshot: &Snapshot, config: &AuditConfig) -> Audit {
    bulkhead::audit::audit(&Selection::parse(bulkhead), snapshot, config)
}

fn bulkhead(classes: &str, layers: &str) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: t}}\nspec:\n  dimension: Dependency\n  layers: {layers}\n  pool: {{resource: connections, capacity: 100}}\n  classes:\n{classes}"
    ))
    .expect("fixture")
}

/// Two classes selecting pods by `app` in namespace `shop`.
fn two_classes(layers: &str) -> Bulkhead {
    bulkhead(
        "  - {name: checkout, reserved: 10, pods: {podSelector: {matchLabels: {app: checkout}}}}\n  - {name: reports, reserved: 10, pods: {podSelector: {matchLabels: {app: reports}}}}\n",
        layers,
    )
}

/// Namespace `shop` and what each test adds, through `Snapshot::apply`.
struct Cluster(Snapshot);

impl Cluster {
    fn new() -> Self {
        let mut s = Snapshot::default();
        s.apply(&mk_namespace("shop", &[]));
        Cluster(s)
    }
    fn node(&mut self, name: &str, labels: &[(&str, &str)]) -> &mut Self {
        self.0.apply(&mk_node(name, labels));
        self
    }
    fn pod(
        &mut self,
        name: &str,
        app: &str,
        node: Option<&str>,
        runtime_class: Option<&str>,
        ip: Option<&str>,
    ) -> &mut Self {
        self.0.apply(&mk_pod_with("shop", name, &[("app", app)], node, runtime_class, ip));
        self
    }
    /// A Service with `spec`; with backends, its Endpoints name pods `NAME-0`, `NAME-1`, ...
    fn service(&mut self, name: &str, spec: serde_json::Value, backends: &[&str]) -> &mut Self {
        self.0.apply(&mk_service("shop", name, spec));
        if !backends.is_empty() {
            let pods: Vec<String> = (0..backends.len()).map(|i| format!("{name}-{i}")).collect();
            let addresses: Vec<(&str, Option<&str>)> =
                backends.iter().zip(&pods).map(|(ip, pod)| (*ip, Some(pod.as_str()))).collect();
            self.0.apply(&mk_endpoints("shop", name, &addresses));
        }
        self
    }
}

fn layer(bh: &Bulkhead, cluster: &Cluster, which: Layer) -> LayerStatus {
    audit(bh, &cluster.0, &AuditConfig::default()).owned_layers().into_iter().find(|l| l.name == which).expect("layer")
}

#[test]
fn a_node_running_both_classes_is_shared_and_named() {
    let bh = two_classes("[Node]");
    let mut c = Cluster::new();
    c.node("n-1", &[]).node("n-3", &[]);
    c.pod("checkout-1", "checkout", Some("n-1"), None, None).pod("checkout-2", "checkout", Some("n-3"), None, None);
    c.pod("reports-1", "reports", Some("n-3"), None, None);
    let l = layer(&bh, &c, Layer::Node);
    assert_eq!(l.state, LayerState::Shared);
    assert!(l.required);
    assert_eq!(l.pairs[0].classes, vec!["checkout", "reports"]);
    assert_eq!(l.pairs[0].evidence, vec!["node n-3 runs shop/checkout-2 and shop/reports-1"]);
}

#[test]
fn disjoint_nodes_are_separate_and_unscheduled_pods_are_ignored_and_counted() {
    let bh = two_classes("[Node]");
    let mut c = Cluster::new();
    c.node("n-1", &[]).node("n-2", &[]);
    c.pod("checkout-1", "checkout", Some("n-1"), None, None);
    c.pod("reports-1", "reports", Some("n-2"), None, None);
    c.pod("reports-pending", "reports", None, None, None);
    let a = audit(&bh, &c.0, &AuditConfig::default());
    let node = a.layers.iter().find(|l| l.name == Layer::Node).expect("node");
    assert_eq!(node.state, LayerState::Separate);
    assert!(node.pairs.is_empty());
    assert_eq!(a.unscheduled, 1);
    let kernel = a.layers.iter().find(|l| l.name == Layer::Kernel).expect("kernel");
    assert_eq!(kernel.state, LayerState::Separate, "different nodes, different kernels");
}

#[test]
fn a_class_with_only_unscheduled_pods_is_unverified_not_separate() {
    let bh = two_classes("[Node]");
    let mut c = Cluster::new();
    c.node("n-1", &[]);
    c.pod("checkout-1", "checkout", Some("n-1"), None, None);
    c.pod("reports-pending", "reports", None, None, None);
    let l = layer(&bh, &c, Layer::Node);
    assert_eq!(l.state, LayerState::Unverified);
    assert!(l.pairs[0].evidence[0].contains("no pods of class reports are placed yet"));
}

#[test]
fn sandboxed_runtime_classes_on_both_sides_separate_kernels_on_a_shared_node() {
    let bh = two_classes("[Node, Kernel]");
    let mut c = Cluster::new();
    c.node("n-1", &[]);
    c.0.apply(&mk_runtime_class("kata", "kata-qemu"));
    c.0.apply(&mk_runtime_class("runc", "runc"));
    c.pod("checkout-1", "checkout", Some("n-1"), Some("kata"), None);
    c.pod("reports-1", "reports", Some("n-1"), Some("kata"), None);
    assert_eq!(layer(&bh, &c, Layer::Node).state, LayerState::Shared);
    assert_eq!(layer(&bh, &c, Layer::Kernel).state, LayerState::Separate, "kata-qemu gives each its own guest kernel");

    // One side sandboxed: reports runs on the node's kernel, which checkout's guest kernel runs on too.
    c.pod("reports-1", "reports", Some("n-1"), None, None);
    let kernel = layer(&bh, &c, Layer::Kernel);
    assert_eq!(kernel.state, LayerState::Shared, "a sandbox on one side only still shares the node's kernel");
    assert!(kernel.pairs[0].evidence[0].contains("shop/reports-1 runs on the node's own kernel"), "{:?}", kernel.pairs);

    c.pod("checkout-1", "checkout", Some("n-1"), Some("runc"), None);
    let kernel = layer(&bh, &c, Layer::Kernel);
    assert_eq!(kernel.state, LayerState::Shared, "runc is no sandbox");
    assert!(kernel.pairs[0].evidence[0].contains("node n-1 runs shop/checkout-1 and shop/reports-1 on its kernel"));

    // Beside a pod on the node's own kernel, what an unknown RuntimeClass would give does not matter.
    c.pod("checkout-1", "checkout", Some("n-1"), Some("missing"), None);
    assert_eq!(layer(&bh, &c, Layer::Kernel).state, LayerState::Shared);
    // Beside a sandboxed one it does: a RuntimeClass that does not exist proves nothing.
    c.pod("reports-1", "reports", Some("n-1"), Some("kata"), None);
    assert_eq!(layer(&bh, &c, Layer::Kernel).state, LayerState::Unverified);
}

#[test]
fn nodes_without_zone_labels_make_the_zone_unverified() {
    let bh = two_classes("[Zone]");
    let mut c = Cluster::new();
    c.node("n-1", &[("topology.kubernetes.io/zone", "a")]).node("n-2", &[]);
    c.pod("checkout-1", "checkout", Some("n-1"), None, None);
    c.pod("reports-1", "reports", Some("n-2"), None, None);
    let l = layer(&bh, &c, Layer::Zone);
    assert_eq!(l.state, LayerState::Unverified);
    assert!(l.pairs[0]
        .evidence
        .iter()
        .any(|e| e.contains("node n-2 (running shop/reports-1) has no topology.kubernetes.io/zone label")));

    c.node("n-2", &[("topology.kubernetes.io/zone", "b")]);
    assert_eq!(layer(&bh, &c, Layer::Zone).state, LayerState::Separate);
    c.node("n-2", &[("topology.kubernetes.io/zone", "a")]);
    let l = layer(&bh, &c, Layer::Zone);
    assert_eq!(l.state, LayerState::Shared);
    assert_eq!(l.pairs[0].evidence, vec!["zone a holds shop/checkout-1 and shop/reports-1"]);
}

#[test]
fn the_host_layer_is_unverified_unless_a_label_names_the_machine() {
    let bh = two_classes("[Host]");
    let mut c = Cluster::new();
    c.node("n-1", &[("example.com/hypervisor", "h-1")]).node("n-2", &[("example.com/hypervisor", "h-1")]);
    c.pod("checkout-1", "checkout", Some("n-1"), None, None);
    c.pod("reports-1", "reports", Some("n-2"), None, None);
    let l = layer(&bh, &c, Layer::Host);
    assert_eq!(l.state, LayerState::Unverified);
    assert!(l.pairs[0].evidence[0].contains("no host label is configured"));
    let config = AuditConfig { host_label: Some("example.com/hypervisor".into()), ..AuditConfig::default() };
    let a = audit(&bh, &c.0, &config);
    let host = a.layers.iter().find(|l| l.name == Layer::Host).expect("host");
    assert_eq!(host.state, LayerState::Shared, "two nodes, one hypervisor");
    assert_eq!(host.pairs[0].evidence, vec!["host h-1 holds shop/checkout-1 and shop/reports-1"]);
}

#[test]
fn overlapping_selectors_share_a_process() {
    let bh = bulkhead(
        "  - {name: checkout, reserved: 10, pods: {podSelector: {matchLabels: {app: api}}}}\n  - {name: reports, reserved: 10, pods: {podSelector: {matchExpressions: [{key: app, operator: In, values: [api, reports]}]}}}\n",
        "[Process]",
    );
    let mut c = Cluster::new();
    c.pod("api-1", "api", Some("n-1"), None, None);
    let l = layer(&bh, &c, Layer::Process);
    assert_eq!(l.state, LayerState::Shared);
    assert!(l.pairs[0].evidence[0].starts_with("pod shop/api-1 serves both"));
}

#[test]
fn classes_in_the_workloads_pods_share_its_process_by_declaration() {
    let mut bh = bulkhead("  - {name: checkout, reserved: 10}\n  - {name: search, reserved: 10}\n", "[Process]");
    bh.spec.workload =
        Some(serde_saphyr::from_str("{namespace: shop, selector: {matchLabels: {app: api}}}").expect("wl"));
    let c = Cluster::new();
    let l = layer(&bh, &c, Layer::Process);
    assert_eq!(l.state, LayerState::Shared);
    assert!(l.pairs[0].evidence[0].contains("both run in the pods of spec.workload"));
}

#[test]
fn separate_pods_are_separate_processes() {
    let bh = two_classes("[Process]");
    let mut c = Cluster::new();
    c.pod("checkout-1", "checkout", None, None, None).pod("reports-1", "reports", None, None, None);
    assert_eq!(layer(&bh, &c, Layer::Process).state, LayerState::Separate);
}

fn with_databases(a: &str, b: &str) -> Bulkhead {
    bulkhead(
        &format!("  - {{name: checkout, reserved: 10, databases: [\"{a}\"]}}\n  - {{name: reports, reserved: 10, databases: [\"{b}\"]}}\n"),
        "[Database]",
    )
}

#[test]
fn two_services_with_different_names_and_the_same_backend_share_the_instance() {
    let mut c = Cluster::new();
    c.service("orders-db", json!({}), &["10.0.0.5"]);
    c.service("reporting-db", json!({}), &["10.0.0.5"]);
    let bh = with_databases(
        "postgres://orders-db.shop.svc:5432/orders",
        "postgres://reporting-db.shop.svc.cluster.local/reports",
    );
    let l = layer(&bh, &c, Layer::Database);
    assert_eq!(l.state, LayerState::Shared);
    assert!(l.pairs[0].evidence[0].contains("backend 10.0.0.5"), "{:?}", l.pairs[0].evidence);
}

#[test]
fn services_with_disjoint_backends_are_separate() {
    let mut c = Cluster::new();
    c.service("orders-db", json!({}), &["10.0.0.5"]);
    c.service("reporting-db", json!({}), &["10.0.0.6"]);
    let bh = with_databases("postgres://orders-db.shop.svc:5432/orders", "postgres://reporting-db.shop:5432/reports");
    assert_eq!(layer(&bh, &c, Layer::Database).state, LayerState::Separate);
}

#[test]
fn backends_come_from_the_service_selector_when_there_are_no_endpoints() {
    let mut c = Cluster::new();
    c.service("a-db", json!({"selector": {"app": "pg"}}), &[]);
    c.service("b-db", json!({"selector": {"app": "pg"}}), &[]);
    c.pod("pg-0", "pg", Some("n-1"), None, Some("10.1.1.1"));
    let bh = with_databases("postgres://a-db.shop.svc/x", "postgres://b-db.shop.svc/y");
    let l = layer(&bh, &c, Layer::Database);
    assert_eq!(l.state, LayerState::Shared);
    assert!(l.pairs[0].evidence[0].contains("pod shop/pg-0"), "{:?}", l.pairs[0].evidence);
}

#[test]
fn an_external_name_and_a_url_naming_the_same_host_share_the_instance() {
    let mut c = Cluster::new();
    c.service("orders-db", json!({"type": "ExternalName", "externalName": "db1.example.com"}), &[]);
    let bh = with_databases("postgres://orders-db.shop.svc/orders", "postgres://user:pw@DB1.example.com.:5432/reports");
    let l = layer(&bh, &c, Layer::Database);
    assert_eq!(l.state, LayerState::Shared);
    assert!(l.pairs[0].evidence[0].contains("host db1.example.com"));
}

#[test]
fn the_same_host_with_different_database_names_is_one_instance() {
    let c = Cluster::new();
    let bh = with_databases("postgres://db.example.com/orders", "postgres://db.example.com/reports");
    assert_eq!(layer(&bh, &c, Layer::Database).state, LayerState::Shared);
}

#[test]
fn different_external_hosts_are_unverified_never_separate() {
    let c = Cluster::new();
    let bh = with_databases("postgres://db1.example.com/orders", "postgres://db2.example.com/reports");
    let l = layer(&bh, &c, Layer::Database);
    assert_eq!(l.state, LayerState::Unverified);
    assert!(l.pairs[0].evidence[0].contains("outside the cluster"));
}

#[test]
fn hosts_are_parsed_from_urls() {
    assert_eq!(host_of("postgres://u:p@Db.Example.com:5432/x?sslmode=require").as_deref(), Some("db.example.com"));
    assert_eq!(host_of("mysql://[fd00::1]:3306/db").as_deref(), Some("fd00::1"));
    assert_eq!(host_of("redis-master.cache:6379").as_deref(), Some("redis-master.cache"));
}

#[test]
fn isolated_is_false_when_shared_unknown_when_unverified_true_when_separate() {
    let mut c = Cluster::new();
    c.node("n-1", &[]).node("n-2", &[]);
    c.pod("checkout-1", "checkout", Some("n-1"), None, None);
    c.pod("reports-1", "reports", Some("n-2"), None, None);
    let bh = two_classes("[Node, Zone]");
    let cond = isolated_condition(&audit(&bh, &c.0, &AuditConfig::default()).owned_layers(), 2);
    assert_eq!((cond.status, cond.reason.as_str()), (Status::Unknown, "SharedLayerUnverified"));
    assert!(cond.message.contains("Zone unverified by checkout and reports"), "{}", cond.message);

    let bh = two_classes("[Node]");
    let cond = isolated_condition(&audit(&bh, &c.0, &AuditConfig::default()).owned_layers(), 2);
    assert_eq!((cond.status, cond.reason.as_str()), (Status::True, "AllLayersSeparate"));

    c.pod("reports-2", "reports", Some("n-1"), None, None);
    let cond = isolated_condition(&audit(&bh, &c.0, &AuditConfig::default()).owned_layers(), 2);
    assert_eq!((cond.status, cond.reason.as_str()), (Status::False, "SharedLayerDetected"));
    assert_eq!(cond.message, "Node shared by checkout and reports: node n-1 runs shop/checkout-1 and shop/reports-2");
}

#[test]
fn every_layer_is_reported_required_or_not() {
    let bh = two_classes("[Node]");
    let a = audit(&bh, &Cluster::new().0, &AuditConfig::default());
    let names: Vec<Layer> = a.layers.iter().map(|l| l.name).collect();
    assert_eq!(names, Layer::ALL.to_vec());
    assert_eq!(a.layers.iter().filter(|l| l.required).count(), 1);
}

#[test]
fn addresses_outside_the_cluster_are_unverified_never_separate() {
    let mut c = Cluster::new();
    let bh = with_databases("postgres://203.0.113.5/a", "postgres://203.0.113.6/b");
    let l = layer(&bh, &c, Layer::Database);
    assert_eq!(l.state, LayerState::Unverified, "two addresses may front one instance");
    let bh = with_databases("postgres://[fd00::1]/a", "postgres://[fd00:0::1]/b");
    assert_eq!(layer(&bh, &c, Layer::Database).state, LayerState::Shared, "one address, written two ways");
    // A Service whose hand-written Endpoints point outside the cluster.
    c.service("ext-a", json!({}), &[]);
    c.0.apply(&mk_endpoints("shop", "ext-a", &[("198.51.100.1", None)]));
    c.service("pg", json!({}), &["10.0.0.9"]);
    let bh = with_databases("postgres://ext-a.shop.svc/a", "postgres://pg.shop.svc/b");
    let l = layer(&bh, &c, Layer::Database);
    assert_eq!(l.state, LayerState::Unverified);
    assert!(
        l.pairs[0].evidence.iter().any(|e| e.contains("198.51.100.1, which is not a pod")),
        "{:?}",
        l.pairs[0].evidence
    );
}

#[test]
fn a_single_class_has_nothing_to_be_isolated_from_and_says_so() {
    let bh = bulkhead("  - {name: only, reserved: 10, pods: {podSelector: {matchLabels: {app: only}}}}\n", "[Node]");
    let a = audit(&bh, &Cluster::new().0, &AuditConfig::default());
    assert!(a.layers.iter().all(|l| l.pairs.is_empty()));
    let cond = isolated_condition(&a.owned_layers(), 1);
    assert_eq!(cond.status, Status::True);
    assert_eq!(cond.message, "only one class: there is nothing to isolate it from");
}

#[test]
fn a_status_lists_a_bounded_number_of_pairs_shared_first_and_counts_the_rest() {
    use bulkhead::crd::MAX_PAIRS_LISTED;
    use bulkhead::{
        evaluate::{evaluate, Config},
        status::ApplyOutcome,
    };
    // 20 classes on two nodes: every pair shares a node or the zone.
    let classes: String = (0..20)
        .map(|i| format!("  - {{name: c{i}, reserved: 1, pods: {{podSelector: {{matchLabels: {{app: a{i}}}}}}}}}\n"))
        .collect();
    let bh = bulkhead(&classes, "[Node]");
    let mut c = Cluster::new();
    c.node("n-1", &[("topology.kubernetes.io/zone", "z")]).node("n-2", &[("topology.kubernetes.io/zone", "z")]);
    // c0 and c1 share n-1; the other 18 classes all share n-2.
    c.pod("p0", "a0", Some("n-1"), None, None).pod("p1", "a1", Some("n-1"), None, None);
    for i in 2..20 {
        c.pod(&format!("p{i}"), &format!("a{i}"), Some("n-2"), None, None);
    }
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(1_700_000_000).expect("time"),
    );
    let status = evaluate(&bh, &c.0, &Config::default()).status(&bh, &ApplyOutcome::NotApplied, &now);
    let node = status.layers.iter().find(|l| l.name == Layer::Node).expect("node layer");
    // 1 pair on n-1, 153 on n-2: 154 shared pairs, 10 listed.
    assert_eq!(node.state, LayerState::Shared);
    assert_eq!(node.pairs.len(), MAX_PAIRS_LISTED);
    assert_eq!(node.unlisted_pairs as usize, 1 + 18 * 17 / 2 - MAX_PAIRS_LISTED);
    assert!(node.pairs.iter().all(|p| p.state == LayerState::Shared));
    // Zone: 190 pairs, all Shared.
    let zone = status.layers.iter().find(|l| l.name == Layer::Zone).expect("zone layer");
    assert_eq!((zone.pairs.len(), zone.unlisted_pairs), (MAX_PAIRS_LISTED, 190 - MAX_PAIRS_LISTED as u32));
    // The condition read every pair, not just the listed ones.
    let isolated = status.conditions.iter().find(|c| c.type_ == "Isolated").expect("Isolated");
    assert_eq!(isolated.status, "False");
    // Bounded: the whole status stays small (it was ~64 KB for 20 classes listing every pair).
    let size = serde_json::to_string(&status).expect("json").len();
    assert!(size < 16_000, "status of 20 classes is {size} bytes");
    // Few pairs are listed as they are.
    let two = two_classes("[Node]");
    let mut small = Cluster::new();
    small.node("n-1", &[]);
    small.pod("c", "checkout", Some("n-1"), None, None).pod("r", "reports", Some("n-1"), None, None);
    let s = evaluate(&two, &small.0, &Config::default()).status(&two, &ApplyOutcome::NotApplied, &now);
    let node = s.layers.iter().find(|l| l.name == Layer::Node).expect("node layer");
    assert_eq!((node.pairs.len(), node.unlisted_pairs), (1, 0));
}

#[test]
fn bounding_lists_shared_pairs_before_unverified_ones() {
    use bulkhead::crd::{PairStatus, MAX_PAIRS_LISTED};
    let pair =
        |i: usize, state| PairStatus { classes: vec![format!("a{i}"), format!("b{i}")], state, evidence: vec![] };
    let pairs: Vec<PairStatus> =
        (0..30).map(|i| pair(i, if i % 3 == 0 { LayerState::Shared } else { LayerState::Unverified })).collect();
    let layer = LayerStatus {
        name: Layer::Host,
        required: false,
        state: LayerState::Shared,
        pairs,
        unlisted_pairs: 0,
        admission: None,
    }
    .bounded();
    let listed: Vec<(&str, LayerState)> = layer.pairs.iter().map(|p| (p.classes[0].as_str(), p.state)).collect();
    // The 10 Shared pairs (0, 3, … 27) in their order, then nothing else fits.
    assert_eq!(listed.len(), MAX_PAIRS_LISTED);
    assert!(listed.iter().all(|(_, s)| *s == LayerState::Shared));
    assert_eq!(listed[0].0, "a0");
    assert_eq!(listed[9].0, "a27");
    assert_eq!(layer.unlisted_pairs, 20);
}
