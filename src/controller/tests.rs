//! Reconcile decisions and error paths against a mocked API server
//! (tower-test): each test runs one reconcile, answers its requests in order
//! and asserts exactly which requests were made. They run in milliseconds;
//! the scheduler, RBAC and write-count proofs stay with the real control plane.

use std::{sync::Arc, time::Duration};

use http::{Request, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    client::Body,
    core::{error_boundary::InvalidObject, DeserializeGuard},
    runtime::{controller::Action, events::Reporter},
    Client,
};
use serde_json::{json, Value};
use tower_test::mock;

mod network_policy;

use crate::controller::context::Context;
use crate::controller::error::Error;
use crate::controller::memory::backoff::Backoff;
use crate::controller::memory::enforcement::{Enforcement, EnforcementOptions};
use crate::controller::memory::kept::Memory;
use crate::controller::memory::refusals::RefusalMemory;
use crate::controller::memory::usage::{Usage, UsageOptions};
use crate::controller::reconcile::recorder::EventRecorder;
use crate::controller::reconcile::steps::reconcile;
use crate::controller::runtime::metrics::Metrics;
use crate::controller::watch::observe::SharedSnapshot;
use crate::{
    crd::{Bulkhead, FINALIZER},
    evaluate::{evaluate, Config},
    snapshot::Snapshot,
    status::ApplyOutcome,
};

/// One request the reconcile made.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    /// Path and query.
    path: String,
    body: Value,
}

impl Seen {
    fn line(&self) -> String {
        let path = self.path.split('?').next().unwrap_or_default();
        format!("{} {path}", self.method)
    }
}

/// Runs one reconcile; `answer` gives each request's status code and body.
/// Events are answered 201 and left out of the list returned.
async fn run(
    obj: DeserializeGuard<Bulkhead>,
    snapshot: Snapshot,
    answer: impl Fn(&Seen) -> (u16, Value),
) -> (Result<Action, Error>, Vec<Seen>) {
    run_counted(obj, snapshot, answer, Arc::new(Metrics::default())).await
}

/// `run`, counting into `metrics`.
async fn run_counted(
    obj: DeserializeGuard<Bulkhead>,
    snapshot: Snapshot,
    answer: impl Fn(&Seen) -> (u16, Value),
    metrics: Arc<Metrics>,
) -> (Result<Action, Error>, Vec<Seen>) {
    let kept = Kept::fresh();
    run_with(obj, snapshot, answer, metrics, &kept).await
}

