//! The drill's state machine against a mocked API server (tower-test): what
//! the watch decides for each drill it sees, the exact write that reports a
//! drill an operator restart interrupted, and a runner that refuses a drill
//! of the critical lane after one read of its Bulkhead.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use http::{Request, Response};
use kube::{client::Body, runtime::events::Reporter, Client};
use serde_json::{json, Value};
use tower_test::mock;

use super::manager::{decide, report, Decision};
use super::runner::{self, interrupted};
use crate::controller::{
    context::Context,
    memory::{
        enforcement::{Enforcement, EnforcementOptions},
        kept::Memory,
        usage::{Usage, UsageOptions},
    },
    reconcile::recorder::EventRecorder,
    watch::observe::SharedSnapshot,
};
use crate::crd::{BulkheadDrill, DrillLoad};

fn drill(name: &str, phase: Option<&str>) -> BulkheadDrill {
    let mut d = BulkheadDrill::new(
        name,
        crate::crd::BulkheadDrillSpec {
            bulkhead: "shop".into(),
            class: "payments".into(),
            hold: None,
            duration: None,
            baseline: None,
            load: DrillLoad {
                port: 8080,
                path: None,
                class_header: None,
                classes: Vec::new(),
                rate: None,
                saturate: None,
                timeout: None,
            },
        },
    );
    d.status = phase.map(|p| crate::crd::BulkheadDrillStatus { phase: Some(p.into()), ..Default::default() });
    d
}

#[test]
fn the_watch_starts_refuses_and_reports_interrupted_drills() {
    let none = HashMap::new();
    let ran = HashSet::new();
    assert_eq!(decide(&drill("d", None), &none, &ran), Decision::Start);
    assert_eq!(decide(&drill("d", Some("Pending")), &none, &ran), Decision::Start);
    for done in ["Complete", "Refused"] {
        assert_eq!(decide(&drill("d", Some(done)), &none, &ran), Decision::Nothing);
    }
    // An operator restarted mid-drill: nothing here runs it, and its measurements are gone.
    for mid in ["Baseline", "Holding", "Lifting"] {
        assert_eq!(decide(&drill("d", Some(mid)), &none, &ran), Decision::Interrupted, "{mid}");
    }
    let running = HashMap::from([("d".to_string(), "shop".to_string())]);
    assert_eq!(decide(&drill("d", Some("Holding")), &running, &ran), Decision::Nothing, "its own runner");
    assert_eq!(decide(&drill("e", None), &running, &ran), Decision::Busy("d".into()), "one drill per Bulkhead");
    let other = HashMap::from([("d".to_string(), "elsewhere".to_string())]);
    assert_eq!(decide(&drill("e", None), &other, &ran), Decision::Start);
    // A drill that ended here, seen again with its last phase but one: not interrupted.
    let ended = HashSet::from(["d".to_string()]);
    assert_eq!(decide(&drill("d", Some("Lifting")), &none, &ended), Decision::Nothing);
}

/// Serve `client`'s requests with `answer` until `work` ends; the requests seen.
async fn serve<F: std::future::Future<Output = ()>>(
    handle: &mut mock::Handle<Request<Body>, Response<Body>>,
    answer: impl Fn(&str, &str) -> (u16, Value),
    work: F,
) -> Vec<(String, String, Value)> {
    let mut seen = Vec::new();
    let requests = async {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let bytes = request.into_body().collect_bytes().await.expect("body");
            let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("json") };
            let (code, reply) = answer(&method, &path);
            seen.push((method, path, body));
            send.send_response(
                Response::builder().status(code).body(Body::from(reply.to_string().into_bytes())).expect("response"),
            );
        }
    };
    tokio::pin!(work);
    tokio::select! {
        () = &mut work => {}
        () = requests => {}
    }
    seen
}

#[tokio::test]
async fn a_drill_interrupted_by_a_restart_is_reported_aborted_in_one_status_patch() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let d = drill("game-day", Some("Holding"));
    let work = report(&client, "game-day", interrupted(&d));
    let seen = tokio::time::timeout(
        Duration::from_secs(5),
        serve(&mut handle, |_, _| (200, serde_json::to_value(drill("game-day", None)).expect("json")), work),
    )
    .await
    .expect("done");
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (method, path, body) = &seen[0];
    assert_eq!(
        (method.as_str(), path.as_str()),
        ("PATCH", "/apis/bulkhead.dev/v1alpha1/bulkheaddrills/game-day/status")
    );
    assert_eq!(body["status"]["phase"], "Complete");
    assert_eq!(body["status"]["verdict"], "Aborted");
    assert!(
        body["status"]["message"].as_str().is_some_and(|m| m.contains("restarted during the drill (phase Holding)")),
        "{body}"
    );
    assert_eq!(body["status"]["conditions"][0]["type"], "Complete");
    assert_eq!(body["status"]["conditions"][0]["reason"], "Aborted");
}

#[tokio::test]
async fn a_drill_of_the_critical_lane_is_refused_with_the_field_named_and_nothing_is_held() {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let mut snapshot = crate::snapshot::Snapshot::default();
    snapshot.apply(&k8s_openapi::api::core::v1::Namespace {
        metadata: kube::api::ObjectMeta { name: Some("shop".into()), ..Default::default() },
        ..Default::default()
    });
    let metrics = Arc::new(crate::controller::runtime::metrics::Metrics::default());
    let ctx = Arc::new(Context {
        client: client.clone(),
        events: EventRecorder::new(client, Reporter { controller: "bulkhead".into(), instance: None }),
        metrics: metrics.clone(),
        snapshot: SharedSnapshot::listed(snapshot),
        config: crate::evaluate::Config::default(),
        memory: Memory::new(
            Arc::new(Usage::new(UsageOptions::disabled(), metrics.clone())),
            Arc::new(Enforcement::new(EnforcementOptions::default(), metrics)),
        ),
        operator_name: None,
        drills: Arc::default(),
    });
    let bulkhead = json!({
        "apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead",
        "metadata": {"name": "shop", "generation": 1},
        "spec": {"dimension": "Dependency", "pool": {"resource": "requests", "capacity": 10},
                 "workload": {"namespace": "shop", "selector": {"matchLabels": {"app": "api"}},
                              "proxy": {"mode": "Ingress", "port": 8081, "upstreamPort": 8080}},
                 "classes": [{"name": "payments", "reserved": 4}, {"name": "control-plane", "reserved": 2, "critical": true}]},
    });
    let mut d = drill("lane", None);
    d.spec.class = "control-plane".into();
    let work = runner::run(ctx.clone(), Arc::new(d));
    let answer = |method: &str, _path: &str| match method {
        "GET" => (200, bulkhead.clone()),
        _ => (200, serde_json::to_value(drill("lane", None)).expect("json")),
    };
    let seen = tokio::time::timeout(Duration::from_secs(5), serve(&mut handle, answer, work)).await.expect("done");
    let lines: Vec<String> = seen.iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    assert_eq!(
        lines,
        vec![
            "GET /apis/bulkhead.dev/v1alpha1/bulkheads/shop",
            "PATCH /apis/bulkhead.dev/v1alpha1/bulkheaddrills/lane/status"
        ]
    );
    let status = &seen[1].2["status"];
    assert_eq!(status["phase"], "Refused");
    assert!(
        status["message"].as_str().is_some_and(|m| m.starts_with("spec.class: control-plane is a critical class")),
        "{status}"
    );
    assert_eq!(ctx.drills.fault("shop"), None, "nothing was placed");
}
