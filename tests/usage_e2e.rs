//! The usage advice against a real Prometheus scraping real `bulkhead proxy`
//! processes on loopback (no Kubernetes): an uneven load makes `advise`
//! raise the starved class and lower the idle one within capacity; a slow
//! upstream worker pool shared by two classes is an isolation leak, and
//! separate pools are none. Each run is bounded: windows of tens of seconds.

#[allow(dead_code)] // shared with other tests
#[path = "support/prometheus.rs"]
mod prometheus_support;
#[allow(dead_code)] // shared with the proxy tests
#[path = "proxy/support.rs"]
mod proxy_support;

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use bulkhead::{
    crd::Bulkhead,
    plan::plan_capacity,
    prometheus::{advise_with, AdviseOptions, PrometheusError},
    usage::{apply_advice, Advice, FindingKind},
};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, Request, Response};
use hyper_util::rt::TokioIo;
use prometheus_support::Prometheus;
use proxy_support::{free_port, http1, request, ConfigDir, Proxy};
use tokio::sync::Semaphore;

/// One step of the analysis: three scrapes of one second.
const STEP: Duration = Duration::from_secs(3);

/// How the upstream's workers are shared between the classes.
#[derive(Clone, Copy)]
enum Workers {
    /// One pool of N workers for every class (one FIFO queue).
    Shared(usize),
    /// N workers per class.
    PerClass(usize),
}

/// An upstream whose every request takes `service` on one of its workers,
/// queueing (FIFO) when they are all busy: a thread pool behind the proxy.
/// `coupling`: an injected leak, added to every request of another class
/// while a request of class `hot` is being served.
async fn slow_upstream(workers: Workers, service: Duration, coupling: Option<Duration>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    let pools: Arc<Mutex<HashMap<String, Arc<Semaphore>>>> = Arc::default();
    let hot_serving = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let pools = Arc::clone(&pools);
            let hot_serving = Arc::clone(&hot_serving);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let hot = req.headers().get("x-class").is_some_and(|v| v == "hot");
                    let hot_serving = Arc::clone(&hot_serving);
                    let (key, n) = match workers {
                        Workers::Shared(n) => (String::new(), n),
                        Workers::PerClass(n) => {
                            let class = req.headers().get("x-class").and_then(|v| v.to_str().ok()).unwrap_or("");
                            (class.to_owned(), n)
                        }
                    };
                    let pool = Arc::clone(
                        pools
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(key)
                            .or_insert_with(|| Arc::new(Semaphore::new(n))),
                    );
                    async move {
                        let _worker = pool.acquire_owned().await.expect("open semaphore");
                        if hot {
                            hot_serving.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(service).await;
                            hot_serving.fetch_sub(1, Ordering::SeqCst);
                        } else {
                            let leak = coupling.filter(|_| hot_serving.load(Ordering::SeqCst) > 0);
                            tokio::time::sleep(service + leak.unwrap_or_default()).await;
                        }
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

/// `concurrency` clients sending `class` requests back to back until `until`;
/// a rejected one waits 10 ms before the next (a client's backoff, and the
/// machine's CPU kept for the measured requests).
fn load(
    proxy: &Proxy,
    class: &'static str,
    concurrency: usize,
    until: Instant,
) -> Vec<tokio::task::JoinHandle<(u64, u64)>> {
    let url = proxy.url("/work");
    (0..concurrency)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let client = http1();
                let (mut ok, mut rejected) = (0, 0);
                while Instant::now() < until {
                    match tokio::time::timeout(Duration::from_secs(10), client.request(request(&url, Some(class))))
                        .await
                    {
                        Ok(Ok(res)) if res.status() == 200 => {
                            let _ = http_body_util::BodyExt::collect(res.into_body()).await;
                            ok += 1;
                        }
                        _ => {
                            rejected += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
                (ok, rejected)
            })
        })
        .collect()
}

async fn finish(tasks: Vec<tokio::task::JoinHandle<(u64, u64)>>) -> (u64, u64) {
    let mut total = (0, 0);
    for t in tasks {
        let (ok, rejected) = t.await.expect("load task");
        total = (total.0 + ok, total.1 + rejected);
    }
    total
}

fn bulkhead(name: &str, capacity: u32, classes: serde_json::Value) -> Bulkhead {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bulkhead.dev/v1alpha1", "kind": "Bulkhead", "metadata": {"name": name},
        "spec": {"dimension": "Tenant", "pool": {"resource": "requests", "capacity": capacity, "scope": "Instance"}, "classes": classes},
    }))
    .expect("a Bulkhead")
}

