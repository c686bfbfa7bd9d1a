//! The pure planner: every worked number of the README and every rule the
//! controller and `bulkhead plan` share. No cluster.

use bulkhead::{
    crd::Bulkhead,
    plan::{changes, nano_units, plan_capacity, Change, Funding, Plan, PlanConfig},
    select::{Replicas, Selection},
    snapshot::{ObjectKey, Snapshot},
    status::{build_status, ApplyOutcome},
};
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Namespace},
    apimachinery::pkg::apis::meta::v1::Time,
};

use crate::fixtures::{mk_autoscaler, mk_deployment, mk_namespace};

/// The planner as the controller runs it: selectors parsed once, then planned.
fn plan(bulkhead: &Bulkhead, snapshot: &Snapshot) -> Plan {
    bulkhead::plan::plan(&Selection::parse(bulkhead), snapshot, &PlanConfig::default())
}

fn bulkhead(yaml: &str) -> Bulkhead {
    let mut bh: Bulkhead = serde_saphyr::from_str(yaml).expect("fixture parses");
    bh.metadata.uid.get_or_insert_with(|| "uid-1".into());
    bh.metadata.generation.get_or_insert(1);
    bh
}

fn classes(reserved: &[u32], shared: Option<u32>, capacity: u32) -> Bulkhead {
    let classes: Vec<String> =
        reserved.iter().enumerate().map(|(i, r)| format!("  - {{name: c{i}, reserved: {r}}}")).collect();
    let shared = shared.map(|s| format!(", sharedSurplus: {s}")).unwrap_or_default();
    bulkhead(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: t}}\nspec:\n  dimension: Dependency\n  pool: {{resource: connections, capacity: {capacity}{shared}}}\n  classes:\n{}\n",
        classes.join("\n")
    ))
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> Namespace {
    mk_namespace(name, labels)
}

fn workload(ns: &str, name: &str, app: &str, replicas: i32) -> Deployment {
    mk_deployment(ns, name, app, replicas)
}

/// Namespaces and Deployments, fed through `Snapshot::apply`.
fn snapshot_with(namespaces: Vec<Namespace>, workloads: Vec<Deployment>) -> Snapshot {
    let mut s = Snapshot::default();
    for ns in &namespaces {
        s.apply(ns);
    }
    for w in &workloads {
        s.apply(w);
    }
    s
}

fn now() -> Time {
    Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"))
}

// --- the README's worked numbers -------------------------------------------

#[test]
fn thirty_reserved_each_plus_eighty_shared_gives_ceiling_110_and_leaves_90() {
    let (plan, errors) = plan_capacity(&classes(&[30, 30, 30, 30], Some(80), 200).spec, None);
    assert!(errors.is_empty());
    assert!(plan.funding.is_funded());
    for c in &plan.classes {
        assert_eq!((c.ceiling, c.borrowable, c.left_to_others), (110, 80, 90));
    }
}

#[test]
fn four_pools_of_fifty_give_ceiling_50_and_leave_150() {
    let (plan, _) = plan_capacity(&classes(&[50, 50, 50, 50], Some(0), 200).spec, None);
    assert!(plan.funding.is_funded());
    for c in &plan.classes {
        assert_eq!((c.ceiling, c.borrowable, c.left_to_others), (50, 0, 150));
    }
}

#[test]
fn one_shared_pool_gives_ceiling_200_and_leaves_nothing() {
    let (plan, _) = plan_capacity(&classes(&[0, 0, 0, 0], None, 200).spec, None);
    assert_eq!(plan.shared_surplus, 200, "default surplus is capacity minus reservations");
    for c in &plan.classes {
        assert_eq!((c.ceiling, c.left_to_others), (200, 0));
    }
}

#[test]
fn the_example_pool_with_a_control_plane_lane_is_funded_at_200() {
    let (plan, errors) = plan_capacity(&classes(&[40, 30, 10, 5], Some(115), 200).spec, None);
    assert!(errors.is_empty());
    match &plan.funding {
        Funding::Funded { message } => {
            assert_eq!(message, "reserved 40 + 30 + 10 + 5 = 85, plus shared surplus 115, is 200 of 200 connections")
        }
        other => panic!("not funded: {other:?}"),
    }
    let ceilings: Vec<u32> = plan.classes.iter().map(|c| c.ceiling).collect();
    assert_eq!(ceilings, vec![155, 145, 125, 120]);
}