/// What the operator keeps between reconciles of one test.
struct Kept {
    usage: Arc<Usage>,
    /// The sidecars' answers (which pool config they enforce).
    enforcement: Arc<Enforcement>,
    audits: Arc<crate::controller::memory::audits::AuditCache>,
    /// Where the usage analyses are counted.
    metrics: Arc<Metrics>,
    /// Generations the metadata watch has seen, by Bulkhead.
    generations: Vec<(&'static str, i64)>,
}

impl Kept {
    /// Nothing kept yet, and no Prometheus.
    fn fresh() -> Self {
        Kept {
            usage: Arc::new(Usage::new(UsageOptions::disabled(), Arc::default())),
            enforcement: Arc::new(Enforcement::new(EnforcementOptions::default(), Arc::default())),
            audits: Arc::default(),
            metrics: Arc::default(),
            generations: Vec::new(),
        }
    }
}

/// `run`, counting into `metrics`, with the usage analyses in `usage`.
async fn run_with(
    obj: DeserializeGuard<Bulkhead>,
    snapshot: Snapshot,
    answer: impl Fn(&Seen) -> (u16, Value),
    metrics: Arc<Metrics>,
    kept: &Kept,
) -> (Result<Action, Error>, Vec<Seen>) {
    run_in(obj, snapshot, answer, metrics, kept, Config::default()).await
}

/// `run_with` an operator configured with `config`, counting into `kept.metrics`.
async fn run_configured(
    obj: DeserializeGuard<Bulkhead>,
    snapshot: Snapshot,
    answer: impl Fn(&Seen) -> (u16, Value),
    kept: &Kept,
    config: Config,
) -> (Result<Action, Error>, Vec<Seen>) {
    run_in(obj, snapshot, answer, kept.metrics.clone(), kept, config).await
}

async fn run_in(
    obj: DeserializeGuard<Bulkhead>,
    snapshot: Snapshot,
    answer: impl Fn(&Seen) -> (u16, Value),
    metrics: Arc<Metrics>,
    kept: &Kept,
    config: Config,
) -> (Result<Action, Error>, Vec<Seen>) {
    // A status write answers with the whole object, as the API server does.
    let object = obj.0.as_ref().ok().map(|b| serde_json::to_value(b).expect("a Bulkhead serialises"));
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let shared = SharedSnapshot::listed(snapshot);
    for (name, generation) in &kept.generations {
        shared.note_generation(&kube::api::ObjectMeta {
            name: Some((*name).to_string()),
            generation: Some(*generation),
            ..Default::default()
        });
    }
    let ctx = Arc::new(Context {
        client: client.clone(),
        events: EventRecorder::new(client, Reporter { controller: "bulkhead".into(), instance: None }),
        metrics,
        snapshot: shared,
        config,
        memory: Memory {
            backoff: Backoff::default(),
            refusals: RefusalMemory::default(),
            audits: kept.audits.clone(),
            usage: kept.usage.clone(),
            enforcement: kept.enforcement.clone(),
        },
        operator_name: None,
        drills: Arc::default(),
    });
    // The reconcile owns the only clients: when it ends, the mock sees no more requests.
    let task = tokio::spawn(async move { reconcile(Arc::new(obj), ctx).await });
    let mut seen = Vec::new();
    let serve = async {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path_and_query().map(ToString::to_string).unwrap_or_default();
            let bytes = request.into_body().collect_bytes().await.expect("request body");
            let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("JSON body") };
            let request = Seen { method, path, body };
            let status_write =
                request.method == "PATCH" && request.path.split('?').next().is_some_and(|p| p.ends_with("/status"));
            let (code, reply) = if request.path.contains("/events") {
                (201, request.body.clone())
            } else if let (true, Some(object)) = (status_write, &object) {
                seen.push(request.clone());
                let mut whole = object.clone();
                whole["status"] = request.body["status"].clone();
                (200, whole)
            } else {
                seen.push(request.clone());
                answer(&request)
            };
            let response = Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&reply).expect("reply")))
                .expect("response");
            send.send_response(response);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), serve).await.expect("the reconcile finishes");
    let result = task.await.expect("reconcile task");
    (result, seen)
}

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}),
    )
}

fn not_found() -> (u16, Value) {
    status(404, "NotFound", "not found")
}

/// The request's body as the answer: what a PATCH or apply returns (a
/// status apply sends no metadata; the answer always has it).
fn echo(seen: &Seen) -> (u16, Value) {
    let mut body = seen.body.clone();
    if body.get("metadata").is_none() {
        let path = seen.path.split('?').next().unwrap_or_default();
        let name = path.trim_end_matches("/status").rsplit('/').next().unwrap_or_default();
        body["metadata"] = json!({"name": name});
    }
    (200, body)
}

fn bulkhead(yaml: &str) -> Bulkhead {
    serde_saphyr::from_str(yaml).expect("fixture")
}

fn shop() -> Snapshot {
    let mut s = Snapshot::default();
    s.apply(
        &serde_json::from_value::<k8s_openapi::api::core::v1::Namespace>(
            json!({"metadata": {"name": "shop", "labels": {"team": "shop"}}}),
        )
        .expect("namespace"),
    );
    s.apply(
        &serde_json::from_value::<k8s_openapi::api::apps::v1::Deployment>(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": 1},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": []}}}
        }))
        .expect("deployment"),
    );
    s
}

/// A pool for the `api` Deployment, finalizer already on.
fn pooled() -> Bulkhead {
    bulkhead(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: pools, uid: u-1, resourceVersion: '7', generation: 1, finalizers: [{FINALIZER}]}}\n\
         spec:\n  dimension: Dependency\n  pool: {{resource: connections, capacity: 100}}\n  workload: {{namespace: shop, selector: {{matchLabels: {{app: api}}}}}}\n\
         \x20 classes:\n  - {{name: checkout, reserved: 40}}\n  - {{name: search, reserved: 30, critical: true}}\n"
    ))
}

fn now() -> Time {
    Time(jiff::Timestamp::from_second(1_700_000_000).expect("time"))
}

