//! The `Sized` condition end to end: a real control plane, the operator run
//! with `--prometheus-url` under the chart's RBAC, a real Prometheus scraping
//! two real `bulkhead proxy` replicas on loopback. An uneven load (checkout
//! held at its ceiling and rejected there, search idle) turns `Sized` False
//! `StarvedAtCeiling` with the numbers and fills `status.classes[].usage`;
//! the status is written at most once a period meanwhile. Then Prometheus
//! goes away: `Sized` turns Unknown `NoTelemetry`, and while nothing changes
//! the operator writes nothing more.

use std::time::{Duration, Instant};

use bulkhead::crd::Bulkhead;
use bulkhead_testkit::{
    audit::{now_rfc3339, writes_by},
    condition,
    operator::{Operator, USER},
    prometheus::Prometheus,
    proxy::{http1, request, ConfigDir, Proxy, Upstream},
    unique_suffix, wait_for, ControlPlane,
};
use kube::Api;

/// How often the operator analyses; the window it reads.
const PERIOD: &str = "3s";
const PERIOD_SECONDS: u64 = 3;
const WINDOW: &str = "1m";

/// capacity 10 = floors 2 + 2 + 2 + surplus 4; ceilings 5, 4, 2 (per replica).
fn spec(name: &str) -> String {
    format!(
        "apiVersion: bulkhead.dev/v1alpha1\nkind: Bulkhead\nmetadata: {{name: {name}}}\nspec:\n  dimension: Dependency\n  \
         pool: {{resource: requests, capacity: 10, sharedSurplus: 4}}\n  classes:\n  \
         - {{name: checkout, reserved: 2, ceiling: 5}}\n  - {{name: search, reserved: 2, ceiling: 4}}\n  \
         - {{name: control-plane, reserved: 2, ceiling: 2, critical: true}}\n"
    )
}

