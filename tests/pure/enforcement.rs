//! Enforcement you can see, in the planner and the status: which running
//! pods are stamped with the planned config's hash (once), where each
//! sidecar is asked, how `Enforced` reads the answers (evidence only, after
//! a grace period), and the Fleet split over the pods that exist. No cluster.

use std::collections::BTreeMap;

use bulkhead::{
    crd::{Bulkhead, BulkheadStatus},
    plan::{changes, Change, Enforcer, Plan, PlanConfig, WithheldConfig},
    select::Selection,
    snapshot::{ObjectKey, Snapshot},
    status::{apply_enforcement, build_status, Answer, ApplyOutcome, Observed, ENFORCED},
};
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Pod},
    apimachinery::pkg::apis::meta::v1::Time,
};
use serde_json::{json, Value};

fn plan(bulkhead: &Bulkhead, snapshot: &Snapshot) -> Plan {
    let config = PlanConfig { proxy_image: Some("registry.example/bulkhead:test".into()), ..PlanConfig::default() };
    bulkhead::plan::plan(&Selection::parse(bulkhead), snapshot, &config)
}

fn bulkhead(scope: &str) -> Bulkhead {
    serde_saphyr::from_str(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: shop, uid: u-1}}\nspec:\n  dimension: Dependency\n  \
         pool: {{resource: requests, capacity: 210, scope: {scope}}}\n  workload:\n    namespace: shop\n    \
         selector: {{matchLabels: {{app: api}}}}\n    proxy: {{mode: Ingress, port: 8081, upstreamPort: 8080}}\n  classes:\n  \
         - {{name: checkout, reserved: 60}}\n  - {{name: slow, reserved: 15, ceiling: 21}}\n  \
         - {{name: control-plane, reserved: 30, critical: true}}\n"
    ))
    .expect("fixture")
}

/// Namespace `shop` with Deployment `api` × `replicas`, already injected.
fn shop(replicas: i32) -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(&crate::fixtures::mk_namespace("shop", &[]));
    s.apply(
        &serde_json::from_value::<Deployment>(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": 3},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "app"}]}}},
        }))
        .expect("deployment"),
    );
    s
}

/// A pod of `api`: `sidecar` mounts that ConfigMap (None: no sidecar).
fn pod(name: &str, sidecar: Option<&str>, phase: &str, hash: Option<&str>) -> Pod {
    let mut containers = vec![json!({"name": "app"})];
    let mut volumes = Vec::new();
    if let Some(config_map) = sidecar {
        containers.push(json!({"name": "bulkhead-proxy", "ports": [
            {"name": "bulkhead-proxy", "containerPort": 8081}, {"name": "bulkhead-admin", "containerPort": 9901}]}));
        volumes.push(json!({"name": "bulkhead-pools", "configMap": {"name": config_map}}));
    }
    let annotations: Value = hash.map_or(json!({}), |h| json!({"bulkhead.dev/config-hash": h}));
    let scheduled = phase != "Unscheduled";
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "labels": {"app": "api"}, "annotations": annotations},
        "spec": {"nodeName": if scheduled { json!("node-1") } else { Value::Null }, "containers": containers, "volumes": volumes},
        "status": {"phase": if scheduled { phase } else { "Pending" }, "podIP": format!("10.0.0.{}", name.len())},
    }))
    .expect("pod")
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("shop", name)
}

fn stamps(changes: &[Change]) -> Option<(&str, Vec<&str>)> {
    changes.iter().find_map(|c| match c {
        Change::StampPods { hash, pods } => Some((hash.as_str(), pods.iter().map(|k| k.name.as_str()).collect())),
        _ => None,
    })
}