#[tokio::test]
async fn a_new_bulkhead_gets_the_finalizer_and_waits_for_the_update() {
    let mut bh = pooled();
    bh.metadata.finalizers = None;
    let (result, seen) = run(DeserializeGuard(Ok(bh)), shop(), echo).await;
    assert_eq!(result.expect("reconcile"), Action::await_change());
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, ["PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools"]);
    assert_eq!(seen[0].body, json!({"metadata": {"finalizers": [FINALIZER], "resourceVersion": "7"}}));
}

#[tokio::test]
async fn a_deleted_bulkhead_is_torn_down_then_released() {
    let mut bh = pooled();
    bh.metadata.deletion_timestamp = Some(now());
    let mut snapshot = shop();
    // What an earlier reconcile wrote, and a ConfigMap of someone else.
    for (name, owner) in [("bulkhead-pools", "pools"), ("bulkhead-other", "other")] {
        snapshot.apply(
            &serde_json::from_value::<k8s_openapi::api::core::v1::ConfigMap>(json!({
                "metadata": {"name": name, "namespace": "shop",
                             "labels": {"app.kubernetes.io/managed-by": "bulkhead", "bulkhead.dev/bulkhead": owner}}
            }))
            .expect("config map"),
        );
    }
    let (result, seen) = run(DeserializeGuard(Ok(bh)), snapshot, |s| {
        if s.method == "DELETE" {
            (200, json!({"kind": "Status", "status": "Success"}))
        } else {
            echo(s)
        }
    })
    .await;
    assert_eq!(result.expect("reconcile"), Action::await_change());
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        [
            "DELETE /api/v1/namespaces/shop/configmaps/bulkhead-pools",
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools",
        ]
    );
    assert_eq!(seen[1].body, json!({"metadata": {"finalizers": [], "resourceVersion": "7"}}));
}

#[tokio::test]
async fn an_unchanged_cluster_gets_no_request_at_all() {
    let mut bh = pooled();
    let mut snapshot = shop();
    // The cluster as the last reconcile left it: its ConfigMap and its status.
    let evaluation = evaluate(&bh, &snapshot, &Config::default());
    let config_map = evaluation.plan.config_map.clone().expect("a pool config");
    snapshot.apply(&config_map);
    let applied =
        ApplyOutcome::Applied { config_maps: 1, quotas: 0, conflicts: vec![], rejected: vec![], proxy_refused: vec![] };
    let no_prometheus = Usage::new(UsageOptions::disabled(), Arc::default()).sizing("pools");
    bh.status = Some(evaluate(&bh, &snapshot, &Config::default()).status_sized(&bh, &applied, &no_prometheus, &now()));
    let (result, seen) = run(DeserializeGuard(Ok(bh)), snapshot, echo).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(seen.is_empty(), "no request at rest: {:?}", seen.iter().map(Seen::line).collect::<Vec<_>>());
}

#[tokio::test]
async fn each_reconcile_is_counted_by_result() {
    let metrics = Arc::new(Metrics::default());
    let mut bh = pooled();
    bh.metadata.finalizers = None;
    let (result, _) = run_counted(DeserializeGuard(Ok(bh.clone())), shop(), echo, metrics.clone()).await;
    assert!(result.is_ok(), "{result:?}");
    let (result, _) =
        run_counted(DeserializeGuard(Ok(bh)), shop(), |_| status(500, "InternalError", "down"), metrics.clone()).await;
    assert!(result.is_err(), "{result:?}");
    let text = metrics.encode();
    for line in [r#"bulkhead_reconciles_total{result="success"} 1"#, r#"bulkhead_reconciles_total{result="error"} 1"#] {
        assert!(text.lines().any(|l| l == line), "{line} missing in:\n{text}");
    }
}