/// The same pool as the operator would write it for the proxies.
fn pools_json(name: &str) -> String {
    bulkhead_testkit::proxy::pools(5).replace(r#""bulkhead":"shop""#, &format!(r#""bulkhead":"{name}""#))
}

/// Holds `held` checkout requests open on `proxy` (its ceiling) and sends
/// `extra` more, which it rejects at the ceiling; returns the rejections.
async fn saturate(proxy: &Proxy, held: usize, extra: usize) -> usize {
    let client = http1();
    for _ in 0..held {
        let client = client.clone();
        let url = proxy.url("/hold");
        tokio::spawn(async move {
            if let Ok(res) = client.request(request(&url, Some("checkout"))).await {
                // Read the body to its end: the slot is held until then.
                let _ = http_body_util::BodyExt::collect(res.into_body()).await;
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.in_flight("checkout").await < held as f64 {
        assert!(Instant::now() < deadline, "checkout never held {held}:\n{}", proxy.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut rejected = 0;
    for _ in 0..extra {
        let res = client.request(request(&proxy.url("/quick"), Some("checkout"))).await.expect("an answer");
        rejected += usize::from(res.status() == 503);
    }
    rejected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sized_goes_false_under_an_uneven_load_and_unknown_without_prometheus() {
    let cp = ControlPlane::get();
    let client = cp.client().await;
    let name = format!("sized-{}", unique_suffix());

    // Two replicas of the proxy in front of one upstream, scraped every second.
    let upstream = Upstream::start().await;
    let config = ConfigDir::new(&pools_json(&name));
    let args = ["--upstream", &upstream.url(), "--classify", "header:x-class", "--workers", "1"];
    let replicas = [Proxy::start(config.path(), &args).await, Proxy::start(config.path(), &args).await];
    let prometheus = Prometheus::start(&[replicas[0].admin, replicas[1].admin]).await;
    prometheus
        .wait_for_series(&format!(r#"bulkhead_proxy_capacity{{bulkhead="{name}"}}"#), 2, Duration::from_secs(20))
        .await;

    let operator = Operator::start(
        "sized-test",
        &["--prometheus-url", &prometheus.url(), "--usage-period", PERIOD, "--usage-window", WINDOW],
    );
    cp.apply_yaml(&spec(&name));

    // Uneven: checkout at its ceiling on both replicas and rejected there;
    // search sends one request now and then.
    let started = Instant::now();
    let mut rejected = 0;
    for proxy in &replicas {
        rejected += saturate(proxy, 5, 20).await;
    }
    assert_eq!(rejected, 40, "every request past the ceiling is rejected");
    let search = http1().request(request(&replicas[0].url("/quick"), Some("search"))).await.expect("search");
    assert_eq!(search.status(), 200);

    let writes_from = now_rfc3339();
    let (status, reason, message) = wait_for("Sized False", Duration::from_secs(90), || async {
        condition(&client, &name, "Sized").await.filter(|(s, _, _)| s == "False")
    })
    .await;
    let took = started.elapsed();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "StarvedAtCeiling"), "{message}");
    assert!(message.contains("checkout") && message.contains("ceiling of 5"), "{message}");
    let bulkhead = Api::<Bulkhead>::all(client.clone()).get(&name).await.expect("the Bulkhead");
    let classes = bulkhead.status.expect("a status").classes;
    let checkout = classes.iter().find(|c| c.name == "checkout").and_then(|c| c.usage.clone()).expect("usage");
    assert_eq!(checkout.peak_in_flight, 5, "{checkout:?}");
    assert!(checkout.rejected_at_ceiling >= 20, "{checkout:?}");
    assert!(checkout.time_at_ceiling_permille > 0, "{checkout:?}");
    assert!(checkout.recommended_reserved > 2 || checkout.recommended_ceiling > 5, "checkout is raised: {checkout:?}");
    let search = classes.iter().find(|c| c.name == "search").and_then(|c| c.usage.clone()).expect("usage");
    assert!(search.recommended_reserved <= 2, "search is not raised: {search:?}");
    eprintln!("Sized False StarvedAtCeiling {took:?} after the load began: {message}");

    // Under the load's aftermath the figures move, but the status is written
    // at most once a period.
    upstream.release();
    let observed = Duration::from_secs(4 * PERIOD_SECONDS);
    tokio::time::sleep(observed).await;
    let writes: Vec<_> = writes_by(&cp.dir, USER, &writes_from)
        .into_iter()
        .filter(|w| w.uri.contains(&format!("/bulkheads/{name}/status")))
        .collect();
    let bound = (took + observed).as_secs() / PERIOD_SECONDS + 2;
    assert!(
        writes.len() as u64 <= bound,
        "{} status writes, more than one a period ({bound}): {writes:?}",
        writes.len()
    );

    // Prometheus goes away: no telemetry, nothing guessed.
    drop(prometheus);
    let (_, _, why) = wait_for("Sized Unknown NoTelemetry", Duration::from_secs(30), || async {
        condition(&client, &name, "Sized").await.filter(|(s, r, _)| s == "Unknown" && r == "NoTelemetry")
    })
    .await;
    assert!(why.contains("unreachable"), "{why}");
    let bulkhead = Api::<Bulkhead>::all(client.clone()).get(&name).await.expect("the Bulkhead");
    let status = bulkhead.status.expect("a status");
    assert!(status.classes.iter().all(|c| c.usage.is_none()), "no figures without telemetry: {:?}", status.classes);
    let leak = status.conditions.iter().find(|c| c.type_ == "IsolatedInUse").expect("IsolatedInUse");
    assert_eq!((leak.status.as_str(), leak.reason.as_str()), ("Unknown", "NoTelemetry"));

    // At rest: the analysis runs every period and says the same; nothing is written.
    tokio::time::sleep(Duration::from_secs(PERIOD_SECONDS)).await;
    let since = now_rfc3339();
    tokio::time::sleep(Duration::from_secs(4 * PERIOD_SECONDS)).await;
    let writes: Vec<_> = writes_by(&cp.dir, USER, &since).into_iter().filter(|w| !w.uri.contains("/events")).collect();
    assert!(writes.is_empty(), "writes at rest: {writes:?}\n{}", operator.log_text());
    assert!(operator.is_running());

    cp.kubectl(&["delete", "bulkhead", &name, "--wait=true"]);
}
