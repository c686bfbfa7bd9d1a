//! The kept evaluation against a fresh one: random streams of pod, node,
//! namespace and Bulkhead changes, and after every one `evaluate_kept` must
//! give exactly what `evaluate` gives; and the cases it must reuse, or not.

use std::collections::BTreeMap;

use k8s_openapi::{api::core::v1::Namespace, apimachinery::pkg::apis::meta::v1::Time};
use proptest::prelude::*;

use super::{evaluate_kept, Kept, Reused};
use crate::{
    crd::{Bulkhead, BulkheadStatus, ClassStatus},
    evaluate::{evaluate, Config, Evaluation},
    snapshot::{NodeInfo, ObjectKey, PodInfo, Snapshot},
    status::ApplyOutcome,
};

const NODES: usize = 4;
const PODS: usize = 8;
/// a and b are selected by the Bulkhead's classes, x never, y when labelled tier=batch.
const NAMESPACES: [&str; 4] = ["a", "b", "x", "y"];

#[derive(Clone, Debug)]
enum Event {
    /// Create (or replace) a pod, bound or not.
    Pod {
        id: usize,
        ns: usize,
        node: Option<usize>,
    },
    Delete {
        id: usize,
    },
    /// A node (re)labelled; `claimed`: it carries class a's claim label.
    Node {
        n: usize,
        zone: u8,
        claimed: bool,
    },
    /// Relabel y into (or out of) class c's namespaceSelector.
    Batch(bool),
    /// A new version of the Bulkhead object (its status written, say), with the Zone layer required or not.
    Bulkhead {
        zone: bool,
    },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (0..PODS, 0..NAMESPACES.len(), proptest::option::of(0..NODES))
            .prop_map(|(id, ns, node)| Event::Pod { id, ns, node }),
        2 => (0..PODS).prop_map(|id| Event::Delete { id }),
        1 => (0..NODES, 0..2u8, any::<bool>()).prop_map(|(n, zone, claimed)| Event::Node { n, zone, claimed }),
        1 => any::<bool>().prop_map(Event::Batch),
        1 => any::<bool>().prop_map(|zone| Event::Bulkhead { zone }),
    ]
}

/// `a_extra`: more fields of class a (a node group, say).
fn bulkhead_with(version: u32, zone: bool, a_extra: &str) -> Bulkhead {
    let layers = if zone { "[Node, Zone]" } else { "[Node]" };
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: t, uid: u-1, resourceVersion: '{version}'}}\n\
         spec:\n  dimension: Tenant\n  layers: {layers}\n  pool: {{resource: connections, capacity: 100}}\n  classes:\n\
         \x20 - {{name: a, reserved: 1, pods: {{namespaceSelector: {{matchLabels: {{team: a}}}}}}{a_extra}}}\n\
         \x20 - {{name: b, reserved: 1, pods: {{namespaceSelector: {{matchLabels: {{team: b}}}}}}}}\n\
         \x20 - {{name: c, reserved: 1, pods: {{namespaceSelector: {{matchLabels: {{tier: batch}}}}}}}}\n"
    ))
    .expect("fixture")
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A snapshot as the controller keeps it, with the count of its changes other than pods'.
struct Cluster {
    snapshot: Snapshot,
    others: u64,
    bulkhead: Bulkhead,
    version: u32,
    a_extra: &'static str,
}

impl Cluster {
    fn new() -> Self {
        Self::with("")
    }

    fn with(a_extra: &'static str) -> Self {
        let mut c = Cluster {
            snapshot: Snapshot::default(),
            others: 0,
            bulkhead: bulkhead_with(1, false, a_extra),
            version: 1,
            a_extra,
        };
        c.snapshot.apply(&namespace("a", &[("team", "a")]));
        c.snapshot.apply(&namespace("b", &[("team", "b")]));
        c.snapshot.apply(&namespace("x", &[("team", "x")]));
        c.snapshot.apply(&namespace("y", &[]));
        for n in 0..NODES {
            c.apply(&Event::Node { n, zone: (n % 2) as u8, claimed: false });
        }
        c
    }

    fn apply(&mut self, e: &Event) {
        let s = &mut self.snapshot;
        match *e {
            Event::Pod { id, ns, node } => {
                if let Some(old) = s.pods.keys().find(|k| k.name == format!("p-{id}")).cloned() {
                    s.set_pod(old, None);
                }
                let labels = s.interner.labels([("app".to_string(), "w".to_string())].iter().map(|(k, v)| (k, v)));
                let node = node.map(|n| s.interner.intern(&format!("n-{n}")));
                let pod = PodInfo {
                    labels,
                    node,
                    runtime_class: None,
                    ip: None,
                    finished: false,
                    running: false,
                    terminating: false,
                    sidecar: None,
                };
                s.set_pod(ObjectKey::new(NAMESPACES[ns], format!("p-{id}")), Some(pod));
            }
            Event::Delete { id } => {
                if let Some(k) = s.pods.keys().find(|k| k.name == format!("p-{id}")).cloned() {
                    s.set_pod(k, None);
                }
            }
            Event::Node { n, zone, claimed } => {
                let mut labels = BTreeMap::from([("topology.kubernetes.io/zone".to_string(), format!("z-{zone}"))]);
                if claimed {
                    labels.insert(crate::plan::claim_key("t"), "a".to_string());
                }
                let labels = s.interner.labels(labels.iter());
                let name = format!("n-{n}");
                let info = NodeInfo {
                    name: name.clone(),
                    labels,
                    taints: Vec::new(),
                    schedulable: true,
                    resource_version: None,
                };
                s.set_node(Some(info), &name);
                self.others += 1;
            }
            Event::Batch(batch) => {
                s.apply(&namespace("y", if batch { &[("tier", "batch")] } else { &[] }));
                self.others += 1;
            }
            Event::Bulkhead { zone } => {
                self.version += 1;
                self.bulkhead = bulkhead_with(self.version, zone, self.a_extra);
            }
        }
    }