#[tokio::test]
async fn a_node_written_by_someone_else_meanwhile_is_planned_again_without_failing() {
    let bh = bulkhead(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: groups, uid: u-2, resourceVersion: '3', finalizers: [{FINALIZER}]}}\n\
         spec:\n  dimension: Tenant\n  pool: {{resource: pods, capacity: 10}}\n  classes:\n\
         \x20 - {{name: a, reserved: 5, nodes: {{selector: {{matchLabels: {{pool: x}}}}, count: 1}}}}\n"
    ));
    let mut snapshot = Snapshot::default();
    snapshot.apply(
        &serde_json::from_value::<k8s_openapi::api::core::v1::Node>(json!({
            "metadata": {"name": "n1", "resourceVersion": "41", "labels": {"pool": "x"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node"),
    );
    let (result, seen) = run(DeserializeGuard(Ok(bh)), snapshot, |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", _) => not_found(),
        ("PATCH", p) if p.starts_with("/api/v1/nodes/") => status(409, "Conflict", "the object has been modified"),
        _ => echo(s),
    })
    .await;
    assert_eq!(result.expect("a conflict is no failure"), Action::requeue(Duration::from_millis(200)));
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        [
            "GET /apis/scheduling.k8s.io/v1/priorityclasses/bulkhead-groups.a",
            "PATCH /apis/scheduling.k8s.io/v1/priorityclasses/bulkhead-groups.a",
            "PATCH /api/v1/nodes/n1",
        ],
        "no status write after the conflict"
    );
    assert_eq!(seen[2].body["metadata"]["resourceVersion"], json!("41"), "the write carries its precondition");
}

#[tokio::test]
async fn a_same_named_object_of_someone_else_is_not_taken_over() {
    let (result, seen) = run(DeserializeGuard(Ok(pooled())), shop(), |s| match s.method.as_str() {
        // Their ConfigMap, without our labels.
        "GET" => (200, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bulkhead-pools", "namespace": "shop"}})),
        _ => echo(s),
    })
    .await;
    let error = result.expect_err("not ours");
    assert!(matches!(&error, Error::NotOurs { kind: "ConfigMap", owner: None, .. }), "{error:?}");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        [
            "GET /api/v1/namespaces/shop/configmaps/bulkhead-pools",
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools/status",
        ],
        "nothing is written over their object"
    );
    let conditions = seen[1].body["status"]["conditions"].as_array().expect("conditions");
    let ready = conditions.iter().find(|c| c["type"] == "Ready").expect("Ready");
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("ApplyFailed")));
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("ConfigMap shop/bulkhead-pools"), "{message}");
}

#[tokio::test]
async fn a_placement_conflict_is_a_refusal_reported_in_status_not_an_error() {
    let bh = bulkhead(&format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: place, uid: u-3, resourceVersion: '5', finalizers: [{FINALIZER}]}}\n\
         spec:\n  dimension: Tenant\n  pool: {{resource: pods, capacity: 10}}\n  classes:\n\
         \x20 - {{name: a, reserved: 5, priority: 10, pods: {{namespaceSelector: {{matchLabels: {{team: shop}}}}, podSelector: {{matchLabels: {{app: api}}}}}}}}\n"
    ));
    let (result, seen) = run(DeserializeGuard(Ok(bh)), shop(), |s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", _) => not_found(),
        ("PATCH", p) if p.starts_with("/apis/apps/v1/namespaces/shop/deployments/api") => status(
            409,
            "Conflict",
            "Apply failed with 1 conflict: conflict with \"gitops\": .spec.template.spec.priorityClassName",
        ),
        _ => echo(s),
    })
    .await;
    assert_eq!(result.expect("a refusal is no error"), Action::requeue(Duration::from_secs(300)));
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        [
            "GET /apis/scheduling.k8s.io/v1/priorityclasses/bulkhead-place.a",
            "PATCH /apis/scheduling.k8s.io/v1/priorityclasses/bulkhead-place.a",
            "PATCH /apis/apps/v1/namespaces/shop/deployments/api",
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/place/status",
        ]
    );
    assert!(seen[2].path.contains("fieldManager=bulkhead-placement-place"), "{}", seen[2].path);
    assert!(!seen[2].path.contains("force=true"), "placement never forces: {}", seen[2].path);
    let conditions = seen[3].body["status"]["conditions"].as_array().expect("conditions");
    let placed = conditions.iter().find(|c| c["type"] == "Placed").expect("Placed");
    assert_eq!((placed["status"].as_str(), placed["reason"].as_str()), (Some("False"), Some("PlacementConflict")));
    assert!(placed["message"].as_str().unwrap_or_default().contains("gitops"));
}