#[test]
fn the_default_surplus_is_capacity_minus_reservations() {
    let (plan, _) = plan_capacity(&classes(&[30, 30, 30, 30], None, 200).spec, None);
    assert_eq!(plan.shared_surplus, 80);
    assert_eq!(plan.classes[0].ceiling, 110);
}

// --- funding ----------------------------------------------------------------

#[test]
fn reservations_plus_surplus_over_capacity_are_unfundable_with_the_arithmetic() {
    let (plan, _) = plan_capacity(&classes(&[100, 50], Some(80), 200).spec, None);
    match plan.funding {
        Funding::Unfundable { message } => assert_eq!(
            message,
            "reserved 100 + 50 = 150, plus shared surplus 80, is 230: 30 more than the capacity of 200 connections"
        ),
        other => panic!("expected unfundable, got {other:?}"),
    }
}

#[test]
fn reservations_alone_over_capacity_are_unfundable_even_with_the_default_surplus() {
    let (plan, _) = plan_capacity(&classes(&[150, 100], None, 200).spec, None);
    assert_eq!(plan.shared_surplus, 0);
    assert!(matches!(plan.funding, Funding::Unfundable { .. }));
}

// --- ceilings ---------------------------------------------------------------

#[test]
fn a_ceiling_above_floor_plus_surplus_is_an_error_naming_the_field() {
    let mut bh = classes(&[30, 30], Some(80), 200);
    bh.spec.classes[1].ceiling = Some(150);
    let (plan, errors) = plan_capacity(&bh.spec, None);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].field, "spec.classes[1].ceiling");
    assert!(errors[0].message.contains("150 exceeds reserved + sharedSurplus (30 + 80 = 110)"));
    assert_eq!(plan.classes[1].ceiling, 110, "clamped for reporting");
}

#[test]
fn a_ceiling_below_the_floor_is_an_error() {
    let mut bh = classes(&[30], Some(10), 200);
    bh.spec.classes[0].ceiling = Some(20);
    let (_, errors) = plan_capacity(&bh.spec, None);
    assert_eq!(errors[0].field, "spec.classes[0].ceiling");
    assert!(errors[0].message.contains("below"));
}

#[test]
fn a_lower_explicit_ceiling_limits_borrowing() {
    let mut bh = classes(&[30, 30, 30, 30], Some(80), 200);
    bh.spec.classes[0].ceiling = Some(60);
    let (plan, errors) = plan_capacity(&bh.spec, None);
    assert!(errors.is_empty());
    assert_eq!((plan.classes[0].borrowable, plan.classes[0].left_to_others), (30, 140));
}

// --- replicas -----------------------------------------------------------------

fn fleet(reserved: &[u32], shared: u32, capacity: u32) -> Bulkhead {
    let mut bh = classes(reserved, Some(shared), capacity);
    bh.spec.pool.scope = bulkhead::crd::Scope::Fleet;
    bh.spec.workload =
        Some(serde_saphyr::from_str("{namespace: shop, selector: {matchLabels: {app: api}}}").expect("wl"));
    bh
}

#[test]
fn a_fleet_pool_splits_over_replicas_and_never_exceeds_capacity() {
    let bh = fleet(&[30, 30, 30, 30], 80, 200);
    for replicas in 1..=40u64 {
        let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: replicas, ..Replicas::default() }));
        let per_replica: u64 = plan.classes.iter().map(|c| u64::from(c.reserved_per_replica)).sum::<u64>()
            + u64::from(plan.per_replica_shared);
        assert!(per_replica * replicas <= 200, "{replicas} replicas: fleet {per_replica} each");
        assert_eq!(plan.fleet_capacity, Some(per_replica * replicas));
        for c in &plan.classes {
            assert!(c.ceiling_per_replica <= c.reserved_per_replica + plan.per_replica_shared);
            assert!(c.ceiling_per_replica >= c.reserved_per_replica);
        }
    }
    let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: 3, ..Replicas::default() }));
    assert_eq!((plan.classes[0].reserved_per_replica, plan.per_replica_shared), (10, 26));
    assert_eq!(plan.classes[0].ceiling_per_replica, 36);
}

#[test]
fn a_fleet_pool_splits_over_the_replicas_that_exist_not_the_autoscaler_maximum() {
    let bh = fleet(&[30, 30, 30, 30], 80, 200);
    let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: 2, max: Some(10), pods: 2 }));
    assert_eq!(plan.divisor, 2);
    assert_eq!(plan.classes[0].reserved_per_replica, 15);
    assert_eq!(plan.fleet_capacity, Some((4 * 15 + 40) * 2));
    // At the maximum the pool is split again: 10 replicas of 3 each and 8 shared.
    assert_eq!(plan.fleet_capacity_at_max, Some((4 * 3 + 8) * 10));
}