/// pools.json as the planner writes it for an Instance-scoped Bulkhead.
fn pools_json(b: &Bulkhead) -> String {
    let (plan, errors) = plan_capacity(&b.spec, None);
    assert!(errors.is_empty() && plan.funding.is_funded(), "{errors:?} {:?}", plan.funding);
    let classes: Vec<serde_json::Value> = plan
        .classes
        .iter()
        .map(|c| serde_json::json!({"name": c.name, "reserved": c.reserved_per_replica, "ceiling": c.ceiling_per_replica, "critical": c.critical}))
        .collect();
    serde_json::json!({
        "version": 1, "bulkhead": b.metadata.name, "resource": "requests", "scope": "Instance", "dividedBy": 1,
        "capacity": plan.per_replica_capacity, "sharedSurplus": plan.per_replica_shared, "onCeiling": "reject", "classes": classes,
    })
    .to_string()
}

/// A proxy enforcing `b` in front of `upstream`, its metrics on their own port.
async fn proxy_for(b: &Bulkhead, upstream: SocketAddr) -> (Proxy, ConfigDir, SocketAddr) {
    let config = ConfigDir::new(&pools_json(b));
    let metrics = free_port();
    let upstream = format!("http://{upstream}");
    let metrics_arg = metrics.to_string();
    let args = ["--upstream", &upstream, "--classify", "header:x-class", "--workers", "1", "--metrics", &metrics_arg];
    let proxy = Proxy::start(config.path(), &args).await;
    (proxy, config, metrics)
}

async fn advise(prom: &Prometheus, b: &Bulkhead, window: Duration) -> Advice {
    let options = AdviseOptions { step: Some(STEP), ..AdviseOptions::default() };
    advise_with(&prom.client(), b, window, &options).await.unwrap_or_else(|e| panic!("advise: {e}\n{}", prom.log()))
}