#[tokio::test]
async fn an_undecodable_spec_is_reported_on_the_object_naming_the_field() {
    let invalid = InvalidObject {
        error: "invalid type: string \"ten\", expected u32".into(),
        metadata: kube::api::ObjectMeta { name: Some("broken".into()), generation: Some(2), ..Default::default() },
    };
    let raw = json!({
        "apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead",
        "metadata": {"name": "broken", "generation": 2},
        "spec": {"dimension": "Dependency", "pool": {"resource": "connections", "capacity": 10},
                 "classes": [{"name": "a", "reserved": "ten"}]}
    });
    let (result, seen) = run(DeserializeGuard(Err(invalid)), Snapshot::default(), move |s| match s.method.as_str() {
        "GET" => (200, raw.clone()),
        _ => echo(s),
    })
    .await;
    assert_eq!(result.expect("reported, not failed"), Action::await_change());
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        [
            "GET /apis/bulkhead.dev/v1alpha1/bulkheads/broken",
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/broken/status"
        ]
    );
    let ready = &seen[1].body["status"]["conditions"][0];
    assert_eq!((ready["type"].as_str(), ready["reason"].as_str()), (Some("Ready"), Some("InvalidSpec")));
    assert!(ready["message"].as_str().unwrap_or_default().starts_with("spec.classes[0].reserved:"), "{ready}");
}

/// An advice for `pooled()`: checkout starved at its ceiling, search idle.
fn starved_advice(rejected: u64) -> crate::usage::Advice {
    use crate::usage::{Advice, ClassUsage, Finding, FindingKind};
    let class = |name: &str, reserved: u32, peak: u32, at_ceiling: f64, rejected: u64| ClassUsage {
        name: name.into(),
        reserved,
        ceiling: reserved + 30,
        peak_in_flight: peak,
        p95_in_flight: peak,
        rejected: if rejected > 0 { [("ceiling".to_string(), rejected)].into() } else { Default::default() },
        time_at_ceiling: at_ceiling,
        borrowed_peak: peak.saturating_sub(reserved),
        recommended_reserved: reserved,
        recommended_ceiling: reserved + 30,
    };
    Advice {
        bulkhead: "pools".into(),
        window_seconds: 604_800,
        step_seconds: 605,
        replicas_seen: 2,
        capacity: 100,
        shared_surplus: 30,
        recommended_shared_surplus: 30,
        classes: vec![class("checkout", 40, 70, 0.4, rejected), class("search", 30, 3, 0.0, 0)],
        findings: vec![Finding {
            kind: FindingKind::StarvedAtCeiling,
            classes: vec!["checkout".into()],
            message: format!("checkout was rejected at its ceiling 70 {rejected} times, 40.0% of 7d"),
        }],
    }
}

/// Usage analysed by `analyst` every `period`.
fn analysed_by(
    period: Duration,
    analyst: impl Fn() -> futures::future::BoxFuture<'static, crate::status::Sizing> + Send + Sync + 'static,
) -> Kept {
    let metrics = Arc::new(Metrics::default());
    let usage = Arc::new(Usage::new(
        UsageOptions { analyst: Some(Arc::new(move |_, _| analyst())), period, window: Duration::from_secs(604_800) },
        metrics.clone(),
    ));
    let enforcement = Arc::new(Enforcement::new(EnforcementOptions::default(), metrics.clone()));
    Kept { usage, enforcement, audits: Arc::default(), metrics, generations: Vec::new() }
}

/// The cluster as the last reconcile left it, the status as `write` sent it.
fn at_rest(mut bh: Bulkhead, write: &Seen) -> Bulkhead {
    bh.status = Some(serde_json::from_value(write.body["status"].clone()).expect("a status"));
    bh.metadata.resource_version = Some("8".into());
    bh
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == type_)).expect("the condition")
}

/// The pool's ConfigMap in place, so that only the status can be written.
fn shop_applied() -> Snapshot {
    let mut snapshot = shop();
    let config_map = evaluate(&pooled(), &snapshot, &Config::default()).plan.config_map.expect("a pool config");
    snapshot.apply(&config_map);
    snapshot
}

#[tokio::test]
async fn without_prometheus_sized_is_unknown_no_telemetry() {
    let (result, seen) = run(DeserializeGuard(Ok(pooled())), shop_applied(), echo).await;
    assert_eq!(result.expect("reconcile"), Action::requeue(Duration::from_secs(300)));
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, ["PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools/status"]);
    let status = &seen[0].body["status"];
    for type_ in ["Sized", "IsolatedInUse"] {
        let c = condition(status, type_);
        assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("Unknown"), Some("NoTelemetry")), "{c}");
        assert!(c["message"].as_str().unwrap_or_default().contains("--prometheus-url"), "{c}");
    }
    assert!(status["classes"].as_array().expect("classes").iter().all(|c| c.get("usage").is_none()), "{status}");
}