    /// The kept evaluation, and whether all of it was reused.
    fn kept(&self, kept: &mut Kept) -> (Evaluation, bool) {
        let (evaluation, reused) = self.kept_how(kept);
        (evaluation, reused == Reused::Evaluation)
    }

    fn kept_how(&self, kept: &mut Kept) -> (Evaluation, Reused) {
        let (evaluation, reused) = evaluate_kept(&self.bulkhead, &self.snapshot, self.others, &Config::default(), kept);
        ((*evaluation).clone(), reused)
    }
}

/// Everything an evaluation decides, comparable.
fn decided(e: &Evaluation, bulkhead: &Bulkhead) -> String {
    let now = Time(jiff::Timestamp::from_second(1_700_000_000).expect("time"));
    let status = e.status(bulkhead, &ApplyOutcome::NotApplied, &now);
    format!("{:?}\n{:?}\n{:?}\n{status:?}", e.plan, e.changes, e.audit)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_kept_evaluation_is_always_what_a_fresh_one_would_be(events in proptest::collection::vec(event(), 1..40)) {
        kept_equals_fresh(Cluster::new(), &events)?;
    }

    /// Class a claims a node in zone z-0: while no node carries its claim the
    /// plan ranks candidates by their pods (it reads pods), else it does not.
    #[test]
    fn with_a_node_group_too(events in proptest::collection::vec(event(), 1..40)) {
        kept_equals_fresh(Cluster::with(NODE_GROUP), &events)?;
    }
}

const NODE_GROUP: &str = ", nodes: {selector: {matchLabels: {topology.kubernetes.io/zone: z-0}}, count: 1}";

fn kept_equals_fresh(mut cluster: Cluster, events: &[Event]) -> Result<(), TestCaseError> {
    let mut kept = Kept::default();
    cluster.kept(&mut kept);
    for e in events {
        cluster.apply(e);
        let (evaluation, _) = cluster.kept(&mut kept);
        let fresh = evaluate(&cluster.bulkhead, &cluster.snapshot, &Config::default());
        prop_assert_eq!(decided(&evaluation, &cluster.bulkhead), decided(&fresh, &cluster.bulkhead), "after {:?}", e);
    }
    Ok(())
}

#[test]
fn only_changes_outside_what_the_bulkhead_reads_reuse_its_evaluation() {
    let mut cluster = Cluster::new();
    let mut kept = Kept::default();
    assert!(!cluster.kept(&mut kept).1, "the first evaluation is a full one");
    assert!(cluster.kept(&mut kept).1, "nothing changed");
    let cases = [
        (Event::Pod { id: 0, ns: 2, node: Some(1) }, true, "a pod in a namespace no class selects"),
        (Event::Pod { id: 1, ns: 3, node: Some(1) }, true, "a pod in y while no class selects it"),
        (Event::Pod { id: 2, ns: 0, node: Some(0) }, false, "a pod of class a"),
        (Event::Pod { id: 3, ns: 1, node: None }, false, "a pending pod of class b"),
        (Event::Delete { id: 0 }, true, "the foreign pod deleted"),
        (Event::Node { n: 3, zone: 0, claimed: false }, false, "a node relabelled"),
        (Event::Batch(true), false, "y now selected by class c"),
        (Event::Pod { id: 1, ns: 3, node: Some(2) }, false, "a pod in y, now read"),
        (Event::Bulkhead { zone: false }, true, "a new version of the Bulkhead, same spec (its status written)"),
        (Event::Bulkhead { zone: true }, false, "the spec changed"),
    ];
    for (event, reuse, what) in cases {
        cluster.apply(&event);
        assert_eq!(cluster.kept(&mut kept).1, reuse, "{what}");
        assert!(cluster.kept(&mut kept).1, "{what}, then nothing");
    }
}

#[test]
fn a_shard_recorded_in_the_status_is_read_again() {
    let mut cluster = Cluster::new();
    let mut kept = Kept::default();
    cluster.kept(&mut kept);
    let class = ClassStatus { name: "a".to_string(), shard: vec!["n-1".to_string()], ..ClassStatus::default() };
    cluster.bulkhead.status = Some(BulkheadStatus { classes: vec![class], ..BulkheadStatus::default() });
    assert!(!cluster.kept(&mut kept).1, "the plan keeps the shards the status records");
    assert!(cluster.kept(&mut kept).1, "then nothing changed");
    cluster.bulkhead.metadata.uid = Some("u-2".to_string());
    assert!(!cluster.kept(&mut kept).1, "another object of the same name");
}