#[test]
fn a_scale_down_keeps_the_split_of_the_pods_that_still_run() {
    let bh = fleet(&[30, 30, 30, 30], 80, 200);
    // Scaled 3 -> 2 while the third pod terminates: each share stays a third
    // until it is gone, so the fleet never holds more than the pool.
    let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: 2, max: None, pods: 3 }));
    assert_eq!((plan.divisor, plan.classes[0].reserved_per_replica), (3, 10));
    // Scaled 2 -> 3 before the new pod exists: the shares drop at once.
    let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: 3, max: None, pods: 2 }));
    assert_eq!((plan.divisor, plan.classes[0].reserved_per_replica), (3, 10));
}

#[test]
fn a_floor_that_rounds_to_zero_per_replica_is_reported() {
    let bh = fleet(&[30, 30, 30, 5], 80, 200);
    let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: 6, ..Replicas::default() }));
    match plan.funding {
        Funding::FloorRoundsToZero { classes, message } => {
            assert_eq!(classes, vec!["c3".to_string()]);
            assert!(message.contains("c3 reserves 5 over 6 replicas = 0 each"), "{message}");
        }
        other => panic!("expected FloorRoundsToZero, got {other:?}"),
    }
}

#[test]
fn an_instance_pool_reports_the_fleet_total_because_limits_multiply() {
    let bh = classes(&[30, 30, 30, 30], Some(80), 200);
    let (plan, _) = plan_capacity(&bh.spec, Some(Replicas { current: 3, max: Some(5), pods: 3 }));
    assert_eq!(plan.divisor, 1);
    assert_eq!(plan.classes[0].reserved_per_replica, 30);
    assert_eq!(plan.fleet_capacity, Some(600));
    assert_eq!(plan.fleet_capacity_at_max, Some(1000));
}

#[test]
fn replicas_come_from_matching_workloads_and_their_autoscalers() {
    let bh = fleet(&[30, 30, 30, 30], 80, 200);
    let mut snap = snapshot_with(
        vec![namespace("shop", &[])],
        vec![
            workload("shop", "api", "api", 2),
            workload("shop", "api-canary", "api", 1),
            workload("shop", "web", "web", 9),
        ],
    );
    snap.apply(&mk_autoscaler("shop", "api", 6));
    let p = plan(&bh, &snap);
    let w = p.workload.expect("resolved");
    assert_eq!(w.workloads, vec!["Deployment shop/api", "Deployment shop/api-canary"]);
    assert_eq!(w.replicas, Replicas { current: 3, max: Some(7), pods: 0 });
    // Split over the replicas that exist; the autoscaler's maximum is reported, not divided by.
    assert_eq!(p.capacity.divisor, 3);
}

// --- validation -------------------------------------------------------------

#[test]
fn duplicate_names_fleet_without_workload_and_quota_without_namespaces_are_named() {
    let mut bh = classes(&[10, 10], None, 100);
    bh.spec.classes[1].name = "c0".into();
    bh.spec.pool.scope = bulkhead::crd::Scope::Fleet;
    bh.spec.classes[0].quota = Some(serde_saphyr::from_str("{hard: {pods: '5'}}").expect("quota"));
    let fields: Vec<String> = bulkhead::plan::validate(&Selection::parse(&bh)).into_iter().map(|e| e.field).collect();
    assert!(fields.contains(&"spec.classes[1].name".to_string()), "{fields:?}");
    assert!(fields.contains(&"spec.workload".to_string()), "{fields:?}");
    assert!(fields.contains(&"spec.classes[0].quota".to_string()), "{fields:?}");
}

#[test]
fn bad_selectors_and_names_are_named() {
    let bh = bulkhead(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {name: Not_A_Label}
spec:
  dimension: Tenant
  pool: {resource: Conns, capacity: 10}
  classes:
  - name: a
    reserved: 1
    pods: {podSelector: {matchExpressions: [{key: app, operator: Sideways}]}}
"#,
    );
    let fields: Vec<String> = bulkhead::plan::validate(&Selection::parse(&bh)).into_iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        vec!["metadata.name", "spec.pool.resource", "spec.classes[0].pods.podSelector.matchExpressions[0]"]
    );
}