#[test]
fn running_pods_are_stamped_after_the_config_once_and_asked_on_their_admin_port() {
    let bh = bulkhead("Instance");
    let mut s = shop(3);
    let hash = plan(&bh, &s).proxy.config_hash.expect("a config is planned");
    assert_eq!(hash.len(), 16);
    s.apply(&pod("a", Some("bulkhead-shop"), "Running", Some("0000000000000000")));
    s.apply(&pod("bb", Some("bulkhead-shop"), "Running", Some(&hash)));
    s.apply(&pod("ccc", Some("bulkhead-shop"), "Pending", None));
    s.apply(&pod("dddd", Some("bulkhead-shop"), "Unscheduled", None));
    s.apply(&pod("eeeee", None, "Running", None));
    s.apply(&pod("ffffff", Some("bulkhead-other"), "Running", None));
    let mut gone = pod("ggggggg", Some("bulkhead-shop"), "Running", None);
    gone.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    s.apply(&gone);
    let p = plan(&bh, &s);
    let c = changes("shop", &p, &s, WithheldConfig::KeepLast);
    // The scheduled, live pods that mount this config and lack its hash; the
    // pending one too, whose volume may predate the config.
    assert_eq!(stamps(&c), Some((hash.as_str(), vec!["a", "ccc"])));
    let config_at = c.iter().position(|c| matches!(c, Change::ApplyConfigMap(_))).expect("the config is written");
    let stamp_at = c.iter().position(|c| matches!(c, Change::StampPods { .. })).expect("stamped");
    assert!(config_at < stamp_at, "the kubelets must find the new config when they look: {c:?}");
    // What is asked: each running selected pod, by what enforces its pool.
    let asked: Vec<(&str, &Enforcer)> = p.proxy.pods.iter().map(|x| (x.key.name.as_str(), &x.enforcer)).collect();
    let admin = |ip: &str| Enforcer::Sidecar { admin: Some(format!("{ip}:9901").parse().expect("addr")) };
    assert_eq!(
        asked,
        vec![
            ("a", &admin("10.0.0.1")),
            ("bb", &admin("10.0.0.2")),
            ("eeeee", &Enforcer::Missing),
            ("ffffff", &Enforcer::Foreign { config_map: "bulkhead-other".into() }),
        ]
    );
    // Once stamped, nothing more to write for the pods.
    for name in ["a", "ccc"] {
        let phase = if name == "a" { "Running" } else { "Pending" };
        s.apply(&pod(name, Some("bulkhead-shop"), phase, Some(&hash)));
    }
    assert_eq!(stamps(&changes("shop", &plan(&bh, &s), &s, WithheldConfig::KeepLast)), None);
}

#[test]
fn a_fleet_split_follows_the_pods_that_exist_so_a_scale_never_over_commits() {
    let bh = bulkhead("Fleet");
    let slow_ceiling = |s: &Snapshot| {
        let p = plan(&bh, s);
        (p.capacity.divisor, p.capacity.classes[1].ceiling_per_replica)
    };
    let mut s = shop(2);
    for name in ["a", "bb"] {
        s.apply(&pod(name, Some("bulkhead-shop"), "Running", None));
    }
    assert_eq!(slow_ceiling(&s), (2, 10));
    // Scaled to 3: every share drops before the third pod exists.
    s = shop(3);
    for name in ["a", "bb"] {
        s.apply(&pod(name, Some("bulkhead-shop"), "Running", None));
    }
    assert_eq!(slow_ceiling(&s), (3, 7));
    s.apply(&pod("ccc", Some("bulkhead-shop"), "Running", None));
    assert_eq!(slow_ceiling(&s), (3, 7));
    // A pod stuck Pending (a rollout's surge that cannot be scheduled, say)
    // holds no request: it shrinks no share.
    s.apply(&pod("dddd", Some("bulkhead-shop"), "Unscheduled", None));
    s.apply(&pod("eeeee", Some("bulkhead-shop"), "Pending", None));
    assert_eq!(slow_ceiling(&s), (3, 7));
    // Back to 2: the shares stay thirds while the third pod terminates ...
    let mut replaced = shop(2);
    for name in ["a", "bb"] {
        replaced.apply(&pod(name, Some("bulkhead-shop"), "Running", None));
    }
    let mut leaving = pod("ccc", Some("bulkhead-shop"), "Running", None);
    leaving.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    replaced.apply(&leaving);
    assert_eq!(slow_ceiling(&replaced), (3, 7));
    // ... and rise once it is gone (a finished pod holds nothing).
    replaced.apply(&pod("ccc", Some("bulkhead-shop"), "Succeeded", None));
    assert_eq!(slow_ceiling(&replaced), (2, 10));
}

/// The status after the sidecars answered `answers` about `hash`.
fn enforced(
    s: &Snapshot,
    observed: Option<&Observed>,
    previous: Option<&BulkheadStatus>,
) -> (String, String, String, Option<bulkhead::crd::EnforcementStatus>) {
    let bh = bulkhead("Instance");
    let p = plan(&bh, s);
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    let mut status = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, previous, &now);
    apply_enforcement(&mut status, &p, observed, previous, Some(1), &now);
    let c = status.conditions.iter().find(|c| c.type_ == ENFORCED).expect("Enforced").clone();
    (c.status, c.reason, c.message, status.enforcement)
}

fn answers(hash: &str, list: &[(&str, Answer)]) -> Observed {
    Observed {
        hash: hash.into(),
        answers: list.iter().map(|(n, a)| (key(n), a.clone())).collect::<BTreeMap<_, _>>(),
        last_convergence_seconds: Some(0.8),
    }
}