/// Wait until Prometheus holds a scrape of the Bulkhead's proxy.
async fn scraped(prom: &Prometheus, name: &str) {
    prom.wait_for_series(&format!("bulkhead_proxy_capacity{{bulkhead=\"{name}\"}}"), 1, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uneven_load_raises_the_starved_class_and_lowers_the_idle_one_within_capacity() {
    // Capacity 10: hot 2 (ceiling 3), idle 6 (ceiling 7), ops 1 (critical); surplus 1.
    let b = bulkhead(
        "uneven",
        10,
        serde_json::json!([
            {"name": "hot", "reserved": 2, "ceiling": 3},
            {"name": "idle", "reserved": 6, "ceiling": 7},
            {"name": "ops", "reserved": 1, "critical": true},
        ]),
    );
    let upstream = slow_upstream(Workers::PerClass(16), Duration::from_millis(50), None).await;
    let (proxy, _config, metrics) = proxy_for(&b, upstream).await;
    let prom = Prometheus::start(&[metrics]).await;
    scraped(&prom, "uneven").await;

    let started = Instant::now();
    let until = started + Duration::from_secs(21);
    let hot = load(&proxy, "hot", 6, until);
    let idle = load(&proxy, "idle", 1, until);
    let (hot, idle) = (finish(hot).await, finish(idle).await);
    assert!(hot.1 > 0 && idle.1 == 0, "hot is rejected at its ceiling, idle never: {hot:?} {idle:?}");
    tokio::time::sleep(Duration::from_secs(2)).await; // the last scrape
    let advice = advise(&prom, &b, started.elapsed()).await;
    println!("{}", serde_json::to_string_pretty(&advice).expect("json"));

    let class = |n: &str| advice.classes.iter().find(|c| c.name == n).expect(n);
    assert_eq!(advice.replicas_seen, 1);
    assert_eq!((class("hot").peak_in_flight, class("hot").p95_in_flight), (3, 3), "hot sat at its ceiling of 3");
    assert!(class("hot").time_at_ceiling > 0.5, "{}", class("hot").time_at_ceiling);
    assert!(class("hot").rejected.get("ceiling").copied().unwrap_or(0) > 0);
    assert!(class("idle").p95_in_flight <= 1);
    assert!(class("hot").recommended_reserved > 2, "the starved class is raised");
    assert!(class("idle").recommended_reserved < 6, "the idle one is lowered");
    assert!(class("ops").recommended_reserved >= 1, "a critical class keeps at least 1");
    let total: u32 = advice.classes.iter().map(|c| c.recommended_reserved).sum();
    assert!(total + advice.recommended_shared_surplus == 10, "within capacity, surplus re-derived");
    assert!(plan_capacity(&apply_advice(&b.spec, &advice), None).0.funding.is_funded());
    let kinds: Vec<FindingKind> = advice.findings.iter().map(|f| f.kind).collect();
    assert!(
        kinds.contains(&FindingKind::StarvedAtCeiling) && kinds.contains(&FindingKind::ReservationIdle),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&FindingKind::IsolationLeak), "per-class workers: no leak: {:?}", advice.findings);

    // The CLI reads the same: a table and the patch, exit 1 (findings); JSON with -o json.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("uneven.yaml");
    std::fs::write(&file, serde_json::to_string(&b).expect("json")).expect("write");
    let window = format!("{}s", started.elapsed().as_secs());
    let cli = |format: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bulkhead"))
            .args(["advise", "-f", &file.display().to_string(), "--prometheus", &prom.url(), "--window", &window])
            .args(["--step", "3s", "-o", format])
            .output()
            .expect("bulkhead advise runs")
    };
    let text = cli("text");
    let out = String::from_utf8_lossy(&text.stdout);
    println!("{out}{}", String::from_utf8_lossy(&text.stderr));
    assert_eq!(text.status.code(), Some(1), "findings exit 1");
    assert!(
        out.contains("StarvedAtCeiling: hot") && out.contains("kubectl patch bulkhead uneven --type=json"),
        "{out}"
    );
    let json = cli("json");
    assert_eq!(json.status.code(), Some(1));
    let parsed: Advice = serde_json::from_slice(&json.stdout).expect("-o json is an Advice");
    assert_eq!(parsed.classes.len(), 3);

    // A Bulkhead no proxy reports: no telemetry (the Sized condition's Unknown), never a guess.
    let absent = bulkhead("absent", 10, serde_json::json!([{"name": "hot", "reserved": 2}]));
    let options = AdviseOptions { step: Some(STEP), ..AdviseOptions::default() };
    match advise_with(&prom.client(), &absent, Duration::from_secs(20), &options).await {
        Err(e @ PrometheusError::NoSeries { .. }) => assert!(e.is_no_telemetry(), "{e}"),
        other => panic!("expected NoSeries, got {other:?}"),
    }
}