#[test]
fn an_invalid_spec_changes_nothing_in_the_cluster() {
    let mut bh = classes(&[30, 30], Some(80), 200);
    bh.spec.classes[0].ceiling = Some(500);
    let snap = snapshot_with(vec![namespace("shop", &[])], vec![]);
    let p = plan(&bh, &snap);
    assert!(!p.is_valid());
    assert!(changes("t", &p, &snap, bulkhead::plan::WithheldConfig::Remove).is_empty());
}

#[test]
fn the_controller_reports_label_quantity_and_url_errors_as_invalid_spec() {
    // What a cluster admits (the schema cannot state these) the planner refuses,
    // with the same message `bulkhead check` prints.
    let bh = bulkhead(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {name: t}
spec:
  dimension: Tenant
  pool: {resource: connections, capacity: 100}
  classes:
  - name: a
    reserved: 10
    pods: {namespaceSelector: {matchLabels: {team: shop}}, podSelector: {matchLabels: {"bad key!": x}}}
    quota: {hard: {cpu: lots}}
  - {name: b, reserved: 10, databases: ["postgres://db:70000/x"]}
"#,
    );
    let snap = snapshot_with(vec![namespace("shop", &[("team", "shop")])], vec![]);
    let p = plan(&bh, &snap);
    let fields: Vec<&str> = p.errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.classes[0].quota.hard.cpu",
            "spec.classes[1].databases[0]",
            "spec.classes[0].pods.podSelector.matchLabels"
        ],
        "{:?}",
        p.errors
    );
    let status = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, None, &now());
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidSpec"));
    assert!(ready.message.contains("\"lots\" is not a non-negative Kubernetes quantity"), "{}", ready.message);
    assert!(ready.message.contains("port \"70000\", not a number from 1 to 65535"), "{}", ready.message);
    assert!(
        changes("t", &p, &snap, bulkhead::plan::WithheldConfig::Remove).is_empty(),
        "nothing is written for an invalid spec"
    );
}

// --- quotas -------------------------------------------------------------------

fn tenants() -> Bulkhead {
    bulkhead(
        r#"apiVersion: bulkhead.dev/v1alpha1
kind: Bulkhead
metadata: {name: tenants}
spec:
  dimension: Tenant
  pool: {resource: requests, capacity: 100}
  classes:
  - {name: a, reserved: 10, pods: {namespaceSelector: {matchLabels: {tenant: a}}}, quota: {hard: {pods: "5"}}}
  - {name: b, reserved: 10, pods: {namespaceSelector: {matchLabels: {tenant: b}}}, quota: {hard: {pods: "7", cpu: "2"}}}
  - {name: c, reserved: 10, pods: {namespaceSelector: {matchLabels: {shared: "yes"}}}, quota: {hard: {pods: "9"}}}
"#,
    )
}