#[test]
fn enforced_is_true_only_when_every_running_pod_answered_with_the_planned_hash() {
    let mut s = shop(2);
    let hash = plan(&bulkhead("Instance"), &s).proxy.config_hash.expect("planned");
    for name in ["a", "bb"] {
        s.apply(&pod(name, Some("bulkhead-shop"), "Running", Some(&hash)));
    }
    let since = Time(jiff::Timestamp::from_second(1_799_999_990).expect("time"));
    let lagging = |overdue| Answer::Lagging { has: "00000000000000aa".into(), since: since.clone(), overdue };

    // Not asked yet, or asked about another config: not known.
    let (status, reason, ..) = enforced(&s, None, None);
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotObserved"));
    let stale = answers("00000000000000aa", &[("a", Answer::Current), ("bb", Answer::Current)]);
    assert_eq!(enforced(&s, Some(&stale), None).1, "NotObserved");

    // Every pod on the planned config.
    let all = answers(&hash, &[("a", Answer::Current), ("bb", Answer::Current)]);
    let (status, reason, message, summary) = enforced(&s, Some(&all), None);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Converged"), "{message}");
    assert!(message.contains(&hash), "{message}");
    let summary = summary.expect("status.enforcement");
    assert_eq!((summary.pods, summary.converged, summary.lagging.len()), (2, 2, 0));
    assert_eq!((summary.config_hash.as_str(), summary.last_convergence_seconds), (hash.as_str(), Some(0.8)));

    // One pod lags within the grace period. After True about this very
    // config (a pod restarted, say) the condition stays as it was: no flap.
    let mut previous = BulkheadStatus::default();
    let bh = bulkhead("Instance");
    let now = Time(jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    let p = plan(&bh, &s);
    previous.conditions = build_status(&bh, &p, None, &ApplyOutcome::NotApplied, None, &now).conditions;
    apply_enforcement(&mut previous, &p, Some(&all), None, Some(1), &now);
    let young = answers(&hash, &[("a", Answer::Current), ("bb", lagging(false))]);
    let (status, reason, _, summary) = enforced(&s, Some(&young), Some(&previous));
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Converged"));
    assert_eq!(summary.expect("summary").lagging, vec!["bb".to_string()]);
    // After True about an older config, nothing confirms the new one yet.
    let mut older = previous.clone();
    older.enforcement.as_mut().expect("summary").config_hash = "00000000000000aa".into();
    let (status, reason, message, _) = enforced(&s, Some(&young), Some(&older));
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "Propagating"), "{message}");
    assert!(
        message.starts_with(&format!("1 of 2 pod(s) enforce pool config {hash} so far; 1 not yet: bb")),
        "{message}"
    );
    // Past the grace period it is False, naming the pod, its config and since when.
    let old = answers(&hash, &[("a", Answer::Current), ("bb", lagging(true))]);
    let (status, reason, message, _) = enforced(&s, Some(&old), Some(&previous));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Converging"), "{message}");
    assert!(message.contains("bb (enforces 00000000000000aa since 2027-01-15T07:59:50Z)"), "{message}");

    // A pod that cannot be asked is not known to enforce anything: Unknown, never a guess.
    let unreachable = Answer::Unreachable { why: "connection refused".into(), since: since.clone(), overdue: true };
    let (status, reason, message, _) =
        enforced(&s, Some(&answers(&hash, &[("a", Answer::Current), ("bb", unreachable)])), None);
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "Unreachable"), "{message}");
    assert!(message.contains("bb (connection refused since"), "{message}");

    // A running pod without the sidecar (started before the injection) enforces nothing.
    s.apply(&pod("old", None, "Running", None));
    let (status, reason, message, summary) = enforced(&s, Some(&all), None);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SidecarMissing"), "{message}");
    assert!(message.contains("old (no bulkhead-proxy container)"), "{message}");
    assert_eq!(summary.expect("summary").lagging, vec!["old".to_string()]);
}

#[test]
fn no_running_pod_is_not_a_verdict_and_a_bypass_outranks_every_answer() {
    let mut s = shop(1);
    let hash = plan(&bulkhead("Instance"), &s).proxy.config_hash.expect("planned");
    let (status, reason, message, _) = enforced(&s, Some(&answers(&hash, &[])), None);
    assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotObserved"), "{message}");
    s.apply(&pod("a", Some("bulkhead-shop"), "Running", Some(&hash)));
    s.apply(
        &serde_json::from_value::<k8s_openapi::api::core::v1::Service>(json!({
            "metadata": {"name": "api", "namespace": "shop"},
            "spec": {"selector": {"app": "api"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }))
        .expect("service"),
    );
    let (status, reason, ..) = enforced(&s, Some(&answers(&hash, &[("a", Answer::Current)])), None);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Bypassed"));
}