#[tokio::test]
async fn a_starved_class_sets_sized_false_once_and_nothing_is_written_at_rest() {
    // An analyst that must not run: the test sets the result itself.
    let kept = analysed_by(Duration::from_secs(600), || panic!("no analysis is due"));
    let usage = kept.usage.clone();
    usage.set("pools", crate::status::Sizing::Advised(starved_advice(1200)));
    let metrics = Arc::new(Metrics::default());
    let run_once = |bh: Bulkhead| run_with(DeserializeGuard(Ok(bh)), shop_applied(), echo, metrics.clone(), &kept);

    let (result, seen) = run_once(pooled()).await;
    // Not due for another period: back at the resync.
    assert_eq!(result.expect("reconcile"), Action::requeue(Duration::from_secs(300)));
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, ["PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools/status"]);
    let status = &seen[0].body["status"];
    let sized = condition(status, "Sized");
    assert_eq!((sized["status"].as_str(), sized["reason"].as_str()), (Some("False"), Some("StarvedAtCeiling")));
    assert!(sized["message"].as_str().unwrap_or_default().contains("1200 times"), "{sized}");
    let checkout = &status["classes"][0];
    assert_eq!(checkout["name"], "checkout");
    assert_eq!(checkout["usage"]["rejectedAtCeiling"], json!(1200), "{checkout}");
    assert_eq!(checkout["usage"]["timeAtCeilingPermille"], json!(400), "{checkout}");

    // At rest: the same result, twice over (once as a new, equal analysis).
    let bh = at_rest(pooled(), &seen[0]);
    let (result, seen) = run_once(bh.clone()).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(seen.is_empty(), "no write at rest: {:?}", seen.iter().map(Seen::line).collect::<Vec<_>>());
    usage.set("pools", crate::status::Sizing::Advised(starved_advice(1200)));
    let (_, seen) = run_once(bh.clone()).await;
    assert!(seen.is_empty(), "an equal analysis writes nothing: {:?}", seen.iter().map(Seen::line).collect::<Vec<_>>());

    // A new figure is one write; the condition keeps its transition time.
    usage.set("pools", crate::status::Sizing::Advised(starved_advice(1500)));
    let (_, seen) = run_once(bh.clone()).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, ["PATCH /apis/bulkhead.dev/v1alpha1/bulkheads/pools/status"]);
    let before = condition(&seen[0].body["status"], "Sized")["lastTransitionTime"].clone();
    let kept = bh.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "Sized")).expect("Sized");
    assert_eq!(before, json!(kept.last_transition_time), "no flip, no new transition time");
    let text = metrics.encode();
    let writes = r#"bulkhead_writes_total{kind="Bulkhead",verb="status"} 2"#;
    assert!(text.lines().any(|l| l == writes), "{writes} missing in:\n{text}");
}

#[tokio::test]
async fn an_analysis_runs_off_the_reconcile_and_its_result_is_reported_next() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let kept = analysed_by(Duration::from_secs(600), move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { crate::status::Sizing::NoTelemetry("no proxy series of Bulkhead pools".into()) })
    });
    let metrics = Arc::new(Metrics::default());
    let finished = kept.usage.finished(Duration::ZERO);
    futures::pin_mut!(finished);
    let (result, seen) = run_with(DeserializeGuard(Ok(pooled())), shop_applied(), echo, metrics.clone(), &kept).await;
    assert_eq!(result.expect("reconcile"), Action::requeue(Duration::from_secs(300)));
    // Before the first result, no Sized is guessed.
    let status = &seen[0].body["status"];
    assert!(status["conditions"].as_array().expect("conditions").iter().all(|c| c["type"] != "Sized"), "{status}");
    tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut finished)).await.expect("finished");
    let bh = at_rest(pooled(), &seen[0]);
    let (_, seen) = run_with(DeserializeGuard(Ok(bh)), shop_applied(), echo, metrics, &kept).await;
    let sized = condition(&seen[0].body["status"], "Sized");
    assert_eq!((sized["status"].as_str(), sized["reason"].as_str()), (Some("Unknown"), Some("NoTelemetry")));
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1, "one analysis per period");
    let text = kept.metrics.encode();
    let counted = r#"bulkhead_usage_analyses_total{result="no_telemetry"} 1"#;
    assert!(text.lines().any(|l| l == counted), "{counted} missing in:\n{text}");
}