#[test]
fn each_class_gets_a_quota_in_every_namespace_it_selects() {
    let snap = snapshot_with(
        vec![
            namespace("a1", &[("tenant", "a")]),
            namespace("a2", &[("tenant", "a")]),
            namespace("b1", &[("tenant", "b")]),
            namespace("x", &[]),
        ],
        vec![],
    );
    let p = plan(&tenants(), &snap);
    let placed: Vec<(String, String)> = p
        .quotas
        .iter()
        .map(|q| (q.metadata.namespace.clone().unwrap_or_default(), q.metadata.name.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        placed,
        vec![
            ("a1".into(), "bulkhead-tenants.a".into()),
            ("a2".into(), "bulkhead-tenants.a".into()),
            ("b1".into(), "bulkhead-tenants.b".into())
        ]
    );
    let labels = p.quotas[0].metadata.labels.clone().expect("labels");
    assert_eq!(labels.get("bulkhead.dev/class").map(String::as_str), Some("a"));
    assert_eq!(p.quotas[0].metadata.owner_references.as_ref().map(Vec::len), Some(1));
}

#[test]
fn two_classes_selecting_one_namespace_get_no_quota_there_and_a_report() {
    let snap = snapshot_with(
        vec![namespace("mixed", &[("tenant", "a"), ("shared", "yes")]), namespace("b1", &[("tenant", "b")])],
        vec![],
    );
    let p = plan(&tenants(), &snap);
    assert_eq!(p.quota_collisions.len(), 1);
    assert_eq!(p.quota_collisions[0].namespace, "mixed");
    assert_eq!(p.quota_collisions[0].classes, vec!["a", "c"]);
    assert!(p.quotas.iter().all(|q| q.metadata.namespace.as_deref() != Some("mixed")));
    let status = build_status(&tenants(), &p, None, &ApplyOutcome::NotApplied, None, &now());
    let scoped = status.conditions.iter().find(|c| c.type_ == "QuotasScoped").expect("condition");
    assert_eq!((scoped.status.as_str(), scoped.reason.as_str()), ("False", "QuotaNamespaceShared"));
    assert!(scoped.message.contains("namespace mixed is selected by the quotas of a and c"));
}

#[test]
fn a_namespace_that_stops_matching_loses_its_quota() {
    let bh = tenants();
    let snap = snapshot_with(vec![namespace("a1", &[("tenant", "a")])], vec![]);
    let p = plan(&bh, &snap);
    let mut cluster = snap.clone();
    for q in &p.quotas {
        let key = ObjectKey::new(
            q.metadata.namespace.clone().unwrap_or_default(),
            q.metadata.name.clone().unwrap_or_default(),
        );
        cluster.resource_quotas.insert(key, q.clone());
    }
    assert!(
        changes("tenants", &p, &cluster, bulkhead::plan::WithheldConfig::Remove).is_empty(),
        "applied and unchanged: nothing to do"
    );
    cluster.apply(&namespace("a1", &[]));
    let p = plan(&bh, &cluster);
    assert_eq!(
        changes("tenants", &p, &cluster, bulkhead::plan::WithheldConfig::Remove),
        vec![Change::DeleteQuota(ObjectKey::new("a1", "bulkhead-tenants.a"))]
    );
}

#[test]
fn quantities_compare_by_value_in_every_form_the_api_server_rewrites() {
    assert_eq!(nano_units("500m"), nano_units("0.5"));
    assert_eq!(nano_units("1Gi"), nano_units("1024Mi"));
    assert_eq!(nano_units("2048Ti"), nano_units("2Pi"));
    assert_eq!(nano_units("1e3"), nano_units("1k"));
    assert_eq!(nano_units("1000u"), nano_units("1m"));
    assert_eq!(nano_units("0.5m"), nano_units("500u"));
    assert_eq!(nano_units("2"), Some(2_000_000_000));
    assert_ne!(nano_units("1G"), nano_units("1Gi"));
    assert_eq!(nano_units("99999999999999999999999999999999999999Ti"), None, "overflow is not a panic");
    assert_eq!(nano_units("lots"), None);
}

// --- pool config and steady state ---------------------------------------------

#[test]
fn the_pool_config_carries_per_replica_floors_ceilings_and_surplus() {
    let bh = fleet(&[30, 30, 30, 30], 80, 200);
    let snap = snapshot_with(vec![namespace("shop", &[])], vec![workload("shop", "api", "api", 2)]);
    let p = plan(&bh, &snap);
    let cfg = p.pool_config.clone().expect("config");
    assert_eq!((cfg.divided_by, cfg.capacity, cfg.shared_surplus), (2, 100, 40));
    assert_eq!((cfg.classes[0].reserved, cfg.classes[0].ceiling), (15, 55));
    let cm = p.config_map.clone().expect("configmap");
    assert_eq!(cm.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(cm.metadata.name.as_deref(), Some("bulkhead-t"));
    let json: serde_json::Value = serde_json::from_str(&cm.data.expect("data")["pools.json"]).expect("json");
    assert_eq!(json["onCeiling"], "reject");
    assert_eq!(json["classes"][0]["ceiling"], 55);
    assert!(json["classes"][0].get("maxDurationMs").is_none(), "no maximum unless the class sets one");
}

#[test]
fn a_class_maximum_duration_reaches_the_sidecars_pool_config() {
    let mut bh = fleet(&[30, 30, 30, 30], 80, 200);
    bh.spec.classes[1].max_duration_ms = Some(2500);
    let snap = snapshot_with(vec![namespace("shop", &[])], vec![workload("shop", "api", "api", 2)]);
    let cm = plan(&bh, &snap).config_map.expect("configmap");
    let json: serde_json::Value = serde_json::from_str(&cm.data.expect("data")["pools.json"]).expect("json");
    let name = &bh.spec.classes[1].name;
    let class = json["classes"].as_array().expect("classes").iter().find(|c| c["name"] == **name).expect("class");
    assert_eq!(class["maxDurationMs"], 2500);
    assert!(json["classes"][0].get("maxDurationMs").is_none(), "only the class that set it");
}

#[test]
fn an_unfunded_design_keeps_the_last_config_in_place() {
    let good = fleet(&[30, 30, 30, 30], 80, 200);
    let snap = snapshot_with(vec![namespace("shop", &[])], vec![workload("shop", "api", "api", 2)]);
    let p = plan(&good, &snap);
    let mut cluster = snap.clone();
    let cm = p.config_map.clone().expect("cm");
    cluster.config_maps.insert(ObjectKey::new("shop", "bulkhead-t"), cm);
    let bad = fleet(&[100, 100, 30, 30], 80, 200);
    let p = plan(&bad, &cluster);
    assert!(p.config_map.is_none());
    assert!(
        changes("t", &p, &cluster, bulkhead::plan::WithheldConfig::KeepLast).is_empty(),
        "the last good config is not deleted"
    );
}

#[test]
fn conditions_keep_their_transition_time_until_the_status_flips() {
    let bh = classes(&[30, 30], Some(80), 200);
    let snap = Snapshot::default();
    let p = plan(&bh, &snap);
    let first = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, None, &now());
    let later = Time(jiff::Timestamp::from_second(1_800_000_600).expect("time"));
    let again = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, Some(&first), &later);
    assert_eq!(first, again, "nothing changed, nothing moves");

    let mut unfunded = bh.clone();
    unfunded.spec.classes[0].reserved = 150;
    let p2 = plan(&unfunded, &snap);
    let flipped = build_status(&unfunded, &p2, None, &ApplyOutcome::NotApplied, Some(&first), &later);
    let funded =
        |s: &bulkhead::crd::BulkheadStatus| s.conditions.iter().find(|c| c.type_ == "Funded").cloned().expect("Funded");
    assert_eq!(funded(&flipped).status, "False");
    assert_eq!(funded(&flipped).last_transition_time, later);
    let lane = |s: &bulkhead::crd::BulkheadStatus| {
        s.conditions.iter().find(|c| c.type_ == "ControlPlaneLane").cloned().expect("lane")
    };
    assert_eq!(
        lane(&flipped).last_transition_time,
        lane(&first).last_transition_time,
        "unchanged condition keeps its time"
    );
}