/// Two classes through one proxy: `other` steadily, `hot` flooding past its
/// ceiling for the second half. Returns the advice over both halves.
async fn saturate_one_class(name: &str, workers: Workers, coupling: Option<Duration>) -> Advice {
    // Capacity 10: hot 2 (ceiling 6), other 2 (ceiling 4), surplus 6.
    let b = bulkhead(
        name,
        10,
        serde_json::json!([{"name": "hot", "reserved": 2, "ceiling": 6}, {"name": "other", "reserved": 2, "ceiling": 4}]),
    );
    let upstream = slow_upstream(workers, Duration::from_millis(20), coupling).await;
    let (proxy, _config, metrics) = proxy_for(&b, upstream).await;
    let prom = Prometheus::start(&[metrics]).await;
    scraped(&prom, name).await;
    let started = Instant::now();
    let phase = Duration::from_secs(18);
    let other = load(&proxy, "other", 1, started + 2 * phase);
    tokio::time::sleep(phase).await;
    let hot = load(&proxy, "hot", 10, started + 2 * phase);
    let (hot, other) = (finish(hot).await, finish(other).await);
    println!("{name}: hot {hot:?}, other {other:?} (ok, rejected)");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let advice = advise(&prom, &b, started.elapsed()).await;
    for f in &advice.findings {
        println!("{name}: {}: {}", f.kind.as_str(), f.message);
    }
    let hot_usage = advice.classes.iter().find(|c| c.name == "hot").expect("hot");
    assert!(hot_usage.time_at_ceiling > 0.3, "hot sat at its ceiling half the time: {hot_usage:?}");
    advice
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pool_shared_below_the_proxy_is_an_isolation_leak() {
    let advice = saturate_one_class("leak", Workers::Shared(2), None).await;
    let leaks: Vec<_> = advice.findings.iter().filter(|f| f.kind == FindingKind::IsolationLeak).collect();
    assert_eq!(leaks.len(), 1, "{:?}", advice.findings);
    assert_eq!(leaks[0].classes, ["hot", "other"], "the saturated class first, then the affected one");
    assert!(leaks[0].message.contains("baseline") && leaks[0].message.contains("windows"), "{}", leaks[0].message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_worker_pools_are_no_leak() {
    let advice = saturate_one_class("noleak", Workers::PerClass(2), None).await;
    assert!(advice.findings.iter().all(|f| f.kind != FindingKind::IsolationLeak), "{:?}", advice.findings);
}

/// Leak-detection sensitivity: separate worker pools with a leak injected
/// (while `hot` is being served, every `other` request takes DELTA ms more;
/// its baseline is ~20 ms), then runs with nothing injected. By default one
/// coupling well past the threshold (x1.5 and +5 ms) must be found and one
/// clean run must find none (about 80 s); the sweep behind the figures in
/// docs/benchmarks.md is `LEAK_DELTAS_MS=4,8,12,16,24 LEAK_CLEAN_RUNS=3`,
/// where couplings under 24 ms are measured, not asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leak_sensitivity() {
    const FOUND_FROM_MS: u64 = 24;
    let deltas: Vec<u64> = std::env::var("LEAK_DELTAS_MS")
        .unwrap_or_else(|_| FOUND_FROM_MS.to_string())
        .split(',')
        .map(|d| d.trim().parse().expect("milliseconds"))
        .collect();
    let clean_runs: usize = std::env::var("LEAK_CLEAN_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
    let mut lines = Vec::new();
    for delta in deltas {
        let advice =
            saturate_one_class(&format!("coupled{delta}"), Workers::PerClass(2), Some(Duration::from_millis(delta)))
                .await;
        let leak = advice.findings.iter().find(|f| f.kind == FindingKind::IsolationLeak);
        if delta >= FOUND_FROM_MS {
            let leak = leak.unwrap_or_else(|| panic!("+{delta} ms not found: {:?}", advice.findings));
            assert_eq!(leak.classes, ["hot", "other"], "{}", leak.message);
        }
        lines
            .push(format!("injected +{delta} ms: {}", leak.map_or("no leak found".to_string(), |f| f.message.clone())));
    }
    let mut false_positives = 0;
    for run in 0..clean_runs {
        let advice = saturate_one_class(&format!("clean{run}"), Workers::PerClass(2), None).await;
        false_positives += advice.findings.iter().filter(|f| f.kind == FindingKind::IsolationLeak).count();
    }
    lines.push(format!("nothing injected: {false_positives} IsolationLeak finding(s) in {clean_runs} runs"));
    for l in &lines {
        println!("sensitivity: {l}");
    }
    assert_eq!(false_positives, 0, "{lines:#?}");
}