#[tokio::test]
async fn an_analysis_that_hangs_is_dropped_at_its_timeout() {
    let kept = analysed_by(Duration::from_millis(300), || Box::pin(futures::future::pending()));
    let usage = kept.usage.clone();
    let finished = usage.finished(Duration::ZERO);
    futures::pin_mut!(finished);
    let (result, _) =
        run_with(DeserializeGuard(Ok(pooled())), shop_applied(), echo, Arc::new(Metrics::default()), &kept).await;
    assert_eq!(result.expect("reconcile"), Action::requeue(Duration::from_millis(300)), "back when the next is due");
    tokio::time::timeout(Duration::from_secs(5), futures::StreamExt::next(&mut finished)).await.expect("finished");
    let sizing = usage.sizing("pools");
    assert!(matches!(&*sizing, crate::status::Sizing::Failed(why) if why.contains("longer than")), "{sizing:?}");
}

#[tokio::test]
async fn a_deleted_bulkhead_forgets_its_analysis() {
    let kept = analysed_by(Duration::from_secs(600), || panic!("no analysis is due"));
    kept.usage.set("pools", crate::status::Sizing::Advised(starved_advice(1)));
    let mut bh = pooled();
    bh.metadata.deletion_timestamp = Some(now());
    let (result, _) = run_with(DeserializeGuard(Ok(bh)), shop(), echo, Arc::new(Metrics::default()), &kept).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(*kept.usage.sizing("pools"), crate::status::Sizing::Pending, "nothing kept of it");
}

#[tokio::test]
async fn an_unreachable_prometheus_is_no_telemetry_and_a_refused_query_a_failed_analysis() {
    // A port nothing listens on: the real client, the real error.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port");
    let options =
        UsageOptions::prometheus(&format!("http://{closed}"), Duration::from_secs(600), Duration::from_secs(3600))
            .expect("a valid URL");
    let analyst = options.analyst.expect("an analyst");
    let sizing = tokio::time::timeout(Duration::from_secs(30), analyst(pooled(), Duration::from_secs(3600)))
        .await
        .expect("answers in time");
    let crate::status::Sizing::NoTelemetry(why) = &sizing else { panic!("{sizing:?}") };
    assert!(why.contains("unreachable"), "{why}");
    let sized = crate::status::sized_condition(&sizing);
    assert_eq!((sized.status, sized.reason.as_str()), (crate::status::ConditionStatus::Unknown, "NoTelemetry"));

    let refused = crate::prometheus::PrometheusError::Query {
        error_type: "bad_data".into(),
        error: "parse error".into(),
        query: "up{".into(),
    };
    assert!(matches!(crate::controller::memory::usage::sizing(Err(refused)), crate::status::Sizing::Failed(_)));
}

/// The controller's watch can lag the metadata watch (after an API server
/// restart, see `catch_up`): a reconcile of an older copy reads the Bulkhead
/// afresh and plans the spec the API server holds.
#[tokio::test]
async fn a_copy_older_than_the_metadata_watch_is_read_afresh() {
    let stale = pooled();
    let mut fresh = pooled();
    fresh.metadata.generation = Some(2);
    fresh.spec.pool.capacity = 120;
    let fresh_json = serde_json::to_value(&fresh).expect("a Bulkhead serialises");
    let kept = Kept {
        usage: Arc::new(Usage::new(UsageOptions::disabled(), Arc::default())),
        enforcement: Arc::new(Enforcement::new(EnforcementOptions::default(), Arc::default())),
        audits: Arc::default(),
        metrics: Arc::default(),
        generations: vec![("pools", 2)],
    };
    let (result, seen) = run_with(
        DeserializeGuard(Ok(stale)),
        shop(),
        |s| match s.method.as_str() {
            "GET" if s.path.starts_with("/apis/bulkhead.dev/v1alpha1/bulkheads/pools") => (200, fresh_json.clone()),
            "GET" => not_found(),
            _ => echo(s),
        },
        Arc::default(),
        &kept,
    )
    .await;
    result.expect("reconcile");
    assert_eq!(seen[0].line(), "GET /apis/bulkhead.dev/v1alpha1/bulkheads/pools");
    let config = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.path.contains("/configmaps/"))
        .expect("the pool config is applied");
    let pools: Value =
        serde_json::from_str(config.body["data"]["pools.json"].as_str().expect("pools.json")).expect("JSON");
    assert_eq!(pools["capacity"], 120, "the fresh spec is planned, not the stale one");
}