#[test]
fn no_critical_class_is_reported_as_the_cheapest_missing_reservation() {
    let bh = classes(&[30, 30], Some(80), 200);
    let status = build_status(&bh, &plan(&bh, &Snapshot::default()), None, &ApplyOutcome::NotApplied, None, &now());
    let lane = status.conditions.iter().find(|c| c.type_ == "ControlPlaneLane").expect("lane");
    assert_eq!((lane.status.as_str(), lane.reason.as_str()), ("False", "NoCriticalClass"));
}

#[test]
fn teardown_finds_exactly_what_one_bulkhead_made() {
    let bh = tenants();
    let snap = snapshot_with(vec![namespace("a1", &[("tenant", "a")]), namespace("b1", &[("tenant", "b")])], vec![]);
    let p = plan(&bh, &snap);
    let mut cluster = snap.clone();
    for q in &p.quotas {
        let key = ObjectKey::new(
            q.metadata.namespace.clone().unwrap_or_default(),
            q.metadata.name.clone().unwrap_or_default(),
        );
        cluster.resource_quotas.insert(key, q.clone());
    }
    let mut other = p.quotas[0].clone();
    other.metadata.name = Some("bulkhead-other.a".into());
    other.metadata.labels.as_mut().expect("labels").insert("bulkhead.dev/bulkhead".into(), "other".into());
    cluster.resource_quotas.insert(ObjectKey::new("a1", "bulkhead-other.a"), other);
    let deletes = bulkhead::plan::teardown("tenants", &cluster);
    assert_eq!(
        deletes,
        vec![
            Change::DeleteQuota(ObjectKey::new("a1", "bulkhead-tenants.a")),
            Change::DeleteQuota(ObjectKey::new("b1", "bulkhead-tenants.b"))
        ]
    );
}

#[test]
fn a_pool_of_capacity_zero_is_refused_naming_the_field() {
    let bh = classes(&[0], None, 0);
    let errors = bulkhead::plan::validate(&Selection::parse(&bh));
    let capacity: Vec<_> = errors.iter().filter(|e| e.field == "spec.pool.capacity").collect();
    assert_eq!(capacity.len(), 1, "{errors:?}");
    assert!(capacity[0].message.contains("at least 1"), "{errors:?}");
    assert!(bulkhead::plan::validate(&Selection::parse(&classes(&[0], None, 1))).is_empty());
}