#[test]
fn a_bulkhead_naming_a_database_is_evaluated_again_on_any_pod_change() {
    let mut cluster = Cluster::new();
    cluster.bulkhead.spec.classes[0].databases = vec!["postgres://10.0.0.5:5432/db".to_string()];
    let mut kept = Kept::default();
    cluster.kept(&mut kept);
    cluster.apply(&Event::Pod { id: 0, ns: 2, node: Some(1) });
    assert!(!cluster.kept(&mut kept).1, "a foreign pod may be the database's backend");
}

#[test]
fn a_relisted_pod_watch_is_evaluated_again() {
    let mut cluster = Cluster::new();
    let mut kept = Kept::default();
    cluster.kept(&mut kept);
    cluster.snapshot.reset::<k8s_openapi::api::core::v1::Pod>(BTreeMap::new());
    assert!(!cluster.kept(&mut kept).1, "a relist starts a new journal epoch");
}

#[test]
fn a_status_found_in_place_is_known_only_for_the_same_evaluation_object_and_outcome() {
    let mut cluster = Cluster::new();
    let mut kept = Kept::default();
    let outcome = ApplyOutcome::NotApplied;
    let sizing = std::sync::Arc::new(crate::status::Sizing::Pending);
    let none = None;
    cluster.kept(&mut kept);
    assert!(!kept.reported_already(&cluster.bulkhead, &outcome, &sizing, &none), "nothing noted yet");
    kept.note_reported(&cluster.bulkhead, &outcome, &sizing, &none);
    assert!(kept.reported_already(&cluster.bulkhead, &outcome, &sizing, &none));
    let analysed = std::sync::Arc::new(crate::status::Sizing::Pending);
    assert!(
        !kept.reported_already(&cluster.bulkhead, &outcome, &analysed, &none),
        "another analysis, even an equal one"
    );
    let failed = ApplyOutcome::Failed("boom".to_string());
    assert!(!kept.reported_already(&cluster.bulkhead, &failed, &sizing, &none), "another outcome");
    let answered = Some(std::sync::Arc::new(crate::status::Observed::default()));
    assert!(!kept.reported_already(&cluster.bulkhead, &outcome, &sizing, &answered), "new answers of the sidecars");
    // A pod nobody reads: the evaluation is reused, so the status still holds.
    cluster.apply(&Event::Pod { id: 0, ns: 2, node: Some(1) });
    assert!(cluster.kept(&mut kept).1);
    assert!(kept.reported_already(&cluster.bulkhead, &outcome, &sizing, &none));
    // A new object version (someone wrote its status): compare again.
    cluster.apply(&Event::Bulkhead { zone: false });
    assert!(cluster.kept(&mut kept).1, "same spec: the evaluation is reused");
    assert!(
        !kept.reported_already(&cluster.bulkhead, &outcome, &sizing, &none),
        "but the status must be built and compared"
    );
    kept.note_reported(&cluster.bulkhead, &outcome, &sizing, &none);
    // A pod a class reads: a fresh evaluation, so build again.
    cluster.apply(&Event::Pod { id: 1, ns: 0, node: Some(0) });
    assert!(!cluster.kept(&mut kept).1);
    assert!(!kept.reported_already(&cluster.bulkhead, &outcome, &sizing, &none));
}

#[test]
fn a_pod_a_class_reads_runs_the_audit_again_but_keeps_a_plan_that_read_no_pod() {
    let mut cluster = Cluster::new();
    let mut kept = Kept::default();
    assert_eq!(cluster.kept_how(&mut kept).1, Reused::Nothing);
    cluster.apply(&Event::Pod { id: 2, ns: 0, node: Some(0) });
    assert_eq!(cluster.kept_how(&mut kept).1, Reused::Plan, "a pod of class a: only the audit reads it");
    cluster.apply(&Event::Node { n: 1, zone: 1, claimed: false });
    assert_eq!(cluster.kept_how(&mut kept).1, Reused::Nothing, "a node: plan again");

    // While class a misses its claimed node, the plan ranks nodes by their pods.
    let mut cluster = Cluster::with(NODE_GROUP);
    let mut kept = Kept::default();
    cluster.kept_how(&mut kept);
    cluster.apply(&Event::Pod { id: 2, ns: 1, node: Some(0) });
    assert_eq!(cluster.kept_how(&mut kept).1, Reused::Nothing, "the plan read pods: plan again");
    // Once it holds one (n-0, in z-0), the plan reads no pod.
    cluster.apply(&Event::Node { n: 0, zone: 0, claimed: true });
    cluster.kept_how(&mut kept);
    cluster.apply(&Event::Pod { id: 3, ns: 1, node: Some(2) });
    assert_eq!(cluster.kept_how(&mut kept).1, Reused::Plan);
}