/// An operator with a sidecar image.
fn with_image() -> Config {
    let mut config = Config::default();
    config.plan.proxy_image = Some("bulkhead:test".into());
    config
}

/// `pooled` with the sidecar, and `shop` with two of its pods running it,
/// neither stamped yet.
fn proxied() -> (Bulkhead, Snapshot) {
    let mut bh = pooled();
    bh.spec.workload.as_mut().expect("workload").proxy =
        Some(serde_json::from_value(json!({"mode": "Ingress", "port": 8081, "upstreamPort": 8080})).expect("proxy"));
    let mut snapshot = shop();
    for (name, ip) in [("api-a", "10.0.0.1"), ("api-b", "10.0.0.2")] {
        snapshot.apply(
            &serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(json!({
                "metadata": {"name": name, "namespace": "shop", "labels": {"app": "api"}},
                "spec": {"nodeName": "n1", "containers": [{"name": "app"}, {"name": "bulkhead-proxy",
                          "ports": [{"name": "bulkhead-admin", "containerPort": 9901}]}],
                         "volumes": [{"name": "bulkhead-pools", "configMap": {"name": "bulkhead-pools"}}]},
                "status": {"phase": "Running", "podIP": ip},
            }))
            .expect("pod"),
        );
    }
    (bh, snapshot)
}

#[tokio::test]
async fn a_written_config_is_stamped_on_the_running_pods_after_it_and_a_pod_gone_is_no_error() {
    let (bh, snapshot) = proxied();
    let config = with_image();
    let hash = evaluate(&bh, &snapshot, &config).plan.proxy.config_hash.expect("a config is planned");
    let kept = Kept::fresh();
    let (result, seen) = run_configured(
        DeserializeGuard(Ok(bh)),
        snapshot,
        |s| match s.method.as_str() {
            "GET" => not_found(),
            // One pod went away since it was observed: nothing to stamp.
            "PATCH" if s.path.contains("/pods/api-b") => not_found(),
            _ => echo(s),
        },
        &kept,
        config,
    )
    .await;
    result.expect("a pod gone is no error");
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    let config_at = lines.iter().position(|l| l.contains("/configmaps/bulkhead-pools") && l.starts_with("PATCH"));
    let mut stamps: Vec<(usize, &Seen)> = seen.iter().enumerate().filter(|(_, s)| s.path.contains("/pods/")).collect();
    stamps.sort_by(|a, b| a.1.path.cmp(&b.1.path));
    let names: Vec<String> = stamps.iter().map(|(_, s)| s.line()).collect();
    assert_eq!(names, ["PATCH /api/v1/namespaces/shop/pods/api-a", "PATCH /api/v1/namespaces/shop/pods/api-b"]);
    assert!(stamps.iter().all(|(i, _)| Some(*i) > config_at), "the config first: {lines:?}");
    for (_, stamp) in &stamps {
        assert_eq!(stamp.body, json!({"metadata": {"annotations": {"bulkhead.dev/config-hash": hash}}}));
        assert!(stamp.path.contains("fieldManager=bulkhead"), "{}", stamp.path);
    }
}

#[tokio::test]
async fn a_refused_stamp_fails_the_reconcile_naming_the_pod() {
    let (bh, snapshot) = proxied();
    let config = with_image();
    let kept = Kept::fresh();
    let (result, seen) = run_configured(
        DeserializeGuard(Ok(bh)),
        snapshot,
        |s| match s.method.as_str() {
            "GET" => not_found(),
            "PATCH" if s.path.contains("/pods/") => status(403, "Forbidden", "pods is forbidden"),
            _ => echo(s),
        },
        &kept,
        config,
    )
    .await;
    let error = crate::error_chain::Chain(&result.expect_err("without the stamp the pods wait a minute")).to_string();
    assert!(error.starts_with("stamp Pod shop/api-"), "{error}");
    // The failure is reported on the Bulkhead, as every apply failure is.
    let status = seen.iter().rev().find(|s| s.path.contains("/status")).expect("a status write");
    let ready =
        status.body["status"]["conditions"].as_array().expect("conditions").iter().find(|c| c["type"] == "Ready");
    assert_eq!(ready.map(|c| c["reason"].clone()), Some(json!("ApplyFailed")));
}
